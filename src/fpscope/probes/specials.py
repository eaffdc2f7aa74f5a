"""Special values: -0, NaN bits, Inf arithmetic, overflow under RZ (NUMERICS.md section 3,
probe 9; NVIDIA facts from NUMERICS.md section 2: -0 sums give +0, canonical NaN 0x7FFFFFFF /
0x7FFF, overflow gives +-Inf even under RZ).

Inputs and what each outcome means:

* all products -0 (a = -0, b = 1) and c = -0: the exact sum is -0. d = +0: ``neg_zero_to_pos``;
  d = -0: IEEE signed zeros.
* a_0 = NaN: d must be NaN; its bits (narrowed from the float64 the op returns) give ``nan_bits``.
* a_0 = +Inf (d = +Inf), Inf * 0 (NaN), +Inf and -Inf products (NaN), c = -Inf with a finite
  product (-Inf): these follow the model's rules or the op does not fit. Input formats without
  NaN or Inf (OCP fp6/fp4) leave out the operand cases and take c = NaN (d NaN, its bits give
  ``nan_bits``) and c = +Inf (d = +Inf) instead.
* a negative sum that rounds to zero (one product of minus half the smallest subnormal of the
  coarser of the step and output formats, the others and c -0; under a flush of outputs
  -2^(emin(out) - 1), which is flushed): -0 where
  the -0 sum gave -0 (IEEE), or +0 where it gave +0 (``neg_zero_to_pos``); -0 after a +0 for
  the -0 sum is an exact zero sum made +0 while a rounded one keeps its sign
  (``zero_sum_sign`` "positive", ``neg_zero_to_pos`` False: mmasim's AMD CDNA1 model); +0 after
  a -0 fits no profile. Not observable where no product is that small (the profile keeps the
  -0 sum's rule).
* overflow: c = 2^emax(out) and a product 2^emax(out): the exact sum 2^(emax + 1) must give +Inf
  in every rounding mode (the model); a finite result means saturating overflow, which the
  profile cannot express. Not observable when no product reaches 2^emax(out) (fp16 inputs with
  fp32 output, fp8 inputs): the default (Inf) is used.
"""

from __future__ import annotations

import math

import numpy as np

from ..profile import Profile
from ._common import Ctx, Finding, NotRepresentable, default_nan_bits, grid_format
from .blackbox import nan_bits_of

FAMILY = "specials"


def run(ctx: Ctx) -> list[Finding]:
    out = []
    K = ctx.K
    blk = ctx.first_block
    p0 = blk[0]
    # -0
    row = ctx.row([], c=-0.0, raw=[(k, -0.0, 1.0) for k in range(K)])
    d = float(ctx.run([row])[0])
    if d == 0:
        pos = math.copysign(1.0, d) > 0
        ctx.known["neg_zero_to_pos"] = pos
        under = _negative_underflow(ctx, pos)  # where -0 results are kept: zero_sum_sign too
        nz = ctx.known["neg_zero_to_pos"]
        out.append(Finding(FAMILY, "neg_zero_to_pos", nz, rows=1,
                           evidence=[ctx.evidence(row, d, "sum of -0 products and c = -0")],
                           note="a -0 sum is returned as +0" if nz else
                           "a -0 sum stays -0 (IEEE)" if not pos else
                           "a -0 sum is +0 as an exact zero sum (zero_sum_sign), -0 results "
                           "are kept" if ctx.known.get("zero_sum_sign") == "positive" else
                           "a -0 sum gives +0 (c is added last to blocks started from +0), -0 "
                           "results are kept"))
        out.extend(under)
    else:
        out.append(Finding(FAMILY, "neg_zero_to_pos", None, fits=False, rows=1,
                           evidence=[ctx.evidence(row, d)], note=f"a sum of zeros gave {d!r}"))
    # NaN and Inf rules
    inf = math.inf
    other = blk[1] if len(blk) > 1 else (1 if K > 1 else 0)
    cases = [
        ("NaN operand", [(p0, math.nan, 1.0)], 0.0, "nan"),
        ("Inf * 1", [(p0, inf, 1.0)], 0.0, inf),
        ("Inf * 0", [(p0, inf, 0.0)], 0.0, "nan"),
        ("c = -Inf, product 1", [(p0, 1.0, 1.0)], -inf if ctx.fout.has_inf else None, -inf),
    ]
    if other != p0:
        cases.append(("+Inf and -Inf products", [(p0, inf, 1.0), (other, -inf, 1.0)], 0.0, "nan"))
    if not ctx.fin.has_nan and ctx.fout.has_nan:  # fp6/fp4 inputs: a NaN can only come in as c
        cases.append(("c = NaN, product 1", [(p0, 1.0, 1.0)], math.nan, "nan"))
    if not ctx.fin.has_inf and ctx.fout.has_inf:
        cases.append(("c = +Inf, product 1", [(p0, 1.0, 1.0)], inf, inf))
    rows, meta = [], []
    for what, raw, c, want in cases:
        if c is None or (not ctx.fin.has_inf and any(math.isinf(x) for _, x, _ in raw)):
            continue
        if not ctx.fin.has_nan and any(math.isnan(x) for _, x, _ in raw):
            continue
        try:
            rows.append(ctx.row([], c=c, raw=raw))
            meta.append((what, want))
        except NotRepresentable:
            continue
    d = ctx.run(rows)
    ok = True
    ev = []
    nan_bits = None
    for (what, want), r, v in zip(meta, rows, d):
        v = float(v)
        good = math.isnan(v) if want == "nan" else v == want
        ok &= good
        ev.append(ctx.evidence(r, v, what + ("" if good else " (unexpected)")))
        if want == "nan" and math.isnan(v) and nan_bits is None:
            nan_bits = nan_bits_of(v, ctx.fout)
    out.append(Finding(FAMILY, "inf_nan_rules", ok, fits=ok, rows=len(rows), evidence=ev,
                       note="NaN in, Inf * 0 and Inf - Inf give NaN; Inf propagates" if ok
                       else "special values do not follow the model's rules"))
    if nan_bits is None:
        nan_bits = default_nan_bits(ctx.fout)
        out.append(Finding(FAMILY, "nan_bits", nan_bits, observable=False,
                           note="no NaN output seen; default all-ones NaN"))
    else:
        ctx.known["nan_bits"] = nan_bits
        w = math.ceil(ctx.fout.bits / 4)
        out.append(Finding(FAMILY, "nan_bits", nan_bits, rows=0,
                           note=f"NaN outputs are 0x{nan_bits:0{w}X} (narrowed from the float64 "
                                f"the op returns)"))
    # overflow under RZ (and every mode)
    big = math.ldexp(1.0, ctx.fout.emax)
    try:
        row = ctx.row([(p0, big)], c=big)
    except NotRepresentable:
        out.append(Finding(FAMILY, "overflow_to_inf", True, observable=False,
                           note=f"no product of {ctx.operands} values reaches 2^{ctx.fout.emax}: "
                                f"overflow cannot be forced; default +-Inf in every mode"))
        return out
    d = float(ctx.run([row])[0])
    good = d == math.inf
    out.append(Finding(FAMILY, "overflow_to_inf", good, fits=good, rows=1,
                       evidence=[ctx.evidence(row, d, f"2^{ctx.fout.emax} + 2^{ctx.fout.emax}")],
                       note="an overflowing sum gives Inf (also under RZ)" if good else
                       f"an overflowing sum gave {d!r} (saturation): the profile cannot express it"))
    return out


def _negative_underflow(ctx: Ctx, pos: bool) -> list[Finding]:
    """The sign of a negative sum that rounds to zero, and of exact zero sums after it.

    Row 1: one product of minus half the smallest subnormal of the rounding grid
    (:func:`~fpscope.probes._common.grid_format`; under ``flush_outputs`` half the smallest
    normal output, which is flushed) in the last block, every
    other product and c -0: a negative sum that rounds to zero (or, where e_zero cuts the
    product, an exact zero sum of -0 terms). +0: ``neg_zero_to_pos`` (a -0 sum, ``pos`` False,
    then fits no profile); -0: -0 results are kept. Then which exact zero sums are -0
    (``zero_sum_sign``): row 2, with more than one block, puts the product in the first block
    instead: its -0 meets blocks of -0 products, an exact zero sum of -0 terms, -0 under "ieee"
    and +0 under "positive" (mmasim's CDNA1 model). With one block the -0 sum (``pos``) tells
    (+0: "positive"; where c is added last the block starts from +0 and both rules agree)."""
    fout = ctx.fout
    grid = grid_format(ctx)  # e8m13 steps round on 2^-139: half of fp32's subnormal may be cut
    v = -0.5 * (fout.min_normal if ctx.known.get("flush_outputs") else grid.min_subnormal)

    def row(slot):  # every other term -0: a cut product leaves an exact zero sum of -0 terms
        return ctx.row([(slot, v)], c=-0.0,
                       raw=[(k, -0.0, 1.0) for k in range(ctx.K) if k != slot])

    what = f"one product {v!r} in the last block, the other products and c -0"
    try:
        rows = [row(ctx.blocks[-1][0])] + ([row(ctx.blocks[0][0])] if len(ctx.blocks) > 1
                                            else [])
    except NotRepresentable:
        c_read = ctx.known.get("c_entry", "first") == "last" or not ctx.known.get("flush_inputs")
        if not (ctx.known.get("flush_outputs") and c_read):
            return [Finding(FAMILY, "neg_underflow_sign", None, observable=False,
                            note=f"no product of {ctx.operands} values is as small as {v!r}: a "
                                 f"negative sum that rounds to zero cannot be formed; its sign "
                                 f"is assumed to follow the -0 sum's")]
        # outputs are flushed: c = the smallest negative subnormal with -0 products is one
        what = f"c = {-fout.min_subnormal!r} (flushed), every product -0"
        rows = [ctx.row([], c=-fout.min_subnormal, raw=[(k, -0.0, 1.0) for k in range(ctx.K)])]
    d = [float(x) for x in ctx.run(rows)]
    ev = [ctx.evidence(rows[0], d[0], f"{what}: a negative sum rounding to zero")]
    if d[0] != 0:
        return [Finding(FAMILY, "neg_underflow_sign", None, observable=False, rows=1, evidence=ev,
                        note=f"the negative tiny sum gave {d[0]!r}, not a zero: nothing to "
                             f"compare")]
    if math.copysign(1.0, d[0]) > 0:
        if pos:
            return [Finding(FAMILY, "neg_underflow_sign", "+0", rows=1, evidence=ev,
                            note="a negative sum that rounds to zero gives +0, as the -0 sum")]
        return [Finding(FAMILY, "neg_underflow_sign", "+0", fits=False, rows=1, evidence=ev,
                        note="a sum of -0 terms gives -0 but a negative sum that rounds to zero "
                             "gives +0: no profile expresses both (it keeps the -0 sum's rule)")]
    ctx.known["neg_zero_to_pos"] = False
    rule, why = ("positive" if pos else "ieee"), "the -0 sum above"
    if len(d) > 1 and d[1] == 0:
        rule = "ieee" if math.copysign(1.0, d[1]) < 0 else "positive"
        why = "the first block's -0 met by -0 products"
        ev.append(ctx.evidence(rows[1], d[1], f"the product {v!r} in the first block: its -0 "
                                              f"meets the -0 products of the later blocks"))
    if rule == "positive" and not pos:
        return [Finding(FAMILY, "zero_sum_sign", None, fits=False, rows=len(d), evidence=ev,
                        note="a sum of -0 terms gives -0, but the first block's -0 met by -0 "
                             "products gives +0: no zero_sum_sign expresses both")]
    ctx.known["zero_sum_sign"] = rule
    if rule == "positive":
        return [Finding(FAMILY, "zero_sum_sign", "positive", rows=len(d), evidence=ev,
                        note=f"an exact zero sum is +0 ({why}), but a negative sum that rounds "
                             f"to zero stays -0: zero_sum_sign positive, neg_zero_to_pos False")]
    return [Finding(FAMILY, "neg_underflow_sign", "-0", rows=len(d), evidence=ev,
                    note=f"a negative sum that rounds to zero stays -0, and an exact zero sum "
                         f"of -0 terms is -0 ({why})")]


def zero_sign_rows(p: Profile) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Instruction inputs a, b (R, k) and c (R,) whose outputs are zeros of either sign under
    most profiles: products +0 or -0 and c +0 or -0, alone or with one product of +- half the
    smallest subnormal (or normal) output in any slot, which rounds (or is flushed) to zero
    where the window keeps it; also half the step format's smallest subnormal (e8m13 steps
    round on 2^-139) and, with e_zero, 2^(e_zero - F), the smallest term kept beside zero
    terms, where it is below both grids; unit block scales. They decide ``neg_zero_to_pos`` and
    ``zero_sum_sign``, which random inputs almost never reach. Values the input format cannot
    split into a product are left out."""
    from ..formats import is_representable
    from ..profile import resolve_format

    fin, fb = (resolve_format(f) for f in p.operand_formats)
    fout = resolve_format(p.out_format)
    grid = max(fout.min_subnormal, resolve_format(p.step_rounding[0]).min_subnormal)
    vs = [0.5 * fout.min_subnormal, 0.5 * fout.min_normal]
    if grid > fout.min_subnormal:  # steps on a coarser grid (e8m13: 2^-139)
        vs.append(0.5 * grid)
    if p.e_zero is not None and math.ldexp(1.0, p.e_zero - p.frac_bits) < 0.5 * grid:
        vs.append(math.ldexp(1.0, p.e_zero - p.frac_bits))  # kept beside zero terms
    tiny = []
    for v in vs:
        e = math.frexp(v)[1] - 1
        x, y = 2.0 ** (e // 2), v / 2.0 ** (e // 2)
        if is_representable(np.array([x]), fin)[0] and is_representable(np.array([y]), fb)[0]:
            tiny += [(x, y), (x, -y)]
    A, B, C = [], [], []
    for zero in (0.0, -0.0):
        for c in (0.0, -0.0):
            A.append([zero] * p.k), B.append([1.0] * p.k), C.append(c)
            for x, y in tiny:
                for j in range(p.k):
                    A.append([zero] * p.k), B.append([1.0] * p.k), C.append(c)
                    A[-1][j], B[-1][j] = x, y
    return np.array(A), np.array(B), np.array(C)


#: The zero rules a profile can state: (neg_zero_to_pos, zero_sum_sign), in the order of
#: preference among rules that give the same outputs (NVIDIA's first).
ZERO_RULES = ((True, "ieee"), (False, "ieee"), (False, "positive"))


def zero_rules(ctx: Ctx, profile: Profile) -> tuple[list[Finding], Profile]:
    """Check the zero rules of the assembled ``profile`` (a fused node, no block scales) on
    :func:`zero_sign_rows` run through the op, now that e_zero, F and the flushes are known
    (the rows above ran before them; a product cut by e_zero or a -0 made by flushing a
    chained subnormal can hide or show a rule there). The profile's rule is kept when it
    reproduces every row; else the first of :data:`ZERO_RULES` that does replaces it; none:
    a finding that does not fit."""
    from ..emulate.vectorized import fdpa_batch

    A, B, C = zero_sign_rows(profile)
    d = ctx.run(list(zip(A, B, C)))

    def fits(q):
        return bool((fdpa_batch(A, B, C, q).view(np.int64) == d.view(np.int64)).all())

    if fits(profile):
        return [], profile
    for nz, zs in ZERO_RULES:
        q = profile.replace(neg_zero_to_pos=nz, zero_sum_sign=zs)
        if fits(q):
            ctx.known["neg_zero_to_pos"], ctx.known["zero_sum_sign"] = nz, zs
            return [Finding(FAMILY, "zero_rules", f"neg_zero_to_pos {nz}, zero_sum_sign {zs}",
                            rows=len(A), note=f"{len(A)} rows of zeros of both signs and tiny "
                            f"products, with e_zero, F and the flushes known: "
                            f"neg_zero_to_pos {nz}, zero_sum_sign {zs} reproduce them (the "
                            f"rows above read {profile.neg_zero_to_pos}, "
                            f"{profile.zero_sum_sign})")], q
    return [Finding(FAMILY, "zero_rules", None, fits=False, rows=len(A),
                    note=f"no zero rule reproduces the {len(A)} rows of zeros of both signs "
                         f"and tiny products")], profile
