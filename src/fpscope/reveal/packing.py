"""Packed probe rows: the probes of several leaf sets share one row of the op's input.

A plain probe spends a whole row on one l(i, j). Here every leaf outside the probes' pivots and
partners is 0 or a unit of weight 2^o * u, and the op's output, a whole number of units below
2^pack_bits, is read as bit fields:

* :func:`count_packed`: count probes (:class:`CountRequest`), a field of log2 |set| + 1 bits a
  set, l(pivot, j) from the units the probe absorbed; the fields of a row and the turns of the
  requests in them come from :func:`_assign_slots`; a guard unit proves each set complete;
* :func:`membership_rows`: membership probes, one bit a test leaf: whether it lies under
  lca(pivot, witness).

Only "rows" targets (reductions) are packed (:func:`pack_bits` is 0 for the others). Which
probes to ask, and why the callers' conditions hold, is :mod:`fpscope.reveal.staged`.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from functools import cached_property
from itertools import accumulate

import numpy as np

from .prober import Prober, RevealError

_MULTIWAY = (
    "probe from leaf {p} cancelled the guard leaf {g}: a node with three or more children "
    "(fused multi-term addition), which packed probes cannot resolve"
)
_SCATTER = 64  # count requests of at most this many members are written to the buffer by scatter


def pack_bits(prober: Prober) -> int:
    """Bits of exact unit counts one call can carry (0: packing unavailable)."""
    if prober.mode != "rows":
        return 0
    bits = min(prober.target.in_format.p, prober.target.out_format.p)
    while bits > 1 and not prober.mask.absorbs((1 << bits) + 2, prober.target.in_format):
        bits -= 1
    return bits


def field_width(members: int, guard: bool, explicit: bool) -> int:
    """Bits of the field of a count request on ``members`` leaves: the units outside the
    cancelled subtree (at most members - 2), and the guard (one more bit when ``explicit``,
    else one more unit)."""
    if explicit:
        return _bits(members - 1) + 1
    return _bits(members) if guard else _bits(members - 1)


@dataclass
class CountRequest:
    """Count probes (pivot, j) for j in ``partners`` with units only on ``members`` (a sorted
    leaf array holding the pivot and the partners); see :func:`count_packed`.

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

    @cached_property
    def width(self) -> int:
        """Bits of its field (:func:`field_width`)."""
        return field_width(len(self.members), self.guard >= 0, self.explicit)


def count_packed(prober: Prober, reqs: list) -> list:
    """Answers of :class:`CountRequest` s, the probes of many requests sharing each op call.

    Returns, per request, (l, ok): l[k] = offset + |members n lca(pivot, partners[k])| (the
    request's units absorbed, pivot and partner included) and ok[k]: the guard unit survived
    (always True without an explicit guard bit).

    Units of weight 2^o * u sit on the members of a request whose field starts at bit o, and
    on its guard (weight 2^o, or 2^(o + w) above a count of w bits for an explicit guard
    bit); every other leaf is 0. Requests are packed into fields (:func:`_assign_slots`);
    several take turns in one field, and every field fits in :func:`pack_bits`.

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
    B = pack_bits(prober)
    res: list = [None] * len(reqs)
    for i, r in enumerate(reqs):
        if r.width <= B:
            continue
        if r.explicit or r.exclusive:
            raise ValueError(f"a set of {len(r.members)} leaves needs {r.width} bits; "
                             f"explicit guards and exclusive requests must fit in {B}")
        l = prober.lca_sizes(np.stack([np.full(len(r.partners), r.pivot), r.partners], axis=1))
        if (l > len(r.members)).any():
            raise RevealError("inconsistent", _MULTIWAY.format(p=r.pivot, g=r.guard))
        res[i] = (l, np.ones(len(l), dtype=bool))
    idx = [i for i in range(len(reqs)) if res[i] is None]
    if idx:
        sub = [reqs[i] for i in idx]
        l, ok = _count_rows(prober, sub, B)
        pairs = np.stack([np.repeat([r.pivot for r in sub], [len(r.partners) for r in sub]),
                          np.concatenate([r.partners for r in sub])], axis=1)
        prober.history.append((pairs[ok], l[ok]))
        ends = list(accumulate(len(r.partners) for r in sub))
        for i, a, b in zip(idx, [0] + ends[:-1], ends):  # slices: np.split is slower here
            res[i] = (l[a:b], ok[a:b])
    return res

def _count_rows(prober: Prober, reqs: list, B: int) -> tuple[np.ndarray, np.ndarray]:
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
    u, M = prober.mask.u, prober.mask.M
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
    K = prober.max_rows
    buf = prober.buffer(0.0, min(R, K))
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
                out = np.asarray(prober.target.evaluate(buf[:k]), dtype=np.float64) / u
            finally:
                buf[rr, piv] = weight[ss]
                buf[rr, part] = weight[ss]
            prober.packed_calls += 1
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
            prober.beat(len(at))
        prober.probes += len(partners)
    finally:
        switch(K, np.full((S, K), -1, dtype=np.int64))  # leave the buffer all 0
        buf[tuple(scattered)] = 0.0
    return lam, ok


def _assign_slots(widths, lengths, families, exclusive, B: int) -> list:
    """Bit fields for packed count requests: [width, offset, [(request, first row, rows, first
    partner)]], every request's probes in turns that share no row.

    The requests are split into bands of widths (:func:`_bands`), each band packed on rows of
    its own (:func:`_band_slots`, McNaughton's rule) after the rows of the bands before it: the
    fields of one band fit in B bits, and fields of different bands never share a row, so they
    may use the same bits. A family with an exclusive member is split by band too: its
    requests in one band are laid out one after another, and different bands share no rows.
    """
    serial = {f for f, e in zip(families, exclusive) if e}
    slots, base = [], 0
    for band in _bands(widths, lengths, families, serial, B):
        T, band_slots = _band_slots(band, widths, lengths, families, serial, B)
        for sl in band_slots:
            sl[2] = [(i, row + base, take, done) for i, row, take, done in sl[2]]
        slots += band_slots
        base += T
    return slots


def _band_slots(idx, widths, lengths, families, serial, B: int) -> tuple[int, list]:
    """Fields of B bits over T rows for the requests ``idx``: (T, [width, offset, turns]).

    McNaughton's wrap-around rule: the requests, widest first, are laid end to end and the
    sequence is cut every T rows, each piece a field as wide as its widest request; a request
    cut in two continues from row 0 of the next field, which its first part (no longer than T)
    cannot overlap. T is the fewest rows whose fields fit in B bits. The requests of a family
    in ``serial`` (those with an exclusive member) are laid out one after another (one unit,
    sorted by the widest), so that no row holds two of them.
    """
    fam: dict = {}
    for i in idx:
        fam.setdefault(families[i], []).append(i)
    units = []  # (width, rows, requests one after another)
    for f, ids in fam.items():
        if f in serial:
            ids = sorted(ids, key=lambda i: -widths[i])
            units.append((widths[ids[0]], sum(lengths[i] for i in ids), ids))
        else:
            units.extend((widths[i], lengths[i], [i]) for i in ids)
    units.sort(key=lambda un: (-un[0], -un[1]))
    seq = [i for _, _, ids in units for i in ids]
    ws = [widths[i] for i in seq]
    ends = list(accumulate(lengths[i] for i in seq))
    total = ends[-1]
    # the widest request of a piece is its first one or the first unit starting in it: units
    # come widest first, and the requests of a unit too
    starts = list(accumulate([0] + [len(ids) for _, _, ids in units[:-1]]))

    def fields(T, limit=None):  # the width of each piece of T rows (None once over ``limit``)
        out, used = [], 0
        for p0 in range(0, total, T):
            a = bisect_right(ends, p0)  # request at the piece's first row
            b = bisect_right(ends, min(p0 + T, total) - 1)  # ... and at its last
            u = bisect_right(starts, a)
            f = max(ws[a], ws[starts[u]]) if u < len(starts) and starts[u] <= b else ws[a]
            used += f
            if limit is not None and used > limit:
                return None
            out.append(f)
        return out

    lo = max(max(un[1] for un in units), -(-sum(w * lengths[i] for w, i in zip(ws, seq)) // B))
    hi = lo if fields(lo, B) is not None else total  # total rows: one field, the widest request
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fields(mid, B) is not None else (mid + 1, hi)
    T = lo
    fw = fields(T)
    offsets = list(accumulate([0] + fw[:-1]))
    slots = [[int(f), int(o), []] for f, o in zip(fw, offsets)]
    pos = 0
    for i in seq:
        done = 0
        while done < lengths[i]:
            k, row = divmod(pos, T)
            take = min(lengths[i] - done, T - row)
            slots[k][2].append((i, row, take, done))
            pos += take
            done += take
    return T, slots


_BAND_MIN_ROWS = 64  # requests of fewer rows' worth of bits are packed as one band


def _bands(widths, lengths, families, serial, B: int) -> list[list[int]]:
    """The requests split into bands of widths for :func:`_assign_slots`.

    One band packs fields of different widths side by side, each field as wide as its widest
    request, so a band of mixed widths wastes bits (McNaughton with 13- to 2-bit requests on
    24 bits). Requests whose fields fit the same number of times in B bits (B // width) form a
    class; adjacent classes are merged into one band where that takes fewer rows, by dynamic
    programming over the classes with each band's rows estimated by McNaughton's rule on
    blocks as wide as their widest request (an upper bound of :func:`_band_slots`' rows).
    Numpy's pairwise sum of 16384 leaves: 13,400 count rows instead of 16,500 in one band.
    """
    n = len(widths)
    order = sorted(range(n), key=lambda i: -widths[i])
    if sum(w * l for w, l in zip(widths, lengths)) < _BAND_MIN_ROWS * B:
        return [order]
    classes: list = []  # [requests, plain units [(w, l)], serial families {family: (w, l)}, B // w]
    for i in order:
        q = B // widths[i]
        if not classes or classes[-1][3] != q:
            classes.append([[], [], {}, q])
        c = classes[-1]
        c[0].append(i)
        if families[i] in serial:
            w, l = c[2].get(families[i], (0, 0))
            c[2][families[i]] = (max(w, widths[i]), l + lengths[i])
        else:
            c[1].append((widths[i], lengths[i]))
    m = len(classes)
    if m == 1:
        return [order]

    def rows(a, b):  # estimated rows of one band of the classes a..b-1
        fams: dict = {}
        units = []
        for c in classes[a:b]:
            units += c[1]
            for f, (w, l) in c[2].items():
                ow, ol = fams.get(f, (0, 0))
                fams[f] = (max(ow, w), ol + l)
        units += fams.values()
        units.sort(key=lambda un: (-un[0], -un[1]))
        ws = [w for w, _ in units]
        ends = list(accumulate(l for _, l in units))
        total = ends[-1]

        def fits(T):  # a piece's widest block is its first (blocks sorted by width)
            used = 0
            for start in range(0, total, T):
                used += ws[bisect_right(ends, start)]
                if used > B:
                    return False
            return True

        lo = max(max(l for _, l in units), -(-sum(w * l for w, l in units) // B))
        hi = total
        if fits(lo):
            return lo
        while lo < hi:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if fits(mid) else (mid + 1, hi)
        return lo

    best = [(0, [])] + [None] * m  # best[b]: fewest rows for classes 0..b-1, and the cuts
    for b in range(1, m + 1):
        best[b] = min((best[a][0] + rows(a, b), best[a][1] + [a]) for a in range(b))
    cuts = best[m][1] + [m]
    return [[i for c in classes[a:z] for i in c[0]] for a, z in zip(cuts[:-1], cuts[1:])]


def _as_slice(idx: np.ndarray):
    """A sorted index array as an equivalent slice when it is an arithmetic progression (numpy's
    8-lane chains are strided sets), else the array itself; slices write much faster."""
    if len(idx) == 1:
        return slice(int(idx[0]), int(idx[0]) + 1)
    step = int(idx[1] - idx[0])
    if step > 0 and int(idx[-1] - idx[0]) == step * (len(idx) - 1) and (np.diff(idx) == step).all():
        return slice(int(idx[0]), int(idx[-1]) + 1, step)
    return idx


def membership_rows(prober: Prober, item_row, item_pivot, item_witness, test_row, test_leaf,
                    test_bit) -> np.ndarray:
    """Membership probes: row item_row[i] holds +M at item_pivot[i] and -M at
    item_witness[i]; test t has weight 2^test_bit[t] * u on leaf test_leaf[t] in row
    test_row[t]; every other leaf is 0. Returns, per test, whether its bit survived, i.e.
    whether its leaf lies outside lca(pivot, witness) of the item whose leaves it shares.

    Exact when, as callers guarantee, the items of a row lie in disjoint leaf sets, each
    item's lca(pivot, witness) and test leaves lie inside its own set, and each row's test
    bits are distinct and below :func:`pack_bits`: every unit inside an item's cancelled
    subtree is absorbed, the others are summed exactly. Every row needs at least one item.

    Raises:
        RevealError("not-units"): an output is not a whole number of units.
        RevealError("inconsistent"): an output holds a bit no test of its row carries.
    """
    u, M, B = prober.mask.u, prober.mask.M, pack_bits(prober)
    io = np.argsort(item_row, kind="stable")
    to = np.argsort(test_row, kind="stable")
    ir, ip, iw = item_row[io], item_pivot[io], item_witness[io]
    tr, tl, tb = test_row[to], test_leaf[to], test_bit[to]
    weights = u * np.ldexp(1.0, tb)
    got = np.empty(len(tr), dtype=bool)
    R, K = int(ir[-1]) + 1, prober.max_rows
    buf = prober.buffer(0.0, min(R, K))
    for c0 in range(0, R, K):
        k = min(K, R - c0)
        a, b = np.searchsorted(ir, [c0, c0 + k])
        c, d = np.searchsorted(tr, [c0, c0 + k])
        rr, rt, lt = ir[a:b] - c0, tr[c:d] - c0, tl[c:d]
        buf[rt, lt] = weights[c:d]
        buf[rr, ip[a:b]] = M
        buf[rr, iw[a:b]] = -M
        try:
            out = np.asarray(prober.target.evaluate(buf[:k]), dtype=np.float64) / u
        finally:
            buf[rt, lt] = 0.0
            buf[rr, ip[a:b]] = 0.0
            buf[rr, iw[a:b]] = 0.0
        prober.packed_calls += 1
        N = _whole_units(out, B, u)
        carried = np.bincount(rt, weights=np.ldexp(1.0, tb[c:d]), minlength=k).astype(np.int64)
        if (N & ~carried).any():
            raise RevealError("inconsistent", "a membership probe returned a unit that no "
                              "test leaf of its row carries: the op is not a fixed tree of "
                              "rounded additions")
        got[c:d] = (N[rt] >> tb[c:d]) & 1
        prober.beat(b - a)
    prober.probes += len(ir)
    res = np.empty(len(got), dtype=bool)
    res[to] = got
    return res


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
