"""fpscope.accuracy: the exact reference (checked against fractions.Fraction), ulp errors, and
plausible accuracy metrics of known ops."""

from __future__ import annotations

import json
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fpscope.accuracy import exact_dot, exact_sum, measure_accuracy, ulp_error
from fpscope.cli import main
from fpscope.formats import FP16, FP32, FP64
from fpscope.targets import make_target

TINY = 5e-324
BIG = 1.7976931348623157e308


def as_fraction(exact) -> Fraction:
    N, E = exact
    return Fraction(N) * Fraction(2) ** E


CASES = [
    [],
    [0.0, -0.0],
    [1.0, 2.0 ** -60, -1.0],  # fsum would give 2^-60 too, but naive float addition gives 0
    [BIG, BIG, -BIG],  # an intermediate sum beyond the float range
    [TINY, 3 * TINY, -BIG, 1e-310, BIG],  # subnormals beside the largest values
    [0.1, 0.2, 0.3, -0.6],
    list(np.float32(np.random.default_rng(1).standard_normal(50))),
]


@pytest.mark.parametrize("xs", CASES)
def test_exact_sum_equals_fraction_sum(xs):
    assert as_fraction(exact_sum(np.array(xs, dtype=np.float64))) == sum(map(Fraction, map(float, xs)), Fraction(0))


@given(st.lists(st.floats(allow_nan=False, allow_infinity=False), max_size=40))
@settings(max_examples=150, deadline=None)
def test_exact_sum_property(xs):
    assert as_fraction(exact_sum(np.array(xs, dtype=np.float64))) == sum(map(Fraction, xs), Fraction(0))


@given(st.lists(st.tuples(st.floats(allow_nan=False, allow_infinity=False),
                          st.floats(allow_nan=False, allow_infinity=False)), max_size=30))
@settings(max_examples=100, deadline=None)
def test_exact_dot_property(pairs):
    a = np.array([p[0] for p in pairs], dtype=np.float64)
    b = np.array([p[1] for p in pairs], dtype=np.float64)
    want = sum((Fraction(x) * Fraction(y) for x, y in pairs), Fraction(0))
    assert as_fraction(exact_dot(a, b)) == want


def test_exact_refuses_non_finite_and_mismatched_lengths():
    with pytest.raises(ValueError, match="finite"):
        exact_sum([1.0, math.inf])
    with pytest.raises(ValueError, match="lengths"):
        exact_dot([1.0, 2.0], [1.0])


def test_ulp_error_known_values():
    one = exact_sum([1.0])
    assert ulp_error(1.0, one, FP32) == 0.0
    # S = 1 + 2^-24 (a tie in fp32), y = 1: ulp(S) = 2^-23, error 0.5 ulp
    assert ulp_error(1.0, exact_sum([1.0, 2.0 ** -24]), FP32) == 0.5
    # S just below 2: ulp(S) = 2^-23 in fp32; y = 2 is 2^-30 away
    assert ulp_error(2.0, exact_sum([2.0, -(2.0 ** -30)]), FP32) == 2.0 ** -7
    # S = 1 - 2^-30: the binade below 1, ulp 2^-24
    assert ulp_error(1.0, exact_sum([1.0, -(2.0 ** -30)]), FP32) == 2.0 ** -6
    # S = 0: the smallest subnormal is the unit
    assert ulp_error(2.0 ** -24, exact_sum([0.0]), FP16) == 1.0
    assert ulp_error(-3 * 2.0 ** -149, exact_sum([]), FP32) == 3.0
    # subnormal S: the unit is the smallest subnormal
    assert ulp_error(2.0 ** -1070, exact_sum([2.0 ** -1072]), FP64) == 12.0
    assert ulp_error(math.inf, one, FP32) == math.inf
    assert ulp_error(math.nan, one, FP32) == math.inf
    # an error beyond the float range
    assert ulp_error(BIG, exact_sum([TINY]), FP64) == math.inf


def test_fp64_pairwise_small_n_is_accurate():
    # numpy.sum over 2 float64 values: one correctly rounded addition, at most 0.5 ulp anywhere
    with make_target("numpy.sum", n=2, dtype="fp64") as t:
        acc = measure_accuracy(t, samples=32)
    assert acc["max_ulps"] <= 0.5 and acc["nonfinite"] == 0 and acc["samples"] == 128
    # 8 positive float64 terms summed pairwise (depth 3): error <= 3 u sum|x| <= 6 ulps of S
    with make_target("numpy.sum", n=8, dtype="fp64") as t:
        acc = measure_accuracy(t, samples=32)
    assert acc["by_distribution"]["uniform"]["max_ulps"] <= 6
    assert acc["output_format"] == "fp64"


def test_fp16_sequential_sum_has_positive_error():
    # numpy.cumsum over float16 rounds every partial sum to fp16: a sequential fp16 sum
    with make_target("numpy.cumsum", n=64, dtype="fp16") as t:
        acc = measure_accuracy(t, samples=32)
    assert acc["output_format"] == "fp16"
    uni = acc["by_distribution"]["uniform"]
    assert uni["max_ulps"] > 1 and uni["mean_ulps"] > 0.25  # well beyond correct rounding


def test_higher_precision_accumulator_is_within_half_ulp():
    # numpy.sum of float16 accumulates in float32 and rounds once: <= 0.5 ulp + the tiny
    # float32 error, on positive inputs
    with make_target("numpy.sum", n=64, dtype="fp16") as t:
        acc = measure_accuracy(t, samples=32)
    assert acc["by_distribution"]["uniform"]["max_ulps"] <= 0.51


def test_matrix_op_dot_products():
    with make_target("numpy.matmul", shape=(4, 16, 4), dtype="fp32") as t:
        acc = measure_accuracy(t, samples=10)
    assert acc["samples"] == 40 and acc["nonfinite"] == 0
    assert acc["inputs"].startswith("dot products")
    assert 0 <= acc["by_distribution"]["uniform"]["max_ulps"] < 16
    # K = 1: a single rounded product, at most 0.5 ulp
    with make_target("numpy.matmul", shape=(3, 1, 3), dtype="fp32") as t:
        assert measure_accuracy(t, samples=8)["max_ulps"] <= 0.5


def test_reveal_record_and_json_carry_accuracy(capsys, tmp_path):
    path = tmp_path / "r.json"
    assert main(["reveal", "numpy.sum", "--n", "16", "--samples", "2", "--record", str(path)]) == 0
    out = capsys.readouterr().out
    assert "accuracy vs the exact result: max" in out
    acc = json.loads(path.read_text())["accuracy"]
    assert acc["samples"] == 256 and acc["output_format"] == "fp32"
    assert acc["reference"].startswith("exact")
    assert main(["reveal", "numpy.sum", "--n", "16", "--samples", "2", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["accuracy"] == acc  # fixed seed: the same numbers
    assert main(["reveal", "numpy.sum", "--n", "16", "--samples", "0", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["accuracy"] == {"skipped": "--samples 0"}


def test_vectorised_reference_over_many_chunks():
    """Rows longer than one accumulation pass, extreme magnitudes, the largest value repeated
    (every int64 bin near its bound): still equal to the Fraction sums."""
    from fpscope.accuracy import exact_dots, exact_sums

    rng = np.random.default_rng(7)
    X = rng.standard_normal((3, 5000)) * np.ldexp(1.0, rng.integers(-1070, 1000, size=(3, 5000)))
    X[1] = BIG
    X[2, ::2] = -BIG
    X[2, 1::2] = TINY
    for row, got in zip(X, exact_sums(X)):
        assert as_fraction(got) == sum(map(Fraction, row.tolist()), Fraction(0))
    A = rng.standard_normal((2, 1000)) * np.ldexp(1.0, rng.integers(-500, 500, size=(2, 1000)))
    B = rng.standard_normal((2, 1000)) * np.ldexp(1.0, rng.integers(-500, 500, size=(2, 1000)))
    B[1] = np.float64(2) ** 500
    for a, b, got in zip(A, B, exact_dots(A, B)):
        want = sum((Fraction(x) * Fraction(y) for x, y in zip(a.tolist(), b.tolist())), Fraction(0))
        assert as_fraction(got) == want
