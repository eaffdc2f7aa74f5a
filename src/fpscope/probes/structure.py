"""Block structure: block size L, the number of chained blocks k / L, which products each block
takes (``k_order``), from crafted cancellation inputs (NUMERICS.md section 3, probe 2; the
masking idea of FPRev, section 1).

Inputs (c = 0): for every pair i < j and every third position m, product i = +2^E, product
j = -2^E, product m = 2^e (a "unit"), all other products +0, with E the largest and e the
smallest exponent that inputs and output allow (:meth:`Ctx.big_exponent`,
:meth:`Ctx.small_exponent`). Inside a fused block the unit is cut away beside 2^E (it lies below
2^(E - F)); the pair cancels exactly in the block that holds the later of i, j. So the unit
survives (d = 2^e) exactly when m's block comes after the blocks of i and j, and d = 0 otherwise.

Outcome: for each m, ``before(m)`` = the positions that appear in a surviving (i, j) pair: the
union of the blocks evaluated before m's block. Positions with equal ``before`` sets form a block;
the sets must be nested (a chain of blocks) and of one size L (a chain of single products shows
as one group of two followed by singletons: L = 1, an FMA chain). Every probe output is then
checked against what this structure predicts.

Not observable this way: when the unit is not cut beside 2^E (F >= E - e: fp6/fp4 products span
only 4 to 12 binades) or when blocks are lossless (AMD CDNA1: each block is summed exactly, so
the unit beside an exactly cancelling pair never falls below a cut and the probe shows no chain).
The probe needs K^2 (K - 2) / 2 rows (14,880 for K = 32) in K calls.

Fallback, "rounding pairs" (used when the cancellation probes see no blocks or no chain): c =
2^p, p the precision of the output format (24 for fp32, 11 for fp16), so the output ulp at c is
2; two unit products 1 = 1 * 1 at positions i and j, all else +0. When i and j share a fused
block, the block sums c + 2 exactly (a representable value) and d = c + 2; in different blocks
each block adds a lone 1 that the step rounding turns into c or c + 2 (never c + 1), and the
second unit cannot land the chain on c + 2 again (RZ, RD, RNE: d = c; RU, RNA: d = c + 4). So
d == c + 2 marks "same block". It needs the unit kept beside c (F >= p) and c entering the
first block: with c added after the blocks every pair sums exactly and one block is seen, so
where every pair shows c + 2 the big term is put into a product of the first block instead
(:func:`_product_pairs`; several blocks there mean c is added last, ``c_entry`` "last"). "Same
block" must be an equivalence whose classes all have one size L, else the op does not fit. When
no pair shows c + 2 at p, a smaller p is tried (a step format coarser than the output), down
to where a lone unit beside c is kept exactly (c + 1 representable: the grid is finer).

Block order (rounding pairs, several blocks): +1 in block X, -1 in block Y, c = 2^p. If X comes
first, its lone unit is rounded away (or up to c + 2) and the chain never returns to c: d != c;
if Y comes first, c - 1 is exact (the grid below c is finer) and X's unit restores d = c. The
"before" relation must be a strict total order. Seeing several blocks also shows that c is the
accumulator of the first block (c_entry "first"); with one block the c entry is left to the
alignment family (c path), or taken as "first" where nothing shows it.
"""

from __future__ import annotations

import math

import numpy as np

from ._common import Ctx, Finding, NotRepresentable, sample_evidence

FAMILY = "structure"


def run(ctx: Ctx) -> list[Finding]:
    K = ctx.K
    if K < 3:
        return [Finding(FAMILY, "block_size", K, observable=False,
                        note="K < 3: one block of K products assumed")]
    E, e = ctx.big_exponent(), ctx.small_exponent()
    M, u = math.ldexp(1.0, E), math.ldexp(1.0, e)
    rows, trip = [], []
    try:
        aM, bM = ctx.split(M)
        au, bu = ctx.split(u)
        for m in range(K):  # b = bM everywhere but at m: K distinct columns, K calls
            b = np.full(K, bM)
            b[m] = bu
            for i in range(K):
                for j in range(i + 1, K):
                    if m != i and m != j:
                        a = np.zeros(K)
                        a[i], a[j], a[m] = aM, -aM, au
                        rows.append((a, b, 0.0))
                        trip.append((i, j, m))
    except NotRepresentable as exc:
        return [Finding(FAMILY, "block_size", None, observable=False, fits=False,
                        note=f"cannot build the cancellation probes: {exc}")]
    d = ctx.run(rows)
    n = len(rows)
    surv = d == u
    lost = d == 0
    meanings = [f"+2^{E} at {i}, -2^{E} at {j}, 2^{e} at {m}" for i, j, m in trip]
    ev = sample_evidence(ctx, rows, d, meanings)
    if not np.all(surv | lost):
        bad = int(np.flatnonzero(~(surv | lost))[0])
        return [Finding(FAMILY, "block_size", None, fits=False, rows=n,
                        evidence=[ctx.evidence(rows[bad], float(d[bad]), meanings[bad])] + ev,
                        note=f"a cancellation probe returned {d[bad]!r}, neither 2^{e} nor 0: "
                             f"does not fit a fused-block model")]
    if surv.all():
        why = (f"2^{e} always survives beside 2^{E}: more than {E - e} bits are kept, the "
               f"blocks cannot be seen by cancellation with these formats")
        return _rounding_pairs(ctx, why, n, ev, observable=False)
    before: dict[int, set] = {m: set() for m in range(K)}
    for (i, j, m), s in zip(trip, surv):
        if s:
            before[m].update((i, j))
    groups: dict[frozenset, list] = {}
    for m in range(K):
        groups.setdefault(frozenset(before[m]), []).append(m)
    order = sorted(groups.items(), key=lambda kv: len(kv[0]))
    blocks = [sorted(ms) for _, ms in order]
    # a chain: each group's "before" is the union of the earlier groups
    seen: set = set()
    chain = True
    for key, ms in order:
        if set(key) != seen:
            chain = False
        seen |= set(ms)
    sizes = [len(b) for b in blocks]
    if chain and len(blocks) > 1 and sizes[0] == 2 and all(s == 1 for s in sizes[1:]):
        blocks = [[x] for x in blocks[0]] + blocks[1:]  # an FMA chain: the first two cannot be told apart
        sizes = [1] * K
    L = sizes[0]
    fits = chain and all(s == L for s in sizes)
    if fits:  # every output as the structure predicts
        rank = {x: s for s, bl in enumerate(blocks) for x in bl}
        pred = np.array([rank[m] > max(rank[i], rank[j]) for i, j, m in trip])
        fits = bool(np.all(pred == surv))
    if not fits:
        why = (f"the cancellation probes do not form a chain of equal fused blocks (groups of "
               f"sizes {sizes})")
        return _rounding_pairs(ctx, why, n, ev, observable=True)
    ctx.blocks = blocks
    order_flat = [x for bl in blocks for x in bl]
    k_order = None if order_flat == list(range(K)) else order_flat
    ctx.known.update(block_size=L, stages=len(blocks), k_order=k_order)
    note_order = "products in natural order" if k_order is None else \
        "blocks take " + "; ".join(",".join(map(str, bl)) for bl in blocks)
    found = [
        Finding(FAMILY, "block_size", L, rows=n, evidence=ev,
                note=f"{L} products per fused block" + (" (a chain of single-product fused "
                                                         "steps, e.g. FMAs)" if L == 1 else "")),
        Finding(FAMILY, "stages", len(blocks), note=f"{len(blocks)} chained block(s) for K = {K}"),
        Finding(FAMILY, "k_order", k_order, note=note_order),
    ]
    if len(blocks) >= 2:
        found.append(_c_entry(ctx, M, u, E, e))
    return found


def _c_entry(ctx: Ctx, M: float, u: float, E: int, e: int) -> Finding:
    """c = -2^E, product +2^E in the first block, the unit 2^e in the second: the unit survives
    when c is the accumulator of the first block (c_entry "first"); when c is added after the
    last block, the unit is cut beside 2^E and d = 0 (c_entry "last")."""
    b0, b1 = ctx.blocks[0], ctx.blocks[1]
    try:
        row = ctx.row([(b0[0], M), (b1[0], u)], c=-M)
    except NotRepresentable as exc:
        return Finding(FAMILY, "c_entry", "first", observable=False, note=f"cannot probe: {exc}")
    d = float(ctx.run([row])[0])
    ev = [ctx.evidence(row, d, f"c = -2^{E}, +2^{E} in block 1, 2^{e} in block 2")]
    if d == u:
        ctx.known["c_entry_hint"] = "first"
        return Finding(FAMILY, "c_entry", "first", rows=1, evidence=ev,
                       note="c cancels in the first block: c is the first block's accumulator")
    if d == 0:
        ctx.known["c_entry_hint"] = "last"
        return Finding(FAMILY, "c_entry", "last", rows=1, evidence=ev,
                       note="the unit is cut beside 2^E: c is added after the last block")
    return Finding(FAMILY, "c_entry", None, fits=False, rows=1, evidence=ev,
                   note=f"returned {d!r}, neither 2^{e} nor 0: c enters neither first nor last")


def _rounding_pairs(ctx: Ctx, why: str, n0: int, ev0: list, observable: bool) -> list[Finding]:
    """Block structure from the output rounding (module docstring, "rounding pairs").

    ``why``: why the cancellation probes gave no structure; with ``observable`` False they saw
    nothing (every unit survived), else they saw something that is not a chain. Returns the
    structure findings, or one "does not fit" finding that names both reasons.
    """
    K = ctx.K
    rows_run = n0
    tried = []
    for p in range(ctx.fout.p, 1, -1):
        c = math.ldexp(1.0, p)
        try:
            singles = [ctx.row([(i, 1.0)], c=c) for i in range(K)]
        except NotRepresentable as exc:
            tried.append(f"c = 2^{p}: {exc}")
            continue
        d1 = ctx.run(singles)
        rows_run += len(singles)
        if np.any(d1 == c + 1):  # a lone unit is kept exactly: no rounding to see at c = 2^p
            tried.append(f"c = 2^{p}: c + 1 comes back exactly")
            break
        pairs, ij = [], []
        for i in range(K):
            for j in range(i + 1, K):
                pairs.append(ctx.row([(i, 1.0), (j, 1.0)], c=c))
                ij.append((i, j))
        d2 = ctx.run(pairs)
        rows_run += len(pairs)
        same = d2 == c + 2
        if same.all() and K >= 3:  # one block, or c added after the blocks: ask the products
            found = _product_pairs(ctx, why, p, rows_run)
            if isinstance(found, list):
                return found
            rows_run = found
        if same.any():
            return _pair_blocks(ctx, why, p, c, singles, d1, pairs, d2, ij, same, rows_run)
        tried.append(f"c = 2^{p}: no two units make c + 2")
    note = (f"{why}; the rounding-pair probe shows no block either "
            f"({tried[0]}{'; ...; ' + tried[-1] if len(tried) > 1 else ''}): units beside c are cut "
            f"(F < p) or every product is rounded on its own")
    return [Finding(FAMILY, "block_size", None, observable=observable, fits=False, rows=rows_run,
                    evidence=ev0, note=note + ("" if not observable else
                                               ": does not fit a fused-block model"))]


def _classes(positions, ij, same):
    """(blocks, bad): the connected components of "same" over ``positions`` (sorted by their
    first member) and the indices of the pairs that contradict them."""
    cls = {x: x for x in positions}

    def root(x):
        while cls[x] != x:
            cls[x] = cls[cls[x]]
            x = cls[x]
        return x

    for (i, j), s in zip(ij, same):
        if s:
            cls[root(i)] = root(j)
    groups: dict[int, list] = {}
    for x in positions:
        groups.setdefault(root(x), []).append(x)
    blocks = sorted((sorted(g) for g in groups.values()), key=lambda g: g[0])
    rank = {x: s for s, bl in enumerate(blocks) for x in bl}
    pred = np.array([rank[i] == rank[j] for i, j in ij])
    return blocks, np.flatnonzero(pred != np.asarray(same))


def _block_order(first: dict, S: int):
    """The blocks 0 .. S-1 in evaluation order from ``first[(x, y)]`` (X before Y), or None
    where the relation is not a strict total order."""
    wins = [sum(first[(x, y)] for y in range(S) if y != x) for x in range(S)]
    order = sorted(range(S), key=lambda x: -wins[x])
    pos = {x: r for r, x in enumerate(order)}
    if sorted(wins) != list(range(S)) or any(first[k] != (pos[k[0]] < pos[k[1]]) for k in first):
        return None
    return order


def _product_pairs(ctx: Ctx, why: str, p: int, rows_run: int):
    """Rounding pairs with the big term a product: the structure findings, or the rows run.

    c beside two units shows one block when c is added after the blocks (every pair sums
    exactly first). With the big term 2^(p+s) a product at position q of the first block and
    units 2^s (s makes both products of normal inputs), two units make big + 2 units only in one
    block: a lone unit beside the big term is rounded in its block, and units of blocks after
    q's meet it rounded. A q outside the first block merges the blocks up to its own (unequal
    classes), so q = 0, K // 2, K - 1 are tried until the classes are equal blocks, q's one
    short of a member (q joins it) and first in the order probe (+1 in X, -1 in Y beside the
    big term: the result differs from it iff X comes first). No such q: the rows run."""
    K = ctx.K
    scaled = None
    for s in sorted(range(-60, 61), key=abs):
        try:
            ctx.split(math.ldexp(1.0, p + s))
            ctx.split(math.ldexp(1.0, s))
        except NotRepresentable:
            continue
        scaled = s
        break
    if scaled is None:
        return rows_run
    big, u = math.ldexp(1.0, p + scaled), math.ldexp(1.0, scaled)
    for q in dict.fromkeys((0, K // 2, K - 1)):
        others = [x for x in range(K) if x != q]
        ij = [(i, j) for n, i in enumerate(others) for j in others[n + 1:]]
        pairs = [ctx.row([(q, big), (i, u), (j, u)]) for i, j in ij]
        d2 = ctx.run(pairs)
        rows_run += len(pairs)
        same = d2 == big + 2 * u
        blocks, bad = _classes(others, ij, same)
        if len(bad) or len(blocks) < 2:
            continue
        sizes = sorted(len(b) for b in blocks)
        L = sizes[-1]
        short = [b for b in blocks if len(b) == L - 1]
        # L = 1 leaves q's block no other member to probe the order with
        if L == 1 or sizes[1:] != [L] * (len(blocks) - 1) or len(short) != 1:
            continue
        pick = [bl[0] for bl in blocks]  # members other than q
        short[0].append(q)
        short[0].sort()
        S = len(blocks)
        xy = [(x, y) for x in range(S) for y in range(S) if x != y]
        orows = [ctx.row([(q, big), (pick[x], u), (pick[y], -u)]) for x, y in xy]
        do = ctx.run(orows)
        rows_run += len(orows)
        order = _block_order({k: bool(v != big) for k, v in zip(xy, do)}, S)
        if order is None:
            continue
        blocks = [blocks[x] for x in order]
        if q not in blocks[0]:
            continue
        ctx.blocks = blocks
        flat = [x for bl in blocks for x in bl]
        k_order = None if flat == list(range(K)) else flat
        ctx.known.update(block_size=L, stages=S, k_order=k_order, c_entry_hint="last")
        meanings = [f"2^{p + scaled} at {q}, 2^{scaled} at {i} and {j}" for i, j in ij]
        ev = sample_evidence(ctx, pairs, d2, meanings)
        note_order = ("products in natural order" if k_order is None else
                      "blocks take " + "; ".join(",".join(map(str, bl)) for bl in blocks))
        return [
            Finding(FAMILY, "block_size", L, rows=rows_run, evidence=ev,
                    note=f"{L} products per fused block (rounding pairs with the big term "
                         f"2^{p + scaled} a product at {q}: two units 2^{scaled} give it + 2 "
                         f"units only within a block; beside c = 2^{p} every pair did: c is "
                         f"added after the blocks; {why})"),
            Finding(FAMILY, "stages", S, note=f"{S} chained block(s) for K = {K}"),
            Finding(FAMILY, "k_order", k_order, rows=len(orows),
                    evidence=sample_evidence(ctx, orows, do),
                    note=note_order + " (order: +1 in one block, -1 in another, beside the big "
                                      "product)"),
            Finding(FAMILY, "c_entry", "last",
                    note=f"two units beside c = 2^{p} always sum exactly, beside a big product "
                         f"only within a block: c is added after the last block"),
        ]
    return rows_run


def _pair_blocks(ctx: Ctx, why, p, c, singles, d1, pairs, d2, ij, same, rows_run):
    K = ctx.K
    meanings = [f"c = 2^{p}, 1 at {i} and {j}" for i, j in ij]
    ev = sample_evidence(ctx, pairs, d2, meanings)
    # classes: connected components of "same", then every pair checked against them
    blocks, bad = _classes(range(K), ij, same)
    sizes = [len(b) for b in blocks]
    single_bad = np.flatnonzero((d1 != c) & (d1 != c + 2))  # a lone unit must be rounded
    if len(single_bad):
        k = int(single_bad[0])
        return [Finding(FAMILY, "block_size", None, fits=False, rows=rows_run,
                        evidence=[ctx.evidence(singles[k], float(d1[k]),
                                               f"c = 2^{p}, 1 at {k}")] + ev,
                        note=f"{why}; a lone unit beside c = 2^{p} gave {float(d1[k])!r}, neither "
                             f"c nor c + 2 (no rounding to the output format): does not fit a "
                             f"fused-block model")]
    if len(bad) or len(set(sizes)) != 1:
        evb = [ctx.evidence(pairs[int(k)], float(d2[int(k)]), meanings[int(k)] + " (breaks "
                            "the classes)") for k in bad[:2]]
        return [Finding(FAMILY, "block_size", None, fits=False, rows=rows_run, evidence=evb + ev,
                        note=f"{why}; rounding pairs (c = 2^{p}, two units) give classes of "
                             f"sizes {sizes}" + (f" and {len(bad)} pair(s) that contradict them"
                                                 if len(bad) else "")
                             + ": not equal fused blocks, does not fit a fused-block model")]
    L = sizes[0]
    found_note = (f"{L} products per fused block (rounding pairs: two units beside c = 2^{p} "
                  f"give c + 2 only within a block; {why})")
    out = [Finding(FAMILY, "block_size", L, rows=rows_run, evidence=ev, note=found_note)]
    if len(blocks) == 1:
        ctx.blocks = blocks
        ctx.known.update(block_size=L, stages=1, k_order=None)
        out += [Finding(FAMILY, "stages", 1, note=f"one block of K = {K} products"),
                Finding(FAMILY, "k_order", None, observable=False,
                        note="one block: no order of blocks to see")]
        return out
    # the order of the blocks: +1 in X, -1 in Y; d == c iff Y comes first
    S = len(blocks)
    orows, xy = [], []
    for x in range(S):
        for y in range(S):
            if x != y:
                try:
                    orows.append(ctx.row([(blocks[x][0], 1.0), (blocks[y][0], -1.0)], c=c))
                except NotRepresentable as exc:
                    return out + [Finding(FAMILY, "k_order", None, fits=False,
                                          note=f"cannot build the order probe: {exc}")]
                xy.append((x, y))
    do = ctx.run(orows)
    ometa = [f"c = 2^{p}, +1 in block of {blocks[x][0]}, -1 in block of {blocks[y][0]}"
             for x, y in xy]
    oev = sample_evidence(ctx, orows, do, ometa)
    order = _block_order({(x, y): bool(v != c) for (x, y), v in zip(xy, do)}, S)
    if order is None:
        return [Finding(FAMILY, "k_order", None, fits=False, rows=len(orows), evidence=oev,
                        note="the rounding-pair order probes do not put the blocks in one order: "
                             "does not fit a chain of fused blocks")]
    blocks = [blocks[x] for x in order]
    ctx.blocks = blocks
    flat = [x for bl in blocks for x in bl]
    k_order = None if flat == list(range(K)) else flat
    ctx.known.update(block_size=L, stages=S, k_order=k_order, c_entry_hint="first")
    note_order = ("products in natural order" if k_order is None else
                  "blocks take " + "; ".join(",".join(map(str, bl)) for bl in blocks))
    out += [
        Finding(FAMILY, "stages", S, note=f"{S} chained block(s) for K = {K}"),
        Finding(FAMILY, "k_order", k_order, rows=len(orows), evidence=oev,
                note=note_order + " (order: +1 in one block, -1 in another, beside c = 2^"
                                  f"{p}: c - 1 survives only after the +1 was rounded away)"),
        Finding(FAMILY, "c_entry", "first",
                note="rounding pairs split into blocks, so c is summed inside the chain: c is "
                     "the accumulator of the first block"),
    ]
    return out
