"""Step (and output) rounding rho: its format and its direction (NUMERICS.md section 3, probe 7).

Inputs: sums whose exact value sits just above, on, or below rounding points of every candidate
format, all in the first block: n copies of +-2^Eh (n = 1, 2, 3, 4, L - 1: carries push the sum's
leading bit above e_max; for n = L - 1 also +-(2 - 2^(1-p_in)) * 2^Eh, whose carries reach
further) plus one term +-m * 2^(Eh - t), m in {1, 1.25, 1.5, 1 + 2^(1-p_in)}
(the last puts a bit far below a tie, which a truncating wider step moves onto it), t = 1 .. F + 2;
where c enters with the first block, also L - 1 products +-(2 - 2^(1-p_in)) * 2^Eh, one
+-{1, 1.5} * 2^Eh and c = +-{2 - 2^-t, 1 + 2^-t, 1.5 + 2^-t, 1 + 1.5 * 2^-t} * 2^Eh (carries to
e_max + 2 with c's low bits under an odd or even kept bit);
single tiny products on the output's subnormal grid (in the last block); then random in-format
values in the first block and over all blocks (chained steps), with random
c. Eh is chosen so that no sum overflows the output format.

Outcome: candidate elimination. The candidates are every format with the output format's exponent
range and at most its precision (fp32 outputs: fp32, e8m13 (the "FP22" fp8 accumulator of
NUMERICS.md section 2), tf32, bf16; fp16 outputs: fp16) in every rounding mode (RNE, RZ, RNA,
RD, RU). Each candidate is a profile with the structure, F and alignment found so far, run by the
vectorised engine; candidates whose outputs differ from the op's on any row are dropped. One
survivor: rho found. Several: they agree on every probe (reported as equivalent; the first in
the order output format, RZ before RNE, is used; where they differ in subnormal grid, the zeros
family chooses with e_zero known; the closed-loop validation then decides). None
(outputs narrower than 24 bits): steps in a wider accumulator (fp32 or e8m13, RZ or RNE) followed
by one output rounding to the output format (RNE or RZ) are tried the same way, which sets
``output_rounding``. Still none: no rounding of this family reproduces the op ("does not fit").
"""

from __future__ import annotations

import math

import numpy as np

from ..emulate.vectorized import fdpa_batch
from ..formats import ROUNDING_MODES
from ..profile import resolve_format
from ._common import (
    Ctx,
    Finding,
    NotRepresentable,
    candidate_profile,
    same_bits,
    sample_evidence,
)
from .determinism import random_normals

FAMILY = "rounding"

_FORMATS = ("fp32", "e8m13", "tf32", "bf16", "fp16", "fp64")
_MODES = ("RZ", "RNE", "RNA", "RD", "RU")


def output_candidates(fout) -> list[tuple[tuple[str, str], tuple[str, str]]]:
    """(step, output) rounding pairs for a narrow output: steps kept in a wider accumulator
    (fp32, or the e8m13 "FP22" of NUMERICS.md section 2) in RZ or RNE, then one rounding of the
    last step to the output format (RNE or RZ). Empty for outputs of 24 bits or more."""
    if fout.p >= 24:
        return []
    return [((sf, sm), (fout.name, om)) for sf in ("fp32", "e8m13") for sm in ("RZ", "RNE")
            for om in ("RNE", "RZ")]


def candidates(fout) -> list[tuple[str, str]]:
    out = []
    names = [fout.name] + [n for n in _FORMATS if n != fout.name]
    for n in names:
        try:
            f = resolve_format(n)
        except ValueError:
            continue
        if f.emax == fout.emax and f.emin == fout.emin and f.p <= fout.p:
            out.extend((f.name, m) for m in _MODES if m in ROUNDING_MODES)
    return out


def probe_rows(ctx: Ctx) -> list:
    blk = ctx.first_block
    L = len(blk)
    F = ctx.known.get("frac_bits", 24)
    fin, fout = ctx.fin, ctx.fout
    Eh = min(fout.emax - 2 - math.ceil(math.log2(L + 2)), fin.emax + ctx.fb.emax - 1)
    rows = []
    ns = sorted({n for n in (1, 2, 3, 4, L - 1) if 1 <= n <= L - 1})
    ms = [1.0, 1.5] + ([1.25, 1.0 + math.ldexp(1.0, 1 - fin.p)] if fin.p >= 3 else [])
    c_first = ctx.known.get("c_entry", "first") == "first"
    # the big terms 2^Eh, and for n = L - 1 also the largest significand of a's format (2 -
    # 2^(1 - p)): their carries put the sum's leading bit up to log2(2 (L - 1)) above e_max,
    # so that F bits below e_max exceed a narrower step's precision (fp8 products with F = 11:
    # e8m13's 14 bits, which n copies of 2^Eh never exceed)
    tops = [(n, 1.0, ms) for n in ns or [0]]
    if len(ns) and ns[-1] >= 2 and fin.p >= 2:
        tops.append((ns[-1], 2.0 - math.ldexp(1.0, 1 - fin.p), [1.0, 1.5]))
    for n, top, ms_n in tops:
        for t in range(1, F + 3):
            for m in ms_n:
                for s1 in (1.0, -1.0):
                    for s2 in (1.0, -1.0):
                        small = s2 * m * math.ldexp(1.0, Eh - t)
                        big = [(blk[i], s1 * top * math.ldexp(1.0, Eh)) for i in range(n)]
                        try:
                            if n == 0:  # L = 1: the big term is c
                                rows.append(ctx.row([(blk[0], small)], c=s1 * math.ldexp(1.0, Eh)))
                            else:
                                rows.append(ctx.row(big + [(blk[n], small)]))
                        except NotRepresentable:
                            pass
    # c entering with the first block is one more big term: with the largest product
    # significands its carries reach e_max + 2, one bit past what L - 1 products reach (L = 2:
    # one big product never passes e8m13's 14 bits at F = 12); c's significand carries the low
    # bits (all ones, or one bit under an odd or even kept bit) down to 2^(Eh - t)
    if c_first and L >= 2 and fin.p >= 2:
        top = 2.0 - math.ldexp(1.0, 1 - fin.p)
        for t in range(1, F + 3):
            u = math.ldexp(1.0, -t)
            for cm in (2.0 - u, 1.0 + u, 1.5 + u, 1.0 + 1.5 * u):
                for sm in (1.0, 1.5):
                    for s1 in (1.0, -1.0):
                        big = [(blk[i], s1 * top * math.ldexp(1.0, Eh)) for i in range(L - 1)]
                        try:
                            rows.append(ctx.row(big + [(blk[L - 1], s1 * sm * math.ldexp(1.0, Eh))],
                                                c=s1 * cm * math.ldexp(1.0, Eh)))
                        except NotRepresentable:
                            pass
    # the subnormal grids of the candidates differ (e8m13 is coarser than fp32 there); these
    # rows only break ties (e_zero, unknown yet, may also act on them)
    ctx.known["_tiny_from"] = len(rows)
    last = ctx.blocks[-1][0]
    for e in range(fout.emin - fout.p, fout.emin + 2):
        for m in (1.0, 1.5, 1.75, 1.875):
            for s1 in (1.0, -1.0):
                try:
                    rows.append(ctx.row([(last, s1 * m * math.ldexp(1.0, e))], allow_subnormal=True))
                except NotRepresentable:
                    pass
    ctx.known["_tiny_to"] = len(rows)
    rng = ctx.rng
    fb = ctx.fb
    lo = max(Eh - F - 2, max(fin.emin, fb.emin) + 1, (fout.emin + 2) // 2 + 1)
    for scope in ("block", "all"):
        pos = blk if scope == "block" else list(range(ctx.K))
        for _ in range(200):
            a = np.zeros(ctx.K)
            b = np.ones(ctx.K)
            a[pos] = random_normals(rng, fin, len(pos), lo // 2, min(Eh // 2, fin.emax - 1))
            b[pos] = random_normals(rng, fb, len(pos), lo // 2, min(Eh // 2, fb.emax - 1))
            c = float(random_normals(rng, fout, 1, lo, Eh)[0]) if (c_first or scope == "all") else 0.0
            rows.append((a, b, c))
    return rows


def run(ctx: Ctx) -> list[Finding]:
    rows = probe_rows(ctx)
    d = ctx.run(rows)
    a = np.stack([r[0] for r in rows])
    b = np.stack([r[1] for r in rows])
    c = np.array([r[2] for r in rows])
    alive, dead_rows = [], np.zeros(len(rows), dtype=bool)
    tiny = np.zeros(len(rows), dtype=bool)
    tiny[ctx.known.pop("_tiny_from"):ctx.known.pop("_tiny_to")] = True
    def test(step, out=None) -> bool | None:
        """None: the candidate fails a main probe; else whether it also fits the tiny rows."""
        nonlocal dead_rows
        try:
            pred = fdpa_batch(a, b, c, candidate_profile(ctx, step_rounding=step,
                                                         output_rounding=out))
        except ValueError:
            return None
        ok = same_bits(pred, d)
        main = ok.copy()
        main[tiny] = True
        if not main.all():
            dead_rows |= ~main
            return None
        # a tiny row's zero sign is the specials family's (-0 kept or not: unknown yet)
        return bool((ok | (tiny & (pred == 0) & (d == 0))).all())

    for cand in candidates(ctx.fout):
        full = test(cand)
        if full is not None:
            alive.append((cand, full))
    if not alive:  # steps in a wider accumulator, then one rounding to the output format
        pairs = []
        for step, out in output_candidates(ctx.fout):
            full = test(step, out)
            if full is not None:
                pairs.append(((step, out), full))
        if pairs:
            return _with_output_rounding(ctx, pairs, rows, d)
    idx = np.flatnonzero(dead_rows)
    ev_rows = [rows[i] for i in idx] if len(idx) else rows
    ev = sample_evidence(ctx, ev_rows, d[idx] if len(idx) else d)
    if not alive:
        return [Finding(FAMILY, "step_rounding", None, fits=False, rows=len(rows), evidence=ev,
                        note=f"no rounding of {', '.join(sorted({f for f, _ in candidates(ctx.fout)}))} "
                             f"in any mode reproduces the {len(rows)} rounding probes: does not fit")]
    alive = [c for c, full in alive if full] or [c for c, _ in alive]
    best = alive[0]
    ctx.known["step_rounding"] = best
    # candidates with another subnormal grid may differ only where e_zero lets a sum that fine
    # through: the zeros family decides between them with e_zero (zeros.run)
    ctx.known["_step_alternatives"] = alive
    ctx.known["_grid_rows"] = ([rows[i] for i in np.flatnonzero(tiny)], d[tiny])
    note = f"every step rounds to {best[0]} {best[1]}"
    if len(alive) > 1:
        note += (f" (equivalent on all {len(rows)} probes: "
                 + ", ".join(f"{f} {m}" for f, m in alive[1:]) + ")")
    return [Finding(FAMILY, "step_rounding", list(best), rows=len(rows), evidence=ev, note=note)]


def _with_output_rounding(ctx: Ctx, pairs, rows, d) -> list[Finding]:
    """Findings for a (step, output) rounding pair that reproduces the probes where no single
    rounding does."""
    alive = [p for p, full in pairs if full] or [p for p, _ in pairs]
    step, out = alive[0]
    ctx.known["step_rounding"] = step
    ctx.known["output_rounding"] = out
    ev = sample_evidence(ctx, rows, d)
    note = (f"no single rounding to {ctx.fout.name} fits; steps round to {step[0]} {step[1]}, "
            f"then the result once to {out[0]} {out[1]}")
    if len(alive) > 1:
        note += (f" (equivalent on all {len(rows)} probes: "
                 + ", ".join(f"{s[0]} {s[1]} -> {o[0]} {o[1]}" for s, o in alive[1:]) + ")")
    return [Finding(FAMILY, "step_rounding", list(step), rows=len(rows), evidence=ev, note=note),
            Finding(FAMILY, "output_rounding", list(out),
                    note=f"the last step's result is rounded once more, to {out[0]} {out[1]}")]
