"""Binary floating-point formats and exact rounding to them.

A :class:`Format` is described by its precision ``p`` (significand bits, implicit bit included),
its minimum normal exponent ``emin`` and maximum exponent ``emax`` (IEEE 754-2019, section 3.3).
Rounding functions take float64 numpy arrays and return float64 arrays holding values exactly
representable in the target format, so they never depend on a library's own cast.

Why not cast with numpy, torch, jax or ml_dtypes? Several library casts from float64 to a narrow
format round twice (through float32): ml_dtypes for every narrow type, torch and jax for bf16 and
fp16 (fpscope NUMERICS.md, "Conversions in common libraries"). A value that is already exactly
representable converts exactly under any cast, so the targets check representability with
:func:`is_representable` and cast afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ROUNDING_MODES = ("RNE", "RZ", "RNA", "RD", "RU")


@dataclass(frozen=True)
class Format:
    """A binary floating-point format with subnormals.

    Attributes:
        name: short name used on the command line and in records ("fp32", "bf16", ...).
        p: precision in bits, implicit leading bit included (fp32: 24).
        emin: exponent of the smallest normal number (fp32: -126).
        emax: exponent of the largest finite number (fp32: 127).
    """

    name: str
    p: int
    emin: int
    emax: int

    @property
    def max_finite(self) -> float:
        """Largest finite value, (2 - 2^(1-p)) * 2^emax."""
        return float(np.ldexp(2.0 - np.ldexp(1.0, 1 - self.p), self.emax))

    @property
    def min_normal(self) -> float:
        return float(np.ldexp(1.0, self.emin))

    @property
    def min_subnormal(self) -> float:
        return float(np.ldexp(1.0, self.emin - self.p + 1))

    def ulp(self, x: float) -> float:
        """Unit in the last place of |x| (the spacing at x), in the format's own terms."""
        x = abs(float(x))
        if x < self.min_normal:
            return self.min_subnormal
        e = int(np.frexp(x)[1]) - 1
        return float(np.ldexp(1.0, e - self.p + 1))

    def exact_integer_limit(self) -> int:
        """Largest N such that every integer 0..N is exactly representable: 2^p."""
        return 1 << self.p

    def numpy_dtype(self):
        """The numpy (or ml_dtypes) storage dtype of this format."""
        if self.name == "fp64":
            return np.dtype(np.float64)
        if self.name == "fp32":
            return np.dtype(np.float32)
        if self.name == "fp16":
            return np.dtype(np.float16)
        if self.name == "bf16":
            import ml_dtypes

            return np.dtype(ml_dtypes.bfloat16)
        raise ValueError(f"format {self.name} has no numpy storage dtype here")


FP64 = Format("fp64", 53, -1022, 1023)
FP32 = Format("fp32", 24, -126, 127)
FP16 = Format("fp16", 11, -14, 15)
BF16 = Format("bf16", 8, -126, 127)

FORMATS = {f.name: f for f in (FP64, FP32, FP16, BF16)}
_ALIASES = {
    "float64": "fp64", "double": "fp64", "f64": "fp64",
    "float32": "fp32", "single": "fp32", "f32": "fp32",
    "float16": "fp16", "half": "fp16", "f16": "fp16",
    "bfloat16": "bf16",
}


def get_format(name: str) -> Format:
    """Look up a format by name or common alias ("float32", "half", "bfloat16").

    Raises:
        ValueError: unknown name (the message lists the known ones).
    """
    key = _ALIASES.get(str(name).lower(), str(name).lower())
    if key not in FORMATS:
        raise ValueError(f"unknown format {name!r}; known: {', '.join(FORMATS)}")
    return FORMATS[key]


def format_of_dtype(dtype) -> Format:
    """The :class:`Format` of a numpy / ml_dtypes / torch / jax dtype (by its name)."""
    name = str(dtype).replace("torch.", "")
    return get_format(name)


def round_to_format(x, fmt: Format, mode: str = "RNE") -> np.ndarray:
    """Round float64 values to ``fmt`` in one step, exactly.

    Args:
        x: array-like of float64 values (any shape).
        fmt: target format; its precision must not exceed 53 bits.
        mode: "RNE" (nearest, ties to even), "RNA" (nearest, ties away), "RZ" (toward zero),
            "RD" (toward -inf), "RU" (toward +inf).

    Returns:
        float64 array of the same shape; each value is exactly representable in ``fmt``.
        Overflow follows IEEE 754-2019 section 7.4: RNE/RNA give +-Inf; directed modes give
        +-Inf or the largest finite value depending on direction. NaN and Inf pass through.

    Raises:
        ValueError: unknown mode.
    """
    if mode not in ROUNDING_MODES:
        raise ValueError(f"unknown rounding mode {mode!r}; known: {', '.join(ROUNDING_MODES)}")
    x = np.asarray(x, dtype=np.float64)
    if fmt.p >= 53 and fmt.emin <= -1022:
        return x.copy()
    finite = np.isfinite(x)
    xf = np.where(finite, x, 0.0)
    _, e = np.frexp(xf)  # xf = m * 2^e, m in [0.5, 1)
    # exponent of the last kept bit: (e - 1) - (p - 1) for normals, emin - (p - 1) below
    q = np.maximum(e - fmt.p, fmt.emin - fmt.p + 1)
    scaled = np.ldexp(xf, -q)  # exact: a power-of-two scaling inside float64 range
    if mode == "RNE":
        r = np.rint(scaled)
    elif mode == "RZ":
        r = np.trunc(scaled)
    elif mode == "RD":
        r = np.floor(scaled)
    elif mode == "RU":
        r = np.ceil(scaled)
    else:  # RNA: |scaled| < 2^p + 1 so adding one half is exact
        r = np.sign(scaled) * np.floor(np.abs(scaled) + 0.5)
    with np.errstate(over="ignore"):
        out = np.ldexp(r, q)
    big = np.abs(out) > fmt.max_finite
    if big.any():
        mf = fmt.max_finite
        if mode in ("RNE", "RNA"):
            ov = np.copysign(np.inf, out)
        elif mode == "RZ":
            ov = np.copysign(mf, out)
        elif mode == "RD":
            ov = np.where(out > 0, mf, -np.inf)
        else:
            ov = np.where(out > 0, np.inf, -mf)
        out = np.where(big, ov, out)
    out = np.where(finite, out, x)
    # keep the sign of zero results
    return np.where(out == 0, np.copysign(0.0, x), out)


def is_representable(x, fmt: Format) -> np.ndarray:
    """Elementwise: is each float64 value exactly representable in ``fmt`` (NaN and +-Inf count)."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        return (round_to_format(x, fmt, "RNE") == x) | ~np.isfinite(x)


def to_storage(x, fmt: Format) -> np.ndarray:
    """Convert float64 values that are exactly representable in ``fmt`` to its storage dtype.

    Raises:
        ValueError: some value is not exactly representable (it is never silently re-rounded);
            the message gives the first offending value.
    """
    x = np.asarray(x, dtype=np.float64)
    ok = is_representable(x, fmt)
    if not ok.all():
        bad = x[~ok].flat[0]
        raise ValueError(f"value {bad!r} is not exactly representable in {fmt.name}")
    return x.astype(fmt.numpy_dtype())
