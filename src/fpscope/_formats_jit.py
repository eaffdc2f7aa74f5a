"""numba code of :mod:`fpscope.formats` (imported on first use, for large arrays only)."""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ._numba_setup import prefer_wide_vectors

prefer_wide_vectors()  # before anything here compiles or loads


@njit(parallel=True, cache=True)
def surely_representable(x, p, emin, max_finite, signed, out):
    """out[i] = True where x[i] (1-D float64) is certainly a value of the format of precision
    p, smallest normal exponent emin (subnormals below it) and largest finite value max_finite;
    False means "decide exactly" (formats._is_representable_exact), not "no".

    True for +0, and for a finite nonzero float64-normal x (negative only when ``signed``)
    with ``|x| <= max_finite`` whose float64 significand has no bit below the format's
    last-place weight ``2^(max(E, emin) - p + 1)`` at x's exponent E: x is then an integer
    times that weight below ``2^p`` of it (below ``2^(p-1)``, a subnormal, when E < emin)."""
    for i in prange(x.size):
        v = x[i]
        b = np.float64(v).view(np.int64)
        field = (b >> 52) & 0x7FF
        E = field - 1023
        shift = max(E, emin) - (p - 1) - E + 52  # low significand bits that must be zero
        low = b & ((np.int64(1) << min(max(shift, 0), 62)) - 1)
        regular = ((field != 0) & (field != 0x7FF) & (abs(v) <= max_finite)
                   & (signed | (v > 0)) & (shift <= 52))
        out[i] = (b == 0) | (regular & (low == 0))


@njit(parallel=True, cache=True)
def round_regular(x, p, emin, max_finite, mode, negative_zero, out, handled):
    """The common case of formats.round_to_format on float64 bits, for a signed format with
    subnormals and 2 <= p <= 52: where x[i] (1-D float64) is a zero (kept with its sign when
    ``negative_zero``, else +0) or finite with exponent E >= emin whose rounding to p bits in
    ``mode`` (0 RNE, 1 RZ, 2 RNA, 3 RD, 4 RU: ``formats.ROUNDING_MODES``) is at most
    max_finite, out[i] is that rounding and handled[i] True; elsewhere (subnormal results,
    overflow, Inf, NaN) handled[i] is False and out[i] undefined.

    The significand keeps its top p bits: the dropped ``52 - (p - 1)`` bits of the magnitude
    are cleared after adding an increment (RNE: half an ulp minus one plus the last kept bit;
    RNA: half an ulp; away from zero in RU / RD: one ulp minus one); a carry moves into the
    exponent field, as it should."""
    drop = 52 - (p - 1)
    half = np.int64(1) << (drop - 1)
    low = (np.int64(1) << drop) - 1
    zero64 = np.int64(0)
    for i in prange(x.size):
        v = x[i]
        b = np.float64(v).view(np.int64)
        neg = b < 0
        mag = b & np.int64(0x7FFFFFFFFFFFFFFF)
        field = mag >> 52
        away = (mode == 3) & neg | (mode == 4) & (not neg)  # RD / RU away from zero
        inc = (half - 1 + ((mag >> drop) & 1) if mode == 0 else (
            half if mode == 2 else (low if away else zero64)))
        rm = (mag + inc) & ~low
        r = np.int64(rm | (b & np.int64(-0x8000000000000000))).view(np.float64)
        ok = (field != 0x7FF) & (field - 1023 >= emin) & (abs(r) <= max_finite)
        zero = v == 0
        out[i] = (v if negative_zero else 0.0) if zero else r
        handled[i] = ok | zero
