"""Bit patterns of the formats of :mod:`fpscope.formats`: :func:`encode` (float64 values to a
format's bit patterns, rounding first where asked) and :func:`decode` (bit patterns to float64
values, NaN and signed zero as the format encodes them). Also importable from fpscope.formats.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # fpscope.formats imports this module (its encode / decode)
    from .formats import Format

def _uint_dtype(bits: int):
    for t in (np.uint8, np.uint16, np.uint32, np.uint64):
        if bits <= 8 * np.dtype(t).itemsize:
            return np.dtype(t)
    raise ValueError(f"{bits}-bit formats are not supported")


def _layout(fmt: Format):
    """(m, w, bias) after checking that ``fmt`` has a standard encoding."""
    m, w, bias = fmt.mantissa_bits, fmt.exponent_bits, fmt.exponent_bias
    top = (1 << w) - 1 if w >= 1 else 0
    if fmt.specials == "ieee" or (fmt.specials == "fn" and m == 0):
        top -= 1  # the all-ones exponent holds only specials
    ok = w >= 1 and fmt.bits <= 64 and fmt.emax + bias == top
    ok = ok and fmt.emin == (1 if fmt.subnormals else 0) - bias
    ok = ok and not (fmt.specials == "ieee" and m == 0)  # Inf and NaN would coincide
    if not ok:
        raise ValueError(f"format {fmt.name} has no standard bit encoding")
    return m, w, bias


def _nan_pattern(fmt: Format, m: int, w: int) -> int:
    if fmt.specials == "ieee":
        return (((1 << w) - 1) << m) | (1 << (m - 1))  # positive quiet NaN
    if fmt.specials == "fn":
        return (1 << (fmt.bits - int(fmt.signed))) - 1  # all ones but the sign
    if fmt.specials == "fnuz":
        return 1 << (fmt.bits - 1)
    raise ValueError(f"{fmt.name} has no NaN encoding")


def encode(x, fmt: Format, mode: str | None = None, overflow: str | None = None,
           flush_subnormals: bool = False) -> np.ndarray:
    """Bit patterns of float64 values in ``fmt``.

    Layout (most significant first): sign (absent in e8m0 and ue4m3), exponent field, trailing
    significand field; widths in the module docstring. NaN gives the format's canonical NaN (the
    one ml_dtypes and numpy casts produce): positive quiet NaN for IEEE-style formats (fp32
    0x7FC00000, fp16 0x7E00, bf16 0x7FC0, e5m2 0x7E), 0x7F for e4m3fn and ue4m3, 0x80 for fnuz,
    0xFF for e8m0. NaN sign and payload are not kept.

    Args:
        x: array-like of float64 values.
        fmt: the format (bits <= 64, standard encoding).
        mode: None: every value must be exactly representable (:func:`is_representable`).
            Otherwise the values are first rounded with :func:`round_to_format` and this mode,
            ``overflow`` and ``flush_subnormals``.

    Returns:
        unsigned integer array (uint8 up to 8 bits, uint16, uint32, uint64) of x's shape; fp6
        and fp4 patterns sit in the low bits of a uint8 (as ml_dtypes stores them).

    Raises:
        ValueError: a value is not representable (mode None), a NaN for a format without NaN,
            or a format without a standard encoding.
    """
    from .formats import is_representable, round_to_format

    m, w, bias = _layout(fmt)
    x = np.asarray(x, dtype=np.float64)
    if mode is not None:
        v = round_to_format(x, fmt, mode, overflow, flush_subnormals)
    else:
        v = x
        ok = is_representable(v, fmt) | np.isnan(v)
        if not ok.all():
            raise ValueError(f"value {v[~ok].flat[0]!r} is not exactly representable in {fmt.name}")
    nan = np.isnan(v)
    if nan.any() and not fmt.has_nan:
        raise ValueError(f"{fmt.name} has no NaN encoding")
    inf = np.isinf(v)
    a = np.where(np.isfinite(v), np.abs(v), 0.0)
    _, e = np.frexp(a)
    E = e.astype(np.int64) - 1
    sub = (a < fmt.min_normal) if fmt.subnormals else np.zeros(a.shape, dtype=bool)
    biased = np.where(sub, 0, E + bias)
    with np.errstate(invalid="ignore", over="ignore"):
        mant = np.where(sub, np.ldexp(a, m - fmt.emin), np.ldexp(a, m - E) - float(1 << m))
    word = (biased.astype(np.uint64) << np.uint64(m)) | mant.astype(np.uint64)
    if fmt.signed:
        sign = np.signbit(v) & ~nan
        word |= sign.astype(np.uint64) << np.uint64(fmt.bits - 1)
    if fmt.has_inf:
        inf_word = np.uint64(((1 << w) - 1) << m) | (np.signbit(v).astype(np.uint64) << np.uint64(fmt.bits - 1))
        word = np.where(inf, inf_word, word)
    if fmt.has_nan:
        word = np.where(nan, np.uint64(_nan_pattern(fmt, m, w)), word)
    return word.astype(_uint_dtype(fmt.bits))


def decode(bits, fmt: Format) -> np.ndarray:
    """Float64 values of bit patterns of ``fmt`` (exact; every pattern, specials included).

    Args:
        bits: array-like of non-negative integers below 2^fmt.bits (layout: :func:`encode`).

    Returns:
        float64 array of the same shape. NaN patterns give NaN; -0 gives -0.0.

    Raises:
        ValueError: a pattern out of range, or a format without a standard encoding.
    """
    m, w, bias = _layout(fmt)
    b = np.asarray(bits)
    if b.dtype.kind not in "ui":
        raise ValueError(f"bit patterns must be integers, not {b.dtype}")
    if b.dtype.kind == "i" and (b < 0).any():
        raise ValueError("bit patterns must be non-negative")
    b = b.astype(np.uint64)
    if fmt.bits < 64 and (b >> np.uint64(fmt.bits)).any():
        raise ValueError(f"bit patterns of {fmt.name} are below 2^{fmt.bits}")
    mant = b & np.uint64((1 << m) - 1)
    ex = (b >> np.uint64(m)) & np.uint64((1 << w) - 1)
    exi = ex.astype(np.int64)
    mf = mant.astype(np.float64)
    with np.errstate(over="ignore"):  # the all-ones exponent of IEEE formats; replaced below
        normal = np.ldexp(mf + float(1 << m), exi - bias - m)
    if fmt.subnormals:
        val = np.where(ex == 0, np.ldexp(mf, fmt.emin - m), normal)
    else:
        val = normal
    if fmt.signed:
        sign = (b >> np.uint64(fmt.bits - 1)) & np.uint64(1)
        val = np.where(sign == 1, -val, val)
    all_ones = np.uint64((1 << w) - 1)
    if fmt.specials == "ieee":
        val = np.where((ex == all_ones) & (mant == 0), np.copysign(np.inf, val), val)
        val = np.where((ex == all_ones) & (mant != 0), np.nan, val)
    elif fmt.specials == "fn":
        val = np.where((ex == all_ones) & (mant == np.uint64((1 << m) - 1)), np.nan, val)
    elif fmt.specials == "fnuz":
        val = np.where(b == np.uint64(1 << (fmt.bits - 1)), np.nan, val)
    return val
