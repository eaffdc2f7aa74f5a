"""The checks of a reveal; each raises :class:`RevealError` saying what it saw.

A tree is reported only when n units sum to n * u and M absorbs them (:func:`check_units`,
:func:`check_absorbs`), repeated probes agree (:func:`check_repeat`), batched probes agree with
one call per probe (:func:`check_batched`), random unprobed pairs agree with the tree
(:func:`check_random_pairs`, using :func:`lca_sizes_of_tree`), and, for matrix ops, every
output follows the same K-order (:func:`check_shared_order`).
"""

from __future__ import annotations

import numpy as np

from ..tree import SumTree
from .prober import Prober, RevealError, nan_error


def leaf_ranges(tree: SumTree):
    """The leaves in canonical order (a list; "C" included) and every internal node's range
    [lo, hi) in it (int64 arrays), from one depth-first pass, kept with the tree. Every internal
    node covers a contiguous range of the canonical leaf order."""
    return tree.memo("leaf_ranges", lambda: _leaf_ranges(tree))


def _leaf_ranges(tree: SumTree):
    order: list = []
    lo, hi = [], []
    stack = [tree.root]
    while stack:
        cur = stack.pop()
        c = cur.__class__
        if c is tuple:
            stack.append([len(order)])  # closes the node: its range starts here
            stack.extend(reversed(cur))
        elif c is list:
            lo.append(cur[0])
            hi.append(len(order))
        else:
            order.append(cur)
    return order, np.asarray(lo, dtype=np.int64), np.asarray(hi, dtype=np.int64)


def _lca_nodes(order: list, lo_a, hi_a, pairs) -> tuple[np.ndarray, np.ndarray]:
    """(index of the LCA node of each pair, its size): the smallest range holding both."""
    pos_of = {v: k for k, v in enumerate(order)}
    P = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    pos_ = np.array([[pos_of[int(i)], pos_of[int(j)]] for i, j in P],
                    dtype=np.int64).reshape(-1, 2)
    a, c = pos_.min(axis=1), pos_.max(axis=1)
    size = hi_a - lo_a
    holds = (lo_a[None, :] <= a[:, None]) & (hi_a[None, :] > c[:, None])
    sizes = np.where(holds, size[None, :], np.iinfo(np.int64).max)
    k = sizes.argmin(axis=1)
    return k, sizes[np.arange(len(k)), k]


def lca_sizes_of_tree(tree: SumTree, pairs: np.ndarray) -> np.ndarray:
    """l(i, j) of ``tree`` for each (i, j) in ``pairs`` (P, 2); O(nodes) Python, O(P * nodes)
    numpy work (:func:`leaf_ranges`: LCA(i, j) is the smallest node whose range holds
    both)."""
    order, lo_a, hi_a = leaf_ranges(tree)
    return _lca_nodes(order, lo_a, hi_a, pairs)[1]


def lca_leaves_of_tree(tree: SumTree, pairs: np.ndarray) -> list[np.ndarray]:
    """The leaves (sorted int64 indices; "C" left out) under LCA(i, j) of ``tree`` for each
    (i, j) in ``pairs``."""
    order, lo_a, hi_a = leaf_ranges(tree)
    k, _ = _lca_nodes(order, lo_a, hi_a, pairs)
    return [np.sort(np.asarray([v for v in order[lo_a[x]:hi_a[x]] if not isinstance(v, str)],
                               dtype=np.int64)) for x in k]


def check_scan_prefixes(prober: Prober, tree: SumTree, count: int, rng) -> int | str:
    """A scan (``target.evaluate_scan``: every output j of one call adds x0..xj): is every
    output's tree the revealed tree (the last output's) restricted to x0..xj?

    ``count`` random pairs (a, b), one probe row each (M and -M at a and b, units elsewhere),
    answer l_j(a, b) for every output j >= max(a, b) in the same call; the restriction of the
    tree says l_j = the number of leaves <= j under LCA(a, b).

    Returns:
        the number of (pair, output) values checked; or a string "no: ..." naming the first
        output whose tree is not the restriction (the outputs then add in other trees: reveal
        one with ``--position J``).
    """
    t, m, n = prober.target, prober.mask, prober.n
    if n < 3 or count <= 0:
        return 0
    a = rng.integers(0, n, size=count)
    b = rng.integers(0, n - 1, size=count)
    b = np.where(b >= a, b + 1, b)
    X = np.full((count, n), m.u, dtype=prober.dtype)
    X[np.arange(count), a] = m.M
    X[np.arange(count), b] = -m.M
    Y = np.asarray(t.evaluate_scan(X), dtype=np.float64)
    j = np.arange(n)
    valid = j[None, :] >= np.maximum(a, b)[:, None]  # earlier outputs hold M: no answer
    units = np.rint(np.where(valid, Y, 0.0) / m.u)
    if not np.isfinite(units).all():
        raise nan_error(prober, "scan probes (M, -M and units)")
    got = (j[None, :] + 1) - units.astype(np.int64)
    leaves = lca_leaves_of_tree(tree, np.stack([a, b], axis=1))
    want = np.stack([np.searchsorted(lv, j, side="right") for lv in leaves])
    bad = np.argwhere(valid & (got != want))
    if len(bad):
        outs = sorted({int(c) for _, c in bad})
        r, c = bad[np.argmin(bad[:, 1])]
        shown = ", ".join(map(str, outs[:8])) + (f", ... ({len(outs)} outputs)" if len(outs) > 8
                                                  else "")
        return (f"no: outputs {shown} do not add in the last output's tree restricted to their "
                f"inputs (output {c}: pair ({a[r]}, {b[r]}) meets in {got[r, c]} leaves, the "
                f"restriction says {want[r, c]}); reveal one with --position J")
    return int(valid.sum())


def check_units(prober: Prober) -> None:
    """n units must sum to exactly n * u (else the accumulator cannot count them)."""
    t, m = prober.target, prober.mask
    x = np.full((1, prober.n), m.u, dtype=prober.dtype)
    got = float(t.evaluate(x)[0])
    if np.isnan(got):
        raise nan_error(prober, f"{prober.n} units of {m.u!r}")
    if got != prober.n * m.u:
        hint = ""
        if np.isfinite(got) and 0 < got < prober.n * m.u and float(got / m.u).is_integer():
            hint = f" (it counts exactly up to about {int(got / m.u)})"
        raise RevealError(
            "units",
            f"n = {prober.n} is too large for this op: {prober.n} units of {m.u!r} sum to {got!r}, "
            f"not {prober.n * m.u!r}, so its accumulator cannot count them{hint}; use a smaller n",
        )


def check_absorbs(prober: Prober) -> None:
    """M followed or preceded by units must come out as exactly M."""
    t, m, n = prober.target, prober.mask, prober.n
    if n < 2:
        return
    X = np.full((2, n), m.u, dtype=prober.dtype)
    X[0, 0] = m.M
    X[1, n - 1] = m.M
    got = t.evaluate(X)
    if np.isnan(np.asarray(got, dtype=np.float64)).any():
        raise nan_error(prober, f"M = {m.M!r} followed or preceded by {n - 1} units of {m.u!r}")
    if not np.all(got == m.M):
        raise RevealError(
            "mask",
            f"the mask M = {m.M!r} does not absorb {n - 1} units of {m.u!r} (got {got[0]!r}): "
            f"the op accumulates in a wider format than the mask allows",
        )


def check_random_pairs(prober: Prober, tree: SumTree, count: int, rng) -> int:
    """Probe ``count`` random pairs not yet probed and compare with the tree. Returns pairs checked."""
    n = prober.n
    if prober.table is not None:
        L = tree.lca_size_matrix()
        bad = np.argwhere(L != prober.table)
        if len(bad):
            a, b = bad[0]
            raise RevealError(
                "inconsistent",
                f"probe ({a}, {b}) gives l = {prober.table[a, b]} but the revealed tree says "
                f"{L[a, b]}: the outputs do not share one fixed K-order",
            )
        return n * (n - 1)
    if n < 3 or count <= 0:
        return 0
    i = rng.integers(0, n, size=count)
    j = rng.integers(0, n - 1, size=count)
    j = np.where(j >= i, j + 1, j)
    pairs = np.stack([i, j], axis=1)
    _mismatch("inconsistent", pairs, lca_sizes_of_tree(tree, pairs), prober.lca_sizes(pairs),
              "probe ({a}, {b}) gives l = {new} but the revealed tree says {old}: the op is not "
              "one fixed tree (data-dependent or nondeterministic order?)")
    return len(pairs)


def _sample_history(prober: Prober, count: int, rng):
    if not prober.history:
        return None, None
    pairs = np.concatenate([h[0] for h in prober.history])
    vals = np.concatenate([h[1] for h in prober.history])
    sel = rng.choice(len(pairs), size=min(count, len(pairs)), replace=False)
    return pairs[sel], vals[sel]


def _mismatch(kind: str, pairs, old, new, what: str) -> None:
    bad = np.flatnonzero(np.asarray(new) != np.asarray(old))
    if len(bad):
        a, b = pairs[bad[0]]
        raise RevealError(kind, what.format(a=a, b=b, old=old[bad[0]], new=new[bad[0]]))


def check_repeat(prober: Prober, count: int, rng) -> int:
    """Repeat probes with fresh calls; all must agree (determinism). Returns probes repeated."""
    if prober.table is not None:
        idx = np.arange(prober.n)
        again = prober.grid_call(idx, idx)
        np.fill_diagonal(again, 1)
        pairs = np.argwhere(again != prober.table)
        if len(pairs):
            i, j = pairs[0]
            _mismatch("nondeterministic", pairs[:1], [prober.table[i, j]], [again[i, j]], _NONDET)
        return prober.n * (prober.n - 1)
    pairs, old = _sample_history(prober, count, rng)
    if pairs is None:
        return 0
    _mismatch("nondeterministic", pairs, old, prober.fetch(pairs), _NONDET)
    return len(pairs)


_NONDET = (
    "probe ({a}, {b}) gave l = {old}, then {new} when repeated: the op is nondeterministic "
    "(threads racing, atomics?); fix the thread count or use a deterministic mode"
)


def check_batched(prober: Prober, count: int, rng) -> int:
    """A sample of batched probes redone with one op call per probe must agree."""
    if prober.mode != "rows":
        return 0
    pairs, old = _sample_history(prober, count, rng)
    if pairs is None:
        return 0
    new = prober.to_lca_sizes(prober.target.evaluate_each(prober.probe_rows(pairs)), pairs)
    _mismatch(
        "batch-mismatch", pairs, old, new,
        "probe ({a}, {b}) gives l = {new} alone but {old} in a batch: the target's batched "
        "evaluation is not the same op",
    )
    return len(pairs)


def check_shared_order(prober: Prober, tree: SumTree, count: int, rng) -> int:
    """Matrix ops: the same probe in every row; every output must match the tree.

    Returns the number of outputs compared. Raises RevealError("inconsistent") naming the output
    positions whose K-order differs.
    """
    t = prober.target
    if not t.is_matrix or prober.n < 3:
        return 0
    R = max(1, min(t.max_rows, (4 << 20) // (8 * prober.n)))
    C = max(1, min(t.max_cols, (4 << 20) // (8 * prober.n)))
    i = rng.integers(0, prober.n, size=count)
    j = (i + 1 + rng.integers(0, prober.n - 1, size=count)) % prober.n
    pairs = np.stack([i, j], axis=1)
    want = lca_sizes_of_tree(tree, pairs)
    checked = 0
    for (a, b), w in zip(pairs.tolist(), want.tolist()):
        X = prober.probe_rows(np.array([[a, b]]))
        P = np.repeat(X, R, axis=0)
        out = np.asarray(t.evaluate_outer(P, np.ones((prober.n, C), dtype=X.dtype)))
        expect = (prober.n - w) * prober.mask.u
        diff = np.argwhere(out != expect)
        checked += out.size
        if len(diff):
            where = ", ".join(f"({r},{c})" for r, c in diff[:5].tolist())
            raise RevealError(
                "inconsistent",
                f"outputs do not share one K-order: for probe ({a}, {b}) output(s) {where} "
                f"({len(diff)} of {out.size}) differ from the revealed tree",
            )
    return checked

