"""Special values: -0, NaN bits, Inf arithmetic, overflow under RZ (NUMERICS.md section 3,
probe 9; NVIDIA facts from NUMERICS.md section 2: -0 sums give +0, canonical NaN 0x7FFFFFFF /
0x7FFF, overflow gives +-Inf even under RZ).

Inputs and what each outcome means:

* all products -0 (a = -0, b = 1) and c = -0: the exact sum is -0. d = +0: ``neg_zero_to_pos``;
  d = -0: IEEE signed zeros.
* a_0 = NaN: d must be NaN; its bits (narrowed from the float64 the op returns) give ``nan_bits``.
* a_0 = +Inf (d = +Inf), Inf * 0 (NaN), +Inf and -Inf products (NaN), c = -Inf with a finite
  product (-Inf): these follow the model's rules or the op does not fit.
* overflow: c = 2^emax(out) and a product 2^emax(out): the exact sum 2^(emax + 1) must give +Inf
  in every rounding mode (the model); a finite result means saturating overflow, which the
  profile cannot express. Not observable when no product reaches 2^emax(out) (fp16 inputs with
  fp32 output, fp8 inputs): the default (Inf) is used.
"""

from __future__ import annotations

import math

from ._common import Ctx, Finding, NotRepresentable, default_nan_bits
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
        out.append(Finding(FAMILY, "neg_zero_to_pos", pos, rows=1,
                           evidence=[ctx.evidence(row, d, "sum of -0 products and c = -0")],
                           note="a -0 sum is returned as +0" if pos else "a -0 sum stays -0 (IEEE)"))
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
    rows, meta = [], []
    for what, raw, c, want in cases:
        if c is None or (not ctx.fin.has_inf and any(math.isinf(x) for _, x, _ in raw)):
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
                           note=f"no product of two {ctx.fin.name} values reaches 2^{ctx.fout.emax}: "
                                f"overflow cannot be forced; default +-Inf in every mode"))
        return out
    d = float(ctx.run([row])[0])
    good = d == math.inf
    out.append(Finding(FAMILY, "overflow_to_inf", good, fits=good, rows=1,
                       evidence=[ctx.evidence(row, d, f"2^{ctx.fout.emax} + 2^{ctx.fout.emax}")],
                       note="an overflowing sum gives Inf (also under RZ)" if good else
                       f"an overflowing sum gave {d!r} (saturation): the profile cannot express it"))
    return out
