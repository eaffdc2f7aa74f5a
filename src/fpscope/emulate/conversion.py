"""Operand conversion: fp32 operands reduced to a tf32, bf16 or fp16 input format.

``Profile.operand_conversion`` names how an fp32 operand reaches the instruction
(NUMERICS.md section 2, "TF32 operand conversion"):

* "truncate": toward zero (RZ). For tf32 and bf16 (fp32's exponent field, fewer fraction bits)
  this is reading the fp32 word without its low fraction bits, as mmasim
  (``helper.truncate_fp32_to_tf32``) and a tensor core reading the top 19 bits of a register
  do; a float32 signalling NaN whose payload lies only in the dropped bits then reads as +-Inf.
* "RNA": to nearest, ties away from zero: what cuBLAS's TF32 path does as its users report it
  (``torch.matmul`` of fp32 1024.5 by 1.0 gives 1025 on an RTX 3090 with TF32 on,
  pytorch/pytorch issue 53635; truncation and RNE both give 1024). CUTLASS's
  ``round_half_ulp_truncate`` and PTX ``cvt.rna.tf32.f32`` round so.
* "RNE": to nearest, ties to even (e.g. hipBLASLt's XF32 path rounds so).

Every conversion is one exact rounding (:func:`fpscope.formats.round_to_format`), never a
library cast. Overflow gives +-Inf under "RNA" and "RNE" and the largest finite value under
"truncate" (IEEE 754-2019 section 7.4); NaN stays NaN (its payload does not reach the output:
NaN outputs are ``Profile.nan_bits``); Inf stays Inf; -0 stays -0; fp32 subnormals round to the
format's subnormals or zero (the profile's ``flush_inputs`` then applies as to any operand).
"""

from __future__ import annotations

import numpy as np

from ..formats import Format

__all__ = ["ROUNDING", "convert", "convert_scalar"]

#: operand_conversion -> the rounding mode of :func:`fpscope.formats.round_to_format`.
ROUNDING = {"truncate": "RZ", "RNA": "RNA", "RNE": "RNE"}


def convert(x: np.ndarray, fmt: Format, conversion: str, raw=None) -> np.ndarray:
    """fp32 values ``x`` converted to ``fmt`` by ``conversion``.

    Args:
        x: float64 array of fp32 values (checked by the caller), any shape.
        fmt: the input format (tf32, bf16 or fp16).
        conversion: "truncate", "RNA" or "RNE" (:data:`ROUNDING`).
        raw: the operand as the caller passed it (same shape as x) or None: where it is a
            float32 array, "truncate" reads its words (signalling NaNs, module docstring).

    Returns:
        float64 array of x's shape, values of ``fmt`` (or NaN).

    Raises:
        ValueError: an unknown conversion.
    """
    from ..formats import round_to_format

    if conversion not in ROUNDING:
        raise ValueError(f"unknown operand_conversion {conversion!r}; known: "
                         f"{', '.join(ROUNDING)}")
    v = round_to_format(np.asarray(x, dtype=np.float64), fmt, ROUNDING[conversion])
    if conversion == "truncate" and raw is not None:
        v = _truncated_nans(raw, v, fmt)
    return v


def convert_scalar(x, fmt: Format, conversion: str) -> float:
    """One operand (a float, or a numpy float32 scalar read as its word) as :func:`convert`."""
    raw = np.asarray(x)
    with np.errstate(invalid="ignore"):
        v = convert(raw.astype(np.float64), fmt, conversion, raw)
    return float(v)


def _truncated_nans(raw, x: np.ndarray, fmt: Format) -> np.ndarray:
    """``x`` with +-Inf where the float32 operands ``raw`` are signalling NaNs whose payload lies
    only in the fraction bits that truncation to ``fmt`` drops (tf32: 13, bf16: 16). Formats
    with another exponent field (fp16) are not a truncated fp32 word; operands of other dtypes
    carry no such NaN (float32 -> float64 sets the quiet bit)."""
    raw = np.asarray(raw)
    if raw.dtype != np.float32 or fmt.exponent_bits != 8 or not fmt.subnormals:
        return x
    drop = 23 - fmt.mantissa_bits
    low = np.uint32((1 << drop) - 1)
    w = raw.view(np.uint32)
    hit = ((w & np.uint32(0x7FFFFFFF) & ~low) == np.uint32(0x7F800000)) & ((w & low) != 0)
    if not hit.any():
        return x
    return np.where(hit, np.where(w >> 31 != 0, -np.inf, np.inf), x)
