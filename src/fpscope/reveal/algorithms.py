"""The revealing algorithms: FPRev (:func:`fprev`) and BasicFPRev (:func:`basic_fprev`).

Source: Xie et al., "FPRev: Revealing the Order of Floating-Point Summation by Numerical Testing",
USENIX ATC 2025 (arXiv 2411.00442). Both return the canonical nested-tuple tree; the checks
around them are :mod:`fpscope.reveal.checks`.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from .prober import Prober, RevealError
from .staged import Staged
from .tasks import Task, add_groups, combine, pick_pivot


def fprev(
    prober: Prober,
    leaves=None,
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
    packed: bool = False,
    membership_min: int | None = None,
):
    """FPRev over ``leaves`` (default: all n). Returns the canonical nested-tuple tree.
    ``progress(probes_done, n)``, when given, is called after each stage and after every op
    call within one (packed: the count and membership probes of this call).

    Breadth-first: each stage probes the pivot q of every pending leaf set against the rest of
    its set; the groups of equal l become the next stage's sets. Plain (``packed`` False): one
    probe a row with units on every leaf; any tree, multi-way nodes included.

    With ``packed`` (binary trees only: a node with three or more children raises
    RevealError("inconsistent") and the caller falls back to plain probes) the probes of several
    sets share rows (:func:`fpscope.reveal.packing.count_packed`), and a set of at least
    ``membership_min`` leaves whose sampled levels repeat is classified with membership probes
    (:func:`fpscope.reveal.packing.membership_rows`) instead of counting every leaf. The default,
    max(128, 2^22 // n), asks for sets whose count probes would sum at least 2^22 inputs (256
    leaves at n = 16384), where the rows saved outweigh the extra calls of membership rounds
    (about 0.3 ms each here; with banded count rows, 2^22 takes 15% fewer rows than 2^23 at
    n = 16384 in the same CPU time: fewer op calls for ops slower per row than np.sum); a
    value above n turns membership probes off. The method, and why
    it is exact: :class:`fpscope.reveal.staged.Staged`.

    Raises:
        RevealError("inconsistent"): group sizes contradict the l values, or (packed) a node
            with three or more children.
    """
    n = prober.n
    leaves = np.arange(n) if leaves is None else np.asarray(leaves)
    if progress is not None:  # also during a batch of op calls (Prober.heartbeat)
        base = prober.probes
        prober.heartbeat = lambda probes: progress(probes - base, n)
    try:
        return _fprev(prober, leaves, seed, progress, packed, membership_min)
    finally:
        prober.heartbeat = None


def _fprev(prober, leaves, seed, progress, packed, membership_min):
    n = prober.n
    if packed:
        return Staged(prober, leaves, np.random.default_rng(seed), progress, membership_min).run()
    stages, done, vals = fprev_stages(leaves, seed), 0, None
    while True:
        try:
            pairs = stages.send(vals)  # the first send(None) starts it
        except StopIteration as stop:
            return stop.value
        vals = prober.lca_sizes(pairs)
        done += len(vals)
        if progress:
            progress(done, n)


def fprev_stages(leaves, seed: int = 0):
    """Plain FPRev (:func:`fprev` without ``packed``) as a generator, for callers that answer
    the probes of several reveals in shared calls (:mod:`fpscope.reveal.classes`): it yields
    each stage's (P, 2) array of pairs (pivot, partner), is sent their l values, and returns
    the canonical nested-tuple tree (``StopIteration.value``; a single leaf yields nothing).

    Raises:
        RevealError("inconsistent"): group sizes contradict the l values.
    """
    rng = np.random.default_rng(seed)
    tasks = [Task(np.sort(np.asarray(leaves)))]
    frontier = [0]
    while frontier:
        live = [tid for tid in frontier if len(tasks[tid].members) > 1]
        if not live:
            break
        others = []
        for tid in live:
            t = tasks[tid]
            pick_pivot(t, rng)
            others.append(t.members[t.members != t.pivot])
        counts = [len(o) for o in others]
        vals = yield np.stack([np.repeat([tasks[tid].pivot for tid in live], counts),
                               np.concatenate(others)], axis=1)
        frontier = add_groups(tasks, np.repeat(live, counts), np.concatenate(others),
                              np.asarray(vals, dtype=np.int64))
    return combine(tasks, binary=False)


def basic_fprev(prober: Prober):
    """BasicFPRev: probe every pair, then merge clusters bottom-up in ascending l.

    Generalised to multi-way nodes: all clusters connected by pairs of the same l form one node.
    Costs n(n-1)/2 probes; used to cross-check FPRev.

    Raises:
        RevealError("inconsistent"): a merged node's size differs from its l value.
    """
    n = prober.n
    if n == 1:
        return 0
    iu = np.triu_indices(n, 1)
    pairs = np.stack(iu, axis=1)
    vals = prober.lca_sizes(pairs)
    parent = list(range(n))
    node: dict[int, object] = {i: i for i in range(n)}
    size = {i: 1 for i in range(n)}

    def find(a):
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    order = np.argsort(vals, kind="stable")
    sv = vals[order]
    cuts = np.flatnonzero(np.diff(sv)) + 1
    for idx in np.split(order, cuts):
        L = int(vals[idx[0]])
        # connected components among current clusters linked by pairs of this l
        link: dict[int, int] = {}

        def f2(a):
            while link.get(a, a) != a:
                a = link[a]
            return a

        for i, j in pairs[idx].tolist():
            a, b = find(i), find(j)
            if a == b:
                raise RevealError("inconsistent", f"pair ({i}, {j}) already joined below l = {L}")
            ra, rb = f2(a), f2(b)
            link.setdefault(ra, ra)
            link.setdefault(rb, rb)
            if ra != rb:
                link[rb] = ra
        members: dict[int, list] = {}
        for a in link:
            members.setdefault(f2(a), []).append(a)
        for rep, clusters in members.items():
            total = sum(size[c] for c in clusters)
            if total != L:
                raise RevealError(
                    "inconsistent", f"a node of l = {L} would hold {total} leaves: not a fixed tree"
                )
            newnode = tuple(node.pop(c) for c in clusters)
            root = clusters[0]
            for c in clusters[1:]:
                parent[c] = root
            node[root] = newnode
            size[root] = total
    roots = {find(i) for i in range(n)}
    if len(roots) != 1:
        raise RevealError("inconsistent", "the probes do not join all leaves into one tree")
    return node[roots.pop()]

