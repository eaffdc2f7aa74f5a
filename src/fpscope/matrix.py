"""``fpscope matrix``: reveal a suite of operations x dtypes x sizes x layouts x thread counts.

A *suite* is a list of :class:`Block` s; a block is the product of one operation ("sum", "dot" or
"matmul") with dtypes, sizes, memory layouts and thread counts. Each combination, on each library
that is available (numpy always; torch and jax when they import), is one :class:`Cell`: one
reveal (:func:`fpscope.reveal.reveal`), written as one reveal record (``fpscope.record/2``) into
``DIR/cells/``. Cells whose trees are identical share a *tree id* ("A", "B", ...), so the matrix
shows at a glance where numpy's own loops, OpenBLAS (``numpy.dot`` / ``numpy.matmul``), torch and
XLA (jax) sum in the same order and where they do not. Cells that differ in one condition only
(rows of a matmul, threads, layout, dtype, library) are compared with :mod:`fpscope.diff`;
cells that differ in n, whose trees cannot be compared leaf by leaf, are compared by the family of
their trees (:func:`fpscope.summary.describe`); :mod:`fpscope.matrix_compare` does both. Collectives (:class:`CollectiveBlock`, backends
gloo and mpi; :mod:`fpscope.matrix_collectives`) are cells too, reported in their own section.

Layout of ``DIR`` (written by :func:`run_matrix` and :func:`fpscope.report.write_report`)::

    DIR/cells/NNN-<target>-<dtype>-<size>-<layout>-t<threads>.json   one reveal record per cell
    DIR/trees/<tree id>.svg                                          one picture per distinct tree
    DIR/matrix.json                                                  the manifest (kind "matrix")
    DIR/index.html                                                   the report (static, offline)

Every file is written atomically (a temporary file, then a rename). A run into a folder that holds
a run of the same suite resumes it (:mod:`fpscope.matrix_resume`); another folder that exists and
is not empty is refused unless ``force`` is set (fpscope DESIGN.md: never replace files silently).
"""

from __future__ import annotations

import importlib
import itertools
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .matrix_collectives import BACKENDS, CollectiveBlock
from .matrix_compare import DIMENSIONS, agreement_rows, columns, compare_cells  # noqa: F401

__all__ = [
    "LIBRARIES", "OPS", "SUITES", "Block", "Cell", "CellResult", "MatrixError", "MatrixResult",
    "DIMENSIONS", "agreement_rows", "available_libraries", "check_output", "columns",
    "compare_cells",
    "prepare_output", "run_matrix", "suite_cells",
]

#: Libraries in the order of the report's columns.
LIBRARIES = ("numpy", "torch", "jax")

#: operation -> library -> target name (fpscope.targets). numpy.dot and numpy.matmul call the
#: BLAS numpy was built with (OpenBLAS for the PyPI wheels); numpy.sum is numpy's own loop.
OPS = {
    "sum": {"numpy": "numpy.sum", "torch": "torch.sum", "jax": "jax.numpy.sum"},
    "dot": {"numpy": "numpy.dot", "torch": "torch.dot", "jax": "jax.numpy.dot"},
    "matmul": {"numpy": "numpy.matmul", "torch": "torch.matmul", "jax": "jax.numpy.matmul"},
}

#: Libraries whose targets take no layout or thread count (jax copies its inputs and fixes its
#: threads at start-up; see fpscope.targets.jax_targets): their cells use layout "C" and the
#: library's default threads.
_FIXED_CONDITIONS = ("jax",)


class MatrixError(ValueError):
    """Bad input to the matrix runner: unknown suite or library, an output folder that exists
    and is not empty (without ``force``), is a file, or cannot be created. One-line message."""


@dataclass(frozen=True)
class Block:
    """One product of conditions for one operation.

    Attributes:
        op: "sum", "dot" or "matmul" (keys of :data:`OPS`).
        dtypes: input formats ("fp64", "fp32", "fp16", "bf16").
        sizes: n (the number of summands) for "sum" and "dot"; (M, K, N) shapes for "matmul"
            (the tree is the K-order of output (0, 0); M is the number of rows, field case C5).
        layouts: "C", "F" (matmul operands) or "strided".
        threads: thread counts (BLAS threads for numpy, torch.set_num_threads for torch).
    """

    op: str
    dtypes: tuple
    sizes: tuple
    layouts: tuple = ("C",)
    threads: tuple = (1,)


@dataclass(frozen=True)
class Cell:
    """One reveal of the matrix.

    Attributes:
        op: "sum", "dot" or "matmul".
        library: "numpy", "torch" or "jax".
        dtype: input format name.
        shape: (n,) for sum and dot, (M, K, N) for matmul.
        layout: memory layout of the probed operands.
        threads: thread count, or None for the library's default (jax).
    """

    op: str
    library: str
    dtype: str
    shape: tuple
    layout: str = "C"
    threads: int | None = None

    @property
    def target(self) -> str:
        """The fpscope target name, e.g. "numpy.matmul"."""
        return OPS[self.op][self.library]

    @property
    def n(self) -> int:
        """Number of leaves of the tree: n, or K of a matmul."""
        return self.shape[1] if self.op == "matmul" else self.shape[0]

    @property
    def rows(self) -> int | None:
        """M of a matmul, None otherwise."""
        return self.shape[0] if self.op == "matmul" else None

    @property
    def size_text(self) -> str:
        """"n=1000" or "M x K x N" ("2x256x16")."""
        if self.op == "matmul":
            return "x".join(str(d) for d in self.shape)
        return f"n={self.shape[0]}"

    @property
    def threads_text(self) -> str:
        """The thread count, or "default"."""
        return "default" if self.threads is None else str(self.threads)

    def slug(self, index: int) -> str:
        """File name stem of the cell's record: "007-numpy.matmul-fp32-2x256x16-C-t1"."""
        size = self.size_text.replace("n=", "n")
        return f"{index:03d}-{self.target}-{self.dtype}-{size}-{self.layout}-t{self.threads_text}"

    def make_target(self):
        """The cell's :class:`fpscope.targets.Target` (close it when done).

        Raises:
            fpscope.targets.TargetError: the library refuses the conditions.
        """
        from .targets import make_target

        if self.op == "matmul":
            return make_target(self.target, shape=tuple(self.shape), dtype=self.dtype,
                               layout=self.layout, threads=self.threads)
        return make_target(self.target, n=self.shape[0], dtype=self.dtype, layout=self.layout,
                           threads=self.threads)

    def to_json(self) -> dict:
        return {"op": self.op, "library": self.library, "target": self.target,
                "dtype": self.dtype, "shape": list(self.shape), "n": self.n,
                "layout": self.layout, "threads": self.threads}


_MATMUL_QUICK = tuple((m, 256, 16) for m in (1, 2, 16))
_MATMUL_FULL = tuple((m, 256, 16) for m in (1, 2, 4, 8, 16, 32, 64)) + \
    tuple((m, 1000, 16) for m in (1, 2, 64))

#: The built-in suites. "quick" (about 40 cells, well under two minutes on two cores): sums of
#: fp32 and fp16 (bf16: n = 64), dots of fp32 at 1 and 2 threads, n = 64 and 1000, a strided
#: sum; one matmul K = 256 with M = 1, 2, 16 rows at 1 and 2 threads; one MPI Allreduce of 2
#: ranks x 1024 fp32 (a gloo world starts twice as slowly). "full" (about 500 cells, several
#: minutes): fp64/fp32/fp16/bf16, n from 8 to 4096, C and strided layouts, 1 and 2 threads,
#: matmuls with M = 1..64 rows, K = 256 and 1000, C and F layouts; all_reduce of 4096 fp32 on
#: gloo (2 and 4 ranks) and MPI (4 ranks). Sizes too large for a dtype's exact unit count are
#: left out (:func:`fpscope.masks.choose_mask`).
SUITES: dict[str, tuple[Block | CollectiveBlock, ...]] = {
    "quick": (
        Block("sum", ("fp32", "fp16"), (64, 1000)),
        Block("sum", ("bf16",), (64,)),
        Block("sum", ("fp32",), (1000,), layouts=("strided",)),
        Block("dot", ("fp32",), (64, 1000), threads=(1, 2)),
        Block("matmul", ("fp32",), _MATMUL_QUICK, threads=(1, 2)),
        CollectiveBlock("all_reduce", ("fp32",), (1024,), backends=("mpi",)),
    ),
    "full": (
        Block("sum", ("fp64", "fp32", "fp16", "bf16"), (8, 64, 100, 1000, 4096),
              layouts=("C", "strided"), threads=(1, 2)),
        Block("dot", ("fp64", "fp32", "fp16", "bf16"), (8, 64, 100, 1000, 4096),
              layouts=("C", "strided"), threads=(1, 2)),
        Block("matmul", ("fp32", "fp16"), _MATMUL_FULL, layouts=("C", "F"), threads=(1, 2)),
        CollectiveBlock("all_reduce", ("fp32",), (4096,), world_sizes=(2, 4)),
        CollectiveBlock("all_reduce", ("fp32",), (4096,), world_sizes=(4,), backends=("mpi",)),
    ),
}


def _fits(n: int, dtype: str) -> bool:
    """Whether FPRev's probes can count n units exactly in ``dtype`` (fpscope.masks)."""
    from .formats import get_format
    from .masks import MaskError, choose_mask

    fmt = get_format(dtype)
    try:
        choose_mask(n, fmt, fmt)
    except MaskError:
        return False
    return True


def suite_cells(suite: str | Sequence[Block], libraries: Iterable[str] = LIBRARIES) -> list[Cell]:
    """The cells of ``suite`` (a name of :data:`SUITES` or a list of blocks) on ``libraries``
    (of :data:`LIBRARIES`, and the collective backends "gloo" and "mpi": a
    :class:`CollectiveBlock` gives cells only for the backends named here).

    Cells are ordered by block, then dtype, size, layout, library (numpy, torch, jax) and
    threads, so that neighbouring rows of the report differ in one condition. jax cells take
    layout "C" and the default threads only (one cell per dtype and size). Sizes whose unit count
    the dtype cannot hold exactly are left out.

    Raises:
        MatrixError: unknown suite name, library or operation.
    """
    if isinstance(suite, str):
        if suite not in SUITES:
            raise MatrixError(f"unknown suite {suite!r}; use one of {', '.join(SUITES)}")
        blocks = SUITES[suite]
    else:
        blocks = tuple(suite)
    libs = list(libraries)
    for lib in libs:
        if lib not in LIBRARIES + BACKENDS:
            raise MatrixError(f"unknown library {lib!r}; use one of "
                              f"{', '.join(LIBRARIES + BACKENDS)}")
    cells: list[Cell] = []
    seen: set[Cell] = set()
    for b in blocks:
        if isinstance(b, CollectiveBlock):
            new = [c for c in b.cells(libs) if c not in seen]
            seen.update(new)
            cells.extend(new)
            continue
        if b.op not in OPS:
            raise MatrixError(f"unknown operation {b.op!r}; use one of {', '.join(OPS)}")
        for dtype, size, layout in itertools.product(b.dtypes, b.sizes, b.layouts):
            shape = tuple(size) if isinstance(size, (tuple, list)) else (int(size),)
            if (b.op == "matmul") != (len(shape) == 3):
                raise MatrixError(f"{b.op}: size {size!r} must be "
                                  f"{'(M, K, N)' if b.op == 'matmul' else 'an integer n'}")
            k = shape[1] if b.op == "matmul" else shape[0]
            if not _fits(k, dtype):
                continue
            for lib in (x for x in LIBRARIES if x in libs):
                fixed = lib in _FIXED_CONDITIONS
                if fixed and layout != "C":
                    continue
                for threads in ((None,) if fixed else b.threads):
                    cell = Cell(b.op, lib, dtype, shape, layout, threads)
                    if cell not in seen:
                        seen.add(cell)
                        cells.append(cell)
    return cells


def available_libraries(wanted: Iterable[str] | None = None) -> tuple[list[str], list[str]]:
    """(libraries that import, notes on those that do not), in the order of :data:`LIBRARIES`.

    numpy is always available. torch and jax are imported here (a few seconds); a library that
    is not installed or fails to import is left out with a one-line note.

    Raises:
        MatrixError: ``wanted`` names an unknown library.
    """
    libs = list(LIBRARIES if wanted is None else wanted)
    for lib in libs:
        if lib not in LIBRARIES:
            raise MatrixError(f"unknown library {lib!r}; use one of {', '.join(LIBRARIES)}")
    ok, notes = [], []
    for lib in LIBRARIES:
        if lib not in libs:
            continue
        try:
            importlib.import_module(lib)
        except Exception as exc:  # noqa: BLE001 - ImportError, or a broken install raising anything
            reason = "not installed" if isinstance(exc, ModuleNotFoundError) else \
                f"fails to import ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
            notes.append(f"{lib} skipped: {reason} (pip install fpscope[{lib}])")
            continue
        ok.append(lib)
    return ok, notes


@dataclass
class CellResult:
    """What one cell gave.

    Attributes:
        index: 1-based cell number (the report's "#").
        cell: the conditions.
        status: "ok" (tree revealed and replayed bit for bit), "failed" (a check failed: the tree,
            when there is one, is kept with the failed check), or "skipped" (the library refuses
            the conditions; no record).
        record_file: path of the record relative to the output folder, or None.
        tree: the revealed :class:`fpscope.tree.SumTree`, or None.
        tree_id: "A", "B", ... shared by cells with identical trees; None without a tree.
        summary: plain-words summary of the tree (:func:`fpscope.summary.summarize`).
        error: one-line reason for "failed" and "skipped"; for "ok", a note (a record that could
            not be written).
        seconds: wall time of the cell (target, reveal, record), in seconds.
        record: the reveal record (dict), or None.
    """

    index: int
    cell: Cell
    status: str
    record_file: str | None = None
    tree: object = None
    tree_id: str | None = None
    summary: str | None = None
    error: str | None = None
    seconds: float = 0.0
    record: dict | None = None

    def to_json(self) -> dict:
        rec = self.record or {}
        return {"index": self.index, **self.cell.to_json(), "status": self.status,
                "record": self.record_file, "tree_id": self.tree_id, "summary": self.summary,
                "error": self.error, "seconds": round(self.seconds, 3),
                "accumulator": rec.get("accumulator"),
                "probes": (rec.get("probe") or {}).get("probes")}


@dataclass
class MatrixResult:
    """The whole matrix: cells, distinct trees, comparisons, notes and environment.

    Attributes:
        suite: the suite's name ("quick", "full", or "custom").
        cells: one :class:`CellResult` per cell, in suite order.
        trees: tree id -> SumTree, in order of first appearance.
        comparisons: see :func:`compare_cells`.
        notes: skipped libraries and other remarks (one line each).
        environment: :func:`fpscope.environment.capture_environment` after the run.
        seconds: wall time of the run, in seconds.
    """

    suite: str
    cells: list = field(default_factory=list)
    trees: dict = field(default_factory=dict)
    comparisons: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    environment: dict = field(default_factory=dict)
    libraries: list = field(default_factory=list)
    seconds: float = 0.0

    @property
    def failed(self) -> list:
        """Cells whose checks failed."""
        return [c for c in self.cells if c.status == "failed"]

    def members(self, tree_id: str) -> list:
        """The cells that share tree ``tree_id``."""
        return [c for c in self.cells if c.tree_id == tree_id]

    def to_record(self) -> dict:
        """The manifest: a ``fpscope.record/2`` record of kind "matrix" (cells, trees by id,
        comparisons without the nested sub-trees, whose text forms stay, and the environment)."""
        from .record import new_record

        trees = {}
        for tid, tree in self.trees.items():
            first = self.members(tid)
            trees[tid] = {"n": tree.n, "summary": first[0].summary if first else None,
                          "cells": [c.index for c in first], "picture": f"trees/{tid}.svg"}
        comparisons = []
        for cmp in self.comparisons:  # nested sub-trees stay out: they can be too deep for json
            sub = cmp.get("subtree")
            if sub:
                cmp = dict(cmp, subtree={k: v for k, v in sub.items() if k not in ("a", "b")})
            comparisons.append(cmp)
        return new_record(
            "matrix", suite=self.suite, libraries=self.libraries, notes=self.notes,
            seconds=round(self.seconds, 3),
            cells=[c.to_json() for c in self.cells], trees=trees,
            comparisons=comparisons, environment=self.environment)


# -- output folder ---------------------------------------------------------------------------------

_OWN_CELL = re.compile(r"^\d{3,}-.+\.json$")
_OWN_TREE = re.compile(r"^[A-Z]+\.svg$")


def check_output(out_dir, force: bool = False) -> Path:
    """Refuse an output folder that is a file, that exists and is not empty without ``force``,
    or whose parent folder does not exist; creates nothing.

    Raises:
        MatrixError: with a one-line reason.
    """
    out = Path(out_dir)
    if str(out_dir).strip() == "":
        raise MatrixError("-o needs a folder name")
    if out.exists() and not out.is_dir():
        raise MatrixError(f"{out} is a file; -o needs a folder")
    parent = out.parent if str(out.parent) else Path(".")
    if not out.exists() and not parent.is_dir():  # as every verb: no missing folders made
        raise MatrixError(f"cannot create {out}: folder {parent} does not exist")
    try:
        nonempty = out.is_dir() and any(out.iterdir())
    except OSError as exc:
        raise MatrixError(f"cannot read {out}: {exc.strerror or exc}") from None
    if nonempty and not force:
        raise MatrixError(f"{out} exists and is not empty; choose another folder or pass --force "
                          f"to replace its files")
    return out


def prepare_output(out_dir, force: bool = False) -> Path:
    """Create ``out_dir`` (and its ``cells/`` and ``trees/`` folders) for a run.

    A folder that exists and is not empty is refused unless ``force``; with ``force`` the cell
    records (``cells/NNN-*.json``) and pictures (``trees/<ID>.svg``) of an earlier run are
    removed, other files are left alone (and index.html / matrix.json are replaced).

    Raises:
        MatrixError: ``out_dir`` is a file, exists and is not empty without ``force``, or cannot
            be created.
    """
    out = check_output(out_dir, force)
    try:
        out.mkdir(parents=True, exist_ok=True)
        for sub, own in (("cells", _OWN_CELL), ("trees", _OWN_TREE)):
            folder = out / sub
            if folder.exists() and not folder.is_dir():
                raise MatrixError(f"{folder} is a file; the matrix needs it as a folder")
            folder.mkdir(exist_ok=True)
            for f in folder.iterdir():
                if f.is_file() and own.match(f.name):
                    f.unlink()
        probe = out / ".fpscope-write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise MatrixError(f"cannot write to {out}: {exc.strerror or exc}") from None
    return out


# -- running ---------------------------------------------------------------------------------------

def _reveal_record(target, res, seed: int, cell: Cell, environment: dict) -> dict:
    """A reveal record like ``fpscope reveal --record`` writes, plus the cell's conditions."""
    from .record import reveal_record

    return reveal_record(target, res, seed, environment,
                         matrix={"op": cell.op, "library": cell.library,
                                 "cell": cell.to_json()})  # fpscope.matrix_resume: identity


def _tree_id(k: int) -> str:
    from .sweep import _tree_id as tid

    return tid(k)


def _run_cell(index: int, cell: Cell, out: Path | None, seed: int, replay_samples: int
              ) -> CellResult:
    """Reveal one cell; write its record into ``out/cells/`` (not when ``out`` is None)."""
    from .environment import capture_environment
    from .masks import MaskError
    from .record import write_record
    from .reveal import RevealError, reveal
    from .targets.base import TargetError

    t0 = time.perf_counter()
    res_out = CellResult(index, cell, "ok")
    try:
        target = cell.make_target()
    except (TargetError, MaskError, ValueError) as exc:
        res_out.status, res_out.error = "skipped", str(exc).splitlines()[0]
        res_out.seconds = time.perf_counter() - t0
        return res_out
    try:
        try:
            res = reveal(target, seed=seed, replay_samples=replay_samples)
        except RevealError as exc:
            if exc.kind in ("units", "nan"):
                res_out.status, res_out.error = "skipped", str(exc).splitlines()[0]
                return res_out
            res_out.status, res_out.error = "failed", f"{exc.kind}: {str(exc).splitlines()[0]}"
            res = exc.result
        except (TargetError, MaskError) as exc:
            res_out.status, res_out.error = "skipped", str(exc).splitlines()[0]
            return res_out
        if res is not None:
            record = _reveal_record(target, res, seed, cell, capture_environment())
            if res_out.status == "failed":
                record["matrix"]["failed"] = res_out.error
            res_out.record, res_out.tree = record, res.tree
            res_out.summary = record["summary"]
    finally:
        target.close()
        res_out.seconds = time.perf_counter() - t0
    if res_out.record is not None and out is not None:
        name = f"cells/{cell.slug(index)}.json"
        try:
            write_record(res_out.record, out / name, overwrite=True)  # the folder was prepared
            res_out.record_file = name
        except RecursionError:  # json nests one level per tree level (fpscope.record.dumps)
            note = (f"record not written: the tree (depth {res_out.tree.depth()}) is too deep "
                    f"for Python's json module")
            res_out.error = f"{res_out.error}; {note}" if res_out.error else note
    return res_out


def run_matrix(
    cells: Sequence[Cell],
    out_dir,
    *,
    suite: str = "custom",
    force: bool = False,
    seed: int = 0,
    replay_samples: int = 32,
    notes: Iterable[str] = (),
    libraries: Iterable[str] = (),
    progress: Callable[[int, int, str], None] | None = None,
    isolate: bool = False,
    timeout: float | None = None,
) -> MatrixResult:
    """Reveal every cell, write its record to ``out_dir/cells/`` and compare the cells.

    A run into a folder that holds an earlier run of the same ``suite`` resumes: cells whose
    record is there are kept, the others are revealed (``force`` redoes all;
    :mod:`fpscope.matrix_resume`).

    Args:
        cells: the cells (:func:`suite_cells`).
        out_dir: output folder (see :func:`prepare_output`; created if missing).
        suite: the suite's name, for the manifest and the report.
        force: replace the files of an existing, non-empty folder.
        seed: seed of the reveals (pivots, random replay inputs).
        replay_samples: random inputs per distribution of each replay check (0 skips it).
        notes: remarks for the report (e.g. skipped libraries).
        libraries: the libraries the cells were drawn from (for the report's columns).
        progress: optional callback(cells_done, cells_total, label of the next cell), called
            before each cell and once at the end (label "").
        isolate: reveal each cell in a child process, so that a cell that crashes its process
            is a "failed" cell and the others complete.
        timeout: with ``isolate``, seconds before a cell's process is killed (None: no limit).

    Returns:
        MatrixResult, with ``comparisons`` filled in. The manifest and the HTML report are
        written by :func:`fpscope.report.write_report`.

    Raises:
        MatrixError: the output folder is refused (:func:`fpscope.matrix_resume.check_resume`).
    """
    from .environment import capture_environment
    from .matrix_resume import load_finished, open_output, run_cell_isolated

    out, resume = open_output(out_dir, suite, force)
    t0 = time.perf_counter()
    result = MatrixResult(suite, notes=list(notes), libraries=list(libraries))
    ids: dict = {}
    total, kept = len(cells), 0
    for i, cell in enumerate(cells, start=1):
        if progress:
            progress(i - 1, total, f"{cell.target} {cell.dtype} {cell.size_text} "
                                   f"{cell.layout} t{cell.threads_text}")
        cr = load_finished(out, i, cell) if resume else None
        if cr is not None:
            kept += 1
        elif isolate:
            cr = run_cell_isolated(i, cell, out, seed, replay_samples, timeout)
        else:
            cr = _run_cell(i, cell, out, seed, replay_samples)
        if cr.tree is not None:
            tid = ids.get(cr.tree)
            if tid is None:
                tid = ids[cr.tree] = _tree_id(len(ids))
                result.trees[tid] = cr.tree
            cr.tree_id = tid
        result.cells.append(cr)
    if kept:
        result.notes.append(f"{kept} of {total} cells kept from an earlier run in this folder "
                            f"(--force redoes them)")
    if progress:
        progress(total, total, "comparing cells")
    result.comparisons = compare_cells(result.cells)
    result.environment = capture_environment()
    result.seconds = time.perf_counter() - t0
    if progress:
        progress(total, total, "")
    return result
