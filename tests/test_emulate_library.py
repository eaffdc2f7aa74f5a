"""Library level (split-K, FP8 promotion interval, epilogue) against an obviously-right loop:
reference.fdpa chains and additions done on rationals."""

from fractions import Fraction

import numpy as np
import pytest

from fpscope.emulate import matmul
from fpscope.emulate.reference import fdpa
from fpscope.formats import FP32, get_format, round_to_format
from fpscope.profile import get_profile, resolve_format


def _round_rational(r: Fraction, fmt) -> float:
    """r rounded to nearest-even in fmt (subnormals; overflow to Inf); +0 for 0."""
    if r == 0:
        return 0.0
    a = abs(r)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    q = max(e - fmt.p + 1, fmt.emin - fmt.p + 1)
    s = a / Fraction(2) ** q
    lo = s.numerator // s.denominator
    frac = s - lo
    up = frac > Fraction(1, 2) or (frac == Fraction(1, 2) and lo % 2 == 1)
    v = float((lo + up) * Fraction(2) ** q)
    v = np.inf if v > fmt.max_finite else v
    return -v if r < 0 else v


def _add(x, y, fmt):
    return _round_rational(Fraction(x) + Fraction(y), fmt)


def _slow(A, B, C, p):
    """The definition, one output at a time (library.py's docstring)."""
    M, K = A.shape
    N = B.shape[1]
    inner = p.replace(split_k=1, split_k_order="serial", split_k_format=None,
                      promotion_interval=None)
    fout = resolve_format(p.out_format)
    width = K // p.split_k
    step = p.promotion_interval or width

    def chain(m, n, lo, hi, d):
        for j in range(lo, hi, p.k):
            d = fdpa(A[m, j:j + p.k], B[j:j + p.k, n], d, inner)
        return d

    D = np.empty((M, N))
    for m in range(M):
        for n in range(N):
            parts = []
            for s in range(p.split_k):
                lo = s * width
                init = float(C[m, n]) if p.split_k == 1 else 0.0
                if p.promotion_interval is None:
                    parts.append(chain(m, n, lo, lo + width, init))
                    continue
                reg = init
                for t in range(lo, lo + width, step):
                    reg = _add(reg, chain(m, n, t, t + step, 0.0), fout)
                parts.append(reg)
            if p.split_k == 1:
                D[m, n] = parts[0]
                continue
            if p.split_k_format:
                parts = [_round_rational(Fraction(x), get_format(p.split_k_format))
                         for x in parts]
            if p.split_k_order == "serial":
                tot = parts[0]
                for x in parts[1:]:
                    tot = _add(tot, x, fout)
            else:
                while len(parts) > 1:
                    nxt = [_add(parts[i], parts[i + 1], fout) for i in range(0, len(parts) - 1, 2)]
                    parts = nxt + ([parts[-1]] if len(parts) % 2 else [])
                tot = parts[0]
            D[m, n] = _add(tot, float(C[m, n]), fout)
    return D


def _data(rng, p, M, K, N):
    fin = resolve_format(p.in_format)
    A = round_to_format(rng.standard_normal((M, K)) * 2.0 ** rng.integers(-6, 6, (M, K)), fin)
    B = round_to_format(rng.standard_normal((K, N)), fin)
    C = round_to_format(rng.standard_normal((M, N)) * 8, resolve_format(p.out_format))
    return A, B, C


@pytest.mark.parametrize("preset, kw", [
    ("hopper-e4m3", {"promotion_interval": 64}),
    ("hopper-e4m3", {"promotion_interval": 32, "split_k": 2}),
    ("ampere-fp16", {"split_k": 3}),
    ("ampere-fp16", {"split_k": 5, "split_k_order": "pairwise"}),
    ("hopper-fp16-fp16out", {"split_k": 2, "split_k_order": "pairwise"}),
    ("hopper-bf16", {"split_k": 4, "split_k_format": "bf16"}),
])
@pytest.mark.parametrize("engine", ["numpy", "numba"])
def test_library_level_equals_the_definition(preset, kw, engine):
    p = get_profile(preset).replace(**kw)
    rng = np.random.default_rng(len(preset) + len(kw))
    K = p.k * p.split_k * 4
    A, B, C = _data(rng, p, 3, K, 4)
    got = matmul(A, B, C, profile=p, engine=engine, dtype="float64")
    want = _slow(A, B, C, p)
    assert np.array_equal(got.view(np.int64), want.view(np.int64)), (got, want)


def test_library_level_changes_the_result():
    """A promotion interval is not a no-op: cancellation across intervals survives it."""
    p = get_profile("hopper-e4m3")
    K = 96
    A = np.zeros((1, K))
    B = np.ones((K, 1))
    A[0, 0], A[0, 32], A[0, 64] = 448.0, 2.0 ** -9, -448.0  # F = 13: 2^-9 is cut beside 448
    one_chain = matmul(A, B, profile=p)[0, 0]
    promoted = matmul(A, B, profile=p.replace(promotion_interval=32))[0, 0]
    assert (one_chain, promoted) == (0.0, 2.0 ** -9)
    assert promoted == _slow(A, B, np.zeros((1, 1)), p.replace(promotion_interval=32))[0, 0]


def test_epilogue_rounds_through_fp32():
    p = get_profile("hopper-fp16")
    A = np.array([[1.0, 2.0 ** -9, 2.0 ** -20] + [0.0] * 13])
    B = np.ones((16, 1))
    D = matmul(A, B, profile=p)
    assert D[0, 0] == 1.0 + 2.0 ** -9 + 2.0 ** -20
    # to bf16 directly: above the tie 1 + 2^-8 * 0.5 -> rounds up; through fp32: same value here
    bf = matmul(A, B, profile=p, out_format="bf16")[0, 0]
    assert bf == _round_rational(Fraction(_round_rational(Fraction(float(D[0, 0])), FP32)),
                                 get_format("bf16"))
    half = matmul(A, B, profile=p, alpha=0.5)[0, 0]
    assert half == D[0, 0] / 2
    with pytest.raises(ValueError, match="fp32 value"):
        matmul(A, B, profile=p, alpha=0.1)
    with pytest.raises(ValueError, match="out_format"):
        matmul(A, B, profile=p, out_format="fp8_e4m3fn")


def test_bad_library_profiles():
    p = get_profile("ampere-fp16")
    with pytest.raises(ValueError, match="promotion_interval"):
        p.replace(promotion_interval=20)
    with pytest.raises(ValueError, match="split_k"):
        p.replace(split_k=0)
    with pytest.raises(ValueError, match="split_k_order"):
        p.replace(split_k_order="random")
    with pytest.raises(ValueError, match="cannot be split"):
        matmul(np.ones((1, 32)), np.ones((32, 1)), profile=p.replace(split_k=3))
