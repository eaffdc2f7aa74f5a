"""Reveal one operation under several probe conditions and report where its tree changes.

Field cases it answers (fpscope shared/cases): the order of OpenBLAS's AVX-512 sum depended on
the input's address modulo 64 bytes (C4); torch's CPU matmul uses different K-orders for 1 and 2
rows (C5). A sweep reveals the tree for each value of one condition (byte offset, number of
rows, thread count, n, an environment variable ...), groups equal trees and equal node
arithmetics, and lists the values where either changes and what changed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable

import numpy as np

from .reveal import RevealError, reveal
from .targets.base import Target, TargetError
from .tree import SumTree


@dataclass
class SweepResult:
    """``rows``: one dict per value: value, tree_id ("A", "B", ...; None on error; output
    (0, 0)'s or element 0's where outputs use several trees, then also ``classes``: the tree
    ids of every class, by first position, ``ranges``: how many ranges of consecutive positions
    they form, ``position_word``: "output" or "element" (collectives), ``classes_id``: equal
    for equal trees by position),
    arithmetic_id ("a1", "a2", ...: the node arithmetic, :class:`fpscope.arithmetic.Arithmetic`),
    error. ``trees``: tree_id -> SumTree; ``specs``: tree_id -> target spec; ``arithmetics``: arithmetic_id -> Arithmetic;
    ``changes``: (previous value, value) pairs where the tree or the arithmetic changes from one
    revealed value to the next; ``change_details``: what changed at each."""

    parameter: str
    rows: list = field(default_factory=list)
    trees: dict = field(default_factory=dict)
    arithmetics: dict = field(default_factory=dict)
    #: tree_id -> the target spec of the first value revealing that tree (its layout and
    #: shape name the memory order a summary follows: fpscope.summary.summarize(spec=))
    specs: dict = field(default_factory=dict)

    def _pairs(self):
        prev = None
        for row in self.rows:
            if row["tree_id"] is None:
                continue
            if prev is not None and _identity(prev) != _identity(row):
                yield prev, row
            prev = row

    @property
    def changes(self) -> list:
        return [(a["value"], b["value"]) for a, b in self._pairs()]

    @property
    def change_details(self) -> list:
        """One dict per change: ``from``, ``to`` (values), ``tree`` (e.g. "A -> B", or None when
        the tree stays), ``classes`` (where outputs use several trees and those or their
        positions change: {"name": "trees by output" / "trees by element", "a", "b"}, e.g.
        "A (every element)" -> "B,C,D,E (4 ranges)"; else None), ``arithmetic`` (the first
        differing item, as :meth:`fpscope.arithmetic.Arithmetic.first_difference`, or None)."""
        out = []
        for a, b in self._pairs():
            tree = None if a["tree_id"] == b["tree_id"] else f"{a['tree_id']} -> {b['tree_id']}"
            classes = None
            if a.get("classes_id") != b.get("classes_id"):
                word = a.get("position_word") or b.get("position_word") or "output"
                classes = {"name": f"trees by {word}",
                           "a": classes_text(a) or f"{a['tree_id']} (every {word})",
                           "b": classes_text(b) or f"{b['tree_id']} (every {word})"}
            arith = None
            ia, ib = a.get("arithmetic_id"), b.get("arithmetic_id")
            if ia != ib and ia in self.arithmetics and ib in self.arithmetics:
                arith = self.arithmetics[ia].first_difference(self.arithmetics[ib]) or {
                    "name": "node arithmetic of another output class", "a": ia, "b": ib}
            out.append({"from": a["value"], "to": b["value"], "tree": tree, "classes": classes,
                        "arithmetic": arith})
        return out

    def to_json(self) -> dict:
        return {
            "parameter": self.parameter,
            "rows": self.rows,
            "trees": {k: t.to_json() for k, t in self.trees.items()},
            "arithmetics": {k: {**a.to_json(), "described": a.describe()}
                            for k, a in self.arithmetics.items()},
            "changes": [list(c) for c in self.changes],
            "change_details": self.change_details,
        }


def _identity(row: dict) -> tuple:
    """What a change compares: output 0's tree, the trees by position, the node arithmetic."""
    return row["tree_id"], row.get("classes_id"), row.get("arithmetic_id")


def classes_text(row: dict) -> str | None:
    """``"A,B,C,D (4 ranges)"`` for a row whose outputs use several trees (the trees in
    position order, and how many ranges of consecutive positions they form), else None."""
    if not row.get("classes"):
        return None
    return f"{','.join(row['classes'])} ({row['ranges']} ranges)"


def _tree_id(k: int) -> str:
    letters = ""
    k += 1
    while k:
        k, r = divmod(k - 1, 26)
        letters = chr(65 + r) + letters
    return letters


def sweep(
    parameter: str,
    values: Iterable,
    build: Callable[[object], Target],
    progress: Callable[[object], None] | None = None,
    **reveal_kwargs,
) -> SweepResult:
    """Reveal ``build(value)`` for every value; equal trees share an id, and so do equal node
    arithmetics (node formats, product entries, output format).

    Args:
        parameter: name of the swept condition (for the report).
        values: the values, in the order to report them.
        build: makes the target for one value (raises TargetError for an impossible value).
        progress: optional callback(value) before each reveal.
        reveal_kwargs: passed to :func:`fpscope.reveal.reveal`.

    Returns:
        SweepResult. A value whose target cannot be built or whose reveal fails a check gets
        ``tree_id`` None, the one-line reason in ``error`` and in ``failure`` "input" (the
        target cannot be built or run, or n is too large for its accumulator) or "check" (a
        reveal check failed); the sweep goes on.
    """
    res = SweepResult(parameter)
    ids: dict[SumTree, str] = {}
    arith_ids: dict = {}
    class_ids: dict = {}
    for v in values:
        if progress:
            progress(v)
        row = {"value": v, "tree_id": None, "error": None}
        try:
            target = build(v)
        except TargetError as exc:
            row["error"], row["failure"] = str(exc), "input"
            res.rows.append(row)
            continue
        try:
            r = reveal(target, **reveal_kwargs)
        except (RevealError, TargetError) as exc:
            row["error"] = str(exc)
            row["failure"] = ("check" if isinstance(exc, RevealError) and exc.kind not in ("units", "nan")
                              else "input")
        else:
            spec = target.spec()

            def tree_id(tree):
                tid = ids.get(tree)
                if tid is None:
                    tid = ids[tree] = _tree_id(len(ids))
                    res.trees[tid] = tree
                    res.specs[tid] = spec
                return tid

            row["tree_id"] = tree_id(r.tree)
            collective = bool(spec.get("world_size"))
            if r.classes:
                # the trees along the outputs (class order: by first position), and how many
                # ranges of consecutive positions they form (row-major)
                row["classes"] = [tree_id(c["tree"]) for c in r.classes]
                labels = np.zeros(r.classes[0]["mask"].shape, dtype=np.int64)
                for k, c in enumerate(r.classes):
                    labels[c["mask"]] = k
                flat = labels.reshape(-1)
                row["ranges"] = int(1 + np.count_nonzero(flat[1:] != flat[:-1]))
                row["position_word"] = "element" if collective else "output"
            if r.classes:
                # the trees by position: another class's tree or positions is a change; a
                # collective's positions scale with the buffer, so there the trees and their
                # ranges count
                ckey = (tuple((c["tree"],) + (() if collective else
                                              (c["mask"].tobytes(), c["mask"].shape))
                              for c in r.classes), row["ranges"] if collective else None)
                row["classes_id"] = class_ids.setdefault(ckey, f"c{len(class_ids) + 1}")
            if r.arithmetic is not None:
                # the classes whose node arithmetic is not output 0's belong to its identity
                key = (r.arithmetic, tuple((k, c["arithmetic"]) for k, c in
                                           enumerate(r.classes or ())
                                           if c["arithmetic"] != r.arithmetic))
                aid = arith_ids.get(key)
                if aid is None:
                    aid = arith_ids[key] = f"a{len(arith_ids) + 1}"
                    res.arithmetics[aid] = r.arithmetic
                row["arithmetic_id"] = aid
            row["probes"] = r.stats.probes
        finally:
            target.close()
        res.rows.append(row)
    return res
