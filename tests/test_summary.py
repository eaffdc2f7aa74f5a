"""Tests for fpscope.summary: family recognition, compositions, C placement, robustness, speed."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hst

from families import (
    blocked_tree,
    fused_chain_tree,
    numpy_pairwise_sum_tree,
    random_tree,
    strided_lanes_tree,
)
from fpscope.summary import describe, describe_subtree, phrase, summarize
from fpscope.tree import SumTree

NUMPY_COMBINE = "((0+1)+(2+3))+((4+5)+(6+7))"


# -- the families named in the brief, with concrete strings --------------------------------------
def test_sequential_10():
    t = SumTree.sequential(10)
    d = describe(t)
    assert d["family"] == "sequential"
    assert d["n"] == 10 and d["depth"] == 9 and d["max_fan_in"] == 2 and d["binary"] is True
    assert summarize(t) == "10 terms: sequential left fold ((x0 + x1) + x2) + ... + x9."


def test_reverse_sequential_5000():
    t = SumTree.reverse_sequential(5000)
    d = describe(t)
    assert d["family"] == "reverse_sequential"
    assert d["depth"] == 4999 and d["tail"] == 0
    assert summarize(t) == "5000 terms: reverse sequential fold ((x4999 + x4998) + x4997) + ... + x0."


def test_pairwise_64():
    t = SumTree.pairwise(64)
    d = describe(t)
    assert d["family"] == "pairwise" and d["split"] == "floor" and d["depth"] == 6
    s = summarize(t)
    assert s.startswith("64 terms: pairwise (recursive halving: split at floor(n/2)")
    assert s.endswith("; depth 6.")


def test_numpy_style_100_eight_lanes_and_tail_of_four():
    t = numpy_pairwise_sum_tree(100)
    d = describe(t)
    assert d["family"] == "strided_lanes"
    assert (d["lanes"], d["stride"], d["tail"], d["combine"]) == (8, 8, 4, "pairwise")
    assert d["lane_length_min"] == d["lane_length_max"] == 12
    assert d["combine_tree"] == [[[0, 1], [2, 3]], [[4, 5], [6, 7]]]
    s = summarize(t)
    assert s.startswith("100 terms: 8 lanes with stride 8 over x0..x95 ")
    assert f"lanes combined pairwise {NUMPY_COMBINE}" in s
    assert s.endswith("then the remaining 4 added one at a time (x96..x99).")


def test_fused_chain_16_products_with_c():
    t = fused_chain_tree(16, 4, with_c=True)
    d = describe(t)
    assert d["family"] == "fused_chain"
    assert (d["terms_per_node"], d["fan_in"], d["chain_nodes"]) == (4, 5, 4)
    assert d["n_fused_nodes"] == 4 and d["max_fan_in"] == 5 and d["binary"] is False
    assert d["c"]["entry"] == "first" and d["c"]["joins_terms"] == 4
    assert summarize(t) == (
        "16 products + C: chain of 4 fused 5-term nodes: 4 products plus the running sum; "
        "C enters first (in the first node, with x0..x3)."
    )


def test_fused_chain_without_c_and_short_last_node():
    t = fused_chain_tree(18, 4, with_c=False)
    d = describe(t)
    assert d["family"] == "fused_chain" and d["c"] is None
    assert (d["first_node_terms"], d["last_node_terms"], d["chain_nodes"]) == (4, 2, 5)
    s = summarize(t)
    assert "fused 5-term nodes: 4 terms plus the running sum" in s
    assert "the first node sums 4 terms alone" in s and "the last node adds 2" in s


def test_blocked_panels_pairwise_blocks():
    t = blocked_tree(1024, 256, "pairwise")
    d = describe(t)
    assert d["family"] == "blocked"
    assert (d["block_size"], d["n_blocks"], d["last_block_size"]) == (256, 4, 256)
    assert d["block"]["family"] == "pairwise"
    s = summarize(t)
    assert "blocked panels: 4 blocks of 256 added sequentially (((B0 + B1) + B2) + ...)" in s
    assert "each block (256 terms): pairwise (split at floor(n/2))" in s


def test_blocked_panels_with_short_last_block_and_numpy_blocks():
    t = blocked_tree(1000, 100, "numpy")
    d = describe(t)
    assert d["family"] == "blocked" and d["block_size"] == 100 and d["n_blocks"] == 10
    blk = d["block"]
    assert blk["family"] == "strided_lanes" and blk["lanes"] == 8 and blk["tail"] == 4
    assert "each block (100 terms): 8 lanes with stride 8" in summarize(t)

    t = blocked_tree(1000, 256, "reverse")
    d = describe(t)
    assert (d["family"], d["n_blocks"], d["last_block_size"]) == ("blocked", 4, 232)
    assert "4 blocks of 256 (the last of 232) added sequentially" in summarize(t)


def test_numpy_recursive_split_1000():
    t = numpy_pairwise_sum_tree(1000)
    d = describe(t)
    assert d["family"] == "recursive_split"
    assert d["split_rule"] == "floor_aligned" and d["align"] == 8
    assert d["n_blocks"] == 8 and (d["block_size_min"], d["block_size_max"]) == (120, 128)
    assert d["block"]["family"] == "strided_lanes" and d["block"]["lanes"] == 8
    s = summarize(t)
    assert "recursive split into 8 blocks (split at floor(n/2) rounded down to a multiple of 8" in s
    assert "each block (120-128 terms): 8 lanes with stride 8, lanes combined pairwise" in s


def test_numpy_recursive_split_with_differing_blocks():
    d = describe(numpy_pairwise_sum_tree(1001))
    assert d["family"] == "recursive_split" and d["block"] is None
    groups = d["block_groups"]
    assert [g["count"] for g in groups] == [8, 1]
    assert groups[1]["description"]["tail"] == 1
    s = summarize(numpy_pairwise_sum_tree(1001))
    assert "8 blocks (64-128 terms): 8 lanes with stride 8" in s
    assert "1 block (65 terms): 8 lanes with stride 8" in s and "then the remaining 1 added" in s


def test_numpy_all_sizes_up_to_600():
    for n in range(1, 601):
        d = describe(numpy_pairwise_sum_tree(n))
        if n < 8:
            assert d["family"] == ("single" if n == 1 else "sequential"), n
        elif n < 16:
            assert d["family"] == "pairwise" and d["tail"] == n - 8, n
        elif n <= 128:
            assert d["family"] == "strided_lanes" and d["lanes"] == 8, n
            assert d["tail"] == n % 8 and d["combine"] == "pairwise", n
        else:
            assert d["family"] == "recursive_split", n
            assert d["split_rule"] in ("floor", "floor_aligned"), n
            assert d["block_size_max"] <= 128 < d["min_split_size"], n
            for g in d["block_groups"]:
                assert g["description"]["family"] == "strided_lanes", n


def test_strided_lanes_families():
    for combine in ("pairwise", "sequential", "halving"):
        d = describe(strided_lanes_tree(100, 4, combine))
        assert d["family"] == "strided_lanes" and d["lanes"] == 4 and d["combine"] == combine
    d = describe(strided_lanes_tree(100, 16, "halving"))
    assert d["lane_length_min"] == 6 and d["lane_length_max"] == 7
    s = summarize(strided_lanes_tree(100, 4, "sequential"))
    assert s.startswith("100 terms: 4 lanes with stride 4 (lane r sums x[r], x[r+4], x[r+8]")
    assert "lanes combined sequentially" in s


# -- the accumulator C ------------------------------------------------------------------------------
def test_c_added_last():
    t = SumTree(["C", SumTree.pairwise(8).to_json()])
    d = describe(t)
    assert d["family"] == "pairwise" and d["c"]["entry"] == "last"
    assert summarize(t).endswith("; C is added last.")


def test_c_enters_first_in_sequential():
    t = SumTree([[["C", 0], 1], 2])
    d = describe(t)
    assert d["family"] == "sequential" and d["c"]["entry"] == "first"
    assert summarize(t).endswith("C enters first (added to x0).")


def test_c_in_the_middle():
    t = SumTree([["C", [[0, 1], [2, 3]]], 4, 5])
    d = describe(t)
    assert d["c"]["entry"] == "middle" and d["c"]["joins_terms"] == 4 and d["c"]["terms_after"] == 2
    assert "C is added to the partial sum of x0..x3 (4 products); 2 more products are added after it" in summarize(t)


def test_c_with_everything_in_one_node_and_only_c():
    assert summarize(SumTree(["C", 0, 1, 2])) == (
        "3 products + C: one fused 4-term node holding C and all 3 products."
    )
    assert summarize(SumTree("C")).startswith("only the accumulator C")
    assert describe(SumTree("C"))["family"] == "empty"


def test_single_leaf_and_tiny_trees():
    assert summarize(SumTree(0)) == "1 term: the single term x0."
    assert describe(SumTree([0, 1]))["family"] == "sequential"
    assert describe(SumTree([0, 1, 2]))["family"] == "fused_node"
    assert "one fused 3-term node over x0..x2, then the remaining 1 added" in summarize(
        SumTree([[0, 1, 2], 3])
    )


# -- generic fallback and robustness ----------------------------------------------------------------
def test_generic_fallback_is_informative():
    t = random_tree(60, np.random.default_rng(5), max_fan_in=3)
    d = describe(t)
    assert d["family"] == "generic"
    assert d["depth"] == t.depth() and d["max_fan_in"] == t.max_fan_in()
    s = summarize(t)
    assert s.startswith("60 terms: unrecognised order: ")
    assert f"depth {t.depth()}" in s


def test_describe_rejects_non_trees():
    with pytest.raises(TypeError):
        describe([[0, 1], 2])


@settings(max_examples=150, deadline=None)
@given(
    n=hst.integers(1, 150),
    seed=hst.integers(0, 2**32 - 1),
    fan=hst.integers(2, 5),
    with_c=hst.booleans(),
)
def test_random_trees_never_crash(n, seed, fan, with_c):
    t = random_tree(n, np.random.default_rng(seed), max_fan_in=fan, with_c=with_c)
    d = describe(t)
    assert "error" not in d, d.get("error")
    assert d["n"] == n and d["has_c"] == with_c
    assert d["depth"] == t.depth() and d["max_fan_in"] == t.max_fan_in()
    assert d["n_nodes"] == t.n_nodes
    json.dumps(d)  # machine-readable: plain JSON types only
    s = summarize(t)
    assert isinstance(s, str) and s.endswith(".") and "\n" not in s


@settings(max_examples=60, deadline=None)
@given(n=hst.integers(1, 300), seed=hst.integers(0, 2**32 - 1))
def test_random_subtrees_describe_and_phrase(n, seed):
    t = random_tree(n, np.random.default_rng(seed), max_fan_in=3)
    for nd in list(t.nodes_postorder())[:20]:
        d = describe_subtree(nd)
        assert "error" not in d
        assert phrase(d, top=False) and phrase(d, brief=True)


@settings(max_examples=60, deadline=None)
@given(data=hst.data())
def test_family_parameters_are_recovered(data):
    k = data.draw(hst.sampled_from([2, 3, 4, 8, 16]))
    n = data.draw(hst.integers(2 * k, 400))
    combine = data.draw(hst.sampled_from(["pairwise", "sequential"] + (["halving"] if k >= 4 and k & (k - 1) == 0 else [])))
    d = describe(strided_lanes_tree(n, k, combine))
    assert d["family"] == "strided_lanes" and d["lanes"] == k
    assert d["combine"] == (combine if k > 2 else "pairwise")

    b = data.draw(hst.integers(3, 40))
    inner = data.draw(hst.sampled_from(["pairwise", "reverse"]))
    n = data.draw(hst.integers(4 * b, 12 * b))
    d = describe(blocked_tree(n, b, inner))
    assert d["family"] == "blocked" and d["block_size"] == b
    assert d["n_blocks"] == -(-n // b) and d["last_block_size"] == n - (d["n_blocks"] - 1) * b

    L = data.draw(hst.integers(2, 16))
    n = data.draw(hst.integers(L + 2, 20 * L))  # the second node must add >= 2 terms
    with_c = data.draw(hst.booleans())
    d = describe(fused_chain_tree(n, L, with_c=with_c))
    assert d["family"] == "fused_chain" and d["terms_per_node"] == L and d["fan_in"] == L + 1
    assert d["chain_nodes"] == -(-n // L)
    if with_c:
        assert d["c"]["entry"] == "first"


# -- size and speed ---------------------------------------------------------------------------------
def test_deep_chain_has_no_recursion_limit():
    t = SumTree.reverse_sequential(100_000)
    assert describe(t)["family"] == "reverse_sequential"
    t = SumTree.sequential(100_000)
    assert describe(t)["family"] == "sequential"


def test_generic_deep_tree_no_recursion_limit():
    # a running sum of depth 19999 over a shuffled order: no family, must fall back quietly
    order = list(range(20000))
    for i in range(1, 19998, 3):
        order[i], order[i + 1] = order[i + 1], order[i]
    node = order[0]
    for i in order[1:]:
        node = [node, i]
    t = SumTree(node)
    d = describe(t)
    assert "error" not in d and d["depth"] == 19999
    assert summarize(t)


def test_numpy_65536_is_fast():
    t = numpy_pairwise_sum_tree(65536)
    start = time.perf_counter()
    s = summarize(t)
    elapsed = time.perf_counter() - start
    assert "recursive split into 512 blocks" in s and "each block (128 terms): 8 lanes with stride 8" in s
    assert elapsed < 2.0, f"summarize took {elapsed:.2f} s for n = 65536"
