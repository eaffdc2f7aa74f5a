"""Faults of a matrix run: resume into the same folder, and cells run in a child process.

* **Resume.** :func:`open_output` marks a matrix folder with ``DIR/matrix-run.json`` (the suite's
  name) when a run starts. A later run of the same suite into that folder keeps every cell whose
  record ``DIR/cells/<slug>.json`` is present, valid and of the same cell (the record's
  ``matrix.cell`` equals the cell's conditions) and reveals only the others (:func:`load_finished`);
  ``force`` redoes all. A folder that is not empty and is not a matrix folder of that suite is
  refused. Records are written atomically (a temporary file, then a rename), so an interrupted
  run (Ctrl-C, a killed process) leaves only whole records.
* **Isolation.** :func:`run_cell_isolated` reveals one cell in a child process
  (``python -m fpscope.matrix_resume``) that inherits this process's environment variables (so
  ``OPENBLAS_CORETYPE`` or ``OMP_NUM_THREADS`` apply to it). A cell that kills its process
  (``os._exit``, a segmentation fault) or runs past ``timeout`` becomes a "failed" cell with the
  reason (exit code or signal, last line of its stderr), and the run goes on.
  :func:`run_in_child` is the same step returning plain data; :mod:`fpscope.fleet.run` calls it
  on Dask workers.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .matrix import Cell, CellResult, MatrixError, check_output, prepare_output

__all__ = ["MARKER", "CallableCell", "cell_identity", "check_resume", "load_finished",
           "open_output", "result_from_child", "run_cell_isolated", "run_in_child", "write_cell"]

#: The marker of a matrix folder: {"kind": "matrix-run", "suite": name}.
MARKER = "matrix-run.json"


@dataclass(frozen=True)
class CallableCell(Cell):
    """A cell that reveals a user callable (``path/to/file.py:function`` or ``module:function``,
    :func:`fpscope.targets.make_target`) instead of the library's own target, as a 1-D reduction
    of n = ``shape[0]`` summands: for custom suites and tests.

    Attributes:
        spec: the callable, e.g. ``"tests/fleet_targets.py:crash"``.
    """

    spec: str = ""

    @property
    def target(self) -> str:
        return self.spec

    def slug(self, index: int) -> str:
        """File name stem: "003-callable-crash-fp32-n8"."""
        name = "".join(ch if ch.isalnum() or ch in "._" else "_"
                       for ch in self.spec.rsplit(":", 1)[-1])
        return f"{index:03d}-callable-{name}-{self.dtype}-n{self.shape[0]}"

    def make_target(self):
        from .targets import make_target

        return make_target(self.spec, n=self.shape[0], dtype=self.dtype)


def cell_identity(cell) -> dict:
    """The cell's conditions as the record stores them (``record["matrix"]["cell"]``)."""
    return json.loads(json.dumps(cell.to_json()))


def _read_marker(out: Path) -> dict | None:
    """The marker, or one made from ``matrix.json`` (folders written before the marker)."""
    for name in (MARKER, "matrix.json"):
        try:
            data = json.loads((out / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and name == MARKER:
            return data
        if isinstance(data, dict) and data.get("kind") == "matrix":
            return {"kind": "matrix-run", "suite": data.get("suite")}
    return None


def check_resume(out_dir, suite: str, force: bool = False) -> bool:
    """Check ``out_dir`` for a run of ``suite``; creates nothing.

    Returns:
        True when the run resumes (the folder is a matrix folder of ``suite`` and not
        ``force``), False for a fresh run (missing or empty folder, or ``force``).

    Raises:
        MatrixError: one line: the folder is a file, its parent is missing, or it is not empty
            and not a matrix folder of ``suite`` (without ``force``).
    """
    out = Path(out_dir)
    check_output(out, force=True)  # a file, or a missing parent folder
    try:
        nonempty = out.is_dir() and any(out.iterdir())
    except OSError as exc:
        raise MatrixError(f"cannot read {out}: {exc.strerror or exc}") from None
    if force or not nonempty:
        return False
    marker = _read_marker(out)
    if marker is None or marker.get("kind") != "matrix-run":
        raise MatrixError(f"{out} exists, is not empty and is not a matrix folder; choose another "
                          f"folder or pass --force to replace its files")
    if marker.get("suite") != suite:
        raise MatrixError(f"{out} holds a run of suite {marker.get('suite')!r}, not {suite!r}; "
                          f"choose another folder or pass --force to replace its files")
    return True


def open_output(out_dir, suite: str, force: bool = False) -> tuple[Path, bool]:
    """Prepare ``out_dir`` for a run of ``suite``: resume, or start fresh
    (:func:`fpscope.matrix.prepare_output`), then write the marker.

    Returns:
        (the folder, whether the run resumes).

    Raises:
        MatrixError: see :func:`check_resume`; the folder cannot be written.
    """
    from .record import write_text_atomic

    resume = check_resume(out_dir, suite, force)
    out = Path(out_dir)
    try:
        if resume:  # keep the records; make the sub-folders an interrupted run may lack
            for sub in ("cells", "trees"):
                (out / sub).mkdir(exist_ok=True)
        else:
            out = prepare_output(out_dir, force)
        write_text_atomic(out / MARKER, json.dumps({"kind": "matrix-run", "suite": suite}) + "\n")
    except OSError as exc:
        raise MatrixError(f"cannot write to {out}: {exc.strerror or exc}") from None
    return out, resume


def load_finished(out: Path, index: int, cell) -> CellResult | None:
    """The cell's result from its record in ``out/cells/`` when an earlier run finished it.

    Returns:
        A CellResult ("ok", or "failed" when the record keeps a failed check; ``seconds`` 0),
        or None when the record is missing, unreadable, not a reveal record, or of another cell.
    """
    from .record import RecordError, load_record
    from .tree import SumTree

    name = f"cells/{cell.slug(index)}.json"
    path = Path(out) / name
    if not path.is_file():
        return None
    try:
        rec = load_record(path)
        meta = rec.get("matrix") or {}
        if rec.get("kind") != "reveal" or meta.get("cell") != cell_identity(cell):
            return None
        tree = SumTree.from_json(rec["tree"])
    except (RecordError, KeyError, TypeError, ValueError):
        return None
    failed = meta.get("failed")
    return CellResult(index, cell, "failed" if failed else "ok", record_file=name, tree=tree,
                      summary=rec.get("summary"), error=failed, record=rec)


def write_cell(cr: CellResult, out: Path) -> CellResult:
    """Write ``cr.record`` (when there is one) atomically to ``out/cells/<slug>.json`` and set
    ``cr.record_file``; a tree too deep for Python's json module becomes a note in ``cr.error``.

    Raises:
        OSError: the folder is not writable.
    """
    from .record import write_record

    if cr.record is None:
        return cr
    name = f"cells/{cr.cell.slug(cr.index)}.json"
    try:
        write_record(cr.record, Path(out) / name, overwrite=True)
        cr.record_file = name
    except RecursionError:  # json nests one level per tree level (fpscope.record.dumps)
        note = "record not written: the tree is too deep for Python's json module"
        cr.error = f"{cr.error}; {note}" if cr.error else note
    return cr


# -- the child process ---------------------------------------------------------------------------

def _exit_reason(code: int, stderr: str) -> str:
    """"process exited with code 3: <last stderr line>" / "process killed by SIGSEGV: ..."."""
    if code < 0:
        try:
            what = f"process killed by {signal.Signals(-code).name}"
        except ValueError:
            what = f"process killed by signal {-code}"
    else:
        what = f"process exited with code {code}"
    lines = [x.strip() for x in (stderr or "").splitlines() if x.strip()]
    return f"{what}: {lines[-1]}" if lines else what


def run_in_child(payload: bytes, timeout: float | None = None) -> dict:
    """Run one job of :func:`_child_main` in a child Python process with this process's
    environment variables, and return its answer.

    Args:
        payload: ``pickle.dumps(("cell", index, cell, seed, replay_samples))`` or
            ``pickle.dumps(("info", libraries or None))``.
        timeout: seconds before the child is killed (None: no limit).

    Returns:
        For "cell": {"status", "error", "summary", "seconds", "record" (the record as JSON text, or
        None)}; a child that dies or times out gives status "failed" with the reason. For
        "info": {"libraries", "notes", "environment", "hostname"}, or {"error": reason}.
    """
    with tempfile.TemporaryDirectory(prefix="fpscope-cell-") as tmp:
        job, answer = Path(tmp) / "job.pickle", Path(tmp) / "answer.json"
        job.write_bytes(payload)
        cmd = [sys.executable, "-m", "fpscope.matrix_resume", str(job), str(answer)]
        try:
            proc = subprocess.run(cmd, env=dict(os.environ), capture_output=True, text=True,
                                  timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            return {"status": "failed", "error": f"timed out after {timeout:g} s",
                    "seconds": timeout, "record": None, "summary": None}
        if proc.returncode == 0 and answer.is_file():
            return json.loads(answer.read_text(encoding="utf-8"))
        reason = _exit_reason(proc.returncode, proc.stderr)
        return {"status": "failed", "error": reason, "record": None, "summary": None,
                "seconds": 0.0}


def result_from_child(index: int, cell, answer: dict) -> CellResult:
    """The CellResult of a cell answer of :func:`run_in_child` (record parsed, tree rebuilt)."""
    from .record import json_loads
    from .tree import SumTree

    cr = CellResult(index, cell, answer.get("status", "failed"), error=answer.get("error"),
                    summary=answer.get("summary"), seconds=float(answer.get("seconds") or 0.0))
    if answer.get("record"):
        cr.record = json_loads(answer["record"])
        cr.tree = SumTree.from_json(cr.record["tree"])
    return cr


def run_cell_isolated(index: int, cell, out: Path, seed: int = 0, replay_samples: int = 32,
                      timeout: float | None = None) -> CellResult:
    """Reveal one cell in a child process and write its record into ``out/cells/`` (see
    :func:`run_in_child`; a crash or a timeout gives a "failed" cell without a record)."""
    answer = run_in_child(pickle.dumps(("cell", index, cell, seed, replay_samples)), timeout)
    return write_cell(result_from_child(index, cell, answer), out)


def _child_main(job: Path, answer: Path) -> None:
    """The child: run the pickled job and write its answer as JSON to ``answer``."""
    from .record import dumps, write_text_atomic

    kind, *args = pickle.loads(job.read_bytes())
    if kind == "info":
        import socket

        from .environment import capture_environment
        from .matrix_collectives import available

        try:
            libs, notes = available(args[0])
            out = {"libraries": libs, "notes": notes, "hostname": socket.gethostname()}
        except MatrixError as exc:
            out = {"error": str(exc)}
        out["environment"] = capture_environment()
        write_text_atomic(answer, json.dumps(out, default=str))
        return
    from .matrix import _run_cell

    index, cell, seed, samples = args
    cr = _run_cell(index, cell, None, seed, samples)
    out = {"status": cr.status, "error": cr.error, "summary": cr.summary, "seconds": cr.seconds,
           "record": None}
    if cr.record is not None:
        try:
            out["record"] = dumps(cr.record)
        except RecursionError:
            note = "record not written: the tree is too deep for Python's json module"
            out["error"] = f"{cr.error}; {note}" if cr.error else note
    write_text_atomic(answer, json.dumps(out))


if __name__ == "__main__":
    _child_main(Path(sys.argv[1]), Path(sys.argv[2]))
