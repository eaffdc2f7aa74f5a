"""Kept bits F: cancel a large pair, then shrink a third term until it stops surviving
(NUMERICS.md section 3, probe 3; Fasi et al. 2021, Hawkeye).

Inputs (first block, c = 0): products +2^E, -2^E and 2^(E - t) for t = 1, 2, ..., with E the
largest exponent inputs and output allow. The pair cancels exactly; the third term survives (d =
2^(E - t)) while it lies at or above the cut 2^(E - F), and is dropped (d = 0) below it. The cut
is the same for "truncate", "floor" and "nearest" alignment on a single positive power of two
(nearest: 2^(E - F - 1) is a tie and goes to the even 0).

F convention (fpscope.profile): fraction bits kept below 2^e_max, e_max = e_a + e_b of the
largest product (significands in [1, 4)); F = 24 on Ampere.

Outcomes: F = the largest surviving t (survivals must form a prefix). All probed t surviving:
F >= t_max ("at least"; the range is limited by the formats: t_max = E - max(2 e_min(in),
e_min(out))). Not observable: blocks of one product (no room for a cancelling pair beside the
third term: an FMA chain keeps the exact product; F is then set to the largest value the
vectorised engine accepts, 50, and the validation decides).
"""

from __future__ import annotations

import math

from ._common import Ctx, Finding, NotRepresentable, sample_evidence

FAMILY = "precision"


def max_engine_F(L: int) -> int:
    """The largest F the vectorised engine sums exactly: F + 2 + log2(L + 1) <= 53."""
    return math.floor(51 - math.log2(L + 1))


def run(ctx: Ctx) -> list[Finding]:
    blk = ctx.first_block
    L = len(blk)
    use_c = False
    if L < 3:
        if L == 2 and ctx.known.get("c_entry_hint", "first") == "first":
            use_c = True  # the third term is c (it joins the first block when c enters first)
        else:
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
            if use_c:
                rows.append(ctx.row([(blk[0], math.ldexp(1.0, E)), (blk[1], -math.ldexp(1.0, E))],
                                    c=small))
            else:
                rows.append(ctx.row([(blk[0], math.ldexp(1.0, E)), (blk[1], -math.ldexp(1.0, E)),
                                     (blk[2], small)]))
        except NotRepresentable:
            break
        ts.append(t)
    if not rows:
        return [Finding(FAMILY, "frac_bits", None, observable=False, fits=False,
                        note="no probe can be formed with these formats")]
    d = ctx.run(rows)
    meanings = [f"2^{E} - 2^{E} + 2^{E - t}: t = {t}" for t in ts]
    ev = sample_evidence(ctx, rows, d, meanings, limit=6)
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
    if n_kept == len(ts):
        F = min(ts[-1], max_engine_F(L))
        ctx.known.update(frac_bits=F, frac_bits_at_least=True)
        return [Finding(FAMILY, "frac_bits", F, rows=len(rows), evidence=ev, observable=True,
                        note=f"every probed bit kept: F >= {ts[-1]} (the formats allow no smaller "
                             f"third term); F = {F} used")]
    F = ts[n_kept - 1]
    ctx.known.update(frac_bits=F, frac_bits_at_least=False)
    via = " (third term as c)" if use_c else ""
    return [Finding(FAMILY, "frac_bits", F, rows=len(rows), evidence=ev,
                    note=f"2^(E-{F}) survives beside a cancelling pair at 2^E, 2^(E-{F + 1}) does "
                         f"not{via}: F = {F} fraction bits below e_max")]
