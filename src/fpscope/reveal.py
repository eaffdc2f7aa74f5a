"""Reveal the summation tree of a black-box reduction: FPRev, BasicFPRev and their checks.

Source: Xie et al., "FPRev: Revealing the Order of Floating-Point Summation by Numerical Testing",
USENIX ATC 2025 (arXiv 2411.00442). The probe is described in :mod:`fpscope.masks`; l(i, j) is the
number of leaves under the lowest common ancestor of leaves i and j.

Differences from the published reference implementation (fpscope NUMERICS.md section 1):
* iterative (breadth-first stages), so trees of any depth work;
* all probes of one stage are sent to the target as one batch (one GEMM for matrix ops);
* a pivot rule that switches to the highest index, then to random pivots, when a pivot keeps
  producing one giant group (chains in either direction cost about n to 2n probes);
* checks: output of each probe is a whole number of units; group sizes add up (this makes every
  probed l value agree with the tree); extra random pairs agree with the tree; repeated probes are
  identical (determinism); the batched path agrees with one call per probe.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .masks import Mask, choose_mask
from .targets.base import Target
from .tree import SumTree


class RevealError(RuntimeError):
    """The target does not behave as a fixed tree of rounded additions; ``kind`` says which check.

    kinds: "not-units" (a probe output is not a whole number of units), "inconsistent" (probe
    results contradict each other or the tree), "nondeterministic", "batch-mismatch",
    "units" (n units do not sum to n * u), "mask" (the mask does not absorb).
    """

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind
        self.result = None  # for kind "replay": the RevealResult whose replay failed


@dataclass
class RevealStats:
    calls: int = 0  # calls of the underlying operation
    probes: int = 0  # l(i, j) values obtained
    seconds: float = 0.0
    checks: dict = field(default_factory=dict)


class Prober:
    """Answers l(i, j) for batches of pairs through a target.

    Three ways to ask, chosen from what the target offers:
    * "rows": one probe vector per row of ``target.evaluate`` (reductions);
    * "outer-rows": matrix ops whose mask cannot be split across A and B (u != 1, e.g. fp16):
      one probe vector per row of A, B = ones;
    * "single": matrix ops whose outputs do not share one K-order: ``target.evaluate``, one
      call per probe, output (0, 0);
    * "grid": matrix ops with u = 1: +M in row r of A at the pivot, -M in column c of B at the
      partner; output (r, c) answers the pair (pivot_r, partner_c), so one call answers R * C
      pairs (NUMERICS.md section 1, batched probing). It assumes every output shares one K-order;
      the reveal checks that.

    Args:
        target: the black box (see :mod:`fpscope.targets.base`).
        mask: probe values.
        max_batch_bytes: memory cap of one batched call's input buffer (16 MB: 256 fp32 rows
            at n = 16384, the fastest of 4-32 MB in benchmarks/bench_reveal.py).
    """

    def __init__(self, target: Target, mask: Mask, max_batch_bytes: int = 16 << 20, mode: str | None = None):
        self.target = target
        self.mask = mask
        self.n = target.n
        self.probes = 0
        self._dtype = target.in_format.numpy_dtype()
        self.max_rows = max(1, max_batch_bytes // (self._dtype.itemsize * self.n))
        if mode == "single":  # one op call per probe, output (0, 0) of a matrix op
            self.mode = "single"
        elif target.is_matrix:
            self.mode = "grid" if mask.u == 1.0 else "outer-rows"
            if self.mode == "outer-rows":
                self.max_rows = max(1, min(self.max_rows, target.max_rows))
        else:
            self.mode = "rows"
        self.cache: dict[tuple[int, int], int] = {}  # grid mode answers more than was asked
        self.table: np.ndarray | None = None  # all pairs, after prefetch_all
        self.history: list[tuple[np.ndarray, np.ndarray]] = []
        self._buf: np.ndarray | None = None
        self.packed_calls = 0  # calls that carried probes of several leaf sets

    # -- probe inputs -------------------------------------------------------------------------
    def probe_rows(self, pairs: np.ndarray) -> np.ndarray:
        """(P, n) probe inputs in the storage dtype: units, +M at pairs[:, 0], -M at pairs[:, 1]."""
        X = np.full((len(pairs), self.n), self.mask.u, dtype=self._dtype)
        rows = np.arange(len(pairs))
        X[rows, pairs[:, 0]] = self.mask.M
        X[rows, pairs[:, 1]] = -self.mask.M
        return X

    def to_lca_sizes(self, out: np.ndarray, pairs: np.ndarray) -> np.ndarray:
        """Convert probe outputs (n - l) * u to l, refusing anything that is not whole units."""
        out = np.asarray(out, dtype=np.float64)
        k = out / self.mask.u
        ok = np.isfinite(k) & (k == np.round(k)) & (k >= 0) & (k <= self.n - 2)
        if not ok.all():
            b = int(np.flatnonzero(~ok)[0])
            i, j = (int(v) for v in pairs[b])
            raise RevealError(
                "not-units",
                f"probe ({i}, {j}) returned {out[b]!r}, not a whole number of units u = "
                f"{self.mask.u!r} in [0, n-2]: the mask does not absorb the units or the op is "
                f"not a fixed tree of rounded additions (compensated or exact summation?)",
            )
        return (self.n - k).astype(np.int64)

    # -- queries ------------------------------------------------------------------------------
    def lca_sizes(self, pairs) -> np.ndarray:
        """l values for an array of (i, j) pairs with i != j."""
        pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
        if self.table is not None:
            return self.table[pairs[:, 0], pairs[:, 1]]
        vals = self.fetch(pairs)
        self.history.append((pairs, vals))
        return vals

    def fetch(self, pairs: np.ndarray) -> np.ndarray:
        """Fresh answers from the target (no table; the grid cache is used and refreshed)."""
        if self.mode == "grid":
            return self._fetch_grid(pairs)
        res = np.empty(len(pairs), dtype=np.int64)
        if self._buf is None:
            self._buf = self.target.input_buffer(self.max_rows) if self.mode == "rows" else \
                np.empty((self.max_rows, self.n), dtype=self._dtype)
            self._buf[...] = self.mask.u
        buf, m = self._buf, self.mask
        for s in range(0, len(pairs), self.max_rows):
            chunk = pairs[s : s + self.max_rows]
            rows = np.arange(len(chunk))
            buf[rows, chunk[:, 0]] = m.M
            buf[rows, chunk[:, 1]] = -m.M
            try:
                X = buf[: len(chunk)]
                if self.mode in ("rows", "single"):
                    out = self.target.evaluate(X)
                else:
                    ones = np.ones((self.n, 1), dtype=self._dtype)
                    out = self.target.evaluate_outer(X, ones)[:, 0]
            finally:
                buf[rows, chunk[:, 0]] = m.u
                buf[rows, chunk[:, 1]] = m.u
            res[s : s + len(chunk)] = self.to_lca_sizes(out, chunk)
        self.probes += len(pairs)
        return res

    @property
    def pack_bits(self) -> int:
        """Bits of exact unit counts one call can carry (0: packing unavailable)."""
        if self.mode != "rows":
            return 0
        bits = min(self.target.in_format.p, self.target.out_format.p)
        while bits > 1 and not self.mask.absorbs((1 << bits) + 2, self.target.in_format):
            bits -= 1
        return bits

    def lca_sizes_packed(self, tasks: list) -> np.ndarray:
        """l values for the probes of several disjoint leaf sets, many sets per op call.

        ``tasks``: list of (members, pivot, others, guard) with members a sorted leaf array
        holding the pivot and others, and guard a leaf outside every task's members: the pivot
        of the task whose group this set is (FPRev's parent set). Returns the l values of
        (pivot, j) for j in others, task by task, concatenated.

        Units of weight 2^o_T * u sit on the members of task T and on its guard (a guard shared
        by several tasks carries the sum of their weights; every other leaf is 0), so the output
        is a sum of disjoint bit fields and the field at o_T counts T's units outside the
        cancelled subtree, plus 1 for the guard. Tasks are packed into fields by a greedy
        first-fit; several tasks may take turns in one field. Each field holds counts exactly as
        long as all fields fit in :attr:`pack_bits`.

        Why this is exact, and why no separate check of the nodes is needed: the parent set P of
        T is a complete subtree whose l values are true (induction from the first, unpacked
        stage), so T is the set of leaves of P whose lowest common ancestor with the parent's
        pivot g is one node X. If X is binary, T is X's other child, a complete subtree: every
        probe of T cancels inside T, the guard g is never absorbed, and T's field reads
        1 + (units of T outside the cancelled subtree) >= 1. If X has three or more children, T
        holds at least two of them, some probe of T cancels at X itself, X holds g and all of
        T, and T's field reads 0. So a field reading 0 proves a multi-way node and raises,
        and a stage with no such reading proves its sets complete, which carries the induction.

        Raises:
            RevealError("not-units"): an output is not a whole number of units.
            RevealError("inconsistent"): a field read 0: a node with three or more children
                (packed probes assume binary nodes; the caller falls back to plain probes).
        """
        B = self.pack_bits
        m = np.array([len(t[0]) for t in tasks])
        need = np.maximum(1, np.ceil(np.log2(np.maximum(m, 2))).astype(int))
        results = [None] * len(tasks)
        solo = [i for i in range(len(tasks)) if need[i] > B - 1 or B < 2]
        for i in solo:
            _, p, others, _ = tasks[i]
            results[i] = self.fetch(np.stack([np.full(len(others), p), others], axis=1))
        rest = [i for i in range(len(tasks)) if results[i] is None]
        if rest:
            self._packed(tasks, rest, need, B, results)
        out = np.concatenate(results)
        pairs = np.stack([np.repeat([t[1] for t in tasks], [len(t[2]) for t in tasks]),
                          np.concatenate([t[2] for t in tasks])], axis=1)
        self.history.append((pairs, out))
        return out

    def _packed(self, tasks, idx, need, B, results) -> None:
        lengths = {i: len(tasks[i][2]) for i in idx}
        total = sum(lengths[i] * need[i] for i in idx)
        target_rows = max(max(lengths.values()), -(-total // B))
        slots: list[list] = []  # [width, offset, length, [(task, start_row)]]
        used = 0
        for i in sorted(idx, key=lambda i: (-need[i], -lengths[i])):
            fit = [sl for sl in slots if sl[0] >= need[i] and sl[2] + lengths[i] <= target_rows]
            if fit:
                sl = max(fit, key=lambda sl: sl[2])
            elif used + need[i] <= B:
                sl = [need[i], used, 0, []]
                slots.append(sl)
                used += need[i]
            else:
                sl = min((sl for sl in slots if sl[0] >= need[i]), key=lambda sl: sl[2])
            sl[3].append((i, sl[2]))
            sl[2] += lengths[i]
        if self._buf is None:
            self._buf = self.target.input_buffer(self.max_rows)
        # flat tables over the packed tasks, indexed by task number
        T = len(tasks)
        base = np.full(T, -1, dtype=np.int64)
        pivot = np.full(T, -1, dtype=np.int64)
        size = np.zeros(T, dtype=np.int64)
        pos = 0
        for i in idx:
            base[i], pivot[i], size[i] = pos, tasks[i][1], len(tasks[i][0])
            pos += lengths[i]
        partners = np.concatenate([tasks[i][2] for i in idx]).astype(np.int64)
        flat = np.empty(pos, dtype=np.int64)
        rows_used = min(self.max_rows, max(sl[2] for sl in slots))  # buffer rows the calls use
        try:
            self._packed_rows(tasks, slots, B, (base, pivot, size, partners), flat)
        finally:
            self._buf[:rows_used] = self.mask.u  # leave the buffer as fetch() expects it
        for i in idx:
            results[i] = flat[base[i] : base[i] + lengths[i]]
        self.probes += pos

    def _packed_rows(self, tasks, slots, B, tables, flat) -> None:
        """Evaluate the packed rows, ``max_rows`` per call; l values go to ``flat``.

        Row r holds, for each slot (a bit field), the task whose turn it is at r: weight
        2^offset * u on its members and guard, +M at its pivot, -M at its r-th partner. The
        buffer keeps its rows between calls and only the leaves of tasks whose turn started or
        ended are rewritten, so a call costs about its masks, not n writes per row.
        """
        base, pivot, size, partners = tables
        u, M = self.mask.u, self.mask.M
        buf = self._buf
        S = len(slots)
        R = max(sl[2] for sl in slots)
        buf[: min(R, self.max_rows)] = 0
        # turn[s, r]: task number whose turn it is in slot s at row r (-1: none);
        # first[s, r]: the row where that turn began
        turn = np.full((S, R), -1, dtype=np.int64)
        first = np.zeros((S, R), dtype=np.int64)
        for s, sl in enumerate(slots):
            for i, st in sl[3]:
                ln = len(tasks[i][2])
                turn[s, st : st + ln] = i
                first[s, st : st + ln] = st
        weight = np.array([u * float(1 << sl[1]) for sl in slots])
        offs = np.array([sl[1] for sl in slots], dtype=np.int64)
        fmask = np.array([(1 << sl[0]) - 1 for sl in slots], dtype=np.int64)
        K = self.max_rows
        cur = np.full((S, K), -1, dtype=np.int64)  # task written in each buffer row, per slot

        cols: dict[int, object] = {}  # task -> its members as a (strided) slice where possible

        def put(i, lo, hi, w):  # task i's weight on (w > 0) or off (w < 0) in buffer rows lo:hi
            c = cols.get(i)
            if c is None:
                c = cols[i] = _as_slice(tasks[i][0])
            buf[lo:hi, c] = max(w, 0.0)
            buf[lo:hi, tasks[i][3]] += w  # a guard shared by several tasks sums their weights

        for c0 in range(0, R, K):
            k = min(K, R - c0)
            want = turn[:, c0 : c0 + k]
            for s in np.flatnonzero((cur[:, :k] != want).any(axis=1)).tolist():
                changed = cur[s, :k] != want[s]
                for row, w in ((cur[s, :k], -weight[s]), (want[s], weight[s])):
                    # runs of one task among the rows whose task changed: rewrite them
                    cuts = np.flatnonzero((np.diff(row) != 0) | (np.diff(changed) != 0)) + 1
                    for lo, hi in zip([0, *cuts.tolist()], [*cuts.tolist(), k]):
                        i = int(row[lo])
                        if i >= 0 and changed[lo]:
                            put(i, lo, hi, w)
                cur[s, :k] = want[s]
            rr, ss = np.nonzero(want.T >= 0)
            tids = want[ss, rr]
            at = base[tids] + c0 + rr - first[ss, c0 + rr]
            piv, part = pivot[tids], partners[at]
            buf[rr, piv] = M
            buf[rr, part] = -M
            out = np.asarray(self.target.evaluate(buf[:k]), dtype=np.float64) / u
            buf[rr, piv] = weight[ss]
            buf[rr, part] = weight[ss]
            self.packed_calls += 1
            with np.errstate(invalid="ignore"):
                N = out.astype(np.int64)
            ok = (N == out) & (N >= 0) & (N < (1 << B))
            if not ok.all():
                r = int(np.flatnonzero(~ok)[0])
                raise RevealError("not-units", f"a packed probe returned {out[r] * u!r}, not a "
                                  f"whole number of units: the mask does not absorb or the op "
                                  f"is not a fixed binary tree of rounded additions")
            cnt = (N[rr] >> offs[ss]) & fmask[ss]
            if not cnt.all():
                b = int(np.flatnonzero(cnt == 0)[0])
                raise RevealError(
                    "inconsistent",
                    f"probe ({piv[b]}, {part[b]}) cancelled the guard leaf {tasks[int(tids[b])][3]}: "
                    f"a node with three or more children (fused multi-term addition), which "
                    f"packed probes cannot resolve",
                )
            flat[at] = size[tids] + 1 - cnt

    def _grid_call(self, prow: np.ndarray, ccol: np.ndarray) -> np.ndarray:
        """One call: output (r, c) answers (prow[r], ccol[c]); returns the (R, C) l values (-1
        where prow[r] == ccol[c])."""
        m = self.mask
        P = np.ones((len(prow), self.n), dtype=self._dtype)
        P[np.arange(len(prow)), prow] = m.M
        Q = np.ones((self.n, len(ccol)), dtype=self._dtype)
        Q[ccol, np.arange(len(ccol))] = -m.M
        # products: 1 for units, M at the pivot, -M at the partner; the product at
        # k = prow[r] = ccol[c] is -M*M (overflow), an output we never read.
        out = np.asarray(self.target.evaluate_outer(P, Q), dtype=np.float64)
        rr, cc = np.meshgrid(prow, ccol, indexing="ij")
        valid = rr != cc
        L = np.full(out.shape, -1, dtype=np.int64)
        L[valid] = self.to_lca_sizes(out[valid], np.stack([rr[valid], cc[valid]], axis=1))
        self.probes += int(valid.sum())
        return L

    def _fetch_grid(self, pairs: np.ndarray) -> np.ndarray:
        t = self.target
        pivots = np.unique(pairs[:, 0])
        for ps in range(0, len(pivots), t.max_rows):
            prow = pivots[ps : ps + t.max_rows]
            cols = np.unique(pairs[np.isin(pairs[:, 0], prow), 1])
            for cs in range(0, len(cols), t.max_cols):
                ccol = cols[cs : cs + t.max_cols]
                L = self._grid_call(prow, ccol)
                for r, i in enumerate(prow.tolist()):
                    for c, j in enumerate(ccol.tolist()):
                        if i != j:
                            self.cache[(i, j)] = int(L[r, c])
        return np.asarray([self.cache[(i, j)] for i, j in pairs.tolist()], dtype=np.int64)

    def prefetch_all(self) -> bool:
        """Matrix ops with R, C >= n in grid mode: every pair in one call. True if done.

        Raises:
            RevealError("inconsistent"): outputs (i, j) and (j, i) disagree, i.e. the outputs
                do not share one K-order.
        """
        t = self.target
        if not (self.mode == "grid" and t.max_rows >= self.n and t.max_cols >= self.n and self.n >= 2):
            return False
        idx = np.arange(self.n)
        L = self._grid_call(idx, idx)
        np.fill_diagonal(L, 1)
        if not np.array_equal(L, L.T):
            i, j = (int(v) for v in np.argwhere(L != L.T)[0])
            raise RevealError(
                "inconsistent",
                f"outputs ({i},{j}) and ({j},{i}) disagree on l({i},{j}) ({L[i, j]} vs "
                f"{L[j, i]}): the outputs of this matrix op do not share one K-order",
            )
        self.table = L
        return True


# --------------------------------------------------------------------------------------------
# FPRev


def _as_slice(idx: np.ndarray):
    """A sorted index array as an equivalent slice when it is an arithmetic progression (numpy's
    8-lane chains are strided sets), else the array itself; slices write much faster."""
    if len(idx) == 1:
        return slice(int(idx[0]), int(idx[0]) + 1)
    step = int(idx[1] - idx[0])
    if step > 0 and int(idx[-1] - idx[0]) == step * (len(idx) - 1) and (np.diff(idx) == step).all():
        return slice(int(idx[0]), int(idx[-1]) + 1, step)
    return idx


class _Partial:
    """A node under construction: children as (node, smallest leaf) pairs, declared size (from l
    values), leaves held."""

    __slots__ = ("children", "size", "count")

    def __init__(self, children, size, count):
        self.children = children
        self.size = size
        self.count = count


def fprev(
    prober: Prober,
    leaves=None,
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
    packed: bool = False,
):
    """FPRev over ``leaves`` (default: all n). Returns the canonical nested-tuple tree.

    Breadth-first: each stage probes the pivot of every pending leaf set against the rest of its
    set, in one batch; groups of equal l become the next stage's sets. With ``packed``, the
    probes of different sets share op calls (:meth:`Prober.lca_sizes_packed`; binary trees only:
    a node with three or more children raises RevealError("inconsistent") and the caller falls
    back to plain probes).

    Raises:
        RevealError("inconsistent"): group sizes contradict the l values.
    """
    n = prober.n
    leaves = np.arange(n) if leaves is None else np.asarray(leaves)
    rng = np.random.default_rng(seed)
    # a task: [members, strategy, pivot, groups(list of (L, child task id))]
    tasks = [{"members": leaves, "strategy": 0}]
    frontier = [0]
    done_probes = 0
    while frontier:
        packs = []
        for tid in frontier:
            t = tasks[tid]
            mem = t["members"]
            if len(mem) == 1:
                continue
            s = t["strategy"]
            if s == 0:
                p = int(mem.min())
            elif s == 1:
                p = int(mem.max())
            else:
                p = int(rng.choice(mem))
            t["pivot"] = p
            others = mem[mem != p]
            t["others"] = others
            packs.append((mem, p, others, t.get("guard", -1)))
        if not packs:
            break
        if packed and len(packs) > 1:
            allvals = prober.lca_sizes_packed(packs)
        else:
            allvals = prober.lca_sizes(np.stack([
                np.repeat([pk[1] for pk in packs], [len(pk[2]) for pk in packs]),
                np.concatenate([pk[2] for pk in packs])], axis=1))
        done_probes += len(allvals)
        if progress:
            progress(done_probes, n)
        pos = 0
        nxt = []
        for tid in frontier:
            t = tasks[tid]
            if len(t["members"]) == 1:
                continue
            others = t["others"]
            vals = allvals[pos : pos + len(others)]
            pos += len(others)
            order = np.argsort(vals, kind="stable")
            sv, so = vals[order], others[order]
            bounds = [0, *(np.flatnonzero(sv[1:] != sv[:-1]) + 1).tolist(), len(sv)]
            groups = []
            half = len(t["members"]) / 2
            for a, b in zip(bounds[:-1], bounds[1:]):
                if b - a == 1:  # a single leaf: nothing left to probe
                    groups.append((int(sv[a]), -1 - int(so[a])))
                    continue
                giant = b - a > half
                child = len(tasks)
                tasks.append({"members": np.sort(so[a:b]), "guard": t["pivot"],
                              "strategy": min(t["strategy"] + 1, 2) if giant else 0})
                groups.append((int(sv[a]), child))
                nxt.append(child)
            t["groups"] = groups
            del t["others"]
        frontier = nxt
    # combine bottom-up: children were created after their parents. A node is closed into a
    # canonical tuple (children sorted by smallest leaf) as soon as it holds all its leaves.
    # result[tid] = (node, smallest leaf); an open multi-way node is a _Partial whose children
    # list holds (node, smallest leaf) pairs
    result: dict[int, tuple] = {}
    for tid in range(len(tasks) - 1, -1, -1):
        t = tasks[tid]
        mem = t["members"]
        if len(mem) == 1:
            result[tid] = (int(mem[0]), int(mem[0]))
            continue
        running: object = t["pivot"]
        rk = running  # smallest leaf under running
        count = 1
        for L, child in t["groups"]:
            if child < 0:  # a single leaf, encoded as -1 - leaf
                sub = sk = -1 - child
                g = 1
            else:
                sub, sk = result.pop(child)
                g = len(tasks[child]["members"])
            if L <= count or running.__class__ is _Partial:
                raise RevealError("inconsistent", _incons(t["pivot"], L, count))
            if sub.__class__ is _Partial:  # an open multi-way node: running joins it
                if sub.size != L or count + g > L:
                    raise RevealError("inconsistent", _incons(t["pivot"], L, count + g))
                kids = sub.children + [(running, rk)]
            elif count + g > L:
                raise RevealError("inconsistent", _incons(t["pivot"], L, count + g))
            else:
                kids = None
            count += g
            if kids is None and count == L:  # most nodes: binary, closed at once
                running = (running, sub) if rk < sk else (sub, running)
            elif kids is None:
                running = _Partial([(running, rk), (sub, sk)], L, count)
            elif count == L:
                running = tuple(nd for nd, _ in sorted(kids, key=lambda c: c[1]))
            else:
                running = _Partial(kids, L, count)
            rk = rk if rk < sk else sk
        result[tid] = (running, rk)
    root = result[0][0]
    if isinstance(root, _Partial):
        raise RevealError(
            "inconsistent",
            f"the revealed node sizes do not add up (a node of {root.size} leaves holds "
            f"{root.count}): the probes are not those of a fixed summation tree",
        )
    return root


def _incons(p, L, count) -> str:
    return (
        f"probes from leaf {p} are inconsistent (a subtree of {count} leaves under a node of "
        f"{L}): the op is not a fixed tree of rounded additions, is nondeterministic, or the "
        f"mask does not absorb"
    )


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


# --------------------------------------------------------------------------------------------
# checks


def lca_sizes_of_tree(tree: SumTree, pairs: np.ndarray) -> np.ndarray:
    """l(i, j) of ``tree`` for each (i, j) in ``pairs`` (P, 2); O(nodes) Python, O(P * nodes)
    numpy work.

    Every internal node covers a contiguous range of the canonical leaf order, so LCA(i, j) is
    the smallest node whose range holds both. One depth-first pass numbers the leaves and
    records each node's range.
    """
    leafpos: dict = {}
    lo, hi = [], []
    pos = 0
    stack = [tree.root]
    while stack:
        cur = stack.pop()
        c = cur.__class__
        if c is tuple:
            stack.append([pos])  # closes the node: its range starts here
            stack.extend(reversed(cur))
        elif c is list:
            lo.append(cur[0])
            hi.append(pos)
        else:
            leafpos[cur] = pos
            pos += 1
    lo_a, hi_a = np.asarray(lo, dtype=np.int64), np.asarray(hi, dtype=np.int64)
    size = hi_a - lo_a
    P = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    pos_ = np.array([[leafpos[int(i)], leafpos[int(j)]] for i, j in P], dtype=np.int64).reshape(-1, 2)
    a, c = pos_.min(axis=1), pos_.max(axis=1)
    holds = (lo_a[None, :] <= a[:, None]) & (hi_a[None, :] > c[:, None])
    return np.where(holds, size[None, :], np.iinfo(np.int64).max).min(axis=1)


def check_units(prober: Prober) -> None:
    """n units must sum to exactly n * u (else the accumulator cannot count them)."""
    t, m = prober.target, prober.mask
    x = np.full((1, prober.n), m.u, dtype=prober._dtype)
    got = float(t.evaluate(x)[0])
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
    X = np.full((2, n), m.u, dtype=prober._dtype)
    X[0, 0] = m.M
    X[1, n - 1] = m.M
    got = t.evaluate(X)
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
        again = prober._grid_call(idx, idx)
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


def _rows_evaluator(target: Target):
    """For matrix ops whose outputs share one K-order: evaluate many probe vectors per call, one
    per row of A (B = ones), instead of one call per vector."""
    if not (target.is_matrix and target.max_rows > 1):
        return None

    def evaluate(X):
        X = target.as_storage(np.asarray(X))
        ones = np.ones((target.n, 1), dtype=X.dtype)
        return np.concatenate([
            np.asarray(target.evaluate_outer(X[s : s + target.max_rows], ones))[:, 0]
            for s in range(0, len(X), target.max_rows)
        ])

    return evaluate


def _tree_and_checks(prober, algorithm, seed, repeats, extra_pairs, progress, stats) -> SumTree:
    rng = np.random.default_rng(seed + 1)
    prober.prefetch_all()
    if algorithm == "basic":
        nested = basic_fprev(prober)
    elif algorithm == "fprev":
        nested = None
        if prober.pack_bits >= 4 and prober.table is None:
            try:
                tree = SumTree.from_canonical(fprev(prober, seed=seed, progress=progress, packed=True), prober.n)
                if prober.packed_calls:  # every packed set proven a complete subtree (guards)
                    stats.checks["packed_probes"] = "ok"
                nested = tree
            except RevealError as exc:  # not a binary tree: plain FPRev decides
                stats.checks["packed_probes"] = f"fell back to one probe per call ({exc.kind})"
                prober.history.clear()  # packed answers assume binary nodes: forget them
                nested = None
        if nested is None:
            nested = SumTree.from_canonical(fprev(prober, seed=seed, progress=progress), prober.n)
    else:
        raise ValueError(f"unknown algorithm {algorithm!r}; known: fprev, basic")
    tree = nested if isinstance(nested, SumTree) else SumTree(nested)
    stats.checks["sizes"] = "ok"
    stats.checks["repeated_probes"] = check_repeat(prober, repeats, rng)
    stats.checks["batched_vs_single"] = check_batched(prober, min(repeats, 16), rng)
    stats.checks["random_pairs"] = check_random_pairs(prober, tree, extra_pairs, rng)
    if prober.mode != "single":
        stats.checks["shared_k_order_outputs"] = check_shared_order(prober, tree, 4, rng)
    return tree


@dataclass
class RevealResult:
    """What :func:`reveal` found: the tree, the mask, stats, accumulator and replay report."""

    tree: SumTree
    mask: Mask
    stats: RevealStats
    algorithm: str
    accumulator: dict = field(default_factory=dict)
    replay: dict | None = None


def reveal(
    target: Target,
    algorithm: str = "fprev",
    mask: Mask | None = None,
    seed: int = 0,
    repeats: int = 32,
    extra_pairs: int = 64,
    replay_samples: int = 32,
    progress: Callable[[int, int], None] | None = None,
) -> RevealResult:
    """Reveal the summation tree of ``target``, check it, and replay it against the op.

    Steps: unit and absorption checks; FPRev (or BasicFPRev) with batched probes; the tree's
    sizes, repeated probes (determinism), batched-vs-single probes, random extra pairs and (matrix
    ops) every output's K-order are checked; the accumulator precision is measured
    (:mod:`fpscope.probes.accumulator`); finally the tree is replayed on ``replay_samples`` random
    inputs per distribution (:mod:`fpscope.verify`) and must match bit for bit.

    Args:
        target: the operation (n leaves).
        algorithm: "fprev" (default) or "basic" (all pairs; n(n-1)/2 probes).
        mask: probe values; default :func:`fpscope.masks.choose_mask` for the target's formats.
        seed: seed of the pivot and sampling choices (results are reproducible).
        repeats: how many probes to repeat for the determinism check.
        extra_pairs: how many random unprobed pairs to check against the tree.
        replay_samples: random inputs per distribution for the replay check (0 skips it).
        progress: optional callback(probes_done, n).

    Returns:
        RevealResult (stats.seconds is the wall time of the tree reveal and its checks, without
        the accumulator probe and the replay check).

    Raises:
        fpscope.masks.MaskError: n too large for the formats.
        RevealError: a check failed (see its ``kind``; "replay" when the op is not a fixed tree
            of rounded additions, e.g. compensated summation).
        fpscope.targets.base.TargetError: the op itself failed.
    """
    from .formats import get_format
    from .probes.accumulator import detect_accumulator
    from .verify import verify

    t0 = time.perf_counter()
    calls0 = target.calls
    if mask is None:
        mask = choose_mask(target.n, target.in_format, target.out_format)
    stats = RevealStats()
    n = target.n
    if n == 1:
        tree, probes = SumTree(0), 0
    else:
        prober = Prober(target, mask)
        check_units(prober)
        check_absorbs(prober)
        stats.checks["units"] = "ok"
        stats.checks["absorption"] = "ok"
        try:
            tree = _tree_and_checks(prober, algorithm, seed, repeats, extra_pairs, progress, stats)
            probes = prober.probes
        except RevealError as exc:
            if not (target.is_matrix and exc.kind == "inconsistent" and prober.mode != "single"):
                raise
            # outputs do not share one K-order (edge tiles, split-K): reveal output (0, 0) alone
            single = Prober(target, mask, mode="single")
            tree = _tree_and_checks(single, algorithm, seed, repeats, extra_pairs, progress, stats)
            try:  # name the outputs that differ from output (0, 0), where possible
                check_shared_order(prober, tree, 8, np.random.default_rng(seed + 2))
                where = str(exc)
            except RevealError as exc2:
                where = str(exc2)
            stats.checks["shared_k_order_outputs"] = f"no: {where}; the tree is that of output (0, 0)"
            probes = prober.probes + single.probes
    stats.calls = target.calls - calls0
    stats.probes = probes
    stats.seconds = time.perf_counter() - t0
    shared = not str(stats.checks.get("shared_k_order_outputs", "")).startswith("no:")
    acc = detect_accumulator(target, tree, evaluate=_rows_evaluator(target) if shared else None)
    result = RevealResult(tree=tree, mask=mask, stats=stats, algorithm=algorithm, accumulator=acc)
    if acc.get("format") and not mask.absorbs(n, get_format(acc["format"])):
        raise RevealError(
            "mask",
            f"the op accumulates in {acc['format']}, where the mask M = {mask.M!r} does not absorb "
            f"{n - 2} units of {mask.u!r}; the tree cannot be trusted",
        )
    if replay_samples > 0:
        acc_fmt = get_format(acc["format"]) if acc.get("format") else target.in_format
        rep = verify(target, tree, acc_fmt, samples=replay_samples, seed=seed,
                     first_output_only=not shared)
        if not rep["bit_exact"] and not target.is_matrix and tree.max_fan_in() == 2 and n > 2:
            mixed = _mixed_precision(target, tree, acc_fmt, replay_samples, seed)
            if mixed is not None:
                rep, acc["node_formats"] = mixed
                acc["mixed"] = True
        result.replay = rep
        if tree.max_fan_in() > 2:
            # fused k-term nodes of matrix units align and truncate (NUMERICS.md section 2);
            # the replay models them as exact sums, so a mismatch here is not evidence
            rep["enforced"] = False
            rep["note"] = ("the tree has fused multi-term nodes; their node arithmetic is not "
                           "modelled by the replay (exact sum, one rounding)")
        elif not rep["bit_exact"]:
            err = RevealError(
                "replay",
                f"the revealed tree, replayed with a {acc_fmt.name} accumulator, matches the op on "
                f"only {rep['matched']} of {rep['samples']} random inputs: the op is not a fixed "
                f"tree of rounded additions (compensated or exact summation, data-dependent "
                f"order, or an unmodelled product rounding)",
            )
            err.result = result  # the tree and the failed replay, kept as evidence
            raise err
    return result


def _mixed_precision(target: Target, tree: SumTree, acc_fmt, samples: int, seed: int):
    """Per-node accumulator formats (e.g. OpenBLAS sdot: a float32 vector body and a float64
    scalar tail); returns (replay report, run-length node formats) when they replay bit-exactly."""
    from .formats import get_format
    from .probes.accumulator import detect_node_formats, run_lengths
    from .verify import verify

    names = detect_node_formats(target, tree)
    if any(nm is not None and nm.startswith(">") for nm in names):
        return None
    nodes = list(tree.nodes_postorder())
    index = {id(nd): i for i, nd in enumerate(nodes)}
    root = nodes[-1]
    child_fmts = [names[index[id(c)]] for c in root if isinstance(c, tuple)]
    options = []
    for cand in [max(child_fmts, key=lambda f: get_format(f).p) if child_fmts else None,
                 min(child_fmts, key=lambda f: get_format(f).p) if child_fmts else None,
                 acc_fmt.name, "fp64"]:
        if cand is not None and cand not in options:
            options.append(cand)
    for root_fmt in options:
        full = names[:-1] + [root_fmt]
        fmts = [get_format(f) for f in full]
        base = min(fmts, key=lambda f: f.p)
        rep = verify(target, tree, base, samples=samples, seed=seed, node_formats=fmts)
        if rep["bit_exact"]:
            rep["accumulator"] = "mixed"
            return rep, run_lengths(full)
    return None
