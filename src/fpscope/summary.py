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

All traversals are iterative: trees with depth ~10^5 are fine, and n = 65536 takes a fraction of a
second. Neither function raises for a valid SumTree; an internal failure degrades to the generic
description.
"""

from __future__ import annotations

import functools
import re
from typing import Any, Optional

import numpy as np

from .tree import C_LEAF, SumTree, TreeError, leaves_of

__all__ = ["describe", "summarize", "describe_subtree", "phrase", "index_set", "set_phrase",
           "array_order"]

# structure flags, computed bottom-up for every node (a leaf has all of them)
_FLOOR, _CEIL, _POW2, _BAL, _SEQ, _REV = 1, 2, 4, 8, 16, 32
_ALL = _FLOOR | _CEIL | _POW2 | _BAL | _SEQ | _REV
# the flag every tree of a family has (a quick necessary test for "has the same shape")
_FAMILY_FLAG = {"sequential": _SEQ, "reverse_sequential": _REV, "pairwise": _FLOOR,
                "power_of_two_split": _POW2}

_MAX_LEVEL = 5  # nesting depth of compositions (blocks of blocks of ...)
_MAX_GROUPS = 3  # distinct block shapes listed by name
_MAX_LISTED = 64  # lane starts / residues kept in a description


def _is_node(x) -> bool:
    return x.__class__ is tuple


class NodeStats:
    """Bottom-up facts about every internal node of a canonical tree, keyed by ``id(node)``.

    Leaves may be ints or "C" ("C" counts in ``cnt`` but not in ``mn``/``mx``, which are the
    smallest and largest integer leaf, -1 when there is none). One iterative post-order pass,
    O(number of nodes).
    """

    def __init__(self, root) -> None:
        self.root = root
        self._cnt: dict[int, int] = {}
        self._mn: dict[int, int] = {}
        self._mx: dict[int, int] = {}
        self._ht: dict[int, int] = {}
        self._fl: dict[int, int] = {}
        self._fan: dict[int, int] = {}
        self._fused: dict[int, int] = {}
        self._nodes: dict[int, int] = {}
        if not _is_node(root):
            return
        cnt, mn, mx, ht, fl = self._cnt, self._mn, self._mx, self._ht, self._fl
        fan, fused, nodes = self._fan, self._fused, self._nodes
        big = 1 << 62
        stack = [(root, False)]
        while stack:
            cur, visited = stack.pop()
            if not visited:
                stack.append((cur, True))
                for c in cur:
                    if c.__class__ is tuple:
                        stack.append((c, False))
                continue
            c_tot = 0
            lo, hi, h, f_max, n_fused, n_nodes = big, -1, 0, len(cur), 1 if len(cur) > 2 else 0, 1
            for c in cur:
                if c.__class__ is tuple:
                    i = id(c)
                    c_tot += cnt[i]
                    if mn[i] >= 0 and mn[i] < lo:
                        lo = mn[i]
                    if mx[i] > hi:
                        hi = mx[i]
                    if ht[i] > h:
                        h = ht[i]
                    if fan[i] > f_max:
                        f_max = fan[i]
                    n_fused += fused[i]
                    n_nodes += nodes[i]
                else:
                    c_tot += 1
                    if c != C_LEAF:
                        if c < lo:
                            lo = c
                        if c > hi:
                            hi = c
            i = id(cur)
            cnt[i] = c_tot
            mn[i] = lo if hi >= 0 else -1
            mx[i] = hi
            ht[i] = h + 1
            fan[i] = f_max
            fused[i] = n_fused
            nodes[i] = n_nodes
            flags = 0
            if len(cur) == 2:
                a, b = cur
                fa, fb = self.flags(a), self.flags(b)
                if not _is_node(b) and b != C_LEAF and (fa & _SEQ) and b > self.mx(a):
                    flags |= _SEQ
                if not _is_node(a) and a != C_LEAF and (fb & _REV) and a < self.mn(b):
                    flags |= _REV
                if self.mx(a) < self.mn(b) and C_LEAF not in (a, b):
                    m, s = c_tot, self.cnt(a)
                    common = fa & fb
                    if s == m // 2:
                        flags |= common & _FLOOR
                    if s == (m + 1) // 2:
                        flags |= common & _CEIL
                    if s == 1 << ((m - 1).bit_length() - 1):
                        flags |= common & _POW2
                    if abs(m - 2 * s) <= 1:
                        flags |= common & _BAL
            fl[i] = flags

    # accessors: work for leaves and internal nodes alike
    def cnt(self, x) -> int:
        return self._cnt[id(x)] if x.__class__ is tuple else 1

    def mn(self, x) -> int:
        return self._mn[id(x)] if x.__class__ is tuple else (-1 if x == C_LEAF else x)

    def mx(self, x) -> int:
        return self._mx[id(x)] if x.__class__ is tuple else (-1 if x == C_LEAF else x)

    def height(self, x) -> int:
        return self._ht[id(x)] if x.__class__ is tuple else 0

    def flags(self, x) -> int:
        return self._fl[id(x)] if x.__class__ is tuple else _ALL

    def max_fan_in(self, x) -> int:
        return self._fan[id(x)] if x.__class__ is tuple else 0

    def n_fused(self, x) -> int:
        return self._fused[id(x)] if x.__class__ is tuple else 0

    def n_nodes(self, x) -> int:
        return self._nodes[id(x)] if x.__class__ is tuple else 0

    def contiguous(self, x) -> bool:
        """True when the integer leaves under x are exactly mn..mx (and there is no "C")."""
        return self.mn(x) >= 0 and self.mx(x) - self.mn(x) + 1 == self.cnt(x)


def _leftmost_leaf(x):
    while x.__class__ is tuple:
        x = x[0]
    return x


def _sort_key(x) -> int:
    leaf = _leftmost_leaf(x)  # canonical form: the smallest leaf is on the leftmost path
    return -1 if leaf == C_LEAF else leaf


def _strip_c(root) -> tuple[Any, list]:
    """Remove "C" from a canonical tree. Returns (new canonical root, path of original nodes from
    the root to C's parent). "C" sorts first, so it lies on the leftmost path."""
    path = []
    cur = root
    while cur.__class__ is tuple:
        path.append(cur)
        cur = cur[0]
    if cur != C_LEAF:
        return root, []
    parent = path[-1]
    rest = parent[1:]
    new = rest[0] if len(rest) == 1 else tuple(rest)
    for anc in reversed(path[:-1]):
        kids = [new] + list(anc[1:])
        kids.sort(key=_sort_key)
        new = tuple(kids)
    return new, path


def _rng(lo: int, hi: int) -> str:
    if lo == hi:
        return f"x{lo}"
    if hi == lo + 1:
        return f"x{lo}, x{hi}"
    return f"x{lo}..x{hi}"


def _plural(k: int, word: str) -> str:
    return f"{k} {word}" + ("" if k == 1 else "s")


class _Analyzer:
    """Classifies C-free subtrees whose integer leaves are contiguous."""

    def __init__(self, root, stats: Optional[NodeStats] = None) -> None:
        self.root = root
        self.st = stats if stats is not None else NodeStats(root)
        self._memo: dict[tuple[int, bool], tuple[int, dict]] = {}

    # -- entry point ---------------------------------------------------------------------------
    def describe(self, node, level: int = 0, allow_split: bool = True) -> dict:
        # memoised: block and panel searches describe the same sub-trees more than once. A result
        # found at a shallower nesting level is reused (it only went deeper than needed).
        key = (id(node), allow_split)
        hit = self._memo.get(key)
        if hit is not None and hit[0] <= level:
            return hit[1]
        d = self._describe(node, level, allow_split)
        self._memo[key] = (level, d)
        return d

    def _describe(self, node, level: int, allow_split: bool) -> dict:
        st = self.st
        m = st.cnt(node)
        if not _is_node(node):
            return {"family": "single", "n": 1, "tail": 0}
        base = {"n": m, "tail": 0}
        f = st.flags(node)
        if all(not _is_node(c) for c in node) and len(node) > 2:
            return {**base, "family": "fused_node", "fan_in": len(node)}
        if f & _SEQ:
            return {**base, "family": "sequential"}
        if f & _FLOOR:
            return {**base, "family": "pairwise", "split": "floor"}
        if f & _REV:
            return {**base, "family": "reverse_sequential"}
        if f & _CEIL:
            return {**base, "family": "balanced_binary", "split": "ceil"}
        if f & _POW2 and _is_node(node[1]):  # (2^k terms) + one leaf reads better as a tail
            return {**base, "family": "power_of_two_split", "split": "pow2"}
        if f & _BAL and _is_node(node[1]):
            return {**base, "family": "balanced_binary", "split": "mixed"}
        contiguous = st.contiguous(node)
        if level < _MAX_LEVEL and (contiguous or st.mn(node) >= 0):
            # a scattered set is a sub-tree (e.g. some lanes of a strided reduction): only the
            # families that read naturally on real input indices are looked for
            recs = (
                (self._fused_chain, self._blocked, self._strided, self._blocked_uneven)
                if contiguous
                else (self._strided,)
            )
            for rec in recs:
                d = rec(node, level)
                if d is not None:
                    return d
            # terms added one at a time at the end (each the largest index so far)
            t, core = 0, node
            while (
                _is_node(core)
                and len(core) == 2
                and not _is_node(core[1])
                and core[1] == st.mx(core)
            ):
                t += 1
                core = core[0]
            if t and _is_node(core):
                d = self.describe(core, level + 1, allow_split)
                if d["family"] != "generic":
                    d = dict(d)
                    d["n"] = m
                    d["tail"] = t
                    return d
                return self._generic(node, tail=t)
            if allow_split and contiguous:
                d = self._split(node, level)
                if d is not None:
                    return d
        return self._generic(node)

    # -- generic ---------------------------------------------------------------------------------
    def _generic(self, node, tail: int = 0) -> dict:
        st = self.st
        parts = []
        if _is_node(node) and len(node) <= 8:
            for c in node:
                parts.append(
                    {"n": st.cnt(c), "lo": st.mn(c), "hi": st.mx(c), "contiguous": st.contiguous(c)}
                )
        return {
            "family": "generic",
            "n": st.cnt(node),
            "tail": tail,
            "depth": st.height(node),
            "max_fan_in": st.max_fan_in(node),
            "n_fused_nodes": st.n_fused(node),
            "binary": st.max_fan_in(node) <= 2,
            "root_parts": parts,
        }

    # -- fused chain -----------------------------------------------------------------------------
    def _fused_chain(self, node, level: int) -> Optional[dict]:
        st = self.st
        adds = []  # new leaves per chain node, top-down
        cur = node
        while True:
            if not _is_node(cur):
                return None
            if _is_node(cur[0]):
                prev, new = cur[0], cur[1:]
                if any(_is_node(c) for c in new):
                    return None
                start = st.mx(prev) + 1
                for i, c in enumerate(new):
                    if c != start + i:
                        return None
                adds.append(len(new))
                cur = prev
            else:
                if any(_is_node(c) for c in cur):
                    return None
                if cur[-1] - cur[0] != len(cur) - 1:
                    return None
                first = len(cur)
                break
        if not adds:
            return None
        if len(adds) == 1:  # two nodes: the first node fixes L; the second must be fused too
            L = first
            if adds[0] < 2 or adds[0] > L:
                return None
        else:
            L = adds[1]
        if L < 2 or any(a != L for a in adds[1:]) or adds[0] > L or first > L + 1:
            return None
        if max(len(node), st.max_fan_in(node)) <= 2:
            return None
        return {
            "family": "fused_chain",
            "n": st.cnt(node),
            "tail": 0,
            "terms_per_node": L,
            "fan_in": L + 1,
            "chain_nodes": len(adds) + 1,
            "first_node_terms": first,
            "last_node_terms": adds[0],
        }

    # -- blocked panels --------------------------------------------------------------------------
    def _split_ok(self, x) -> bool:
        st = self.st
        return _is_node(x) and len(x) == 2 and st.mx(x[0]) + 1 == st.mn(x[1])

    def _blocked(self, node, level: int) -> Optional[dict]:
        st = self.st
        if not self._split_ok(node):
            return None
        top = st.cnt(node[1])
        cur = node[0]
        if not self._split_ok(cur):
            return None
        b = st.cnt(cur[1])
        if b < 2 or top > b:
            return None
        blocks = [node[1]]
        while st.cnt(cur) > b:
            if not self._split_ok(cur) or st.cnt(cur[1]) != b:
                return None
            blocks.append(cur[1])
            cur = cur[0]
        if st.cnt(cur) != b:
            return None
        blocks.append(cur)
        blocks.reverse()
        if len(blocks) < 3 or (len(blocks) == 3 and top == 1):
            return None  # two blocks plus one leaf reads better as a split plus a tail
        groups = self._block_groups(blocks, level)
        return {
            "family": "blocked",
            "n": st.cnt(node),
            "tail": 0,
            "block_size": b,
            "n_blocks": len(blocks),
            "last_block_size": top,
            "block_order": "sequential",
            "uneven": False,
            "block": groups[0]["description"] if len(groups) == 1 else None,
            "block_groups": groups,
        }

    def _block_groups(self, blocks: list, level: int) -> list[dict]:
        return _group_by_shape(
            (self.st.cnt(blk), self.describe(blk, level + 1, allow_split=True)) for blk in blocks
        )

    def _blocked_uneven(self, node, level: int) -> Optional[dict]:
        """Blocked panels of uneven sizes: a left-to-right fold ((P0 + P1) + P2) + ... of at least
        three contiguous panels of two or more terms that all have one shape (BLAS K-panels such
        as 448, 288, 288). The panels are read off the left spine; the first panel is the
        shallowest spine node with the panels' shape, so a panel that is itself split in halves is
        not mistaken for more panels."""
        st = self.st
        rights: list[tuple[Any, dict]] = []
        spine = []
        shape0 = None
        cur = node
        while self._split_ok(cur) and st.cnt(cur[1]) >= 2:
            r = cur[1]
            # panels are summed by one kernel each: recursive splits are not looked for here
            dr = self.describe(r, level + 1, allow_split=False)
            if dr["family"] == "generic":
                break
            sh = phrase(dr, top=False)
            if shape0 is None:
                shape0 = sh
            elif sh != shape0:
                break
            rights.append((r, dr))
            spine.append(cur)
            cur = cur[0]
        if len(rights) < 2:
            return None
        r0, d0 = rights[0]
        mask = _FAMILY_FLAG.get(d0["family"], 0) if not d0.get("tail") else 0
        sig = (st.flags(r0) & mask, st.max_fan_in(r0) > 2)
        budget = 4 * st.cnt(node)  # bound the work spent on describing candidate first panels

        def same_shape(x) -> Optional[dict]:
            nonlocal budget
            if (st.flags(x) & mask, st.max_fan_in(x) > 2) != sig:  # O(1) necessary test
                return None
            budget -= st.cnt(x)
            dx = self.describe(x, level + 1, allow_split=False)
            ok = dx["family"] != "generic" and phrase(dx, top=False) == shape0
            return dx if ok else None

        if same_shape(node[0]) is not None:
            return None  # the whole left side has the panels' shape: a split into two blocks
        for i in range(2, len(rights) + 1):
            bottom = spine[i - 1][0]
            if st.cnt(bottom) < 2 or budget < 0:
                return None
            db = same_shape(bottom)
            if db is None:
                continue
            blocks = [(bottom, db)] + rights[:i][::-1]
            sizes = [st.cnt(b) for b, _ in blocks]
            groups = _group_by_shape((st.cnt(b), dd) for b, dd in blocks)
            return {
                "family": "blocked",
                "n": st.cnt(node),
                "tail": 0,
                "block_size": sizes[0],
                "n_blocks": len(blocks),
                "last_block_size": sizes[-1],
                "block_order": "sequential",
                "uneven": True,
                "block_sizes": sizes,
                "block": groups[0]["description"] if len(groups) == 1 else None,
                "block_groups": groups,
            }
        return None

    # -- k-lane strided accumulation -------------------------------------------------------------
    def _strided(self, node, level: int) -> Optional[dict]:
        """Lanes with a common stride s: lane r is the sequential fold of x[r], x[r+s], x[r+2s], ...
        (at least two terms each, distinct residues mod s), and the lane sums are added by some
        combine tree. Works on the real leaf indices, so a sub-tree holding lanes 0 and 1 of a
        stride-8 reduction (x0, x1, x8, x9, ...) reads as two lanes of stride 8."""
        st = self.st
        lo, m = st.mn(node), st.cnt(node)
        if lo < 0 or not _is_node(node):
            return None
        cur = node
        while _is_node(cur[0]):
            cur = cur[0]
        if len(cur) != 2 or _is_node(cur[1]):
            return None
        s = cur[1] - lo  # the leftmost lane starts x[lo], x[lo + s]
        if s < 2 or (st.contiguous(node) and 2 * s > m):  # every lane holds at least two terms
            return None
        # top-down: a node whose leaves are an arithmetic progression with step s must be a lane
        # (a sequential fold); anything above the lanes is the combine tree
        lanes: list[tuple[int, int]] = []
        residues: set[int] = set()
        done: dict[int, Any] = {}
        combine_nodes = 0
        stack = [(node, False)]
        while stack:
            x, visited = stack.pop()
            if visited:
                done[id(x)] = tuple(done[id(c)] for c in x)
                continue
            if not _is_node(x):
                return None  # a lone term cannot be a lane
            a, b, c = st.mn(x), st.mx(x), st.cnt(x)
            if (b - a) % s == 0 and (b - a) // s + 1 == c:
                y = x
                for i in range(c - 1, 0, -1):
                    if not _is_node(y) or len(y) != 2 or _is_node(y[1]) or y[1] != a + i * s:
                        return None
                    y = y[0]
                if y != a:
                    return None
                r = a % s
                if r in residues:  # two lanes of one residue: blocks of lanes, not k lanes
                    return None
                residues.add(r)
                lanes.append((a, c))
                done[id(x)] = a
                continue
            combine_nodes += 1
            if combine_nodes >= s:  # k lanes of distinct residues: k <= s, k - 1 combine nodes
                return None
            stack.append((x, True))
            stack.extend((ch, False) for ch in x)
        k = len(lanes)
        if k < 2:
            return None
        starts = sorted(a for a, _ in lanes)
        rank = {a: i for i, a in enumerate(starts)}
        try:
            lane_tree = SumTree(_relabel(done[id(node)], rank))
        except TreeError:
            return None
        if lane_tree.n != k:
            return None
        lens = [c for _, c in lanes]
        out = {
            "family": "strided_lanes",
            "n": m,
            "tail": 0,
            "lanes": k,
            "stride": s,
            "lane_length_min": min(lens),
            "lane_length_max": max(lens),
            "lane_order": "sequential",
            "lane_starts": starts if k <= _MAX_LISTED else None,
            "all_residues": k == s,
        }
        out.update(_combine_info(lane_tree))
        return out

    # -- recursive contiguous splitting ------------------------------------------------------------
    def _split(self, node, level: int) -> Optional[dict]:
        st = self.st

        def balanced_split(x) -> bool:
            if not self._split_ok(x):
                return False
            a, b = st.cnt(x[0]), st.cnt(x[1])
            return 4 * min(a, b) >= a + b

        if not balanced_split(node):
            return None
        splits: list[tuple[int, int]] = []
        blocks = []
        stack = [node]
        while stack:
            x = stack.pop()
            if x is not node:
                d = self.describe(x, level + 1, allow_split=False)
                if d["family"] != "generic" or not balanced_split(x):
                    blocks.append((st.mn(x), x, d))
                    continue
            splits.append((st.cnt(x), st.cnt(x[0])))
            stack.append(x[1])
            stack.append(x[0])
        blocks.sort(key=lambda t: t[0])
        rule, align = _split_rule(splits)
        glist = _group_by_shape((st.cnt(blk), d) for _, blk, d in blocks)
        sizes = [st.cnt(b) for _, b, _ in blocks]
        return {
            "family": "recursive_split",
            "n": st.cnt(node),
            "tail": 0,
            "split_rule": rule,
            "align": align,
            "n_splits": len(splits),
            "min_split_size": min(m for m, _ in splits),
            "n_blocks": len(blocks),
            "block_size_min": min(sizes),
            "block_size_max": max(sizes),
            "block": glist[0]["description"] if len(glist) == 1 else None,
            "block_groups": glist,
        }


def _group_by_shape(entries) -> list[dict]:
    """Group (size, description) of consecutive blocks by their phrase; most common first."""
    groups: dict[str, dict] = {}
    for i, (size, d) in enumerate(entries):
        shape = phrase(d, top=False)
        g = groups.get(shape)
        if g is None:
            groups[shape] = {"shape": shape, "count": 1, "size_min": size, "size_max": size,
                             "first_block": i, "description": d}
        else:
            g["count"] += 1
            g["size_min"] = min(g["size_min"], size)
            g["size_max"] = max(g["size_max"], size)
    return sorted(groups.values(), key=lambda g: (-g["count"], g["first_block"]))


def _split_rule(splits: list[tuple[int, int]]) -> tuple[str, Optional[int]]:
    if all(s == m // 2 for m, s in splits):
        return "floor", None
    if all(s == (m + 1) // 2 for m, s in splits):
        return "ceil", None
    a = 1 << 20
    while a >= 2:
        if all(s == (m // 2) - (m // 2) % a for m, s in splits):
            return "floor_aligned", a
        a >>= 1
    if all(s == 1 << ((m - 1).bit_length() - 1) for m, s in splits):
        return "pow2", None
    return "irregular", None


def _strip_parens(text: str) -> str:
    if text.startswith("(") and text.endswith(")"):
        depth = 0
        for i, ch in enumerate(text):
            depth += ch == "("
            depth -= ch == ")"
            if depth == 0 and i < len(text) - 1:
                return text
        return text[1:-1]
    return text


def _halving_tree(k: int) -> Optional[SumTree]:
    if k < 2 or k & (k - 1):
        return None
    items: list = list(range(k))
    while len(items) > 1:
        h = len(items) // 2
        items = [(items[j], items[j + h]) for j in range(h)]
    return SumTree(items[0])


@functools.lru_cache(maxsize=256)
def _reference_tree(kind: str, k: int) -> Optional[SumTree]:
    if kind == "pairwise":
        return SumTree.pairwise(k)
    if kind == "sequential":
        return SumTree.sequential(k)
    return _halving_tree(k)


def _classify_combine(lane_tree: SumTree) -> str:
    """Name of the combine tree's shape: "pairwise", "sequential", "halving", another family name
    (e.g. "power_of_two_split"), "two_stage", or "irregular"."""
    return _combine_info(lane_tree)["combine"]


def _combine_info(lane_tree: SumTree, depth: int = 0) -> dict:
    """Classify the tree that adds the k lane sums (leaves = lane numbers 0..k-1).

    Returns ``combine`` (see :func:`_classify_combine`), ``combine_tree`` (flat JSON form),
    ``combine_text`` (infix text, k <= 256 only), ``combine_depth``, and for "two_stage"
    ``combine_stages`` = {"kind": "interleaved" | "contiguous", "groups": g, "group_size": b,
    "group": <info of one group's tree over 0..b-1>, "outer": <info of the tree over the g group
    sums>}; for another family ``combine_description`` (a description dict)."""
    k = lane_tree.n
    info: dict = {
        "combine": "irregular",
        "combine_tree": lane_tree.to_json(),
        "combine_text": _strip_parens(lane_tree.to_text()) if k <= 256 else None,
        "combine_depth": lane_tree.depth(),
        "combine_lanes": k,
    }
    if lane_tree == _reference_tree("pairwise", k):
        info["combine"] = "pairwise"
    elif lane_tree == _reference_tree("sequential", k):
        info["combine"] = "sequential"
    elif lane_tree == _reference_tree("halving", k):
        info["combine"] = "halving"
    elif _is_node(lane_tree.root):
        d = _Analyzer(lane_tree.root).describe(lane_tree.root, level=_MAX_LEVEL - 1)
        if d["family"] not in ("generic", "single"):
            info["combine"] = d["family"]
            info["combine_description"] = d
        else:
            stages = _two_stage(lane_tree, depth) if depth < 2 else None
            if stages is not None:
                info["combine"] = "two_stage"
                info["combine_stages"] = stages
    return info


def _two_stage(lane_tree: SumTree, depth: int) -> Optional[dict]:
    """Split a combine tree over 0..k-1 into g groups of b = k/g lanes that are summed first (each
    group by the same tree), then a tree over the g group sums. Groups are interleaved (lanes
    e, e+g, e+2g, ...: g vector registers of b lanes summed element-wise, then a horizontal sum)
    or contiguous (lanes bg..bg+b-1). Picks the most balanced split (smallest max(g, b))."""
    k = lane_tree.n
    root = lane_tree.root
    if k < 4 or k > 4096 or not _is_node(root):
        return None
    st = NodeStats(root)
    by_key: dict[tuple[int, int], Any] = {}
    for nd in lane_tree.nodes_postorder():
        by_key[(st.mn(nd), st.cnt(nd))] = nd
    best = None
    for g in range(2, k // 2 + 1):
        if k % g:
            continue
        b = k // g
        for kind in ("interleaved", "contiguous"):
            step, first = (g, 1) if kind == "interleaved" else (1, b)
            groups = []
            for e in range(g):
                start = e * first
                nd = by_key.get((start, b))
                if nd is None or st.mx(nd) != start + step * (b - 1):
                    break
                if step > 1 and any((v - start) % step for v in leaves_of(nd)):
                    break
                groups.append((nd, start))
            else:
                shape = None
                for nd, start in groups:
                    # (v - start) // step is increasing in v, so canonical order is kept
                    t = SumTree.from_canonical(_relabel_fn(nd, lambda v, a=start: (v - a) // step), b)
                    if shape is None:
                        shape = t
                    elif t != shape:
                        break
                else:
                    slot = {id(nd): e for e, (nd, _) in enumerate(groups)}
                    outer = SumTree.from_canonical(_replace_nodes(root, slot), g)
                    cand = (max(g, b), kind != "interleaved", g)
                    if best is None or cand < best[0]:
                        best = (cand, kind, g, b, shape, outer)
    if best is None:
        return None
    _, kind, g, b, shape, outer = best
    return {
        "kind": kind,
        "groups": g,
        "group_size": b,
        "group": _combine_info(shape, depth + 1),
        "outer": _combine_info(outer, depth + 1),
    }


def _relabel_fn(node, fn):
    """Copy of a nested tuple with every leaf v replaced by fn(v) (iterative)."""
    if not _is_node(node):
        return fn(node)
    stack = [(node, False)]
    done: dict[int, Any] = {}
    while stack:
        cur, visited = stack.pop()
        if visited:
            done[id(cur)] = tuple(done[id(c)] if c.__class__ is tuple else fn(c) for c in cur)
        else:
            stack.append((cur, True))
            stack.extend((c, False) for c in cur if c.__class__ is tuple)
    return done[id(node)]


def _replace_nodes(node, slot: dict):
    """Copy of a nested tuple with the sub-trees whose id is in ``slot`` replaced by slot[id]."""
    if id(node) in slot:
        return slot[id(node)]
    stack = [(node, False)]
    done: dict[int, Any] = {}
    while stack:
        cur, visited = stack.pop()
        if visited:
            done[id(cur)] = tuple(
                slot[id(c)] if id(c) in slot else (done[id(c)] if c.__class__ is tuple else c)
                for c in cur
            )
        else:
            stack.append((cur, True))
            stack.extend((c, False) for c in cur if c.__class__ is tuple and id(c) not in slot)
    return done[id(node)]


# -- phrases -------------------------------------------------------------------------------------
def _seq_text(lo: int, hi: int, reverse: bool = False) -> str:
    idx = list(range(lo, hi + 1))
    if reverse:
        idx.reverse()
    names = [f"x{i}" for i in idx]
    if len(names) <= 4:
        text = names[0]
        for i, nm in enumerate(names[1:]):
            text = f"({text} + {nm})" if i < len(names) - 2 else f"{text} + {nm}"
        return text
    return f"(({names[0]} + {names[1]}) + {names[2]}) + ... + {names[-1]}"


_FAMILY_WORDS = {
    "power_of_two_split": "power-of-two splits",
    "balanced_binary": "a balanced binary tree",
    "reverse_sequential": "a reverse fold",
    "recursive_split": "recursive splits",
    "blocked": "blocks added in turn",
    "fused_node": "one fused node",
    "fused_chain": "a chain of fused nodes",
    "strided_lanes": "interleaved lanes",
}


def _ordinal(k: int) -> str:
    suffix = "th" if 10 <= k % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(k % 10, "th")
    return f"{k}{suffix}"


def _and_list(items) -> str:
    items = [str(i) for i in items]
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def _lanes_words(d: dict, brief: bool) -> str:
    """'8 lanes with stride 8' (all residues), 'lanes 0 and 1 of stride 8' (a few lanes of a
    wider reduction, named by their residue mod the stride), '32 lanes of stride 64'."""
    k, s = d["lanes"], d["stride"]
    if d.get("order") == "index_order":
        return f"{k} interleaved lanes (every {_ordinal(k)} term, in index order)"
    starts = d.get("lane_starts")
    if d.get("all_residues", True) or not starts:
        return f"{k} lanes, stride {s}" if brief else f"{k} lanes with stride {s}"
    if k <= (2 if brief else 4):
        return f"lanes {_and_list(sorted(a % s for a in starts))} of stride {s}"
    return f"{k} lanes of stride {s}"


def _combine_short(d: dict) -> str:
    comb = d.get("combine", "irregular")
    if d.get("lanes") == 2:
        return "added"
    if comb == "pairwise":
        return "combined pairwise"
    if comb == "sequential":
        return "combined sequentially"
    if comb == "halving":
        return "combined by halving"
    if comb == "two_stage":
        return "combined in two stages"
    if comb in ("irregular", "other"):
        return "combined in an irregular order"
    cd = d.get("combine_description") or {}
    if comb == "blocked" and cd.get("block_size") and not cd.get("uneven"):
        return f"combined in blocks of {cd['block_size']} added in turn"
    return "combined by " + _FAMILY_WORDS.get(comb, comb.replace("_", " "))


def _tree_text(nested, names: list) -> str:
    """Infix text of a tree over 0..k-1 (flat JSON form, or nested lists) with leaf i printed as
    names[i]."""
    if isinstance(nested, dict):
        nested = SumTree.from_flat(nested).to_nested()
    parts: dict[int, str] = {}
    if not isinstance(nested, list):
        return str(names[nested])
    stack = [(nested, False)]
    while stack:
        cur, visited = stack.pop()
        if visited:
            inner = "+".join(parts.pop(id(ch)) if isinstance(ch, list) else str(names[ch]) for ch in cur)
            parts[id(cur)] = f"({inner})" if len(cur) == 2 else "{" + inner + "}"
        else:
            stack.append((cur, True))
            stack.extend((ch, False) for ch in cur if isinstance(ch, list))
    return _strip_parens(parts[id(nested)])


def _combine_long(c: dict, k: int, names: Optional[list] = None) -> str:
    """Words for how k lane sums are added ("pairwise ((0+1)+(2+3))", "as ((0+4)+(1+5))", "in
    two stages: ...", "in an irregular order (depth 6)"); ``c`` is a :func:`_combine_info` dict
    (or a strided_lanes description, which holds the same keys). With ``names`` (the lanes' own
    numbers, e.g. [0, 8, 16, 24] for some lanes of a stride-64 reduction) the tree is printed
    with those numbers and position-based details (two-stage groups) are left out."""
    comb = c.get("combine", "irregular")
    if names is not None:
        ctext = _tree_text(c["combine_tree"], names) if k <= 16 and c.get("combine_tree") else ""
        if comb == "pairwise":
            return f"pairwise {ctext}".rstrip()
        if comb == "sequential":
            return f"sequentially {ctext}".rstrip()
        if ctext:
            return f"as {ctext}"
        return _combine_short({"combine": comb, "lanes": k}).replace("combined ", "", 1)
    ctext = (c.get("combine_text") or "") if k <= 16 else ""
    if comb == "pairwise":
        return f"pairwise {ctext}".rstrip()
    if comb == "sequential":
        return "sequentially" + (f" (((0+1)+2)+...+{k - 1})" if k > 3 else f" {ctext}").rstrip()
    if comb == "halving":
        return f"by halving (lane j + lane j+{k // 2}, repeatedly) {ctext}".rstrip()
    if ctext:
        return f"as {ctext}"
    if comb == "two_stage" and c.get("combine_stages"):
        sg = c["combine_stages"]
        g, b = sg["groups"], sg["group_size"]
        gw = _combine_long(sg["group"], b)
        ow = _combine_long(sg["outer"], g)
        lanes = f"e + {g}p" if sg["kind"] == "interleaved" else f"{b}e + p"
        return (
            f"in two stages: first, for each e = 0..{g - 1}, the {b} lanes {lanes} (p = 0..{b - 1}) "
            f"are summed {gw} over p; then the {g} sums are combined {ow} over e"
        )
    if c.get("combine_description"):
        try:
            return "by " + phrase(c["combine_description"], top=False)
        except Exception:  # pragma: no cover - defensive
            pass
    depth = c.get("combine_depth")
    return "in an irregular order" + (f" (depth {depth})" if depth else "")


def _panels_text(sizes: list, noun: str) -> str:
    """'of 448, 288 and 288 terms', '(21 of 448, then 2 of 288 terms)' or 'of 3-448 terms'."""
    text = _sizes_text(sizes)
    return f"({text} {noun})" if " of " in text else f"of {text} {noun}"


def _sizes_text(sizes: list) -> str:
    """'448, 288 and 288' or '21 of 448, then 2 of 288' (run lengths) or '3-448'."""
    if len(sizes) <= 6:
        return _and_list(sizes)
    runs: list[list[int]] = []
    for x in sizes:
        if runs and runs[-1][0] == x:
            runs[-1][1] += 1
        else:
            runs.append([x, 1])
    if len(runs) <= 4:
        return ", then ".join(f"{c} of {x}" if c > 1 else f"{x}" for x, c in runs)
    return f"{min(sizes)}-{max(sizes)}"


def _brief(d: dict) -> str:
    fam = d.get("family", "generic")
    tail = d.get("tail", 0) or 0
    if fam == "fused_chain":
        text = f"chain of fused {d['terms_per_node'] + 1}-term nodes"
    elif fam == "strided_lanes":
        text = f"{_lanes_words(d, brief=True)}, {_combine_short(d)}"
    elif fam == "blocked":
        if d.get("uneven"):
            text = f"{d['n_blocks']} panels {_panels_text(d['block_sizes'], 'terms')} added left to right"
        else:
            text = f"{d['n_blocks']} blocks of {d['block_size']} added sequentially"
        if d.get("block"):
            text += f", each {_brief(d['block'])}"
    elif fam == "recursive_split":
        text = f"recursive split into {d['n_blocks']} blocks"
        if d.get("block"):
            text += f", each {_brief(d['block'])}"
        else:
            text += f" of {len(d.get('block_groups', []))} shapes"
    elif fam == "generic":
        text = f"irregular, depth {d.get('depth', '?')}"
    elif fam in ("pairwise", "sequential", "reverse_sequential", "single", "empty"):
        text = fam.replace("_", " ")
    else:
        text = phrase(d, top=False)
    if tail:
        text += f", then {tail} one at a time"
    return text


def phrase(d: dict, top: bool = True, noun: str = "terms", lo: int = 0, brief: bool = False) -> str:
    """Words for one description dict (from :func:`describe` or a nested block description).

    ``top`` adds index ranges and counts that depend on the position (x0..x9); nested block
    shapes use ``top=False`` so that equal shapes at different offsets read the same. ``lo`` is the
    index of the first leaf. ``brief`` gives a short label (a few words, for pictures). Never
    raises for a dict produced by this module.
    """
    if brief:
        return _brief(d)
    fam = d.get("family", "generic")
    n = d.get("n", 0)
    tail = d.get("tail", 0) or 0
    m = n - tail
    hi = lo + m - 1
    text: str
    if fam == "single":
        text = f"the single term x{lo}" if top else "a single term"
    elif fam == "empty":
        text = "no terms"
    elif fam == "sequential":
        text = f"sequential left fold {_seq_text(lo, hi)}" if top else "sequential"
    elif fam == "reverse_sequential":
        text = f"reverse sequential fold {_seq_text(lo, hi, True)}" if top else "reverse sequential"
    elif fam == "pairwise":
        text = "pairwise (recursive halving: split at floor(n/2), add the two halves' sums)"
        if not top:
            text = "pairwise (split at floor(n/2))"
    elif fam == "balanced_binary":
        how = "split at ceil(n/2)" if d.get("split") == "ceil" else "halves differ by at most one"
        text = f"balanced binary tree ({how})"
    elif fam == "power_of_two_split":
        text = "recursive split at the largest power of two below n"
    elif fam == "fused_node":
        text = f"one fused {d['fan_in']}-term node"
    elif fam == "fused_chain":
        L = d["terms_per_node"]
        text = f"fused {L + 1}-term nodes: {L} {noun} plus the running sum"
        if top:
            text = f"chain of {d['chain_nodes']} {text}"
        extra = []
        first = d.get("first_node_terms")
        if first is not None and (first != L or not d.get("c_in_first_node")):
            extra.append(f"the first node sums {first} {noun}" + ("" if first > L else " alone"))
        if d.get("last_node_terms") not in (None, L):
            extra.append(f"the last node adds {d['last_node_terms']}")
        if extra:
            text += " (" + ", ".join(extra) + ")"
    elif fam == "strided_lanes":
        k = d["lanes"]
        if top and d.get("all_residues", True) and d.get("order") != "index_order":
            lens = (
                f"{d['lane_length_max']} {noun} each"
                if d["lane_length_min"] == d["lane_length_max"]
                else f"{d['lane_length_min']}-{d['lane_length_max']} {noun} each"
            )
            over = f" over {_rng(lo, hi)}" if tail else ""
            if d["lane_length_max"] <= 2:
                terms = f"x[r] and x[r+{k}]"
            elif d["lane_length_max"] == 3:
                terms = f"x[r], x[r+{k}], x[r+{2 * k}]"
            else:
                terms = f"x[r], x[r+{k}], x[r+{2 * k}], ..."
            text = f"{k} lanes with stride {k}{over} (lane r sums {terms} sequentially, {lens})"
            text += ", lanes combined " + _combine_long(d, k)
        else:
            text = _lanes_words(d, brief=False)
            if d["lane_length_min"] != d["lane_length_max"]:
                text += " (lanes of unequal length)"
            starts = d.get("lane_starts")
            if d.get("all_residues", True) or not starts or d.get("order") == "index_order":
                text += ", lanes combined " + _combine_long(d, k)
            elif k == 2:
                text += ", added"
            else:
                text += ", combined " + _combine_long(d, k, names=[a % d["stride"] for a in starts])
    elif fam == "blocked":
        b, nb = d["block_size"], d["n_blocks"]
        if d.get("uneven"):
            text = f"{nb} blocked panels {_panels_text(d['block_sizes'], noun)} added left to right"
            if top:
                text += " (((P0 + P1) + P2) + ...)" if nb > 3 else " ((P0 + P1) + P2)"
            text += "; " + _groups_text(d["block_groups"], noun, unit="panel", sizes=False)
        else:
            text = f"blocked panels: {nb} blocks of {b}"
            if d["last_block_size"] != b:
                text += f" (the last of {d['last_block_size']})"
            text += " added sequentially"
            if top:
                text += " (((B0 + B1) + B2) + ...)" if nb > 3 else " ((B0 + B1) + B2)"
            text += "; " + _groups_text(d["block_groups"], noun)
    elif fam == "recursive_split":
        rule = {
            "floor": "split at floor(n/2)",
            "ceil": "split at ceil(n/2)",
            "floor_aligned": f"split at floor(n/2) rounded down to a multiple of {d.get('align')}",
            "pow2": "split at the largest power of two below n",
            "irregular": "uneven splits",
        }.get(d.get("split_rule"), "contiguous splits")
        nb = d["n_blocks"]
        text = (
            f"recursive split into {nb} blocks ({rule}, down to blocks of at most "
            f"{d['block_size_max']} {noun}, each split adding its two halves' sums); "
            + _groups_text(d["block_groups"], noun)
        )
    else:  # generic
        fan = d.get("max_fan_in", 0)
        nf = d.get("n_fused_nodes", 0)
        shape = "binary tree" if d.get("binary", fan <= 2) else f"tree with max fan-in {fan}"
        text = f"unrecognised order: {shape} of depth {d.get('depth', '?')}"
        if nf:
            text += f", {_plural(nf, 'fused node')}"
        parts = d.get("root_parts") or []
        if top and parts:
            descr = []
            for p in parts:
                if p["n"] == 1:
                    descr.append(f"x{p['lo']}" if p["lo"] >= 0 else "C")
                elif p["contiguous"]:
                    descr.append(f"{_rng(p['lo'], p['hi'])} ({p['n']} {noun})")
                else:
                    descr.append(f"{p['n']} scattered {noun}")
            text += "; the root adds " + " and ".join(descr) if len(descr) <= 2 else (
                "; the root combines " + ", ".join(descr)
            )
    if tail:
        if top and fam not in ("strided_lanes", "generic"):
            text += f" over {_rng(lo, hi)}"
        text += f", then the remaining {tail} added one at a time"
        if top:
            text += f" ({_rng(hi + 1, lo + n - 1)})"
    return text


def _groups_text(groups: list[dict], noun: str, unit: str = "block", sizes: bool = True) -> str:
    def size_text(g):
        a, b = g["size_min"], g["size_max"]
        return f"{a} {noun}" if a == b else f"{a}-{b} {noun}"

    if len(groups) == 1:
        g = groups[0]
        return f"each {unit} ({size_text(g)}): {g['shape']}" if sizes else f"each {unit}: {g['shape']}"
    shown = groups[:_MAX_GROUPS]
    parts = [f"{_plural(g['count'], unit)} ({size_text(g)}): {g['shape']}" for g in shown]
    text = "; ".join(parts)
    if len(groups) > _MAX_GROUPS:
        rest = sum(g["count"] for g in groups[_MAX_GROUPS:])
        text += f"; {_plural(rest, 'more ' + unit)} in {len(groups) - _MAX_GROUPS} other shapes"
    return text


# -- where C enters --------------------------------------------------------------------------------
def _c_info(path: list, stripped_stats: NodeStats, n: int) -> dict:
    parent = path[-1]
    others = parent[1:]
    joins = sum(stripped_stats.cnt(c) for c in others)
    lo = min(stripped_stats.mn(c) for c in others)
    hi = max(stripped_stats.mx(c) for c in others)
    all_leaves = all(not _is_node(c) for c in others)
    if len(path) == 1 and all_leaves:
        entry = "only_node"
    elif len(path) == 1:
        entry = "last"
    elif all_leaves:
        entry = "first"
    else:
        entry = "middle"
    return {
        "entry": entry,
        "parent_fan_in": len(parent),
        "joins_terms": joins,
        "joins_lo": lo,
        "joins_hi": hi,
        "joins_contiguous": hi - lo + 1 == joins,
        "joins_leaves": sorted(others) if all_leaves and len(others) <= 4 else None,
        "terms_after": n - joins,
        "depth": len(path),
    }


def _c_phrase(c: dict, noun: str) -> str:
    e = c["entry"]
    fan = c["parent_fan_in"]
    if c["joins_contiguous"]:
        span = _rng(c["joins_lo"], c["joins_hi"])
    elif c.get("joins_leaves"):
        span = ", ".join(f"x{i}" for i in c["joins_leaves"])
    else:
        span = f"{c['joins_terms']} {noun}"
    if e == "only_node":
        return f"C enters with all {c['joins_terms']} {noun} in one {fan}-input node"
    if e == "last":
        return "C is added last" + (f" (in the final fused {fan}-term node)" if fan > 2 else "")
    if e == "first":
        if c["joins_lo"] != 0:
            return f"C enters before any partial sum is formed, in a node with {span}"
        if fan == 2:
            return f"C enters first (added to {span})"
        return f"C enters first (in the first node, with {span})"
    return (
        f"C is added to the partial sum of {span} ({c['joins_terms']} {noun}); "
        f"{c['terms_after']} more {noun} are added after it"
    )


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
                relabelled = _relabel(stripped, rank)
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


# -- sets of input indices -------------------------------------------------------------------------
def index_set(indices) -> dict:
    """Classify a set of input indices (ints; "C" is ignored).

    Returns ``kind`` and ``n``, ``lo``, ``hi`` (-1 when empty):

    * "empty"; "contiguous" (lo..hi);
    * "progressions": a union of q <= 64 arithmetic progressions with one ``stride``, each
      starting below lo + stride (``starts``, ascending, and ``lengths``): x0, x8, ..., x120 is
      one (stride 8), x0, x1, x8, x9, ..., x121 two; on average at least two terms each;
    * "scattered": anything else.

    Sets of at most 6 non-contiguous indices also list them (``indices``). O(q n log n) in numpy for q progressions; fast for sets of 10^5 indices.
    """
    vals = [v for v in indices if v != C_LEAF]
    if not vals:
        return {"kind": "empty", "n": 0, "lo": -1, "hi": -1}
    a = np.unique(np.asarray(vals, dtype=np.int64))
    m, lo, hi = len(a), int(a[0]), int(a[-1])
    base = {"n": m, "lo": lo, "hi": hi}
    if hi - lo + 1 == m:
        return {"kind": "contiguous", **base}
    if m <= 6:
        base["indices"] = [int(v) for v in a]

    def closed(x, s: int) -> bool:
        # every element at or above lo + s has its predecessor x - s in the set
        y = x[x >= lo + s] - s
        if not len(y):
            return True
        i = np.searchsorted(a, y)
        i[i >= m] = m - 1
        return bool(np.all(a[i] == y))

    for q in range(1, min(_MAX_LISTED, m // 2) + 1):
        s = int(a[q] - lo)
        if not closed(a[: min(m, 4 * q + 4)], s) or not closed(a, s):
            continue
        starts = a[:q]
        counts = np.bincount((a - lo) % s, minlength=s)[starts - lo]
        return {"kind": "progressions", **base, "stride": s, "starts": [int(v) for v in starts],
                "lengths": [int(c) for c in counts]}
    return {"kind": "scattered", **base}


def _ap_text(start: int, step: int, length: int, prefix: str = "x") -> str:
    items = [f"{prefix}{start + i * step}" for i in range(min(length, 3))]
    if length <= 3:
        return ", ".join(items)
    return f"{items[0]}, {items[1]}, ..., {prefix}{start + (length - 1) * step}"


def _int_set_text(values: list) -> str:
    values = sorted(values)
    if len(values) <= 6:
        return "{" + ", ".join(str(v) for v in values) + "}"
    info = index_set(values)
    if info["kind"] == "contiguous":
        return f"{{{values[0]}, ..., {values[-1]}}}"
    if info["kind"] == "progressions" and len(info["starts"]) == 1:
        return "{" + _ap_text(values[0], info["stride"], len(values), prefix="") + "}"
    return "{" + ", ".join(str(v) for v in values[:4]) + f", ..., {values[-1]}}}"


def set_phrase(info: dict, noun: str = "terms", count: bool = True) -> str:
    """Words for an :func:`index_set` result: "x0..x127 (128 terms)", "x0, x8, ..., x120
    (16 terms)", "x0, x8, ..., x472 and x1, x9, ..., x473 (120 terms)", "x[r + 8k] for r in
    {0, 1, 4, 5}, k = 0..1023 (4096 terms)", or "240 terms from x0..x477". ``count=False``
    leaves out the "(128 terms)" suffix."""
    kind, m, lo, hi = info["kind"], info["n"], info["lo"], info["hi"]
    one = noun.rstrip("s") if m == 1 else noun
    if kind == "empty":
        return f"no {noun}"
    if kind == "contiguous":
        return f"x{lo}" if m == 1 else f"x{lo}..x{hi}" + (f" ({m} {noun})" if count else "")
    if m <= 6 and info.get("indices"):
        return ", ".join(f"x{v}" for v in info["indices"]) + (f" ({m} {noun})" if count else "")
    if kind == "progressions":
        s, starts, lens = info["stride"], info["starts"], info["lengths"]
        if len(starts) <= 2:
            text = " and ".join(_ap_text(a, s, c) for a, c in zip(starts, lens))
        else:
            if len(starts) >= 3 and starts[-1] - starts[0] == len(starts) - 1:
                text = f"x[r + {s}k] for r = {starts[0]}..{starts[-1]}"
            else:
                text = f"x[r + {s}k] for r in {_int_set_text(starts)}"
            if min(lens) == max(lens):
                text += f", k = 0..{lens[0] - 1}"
            elif all(a + s * c > hi for a, c in zip(starts, lens)):
                text += f", up to x{hi}"
            else:
                text += f", {min(lens)}-{max(lens)} {noun} each"
        return f"{text} ({m} {one})" if count else text
    return f"{m} {noun} from x{lo}..x{hi}"


def _relabel(node, rank: dict):
    stack = [(node, False)]
    done: dict[int, Any] = {}
    while stack:
        cur, visited = stack.pop()
        if visited:
            done[id(cur)] = tuple(done[id(c)] if c.__class__ is tuple else rank[c] for c in cur)
        else:
            stack.append((cur, True))
            stack.extend((c, False) for c in cur if c.__class__ is tuple)
    return done[id(node)]


#: Targets whose 2-D / 3-D ``shape`` is one array summed whole (no axis), leaf k being the element
#: at the logical C-order flat index k (``np.unravel_index(k, shape)``): fpscope.targets.
WHOLE_ARRAY_SUMS = ("numpy.sum", "torch.sum", "jax.numpy.sum")

#: Memory order of the elements of each layout of fpscope.targets (``placed_zeros``): "C" and
#: "strided" (a stride of two elements along the last axis) keep the logical C order; "F" and "T"
#: (a transposed C array, the strides of F) run along the first axis fastest.
LAYOUT_ORDER = {"C": "C", "strided": "C", "F": "F", "T": "F"}


def array_order(spec) -> dict:
    """The ``shape`` and ``order`` arguments of :func:`summarize` for a target ``spec()`` (a dict,
    as in a record's "target"): for ``numpy.sum``, ``torch.sum`` or ``jax.numpy.sum`` of a whole
    2-D or 3-D array, ``{"shape": (R, C[, D]), "order": layout}``; for anything else ``{}``.
    Never raises."""
    try:
        if not isinstance(spec, dict) or spec.get("name") not in WHOLE_ARRAY_SUMS:
            return {}
        shape = tuple(int(v) for v in spec.get("shape") or ())
        layout = spec.get("layout") or "C"
        if (len(shape) not in (2, 3) or spec.get("axis") is not None
                or spec.get("index") is not None or layout not in LAYOUT_ORDER
                or int(np.prod(shape)) != int(spec.get("n", -1))):
            return {}
        return {"shape": shape, "order": layout}
    except Exception:  # pragma: no cover - a malformed spec gets the plain summary
        return {}


def _memory_permutation(shape: tuple, order, n: int) -> Optional[np.ndarray]:
    """perm[i] = the leaf (logical C-order flat index) at memory position i; None when ``order``
    keeps the logical order."""
    if isinstance(order, str):
        if order not in LAYOUT_ORDER:
            raise ValueError(f"order must be one of {', '.join(LAYOUT_ORDER)} or a permutation, "
                             f"got {order!r}")
        if LAYOUT_ORDER[order] == "C":
            return None
        return np.arange(n).reshape(shape).ravel(order="F")
    perm = np.asarray(order, dtype=np.int64).ravel()
    if perm.shape != (n,) or not np.array_equal(np.sort(perm), np.arange(n)):
        raise ValueError(f"order must be a permutation of 0..{n - 1}")
    return None if np.array_equal(perm, np.arange(n)) else perm


def _element(k: int, shape: tuple) -> str:
    return "x[" + ",".join(str(int(i)) for i in np.unravel_index(int(k), shape)) + "]"


def _elements_text(perm: Optional[np.ndarray], shape: tuple) -> str:
    """The first elements in the given order, by logical multi-index, up to where the fastest
    axis wraps: "x[0,0], x[1,0], x[2,0], ..., x[63,0], x[0,1], ..., x[63,47]"."""
    n = int(np.prod(shape))

    def at(i: int) -> str:
        return _element(i if perm is None else perm[i], shape)

    if n <= 6:
        return ", ".join(at(i) for i in range(n))
    if perm is None:
        run = shape[-1]  # elements before the last axis wraps
    else:
        step = np.diff(perm)
        breaks = np.flatnonzero(step != step[0])
        run = int(breaks[0]) + 1 if len(breaks) else n
    if run >= n - 1:
        items = [at(i) for i in range(4)]
    elif run <= 4:
        items = [at(i) for i in range(min(n - 1, run + 2))]
    else:
        items = [at(0), at(1), at(2), "...", at(run - 1), at(run)]
    return ", ".join(items) + f", ..., {at(n - 1)}"


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
        from .rank_summary import summarize_ranks  # a collective: leaves are ranks

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
    perm = _memory_permutation(shape, order, n)
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
                t = SumTree(_relabel(tree.root, pos.tolist()))
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
