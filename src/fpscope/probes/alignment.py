"""Alignment rounding of the terms at the cut 2^(e_max - F), on the product path and separately
on the c path (NUMERICS.md section 3, probe 4).

Inputs (first block): a cancelling pair +2^E, -2^E, and a third term y * 2^(E - F) for
y in (+0.25, -0.25, +0.75, -0.75, +1.5, -1.5): as a product (product path), or as c with only
the pair among the products (c path). d / 2^(E - F) is then:

    y          0.25  -0.25  0.75  -0.75  1.5  -1.5
    truncate   0     0      0     0      1    -1     (magnitude toward zero: NVIDIA)
    floor      0     -1     0     -1     1    -2     (two's complement, toward -inf: AMD CDNA3)
    nearest    0     0      1     -1     2    -2     (ties to even)
    exact      y     y      y     y      y    y      (no cut: c path only, c added after the blocks)

Where y * 2^(E - F) is below every product of two normal inputs (fp8 with F above about 26:
e4m3 products of normals reach down to 2^-12 only), the product path takes y + n instead, n the
smallest integer of y's sign that makes the term such a product (0.25 -> 2.25 for e4m3 at
F = 28): truncation, floor and nearest still differ on its fraction, and the expected units are
those of y + n (:func:`expected`).

Outcomes: the product path gives ``alignment``. On the c path "exact" means c does not take part
in the fused block: it is added after the last block (``c_entry`` "last"); otherwise the c path
must cut as the product path does (the profile has one alignment), else the op does not fit.
The pair may lie above the output's range (it cancels): E is raised, up to the largest
product, until 0.25 * 2^(E - F) is a normal output value (fp8 with fp16 output).
Not observable: no y + n (|n| < 2^8) is a product of two normal inputs, or 2^(E - F) is below
the smallest normal output (product path), or 0.25 * 2^(E - F) is not an output value (c path; subnormal c only when each y * 2^(E - F)
alone, products +0, comes back unchanged: fp6/fp4 inputs with fp16 output); with F too large
for the formats the row is skipped.
"""

from __future__ import annotations

import math

import numpy as np

from ..formats import decode, is_representable
from ._common import Ctx, Finding, NotRepresentable

FAMILY = "alignment"

XS = (0.25, -0.25, 0.75, -0.75, 1.5, -1.5)
MODES = ("truncate", "floor", "nearest", "exact")


def expected(mode: str, y: float) -> float:
    """y * 2^(E - F) cut by ``mode``, in units of 2^(E - F) (nearest: ties to even)."""
    return {"truncate": float(math.trunc(y)), "floor": float(math.floor(y)),
            "nearest": float(round(y)), "exact": y}[mode]


def _classify(units, ys) -> str | None:
    for name in MODES:
        if all(u == expected(name, y) for u, y in zip(units, ys)):
            return name
    return None


def _product_term(ctx: Ctx, x: float, unit: float) -> tuple[float, tuple[float, float]]:
    """(y, (a, b)): y = x, or x + n (n the smallest integer of x's sign, |n| < 2^8) such that
    y * unit = a * b with a and b normal inputs (b a power of two where one fits; for inputs
    of at most 8 bits any normal b, e.g. e4m3 81 * 2^-16 = (1.125 * 2^-5)^2).

    Raises:
        NotRepresentable: no such n.
    """
    small = ctx.fin.bits <= 8 and ctx.fb.bits <= 8
    bs = _normal_values(ctx.fb) if small else np.empty(0)
    for n in range(256):
        y = math.copysign(abs(x) + n, x)
        v = y * unit
        try:
            return y, ctx.split(v)
        except NotRepresentable:
            pass
        if small and v != 0:
            a = v / bs
            ok = (np.abs(a) >= ctx.fin.min_normal) & (np.abs(a) <= ctx.fin.max_finite)
            ok &= is_representable(a, ctx.fin) & (a * bs == v)
            if ok.any():
                i = int(np.flatnonzero(ok)[0])
                return y, (float(a[i]), float(bs[i]))
    raise NotRepresentable(f"no {x} + n with |n| < 256 makes {x} * 2^(E-F) = {x * unit!r} a "
                           f"product of {ctx.operands} normal values")


def _normal_values(fmt) -> np.ndarray:
    """Every positive normal finite value of ``fmt`` (a format of at most 8 bits), ascending."""
    v = decode(np.arange(1 << (fmt.bits - 1)), fmt)
    return np.sort(v[np.isfinite(v) & (v >= fmt.min_normal)])


def _path(ctx: Ctx, path: str):
    blk = ctx.first_block
    F = ctx.known["frac_bits"]
    E = ctx.big_exponent()
    # the pair may lie above the output's range (it cancels): raise E until 0.25 * 2^(E - F)
    # is a normal output value, where products reach (the product path's outputs, multiples
    # of 2^(E - F), must be normal, its terms y + n need not be; the c path's c = y * 2^(E - F)
    # must be an output value, normal unless it comes back alone)
    E = max(E, min(F + ctx.fout.emin + 2, ctx.fin.emax + ctx.fb.emax))
    unit = math.ldexp(1.0, E - F)
    big = math.ldexp(1.0, E)
    need = 3 if path == "product" else 2
    if len(blk) < need:
        return None, [], None, f"blocks of {len(blk)} product(s): no room for the {path}-path probe"
    floor = max(ctx.fout.min_normal, 0.0)
    sub_c = False
    if path == "product" and unit < floor:  # every output is a multiple of the unit
        return None, [], None, (f"not observable with these formats (2^(E-F) is below the "
                                f"smallest normal {ctx.fout.name} value)")
    if path == "c" and 0.25 * unit < floor:
        # the c path may take subnormal c values (fp6/fp4 inputs beside an fp16 output) when
        # c alone comes back unchanged (not flushed); the product path never does
        sub_c = path == "c" and 0.25 * unit >= ctx.fout.min_subnormal
        if not sub_c:
            return None, [], None, (f"not observable with these formats (0.25 * 2^(E-F) is below "
                                    f"the smallest normal {ctx.fout.name} value)")
    rows = []
    ys = list(XS)
    try:
        for i, x in enumerate(XS):
            if path == "product":
                ys[i], (ta, tb) = _product_term(ctx, x, unit)
                rows.append(ctx.row([(blk[0], big), (blk[1], -big)], raw=[(blk[2], ta, tb)]))
            else:
                rows.append(ctx.row([(blk[0], big), (blk[1], -big)], c=x * unit))
        if sub_c:
            ctrl = [ctx.row([], c=x * unit) for x in XS]
    except NotRepresentable as exc:
        return None, [], None, f"not observable with these formats ({exc})"
    if sub_c:
        dc = ctx.run(ctrl)
        if not all(float(v) == r[2] for v, r in zip(dc, ctrl)):
            return None, [], None, (f"not observable with these formats (subnormal {ctx.fout.name} "
                                    f"values x * 2^(E-F) do not come back unchanged alone)")
    d = ctx.run(rows)
    units = [float(v / unit) for v in d]
    ev = [ctx.evidence(r, float(v), f"2^{E} - 2^{E} + {y} * 2^(E-F) on the {path} path")
          for r, v, y in zip(rows, d, ys)]
    return _classify(units, ys), ev, units, ""


def run(ctx: Ctx) -> list[Finding]:
    if "frac_bits" not in ctx.known or ctx.known.get("frac_bits_at_least"):
        note = "F not bounded by the probes: alignment not observable; default truncate"
        ctx.known.setdefault("alignment", "truncate")
        out = [Finding(FAMILY, "alignment", "truncate", observable=False, note=note)]
        if "c_entry_hint" not in ctx.known:
            out.append(Finding(FAMILY, "c_entry", "first", observable=False,
                               note="one block and no observable cut: default first"))
        ctx.known.setdefault("c_entry", ctx.known.get("c_entry_hint", "first"))
        return out
    out = []
    pmode, pev, punits, pwhy = _path(ctx, "product")
    cmode, cev, cunits, cwhy = _path(ctx, "c")
    if pmode is None and punits is not None:
        out.append(Finding(FAMILY, "alignment", None, fits=False, evidence=pev, rows=6,
                           note=f"product path: units {punits} match no alignment rule: does not fit"))
        return out
    if cmode is None and cunits is not None:
        out.append(Finding(FAMILY, "c_alignment", None, fits=False, evidence=cev, rows=6,
                           note=f"c path: units {cunits} match no alignment rule: does not fit"))
        return out
    if pmode == "exact":
        out.append(Finding(FAMILY, "alignment", None, fits=False, evidence=pev, rows=6,
                           note="product path not cut although F was: inconsistent"))
        return out
    hint = ctx.known.get("c_entry_hint")
    if cmode == "exact":
        c_entry = "last"
    elif cmode is not None:
        c_entry = "first"
    else:
        c_entry = hint or "first"
    if hint is not None and cmode is not None and hint != c_entry:
        out.append(Finding(FAMILY, "c_entry", None, fits=False, evidence=cev, rows=6,
                           note=f"the structure probe says c enters {hint}, the c path says "
                                f"{c_entry}: does not fit"))
        return out
    mode = pmode or (cmode if cmode not in (None, "exact") else None)
    if mode is None:
        mode = "truncate"
        out.append(Finding(FAMILY, "alignment", mode, observable=False,
                           note=f"{pwhy}; {cwhy or 'c path exact'}; default truncate"))
    else:
        src = "product path" if pmode else "c path"
        out.append(Finding(FAMILY, "alignment", mode, evidence=pev or cev, rows=6,
                           note=f"terms below 2^(e_max-F) are cut by {mode} ({src})"))
    if pmode and cmode not in (None, "exact") and cmode != pmode:
        out.append(Finding(FAMILY, "c_alignment", cmode, fits=False, evidence=cev, rows=6,
                           note=f"c path cut by {cmode}, products by {pmode}: the profile has one "
                                f"alignment: does not fit"))
        return out
    what = {"exact": "c is not cut: it is added after the last block in one more rounding",
            None: f"c path {cwhy}"}.get(cmode, f"c is cut like the products ({cmode}): c joins "
                                                f"the first block")
    out.append(Finding(FAMILY, "c_entry", c_entry, evidence=cev, rows=6 if cev else 0,
                       observable=cmode is not None or hint is not None, note=what))
    ctx.known.update(alignment=mode, c_entry=c_entry)
    return out
