"""Kept bits F: cancel a large pair, then shrink a third term until it stops surviving
(NUMERICS.md section 3, probe 3; Fasi et al. 2021, Hawkeye).

Inputs (first block, c = 0): products +2^E, -2^E and 2^(E - t) for t = 1, 2, ..., with E the
largest exponent inputs and output allow. The pair cancels exactly; the third term survives (d =
2^(E - t)) while it lies at or above the cut 2^(E - F), and is dropped (d = 0) below it. The cut
is the same for "truncate", "floor" and "nearest" alignment on a single positive power of two
(nearest: 2^(E - F - 1) is a tie and goes to the even 0).

F convention (fpscope.profile): fraction bits kept below 2^e_max, e_max = e_a + e_b of the
largest product (significands in [1, 4)); F = 24 on Ampere.

Where every such term survives and blocks hold four products, t goes on with the smallest
power-of-two product 2^lo beside larger pairs 2^E2 - 2^E2, E < E2 <= the largest product
exponent (E is also bounded by the output's range, the cancelling pair is not: fp16 output,
e5m2 products reach 2^30), then below 2^lo with the low bit of a product: 2^lo + 2^(lo - j)
beside -2^lo, j = 2 .. p(in) - 1, and 2^(lo + 1) + 2^(lo - 1) beside -2^(lo + 1) for j = 1
where the input format has the 3 bits (beside 2^lo that bit would be a tie at a cut at 2^lo,
which nearest alignment rounds up to even; fp8 e4m3 spans 2^16 .. 2^-12 alone), each beside
the largest pair. t counts from each row's own pair: a kept row returns its third term.

Outcomes: F = the largest surviving t (survivals must form a prefix). All probed t surviving:
F >= t_max ("at least"; the range is limited by the formats: t_max = E2 - max(2 e_min(in),
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
    vals = [math.ldexp(1.0, E - t) for t in ts]  # the third term: what a kept one returns
    if L >= 4 and all(x == v for x, v in zip(d, vals)):
        # every term kept: the smallest power-of-two product 2^lo beside a larger pair, up to
        # the largest product 2^E2 (E is bounded by the output's range too; the pair cancels,
        # so E2 is not: fp16 output, e5m2 products reach 2^30); then below 2^lo the low bit
        # 2^(lo - j) of a product 2^lo + 2^(lo - j) beside -2^lo (fp8 e4m3: 2^16 .. 2^-12
        # bounds F <= 28 alone, too few for F = 30 where c is added last and cannot be the
        # third term) (j = 1 pairs the bit with 2^(lo + 1): beside 2^lo it would be a tie,
        # 1.5 units of a cut at 2^lo, which nearest alignment takes to 2 units, not to 0)
        low = vals[-1]
        more = _rows_until_cut(ctx, blk, E, ts[-1], low, larger_pairs=ts[-1] == E - lo)
        if more is not None:
            rows, ts, vals, meanings = (x + y for x, y in zip((rows, ts, vals, meanings), more))
            d = np.concatenate([d, more[4]])
    ev = sample_evidence(ctx, rows, d, meanings, limit=6)
    bad = _read(ctx, rows, d, ts, meanings, ev, vals)
    if bad is not None:
        return bad
    kept = [x == v for x, v in zip(d, vals)]
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


def _rows_until_cut(ctx: Ctx, blk, E: int, t_last: int, low: float, larger_pairs: bool):
    """The kept-bits rows past t_last, every earlier term kept (:func:`run`). With
    ``larger_pairs`` (``low`` = 2^lo is the smallest product, t_last = E - lo): ``low`` beside
    pairs 2^e - 2^e, E < e <= the largest product exponent and fp32's largest (products beyond
    it may overflow, AMD CDNA2 rounds them to fp32); then, where all of those kept it, the low
    bits of a product beside the largest pair. Returns (rows, ts, vals, meanings, d) to append
    (d a list), or None: no row."""
    rows, ts, vals, meanings = [], [], [], []
    E2, pair2 = E, _pair(ctx, blk, E)
    for e in range(E + 1, (_top_exponent(ctx, E) if larger_pairs else E) + 1):
        pair = _pair(ctx, blk, e)
        if pair is None:
            break
        rows.append(ctx.row([(blk[2], low)], raw=pair))
        E2, pair2 = e, pair
        ts.append(t_last + e - E)
        vals.append(low)
        meanings.append(f"2^{e} - 2^{e} + {low}: t = {ts[-1]}")
    d = [float(x) for x in ctx.run(rows)]
    if any(x != low for x in d):  # cut above 2^lo: the partner -2^lo of a low bit would be
        return rows, ts, vals, meanings, d  # cut too (-1 unit under floor alignment)
    t_low, low_rows = t_last + E2 - E, []
    for j in range(1, ctx.fin.p):
        bit = math.ldexp(low, -j)
        row = None
        for partner in ((2 * low, low) if j == 1 else (low,)):  # 2^(lo+1) + bit: 3 bits
            try:
                row = ctx.row([(blk[2], partner + bit), (blk[3], -partner)], raw=pair2)
                break
            except NotRepresentable:
                continue
        if row is None:
            break
        low_rows.append(row)
        ts.append(t_low + j)
        vals.append(bit)
        meanings.append(f"2^{E2} - 2^{E2} + ({partner} + {bit}) - {partner}: t = {t_low + j}")
    rows += low_rows
    d += [float(x) for x in ctx.run(low_rows)]
    return (rows, ts, vals, meanings, d) if rows else None


def _top_exponent(ctx: Ctx, E: int) -> int:
    """The largest pair exponent the extension rows try: the largest product's, at most
    fp32's largest (products beyond it may overflow: AMD CDNA2 rounds them to fp32) and E + 60."""
    return min(ctx.fin.emax + ctx.fb.emax, 127, E + 60)


def _pair(ctx: Ctx, blk, e: int):
    """raw entries [(position, a, b)] of a cancelling pair +2^e, -2^e in the first two
    positions, or None where 2^e is no product of normal inputs. (A larger product that is no
    power of two would not help: e_max is e_a + e_b, its significand product lies in [1, 4).)"""
    try:
        a, b = ctx.split(math.ldexp(1.0, e))
    except NotRepresentable:
        return None
    return [(blk[0], a, b), (blk[1], -a, b)]


def _read(ctx: Ctx, rows, d, ts, meanings, ev, vals):
    """None when the outputs are the third term (``vals``, per row) or 0 and the kept ones
    form a prefix of t; otherwise the "does not fit" finding."""
    kept = [x == v for x, v in zip(d, vals)]
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
    bad = _read(ctx, rows, d, ts, meanings, ev, [math.ldexp(1.0, E - t) for t in ts])
    if bad is not None:
        bad[0].rows = n_run
        return bad
    vals = [math.ldexp(1.0, E - t) for t in ts]
    kept = [x == v for x, v in zip(d, vals)]
    if all(kept):
        # every c kept: the smallest c that came back beside larger pairs 2^e - 2^e (up to the
        # largest product; the pair may lie above the output's range: fp8 inputs, fp16 output,
        # where the smallest normal c is 2^-14)
        c_min, more, more_ts = vals[-1], [], []
        for e in range(E + 1, _top_exponent(ctx, E) + 1):
            pair = _pair(ctx, blk, e)
            if pair is None:
                break
            more.append(ctx.row([], c=c_min, raw=pair))
            more_ts.append(ts[-1] + e - E)
        if more:
            n_run += len(more)
            rows, ts, vals = rows + more, ts + more_ts, vals + [c_min] * len(more)
            d = np.concatenate([d, ctx.run(more)])
            meanings += [f"2^{E + i + 1} - 2^{E + i + 1} + c, c = {c_min!r}: t = {t}"
                         for i, t in enumerate(more_ts)]
            ev = sample_evidence(ctx, rows, d, meanings, limit=6) + ev0[:2]
            bad = _read(ctx, rows, d, ts, meanings, ev, vals)
            if bad is not None:
                bad[0].rows = n_run
                return bad
            kept = [x == v for x, v in zip(d, vals)]
    n_kept = sum(kept)
    skip = (f"; c = 2^{E - skipped[0]} .. 2^{E - skipped[-1]} left out (c alone does not "
            f"come back)" if skipped else "")
    if n_kept == len(ts):
        F = lossless_frac_bits(ctx.fin.name, fout.name, ctx.fb.name)
        ctx.known.update(frac_bits=F, frac_bits_at_least=True, lossless=True)
        if skipped:  # c below the last t does not come back alone: nothing shows a cut
            read = (f"F is at least {ts[-1]}; F = {F} used (lossless for these formats), the "
                    f"validation decides")
        else:
            read = (f"F >= {ts[-1]}, no term is ever cut (lossless blocks); F = {F} used "
                    f"(lossless for these formats)")
        return [Finding(FAMILY, "frac_bits", F, rows=n_run, evidence=ev,
                        note=f"{why}; c = 2^(e_max-t) beside a cancelling pair at 2^e_max is "
                             f"kept for every t <= {ts[-1]}{skip}: {read}")]
    F = ts[n_kept - 1]
    ctx.known.update(frac_bits=F, frac_bits_at_least=False)
    return [Finding(FAMILY, "frac_bits", F, rows=n_run, evidence=ev,
                    note=f"{why}; with c as the third term: c = 2^(e_max-{F}) survives beside "
                         f"a cancelling pair at 2^e_max, 2^(e_max-{F + 1}) does not{skip}: "
                         f"F = {F} fraction bits below e_max")]
