"""Words for summation trees whose leaves are ranks (collectives: leaf r is rank r's value).

A collective adds few leaves (the world size), so the sentence names every rank: the shape of
the tree (a chain of one-at-a-time additions, as ring algorithms give; a balanced pairwise tree,
as recursive doubling or halving gives; otherwise its depth) and, up to 32 ranks, the whole
expression with ranks r0, r1, ... (operands of one addition are shown deeper subtree first:
IEEE addition is commutative, so only the grouping decides the bits).
"""

from __future__ import annotations

from .tree import SumTree

#: the whole expression is printed up to this many ranks
EXPRESSION_LIMIT = 32


def _size(node) -> int:
    return 1 if isinstance(node, int) else sum(_size(c) for c in node)


def _depth(node) -> int:
    return 0 if isinstance(node, int) else 1 + max(_depth(c) for c in node)


def _ordered(node):
    """Children deeper (then larger) first."""
    return sorted(node, key=lambda c: (-_depth(c), -_size(c)))


def expression(tree: SumTree, name: str = "r") -> str:
    """``((r3 + r2) + r1) + r0`` (no outer parentheses)."""
    def text(node, top=False):
        if isinstance(node, int):
            return f"{name}{node}"
        inner = " + ".join(text(c) for c in _ordered(node))
        return inner if top else f"({inner})"
    return text(tree.root, top=True)


def _chain(node) -> list | None:
    """Ranks in the order a chain adds them (first two at the bottom), or None."""
    out: list = []
    while not isinstance(node, int):
        if len(node) != 2:
            return None
        a, b = _ordered(node)
        if not isinstance(b, int):
            return None
        out.append(b)
        node = a
    out.append(node)
    return out[::-1]


def _rank_list(ranks: list) -> str:
    """``r2, r3, r4, r0`` with ascending runs of three or more as ``r2..r9``."""
    parts, i = [], 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        if j - i >= 2:
            parts.append(f"r{ranks[i]}..r{ranks[j]}")
        else:
            parts += [f"r{r}" for r in ranks[i:j + 1]]
        i = j + 1
    return ", ".join(parts)


def _balanced(node) -> bool:
    """A perfect binary tree of consecutive ranks (recursive doubling / halving)."""
    if isinstance(node, int):
        return True
    if len(node) != 2 or _size(node[0]) != _size(node[1]):
        return False
    return _balanced(node[0]) and _balanced(node[1])


def summarize_ranks(tree: SumTree) -> str:
    """One sentence, e.g. ``4 ranks: a chain from r3 + r2, then r1, r0 one at a time: ((r3 +
    r2) + r1) + r0.`` Never raises."""
    n = tree.n
    if n == 1:
        return "1 rank: its own value"
    root = tree.root
    chain = _chain(root)
    if n == 2 and chain is not None:
        return f"2 ranks: one addition, {expression(tree)}."
    if chain is not None:
        rest = _rank_list(chain[2:])
        shape = (f"a chain (one rank at a time) from r{chain[0]} + r{chain[1]}"
                 + (f", then {rest}" if rest else ""))
    elif _balanced(root):
        shape = "a balanced pairwise tree (as recursive doubling or halving adds)"
    else:
        fused = max(len(c) for c in _nodes(root))
        shape = (f"a tree of depth {_depth(root)}" + (f" with nodes adding up to {fused} "
                                                      f"values at once" if fused > 2 else ""))
    expr = f": {expression(tree)}" if n <= EXPRESSION_LIMIT else ""
    return f"{n} ranks: {shape}{expr}."


def _nodes(node):
    if isinstance(node, int):
        return
    yield node
    for c in node:
        yield from _nodes(c)
