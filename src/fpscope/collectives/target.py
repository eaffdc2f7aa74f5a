"""Collectives as black-box targets: leaves are ranks, every buffer element is an output.

A reduction across P ranks adds, for each element e of the buffer, the P values x_0[e], ...,
x_{P-1}[e]; the element's summation tree has P leaves (rank r is leaf r), and different elements
may use different trees (ring all-reduce: one tree per chunk, NUMERICS.md section 4). The target
presents this as a matrix op without products: probe row e of ``evaluate_outer(P, ones)`` is
element e's vector of per-rank values, so one collective call answers one probe pair for each of
the E elements, and :mod:`fpscope.reveal.classes` finds every tree and the elements that use it
from shared calls.

Every call checks that every rank received identical bits (all_reduce; the MPI standard requires
it) and keeps a tally: :meth:`CollectiveTarget.checks` says which ranks and elements differed,
if any; rank 0's output is the answer.
"""

from __future__ import annotations

import numpy as np

from ..formats import get_format
from ..targets.base import Target, TargetError
from .world import World

#: target name -> (backend family, collective op)
NAMES = {
    "torch.distributed.all_reduce": ("torch", "all_reduce"),
    "torch.distributed.reduce": ("torch", "reduce"),
    "torch.distributed.reduce_scatter": ("torch", "reduce_scatter"),
    "mpi4py.MPI.Comm.Allreduce": ("mpi", "all_reduce"),
    "mpi4py.MPI.Comm.Reduce": ("mpi", "reduce"),
    "mpi4py.MPI.Comm.Reduce_scatter": ("mpi", "reduce_scatter"),
}
#: short spellings
ALIASES = {"dist.": "torch.distributed.", "MPI.": "mpi4py.MPI.Comm.",
           "mpi4py.Allreduce": "mpi4py.MPI.Comm.Allreduce",
           "mpi4py.Reduce_scatter": "mpi4py.MPI.Comm.Reduce_scatter",
           "mpi4py.Reduce": "mpi4py.MPI.Comm.Reduce"}
DEFAULT_WORLD_SIZE = 4
DEFAULT_ELEMENTS = 4096
#: MPI has no standard 16-bit floating-point type (mpi4py exposes none here)
MPI_DTYPES = ("fp64", "fp32")


def canonical(name: str) -> str | None:
    """The collective target's full name for ``name`` (aliases accepted), or None."""
    name = name.strip()
    if name in ALIASES:
        return ALIASES[name]
    for short, full in ALIASES.items():
        if short.endswith(".") and name.startswith(short):
            name = full + name[len(short):]
    return name if name in NAMES else None


class CollectiveTarget(Target):
    """One collective SUM over ``world_size`` ranks on buffers of ``elements`` values.

    Args:
        name: one of :data:`NAMES` (aliases: ``dist.all_reduce``, ``MPI.Allreduce``).
        world_size: P, the number of ranks (leaves), 2 or more.
        elements: E, the buffer length per rank (reduce_scatter: a multiple of P).
        dtype: "fp64", "fp32", "fp16" or "bf16" (mpi: fp64 and fp32).
        backend: torch targets: "gloo" (default, CPU) or "nccl" (CUDA GPUs, one per rank;
            untested here); mpi targets: "mpi".
        env: environment variables of the rank processes (algorithm choice: e.g.
            ``OMPI_MCA_coll_tuned_use_dynamic_rules=1`` with
            ``OMPI_MCA_coll_tuned_allreduce_algorithm=N``, ``NCCL_ALGO=Ring``).
        element: reveal this element alone (a 1-output target, one call per probe).
        progress: optional callback(text) for start-up news.
        world: ranks already started (an object with ``run(op, buffers, dtype)``, ``info``,
            ``env`` and ``close()`` as :class:`~fpscope.collectives.world.World`); default:
            start them now.

    Raises:
        TargetError: bad sizes or dtype, a backend that is not installed, ranks that fail.
    """

    is_matrix = True
    has_products = False
    max_cols = 1

    def __init__(self, name: str, world_size: int = DEFAULT_WORLD_SIZE,
                 elements: int = DEFAULT_ELEMENTS, dtype: str = "fp32", backend: str | None = None,
                 env: dict | None = None, element: int | None = None, progress=None,
                 world=None):
        full = canonical(name)
        if full is None:
            raise TargetError(f"unknown collective {name!r}; known: {', '.join(NAMES)}")
        family, op = NAMES[full]
        fmt = get_format(dtype)
        if fmt.name not in ("fp64", "fp32", "fp16", "bf16"):
            raise TargetError(f"{full}: dtype must be fp64, fp32, fp16 or bf16, got {dtype!r}")
        if backend is None:
            backend = "mpi" if family == "mpi" else "gloo"
        if family == "mpi" and backend != "mpi":
            raise TargetError(f"{full} runs on MPI; backend {backend!r} applies to "
                              "torch.distributed targets")
        if family == "torch" and backend not in ("gloo", "nccl"):
            raise TargetError(f"{full}: backend must be gloo or nccl, got {backend!r}")
        if family == "mpi" and fmt.name not in MPI_DTYPES:
            raise TargetError(f"{full}: MPI has no standard {fmt.name} type (mpi4py offers "
                              f"none here); use fp32 or fp64")
        if not isinstance(world_size, (int, np.integer)) or world_size < 2:
            raise TargetError(f"--world-size must be 2 or more, got {world_size!r}")
        if not isinstance(elements, (int, np.integer)) or elements < 1:
            raise TargetError(f"--n (elements per rank) must be 1 or more, got {elements!r}")
        if op == "reduce_scatter" and elements % world_size:
            raise TargetError(f"{full}: the buffer of {elements} elements must split into "
                              f"{world_size} equal chunks (a multiple of {world_size})")
        if element is not None and not 0 <= int(element) < elements:
            raise TargetError(f"--position {element}: elements are 0..{elements - 1}")
        super().__init__(int(world_size), fmt, fmt)
        self.name, self.op, self.backend = full, op, backend
        self.elements, self.element = int(elements), None if element is None else int(element)
        if self.element is not None:
            self.is_matrix = False
        self.max_rows = self.elements
        self.env = dict(env or {})
        self.mismatch = {"calls": 0, "ranks": set(), "elements": 0, "first": None}
        self.world = world if world is not None else World(backend, self.n, env=self.env,
                                                           progress=progress)
        self.communication = {**self.world.info, "world_size": self.n,
                              "algorithm_env": self.world.env}

    # -- the probe interface -------------------------------------------------------------------
    def _collective(self, columns: np.ndarray) -> np.ndarray:
        """One call: ``columns`` is (E, P) (element e of rank r at [e, r]); returns the (E,)
        result as float64 (rank 0's for all_reduce and reduce; the chunks for reduce_scatter)."""
        dtype = self.in_format.numpy_dtype()
        bufs = np.ascontiguousarray(columns.T.astype(dtype, copy=False))
        outs = self.world.run(self.op, bufs, self.in_format.name)
        self.calls += 1
        if self.op == "reduce_scatter":
            return np.concatenate(outs).astype(np.float64)
        res = outs[0]
        if self.op == "all_reduce":
            self._compare_ranks(outs)
        return res.astype(np.float64)

    def _compare_ranks(self, outs: list) -> None:
        bits = [o.view(np.uint8).reshape(len(o), -1) for o in outs]
        bad_elements = np.zeros(len(outs[0]), dtype=bool)
        bad_ranks = []
        for r in range(1, len(outs)):
            d = (bits[r] != bits[0]).any(axis=1)
            if d.any():
                bad_ranks.append(r)
                bad_elements |= d
        if bad_ranks:
            m = self.mismatch
            m["calls"] += 1
            m["ranks"].update(bad_ranks)
            m["elements"] = max(m["elements"], int(bad_elements.sum()))
            if m["first"] is None:
                e = int(np.flatnonzero(bad_elements)[0])
                r = bad_ranks[0]
                m["first"] = (f"element {e}: rank 0 received {float(outs[0][e])!r}, rank {r} "
                              f"{float(outs[r][e])!r}")

    def evaluate_outer(self, P, Q) -> np.ndarray:
        """(R, 1) results: row r of P is element r's per-rank values (R <= elements); Q must be
        a column of ones (a collective adds, it does not multiply)."""
        P, Q = self.as_storage(P), np.asarray(Q)
        if P.ndim != 2 or P.shape[1] != self.n or P.shape[0] > self.elements:
            raise TargetError(f"probe rows must have shape (R <= {self.elements}, {self.n}), "
                              f"got {P.shape}")
        if Q.shape[0] != self.n or Q.shape[1] != 1 or not (np.asarray(Q, np.float64) == 1).all():
            raise TargetError(f"{self.name} adds per-rank values; it takes no factors")
        cols = np.zeros((self.elements, self.n), dtype=P.dtype)
        cols[: len(P)] = P
        return self._collective(cols)[: len(P), None]

    def evaluate(self, X) -> np.ndarray:
        """Outputs for each row of X (B, P): E rows per call (one element each); with
        ``element`` set, one call per row with the row at that element."""
        X = self._check(X)
        if self.element is None:
            ones = np.ones((self.n, 1))
            return np.concatenate([self.evaluate_outer(X[s : s + self.elements], ones)[:, 0]
                                   for s in range(0, len(X), self.elements)]) \
                if len(X) else np.zeros(0)
        return self.evaluate_each(X)

    def _call_one(self, x: np.ndarray) -> float:
        """One call with x (P values) at element ``element`` (or 0), zeros elsewhere."""
        e = self.element or 0
        cols = np.zeros((self.elements, self.n), dtype=x.dtype)
        cols[e] = x
        return float(self._collective(cols)[e])

    # -- records --------------------------------------------------------------------------------
    def checks(self) -> dict:
        """Checks of this target's own, for the reveal's check list: ``rank_identity``."""
        if self.op != "all_reduce":
            return {"rank_identity": f"not applicable ({self.op}: one rank or chunk per "
                                     f"element holds the result)"}
        m = self.mismatch
        if not m["calls"]:
            return {"rank_identity": f"ok: every rank received identical bits in all "
                                     f"{self.calls} calls"}
        ranks = ", ".join(str(r) for r in sorted(m["ranks"]))
        return {"rank_identity": f"no: ranks {ranks} received other bits than rank 0 in "
                                 f"{m['calls']} of {self.calls} calls (up to {m['elements']} "
                                 f"elements in one call; first: {m['first']}); the tree is "
                                 f"rank 0's"}

    def spec(self) -> dict:
        out = {"name": self.name, "n": self.elements, "world_size": self.n,
               "dtype": self.in_format.name, "out_dtype": self.out_format.name,
               "backend": self.backend, "collective": self.op,
               "communication": self.communication}
        if self.element is not None:
            out["output"] = self.element
        if self.env:
            out["env"] = dict(self.env)
        return out

    def close(self) -> None:
        self.world.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
