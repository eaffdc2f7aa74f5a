"""Collective cells of ``fpscope matrix``: all_reduce, reduce and reduce_scatter across ranks.

A :class:`CollectiveBlock` is the product of one collective operation with backends, dtypes,
element counts and world sizes; each combination is one :class:`CollectiveCell`, revealed like
any other cell (:func:`fpscope.matrix.run_matrix`) through a
:class:`fpscope.collectives.CollectiveTarget`: leaves are the P ranks, every one of the E buffer
elements is an output with its own tree, and the record holds the element classes
(``"classes"``), the communication library (``target.communication``) and the check that every
rank received identical bits (``probe.checks.rank_identity``). Every cell starts its own P rank
processes (a few seconds each).

The *backends* play the part of libraries: "gloo" (``torch.distributed`` with gloo, CPU; needs
torch) and "mpi" (``mpi4py`` under Open MPI's ``mpiexec``). They are not columns of the
agreement table and are not among :data:`fpscope.matrix.LIBRARIES`: collective cells are
compared in the report's own Collectives section (:mod:`fpscope.report_collectives`).
"""

from __future__ import annotations

import importlib
import importlib.util
import itertools
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["BACKENDS", "CollectiveBlock", "CollectiveCell", "available", "is_collective"]

#: collective backends in report order; each is a "library" of the matrix's cells
BACKENDS = ("gloo", "mpi")
#: backend -> family of fpscope.collectives.target.NAMES
_FAMILY = {"gloo": "torch", "mpi": "mpi"}


def _target_name(op: str, backend: str) -> str:
    """The target name of ``op`` ("all_reduce", "reduce", "reduce_scatter") on ``backend``.

    Raises:
        ValueError: unknown operation or backend.
    """
    from .collectives.target import NAMES

    for name, (family, o) in NAMES.items():
        if o == op and family == _FAMILY.get(backend):
            return name
    ops = sorted({o for _, o in NAMES.values()})
    if op not in ops:
        raise ValueError(f"unknown collective {op!r}; use one of {', '.join(ops)}")
    raise ValueError(f"unknown backend {backend!r}; use one of {', '.join(BACKENDS)}")


@dataclass(frozen=True)
class CollectiveBlock:
    """One product of conditions for one collective (a SUM across ranks).

    Attributes:
        op: "all_reduce", "reduce" or "reduce_scatter".
        dtypes: input formats (mpi: fp64 and fp32 only; others are left out for mpi).
        sizes: E, elements per rank (reduce_scatter: sizes that do not split into P equal
            chunks are left out).
        world_sizes: P, the numbers of ranks (2 or more): the leaves of each tree.
        backends: "gloo" and/or "mpi" (:data:`BACKENDS`).
    """

    op: str
    dtypes: tuple
    sizes: tuple
    world_sizes: tuple = (2,)
    backends: tuple = ("gloo",)

    def cells(self, libraries: Iterable[str]) -> list:
        """The block's cells on the backends among ``libraries``, ordered by dtype, size,
        backend and world size.

        Raises:
            fpscope.matrix.MatrixError: unknown operation or backend, a world size below 2 or
                an element count below 1.
        """
        from .collectives.target import MPI_DTYPES
        from .matrix import MatrixError

        for backend in self.backends:
            try:
                _target_name(self.op, backend)
            except ValueError as exc:
                raise MatrixError(str(exc)) from None
        if any(not isinstance(p, int) or p < 2 for p in self.world_sizes):
            raise MatrixError(f"{self.op}: world sizes must be integers of 2 or more, got "
                              f"{self.world_sizes!r}")
        if any(not isinstance(e, int) or e < 1 for e in self.sizes):
            raise MatrixError(f"{self.op}: sizes (elements per rank) must be integers of 1 or "
                              f"more, got {self.sizes!r}")
        libs = set(libraries)
        out = []
        for dtype, size, backend, p in itertools.product(self.dtypes, self.sizes, self.backends,
                                                         self.world_sizes):
            if backend not in libs or (backend == "mpi" and dtype not in MPI_DTYPES):
                continue
            if self.op == "reduce_scatter" and size % p:
                continue
            out.append(CollectiveCell(self.op, backend, dtype, (int(size),), int(p)))
        return out


@dataclass(frozen=True)
class CollectiveCell:
    """One reveal of a collective: the attributes :class:`fpscope.matrix.Cell` has (for the
    runner and the report) plus the world size.

    Attributes:
        op: "all_reduce", "reduce" or "reduce_scatter".
        library: the backend, "gloo" or "mpi".
        dtype: input format name.
        shape: (E,), the elements per rank.
        world_size: P, the number of ranks (the leaves of every element's tree).
    """

    op: str
    library: str
    dtype: str
    shape: tuple
    world_size: int = 2
    layout = "-"  # not a condition of a collective (class attribute, not a field)
    threads = None

    @property
    def target(self) -> str:
        """The fpscope target name, e.g. "torch.distributed.all_reduce"."""
        return _target_name(self.op, self.library)

    @property
    def n(self) -> int:
        """Number of leaves of each tree: the world size."""
        return self.world_size

    @property
    def elements(self) -> int:
        """E, the buffer length per rank."""
        return self.shape[0]

    @property
    def rows(self) -> None:
        return None

    @property
    def size_text(self) -> str:
        """"4 ranks x 4096"."""
        return f"{self.world_size} ranks x {self.elements}"

    @property
    def threads_text(self) -> str:
        return "-"

    def slug(self, index: int) -> str:
        """File name stem of the cell's record: "041-torch.distributed.all_reduce-fp32-p4-e4096"."""
        return f"{index:03d}-{self.target}-{self.dtype}-p{self.world_size}-e{self.elements}"

    def make_target(self):
        """The cell's :class:`fpscope.collectives.CollectiveTarget`; starts the ranks (close
        it when done).

        Raises:
            fpscope.targets.TargetError: the backend is missing or the ranks fail to start.
        """
        from .targets import make_target

        return make_target(self.target, n=self.elements, world_size=self.world_size,
                           dtype=self.dtype, backend=self.library)

    def to_json(self) -> dict:
        return {"op": self.op, "library": self.library, "target": self.target,
                "dtype": self.dtype, "shape": list(self.shape), "n": self.n,
                "elements": self.elements, "world_size": self.world_size,
                "backend": self.library, "layout": None, "threads": None}


def is_collective(cell) -> bool:
    """Whether ``cell`` is a :class:`CollectiveCell`."""
    return isinstance(cell, CollectiveCell)


def _backend_note(backend: str) -> str | None:
    """None when ``backend`` can run here, else a one-line note why it is skipped."""
    if backend == "gloo":
        try:
            dist = importlib.import_module("torch.distributed")
        except Exception as exc:  # noqa: BLE001 - ImportError, or a broken install raising anything
            why = "torch not installed" if isinstance(exc, ModuleNotFoundError) else \
                f"torch.distributed fails to import ({type(exc).__name__})"
            return f"gloo skipped: {why} (pip install fpscope[torch])"
        if not (dist.is_available() and dist.is_gloo_available()):
            return "gloo skipped: this torch build has no gloo backend for torch.distributed"
        return None
    from .collectives.world import find_mpiexec

    if importlib.util.find_spec("mpi4py") is None:
        return "mpi skipped: mpi4py not installed (pip install fpscope[mpi])"
    if find_mpiexec() is None:
        return ("mpi skipped: no mpiexec beside this Python or on PATH (pip install fpscope[mpi] "
                "installs Open MPI's)")
    return None


def available(wanted: Iterable[str] | None = None) -> tuple[list[str], list[str]]:
    """(libraries and backends that work here, notes on those that do not): numpy, torch and
    jax as :func:`fpscope.matrix.available_libraries`, then the collective backends (gloo:
    torch.distributed with gloo imports; mpi: mpi4py is installed and ``mpiexec`` is found;
    neither starts a world).

    Raises:
        fpscope.matrix.MatrixError: ``wanted`` names an unknown library or backend.
    """
    from .matrix import LIBRARIES, MatrixError, available_libraries

    names = list(LIBRARIES + BACKENDS if wanted is None else wanted)
    for name in names:
        if name not in LIBRARIES + BACKENDS:
            raise MatrixError(f"unknown library {name!r}; use one of "
                              f"{', '.join(LIBRARIES + BACKENDS)}")
    libs, notes = available_libraries([x for x in names if x in LIBRARIES])
    for backend in (b for b in BACKENDS if b in names):
        note = _backend_note(backend)
        if note is None:
            libs.append(backend)
        else:
            notes.append(note)
    return libs, notes
