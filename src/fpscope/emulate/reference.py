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
   +-Inf even under RZ, -0 becomes +0 (``neg_zero_to_pos``), NaN is canonical.

``k / block_size`` blocks chain: the rounded result of one block is the c of the next.
``profile.k_order`` permutes the products first; with ``profile.c_entry == "last"`` the first
block starts from +0 and c is added after the last block in one more rounding ``rho(d + c)``.
"""

from __future__ import annotations

import math

import numpy as np

from ..formats import Format, round_to_format
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


def _special(prods, c: float):
    """NaN / +-Inf result of a block with non-finite operands, or None if all are finite."""
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
    if not infs:
        return None
    if any(v > 0 for v in infs) and any(v < 0 for v in infs):
        return math.nan  # Inf - Inf
    return infs[0]


def fdpa_block(a, b, c: float, profile: Profile, c_format: str | None = None) -> float:
    """One fused step: ``rho(sum_i a_i * b_i + c)`` over one block (any length).

    ``c_format``: the format c is decoded in (its subnormal exponent); default the profile's
    out_format (chained steps pass the step format: c is then the previous step's result).
    """
    rounding = profile.step_rounding
    fa, fb = (resolve_format(f) for f in profile.operand_formats)
    fc = resolve_format(c_format or profile.out_format)
    prods = list(zip(a, b))
    special = _special(prods, c)
    if special is not None:
        return special if not math.isnan(special) else math.nan
    terms = []  # (sign, integer significand, weight exponent of its last bit, leading exponent)
    for x, y in prods:
        sx, nx, ex = _decode(x, fa, profile.flush_inputs)
        sy, ny, ey = _decode(y, fb, profile.flush_inputs)
        if nx == 0 or ny == 0:
            terms.append((sx * sy, 0, 0, profile.e_zero))
        else:
            terms.append((sx * sy, nx * ny, ex + ey - (fa.p - 1) - (fb.p - 1), ex + ey))
    sc, nc, ec = _decode(c, fc, profile.flush_inputs)
    terms.append((sc, nc, 0, profile.e_zero) if nc == 0 else (sc, nc, ec - (fc.p - 1), ec))
    exps = [t[3] for t in terms if t[3] is not None]
    if not exps:
        return 0.0 if profile.neg_zero_to_pos else _rho(math.copysign(0.0, c), rounding, profile)
    lsb = max(exps) - profile.frac_bits
    total = sum(_cut(n, w - lsb, s, profile.alignment) for s, n, w, _ in terms if n)
    if total == 0:
        # an exact zero sum: +0 under the NVIDIA rule; otherwise IEEE's sign rules in RNE/RZ
        signs = {s for s, n, _, _ in terms}
        neg = signs == {-1}
        return _rho(-0.0 if neg else 0.0, rounding, profile)
    return _rho(_to_float_odd(total, lsb), rounding, profile)


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
    """``rho(x + c)`` with step_rounding, exact (x: a step result, c: an out_format value)."""
    special = _special([], c) if not (math.isnan(x) or math.isinf(x)) else (
        math.nan if math.isnan(c) or (math.isinf(c) and c != x) else x)
    if special is not None:
        return special
    if x == 0 and c == 0:
        neg = math.copysign(1.0, x) < 0 and math.copysign(1.0, c) < 0
        return _rho(-0.0 if neg else 0.0, profile.step_rounding, profile)
    fx = resolve_format(profile.step_rounding[0])
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
        return _rho(0.0, profile.step_rounding, profile)
    return _rho(math.ldexp(total, lsb - 1), profile.step_rounding, profile)


def _operand(x: float, profile: Profile, fmt: str) -> float:
    if profile.operand_conversion is None:
        return x
    mode = "RZ" if profile.operand_conversion == "truncate" else "RNA"
    return float(round_to_format(np.float64(x), resolve_format(fmt), mode))


def fdpa(a, b, c: float, profile: Profile) -> float:
    """``d`` of one instruction: ``k / block_size`` chained fused steps over a, b (length k).

    Args:
        a, b: sequences of k float64 values, exactly representable in ``profile.in_format``
            (b: in ``profile.b_format`` where set; for a tf32 profile, fp32 values are first
            reduced per ``operand_conversion``).
        c: the accumulator input, a value of ``profile.out_format``.

    Returns:
        the float64 value of d (a value of the output format, NaN canonical as float NaN).
    """
    fa, fb = profile.operand_formats
    a = [_operand(float(x), profile, fa) for x in a]
    b = [_operand(float(x), profile, fb) for x in b]
    if len(a) != profile.k or len(b) != profile.k:
        raise ValueError(f"{profile.name} takes k = {profile.k} products, got {len(a)}, {len(b)}")
    if profile.k_order is not None:
        a = [a[j] for j in profile.k_order]
        b = [b[j] for j in profile.k_order]
    L = profile.block_size
    c_last = profile.c_entry == "last"
    d = 0.0 if c_last else float(c)
    for s in range(profile.stages):
        c_format = None if s == 0 else profile.step_rounding[0]
        d = fdpa_block(a[s * L:(s + 1) * L], b[s * L:(s + 1) * L], d, profile, c_format)
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
