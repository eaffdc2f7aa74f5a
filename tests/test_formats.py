"""Exact rounding to binary formats, checked against numpy's IEEE cast and a rational reference."""

from fractions import Fraction

import sys

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from fpscope.formats import (ALL_FORMATS, BF16, FP16, FP32, FP64, ROUNDING_MODES, decode, get_format,
                             is_representable, round_to_format, to_storage)


def _ref_round(x: float, fmt, mode: str) -> float:
    """Obviously-right rounding with rationals."""
    if x == 0 or not np.isfinite(x):
        return x
    a = Fraction(abs(x))
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    q = max(e - fmt.p + 1, fmt.emin - fmt.p + 1)
    s = a / Fraction(2) ** q
    lo = s.numerator // s.denominator
    frac = s - lo
    neg = x < 0
    if mode == "RNE":
        up = frac > Fraction(1, 2) or (frac == Fraction(1, 2) and lo % 2 == 1)
    elif mode == "RNA":
        up = frac >= Fraction(1, 2)
    elif mode == "RZ":
        up = False
    elif mode == "RU":
        up = frac > 0 and not neg
    else:  # RD
        up = frac > 0 and neg
    r = (lo + (1 if up else 0)) * Fraction(2) ** q
    v = float(r) if r < Fraction(2) ** 1024 else np.inf
    if v > fmt.max_finite:
        if mode in ("RNE", "RNA") or (mode == "RU" and not neg) or (mode == "RD" and neg):
            v = np.inf
        else:
            v = fmt.max_finite
    return -v if neg else v


def test_fp32_matches_numpy_cast_on_random_bits():
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2**64, size=200_000, dtype=np.uint64)
    x = bits.view(np.float64)
    x = x[np.isfinite(x)]
    x = np.concatenate([x * 2.0**-900, np.ldexp(rng.random(50_000), rng.integers(-160, 130, 50_000))])
    with np.errstate(over="ignore"):
        want = x.astype(np.float32).astype(np.float64)
    got = round_to_format(x, FP32)
    assert np.array_equal(got, want)


@settings(max_examples=400, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False, width=64), st.sampled_from(ROUNDING_MODES),
       st.sampled_from([FP32, FP16, BF16]))
def test_matches_rational_reference(x, mode, fmt):
    got = float(round_to_format(np.array([x]), fmt, mode)[0])
    assert got == _ref_round(x, fmt, mode) or (got == 0 and _ref_round(x, fmt, mode) == 0)


def test_ties_and_subnormals_fp16():
    # 1 + 2^-11 is a tie between 1 and 1 + 2^-10: RNE -> 1, RNA -> 1 + 2^-10
    x = np.array([1 + 2.0**-11, 2.0**-25, 3 * 2.0**-26, 65520.0])
    assert round_to_format(x, FP16, "RNE").tolist() == [1.0, 0.0, 2.0**-24, np.inf]
    assert round_to_format(x, FP16, "RNA").tolist() == [1 + 2.0**-10, 2.0**-24, 2.0**-24, np.inf]
    assert round_to_format(x, FP16, "RZ")[3] == 65504.0


def test_double_rounding_trap_is_avoided():
    # float64 -> bf16 through float32 rounds twice; our rounding does not
    x = np.array([1 + 2.0**-8 + 2.0**-30])  # just above the bf16 tie 1 + 2^-8
    assert round_to_format(x, BF16)[0] == 1 + 2.0**-7
    import ml_dtypes

    assert float(x.astype(np.float32).astype(ml_dtypes.bfloat16)[0]) == 1.0  # the library's double rounding


def test_to_storage_refuses_inexact():
    with pytest.raises(ValueError, match="not exactly representable in fp16"):
        to_storage([0.1], FP16)
    assert to_storage([0.5, -2.0], BF16).dtype.name == "bfloat16"
    assert is_representable([np.inf, np.nan, 1.0], FP16).all()


def test_get_format_aliases_and_errors():
    assert get_format("float32") is FP32 and get_format("half") is FP16 and get_format("fp64") is FP64
    with pytest.raises(ValueError, match="unknown format"):
        get_format("fp7")


@pytest.mark.parametrize("jit", [False, True], ids=["cast", "numba"])
@pytest.mark.parametrize("name", sorted(ALL_FORMATS))
def test_is_representable_fast_path_equals_exact_check(name, jit, monkeypatch):
    """The fast paths (the cast round trip; the numba bit test that large arrays take) never
    accept what the exact check rejects, nor the reverse: every bit pattern of narrow formats,
    its float64 neighbours, -0, NaN, Inf."""
    from fpscope import formats
    from fpscope.formats import _is_representable_exact

    monkeypatch.setattr(formats, "_JIT_FROM", 0 if jit else 1 << 62)
    monkeypatch.setattr(formats, "_JIT_LOAD_FROM", 0)  # numba even where it is not loaded yet

    fmt = ALL_FORMATS[name]
    rng = np.random.default_rng(len(name))
    if fmt.bits <= 16:
        pats = np.arange(1 << fmt.bits, dtype=np.uint64)
    else:
        pats = rng.integers(0, 1 << fmt.bits, size=20000, dtype=np.uint64)
    x = decode(pats, fmt)
    x = x[np.isfinite(x)]
    with np.errstate(over="ignore"):
        x3 = x * 3.0
    x = np.concatenate([x, np.nextafter(x, np.inf), np.nextafter(x, -np.inf), x3,
                        [0.0, -0.0, np.nan, np.inf, -np.inf, 1e300, 5e-324]])
    assert np.array_equal(is_representable(x, fmt), _is_representable_exact(x, fmt))


def _rounding_inputs(fmt, rng):
    """Every pattern of a narrow format (random ones of a wide one), their float64 neighbours,
    midpoints between neighbouring values (ties), values past max_finite and around the
    subnormal range, random float64 bits, zeros and specials."""
    if fmt.bits <= 16:
        pats = np.arange(1 << fmt.bits, dtype=np.uint64)
    else:
        pats = rng.integers(0, 1 << fmt.bits, size=20000, dtype=np.uint64)
    v = decode(pats, fmt)
    v = np.sort(v[np.isfinite(v)])
    with np.errstate(over="ignore", invalid="ignore"):
        mid = (v[:-1] + v[1:]) / 2
        wide = np.ldexp(rng.random(20000) + 1, rng.integers(fmt.emin - fmt.p - 3, fmt.emax + 3,
                                                            20000))
        rand = rng.integers(0, 2**63, 20000, dtype=np.uint64).view(np.float64)
        x = np.concatenate([v, np.nextafter(v, np.inf), np.nextafter(v, -np.inf), mid, -mid,
                            wide, -wide, rand, [0.0, -0.0, np.nan, np.inf, -np.inf]])
    return x


@pytest.mark.parametrize("mode", ROUNDING_MODES)
@pytest.mark.parametrize("name", sorted(ALL_FORMATS))
def test_round_to_format_fast_path_equals_exact_path(name, mode, monkeypatch):
    """round_to_format's numba path (arrays of at least _JIT_FROM values) gives the bits of
    the exact numpy path, for every format, mode and overflow policy the format allows."""
    from fpscope import formats

    monkeypatch.setattr(formats, "_JIT_LOAD_FROM", 0)  # numba even where it is not loaded yet
    fmt = ALL_FORMATS[name]
    x = _rounding_inputs(fmt, np.random.default_rng(len(name) + 7 * len(mode)))
    policies = [p for p in ("inf", "nan", "saturate")
                if not ((p == "inf" and fmt.specials != "ieee")
                        or (p == "nan" and fmt.specials == "none"))]
    for policy in policies:
        for flush in (False, True):
            monkeypatch.setattr(formats, "_JIT_FROM", 1 << 62)
            want = round_to_format(x, fmt, mode, overflow=policy, flush_subnormals=flush)
            monkeypatch.setattr(formats, "_JIT_FROM", 0)
            got = round_to_format(x, fmt, mode, overflow=policy, flush_subnormals=flush)
            assert np.array_equal(got.view(np.int64), want.view(np.int64)), (policy, flush)


def test_numba_is_not_loaded_for_moderate_arrays():
    """A reveal's representability checks and roundings (2^18 to 2^23 values) stay on the numpy
    paths unless numba is loaded already: loading it costs seconds (benchmarks/bench_reveal.py
    --phases); from _JIT_LOAD_FROM values, or once loaded, numba is worth it."""
    from fpscope import formats

    n = formats._JIT_FROM
    assert formats._jit_worth(n) == ("numba" in sys.modules)
    assert formats._jit_worth(formats._JIT_LOAD_FROM)
    assert not formats._jit_worth(n - 1)
    import subprocess

    code = ("import sys, numpy as np; from fpscope.formats import get_format, is_representable, "
            "round_to_format; x = np.random.default_rng(0).standard_normal(1 << 19); "
            "f = get_format('fp32'); is_representable(x, f); round_to_format(x, f); "
            "print('numba' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_round_to_fp32_cast_path_equals_exact_path():
    """round_to_format's fp32 RNE path (the hardware cast, tiny values exactly) gives the bits
    of the exact numpy path: ties, overflow thresholds, subnormal results, -0, NaN, Inf."""
    from fpscope import formats

    f = get_format("fp32")
    rng = np.random.default_rng(11)
    u = 2.0 ** -23
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1 + u / 2, 1 + 3 * u / 2,
               -(1 + u / 2), f.max_finite, f.max_finite * (1 + u / 4), 2.0 ** 128 * (1 - 2.0 ** -25),
               2.0 ** 128 * (1 - 2.0 ** -25) * (1 - 2.0 ** -50), 2.0 ** -149, 2.0 ** -150,
               -(2.0 ** -150) * 1.5, 2.0 ** -126 * (1 - 2.0 ** -25), 1e-300, 5e-324]
    x = np.concatenate([np.array(special),
                        rng.standard_normal(20000) * 2.0 ** rng.integers(-160, 130, 20000),
                        (rng.integers(1, 1 << 30, 5000) + 0.5) * 2.0 ** -29])
    assert x.size >= formats._CAST_FROM
    want = formats._round_exact(x, f, "RNE", "inf", False)
    got = round_to_format(x, f)
    assert np.array_equal(got.view(np.int64), want.view(np.int64))
