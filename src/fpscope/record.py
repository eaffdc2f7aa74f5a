"""Records: the JSON evidence fpscope writes (schema ``fpscope.record/2``, fpscope DESIGN.md).

A record is plain JSON: ``{"schema": "fpscope.record/2", "kind": ..., "target": {...}, "tree": ...,
"summary": "...", "probe": {...}, "environment": {...}, "validation": {...}}``, and optionally
``"accuracy": {...}`` (max and mean error in ulps against the exact sum, :mod:`fpscope.accuracy`;
older records lack it and still load). The tree is in the flat form ``{"leaves": n, "nodes":
[...]}`` (:meth:`fpscope.tree.SumTree.to_flat`), which any JSON parser reads at any depth;
``fpscope.record/1`` records, whose trees are nested arrays, still load (read their trees with
:meth:`fpscope.tree.SumTree.from_json`, which takes both forms). Loading parses
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

SCHEMA = "fpscope.record/2"
SCHEMAS = ("fpscope.record/1", SCHEMA)  # the versions load_record reads (/1: nested trees)
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
    leaves would otherwise take 49,000 lines). Nesting of any depth (a nested /1 tree of n
    sequential leaves is n - 1 levels deep) is written without recursion."""
    if "tree" not in record:
        return json_text(record, indent=2) + "\n"
    body = dict(record, tree=_TREE_SLOT)
    text = json_text(body, indent=2)
    return text.replace(json.dumps(_TREE_SLOT), json_text(record["tree"]), 1) + "\n"


def json_text(obj, indent: int | None = None) -> str:
    """``json.dumps`` (NaN refused, numpy scalars and arrays accepted); for nesting deeper than
    Python's recursion limit, compact JSON written by an explicit stack instead."""
    try:
        if indent is None:
            return json.dumps(obj, separators=(",", ":"), allow_nan=False, default=_default)
        return json.dumps(obj, indent=indent, allow_nan=False, default=_default)
    except RecursionError:
        return _deep_dumps(obj)


def _deep_dumps(obj) -> str:
    out, stack = [], [obj]
    while stack:
        cur = stack.pop()
        if isinstance(cur, _Raw):
            out.append(cur.text)
        elif isinstance(cur, (list, tuple)):
            out.append("[")
            stack.append(_Raw("]"))
            for i in range(len(cur) - 1, -1, -1):
                stack.append(cur[i])
                if i:
                    stack.append(_Raw(","))
        elif isinstance(cur, dict):
            out.append("{")
            stack.append(_Raw("}"))
            items = list(cur.items())
            for i in range(len(items) - 1, -1, -1):
                key, val = items[i]
                stack.append(val)
                stack.append(_Raw(json.dumps(str(key)) + ":"))
                if i:
                    stack.append(_Raw(","))
        else:
            out.append(json.dumps(cur, allow_nan=False, default=_default))
    return "".join(out)


class _Raw:
    __slots__ = ("text",)

    def __init__(self, text: str):
        self.text = text


def json_loads(text: str):
    """``json.loads``, falling back to an explicit-stack parser for nesting deeper than
    Python's recursion limit (deep trees).

    Raises:
        json.JSONDecodeError: invalid JSON.
    """
    try:
        return json.loads(text)
    except RecursionError:
        return _deep_loads(text)


_WS = " \t\n\r"


def _deep_loads(text: str):
    """A JSON parser with an explicit stack (values as json.loads gives them)."""
    dec = json.JSONDecoder()
    stack: list = []  # open containers: [container, pending key or None]
    i, n = 0, len(text)
    root, have_root = None, False

    def put(value):
        nonlocal root, have_root
        if not stack:
            root, have_root = value, True
            return
        top = stack[-1]
        if isinstance(top[0], list):
            top[0].append(value)
        else:
            top[0][top[1]] = value
            top[1] = None

    while True:
        while i < n and text[i] in _WS:
            i += 1
        if i >= n:
            break
        ch = text[i]
        if ch == "[":
            stack.append([[], None])
            i += 1
        elif ch == "{":
            stack.append([{}, None])
            i += 1
        elif ch in "]}":
            if not stack:
                raise json.JSONDecodeError("unexpected closing bracket", text, i)
            done = stack.pop()[0]
            put(done)
            i += 1
        elif ch == ",":
            i += 1
        elif ch == '"' and stack and isinstance(stack[-1][0], dict) and stack[-1][1] is None:
            key, i = json.decoder.scanstring(text, i + 1)
            while i < n and text[i] in _WS:
                i += 1
            if i >= n or text[i] != ":":
                raise json.JSONDecodeError("expected ':'", text, i)
            stack[-1][1] = key
            i += 1
        else:
            value, i = dec.raw_decode(text, i)
            put(value)
        if have_root and not stack:
            while i < n and text[i] in _WS:
                i += 1
            if i != n:
                raise json.JSONDecodeError("extra data", text, i)
            return root
    raise json.JSONDecodeError("unexpected end of data", text, i)


def _default(obj):
    import numpy as np

    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    raise TypeError(f"{type(obj).__name__} is not JSON serialisable")


def check_new_file(path, overwrite: bool = False) -> Path:
    """Refuse an output path that is a folder, that exists (unless ``overwrite``) or whose
    folder is missing: every verb checks its outputs with this before it starts work.

    Raises:
        RecordError: one line naming the path.
    """
    path = Path(path)
    if path.is_dir():  # even with overwrite: a folder is never replaced by a file
        raise RecordError(f"{path} is a folder; give a file name (e.g. {path / 'out.json'})")
    if path.exists() and not overwrite:
        raise RecordError(f"{path} exists; choose another name or pass --force to replace it")
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise RecordError(f"cannot write {path}: folder {folder} does not exist")
    return path


def write_record(record: dict, path, overwrite: bool = False) -> Path:
    """Write ``record`` to ``path`` atomically.

    Raises:
        RecordError: the file exists and ``overwrite`` is False, the path is a folder, or its
            folder is missing.
    """
    return write_text_atomic(check_new_file(path, overwrite), dumps(record))


def write_text_atomic(path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` through a temporary file in the same folder and a
    rename, so that a reader never sees half a file.

    Raises:
        OSError: the folder is missing or not writable.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
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


def reveal_record(target, res, seed: int, environment: dict, **parts) -> dict:
    """The reveal record of ``res`` (a :class:`fpscope.reveal.RevealResult` of ``target``): the
    one layout ``fpscope reveal --record``, ``fpscope gate`` and ``fpscope matrix`` write;
    ``parts`` adds entries (accuracy, matrix, ...)."""
    from .summary import summarize

    return new_record(
        "reveal",
        target=target.spec(),
        tree=res.tree.to_json(),
        summary=summarize(res.tree, spec=target.spec()),
        accumulator=res.accumulator,
        **({"arithmetic": {**res.arithmetic.to_json(), "described": res.arithmetic.describe(),
                           "evidence": res.arithmetic_evidence}}
           if getattr(res, "arithmetic", None) is not None else {}),
        probe={
            "algorithm": res.algorithm,
            "mask": res.mask.to_json(),
            "calls": res.stats.calls,
            "probes": res.stats.probes,
            "seconds": round(res.stats.seconds, 6),
            "seed": seed,
            "checks": res.stats.checks,
        },
        environment=environment,
        validation={"replay": res.replay} if res.replay else {},
        **({"classes": classes_json(res.classes, spec=target.spec())}
           if getattr(res, "classes", None) else {}),
        **parts,
    )


def classes_json(classes: list, spec: dict | None = None) -> list:
    """The "classes" entry of a record: per class its flat tree, the output positions that use
    it (compact blocks, :func:`fpscope.reveal.classes.describe_positions`), their count, the
    summary and the node arithmetic."""
    from .reveal.classes import describe_positions
    from .summary import summarize

    out = []
    for c in classes:
        a = c["arithmetic"]
        out.append({"tree": c["tree"].to_json(), "outputs": describe_positions(c["mask"]),
                    "count": int(c["mask"].sum()), "grid": list(c["mask"].shape),
                    "summary": summarize(c["tree"], spec=spec if spec and spec.get("world_size")
                                         else None),
                    "arithmetic": None if a is None else {**a.to_json(),
                                                          "described": a.describe()}})
    return out


def probe_record(report: dict, spec: str, environment: dict) -> dict:
    """The record of a probe run (``ProbeReport.to_dict()``): kind "probe", the target with the
    ``spec`` it was built from (so that ``fpscope gate`` can re-probe it), the profile, the
    validation, and the rest of the report under "probe"."""
    d = dict(report)
    return new_record("probe", target={**d.pop("target"), "spec": spec},
                      profile=d.pop("profile"), validation=d.pop("validation"), probe=d,
                      environment=environment)


def load_record(path) -> dict:
    """Read and validate a record (schema ``fpscope.record/2``, or /1 whose tree is nested; read
    the tree with :meth:`fpscope.tree.SumTree.from_json`, which takes both forms).

    Raises:
        RecordError: unreadable file, invalid JSON, not an object, unknown or missing schema,
            missing required keys for its kind.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RecordError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise RecordError(f"{path} is not a text file (a record is JSON)") from None
    try:
        rec = json_loads(text)
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
    if schema not in SCHEMAS:
        raise RecordError(f"{where} has schema {schema!r}; this fpscope reads "
                          f"{' and '.join(map(repr, SCHEMAS))}")
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
        if "classes" in rec and not isinstance(rec["classes"], list):
            raise RecordError(f"{where}: \"classes\" must be a list")
        for key in ("accumulator", "arithmetic", "validation", "environment", "accuracy"):
            if key in rec and not isinstance(rec[key], dict):
                raise RecordError(f"{where}: \"{key}\" must be an object")
        shape = rec["target"].get("shape")
        if shape is not None and not (isinstance(shape, list) and all(isinstance(d, int) for d in shape)):
            raise RecordError(f"{where}: \"target.shape\" must be a list of integers")
    return rec


def record_arithmetic(rec: dict, default_format):
    """(accumulator Format, per-node Formats or None) of a reveal record: the narrowest node
    format and every node's format where they differ; ``default_format`` when the record names
    no format.

    Raises:
        RecordError: a malformed "arithmetic" or "accumulator" entry, or an unknown format.
    """
    arith = arithmetic_of_record(rec, 1)
    if arith is None or not arith.node_formats:
        return default_format, None
    fmts = arith.formats
    if arith.uniform_format is not None:
        return fmts[0], None
    return min(fmts, key=lambda f: f.p), fmts


def arithmetic_of_record(rec: dict, nodes: int | None):
    """The :class:`fpscope.arithmetic.Arithmetic` of a reveal record: its "arithmetic" entry
    (schema /2), or else the /1 "accumulator" entry (one format, or run-length node formats;
    products not modelled). None when the record has neither (or a /1 record names no format and
    ``nodes`` is None).

    Args:
        rec: a validated reveal record.
        nodes: the tree's number of internal nodes (for a /1 record with one format).

    Raises:
        RecordError: a malformed entry or an unknown format name.
    """
    from .arithmetic import Arithmetic, expand_run_lengths

    target = rec.get("target") or {}
    out = target.get("out_dtype") or target.get("dtype") or "fp32"
    try:
        if rec.get("arithmetic") is not None:
            return Arithmetic.from_json(rec["arithmetic"])
        acc = rec.get("accumulator") or {}
        if not isinstance(acc, dict):
            raise RecordError('the record\'s "accumulator" must be an object')
        runs = acc.get("node_formats")
        if runs:
            return Arithmetic(tuple(expand_run_lengths(runs)), None, out)
        name = acc.get("format") or target.get("dtype")
        if not name or nodes is None:
            return None
        return Arithmetic.uniform(nodes, name, out)
    except (ValueError, TypeError) as exc:
        if isinstance(exc, RecordError):
            raise
        raise RecordError(f"bad \"arithmetic\" entry: {str(exc).splitlines()[0]}") from None


def classes_of_record(rec: dict) -> list | None:
    """The output classes of a reveal record (matrix ops whose outputs use several trees):
    a list of (SumTree, boolean (M, N) positions, Arithmetic or None), or None when the record
    has no "classes" entry.

    Raises:
        RecordError: a malformed entry.
    """
    from .arithmetic import Arithmetic
    from .reveal.classes import positions_from_blocks
    from .tree import SumTree, TreeError

    raw = rec.get("classes")
    if not raw:
        return None
    out = []
    try:
        for c in raw:
            tree = SumTree.from_json(c["tree"])
            mask = positions_from_blocks(c["outputs"], c["grid"])
            a = c.get("arithmetic")
            out.append((tree, mask, None if a is None else Arithmetic.from_json(a)))
    except (KeyError, TypeError, ValueError, TreeError) as exc:
        raise RecordError(f"bad \"classes\" entry: {str(exc).splitlines()[0]}") from None
    return out
