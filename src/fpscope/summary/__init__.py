"""Plain-words summaries of summation trees: recognise the common families and their compositions.

:func:`describe` turns a :class:`~fpscope.tree.SumTree` into a machine-readable dict (family name,
parameters, size and shape statistics); :func:`summarize` turns that dict into one sentence.

Recognised families (leaf indices are input positions; "fold" = left-to-right running sum):

* ``sequential`` -- ((x0 + x1) + x2) + ... ; ``reverse_sequential`` -- ((x[n-1] + x[n-2]) + ...) + x0.
* ``pairwise`` -- recursive halving, split at floor(n/2); ``balanced_binary`` (split at ceil(n/2),
  or mixed floor/ceil); ``power_of_two_split`` (split at the largest power of two below n).
* ``strided_lanes`` -- k accumulators, lane r folds x[r], x[r+k], ... ; the lane combine tree is
  classified: pairwise, sequential, halving, another family, "two_stage" (g groups of lanes summed
  first, each by the same tree, then the g sums: SIMD registers added element-wise, then a
  horizontal sum, as in OpenBLAS sdot's 8 x 8 lanes), or "irregular" (with its depth). A sub-tree
  holding some lanes of a wider reduction is described in its real indices ("lanes 0 and 1 of
  stride 8", not "2 lanes, stride 2").
* ``blocked`` -- blocks of b consecutive terms, each summed by its own sub-tree, block results added
  sequentially; every block's shape is described. Also uneven panels of one shape added left to
  right (BLAS K-panels of 448, 288, 288 terms: ``uneven``, ``block_sizes``).
* ``recursive_split`` -- contiguous binary splits (e.g. numpy's floor(n/2) rounded down to a multiple
  of 8) down to blocks that are described in turn.
* ``fused_node`` / ``fused_chain`` -- one k-term node, or a chain where every node adds L new terms
  to the running sum (tensor-core K loops: fan-in 5, 9, 17 on V100, A100, H100; FPRev, Xie et al.,
  USENIX ATC 2025, arXiv 2411.00442).
* any of these followed by a ``tail`` of terms added one at a time (numpy's n mod 8 leftovers).
* ``generic`` -- anything else, with depth, fan-in and fused-node counts.

The accumulator leaf "C" is removed before the structure is classified; where it enters is reported
separately (``describe(t)["c"]``).

:func:`index_set` / :func:`set_phrase` name a set of input indices ("x0, x8, ..., x120 and x1,
x9, ..., x121 (32 terms)"); the renderer uses them for sub-tree labels.

Modules: stats.py (node statistics, shared helpers), families.py (recognition), words.py
(phrases), indices.py (index sets), memory.py (memory order of whole-array sums); this module
holds the public entry points.

All traversals are iterative: trees with depth ~10^5 are fine, and n = 65536 takes a fraction of a
second. Neither function raises for a valid SumTree; an internal failure degrades to the generic
description.
"""

from __future__ import annotations

import re
from typing import Optional

import numpy as np

from ..tree import C_LEAF, SumTree, leaves_of
from .families import _Analyzer
from .indices import index_set, set_phrase
from .memory import _elements_text, memory_permutation, array_order
from .stats import NodeStats, _is_node, relabel, _strip_c
from .words import _c_info, _c_phrase, phrase

__all__ = ["describe", "summarize", "describe_subtree", "phrase", "index_set", "set_phrase",
           "array_order", "NodeStats"]


# -- public API ------------------------------------------------------------------------------------
def describe(tree: SumTree) -> dict:
    """Machine-readable description of a summation tree.

    Returns a dict with at least: ``family`` (str, one of "single", "empty", "sequential",
    "reverse_sequential", "pairwise", "balanced_binary", "power_of_two_split", "fused_node",
    "fused_chain", "strided_lanes", "blocked", "recursive_split", "generic"), ``n`` (number of
    integer leaves), ``tail`` (terms added one at a time after the family's core), ``has_c``,
    ``c`` (None, or a dict with ``entry`` in {"first", "last", "middle", "only_node"} and the terms
    C joins), and whole-tree statistics including C: ``depth`` (internal nodes on the longest
    root-to-leaf path), ``max_fan_in``, ``n_nodes``, ``n_fused_nodes`` (fan-in > 2), ``binary``.

    Family parameters: ``lanes``/``stride``/``combine``/``combine_tree``/``combine_text``/
    ``combine_depth``/``lane_length_min``/``lane_length_max``/``lane_starts`` (None above 64
    lanes)/``all_residues``, and ``combine_stages`` (combine "two_stage") or
    ``combine_description`` (combine names another family) (strided_lanes); ``block_size``/
    ``n_blocks``/``last_block_size``/``uneven``/``block_sizes`` (uneven panels only)/``block``/
    ``block_groups`` (blocked); ``split_rule``/``align``/``n_blocks``/``block_size_min``/
    ``block_size_max``/``block``/``block_groups`` (recursive_split; ``block`` is the shared block
    description when all blocks have one shape, else None); ``terms_per_node``/``fan_in``/
    ``chain_nodes``/``first_node_terms``/``last_node_terms`` (fused_chain); ``fan_in`` (fused_node);
    ``split`` (pairwise, balanced_binary); ``root_parts`` (generic).

    The counts describe the tree with "C" removed; the statistics include it. O(n) time, iterative.
    Never raises for a SumTree: an internal failure yields family "generic" with an ``"error"`` key.
    Raises TypeError if ``tree`` is not a SumTree.
    """
    if not isinstance(tree, SumTree):
        raise TypeError(f"describe() needs a SumTree, got {type(tree).__name__}")
    try:
        return _describe(tree)
    except Exception as exc:  # never a crash in a summary: degrade to plain statistics
        return {
            "family": "generic",
            "n": tree.n,
            "tail": 0,
            "has_c": tree.has_c,
            "c": None,
            "depth": tree.depth(),
            "max_fan_in": tree.max_fan_in(),
            "n_nodes": tree.n_nodes,
            "n_fused_nodes": sum(1 for nd in tree.nodes_postorder() if len(nd) > 2),
            "binary": tree.max_fan_in() <= 2,
            "root_parts": [],
            "error": f"{type(exc).__name__}: {exc}",
        }


def _describe(tree: SumTree) -> dict:
    root = tree.root
    n = tree.n
    full = NodeStats(root)
    whole = {
        "has_c": tree.has_c,
        "c": None,
        "depth": full.height(root),
        "max_fan_in": full.max_fan_in(root),
        "n_nodes": full.n_nodes(root),
        "n_fused_nodes": full.n_fused(root),
        "binary": full.max_fan_in(root) <= 2,
    }
    if n == 0:
        return {"family": "empty", "n": 0, "tail": 0, **whole}
    if tree.has_c:
        stripped, path = _strip_c(root)
        st = NodeStats(stripped)
        whole["c"] = _c_info(path, st, n)
    else:
        stripped, st = root, full
    d = _Analyzer(stripped, st).describe(stripped)
    out = dict(d)
    out.update(whole)
    c = whole["c"]
    if out["family"] == "fused_chain" and c is not None and c["entry"] == "first":
        out["c_in_first_node"] = c["joins_lo"] == 0 and c["joins_terms"] == out["first_node_terms"]
    return out


def describe_subtree(node) -> dict:
    """Describe one sub-tree of a canonical SumTree root (a nested tuple, or a leaf).

    Leaves need not be 0..m-1, and the description uses the real input indices: a lane x3, x11,
    x19, ... reads as "sequential", and a sub-tree holding two lanes of a stride-8 reduction
    (x0, x8, ..., x120 and x1, x9, ..., x121) as strided lanes with ``stride`` 8 and
    ``lane_starts`` [0, 1] ("lanes 0 and 1 of stride 8"). Only when that finds nothing is the
    sub-tree analysed on the ranks of its leaves; such a description has ``order`` "index_order"
    (its counts refer to the terms taken in index order). "C" is removed first. Adds ``lo``/``hi``
    (smallest and largest integer leaf), ``contiguous`` and ``index_set`` (see :func:`index_set`).
    Never raises for a node taken from a SumTree.
    """
    try:
        if not _is_node(node):
            if node == C_LEAF:
                return {"family": "empty", "n": 0, "tail": 0, "lo": -1, "hi": -1, "contiguous": False,
                        "index_set": index_set([])}
            return {"family": "single", "n": 1, "tail": 0, "lo": node, "hi": node, "contiguous": True,
                    "index_set": index_set([node])}
        stripped, _ = _strip_c(node)
        st = NodeStats(stripped)
        lo, hi, m = st.mn(stripped), st.mx(stripped), st.cnt(stripped)
        contiguous = hi - lo + 1 == m
        d = _Analyzer(stripped, st).describe(stripped)
        leaves = None
        if not contiguous and _is_node(stripped):
            leaves = leaves_of(stripped)
            if d["family"] == "generic":
                rank = {v: i + lo for i, v in enumerate(sorted(leaves))}
                relabelled = relabel(stripped, rank)
                d2 = _Analyzer(relabelled).describe(relabelled)
                if d2["family"] != "generic":
                    d = dict(d2)
                    d["order"] = "index_order"
        d = dict(d)
        sets = index_set(leaves) if leaves is not None else {
            "kind": "contiguous", "n": m, "lo": lo, "hi": hi} if m else index_set([])
        d.update({"lo": lo, "hi": hi, "contiguous": contiguous, "index_set": sets})
        return d
    except Exception as exc:  # pragma: no cover - defensive
        return {"family": "generic", "n": 0, "tail": 0, "error": f"{type(exc).__name__}: {exc}"}




def summarize(tree: SumTree, noun: Optional[str] = None, *, shape=None, order=None,
              spec: Optional[dict] = None) -> str:
    """One plain-words sentence describing the accumulation order of ``tree``.

    ``noun`` names the leaves; default "products" when the tree has the accumulator leaf "C" (a
    matrix op, whose leaves are K-products) and "terms" otherwise. Example (numpy.sum, float32,
    n = 100)::

        100 terms: 8 lanes with stride 8 over x0..x95 (lane r sums x[r], x[r+8], x[r+16], ...
        sequentially, 12 terms each), lanes combined pairwise ((0+1)+(2+3))+((4+5)+(6+7)), then
        the remaining 4 added one at a time (x96..x99).

    Whole arrays: ``shape`` (a tuple of prod(shape) = n) says that leaf k is the element
    ``x[np.unravel_index(k, shape)]`` of an array reduced whole, and ``order`` how its elements
    lie in memory: a layout name ("C" and "strided" keep the logical C order; "F" and "T", a
    transposed C array, run along the first axis fastest) or a permutation (``order[i]`` = the
    leaf at memory position i). ``spec`` (a target's ``spec()``) gives both for a whole-array
    ``numpy.sum``, ``torch.sum`` or ``jax.numpy.sum`` (see :func:`array_order`). The tree is then
    renumbered by memory position; where that numbering shows a family the summary recognises,
    the sentence says so, with the first elements by their logical multi-index; where the memory
    order is not the logical C order, the positions in it are called m0, m1, ... (x0, x1, ... stay
    the leaves of the tree: logical C-order flat indices). numpy.sum of a 64 x 48 float32 array
    in F layout::

        3072 terms, shape 64x48, taken in memory order (F layout): x[0,0], x[1,0], x[2,0], ...,
        x[63,0], x[0,1], ..., x[63,47], numbered m0..m3071 in that order; recursive split ...

    Otherwise the logical C order is tried the same way, and where neither numbering is
    recognised the plain summary of the tree is returned.

    A collective's ``spec`` (with ``world_size``; leaves are ranks) gets
    :func:`fpscope.rank_summary.summarize_ranks`.

    Raises:
        ValueError: ``shape`` does not hold n elements or ``order`` is neither a layout name nor a
            permutation of 0..n-1 (arguments given directly; a ``spec`` that does not fit is
            ignored). Never raises otherwise (see :func:`describe`).
    """
    if spec is not None and spec.get("world_size") and not tree.has_c and tree.n <= 256:
        from ..rank_summary import summarize_ranks  # a collective: leaves are ranks

        return summarize_ranks(tree)
    noun = noun or ("products" if tree.has_c else "terms")
    if shape is None and spec is not None:
        found = array_order(spec)
        if found and found["shape"] and int(np.prod(found["shape"])) == tree.n and not tree.has_c:
            shape, order = found["shape"], found["order"] if order is None else order
    if shape is None or tree.has_c or tree.n < 2:
        return _summary(tree, noun)
    shape = tuple(int(v) for v in shape)
    n = tree.n
    if int(np.prod(shape)) != n:
        raise ValueError(f"shape {shape} holds {int(np.prod(shape))} elements, the tree {n} leaves")
    order = "C" if order is None else order
    perm = memory_permutation(shape, order, n)
    dims = "x".join(str(v) for v in shape)
    how = f"memory order ({order} layout)" if isinstance(order, str) else "memory order"
    candidates = [(perm, how)]
    if perm is not None:
        candidates.append((None, f"logical C order, not in {how}"))
    for p, words in candidates:
        try:
            if p is None:
                t = tree
            else:
                pos = np.empty(n, dtype=np.int64)
                pos[p] = np.arange(n)
                t = SumTree(relabel(tree.root, pos.tolist()))
            d = describe(t)
        except Exception:  # pragma: no cover - defensive: the plain summary below
            continue
        if d["family"] != "generic":
            # positions in another order than the tree's own numbering are m0, m1, ... so that
            # they are not read as the logical flat indices x0, x1, ... of the tree and record
            name = "x" if p is None else "m"
            head = f"{n} {noun}, shape {dims}, taken in {words}: {_elements_text(p, shape)}, " \
                   f"numbered {name}0..{name}{n - 1} in that order"
            text = _summary(t, noun, d, head=head)
            return text if p is None else head + _INDEX_NAME.sub("m", text[len(head):])
    return _summary(tree, noun)


#: "x" where it names a term by its index in the summary's words (x0, x[r+8], x[r + 8k])
_INDEX_NAME = re.compile(r"\bx(?=\d|\[)")


def _summary(tree: SumTree, noun: str, d: Optional[dict] = None, head: Optional[str] = None) -> str:
    """The sentence of :func:`summarize` for the tree as numbered (``head`` replaces "n terms")."""
    if d is None:
        d = describe(tree)
    if head is None:
        head = f"{d['n']} {noun if d['n'] != 1 else noun.rstrip('s')}" + (
            " + C" if d.get("has_c") else "")
        sep = ": "
    else:
        sep = "; "
    if d["family"] == "empty":
        return "only the accumulator C (no terms)." if d.get("has_c") else "an empty tree."
    c = d.get("c")
    if c and c["entry"] == "only_node":
        # one node holds C and every term: say so directly rather than describe the C-less core
        if c["parent_fan_in"] == 2:
            return f"{head}: C + x0 in one addition."
        return f"{head}: one fused {c['parent_fan_in']}-term node holding C and all {d['n']} {noun}."
    try:
        body = phrase(d, top=True, noun=noun)
    except Exception as exc:  # pragma: no cover - defensive
        body = f"unrecognised order (summary failed: {type(exc).__name__})"
    if d["family"] in ("pairwise", "balanced_binary", "power_of_two_split", "recursive_split", "blocked"):
        body += f"; depth {d['depth']}"
    text = f"{head}{sep}{body}"
    if c:
        text += "; " + _c_phrase(c, noun)
    return text + "."
