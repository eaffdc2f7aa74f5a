"""Narrow formats (tf32, fp8, fp6, fp4, e8m0, ue4m3): bit-exact encode/decode, rounding in every mode,
overflow policies, flush-to-zero and special values, checked against ml_dtypes and an exact
rational reference."""

import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from fpscope.formats import (
    ALL_FORMATS, BF16, E8M0, FORMATS, FP4_E2M1, FP6_E2M3, FP6_E3M2, FP8_E4M3FN, FP8_E4M3FNUZ,
    FP8_E5M2, FP8_E5M2FNUZ, FP16, FP32, FP64, OVERFLOW_POLICIES, ROUNDING_MODES, TF32, UE4M3,
    Format, decode, encode, format_of_dtype, get_format, is_representable, round_to_format,
    to_storage,
)

#: the narrow formats with an ml_dtypes dtype (ue4m3 has none: test_ue4m3_* below)
SMALL = [f for f in ALL_FORMATS.values() if f.bits <= 8 and f is not UE4M3]
ML_NAMES = {
    "fp8_e4m3fn": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2", "fp8_e4m3fnuz": "float8_e4m3fnuz",
    "fp8_e5m2fnuz": "float8_e5m2fnuz", "fp6_e2m3": "float6_e2m3fn", "fp6_e3m2": "float6_e3m2fn",
    "fp4_e2m1": "float4_e2m1fn", "e8m0": "float8_e8m0fnu", "bf16": "bfloat16",
}


def _ml(fmt):
    t = getattr(ml_dtypes, ML_NAMES[fmt.name], None)
    if t is None:
        pytest.skip(f"ml_dtypes {ml_dtypes.__version__} lacks {ML_NAMES[fmt.name]}")
    return np.dtype(t)


def _same(a, b):
    """Bitwise equality of float64 arrays, any NaN equal to any NaN."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return (a.view(np.uint64) == b.view(np.uint64)) | (np.isnan(a) & np.isnan(b))


def _patterns(fmt):
    return np.arange(1 << fmt.bits, dtype=np.uint64).astype(encode(np.zeros(0), fmt).dtype)


# -- rational reference -------------------------------------------------------------------------


def _ref(x: float, fmt: Format, mode: str, policy=None, flush=False) -> float:
    """Obviously-right rounding with rationals, following the documented conventions."""
    policy = fmt.overflow if policy is None else policy
    mf = fmt.max_finite
    if math.isnan(x):
        return math.nan
    if not fmt.signed and (x < 0 or (x == 0 and not fmt.has_zero)):
        return math.nan
    if not fmt.has_zero and x == 0:
        return math.nan
    if math.isinf(x):
        return {"inf": x, "nan": math.nan, "saturate": math.copysign(mf, x)}[policy]
    neg = math.copysign(1.0, x) < 0
    if x == 0:
        return -0.0 if neg and fmt.has_negative_zero else 0.0
    a = Fraction(abs(x))
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    q = e - fmt.p + 1
    if fmt.subnormals and not flush:
        q = max(q, fmt.emin - fmt.p + 1)
    s = a / Fraction(2) ** q
    lo = s.numerator // s.denominator
    frac = s - lo
    up = {
        "RNE": frac > Fraction(1, 2) or (frac == Fraction(1, 2) and lo % 2 == 1),
        "RNA": frac >= Fraction(1, 2),
        "RZ": False,
        "RU": frac > 0 and not neg,
        "RD": frac > 0 and neg,
    }[mode]
    r = (lo + int(up)) * Fraction(2) ** q
    if r > Fraction(mf):
        outward = mode in ("RNE", "RNA") or (mode == "RU" and not neg) or (mode == "RD" and neg)
        if policy == "saturate" or not outward:
            v = mf
        else:
            v = math.inf if policy == "inf" else math.nan
    elif flush and fmt.subnormals and 0 < r < Fraction(fmt.min_normal):
        v = 0.0
    elif not fmt.has_zero and r < Fraction(fmt.min_normal):
        v = fmt.min_normal
    else:
        v = float(r)
    if v == 0 and not fmt.has_negative_zero:
        return 0.0
    return -v if neg else v


def _policies(fmt):
    return [p for p in OVERFLOW_POLICIES
            if not (p == "inf" and not fmt.has_inf) and not (p == "nan" and not fmt.has_nan)]


# -- decode / encode, exhaustive ---------------------------------------------------------------


@pytest.mark.parametrize("fmt", SMALL, ids=lambda f: f.name)
def test_decode_every_pattern_matches_ml_dtypes(fmt):
    b = _patterns(fmt)
    want = b.astype(np.uint8).view(_ml(fmt)).astype(np.float64)
    got = decode(b, fmt)
    assert got.dtype == np.float64 and _same(got, want).all()
    # the metadata agrees with the decoded values and with ml_dtypes' finfo
    fin = got[np.isfinite(got)]
    assert fin.max() == fmt.max_finite == float(ml_dtypes.finfo(_ml(fmt)).max)
    assert fin[fin > 0].min() == fmt.min_subnormal
    assert np.isinf(got).any() == fmt.has_inf
    assert np.isnan(got).any() == fmt.has_nan
    assert (np.signbit(got) & (got == 0)).any() == fmt.has_negative_zero
    assert (got == 0).any() == fmt.has_zero


@pytest.mark.parametrize("fmt", SMALL, ids=lambda f: f.name)
def test_encode_decode_round_trip_every_pattern(fmt):
    b = _patterns(fmt)
    v = decode(b, fmt)
    nan = np.isnan(v)
    assert np.array_equal(encode(v[~nan], fmt), b[~nan])
    if nan.any():
        canon = encode(np.array([np.nan]), fmt)[0]
        assert np.all(encode(v[nan], fmt) == canon)
        # the canonical NaN is the one ml_dtypes produces
        assert canon == np.array([np.nan], dtype=np.float32).astype(_ml(fmt)).view(np.uint8)[0]
    # storage through ml_dtypes holds the same bits (fp6/fp4 in the low bits of a byte)
    stored = to_storage(v[~nan], fmt)
    assert np.array_equal(stored.view(np.uint8), b[~nan].astype(np.uint8))
    # every decoded value is representable, nothing else between them is
    assert is_representable(v, fmt).all()


@pytest.mark.parametrize("fmt,ref_dtype,shift", [(FP16, np.float16, 0), (BF16, None, 0), (TF32, np.float32, 13)],
                         ids=["fp16", "bf16", "tf32"])
def test_decode_16_and_19_bit_formats_exhaustively(fmt, ref_dtype, shift):
    b = np.arange(1 << fmt.bits, dtype=np.uint32)
    with np.errstate(invalid="ignore"):  # signalling NaNs convert with a warning
        if ref_dtype is None:
            want = b.astype(np.uint16).view(_ml(fmt)).astype(np.float64)
        else:
            want = (b << np.uint32(shift)).astype(np.dtype(ref_dtype).str.replace("f", "u")).view(ref_dtype).astype(np.float64)
    got = decode(b, fmt)
    assert _same(got, want).all()
    nan = np.isnan(got)
    assert np.array_equal(encode(got[~nan], fmt), b[~nan])


@pytest.mark.parametrize("fmt,dtype,udtype", [(FP32, np.float32, np.uint32), (FP64, np.float64, np.uint64)],
                         ids=["fp32", "fp64"])
def test_decode_encode_random_patterns_wide(fmt, dtype, udtype):
    rng = np.random.default_rng(3)
    b = rng.integers(0, 2**63, size=300_000, dtype=np.uint64)
    b = (b ^ (b << np.uint64(1))).astype(udtype)  # use the top bit too
    b = np.concatenate([b, np.array([0, 1, 1 << (fmt.bits - 1)], dtype=udtype)])
    with np.errstate(invalid="ignore"):  # signalling NaNs
        want = b.view(dtype).astype(np.float64)
    got = decode(b, fmt)
    assert _same(got, want).all()
    nan = np.isnan(got)
    assert np.array_equal(encode(got[~nan], fmt), b[~nan])
    assert encode(np.array([np.nan]), fmt)[0] == np.array([np.nan], dtype=dtype).view(udtype)[0]


def test_encode_decode_errors():
    with pytest.raises(ValueError, match="not exactly representable"):
        encode([0.3], FP8_E4M3FN)
    with pytest.raises(ValueError, match="no NaN"):
        encode([np.nan], FP4_E2M1)
    with pytest.raises(ValueError, match="below 2\\^6"):
        decode([64], FP6_E2M3)
    with pytest.raises(ValueError, match="non-negative"):
        decode(np.array([-1]), FP8_E5M2)
    with pytest.raises(ValueError, match="integers"):
        decode([1.0], FP8_E5M2)
    with pytest.raises(ValueError, match="no standard bit encoding"):
        encode([1.0], Format("odd", 10, -200, 100))
    assert encode([0.3], FP8_E4M3FN, mode="RNE")[0] == encode([0.3125], FP8_E4M3FN)[0] == 0x2A
    assert encode([np.inf, -np.inf], FP8_E5M2).tolist() == [0x7C, 0xFC]
    assert encode([1.0, -2.0], TF32).dtype == np.uint32 and encode([1.0], TF32)[0] == 0x3F800000 >> 13


# -- rounding against ml_dtypes (float32 inputs: ml_dtypes rounds those once) -------------------


def _interesting_fp32(fmt):
    """Representable values, midpoints (ties), the overflow boundary and the values one float32
    ulp either side of each, both signs."""
    v = decode(_patterns(fmt), fmt)
    v = np.unique(np.abs(v[np.isfinite(v)]))
    mids = (v[:-1] + v[1:]) / 2
    top = fmt.max_finite + fmt.ulp(fmt.max_finite) / 2  # the tie with the first unencodable value
    base = np.concatenate([v, mids, [top, 1.5 * fmt.max_finite, fmt.min_subnormal / 2, fmt.min_subnormal / 4]])
    with np.errstate(over="ignore"):
        b32 = base.astype(np.float32)
    assert np.array_equal(b32.astype(np.float64)[np.isfinite(b32)], base[np.isfinite(b32)])  # exact
    near = np.concatenate([b32, np.nextafter(b32, np.float32(np.inf)), np.nextafter(b32, np.float32(0))])
    return np.concatenate([near, -near, np.float32([0.0, -0.0, np.inf, -np.inf, np.nan])])


def _random_fp32(fmt, rng, n=200_000):
    bits = rng.integers(0, 2**32, size=n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    e = rng.integers(fmt.emin - fmt.p - 3, fmt.emax + 3, size=n)
    m = rng.uniform(-2, 2, size=n)
    with np.errstate(over="ignore"):
        return np.concatenate([bits, np.ldexp(m, e).astype(np.float32)])


def _e8m0_ml_dtypes_subnormal_quirk(x32):
    # ml_dtypes 0.6 rounds float32 subnormal inputs in (2^-127, 2^-126) up to 2^-126 for e8m0,
    # also those nearer to 2^-127; fpscope rounds to nearest (test_e8m0_rounding below)
    return (x32 > 2.0**-127) & (x32 < 2.0**-126)


@pytest.mark.parametrize("fmt", SMALL + [BF16, FP16], ids=lambda f: f.name)
def test_rne_matches_ml_dtypes_on_float32_inputs(fmt):
    dt = np.dtype(np.float16) if fmt is FP16 else _ml(fmt)
    rng = np.random.default_rng(sum(map(ord, fmt.name)))
    x32 = np.concatenate([_interesting_fp32(fmt), _random_fp32(fmt, rng)])
    if not fmt.has_nan:
        x32 = x32[~np.isnan(x32)]  # ml_dtypes turns NaN into -0 for fp6/fp4; fpscope keeps NaN
    if fmt is E8M0:
        x32 = x32[~_e8m0_ml_dtypes_subnormal_quirk(x32)]
    with np.errstate(over="ignore", invalid="ignore"):
        want = x32.astype(dt).astype(np.float64)
    with np.errstate(invalid="ignore"):  # signalling NaNs
        x64 = x32.astype(np.float64)
    got = round_to_format(x64, fmt, "RNE")
    bad = ~_same(got, want)
    assert not bad.any(), (x32[bad][:5], got[bad][:5], want[bad][:5])


def test_ml_dtypes_overflow_conventions_are_the_defaults():
    # OFP8 non-saturating mode (ml_dtypes): e4m3fn NaN, e5m2 Inf; fp6/fp4 saturate
    x = np.array([1e6, -np.inf])
    assert np.isnan(round_to_format(x, FP8_E4M3FN)).all()
    assert round_to_format(x, FP8_E5M2).tolist() == [np.inf, -np.inf]
    assert round_to_format(x, FP4_E2M1).tolist() == [6.0, -6.0]
    assert round_to_format(x, FP6_E3M2).tolist() == [28.0, -28.0]


# -- rounding against the rational reference, every mode, policy, flush ------------------------


def _check(x, fmt, mode, policy, flush):
    got = float(round_to_format(np.array([x]), fmt, mode, overflow=policy, flush_subnormals=flush)[0])
    want = _ref(x, fmt, mode, policy, flush)
    assert _same(got, want), (x, fmt.name, mode, policy, flush, got, want)


_ALL = list(ALL_FORMATS.values())
_scaled = st.builds(lambda m, k: math.ldexp(m, k), st.floats(-2, 2, width=64), st.integers(-150, 135))
_ties = st.builds(lambda i, k, d: math.ldexp(i + 0.5, k) * (1 + d * 2.0**-52),
                  st.integers(-2**12, 2**12), st.integers(-160, 130), st.sampled_from([-1, 0, 1]))


@settings(max_examples=3000, deadline=None)
@given(st.one_of(st.floats(width=64), _scaled, _ties), st.sampled_from(_ALL), st.sampled_from(ROUNDING_MODES),
       st.sampled_from(OVERFLOW_POLICIES + (None,)), st.booleans())
def test_matches_rational_reference_every_mode_and_format(x, fmt, mode, policy, flush):
    if policy is not None and policy not in _policies(fmt):
        with pytest.raises(ValueError):
            round_to_format([x], fmt, mode, overflow=policy)
        return
    _check(x, fmt, mode, policy, flush)


@pytest.mark.parametrize("fmt", SMALL, ids=lambda f: f.name)
def test_every_mode_at_every_tie_and_neighbour(fmt):
    v = decode(_patterns(fmt), fmt)
    v = np.unique(v[np.isfinite(v)])
    pts = np.concatenate([v, (v[:-1] + v[1:]) / 2, [fmt.max_finite + fmt.ulp(fmt.max_finite) / 2]])
    pts = np.concatenate([pts, -pts])
    xs = np.concatenate([pts, np.nextafter(pts, np.inf), np.nextafter(pts, -np.inf)])
    for mode in ROUNDING_MODES:
        for policy in _policies(fmt):
            for flush in (False, True):
                got = round_to_format(xs, fmt, mode, overflow=policy, flush_subnormals=flush)
                want = np.array([_ref(float(x), fmt, mode, policy, flush) for x in xs])
                bad = ~_same(got, want)
                assert not bad.any(), (mode, policy, flush, xs[bad][:4], got[bad][:4], want[bad][:4])
                ok = np.isnan(got) | is_representable(got, fmt)
                assert ok.all()


# -- documented behaviour ------------------------------------------------------------------------


def test_double_rounding_trap_of_library_cast_e4m3fn():
    # 1 + 2^-4 is the e4m3fn tie between 1 and 1.125; x lies just above it, so x rounds to 1.125.
    # Through float32 the 2^-40 is lost first, the tie then goes to even: 1.0.
    x = np.array([1 + 2.0**-4 + 2.0**-40, 464 + 2.0**-30])
    assert round_to_format(x, FP8_E4M3FN).tolist()[0] == 1.125
    assert np.isnan(round_to_format(x, FP8_E4M3FN)[1])  # above the overflow tie 464: NaN
    via32 = x.astype(np.float32).astype(ml_dtypes.float8_e4m3fn).astype(np.float64)
    assert via32[0] == 1.0 and via32[1] == 448.0  # the library's two roundings
    # ml_dtypes' own float64 cast: documented in NUMERICS.md to go through float32
    direct = x.astype(ml_dtypes.float8_e4m3fn).astype(np.float64)
    assert direct[0] in (1.0, 1.125)


def test_e4m3fn_overflow_boundary_and_policies():
    x = np.array([448.0, 463.9, 464.0, 464.0001, 1e9, -1e9, np.inf, -np.inf])
    assert _same(round_to_format(x, FP8_E4M3FN), [448, 448, 448, np.nan, np.nan, np.nan, np.nan, np.nan]).all()
    assert round_to_format(x, FP8_E4M3FN, overflow="saturate").tolist() == [448, 448, 448, 448, 448, -448, 448, -448]
    # directed modes: the IEEE direction decides between max_finite and the overflow value
    assert _same(round_to_format(x, FP8_E4M3FN, "RZ"), [448, 448, 448, 448, 448, -448, np.nan, np.nan]).all()
    assert _same(round_to_format(x[4:6], FP8_E4M3FN, "RU"), [np.nan, -448]).all()
    assert _same(round_to_format(x[4:6], FP8_E4M3FN, "RD"), [448, np.nan]).all()
    with pytest.raises(ValueError, match="no infinities"):
        round_to_format(x, FP8_E4M3FN, overflow="inf")
    with pytest.raises(ValueError, match="no NaN"):
        round_to_format(x, FP6_E2M3, overflow="nan")
    with pytest.raises(ValueError, match="unknown overflow"):
        round_to_format(x, FP16, overflow="wrap")
    # e5m2 and fp16 keep Inf by default; saturation on request
    assert round_to_format([61440.0, 61439.0], FP8_E5M2).tolist() == [np.inf, 57344.0]
    assert round_to_format([1e6, -np.inf], FP16, overflow="saturate").tolist() == [65504.0, -65504.0]
    assert round_to_format([np.inf, -np.inf, 1.0], FP64, overflow="saturate").tolist() == [
        FP64.max_finite, -FP64.max_finite, 1.0]
    assert np.isnan(round_to_format([np.inf], FP64, overflow="nan")[0])
    assert np.isnan(round_to_format([1e6], FP8_E5M2, overflow="nan")[0])


def test_fnuz_has_no_negative_zero():
    for fmt in (FP8_E4M3FNUZ, FP8_E5M2FNUZ):
        r = round_to_format([-0.0, -1e-30, 1e-30], fmt, "RU")
        assert r.tolist() == [0.0, 0.0, fmt.min_subnormal] and not np.signbit(r).any()
        assert not np.signbit(round_to_format([-1e-30], fmt, "RZ", flush_subnormals=True)).any()
        assert encode([-0.0], fmt, mode="RNE")[0] == 0
        assert np.isnan(decode([0x80], fmt)[0])
        assert not is_representable([-0.0], fmt)[0] and is_representable([0.0], fmt)[0]
        with pytest.raises(ValueError, match="not exactly representable"):
            to_storage([-0.0], fmt)
    # OCP formats keep -0
    assert np.signbit(round_to_format([-1e-30], FP8_E4M3FN)[0])
    assert np.signbit(round_to_format([-1e-30], FP4_E2M1)[0])


def test_flush_subnormals():
    x = np.array([2.0**-20, -2.0**-20, 2.0**-14 * (1 - 2.0**-10), 2.0**-14 * (1 - 2.0**-12), 2.0**-14])
    assert np.signbit(round_to_format(x, FP16, flush_subnormals=True)[1])
    # 1 - 2^-10 has 10 significant bits: tiny after rounding, flushed; 1 - 2^-12 rounds up to 2^-14
    assert round_to_format(x, FP16, flush_subnormals=True).tolist() == [0.0, -0.0, 0.0, 2.0**-14, 2.0**-14]
    assert round_to_format(x, FP16).tolist()[:3] == [2.0**-20, -2.0**-20, 2.0**-14 * (1 - 2.0**-10)]
    # directed modes flush too (tininess after rounding, IEEE 754-2019 7.5)
    assert round_to_format([2.0**-30], FP16, "RU", flush_subnormals=True).tolist() == [0.0]
    # float64's own subnormals
    assert round_to_format([5e-324, 2.0**-1022], FP64, flush_subnormals=True).tolist() == [0.0, 2.0**-1022]
    assert round_to_format([0.25], FP4_E2M1, "RU", flush_subnormals=True).tolist() == [0.0]
    # 0.75 = 1.1b * 2^-1 needs no rounding at p = 2: tiny, flushed; with subnormals it is the
    # tie between 0.5 and 1 (spacing 0.5) and goes to the even 1
    assert round_to_format([0.75], FP4_E2M1, flush_subnormals=True).tolist() == [0.0]
    assert round_to_format([0.75], FP4_E2M1).tolist() == [1.0]


def test_e8m0_rounding():
    x = np.array([1.0, 3.0, 2.9, 5.0, 6.0, 1.5 * 2.0**-100])
    assert round_to_format(x, E8M0).tolist() == [1.0, 4.0, 2.0, 4.0, 8.0, 2.0**-99]  # ties go up
    assert round_to_format(x, E8M0, "RD").tolist() == [1.0, 2.0, 2.0, 4.0, 4.0, 2.0**-100]
    assert round_to_format(x, E8M0, "RU").tolist() == [1.0, 4.0, 4.0, 8.0, 8.0, 2.0**-99]
    assert round_to_format([2.9], E8M0, "RNA").tolist() == [2.0]
    # no zero: below 2^-127 gives 2^-127 in every mode; 1.25 * 2^-127 is nearer 2^-127
    for mode in ROUNDING_MODES:
        assert round_to_format([2.0**-130, 5e-324], E8M0, mode).tolist() == [2.0**-127] * 2
    assert round_to_format([1.25 * 2.0**-127], E8M0).tolist() == [2.0**-127]
    # no sign, no zero, no Inf: NaN
    assert np.isnan(round_to_format([0.0, -0.0, -1.0, -np.inf, np.inf, np.nan, 2.0**128], E8M0)).all()
    assert round_to_format([np.inf, 2.0**200, -np.inf], E8M0, overflow="saturate")[:2].tolist() == [2.0**127] * 2
    assert encode([1.0, 2.0**-127, 2.0**127, np.nan], E8M0).tolist() == [127, 0, 254, 255]
    assert decode([0, 127, 254], E8M0).tolist() == [2.0**-127, 1.0, 2.0**127] and np.isnan(decode([255], E8M0)[0])
    assert not is_representable([0.0, -1.0, 3.0], E8M0).any()


def test_ue4m3_is_the_non_negative_half_of_e4m3fn():
    """ue4m3 (NVFP4's block scale, PTX .ue4m3): every 7-bit pattern decodes as the e4m3fn byte
    with the sign bit clear (mmasim truncate_e4m3_to_ue4m3), round trips, and rounds every
    non-negative value as e4m3fn does, in every mode; negative values are NaN, -0 is +0."""
    pats = np.arange(128, dtype=np.uint8)
    want = pats.view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    got = decode(pats, UE4M3)
    assert _same(got, want).all() and np.isnan(got[0x7F]) and not np.isnan(got[:0x7F]).any()
    assert np.array_equal(encode(got[:0x7F], UE4M3), pats[:0x7F])
    assert encode([np.nan], UE4M3)[0] == 0x7F
    assert (UE4M3.bits, UE4M3.max_finite, UE4M3.min_subnormal) == (7, 448.0, 2.0**-9)
    assert UE4M3.has_zero and UE4M3.has_nan and not UE4M3.has_negative_zero
    rng = np.random.default_rng(11)
    x32 = np.concatenate([_interesting_fp32(FP8_E4M3FN), _random_fp32(FP8_E4M3FN, rng, 20000)])
    with np.errstate(invalid="ignore"):  # signalling NaNs
        x = np.abs(x32.astype(np.float64))
    for mode in ROUNDING_MODES:
        for policy in ("nan", "saturate"):
            assert _same(round_to_format(x, UE4M3, mode, overflow=policy),
                         np.abs(round_to_format(x, FP8_E4M3FN, mode, overflow=policy))).all()
    r = round_to_format([-0.0, -1.0, -1e-30, -np.inf, np.inf, 0.0], UE4M3)
    assert r[0] == 0 and not np.signbit(r[0]) and np.isnan(r[1:5]).all() and r[5] == 0
    assert not is_representable([-0.0, -1.0, 449.0, 2.0**-10], UE4M3).any()
    assert is_representable([0.0, 2.0**-9, 448.0, np.nan], UE4M3).all()
    assert get_format("UE4M3") is UE4M3
    with pytest.raises(ValueError, match="no numpy storage dtype"):
        to_storage([1.0], UE4M3)


def test_narrow_nan_and_inf_inputs():
    for fmt in (FP6_E2M3, FP6_E3M2, FP4_E2M1):
        r = round_to_format([np.nan, np.inf, -np.inf], fmt)
        assert np.isnan(r[0]) and r[1:].tolist() == [fmt.max_finite, -fmt.max_finite]
        assert not is_representable([np.nan, np.inf], fmt).any()
    assert np.isnan(round_to_format([np.nan], FP8_E4M3FN)[0])
    assert round_to_format([np.inf], FP8_E4M3FN, overflow="saturate").tolist() == [448.0]


def test_tf32_is_fp32_range_with_ten_fraction_bits():
    x = np.array([1024.5, 1025.5, 1 + 2.0**-11, 1 + 2.0**-11 + 2.0**-20, float(np.finfo(np.float32).max)])
    assert round_to_format(x, TF32).tolist() == [1024.0, 1026.0, 1.0, 1 + 2.0**-10, np.inf]
    assert round_to_format(x[:1], TF32, "RNA").tolist() == [1025.0]  # the cuBLAS report's 1025
    assert round_to_format(x[:1], TF32, "RZ").tolist() == [1024.0]  # MMA-Sim's truncation
    assert TF32.numpy_dtype() == np.float32 and to_storage([1.5], TF32).dtype == np.float32


def test_round_to_format_is_vectorised_and_shape_preserving():
    x = np.linspace(-500, 500, 24).reshape(2, 3, 4)
    for fmt in _ALL:
        r = round_to_format(x, fmt, "RNA", overflow="saturate")
        assert r.shape == x.shape and r.dtype == np.float64


# -- names, dtypes, public API --------------------------------------------------------------------


def test_formats_dict_keeps_the_four_ieee_formats():
    assert list(FORMATS) == ["fp64", "fp32", "fp16", "bf16"]
    assert set(FORMATS) < set(ALL_FORMATS)
    assert Format("fp32", 24, -126, 127) == FP32  # positional construction, derived fields
    f = Format("e8m13", 14, -126, 127)
    assert (f.bits, f.exponent_bias, f.overflow, f.has_inf) == (22, 127, "inf", True)
    assert decode(encode([1 + 2.0**-13], f), f).tolist() == [1 + 2.0**-13]


@pytest.mark.parametrize("alias,canonical", [
    ("e4m3fn", "fp8_e4m3fn"), ("float8_e4m3fn", "fp8_e4m3fn"), ("E5M2", "fp8_e5m2"),
    ("float8_e5m2fnuz", "fp8_e5m2fnuz"), ("e4m3fnuz", "fp8_e4m3fnuz"), ("e2m3", "fp6_e2m3"),
    ("float6_e3m2fn", "fp6_e3m2"), ("e2m1", "fp4_e2m1"), ("float4_e2m1fn", "fp4_e2m1"),
    ("float8_e8m0fnu", "e8m0"), ("tf32", "tf32"), ("tensorfloat32", "tf32"), ("bfloat16", "bf16"),
])
def test_get_format_new_aliases(alias, canonical):
    assert get_format(alias) is ALL_FORMATS[canonical]


@pytest.mark.parametrize("name", ["fp8", "fp6", "fp4", "e4m3", "fp8_e4m3", "float8_e4m3", "mxfp4", "nvfp4"])
def test_get_format_refuses_ambiguous_names(name):
    with pytest.raises(ValueError, match="unknown format"):
        get_format(name)


@pytest.mark.parametrize("fmt", SMALL + [BF16], ids=lambda f: f.name)
def test_format_of_ml_dtypes_dtype(fmt):
    dt = _ml(fmt)
    assert format_of_dtype(dt) is fmt and fmt.numpy_dtype() == dt
    with pytest.raises(ValueError, match="unknown format"):
        format_of_dtype(np.dtype(ml_dtypes.float8_e4m3))  # IEEE-style E4M3: not OCP's e4m3fn
