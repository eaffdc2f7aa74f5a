"""Compare the matrix records of many workers: which machines sum each cell bit for bit alike.

A *worker folder* is the output of ``fpscope matrix -o DIR`` on one machine (see
:mod:`fpscope.matrix`): reveal records in ``DIR/cells/*.json`` and the manifest
``DIR/matrix.json``, optionally ``DIR/worker.json`` (``{"name", "address", "environment"}``,
written by ``fpscope matrix --dask``). A folder that holds reveal records directly (``DIR/*.json``)
is read too. Cells are matched across workers by their identity (:func:`cell_label`: the target
name and its conditions from the record's target spec), never by file name, so workers whose
suites skipped different libraries still line up.

For each cell the workers that have it are split into *groups*: two workers are in one group when
:func:`fpscope.diff.diff_trees` finds their records the same (same tree, same node arithmetic,
same output classes). Groups are listed largest first (ties: worker order), and every group after
the first is compared with the first by :mod:`fpscope.diff` (verdict, smallest differing
subtree, witness input).

``fleet.json`` (schema ``fpscope.fleet/1``)::

    {"schema": "fpscope.fleet/1",
     "workers": [{"name", "address", "environment", "folder"}, ...],
     "cells": [{"cell": "numpy.dot fp32 n=64 C t1",
                "groups": [["w1", "w2"], ["w3"]],
                "missing": [{"worker": "w4", "reason": "skipped: ..."}],
                "diff": [{"group": 2, "a": "w1", "b": "w3", "verdict": "different tree",
                          "same": false, "subtree": {...}, "parameter": null,
                          "witness": {...}, "notes": [...]}]}, ...]}
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["SCHEMA", "FleetError", "cell_label", "compare_folders", "fleet_text", "load_worker",
           "worker_folders", "write_fleet"]

SCHEMA = "fpscope.fleet/1"

#: files of a worker folder that are not reveal records
_NOT_RECORDS = ("matrix.json", "worker.json", "fleet.json")


class FleetError(ValueError):
    """A worker folder that is missing or holds no matrix records, two workers with one name, or
    an output that exists (without ``force``) or cannot be written. One-line message."""


# -- identity --------------------------------------------------------------------------------------

def cell_label(spec: Mapping) -> str:
    """The identity of a cell: target name and conditions, e.g. "numpy.dot fp32 n=64 C t1",
    "numpy.matmul fp32 2x256x16 F t2", "torch.distributed.all_reduce fp32 4 ranks x 4096".

    Args:
        spec: a record's target spec (:meth:`fpscope.targets.base.Target.spec`: ``name``,
            ``dtype``, ``n``, ``shape``, ``layout``, ``threads``, ...; collectives:
            ``world_size`` and ``n`` elements). Entries other than these, the output format
            (when it differs from the input's), a non-zero offset, axis and index, are added
            as ``key=value``; ``env`` and ``device`` are left out (they describe the machine).

    Raises:
        FleetError: the spec has no ``name``.
    """
    if not isinstance(spec, Mapping) or not spec.get("name"):
        raise FleetError("a record's target has no name")
    parts = [str(spec["name"])]
    if spec.get("dtype"):
        parts.append(str(spec["dtype"]))
    shape = spec.get("shape")
    if spec.get("world_size") is not None:
        parts.append(f"{spec['world_size']} ranks x {spec.get('n')}")
    elif isinstance(shape, (list, tuple)) and len(shape) > 1:
        parts.append("x".join(str(d) for d in shape))
    elif spec.get("n") is not None:
        parts.append(f"n={spec['n']}")
    if spec.get("layout") is not None:
        parts.append(str(spec["layout"]))
    if spec.get("threads") is not None:
        parts.append(f"t{spec['threads']}")
    if spec.get("out_dtype") not in (None, spec.get("dtype")):
        parts.append(f"out={spec['out_dtype']}")
    if spec.get("offset"):
        parts.append(f"offset={spec['offset']}")
    for key in ("axis", "index", "output"):
        if spec.get(key) is not None:
            parts.append(f"{key}={json.dumps(spec[key])}")
    return " ".join(parts)


def _manifest_spec(entry: Mapping) -> dict:
    """A manifest cell entry (:meth:`fpscope.matrix.CellResult.to_json`) as a target spec."""
    if entry.get("world_size") is not None:  # a collective: n is the element count
        return {"name": entry.get("target"), "dtype": entry.get("dtype"),
                "world_size": entry["world_size"], "n": entry.get("elements")}
    return {"name": entry.get("target"), "dtype": entry.get("dtype"), "n": entry.get("n"),
            "shape": entry.get("shape"), "layout": entry.get("layout"),
            "threads": entry.get("threads")}


# -- reading a worker ------------------------------------------------------------------------------

def _read_json(path: Path, what: str):
    from ..record import json_loads

    try:
        return json_loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise FleetError(f"cannot read {path}: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise FleetError(f"{path} is not a valid {what} (JSON)") from None


def _load_cell(path: Path) -> dict:
    """One record file as a cell entry: status, record, reason."""
    from ..record import RecordError, load_record

    try:
        rec = load_record(path)
    except RecordError as exc:
        return {"status": "unreadable", "record": None, "file": str(path),
                "reason": str(exc).splitlines()[0]}
    if rec.get("kind") != "reveal":
        return {"status": "not a reveal record", "record": None, "file": str(path),
                "reason": f"a {rec.get('kind')!r} record"}
    failed = (rec.get("matrix") or {}).get("failed")
    return {"status": "failed" if failed else "ok", "record": rec, "file": str(path),
            "reason": f"failed: {failed}" if failed else None}


def load_worker(folder) -> dict:
    """Read one worker's folder.

    Args:
        folder: a ``fpscope matrix`` output folder (``cells/*.json``, ``matrix.json``, optionally
            ``worker.json``), or a folder of reveal records.

    Returns:
        ``{"name", "address", "environment", "folder", "cells"}``: name, address and environment
        from ``worker.json`` when present, else the folder's name, None, and the manifest's (or
        the first record's) environment; ``cells`` maps :func:`cell_label` -> ``{"status"`` ("ok",
        "failed", "skipped", "no record", "unreadable"), ``"record"`` (the reveal record dict or
        None), ``"file"``, ``"reason"`` (None for "ok")``}``, in the manifest's (else file name)
        order.

    Raises:
        FleetError: no such folder, an unreadable ``worker.json`` or ``matrix.json``, or a folder
            without records or manifest.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise FleetError(f"{folder}: no such folder" if not folder.exists()
                         else f"{folder} is a file; a worker is a folder of matrix records")
    info = {}
    if (folder / "worker.json").is_file():
        info = _read_json(folder / "worker.json", "worker.json")
        if not isinstance(info, dict):
            raise FleetError(f"{folder / 'worker.json'}: expected an object with name, address "
                             f"and environment")
    manifest = None
    if (folder / "matrix.json").is_file():
        manifest = _read_json(folder / "matrix.json", "matrix manifest")
        if not isinstance(manifest, dict) or not isinstance(manifest.get("cells"), list):
            raise FleetError(f"{folder / 'matrix.json'} is not a matrix manifest (no cells)")
    cells: dict = {}
    if manifest is not None:
        for entry in manifest["cells"]:
            label = cell_label(_manifest_spec(entry))
            if entry.get("record"):
                path = folder / entry["record"]
                cell = _load_cell(path) if path.is_file() else \
                    {"status": "no record", "record": None, "file": str(path),
                     "reason": f"record {entry['record']} is missing"}
                if cell["record"] is not None:
                    label = cell_label(cell["record"].get("target"))
            else:  # skipped, or a record that could not be written (an "ok" cell's error)
                status = entry.get("status") if entry.get("status") in ("skipped", "failed") \
                    else "no record"
                cell = {"status": status, "record": None, "file": None,
                        "reason": f"{status}: {entry.get('error') or 'no record written'}"}
            cells.setdefault(label, cell)
    else:
        files = sorted((folder / "cells").glob("*.json")) if (folder / "cells").is_dir() else \
            sorted(p for p in folder.glob("*.json") if p.name not in _NOT_RECORDS)
        for path in files:
            cell = _load_cell(path)
            if cell["record"] is not None:
                cells.setdefault(cell_label(cell["record"].get("target")), cell)
    if not cells:
        raise FleetError(f"{folder}: no matrix records (expected cells/*.json or matrix.json, "
                         f"as fpscope matrix -o writes)")
    env = info.get("environment")
    if env is None:
        env = (manifest or {}).get("environment") or next(
            (c["record"].get("environment") for c in cells.values() if c["record"]), None) or {}
    return {"name": str(info.get("name") or folder.resolve().name),
            "address": info.get("address"), "environment": env, "folder": str(folder),
            "cells": cells}


def _is_worker(folder: Path) -> bool:
    return (folder / "matrix.json").is_file() or (folder / "cells").is_dir()


def worker_folders(dirs: Sequence) -> list[Path]:
    """The worker folders named by ``dirs``: one folder that is no worker itself but holds
    worker subfolders (each with ``cells/`` or ``matrix.json``, as ``fpscope matrix --dask``
    writes) stands for those subfolders, in name order; otherwise ``dirs`` as given.

    Raises:
        FleetError: no folder given, or a folder that does not exist.
    """
    paths = [Path(d) for d in dirs]
    if not paths:
        raise FleetError("no worker folders given")
    for p in paths:
        if not p.is_dir():
            raise FleetError(f"{p}: no such folder" if not p.exists() else
                             f"{p} is a file; a worker is a folder of matrix records")
    if len(paths) == 1 and not _is_worker(paths[0]):
        subs = sorted(p for p in paths[0].iterdir() if p.is_dir() and _is_worker(p))
        if subs:
            return subs
    return paths


# -- comparing -------------------------------------------------------------------------------------

def _same(a, b) -> bool:
    """fpscope.diff's "same" for two sides; trees that differ need no witness search."""
    from ..diff import diff_trees

    if a.tree != b.tree:
        return False
    return diff_trees(a, b, seed=0).same


def _diff_entry(k: int, a_name: str, b_name: str, a, b) -> dict:
    from ..diff import diff_trees

    try:
        res = diff_trees(a, b, seed=0).to_dict()
    except Exception as exc:  # noqa: BLE001 - one pair must not stop the fleet's comparison
        return {"group": k, "a": a_name, "b": b_name, "verdict": "not compared", "same": False,
                "subtree": None, "parameter": None, "witness": None,
                "notes": [f"{type(exc).__name__}: {exc}"]}
    res.pop("kind", None)
    sub = res.get("subtree")
    if sub:  # nested sub-trees stay out (their text forms stay): they can be too deep for json
        res["subtree"] = {k2: v for k2, v in sub.items() if k2 not in ("a", "b")}
    return {"group": k, "a": a_name, "b": b_name, **res}


def _compare_cell(label: str, workers: list) -> dict:
    from ..diff import DiffError, side_from_record
    from ..tree import TreeError

    missing, sides = [], []
    for w in workers:
        cell = w["cells"].get(label)
        if cell is None:
            missing.append({"worker": w["name"], "reason": "no such cell"})
        elif cell["status"] != "ok":
            missing.append({"worker": w["name"], "reason": cell["reason"] or cell["status"]})
        else:
            try:
                sides.append((w["name"], side_from_record(cell["record"], w["name"])))
            except (DiffError, TreeError, ValueError) as exc:
                missing.append({"worker": w["name"],
                                "reason": f"unreadable record: {str(exc).splitlines()[0]}"})
    groups: list = []  # [(representative side, [names])]
    for name, side in sides:
        for rep, names in groups:
            if _same(rep, side):
                names.append(name)
                break
        else:
            groups.append((side, [name]))
    groups.sort(key=lambda g: -len(g[1]))  # stable: ties keep worker order
    diffs = [_diff_entry(k, groups[0][1][0], names[0], groups[0][0], rep)
             for k, (rep, names) in enumerate(groups[1:], start=2)]
    return {"cell": label, "groups": [names for _, names in groups], "missing": missing,
            "diff": diffs}


def compare_folders(folders) -> dict:
    """Compare the workers' cells (module docstring).

    Args:
        folders: a list of worker folders (their names from ``worker.json`` or the folder
            name), or a mapping worker name -> folder.

    Returns:
        The content of ``fleet.json`` (schema ``fpscope.fleet/1``; module docstring). Cells are
        in order of first appearance over the workers.

    Raises:
        FleetError: as :func:`load_worker`; no folders; two workers with one name.
    """
    named = list(folders.items()) if isinstance(folders, Mapping) else \
        [(None, f) for f in folders]
    if not named:
        raise FleetError("no worker folders given")
    workers, seen = [], {}
    for name, folder in named:
        w = load_worker(folder)
        if name is not None:
            w["name"] = str(name)
        if w["name"] in seen:
            raise FleetError(f"two workers named {w['name']!r} ({seen[w['name']]} and {folder}); "
                             f"give each folder its own name (or a worker.json)")
        seen[w["name"]] = folder
        workers.append(w)
    labels: dict = {}
    for w in workers:
        for label in w["cells"]:
            labels.setdefault(label, None)
    return {"schema": SCHEMA,
            "workers": [{"name": w["name"], "address": w["address"],
                         "environment": w["environment"], "folder": w["folder"]}
                        for w in workers],
            "cells": [_compare_cell(label, workers) for label in labels]}


def fleet_text(fleet: dict) -> str:
    """One line per cell: "<cell>: 1 group", or "<cell>: 2 groups: [a, b] | [c]: <verdict of
    group 2>; ..." (the :mod:`fpscope.diff` verdict against group 1), plus "(no result: w)"
    for the workers without one; a last line counts workers and cells."""
    lines = []
    for c in fleet["cells"]:
        k = len(c["groups"])
        text = f"{c['cell']}: {k} group{'s' if k != 1 else ''}"
        if k > 1:
            text += ": " + " | ".join(f"[{', '.join(g)}]" for g in c["groups"])
            text += ": " + "; ".join(d["verdict"] for d in c["diff"])
        if c["missing"]:
            text += f" (no result: {', '.join(m['worker'] for m in c['missing'])})"
        lines.append(text)
    split = sum(len(c["groups"]) > 1 for c in fleet["cells"])
    lines.append(f"{len(fleet['workers'])} workers, {len(fleet['cells'])} cells, {split} "
                 f"differ between workers")
    return "\n".join(lines)


def write_fleet(folders, out, force: bool = False) -> Path:
    """Compare ``folders`` (:func:`compare_folders`) and write ``out/fleet.json`` and
    ``out/fleet.html`` (:func:`fpscope.fleet.report.render_fleet_html`), each atomically;
    ``out`` is created when its parent folder exists. Returns the path of fleet.json.

    Raises:
        FleetError: as :func:`compare_folders`; ``out`` is a file, its parent is missing, or
            fleet.json / fleet.html exist already and ``force`` is not set; a file cannot be
            written.
    """
    from ..record import json_text, write_text_atomic
    from .report import render_fleet_html

    out = Path(out)
    if out.exists() and not out.is_dir():
        raise FleetError(f"{out} is a file; -o needs a folder")
    parent = out.parent if str(out.parent) else Path(".")
    if not out.exists() and not parent.is_dir():
        raise FleetError(f"cannot create {out}: folder {parent} does not exist")
    for name in ("fleet.json", "fleet.html"):
        if (out / name).exists() and not force:
            raise FleetError(f"{out / name} exists; choose another folder or pass --force to "
                             f"replace it")
    fleet = compare_folders(folders)
    try:
        out.mkdir(exist_ok=True)
        path = write_text_atomic(out / "fleet.json", json_text(fleet, indent=2) + "\n")
        write_text_atomic(out / "fleet.html", render_fleet_html(fleet))
    except OSError as exc:
        raise FleetError(f"cannot write to {out}: {exc.strerror or exc}") from None
    return path
