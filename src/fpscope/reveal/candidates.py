"""Candidate trees: guess a tree, then prove it with one probe per node (or fall back to FPRev).

Many reductions add in one of a few well-known orders, and a tree can be checked far more
cheaply than it can be found. A binary candidate T over n leaves is proven with n - 1 plain
count probes, one per internal node v: the leftmost and the rightmost leaf of v in canonical
order (p in v's first child, w in its second) must give l(p, w) = |v|.

Why n - 1 probes prove the whole tree. By induction from the leaves: let v's children L and R
be clusters (leaf sets of nodes) of the op's tree. lca_op(p, w) holds p in L and w outside L;
clusters nest, so it holds all of L, and likewise all of R; its size |v| = |L| + |R| then
makes it exactly L u R: v is a cluster of the op's tree. So all n - 1 internal clusters of T
are clusters of the op's tree, which has at most n - 1 (every node adds two or more
children): the trees are equal, multi-way nodes excluded. The probes are FPRev's own (M and
-M at p and w, the unit u on every other leaf), so the proof rests on the same assumptions as
FPRev (a fixed tree of rounded additions; the reveal's other checks test them).

Candidates are tried only on ops probed one row per probe (``Prober.mode == "rows"``) and
while the proof's rows hold at most MAX_PROOF_BYTES of inputs (n^2 elements): a few
random nodes of every candidate first, in one call; the first candidate that passes is then
proven node by node (stopping at the first node that disagrees). Whole-array sums of F and T
layouts try the families over the elements' memory order. Families: numpy's pairwise
summation (``pairwise_sum`` in numpy/_core/src/umath/loops_utils.h.src: blocks of at most 128
elements, 8 lanes with stride 8 combined ((0+1)+(2+3))+((4+5)+(6+7)), the n % 8 tail added
one at a time, blocks split at n2 = n//2 - (n//2) % 8), the left-to-right sequential sum and
recursive halving; plus trees the caller passes (``reveal(candidates=[tree, ...])``, e.g. a
record's tree when the same op is revealed again).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from ..tree import SumTree
from .prober import Prober

#: random nodes of each candidate probed in the first (shared) call
SCREEN_NODES = 48
#: pairs per call of the full proof (the prober splits them further by its row limit)
PROOF_CHUNK = 4096
#: smallest n for which built-in candidates are tried (below it FPRev takes a few calls)
MIN_LEAVES = 64
#: the proof reads n - 1 rows of n inputs, so its gain over packed FPRev shrinks as n grows:
#: it is used up to this many bytes of probe input (``python benchmarks/bench_reveal.py
#: --proof-limit``, AMD EPYC: numpy.sum fp64 proof / FPRev 0.64 at 8.6 GB, 0.79 at 34 GB,
#: 0.98 at 80 GB)
MAX_PROOF_BYTES = 1 << 35


@dataclass(frozen=True)
class Candidate:
    """A guessed tree: ``name`` (for the report), ``nodes(n)`` -> (p, w, size) int64 arrays of
    its n - 1 internal nodes (p: the node's leftmost leaf in canonical order, which lies in its
    first child; w: a leaf of its second child), ``build(n)`` -> the canonical nested-tuple
    tree, and optionally ``order(n)`` -> the canonical leaf order (int64, n), which with the
    node table gives the tree's :func:`fpscope.reveal.checks.leaf_ranges` without a walk."""

    name: str
    nodes: Callable[[int], tuple]
    build: Callable[[int], object]
    order: Callable[[int], np.ndarray] | None = None
    #: whether ``build`` gives canonical nested tuples (else SumTree() sorts them)
    canonical: bool = True


# -- node tables, built with numpy (no tree needed to screen a candidate) ------------------------

def _sequential_nodes(a: np.ndarray, m: np.ndarray) -> tuple:
    """Left folds over the ranges [a, a + m): node k adds x[a + k] to the fold of the first k."""
    k = np.arange(int(m.max()) if len(m) else 0)[None, :]
    use = (k >= 1) & (k < m[:, None])
    a2 = np.broadcast_to(a[:, None], use.shape)[use]
    kk = np.broadcast_to(k, use.shape)[use]
    return a2, a2 + kk, kk + 1


def _numpy_block_nodes(a: np.ndarray, m: int) -> list:
    """Node tables of numpy's kernel on blocks [a, a + m) of one size m <= 128."""
    if m < 8:
        return [_sequential_nodes(a, np.full(len(a), m))]
    main = m - m % 8
    lanes = main // 8
    out = []
    if lanes > 1:  # lane r: fold of a + r, a + r + 8, ...; node t adds its (t+1)-th element
        r = np.arange(8)[None, :, None]
        t = np.arange(1, lanes)[None, None, :]
        base = a[:, None, None] + r
        shape = (len(a), 8, lanes - 1)
        out.append((np.broadcast_to(base, shape).ravel(), (base + 8 * t).ravel(),
                    np.broadcast_to(t + 1, shape).ravel()))
    # combine: (l0+l1), (l2+l3), (l4+l5), (l6+l7), (01+23), (45+67), root
    first = np.array([0, 2, 4, 6, 0, 4, 0])
    last = np.array([1, 3, 5, 7, 2, 6, 4])  # a leaf of the second child (its lane's first)
    size = np.array([2, 2, 2, 2, 4, 4, 8]) * lanes
    out.append(((a[:, None] + first).ravel(), (a[:, None] + last).ravel(),
                np.broadcast_to(size, (len(a), 7)).ravel()))
    if m > main:  # the tail, one element at a time
        i = np.arange(main, m)[None, :]
        shape = (len(a), m - main)
        out.append((np.broadcast_to(a[:, None], shape).ravel(), (a[:, None] + i).ravel(),
                    np.broadcast_to(i + 1, shape).ravel()))
    return out


def _split_ranges(n: int, split: Callable, block: int) -> tuple:
    """Recursive splitting of [0, n) while a range is longer than ``block``: the split nodes
    (p = start, w = start + split(m), size m) as a list of tables, and the ranges not split
    further as {length m: int64 array of their starts}."""
    parts = []
    a, m = np.array([0], dtype=np.int64), np.array([n], dtype=np.int64)
    blocks: dict = {}
    while len(a):
        big = m > block
        for size in np.unique(m[~big]).tolist():
            blocks.setdefault(size, []).append(a[~big][m[~big] == size])
        a, m = a[big], m[big]
        h = split(m)
        parts.append((a, a + h, m))
        a, m = np.concatenate([a, a + h]), np.concatenate([h, m - h])
    return parts, {size: np.concatenate(starts) for size, starts in blocks.items()}


def _split_nodes(n: int, split: Callable, leaf: Callable, block: int) -> tuple:
    """The node table of a recursive split: the split nodes, then ``leaf(a, m)``'s tables of
    the ranges of one length m that are not split further."""
    parts, blocks = _split_ranges(n, split, block)
    for size, starts in blocks.items():
        parts += leaf(starts, size)
    return tuple(np.concatenate([p[k] for p in parts]).astype(np.int64) for k in range(3))


def _numpy_split(m):
    h = m // 2
    return h - h % 8


def numpy_pairwise_order(n: int) -> np.ndarray:
    """Canonical leaf order of numpy's tree: blocks in place, inside a block of m >= 8 the
    lanes one after another (lane r: a + r, a + r + 8, ...), then the tail."""
    order = np.arange(n, dtype=np.int64)
    _, blocks = _split_ranges(n, _numpy_split, 128)
    for m, a in blocks.items():
        if m < 8:
            continue
        lanes = (m - m % 8) // 8
        lane_major = (np.arange(8)[:, None] + 8 * np.arange(lanes)[None, :]).ravel()
        order[a[:, None] + np.arange(8 * lanes)[None, :]] = a[:, None] + lane_major[None, :]
    return order


def numpy_pairwise_nodes(n: int) -> tuple:
    return _split_nodes(n, _numpy_split, _numpy_block_nodes, 128)


def sequential_nodes(n: int) -> tuple:
    k = np.arange(1, n, dtype=np.int64)
    return np.zeros(n - 1, dtype=np.int64), k, k + 1


def halving_nodes(n: int) -> tuple:
    return _split_nodes(n, lambda m: m // 2, lambda a, m: [], 1)


# -- nested trees (only for the candidate that is proven) ------------------------------------

def _fold(items):
    acc = items[0]
    for x in items[1:]:
        acc = (acc, x)
    return acc


def _numpy_block(a: int, m: int):
    if m < 8:
        return _fold(list(range(a, a + m)))
    main = m - m % 8
    ln = [_fold(list(range(a + r, a + main, 8))) for r in range(8)]
    acc = ((ln[0], ln[1]), (ln[2], ln[3])), ((ln[4], ln[5]), (ln[6], ln[7]))
    for i in range(a + main, a + m):
        acc = (acc, i)
    return acc


def _split_tree(a: int, m: int, split, block: int, leaf):
    """Recursion depth log2(n); the blocks are built by ``leaf``."""
    if m <= block:
        return leaf(a, m)
    h = split(m)
    return (_split_tree(a, h, split, block, leaf), _split_tree(a + h, m - h, split, block, leaf))


def numpy_pairwise_tree(n: int):
    return _split_tree(0, n, _numpy_split, 128, _numpy_block)


def halving_tree(n: int):
    return _split_tree(0, n, lambda m: m // 2, 1, lambda a, m: a)


def _identity(n: int) -> np.ndarray:
    return np.arange(n, dtype=np.int64)


BUILT_IN = (
    Candidate("numpy's pairwise summation (blocks of at most 128, 8 lanes with stride 8)",
              numpy_pairwise_nodes, numpy_pairwise_tree, numpy_pairwise_order),
    Candidate("a sequential sum, left to right", sequential_nodes,
              lambda n: _fold(list(range(n))), _identity),
    Candidate("recursive halving (split at floor(n/2))", halving_nodes, halving_tree, _identity),
)


def leaf_ranges_of(c: Candidate, n: int, nodes: tuple) -> tuple:
    """:func:`fpscope.reveal.checks.leaf_ranges` of ``c``'s tree from its order and node table
    (a node covers ``size`` leaves from its leftmost leaf p on)."""
    order = c.order(n)
    pos = np.empty(n, dtype=np.int64)
    pos[order] = np.arange(n)
    lo = pos[nodes[0]]
    return order.tolist(), lo, lo + nodes[2]


def over_memory_order(c: Candidate, perm: np.ndarray, layout: str) -> Candidate:
    """``c`` applied to the elements in memory order: leaf k of ``c``'s tree (the k-th element
    in memory) becomes the logical index ``perm[k]`` (whole-array sums of F and T layouts:
    :func:`fpscope.summary.memory.memory_permutation`)."""
    from ..summary.stats import relabel

    rank = perm.tolist()

    def nodes(n):
        p, w, size = c.nodes(n)
        return perm[p], perm[w], size

    def build(n):
        root = c.build(n)
        return rank[root] if isinstance(root, int) else relabel(root, rank)

    return Candidate(f"{c.name}, over memory order ({layout} layout)", nodes, build,
                     canonical=False)


def of_tree(tree: SumTree, name: str = "the given tree") -> Candidate:
    """A caller's tree as a candidate (binary, no "C" leaf; else ValueError)."""
    from .checks import leaf_ranges

    if tree.has_c or tree.max_fan_in() > 2:
        raise ValueError("a candidate tree must be binary and hold only the leaves 0..n-1")
    order, lo, hi = leaf_ranges(tree)
    order = np.asarray(order, dtype=np.int64)
    nodes = (order[lo], order[hi - 1], hi - lo)
    return Candidate(name, lambda n: nodes, lambda n: tree.root, lambda n: order)


def try_candidates(prober: Prober, candidates: Sequence[Candidate], rng,
                   progress=None, rejected: list | None = None) -> tuple[SumTree, str] | None:
    """The first candidate whose every node the op confirms, as (tree, its name), or None.

    One call screens SCREEN_NODES random nodes of every candidate; the first that passes is
    proven on all n - 1 nodes (calls of PROOF_CHUNK pairs, stopping at a node that disagrees),
    then the next that passed, and so on. ``progress(probes, n)`` after each call of the proof.
    ``rejected``, when given, receives (name, why) for every candidate found not to hold (the
    first node that disagrees: its leaves p, w and both sizes).
    """
    n = prober.n
    tables, screens = [], []
    for c in candidates:
        p, w, size = c.nodes(n)
        if len(p) != n - 1:  # pragma: no cover - a family's table is wrong
            raise AssertionError(f"candidate {c.name!r} gave {len(p)} nodes for n = {n}")
        pick = rng.choice(n - 1, size=min(SCREEN_NODES, n - 1), replace=False)
        tables.append((p, w, size))
        screens.append(pick)
    pairs = np.concatenate([np.stack([t[0][s], t[1][s]], axis=1) for t, s in zip(tables, screens)])
    got = np.split(prober.lca_sizes(pairs), np.cumsum([len(s) for s in screens])[:-1])

    def reject(c, p, w, size, l, idx):
        k = int(np.flatnonzero(l != size[idx])[0])
        if rejected is not None:
            j = idx[k]
            rejected.append((c.name, f"leaves x{p[j]} and x{w[j]} meet in {l[k]} leaves, the "
                                     f"tree says {size[j]}"))

    for c, (p, w, size), s, l in zip(candidates, tables, screens, got):
        if not np.array_equal(l, size[s]):
            reject(c, p, w, size, l, s)
            continue
        done = 0
        for lo in range(0, n - 1, PROOF_CHUNK):
            hi = min(lo + PROOF_CHUNK, n - 1)
            l = prober.lca_sizes(np.stack([p[lo:hi], w[lo:hi]], axis=1))
            if not np.array_equal(l, size[lo:hi]):
                reject(c, p, w, size, l, np.arange(lo, hi))
                break
            done = hi
            if progress is not None:
                progress(done, n)
        if done == n - 1:
            tree = SumTree.from_canonical(c.build(n), n) if c.canonical else SumTree(c.build(n))
            if c.order is not None:  # the checks' LCA sizes without a walk over the tree
                ranges = leaf_ranges_of(c, n, (p, w, size))
                tree.memo("leaf_ranges", lambda: ranges)
            return tree, c.name
    return None
