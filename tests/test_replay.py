"""Replay: the vectorised level-by-level evaluation against a per-sample obviously-right loop."""

import numpy as np
import pytest

from families import numpy_pairwise_sum_tree, random_tree
from fpscope.formats import BF16, FP16, FP32, FP64, round_to_format
from fpscope.replay import replay
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


def _reference(tree, arith, A, B, b):
    """Node by node with exact fractions: the obviously right evaluation of replay_arithmetic."""
    from fractions import Fraction

    from fpscope.formats import get_format
    from fpscope.replay import _round_fraction

    index = {id(nd): k for k, nd in enumerate(tree.nodes_postorder())}

    def ev(node):
        fmt = get_format(arith.node_formats[index[id(node)]])
        total = Fraction(0)
        for c in node:
            if isinstance(c, tuple):
                v = ev(c)
                if not np.isfinite(v):
                    return v  # an overflowed child: Inf stays Inf (no opposite Inf here)
                total += Fraction(v)
                continue
            p = Fraction(A[b, c]) * Fraction(B[b, c])
            e = arith.products[c]
            if e == "rounded":
                p = Fraction(_round_fraction(p, fmt))
            elif e.startswith("rounded:"):
                p = Fraction(_round_fraction(p, get_format(e.split(":")[1])))
            total += p
        return _round_fraction(total, fmt)

    v = ev(tree.root)
    return _round_fraction(Fraction(v), arith.out_format) if np.isfinite(v) else v


@pytest.mark.parametrize("seed", range(6))
def test_replay_arithmetic_against_fractions(seed):
    """Random binary trees, a random format per node and a random product entry per leaf:
    replay_arithmetic equals an exact node-by-node evaluation; fp32 and fp64 factors."""
    from fpscope.arithmetic import Arithmetic
    from fpscope.replay import replay_arithmetic
    from fpscope.verify import random_factors

    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 14))
    tree = random_tree(n, rng)
    nodes = list(tree.nodes_postorder())
    wide = seed % 2 == 1  # fp64 factors: fp64 nodes, at most one fused product per node
    fin = FP64 if wide else FP32
    fmts = ["fp64"] * len(nodes) if wide else [str(rng.choice(["fp16", "fp32", "fp64"]))
                                               for _ in nodes]
    entries = [None] * n
    for nd in nodes:
        leaves = [c for c in nd if not isinstance(c, tuple)]
        for j, c in enumerate(leaves):
            pick = ["rounded", "fused", "rounded:fp16"] if not wide else ["rounded", "fused"]
            e = str(rng.choice(pick))
            if wide and j == 1 and entries[leaves[0]] == "fused":
                e = "rounded"
            entries[c] = e
    arith = Arithmetic(tuple(fmts), tuple(entries), "fp32")
    for kind in ("normal", "cancel", "uniform") + (("wide",) if wide else ()):  # fp16: no overflow
        A, B = random_factors(kind, (40, n), fin, rng)
        got = replay_arithmetic(tree, arith, A=A, B=B)
        want = np.array([_reference(tree, arith, A, B, b) for b in range(40)])
        assert np.array_equal(got.view(np.int64), want.view(np.int64)), (kind, arith)


def test_fused_and_rounded_products_differ():
    from fpscope.arithmetic import Arithmetic
    from fpscope.replay import replay_arithmetic
    from fpscope.verify import random_factors

    rng = np.random.default_rng(5)
    tree = SumTree.sequential(64)
    A, B = random_factors("normal", (200, 64), FP32, rng)
    fused = Arithmetic.uniform(63, "fp32", "fp32", 64, "fused")
    rounded = Arithmetic.uniform(63, "fp32", "fp32", 64, "rounded")
    ya = replay_arithmetic(tree, fused, A=A, B=B)
    yb = replay_arithmetic(tree, rounded, A=A, B=B)
    assert (ya != yb).sum() > 50
    assert np.array_equal(yb, replay(tree, round_to_format(A * B, FP32), FP32))
    two = Arithmetic(tuple(["fp64"] * 63), tuple(["fused"] * 64), "fp64")
    with pytest.raises(ValueError, match="two fused"):
        replay_arithmetic(tree, two, A=np.full((1, 64), 1.1), B=np.full((1, 64), 1.3))


@pytest.mark.parametrize("kind", DISTRIBUTIONS)
def test_random_inputs_are_representable(kind):
    rng = np.random.default_rng(0)
    for fmt in (FP32, FP16, BF16):
        X = random_inputs(kind, (10, 300), fmt, rng)
        assert np.array_equal(round_to_format(X, fmt), X)
        assert np.isfinite(replay(numpy_pairwise_sum_tree(300), X, FP32)).all()
