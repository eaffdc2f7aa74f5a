"""``fpscope matrix --dask ADDRESS``: run the matrix suite on every worker of a Dask cluster.

Each Dask worker stands for one machine or environment. For every worker the client asks, in a
child process on that worker, which libraries import there and what the environment is
(:func:`fpscope.environment.capture_environment`), then submits the worker's cells one at a time,
pinned to it (``workers=[address], allow_other_workers=False``). Every cell runs in a child
process on the worker (:func:`fpscope.matrix_resume.run_in_child`), which inherits the worker's
environment variables (``OPENBLAS_CORETYPE``, ``OMP_NUM_THREADS``, ...), so a cell that crashes
its process is a "failed" cell and the worker goes on. The record comes back to the client, which
writes it atomically as soon as it arrives.

Layout of ``DIR``::

    DIR/fleet-run.json                  the marker: {"kind": "fleet-run", "suite": name}
    DIR/<worker>/                       a matrix folder (fpscope.matrix) of each worker, plus
    DIR/<worker>/worker.json            {"name", "address", "environment"}
    DIR/fleet.json, DIR/fleet.html      the comparison (fpscope.fleet.compare.write_fleet)

``<worker>`` is the Dask worker's name (stable across restarts; its address otherwise) with
characters other than letters, digits, ``.``, ``_`` and ``-`` replaced by ``_``. An interrupted
run keeps every record written; a re-run of the same suite into DIR resumes (only the missing
cells run; ``force`` redoes all). A worker that leaves the cluster for longer than
``leave_timeout`` seconds has its missing cells reported as failed ("worker left the cluster").
"""

from __future__ import annotations

import json
import pickle
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..matrix import CellResult, MatrixError, MatrixResult, check_output, compare_cells, suite_cells

__all__ = ["FLEET_MARKER", "WorkerRun", "folder_name", "run_fleet"]

#: The marker of a fleet folder.
FLEET_MARKER = "fleet-run.json"


@dataclass
class WorkerRun:
    """One worker's part of a fleet run.

    Attributes:
        name: the folder name (sanitized Dask worker name).
        address: the worker's address ("tcp://host:port").
        folder: ``DIR/<name>``.
        result: the worker's matrix (cells in suite order).
        kept: cells kept from an earlier run; ran: cells revealed in this run.
        left: why the worker's missing cells failed ("worker left the cluster"), or None.
    """

    name: str
    address: str
    folder: Path
    result: MatrixResult
    kept: int = 0
    ran: int = 0
    left: str | None = None
    pending: list = field(default_factory=list)


def folder_name(name) -> str:
    """A Dask worker name (or address) as a folder name: "tcp://10.0.0.1:4000" -> "tcp_10.0.0.1_4000"."""
    text = re.sub(r"[^A-Za-z0-9._-]+", "_", str(name)).strip("._") or "worker"
    return text


def _import_dask():
    try:
        import distributed
    except ImportError:
        raise MatrixError("--dask needs Dask's distributed package: pip install 'fpscope[dask]'"
                          ) from None
    return distributed


def _check_fleet_dir(out: Path, suite: str, force: bool) -> None:
    """Refuse DIR unless it is missing, empty, a fleet folder of ``suite``, or ``force``."""
    check_output(out, force=True)
    if force or not out.is_dir() or not any(out.iterdir()):
        return
    try:
        marker = json.loads((out / FLEET_MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        marker = None
    if not isinstance(marker, dict) or marker.get("kind") != "fleet-run":
        raise MatrixError(f"{out} exists, is not empty and is not a fleet folder; choose another "
                          f"folder or pass --force to replace its files")
    if marker.get("suite") != suite:
        raise MatrixError(f"{out} holds a fleet run of suite {marker.get('suite')!r}, not "
                          f"{suite!r}; choose another folder or pass --force")


def _workers(client) -> dict:
    """address -> Dask name of the workers now in the cluster."""
    info = client.scheduler_info(n_workers=-1)
    return {addr: w.get("name", addr) for addr, w in info.get("workers", {}).items()}


def _cells(suite, libraries) -> list:
    """The cells of ``suite`` on ``libraries``; a list of cells is taken as it is."""
    if not isinstance(suite, str) and suite and all(hasattr(c, "slug") for c in suite):
        return list(suite)
    return suite_cells(suite, libraries)


def _label(cell) -> str:
    return f"{cell.target} {cell.dtype} {cell.size_text} {cell.layout} t{cell.threads_text}"


def run_fleet(
    address,
    out_dir,
    suite: str | Sequence = "quick",
    *,
    force: bool = False,
    seed: int = 0,
    replay_samples: int = 32,
    libraries: Sequence[str] | None = None,
    timeout: float | None = None,
    leave_timeout: float = 30.0,
    progress: Callable[[str, int, int, str], None] | None = None,
) -> dict[str, WorkerRun]:
    """Run ``suite`` on every worker of the Dask cluster at ``address`` (module docstring).

    Args:
        address: the scheduler's address ("tcp://host:8786"), or a ``distributed.Client``.
        out_dir: DIR (module docstring); created when its parent exists.
        suite: a suite name of :data:`fpscope.matrix.SUITES`, a list of blocks, or a list of
            cells (both "custom").
        force: redo every cell (replace the records of an earlier run).
        seed, replay_samples: as :func:`fpscope.matrix.run_matrix`.
        libraries: libraries and backends to try (None: all); each worker skips those that do
            not import there, with a note.
        timeout: seconds before one cell's process is killed (None: no limit).
        leave_timeout: seconds a worker may be gone before its missing cells are failed.
        progress: optional callback(worker, cells done, cells total, text of the cell just
            finished, e.g. "numpy.dot fp32 n=64 C t1: ok").

    Returns:
        worker folder name -> :class:`WorkerRun`, in the cluster's worker order.

    Raises:
        MatrixError: one line: distributed missing, no scheduler at ``address``, no workers,
            DIR refused, unknown suite or library.
        fpscope.fleet.FleetError: fleet.json cannot be written.
    """
    distributed = _import_dask()
    suite_name = suite if isinstance(suite, str) else "custom"
    _cells(suite, [])  # an unknown suite fails before connecting
    out = Path(out_dir)
    _check_fleet_dir(out, suite_name, force)
    own = not isinstance(address, distributed.Client)
    try:
        client = distributed.Client(address, timeout=30) if own else address
    except (OSError, TimeoutError) as exc:
        raise MatrixError(f"cannot reach the Dask scheduler at {address}: {exc}") from None
    try:
        return _run(client, distributed, out, suite, suite_name, force, seed, replay_samples,
                    libraries, timeout, leave_timeout, progress)
    finally:
        if own:
            client.close()


def _run(client, distributed, out, suite, suite_name, force, seed, samples, libraries, timeout,
         leave_timeout, progress) -> dict:
    from ..matrix_resume import load_finished, open_output, result_from_child, run_in_child, write_cell
    from ..record import write_text_atomic

    workers = _workers(client)
    if not workers:
        raise MatrixError(f"the Dask cluster at {client.scheduler.address} has no workers")
    out.mkdir(exist_ok=True)
    write_text_atomic(out / FLEET_MARKER,
                      json.dumps({"kind": "fleet-run", "suite": suite_name}) + "\n")
    wanted = list(libraries) if libraries is not None else None
    infos = {addr: client.submit(run_in_child, pickle.dumps(("info", wanted)), 300,
                                 workers=[addr], allow_other_workers=False, pure=False)
             for addr in workers}
    runs: dict = {}
    used: dict = {}
    for addr, name in workers.items():
        fname = folder_name(name)
        if fname in used:
            fname = folder_name(f"{name}-{addr}")
        used[fname] = addr
        try:
            info = infos[addr].result(timeout=max(leave_timeout, 120.0))
        except Exception as exc:  # noqa: BLE001 - the worker left, or its child failed
            if progress:
                progress(fname, 0, 0, f"worker left the cluster before its cells started "
                                      f"({type(exc).__name__}); no folder written")
            continue
        if "error" in info:
            raise MatrixError(f"worker {name}: {info['error']}")
        folder, resume = open_output(out / fname, suite_name, force)
        result = MatrixResult(suite_name, notes=list(info["notes"]),
                              libraries=list(info["libraries"]),
                              environment=info.get("environment") or {})
        run = WorkerRun(fname, addr, folder, result)
        write_text_atomic(folder / "worker.json", json.dumps(
            {"name": str(name), "address": addr, "environment": result.environment},
            indent=2, default=str) + "\n")
        for i, cell in enumerate(_cells(suite, info["libraries"]), start=1):
            cr = load_finished(folder, i, cell) if resume else None
            if cr is None:
                run.pending.append((i, cell))
                cr = CellResult(i, cell, "failed", error="not run")
            else:
                run.kept += 1
            result.cells.append(cr)
        runs[fname] = run

    def submit(run):
        i, cell = run.pending.pop(0)
        fut = client.submit(run_in_child, pickle.dumps(("cell", i, cell, seed, samples)), timeout,
                            workers=[run.address], allow_other_workers=False, pure=False)
        return fut, run, i, cell

    flying = {}
    for run in runs.values():
        if run.pending:
            fut, *rest = submit(run)
            flying[fut] = rest
    gone_since: dict = {}
    t0 = time.perf_counter()
    while flying:
        try:
            done, _ = distributed.wait(list(flying), timeout=1.0, return_when="FIRST_COMPLETED")
        except TimeoutError:  # none finished within the second: look at the workers
            done = ()
        for fut in done:
            run, i, cell = flying.pop(fut)
            try:
                answer = fut.result()
            except Exception as exc:  # noqa: BLE001 - KilledWorker, CancelledError, ...
                answer = {"status": "failed", "error": f"{type(exc).__name__}: {exc}"}
            cr = write_cell(result_from_child(i, cell, answer), run.folder)
            run.result.cells[i - 1] = cr
            run.ran += 1
            if progress:
                progress(run.name, run.kept + run.ran, len(run.result.cells),
                         f"{_label(cell)}: {cr.status}")
            if run.pending:
                nxt, *rest = submit(run)
                flying[nxt] = rest
        present = set(_workers(client))
        now = time.perf_counter()
        for fut, (run, i, cell) in list(flying.items()):
            if run.address in present:
                gone_since.pop(run.address, None)
                continue
            if now - gone_since.setdefault(run.address, now) < leave_timeout:
                continue
            run.left = f"worker left the cluster (gone for {leave_timeout:g} s)"
            fut.cancel()
            del flying[fut]
            for j, c in [(i, cell)] + run.pending:
                run.result.cells[j - 1] = CellResult(j, c, "failed", error=run.left)
            run.pending.clear()
            if progress:
                progress(run.name, len(run.result.cells), len(run.result.cells), run.left)
    elapsed = time.perf_counter() - t0
    for run in runs.values():
        _finish(run, elapsed)
    from .compare import write_fleet

    write_fleet({run.name: run.folder for run in runs.values()}, out, force=True)
    return runs


def _finish(run: WorkerRun, seconds: float) -> None:
    """Tree ids, comparisons, notes, matrix.json and index.html of one worker."""
    from ..matrix import _tree_id
    from ..report import write_report

    res = run.result
    ids: dict = {}
    for cr in res.cells:
        if cr.tree is not None:
            tid = ids.get(cr.tree)
            if tid is None:
                tid = ids[cr.tree] = _tree_id(len(ids))
                res.trees[tid] = cr.tree
            cr.tree_id = tid
    if run.kept:
        res.notes.append(f"{run.kept} of {len(res.cells)} cells kept from an earlier run in this "
                         f"folder (--force redoes them)")
    if run.left:
        res.notes.append(f"{run.left}: its missing cells are reported as failed")
    res.notes.append(f"worker {run.name} at {run.address}")
    res.comparisons = compare_cells(res.cells)
    res.seconds = seconds
    write_report(res, run.folder)
