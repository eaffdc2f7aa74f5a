"""Tests for fpscope.summary: family recognition, compositions, C placement, robustness, speed."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hst

from families import (
    blocked_tree,
    fused_chain_tree,
    numpy_pairwise_sum_tree,
    pairwise_split,
    random_tree,
    register_lanes_tree,
    seq_fold,
    strided_lanes_tree,
)
from fpscope.summary import describe, describe_subtree, index_set, phrase, set_phrase, summarize
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
    assert SumTree.from_json(d["combine_tree"]).to_nested() == [[[0, 1], [2, 3]], [[4, 5], [6, 7]]]
    assert d["combine_tree"] == SumTree.pairwise(8).to_flat()  # flat, as every tree in JSON
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


# -- strided lanes: how the lane sums are combined ------------------------------------------------
def test_register_lanes_combine_is_described_not_a_placeholder():
    # numpy.dot (OpenBLAS sdot, float32): 8 vector registers x 8 lanes = 64 lanes of stride 64
    t = register_lanes_tree(8192)
    d = describe(t)
    assert d["family"] == "strided_lanes" and (d["lanes"], d["stride"]) == (64, 64)
    assert d["combine"] == "two_stage"
    stages = d["combine_stages"]
    assert (stages["kind"], stages["groups"], stages["group_size"]) == ("interleaved", 8, 8)
    assert stages["group"]["combine_text"] == "(((0+1)+(2+3))+(4+5))+(6+7)"
    assert stages["outer"]["combine_text"] == "((0+4)+(1+5))+((2+6)+(3+7))"
    s = summarize(t)
    assert "other" not in s
    assert s.endswith(
        "lanes combined in two stages: first, for each e = 0..7, the 8 lanes e + 8p (p = 0..7) are "
        "summed as (((0+1)+(2+3))+(4+5))+(6+7) over p; then the 8 sums are combined as "
        "((0+4)+(1+5))+((2+6)+(3+7)) over e."
    )
    json.dumps(d)


def _lanes_with_combine(n: int, k: int, combine) -> SumTree:
    """k sequential lanes of stride k combined by the nested tuple ``combine`` over 0..k-1."""
    lanes = [seq_fold(list(range(r, n, k))) for r in range(k)]
    stack, done = [(combine, False)], {}
    while stack:
        cur, visited = stack.pop()
        if visited:
            done[id(cur)] = tuple(done[id(c)] if isinstance(c, tuple) else lanes[c] for c in cur)
        else:
            stack.append((cur, True))
            stack.extend((c, False) for c in cur if isinstance(c, tuple))
    return SumTree(done[id(combine)])


def test_irregular_lane_combine_says_so():
    combine = random_tree(32, np.random.default_rng(3)).root
    t = _lanes_with_combine(128, 32, combine)
    d = describe(t)
    assert d["family"] == "strided_lanes" and d["lanes"] == 32
    s = summarize(t)
    assert "combined other" not in s and "other" not in d["combine"]
    if d["combine"] == "irregular":
        assert f"lanes combined in an irregular order (depth {d['combine_depth']})" in s
    # a power-of-two split over 24 lanes is named in words, not as "power of two split"
    pow2 = SumTree((pairwise_split(list(range(16))), pairwise_split(list(range(16, 24))))).root
    t = _lanes_with_combine(96, 24, pow2)
    assert describe(t)["combine"] == "power_of_two_split"
    assert "lanes combined by recursive split at the largest power of two below n" in summarize(t)


@settings(max_examples=40, deadline=None)
@given(k=hst.integers(17, 48), seed=hst.integers(0, 2**32 - 1))
def test_lane_combine_never_prints_a_fallback_name(k, seed):
    combine = random_tree(k, np.random.default_rng(seed)).root
    s = summarize(_lanes_with_combine(3 * k, k, combine))
    assert "other" not in s and "_" not in s.split("lanes combined", 1)[1]


# -- blocked panels of uneven sizes ----------------------------------------------------------------
def _panels(sizes, inner=seq_fold) -> SumTree:
    blocks, start = [], 0
    for b in sizes:
        blocks.append(inner(list(range(start, start + b))))
        start += b
    return SumTree(seq_fold(blocks))


def test_uneven_sequential_panels_are_blocked_not_a_recursive_split():
    # numpy.matmul (OpenBLAS sgemm), K = 1024: K-panels of 448, 288, 288, each a sequential fold
    t = _panels([448, 288, 288])
    d = describe(t)
    assert d["family"] == "blocked" and d["uneven"] is True
    assert d["block_sizes"] == [448, 288, 288] and d["n_blocks"] == 3
    assert d["block"]["family"] == "sequential"
    assert summarize(t) == (
        "1024 terms: 3 blocked panels of 448, 288 and 288 terms added left to right "
        "((P0 + P1) + P2); each panel: sequential; depth 449."
    )
    assert phrase(d, brief=True) == "3 panels of 448, 288 and 288 terms added left to right, each sequential"


def test_uneven_panels_variants():
    d = describe(_panels([448] * 21 + [288, 288]))
    assert d["family"] == "blocked" and d["n_blocks"] == 23
    assert "23 blocked panels (21 of 448, then 2 of 288 terms) added left to right" in summarize(
        _panels([448] * 21 + [288, 288]))
    # a panel that is itself split in halves is not cut into more panels
    d = describe(_panels([448, 288, 288], pairwise_split))
    assert d["family"] == "blocked" and d["block_sizes"] == [448, 288, 288]
    assert d["block"]["family"] == "pairwise"
    d = describe(_panels([5, 9, 4, 7, 3, 8, 6]))
    assert d["family"] == "blocked" and d["block_sizes"] == [5, 9, 4, 7, 3, 8, 6]


def test_genuine_recursive_splits_stay_recursive_splits():
    # both halves split again: not a left-to-right fold of panels
    t = SumTree(((seq_fold(list(range(100))), seq_fold(list(range(100, 300)))),
                 (seq_fold(list(range(300, 450))), seq_fold(list(range(450, 500))))))
    d = describe(t)
    assert d["family"] == "recursive_split" and d["n_blocks"] == 4 and d["split_rule"] == "irregular"
    assert summarize(t).startswith("500 terms: recursive split into 4 blocks (uneven splits")
    # two blocks only: a split, not panels
    assert describe(_panels([300, 200], pairwise_split))["family"] == "recursive_split"
    assert describe(numpy_pairwise_sum_tree(5000))["family"] == "recursive_split"


# -- sub-trees are described with their real input indices ------------------------------------------
def _find(tree: SumTree, leaves: set):
    for nd in tree.nodes_postorder():
        if set(tree.leaves(nd)) == leaves:
            return nd
    raise AssertionError(f"no node with leaves {sorted(leaves)[:6]}...")


def test_subtree_lanes_use_real_indices():
    t = numpy_pairwise_sum_tree(1024)
    two = _find(t, {i for i in range(128) if i % 8 in (0, 1)})  # lanes 0 and 1 of the first block
    d = describe_subtree(two)
    assert d["family"] == "strided_lanes" and d["stride"] == 8 and d["lanes"] == 2
    assert d["lane_starts"] == [0, 1]
    assert phrase(d, brief=True) == "lanes 0 and 1 of stride 8, added"
    assert phrase(d, top=False) == "lanes 0 and 1 of stride 8, added"
    assert set_phrase(d["index_set"]) == "x0, x8, ..., x120 and x1, x9, ..., x121 (32 terms)"
    four = _find(t, {i for i in range(128, 256) if i % 8 >= 4})  # lanes 4..7 of the second block
    d = describe_subtree(four)
    assert (d["stride"], d["lane_starts"]) == (8, [132, 133, 134, 135])
    assert phrase(d, top=False) == "lanes 4, 5, 6 and 7 of stride 8, combined pairwise (4+5)+(6+7)"
    lane = _find(t, set(range(3, 128, 8)))
    assert describe_subtree(lane)["family"] == "sequential"


def test_subtree_lanes_of_a_wide_reduction():
    t = register_lanes_tree(8192)
    d = describe_subtree(_find(t, {i for i in range(8192) if i % 64 in (0, 8, 16, 24)}))
    assert (d["family"], d["lanes"], d["stride"]) == ("strided_lanes", 4, 64)
    assert phrase(d, top=False) == "lanes 0, 8, 16 and 24 of stride 64, combined pairwise (0+8)+(16+24)"
    d = describe_subtree(_find(t, {i for i in range(8192) if i % 64 in (0, 8, 16, 24, 32, 40)}))
    assert (d["lanes"], d["stride"]) == (6, 64)
    assert phrase(d, brief=True) == "6 lanes of stride 64, combined by power-of-two splits"
    assert phrase(d, top=False) == "6 lanes of stride 64, combined as ((0+8)+(16+24))+(32+40)"
    d = describe_subtree(_find(t, {i for i in range(8192) if i % 8 in (0, 1, 4, 5)}))
    assert (d["lanes"], d["stride"]) == (32, 64)
    assert set_phrase(d["index_set"]) == "x0, x4, ..., x8188 and x1, x5, ..., x8189 (4096 terms)"


def test_subtree_tail_on_a_scattered_set():
    # ((lane 0 + lane 1 of stride 8) + x130): a tail on a scattered set, described in real indices
    node = ((seq_fold(list(range(0, 128, 8))), seq_fold(list(range(1, 128, 8)))), 130)
    d = describe_subtree(node)
    assert d["family"] == "strided_lanes" and d["tail"] == 1 and d["stride"] == 8
    assert phrase(d, brief=True) == "lanes 0 and 1 of stride 8, added, then 1 one at a time"


def test_index_set_phrases():
    cases = [
        (range(10), "x0..x9 (10 terms)"),
        (range(3, 128, 8), "x3, x11, ..., x123 (16 terms)"),
        ([i for i in range(480) if i % 8 in (0, 1)], "x0, x8, ..., x472 and x1, x9, ..., x473 (120 terms)"),
        ([i for i in range(8192) if i % 8 in (0, 1, 2)], "x[r + 8k] for r = 0..2, k = 0..1023 (3072 terms)"),
        ([i for i in range(8192) if i % 64 in (0, 8, 16, 24, 32, 40)],
         "x[r + 64k] for r in {0, 8, 16, 24, 32, 40}, k = 0..127 (768 terms)"),
        ([i for i in range(100) if i % 16 < 7], "x[r + 16k] for r = 0..6, up to x99 (46 terms)"),
        ([3, 5, 7, 100], "x3, x5, x7, x100 (4 terms)"),
        ([3, 5, 7, 100, 101, 150, 170, 171], "8 terms from x3..x171"),
        ([5], "x5"),
    ]
    for values, text in cases:
        assert set_phrase(index_set(values)) == text, values
    info = index_set([i for i in range(8192) if i % 8 in (0, 1, 4, 5)])
    assert (info["kind"], info["stride"], info["starts"], info["lengths"]) == (
        "progressions", 4, [0, 1], [2048, 2048])
    assert index_set([])["kind"] == "empty" and index_set([0, "C"])["kind"] == "contiguous"


@settings(max_examples=100, deadline=None)
@given(values=hst.sets(hst.integers(0, 300), min_size=1, max_size=120))
def test_index_set_is_exact(values):
    info = index_set(values)
    assert info["n"] == len(values) and info["lo"] == min(values) and info["hi"] == max(values)
    if info["kind"] == "progressions":
        s = info["stride"]
        rebuilt = {a + s * j for a, c in zip(info["starts"], info["lengths"]) for j in range(c)}
        assert rebuilt == set(values)
        assert all(a < info["lo"] + s for a in info["starts"])
    elif info["kind"] == "contiguous":
        assert set(values) == set(range(min(values), max(values) + 1))


# -- the accumulator C ------------------------------------------------------------------------------
def test_c_added_last():
    t = SumTree(["C", SumTree.pairwise(8).to_nested()])
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


def test_numpy_65536():
    """A large tree is summarised (its speed is a benchmark matter: timed tests fail on a
    loaded machine)."""
    s = summarize(numpy_pairwise_sum_tree(65536))
    assert "recursive split into 512 blocks" in s and "each block (128 terms): 8 lanes with stride 8" in s
