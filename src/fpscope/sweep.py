"""Reveal one operation under several probe conditions and report where its tree changes.

Field cases it answers (fpscope shared/cases): the order of OpenBLAS's AVX-512 sum depended on
the input's address modulo 64 bytes (C4); torch's CPU matmul uses different K-orders for 1 and 2
rows (C5). A sweep reveals the tree for each value of one condition (byte offset, number of
rows, thread count, n, ...), groups equal trees and lists the values where the tree changes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable

from .reveal import RevealError, reveal
from .targets.base import Target, TargetError
from .tree import SumTree


@dataclass
class SweepResult:
    """``rows``: one dict per value: value, tree_id ("A", "B", ...; None on error), error.
    ``trees``: tree_id -> SumTree; ``changes``: (previous value, value) pairs where the tree id
    changes from one value to the next."""

    parameter: str
    rows: list = field(default_factory=list)
    trees: dict = field(default_factory=dict)

    @property
    def changes(self) -> list:
        out, prev = [], None
        for row in self.rows:
            if row["tree_id"] is None:
                continue
            if prev is not None and prev["tree_id"] != row["tree_id"]:
                out.append((prev["value"], row["value"]))
            prev = row
        return out

    def to_json(self) -> dict:
        return {
            "parameter": self.parameter,
            "rows": self.rows,
            "trees": {k: t.to_json() for k, t in self.trees.items()},
            "changes": [list(c) for c in self.changes],
        }


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
    """Reveal ``build(value)`` for every value; equal trees share an id.

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
            row["failure"] = ("check" if isinstance(exc, RevealError) and exc.kind != "units"
                              else "input")
        else:
            tid = ids.get(r.tree)
            if tid is None:
                tid = ids[r.tree] = _tree_id(len(ids))
                res.trees[tid] = r.tree
            row["tree_id"] = tid
            row["probes"] = r.stats.probes
        finally:
            target.close()
        res.rows.append(row)
    return res
