"""Recognition of summation-tree families (sequential, pairwise, strided lanes, blocked,
recursive splits, fused chains) and their compositions: :class:`_Analyzer` turns a C-free
subtree into the description dict that :mod:`fpscope.summary.words` puts into words."""

from __future__ import annotations

import functools
from typing import Any, Optional

from ..tree import SumTree, TreeError, leaves_of
from .stats import (_BAL, _CEIL, _FAMILY_FLAG, _FLOOR, _MAX_LEVEL, _MAX_LISTED, _POW2, _REV, _SEQ,
                    NodeStats, _is_node, relabel, _strip_parens)
from .words import phrase


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
            lane_tree = SumTree(relabel(done[id(node)], rank))
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
