"""How each product of a dot-like reduction enters the sum: rounded first, or fused (FMA).

The order probes cannot see it: units times units are exact (fpscope NUMERICS.md section 4). This
probe gives the product at leaf i low bits: a_i = b_i = 1 + 2^-h, so a_i * b_i = 1 + 2^(1-h) +
2^-2h, and puts the exact product -(1 + 2^(1-h)) (a_m = -(1 + 2^(1-h)), b_m = 1) at a leaf m of
the other child of the node where leaf i enters; every other factor is 0, so every other partial
sum is exact. That node returns 2^-2h when the product reaches it with its low bits (fused, or a
node format that holds it) and 0 when it was rounded to fewer than 2h + 1 bits first (RNE keeps
1 + 2^(1-h): the tie at 2h + 1 bits rounds to even). Ancestors add zeros, so the output is that
value exactly. With h = p - 1 (p the input format's precision) the row tells whether the whole
product entered; rows with h = floor((q - 1) / 2) for q the precisions of bf16, fp16, fp32 and
fp64 then place the precision it was rounded to.
"""

from __future__ import annotations

import numpy as np

from ..arithmetic import EXACT, FUSED, ROUNDED
from ..formats import FORMATS, get_format
from ..targets.base import Target
from ..tree import SumTree

_CANDIDATES = ("bf16", "fp16", "fp32", "fp64")


def leaf_positions(tree: SumTree):
    """For every leaf: (post-order index of the node it enters, a leaf of that node's other
    child), or None where the node has more than two children (entries not modelled there).

    Returns:
        list of n items (index by leaf).
    """
    from ..tree import leaves_of

    out: list = [None] * tree.n
    for k, nd in enumerate(tree.nodes_postorder()):
        if len(nd) != 2:
            continue
        for side in (0, 1):
            c, other = nd[side], nd[1 - side]
            if isinstance(c, tuple) or c == "C":
                continue
            m = other if not isinstance(other, tuple) else next(
                x for x in leaves_of(other) if x != "C")
            if m == "C":
                continue
            out[int(c)] = (k, int(m))
    return out


def _row(n: int, i: int, m: int, h: int, dtype):
    a = np.zeros(n, dtype=np.float64)
    b = np.zeros(n, dtype=np.float64)
    a[i] = b[i] = 1.0 + np.ldexp(1.0, -h)
    a[m], b[m] = -(1.0 + np.ldexp(1.0, 1 - h)), 1.0
    return a, b


def detect_product_entries(target: Target, tree: SumTree, node_formats, evaluate=None,
                           leaves=None) -> dict:
    """The product entry of every leaf of a binary tree (see :mod:`fpscope.arithmetic`).

    Args:
        target: an op with ``has_products``; its tree is ``tree``.
        tree: the revealed tree.
        node_formats: one format name per internal node (post-order), the node arithmetic found
            by :func:`fpscope.probes.accumulator.detect_node_formats` (root included).
        evaluate: optional batched ``evaluate_products(A, B)`` (e.g. the diagonal of one matrix
            call); default ``target.evaluate_products``.
        leaves: the leaves to probe (default all); the others get None.

    Returns:
        ``{"entries": [entry or None per leaf], "probed": count, "rows": rows evaluated,
        "unexplained": [{"leaf", "h", "got"}...]}`` (an output that is neither 2^-2h nor 0 leaves
        that leaf's entry None and is listed).
    """
    n = tree.n
    fin = target.in_format
    pos = leaf_positions(tree)
    todo = [i for i in (range(n) if leaves is None else leaves) if pos[i] is not None]
    dtype = fin.numpy_dtype()
    hmax = fin.p - 1
    entries: list = [None] * n
    unexplained: list = []
    run = evaluate or target.evaluate_products

    def outputs(rows):
        if not rows:
            return np.zeros(0)
        A = np.asarray([r[0] for r in rows])
        B = np.asarray([r[1] for r in rows])
        return np.asarray(run(A, B), dtype=np.float64)

    first = [_row(n, i, pos[i][1], hmax, dtype) for i in todo]
    y = outputs(first)
    rows_used = len(first)
    lost = []
    for i, v in zip(todo, y):
        k = pos[i][0]
        if v == np.ldexp(1.0, -2 * hmax):
            node = get_format(node_formats[k])
            entries[i] = EXACT if node.p >= 2 * fin.p else FUSED
        elif v == 0:
            lost.append(i)
        else:
            unexplained.append({"leaf": i, "h": hmax, "got": float(v).hex()})
    cands = [c for c in _CANDIDATES if (FORMATS[c].p - 1) // 2 < hmax]
    kept: dict = {i: [] for i in lost}

    def place(leaves, names_of):
        rows, owners = [], []
        for i in leaves:
            for c in names_of(i):
                h = (FORMATS[c].p - 1) // 2
                rows.append(_row(n, i, pos[i][1], h, dtype))
                owners.append((i, c, h))
        for (i, c, h), v in zip(owners, outputs(rows)):
            if v == np.ldexp(1.0, -2 * h):
                kept[i].append(c)
            elif v != 0:
                unexplained.append({"leaf": i, "h": h, "got": float(v).hex()})
        return len(rows)

    # first only the node's own format (the common case: rounded to it), then the others
    rows_used += place(lost, lambda i: [c for c in cands if c == node_formats[pos[i][0]]])
    rest = [i for i in lost if not kept[i]]
    rows_used += place(rest, lambda i: [c for c in cands if c != node_formats[pos[i][0]]])
    for i in lost:
        node = node_formats[pos[i][0]]
        widest = max(kept[i], key=lambda c: FORMATS[c].p) if kept[i] else None
        if widest is None:
            entries[i] = f"rounded:{_narrowest_name()}"
        elif FORMATS[widest].p >= get_format(node).p or widest == node:
            entries[i] = ROUNDED
        else:
            entries[i] = f"rounded:{widest}"
    bad = {u["leaf"] for u in unexplained}
    for i in bad:
        entries[i] = None
    return {"entries": entries, "probed": len(todo), "rows": rows_used, "unexplained": unexplained}


def _narrowest_name() -> str:
    return _CANDIDATES[0]
