"""The vectorised engine: the reference engine's arithmetic over many instructions at once.

Same steps, same results, bit for bit, as :mod:`fpscope.emulate.reference` (the oracle; see its
docstring and NUMERICS.md section 2), evaluated with numpy over a batch of instructions:

* operands are decoded with ``np.frexp`` / ``np.ldexp`` to (sign, integer significand S,
  exponent e of the leading bit position; subnormals keep ``e = emin``);
* products are exact int64 significands ``S_a * S_b`` (at most 2 * 11 bits here) with leading
  exponent ``e_a + e_b``, a decoded in ``profile.in_format`` and b in its own format
  (``profile.operand_formats``: mixed-input profiles); a zero term takes ``profile.e_zero`` in
  the max (None: left out);
* every term is cut at weight ``2^(e_max - F)`` with int64 shifts ("truncate": the magnitude
  toward zero; "floor": two's-complement floor; "nearest": ties to even on the magnitude);
* the cut terms are summed in int64; after alignment each term is an integer multiple of
  ``2^(e_max - F)`` of magnitude at most ``2^(e_max + 2)`` (c: ``2^(e_max + 1)``), so a block
  of L products plus c is an integer of at most ``F + 2 + log2(L + 1)`` bits. Where that is at
  most 53 bits (every preset; :func:`check_exact` refuses other profiles) the sum converts to
  float64 exactly, as the reference's ``math.ldexp(total, lsb)`` does;
* rho is :func:`fpscope.formats.round_to_format` with the reference's rules: +-Inf when
  ``|x| >= 2^(emax + 1)`` in every mode (RZ included), ``-0 -> +0`` (``neg_zero_to_pos``), an
  exact zero sum is -0 only when every term (zero terms included) is negative (never under
  ``zero_sum_sign`` "positive");
* NaN / Inf operands follow the reference's ``_special``: NaN if any operand is NaN, Inf * 0,
  or Infs of both signs meet (c included); otherwise the Inf.

``k / block_size`` blocks chain as in the reference: the rounded result of a block is the c of
the next, decoded in the step format (the first c in the output format);
``profile.output_rounding`` is applied after the last block.

The other node kinds (``profile.node``) follow the reference's :func:`~.reference.pairwise_block`
and :func:`~.reference.two_stage_block`:

* "pairwise" (AMD CDNA2): products ``a * b`` in float64 (exact: ``p_a + p_b <= 53``,
  :func:`check_exact`) rounded by rho; each addition is
  :func:`fpscope.formats.sum_round_to_odd` (the exact sum rounded to odd at float64) rounded by
  rho, which is the exact sum rounded once; NaN / Inf / signed zeros are float64's IEEE ones;
* "two-stage" (AMD CDNA3): the products' integer significands are cut per interleaved group
  (int64, as above), the group sums cut to the largest group maximum and added, the dot and c
  cut at ``e2`` and added (at most ``F2 + 4 + log2(L)`` bits, :func:`check_exact`), the sum cut
  to F2 fraction bits (exact in float64) and rounded by rho.

Block scales (``profile.scale_format``; the reference's module docstring): in the fused node
each operand is multiplied by its scale before the products are formed, as integers: ``S_a *
S_sa`` at exponent ``e_a + e_sa`` (e8m0 scales have a one-bit significand, ue4m3 ones four
bits), so a product carries ``(p_a - 1) + (p_b - 1) + 2 * (p_s - 1)`` fraction bits and its
significand is below 16 (4 with e8m0); the window condition becomes ``F + 2 + 2 * [p_s > 1] +
log2(L + 1) <= 53``. A NaN scale is a NaN operand for the specials (so is an Inf operand times a
zero scale). The "grouped" node (:func:`_grouped_block`) sums each group's products exactly in
int64 in units of the smallest product weight, multiplies the sum by the group's two scale
significands and cuts it at the window like a fused term whose leading exponent is the scales'.

:func:`matmul` runs a whole GEMM: the K loop walks k-chunks in order, each instruction's d is
the next instruction's c.
"""

from __future__ import annotations

import math

import numpy as np

from ..formats import FP32, Format, is_representable, round_to_format, sum_round_to_odd
from ..profile import Profile, resolve_format

__all__ = ["check_exact", "fdpa_batch", "gemm_prepared", "matmul", "prepare"]

_SENT = -(1 << 30)  # "no exponent" (a zero term when e_zero is None)
_MAX_SHIFT = 62  # right shifts past this give the same result on significands below 2^62


def check_exact(profile: Profile) -> None:
    """Raise ValueError unless a block's aligned sum fits float64 exactly, or is lossless.

    The condition is ``F + 2 + log2(L + 1) <= 53`` (module docstring; with ue4m3 block scales
    ``F + 4 + ...``), or ``profile.lossless`` (the window never cuts: the block is summed
    exactly by :func:`_exact_sum_odd`); one of the two holds for every fused preset.
    "pairwise" node: products and step-format sums exact in float64; "two-stage" node: ``F +
    3 + log2(L)`` and ``F2 + 4 + log2(L)`` at most 62 bits (int64) and ``F2 + 2`` at most 53
    (float64); "grouped" node: a cut group term below ``2^(F + emax_a + emax_b + 2 + log2(G)
    + 2)`` (fp4 with ue4m3 scales, F = 35: 2^47), L / G of them plus c within 53 bits, and a
    group's exact sum times its scale significands within int64.
    """
    fa, fb = _operand_formats(profile)
    if profile.node == "pairwise":
        fs = resolve_format(profile.step_rounding[0])
        if (fa.p + fb.p > 53 or fs.p > 51 or fa.emax + fb.emax + 2 > 1023
                or fa.emin - fa.p + fb.emin - fb.p < -1020):
            raise ValueError(f"{profile.name}: {fa.name} x {fb.name} products or {fs.name} sums "
                             f"are not exact in float64 (fpscope.emulate.reference.fdpa computes it, one dot product at a time)")
        return
    if profile.node == "two-stage":
        L, F, F2 = profile.block_size, profile.frac_bits, profile.frac_bits2
        if F + 3 + math.log2(L) > 62 or F2 + 4 + math.log2(L) > 62 or F2 + 2 > 53:
            raise ValueError(f"{profile.name}: F = {F}, F2 = {F2} with L = {L}: the two-stage "
                             f"sums do not fit int64 / float64 (fpscope.emulate.reference.fdpa computes it, one dot product at a time)")
        if fa.p + fb.p > 62:
            raise ValueError(f"{profile.name}: {fa.name} x {fb.name} products do not fit int64")
        return
    fs = resolve_format(profile.scale_format) if profile.scale_format else None
    sbits = 0 if fs is None else fs.p - 1  # fraction bits of one scale significand
    if profile.node == "grouped":
        # a group sum P < G * 2^(emax_a + emax_b + 2) times the scale significands (< 4) cut
        # at 2^(e_max - F) below its scales' exponent; L / G of them and c (< 2^(F + 1))
        G, L, F = profile.group_size, profile.block_size, profile.frac_bits
        top = fa.emax + fb.emax + 2 + math.log2(G) + (2 if sbits else 0)
        span = fa.emax + fb.emax + 2 + math.log2(G) - (fa.emin - fa.p + 1 + fb.emin - fb.p + 1)
        if F + top + math.log2(L // G + 1) > 53 or span + 2 * sbits > 62:
            raise ValueError(f"{profile.name}: the grouped node's sums of {fa.name} x {fb.name} "
                             f"products do not fit int64 / float64 (fpscope.emulate.reference.fdpa computes it, one dot product at a time)")
        return
    ib = 2 + (2 if sbits else 0)  # integer bits of a (scaled) product significand
    bits = profile.frac_bits + ib + math.log2(profile.block_size + 1)
    if bits > 53 and not profile.lossless:
        raise ValueError(
            f"{profile.name}: F + {ib} + log2(L + 1) = {bits:.2f} > 53 bits; the vectorised "
            f"engine cannot sum a block of {profile.block_size} terms exactly (use the reference "
            f"engine)")
    if fa.p + fb.p + 2 * sbits > 62:
        raise ValueError(f"{profile.name}: {fa.name} x {fb.name} products do not fit int64")


def _operand_formats(profile: Profile) -> tuple[Format, Format]:
    """The formats of a and b (:attr:`fpscope.profile.Profile.operand_formats`)."""
    fa = resolve_format(profile.in_format)
    return fa, (fa if profile.b_format is None else resolve_format(profile.b_format))


class _Dec:
    """Decoded operands: neg (sign bit), S (int64 significand), e (int64 leading exponent)."""

    __slots__ = ("S", "e", "neg", "raw")

    def __init__(self, raw, neg, S, e):
        self.raw, self.neg, self.S, self.e = raw, neg, S, e

    def __getitem__(self, idx):
        return _Dec(self.raw[idx], self.neg[idx], self.S[idx], self.e[idx])


def _decode(x: np.ndarray, fmt: Format, flush: bool) -> _Dec:
    """Vectorised ``reference._decode``; non-finite values decode as zero (handled apart).

    ``|x| = S * 2^(e - (p - 1))``, ``e = max(exponent, emin)``. x must be representable in
    ``fmt`` as far as precision goes (checked by the callers).
    """
    fin = np.isfinite(x)
    ax = np.where(fin, np.abs(x), 0.0)
    _, e2 = np.frexp(ax)
    e2 = e2.astype(np.int64) - 1
    e = np.maximum(e2, fmt.emin)
    S = np.ldexp(ax, (fmt.p - 1 - e)).astype(np.int64)
    if flush:
        S = np.where((ax != 0) & (e2 < fmt.emin), 0, S)
    return _Dec(x, np.signbit(x), S, e)


def _cut(n: np.ndarray, shift: np.ndarray, neg: np.ndarray, alignment: str) -> np.ndarray:
    """Signed ``(-1)^neg * n * 2^shift`` cut to an integer (vectorised ``reference._cut``)."""
    left = np.left_shift(n, np.clip(shift, 0, _MAX_SHIFT))
    d = np.clip(-shift, 0, _MAX_SHIFT)
    if alignment == "floor":
        signed = np.where(neg, -n, n)
        return np.where(shift >= 0, np.where(neg, -left, left), np.right_shift(signed, d))
    q = np.right_shift(n, d)
    if alignment == "nearest":
        dm = np.maximum(d, 1)
        r = n & (np.left_shift(np.int64(1), dm) - 1)
        half = np.left_shift(np.int64(1), dm - 1)
        up = (d > 0) & ((r > half) | ((r == half) & ((q & 1) == 1)))
        q = q + up
    mag = np.where(shift >= 0, left, q)
    return np.where(neg, -mag, mag)


def _rho(x: np.ndarray, rounding: tuple, profile: Profile) -> np.ndarray:
    """Vectorised ``reference._rho``."""
    fmt = resolve_format(rounding[0])
    with np.errstate(invalid="ignore"):
        big = np.abs(x) >= math.ldexp(1.0, fmt.emax + 1)
    r = round_to_format(np.where(big, 0.0, x), fmt, rounding[1], overflow="inf",
                        flush_subnormals=profile.flush_outputs)
    r = np.where(big, np.copysign(np.inf, x), r)
    if profile.neg_zero_to_pos:
        r = np.where(r == 0, 0.0, r)
    return r


def _overflow_threshold(profile: Profile) -> float | None:
    """``2^(emax + 1)`` of ``profile.product_overflow`` (None: products never overflow)."""
    if profile.product_overflow is None:
        return None
    return math.ldexp(1.0, resolve_format(profile.product_overflow).emax + 1)


def _specials(ar, br, c, overflow: float | None = None):
    """(nan mask, inf mask, inf value) of blocks with non-finite operands (reference._special).

    ``overflow``: finite products of at least this magnitude count as Infs of their sign
    (``a * b`` in float64 is exact to the comparison: operands of at most 26 bits).
    """
    pnan = np.isnan(ar) | np.isnan(br)
    ainf, binf = np.isinf(ar), np.isinf(br)
    pinf = ainf | binf
    if overflow is not None:
        with np.errstate(invalid="ignore", over="ignore"):
            pinf = pinf | (~pinf & (np.abs(ar * br) >= overflow))
    inf0 = (ainf & (br == 0)) | (binf & (ar == 0))
    pneg = np.signbit(ar) ^ np.signbit(br)
    pos = np.any(pinf & ~pneg, axis=-1) | (c == np.inf)
    neg = np.any(pinf & pneg, axis=-1) | (c == -np.inf)
    nan = np.isnan(c) | np.any(pnan | inf0, axis=-1) | (pos & neg)
    inf = ~nan & (pos | neg)
    return nan, inf, np.where(pos, np.inf, -np.inf)


def _two_sum(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Knuth's TwoSum: ``s = fl(x + y)`` and the exact error ``x + y - s``."""
    s = x + y
    bp = s - x
    return s, (x - (s - bp)) + (y - bp)


def _exact_sum_odd(terms: np.ndarray) -> np.ndarray:
    """The exact sum of float64 terms (..., n) rounded to odd at float64 (0 for a zero sum).

    VecSum passes (TwoSum from the bottom up, each error left in place; the exact sum never
    changes) are repeated until a pass changes nothing. At that fixed point every part is at
    most half a gap of the part above it, so the rest below the top part ``t`` is smaller than
    the gap next to ``t`` on its side and has the sign of the part just below ``t``: the exact
    sum lies strictly between ``t`` and that neighbour, and rounding to odd picks the odd one.
    Rounding the result once more to a format of at most 51 bits is the correctly rounded
    exact sum (:func:`fpscope.formats.sum_round_to_odd`). Terms must be finite and their sums
    far from float64 overflow (fp32 values and narrower products are).
    """
    p = list(np.moveaxis(np.asarray(terms, dtype=np.float64), -1, 0))
    n = len(p)
    if n == 1:
        return p[0] + 0.0
    for _ in range(4 * n + 64):
        changed = np.zeros(p[0].shape, dtype=bool)
        for j in range(n - 1):
            s, e = _two_sum(p[j + 1], p[j])
            changed |= (s != p[j + 1]) | (e != p[j])
            p[j + 1], p[j] = s, e
        if not changed.any():
            break
    else:  # pragma: no cover - VecSum passes reach a fixed point in a few passes
        raise RuntimeError("exact summation did not converge")
    top, below = p[-1], p[-2]
    fix = (below != 0) & ((top.view(np.int64) & 1) == 0)
    return np.where(fix, np.nextafter(top, np.where(below > 0, np.inf, -np.inf)), top)


def _positive_zeros(D: _Dec) -> np.ndarray:
    """D's sign bits with zero (and flushed) finite values read as +0 (input_zero_sign)."""
    return D.neg & ~((D.S == 0) & np.isfinite(D.raw))


def _block(A: _Dec, B: _Dec, c: np.ndarray, c_fmt: Format, profile: Profile, pbits: int,
           finite: bool, first: bool = True) -> np.ndarray:
    """One fused step over broadcastable decoded operands (..., L) and c (...).

    ``pbits``: fraction bits of a product significand ``S_a * S_b``, ``(p_a - 1) + (p_b - 1)``.
    ``first``: c is the instruction's c (not a chained step result). Under
    ``input_zero_sign="positive"`` the operands' zeros have been read as +0 already
    (:func:`_chain`, before any block scale is folded in).
    """
    n = A.S * B.S
    positive = profile.input_zero_sign == "positive"
    pneg = A.neg ^ B.neg
    pzero = n == 0
    ez = _SENT if profile.e_zero is None else profile.e_zero
    lead = A.e + B.e
    C = _decode(c, c_fmt, profile.flush_inputs)
    if positive and first:
        C.neg = _positive_zeros(C)
    allneg = np.all(pneg, axis=-1) & C.neg
    if not profile.negative_zero_sums:  # an exact zero sum is +0
        allneg = np.zeros_like(allneg)
    if profile.lossless:  # nothing is cut: the exact sum, rounded to odd, then rho
        pv = np.ldexp(n.astype(np.float64), lead - pbits)
        cv = np.ldexp(C.S.astype(np.float64), C.e - (c_fmt.p - 1))
        pv, cv = np.where(pneg, -pv, pv), np.where(C.neg, -cv, cv)
        pv, cv = np.broadcast_arrays(pv, cv[..., None])
        x = _exact_sum_odd(np.concatenate([pv, cv[..., :1]], axis=-1))
        x = np.where(x == 0, np.where(allneg, -0.0, 0.0), x)
        d = _rho(x, profile.step_rounding, profile)
    else:
        d = _window_sum(n, lead - pbits, np.where(pzero, ez, lead), pneg, C, c_fmt, profile,
                        allneg)
    return _apply_specials(d, A, B, c, profile, finite)


def _window_sum(n, w, plead, pneg, C: _Dec, c_fmt: Format, profile: Profile,
                allneg) -> np.ndarray:
    """The fused step's end, rounded: terms (..., T) of integer significand n, last-bit weight
    w, leading exponent plead (``e_zero`` or _SENT for zero terms) and sign pneg, and c, cut at
    ``2^(e_max - F)``, summed in int64 and rounded by rho; an exact zero sum is -0 where
    ``allneg``."""
    ez = _SENT if profile.e_zero is None else profile.e_zero
    clead = np.where(C.S == 0, ez, C.e)
    emax = np.maximum(plead.max(axis=-1), clead)
    lsb = emax - profile.frac_bits
    cshift = C.e - (c_fmt.p - 1) - lsb
    total = (_cut(n, w - lsb[..., None], pneg, profile.alignment).sum(axis=-1)
             + _cut(C.S, cshift, C.neg, profile.alignment))
    x = np.ldexp(total.astype(np.float64), np.maximum(lsb, -2000))
    x = np.where(total == 0, np.where(allneg, -0.0, 0.0), x)
    return _rho(x, profile.step_rounding, profile)


def _fold(D: _Dec, S: _Dec) -> _Dec:
    """Operands D multiplied by their block scales S (module docstring): integer significands
    and exponents add up; ``raw`` is the float64 product, exact (an operand's and a scale's
    significands have at most 28 bits together, far inside float64's range), whose NaN / Inf
    the specials read (a NaN scale, Inf times a zero scale: NaN)."""
    with np.errstate(invalid="ignore"):
        raw = D.raw * S.raw
    return _Dec(raw, D.neg, D.S * S.S, D.e + S.e)


def _grouped_block(A: _Dec, B: _Dec, SA: _Dec, SB: _Dec, c: np.ndarray, c_fmt: Format,
                   profile: Profile, first: bool) -> np.ndarray:
    """The "grouped" node over broadcastable decoded operands and their per-product scales
    (..., L) and c (...) (reference.grouped_block)."""
    fa, fb = _operand_formats(profile)
    fs = resolve_format(profile.scale_format)
    G = profile.group_size
    positive = profile.input_zero_sign == "positive"
    pneg = _positive_zeros(A) ^ _positive_zeros(B) if positive else A.neg ^ B.neg
    n = A.S * B.S
    shape = n.shape[:-1] + (n.shape[-1] // G, G)  # [..., g, j]: product g * G + j
    pneg = np.broadcast_to(pneg, n.shape).reshape(shape)
    shift = np.broadcast_to(A.e + B.e - (fa.emin + fb.emin), n.shape).reshape(shape)
    nz = n.reshape(shape)
    P = np.where(pneg, -nz, nz) << np.where(nz == 0, 0, shift)  # units of the smallest product
    P = P.sum(axis=-1)
    allzero = np.all(nz == 0, axis=-1)
    gneg = (P < 0) | ((P == 0) & np.all(pneg, axis=-1))
    sS = (SA.S * SB.S)[..., ::G]  # a group's scales: those of its first product
    se = (SA.e + SB.e)[..., ::G]
    ez = _SENT if profile.e_zero is None else profile.e_zero
    zero = allzero | (sS == 0)
    wmin = fa.emin + fb.emin - (fa.p - 1) - (fb.p - 1)
    C = _decode(c, c_fmt, profile.flush_inputs)
    if positive and first:
        C.neg = _positive_zeros(C)
    allneg = np.all(gneg, axis=-1) & C.neg
    d = _window_sum(np.abs(P) * sS, wmin + se - 2 * (fs.p - 1), np.where(zero, ez, se), gneg,
                    C, c_fmt, profile, allneg)
    return _apply_specials(d, _fold(A, SA), _fold(B, SB), c, profile, False)


def _apply_specials(d, A: _Dec, B: _Dec, c, profile: Profile, finite: bool) -> np.ndarray:
    """d with the NaN / Inf results of blocks with non-finite operands or overflowing
    products (``product_overflow``) put in."""
    overflow = _overflow_threshold(profile)
    if finite and overflow is None:
        return d
    nan, inf, infval = _specials(A.raw, B.raw, c, overflow)
    d = np.where(inf, infval, d)
    return np.where(nan, np.nan, d)


def _bit_length(n: np.ndarray) -> np.ndarray:
    """Bits of non-negative int64 values below 2^53 (0 for 0)."""
    return np.frexp(n.astype(np.float64))[1].astype(np.int64)


def _pairwise_block(A: _Dec, B: _Dec, c: np.ndarray, c_fmt: Format, profile: Profile,
                    first: bool) -> np.ndarray:
    """The "pairwise" node over broadcastable operands (..., L) and c (...)
    (reference.pairwise_block)."""
    rounding = profile.step_rounding
    fa, fb = _operand_formats(profile)

    def read(x, fmt):
        if profile.flush_inputs:
            with np.errstate(invalid="ignore"):
                x = np.where(np.abs(x) < fmt.min_normal, np.copysign(0.0, x), x)
        if profile.input_zero_sign == "positive":
            x = np.where(x == 0, 0.0, x)
        return x

    def rho_sum(x, y):
        return _rho(sum_round_to_odd(x, y), rounding, profile)

    with np.errstate(invalid="ignore", over="ignore"):
        level = _rho(read(A.raw, fa) * read(B.raw, fb), rounding, profile)  # exact products
        while level.shape[-1] > 1:
            level = rho_sum(level[..., 0::2], level[..., 1::2])
        return rho_sum(read(c, c_fmt) if first else c, level[..., 0])


def _two_stage_block(A: _Dec, B: _Dec, c: np.ndarray, c_fmt: Format, profile: Profile,
                     pbits: int, finite: bool) -> np.ndarray:
    """The "two-stage" node over broadcastable decoded operands (..., L) and c (...)
    (reference.two_stage_block)."""
    F, F2, G = profile.frac_bits, profile.frac_bits2, profile.product_groups
    al2 = profile.alignment2
    fs = resolve_format(profile.step_rounding[0])
    n = A.S * B.S
    full = n.shape
    shape = full[:-1] + (full[-1] // G, G)  # [..., i, g]: product i * G + g, in group g
    n = n.reshape(shape)
    pneg = np.broadcast_to(A.neg ^ B.neg, full).reshape(shape)
    lead = np.broadcast_to(A.e + B.e, full).reshape(shape)
    # stage 1: each group cut at 2^(e_g - F) and summed; the group sums cut at 2^(e_dot - F)
    e_g = np.where(n != 0, lead, _SENT).max(axis=-2)  # (..., G); _SENT: an empty group
    t = _cut(n, lead - pbits - (e_g[..., None, :] - F), pneg, profile.alignment).sum(axis=-2)
    e_dot = e_g.max(axis=-1)
    gshift = np.where(e_g > _SENT, e_g - e_dot[..., None], 0)
    dot = _cut(np.abs(t), gshift, t < 0, al2).sum(axis=-1)  # units of 2^(e_dot - F)
    # stage 2: the dot and c aligned at e2 = max(e_dot, e_c), units of 2^(e2 - F2 - 1)
    C = _decode(c, c_fmt, profile.flush_inputs)
    ez = _SENT if profile.e_zero is None else profile.e_zero
    e2 = np.maximum(e_dot, np.where(C.S == 0, ez, C.e))
    cS = C.S
    if profile.c_drop_bits is not None:
        cS = np.where(C.e < e2 - profile.c_drop_bits, 0, cS)
    lsb2 = e2 - F2 - 1
    dshift = np.where(e_dot > _SENT, e_dot - F - lsb2, 0)
    total = (_cut(np.abs(dot), dshift, dot < 0, al2)
             + np.left_shift(_cut(cS, C.e - (c_fmt.p - 1) - (e2 - F), C.neg, al2), F2 + 1 - F))
    # stage 3: F2 fraction bits below the leading bit, not below the step format's emin
    mag = np.abs(total)
    lsb3 = np.maximum(_bit_length(mag) - 1 + lsb2, fs.emin) - F2
    s3 = _cut(mag, lsb2 - lsb3, total < 0, al2)
    x = np.ldexp(s3.astype(np.float64), np.clip(lsb3, -2000, 2000))
    x = np.where(total == 0, 0.0, x)  # an exact zero (or nothing at all: e2 = _SENT) is +0
    d = _rho(x, profile.step_rounding, profile)
    return _apply_specials(d, A, B, c, profile, finite)


def _check_values(x: np.ndarray, fmt: Format, what: str, profile: Profile | None = None) -> None:
    ok = is_representable(x, fmt)
    if not ok.all():
        idx = tuple(int(i) for i in np.argwhere(~ok)[0])
        whose = ""
        if profile is not None and profile.b_format is not None and what in ("a", "b", "A", "B"):
            whose = (f", the format of operand {what.lower()} ({profile.name} takes a in "
                     f"{profile.in_format}, b in {profile.b_format})")
        raise ValueError(f"{what}[{', '.join(map(str, idx))}] = {float(x[idx])!r} is not exactly "
                         f"representable in {fmt.name}{whose} (values are never re-rounded)")


def _operands(x, profile: Profile, what: str, ndim: int) -> np.ndarray:
    """Validated float64 operands (with ``operand_conversion``: fp32 values converted to the
    input format, :func:`fpscope.emulate.conversion.convert`).

    ``what`` names the operand ("a", "A": ``profile.in_format``; "b", "B": b's format,
    ``profile.operand_formats[1]``).
    """
    raw = x
    with np.errstate(invalid="ignore"):  # a float32 signalling NaN becomes a quiet one
        x = np.asarray(x, dtype=np.float64)
    if x.ndim != ndim:
        raise ValueError(f"{what} must be {ndim}-dimensional, got shape {x.shape}")
    fin = _operand_formats(profile)[what.lower() == "b"]
    if profile.operand_conversion is None:
        try:
            _check_values(x, fin, what, profile)
        except ValueError as exc:
            from ..profile import CONVERTIBLE_FORMATS

            if fin.name not in CONVERTIBLE_FORMATS or not is_representable(x, FP32).all():
                raise
            raise ValueError(f"{exc}; operand_conversion 'RNA', 'RNE' or 'truncate' converts "
                             f"fp32 operands") from None
        return x
    _check_values(x, FP32, what)  # operands arrive in fp32 containers
    from .conversion import convert

    return convert(x, fin, profile.operand_conversion, raw)


def _scales(scale, profile: Profile, what: str, shape: tuple) -> np.ndarray:
    """Validated float64 block scales of ``shape`` (``what`` names them in errors), or None
    for a profile without block scales (which then takes none)."""
    if profile.scale_format is None:
        if scale is not None:
            raise ValueError(f"{profile.name} has no block scales (scale_format None); "
                             f"{what} must be None")
        return None
    if scale is None:
        raise ValueError(f"{profile.name} is block-scaled ({profile.scale_format} per "
                         f"{profile.scale_block_size} elements of K): give scale_a and scale_b")
    x = np.asarray(scale, dtype=np.float64)
    if x.shape != shape:
        raise ValueError(f"{what} must have shape {shape} (one {profile.scale_format} scale per "
                         f"{profile.scale_block_size} elements of K), got {x.shape}")
    _check_values(x, resolve_format(profile.scale_format), what)
    return x


def _per_product(scale: np.ndarray, block: int, axis: int) -> np.ndarray:
    """Block scales repeated to one per element of K along ``axis``."""
    return np.repeat(scale, block, axis=axis)


def _chain(A: _Dec, B: _Dec, c: np.ndarray, profile: Profile, finite: bool,
           SA: _Dec | None = None, SB: _Dec | None = None) -> np.ndarray:
    """One instruction (all its chained blocks); A, B decoded (..., k) broadcastable; SA, SB
    their decoded scales, one per element (block-scaled profiles), or None."""
    fa, fb = _operand_formats(profile)
    pbits = fa.p - 1 + fb.p - 1
    L = profile.block_size
    grouped = profile.node == "grouped"
    if profile.node == "fused" and profile.input_zero_sign == "positive":
        # zero operands read as +0 before a scale is folded in, as reference.fdpa reads them:
        # a zero scale leaves its products' signs as the operands give them
        A = _Dec(A.raw, _positive_zeros(A), A.S, A.e)
        B = _Dec(B.raw, _positive_zeros(B), B.S, B.e)
    if SA is not None and not grouped:  # the fused node: scales folded into the operands
        A, B = _fold(A, SA), _fold(B, SB)
        pbits += 2 * (resolve_format(profile.scale_format).p - 1)
        finite = finite and bool(np.isfinite(A.raw).all() and np.isfinite(B.raw).all())
    if profile.k_order is not None:  # the products in the order the blocks take them
        order = np.asarray(profile.k_order)
        A, B = A[(Ellipsis, order)], B[(Ellipsis, order)]
    c_last = profile.c_entry == "last"
    d = np.zeros_like(c) if c_last else c
    for s in range(profile.stages):
        c_fmt = resolve_format(profile.out_format if s == 0 else profile.step_rounding[0])
        sl = (Ellipsis, slice(s * L, (s + 1) * L))
        fin = finite and bool(np.isfinite(d).all())
        if profile.node == "pairwise":
            d = _pairwise_block(A[sl], B[sl], d, c_fmt, profile, s == 0)
        elif profile.node == "two-stage":
            d = _two_stage_block(A[sl], B[sl], d, c_fmt, profile, pbits, fin)
        elif grouped:
            d = _grouped_block(A[sl], B[sl], SA[sl], SB[sl], d, c_fmt, profile, s == 0)
        else:
            d = _block(A[sl], B[sl], d, c_fmt, profile, pbits, fin, s == 0)
    if c_last:  # c added to the blocks' result, one rounding (reference._add)
        mode = profile.c_rounding or profile.step_rounding[1]
        d = _rho(sum_round_to_odd(d, c), (profile.step_rounding[0], mode), profile)
    if profile.output_rounding is not None:
        d = _rho(d, profile.output_rounding, profile)
    return d


def fdpa_batch(a, b, c, profile: Profile, scale_a=None, scale_b=None) -> np.ndarray:
    """``d`` of a batch of instructions, bit-identical to :func:`reference.fdpa` per row.

    Args:
        a, b: arrays (batch, k) of float64 values exactly representable in
            ``profile.in_format`` (b: in ``profile.b_format`` where set; tf32 profiles: fp32
            values, reduced per ``profile.operand_conversion`` as the reference does).
            NaN/Inf/-0/subnormals allowed.
        c: array (batch,) of values of ``profile.out_format``.
        profile: the instruction's :class:`~fpscope.profile.Profile`.
        scale_a, scale_b: block-scaled profiles only: arrays (batch, k // scale_block_size) of
            values of ``profile.scale_format`` (NaN allowed), row i's scales of a and of b.

    Returns:
        float64 array (batch,) of d (values of the output format; NaN as float NaN).

    Raises:
        ValueError: bad shapes, a value not exactly representable (the first one is named),
            scales missing for a block-scaled profile or given to another, or a profile whose
            block sum does not fit float64 exactly (:func:`check_exact`).
    """
    check_exact(profile)
    a = _operands(a, profile, "a", 2)
    b = _operands(b, profile, "b", 2)
    c = np.asarray(c, dtype=np.float64)
    if a.shape != b.shape or a.shape[1] != profile.k:
        raise ValueError(f"{profile.name} takes a, b of shape (batch, k={profile.k}); "
                         f"got {a.shape} and {b.shape}")
    if c.shape != (a.shape[0],):
        raise ValueError(f"c must have shape ({a.shape[0]},), got {c.shape}")
    fout = resolve_format(profile.out_format)
    _check_values(c, fout, "c")
    fa, fb = _operand_formats(profile)
    finite = bool(np.isfinite(a).all() and np.isfinite(b).all() and np.isfinite(c).all())
    A = _decode(a, fa, profile.flush_inputs)
    B = _decode(b, fb, profile.flush_inputs)
    sbs = profile.scale_block_size
    shape = (a.shape[0], profile.k // sbs if sbs else 0)
    sa = _scales(scale_a, profile, "scale_a", shape)
    sb = _scales(scale_b, profile, "scale_b", shape)
    SA = SB = None
    if sa is not None:
        fs = resolve_format(profile.scale_format)
        SA = _decode(_per_product(sa, sbs, 1), fs, False)
        SB = _decode(_per_product(sb, sbs, 1), fs, False)
    return _chain(A, B, c, profile, finite, SA, SB)


def prepare(A, B, C, profile: Profile | None, pad: bool = False, scale_a=None, scale_b=None):
    """Validated float64 operands of a GEMM: ``(A, B, C, scales)`` with K a multiple of
    ``profile.k``.

    Checks and conversions shared by every GEMM engine (see :func:`matmul` for the arguments):
    A (M, K), B (K, N) values of the input formats (A: ``in_format``, B: ``b_format`` where set;
    tf32 profiles: fp32 values reduced per ``operand_conversion``), C (M, N) values of the
    output format or None (zeros); with ``pad=True`` a K that is not a multiple of
    ``profile.k`` is padded with zero products. ``scales``: None, or for a block-scaled profile
    ``(SA, SB)``, float64 arrays (M, K // scale_block_size) and (K // scale_block_size, N) of
    the scale format (padded with scale 1: a zero product is a zero term whatever its scale).

    Raises:
        ValueError: no profile, bad shapes, values not exactly representable (the first is
            named), K not a multiple of k without ``pad``, K = 0; scales missing for a
            block-scaled profile or given to another, of the wrong shape (K must then be a
            multiple of ``scale_block_size``), or not values of the scale format.
    """
    if profile is None:
        raise ValueError("matmul needs a profile")
    check_exact(profile)
    A = _operands(A, profile, "A", 2)
    B = _operands(B, profile, "B", 2)
    M, K = A.shape
    if B.shape[0] != K:
        raise ValueError(f"inner dimensions differ: A is {A.shape}, B is {B.shape}")
    N = B.shape[1]
    k = profile.k
    if C is None:
        C = np.zeros((M, N))
    else:
        C = np.asarray(C, dtype=np.float64)
        if C.shape != (M, N):
            raise ValueError(f"C must have shape ({M}, {N}), got {C.shape}")
        _check_values(C, resolve_format(profile.out_format), "C")
    sbs = profile.scale_block_size
    if sbs is not None and K % sbs:
        raise ValueError(f"K = {K} is not a multiple of {profile.name}'s scale block size "
                         f"{sbs}: the scales cover whole blocks of K")
    nb = K // sbs if sbs else 0
    SA = _scales(scale_a, profile, "scale_a", (M, nb))
    SB = _scales(scale_b, profile, "scale_b", (nb, N))
    scales = None if SA is None else (SA, SB)
    if K % k:
        if not pad:
            raise ValueError(f"K = {K} is not a multiple of {profile.name}'s k = {k}; pad the "
                             f"operands yourself or pass pad=True (zero products at the end; "
                             f"not neutral in general, see matmul's docstring)")
        extra = k - K % k
        A = np.concatenate([A, np.zeros((M, extra))], axis=1)
        B = np.concatenate([B, np.zeros((extra, N))], axis=0)
        if scales is not None:
            more = extra // profile.scale_block_size
            scales = (np.concatenate([scales[0], np.ones((M, more))], axis=1),
                      np.concatenate([scales[1], np.ones((more, N))], axis=0))
        K += extra
    if K == 0:
        raise ValueError("K must be positive")
    return A, B, C, scales


def matmul(A, B, C=None, profile: Profile | None = None, pad: bool = False,
           max_elems: int = 1 << 22, scale_a=None, scale_b=None) -> np.ndarray:
    """``D = A @ B + C`` as a chain of matrix-unit instructions of ``profile``.

    Every output element is computed as on the hardware's K loop: K is walked in k-chunks in
    order, instruction j computes ``fdpa(A[m, jk:(j+1)k], B[jk:(j+1)k, n], d_{j-1})`` with
    ``d_{-1} = C[m, n]``; so ``D[m, n]`` equals that loop of :func:`reference.fdpa` calls, bit
    for bit.

    Args:
        A: (M, K) values of ``profile.in_format`` (tf32: fp32 values, reduced as in fdpa).
        B: (K, N) likewise, of b's format (``profile.b_format``; None: ``in_format``).
        C: (M, N) values of ``profile.out_format``, or None (zeros).
        profile: the instruction profile (keyword; required).
        pad: K must be a multiple of ``profile.k``; with ``pad=True`` a K that is not is padded
            with zero products at the end instead. That is what an instruction fed zero-filled
            operands computes (as ``emulate.run_hw_set`` does for short recorded vectors), but it
            is NOT the same as a shorter dot product in general: a zero product takes
            ``e_zero`` in the alignment max (it can raise ``e_max`` and cut small terms), and
            with ``e_zero`` None it still joins the sign rule of exact zero sums. Hence off by
            default.
        max_elems: rows of A are processed in tiles of about this many (m, n, block) terms.
        scale_a, scale_b: block-scaled profiles only (``profile.scale_format``): (M, K //
            scale_block_size) and (K // scale_block_size, N) values of the scale format
            (:func:`fpscope.emulate.matmul`).

    Returns:
        float64 array (M, N).

    Raises:
        ValueError: as :func:`prepare`.
    """
    A, B, C, scales = prepare(A, B, C, profile, pad, scale_a, scale_b)
    return gemm_prepared(A, B, C, profile, max_elems, scales)


def gemm_prepared(A, B, C, profile: Profile, max_elems: int = 1 << 22,
                  scales=None) -> np.ndarray:
    """:func:`matmul` on operands (and block scales) that :func:`prepare` returned."""
    M, K = A.shape
    N = B.shape[1]
    k = profile.k
    fa, fb = _operand_formats(profile)
    DA = _decode(A, fa, profile.flush_inputs)
    DB = _decode(B.T.copy(), fb, profile.flush_inputs)  # (N, K)
    DSA = DSB = None
    if scales is not None:  # one scale per element of K, beside A and B.T
        fs, sbs = resolve_format(profile.scale_format), profile.scale_block_size
        DSA = _decode(_per_product(scales[0], sbs, 1), fs, False)
        DSB = _decode(_per_product(scales[1].T, sbs, 1), fs, False)
    finA = np.isfinite(A)
    finB = np.isfinite(B.T)
    D = C.copy()
    rows = max(1, max_elems // max(1, N * profile.block_size))
    for m0 in range(0, M, rows):
        m1 = min(M, m0 + rows)
        d = D[m0:m1]
        for j in range(0, K, k):
            cols = slice(j, j + k)
            a = DA[m0:m1, cols][:, None, :]
            b = DB[:, cols][None, :, :]
            finite = bool(finA[m0:m1, cols].all() and finB[:, cols].all()
                          and np.isfinite(d).all())
            sa = sb = None
            if DSA is not None:
                sa, sb = DSA[m0:m1, cols][:, None, :], DSB[:, cols][None, :, :]
            d = _chain(a, b, d, profile, finite, sa, sb)
        D[m0:m1] = d
    return D
