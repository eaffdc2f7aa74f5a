"""SumTree: an n-ary summation tree (the accumulation order of a reduction).

Model (FPRev, Xie et al., USENIX ATC 2025, arXiv 2411.00442): a reduction of n summands is a rooted
tree whose leaves are the input positions 0..n-1 and whose internal nodes are additions; a node with
k > 2 children is one fused k-term addition (matrix units). The accumulator input of a matrix op,
where probed, is the extra leaf ``"C"``.

Canonical JSON (fpscope DESIGN.md, schema fpscope.record/2): flat, so that any JSON parser reads
trees of any depth: ``{"leaves": n, "nodes": [[child, ...], ...]}``; a child id below n is that
input index, an id k >= n is ``nodes[k - n]``, the last node is the root, and "C" is the
accumulator leaf. ``{"leaves": 4, "nodes": [[0, 1], [2, 3], [4, 5]]}`` is (x0+x1)+(x2+x3). The
nested form (a leaf is its index or "C", an internal node the array of its children:
``[[0, 1], [2, 3]]``) is the human-facing text form and schema /1's; :meth:`SumTree.from_json`
reads both. Floating-point addition is commutative, so the order of children inside a node
carries no information; the canonical form sorts children by their smallest leaf ("C" first),
flat nodes are listed in post-order of the canonical tree, and equality compares canonical forms.
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

    __slots__ = ("root", "n", "has_c", "_key", "_memo")

    def __init__(self, nested):
        root = _canon(self._validate(nested))
        self.root = root
        self._key = None
        self._memo = None

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
        t.root, t.n, t.has_c, t._key, t._memo = root, int(n), False, None, None
        return t

    @classmethod
    def from_json(cls, obj) -> "SumTree":
        """Build from a JSON value (already parsed) or a JSON string of either form: a dict is
        the flat form (:meth:`from_flat`), a list or an int the nested form (schema /1).

        Raises:
            TreeError: invalid JSON or a malformed tree.
        """
        if isinstance(obj, str):
            from .record import json_loads

            try:
                obj = json_loads(obj)
            except json.JSONDecodeError as exc:
                raise TreeError(f"tree is not valid JSON: {exc}") from None
        if isinstance(obj, dict):
            return cls.from_flat(obj)
        return cls(obj)

    @classmethod
    def from_flat(cls, obj) -> "SumTree":
        """Build from the flat JSON form ``{"leaves": n, "nodes": [[child, ...], ...]}`` (see the
        module docstring); the order of the nodes and of the children is free.

        Raises:
            TreeError: (one line) not such a dict, a child id out of range or referring to a
                later node, a leaf or node used twice, an unused leaf or node (other than the
                root, the last node), a node of fewer than two children.
        """
        if not isinstance(obj, dict) or "leaves" not in obj or "nodes" not in obj:
            raise TreeError('a flat tree is an object {"leaves": n, "nodes": [...]}')
        n, nodes = obj["leaves"], obj["nodes"]
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise TreeError(f'"leaves" must be an integer >= 1, not {n!r}')
        if not isinstance(nodes, list):
            raise TreeError('"nodes" must be a list of nodes (lists of child ids)')
        n = int(n)
        if not nodes:
            if n != 1:
                raise TreeError(f"a tree of {n} leaves needs nodes")
            return cls.from_canonical(0, 1)
        m = len(nodes)
        leaf_used = bytearray(n)
        node_used = bytearray(m)
        built: list = [None] * m
        keys = [0] * m
        has_c = False
        for k, kids in enumerate(nodes):
            if kids.__class__ is not list or len(kids) < 2:
                what = f"{len(kids)} child(ren)" if isinstance(kids, list) else repr(kids)[:40]
                raise TreeError(f"node {n + k} must list at least two children, not {what}")
            parts = []
            for c in kids:
                if c.__class__ is not int:  # "C", numpy integers, or junk
                    if isinstance(c, str):
                        if c != C_LEAF:
                            raise TreeError(f'node {n + k}: child {c!r} is not an id or "C"')
                        if has_c:
                            raise TreeError('leaf "C" appears more than once')
                        has_c = True
                        parts.append((-1, C_LEAF))
                        continue
                    if isinstance(c, bool) or not isinstance(c, (int, np.integer)):
                        raise TreeError(f'node {n + k}: child {c!r} is not an id or "C"')
                    c = int(c)
                if 0 <= c < n:
                    if leaf_used[c]:
                        raise TreeError(f"leaf {c} appears more than once")
                    leaf_used[c] = 1
                    parts.append((c, c))
                elif n <= c < n + k:
                    j = c - n
                    if node_used[j]:
                        raise TreeError(f"node {c} is used more than once")
                    node_used[j] = 1
                    parts.append((keys[j], built[j]))
                elif n + k <= c < n + m:
                    raise TreeError(f"node {n + k} refers to node {c}, which is not listed before it")
                else:
                    raise TreeError(f"node {n + k}: child id {c} out of range 0..{n + m - 1}")
            if len(parts) == 2:
                a, b = parts
                if a[0] > b[0]:
                    a, b = b, a
                built[k] = (a[1], b[1])
                keys[k] = a[0]
            else:
                parts.sort(key=_first)
                built[k] = tuple([p[1] for p in parts])
                keys[k] = parts[0][0]
        if not all(leaf_used):
            missing = [i for i in range(n) if not leaf_used[i]][:5]
            raise TreeError(f"leaves must be 0..n-1 each used once; missing {missing}")
        node_used[m - 1] = 1
        if not all(node_used):
            unused = [n + j for j in range(m) if not node_used[j]][:5]
            raise TreeError(f"node(s) {unused} are not used (only the root, the last node, may be)")
        t = cls.from_canonical(built[-1], n)
        t.has_c = has_c
        return t

    def to_flat(self) -> dict:
        """The flat JSON form ``{"leaves": n, "nodes": [[child, ...], ...]}``: nodes in
        post-order of the canonical tree, so equal trees give identical values."""
        n = self.n
        nodes: list = []
        if self.root.__class__ is tuple:
            # post-order with children left to right (as nodes_postorder): the reverse of the
            # pre-order that visits children right to left
            order, stack = [], [self.root]
            pop, push, visit = stack.pop, stack.append, order.append
            while stack:
                cur = pop()
                visit(cur)
                for c in cur:
                    if c.__class__ is tuple:
                        push(c)
            order.reverse()
            ids: dict[int, int] = {}
            for i, nd in enumerate(order, n):
                ids[id(nd)] = i
                nodes.append([ids[id(c)] if c.__class__ is tuple else c for c in nd])
        return {"leaves": n, "nodes": nodes}

    def to_nested(self):
        """The nested JSON form: nested lists of ints (and "C"); the form of schema /1 and of
        texts for humans."""
        return _to_lists(self.root)

    def to_json(self):
        """The canonical JSON value: the flat form (:meth:`to_flat`)."""
        return self.to_flat()

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
        """Internal nodes in post-order (children before parents); the order is computed once
        per tree (:meth:`memo`)."""
        return iter(self.memo("postorder", self._postorder))

    def _postorder(self) -> tuple:
        if not isinstance(self.root, tuple):
            return ()
        out = []
        stack = [(self.root, False)]
        while stack:
            cur, visited = stack.pop()
            if visited:
                out.append(cur)
            else:
                stack.append((cur, True))
                for c in reversed(cur):
                    if isinstance(c, tuple):
                        stack.append((c, False))
        return tuple(out)

    def leaves(self, node=None) -> list:
        """Leaves under ``node`` (default: root), in left-to-right canonical order."""
        return leaves_of(self.root if node is None else node)

    def memo(self, key: str, compute):
        """``compute()``, computed once per tree and kept (the tree is immutable): derived
        structure that several passes need, e.g. :func:`fpscope.replay`'s levels."""
        memo = self._memo
        if memo is None:
            memo = self._memo = {}
        if key not in memo:
            memo[key] = compute()
        return memo[key]

    @property
    def n_nodes(self) -> int:
        return len(self.memo("postorder", self._postorder))

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
        return self.memo("max_fan_in",
                         lambda: max((len(nd) for nd in self.nodes_postorder()), default=0))

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


def _first(pair):
    return pair[0]


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
