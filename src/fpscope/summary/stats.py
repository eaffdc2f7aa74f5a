"""Bottom-up statistics of summation-tree nodes (:class:`NodeStats`: leaf counts, index ranges,
structure flags) and the small tree helpers the summary modules share."""

from __future__ import annotations

from typing import Any

from ..tree import C_LEAF


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




def relabel(node, rank):
    """A copy of the nested tuples ``node`` with every leaf x replaced by ``rank[x]`` (a dict
    or a list); iterative, so chains of any depth are fine."""
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
