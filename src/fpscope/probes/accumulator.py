"""Accumulator precision of a reduction whose summation tree is known.

Probe: pick leaves i, j that meet at a node v and a leaf k that joins v's result at v's parent;
set x_i = 1, x_j = 2^-t, x_k = -1 and every other input to 0. The op returns
fl(fl(1 + 2^-t) - 1), which is 2^-t while the accumulator keeps t fraction bits and 0 after
(the subtraction is exact by Sterbenz's lemma). The largest surviving t plus one is the
accumulator's precision p. Zeros elsewhere keep every other partial sum exact. Example: numpy's
float16 sum keeps t = 23 (p = 24: it accumulates in float32) although its inputs and output are
float16.
"""

from __future__ import annotations

import numpy as np

from ..formats import FORMATS
from ..targets.base import Target
from ..tree import SumTree

_KNOWN = {f.p: f.name for f in FORMATS.values()}
_KNOWN[64] = "x87 extended"


def _triple(tree: SumTree):
    """(i, j, k) with LCA(i, j) a child of LCA(i, k), or None (no such triple)."""
    for nd in tree.nodes_postorder():
        for c in nd:
            if isinstance(c, tuple):
                others = [o for o in nd if o is not c]
                i = tree.leaves(c[0])[0]
                j = tree.leaves(c[1])[0]
                k = tree.leaves(others[0])[0]
                if "C" not in (i, j, k):
                    return int(i), int(j), int(k)
    return None


def detect_accumulator(target: Target, tree: SumTree, evaluate=None) -> dict:
    """Measure the precision (significand bits) of the accumulator of ``target``.

    Args:
        target: the operation; its tree must be ``tree``.
        tree: the revealed summation tree.
        evaluate: optional batched evaluator with the semantics of ``target.evaluate`` (e.g.
            rows of one matrix-op call, when every output shares the tree).

    Returns:
        JSON-able dict: ``observable`` (bool), ``precision_bits`` (int or None), ``format`` (name of
        the standard format with that precision, or None), ``at_least`` (True when every probed
        bit survived: the accumulator has at least ``precision_bits`` bits), ``evidence`` (the
        probe), ``note``.
    """
    tri = _triple(tree)
    if tri is None:
        return {"observable": False, "precision_bits": None, "format": None, "at_least": False,
                "note": "no pair of nested additions in this tree (single node)"}
    i, j, k = tri
    fin = target.in_format
    tmax = min(fin.p - fin.emin - 1, 80)  # 2^-t must be representable in the input format
    ts = np.arange(1, tmax + 1)
    X = np.zeros((len(ts), target.n), dtype=fin.numpy_dtype())  # every value is exact in fin
    X[:, i] = 1.0
    X[:, j] = np.ldexp(1.0, -ts)
    X[:, k] = -1.0
    out = np.asarray((evaluate or target.evaluate)(X), dtype=np.float64)
    kept = out == np.ldexp(1.0, -ts)
    lost = out == 0
    if not np.all(kept | lost):
        b = int(np.flatnonzero(~(kept | lost))[0])
        return {"observable": False, "precision_bits": None, "format": None, "at_least": False,
                "note": f"probe t={ts[b]} returned {out[b]!r}, neither 2^-t nor 0"}
    t_last = int(ts[kept].max()) if kept.any() else 0
    at_least = bool(kept.all())
    p = t_last + 1
    return {
        "observable": True,
        "precision_bits": p,
        "format": None if at_least else _KNOWN.get(p),
        "at_least": at_least,
        "evidence": {"leaves": [i, j, k], "values": "x_i = 1, x_j = 2^-t, x_k = -1, others 0",
                     "largest_t_kept": t_last},
        "note": f"at least {p} bits (inputs cannot probe further)" if at_least else "",
    }


_CANDIDATES = ("bf16", "fp16", "fp32", "fp64")

#: elements of the probe buffer of :func:`detect_node_formats` (rows are evaluated in chunks)
CHUNK_ELEMENTS = 1 << 22


def detect_node_formats(target: Target, tree: SumTree, evaluate=None, nodes=None) -> list:
    """The accumulator format of every internal node of a binary ``tree`` (post-order).

    For each node v below the root, leaves i and j from two children of v and k from a sibling
    of v get 1, 2^-t and -1; the result is 2^-t iff v keeps t fraction bits. Probing t = 8, 11,
    24 and 53 (the precisions of bf16, fp16, fp32 and fp64) in one batch places every node's
    precision p in one of the intervals (.., 8], (8, 11], (11, 24], (24, 53]; the node gets the
    format at the top of its interval. The root has no sibling: it gets None (the caller decides).

    ``evaluate`` is as in :func:`detect_accumulator`; ``nodes`` (post-order indices) limits the
    probe to those nodes (the others get None).

    Returns:
        list with one format name (or None for the root, or ">fp64" when even t = 53 survived,
        or ">NAME" when the input format cannot probe further) per internal node, post-order.

    Raises:
        ValueError: the tree has a fused node (more than two children).
    """
    from ..formats import get_format

    wanted = None if nodes is None else set(int(k) for k in nodes)
    nodes = list(tree.nodes_postorder())
    if any(len(nd) > 2 for nd in nodes):
        raise ValueError("per-node formats are defined for binary trees only")
    fin = target.in_format
    tlimit = fin.p - fin.emin - 1
    cands = [c for c in _CANDIDATES if get_format(c).p <= tlimit]
    parent: dict[int, tuple] = {}
    first: dict[int, object] = {}  # node -> its first leaf (post-order: children come first)
    for nd in nodes:
        for c in nd:
            if isinstance(c, tuple):
                parent[id(c)] = nd
        c = nd[0]
        first[id(nd)] = first[id(c)] if isinstance(c, tuple) else c

    def first_leaf(x):
        return first[id(x)] if isinstance(x, tuple) else x

    ijk, owners = [], []
    for idx, nd in enumerate(nodes):
        par = parent.get(id(nd))
        if par is None or (wanted is not None and idx not in wanted):
            continue
        sib = par[0] if par[1] is nd else par[1]
        ijk.append((first_leaf(nd[0]), first_leaf(nd[1]), first_leaf(sib)))
        owners.extend((idx, get_format(c).p) for c in cands)
    result: list = [None] * len(nodes)
    if not owners:
        return result
    # one row per (node, candidate): 1, 2^-t and -1 (exact in the input format), others 0;
    # in chunks of one reused buffer (first touches of fresh memory cost more than the op)
    i, j, k = (np.repeat(np.asarray(col, dtype=np.int64), len(cands)) for col in zip(*ijk))
    small = np.ldexp(1.0, -np.array([t for _, t in owners]))
    run = evaluate or target.evaluate
    step = max(1, min(len(owners), CHUNK_ELEMENTS // max(target.n, 1)))
    X = np.zeros((step, target.n), dtype=fin.numpy_dtype())
    out = np.empty(len(owners))
    for lo in range(0, len(owners), step):
        hi = min(len(owners), lo + step)
        rows = np.arange(hi - lo)
        X[rows, i[lo:hi]] = 1.0
        X[rows, j[lo:hi]] = small[lo:hi]
        X[rows, k[lo:hi]] = -1.0
        out[lo:hi] = np.asarray(run(X[: hi - lo]), dtype=np.float64)
        X[rows, i[lo:hi]] = X[rows, j[lo:hi]] = X[rows, k[lo:hi]] = 0
    survived: dict[int, int] = {}
    for (idx, t), y in zip(owners, out):
        survived[idx] = survived.get(idx, 0) + (1 if y == np.ldexp(1.0, -t) else 0)
    for idx, count in survived.items():
        result[idx] = cands[count] if count < len(cands) else (">" + cands[-1])
    return result
