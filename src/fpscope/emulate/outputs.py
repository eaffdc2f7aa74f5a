"""The emulator's results in the output format: the device's bits in its numpy dtype.

The engines compute float64 values of the output format (:mod:`fpscope.emulate.vectorized`,
:mod:`fpscope.emulate.kernel`); a float64 NaN carries no pattern. :func:`to_output` stores the
values in the format's storage dtype (:meth:`fpscope.formats.Format.numpy_dtype`: float32,
float16, ml_dtypes bfloat16 / float8_*) with every NaN written as the device writes it.

Exactness: a library cast is used only where its result is proved exact: each value is cast,
widened back (widening is exact) and compared bit for bit with the float64 value; any value
that does not come back (a library that rounded through another type) is encoded from its bits
with :func:`fpscope.formats.encode` instead. NUMERICS.md section 2: float64 -> bf16 / fp16 /
fp8 casts of torch, jax and ml_dtypes may round twice; here every value is already a value of
the format, so there is nothing to round, and the check makes sure of it.
"""

from __future__ import annotations

import numpy as np

from ..formats import Format, encode
from ..profile import Profile, resolve_format

__all__ = ["check_dtype", "output_format", "to_output"]


def check_dtype(dtype) -> bool:
    """True for ``dtype="float64"`` (float64 results), False for None (the output format's
    dtype).

    Raises:
        ValueError: any other value.
    """
    if dtype is None:
        return False
    try:
        if np.dtype(dtype) == np.float64:
            return True
    except TypeError:
        pass
    raise ValueError(f"dtype must be None (the output format's dtype) or 'float64', not "
                     f"{dtype!r}")


def output_format(profile: Profile, alpha: float, out_format: str | None) -> Format:
    """The format D is returned in: ``out_format`` where given; else the profile's output
    format (with ``alpha`` != 1 too: the epilogue rounds through fp32 back to it)."""
    return resolve_format(out_format or profile.out_format)


def to_output(D: np.ndarray, fmt: Format, nan_bits: int | None) -> np.ndarray:
    """D's values (float64, values of ``fmt`` or NaN) in ``fmt``'s storage dtype, exactly.

    Args:
        D: float64 array (any shape) of values of ``fmt``, NaN allowed.
        fmt: the output format; it needs a storage dtype.
        nan_bits: the bit pattern every NaN gets (``profile.nan_bits`` when ``fmt`` is the
            profile's output format); None: the format's canonical quiet NaN
            (:func:`fpscope.formats.encode`: fp32 0x7FC00000, fp16 0x7E00, bf16 0x7FC0), a
            pattern not modelled. Formats whose storage is wider than their encoding (tf32 in
            float32) keep the canonical NaN of the storage type.

    Returns:
        array of D's shape and ``fmt.numpy_dtype()``.

    Raises:
        ValueError: ``fmt`` has no storage dtype (pass ``dtype="float64"`` to the emulator), or
            a value is not one of ``fmt`` (an engine fault, never silently rounded).
    """
    try:
        dt = fmt.numpy_dtype()
    except ValueError as exc:
        raise ValueError(f"{exc}: ask for float64 results (dtype='float64')") from None
    D = np.asarray(D, dtype=np.float64)
    nan = np.isnan(D)
    with np.errstate(all="ignore"):
        out = D.astype(dt)
        back = out.astype(np.float64)
    # the storage holds fmt's encoding (fp6 / fp4: in the low bits of a byte, as ml_dtypes)
    same_layout = fmt.bits == 8 * dt.itemsize or (dt.itemsize == 1 and fmt.bits < 8)
    bad = (back.view(np.uint64) != D.view(np.uint64)) & ~nan
    if bad.any():  # the library rounded (or the value is not of fmt: encode says which)
        if same_layout:
            out[bad] = encode(D[bad], fmt).view(dt)
        else:  # tf32 in float32: float64 -> float32 is one IEEE rounding, exact on fp32 values
            out[bad] = D[bad].astype(np.float32).astype(dt)
        back = out.astype(np.float64)
        if ((back.view(np.uint64) != D.view(np.uint64)) & ~nan).any():
            raise ValueError(f"values not exactly representable in {fmt.name}")
    if nan.any() and same_layout and fmt.has_nan:
        uint = np.dtype(f"u{dt.itemsize}")
        pattern = int(encode(np.array([np.nan]), fmt)[0]) if nan_bits is None else nan_bits
        out.view(uint)[nan] = pattern
    return out
