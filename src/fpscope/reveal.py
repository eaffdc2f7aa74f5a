"""Reveal the summation tree of a black-box reduction: FPRev, BasicFPRev and their checks.

Source: Xie et al., "FPRev: Revealing the Order of Floating-Point Summation by Numerical Testing",
USENIX ATC 2025 (arXiv 2411.00442). The probe is described in :mod:`fpscope.masks`; l(i, j) is the
number of leaves under the lowest common ancestor of leaves i and j.

Differences from the published reference implementation (fpscope NUMERICS.md section 1):
* iterative (breadth-first stages), so trees of any depth work;
* all probes of one stage are sent to the target as one batch (one GEMM for matrix ops);
* reductions pack the probes of several leaf sets into one input row (bit fields of unit
  counts, a guard leaf proving each set complete), and large sets whose levels repeat are
  classified with membership probes, one bit a leaf (:func:`fprev`);
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


@dataclass
class CountRequest:
    """Count probes (pivot, j) for j in ``partners`` with units only on ``members`` (a sorted
    leaf array holding the pivot and the partners); see :meth:`Prober.count_packed`.

    guard: a leaf outside the members (-1: none) whose unit shows whether a probe cancelled at
        a node holding it. With ``explicit`` the unit has its own bit in the field, which a
        probe may clear (the answer says so); otherwise it adds 1 to the count and must survive.
    family: the pivot of the complete subtree inside which every probe of the request cancels
        (-1: the whole tree); ``exclusive``: its probes may cancel outside its own members, so
        no other request of its family shares its rows.
    offset: added to every answer (leaves under the cancelled node that carry no unit).
    """

    members: np.ndarray
    pivot: int
    partners: np.ndarray
    guard: int = -1
    explicit: bool = False
    family: int = -1
    exclusive: bool = False
    offset: int = 0

    @property
    def width(self) -> int:
        """Bits of its field: the units outside the cancelled subtree (at most |members| - 2),
        and the guard (one more bit when explicit, else one more unit)."""
        m = len(self.members)
        if self.explicit:
            return _bits(m - 1) + 1
        return _bits(m) if self.guard >= 0 else _bits(m - 1)


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
        self._bg: tuple = (None, 0)  # (value, rows): the first rows hold only that value
        self.packed_calls = 0  # calls of packed count or membership rows
        self.membership_sets = 0  # leaf sets classified with membership probes
        self.hidden_leaves = 0  # leaves of interval sets below their pivot's subtree

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
        buf, m = self._buffer(self.mask.u, min(len(pairs), self.max_rows)), self.mask
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

    def _buffer(self, background: float, rows: int) -> np.ndarray:
        """The probe buffer, its first ``rows`` rows all ``background`` (u for plain probes, 0
        for packed and membership rows); callers use those rows only and leave them so. Rows
        are refilled only when the background changes or more of them are needed."""
        if self._buf is None:
            self._buf = self.target.input_buffer(self.max_rows) if self.mode == "rows" else \
                np.empty((self.max_rows, self.n), dtype=self._dtype)
        value, held = self._bg
        if value != background:
            value, held = background, 0
        if held < rows:
            self._buf[held:rows] = background
            held = rows
        self._bg = (value, held)
        return self._buf

    def count_packed(self, reqs: list) -> list:
        """Answers of :class:`CountRequest` s, the probes of many requests sharing each op call.

        Returns, per request, (l, ok): l[k] = offset + |members n lca(pivot, partners[k])| (the
        request's units absorbed, pivot and partner included) and ok[k]: the guard unit survived
        (always True without an explicit guard bit).

        Units of weight 2^o * u sit on the members of a request whose field starts at bit o, and
        on its guard (weight 2^o, or 2^(o + w) above a count of w bits for an explicit guard
        bit); every other leaf is 0. Requests are packed into fields (:func:`_assign_slots`);
        several take turns in one field, and every field fits in :attr:`pack_bits`.

        Why each field is exact: a probe cancels +-M at lca(pivot, j), absorbing every unit
        below it; the units elsewhere are summed exactly (they fit in pack_bits). A field is
        therefore exact when no other probe of its row cancels at a node holding its units.
        Callers guarantee that the members of the requests are disjoint; that the probes of a
        non-exclusive request cancel inside its members or absorb its weight-1 guard (which
        raises, so a reading it spoils is never used); and that the probes of an exclusive
        request cancel inside the set pivoted at its ``family``, a complete subtree that holds
        no member or guard of a request of another family. The packer puts no two requests of
        a family with an exclusive member in one row.

        Weight-1 guards prove sets complete (FPRev groups): the caller passes a set T and the
        pivot g of its parent set P (a complete subtree whose l values are true), so T is the
        set of leaves of P whose lowest common ancestor with g is one node X. If X is binary, T
        is X's other child, a complete subtree: every probe of T cancels inside T, the guard g
        is never absorbed, and T's field reads 1 + (units of T outside the cancelled subtree)
        >= 1. If X has three or more children, T holds at least two of them, some probe of T
        cancels at X itself, X holds g and all of T, and T's field reads 0. So a field reading
        0 proves a multi-way node and raises, and a stage with no such reading proves its sets
        complete. Requests too wide for a packed field (fp16 sums: pack_bits = 11) are asked
        with plain probes (exact l), which is allowed only without an explicit guard or
        exclusivity.

        Raises:
            RevealError("not-units"): an output is not a whole number of units.
            RevealError("inconsistent"): a weight-1 guard was absorbed (a node with three or
                more children; packed probes assume binary nodes and the caller falls back to
                plain probes), or a field holds an impossible count.
        """
        B = self.pack_bits
        res: list = [None] * len(reqs)
        for i, r in enumerate(reqs):
            if r.width <= B:
                continue
            if r.explicit or r.exclusive:
                raise ValueError(f"a set of {len(r.members)} leaves needs {r.width} bits; "
                                 f"explicit guards and exclusive requests must fit in {B}")
            l = self.lca_sizes(np.stack([np.full(len(r.partners), r.pivot), r.partners], axis=1))
            if (l > len(r.members)).any():
                raise RevealError("inconsistent", _MULTIWAY.format(p=r.pivot, g=r.guard))
            res[i] = (l, np.ones(len(l), dtype=bool))
        idx = [i for i in range(len(reqs)) if res[i] is None]
        if idx:
            sub = [reqs[i] for i in idx]
            l, ok = self._count_rows(sub, B)
            pairs = np.stack([np.repeat([r.pivot for r in sub], [len(r.partners) for r in sub]),
                              np.concatenate([r.partners for r in sub])], axis=1)
            self.history.append((pairs[ok], l[ok]))
            cuts = np.cumsum([len(r.partners) for r in sub])[:-1]
            for i, li, oi in zip(idx, np.split(l, cuts), np.split(ok, cuts)):
                res[i] = (li, oi)
        return res

    def _count_rows(self, reqs: list, B: int) -> tuple[np.ndarray, np.ndarray]:
        """Evaluate packed count requests, ``max_rows`` rows per call; returns (l, ok) flat.

        Row r holds, for each field, the request whose turn it is at r: its weights on its
        members and guard, +M at its pivot, -M at its r-th partner. Large requests keep their
        member weights in the buffer rows between calls and rewrite them only where a turn
        starts or ends (slices mostly), so a call costs about its masks, not n writes per row;
        the members of small requests and every guard are rewritten in one scatter per call.
        The buffer is left all 0.
        """
        lengths = [len(r.partners) for r in reqs]
        slots = _assign_slots([r.width for r in reqs], lengths, [r.family for r in reqs],
                              [r.exclusive for r in reqs], B)
        u, M = self.mask.u, self.mask.M
        start = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        pivot = np.array([r.pivot for r in reqs], dtype=np.int64)
        guard = np.array([r.guard for r in reqs], dtype=np.int64)
        size = np.array([len(r.members) for r in reqs], dtype=np.int64)
        offset = np.array([r.offset for r in reqs], dtype=np.int64)
        partners = np.concatenate([r.partners for r in reqs]).astype(np.int64)
        # guard mode: 0 none, 1 weight 1, 2 explicit bit above a count of cbits bits
        gmode = np.array([2 if r.explicit else int(r.guard >= 0) for r in reqs], dtype=np.int64)
        cbits = np.array([r.width - (r.explicit) for r in reqs], dtype=np.int64)
        gfac = np.where(gmode == 2, np.ldexp(1.0, cbits), (gmode == 1).astype(float))
        small = size <= _SCATTER
        smem = np.concatenate([np.zeros(0, dtype=np.int64)]
                              + [r.members for r in reqs if len(r.members) <= _SCATTER])
        soff = np.cumsum(np.where(small, size, 0)) - np.where(small, size, 0)  # start in smem
        S = len(slots)
        # turn[s, r]: request whose turn it is in slot s at row r (-1: none); at[s, r]: the
        # index of its partner there in ``partners``
        ts, ti, tr, tn, tp = (np.array(c, dtype=np.int64) for c in zip(
            *((s, *t) for s, sl in enumerate(slots) for t in sl[2])))
        R = int((tr + tn).max())
        K = self.max_rows
        buf = self._buffer(0.0, min(R, K))
        turn = np.full((S, R), -1, dtype=np.int64)
        at_tab = np.zeros((S, R), dtype=np.int64)
        step = np.arange(tn.sum()) - np.repeat(np.cumsum(tn) - tn, tn)  # row within its turn
        cells = (np.repeat(ts, tn), np.repeat(tr, tn) + step)
        turn[cells] = np.repeat(ti, tn)
        at_tab[cells] = np.repeat(start[ti] + tp, tn) + step
        weight = np.array([u * float(1 << sl[1]) for sl in slots])
        offs = np.array([sl[1] for sl in slots], dtype=np.int64)
        fmask = np.array([(1 << sl[0]) - 1 for sl in slots], dtype=np.int64)
        cur = np.full((S, K), -1, dtype=np.int64)  # large request held in each buffer row, per slot
        cols: dict[int, object] = {}  # request -> its members as a (strided) slice where possible
        scattered = [np.zeros(0, dtype=np.int64)] * 2  # buffer cells the last scatter wrote

        def put(i, lo, hi, w):  # large request i's weight on its members in buffer rows lo:hi
            c = cols.get(i)
            if c is None:
                c = cols[i] = _as_slice(reqs[i].members)
            buf[lo:hi, c] = w

        def switch(k, want):  # rewrite the large requests of the first k buffer rows to ``want``
            want = np.where(small[want] & (want >= 0), -1, want)
            slots_changed = np.flatnonzero((cur[:, :k] != want).any(axis=1)).tolist()
            # every old turn off before any new one on: a request split over two fields may
            # move between them in one buffer row
            for held, on in ((cur[:, :k], 0.0), (want, 1.0)):
                for s in slots_changed:
                    row, changed = held[s], cur[s, :k] != want[s]
                    # runs of one request among the rows whose request changed: rewrite them
                    cuts = np.flatnonzero((np.diff(row) != 0) | (np.diff(changed) != 0)) + 1
                    for lo, hi in zip([0, *cuts.tolist()], [*cuts.tolist(), k]):
                        i = int(row[lo])
                        if i >= 0 and changed[lo]:
                            put(i, lo, hi, on * weight[s])
            cur[:, :k] = want

        def scatter(rr, ss, tids):  # small requests' members and every guard of these turns
            buf[tuple(scattered)] = 0.0
            sm = np.flatnonzero(small[tids])
            count = size[tids[sm]]
            within = np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count)
            rows = np.repeat(rr[sm], count)
            cols_ = smem[np.repeat(soff[tids[sm]], count) + within]
            buf[rows, cols_] = np.repeat(weight[ss[sm]], count)
            g = np.flatnonzero(gmode[tids])  # a guard shared by several requests sums their weights
            np.add.at(buf, (rr[g], guard[tids[g]]), weight[ss[g]] * gfac[tids[g]])
            scattered[:] = [np.concatenate([rows, rr[g]]), np.concatenate([cols_, guard[tids[g]]])]

        lam = np.empty(len(partners), dtype=np.int64)
        ok = np.empty(len(partners), dtype=bool)
        try:
            for c0 in range(0, R, K):
                k = min(K, R - c0)
                want = turn[:, c0 : c0 + k]
                rr, ss = np.nonzero(want.T >= 0)
                tids = want[ss, rr]
                switch(k, want)
                scatter(rr, ss, tids)
                at = at_tab[ss, c0 + rr]
                piv, part = pivot[tids], partners[at]
                buf[rr, piv] = M
                buf[rr, part] = -M
                try:
                    out = np.asarray(self.target.evaluate(buf[:k]), dtype=np.float64) / u
                finally:
                    buf[rr, piv] = weight[ss]
                    buf[rr, part] = weight[ss]
                self.packed_calls += 1
                field = (_whole_units(out, B, u)[rr] >> offs[ss]) & fmask[ss]
                mode, cb = gmode[tids], cbits[tids]
                absorbed = (mode == 1) & (field == 0)
                if absorbed.any():
                    b = int(np.flatnonzero(absorbed)[0])
                    raise RevealError("inconsistent", _MULTIWAY.format(p=piv[b], g=guard[tids[b]]))
                cnt = (field & ((1 << cb) - 1)) - (mode == 1)
                bit = field >> cb
                got = size[tids] - cnt
                if ((bit > (mode == 2)) | (got < 2)).any():
                    raise RevealError("inconsistent", "a packed probe read an impossible unit count: "
                                      "the op is not a fixed tree of rounded additions")
                lam[at] = got + offset[tids]
                ok[at] = (bit == 1) | (mode != 2)
            self.probes += len(partners)
        finally:
            switch(K, np.full((S, K), -1, dtype=np.int64))  # leave the buffer all 0
            buf[tuple(scattered)] = 0.0
        return lam, ok

    def membership_rows(self, item_row, item_pivot, item_witness, test_row, test_leaf,
                        test_bit) -> np.ndarray:
        """Membership probes: row item_row[i] holds +M at item_pivot[i] and -M at
        item_witness[i]; test t has weight 2^test_bit[t] * u on leaf test_leaf[t] in row
        test_row[t]; every other leaf is 0. Returns, per test, whether its bit survived, i.e.
        whether its leaf lies outside lca(pivot, witness) of the item whose leaves it shares.

        Exact when, as callers guarantee, the items of a row lie in disjoint leaf sets, each
        item's lca(pivot, witness) and test leaves lie inside its own set, and each row's test
        bits are distinct and below :attr:`pack_bits`: every unit inside an item's cancelled
        subtree is absorbed, the others are summed exactly. Every row needs at least one item.

        Raises:
            RevealError("not-units"): an output is not a whole number of units.
            RevealError("inconsistent"): an output holds a bit no test of its row carries.
        """
        u, M, B = self.mask.u, self.mask.M, self.pack_bits
        io = np.argsort(item_row, kind="stable")
        to = np.argsort(test_row, kind="stable")
        ir, ip, iw = item_row[io], item_pivot[io], item_witness[io]
        tr, tl, tb = test_row[to], test_leaf[to], test_bit[to]
        weights = u * np.ldexp(1.0, tb)
        got = np.empty(len(tr), dtype=bool)
        R, K = int(ir[-1]) + 1, self.max_rows
        buf = self._buffer(0.0, min(R, K))
        for c0 in range(0, R, K):
            k = min(K, R - c0)
            a, b = np.searchsorted(ir, [c0, c0 + k])
            c, d = np.searchsorted(tr, [c0, c0 + k])
            rr, rt, lt = ir[a:b] - c0, tr[c:d] - c0, tl[c:d]
            buf[rt, lt] = weights[c:d]
            buf[rr, ip[a:b]] = M
            buf[rr, iw[a:b]] = -M
            try:
                out = np.asarray(self.target.evaluate(buf[:k]), dtype=np.float64) / u
            finally:
                buf[rt, lt] = 0.0
                buf[rr, ip[a:b]] = 0.0
                buf[rr, iw[a:b]] = 0.0
            self.packed_calls += 1
            N = _whole_units(out, B, u)
            carried = np.bincount(rt, weights=np.ldexp(1.0, tb[c:d]), minlength=k).astype(np.int64)
            if (N & ~carried).any():
                raise RevealError("inconsistent", "a membership probe returned a unit that no "
                                  "test leaf of its row carries: the op is not a fixed tree of "
                                  "rounded additions")
            got[c:d] = (N[rt] >> tb[c:d]) & 1
        self.probes += len(ir)
        res = np.empty(len(got), dtype=bool)
        res[to] = got
        return res

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

_MULTIWAY = (
    "probe from leaf {p} cancelled the guard leaf {g}: a node with three or more children "
    "(fused multi-term addition), which packed probes cannot resolve"
)
_MEMBERSHIP_INPUTS = 1 << 23  # membership probes for sets whose count probes sum this many inputs
_MEMBERSHIP_MIN = 128  # ... and of at least this many leaves
_RANDOM_SAMPLES = 24  # random partners of a large set's first count probes (besides rank offsets)
_REPEATED = 0.7  # membership probes when at least this share of the random samples repeat a level
_SCATTER = 64  # count requests of at most this many members are written to the buffer by scatter


def _bits(k: int) -> int:
    """Bits that hold the values 0..k-1 (at least 1)."""
    return max(1, (int(k) - 1).bit_length())


def _whole_units(out: np.ndarray, B: int, u: float) -> np.ndarray:
    """Packed outputs (in units) as integers; raises unless each is whole and below 2^B."""
    with np.errstate(invalid="ignore"):
        N = out.astype(np.int64)
    ok = (N == out) & (N >= 0) & (N < (1 << B))
    if not ok.all():
        r = int(np.flatnonzero(~ok)[0])
        raise RevealError("not-units", f"a packed probe returned {out[r] * u!r}, not a "
                          f"whole number of units: the mask does not absorb or the op "
                          f"is not a fixed binary tree of rounded additions")
    return N


def _assign_slots(widths, lengths, families, exclusive, B: int) -> list:
    """Bit fields of a row for packed count requests: [width, offset, [(request, first row,
    rows, first partner)]], every request's probes in turns that share no row.

    McNaughton's wrap-around rule: the requests, widest first, are laid end to end and the
    sequence is cut every T rows, each piece a field as wide as its widest request; a request
    cut in two continues from row 0 of the next field, which its first part (no longer than T)
    cannot overlap. T is the fewest rows whose fields fit in B bits. The requests of a family
    with an exclusive member are laid out one after another (one unit, sorted by the widest),
    so that no row holds two of them.
    """
    fam: dict = {}
    for i, f in enumerate(families):
        fam.setdefault(f, []).append(i)
    units = []  # (width, rows, requests one after another)
    for idx in fam.values():
        if any(exclusive[i] for i in idx):
            idx = sorted(idx, key=lambda i: -widths[i])
            units.append((widths[idx[0]], sum(lengths[i] for i in idx), idx))
        else:
            units.extend((widths[i], lengths[i], [i]) for i in idx)
    units.sort(key=lambda un: (-un[0], -un[1]))
    seq = [i for _, _, idx in units for i in idx]
    w = np.array([widths[i] for i in seq])
    end = np.cumsum([lengths[i] for i in seq])
    total = int(end[-1])

    def fields(T):  # the width of each piece of T rows
        cuts = np.searchsorted(end, np.arange(0, total, T), side="right")  # request at each cut
        last = np.searchsorted(end, np.minimum(np.arange(T, total + T, T), total) - 1, side="right")
        return np.maximum(np.maximum.reduceat(w, cuts), w[last])

    lo = max(max(un[1] for un in units), -(-int((w * np.diff(end, prepend=0)).sum()) // B))
    hi = lo if fields(lo).sum() <= B else total  # total rows fit: one field, the widest request
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fields(mid).sum() <= B else (mid + 1, hi)
    T = lo
    fw = fields(T)
    slots = [[int(f), int(o), []] for f, o in zip(fw, np.cumsum(fw) - fw)]
    pos = 0
    for i in seq:
        done = 0
        while done < lengths[i]:
            k, row = divmod(pos, T)
            take = min(lengths[i] - done, T - row)
            slots[k][2].append((i, row, take, done))
            pos += take
            done += take
    return slots


def _as_slice(idx: np.ndarray):
    """A sorted index array as an equivalent slice when it is an arithmetic progression (numpy's
    8-lane chains are strided sets), else the array itself; slices write much faster."""
    if len(idx) == 1:
        return slice(int(idx[0]), int(idx[0]) + 1)
    step = int(idx[1] - idx[0])
    if step > 0 and int(idx[-1] - idx[0]) == step * (len(idx) - 1) and (np.diff(idx) == step).all():
        return slice(int(idx[0]), int(idx[-1]) + 1, step)
    return idx


class _Task:
    """A leaf set of FPRev and what its pivot found: ``groups`` of (l, child), child a task id
    or -1 - leaf.

    A *proven* set is a complete subtree, or several children of a multi-way node, which the
    weight-1 guard on ``guard`` (its parent's pivot) exposes. Otherwise it is an *interval*:
    the leaves x of its parent (task ``parent``, pivot ``guard``) with base < l(guard, x) <= top,
    both levels real ancestors of the guard, pivoted at one of its ``witnesses`` (leaves with
    l(guard, w) = top); once probed its members shrink to the pivot's complete subtree.
    """

    __slots__ = ("members", "pivot", "guard", "strategy", "proven", "parent", "base", "top",
                 "witnesses", "groups")

    def __init__(self, members, guard=-1, strategy=0, proven=True, parent=-1, base=0, top=0,
                 witnesses=None):
        self.members = members
        self.pivot = -1
        self.guard = guard
        self.strategy = strategy
        self.proven = proven
        self.parent = parent
        self.base = base
        self.top = top
        self.witnesses = witnesses
        self.groups: list = []


def _pick_pivot(t: _Task, rng) -> None:
    """The pivot by the set's strategy: lowest leaf, then highest, then random, as one giant group
    after another shows a chain (intervals choose among their witnesses the same way)."""
    if t.strategy == 2:
        t.pivot = int(rng.choice(t.members if t.witnesses is None else t.witnesses))
    elif t.witnesses is None:  # members are sorted
        t.pivot = int(t.members[-t.strategy])
    else:
        t.pivot = int(t.witnesses.max() if t.strategy else t.witnesses.min())


def _add_groups(tasks: list, owner: np.ndarray, leaves: np.ndarray, levels: np.ndarray) -> list:
    """Group each leaf by its exact l value from the pivot of its task ``owner``: a single leaf
    joins the task's groups at once, a larger group becomes a new (proven) task guarded by the
    pivot; a group of more than half the set (a chain) advances the pivot strategy. Returns
    the new tasks."""
    if not len(leaves):
        return []
    order = np.lexsort((leaves, levels, owner))
    own, lev, leaf = owner[order], levels[order], leaves[order]
    cuts = np.flatnonzero((own[1:] != own[:-1]) | (lev[1:] != lev[:-1])) + 1
    firsts = np.concatenate([[0], cuts])
    new = []
    for a, b, tid, L, x in zip(firsts.tolist(), [*cuts.tolist(), len(leaf)], own[firsts].tolist(),
                               lev[firsts].tolist(), leaf[firsts].tolist()):
        t = tasks[tid]
        if b - a == 1:  # a single leaf: nothing left to probe
            t.groups.append((L, -1 - x))
            continue
        new.append(len(tasks))
        t.groups.append((L, len(tasks)))
        tasks.append(_Task(leaf[a:b], guard=t.pivot,
                           strategy=min(t.strategy + 1, 2) if 2 * (b - a) > len(t.members) else 0))
    return new


def fprev(
    prober: Prober,
    leaves=None,
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
    packed: bool = False,
    membership_min: int | None = None,
):
    """FPRev over ``leaves`` (default: all n). Returns the canonical nested-tuple tree.

    Breadth-first: each stage probes the pivot q of every pending leaf set against the rest of
    its set; the groups of equal l become the next stage's sets. Plain (``packed`` False): one
    probe a row with units on every leaf; any tree, multi-way nodes included.

    With ``packed`` (binary trees only: a node with three or more children raises
    RevealError("inconsistent") and the caller falls back to plain probes) the probes of several
    sets share rows (:meth:`Prober.count_packed`), and a set of at least ``membership_min``
    leaves whose sampled levels repeat is classified with membership probes
    (:meth:`Prober.membership_rows`) instead of counting every leaf. The default,
    max(128, 2^23 // n), asks for sets whose count probes would sum at least 2^23 inputs (512
    leaves at n = 16384), where the rows saved outweigh the extra calls of membership rounds
    (about 0.3 ms each here); a value above n turns membership probes off. The method:

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
    family in one row (Prober.count_packed). For an
    interval D = A_k minus A_(k-1) pivoted at p (lca(q, p) = A_k): x in D keeps q's unit iff
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

    Raises:
        RevealError("inconsistent"): group sizes contradict the l values, or (packed) a node
            with three or more children.
    """
    n = prober.n
    leaves = np.arange(n) if leaves is None else np.asarray(leaves)
    rng = np.random.default_rng(seed)
    if packed:
        if membership_min is None:
            membership_min = max(_MEMBERSHIP_MIN, _MEMBERSHIP_INPUTS // n)
        return _Staged(prober, leaves, rng, progress, membership_min).run()
    tasks = [_Task(np.sort(leaves))]
    frontier, done = [0], 0
    while frontier:
        live = [tid for tid in frontier if len(tasks[tid].members) > 1]
        if not live:
            break
        others = []
        for tid in live:
            t = tasks[tid]
            _pick_pivot(t, rng)
            others.append(t.members[t.members != t.pivot])
        counts = [len(o) for o in others]
        vals = prober.lca_sizes(np.stack([np.repeat([tasks[tid].pivot for tid in live], counts),
                                          np.concatenate(others)], axis=1))
        done += len(vals)
        if progress:
            progress(done, n)
        frontier = _add_groups(tasks, np.repeat(live, counts), np.concatenate(others), vals)
    return _combine(tasks, binary=False)


class _Staged:
    """FPRev with packed count probes and membership probes (see :func:`fprev`)."""

    def __init__(self, prober: Prober, leaves: np.ndarray, rng, progress, membership_min):
        self.prober = prober
        self.B = prober.pack_bits
        self.rng = rng
        self.progress = progress
        self.min_size = membership_min
        self.tasks = [_Task(np.sort(leaves))]
        self.done = 0

    def run(self):
        frontier = [0]
        while frontier:
            frontier = self._stage(frontier)
        return _combine(self.tasks, binary=True)

    def _advance(self, probes: int) -> None:
        self.done += probes
        if self.progress:
            self.progress(self.done, self.prober.n)

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
            _pick_pivot(t, self.rng)
            if len(t.members) >= self.min_size and _bits(len(t.members) - 1) + 1 <= self.B:
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
        nxt += _add_groups(tasks, *(np.concatenate(c) for c in zip(*exact)))
        return nxt + self._resolve_below(below)

    def _samples(self, t: _Task):
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
        answers = iter(self.prober.count_packed(reqs))
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
        got = self.prober.membership_rows(irow, pivot[ikey], witness[ikey], trow, xs, tbit)
        self._advance(len(irow))
        out = np.empty(len(k), dtype=bool)
        out[order] = got
        return out

    def _settle(self, tid, part, l, ok, table, place, exact: list, below: list) -> list:
        """Sort one set's answers; returns the new interval sets. Leaves placed between known
        levels give intervals; exact levels (counted) go to ``exact`` as (set, leaves, l) for
        FPRev groups; an interval set hands the leaves that cleared its guard bit to ``below``."""
        t = self.tasks[tid]
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
            tasks.append(_Task(np.sort(members), guard=t.pivot, proven=False, parent=tid,
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
        answers = self.prober.count_packed(reqs)
        self._advance(sum(len(r.partners) for r in reqs))
        owner = np.repeat([tasks[tid].parent for tid, _ in below], [len(lv) for _, lv in below])
        return _add_groups(tasks, owner, np.concatenate([leaves for _, leaves in below]),
                           np.concatenate([l for l, _ in answers]))


class _Partial:
    """A node under construction: children as (node, smallest leaf) pairs, declared size (from l
    values), leaves held."""

    __slots__ = ("children", "size", "count")

    def __init__(self, children, size, count):
        self.children = children
        self.size = size
        self.count = count


def _combine(tasks: list, binary: bool):
    """The canonical nested-tuple tree from the tasks' groups, bottom-up (children were created
    after their parents). A node closes into a canonical tuple (children sorted by smallest
    leaf) as soon as it holds all its leaves; ``binary``: every node must close at once with
    two children (packed probes), else multi-way nodes are assembled as the l values say.

    Raises:
        RevealError("inconsistent"): the group sizes do not add up.
    """
    # result[tid] = (node, smallest leaf); an open multi-way node is a _Partial whose children
    # list holds (node, smallest leaf) pairs
    result: dict[int, tuple] = {}
    for tid in range(len(tasks) - 1, -1, -1):
        t = tasks[tid]
        mem = t.members
        if len(mem) == 1:
            result[tid] = (int(mem[0]), int(mem[0]))
            continue
        running: object = t.pivot
        rk = running  # smallest leaf under running
        count = 1
        for L, child in (sorted(t.groups) if binary else t.groups):
            if child < 0:  # a single leaf, encoded as -1 - leaf
                sub = sk = -1 - child
                g = 1
            else:
                sub, sk = result.pop(child)
                g = len(tasks[child].members)
            if L <= count or running.__class__ is _Partial:
                raise RevealError("inconsistent", _incons(t.pivot, L, count))
            if sub.__class__ is _Partial:  # an open multi-way node: running joins it
                if sub.size != L or count + g > L:
                    raise RevealError("inconsistent", _incons(t.pivot, L, count + g))
                kids = sub.children + [(running, rk)]
            elif count + g > L or (binary and count + g < L):
                raise RevealError("inconsistent", _incons(t.pivot, L, count + g))
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
