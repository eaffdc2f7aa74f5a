"""SumTree: an n-ary summation tree (the accumulation order of a reduction).

Model (FPRev, Xie et al., USENIX ATC 2025, arXiv 2411.00442): a reduction of n summands is a rooted
tree whose leaves are the input positions 0..n-1 and whose internal nodes are additions; a node with
k > 2 children is one fused k-term addition (matrix units). The accumulator input of a matrix op,
where probed, is the extra leaf ``"C"``.

Canonical JSON (fpscope DESIGN.md): nested arrays; a leaf is its integer index (or "C"), an
internal node is the array of its children. ``[[0, 1], [2, 3]]`` is (x0+x1)+(x2+x3). Floating-point
addition is commutative, so the order of children inside a node carries no information; the
canonical form sorts children by their smallest leaf ("C" first), and equality compares canonical
forms.
"""

from __future__ import annotations

import json
from typing import Iterator, Union

import numpy as np

Leaf = Union[int, str]
Node = Union[Leaf, tuple]

C_LEAF = "C"
_END = object()  # marker used by SumTree.key


class TreeError(ValueError):
    """A malformed tree (bad JSON, repeated or missing leaves, nodes with fewer than 2 children)."""


def _min_key(node) -> float:
    if isinstance(node, tuple):
        return min(_min_key(c) for c in node)
    return -1 if node == C_LEAF else node


def _canon(node) -> Node:
    # iterative post-order canonicalisation (trees may be thousands of levels deep)
    if not isinstance(node, (list, tuple)):
        return node
    stack = [(node, False)]
    done: dict[int, tuple] = {}
    keys: dict[int, float] = {}
    while stack:
        cur, visited = stack.pop()
        if not isinstance(cur, (list, tuple)):
            continue
        if visited:
            kids = []
            for c in cur:
                if isinstance(c, (list, tuple)):
                    kids.append((keys[id(c)], done[id(c)]))
                else:
                    kids.append((-1 if c == C_LEAF else c, c))
            kids.sort(key=lambda t: t[0])
            done[id(cur)] = tuple(k for _, k in kids)
            keys[id(cur)] = kids[0][0]
        else:
            stack.append((cur, True))
            for c in cur:
                if isinstance(c, (list, tuple)):
                    stack.append((c, False))
    return done[id(node)]


def leaves_of(node) -> list:
    """Leaves under a node of a canonical tree (nested tuples), left to right, iteratively."""
    out, stack = [], [node]
    while stack:
        cur = stack.pop()
        if cur.__class__ is tuple:
            stack.extend(reversed(cur))
        else:
            out.append(cur)
    return out


class SumTree:
    """An immutable summation tree over leaves 0..n-1 (plus optionally "C").

    Construct from nested lists/tuples (``SumTree([[0, 1], 2])``), from JSON with
    :meth:`from_json`, or with the family constructors :meth:`sequential`, :meth:`pairwise`, ...

    Raises:
        TreeError: a leaf repeats, the integer leaves are not exactly 0..n-1, a leaf is neither a
            non-negative int nor "C", or an internal node has fewer than two children.
    """

    __slots__ = ("root", "n", "has_c", "_key")

    def __init__(self, nested):
        root = _canon(self._validate(nested))
        self.root = root
        self._key = None

    # -- construction and validation -------------------------------------------------------
    def _validate(self, nested):
        leaves = []
        stack = [nested]
        while stack:
            cur = stack.pop()
            if isinstance(cur, (list, tuple)):
                if len(cur) < 2:
                    raise TreeError(f"internal node with {len(cur)} child(ren): {json.dumps(cur)[:80]}")
                stack.extend(cur)
            elif isinstance(cur, (bool, float)) or not isinstance(cur, (int, np.integer, str)):
                raise TreeError(f"leaf {cur!r} is not an integer index or \"C\"")
            elif isinstance(cur, str) and cur != C_LEAF:
                raise TreeError(f"leaf {cur!r} is not an integer index or \"C\"")
            elif not isinstance(cur, str) and cur < 0:
                raise TreeError(f"negative leaf index {cur}")
            else:
                leaves.append(cur if isinstance(cur, str) else int(cur))
        ints = [x for x in leaves if not isinstance(x, str)]
        self.has_c = len(ints) != len(leaves)
        if len(leaves) - len(ints) > 1:
            raise TreeError('leaf "C" appears more than once')
        if len(set(ints)) != len(ints):
            seen, dup = set(), None
            for x in ints:
                if x in seen:
                    dup = x
                    break
                seen.add(x)
            raise TreeError(f"leaf {dup} appears more than once")
        self.n = len(ints)
        if ints and max(ints) != self.n - 1:
            missing = sorted(set(range(max(ints) + 1)) - set(ints))[:5]
            raise TreeError(f"leaves must be 0..n-1; missing {missing}")
        return _to_tuples(nested)

    @classmethod
    def from_canonical(cls, root, n: int) -> "SumTree":
        """Wrap nested tuples that are already canonical (children sorted by smallest leaf) and
        hold each of the leaves 0..n-1 once, without re-checking them. For trees built by
        fpscope's own algorithms; anything else goes through ``SumTree(nested)``."""
        t = object.__new__(cls)
        t.root, t.n, t.has_c, t._key = root, int(n), False, None
        return t

    @classmethod
    def from_json(cls, obj) -> "SumTree":
        """Build from the canonical JSON value (already parsed) or a JSON string."""
        if isinstance(obj, str):
            try:
                obj = json.loads(obj)
            except json.JSONDecodeError as exc:
                raise TreeError(f"tree is not valid JSON: {exc}") from None
        return cls(obj)

    def to_json(self):
        """The canonical JSON value: nested lists of ints (and "C")."""
        return _to_lists(self.root)

    def dumps(self) -> str:
        return json.dumps(self.to_json(), separators=(",", ":"))

    # -- family constructors (used as ground truth in tests and by the summary) --------------
    @classmethod
    def sequential(cls, n: int, start: int = 0) -> "SumTree":
        """((x0 + x1) + x2) + ... : a left fold."""
        return cls(_sequential(list(range(start, start + n))))

    @classmethod
    def reverse_sequential(cls, n: int) -> "SumTree":
        """((x[n-1] + x[n-2]) + ...) + x0."""
        return cls(_sequential(list(range(n - 1, -1, -1))))

    @classmethod
    def pairwise(cls, n: int) -> "SumTree":
        """Recursive halving: split at floor(n/2), sum each half, add the halves."""
        return cls(_pairwise(list(range(n))))

    # -- structure --------------------------------------------------------------------------
    def nodes_postorder(self) -> Iterator[tuple]:
        """Internal nodes in post-order (children before parents), iteratively."""
        if not isinstance(self.root, tuple):
            return
        stack = [(self.root, False)]
        while stack:
            cur, visited = stack.pop()
            if visited:
                yield cur
            else:
                stack.append((cur, True))
                for c in reversed(cur):
                    if isinstance(c, tuple):
                        stack.append((c, False))

    def leaves(self, node=None) -> list:
        """Leaves under ``node`` (default: root), in left-to-right canonical order."""
        return leaves_of(self.root if node is None else node)

    @property
    def n_nodes(self) -> int:
        return sum(1 for _ in self.nodes_postorder())

    def depth(self) -> int:
        """Number of internal nodes on the longest root-to-leaf path."""
        if not isinstance(self.root, tuple):
            return 0
        best, stack = 0, [(self.root, 1)]
        while stack:
            cur, d = stack.pop()
            best = max(best, d)
            stack.extend((c, d + 1) for c in cur if isinstance(c, tuple))
        return best

    def max_fan_in(self) -> int:
        return max((len(nd) for nd in self.nodes_postorder()), default=0)

    def lca_size_matrix(self) -> np.ndarray:
        """(n, n) int64 matrix L with L[i, j] = number of leaves under LCA(i, j); L[i, i] = 1.

        "C" counts as a leaf in the sizes but has no row. Memory is n^2 * 8 bytes.
        """
        n = self.n
        L = np.ones((n, n), dtype=np.int64)
        if not isinstance(self.root, tuple):
            return L
        groups: dict[int, np.ndarray] = {}
        sizes: dict[int, int] = {}
        for nd in self.nodes_postorder():
            parts, total = [], 0
            for c in nd:
                if isinstance(c, tuple):
                    parts.append(groups.pop(id(c)))
                    total += sizes.pop(id(c))
                elif c == C_LEAF:
                    parts.append(np.empty(0, dtype=np.int64))
                    total += 1
                else:
                    parts.append(np.array([c], dtype=np.int64))
                    total += 1
            for a in range(len(parts)):
                for b in range(a + 1, len(parts)):
                    if len(parts[a]) and len(parts[b]):
                        L[np.ix_(parts[a], parts[b])] = total
                        L[np.ix_(parts[b], parts[a])] = total
            groups[id(nd)] = np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)
            sizes[id(nd)] = total
        return L

    # -- text -------------------------------------------------------------------------------
    def to_text(self) -> str:
        """Compact infix text: binary nodes as (a+b), fused k-term nodes as {a+b+c+d}."""
        parts: dict[int, str] = {}

        def s(c):
            return parts.pop(id(c)) if isinstance(c, tuple) else str(c)

        if not isinstance(self.root, tuple):
            return str(self.root)
        for nd in self.nodes_postorder():
            inner = "+".join(s(c) for c in nd)
            parts[id(nd)] = f"({inner})" if len(nd) == 2 else "{" + inner + "}"
        return parts[id(self.root)]

    # -- comparison -------------------------------------------------------------------------
    def key(self) -> bytes:
        """A flat encoding of the canonical tree (iterative; equal trees have equal keys)."""
        if self._key is None:
            tokens, stack = [], [self.root]
            while stack:
                cur = stack.pop()
                if isinstance(cur, tuple):
                    tokens.append(-1)
                    stack.append(_END)
                    stack.extend(reversed(cur))
                elif cur is _END:
                    tokens.append(-2)
                else:
                    tokens.append(-3 if cur == C_LEAF else cur)
            self._key = np.asarray(tokens, dtype=np.int64).tobytes()
        return self._key

    def __eq__(self, other) -> bool:
        return isinstance(other, SumTree) and self.key() == other.key()

    def __hash__(self) -> int:
        return hash(self.key())

    def __repr__(self) -> str:
        text = self.to_text()
        if len(text) > 70:
            text = text[:67] + "..."
        return f"SumTree(n={self.n}, {text})"


def _to_tuples(x):
    if not isinstance(x, (list, tuple)):
        return x if isinstance(x, str) else int(x)
    # iterative conversion to avoid recursion limits on chains
    stack = [(x, False)]
    done: dict[int, tuple] = {}
    while stack:
        cur, visited = stack.pop()
        if visited:
            done[id(cur)] = tuple(
                done[id(c)] if isinstance(c, (list, tuple)) else (c if isinstance(c, str) else int(c))
                for c in cur
            )
        else:
            stack.append((cur, True))
            stack.extend((c, False) for c in cur if isinstance(c, (list, tuple)))
    return done[id(x)]


def _to_lists(x):
    if not isinstance(x, tuple):
        return x
    stack = [(x, False)]
    done: dict[int, list] = {}
    while stack:
        cur, visited = stack.pop()
        if visited:
            done[id(cur)] = [done[id(c)] if isinstance(c, tuple) else c for c in cur]
        else:
            stack.append((cur, True))
            stack.extend((c, False) for c in cur if isinstance(c, tuple))
    return done[id(x)]


def _sequential(order: list):
    acc = order[0]
    for leaf in order[1:]:
        acc = (acc, leaf)
    return acc


def _pairwise(items: list):
    if len(items) == 1:
        return items[0]
    h = len(items) // 2
    return (_pairwise(items[:h]), _pairwise(items[h:]))
