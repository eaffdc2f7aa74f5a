"""Comparisons within one matrix run (:mod:`fpscope.matrix`): neighbouring cells that differ in
one condition (:func:`compare_cells`, by :mod:`fpscope.diff` or by tree family for n), and the
agreement table of the report (:func:`columns`, :func:`agreement_rows`: which libraries give
the same tree for one condition)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .matrix_collectives import is_collective

if TYPE_CHECKING:
    from .matrix import Cell, CellResult, MatrixResult


# -- comparisons -----------------------------------------------------------------------------------

#: Conditions along which neighbouring cells are compared, in the report's order.
DIMENSIONS = ("rows", "threads", "layout", "dtype", "library", "n")


def _key(cell: Cell, without: str) -> tuple:
    """The cell's conditions except ``without`` (and except threads for "library")."""
    parts = {"op": cell.op, "library": cell.library, "dtype": cell.dtype,
             "layout": cell.layout, "threads": cell.threads,
             "rows": cell.rows, "n": cell.n,
             "cols": cell.shape[2] if cell.op == "matmul" else None}
    parts.pop(without)
    if without == "library":
        parts.pop("threads")
    return tuple(sorted(parts.items(), key=lambda kv: kv[0]))


def _pairs(cells: list, dim: str) -> list:
    groups: dict = {}
    for c in cells:
        groups.setdefault(_key(c.cell, dim), []).append(c)
    out = []
    for members in groups.values():
        if len(members) < 2:
            continue
        if dim == "library":
            for a, b in itertools.combinations(members, 2):
                ta, tb = a.cell.threads, b.cell.threads
                if a.cell.library != b.cell.library and (ta == tb or ta is None or tb is None):
                    out.append((a, b))
        else:
            order = sorted(members, key=lambda c: (c.cell.rows or 0, c.cell.n, c.index)
                           if dim in ("rows", "n") else c.index)
            out.extend(itertools.pairwise(order))
    return out


def _side(cr: CellResult):
    from .diff import Side
    from .record import arithmetic_of_record

    return Side(f"#{cr.index}", tree=cr.tree, arith=arithmetic_of_record(cr.record, cr.tree.n_nodes))


def compare_cells(cells: Sequence[CellResult], max_pairs: int = 400) -> list:
    """Compare neighbouring cells: those that differ in exactly one condition.

    For "rows", "threads", "layout", "dtype" and "library" the two trees have the same leaves
    and are compared with :func:`fpscope.diff.diff_trees` (tree and node arithmetic; the
    smallest differing subtree; a witness input checked by replay). For "n" the leaf counts
    differ, so the families of the two trees (:func:`fpscope.summary.describe`) are compared.
    Library pairs match cells with equal thread counts, or any thread count for a library with
    fixed threads (jax). At most ``max_pairs`` pairs are compared per dimension.

    Returns:
        A list of dicts: ``dimension``, ``a`` and ``b`` (cell numbers), ``a_value`` and
        ``b_value`` (the condition's values, as text), ``same`` (bool), ``verdict``, and for
        tree diffs ``subtree`` (smallest differing subtree: leaves, a_text, b_text), ``parameter``,
        ``witness`` and ``notes`` as in :class:`fpscope.diff.DiffResult`; for "n", ``a_family``
        and ``b_family``.
    """
    from .diff import diff_trees
    from .summary import describe

    usable = [c for c in cells if c.tree is not None and c.record is not None
              and not is_collective(c.cell)]  # collectives: fpscope.report_collectives
    out: list = []
    families: dict = {}

    def family(cr: CellResult) -> str:
        if cr.index not in families:
            try:
                families[cr.index] = describe(cr.tree).get("family", "generic")
            except Exception:  # noqa: BLE001 - describe never raises; a report must not die
                families[cr.index] = "generic"
        return families[cr.index]

    def value(cr: CellResult, dim: str) -> str:
        c = cr.cell
        return {"rows": f"M={c.rows}", "threads": f"{c.threads_text} threads",
                "layout": c.layout, "dtype": c.dtype, "library": c.library,
                "n": f"n={c.n}"}[dim]

    for dim in DIMENSIONS:
        for a, b in _pairs(usable, dim)[:max_pairs]:
            entry = {"dimension": dim, "a": a.index, "b": b.index,
                     "a_value": value(a, dim), "b_value": value(b, dim)}
            if dim == "n":
                fa, fb = family(a), family(b)
                entry.update(same=fa == fb, a_family=fa, b_family=fb,
                             verdict="same family" if fa == fb else "family changes")
            else:
                try:
                    res = diff_trees(_side(a), _side(b), seed=0)
                    entry.update(res.to_dict())
                    entry.pop("kind", None)
                except Exception as exc:  # noqa: BLE001 - a report must not die on one pair
                    entry.update(same=False, verdict="not compared",
                                 notes=[f"{type(exc).__name__}: {exc}"])
            out.append(entry)
    return out


# -- agreement ---------------------------------------------------------------------------------------

def columns(result: MatrixResult) -> list:
    """The (library, threads) pairs present, in library then thread order: the report's
    columns of the agreement table."""
    from .matrix import LIBRARIES

    seen = {(c.cell.library, c.cell.threads) for c in result.cells if not is_collective(c.cell)}
    return sorted(seen, key=lambda lt: (LIBRARIES.index(lt[0]), -1 if lt[1] is None else lt[1]))


def agreement_rows(result: MatrixResult) -> list:
    """One row per condition (op, dtype, size, layout): which tree each library gives.

    Returns:
        A list of dicts: ``op``, ``dtype``, ``size`` (text), ``layout``, ``cells`` (a dict
        (library, threads) -> CellResult), ``groups`` (list of (tree id, [labels]) in order of
        first appearance; a label is the library, or "library Nt" when the library's thread
        counts give different trees), ``orders`` (the number of distinct trees) and ``verdict``:
        "all agree", "one cell only", "no tree", or the groups, e.g. "numpy = torch ≠ jax".
    """
    rows: dict = {}
    for cr in (x for x in result.cells if not is_collective(x.cell)):
        c = cr.cell
        key = (c.op, c.dtype, c.shape, c.layout)
        row = rows.setdefault(key, {"op": c.op, "dtype": c.dtype, "size": c.size_text,
                                    "layout": c.layout, "cells": {}})
        row["cells"][(c.library, c.threads)] = cr
    out = []
    for row in rows.values():
        treed = [(lt, cr) for lt, cr in row["cells"].items() if cr.tree_id is not None]
        per_lib: dict = {}
        for (lib, _), cr in treed:
            per_lib.setdefault(lib, set()).add(cr.tree_id)
        groups: dict = {}
        for (lib, t), cr in sorted(treed, key=lambda item: item[1].index):
            label = lib if len(per_lib[lib]) == 1 or t is None else f"{lib} {t}t"
            labels = groups.setdefault(cr.tree_id, [])
            if label not in labels:
                labels.append(label)
        row["groups"] = list(groups.items())
        row["orders"] = len(groups)
        if not treed:
            row["verdict"] = "no tree"
        elif len(groups) == 1:
            row["verdict"] = "all agree" if len(treed) > 1 else "one cell only"
        else:
            row["verdict"] = " \u2260 ".join(" = ".join(labels) for _, labels in groups.items())
        out.append(row)
    return out
