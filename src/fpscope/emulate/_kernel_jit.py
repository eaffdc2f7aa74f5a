"""numba code of :mod:`fpscope.emulate.kernel` (imported on first use; see that module's
docstring for the arithmetic and why each step is exact).

Rounding-mode codes follow ``fpscope.formats.ROUNDING_MODES``: 0 RNE, 1 RZ, 2 RNA, 3 RD, 4 RU.

The exponent range and the cut products are inlined into the GEMM (``inline="always"``): it
ran faster so, at no measurable cost in compile time (re-measure with
``benchmarks/bench_kernel_parts.py``, whose last line is the whole single-thread kernel).
For float32 running values and truncation (every preset on ordinary data) the block set-up
and the first 4, 8 or 16 products are one inlined pass (:func:`_fused_first`), which keeps
the scale and the sum in registers and lets most blocks round without a range check
(:func:`_finish`); blocks it cannot take (NaN / Inf c, scales beyond float32) go through the
general set-up (:func:`_prepare_block`, a function of its own).

What selects code inside a loop over j is a compile-time constant there: the exponent width
(int8 or int16) comes from the arrays' dtype (:func:`_narrow`), and ``need_min`` and the
alignment are passed as literals to inlined copies of the loop (:func:`_prepare_block`, the
calls in :func:`gemm_kernel`). Tested per element, they kept the loops on narrower vectors
and computed every alignment's rounding; ``benchmarks/bench_emulate.py`` measures the
difference.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange, types
from numba.extending import overload

from .._numba_setup import prefer_wide_vectors

prefer_wide_vectors()  # before anything here compiles or loads

_NONE = -(1 << 30)


@njit(cache=True, inline="always")
def _bits(x):
    return np.float64(x).view(np.int64)


@njit(cache=True, inline="always")
def _pow2(e):
    """2.0 ** e for an int e in float64's normal exponent range (built from its bits)."""
    return np.int64((np.int64(e) + 1023) << 52).view(np.float64)


@njit(cache=True, inline="always")
def _round(v, p, q_lo, mf, mode, tiny, big, keep_sign=False):
    """v (float64: a finite value normal in float64, +-0, +-Inf or NaN) rounded to a format of
    precision p with max_finite mf in ``mode``: ``formats.round_to_format`` with overflow "inf",
    plus the reference's rules: +-Inf when ``|v| >= big`` (= 2^(emax+1)) in every mode,
    results below ``tiny`` (2^emin when flushing, else 0) flushed to a zero of v's sign, then
    -0 -> +0 unless ``keep_sign`` (``Profile.neg_zero_to_pos`` False). ``q_lo``: the lowest
    exponent of a last kept bit (emin - p + 1; -1000 when flushing). Branch-free, so that loops
    over it vectorise."""
    q = min(max(((_bits(v) >> 52) & 0x7FF) - 1023 - (p - 1), q_lo), 1000)
    y = v * _pow2(-q)
    ay = abs(y)
    t = np.floor(ay)
    rna = np.copysign(t + np.float64(ay - t >= 0.5), y)
    r = np.rint(y) if mode == 0 else (np.trunc(y) if mode == 1 else (
        np.floor(y) if mode == 3 else (np.ceil(y) if mode == 4 else rna)))
    out = r * _pow2(q)
    # an overflowed result: Inf when the mode rounds away from zero on v's side, else mf
    up = (mode == 0) | (mode == 2) | ((mode == 4) & (v > 0)) | ((mode == 3) & (v < 0))
    out = (np.copysign(np.inf, v) if up else np.copysign(mf, v)) if abs(out) > mf else out
    out = np.copysign(0.0, v) if abs(out) < tiny else out
    out = np.copysign(np.inf, v) if abs(v) >= big else out
    out = out if keep_sign else out + 0.0  # -0 -> +0
    return out if v - v == 0 else v


@njit(cache=True, inline="always")
def _sum_round_to_odd(a, b):
    """a + b rounded to float64 to odd (formats.sum_round_to_odd): TwoSum, then one step
    toward the error term when the rounded sum is inexact and even."""
    hi = a + b
    bp = hi - a
    lo = (a - (hi - bp)) + (b - bp)
    hb = _bits(hi)
    fix = (lo != 0) & (hi - hi == 0) & ((hb & 1) == 0)
    step = 1 if (lo > 0) == (hi > 0) else -1
    return np.int64(hb + step).view(np.float64) if fix else hi


@njit(cache=True, inline="always")
def _cut(y, align):
    if align == 0:
        return np.trunc(y)
    if align == 1:
        return np.floor(y)
    return np.rint(y)


def _narrow(x, like):
    """x as the dtype of the array ``like``, int8 or int16 (an overload chosen from the type,
    so the loops over j vectorise on 64 or 32 lanes with no test of the width inside)."""


@overload(_narrow, inline="always")
def _narrow_ov(x, like):
    if like.dtype == types.int8:
        return lambda x, like: np.int8(x)
    return lambda x, like: np.int16(x)


@njit(cache=True, inline="always")
def _exponent_range(EA, EB, i, kb, L, j0, w, mx, mn, need_min):
    """mx[:w] = max over the block's products of e_a + e_b (int8 or int16, the dtype of EA),
    and mn[:w] the min where ``need_min`` (the min only tells whether a product is zero, which
    matters only where e_zero can decide e_max: Profile.e_zero_inert; the kernel passes it as a
    constant). The loop over k is unrolled by four so that the loop over j, innermost,
    vectorises."""
    lo, hi = (-128, 127) if EA.itemsize == 1 else (-32000, 32000)
    for j in range(w):
        mx[j] = lo
        mn[j] = hi
    kk = 0
    while kk + 4 <= L:
        a0 = EA[i, kb + kk]
        a1 = EA[i, kb + kk + 1]
        a2 = EA[i, kb + kk + 2]
        a3 = EA[i, kb + kk + 3]
        b0 = EB[kb + kk, j0:j0 + w]
        b1 = EB[kb + kk + 1, j0:j0 + w]
        b2 = EB[kb + kk + 2, j0:j0 + w]
        b3 = EB[kb + kk + 3, j0:j0 + w]
        if need_min:
            for j in range(w):
                p0 = _narrow(a0 + b0[j], mx)
                p1 = _narrow(a1 + b1[j], mx)
                p2 = _narrow(a2 + b2[j], mx)
                p3 = _narrow(a3 + b3[j], mx)
                mx[j] = max(mx[j], max(max(p0, p1), max(p2, p3)))
                mn[j] = min(mn[j], min(min(p0, p1), min(p2, p3)))
        else:
            for j in range(w):
                p0 = _narrow(a0 + b0[j], mx)
                p1 = _narrow(a1 + b1[j], mx)
                p2 = _narrow(a2 + b2[j], mx)
                p3 = _narrow(a3 + b3[j], mx)
                mx[j] = max(mx[j], max(max(p0, p1), max(p2, p3)))
        kk += 4
    while kk < L:
        a0 = EA[i, kb + kk]
        b0 = EB[kb + kk, j0:j0 + w]
        for j in range(w):
            p0 = _narrow(a0 + b0[j], mx)
            mx[j] = max(mx[j], p0)
            mn[j] = min(mn[j], p0)
        kk += 1


@njit(cache=True, inline="always")
def _cut_products(AV, BV, i, kb, L, j0, w, sc, acc, align):
    """acc[:w] += the block's products a * b cut at the weights 1/sc[:w] (int32, exact;
    unrolled by four as in _exponent_range)."""
    kk = 0
    while kk + 4 <= L:
        a0 = AV[i, kb + kk]
        a1 = AV[i, kb + kk + 1]
        a2 = AV[i, kb + kk + 2]
        a3 = AV[i, kb + kk + 3]
        b0 = BV[kb + kk, j0:j0 + w]
        b1 = BV[kb + kk + 1, j0:j0 + w]
        b2 = BV[kb + kk + 2, j0:j0 + w]
        b3 = BV[kb + kk + 3, j0:j0 + w]
        if align == 0:  # float -> int32 conversion truncates toward zero
            for j in range(w):
                s = sc[j]
                acc[j] += ((np.int32(a0 * b0[j] * s) + np.int32(a1 * b1[j] * s))
                           + (np.int32(a2 * b2[j] * s) + np.int32(a3 * b3[j] * s)))
        elif align == 1:
            for j in range(w):
                s = sc[j]
                acc[j] += ((np.int32(np.floor(a0 * b0[j] * s))
                            + np.int32(np.floor(a1 * b1[j] * s)))
                           + (np.int32(np.floor(a2 * b2[j] * s))
                              + np.int32(np.floor(a3 * b3[j] * s))))
        else:
            for j in range(w):
                s = sc[j]
                acc[j] += ((np.int32(np.rint(a0 * b0[j] * s))
                            + np.int32(np.rint(a1 * b1[j] * s)))
                           + (np.int32(np.rint(a2 * b2[j] * s))
                              + np.int32(np.rint(a3 * b3[j] * s))))
        kk += 4
    while kk < L:
        a0 = AV[i, kb + kk]
        b0 = BV[kb + kk, j0:j0 + w]
        for j in range(w):
            acc[j] += np.int32(_cut(a0 * b0[j] * sc[j], align))
        kk += 1


@njit(cache=True)
def _prepare_block(src, mx, mn, lsb, sc, ct, acc, w, tiny_c, c_emin, ez, F, max_scale, align,
                   zb, need_min):
    """:func:`_prepare_loop` with ``align`` and ``need_min`` as constants: one loop per case, so
    that each compiles without the other cases' selects (a loop that tested them per element
    ran measurably slower: ``benchmarks/bench_emulate.py``)."""
    if need_min:
        _prepare_aligned(src, mx, mn, lsb, sc, ct, acc, w, tiny_c, c_emin, ez, F, max_scale,
                         align, zb, True)
    else:
        _prepare_aligned(src, mx, mn, lsb, sc, ct, acc, w, tiny_c, c_emin, ez, F, max_scale,
                         align, zb, False)


@njit(cache=True, inline="always")
def _prepare_aligned(src, mx, mn, lsb, sc, ct, acc, w, tiny_c, c_emin, ez, F, max_scale, align,
                     zb, need_min):
    """:func:`_prepare_loop` with ``align`` as a constant (``need_min`` already is one)."""
    if align == 0:
        _prepare_loop(src, mx, mn, lsb, sc, ct, acc, w, tiny_c, c_emin, ez, F, max_scale, 0,
                      zb, need_min)
    elif align == 1:
        _prepare_loop(src, mx, mn, lsb, sc, ct, acc, w, tiny_c, c_emin, ez, F, max_scale, 1,
                      zb, need_min)
    else:
        _prepare_loop(src, mx, mn, lsb, sc, ct, acc, w, tiny_c, c_emin, ez, F, max_scale, 2,
                      zb, need_min)


def _prepare_loop(src, mx, mn, lsb, sc, ct, acc, w, tiny_c, c_emin, ez, F, max_scale, align,
                  zb, need_min):
    """The block set-up loop for the running values' dtype (an overload): float64 values
    (:func:`_prepare_loop64`) or float32 ones (:func:`_prepare_loop32`). ``acc`` has w + 1
    entries: the float32 loop stores in acc[w] how many c are NaN or Inf (it does not carry
    them; the kernel puts them back after the rounding), the float64 loop leaves it at 0."""


@overload(_prepare_loop, prefer_literal=True)
def _prepare_loop_ov(src, mx, mn, lsb, sc, ct, acc, w, tiny_c, c_emin, ez, F, max_scale, align,
                     zb, need_min):
    # compiled once per dtype, alignment and need_min (prefer_literal keeps the last two
    # constants), not inlined: inlined copies of an overload drew NumbaIRAssumptionWarnings
    loop = _prepare_loop32 if src.dtype == types.float32 else _prepare_loop64
    return lambda src, mx, mn, lsb, sc, ct, acc, w, tiny_c, c_emin, ez, F, max_scale, align, \
        zb, need_min: loop(src, mx, mn, lsb, sc, ct, acc, w, tiny_c, c_emin, ez, F, max_scale,
                           align, zb, need_min)


@njit(cache=True, inline="always")
def _prepare_loop64(src, mx, mn, lsb, sc, ct, acc, w, tiny_c, c_emin, ez, F, max_scale, align,
                    zb, need_min):
    """Per output: e_max of the block (products, c = src[j], e_zero), the cut weight
    lsb = 2^(e_max - F), the scale sc = 2^-(e_max - F) (clamped to 2^max_scale; 0 for a
    non-finite c, which is carried), c cut at lsb (ct), acc = 0. A product exponent below
    ``zb`` marks a zero product; with ``need_min`` False, mn is not computed and e_zero cannot
    change e_max (Profile.e_zero_inert), so it is taken whether or not a product is zero."""
    for j in range(w):
        c = src[j]
        finite = c - c == 0
        cz = (c == 0) | (abs(c) < tiny_c)  # tiny_c = 0 unless flush_in
        ce = max(((_bits(c) >> 52) & 0x7FF) - 1023, c_emin)
        m = np.int64(mx[j])
        e = m if m > zb else _NONE
        if need_min:
            e = max(e, ez) if ((mn[j] < zb) | cz) else e
        else:
            e = max(e, ez)
        e = e if cz else max(e, ce)
        e = F if ((e == _NONE) | (not finite)) else e
        lo = e - F
        lsb[j] = _pow2(lo)
        sc[j] = _pow2(min(-lo, max_scale)) if finite else 0.0
        ct[j] = c if not finite else (0.0 if cz else _cut(c * _pow2(-lo), align))
        acc[j] = 0


@njit(cache=True, inline="always")
def _prepare_loop32(src, mx, mn, lsb, sc, ct, acc, w, tiny_c, c_emin, ez, F, max_scale, align,
                    zb, need_min):
    """:func:`_prepare_loop64` on 16 lanes, for running values that are float32 (every
    rounding format within float32's, kernel._run32): lsb holds the weight's exponent
    e_max - F (int32; the rounding builds the weight, :func:`_weight`), ct = c cut at that
    weight as int32 (below 2^(F+1)); one output's set-up is :func:`_setup32`. A NaN or Inf c
    gets sc = ct = 0 and is counted in acc[w]: the caller puts it back after the rounding.
    Needs 1 <= F <= 28, max_scale <= 126, c_emin >= -126 and no floor alignment
    (kernel._run32)."""
    nonfinite = np.int32(0)
    for j in range(w):
        lo, s, cv, finite = _setup32(src, mx, mn, j, tiny_c, c_emin, ez, F, max_scale, align, zb,
                                     need_min, True)
        lsb[j] = lo
        sc[j] = s
        ct[j] = cv
        acc[j] = np.int32(0)
        nonfinite = np.int32(nonfinite + np.int32(not finite))
    acc[w] = nonfinite


@njit(cache=True, inline="always")
def _setup32(src, mx, mn, j, tiny_c, c_emin, ez, F, max_scale, align, zb, need_min, general):
    """(lo, sc, ct, finite) of output j on float32 running values: the weight's exponent
    lo = e_max - F, the scale 2^-lo, c = src[j] cut at 2^lo (int32), and whether c is finite.
    Every integer is kept int32 (numba would widen it to int64 and halve the lanes).

    ``general`` (a constant; :func:`_prepare_loop32`): any block. The scale is clamped to
    2^max_scale and is 0 for a NaN or Inf c; c is cut after two exact scalings (2^-lo can
    exceed float32's range when every product is zero and c is tiny; a scaling that underflows
    does so only where the cut value is 0). Not ``general`` (:func:`_fused_first`): none of
    that; the results hold where lo lies in [-126, 127 - F] (2^-lo is then a float32 normal,
    and c is finite: a NaN or Inf c has the exponent 128, so lo = 128 - F), and the caller
    rejects every block with a lo outside."""
    none = np.int32(_NONE)
    bias = np.int32(127)
    s23 = np.int32(23)
    F32 = np.int32(F)
    zb32 = np.int32(zb)
    ez32 = np.int32(ez)
    c = src[j]
    be = np.int32(np.int32(np.float32(c).view(np.int32) >> s23) & np.int32(0xFF))
    finite = be != np.int32(0xFF)
    # c is read as zero where it is 0 or (flush_inputs) below tiny_c; 2^-149 is float32's least
    # positive value, so one comparison covers both
    cz = abs(c) < np.float32(max(tiny_c, 2.0 ** -149))
    ce = max(np.int32(be - bias), np.int32(c_emin))
    m = np.int32(mx[j])
    e = m if m > zb32 else none
    if need_min:
        e = max(e, ez32) if ((np.int32(mn[j]) < zb32) | cz) else e
    else:
        e = max(e, ez32)
    e = e if cz else max(e, ce)
    if general:
        e = F32 if ((e == none) | (not finite)) else e
    lo = np.int32(e - F32)
    up = np.int32(-lo)
    if general:
        s = (np.int32(np.int32(min(up, np.int32(max_scale)) + bias) << s23).view(np.float32)
             if finite else np.float32(0))
        h = min(max(up, np.int32(-126)), np.int32(126))  # 2^h, 2^(up - h): float32 normals
        t = (c * np.int32(np.int32(h + bias) << s23).view(np.float32)
             * np.int32(np.int32(np.int32(up - h) + bias) << s23).view(np.float32))
        skip = cz | (not finite)
    else:
        s = np.int32(np.int32(up + bias) << s23).view(np.float32)
        t = c * s
        skip = cz
    # the float32 -> int32 conversion truncates toward zero
    cv = np.int32(0) if skip else (np.int32(t) if align == 0 else np.int32(_cut(t, align)))
    return lo, s, cv, finite


@njit(cache=True, inline="always")
def _four(AV, BV, i, k0, j0, w):
    """(a0, a1, a2, a3, b0, b1, b2, b3): the values AV[i, k0 + q] and the rows
    BV[k0 + q, j0:j0 + w] (contiguous views, so that loops over them vectorise), q < 4."""
    return (AV[i, k0], AV[i, k0 + 1], AV[i, k0 + 2], AV[i, k0 + 3],
            BV[k0, j0:j0 + w], BV[k0 + 1, j0:j0 + w], BV[k0 + 2, j0:j0 + w],
            BV[k0 + 3, j0:j0 + w])


@njit(cache=True, inline="always")
def _cut4(q, j, s, align):
    """The int32 sum of the four products of q (:func:`_four`) at column j, each scaled by s
    and cut (the float32 -> int32 conversion truncates toward zero; nearest rounds first)."""
    a0, a1, a2, a3, b0, b1, b2, b3 = q
    if align == 0:
        return ((np.int32(a0 * b0[j] * s) + np.int32(a1 * b1[j] * s))
                + (np.int32(a2 * b2[j] * s) + np.int32(a3 * b3[j] * s)))
    return ((np.int32(_cut(a0 * b0[j] * s, align)) + np.int32(_cut(a1 * b1[j] * s, align)))
            + (np.int32(_cut(a2 * b2[j] * s, align)) + np.int32(_cut(a3 * b3[j] * s, align))))


@njit(cache=True, inline="always")
def _fused_first(src, mx, mn, AV, BV, i, kb, j0, w, lsb, sc, ct, acc, tiny_c, c_emin, ez, F,
                 max_scale, zb, need_min, P):
    """The block set-up and the cut of the block's first P products (P = 4, 8 or 16, at most
    the block's and at most kernel._int32_terms) in one loop over j, for float32 running values
    and truncating alignment: acc[:w] holds the products' int32 sum, and the scale and the sum
    stay in registers. acc[w] and acc[w + 1] hold the least and the greatest weight exponent lo
    of the block: the set-up holds where every lo lies in [-126, 127 - F] (:func:`_setup32`;
    a NaN or Inf c has lo = 128 - F), else the caller sets the block up again on the general
    path (:func:`_prepare_block`); the rounding may skip its check where every lo lies in
    kernel._exact_weights' range (:func:`_finish`).

    Inlined into the kernel, where LLVM sees that the arrays it writes are the kernel's own
    and so vectorises the loop without run-time overlap checks (called through a function
    of its own, the loop stayed scalar). ``need_min`` is tested per element here (a select),
    so that there is one copy per P. (The kernel may also round the block in the pass:
    :func:`_fused_loop`'s ``fin``; here it does not.)"""
    if P == 4:
        _fused_first4(src, mx, mn, AV, BV, i, kb, j0, w, lsb, sc, ct, acc, tiny_c, c_emin, ez, F,
                      max_scale, zb, need_min, (), sc, 0, 0)
    elif P == 8:
        _fused_first8(src, mx, mn, AV, BV, i, kb, j0, w, lsb, sc, ct, acc, tiny_c, c_emin, ez, F,
                      max_scale, zb, need_min, (), sc, 0, 0)
    else:
        _fused_first16(src, mx, mn, AV, BV, i, kb, j0, w, lsb, sc, ct, acc, tiny_c, c_emin, ez,
                       F, max_scale, zb, need_min, (), sc, 0, 0)


@njit(cache=True, inline="always")
def _fused_first4(src, mx, mn, AV, BV, i, kb, j0, w, lsb, sc, ct, acc, tiny_c, c_emin, ez, F,
                  max_scale, zb, need_min, fin, res, drop, mask):
    """:func:`_fused_first` for P = 4 (``fin`` ... ``mask``: :func:`_fused_loop`)."""
    _fused_loop(src, mx, mn, (_four(AV, BV, i, kb, j0, w),), w, lsb, sc, ct, acc, tiny_c,
                c_emin, ez, F, max_scale, zb, need_min, fin, res, drop, mask)


@njit(cache=True, inline="always")
def _fused_first8(src, mx, mn, AV, BV, i, kb, j0, w, lsb, sc, ct, acc, tiny_c, c_emin, ez, F,
                  max_scale, zb, need_min, fin, res, drop, mask):
    """:func:`_fused_first` for P = 8."""
    qs = (_four(AV, BV, i, kb, j0, w), _four(AV, BV, i, kb + 4, j0, w))
    _fused_loop(src, mx, mn, qs, w, lsb, sc, ct, acc, tiny_c, c_emin, ez, F, max_scale, zb,
                need_min, fin, res, drop, mask)


@njit(cache=True, inline="always")
def _fused_first16(src, mx, mn, AV, BV, i, kb, j0, w, lsb, sc, ct, acc, tiny_c, c_emin, ez, F,
                   max_scale, zb, need_min, fin, res, drop, mask):
    """:func:`_fused_first` for P = 16."""
    qs = (_four(AV, BV, i, kb, j0, w), _four(AV, BV, i, kb + 4, j0, w),
          _four(AV, BV, i, kb + 8, j0, w), _four(AV, BV, i, kb + 12, j0, w))
    _fused_loop(src, mx, mn, qs, w, lsb, sc, ct, acc, tiny_c, c_emin, ez, F, max_scale, zb,
                need_min, fin, res, drop, mask)


@njit(cache=True, inline="always")
def _fused_loop(src, mx, mn, qs, w, lsb, sc, ct, acc, tiny_c, c_emin, ez, F, max_scale, zb,
                need_min, fin, res, drop, mask):
    """:func:`_fused_first`'s loop over j for the products of ``qs``, a tuple of
    :func:`_four` (one loop per tuple length, which LLVM unrolls).

    ``fin`` (a tuple whose length is a constant of the compiled loop): () stores the block
    (lsb, sc, ct, acc) for the rest of the set-up, as :func:`_fused_first` says; (0,) and
    (0, 0), where the block has no other products, round it in the same pass instead, RZ and
    RNE (:func:`_bit_round` with ``drop``, ``mask``, unchecked as in :func:`_finish` with
    ``exact``), into ``res``, a buffer of the kernel's own (written through a pointer that may
    be the running values, src, the loop would need overlap checks and stay scalar). The
    result holds where the caller finds the block exact (acc[w], acc[w + 1]); else it sets
    the block up again on the general path, from src, which this loop never writes."""
    lo_lo = np.int32(1 << 30)
    lo_hi = np.int32(-(1 << 30))
    for j in range(w):
        lo, s, cv, _ = _setup32(src, mx, mn, j, tiny_c, c_emin, ez, F, max_scale, 0, zb,
                                need_min, False)
        total = np.int32(0)
        for q in qs:
            total += _cut4(q, j, s, 0)
        # (int32 again: numba widens int32 sums to int64, and the store to acc narrowed them;
        # without it the rounding below would make LLVM sum the products in int64)
        total = np.int32(total)
        if len(fin) == 0:
            lsb[j] = lo
            sc[j] = s
            ct[j] = cv
            acc[j] = total
        else:
            res[j] = _bit_round((np.float64(total) + np.float64(cv)) * _pow2(lo),
                                2 - len(fin), drop, mask)
        lo_lo = min(lo_lo, lo)
        lo_hi = max(lo_hi, lo)
    acc[w] = lo_lo
    acc[w + 1] = lo_hi


def _first_products(src, mx, mn, AV, BV, i, kb, j0, w, lsb, sc, ct, acc, tiny_c, c_emin, ez,
                    F, max_scale, zb, need_min, quads, fin, res, drop, mask):
    """:func:`_fused_first` with P = 4 * len(quads) where the running values are float32, and
    the block rounded in the same pass where ``fin`` says so (:func:`_fused_loop`); nothing
    where they are float64 (the kernel then passes no quads and never calls it). An overload,
    so that the kernel compiles only the loop of its P and ``fin``."""


@overload(_first_products, inline="always")
def _first_products_ov(src, mx, mn, AV, BV, i, kb, j0, w, lsb, sc, ct, acc, tiny_c, c_emin,
                       ez, F, max_scale, zb, need_min, quads, fin, res, drop, mask):
    loop = {1: _fused_first4, 2: _fused_first8, 4: _fused_first16}.get(len(quads.types))
    if src.dtype != types.float32 or loop is None:
        return lambda src, mx, mn, AV, BV, i, kb, j0, w, lsb, sc, ct, acc, tiny_c, c_emin, ez, \
            F, max_scale, zb, need_min, quads, fin, res, drop, mask: None
    return lambda src, mx, mn, AV, BV, i, kb, j0, w, lsb, sc, ct, acc, tiny_c, c_emin, ez, \
        F, max_scale, zb, need_min, quads, fin, res, drop, mask: loop(
            src, mx, mn, AV, BV, i, kb, j0, w, lsb, sc, ct, acc, tiny_c, c_emin, ez, F,
            max_scale, zb, need_min, fin, res, drop, mask)


@njit(cache=True, inline="always")
def _bit_round(v, mode, drop, mask):
    """v rounded to ``52 - drop + 1`` significand bits on its float64 bits: RZ clears the
    dropped bits, RNE adds half an ulp minus one plus the kept last bit before clearing (a carry
    moves into the exponent, as it should). Exact for a normal result. (No -0 -> +0 here: in
    :func:`_finish`, v is a sum of integers times a weight, never -0.)"""
    b = _bits(v)
    if mode == 0:
        b = b + (((np.int64(1) << (drop - 1)) - 1) + ((b >> drop) & 1))
    return np.int64(b & mask).view(np.float64)


def _weight(lsb, j):
    """The cut weight of output j: lsb[j] where the set-up stored the weight (float64), or
    2^lsb[j] where it stored the exponent (int32, :func:`_prepare_loop32`). An overload."""


@overload(_weight, inline="always")
def _weight_ov(lsb, j):
    if isinstance(lsb.dtype, types.Integer):
        return lambda lsb, j: _pow2(lsb[j])
    return lambda lsb, j: lsb[j]


@njit(cache=True)
def _finish(run, acc, ct, lsb, w, p, q_lo, mf, mode, tiny, big, exact):
    """run[:w] = rho((acc + ct) * lsb) (``run`` float64, or float32 where every rounding format lies
    within float32's: kernel._run32; lsb: see :func:`_weight`): one loop per rounding mode, so that
    each compiles with its mode as a constant. RNE and RZ take a bit-level fast path
    (:func:`_bit_round`) whose result is used where it is normal and finite in the target format;
    any other element (overflow, subnormal or flushed results, Inf, NaN) sends the block through
    :func:`_round`. ``exact``: the caller knows that every result is zero or normal and finite
    (each weight's exponent lies in kernel._exact_weights' range; :func:`_fused_first` counts
    those that do not), so the fast path runs unchecked: a +0 result is right too, as v is
    never -0 and the profiles the kernel runs turn -0 into +0."""
    if mode <= 1:
        drop = 52 - (p - 1)
        mask = ~((np.int64(1) << drop) - 1)
        if exact:
            if mode == 1:
                for j in range(w):
                    run[j] = _bit_round((np.float64(acc[j]) + ct[j]) * _weight(lsb, j), 1, drop,
                                        mask)
            else:
                for j in range(w):
                    run[j] = _bit_round((np.float64(acc[j]) + ct[j]) * _weight(lsb, j), 0, drop,
                                        mask)
            return
        lo_norm = max(_pow2(max(q_lo + p - 1, -1000)), tiny)
        nbad = 0
        if mode == 1:
            for j in range(w):
                v = (np.float64(acc[j]) + ct[j]) * _weight(lsb, j)
                r = _bit_round(v, 1, drop, mask)
                run[j] = r
                nbad += np.int64(not ((abs(v) >= lo_norm) & (abs(v) < big) & (abs(r) <= mf)))
        else:
            for j in range(w):
                v = (np.float64(acc[j]) + ct[j]) * _weight(lsb, j)
                r = _bit_round(v, 0, drop, mask)
                run[j] = r
                nbad += np.int64(not ((abs(v) >= lo_norm) & (abs(v) < big) & (abs(r) <= mf)))
        if nbad == 0:
            return
    if mode == 1:
        for j in range(w):
            v = (np.float64(acc[j]) + ct[j]) * _weight(lsb, j)
            run[j] = _round(v, p, q_lo, mf, 1, tiny, big)
    elif mode == 0:
        for j in range(w):
            v = (np.float64(acc[j]) + ct[j]) * _weight(lsb, j)
            run[j] = _round(v, p, q_lo, mf, 0, tiny, big)
    else:
        for j in range(w):
            v = (np.float64(acc[j]) + ct[j]) * _weight(lsb, j)
            run[j] = _round(v, p, q_lo, mf, mode, tiny, big)


@njit(cache=True, inline="always")
def _tiles(M, N, MI, W):
    """(number of tiles, tiles per row of tiles) of an M x N output in MI x W tiles."""
    njb = (N + W - 1) // W
    return ((M + MI - 1) // MI) * njb, njb


@njit(cache=True, inline="always")
def _tile(t, njb, M, N, MI, W):
    """(first row, end row, first column, width) of tile t (:func:`_tiles`)."""
    ib = t // njb
    i0 = ib * MI
    j0 = (t - ib * njb) * W
    return i0, min(M, i0 + MI), j0, min(N, j0 + W) - j0


@njit(cache=True, inline="always")
def _decode_value(x, p, emin, tiny):
    """(S, e, finite) of a float64 value x of a format of precision p and smallest normal
    exponent emin (``vectorized._decode`` of one value): ``|x| = S * 2^(e - (p - 1))``, ``e =
    max(floor(log2|x|), emin)``; S = 0 for a zero, a value below ``tiny`` (flushed) or a
    non-finite one."""
    ax = abs(x)
    finite = x - x == 0
    e = max(((_bits(x) >> 52) & 0x7FF) - 1023, emin)
    S = np.int64(ax * _pow2(p - 1 - e)) if finite else np.int64(0)
    return (np.int64(0) if ax < tiny else S), e, finite


@njit(cache=True, inline="always")
def _round_row(row, w, args, keep_sign):
    """row[:w] rounded in place by :func:`_round` with ``args`` (p, q_lo, mf, mode, tiny, big)."""
    for j in range(w):
        row[j] = _round(row[j], args[0], args[1], args[2], args[3], args[4], args[5], keep_sign)


@njit(parallel=True, cache=True)
def pairwise_kernel(A, B, C, D, k, L, step, keep_sign, c_tiny, zero_pos, has_out, outr, MI, W):
    """D (M, N) = the GEMM of A (M, K) and B (K, N) from C (M, N) as a chain of "pairwise"
    instructions (AMD CDNA2; ``vectorized._pairwise_block``), all float64: per block of L
    products, each product ``a * b`` (exact in float64) is rounded by rho, the L of them are
    added in a balanced tree of adjacent pairs, each sum the exact one rounded once (rounded to
    odd at float64 first: :func:`_sum_round_to_odd`), then c is added likewise. IEEE float64
    gives NaN, Inf and the signs of zeros (Inf * 0, Inf - Inf, (-0) + (-0)); rho keeps a zero's
    sign where ``keep_sign``. A and B come read already (flushed inputs, +0 zeros: kernel.py);
    each instruction's c is read here: below ``c_tiny`` a zero of its sign, a zero +0 where
    ``zero_pos``. ``step``, ``outr``: as in :func:`gemm_kernel`; MI x W: the tile."""
    M, K = A.shape
    N = B.shape[1]
    nt, njb = _tiles(M, N, MI, W)
    S = k // L
    sp, sq, smf, smode, stiny, sbig = step
    for t in prange(nt):
        i0, i1, j0, w = _tile(t, njb, M, N, MI, W)
        lev = np.empty((L, w))
        for kc in range(0, K, k):
            for i in range(i0, i1):
                drow = D[i, j0:j0 + w]
                crow = C[i, j0:j0 + w] if kc == 0 else drow
                for s in range(S):
                    kb = kc + s * L
                    for m in range(L):
                        a = A[i, kb + m]
                        brow = B[kb + m, j0:j0 + w]
                        lrow = lev[m]
                        for j in range(w):
                            lrow[j] = _round(a * brow[j], sp, sq, smf, smode, stiny, sbig,
                                             keep_sign)
                    width = L
                    while width > 1:
                        width //= 2
                        for m in range(width):
                            x, y, z = lev[2 * m], lev[2 * m + 1], lev[m]
                            for j in range(w):
                                z[j] = _round(_sum_round_to_odd(x[j], y[j]), sp, sq, smf,
                                              smode, stiny, sbig, keep_sign)
                    src = crow if s == 0 else drow
                    top = lev[0]
                    for j in range(w):
                        c = src[j]
                        if s == 0:  # the instruction's c, read in the output format
                            c = np.copysign(0.0, c) if abs(c) < c_tiny else c
                            c = 0.0 if (zero_pos and c == 0) else c
                        drow[j] = _round(_sum_round_to_odd(c, top[j]), sp, sq, smf, smode,
                                         stiny, sbig, keep_sign)
                if has_out:
                    _round_row(drow, w, outr, keep_sign)


@njit(cache=True, inline="always")
def _cut_int(n, shift, neg, align):
    """The signed ``(-1)^neg * n * 2^shift`` cut to an integer (int64 n >= 0; ``align`` 0
    truncate (the magnitude toward zero), 1 floor (two's complement), 2 nearest (ties to even
    on the magnitude)): ``vectorized._cut`` on one value, branch-free."""
    up_s = min(max(shift, 0), 62)
    d = min(max(-shift, 0), 62)
    left = n << up_s
    if align == 1:
        signed = -n if neg else n
        return (-left if neg else left) if shift >= 0 else (signed >> d)
    q = n >> d
    if align == 2:
        dm = max(d, 1)
        r = n & ((np.int64(1) << dm) - 1)
        half = np.int64(1) << (dm - 1)
        q += np.int64((d > 0) & ((r > half) | ((r == half) & ((q & 1) == 1))))
    mag = left if shift >= 0 else q
    return -mag if neg else mag


@njit(parallel=True, cache=True)
def lossless_kernel(AV, NA, BV, NB, C, D, k, L, c_args, s_args, step, keep_sign, signed_zero,
                    has_out, outr, MI, W):
    """D (M, N) = the GEMM from C (M, N) as a chain of lossless fused instructions (the cut
    never drops a bit: ``Profile.lossless``, AMD CDNA1; ``vectorized._block``): each block's L
    products (exact in float64) and c summed exactly and rounded once, as
    ``vectorized._exact_sum_odd`` does (VecSum passes until none changes anything, over a row
    of the tile at a time, then the top part rounded to odd) followed by rho. AV, BV: operand
    values with flushed ones zero; NA, NB: their sign bits (False for zeros under
    input_zero_sign "positive"). An exact zero sum is -0 where every product and c are
    negative and ``signed_zero`` (:attr:`Profile.negative_zero_sums`),
    else +0. ``c_args``, ``s_args``: (tiny, positive) of the first block's c
    (output format) and of later ones (step format). Rows and columns with NaN / Inf operands
    are the caller's; a NaN or Inf c is carried."""
    M, K = AV.shape
    N = BV.shape[1]
    nt, njb = _tiles(M, N, MI, W)
    S = k // L
    n = L + 1
    for t in prange(nt):
        i0, i1, j0, w = _tile(t, njb, M, N, MI, W)
        T = np.empty((n, w))
        allneg = np.empty(w, np.bool_)
        for kc in range(0, K, k):
            for i in range(i0, i1):
                drow = D[i, j0:j0 + w]
                crow = C[i, j0:j0 + w] if kc == 0 else drow
                for s in range(S):
                    kb = kc + s * L
                    ctiny, cpos = c_args if s == 0 else s_args
                    src = crow if s == 0 else drow
                    for j in range(w):
                        c = src[j]
                        cv = c if abs(c) >= ctiny else np.copysign(0.0, c)
                        cv = cv if c - c == 0 else 0.0
                        neg = (np.copysign(1.0, c) < 0) & ~(cpos & (cv == 0))
                        T[L, j] = cv
                        allneg[j] = neg & signed_zero  # (folded in here: a test in the
                        # last loop below made the kernel slower, `python benchmarks/
                        # bench_emulate.py --n 1024 --preset cdna1-bf16` 2.42 s against 1.46 s)
                    for m in range(L):
                        a, na = AV[i, kb + m], NA[i, kb + m]
                        b_row, nb_row, trow = BV[kb + m, j0:j0 + w], NB[kb + m, j0:j0 + w], T[m]
                        for j in range(w):
                            trow[j] = a * b_row[j]
                            allneg[j] &= na ^ nb_row[j]
                    for _ in range(4 * n + 64):  # VecSum passes (vectorized._exact_sum_odd)
                        changed = 0
                        for q in range(n - 1):
                            hi_row, lo_row = T[q + 1], T[q]
                            for j in range(w):
                                x, y = hi_row[j], lo_row[j]
                                sm = x + y
                                bp = sm - x
                                er = (x - (sm - bp)) + (y - bp)
                                changed += np.int64((sm != x) | (er != y))
                                hi_row[j] = sm
                                lo_row[j] = er
                        if changed == 0:
                            break
                    top, below = T[n - 1], T[n - 2]
                    for j in range(w):
                        c = src[j]
                        x = top[j]
                        hb = _bits(x)
                        step_ = 1 if (below[j] > 0) == (x > 0) else -1
                        x = np.int64(hb + step_).view(np.float64) if (
                            (below[j] != 0) & ((hb & 1) == 0)) else x
                        x = (-0.0 if allneg[j] else 0.0) if x == 0 else x
                        r = _round(x, step[0], step[1], step[2], step[3], step[4], step[5],
                                   keep_sign)
                        drow[j] = r if c - c == 0 else c
                if has_out:
                    _round_row(drow, w, outr, keep_sign)


@njit(parallel=True, cache=True)
def two_stage_kernel(SA, EA, NA, SB, EB, NB, C, D, k, L, G, F, F2, align, align2, pbits, ez,
                     c_drop, c_args, s_args, fs_emin, step, keep_sign, has_out, outr, MI, W):
    """D (M, N) = the GEMM from C (M, N) as a chain of "two-stage" instructions (AMD CDNA3;
    ``vectorized._two_stage_block``), on decoded operands (``vectorized._decode``: int64
    significands S, leading exponents E, signs N; E of a zero is irrelevant, its S is 0):
    stage 1 cuts the nonzero products of each of the G interleaved groups (product m in group
    m mod G) at ``2^(e_g - F)`` (``align``) and sums them in int64, then cuts the group sums at
    ``2^(e_dot - F)`` (``align2``); stage 2 adds the dot, cut at ``2^(e2 - F2 - 1)``, and c, cut
    at ``2^(e2 - F)`` (dropped below ``2^(e2 - c_drop)`` where c_drop > 0), ``e2 = max(e_dot,
    e_c)`` (a zero c: ``ez``); stage 3 cuts the sum to F2 fraction bits below its leading bit
    (not below ``fs_emin``), then rho (``step``; zero signs kept where ``keep_sign``). c of the
    first block is read in the output format, later ones in the step format: ``c_args``,
    ``s_args`` = (p, emin, tiny: values below it are zeros under flush_inputs). Rows and
    columns with NaN / Inf operands or products that may overflow are the caller's; a NaN or
    Inf c is carried. Every integer fits int64 (``vectorized.check_exact``)."""
    M, K = SA.shape
    N = SB.shape[1]
    nt, njb = _tiles(M, N, MI, W)
    S = k // L
    sent = np.int64(_NONE)
    for t in prange(nt):
        i0, i1, j0, w = _tile(t, njb, M, N, MI, W)
        eg = np.empty((G, w), np.int64)
        tg = np.empty((G, w), np.int64)
        for kc in range(0, K, k):
            for i in range(i0, i1):
                drow = D[i, j0:j0 + w]
                crow = C[i, j0:j0 + w] if kc == 0 else drow
                for s in range(S):
                    kb = kc + s * L
                    eg[:] = sent
                    tg[:] = 0
                    for m in range(L):  # the groups' maxima over nonzero products
                        if SA[i, kb + m] == 0:
                            continue
                        ea = np.int64(EA[i, kb + m])
                        e_row, s_row, g = EB[kb + m, j0:j0 + w], SB[kb + m, j0:j0 + w], m % G
                        for j in range(w):
                            lead = ea + e_row[j] if s_row[j] != 0 else sent
                            eg[g, j] = max(eg[g, j], lead)
                    for m in range(L):  # stage 1: each group's products cut and summed
                        sa = np.int64(SA[i, kb + m])
                        if sa == 0:
                            continue
                        ea, na, g = np.int64(EA[i, kb + m]), NA[i, kb + m], m % G
                        e_row, s_row = EB[kb + m, j0:j0 + w], SB[kb + m, j0:j0 + w]
                        n_row = NB[kb + m, j0:j0 + w]
                        for j in range(w):
                            sh = ea + e_row[j] - pbits - (eg[g, j] - F)
                            tg[g, j] += _cut_int(sa * s_row[j], sh, na ^ n_row[j], align)
                    cp, cemin, ctiny = c_args if s == 0 else s_args
                    src = crow if s == 0 else drow
                    for j in range(w):
                        e_dot = sent
                        for g in range(G):
                            e_dot = max(e_dot, eg[g, j])
                        dot = np.int64(0)
                        for g in range(G):
                            x = tg[g, j]
                            gs = eg[g, j] - e_dot if eg[g, j] > sent else 0
                            dot += _cut_int(abs(x), gs, x < 0, align2)
                        c = src[j]
                        cs, ce, finite = _decode_value(c, cp, cemin, ctiny)
                        e2 = max(e_dot, ce if cs != 0 else ez)
                        cs = np.int64(0) if (c_drop > 0 and ce < e2 - c_drop) else cs
                        lsb2 = e2 - F2 - 1
                        ds = e_dot - F - lsb2 if e_dot > sent else 0
                        total = (_cut_int(abs(dot), ds, dot < 0, align2)
                                 + (_cut_int(cs, ce - (cp - 1) - (e2 - F), c < 0, align2)
                                    << (F2 + 1 - F)))
                        mag = abs(total)
                        blen = ((_bits(np.float64(mag)) >> 52) & 0x7FF) - 1022 if mag else 0
                        lsb3 = max(blen - 1 + lsb2, fs_emin) - F2
                        s3 = _cut_int(mag, lsb2 - lsb3, total < 0, align2)
                        v = np.float64(s3) * _pow2(min(max(lsb3, -1000), 1000))
                        v = 0.0 if total == 0 else v
                        r = _round(v, step[0], step[1], step[2], step[3], step[4], step[5],
                                   keep_sign)
                        drow[j] = r if finite else c
                if has_out:
                    _round_row(drow, w, outr, keep_sign)


@njit(parallel=True, cache=True)
def grouped_kernel(SA, EA, NA, SB, EB, NB, QA, XA, QB, XB, C, D, k, L, G, sbs, F, align, ez,
                   e_min, wmin, c_args, s_args, step, keep_sign, has_out, outr, MI, W):
    """D (M, N) = the GEMM from C (M, N) as a chain of "grouped" instructions (MXFP4 / NVFP4
    with k = 64; ``vectorized._grouped_block``), on decoded operands (S, E, N as in
    :func:`two_stage_kernel`; N already False for zeros under input_zero_sign "positive") and
    decoded block scales (QA (M, K / sbs), QB (K / sbs, N): integer significands; XA, XB: their
    leading exponents). Each contiguous group of G products is summed exactly in int64 in units
    of the smallest product weight (``e_min`` = emin_a + emin_b), times its scales' significand
    product, with leading exponent the scales' exponent sum (``ez`` where every product or
    the scale is zero) and unit weight ``wmin`` + that sum; the groups and c are cut at
    ``2^(e_max - F)`` (``align``), summed and rounded by rho. An exact zero is -0 where every
    group and c are negative (and ``keep_sign``). ``c_args``, ``s_args`` = (p, emin, tiny,
    positive): c of the first block read in the output format (zeros +0 where ``positive``),
    later ones in the step format. Rows and columns with NaN / Inf operands or scales are the caller's; a NaN
    or Inf c is carried."""
    M, K = SA.shape
    N = SB.shape[1]
    nt, njb = _tiles(M, N, MI, W)
    S = k // L
    ng = L // G
    for t in prange(nt):
        i0, i1, j0, w = _tile(t, njb, M, N, MI, W)
        P = np.empty((ng, w), np.int64)
        zero = np.empty((ng, w), np.bool_)
        allneg = np.empty((ng, w), np.bool_)
        for kc in range(0, K, k):
            for i in range(i0, i1):
                drow = D[i, j0:j0 + w]
                crow = C[i, j0:j0 + w] if kc == 0 else drow
                for s in range(S):
                    kb = kc + s * L
                    P[:] = 0
                    zero[:] = True
                    allneg[:] = True
                    for m in range(L):  # each group's exact sum, in units of 2^wmin
                        g = m // G
                        sa, ea, na = np.int64(SA[i, kb + m]), np.int64(EA[i, kb + m]), NA[i, kb + m]
                        s_row, e_row = SB[kb + m, j0:j0 + w], EB[kb + m, j0:j0 + w]
                        n_row = NB[kb + m, j0:j0 + w]
                        for j in range(w):
                            n = sa * s_row[j]
                            neg = na ^ n_row[j]
                            sh = min(max(ea + e_row[j] - e_min, 0), 62) if n != 0 else 0
                            P[g, j] += (-n if neg else n) << sh
                            zero[g, j] &= n == 0
                            allneg[g, j] &= neg
                    cp, cemin, ctiny, cpos = c_args if s == 0 else s_args
                    src = crow if s == 0 else drow
                    for j in range(w):
                        c = src[j]
                        cs, ce, finite = _decode_value(c, cp, cemin, ctiny)
                        cneg = (c < 0) | ((c == 0) & (np.copysign(1.0, c) < 0))
                        cneg = cneg & ~(cpos & (cs == 0))
                        emax = ce if cs != 0 else ez
                        for g in range(ng):
                            x = (kb + g * G) // sbs
                            q = np.int64(QA[i, x]) * np.int64(QB[x, j0 + j])
                            lead = ez if (zero[g, j] | (q == 0)) else XA[i, x] + XB[x, j0 + j]
                            emax = max(emax, lead)
                        lsb = emax - F
                        total = _cut_int(cs, ce - (cp - 1) - lsb, cneg, align)
                        negs = cneg
                        for g in range(ng):
                            x = (kb + g * G) // sbs
                            q = np.int64(QA[i, x]) * np.int64(QB[x, j0 + j])
                            pg = P[g, j]
                            gneg = (pg < 0) | ((pg == 0) & allneg[g, j])
                            wg = wmin + XA[i, x] + XB[x, j0 + j]
                            total += _cut_int(abs(pg) * q, wg - lsb, gneg, align)
                            negs = negs & gneg
                        v = np.float64(total) * _pow2(min(max(lsb, -1000), 1000))
                        v = (-0.0 if negs else 0.0) if total == 0 else v
                        r = _round(v, step[0], step[1], step[2], step[3], step[4], step[5],
                                   keep_sign)
                        drow[j] = r if finite else c
                if has_out:
                    _round_row(drow, w, outr, keep_sign)


@njit(parallel=True, cache=True)
def operand_codes(X, V, E, emin, tiny, sentinel, bad, rows):
    """One pass over an operand X (2-D float64, values of its format): V = the values in V's
    dtype (float32 or float64: exact, kernel._value_dtype), E = the leading exponents
    ``max(floor(log2|x|), emin)`` from the float64 exponent field (every value of an operand
    format is normal in float64); a zero, a value below ``tiny`` (2^emin under flush_inputs,
    else 0) and a non-finite value get V = 0 and E = ``sentinel``. ``bad`` marks, per row
    (``rows``) or per column, where X holds NaN or Inf (those outputs are recomputed by the
    numpy engine). Threads write only True into ``bad``, so sharing a column flag is safe."""
    R, C = X.shape
    for r in prange(R):
        nonfinite = 0
        for c in range(C):  # branch-free, so that it vectorises
            x = X[r, c]
            finite = x - x == 0
            zero = (x == 0) | (abs(x) < tiny) | (not finite)
            e = max(((_bits(x) >> 52) & 0x7FF) - 1023, emin)
            V[r, c] = 0.0 if zero else x
            E[r, c] = sentinel if zero else e
            nonfinite += np.int64(not finite)
        if nonfinite:
            if rows:
                bad[r] = True
            else:
                for c in range(C):
                    if not np.isfinite(X[r, c]):
                        bad[c] = True


@njit(cache=True, inline="always")
def _lead(x, emin):
    """max(floor(log2|x|), emin) of a value normal in float64, from its exponent field."""
    return max(((_bits(x) >> 52) & 0x7FF) - 1023, emin)


@njit(parallel=True, cache=True)
def scaled_operand_codes(X, S, block, rows, V, E, emin, tiny, s_emin, sentinel, bad):
    """:func:`operand_codes` of an operand X with block scales S folded in (kernel's
    ``_scaled_codes``): A (rows True): S (M, K / block), S[r, j] scaling X[r, j*block:(j+1)*block];
    B: S (K / block, N), S[j, c] scaling X[j*block:(j+1)*block, c]. V = x * s (exact in float64,
    then in V's dtype: kernel._value_dtype checked it), E = max(floor(log2|x|), emin) +
    max(floor(log2 s), s_emin) (a subnormal x keeps its format's emin), the sentinel where x or
    s is zero, x is flushed (below ``tiny``) or either is not finite; ``bad`` marks rows
    (``rows``) or columns with a non-finite x or s."""
    R, C = X.shape
    nb = C // block if rows else 1  # blocks of a row of A; a row of B has one scale row
    w = block if rows else C
    for r in prange(R):
        nonfinite = 0
        for jb in range(nb):
            srow = S[r] if rows else S[r // block]
            for c in range(jb * w, (jb + 1) * w):  # branch-free, so that it vectorises
                x = X[r, c]
                s = srow[jb] if rows else srow[c]
                ok = (x - x == 0) & (s - s == 0)
                zero = (x == 0) | (abs(x) < tiny) | (s == 0) | (not ok)
                V[r, c] = 0.0 if zero else x * s
                E[r, c] = sentinel if zero else _lead(x, emin) + _lead(s, s_emin)
                nonfinite += np.int64(not ok)
        if nonfinite:
            if rows:
                bad[r] = True
            else:
                for c in range(C):
                    if not (np.isfinite(X[r, c]) and np.isfinite(S[r // block, c])):
                        bad[c] = True


@njit(parallel=True, cache=True)
def abs_range(X, S, block, rows, tiny):
    """(min, max) of |x * s| over the finite nonzero ones of at least ``tiny`` ((inf, 0) when
    there is none): kernel._value_dtype's test of the operands (bf16 / tf32 data, block-scaled
    ones), S their scales in :func:`scaled_operand_codes`'s layout (unscaled: ones of shape
    (R, 1), block = X.shape[1], rows True). The magnitudes are compared as their float64 bits
    (ordered like the values for |v| >= 0), so that the reductions vectorise."""
    R, C = X.shape
    nb = C // block if rows else 1  # as in scaled_operand_codes
    w = block if rows else C
    inf_bits = np.int64(0x7FF0000000000000)
    lo = np.empty(R, np.int64)
    hi = np.empty(R, np.int64)
    for r in prange(R):
        a = inf_bits
        b = np.int64(0)
        for jb in range(nb):
            srow = S[r] if rows else S[r // block]
            for c in range(jb * w, (jb + 1) * w):
                v = X[r, c] * (srow[jb] if rows else srow[c])
                m = _bits(v) & np.int64(0x7FFFFFFFFFFFFFFF)
                ok = (v - v == 0) & (v != 0) & (abs(v) >= tiny)
                a = min(a, m if ok else inf_bits)
                b = max(b, m if ok else np.int64(0))
        lo[r] = a
        hi[r] = b
    return np.int64(lo.min()).view(np.float64), np.int64(hi.max()).view(np.float64)


def _block_arrays(rt, w):
    """(ct, lsb) of a tile of width w: float64 cut c and weights where the running values are
    float64, int32 cut c and weight exponents where they are float32 (rt's dtype; see
    :func:`_prepare_loop32`). An overload."""


@overload(_block_arrays, inline="always")
def _block_arrays_ov(rt, w):
    if rt.dtype == types.float32:
        return lambda rt, w: (np.empty(w, np.int32), np.empty(w, np.int32))
    return lambda rt, w: (np.empty(w, np.float64), np.empty(w, np.float64))


@njit(parallel=True, cache=True)
def gemm_kernel(AV, EA, BV, EB, C, D, rt, k, L, F, align, ez, c_last, out_emin, step_emin,
                step, has_out, outr, flush_in, max_scale, T, quads, fin, lo_min, lo_max, zb,
                need_min, MI, W):
    """D (M, N) = the GEMM of AV, BV (values) and EA, EB (exponents, :func:`operand_codes`)
    from C (M, N) (kernel.matmul). C and D are float64; the running values (c of each block,
    each step's result) are of the dtype of the empty array ``rt``: float64, or float32 where
    every value the chain rounds to lies within float32 (kernel._run32: the block set-up then
    runs on 16 lanes). Each tile keeps its running values in a buffer of that dtype: the first
    k-chunk reads C into it, the last writes it to D, so D need not be initialised and neither
    C nor D is converted whole.

    ``step``, ``outr``: (p, q_lo, max_finite, mode, tiny, big) of the step and output roundings
    (:func:`_round`). ``max_scale``: the largest exponent of a scale 2^-lsb the value dtype
    holds (float32: 126; a larger one only occurs when every product is zero). ``T``: products
    whose cut values sum exactly in int32 (kernel._int32_terms). ``quads``: a tuple of P / 4 zeros, P
    being 0 or how many products the block set-up cuts in the same pass (:func:`_fused_first`;
    kernel._first_products); a tuple so that P is part of the kernel's type, and numba compiles
    (and caches) for each profile the one loop it needs. ``fin``: () or, where the fused pass
    takes the whole block (P = L) and the step rounds RZ or RNE, a tuple of 1 or 2 zeros: the
    pass rounds the block too (:func:`_fused_loop`; kernel._rounds_in_pass).
    ``lo_min``, ``lo_max``: the weight exponents whose step results need no range check
    (kernel._exact_weights), where the fused pass took the block.
    ``zb``: exponent sums below it
    are zero products (kernel._exponents). ``need_min``: e_zero can decide e_max
    (Profile.e_zero_inert)."""
    P = 4 * len(quads)
    M, K = AV.shape
    N = BV.shape[1]
    nt, njb = _tiles(M, N, MI, W)
    S = k // L
    sp, sq, smf, smode, stiny, sbig = step
    op, oq, omf, omode, otiny, obig = outr
    drop = 52 - (sp - 1)  # (_bit_round's, for the step rounding in the fused pass)
    mask = ~((np.int64(1) << drop) - 1)
    tiny_out = 2.0 ** out_emin if flush_in else 0.0  # c below this is read as zero
    tiny_step = 2.0 ** step_emin if flush_in else 0.0
    for t in prange(nt):
        i0, i1, j0, w = _tile(t, njb, M, N, MI, W)
        mx = np.empty(w, EA.dtype)
        mn = np.empty(w, EA.dtype)
        sc = np.empty(w, AV.dtype)
        acc = np.zeros(w + 2, np.int32)  # acc[w:]: _prepare_loop32's, _fused_first's counts
        run = np.empty(w, rt.dtype)
        res = np.empty(w, rt.dtype)  # the block results of the fused pass (fin)
        keep = np.empty(w, rt.dtype)  # the c of a block that has a NaN or Inf c (float32 run)
        ct, lsb = _block_arrays(rt, w)
        zw = np.zeros(w, rt.dtype)
        cin = np.empty(w, rt.dtype)  # a row of C in the running dtype
        Dt = np.empty((i1 - i0, w), rt.dtype)  # the tile's running values
        direct = not c_last and not has_out  # the last step writes D itself
        for kc in range(0, K, k):
            for i in range(i0, i1):
                drow = Dt[i - i0]
                if kc == 0:
                    for j in range(w):
                        cin[j] = C[i, j0 + j]
                crow = cin if kc == 0 else drow  # this instruction's c
                for s in range(S):
                    kb = kc + s * L
                    first = s == 0
                    src = (zw if c_last else crow) if first else run
                    c_emin = step_emin if (s > 0 or c_last) else out_emin
                    tiny_c = tiny_step if (s > 0 or c_last) else tiny_out
                    if need_min:  # a constant in each inlined copy
                        _exponent_range(EA, EB, i, kb, L, j0, w, mx, mn, True)
                    else:
                        _exponent_range(EA, EB, i, kb, L, j0, w, mx, mn, False)
                    fast = exact = False
                    dst = drow if (direct and s == S - 1) else run
                    if P:  # the set-up and the first P products in one pass
                        _first_products(src, mx, mn, AV, BV, i, kb, j0, w, lsb, sc, ct, acc,
                                        tiny_c, c_emin, ez, F, max_scale, zb, need_min, quads,
                                        fin, res, drop, mask)
                        lo_lo, lo_hi = acc[w], acc[w + 1]  # (_fused_first)
                        fast = (lo_lo >= -126) and (lo_hi <= 127 - F)
                        exact = fast and (lo_lo >= lo_min) and (lo_hi <= lo_max)
                        if len(fin):  # the pass rounded the block: done where it is exact
                            if exact:
                                for j in range(w):
                                    dst[j] = res[j]
                                continue
                            fast = False  # it stored no set-up: the general one
                    if not fast:  # the general set-up
                        _prepare_block(src, mx, mn, lsb, sc, ct, acc, w, tiny_c, c_emin, ez,
                                       F, max_scale, align, zb, need_min)
                    nonfinite = 0 if fast else acc[w]
                    if nonfinite:
                        keep[:] = src
                    pos = P if fast else 0  # products cut so far, the last ``used`` in acc
                    used = pos
                    while pos < L:  # int32 sums of at most T terms, added up in ct
                        if used == T:
                            for j in range(w):
                                ct[j] += acc[j]
                                acc[j] = 0
                            used = 0
                        n = min(T - used, L - pos)
                        _cut_products(AV, BV, i, kb + pos, n, j0, w, sc, acc, align)
                        pos += n
                        used += n
                    _finish(dst, acc, ct, lsb, w, sp, sq, smf, smode, stiny, sbig, exact)
                    if nonfinite:  # a NaN or Inf c is carried
                        for j in range(w):
                            if keep[j] - keep[j] != 0:
                                dst[j] = keep[j]
                if c_last:  # d = rho(d + c), one rounding
                    for j in range(w):
                        run[j] = _round(_sum_round_to_odd(run[j], crow[j]),
                                        sp, sq, smf, smode, stiny, sbig)
                if has_out:
                    for j in range(w):
                        run[j] = _round(run[j], op, oq, omf, omode, otiny, obig)
                if not direct:
                    for j in range(w):
                        drow[j] = run[j]
        for i in range(i0, i1):
            for j in range(w):
                D[i, j0 + j] = Dt[i - i0, j]
