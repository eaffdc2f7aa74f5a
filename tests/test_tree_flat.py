"""The flat JSON form of a SumTree (schema fpscope.record/2): ``{"leaves": n, "nodes": [...]}``,
children before parents, the last node the root (fpscope DESIGN.md, "Tree JSON")."""

import json
import random

import numpy as np
import pytest
from families import blocked_tree, fused_chain_tree, numpy_pairwise_sum_tree, random_tree
from hypothesis import given, settings
from hypothesis import strategies as st

from fpscope.tree import C_LEAF, SumTree, TreeError


@st.composite
def trees(draw, max_n: int = 40):
    """Random trees: 1..max_n leaves, fan-in up to 5, with or without "C"."""
    n = draw(st.integers(1, max_n))
    fan = draw(st.integers(2, 5))
    with_c = draw(st.booleans())
    seed = draw(st.integers(0, 2**32 - 1))
    return random_tree(n, np.random.default_rng(seed), max_fan_in=fan, with_c=with_c)


def _check_flat(flat: dict, tree: SumTree) -> None:
    """Structural invariants of the flat form."""
    n, nodes = flat["leaves"], flat["nodes"]
    assert n == tree.n and len(nodes) == tree.n_nodes
    for k, kids in enumerate(nodes):
        assert len(kids) >= 2
        assert all(c == C_LEAF or 0 <= c < n + k for c in kids)
    ids = [c for kids in nodes for c in kids if c != C_LEAF]
    assert sorted(ids) == list(range(n + len(nodes) - 1)) if nodes else n == 1


@settings(max_examples=200, deadline=None)
@given(trees())
def test_flat_round_trip_random_trees(tree):
    flat = tree.to_flat()
    _check_flat(flat, tree)
    back = SumTree.from_flat(flat)
    assert back == tree and back.has_c == tree.has_c and back.n == tree.n
    assert back.to_flat() == flat
    assert tree.to_json() == flat
    # through JSON text, and through the nested form
    assert SumTree.from_json(json.dumps(flat)) == tree
    assert SumTree.from_json(tree.to_nested()) == tree
    assert SumTree.from_json(json.dumps(tree.to_nested())) == tree
    assert SumTree(tree.to_nested()).to_flat() == flat
    # the node list follows nodes_postorder (per-node arithmetic lists rely on that order)
    assert [len(k) for k in flat["nodes"]] == [len(nd) for nd in tree.nodes_postorder()]


def test_flat_examples_of_the_design():
    t = SumTree.from_flat({"leaves": 4, "nodes": [[0, 1], [2, 3], [4, 5]]})
    assert t == SumTree([[0, 1], [2, 3]]) and t.to_nested() == [[0, 1], [2, 3]]
    fused = SumTree.from_flat({"leaves": 5, "nodes": [[0, 1, 2, 3, 4]]})
    assert fused == SumTree([0, 1, 2, 3, 4]) and fused.max_fan_in() == 5
    assert fused.to_flat() == {"leaves": 5, "nodes": [[0, 1, 2, 3, 4]]}


def test_flat_single_leaf():
    t = SumTree(0)
    assert t.to_flat() == {"leaves": 1, "nodes": []}
    assert t.to_nested() == 0
    assert SumTree.from_flat({"leaves": 1, "nodes": []}) == t
    assert SumTree.from_json({"leaves": 1, "nodes": []}) == t
    assert SumTree.from_json("0") == t


def test_flat_accumulator_leaf_and_fused_nodes():
    t = SumTree([["C", 0, 1, 2, 3], 4, 5, 6, 7])  # C enters the first fused 5-term node
    flat = t.to_flat()
    assert flat == {"leaves": 8, "nodes": [["C", 0, 1, 2, 3], [8, 4, 5, 6, 7]]}
    back = SumTree.from_flat(flat)
    assert back == t and back.has_c
    for tree in (fused_chain_tree(64, 8), fused_chain_tree(37, 4, with_c=False),
                 numpy_pairwise_sum_tree(300), blocked_tree(100, 16)):
        assert SumTree.from_json(tree.to_json()) == tree
        assert SumTree.from_flat(tree.to_flat()).has_c == tree.has_c


def test_flat_node_order_is_free_on_input():
    t = SumTree.from_flat({"leaves": 4, "nodes": [[3, 2], [1, 0], [4, 5]]})
    assert t == SumTree([[0, 1], [2, 3]])
    assert t.to_flat() == {"leaves": 4, "nodes": [[0, 1], [2, 3], [4, 5]]}


def _shuffled_nested(tree: SumTree, rng: random.Random):
    """The nested form of ``tree`` with the children of every node in random order."""
    def go(x):
        if not isinstance(x, list):
            return x
        kids = [go(c) for c in x]
        rng.shuffle(kids)
        return kids
    return go(tree.to_nested())


@settings(max_examples=100, deadline=None)
@given(trees(max_n=30), st.integers(0, 1000))
def test_equal_trees_give_identical_flat_json(tree, seed):
    other = SumTree(_shuffled_nested(tree, random.Random(seed)))
    assert other == tree
    assert json.dumps(other.to_json()) == json.dumps(tree.to_json())
    assert other.dumps() == tree.dumps()


@pytest.mark.parametrize("tree", [SumTree.sequential(5000), SumTree.reverse_sequential(5000)])
def test_flat_deep_trees_with_plain_json(tree):
    text = json.dumps(tree.to_json())  # plain json: no RecursionError either way
    assert SumTree.from_json(json.loads(text)) == tree
    assert SumTree.from_json(text) == tree
    assert text.count("[[") == 1  # the flat form is two levels deep at any size


def test_flat_round_trip_16384_leaves():
    """Large trees of every shape (speed is a benchmark matter, not a test's)."""
    for tree in (SumTree.sequential(16384), numpy_pairwise_sum_tree(16384),
                 random_tree(16384, np.random.default_rng(3), max_fan_in=4, with_c=True)):
        assert SumTree.from_flat(tree.to_flat()) == tree


@pytest.mark.parametrize("obj, words", [
    ({"leaves": 3, "nodes": [[0, 1], [3, 7]]}, "out of range"),           # child id out of range
    ({"leaves": 3, "nodes": [[0, -1], [3, 2]]}, "out of range"),          # negative id
    ({"leaves": 3, "nodes": [[0, 4], [1, 2]]}, "not listed before"),      # forward reference
    ({"leaves": 3, "nodes": [[0, 1], [3, 3, 2]]}, "node 3 is used more"), # node used twice
    ({"leaves": 4, "nodes": [[0, 1], [2, 3], [0, 5]]}, "leaf 0 appears"), # leaf used twice
    ({"leaves": 4, "nodes": [[0, 1], [2, 3], [1, 2]]}, "leaf 1 appears"),
    ({"leaves": 4, "nodes": [[0, 1], [2, 3], [4, 3]]}, "leaf 3 appears"),
    ({"leaves": 3, "nodes": [[0, 1], [0, 1, 2]]}, "leaf 0 appears"),
    ({"leaves": 4, "nodes": [[0, 1], [2, 3], [0, 2]]}, "leaf 0 appears"),
    ({"leaves": 4, "nodes": [[0, 1], [2, 3], [4, 2]]}, "leaf 2 appears"),
    ({"leaves": 5, "nodes": [[0, 1], [2, 3], [5, 6]]}, "missing [4]"),    # a leaf is missing
    ({"leaves": 4, "nodes": [[0, 1], [2, 3]]}, "not used"),               # an unused node
    ({"leaves": 2, "nodes": [[0, 1], [2]]}, "at least two children"),    # a node with one child
    ({"leaves": 2, "nodes": [[0, 1], []]}, "at least two children"),
    ({"leaves": 2, "nodes": [[0], [2, 1]]}, "at least two children"),
    ({"leaves": 2, "nodes": [0, 1]}, "at least two children"),
    ({"leaves": 3, "nodes": []}, "needs nodes"),
    ({"leaves": 0, "nodes": []}, '"leaves"'),
    ({"leaves": True, "nodes": [[0, 1]]}, '"leaves"'),
    ({"leaves": 2.0, "nodes": [[0, 1]]}, '"leaves"'),
    ({"leaves": 2, "nodes": {"0": [0, 1]}}, '"nodes"'),
    ({"leaves": 2}, "object"),
    ({"nodes": [[0, 1]]}, "object"),
    ({"leaves": 2, "nodes": [[0, 1.0]]}, "not an id"),
    ({"leaves": 2, "nodes": [[0, True]]}, "not an id"),
    ({"leaves": 2, "nodes": [[0, "D"]]}, "not an id"),
    ({"leaves": 2, "nodes": [["C", 0], ["C", 1, 2]]}, '"C" appears'),
    ([[0, 1], [2]], "1 child"),                                           # nested form, one child
])
def test_from_flat_rejects(obj, words):
    with pytest.raises(TreeError) as info:
        SumTree.from_json(obj)
    msg = str(info.value)
    assert words in msg and "\n" not in msg, msg
    if isinstance(obj, dict):
        with pytest.raises(TreeError):
            SumTree.from_flat(obj)
        with pytest.raises(TreeError):
            SumTree.from_json(json.dumps(obj))


def test_from_flat_rejects_non_dicts():
    for obj in ([[0, 1]], 3, None, "x"):
        with pytest.raises(TreeError):
            SumTree.from_flat(obj)
    with pytest.raises(TreeError, match="not valid JSON"):
        SumTree.from_json('{"leaves": 2,')
