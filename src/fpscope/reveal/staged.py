"""Packed FPRev: the stages of :func:`fpscope.reveal.fprev` with ``packed=True``.

:class:`Staged` decides which probes each stage asks: packed count probes for every set, and
for large sets whose levels repeat, membership probes placing most leaves by a binary search
over the levels a few count probes found. Its docstring gives the method and why the answers
are exact; the rows themselves are :mod:`fpscope.reveal.packing`'s.
"""

from __future__ import annotations

import numpy as np

from .packing import CountRequest, count_packed, field_width, membership_rows, pack_bits
from .prober import Prober, RevealError
from .tasks import Task, add_groups, combine, pick_pivot

_MEMBERSHIP_INPUTS = 1 << 22  # membership probes for sets whose count probes sum this many inputs
_MEMBERSHIP_MIN = 128  # ... and of at least this many leaves
_RANDOM_SAMPLES = 24  # random partners of a large set's first count probes (besides rank offsets)
_REPEATED = 0.7  # membership probes when at least this share of the random samples repeat a level


class Staged:
    """FPRev with packed count probes and membership probes (``fprev(..., packed=True)``).

    Each stage packs the count probes of all its sets into shared rows; a set of at least
    ``membership_min`` leaves (default max(128, 2^22 // n), see :func:`fpscope.reveal.fprev`)
    whose sampled levels repeat is classified instead:

    1. count probes (q, t) for sampled t give levels |A_k| (A_k: the ancestors of q) with a
       witness w_k each, l(q, w_k) = |A_k|;
    2. a membership probe, +M at q, -M at w_k and one bit on each of up to pack_bits test
       leaves, shows which of them lie in A_k (1 bit a leaf instead of log2 |set| + 1); a binary
       search over the known levels places every other leaf in an interval A_k minus A_(k-1)
       between consecutive known levels, or above them all (those are counted);
    3. an interval of one leaf is exact. A larger one, D, may hide levels: it becomes an
       interval set of the next stage, pivoted at a witness p of its top level and probed with
       q's unit as an explicit guard bit. The bit survives exactly for the leaves of S, p's
       child under A_k = lca(q, p), which become p's set (a complete subtree joining q's chain
       at |A_k|); the others lie lower on q's chain and get exact l(q, x) from count probes
       pivoted at q with units on them only and p as a weight-1 guard.

    Why this is exact. The sets of a stage are disjoint, and each lies inside the set pivoted
    at its guard (its family's set, a complete subtree found at the stage before; the groups
    placed from an interval's guard lie in no set of that stage). A probe of a proven or root
    set cancels inside it, or (a multi-way node) absorbs its weight-1 guard and raises. A
    membership probe uses a witness whose guard survived, so lca(p, w) lies in p's complete
    subtree inside the set: its test bits are exact. Probes that may cancel elsewhere (interval
    sets, and the count probes pivoted at q) cancel inside q's set, where the only other sets
    of that stage are q's other children, and the packer never puts two requests of that
    family in one row (:func:`fpscope.reveal.packing.count_packed`). For an interval
    D = A_k minus A_(k-1) pivoted at p (lca(q, p) = A_k): x in D keeps q's unit iff
    lca(p, x) misses q iff x is in S; each leaf of S is either count-probed (the bit shows) or
    placed by membership inside lca(p, w), which lies in S, so S is found exactly. The rest,
    Below, lies in A_k's child C holding q when A_k is binary: the probe (q, x) cancels inside
    C, p's unit survives, and the units of Below outside it give l(q, x); the groups of equal
    l(q, .) are q's FPRev groups between the two levels (every leaf there is probed), proven
    next stage by their weight-1 guard q. If A_k has a third child, a leaf of Below lies in
    it, its probe cancels at A_k and absorbs p's unit: the field reads 0 and raises. An
    interval of one leaf, |A_k| - |A_(k-1)| = 1, leaves room for no other node: A_k is
    A_(k-1) plus that leaf. In a proven set, a leaf in another child of a multi-way node never
    lies under lca(p, w) (witnesses lie in p's child), so it is counted and its guard raises.
    Interval sizes are checked against the level differences, and the final tree must close
    every node with exactly two children whose sizes add up.
    """

    def __init__(self, prober: Prober, leaves: np.ndarray, rng, progress, membership_min):
        self.prober = prober
        self.B = pack_bits(prober)
        self.rng = rng
        self.progress = progress
        if membership_min is None:
            membership_min = max(_MEMBERSHIP_MIN, _MEMBERSHIP_INPUTS // prober.n)
        self.min_size = membership_min
        self.tasks = [Task(np.sort(leaves))]
        self.done = 0
        self._base = prober.probes  # progress counts every probe of this run (count, membership)

    def run(self):
        frontier = [0]
        while frontier:
            frontier = self._stage(frontier)
        return combine(self.tasks, binary=True)

    def _advance(self, probes: int) -> None:
        self.done += probes
        if self.progress:
            self.progress(max(self.done, self.prober.probes - self._base), self.prober.n)

    def _stage(self, frontier: list) -> list:
        """One stage over the sets in ``frontier``; returns the next stage's sets.

        Phases, each one batch of calls for all sets: count probes (samples of large sets, every
        partner of the others); membership rounds; count probes of the leaves membership left
        above every known level (or of every leaf, where the samples did not repeat); count
        probes from the guard for the leaves of interval sets that lie below their pivot's
        subtree.
        """
        tasks = self.tasks
        live = [tid for tid in frontier if len(tasks[tid].members) > 1]
        first, rand = [], {}
        for tid in live:
            t = tasks[tid]
            pick_pivot(t, self.rng)
            # the interval sets that membership makes of it carry an explicit guard bit
            fits = field_width(len(t.members), guard=True, explicit=True) <= self.B
            if len(t.members) >= self.min_size and fits:
                part, rand[tid] = self._samples(t)
                first.append(part)
            else:
                first.append(t.members[t.members != t.pivot])
        got = dict(zip(live, self._count(live, first)))  # tid -> (partners, l, ok)
        tables, rest = {}, {}
        for tid in rand:
            t = tasks[tid]
            keep = np.ones(len(t.members), dtype=bool)
            keep[np.searchsorted(t.members, np.append(got[tid][0], t.pivot))] = False
            unsampled = t.members[keep]
            table = self._level_table(*got[tid], rand[tid])
            if table is None:
                rest[tid] = unsampled
            else:
                tables[tid] = (*table, unsampled)
        places = self._classify(tables)
        for tid, (levels, _, unsampled) in tables.items():
            rest[tid] = unsampled[places[tid] == len(levels)]
        for tid, (part, l, ok) in zip(rest, self._count(list(rest), list(rest.values()))):
            p0, l0, ok0 = got[tid]
            got[tid] = tuple(np.concatenate(c) for c in ((p0, part), (l0, l), (ok0, ok)))
        nxt, below = [], []
        exact = [(np.zeros(0, dtype=np.int64),) * 3]  # (set, leaf, l) of the counted leaves
        for tid in live:
            nxt += self._settle(tid, *got[tid], tables.get(tid), places.get(tid), exact, below)
        nxt += add_groups(tasks, *(np.concatenate(c) for c in zip(*exact)))
        return nxt + self._resolve_below(below)

    def _samples(self, t: Task):
        """First partners of a large set: the leaves 2^i ranks from the pivot (in contiguous
        and strided trees they meet ancestors of every size) and random ones; returns them
        sorted and which are random."""
        mem = t.members
        r = int(np.searchsorted(mem, t.pivot))
        offs = 1 << np.arange(len(mem).bit_length())
        kind = np.zeros(len(mem), dtype=np.int8)  # 1: a rank offset, 2: random
        kind[np.concatenate([r + offs[offs < len(mem) - r], r - offs[offs <= r]])] = 1
        kind[self.rng.integers(0, len(mem), _RANDOM_SAMPLES)] = 2
        kind[r] = 0
        idx = np.flatnonzero(kind)
        return mem[idx], kind[idx] == 2

    def _count(self, tids: list, partners: list) -> list:
        """Count probes of the sets ``tids`` against ``partners``; returns (partners, l, ok) each."""
        tasks = self.tasks
        reqs = []
        for tid, part in zip(tids, partners):
            t = tasks[tid]
            if len(part):
                reqs.append(CountRequest(t.members, t.pivot, part, guard=t.guard, explicit=not t.proven,
                                         family=t.guard, exclusive=not t.proven))
        answers = iter(count_packed(self.prober, reqs))
        self._advance(sum(len(p) for p in partners))
        empty = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool))
        return [(part, *(next(answers) if len(part) else empty)) for part in partners]

    @staticmethod
    def _level_table(part, l, ok, rand):
        """The distinct l of the samples whose guard survived, with one witness each, when
        enough random samples repeat a level for membership probes to pay; else None."""
        good = np.flatnonzero(ok)
        if not len(good) or not rand.any():
            return None
        levels, first, inv, cnt = np.unique(l[good], return_index=True, return_inverse=True,
                                            return_counts=True)
        repeated = np.zeros(len(l), dtype=bool)
        repeated[good] = cnt[inv] >= 2
        if repeated[rand].sum() < _REPEATED * rand.sum():
            return None
        return levels, part[good][first]

    def _classify(self, tables: dict) -> dict:
        """Membership rounds for the sets tid -> (levels, witnesses, leaves): returns tid -> the
        place of each leaf, j < m (m levels) for level[j-1] < l(pivot, x) <= level[j]
        (level[-1] = 1), m above every known level.

        A binary search over the known levels, all sets at once: each round asks every unplaced
        leaf "are you under lca(pivot, witness of level k)?", k splitting its candidate
        intervals into halves of about equal leaves (the interval sizes are the level
        differences), within ceil(log2(m + 1)) + 2 rounds.
        """
        if not tables:
            return {}
        tasks = self.tasks
        tids = list(tables)
        m = np.array([len(tables[tid][0]) for tid in tids])
        weight = np.concatenate([np.diff([1, *tables[tid][0], len(tasks[tid].members)])
                                 for tid in tids])
        start = np.concatenate([[0], np.cumsum(m + 1)[:-1]])
        cum = np.concatenate([[0], np.cumsum(weight)])
        owner = np.repeat(np.arange(len(tids)), m + 1)
        pivot = np.repeat([tasks[tid].pivot for tid in tids], m + 1)
        witness = np.concatenate([np.append(tables[tid][1], -1) for tid in tids])
        counts = [len(tables[tid][2]) for tid in tids]
        x = np.concatenate([tables[tid][2] for tid in tids])
        who = np.repeat(np.arange(len(tids)), counts)
        answers = m + (weight[start + m] > 0)  # "above every level" only if leaves remain there
        depth = (np.ceil(np.log2(answers)).astype(np.int64) + 2)[who]
        lo, hi = start[who], (start + answers - 1)[who]
        r = 0
        while True:
            act = np.flatnonzero(lo < hi)
            if not len(act):
                break
            a, b = lo[act], hi[act]
            k = np.searchsorted(cum, (cum[a] + cum[b + 1]) / 2) - 1
            half = 1 << np.maximum(depth[act] - r - 1, 0)
            k = np.clip(k, np.maximum(a, b - half), np.minimum(b - 1, a + half - 1))
            out = self._membership(k, x[act], owner, pivot, witness)
            lo[act] = np.where(out, k + 1, a)
            hi[act] = np.where(out, b, k)
            r += 1
        self.prober.membership_sets += len(tids)
        return dict(zip(tids, np.split(lo - start[who], np.cumsum(counts)[:-1])))

    def _membership(self, k, x, owner, pivot, witness) -> np.ndarray:
        """Whether each leaf x[i] lies outside lca(pivot[k[i]], witness[k[i]]). The questions
        about one level fill rows of B test bits; the leftovers of different sets share rows
        (never two of one set: one pivot a row)."""
        B = self.B
        order = np.argsort(k, kind="stable")
        ks, xs = k[order], x[order]
        uk, first, cnt = np.unique(ks, return_index=True, return_counts=True)
        full, rem = cnt // B, cnt % B
        nfull = int(full.sum())
        # leftovers: next-fit into shared rows, taking the sets in turn
        part = np.flatnonzero(rem)
        own = owner[uk[part]]
        part = part[np.lexsort((own, np.arange(len(part)) - np.searchsorted(own, own)))]
        prow = np.zeros(len(uk), dtype=np.int64)
        poff = np.zeros(len(uk), dtype=np.int64)
        row, used, sets = nfull - 1, B, set()
        for i in part.tolist():
            o, w = int(owner[uk[i]]), int(rem[i])
            if used + w > B or o in sets:
                row, used, sets = row + 1, 0, set()
            prow[i], poff[i] = row, used
            used += w
            sets.add(o)
        item = np.repeat(np.arange(len(uk)), cnt)
        pos = np.arange(len(ks)) - first[item]
        infull = pos < full[item] * B
        trow = np.where(infull, (np.cumsum(full) - full)[item] + pos // B, prow[item])
        tbit = np.where(infull, pos % B, poff[item] + pos - full[item] * B)
        ikey = np.concatenate([np.repeat(uk, full), uk[part]])
        irow = np.concatenate([np.arange(nfull), prow[part]])
        got = membership_rows(self.prober, irow, pivot[ikey], witness[ikey], trow, xs, tbit)
        self._advance(len(irow))
        out = np.empty(len(k), dtype=bool)
        out[order] = got
        return out

    def _settle(self, tid, part, l, ok, table, place, exact: list, below: list) -> list:
        """Sort one set's answers; returns the new interval sets. Leaves placed between known
        levels give intervals; exact levels (counted) go to ``exact`` as (set, leaves, l) for
        FPRev groups; an interval set hands the leaves that cleared its guard bit to ``below``."""
        t = self.tasks[tid]
        if table is None and t.proven:  # most sets: every leaf counted, ok throughout
            if len(part):
                exact.append((np.full(len(part), tid), part, l))
            return []
        counted = ok
        nxt = []
        if table is not None:
            levels, _, unsampled = table
            counted = ok & (l > levels[-1])
            nxt += self._intervals(tid, levels, unsampled, place, part[ok & ~counted], l[ok & ~counted])
        if counted.any():
            exact.append((np.full(int(counted.sum()), tid), part[counted], l[counted]))
        if not t.proven:
            self._close_interval(tid, part[~ok], l[~ok], below)
        return nxt

    def _intervals(self, tid, levels, leaves, place, sampled, sampled_l) -> list:
        """Leaves between consecutive known levels (placed by membership, or sampled at a level):
        one leaf is exact, more become an interval set whose witnesses are the samples at its
        top level. Returns the new sets."""
        tasks = self.tasks
        t = tasks[tid]
        m = len(levels)
        inside = place < m
        leaves = np.concatenate([leaves[inside], sampled])
        place = np.concatenate([place[inside], np.searchsorted(levels, sampled_l)])
        order = np.argsort(place, kind="stable")
        cnt = np.bincount(place, minlength=m)
        lower = np.concatenate([[1], levels[:-1]])
        if (cnt != levels - lower).any():
            j = int(np.flatnonzero(cnt != levels - lower)[0])
            raise RevealError("inconsistent", f"{cnt[j]} leaves lie between the ancestors of leaf "
                              f"{t.pivot} of sizes {lower[j]} and {levels[j]}: the probes are not "
                              f"those of a fixed summation tree")
        wit = np.split(sampled[np.argsort(sampled_l, kind="stable")], np.cumsum(np.bincount(
            np.searchsorted(levels, sampled_l), minlength=m))[:-1])
        nxt = []
        for j, members in enumerate(np.split(leaves[order], np.cumsum(cnt)[:-1])):
            if cnt[j] == 1:
                t.groups.append((int(levels[j]), -1 - int(members[0])))
                continue
            nxt.append(len(tasks))
            tasks.append(Task(np.sort(members), guard=t.pivot, proven=False, parent=tid,
                               strategy=min(t.strategy + 1, 2) if cnt[j] > len(t.members) / 2 else 0,
                               base=int(lower[j]), top=int(levels[j]), witnesses=wit[j]))
        return nxt

    def _close_interval(self, tid, cleared, cleared_l, below: list) -> None:
        """An interval set after its probes: the leaves whose guard bit survived, with the pivot,
        are the pivot's subtree, which joins the guard's chain at the interval's top; the others
        (each read l = |set|: their probe cancelled at lca(guard, pivot)) lie lower on that
        chain and go to ``below``."""
        t = self.tasks[tid]
        if (cleared_l != len(t.members)).any():
            raise RevealError("inconsistent", f"a probe from leaf {t.pivot} cleared its guard bit "
                              f"below the top of its interval: not a fixed summation tree")
        t.witnesses = None
        self.tasks[t.parent].groups.append((t.top, tid))
        if len(cleared):
            keep = np.ones(len(t.members), dtype=bool)
            keep[np.searchsorted(t.members, cleared)] = False
            t.members = t.members[keep]
            below.append((tid, cleared))
            self.prober.hidden_leaves += len(cleared)

    def _resolve_below(self, below: list) -> list:
        """Exact l(q, x) for the leaves x that interval sets left below their pivot's subtree,
        q the interval's guard: count probes (q, x) with units on those leaves (and q) only,
        the interval's pivot as a weight-1 guard (absorbed only at a node with three or more
        children); the groups join q's set. Returns the new sets."""
        tasks = self.tasks
        reqs = [CountRequest(np.sort(np.append(leaves, tasks[tid].guard)), tasks[tid].guard, leaves,
                             guard=tasks[tid].pivot, family=tasks[tid].guard, exclusive=True,
                             offset=tasks[tid].base - 1) for tid, leaves in below]
        if not reqs:
            return []
        answers = count_packed(self.prober, reqs)
        self._advance(sum(len(r.partners) for r in reqs))
        owner = np.repeat([tasks[tid].parent for tid, _ in below], [len(lv) for _, lv in below])
        return add_groups(tasks, owner, np.concatenate([leaves for _, leaves in below]),
                           np.concatenate([l for l, _ in answers]))

