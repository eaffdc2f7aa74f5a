"""Records: the JSON evidence fpscope writes (schema ``fpscope.record/1``, fpscope DESIGN.md).

A record is plain JSON: ``{"schema": "fpscope.record/1", "kind": ..., "target": {...}, "tree": ...,
"summary": "...", "probe": {...}, "environment": {...}, "validation": {...}}``, and optionally
``"accuracy": {...}`` (max and mean error in ulps against the exact sum, :mod:`fpscope.accuracy`;
older records lack it and still load). Loading parses
JSON only (no pickle, no code), checks the schema and the required keys, and refuses unknown
schema versions. Writing is atomic (a temporary file in the same folder, then a rename) and never
replaces an existing file unless asked.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import tempfile
from pathlib import Path

SCHEMA = "fpscope.record/1"
_REQUIRED = {"reveal": ("target", "tree", "probe")}


class RecordError(ValueError):
    """A record file is missing, malformed, of an unknown schema, or would be overwritten."""


def new_record(kind: str, **parts) -> dict:
    """A record dict with the schema header, creation time (UTC, ISO 8601) and ``parts``."""
    from . import __version__

    rec = {
        "schema": SCHEMA,
        "kind": kind,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "fpscope_version": __version__,
    }
    rec.update(parts)
    return rec


_TREE_SLOT = "\u0000fpscope-tree\u0000"


def dumps(record: dict) -> str:
    """Indented JSON, except the tree, which is written compactly on one line (a tree of 16384
    leaves would otherwise take 49,000 lines)."""
    if "tree" not in record:
        return json.dumps(record, indent=2, allow_nan=False, default=_default) + "\n"
    body = dict(record, tree=_TREE_SLOT)
    text = json.dumps(body, indent=2, allow_nan=False, default=_default)
    tree = json.dumps(record["tree"], separators=(",", ":"), allow_nan=False, default=_default)
    return text.replace(json.dumps(_TREE_SLOT), tree, 1) + "\n"


def _default(obj):
    import numpy as np

    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    raise TypeError(f"{type(obj).__name__} is not JSON serialisable")


def write_record(record: dict, path, overwrite: bool = False) -> Path:
    """Write ``record`` to ``path`` atomically.

    Raises:
        RecordError: the file exists and ``overwrite`` is False, or the folder is missing.
    """
    path = Path(path)
    if path.exists() and not overwrite:
        raise RecordError(f"{path} exists; choose another name or pass --force to replace it")
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise RecordError(f"folder {folder} does not exist")
    text = dumps(record)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; a record is an ordinary file
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def load_record(path) -> dict:
    """Read and validate a record.

    Raises:
        RecordError: unreadable file, invalid JSON, not an object, unknown or missing schema,
            missing required keys for its kind.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RecordError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        rec = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RecordError(f"{path} is not valid JSON (line {exc.lineno}: {exc.msg})") from None
    return validate_record(rec, str(path))


def validate_record(rec, where: str = "record") -> dict:
    """Check the schema header and required keys of a parsed record (see :func:`load_record`)."""
    if not isinstance(rec, dict):
        raise RecordError(f"{where} is not a JSON object")
    schema = rec.get("schema")
    if schema is None:
        raise RecordError(f"{where} has no \"schema\" key; not an fpscope record")
    if schema != SCHEMA:
        raise RecordError(f"{where} has schema {schema!r}; this fpscope reads {SCHEMA!r}")
    kind = rec.get("kind", "reveal")
    missing = [k for k in _REQUIRED.get(kind, ()) if k not in rec]
    if missing:
        raise RecordError(f"{where} ({kind}) lacks required key(s): {', '.join(missing)}")
    if kind == "reveal":
        for key in ("target", "probe"):
            if not isinstance(rec[key], dict):
                raise RecordError(f"{where}: \"{key}\" must be an object")
        for key in ("checks", "mask"):
            if key in rec["probe"] and not isinstance(rec["probe"][key], dict):
                raise RecordError(f"{where}: \"probe.{key}\" must be an object")
        for key in ("accumulator", "validation", "environment", "accuracy"):
            if key in rec and not isinstance(rec[key], dict):
                raise RecordError(f"{where}: \"{key}\" must be an object")
        shape = rec["target"].get("shape")
        if shape is not None and not (isinstance(shape, list) and all(isinstance(d, int) for d in shape)):
            raise RecordError(f"{where}: \"target.shape\" must be a list of integers")
    return rec


def record_arithmetic(rec: dict, default_format):
    """(accumulator Format, per-node Formats or None) of a reveal record's "accumulator" object;
    ``default_format`` when the record names no format.

    Raises:
        RecordError: the "accumulator" entry is not an object, or names an unknown format.
    """
    from .formats import get_format
    from .probes.accumulator import expand_run_lengths

    acc = rec.get("accumulator") or {}
    if not isinstance(acc, dict):
        raise RecordError('the record\'s "accumulator" must be an object')
    try:
        runs = acc.get("node_formats")
        if runs:
            fmts = [get_format(f) for f in expand_run_lengths(runs)]
            return min(fmts, key=lambda f: f.p), fmts
        return (get_format(acc["format"]) if acc.get("format") else default_format), None
    except (ValueError, TypeError) as exc:
        raise RecordError(f"bad \"accumulator\" entry: {exc}") from None
