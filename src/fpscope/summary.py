"""Plain-words summaries of summation trees: recognise the common families and their compositions.

:func:`describe` turns a :class:`~fpscope.tree.SumTree` into a machine-readable dict (family name,
parameters, size and shape statistics); :func:`summarize` turns that dict into one sentence.

Recognised families (leaf indices are input positions; "fold" = left-to-right running sum):

* ``sequential`` -- ((x0 + x1) + x2) + ... ; ``reverse_sequential`` -- ((x[n-1] + x[n-2]) + ...) + x0.
* ``pairwise`` -- recursive halving, split at floor(n/2); ``balanced_binary`` (split at ceil(n/2),
  or mixed floor/ceil); ``power_of_two_split`` (split at the largest power of two below n).
* ``strided_lanes`` -- k accumulators, lane r folds x[r], x[r+k], ... ; the lane combine tree is
  classified (pairwise, sequential, halving, or printed).
* ``blocked`` -- blocks of b consecutive terms, each summed by its own sub-tree, block results added
  sequentially; every block's shape is described.
* ``recursive_split`` -- contiguous binary splits (e.g. numpy's floor(n/2) rounded down to a multiple
  of 8) down to blocks that are described in turn.
* ``fused_node`` / ``fused_chain`` -- one k-term node, or a chain where every node adds L new terms
  to the running sum (tensor-core K loops: fan-in 5, 9, 17 on V100, A100, H100; FPRev, Xie et al.,
  USENIX ATC 2025, arXiv 2411.00442).
* any of these followed by a ``tail`` of terms added one at a time (numpy's n mod 8 leftovers).
* ``generic`` -- anything else, with depth, fan-in and fused-node counts.

The accumulator leaf "C" is removed before the structure is classified; where it enters is reported
separately (``describe(t)["c"]``).

All traversals are iterative: trees with depth ~10^5 are fine, and n = 65536 takes a fraction of a
second. Neither function raises for a valid SumTree; an internal failure degrades to the generic
description.
"""

from __future__ import annotations

from typing import Any, Optional

from .tree import C_LEAF, SumTree, TreeError

__all__ = ["describe", "summarize", "describe_subtree", "phrase"]

# structure flags, computed bottom-up for every node (a leaf has all of them)
_FLOOR, _CEIL, _POW2, _BAL, _SEQ, _REV = 1, 2, 4, 8, 16, 32
_ALL = _FLOOR | _CEIL | _POW2 | _BAL | _SEQ | _REV

_MAX_LEVEL = 5  # nesting depth of compositions (blocks of blocks of ...)
_MAX_GROUPS = 3  # distinct block shapes listed by name


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

    # -- entry point ---------------------------------------------------------------------------
    def describe(self, node, level: int = 0, allow_split: bool = True) -> dict:
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
        if level < _MAX_LEVEL and st.contiguous(node):
            for rec in (self._fused_chain, self._blocked, self._strided):
                d = rec(node, level)
                if d is not None:
                    return d
            # terms added one at a time at the end
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
            if allow_split:
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
            "block": groups[0]["description"] if len(groups) == 1 else None,
            "block_groups": groups,
        }

    def _block_groups(self, blocks: list, level: int) -> list[dict]:
        return _group_by_shape(
            (self.st.cnt(blk), self.describe(blk, level + 1, allow_split=True)) for blk in blocks
        )

    # -- k-lane strided accumulation -------------------------------------------------------------
    def _strided(self, node, level: int) -> Optional[dict]:
        st = self.st
        lo, m = st.mn(node), st.cnt(node)
        cur = node
        while _is_node(cur[0]):
            cur = cur[0]
        if len(cur) != 2 or _is_node(cur[1]):
            return None
        k = cur[1] - lo
        if k < 2 or 2 * k > m:  # every lane holds at least two terms
            return None

        def lane_len(j: int) -> int:
            return (m - j + k - 1) // k

        def lane_root(x) -> Optional[int]:
            """Lane index if x is exactly lane j folded sequentially; -1 if it cannot be part of a
            lane tree at all; None if it may be a combine node."""
            a = st.mn(x) - lo
            c = st.cnt(x)
            if a < 0 or a >= k or c != lane_len(a) or st.mx(x) != lo + a + (c - 1) * k:
                return None if _is_node(x) else -1
            y = x
            for i in range(c - 1, 0, -1):
                if not _is_node(y) or len(y) != 2 or y[1] != lo + a + i * k:
                    return -1
                y = y[0]
            return a if y == lo + a else -1

        # top-down: collect the combine tree over lane indices (iterative post-order rebuild)
        combine_nodes = 0
        done: dict[int, Any] = {}
        stack = [(node, False)]
        while stack:
            x, visited = stack.pop()
            if visited:
                done[id(x)] = tuple(done[id(c)] for c in x)
                continue
            j = lane_root(x)
            if j == -1:
                return None
            if j is not None:
                done[id(x)] = j
                continue
            combine_nodes += 1
            if combine_nodes >= k:
                return None
            stack.append((x, True))
            stack.extend((c, False) for c in x)
        nested = done[id(node)]
        try:
            lane_tree = SumTree(nested)
        except TreeError:
            return None
        if lane_tree.n != k:
            return None
        combine = _classify_combine(lane_tree)
        return {
            "family": "strided_lanes",
            "n": m,
            "tail": 0,
            "lanes": k,
            "stride": k,
            "lane_length_min": lane_len(k - 1),
            "lane_length_max": lane_len(0),
            "lane_order": "sequential",
            "combine": combine,
            "combine_tree": lane_tree.to_json(),
            "combine_text": _strip_parens(lane_tree.to_text()),
        }

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


def _classify_combine(lane_tree: SumTree) -> str:
    k = lane_tree.n
    if lane_tree == SumTree.pairwise(k):
        return "pairwise"
    if lane_tree == SumTree.sequential(k):
        return "sequential"
    if lane_tree == _halving_tree(k):
        return "halving"
    d = _Analyzer(lane_tree.root).describe(lane_tree.root, level=_MAX_LEVEL - 1)
    return d["family"] if d["family"] not in ("generic", "single") else "other"


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


def _brief(d: dict) -> str:
    fam = d.get("family", "generic")
    tail = d.get("tail", 0) or 0
    if fam == "fused_chain":
        text = f"chain of fused {d['terms_per_node'] + 1}-term nodes"
    elif fam == "strided_lanes":
        text = f"{d['lanes']} lanes, stride {d['stride']}, combined {d['combine'].replace('_', ' ')}"
    elif fam == "blocked":
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
        if top:
            lens = (
                f"{d['lane_length_max']} {noun} each"
                if d["lane_length_min"] == d["lane_length_max"]
                else f"{d['lane_length_min']}-{d['lane_length_max']} {noun} each"
            )
            over = f" over {_rng(lo, hi)}" if tail else ""
            text = (
                f"{k} lanes with stride {k}{over} (lane r sums x[r], x[r+{k}], x[r+{2 * k}], ... "
                f"sequentially, {lens})"
            )
        else:
            text = f"{k} lanes with stride {k}"
            if d["lane_length_min"] != d["lane_length_max"]:
                text += " (lanes of unequal length)"
        comb = d.get("combine")
        ctext = d.get("combine_text", "") if k <= 16 else ""
        if comb == "pairwise":
            text += f", lanes combined pairwise {ctext}".rstrip()
        elif comb == "sequential":
            text += ", lanes combined sequentially" + (
                f" (((0+1)+2)+...+{k - 1})" if k > 3 else f" {ctext}"
            )
        elif comb == "halving":
            text += f", lanes combined by halving (lane j + lane j+{k // 2}, repeatedly) {ctext}".rstrip()
        elif ctext:
            text += f", lanes combined as {ctext}"
        else:
            text += f", lanes combined {comb.replace('_', ' ')}"
    elif fam == "blocked":
        b, nb = d["block_size"], d["n_blocks"]
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


def _groups_text(groups: list[dict], noun: str) -> str:
    def sizes(g):
        a, b = g["size_min"], g["size_max"]
        return f"{a} {noun}" if a == b else f"{a}-{b} {noun}"

    if len(groups) == 1:
        g = groups[0]
        return f"each block ({sizes(g)}): {g['shape']}"
    shown = groups[:_MAX_GROUPS]
    parts = [f"{_plural(g['count'], 'block')} ({sizes(g)}): {g['shape']}" for g in shown]
    text = "; ".join(parts)
    if len(groups) > _MAX_GROUPS:
        rest = sum(g["count"] for g in groups[_MAX_GROUPS:])
        text += f"; {_plural(rest, 'more block')} in {len(groups) - _MAX_GROUPS} other shapes"
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

    Family parameters: ``lanes``/``stride``/``combine``/``combine_tree``/``lane_length_min``/
    ``lane_length_max`` (strided_lanes); ``block_size``/``n_blocks``/``last_block_size``/``block``/
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

    Leaves need not be 0..m-1: the sub-tree is analysed on the ranks of its integer leaves (a lane
    x3, x11, x19, ... reads as "sequential"); "C" is removed first. Adds ``lo``/``hi`` (smallest and
    largest integer leaf) and ``contiguous``. Never raises for a node taken from a SumTree.
    """
    try:
        if not _is_node(node):
            if node == C_LEAF:
                return {"family": "empty", "n": 0, "tail": 0, "lo": -1, "hi": -1, "contiguous": False}
            return {"family": "single", "n": 1, "tail": 0, "lo": node, "hi": node, "contiguous": True}
        stripped, _ = _strip_c(node)
        st = NodeStats(stripped)
        lo, hi, m = st.mn(stripped), st.mx(stripped), st.cnt(stripped)
        contiguous = hi - lo + 1 == m
        if not contiguous and _is_node(stripped):
            leaves = _leaves(stripped)
            rank = {v: i + lo for i, v in enumerate(sorted(leaves))}
            stripped = _relabel(stripped, rank)
            st = NodeStats(stripped)
        d = _Analyzer(stripped, st).describe(stripped)
        d = dict(d)
        d.update({"lo": lo, "hi": hi, "contiguous": contiguous})
        return d
    except Exception as exc:  # pragma: no cover - defensive
        return {"family": "generic", "n": 0, "tail": 0, "error": f"{type(exc).__name__}: {exc}"}


def _leaves(node) -> list:
    out, stack = [], [node]
    while stack:
        cur = stack.pop()
        if cur.__class__ is tuple:
            stack.extend(cur)
        else:
            out.append(cur)
    return out


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


def summarize(tree: SumTree, noun: Optional[str] = None) -> str:
    """One plain-words sentence describing the accumulation order of ``tree``.

    ``noun`` names the leaves; default "products" when the tree has the accumulator leaf "C" (a
    matrix op, whose leaves are K-products) and "terms" otherwise. Example (numpy.sum, float32,
    n = 100)::

        100 terms: 8 lanes with stride 8 over x0..x95 (lane r sums x[r], x[r+8], x[r+16], ...
        sequentially, 12 terms each), lanes combined pairwise ((0+1)+(2+3))+((4+5)+(6+7)), then
        the remaining 4 added one at a time (x96..x99).

    Never raises for a SumTree (see :func:`describe`).
    """
    d = describe(tree)
    noun = noun or ("products" if tree.has_c else "terms")
    head = f"{d['n']} {noun if d['n'] != 1 else noun.rstrip('s')}" + (" + C" if d.get("has_c") else "")
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
    text = f"{head}: {body}"
    if c:
        text += "; " + _c_phrase(c, noun)
    return text + "."
