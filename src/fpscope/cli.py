"""The ``fpscope`` command: ``main`` and the helpers its verbs share.

The parser lives in :mod:`fpscope.cli_parser`; the verbs in :mod:`fpscope.cli_reveal` (reveal,
verify), :mod:`fpscope.cli_emulate` (profiles, emulate, probe, fit, diff, gate) and
:mod:`fpscope.cli_matrix` (matrix, fleet, targets). They parse and print; the work is the
library's.

Exit codes (fpscope DESIGN.md): 0 success, 1 a check failed (nondeterminism, not a tree,
replay mismatch), 2 bad usage or input (one line on stderr, never a traceback).
"""

from __future__ import annotations

import math
import sys


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit code 2."""


def _check_new_files(force: bool, *paths) -> None:
    """:func:`fpscope.record.check_new_file` for each given path (None: an option not given)."""
    from .record import check_new_file

    for path in paths:
        if path:
            check_new_file(path, force)


def _parse_shape(text: str | None):
    if text is None:
        return None
    try:
        dims = tuple(int(p) for p in text.lower().replace(",", "x").split("x"))
    except ValueError:
        raise UsageError(f"--shape {text!r}: expected integers separated by 'x', e.g. 64x512x64") from None
    if not dims or any(d < 1 for d in dims):
        raise UsageError(f"--shape {text!r}: dimensions must be positive integers")
    return dims


# ----------------------------------------------------------------------------------------------


def _make_target(args):
    from .targets import make_target

    shape = _parse_shape(args.shape)
    n = args.n
    if n is not None and n < 1:
        raise UsageError(f"--n must be at least 1, got {n}")
    if n is None and shape is None:
        from .api import default_n

        n = default_n(args.target)
    extra = {k: getattr(args, k) for k in ("world_size", "backend")
             if getattr(args, k, None) is not None}
    if extra.get("world_size", 2) < 2:
        raise UsageError(f"--world-size must be 2 or more, got {extra['world_size']}")
    if _is_collective(args.target) and not getattr(args, "quiet", True) and sys.stderr.isatty():
        print(f"starting {extra.get('world_size', 4)} ranks of {args.target} ...",
              file=sys.stderr)
    return make_target(args.target, n=n, shape=shape, dtype=args.dtype, layout=args.layout,
                       offset=args.offset, threads=args.threads, axis=args.axis, index=args.index,
                       env=_parse_env(getattr(args, "env", None)),
                       batched=True if getattr(args, "batched", False) else None,
                       output=_parse_position(getattr(args, "position", None)), **extra)


def _is_collective(name: str) -> bool:
    return isinstance(name, str) and name.startswith(("torch.distributed.", "dist.", "mpi4py.",
                                                      "MPI."))


def _parse_position(text):
    """``"I,J"`` -> (I, J); ``"E"`` -> E; None stays None."""
    if text is None:
        return None
    try:
        parts = [int(p) for p in text.split(",")]
    except ValueError:
        raise UsageError(f"--position {text!r}: expected I,J or E (integers)") from None
    if len(parts) not in (1, 2) or min(parts) < 0:
        raise UsageError(f"--position {text!r}: expected I,J or E (non-negative integers)")
    return parts[0] if len(parts) == 1 else tuple(parts)


def _parse_env(items) -> dict | None:
    """``["NAME=VALUE", ...]`` -> dict (None when no --env was given)."""
    if not items:
        return None
    out = {}
    for item in items:
        name, eq, value = item.partition("=")
        if not eq or not name or not name.replace("_", "").isalnum() or name[0].isdigit():
            raise UsageError(f"--env {item!r}: expected NAME=VALUE with NAME a variable name")
        out[name] = value
    return out


def _progress(quiet: bool, n: int):
    """A rich progress bar on stderr (a terminal only), shown one second after this call
    whether or not a probe has been answered by then: before the first answer a large reveal
    checks the op and builds its first probe rows (seconds at n = 10^7), which the bar says;
    the reveal then reports every op call (``Prober.heartbeat``). (callback, finish)."""
    if quiet or not sys.stderr.isatty():
        return None, lambda: None
    import threading

    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    est = max(n, int(n * math.log2(max(n, 2)) / 2))
    lock = threading.Lock()
    state = {"prog": None, "task": None, "done": 0, "over": False}

    def describe(done):
        return "revealing" if done else f"preparing the probes (n = {n:,}: checks, probe rows)"

    def show():
        with lock:
            if state["over"] or state["prog"] is not None:
                return
            prog = Progress(TextColumn("{task.description}"), BarColumn(),
                            TextColumn("{task.completed} probes"), TimeElapsedColumn(),
                            console=Console(stderr=True), transient=True)
            state["task"] = prog.add_task(describe(state["done"]), total=est,
                                          completed=min(state["done"], est))
            prog.start()
            state["prog"] = prog

    timer = threading.Timer(1.0, show)
    timer.daemon = True
    timer.start()

    def cb(done, _n):
        with lock:
            state["done"] = max(done, state["done"])
            if state["prog"] is not None:
                state["prog"].update(state["task"], completed=min(state["done"], est),
                                     description=describe(state["done"]))

    def finish():
        timer.cancel()
        with lock:
            state["over"] = True
            if state["prog"] is not None:
                state["prog"].stop()

    return cb, finish


def _emit(text: str, args) -> None:
    if args.output:
        from pathlib import Path

        _check_new_files(args.force, args.output)
        Path(args.output).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)


def _console():
    """stdout console; 120 columns when piped (rich would cut at 80)."""
    from rich.console import Console

    return Console() if sys.stdout.isatty() else Console(width=120)


def main(argv=None) -> int:
    from .cli_emulate import cmd_diff, cmd_emulate, cmd_fit, cmd_gate, cmd_probe, cmd_profiles
    from .cli_matrix import cmd_fleet, cmd_matrix, cmd_targets
    from .cli_parser import build_parser
    from .cli_reveal import cmd_reveal, cmd_verify

    parser = build_parser()
    args = parser.parse_args(argv)
    if args.verb is None:
        parser.print_help()
        return 2
    handlers = {"reveal": cmd_reveal, "verify": cmd_verify, "targets": cmd_targets,
                "profiles": cmd_profiles, "emulate": cmd_emulate, "probe": cmd_probe,
                "diff": cmd_diff, "fit": cmd_fit, "gate": cmd_gate,
                "matrix": cmd_matrix, "fleet": cmd_fleet}
    from ._numba_setup import set_compile_notice

    old_notice = set_compile_notice(None if getattr(args, "quiet", False) else _compile_notice)
    try:
        return handlers[args.verb](args)
    except BrokenPipeError:  # e.g. piped into head: not an error of the op
        sys.stderr.close()
        return 0
    except (UsageError, ValueError, RuntimeError) as exc:
        reveal_error = _loaded("fpscope.reveal.prober", "RevealError")
        if reveal_error is not None and isinstance(exc, reveal_error):
            if exc.kind in ("units", "nan"):  # n too large, or NaN for finite probes: bad input
                print(f"fpscope: {exc}", file=sys.stderr)
                return 2
            print(f"fpscope: check failed ({exc.kind}): {exc}", file=sys.stderr)
            return 1
        if not isinstance(exc, (UsageError, ValueError, *_user_errors())):
            raise
        # bad input: ours (TargetError, MaskError, RecordError, TreeError, RenderError,
        # ProbeError) or a ValueError, e.g. an unknown format name from formats.get_format
        print(f"fpscope: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("fpscope: interrupted", file=sys.stderr)
        return 130
    finally:
        set_compile_notice(old_notice)


#: the error types that mean bad input (exit 2), by module: a command that never imported a
#: module cannot have raised its error, so none is imported just to be caught
_USER_ERRORS = (("fpscope.targets.base", "TargetError"), ("fpscope.probes.blackbox", "ProbeError"),
                ("fpscope.render", "RenderError"))


def _loaded(module: str, name: str):
    mod = sys.modules.get(module)
    return None if mod is None else getattr(mod, name, None)


def _user_errors() -> tuple:
    return tuple(t for t in (_loaded(m, n) for m, n in _USER_ERRORS) if t is not None)


def _compile_notice() -> None:
    """Said once when numba compiles an emulator kernel its cache does not hold (tens of
    seconds on a machine's first run; ``fpscope._numba_setup.set_compile_notice``)."""
    print("fpscope: compiling the emulator kernel (first run, ~30 s; cached afterwards)...",
          file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
