"""Words for trees whose leaves are ranks (fpscope.rank_summary)."""

import pytest

from fpscope.rank_summary import expression, summarize_ranks
from fpscope.tree import SumTree


@pytest.mark.parametrize("tree, want", [
    ((0, 1), "2 ranks: one addition, r0 + r1."),
    ((((2, 3), 1), 0), "4 ranks: a chain (one rank at a time) from r2 + r3, then r1, r0: "
                       "((r2 + r3) + r1) + r0."),
    (((0, 1), (2, 3)), "4 ranks: a balanced pairwise tree (as recursive doubling or halving "
                       "adds): (r0 + r1) + (r2 + r3)."),
    (((0, 1, 2), (3, 4)), "5 ranks: a tree of depth 2 with nodes adding up to 3 values at once: "
                          "(r0 + r1 + r2) + (r3 + r4)."),
])
def test_sentences(tree, want):
    assert summarize_ranks(SumTree(tree)) == want


def test_the_expression_is_left_out_past_32_ranks():
    node = 0
    for r in range(1, 40):
        node = (node, r)
    text = summarize_ranks(SumTree(node))
    assert text == "40 ranks: a chain (one rank at a time) from r0 + r1, then r2..r39."


def test_ring_chain_ranks_wrap_around():
    text = summarize_ranks(SumTree(((((((2, 3), 4), 5), 0), 1))))
    assert text.startswith("6 ranks: a chain (one rank at a time) from r2 + r3, then r4, r5, "
                           "r0, r1:")


def test_deeper_operand_first():
    assert expression(SumTree((0, (1, 2)))) == "(r1 + r2) + r0"
