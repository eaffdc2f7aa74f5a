"""``fpscope profiles``, ``emulate``, ``probe``, ``fit``, ``diff`` and ``gate``: parse, call the
library, print.
"""

from __future__ import annotations

import json
import sys

from rich.markup import escape

from .cli import UsageError, _check_new_files, _console, _parse_env


def cmd_profiles(args) -> int:
    from .profile import PRESETS

    if args.format == "json":
        sys.stdout.write(json.dumps({k: json.loads(p.to_json()) for k, p in PRESETS.items()},
                                    indent=2) + "\n")
        return 0
    from rich import box
    from rich.table import Table

    table = Table(title="matrix-unit presets", box=box.SIMPLE_HEAD, pad_edge=False,
                  padding=(0, 1), collapse_padding=True)
    # names are never cut or folded (they are what --profile takes); evidence wraps instead
    table.add_column("name", no_wrap=True, min_width=max(len(n) for n in PRESETS))
    # inputs may wrap after a comma (block scales) so that the columns fit in 120
    table.add_column("inputs", min_width=21)
    # conversion: how fp32 operands reach tf32 / bf16 / fp16 inputs (Profile.operand_conversion;
    # "-": operands must be values of the input format; emulate --operand-conversion overrides)
    for col in ("output", "products", "F", "step", "conversion", "status"):
        table.add_column(col, no_wrap=True)
    table.add_column("evidence (hw-vectors)", min_width=26)
    for p in PRESETS.values():
        steps = p.k // p.block_size
        shape = f"{p.block_size}" + (f" x {steps}" if steps > 1 else "")
        inputs = p.in_format if p.b_format is None else f"{p.in_format} x {p.b_format}"
        if p.scale_format is not None:
            inputs += f", {p.scale_format}/{p.scale_block_size}"
        F = ("exact" if p.lossless else "-" if p.node == "pairwise"  # pairwise: no window
             else f"{p.frac_bits}/{p.frac_bits2}" if p.node == "two-stage" else str(p.frac_bits))
        table.add_row(p.name, inputs, p.out_format, shape, F,
                      " ".join(p.step_rounding), p.operand_conversion or "-", p.status,
                      escape(p.evidence.removeprefix("hw-vectors ").replace(": ", " ") or "-"))
    _console().print(table)
    return 0


def _load_profile(text: str):
    from .profile import load_profile

    try:
        return load_profile(text)  # a preset name or a profile JSON file
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _check_npy(path: str, what: str) -> None:
    """Refuse a file that is not a .npy file before numpy guesses "pickled data" for it."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(6)
    except IsADirectoryError:
        raise UsageError(f"cannot read {what} from {path}: it is a folder, not a .npy file") from None
    except OSError as exc:
        raise UsageError(f"cannot read {what} from {path}: {exc.strerror or exc}") from None
    if head == b"\x93NUMPY":
        return
    if head.startswith(b"PK"):
        raise UsageError(f"{what}: {path} is an .npz archive; give one array as a .npy file "
                         f"(numpy.save)")
    kind = "an empty file" if not head else "not a .npy file (no NumPy header; a text file?)"
    raise UsageError(f"{what}: {path} is {kind}; write the array with numpy.save")


def _load_matrix(path: str, what: str):
    import numpy as np

    _check_npy(path, what)
    try:
        arr = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise UsageError(f"cannot read {what} from {path}: {str(exc).splitlines()[0]}") from None
    if arr.ndim < 2:  # more dimensions: a batch of matrices, broadcast as numpy.matmul does
        raise UsageError(f"{what} must be a matrix (2-D, or more dimensions for a batch), "
                         f"{path} holds shape {arr.shape}")
    if arr.dtype.kind != "f":
        raise UsageError(f"{what} must hold float16, float32 or float64 values (bf16 and fp8 values "
                         f"as float32), {path} holds {arr.dtype}")
    if arr.dtype == np.float32:  # kept: tf32 profiles read fp32 words (a float64 copy would
        return arr               # quiet a signalling NaN, Profile.operand_conversion)
    return arr.astype(np.float64)  # widening is exact


def _rows_progress(quiet: bool, rows: int | None = None):
    """A rich progress bar over D's ``rows`` rows on stderr (a terminal only), started at once
    so that its clock runs while numba compiles the kernel on a profile's first use (tens of
    seconds, then cached; :func:`_compile_notice` says so above the bar); (callback for
    ``emulate.matmul(progress=)``, finish)."""
    if quiet or not sys.stderr.isatty():
        return None, lambda: None
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
    from rich.progress import TimeElapsedColumn, TimeRemainingColumn

    prog = Progress(TextColumn("emulating rows of D"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), TimeRemainingColumn(), console=Console(stderr=True),
                    transient=True)
    task = prog.add_task("emulate", total=rows)
    prog.start()

    def cb(done, total):
        prog.update(task, completed=done, total=total)

    return cb, prog.stop


def _dask_client(address: str):
    """(a ``dask.distributed.Client`` for ``emulate --dask ADDRESS``, a function closing it and
    any cluster started here). ADDRESS "local": a LocalCluster of one single-threaded worker
    process per core.

    Raises:
        UsageError: dask is missing, or no scheduler answers at ADDRESS (within 30 s).
    """
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise UsageError("--dask needs dask.distributed: pip install 'fpscope[dask]'") from None
    cluster = None
    try:
        if address == "local":
            cluster = LocalCluster(threads_per_worker=1, processes=True, dashboard_address=":0")
            client = Client(cluster)
        else:
            client = Client(address, timeout=30)
    except (OSError, TimeoutError) as exc:
        if cluster is not None:
            cluster.close()
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UsageError(f"--dask {address}: no Dask scheduler answered: {why}") from None

    def close():
        client.close()
        if cluster is not None:
            cluster.close()

    return client, close


def cmd_emulate(args) -> int:
    from pathlib import Path

    import numpy as np

    from .emulate import matmul

    out = Path(args.output)
    _check_new_files(args.force, out)
    if args.threads is not None and args.threads < 1:
        raise UsageError(f"--threads must be at least 1, got {args.threads}")
    profile = _load_profile(args.profile)
    A = _load_matrix(args.a, "A")
    B = _load_matrix(args.b, "B")
    C = _load_matrix(args.c, "C") if args.c else None
    scaled = profile.scale_format is not None
    if scaled and not (args.scale_a and args.scale_b):
        raise UsageError(f"{profile.name} is block-scaled ({profile.scale_format} per "
                         f"{profile.scale_block_size} elements of K): give --scale-a and "
                         f"--scale-b")
    if not scaled and (args.scale_a or args.scale_b):
        raise UsageError(f"{profile.name} has no block scales: drop --scale-a / --scale-b")
    SA = _load_matrix(args.scale_a, "scale_a") if scaled else None
    SB = _load_matrix(args.scale_b, "scale_b") if scaled else None
    if args.bands is not None and not args.dask:
        raise UsageError("--bands needs --dask")
    if args.bands is not None and args.bands < 1:
        raise UsageError(f"--bands must be at least 1, got {args.bands}")
    client, close = _dask_client(args.dask) if args.dask else (None, lambda: None)
    cb, finish = _rows_progress(args.quiet, int(np.prod(A.shape[:-1])))
    try:
        D = matmul(A, B, C, profile=profile, pad=args.pad, engine=args.engine,
                   threads=args.threads, alpha=args.alpha, out_format=args.out_format,
                   scale_a=SA, scale_b=SB, progress=cb,
                   operand_conversion=args.operand_conversion, client=client,
                   bands=args.bands)
    except RuntimeError as exc:  # a band failed on the cluster after its retries
        raise UsageError(str(exc).splitlines()[0]) from None
    except ValueError as exc:
        msg = str(exc).splitlines()[0].replace("pass pad=True", "pass --pad").replace(
            " see matmul's docstring", " see --help").replace(
            "operand_conversion 'RNA', 'RNE' or 'truncate' converts",
            "--operand-conversion RNA, RNE or truncate converts")
        raise UsageError(msg) from None
    finally:
        finish()
        close()
    out_name = args.out_format or profile.out_format
    # D is in the output format's dtype with the device's NaN bits (emulate.outputs); .npy
    # cannot hold bf16 or fp8: those are widened to float32, exactly (payloads kept)
    Dout = D if D.dtype in (np.float32, np.float16) else D.astype(np.float32)
    with open(out, "wb") as fh:
        np.save(fh, Dout)
    if profile.status != "validated":
        print(f"fpscope: note: profile {profile.name} is experimental (not validated on hardware)",
              file=sys.stderr)
    print(f"D ({' x '.join(map(str, D.shape))}, {out_name}) written to {out}", file=sys.stderr)
    return 0


def cmd_probe(args) -> int:

    from .probes.blackbox import make_matrix_target
    from .probes.driver import probe

    if args.cases < 0:
        raise UsageError(f"--cases must be 0 or more, got {args.cases}")
    if args.k is not None and args.k < 1:
        raise UsageError(f"--k must be at least 1, got {args.k}")
    _check_new_files(args.force, args.output, args.record)
    from .environment import capture_environment as capture
    from .profile import resolve_format
    from .record import probe_record, write_record

    for what, name in (("--in-format", args.in_format), ("--b-format", args.b_format),
                       ("--out-format", args.out_format)):
        if name is not None:
            try:
                resolve_format(name)
            except ValueError as exc:
                raise UsageError(f"{what}: {exc}") from None
    if args.library is not None and args.library < 2:
        raise UsageError(f"--library K must be at least 2, got {args.library}")
    if args.chain is not None and args.library is None:
        raise UsageError("--chain needs --library (the chains' arithmetic is only used there)")
    chain = _load_profile(args.chain) if args.chain is not None else None
    if args.scale_block_size is not None and args.scale_block_size < 1:
        raise UsageError(f"--scale-block-size must be at least 1, got {args.scale_block_size}")
    target = make_matrix_target(args.target, args.in_format, args.out_format, k=args.k,
                                b_format=args.b_format, scale_block_size=args.scale_block_size,
                                scale_format=args.scale_format)
    rep = probe(target, args.in_format, args.out_format, k=args.k, cases=args.cases,
                seed=args.seed, library_k=args.library, chain=chain, b_format=args.b_format)
    env = capture() if (args.record or args.format == "html") else None
    if args.format == "json":
        sys.stdout.write(json.dumps(rep.to_dict(), indent=2) + "\n")
    elif args.format == "html":
        from .report_probe import probe_page

        sys.stdout.write(probe_page(rep.to_dict(), env))
    else:
        sys.stdout.write(rep.to_text())
    if args.output:
        if rep.profile is None:
            print(f"fpscope: no profile to write to {args.output}: the op does not fit a "
                  f"fused-block model", file=sys.stderr)
        else:
            write_record(rep.profile.to_dict(), args.output, overwrite=args.force)
            print(f"profile written to {args.output}", file=sys.stderr)
    if args.record:
        write_record(probe_record(rep.to_dict(), args.target, env), args.record,
                     overwrite=args.force)
        print(f"record written to {args.record}", file=sys.stderr)
    return 0 if rep.fits else 1


def cmd_fit(args) -> int:
    from pathlib import Path

    from .fit import FitError, fit, load_recording

    out = Path(args.output) if args.output else None
    _check_new_files(args.force, args.output, args.record)
    try:
        rec = load_recording(args.recording, args.out)
    except FitError as exc:
        raise UsageError(str(exc)) from None
    res = fit(rec, use_presets=not args.no_presets)
    if args.format == "json":
        sys.stdout.write(json.dumps(res.to_dict(), indent=2) + "\n")
    else:
        ins = rec.in_format if rec.b_format is None else f"{rec.in_format} x {rec.b_format}"
        print(f"{rec.source}: {len(rec.a)} samples of {rec.K} products, {ins} -> "
              f"{rec.out_format}")
        print(res.to_text())
    if out is not None:
        from .record import write_record

        write_record(res.profile.replace(evidence=f"fpscope fit: {res.matched}/{res.total} of "
                                                  f"{rec.source}").to_dict(), out,
                     overwrite=args.force)
        print(f"profile written to {out}", file=sys.stderr)
    if args.record:
        from .environment import capture_environment as capture
        from .record import new_record, write_record

        d = res.to_dict()
        write_record(new_record("fit", target={"name": "recording", "source": rec.source,
                                               "samples": len(rec.a), "K": rec.K,
                                               "in_format": rec.in_format,
                                               "b_format": rec.b_format,
                                               "out_format": rec.out_format},
                                profile=d.pop("profile"), fit=d, environment=capture()),
                     args.record, overwrite=args.force)
        print(f"record written to {args.record}", file=sys.stderr)
    return 0 if res.exact else 1


def cmd_diff(args) -> int:
    from .diff import DiffError, diff

    if args.cases < 1:
        raise UsageError(f"--cases must be at least 1, got {args.cases}")
    try:
        res = diff(args.a, args.b, cases=args.cases, seed=args.seed)
    except DiffError as exc:
        raise UsageError(str(exc)) from None
    _print_result(res, args.format)
    return 0 if res.same else 1


def cmd_gate(args) -> int:
    from .gate import GateError, gate

    try:
        res = gate(args.baseline, target=args.target, policy=args.policy, units=args.units,
                   env=_parse_env(args.env),
                   samples=args.samples, record=args.record, force=args.force)
    except GateError as exc:
        raise UsageError(str(exc)) from None
    _print_result(res, args.format)
    return 0 if res.passed else 1


def _print_result(res, fmt: str) -> None:
    """A result with to_dict() / to_text() as JSON (any nesting depth) or as text."""
    if fmt == "json":
        from .record import json_text

        sys.stdout.write(json_text(res.to_dict(), indent=2) + "\n")
    else:
        print(res.to_text())
