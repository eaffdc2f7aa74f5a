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

Not observable: when the unit is not cut beside 2^E (F >= E - e, e.g. F >= 29 for fp16
outputs), the structure cannot be seen with these formats. The probe needs K^2 (K - 2) / 2 rows
(14,880 for K = 32) in K calls.
"""

from __future__ import annotations

import math

import numpy as np

from ._common import Ctx, Finding, NotRepresentable, sample_evidence, split_product

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
        aM, bM = split_product(M, ctx.fin)
        au, bu = split_product(u, ctx.fin)
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
        return [Finding(FAMILY, "block_size", None, observable=False, fits=False, rows=n,
                        evidence=ev, note=f"2^{e} always survives beside 2^{E}: more than "
                        f"{E - e} bits are kept, the blocks cannot be seen with these formats")]
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
        return [Finding(FAMILY, "block_size", None, fits=False, rows=n, evidence=ev,
                        note=f"the cancellation probes do not form a chain of equal fused blocks "
                             f"(groups of sizes {sizes}): does not fit a fused-block model")]
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
