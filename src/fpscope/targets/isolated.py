"""Targets run in a child Python process started with its own environment variables.

Kernels are chosen by environment variables read when a library loads (``OPENBLAS_CORETYPE``
picks OpenBLAS's Haswell or Sandybridge kernels, ``MKL_CBWR``, ``XLA_FLAGS``,
``OMP_NUM_THREADS``), so comparing two kernels in one command needs the operation in another
process while the revealing algorithms stay in this one. This module owns the parent side of
that arrangement: :class:`ChildTarget` validates the environment, starts
``python -m fpscope.targets._child`` (:mod:`._child` owns the child side and the wire format:
length-prefixed JSON and ``.npy`` frames over the child's stdin/stdout, no pickle), mirrors the
child target's attributes, forwards the probe interface with one round trip per call, turns
every failure of the child into a one-line :class:`~fpscope.targets.base.TargetError`, and makes
sure no child outlives its target (``close()``, garbage collection, interpreter exit).
"""

from __future__ import annotations

import codecs
import copy
import inspect
import os
import re
import signal
import subprocess
import sys
import threading
import weakref
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from ..formats import Format, get_format
from ._child import MAGIC, ProtocolEOF, receive, send
from .base import Target, TargetError

#: a line of a traceback that names the exception
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b")

#: seconds a closing child may take before it is terminated (then killed)
CLOSE_TIMEOUT = 5.0


def check_env(env) -> dict[str, str | None]:
    """``env`` as a plain dict of variable name -> value (None: remove the variable).

    Raises:
        TargetError: not a mapping, a name that is not a non-empty string without "=" or NUL, or
            a value that is neither a string (without NUL) nor None.
    """
    if not isinstance(env, Mapping):
        raise TargetError(f"env must be a mapping of variable names to strings, got {env!r}")
    out: dict[str, str | None] = {}
    for key, value in env.items():
        if not isinstance(key, str) or not key or "=" in key or "\0" in key:
            raise TargetError(
                f"env: a variable name must be a non-empty string without '=', got {key!r}"
            )
        if value is not None and (not isinstance(value, str) or "\0" in value):
            raise TargetError(
                f"env: the value of {key} must be a string (or None to remove it), got {value!r}"
            )
        out[key] = value
    return out


def _condition_names() -> tuple[str, ...]:
    from . import make_target

    params = inspect.signature(make_target).parameters
    return tuple(p for p in params if p not in ("name", "env"))


def _jsonable(option: str, value):
    """A make_target condition as JSON (formats and dtypes by name, tuples as lists)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Format):
        return value.name
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.dtype):
        return value.name
    if isinstance(value, (tuple, list)):
        return [_jsonable(option, v) for v in value]
    raise TargetError(f"{option}={value!r} cannot be sent to a child process")


def _format(fields: dict) -> Format:
    """The Format the child described: the registered one of that name where it is the same."""
    fmt = Format(**fields)
    try:
        known = get_format(fmt.name)
    except ValueError:
        return fmt
    return known if known == fmt else fmt


def _child_environment(env: dict[str, str | None]) -> dict[str, str]:
    """os.environ updated by env, and the folder fpscope was imported from on PYTHONPATH."""
    out = dict(os.environ)
    for key, value in env.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    # the child imports the fpscope this process runs, wherever it came from (not where a
    # site-packages folder would then shadow the standard library)
    root = str(Path(__file__).resolve().parents[2])
    if Path(root).name not in ("site-packages", "dist-packages"):
        parts = [p for p in out.get("PYTHONPATH", "").split(os.pathsep) if p]
        if root not in parts:
            out["PYTHONPATH"] = os.pathsep.join([*parts, root])
    return out


class _Child:
    """The child process and its pipes; knows nothing of the ChildTarget that owns it (so that a
    weakref finalizer can end it)."""

    def __init__(self, label: str, env: dict[str, str]):
        self.label = label
        self.broken: str | None = None
        self.last_stderr = ""
        self._lock = threading.Lock()  # one round trip at a time
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "fpscope.targets._child"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                env=env, close_fds=True,
            )
        except OSError as exc:
            raise TargetError(f"cannot start a child process for {label}: {exc}") from None
        _widen_pipes(self.proc)
        self._pump = threading.Thread(target=self._copy_stderr, daemon=True,
                                      name=f"fpscope child stderr {self.proc.pid}")
        self._pump.start()

    # -- stderr: passed through to ours, its last line kept for error messages ----------------
    def _copy_stderr(self) -> None:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        tail = ""
        stream = self.proc.stderr
        while True:
            try:
                data = stream.read1(65536)
            except (OSError, ValueError):
                break
            if not data:
                try:
                    stream.close()
                except (OSError, ValueError):
                    pass
                break
            text = decoder.decode(data)
            _write_stderr(text)
            tail = (tail + text)[-4096:]
            lines = [ln.strip() for ln in tail.splitlines() if ln.strip()]
            # the last line naming an exception ("ModuleNotFoundError: ..."), else the last line
            errors = [ln for ln in lines if _EXCEPTION_LINE.match(ln)]
            if errors or lines:
                self.last_stderr = (errors or lines)[-1]

    # -- messages -------------------------------------------------------------------------------
    def wait_ready(self) -> None:
        """Read up to the child's MAGIC; anything before it goes to stderr."""
        seen = bytearray()
        try:
            while not seen.endswith(MAGIC):
                byte = self.proc.stdout.read(1)
                if not byte:
                    raise ProtocolEOF("no start-up marker")
                seen += byte
                if len(seen) > (1 << 20):
                    self.fail(f"the child process running {self.label} printed no start-up "
                              "marker on its stdout")
        except ProtocolEOF:
            self.died()
        except BaseException:
            self.abandon("its start-up was interrupted")
            raise
        if len(seen) > len(MAGIC):
            _write_stderr(bytes(seen[: -len(MAGIC)]).decode(errors="replace"))

    def request(self, header: dict, arrays=()) -> tuple[dict, list[np.ndarray]]:
        """One round trip. Raises TargetError when the child is gone or unusable."""
        if self.broken is not None:
            raise TargetError(self.broken)
        try:
            with self._lock:
                send(self.proc.stdin, header, arrays)
                return receive(self.proc.stdout)
        except (BrokenPipeError, ConnectionError, ProtocolEOF):
            self.died()
        except ValueError as exc:  # a malformed reply: the stream cannot be trusted any more
            self.fail(f"the child process running {self.label} sent a malformed reply ({exc})")
        except BaseException:  # interrupted mid-message: the stream is out of step
            self.abandon("a request to it was interrupted")
            raise

    # -- ends -------------------------------------------------------------------------------------
    def died(self):
        """The child ended unasked: reap it, then raise TargetError with its exit status."""
        rc = self._end(timeout=CLOSE_TIMEOUT)
        self._pump.join(timeout=1.0)
        msg = f"the child process running {self.label} exited with status {rc}"
        if rc is not None and rc < 0:
            try:
                msg += f" ({signal.Signals(-rc).name})"
            except ValueError:
                pass
        if self.last_stderr:
            msg += f"; last line of its stderr: {self.last_stderr}"
        self.broken = msg
        raise TargetError(msg)

    def fail(self, msg: str):
        self.abandon(msg)
        raise TargetError(self.broken)

    def abandon(self, why: str) -> None:
        """Kill the child; later requests raise TargetError."""
        self._end(timeout=0)
        if self.broken is None:
            self.broken = why if why.startswith("the child") else (
                f"the child process running {self.label} was stopped: {why}")

    def _end(self, timeout: float) -> int | None:
        """Close our end of the pipes' input, wait up to ``timeout`` s, then terminate and kill."""
        proc = self.proc
        try:
            proc.stdin.close()
        except (OSError, ValueError):
            pass
        for stop in (None, proc.terminate, proc.kill):
            if stop is not None:
                try:
                    stop()
                except OSError:
                    pass
            try:
                return proc.wait(timeout=timeout if stop is None else 2.0)
            except subprocess.TimeoutExpired:
                continue
        return proc.poll()

    def shutdown(self) -> tuple[str | None, int | None]:
        """End the child: ask it to close its target, wait, terminate if it lingers. Returns
        (the child's error on closing its target or None, its final call count or None).
        Idempotent; never raises."""
        error, calls = None, None
        proc = self.proc
        if self.broken is None and proc.poll() is None:
            try:
                send(proc.stdin, {"op": "close"})
            except (OSError, ValueError):
                pass
            self._end(timeout=CLOSE_TIMEOUT)
            try:
                reply, _ = receive(proc.stdout)
                error, calls = reply.get("error"), reply.get("calls")
            except (OSError, ValueError, ProtocolEOF):
                pass
        else:
            self._end(timeout=0)
        try:
            proc.stdout.close()
        except (OSError, ValueError):
            pass
        # stderr is the pump's to close: it ends at the pipe's end (a grandchild that keeps the
        # pipe open keeps only that daemon thread waiting, never this call)
        self._pump.join(timeout=1.0)
        if self.broken is None:
            self.broken = f"{self.label} is closed (its child process has ended)"
        return error, calls


def _widen_pipes(proc) -> None:
    """Ask Linux for 1 MiB pipe buffers (fewer switches between the processes per array);
    elsewhere, or where refused, the default buffers serve."""
    try:
        import fcntl

        for stream in (proc.stdin, proc.stdout):
            fcntl.fcntl(stream.fileno(), 1031, 1 << 20)  # F_SETPIPE_SZ
    except (ImportError, OSError, ValueError):
        pass


def _write_stderr(text: str) -> None:
    try:
        sys.stderr.write(text)
        sys.stderr.flush()
    except Exception:  # a closed or replaced stderr: the text is lost, never the child
        pass


def _shutdown(child: _Child):
    return child.shutdown()


class ChildTarget(Target):
    """The target ``name`` built and run in a child Python process with environment ``env``.

    The child is ``python -m fpscope.targets._child`` started with ``os.environ`` updated by
    ``env``; it builds the target with ``fpscope.targets.make_target(name, **conditions)``. This
    object mirrors that target (``name``, ``n``, ``in_format``, ``out_format``, ``is_matrix``,
    ``has_products``, ``max_rows``, ``max_cols``, ``shape`` and the entries of its ``spec()``
    such as ``M``, ``K``, ``N``, ``layout``, ``threads``) and forwards ``evaluate``,
    ``evaluate_each``, ``evaluate_outer`` and ``evaluate_products``: one round trip per call,
    arrays as raw float64 ``.npy`` bytes, outputs exactly as the child's target returned them.
    ``input_buffer`` and ``as_storage`` are local (Target's defaults).

    Args:
        name: a target name as :func:`fpscope.targets.make_target` takes it.
        env: variables to set in the child (name -> value; a value of None removes the
            variable), e.g. ``{"OPENBLAS_CORETYPE": "Haswell"}``.
        **conditions: make_target's keyword conditions (n, shape, dtype, layout, offset,
            threads, axis, index, device); JSON-able values (formats and dtypes go by name).

    Attributes:
        env: the env dict as given (validated).
        pid: the child's process id.
        returncode: None while the child runs, then its exit status.
        calls: the child target's call count, as the child reports it with every reply.
        blas: the BLAS libraries the child loaded and their kernels (threadpoolctl's
            ``internal_api``, ``architecture``); :meth:`checks` compares them with
            OPENBLAS_CORETYPE.

    Raises:
        TargetError: bad ``env`` or an unknown condition (before anything starts); the child
            could not start or build the target (the child's one-line message: TargetError
            messages as they are, other exceptions prefixed with their type name); the child
            died ("the child process running NAME exited with status N", with the last line of
            its stderr when there was one). The probe calls raise the same way.

    Use it in a ``with`` block or call ``close()``: that closes the child's target and ends the
    child (terminated if it has not exited within ``CLOSE_TIMEOUT`` = 5 s). A ChildTarget that
    is garbage-collected, or still open at interpreter exit, ends its child too.
    """

    def __init__(self, name: str, env, **conditions):
        self.name = str(name)
        self.env = check_env(env)
        known = _condition_names()
        for key in conditions:
            if key not in known:
                raise TargetError(f"{name}: unknown condition {key!r}; known: {', '.join(known)}")
        wire = {k: _jsonable(k, v) for k, v in conditions.items()}
        self._child = _Child(self.name, _child_environment(self.env))
        self._finalizer = weakref.finalize(self, _shutdown, self._child)
        self.pid = self._child.proc.pid
        try:
            self._child.wait_ready()
            reply = self._request({"op": "make", "name": self.name, "conditions": wire})
        except BaseException:
            self._finalizer()
            raise
        d = reply["describe"]
        super().__init__(d["n"], _format(d["in_format"]), _format(d["out_format"]))
        self.calls = int(reply.get("calls", 0))
        self.name = d["name"]
        self._child.label = self.name
        self.is_matrix = bool(d["is_matrix"])
        self.has_products = bool(d["has_products"])
        self.max_rows, self.max_cols = int(d["max_rows"]), int(d["max_cols"])
        self.shape = None if d["shape"] is None else tuple(d["shape"])
        self.blas = list(d.get("blas") or [])
        self._spec = d["spec"]
        for key, value in self._spec.items():
            if key.isidentifier() and key not in ("dtype", "out_dtype", "env") \
                    and not hasattr(self, key):
                setattr(self, key, value)

    def checks(self) -> dict:
        """{"env_applied": "ok" or "no: ..."} when ``env`` sets OPENBLAS_CORETYPE: whether the
        child's OpenBLAS runs those kernels (threadpoolctl's ``architecture``; OpenBLAS falls
        back to its own choice, silently, for a name it does not know or a CPU that lacks the
        instructions). {} otherwise, or where the child loaded no OpenBLAS."""
        want = self.env.get("OPENBLAS_CORETYPE")
        runs = [b.get("architecture") for b in self.blas if b.get("internal_api") == "openblas"]
        if not want or not runs or any(r is None for r in runs):
            return {}
        if all(str(r).lower() == want.lower() for r in runs):
            return {"env_applied": "ok"}
        return {"env_applied": f"no: OPENBLAS_CORETYPE={want} did not take: the child's "
                               f"OpenBLAS runs its {', '.join(sorted(set(map(str, runs))))} "
                               f"kernels"}

    # -- the probe interface, forwarded ----------------------------------------------------------
    def evaluate(self, X) -> np.ndarray:
        """The child target's ``evaluate(X)``: X (B, n) float64 representable in ``in_format``;
        returns (B,) float64. One round trip."""
        return self._forward("evaluate", X)

    def evaluate_each(self, X) -> np.ndarray:
        """The child target's ``evaluate_each(X)`` (one call of the op per row, in the child)."""
        return self._forward("evaluate_each", X)

    def evaluate_outer(self, P, Q) -> np.ndarray:
        """The child target's ``evaluate_outer(P, Q)``: (R, n) and (n, C) -> (R, C) float64."""
        if not self.is_matrix:
            raise TargetError(f"{self.name} is not a matrix operation")
        return self._forward("evaluate_outer", P, Q)

    def evaluate_products(self, A, B) -> np.ndarray:
        """The child target's ``evaluate_products(A, B)``: (batch, n) each -> (batch,) float64."""
        if not self.has_products:
            raise TargetError(f"{self.name} takes no factor pairs (it adds its inputs as they are)")
        return self._forward("evaluate_products", A, B)

    def spec(self) -> dict:
        """The child target's ``spec()`` plus ``"env"``: the env dict as given."""
        if self._child.broken is None:
            self._spec = self._request({"op": "spec"})["spec"]
        return {**copy.deepcopy(self._spec), "env": dict(self.env)}

    # -- process ----------------------------------------------------------------------------------
    @property
    def returncode(self) -> int | None:
        """None while the child runs, then its exit status (negative: killed by that signal)."""
        return self._child.proc.poll()

    def close(self) -> None:
        """Close the child's target and end the child; idempotent.

        Raises:
            TargetError: the child's target failed to close (the child has ended anyway).
        """
        if not self._finalizer.alive:
            return
        error, calls = self._finalizer()
        if calls is not None:
            self.calls = int(calls)
        if error:
            raise TargetError(error)

    def __repr__(self) -> str:
        state = "running" if self.returncode is None else f"ended ({self.returncode})"
        return f"<ChildTarget {self.name!r} env={self.env!r} pid={self.pid} {state}>"

    # -- helpers ----------------------------------------------------------------------------------
    def _request(self, header: dict, arrays=()) -> dict:
        reply, out = self._child.request(header, arrays)
        if "calls" in reply:
            self.calls = int(reply["calls"])
        if "error" in reply:
            raise TargetError(str(reply["error"]))
        reply["_arrays"] = out
        return reply

    def _forward(self, op: str, *arrays) -> np.ndarray:
        data = []
        for a in arrays:
            try:
                data.append(np.ascontiguousarray(a, dtype=np.float64))
            except (TypeError, ValueError) as exc:
                raise TargetError(f"{self.name}: probe inputs must be real numbers ({exc})") from None
        out = self._request({"op": op}, data)["_arrays"]
        if len(out) != 1:
            self._child.fail(f"the child process running {self.name} sent {len(out)} arrays "
                             f"for {op}, not 1")
        return out[0]
