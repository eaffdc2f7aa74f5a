"""Replay: the vectorised level-by-level evaluation against a per-sample obviously-right loop."""

import numpy as np
import pytest

from families import numpy_pairwise_sum_tree, random_tree
from fpscope.formats import BF16, FP16, FP32, FP64, round_to_format
from fpscope.replay import replay, replay_dot
from fpscope.tree import SumTree
from fpscope.verify import DISTRIBUTIONS, random_inputs


def _slow(tree, x, fmt):
    """Post-order evaluation, one sample, every binary add rounded with round_to_format."""
    def ev(node):
        if isinstance(node, tuple):
            vals = [ev(c) for c in node]
            s = vals[0]
            for v in vals[1:]:
                s = float(round_to_format(np.array([s + v]), fmt)[0])
            return s
        return float(x[node])
    return ev(tree.root)


@pytest.mark.parametrize("fmt", [FP64, FP32, FP16, BF16])
def test_binary_replay_matches_slow_path(fmt):
    rng = np.random.default_rng(1)
    for n in (1, 2, 5, 64, 129):
        tree = random_tree(n, rng)
        X = random_inputs("normal", (20, n), fmt, rng)
        got = replay(tree, X, fmt)
        want = [_slow(tree, X[b], fmt) for b in range(20)]
        assert np.array_equal(got, want)


def test_matches_numpy_sum_for_c1():
    # case C1: numpy sums these 8 float32 values in a balanced tree
    x = np.array([-462914.25, -4450888, -3546839, 7919.854, -3874966.25, -1358369.625,
                  -420256.46875, -336801.9375], dtype=np.float32)
    tree = SumTree([[[0, 1], [2, 3]], [[4, 5], [6, 7]]])
    assert replay(tree, x.astype(np.float64), FP32) == -14443116.0
    assert replay(SumTree.sequential(8), x.astype(np.float64), FP32) == -14443115.0


def test_bf16_accumulator_stalls_at_256():
    # case C6: a bf16 running sum of ones stalls at 256; an fp32 one reaches 1024
    ones = np.ones(1024)
    assert replay(SumTree.sequential(1024), ones, BF16) == 256.0
    assert replay(SumTree.sequential(1024), ones, FP32) == 1024.0


def test_output_rounding_and_inputs_checked():
    tree = SumTree.pairwise(4)
    x = np.array([1.0, 2.0**-12, 2.0**-12, 0.0])
    assert replay(tree, x, FP32, out=FP16) == 1.0
    with pytest.raises(ValueError, match="not all representable"):
        replay(tree, np.array([0.1, 0, 0, 0]), FP32)
    with pytest.raises(ValueError, match="shape"):
        replay(tree, np.zeros((2, 3)), FP32)


def test_fma_replay_against_fractions():
    from fractions import Fraction

    from fpscope.replay import _round_fraction

    rng = np.random.default_rng(5)
    n = 9
    tree = random_tree(n, rng)
    A = random_inputs("wide", (50, n), FP32, rng)
    B = random_inputs("normal", (50, n), FP32, rng)
    got = replay_dot(tree, A, B, FP32, fma=True)

    def ev(node, b):
        # returns the rounded value of node; leaves are handled by their parents
        kids = list(node)
        leaves = sorted(c for c in kids if not isinstance(c, tuple))
        inner = [ev(c, b) for c in kids if isinstance(c, tuple)]
        if not inner:
            first, second = leaves
            s = _round_fraction(Fraction(A[b, first]) * Fraction(B[b, first]), FP32)
            return _round_fraction(Fraction(s) + Fraction(A[b, second]) * Fraction(B[b, second]), FP32)
        if leaves:
            (k,) = leaves
            return _round_fraction(Fraction(inner[0]) + Fraction(A[b, k]) * Fraction(B[b, k]), FP32)
        return _round_fraction(Fraction(inner[0]) + Fraction(inner[1]), FP32)

    want = [ev(tree.root, b) for b in range(50)]
    assert np.array_equal(got, want)
    assert not np.array_equal(got, replay_dot(tree, A, B, FP32, fma=False))


@pytest.mark.parametrize("kind", DISTRIBUTIONS)
def test_random_inputs_are_representable(kind):
    rng = np.random.default_rng(0)
    for fmt in (FP32, FP16, BF16):
        X = random_inputs(kind, (10, 300), fmt, rng)
        assert np.array_equal(round_to_format(X, fmt), X)
        assert np.isfinite(replay(numpy_pairwise_sum_tree(300), X, FP32)).all()
