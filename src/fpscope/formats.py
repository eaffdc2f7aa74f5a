"""Binary floating-point formats: exact rounding, bit-level encode and decode (the latter in
:mod:`fpscope.bitpatterns`, re-exported here).

A :class:`Format` is described by its precision ``p`` (significand bits, implicit bit included),
its minimum normal exponent ``emin`` and maximum exponent ``emax`` (IEEE 754-2019, section 3.3),
plus, for the narrow machine-learning formats, how its bit patterns encode special values.
Rounding functions take float64 numpy arrays and return float64 arrays holding values exactly
representable in the target format, so they never depend on a library's own cast.

Why not cast with numpy, torch, jax or ml_dtypes? Several library casts from float64 to a narrow
format round twice (through float32): ml_dtypes for every narrow type, torch and jax for bf16 and
fp16 (fpscope NUMERICS.md, "Conversions in common libraries"). Libraries also disagree on overflow
(torch saturates fp32 -> e4m3fn overflow to 448, ml_dtypes and jax give NaN). A value that is
already exactly representable converts exactly under any cast, so the targets check
representability with :func:`is_representable` and cast afterwards (:func:`to_storage`).

The formats (value = (-1)^S * 2^(E - bias) * 1.M for normals, (-1)^S * 2^emin * 0.M for
subnormals; "S.E.M" gives the sign, exponent and trailing-significand field widths)::

    name          S.E.M    bias  p   emin  emax  max_finite         Inf  NaN patterns         -0   overflow
    fp64          1.11.52  1023  53 -1022  1023  (2-2^-52)*2^1023   yes  E=all 1s, M!=0       yes  inf
    fp32          1.8.23    127  24  -126   127  (2-2^-23)*2^127    yes  E=all 1s, M!=0       yes  inf
    tf32          1.8.10    127  11  -126   127  (2-2^-10)*2^127    yes  E=all 1s, M!=0       yes  inf
    fp16          1.5.10     15  11   -14    15  65504              yes  E=all 1s, M!=0       yes  inf
    bf16          1.8.7     127   8  -126   127  (2-2^-7)*2^127     yes  E=all 1s, M!=0       yes  inf
    fp8_e4m3fn    1.4.3       7   4    -6     8  448                no   S.1111.111 (2)       yes  nan
    fp8_e5m2      1.5.2      15   3   -14    15  57344              yes  E=11111, M!=0 (6)    yes  inf
    fp8_e4m3fnuz  1.4.3       8   4    -7     7  240                no   0x80 only            no   nan
    fp8_e5m2fnuz  1.5.2      16   3   -15    15  57344              no   0x80 only            no   nan
    fp6_e2m3      1.2.3       1   4     0     2  7.5                no   none                 yes  saturate
    fp6_e3m2      1.3.2       3   3    -2     4  28                 no   none                 yes  saturate
    fp4_e2m1      1.2.1       1   2     0     2  6                  no   none                 yes  saturate
    e8m0          0.8.0     127   1  -127   127  2^127              no   0xFF only            -    nan
    ue4m3         0.4.3       7   4    -6     8  448                no   0x7F only            -    nan

Sources:

* fp64, fp32, fp16: IEEE 754-2019, table 3.5 (binary64, binary32, binary16).
* bf16: IEEE-style layout with binary32's exponent field; ml_dtypes ``bfloat16``.
* tf32: NVIDIA "TensorFloat-32" (A100 whitepaper; cuBLAS / CUDA docs): 8 exponent bits, 10 fraction
  bits, the range of fp32, stored in 32-bit fp32 containers (``numpy_dtype()`` is float32).
* fp8_e4m3fn, fp8_e5m2: OCP 8-bit Floating Point Specification (OFP8) rev 1.0: E4M3 has no
  infinities and only S.1111.111 is NaN, so its largest value is 1.75 * 2^8 = 448; E5M2 follows
  IEEE 754 conventions. ml_dtypes ``float8_e4m3fn``, ``float8_e5m2``.
* fp8_e4m3fnuz, fp8_e5m2fnuz: ml_dtypes ``float8_e4m3fnuz``, ``float8_e5m2fnuz`` (Graphcore/AMD
  layout used by AMD CDNA3): bias one larger than OCP's, no infinities, no negative zero, and the
  single NaN is the negative-zero pattern 0x80.
* fp6_e2m3, fp6_e3m2, fp4_e2m1: OCP Microscaling Formats (MX) Specification v1.0, element data
  types: no Inf, no NaN, signed zeros, subnormals. ml_dtypes ``float6_e2m3fn``,
  ``float6_e3m2fn``, ``float4_e2m1fn`` (stored one value per byte, in the low bits).
* e8m0: OCP MX v1.0, scale data type E8M0: 8 exponent bits, no sign, no significand,
  bias 127, values 2^-127 .. 2^127, 0xFF is NaN, no zero. ml_dtypes ``float8_e8m0fnu``.
* ue4m3: the NVFP4 block-scale type (PTX ISA ``.ue4m3``, the scale of
  ``kind::mxf4nvf4 ... .block16``): OFP8 E4M3 without its sign bit, i.e. the non-negative
  fp8_e4m3fn values (zero and subnormals included, max 448) in 7 bits, 0x7F is NaN. mmasim reads
  such a scale from a float8_e4m3fn byte with the sign bit cleared
  (``arithmetic/helper.py: truncate_e4m3_to_ue4m3``). No ml_dtypes dtype: no storage dtype here.

Overflow policies (:data:`OVERFLOW_POLICIES`), following the OFP8 rev 1.0 conversion rules
("non-saturating" versus "saturating" mode) extended to the directed rounding modes with
IEEE 754-2019 section 7.4:

* ``"inf"``: IEEE 754 overflow: RNE and RNA give +-Inf; RZ gives +-max_finite; RU gives +Inf or
  -max_finite; RD gives +max_finite or -Inf. Infinite inputs stay infinite. Only for formats
  with infinities.
* ``"nan"``: as ``"inf"`` with every Inf result replaced by NaN (OFP8's non-saturating mode for
  E4M3; ml_dtypes does this for e4m3fn, the fnuz formats and e8m0, and jax for e4m3fn per
  NUMERICS.md). Infinite inputs give NaN.
* ``"saturate"``: every overflow and every infinite input gives +-max_finite (OFP8's saturating
  mode; OCP MX for FP6/FP4, which cannot encode anything else; torch's fp32 -> e4m3fn cast).

Each format has a default policy (:attr:`Format.overflow`): ``"inf"`` where the format has
infinities, ``"nan"`` where it has a NaN but no Inf (the OFP8 non-saturating default; what
ml_dtypes does), ``"saturate"`` for the MX FP6/FP4 element formats (what ml_dtypes does).

Where fpscope and ml_dtypes 0.6 differ (the tests pin the rest, bit for bit, on float32 inputs):
ml_dtypes' float64 casts round twice (through float32); it turns NaN into -0 for fp6/fp4 (fpscope
returns NaN and refuses to encode or store it); and it rounds float32 subnormals in
(2^-127, 2^-126) up to 2^-126 in e8m0, also those nearer 2^-127 (fpscope rounds to nearest).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np

from .bitpatterns import decode, encode  # the bit-level half of this layer

__all__ = [
    "ROUNDING_MODES", "OVERFLOW_POLICIES", "SPECIALS", "Format", "FP64", "FP32", "FP16", "BF16",
    "TF32", "FP8_E4M3FN", "FP8_E5M2", "FP8_E4M3FNUZ", "FP8_E5M2FNUZ", "FP6_E2M3", "FP6_E3M2",
    "FP4_E2M1", "E8M0", "UE4M3", "FORMATS", "ALL_FORMATS", "get_format", "format_of_dtype",
    "round_to_format", "is_representable", "to_storage", "sum_round_to_odd", "encode", "decode",
]

ROUNDING_MODES = ("RNE", "RZ", "RNA", "RD", "RU")

#: Overflow policies of :func:`round_to_format` (see the module docstring).
OVERFLOW_POLICIES = ("inf", "saturate", "nan")

#: Special-value conventions of :attr:`Format.specials`.
SPECIALS = ("ieee", "fn", "fnuz", "none")


def _check_policy(fmt: "Format", policy: str) -> None:
    if policy not in OVERFLOW_POLICIES:
        raise ValueError(f"unknown overflow policy {policy!r}; known: {', '.join(OVERFLOW_POLICIES)}")
    if policy == "inf" and not fmt.has_inf:
        raise ValueError(f"{fmt.name} has no infinities: overflow must be 'nan' or 'saturate'")
    if policy == "nan" and not fmt.has_nan:
        raise ValueError(f"{fmt.name} has no NaN: overflow must be 'saturate'")


@dataclass(frozen=True)
class Format:
    """A binary floating-point format.

    ``Format(name, p, emin, emax)`` is an IEEE 754-style format (signed zeros, subnormals,
    infinities and NaNs with an all-ones exponent field, bias ``1 - emin``). The keyword fields
    describe the narrow formats whose special values differ.

    Attributes:
        name: short name used on the command line and in records ("fp32", "bf16", ...).
        p: precision in bits, implicit leading bit included (fp32: 24).
        emin: exponent of the smallest normal number (fp32: -126).
        emax: exponent of the largest finite number (fp32: 127; e4m3fn: 8, whose largest value
            is 1.75 * 2^8 = 448 because S.1111.111 is NaN).
        bits: storage width in bits (sign + exponent + p - 1). Default: the IEEE width
            (smallest exponent field that holds ``emax + bias`` plus the all-ones code).
        exponent_bias: exponent bias. Default ``1 - emin`` (``-emin`` without subnormals).
        specials: "ieee" (Inf and NaN use the all-ones exponent), "fn" (finite + NaN: no Inf,
            the all-ones pattern apart from the sign is NaN: OFP8 E4M3, e8m0), "fnuz" (finite,
            NaN, unsigned zero: no Inf, no -0, NaN is the pattern 100...0), "none" (finite only:
            OCP MX FP6/FP4).
        signed: False for unsigned formats (e8m0, ue4m3): negative inputs round to NaN; -0
            rounds to +0 where the format has a zero (ue4m3) and to NaN where it has none.
        subnormals: False where the all-zero exponent field is an ordinary binade (e8m0): the
            format then has neither subnormals nor zero.
        overflow: default overflow policy of :func:`round_to_format` (one of
            :data:`OVERFLOW_POLICIES`); default "inf" for "ieee", "nan" for "fn"/"fnuz",
            "saturate" for "none".
    """

    name: str
    p: int
    emin: int
    emax: int
    bits: int | None = None
    exponent_bias: int | None = None
    specials: str = "ieee"
    signed: bool = True
    subnormals: bool = True
    overflow: str | None = None

    def __post_init__(self):
        if self.specials not in SPECIALS:
            raise ValueError(f"unknown specials {self.specials!r}; known: {', '.join(SPECIALS)}")
        if self.p < 1:
            raise ValueError("precision p must be at least 1")
        if self.exponent_bias is None:
            object.__setattr__(self, "exponent_bias", (1 if self.subnormals else 0) - self.emin)
        if self.bits is None:
            top = self.emax + self.exponent_bias
            if self.specials == "ieee" or (self.specials == "fn" and self.p == 1):
                top += 1  # the all-ones exponent code holds only specials
            object.__setattr__(self, "bits", int(self.signed) + max(top, 1).bit_length() + self.p - 1)
        if self.overflow is None:
            default = {"ieee": "inf", "fn": "nan", "fnuz": "nan", "none": "saturate"}[self.specials]
            object.__setattr__(self, "overflow", default)
        _check_policy(self, self.overflow)

    # -- special values -------------------------------------------------------------------

    @property
    def has_inf(self) -> bool:
        """Whether the format encodes +-Inf."""
        return self.specials == "ieee"

    @property
    def has_nan(self) -> bool:
        """Whether the format encodes a NaN."""
        return self.specials != "none"

    @property
    def has_zero(self) -> bool:
        """Whether the format encodes zero (e8m0 does not)."""
        return self.subnormals

    @property
    def has_negative_zero(self) -> bool:
        """Whether -0 is distinct from +0 (False for fnuz formats, e8m0)."""
        return self.signed and self.subnormals and self.specials != "fnuz"

    # -- bit layout -----------------------------------------------------------------------

    @property
    def mantissa_bits(self) -> int:
        """Width of the trailing significand field, ``p - 1``."""
        return self.p - 1

    @property
    def exponent_bits(self) -> int:
        """Width of the exponent field."""
        return self.bits - int(self.signed) - self.mantissa_bits

    # -- values ---------------------------------------------------------------------------

    @property
    def max_finite(self) -> float:
        """Largest finite value: (2 - 2^(1-p)) * 2^emax, or (2 - 2^(2-p)) * 2^emax when the top
        binade's largest pattern is NaN (OFP8 E4M3: 448)."""
        m = self.mantissa_bits
        if self.specials == "fn" and m > 0 and self.emax + self.exponent_bias == (1 << self.exponent_bits) - 1:
            return float(np.ldexp(2.0 - np.ldexp(1.0, 1 - m), self.emax))
        return float(np.ldexp(2.0 - np.ldexp(1.0, 1 - self.p), self.emax))

    @property
    def min_normal(self) -> float:
        return float(np.ldexp(1.0, self.emin))

    @property
    def min_subnormal(self) -> float:
        """Smallest positive value (equal to ``min_normal`` for p = 1 and for e8m0)."""
        if not self.subnormals:
            return self.min_normal
        return float(np.ldexp(1.0, self.emin - self.p + 1))

    def ulp(self, x: float) -> float:
        """Unit in the last place of |x| (the spacing at x), in the format's own terms."""
        x = abs(float(x))
        if x < self.min_normal:
            return self.min_subnormal
        e = int(np.frexp(x)[1]) - 1
        return float(np.ldexp(1.0, e - self.p + 1))

    def exact_integer_limit(self) -> int:
        """Largest N such that every integer 0..N is exactly representable: 2^p (e8m0 has no 0)."""
        return 1 << self.p

    def numpy_dtype(self):
        """The numpy (or ml_dtypes) storage dtype of this format (tf32: float32).

        Raises:
            ValueError: no storage dtype (custom formats; a narrow type missing from the
                installed ml_dtypes).
        """
        spec = _STORAGE.get(self)
        if spec is None:
            raise ValueError(f"format {self.name} has no numpy storage dtype here")
        if spec.startswith("ml_dtypes."):
            import ml_dtypes

            t = getattr(ml_dtypes, spec.split(".", 1)[1], None)
            if t is None:
                raise ValueError(
                    f"format {self.name} needs {spec}, which the installed ml_dtypes "
                    f"{getattr(ml_dtypes, '__version__', '?')} lacks"
                )
            return np.dtype(t)
        return np.dtype(spec)


# -- the formats ----------------------------------------------------------------------------

FP64 = Format("fp64", 53, -1022, 1023)
FP32 = Format("fp32", 24, -126, 127)
FP16 = Format("fp16", 11, -14, 15)
BF16 = Format("bf16", 8, -126, 127)
#: NVIDIA TensorFloat-32: fp32's exponent, 10 fraction bits (19 bits used of a 32-bit container).
TF32 = Format("tf32", 11, -126, 127)
#: OCP OFP8 E4M3: no Inf; S.1111.111 is NaN; max 448; default overflow NaN (non-saturating).
FP8_E4M3FN = Format("fp8_e4m3fn", 4, -6, 8, bits=8, exponent_bias=7, specials="fn")
#: OCP OFP8 E5M2: IEEE-style; max 57344.
FP8_E5M2 = Format("fp8_e5m2", 3, -14, 15, bits=8, exponent_bias=15)
#: E4M3 "fnuz" (ml_dtypes float8_e4m3fnuz): bias 8, no Inf, no -0, NaN = 0x80; max 240.
FP8_E4M3FNUZ = Format("fp8_e4m3fnuz", 4, -7, 7, bits=8, exponent_bias=8, specials="fnuz")
#: E5M2 "fnuz" (ml_dtypes float8_e5m2fnuz): bias 16, no Inf, no -0, NaN = 0x80; max 57344.
FP8_E5M2FNUZ = Format("fp8_e5m2fnuz", 3, -15, 15, bits=8, exponent_bias=16, specials="fnuz")
#: OCP MX FP6 E2M3: no Inf/NaN; max 7.5; overflow saturates.
FP6_E2M3 = Format("fp6_e2m3", 4, 0, 2, bits=6, exponent_bias=1, specials="none")
#: OCP MX FP6 E3M2: no Inf/NaN; max 28; overflow saturates.
FP6_E3M2 = Format("fp6_e3m2", 3, -2, 4, bits=6, exponent_bias=3, specials="none")
#: OCP MX FP4 E2M1: no Inf/NaN; values 0, 0.5, 1, 1.5, 2, 3, 4, 6; overflow saturates.
FP4_E2M1 = Format("fp4_e2m1", 2, 0, 2, bits=4, exponent_bias=1, specials="none")
#: OCP MX E8M0 scale: unsigned powers of two 2^-127 .. 2^127; 0xFF is NaN; no zero.
E8M0 = Format("e8m0", 1, -127, 127, bits=8, exponent_bias=127, specials="fn", signed=False,
              subnormals=False)
#: NVFP4 block scale (PTX .ue4m3): unsigned E4M3, 0 .. 448 with subnormals; 0x7F is NaN.
UE4M3 = Format("ue4m3", 4, -6, 8, bits=7, exponent_bias=7, specials="fn", signed=False)

#: The standard IEEE-style formats, by name. Code maps precisions to these names (the
#: accumulator probe), so this dict stays fp64/fp32/fp16/bf16; see :data:`ALL_FORMATS`.
FORMATS = {f.name: f for f in (FP64, FP32, FP16, BF16)}

#: Every named format, by canonical name (what :func:`get_format` accepts besides aliases).
ALL_FORMATS = {
    f.name: f
    for f in (FP64, FP32, TF32, FP16, BF16, FP8_E4M3FN, FP8_E5M2, FP8_E4M3FNUZ, FP8_E5M2FNUZ,
              FP6_E2M3, FP6_E3M2, FP4_E2M1, E8M0, UE4M3)
}

_STORAGE = {
    FP64: "float64", FP32: "float32", TF32: "float32", FP16: "float16",
    BF16: "ml_dtypes.bfloat16",
    FP8_E4M3FN: "ml_dtypes.float8_e4m3fn", FP8_E5M2: "ml_dtypes.float8_e5m2",
    FP8_E4M3FNUZ: "ml_dtypes.float8_e4m3fnuz", FP8_E5M2FNUZ: "ml_dtypes.float8_e5m2fnuz",
    FP6_E2M3: "ml_dtypes.float6_e2m3fn", FP6_E3M2: "ml_dtypes.float6_e3m2fn",
    FP4_E2M1: "ml_dtypes.float4_e2m1fn", E8M0: "ml_dtypes.float8_e8m0fnu",
}

# Aliases: numpy / ml_dtypes / torch / jax dtype names and common spellings. Deliberately absent
# (ambiguous): "fp8", "fp6", "fp4", "e4m3" / "fp8_e4m3" / "float8_e4m3" (ml_dtypes' float8_e4m3
# is an IEEE-style E4M3 with Inf, max 240, not OCP's e4m3fn), and the block formats "mxfp8",
# "mxfp6", "mxfp4", "nvfp4" (an element format plus a scale, not one format).
_ALIASES = {
    "float64": "fp64", "double": "fp64", "f64": "fp64",
    "float32": "fp32", "single": "fp32", "f32": "fp32",
    "float16": "fp16", "half": "fp16", "f16": "fp16",
    "bfloat16": "bf16",
    "tensorfloat32": "tf32",
    "e4m3fn": "fp8_e4m3fn", "float8_e4m3fn": "fp8_e4m3fn",
    "e5m2": "fp8_e5m2", "float8_e5m2": "fp8_e5m2",
    "e4m3fnuz": "fp8_e4m3fnuz", "float8_e4m3fnuz": "fp8_e4m3fnuz",
    "e5m2fnuz": "fp8_e5m2fnuz", "float8_e5m2fnuz": "fp8_e5m2fnuz",
    "e2m3": "fp6_e2m3", "e2m3fn": "fp6_e2m3", "fp6_e2m3fn": "fp6_e2m3", "float6_e2m3fn": "fp6_e2m3",
    "e3m2": "fp6_e3m2", "e3m2fn": "fp6_e3m2", "fp6_e3m2fn": "fp6_e3m2", "float6_e3m2fn": "fp6_e3m2",
    "e2m1": "fp4_e2m1", "e2m1fn": "fp4_e2m1", "fp4_e2m1fn": "fp4_e2m1", "float4_e2m1fn": "fp4_e2m1",
    "e8m0fnu": "e8m0", "fp8_e8m0": "e8m0", "fp8_e8m0fnu": "e8m0", "float8_e8m0fnu": "e8m0",
}
_AMBIGUOUS = {
    "e4m3": "OCP's E4M3 is 'fp8_e4m3fn' (AMD's is 'fp8_e4m3fnuz')",
    "fp8_e4m3": "OCP's E4M3 is 'fp8_e4m3fn' (AMD's is 'fp8_e4m3fnuz')",
    "float8_e4m3": "ml_dtypes' IEEE-style float8_e4m3 is not supported; OCP's E4M3 is 'fp8_e4m3fn'",
    "mxfp8": "a block format: elements 'fp8_e4m3fn' or 'fp8_e5m2', scale 'e8m0'",
    "mxfp6": "a block format: elements 'fp6_e2m3' or 'fp6_e3m2', scale 'e8m0'",
    "mxfp4": "a block format: elements 'fp4_e2m1', scale 'e8m0'",
    "nvfp4": "a block format: elements 'fp4_e2m1', scale 'ue4m3'",
}


def get_format(name: str) -> Format:
    """Look up a format by name or alias.

    Canonical names: the keys of :data:`ALL_FORMATS` (fp64, fp32, tf32, fp16, bf16, fp8_e4m3fn,
    fp8_e5m2, fp8_e4m3fnuz, fp8_e5m2fnuz, fp6_e2m3, fp6_e3m2, fp4_e2m1, e8m0, ue4m3). Aliases
    (case-insensitive): float64/double/f64, float32/single/f32, float16/half/f16, bfloat16,
    tensorfloat32, the ml_dtypes / torch / jax dtype names (float8_e4m3fn, float8_e5m2,
    float8_e4m3fnuz, float8_e5m2fnuz, float6_e2m3fn, float6_e3m2fn, float4_e2m1fn,
    float8_e8m0fnu) and the short forms e4m3fn, e5m2, e4m3fnuz, e5m2fnuz, e2m3, e3m2, e2m1,
    e8m0fnu. Ambiguous names ("fp8", "e4m3", "mxfp4", ...) are refused.

    Raises:
        ValueError: unknown or ambiguous name (the message lists the known ones).
    """
    key = str(name).lower()
    key = _ALIASES.get(key, key)
    if key not in ALL_FORMATS:
        hint = f" ({_AMBIGUOUS[key]})" if key in _AMBIGUOUS else ""
        raise ValueError(f"unknown format {name!r}{hint}; known: {', '.join(ALL_FORMATS)}")
    return ALL_FORMATS[key]


def format_of_dtype(dtype) -> Format:
    """The :class:`Format` of a numpy / ml_dtypes / torch / jax dtype (by its name)."""
    name = str(dtype).replace("torch.", "")
    return get_format(name)


# -- rounding -------------------------------------------------------------------------------


#: round_to_format and is_representable take their numba fast paths (:mod:`._formats_jit`) from
#: this many values up; below it, numba's import and cache load would cost more than they save.
_JIT_FROM = 1 << 18

#: ... and from this many values even when numba is not loaded yet: loading it (and its cached
#: machine code) takes 1-4 s here, more than the numpy paths take below this size.
_JIT_LOAD_FROM = 1 << 23


def _jit_worth(size: int) -> bool:
    """Whether an array of ``size`` values takes a numba fast path: at least ``_JIT_FROM``
    values and numba loaded already (the emulator loads it), or ``_JIT_LOAD_FROM`` values."""
    return size >= _JIT_FROM and ("numba" in sys.modules or size >= _JIT_LOAD_FROM)


def _round_integer(s: np.ndarray, mode: str) -> np.ndarray:
    """Round float64 values to integers (exactly) in ``mode``."""
    if mode == "RNE":
        return np.rint(s)
    if mode == "RZ":
        return np.trunc(s)
    if mode == "RD":
        return np.floor(s)
    if mode == "RU":
        return np.ceil(s)
    a = np.abs(s)  # RNA; a - floor(a) is exact, unlike a + 0.5 near 2^53
    t = np.floor(a)
    return np.copysign(t + (a - t >= 0.5), s)


def round_to_format(x, fmt: Format, mode: str = "RNE", overflow: str | None = None,
                    flush_subnormals: bool = False) -> np.ndarray:
    """Round float64 values to ``fmt`` in one step, exactly.

    The inputs are float64 values and are taken as exact; a value with more precision than
    float64 cannot be passed (round it yourself only if one rounding to float64 first is what
    you mean). The result is the float64 holding the correctly rounded value, so converting it
    to the format's storage type is exact.

    Args:
        x: array-like of float64 values (any shape).
        fmt: target format; its precision must not exceed 53 bits and its range must lie inside
            float64's.
        mode: "RNE" (nearest, ties to even), "RNA" (nearest, ties away), "RZ" (toward zero),
            "RD" (toward -inf), "RU" (toward +inf). For p = 1 (e8m0) a tie between 2^k and
            2^(k+1) goes to 2^(k+1) under RNE (the even integer significand at scale 2^k; what
            ml_dtypes does).
        overflow: "inf", "nan" or "saturate" (module docstring); None = ``fmt.overflow`` (the
            format's default: Inf for IEEE-style formats and e5m2, NaN for e4m3fn, the fnuz
            formats and e8m0, saturation for fp6/fp4). Overflow means the value rounded with an
            unbounded exponent range exceeds ``fmt.max_finite`` (IEEE 754-2019 section 7.4); so
            464 rounds to 448 in e4m3fn under RNE (a tie with the unencodable 480, which is odd)
            and 465 overflows.
        flush_subnormals: replace results below the smallest normal by a zero of the same sign.
            Tininess is detected after rounding (IEEE 754-2019 section 7.5): the value is rounded
            to p bits as if the exponent range were unbounded below, and a nonzero result
            smaller than ``fmt.min_normal`` becomes zero. No effect on e8m0.

    Arrays of at least ``_JIT_FROM`` values take a numba fast path for their regular values
    (``_formats_jit.round_regular``: finite, in the normal range, no overflow), bit for bit the
    result of the exact path (tests/test_formats.py compares them), where numba is loaded
    already or the array has ``_JIT_LOAD_FROM`` values (:func:`_jit_worth`).

    Returns:
        float64 array of the same shape; each value is exactly representable in ``fmt``, or NaN.
        NaN inputs give NaN (also for fp6/fp4, which cannot encode it: :func:`encode` and
        :func:`to_storage` refuse it). Infinite inputs stay infinite under "inf", give NaN
        under "nan" and +-max_finite under "saturate". Zero results keep the sign of ``x``,
        except in formats without -0 (fnuz, ue4m3: +0). e8m0: zero, negative values and -Inf
        give NaN; positive values below 2^-127 give 2^-127 in every mode (there is no zero to
        round to). ue4m3: negative values and -Inf give NaN, -0 gives +0.

    Raises:
        ValueError: unknown mode or policy, or a policy the format cannot express ("inf"
            without infinities, "nan" without NaN).
    """
    if mode not in ROUNDING_MODES:
        raise ValueError(f"unknown rounding mode {mode!r}; known: {', '.join(ROUNDING_MODES)}")
    policy = fmt.overflow if overflow is None else overflow
    _check_policy(fmt, policy)
    x = np.asarray(x, dtype=np.float64)
    if _jit_worth(x.size) and fmt.signed and fmt.subnormals and 2 <= fmt.p <= 52:
        # fast path (numba): the regular values on their bits, the rest exactly below
        from ._formats_jit import round_regular

        flat = np.ascontiguousarray(x).ravel()
        out = np.empty(flat.shape)
        handled = np.empty(flat.shape, np.bool_)
        round_regular(flat, fmt.p, fmt.emin, fmt.max_finite, ROUNDING_MODES.index(mode),
                      fmt.has_negative_zero, out, handled)
        if not handled.all():
            rest = ~handled
            out[rest] = _round_exact(flat[rest], fmt, mode, policy, flush_subnormals)
        return out.reshape(x.shape)
    if (mode == "RNE" and policy == "inf" and not flush_subnormals and fmt.p == 24
            and fmt.emin == -126 and fmt.emax == 127 and fmt.specials == "ieee"
            and fmt.signed and fmt.subnormals and x.size >= _CAST_FROM):
        return _round_fp32_cast(x, fmt)
    return _round_exact(x, fmt, mode, policy, flush_subnormals)


#: round_to_format to fp32 with RNE takes the hardware cast from this many values
_CAST_FROM = 1 << 10


def _round_fp32_cast(x: np.ndarray, fmt: Format) -> np.ndarray:
    """RNE to fp32 (overflow to Inf) by the IEEE float64 -> float32 conversion, which rounds
    once, correctly (IEEE 754-2019 section 5.4.2); the values whose result could be subnormal
    (|x| < 2^-126) take the exact path, so a flush-to-zero mode set by some library in this
    process cannot change a result. NaN gives the canonical NaN, as the exact path does.
    tests/test_formats.py compares it with the exact path bit for bit."""
    with np.errstate(over="ignore", invalid="ignore"):
        out = x.astype(np.float32).astype(np.float64)
    tiny = (np.abs(x) < fmt.min_normal) & (x != 0)
    if tiny.any():
        out[tiny] = _round_exact(x[tiny], fmt, "RNE", "inf", False)
    nan = np.isnan(x)
    if nan.any():
        out[nan] = np.nan
    return out


def _round_exact(x: np.ndarray, fmt: Format, mode: str, policy: str,
                 flush_subnormals: bool) -> np.ndarray:
    """round_to_format on numpy arrays, every case (the obviously right path: scale to an
    integer, round it, scale back)."""
    ieee_like = fmt.specials == "ieee" and fmt.signed and fmt.subnormals
    if (fmt.p >= 53 and fmt.emin <= -1022 and fmt.emax >= 1023 and ieee_like and policy == "inf"
            and not flush_subnormals):
        return x.copy()
    finite = np.isfinite(x)
    xf = np.where(finite, x, 0.0)
    _, e = np.frexp(xf)  # xf = m * 2^e, m in [0.5, 1)
    # exponent of the last kept bit: (e - 1) - (p - 1); with subnormals never below emin - p + 1
    q = e - fmt.p
    flush = flush_subnormals and fmt.subnormals
    if fmt.subnormals and not flush:
        q = np.maximum(q, fmt.emin - fmt.p + 1)
    scaled = np.ldexp(xf, -q)  # exact: a power-of-two scaling inside float64 range
    r = _round_integer(scaled, mode)
    with np.errstate(over="ignore"):
        out = np.ldexp(r, q)
    mf = fmt.max_finite
    big = np.abs(out) > mf
    if big.any():
        neg = np.signbit(x)
        if mode in ("RNE", "RNA"):
            outward = np.ones_like(big)
        elif mode == "RZ":
            outward = np.zeros_like(big)
        elif mode == "RU":
            outward = ~neg
        else:
            outward = neg
        if policy == "saturate":
            outward = np.zeros_like(big)
        special = np.inf if policy == "inf" else np.nan
        ov = np.where(outward, special, mf)
        out = np.where(big, np.copysign(ov, xf), out)
    if flush:
        tiny = (out != 0) & (np.abs(out) < fmt.min_normal)
        out = np.where(tiny, 0.0, out)
    if not fmt.subnormals:  # no zero (e8m0): clamp underflow to the smallest value
        out = np.where(np.abs(out) < fmt.min_normal, np.copysign(fmt.min_normal, xf), out)
    # zeros keep the sign of x where the format has -0
    if fmt.has_negative_zero:
        out = np.where(out == 0, np.copysign(0.0, x), out)
    else:
        out = np.where(out == 0, 0.0, out)
    # non-finite inputs
    if not finite.all():
        if policy == "inf":
            inf_out = x
        elif policy == "nan":
            inf_out = np.full_like(x, np.nan)
        else:
            inf_out = np.copysign(mf, x)
        out = np.where(np.isinf(x), inf_out, out)
        out = np.where(np.isnan(x), np.nan, out)
    if not fmt.signed:  # negative values (-Inf included) have no encoding; -0 is a zero
        out = np.where((x < 0) | ((x == 0) & (not fmt.has_zero)), np.nan, out)
    elif not fmt.subnormals:
        out = np.where(x == 0, np.nan, out)
    return _canon_nan(out)


def _canon_nan(a: np.ndarray) -> np.ndarray:
    """NaNs as the positive quiet float64 NaN (so results compare bitwise)."""
    nan = np.isnan(a)
    return np.where(nan, np.nan, a) if nan.any() else a


def is_representable(x, fmt: Format) -> np.ndarray:
    """Elementwise: is each float64 value exactly representable in ``fmt``?

    NaN counts where the format has a NaN, +-Inf where it has infinities; -0 does not count in
    formats without negative zero (fnuz, e8m0), nor 0 in e8m0.

    Fast paths: for an array of at least ``_JIT_FROM`` values, a one-pass bit test of the
    significand (``_formats_jit.surely_representable``, numba), where numba is loaded already
    (the emulator) or the format has no storage dtype (tf32); else a value that comes back bit
    for bit from a cast to the format's storage dtype and back is in the format, whatever
    rounding the library cast does (widening is exact). Loading numba costs seconds, which a
    reveal of an fp32 op need not pay. Only the values a fast path does not accept are checked
    with :func:`round_to_format`.
    """
    x = np.asarray(x, dtype=np.float64)
    quick = None
    if _jit_worth(x.size):
        quick = _surely_representable(x, fmt)
    if quick is None:
        quick = _round_trips(x, fmt)
    if quick is None and x.size >= _JIT_FROM:
        quick = _surely_representable(x, fmt)
    if quick is not None:
        if quick.all():
            return quick
        rest = ~quick
        quick[rest] = _is_representable_exact(x[rest], fmt)
        return quick
    return _is_representable_exact(x, fmt)


def _surely_representable(x: np.ndarray, fmt: Format) -> np.ndarray | None:
    """``_formats_jit.surely_representable`` over x (None for formats it does not cover:
    without subnormals (e8m0), wider than float64)."""
    if not fmt.subnormals or fmt.p > 53 or fmt.emin < -1022:
        return None
    from ._formats_jit import surely_representable

    flat = np.ascontiguousarray(x).ravel()
    out = np.empty(flat.shape, np.bool_)
    surely_representable(flat, fmt.p, fmt.emin, fmt.max_finite, fmt.signed, out)
    return out.reshape(x.shape)


def _round_trips(x: np.ndarray, fmt: Format) -> np.ndarray | None:
    """Where float64 -> storage dtype -> float64 returns x's bits (None: no storage dtype that
    holds exactly the format, e.g. tf32 in float32, fp6 in a byte)."""
    try:
        dt = np.dtype(fmt.numpy_dtype())
    except ValueError:
        return None
    if dt.itemsize * 8 != fmt.bits:
        return None
    with np.errstate(all="ignore"):
        back = x.astype(dt).astype(np.float64)
    return np.asarray(back.view(np.int64) == x.view(np.int64))


def _is_representable_exact(x: np.ndarray, fmt: Format) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        r = round_to_format(x, fmt, "RNE", overflow="saturate")
        ok = (r == x) & np.isfinite(x)
    if not fmt.has_negative_zero:
        ok &= ~((x == 0) & np.signbit(x))
    if fmt.has_nan:
        ok |= np.isnan(x)
    if fmt.has_inf:
        ok |= np.isinf(x)
    return ok


def to_storage(x, fmt: Format) -> np.ndarray:
    """Convert float64 values that are exactly representable in ``fmt`` to its storage dtype.

    Raises:
        ValueError: some value is not exactly representable (it is never silently re-rounded);
            the message gives the first offending value. Also: ``fmt`` has no storage dtype.
    """
    x = np.asarray(x, dtype=np.float64)
    ok = is_representable(x, fmt)
    if not ok.all():
        bad = x[~ok].flat[0]
        raise ValueError(f"value {bad!r} is not exactly representable in {fmt.name}")
    return x.astype(fmt.numpy_dtype())


def sum_round_to_odd(x, y) -> np.ndarray:
    """The exact sum x + y of float64 arrays, rounded to float64 *to odd*.

    Rounding this value once more, in any mode, to a format of at most 51 bits gives the
    correctly rounded x + y (Boldo and Melquiond, "Emulation of FMA and correctly rounded sums:
    proved algorithms using rounding to odd", IEEE TC 2008). The exact sum is hi + lo (Knuth's
    TwoSum); when lo != 0 and hi's last bit is even, hi moves one step toward lo.
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        hi = x + y
        bp = hi - x
        lo = (x - (hi - bp)) + (y - bp)
    fix = (lo != 0) & ((hi.view(np.int64) & 1) == 0) & np.isfinite(hi)
    if fix.any():
        hi = np.where(fix, np.nextafter(hi, np.where(lo > 0, np.inf, -np.inf)), hi)
    return hi
