"""The reference engine: one matrix-unit instruction evaluated exactly (NUMERICS.md section 2).

Slow and plain on purpose: Python integers for every significand, one instruction at a time.
It is the oracle the fast engines are checked against.

Steps of one fused block (``d = rho(sum_i a_i * b_i + c)``):

1. decode each operand to (sign, integer significand, exponent) in its format (a in
   ``profile.in_format``, b in ``profile.b_format`` where set); subnormals keep ``e = emin``
   with a significand below 1;
2. each product is exact, significand ``s_a * s_b`` in [0, 4), exponent ``e_a + e_b``, not
   renormalised;
3. a zero term (product or c) takes exponent ``profile.e_zero`` (None: left out of the max);
4. ``e_max`` = the largest exponent over the products and c (c's significand is in [1, 2));
5. every term is cut at weight ``2^(e_max - F)`` (``profile.alignment``);
6. the cut terms are summed exactly;
7. rho = :func:`fpscope.formats.round_to_format` to ``profile.step_rounding``; overflow gives
   +-Inf even under RZ, -0 becomes +0 (``neg_zero_to_pos``), NaN is canonical; an exact zero
   sum is -0 only where every term is -0 (+0 always under ``zero_sum_sign`` "positive").

``k / block_size`` blocks chain: the rounded result of one block is the c of the next.
``profile.k_order`` permutes the products first; with ``profile.c_entry == "last"`` the first
block starts from +0 and c is added after the last block in one more rounding ``rho(d + c)``.

Block scales (``profile.scale_format``; Blackwell MX / NVFP4, mmasim ``st_fdpa``): each
product's scales (one of A's row, one of B's column, per ``scale_block_size`` elements of K) are
decoded like operands and multiply it exactly: significand ``s_a * s_b * s_sa * s_sb``,
exponent ``e_a + e_b + e_sa + e_sb``; the rest of the fused step is unchanged. A NaN scale makes
the block NaN; an Inf operand times a zero scale is NaN (Inf * 0).

The other node kinds (``profile.node``; :class:`fpscope.profile.Profile` gives their sources):

* "pairwise" (AMD CDNA2, :func:`pairwise_block`): IEEE 754 arithmetic on values, each product
  and each addition computed exactly (``fractions.Fraction``) and rounded once by rho, in a
  balanced tree over the block, then c + tree;
* "two-stage" (AMD CDNA3, :func:`two_stage_block`): the products' fused sum (per interleaved
  group, then the groups), then that sum and c aligned and added, then one more cut and rho;
  every step on Python integers as above;
* "grouped" (NVFP4 / MXFP4 ``kind::mxf4*``, :func:`grouped_block`): exact sums of contiguous
  groups of products, each aligned at its block scale's exponent, then the fused step's cut,
  sum and rho.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from ..formats import Format, is_representable, round_to_format
from ..profile import Profile, resolve_format


def _decode(x: float, fmt: Format, flush: bool):
    """(sign, integer significand S, exponent e) with ``|x| = S * 2^(e - (p - 1))``.

    ``e`` is the exponent of the leading bit position (``emin`` for subnormals, S < 2^(p-1)).
    A zero gives S = 0 (and e = None).
    """
    sign = -1 if math.copysign(1.0, x) < 0 else 1
    if x == 0:
        return sign, 0, None
    m, e2 = math.frexp(abs(x))  # |x| = m * 2^e2, m in [0.5, 1)
    e = max(e2 - 1, fmt.emin)
    if e == fmt.emin and e2 - 1 < fmt.emin and flush:
        return sign, 0, None
    s = math.ldexp(abs(x), fmt.p - 1 - e)
    if s != int(s):
        raise ValueError(f"{x!r} is not representable in {fmt.name}")
    return sign, int(s), e


def _cut(n: int, shift: int, sign: int, alignment: str) -> int:
    """Signed ``sign * n * 2^shift`` cut to an integer (shift < 0 drops bits)."""
    if shift >= 0:
        return sign * (n << shift)
    d = -shift
    if alignment == "truncate":
        return sign * (n >> d)
    if alignment == "floor":
        return (sign * n) >> d  # Python's >> floors
    q, r = divmod(n, 1 << d)  # nearest, ties to even, on the magnitude
    half = 1 << (d - 1)
    if r > half or (r == half and q & 1):
        q += 1
    return sign * q


def _rho(x: float, rounding: tuple, profile: Profile) -> float:
    fmt = resolve_format(rounding[0])
    if abs(x) >= math.ldexp(1.0, fmt.emax + 1):
        return math.copysign(math.inf, x)  # overflow is +-Inf in every mode, RZ included
    r = float(round_to_format(np.float64(x), fmt, rounding[1], overflow="inf",
                              flush_subnormals=profile.flush_outputs))
    if r == 0 and profile.neg_zero_to_pos:
        r = 0.0
    return r


def _overflow_threshold(profile: Profile) -> float | None:
    """``2^(emax + 1)`` of ``profile.product_overflow`` (None: products never overflow)."""
    if profile.product_overflow is None:
        return None
    return math.ldexp(1.0, resolve_format(profile.product_overflow).emax + 1)


def _special(prods, c: float, overflow: float | None = None):
    """NaN / +-Inf result of a block with non-finite operands, or None if all are finite.

    ``overflow``: a finite product of at least this magnitude counts as an Inf of its sign
    (``profile.product_overflow``).
    """
    infs = []
    if math.isnan(c):
        return math.nan
    if math.isinf(c):
        infs.append(c)
    for x, y in prods:
        if math.isnan(x) or math.isnan(y):
            return math.nan
        if math.isinf(x) or math.isinf(y):
            if x == 0 or y == 0:
                return math.nan  # Inf * 0
            infs.append(math.copysign(math.inf, x) * math.copysign(1.0, y))
        elif overflow is not None and abs(Fraction(x) * Fraction(y)) >= overflow:
            infs.append(math.copysign(math.inf, x) * math.copysign(1.0, y))
    if not infs:
        return None
    if any(v > 0 for v in infs) and any(v < 0 for v in infs):
        return math.nan  # Inf - Inf
    return infs[0]


def _scaled_products(a, b, scales):
    """(x * sa, y * sb) per product, for :func:`_special` only: NaN scales and Inf * 0 scale
    give NaN, other scales keep the operand's sign, zero-ness and finiteness (the products'
    magnitudes are exact: the float64 products of an operand and a scale have at most 28 bits
    and lie far inside float64's range)."""
    if scales is None:
        return list(zip(a, b))
    return [(x * sa, y * sb) for x, y, (sa, sb) in zip(a, b, scales)]


def fdpa_block(a, b, c: float, profile: Profile, c_format: str | None = None,
               chained: bool | None = None, scales=None) -> float:
    """One step of the profile's node (``profile.node``) over one block (any length).

    Fused node: ``rho(sum_i a_i * b_i + c)``; "pairwise": :func:`pairwise_block`;
    "two-stage": :func:`two_stage_block`; "grouped": :func:`grouped_block`.

    ``c_format``: the format c is decoded in (its subnormal exponent); default the profile's
    out_format (chained steps pass the step format: c is then the previous step's result).
    ``chained``: c is a previous step's result, not the instruction's c (``input_zero_sign``
    and the pairwise node's input flush apply to the instruction's c only); default: whether
    ``c_format`` is given.
    ``scales``: for a block-scaled profile, one ``(scale of a, scale of b)`` pair of
    ``profile.scale_format`` values per product (module docstring); None otherwise.
    """
    if chained is None:
        chained = c_format is not None
    if profile.node == "pairwise":
        return pairwise_block(a, b, c, profile, c_format, chained)
    if profile.node == "two-stage":
        return two_stage_block(a, b, c, profile, c_format)
    if profile.node == "grouped":
        return grouped_block(a, b, c, profile, scales, c_format, chained)
    fa, fb = (resolve_format(f) for f in profile.operand_formats)
    special = _special(_scaled_products(a, b, scales), c, _overflow_threshold(profile))
    if special is not None:
        return special if not math.isnan(special) else math.nan
    fs = resolve_format(profile.scale_format) if scales is not None else None
    positive = profile.input_zero_sign == "positive"  # zero operands read as +0
    terms = []  # (sign, integer significand, weight exponent of its last bit, leading exponent)
    for j, (x, y) in enumerate(zip(a, b)):
        sx, nx, ex = _decode(x, fa, profile.flush_inputs)
        sy, ny, ey = _decode(y, fb, profile.flush_inputs)
        if positive:
            sx, sy = (1 if nx == 0 else sx), (1 if ny == 0 else sy)
        n, e, frac = nx * ny, (ex or 0) + (ey or 0), (fa.p - 1) + (fb.p - 1)
        if fs is not None:  # the two scales multiply the product (mmasim st_fdpa)
            _, nsa, esa = _decode(scales[j][0], fs, False)
            _, nsb, esb = _decode(scales[j][1], fs, False)
            n, e, frac = n * nsa * nsb, e + (esa or 0) + (esb or 0), frac + 2 * (fs.p - 1)
        terms.append((sx * sy, 0, 0, profile.e_zero) if n == 0 else
                     (sx * sy, n, e - frac, e))
    return _window_sum(terms, c, fc=resolve_format(c_format or profile.out_format),
                       profile=profile, chained=chained)


def _window_sum(terms, c: float, fc: Format, profile: Profile, chained: bool) -> float:
    """The fused step's end: c joins ``terms`` ((sign, integer significand, weight of its last
    bit, leading exponent or None) per product or group), every term is cut at ``2^(e_max -
    F)``, the cut terms are summed exactly and rounded by rho (module docstring)."""
    rounding = profile.step_rounding
    sc, nc, ec = _decode(c, fc, profile.flush_inputs)
    if profile.input_zero_sign == "positive" and nc == 0 and not chained:
        sc = 1
    terms = [*terms, (sc, nc, 0, profile.e_zero) if nc == 0 else (sc, nc, ec - (fc.p - 1), ec)]
    exps = [t[3] for t in terms if t[3] is not None]
    lsb = max(exps, default=0) - profile.frac_bits  # no exponent: every term is zero
    total = sum(_cut(n, w - lsb, s, profile.alignment) for s, n, w, _ in terms if n)
    if total == 0:
        # an exact zero sum (zero terms included, whatever e_zero): +0 under the NVIDIA rule
        # and zero_sum_sign "positive"; otherwise IEEE's sign rules in RNE/RZ
        neg = profile.negative_zero_sums and {s for s, n, _, _ in terms} == {-1}
        return _rho(-0.0 if neg else 0.0, rounding, profile)
    return _rho(_to_float_odd(total, lsb), rounding, profile)


def grouped_block(a, b, c: float, profile: Profile, scales, c_format: str | None = None,
                  chained: bool = False) -> float:
    """The "grouped" node over one block (NVFP4 / MXFP4; :class:`~fpscope.profile.Profile`).

    The products of each contiguous group of G = ``group_size`` are summed exactly to P (an
    integer in units of the smallest product weight ``2^(emin_a + emin_b - (p_a - 1) - (p_b -
    1))``); the group's term is ``P * S_sa * S_sb`` (the integer significands of its scales),
    with leading exponent ``e_sa + e_sb``, or ``e_zero`` when every product of the group or its
    scale is zero; then :func:`_window_sum` with c. ``scales``: one ``(scale of a, scale of
    b)`` pair per product (constant over a group). NaN / Inf as the fused node, on the scaled
    products. Source: mmasim 2.1.1 ``arithmetic/fdpa.py: gst_fdpa``.
    """
    fa, fb = (resolve_format(f) for f in profile.operand_formats)
    fs = resolve_format(profile.scale_format)
    special = _special(_scaled_products(a, b, scales), c, _overflow_threshold(profile))
    if special is not None:
        return special
    positive = profile.input_zero_sign == "positive"
    G = profile.group_size
    pfrac = (fa.p - 1) + (fb.p - 1)
    terms = []
    for g in range(0, len(a), G):
        P, allzero, negs = 0, True, set()
        for x, y in zip(a[g:g + G], b[g:g + G]):
            sx, nx, ex = _decode(x, fa, profile.flush_inputs)
            sy, ny, ey = _decode(y, fb, profile.flush_inputs)
            if positive:
                sx, sy = (1 if nx == 0 else sx), (1 if ny == 0 else sy)
            negs.add(sx * sy)
            if nx and ny:
                P += sx * sy * (nx * ny << (ex + ey - fa.emin - fb.emin))
                allzero = False
        _, nsa, esa = _decode(scales[g][0], fs, False)
        _, nsb, esb = _decode(scales[g][1], fs, False)
        sign = -1 if P < 0 or (P == 0 and negs == {-1}) else 1
        n = abs(P) * nsa * nsb
        w = fa.emin + fb.emin - pfrac + (esa or 0) + (esb or 0) - 2 * (fs.p - 1)
        lead = profile.e_zero if allzero or nsa * nsb == 0 else esa + esb
        terms.append((sign, n, w, lead))
    return _window_sum(terms, c, fc=resolve_format(c_format or profile.out_format),
                       profile=profile, chained=chained)


def _sign(t: int) -> int:
    return -1 if t < 0 else 1


def _odd(q: Fraction) -> float:
    """A dyadic rational (a sum or product of floats) as a float64 rounded to odd."""
    return _to_float_odd(q.numerator, 1 - q.denominator.bit_length())


def pairwise_block(a, b, c: float, profile: Profile, c_format: str | None = None,
                   chained: bool = False) -> float:
    """The "pairwise" node over one block: ``rho(c + tree)`` (AMD CDNA2).

    Each product ``a_i * b_i`` is rounded by rho (``step_rounding``, subnormal results
    flushed to a zero of their sign under ``flush_outputs``); the L products are added in a
    balanced tree of adjacent pairs, every addition rounded by rho; then c is added, rounded by
    rho. Inputs below their format's smallest normal are read as zeros under ``flush_inputs``
    (a, b, and c unless ``chained``), and zeros as +0 under ``input_zero_sign="positive"``.
    Every operation is IEEE 754's on values: the exact result (``Fraction``) rounded once;
    Inf * 0 and Inf - Inf are NaN, an exact zero sum is -0 only for (-0) + (-0).
    Source: mmasim 2.1.1 ``arithmetic/ftz_mul_add.py: MMA_FTZ_MUL_ADD``.
    """
    rounding = profile.step_rounding
    fa, fb = (resolve_format(f) for f in profile.operand_formats)
    fc = resolve_format(c_format or profile.out_format)

    def read(x: float, fmt: Format) -> float:
        if profile.flush_inputs and abs(x) < fmt.min_normal:  # NaN compares False
            x = math.copysign(0.0, x)
        if x == 0 and profile.input_zero_sign == "positive":
            x = 0.0
        return x

    def mul(x: float, y: float) -> float:
        if not (math.isfinite(x) and math.isfinite(y)) or x == 0 or y == 0:
            return _rho(x * y, rounding, profile)  # IEEE specials and signed zeros, exact
        return _rho(_odd(Fraction(x) * Fraction(y)), rounding, profile)

    def add(x: float, y: float) -> float:
        if not (math.isfinite(x) and math.isfinite(y)):
            return _rho(x + y, rounding, profile)
        exact = Fraction(x) + Fraction(y)
        if exact == 0:
            return _rho(x + y, rounding, profile)  # an exact zero: IEEE's sign
        return _rho(_odd(exact), rounding, profile)

    level = [mul(read(x, fa), read(y, fb)) for x, y in zip(a, b)]
    while len(level) > 1:
        level = [add(level[i], level[i + 1]) for i in range(0, len(level), 2)]
    c = c if chained else read(c, fc)
    return add(c, level[0])


def two_stage_block(a, b, c: float, profile: Profile, c_format: str | None = None) -> float:
    """The "two-stage" node over one block (AMD CDNA3; :class:`~fpscope.profile.Profile`).

    F = ``frac_bits``, F2 = ``frac_bits2``, G = ``product_groups``. Stage 1: the nonzero
    products of each interleaved group (product j in group j mod G) are cut at ``2^(e_g - F)``
    (``alignment``) and summed; the group sums are cut at ``2^(e_dot - F)`` (``alignment2``) and
    added. Stage 2: with ``e2 = max(e_dot, e_c)`` (a zero c takes ``e_zero``), the dot is cut at
    ``2^(e2 - F2 - 1)`` and c at ``2^(e2 - F)`` (``alignment2``; c read as zero below
    ``2^(e2 - c_drop_bits)``), and they are added. Stage 3: the sum is cut to F2 fraction bits
    below its leading bit (at least the step format's emin). Then rho. An exact zero is +0.
    NaN / Inf as the fused node (:func:`_special`, ``product_overflow`` included).
    Source: mmasim 2.1.1 ``arithmetic/fdpa.py: tr_fdpa`` (G = 1), ``gtr_fdpa`` (G = 2).
    """
    rounding = profile.step_rounding
    fa, fb = (resolve_format(f) for f in profile.operand_formats)
    fc = resolve_format(c_format or profile.out_format)
    fs = resolve_format(rounding[0])
    F, F2, G = profile.frac_bits, profile.frac_bits2, profile.product_groups
    al, al2 = profile.alignment, profile.alignment2
    prods = list(zip(a, b))
    special = _special(prods, c, _overflow_threshold(profile))
    if special is not None:
        return special
    # stage 1: (sign, integer significand, weight of its last bit, leading exponent) per group
    groups = [[] for _ in range(G)]
    for j, (x, y) in enumerate(prods):
        sx, nx, ex = _decode(x, fa, profile.flush_inputs)
        sy, ny, ey = _decode(y, fb, profile.flush_inputs)
        if nx and ny:  # zero products join no maximum
            groups[j % G].append((sx * sy, nx * ny, ex + ey - (fa.p - 1) - (fb.p - 1), ex + ey))
    sums = []  # (group sum in units of 2^(e_g - F), e_g)
    for terms in groups:
        if terms:
            e_g = max(t[3] for t in terms)
            sums.append((sum(_cut(n, w - (e_g - F), s, al) for s, n, w, _ in terms), e_g))
    e_dot = max((e for _, e in sums), default=None)
    dot = sum(_cut(abs(t), e_g - e_dot, _sign(t), al2) for t, e_g in sums)  # 2^(e_dot - F)
    # stage 2: the dot and c aligned at e2
    sc, nc, ec = _decode(c, fc, profile.flush_inputs)
    e_c = ec if nc else profile.e_zero
    exps = [e for e in (e_dot, e_c) if e is not None]
    if not exps:
        return _rho(0.0, rounding, profile)
    e2 = max(exps)
    if nc and profile.c_drop_bits is not None and ec < e2 - profile.c_drop_bits:
        nc = 0
    lsb2 = e2 - F2 - 1
    total = 0
    if e_dot is not None:
        total += _cut(abs(dot), (e_dot - F) - lsb2, _sign(dot), al2)
    if nc:
        total += _cut(nc, ec - (fc.p - 1) - (e2 - F), sc, al2) << (F2 + 1 - F)
    if total == 0:
        return _rho(0.0, rounding, profile)
    # stage 3: F2 fraction bits below the sum's leading bit (not below the step format's emin)
    lsb3 = max(abs(total).bit_length() - 1 + lsb2, fs.emin) - F2
    total = _cut(abs(total), lsb2 - lsb3, _sign(total), al2)
    return _rho(_to_float_odd(total, lsb3), rounding, profile)


def _to_float_odd(total: int, lsb: int) -> float:
    """``total * 2^lsb`` as a float64, rounded to odd when it has more than 53 bits.

    Every preset's window keeps ``|total| < 2^53`` (exact). A lossless window (``frac_bits``
    wider than the formats' whole exponent range, e.g. AMD CDNA1's exact sums) can hold more
    bits; rounding to odd at 53 bits and then once more to a format of at most 51 bits gives
    the correctly rounded exact sum (Boldo and Melquiond, IEEE TC 2008; as
    :func:`fpscope.formats.sum_round_to_odd`).
    """
    shift = abs(total).bit_length() - 53
    if shift <= 0:
        return math.ldexp(total, lsb)
    q, r = divmod(abs(total), 1 << shift)
    q |= 1 if r else 0
    return math.copysign(math.ldexp(q, lsb + shift), total)


def _add(x: float, c: float, profile: Profile) -> float:
    """``rho(x + c)`` with step_rounding (its mode replaced by ``profile.c_rounding`` where set),
    exact (x: a step result, c: an out_format value)."""
    rounding = (profile.step_rounding if profile.c_rounding is None
                else (profile.step_rounding[0], profile.c_rounding))
    special = _special([], c) if not (math.isnan(x) or math.isinf(x)) else (
        math.nan if math.isnan(c) or (math.isinf(c) and c != x) else x)
    if special is not None:
        return special
    if x == 0 and c == 0:
        neg = math.copysign(1.0, x) < 0 and math.copysign(1.0, c) < 0
        return _rho(-0.0 if neg else 0.0, rounding, profile)
    fx = resolve_format(rounding[0])
    fc = resolve_format(profile.out_format)
    sx, nx, ex = _decode(x, fx, False)
    sc, nc, ec = _decode(c, fc, False)
    terms = [(s, n, e - (f.p - 1), e) for s, n, e, f in ((sx, nx, ex, fx), (sc, nc, ec, fc)) if n]
    # window of 50 bits below the larger term's leading bit, in units of half its last bit: the
    # larger term is exact there; a smaller term cut at the window keeps a half-unit sticky, so
    # the sum lies strictly between the same grid points as the exact one (exact rounding to any
    # format of <= 48 bits) and |total| < 2^53 (exact in float64)
    lsb = max(t[3] for t in terms) - 50
    total = 0
    for s, n, w, _ in terms:
        if w >= lsb:
            total += s * (n << (w - lsb + 1))
        else:
            q, r = divmod(n, 1 << (lsb - w))
            total += s * (2 * q + (1 if r else 0))
    if total == 0:
        return _rho(0.0, rounding, profile)
    return _rho(math.ldexp(total, lsb - 1), rounding, profile)


def _operand(x, profile: Profile, fmt: str) -> float:
    """One operand as the instruction reads it (a float, or a numpy float32 scalar).

    With ``profile.operand_conversion`` the operand is an fp32 value, converted to ``fmt``
    (:func:`fpscope.emulate.conversion.convert_scalar`): "truncate" reads a float32 operand's
    fp32 word without the dropped fraction bits (tf32, bf16; mmasim
    ``helper.truncate_fp32_to_tf32``), so a signalling NaN whose payload lies only in those bits
    reads as +-Inf; other operands (a float64 NaN is quiet) are rounded as values, toward zero
    or to nearest (ties away for "RNA", to even for "RNE").
    """
    if profile.operand_conversion is None:
        return float(x)
    from .conversion import convert_scalar

    return convert_scalar(x, resolve_format(fmt), profile.operand_conversion)


def _instruction_scales(scale_a, scale_b, profile: Profile):
    """One (scale of a, scale of b) pair per product of an instruction, or None; checked."""
    if profile.scale_format is None:
        if scale_a is not None or scale_b is not None:
            raise ValueError(f"{profile.name} has no block scales; scale_a and scale_b must be "
                             f"None")
        return None
    n = profile.k // profile.scale_block_size
    if scale_a is None or scale_b is None:
        raise ValueError(f"{profile.name} is block-scaled ({profile.scale_format} per "
                         f"{profile.scale_block_size} elements): give scale_a and scale_b, "
                         f"{n} scales each")
    fs = resolve_format(profile.scale_format)
    pairs = []
    for what, sv in (("scale_a", scale_a), ("scale_b", scale_b)):
        sv = [float(x) for x in sv]
        if len(sv) != n:
            raise ValueError(f"{profile.name} takes {n} scales in {what}, got {len(sv)}")
        for x in sv:
            if not bool(is_representable(np.float64(x), fs)):
                raise ValueError(f"{what} value {x!r} is not representable in {fs.name}")
        pairs.append(sv)
    sb = profile.scale_block_size
    return [(pairs[0][j // sb], pairs[1][j // sb]) for j in range(profile.k)]


def fdpa(a, b, c: float, profile: Profile, scale_a=None, scale_b=None) -> float:
    """``d`` of one instruction: ``k / block_size`` chained fused steps over a, b (length k).

    Args:
        a, b: sequences of k float64 values, exactly representable in ``profile.in_format``
            (b: in ``profile.b_format`` where set; for a tf32 profile, fp32 values are first
            reduced per ``operand_conversion``; float32 elements are read as fp32 words, see
            :func:`_operand`).
        c: the accumulator input, a value of ``profile.out_format``.
        scale_a, scale_b: block-scaled profiles only (``profile.scale_format``): sequences of
            ``k // profile.scale_block_size`` values of the scale format (NaN allowed), the
            scales of a's and b's blocks of ``scale_block_size`` elements, in order.

    Returns:
        the float64 value of d (a value of the output format, NaN canonical as float NaN).

    Raises:
        ValueError: wrong lengths, a value not representable in its format, scales missing for
            a block-scaled profile or given to another.
    """
    fa, fb = profile.operand_formats
    a = [_operand(x, profile, fa) for x in a]
    b = [_operand(x, profile, fb) for x in b]
    if len(a) != profile.k or len(b) != profile.k:
        raise ValueError(f"{profile.name} takes k = {profile.k} products, got {len(a)}, {len(b)}")
    scales = _instruction_scales(scale_a, scale_b, profile)
    if profile.k_order is not None:
        a = [a[j] for j in profile.k_order]
        b = [b[j] for j in profile.k_order]
        scales = scales and [scales[j] for j in profile.k_order]
    L = profile.block_size
    c_last = profile.c_entry == "last"
    d = 0.0 if c_last else float(c)
    for s in range(profile.stages):
        c_format = None if s == 0 else profile.step_rounding[0]
        d = fdpa_block(a[s * L:(s + 1) * L], b[s * L:(s + 1) * L], d, profile, c_format,
                       chained=s > 0, scales=scales and scales[s * L:(s + 1) * L])
    if c_last:
        d = _add(d, float(c), profile)
    if profile.output_rounding is not None:
        d = _rho(d, profile.output_rounding, profile)
    return d


def output_bits(d: float, profile: Profile) -> int:
    """Bit pattern of d in the output format (fp32 or fp16), NaN as ``profile.nan_bits``."""
    if math.isnan(d):
        return profile.nan_bits
    dtype = {"fp32": np.float32, "fp16": np.float16}[profile.out_format]
    uint = {"fp32": np.uint32, "fp16": np.uint16}[profile.out_format]
    return int(np.array(d, dtype=dtype).view(uint))
