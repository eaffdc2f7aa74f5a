"""Kept bits F: cancel a large pair, then shrink a third term until it stops surviving
(NUMERICS.md section 3, probe 3; Fasi et al. 2021, Hawkeye).

Inputs (first block, c = 0): products +2^E, -2^E and 2^(E - t) for t = 1, 2, ..., with E the
largest exponent inputs and output allow. The pair cancels exactly; the third term survives (d =
2^(E - t)) while it lies at or above the cut 2^(E - F), and is dropped (d = 0) below it. The cut
is the same for "truncate", "floor" and "nearest" alignment on a single positive power of two
(nearest: 2^(E - F - 1) is a tie and goes to the even 0).

F convention (fpscope.profile): fraction bits kept below 2^e_max, e_max = e_a + e_b of the
largest product (significands in [1, 4)); F = 24 on Ampere.

Where every such term survives and blocks hold four products, t goes on below the smallest
power-of-two product 2^lo with the low bit of a product: 2^lo + 2^(lo - j) beside -2^lo, j = 2
.. p(in) - 1, and 2^(lo + 1) + 2^(lo - 1) beside -2^(lo + 1) for j = 1 where the input format
has the 3 bits (beside 2^lo that bit would be a tie at a cut at 2^lo, which nearest alignment
rounds up to even; fp8 e4m3 spans 2^16 .. 2^-12 alone).

Outcomes: F = the largest surviving t (survivals must form a prefix). All probed t surviving:
F >= t_max ("at least"; the range is limited by the formats: t_max = E - max(2 e_min(in),
e_min(out)) + p(in) - 1). Not observable: blocks of one product (no room for a cancelling pair
beside the third term: an FMA chain keeps the exact product; F is then set to the largest
value the vectorised engine accepts, 50, and the validation decides).

c as the third term: when every product-only probe keeps its term (fp6/fp4 products span only 4
to 12 binades, fewer than F), or blocks hold two products, the third term is c = 2^(E - t), which
reaches far lower (normal and subnormal values of the output format), with the pair +2^E, -2^E
in the first block. c joins the first block only when it enters first (``c_entry`` "first";
with "last" it is added after the blocks and never cut). A control row (c alone, products +0)
must return c, else that t is left out (c flushed, or cut by zero terms: nothing to read). If c
survives at every t down to the smallest subnormal output, no gap these formats can form is ever
cut: the blocks are taken as lossless (AMD CDNA1: exact block sums), F = ``lossless_frac_bits``
(any F >= t_max gives the same outputs for the probes; the validation decides the rest).
"""

from __future__ import annotations

import math

import numpy as np

from ._common import Ctx, Finding, NotRepresentable, sample_evidence

FAMILY = "precision"


def max_engine_F(L: int) -> int:
    """The largest F the vectorised engine sums exactly: F + 2 + log2(L + 1) <= 53."""
    return math.floor(51 - math.log2(L + 1))


def run(ctx: Ctx) -> list[Finding]:
    blk = ctx.first_block
    L = len(blk)
    c_first = ctx.known.get("c_entry_hint", "first") == "first"
    if L < 3:
        if L == 2 and c_first:  # the third term is c (it joins the first block when c enters first)
            return _c_path(ctx, [], [], f"blocks of {L} products")
        F = max_engine_F(L)
        ctx.known.update(frac_bits=F, frac_bits_at_least=True)
        return [Finding(FAMILY, "frac_bits", F, observable=False,
                        note=f"blocks of {L} product(s): no room for a cancelling pair beside a "
                             f"third term; F set to {F} (the engine's limit), the validation decides")]
    E = ctx.big_exponent()
    lo = ctx.small_exponent()
    rows, ts = [], []
    for t in range(1, E - lo + 1):
        if t > 60:
            break
        small = math.ldexp(1.0, E - t)
        try:
            rows.append(ctx.row([(blk[0], math.ldexp(1.0, E)), (blk[1], -math.ldexp(1.0, E)),
                                 (blk[2], small)]))
        except NotRepresentable:
            break
        ts.append(t)
    if not rows:
        if c_first:
            return _c_path(ctx, [], [], "no product-only probe can be formed")
        return [Finding(FAMILY, "frac_bits", None, observable=False, fits=False,
                        note="no probe can be formed with these formats")]
    d = ctx.run(rows)
    meanings = [f"2^{E} - 2^{E} + 2^{E - t}: t = {t}" for t in ts]
    if L >= 4 and all(x == math.ldexp(1.0, E - t) for x, t in zip(d, ts)):
        # every term kept: below the smallest power-of-two product 2^lo, the low bit 2^(lo - j)
        # of a product 2^lo + 2^(lo - j) beside -2^lo (fp8 e4m3: 2^16 .. 2^-12 bounds F <= 28
        # alone, too few for F = 30 where c is added last and cannot be the third term)
        # (j = 1 pairs the bit with 2^(lo + 1): beside 2^lo it would be a tie, 1.5 units of a
        # cut at 2^lo, which nearest alignment takes to 2 units, not to 0)
        low, more, more_ts, partners = math.ldexp(1.0, E - ts[-1]), [], [], []
        for j in range(1, ctx.fin.p):
            bit = math.ldexp(low, -j)
            row = None
            for partner in ((2 * low, low) if j == 1 else (low,)):  # 2^(lo+1) + bit: 3 bits
                try:
                    row = ctx.row([(blk[0], math.ldexp(1.0, E)), (blk[1], -math.ldexp(1.0, E)),
                                   (blk[2], partner + bit), (blk[3], -partner)])
                    break
                except NotRepresentable:
                    continue
            if row is None:
                break
            more.append(row)
            more_ts.append(ts[-1] + j)
            partners.append(partner)
        if more:
            meanings += [f"2^{E} - 2^{E} + ({q} + 2^{E - t}) - {q}: t = {t}"
                         for q, t in zip(partners, more_ts)]
            rows, ts, d = rows + more, ts + more_ts, np.concatenate([d, ctx.run(more)])
    ev = sample_evidence(ctx, rows, d, meanings, limit=6)
    bad = _read(ctx, rows, d, ts, meanings, ev, E)
    if bad is not None:
        return bad
    kept = [x == math.ldexp(1.0, E - t) for x, t in zip(d, ts)]
    n_kept = sum(kept)
    if n_kept == len(ts):
        if c_first:
            return _c_path(ctx, rows, ev, f"every product-only probe kept its term (t <= {ts[-1]})")
        F = min(ts[-1], max_engine_F(L))
        ctx.known.update(frac_bits=F, frac_bits_at_least=True)
        return [Finding(FAMILY, "frac_bits", F, rows=len(rows), evidence=ev, observable=True,
                        note=f"every probed bit kept: F >= {ts[-1]} (the formats allow no smaller "
                             f"third term); F = {F} used")]
    F = ts[n_kept - 1]
    ctx.known.update(frac_bits=F, frac_bits_at_least=False)
    return [Finding(FAMILY, "frac_bits", F, rows=len(rows), evidence=ev,
                    note=f"2^(E-{F}) survives beside a cancelling pair at 2^E, 2^(E-{F + 1}) does "
                         f"not: F = {F} fraction bits below e_max")]


def _read(ctx: Ctx, rows, d, ts, meanings, ev, E: int):
    """None when the outputs are the third term or 0 and the kept ones form a prefix of t;
    otherwise the "does not fit" finding."""
    kept = [x == math.ldexp(1.0, E - t) for x, t in zip(d, ts)]
    lost = [x == 0 for x in d]
    if not all(k or z for k, z in zip(kept, lost)):
        i = next(i for i, (k, z) in enumerate(zip(kept, lost)) if not (k or z))
        return [Finding(FAMILY, "frac_bits", None, fits=False, rows=len(rows),
                        evidence=[ctx.evidence(rows[i], float(d[i]), meanings[i])] + ev,
                        note=f"t = {ts[i]} returned {d[i]!r}, neither the term nor 0: does not fit")]
    n_kept = sum(kept)
    if not all(kept[:n_kept]):
        return [Finding(FAMILY, "frac_bits", None, fits=False, rows=len(rows), evidence=ev,
                        note="the surviving terms are not a prefix of t = 1, 2, ...: no single cut")]
    if n_kept == 0:
        return [Finding(FAMILY, "frac_bits", None, fits=False, rows=len(rows), evidence=ev,
                        note="even 2^(E-1) is lost beside a cancelling pair: does not fit")]
    return None


def _c_path(ctx: Ctx, rows0, ev0, why: str) -> list[Finding]:
    """F with c = 2^(E - t) as the third term beside +2^E, -2^E in the first block (module
    docstring); ``rows0``/``ev0``: the product-only rows already run."""
    from ..profile import lossless_frac_bits

    blk = ctx.first_block
    E = ctx.big_exponent()
    fout = ctx.fout
    big = math.ldexp(1.0, E)
    lo = fout.emin - fout.p + 1  # the smallest subnormal output
    rows, ctrl, ts = [], [], []
    for t in range(1, E - lo + 1):
        c = math.ldexp(1.0, E - t)
        try:
            row = ctx.row([(blk[0], big), (blk[1], -big)], c=c)
            crow = ctx.row([], c=c)
        except NotRepresentable:
            continue
        rows.append(row)
        ctrl.append(crow)
        ts.append(t)
    n_run = len(rows0) + 2 * len(rows)
    if not rows:
        return [Finding(FAMILY, "frac_bits", None, observable=False, fits=False, rows=n_run,
                        evidence=ev0, note=f"{why}; no probe with c as the third term can be "
                                           f"formed with these formats")]
    d = ctx.run(rows)
    dc = ctx.run(ctrl)
    ok = [float(x) == r[2] for x, r in zip(dc, ctrl)]  # c alone comes back: t informative
    rows = [r for r, k in zip(rows, ok) if k]
    d = np.array([x for x, k in zip(d, ok) if k])
    skipped = [t for t, k in zip(ts, ok) if not k]
    ts = [t for t, k in zip(ts, ok) if k]
    if not rows:
        return [Finding(FAMILY, "frac_bits", None, observable=False, fits=False, rows=n_run,
                        evidence=ev0, note=f"{why}; c alone never comes back unchanged: F not "
                                           f"observable with c as the third term")]
    meanings = [f"2^{E} - 2^{E} + c, c = 2^{E - t}: t = {t}" for t in ts]
    ev = sample_evidence(ctx, rows, d, meanings, limit=6) + ev0[:2]
    bad = _read(ctx, rows, d, ts, meanings, ev, E)
    if bad is not None:
        bad[0].rows = n_run
        return bad
    kept = [x == math.ldexp(1.0, E - t) for x, t in zip(d, ts)]
    n_kept = sum(kept)
    skip = (f"; t = {skipped[0]}..{skipped[-1]} left out (c alone does not come back)"
            if skipped else "")
    if n_kept == len(ts):
        F = lossless_frac_bits(ctx.fin.name, fout.name, ctx.fb.name)
        ctx.known.update(frac_bits=F, frac_bits_at_least=True, lossless=True)
        return [Finding(FAMILY, "frac_bits", F, rows=n_run, evidence=ev,
                        note=f"{why}; c = 2^(E-t) beside a cancelling pair at 2^E is kept for "
                             f"every t <= {ts[-1]}{skip}: F >= {ts[-1]}, no term is ever cut "
                             f"(lossless blocks); F = {F} used (lossless for these formats)")]
    F = ts[n_kept - 1]
    ctx.known.update(frac_bits=F, frac_bits_at_least=False)
    return [Finding(FAMILY, "frac_bits", F, rows=n_run, evidence=ev,
                    note=f"{why}; with c as the third term: c = 2^(E-{F}) survives beside a "
                         f"cancelling pair at 2^E, 2^(E-{F + 1}) does not{skip}: F = {F} "
                         f"fraction bits below e_max")]
