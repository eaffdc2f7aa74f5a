"""One rank of a collective started by fpscope: ``python -m fpscope.collectives.rank``.

The parent (:class:`fpscope.collectives.world.World`) listens on 127.0.0.1; every rank connects
to it (``multiprocessing.connection`` with the session's random key, from the environment
variable ``FPSCOPE_COLLECTIVE_KEY``), says who it is, then serves requests until told to stop.
A request is a JSON header (``{"op": "all_reduce", "dtype": "fp32"}``) followed by this rank's
input buffer as raw bytes in the storage dtype; the answer is a JSON header (``{"ok": true}``
or ``{"ok": false, "error": "..."}``) followed by the rank's output buffer. No pickle crosses.

Backends: ``gloo`` and ``nccl`` through ``torch.distributed`` (rank and world size from the
command line, rendezvous at ``--init tcp://127.0.0.1:PORT``), ``mpi`` through mpi4py (rank and
size from ``MPI.COMM_WORLD``; started by ``mpiexec``). The reduction is always SUM.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback

import numpy as np

OPS = ("all_reduce", "reduce", "reduce_scatter")


def _storage(dtype: str):
    if dtype == "bf16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype({"fp64": np.float64, "fp32": np.float32, "fp16": np.float16}[dtype])


class _Torch:
    """torch.distributed with gloo or nccl."""

    def __init__(self, backend: str, rank: int, size: int, init: str):
        import torch
        import torch.distributed as dist

        self.torch, self.dist, self.rank, self.size = torch, dist, rank, size
        self.device = None
        if backend == "nccl":
            n = torch.cuda.device_count()
            if n == 0:
                raise RuntimeError("backend nccl needs CUDA GPUs; torch sees none")
            self.device = torch.device("cuda", rank % n)
            torch.cuda.set_device(self.device)
        dist.init_process_group(backend, init_method=init, rank=rank, world_size=size)
        self.dtypes = {"fp64": torch.float64, "fp32": torch.float32, "fp16": torch.float16,
                       "bf16": torch.bfloat16}
        self.info = {"library": "torch.distributed", "version": torch.__version__,
                     "backend": dist.get_backend()}
        if backend == "nccl":
            try:
                self.info["nccl_version"] = ".".join(str(v) for v in torch.cuda.nccl.version())
            except Exception:  # noqa: BLE001 - a version we cannot read is left out
                pass

    def run(self, op: str, x: np.ndarray, dtype: str) -> np.ndarray:
        torch, dist = self.torch, self.dist
        t = torch.frombuffer(bytearray(x.tobytes()), dtype=self.dtypes[dtype])
        if self.device is not None:
            t = t.to(self.device)
        if op == "all_reduce":
            dist.all_reduce(t, op=dist.ReduceOp.SUM)
            out = t
        elif op == "reduce":
            dist.reduce(t, dst=0, op=dist.ReduceOp.SUM)
            out = t
        else:
            out = torch.empty(len(t) // self.size, dtype=t.dtype, device=t.device)
            dist.reduce_scatter(out, list(t.chunk(self.size)), op=dist.ReduceOp.SUM)
        if self.device is not None:
            torch.cuda.synchronize(self.device)
            out = out.cpu()
        return np.frombuffer(out.contiguous().view(torch.uint8).numpy().tobytes(), dtype=x.dtype)

    def close(self) -> None:
        try:
            self.dist.destroy_process_group()
        except Exception:  # noqa: BLE001 - leaving anyway
            pass


class _MPI:
    """mpi4py on MPI.COMM_WORLD."""

    def __init__(self):
        import mpi4py
        from mpi4py import MPI

        self.MPI, self.comm = MPI, MPI.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.info = {"library": "mpi4py", "version": mpi4py.__version__,
                     "mpi_library": MPI.Get_library_version().split(",")[0].strip(),
                     "mpi_standard": "%d.%d" % MPI.Get_version()}

    def run(self, op: str, x: np.ndarray, dtype: str) -> np.ndarray:
        MPI = self.MPI
        if op == "all_reduce":
            out = np.empty_like(x)
            self.comm.Allreduce(x, out, op=MPI.SUM)
        elif op == "reduce":
            out = np.zeros_like(x)
            self.comm.Reduce(x, out, op=MPI.SUM, root=0)
        else:
            out = np.empty(len(x) // self.size, dtype=x.dtype)
            self.comm.Reduce_scatter_block(x, out, op=MPI.SUM)
        return out

    def close(self) -> None:
        pass


def main(argv=None) -> int:
    from multiprocessing.connection import Client

    from .world import no_delay

    ap = argparse.ArgumentParser(prog="python -m fpscope.collectives.rank")
    ap.add_argument("--backend", required=True, choices=("gloo", "nccl", "mpi"))
    ap.add_argument("--connect", required=True, help="HOST:PORT of the parent")
    ap.add_argument("--rank", type=int)
    ap.add_argument("--world-size", type=int)
    ap.add_argument("--init", help="torch.distributed init_method")
    args = ap.parse_args(argv)
    host, _, port = args.connect.rpartition(":")
    key = bytes.fromhex(os.environ.pop("FPSCOPE_COLLECTIVE_KEY", ""))
    if args.backend == "mpi":
        comm = _MPI()
    else:
        comm = _Torch(args.backend, args.rank, args.world_size, args.init)
    conn = Client((host, int(port)), authkey=key)
    no_delay(conn)
    conn.send_bytes(json.dumps({"rank": comm.rank, "size": comm.size, "pid": os.getpid(),
                                "info": comm.info}).encode())
    try:
        while True:
            header = json.loads(conn.recv_bytes())
            if header.get("op") == "exit":
                break
            data = conn.recv_bytes()
            try:
                x = np.frombuffer(data, dtype=_storage(header["dtype"])).copy()
                out = comm.run(header["op"], x, header["dtype"])
            except Exception as exc:  # noqa: BLE001 - reported to the parent in one line
                line = f"{type(exc).__name__}: {exc}".splitlines()[0]
                conn.send_bytes(json.dumps({"ok": False, "error": line}).encode())
                conn.send_bytes(b"")
                traceback.print_exc(file=sys.stderr)
                continue
            conn.send_bytes(b'{"ok": true}')
            conn.send_bytes(out.tobytes())
    except (EOFError, ConnectionError, KeyboardInterrupt):
        pass
    finally:
        comm.close()
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # skip the interpreter's teardown of torch / MPI: seconds per rank
