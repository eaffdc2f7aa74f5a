"""Matrix ops whose outputs add in different orders: every distinct tree and the output
positions that use it ("classes"), from shared calls.

Real GEMM kernels do not add every output the same way (edge tiles, vector-width column groups,
split panels; NUMERICS.md section 1: most outputs of numpy's sgemm here do not share C[0, 0]'s
K-order). Probes ride on rows: row r of A carries the probe vector of a pair (i_r, j_r) (+M, -M,
units) and B = ones, so output (r, c) returns n - l(i_r, j_r) under ITS OWN tree, for every
column c of that row, from one call (FPRev, Xie et al., ATC 2025, with the batched matrix probe).

1. Signatures: a few calls put one random pair in every row; outputs that answer differently
   belong to different trees, so the answers group the positions into candidate classes. (One
   call cannot carry several signature pairs: outputs of different rows would then answer
   different pairs, and only outputs that answered the same pairs alike may share a class.)
2. Every class runs FPRev (:func:`fpscope.reveal.algorithms.fprev_stages`), all classes stage by
   stage together: a call gives each row one pair, each class's pairs go to rows where the
   class has outputs, and every call's answers are kept for every class present in each row (a
   pair placed for one class also answers the others in its row). All outputs of one class in
   one row must agree, else the class is split by that pair and the search restarts.
3. Every output is checked against its class's tree with pairs that all outputs answer at once;
   outputs that disagree form a new class (a signature may merge two trees).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..masks import Mask
from ..targets.base import Target
from ..tree import SumTree
from .prober import RevealError


@dataclass
class OutputClass:
    """One tree and the boolean (M, N) map of the output positions that use it."""

    tree: SumTree
    mask: np.ndarray

    @property
    def count(self) -> int:
        return int(self.mask.sum())


class _Split(Exception):
    """A class's outputs disagree within one row: split it by that pair and start again."""

    def __init__(self, pair):
        super().__init__(f"split on {pair}")
        self.pair = pair


class _Caller:
    """Op calls whose rows of A carry probe pairs, B = ones. The probe buffer is kept (units
    everywhere); a call writes its +-M and puts the units back afterwards."""

    def __init__(self, target: Target, mask: Mask):
        self.target, self.mask, self.n = target, mask, target.n
        dtype = target.in_format.numpy_dtype()
        self.P = np.full((target.max_rows, self.n), mask.u, dtype=dtype)
        self.ones = np.ones((self.n, target.max_cols), dtype=dtype)
        self.calls = 0

    def call(self, rows: np.ndarray, pairs: np.ndarray) -> np.ndarray:
        """One op call: row rows[t] carries pair pairs[t]; returns the (len(rows), N) l values
        of those rows (rows without a pair hold units only and are not read).

        Raises:
            RevealError("not-units"): an output is not a whole number of units in [0, n-2].
        """
        m, n, P = self.mask, self.n, self.P
        P[rows, pairs[:, 0]] = m.M
        P[rows, pairs[:, 1]] = -m.M
        try:
            out = np.asarray(self.target.evaluate_outer(P, self.ones), dtype=np.float64)
        finally:
            P[rows, pairs[:, 0]] = m.u
            P[rows, pairs[:, 1]] = m.u
        self.calls += 1
        every = len(rows) == len(out) and bool((rows == np.arange(len(out))).all())
        k = out if every else out[rows]
        if m.u != 1.0:
            k = k / m.u
        return _lca_values(k, n, out, rows, pairs, m.u)

    def common(self, pair) -> np.ndarray:
        """Every output answers one pair: the (M, N) l values."""
        rows = np.arange(len(self.P))
        return self.call(rows, np.repeat(np.asarray([pair], dtype=np.int64), len(rows), axis=0))


def _lca_values(k: np.ndarray, n: int, out, rows, pairs, u) -> np.ndarray:
    """n - k as int32, for outputs k (in units) that must all be whole numbers in [0, n - 2];
    ``out``, ``rows`` and ``pairs`` name the output that is not (RevealError "not-units").

    One cast and one comparison: a value that is not a whole number in int32's range (NaN, inf,
    a fraction, an unabsorbed M) casts to an integer that differs from it."""
    with np.errstate(invalid="ignore"):
        ki = k.astype(np.int32)
    if not (np.array_equal(ki, k) and ki.min() >= 0 and ki.max() <= n - 2):
        with np.errstate(invalid="ignore"):
            kl = k.astype(np.int64)
        r, c = (int(v) for v in np.argwhere((kl != k) | (kl < 0) | (kl > n - 2))[0])
        i, j = (int(v) for v in pairs[r])
        raise RevealError("not-units", f"probe ({i}, {j}) at output ({rows[r]}, {c}) returned "
                          f"{out[rows[r], c]!r}, not a whole number of units u = {u!r}")
    return np.subtract(n, ki, out=ki)


class _Shared:
    """The classes of one round: where each has outputs, and every answer any call gave it."""

    def __init__(self, caller: _Caller, labels: np.ndarray):
        self.caller, self.n, self.labels = caller, caller.n, labels
        self.K = K = int(labels.max()) + 1
        R, C = labels.shape
        # first[r, k]: column of class k's first output in row r (-1: none in that row)
        first = np.full((R, K), -1, dtype=np.int64)
        if K <= 16:
            for k in range(K):
                m = labels == k
                has = m.any(axis=1)
                first[has, k] = m[has].argmax(axis=1)
        else:
            key = (np.arange(R)[:, None] * K + labels).reshape(-1)
            u, idx = np.unique(key, return_index=True)
            first.reshape(-1)[u] = idx % C
        self.first = first
        self.present = first >= 0
        self.rows = [np.flatnonzero(self.present[:, k]) for k in range(K)]
        # ref[r, c]: column of the first output of row r in the class of output (r, c)
        self.ref = np.take_along_axis(first, labels, axis=1)
        self.cache: list[dict] = [dict() for _ in range(K)]

    def value(self, L: np.ndarray, k: int) -> int:
        """Class k's answer in an (M, N) array of answers that every output gave to one pair
        (signature answers: all outputs of a class agree on them)."""
        r = int(self.rows[k][0])
        return int(L[r, self.first[r, k]])

    def answer(self, needs: dict) -> None:
        """Calls until each class k has its ``needs[k]`` (pairs (i, j), i < j) in its cache.

        Each call gives every row one pair: the classes with the fewest rows first, each puts
        its pairs on free rows where it has outputs, skipping a pair already placed in this call
        on a row where it has outputs; each call answers at least one pair."""
        pending = dict(needs)
        R = len(self.labels)
        while True:
            pending = {k: [p for p in ps if p not in self.cache[k]] for k, ps in pending.items()}
            pending = {k: ps for k, ps in pending.items() if ps}
            if not pending:
                return
            free = np.ones(R, dtype=bool)
            placed: dict = {}  # pair -> rows that carry it in this call
            rows, pairs = [], []
            for k in sorted(pending, key=lambda k: len(self.rows[k])):
                here = self.present[:, k]
                todo = [p for p in pending[k] if not any(here[r] for r in placed.get(p, ()))]
                avail = self.rows[k][free[self.rows[k]]][: len(todo)]
                for r, p in zip(avail.tolist(), todo):
                    placed.setdefault(p, []).append(r)
                    pairs.append(p)
                rows.append(avail)
                free[avail] = False
            rows = np.concatenate(rows)
            pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
            self.store(rows, pairs, self.caller.call(rows, pairs))

    def store(self, rows: np.ndarray, pairs: np.ndarray, L: np.ndarray) -> None:
        """Keep what one call (row rows[t] carrying pairs[t], answers L[t]) says of every class
        present in each row; raises _Split where the outputs of a class in a row disagree."""
        ref = np.take_along_axis(L, self.ref[rows], axis=1)
        bad = (L != ref).any(axis=1)
        if bad.any():
            raise _Split(tuple(int(v) for v in pairs[int(np.flatnonzero(bad)[0])]))
        first = self.first[rows]
        vals = np.take_along_axis(L, np.maximum(first, 0), axis=1)
        keys = [(i, j) if i < j else (j, i) for i, j in pairs.tolist()]
        for k in range(self.K):
            there = np.flatnonzero(first[:, k] >= 0)
            cache = self.cache[k]
            for t, v in zip(there.tolist(), vals[there, k].tolist()):
                cache[keys[t]] = v


def _fprev_all(sh: _Shared, n: int, seed: int) -> tuple[list, int]:
    """FPRev of every class, stage by stage together (shared calls); returns the classes'
    canonical trees and the number of l values FPRev asked."""
    from .algorithms import fprev_stages

    gens = [fprev_stages(np.arange(n), seed) for _ in range(sh.K)]
    trees: list = [None] * sh.K
    asked: list = [None] * sh.K

    def step(k, vals):
        try:
            asked[k] = gens[k].send(vals)
        except StopIteration as stop:
            trees[k], asked[k] = stop.value, None

    for k in range(sh.K):
        step(k, None)
    probes = 0
    while any(a is not None for a in asked):
        keys = {k: [(i, j) if i < j else (j, i) for i, j in a.tolist()]
                for k, a in enumerate(asked) if a is not None}
        sh.answer({k: list(dict.fromkeys(ks)) for k, ks in keys.items()})
        for k, ks in keys.items():
            cache = sh.cache[k]
            probes += len(ks)
            step(k, np.fromiter((cache[p] for p in ks), dtype=np.int64, count=len(ks)))
    return trees, probes


def _lca_sizes(tree: SumTree, pairs: np.ndarray) -> np.ndarray:
    """l(i, j) of ``tree`` for (P, 2) pairs of distinct leaves, as
    :func:`fpscope.reveal.checks.lca_sizes_of_tree` gives them, in O(nodes) Python and
    O((n + P) log n) numpy work (that one builds a P x nodes table).

    In depth-first order the lowest common ancestor of two adjacent leaves is the node whose
    children they end and start; that of any two leaves is the shallowest such separating node
    between them (a range minimum over depths, from a sparse table)."""
    P = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    if not len(P):
        return np.zeros(0, dtype=np.int64)
    leafpos: dict = {}
    lo: list = []  # per node: position of its first leaf, then its leaf count
    depth_of: list = []
    sep_node: list = []  # per leaf position p >= 1: the node separating leaves p - 1 and p
    pos, pending = 0, -1
    stack = [(tree.root, 0, -1)]  # (node, depth, parent when it is not its parent's first child)
    while stack:
        cur, d, parent = stack.pop()
        if parent >= 0:
            pending = parent
        c = cur.__class__
        if c is tuple:
            k = len(lo)
            lo.append(pos)
            depth_of.append(d)
            stack.append((None, k, -1))  # closes node k
            for child in cur[:0:-1]:
                stack.append((child, d + 1, k))
            stack.append((cur[0], d + 1, -1))
        elif cur is None:
            lo[d] = pos - lo[d]
        else:
            if pos:
                sep_node.append(pending)
            leafpos[cur] = pos
            pos += 1
    size = np.asarray(lo, dtype=np.int64)
    sep = np.asarray(sep_node, dtype=np.int64)
    depth = np.asarray(depth_of, dtype=np.int64)[sep]
    table = [np.arange(len(sep))]  # table[k][p]: the shallowest separator in p .. p + 2^k - 1
    while (1 << len(table)) <= len(sep):
        prev, h = table[-1], 1 << (len(table) - 1)
        a, b = prev[:-h], prev[h:]
        table.append(np.where(depth[a] <= depth[b], a, b))
    ends = np.array([[leafpos[int(i)], leafpos[int(j)]] for i, j in P.tolist()], dtype=np.int64)
    a, b = ends.min(axis=1), ends.max(axis=1)  # separators a .. b - 1 (positions a + 1 .. b)
    k = np.floor(np.log2(b - a)).astype(np.int64)
    out = np.empty(len(P), dtype=np.int64)
    for kk in np.unique(k).tolist():
        sel = np.flatnonzero(k == kk)
        x, y = table[kk][a[sel]], table[kk][b[sel] - (1 << kk)]
        out[sel] = size[sep[np.where(depth[x] <= depth[y], x, y)]]
    return out


def _labels(sigs: list[np.ndarray]) -> np.ndarray:
    """Class labels of the positions: equal answers to every signature pair, equal label;
    numbered by first appearance in row-major order (output (0, 0) is class 0)."""
    shape = sigs[0].shape
    lab = np.zeros(shape[0] * shape[1], dtype=np.int64)
    K = 1
    for L in sigs:  # refine one pair at a time
        vals = L.reshape(-1)
        base = int(vals.max()) + 1
        if K * base <= 1 << 22:  # few keys: rank those present in a table (no sort)
            key = lab * base
            key += vals
            seen = np.zeros(K * base, dtype=bool)
            seen[key] = True
            rank = np.cumsum(seen) - 1
            lab, K = rank[key], int(rank[-1]) + 1
        else:
            _, lab = np.unique(lab * base + vals, return_inverse=True)
            lab = lab.reshape(-1)
            K = int(lab.max()) + 1
    # number the labels by first appearance in row-major order
    if K <= 32:
        first = np.array([int(np.argmax(lab == k)) for k in range(K)])
    else:
        _, first = np.unique(lab, return_index=True)
    remap = np.empty(K, dtype=np.int64)
    remap[np.argsort(first)] = np.arange(K)
    return remap[lab].reshape(shape)


def reveal_classes(target: Target, mask: Mask, seed: int = 0, signature_pairs: int = 8,
                   check_pairs: int = 8, max_rounds: int = 6) -> tuple[list[OutputClass], dict]:
    """Every tree of a matrix op's outputs and the positions that use it.

    Args:
        target: a matrix op (``is_matrix``); outputs are the (max_rows, max_cols) grid of
            ``evaluate_outer``.
        mask: probe values (any u: B is all ones, so A alone carries the probe).
        seed: seed of the random pairs and FPRev's pivots.
        signature_pairs: random pairs that group outputs before FPRev.
        check_pairs: random pairs on which every output is checked against its class's tree.
        max_rounds: splits allowed before giving up.

    Returns:
        (classes, stats): classes ordered by first position in row-major order (class 0 holds
        output (0, 0)); stats: ``calls``, ``probes``, ``rounds``, ``checked`` (outputs times
        check pairs).

    Raises:
        RevealError: "inconsistent" (no set of trees explains the answers within
            ``max_rounds`` splits), or any probe error.
    """
    n = target.n
    rng = np.random.default_rng(seed + 7)
    caller = _Caller(target, mask)

    def rand_pair():
        i, j = rng.choice(n, size=2, replace=False)
        return int(min(i, j)), int(max(i, j))

    sig_pairs = [rand_pair() for _ in range(signature_pairs)]
    sigs = [caller.common(p) for p in sig_pairs]
    for rnd in range(max_rounds):
        labels = _labels(sigs)
        sh = _Shared(caller, labels)
        for p, L in zip(sig_pairs, sigs):  # the signature answers are known for every class
            for k in range(sh.K):
                sh.cache[k][p] = sh.value(L, k)
        try:
            nested, probes = _fprev_all(sh, n, seed)
            trees = []
            for k, nest in enumerate(nested):
                tree = SumTree.from_canonical(nest, n)
                cached = np.asarray(list(sh.cache[k].keys()), dtype=np.int64).reshape(-1, 2)
                want = np.asarray(list(sh.cache[k].values()), dtype=np.int64)
                if len(cached) and not np.array_equal(_lca_sizes(tree, cached), want):
                    raise RevealError("inconsistent", f"class {k}: the answers of its outputs "
                                      f"fit no single tree")
                trees.append(tree)
        except _Split as exc:
            sig_pairs.append(exc.pair)
            sigs.append(caller.common(exc.pair))
            continue
        # check every output against its class's tree on pairs all outputs answer at once
        bad = np.zeros(labels.shape, dtype=bool)
        checks = [rand_pair() for _ in range(check_pairs)]
        if checks:
            want = np.stack([_lca_sizes(t, np.asarray(checks, dtype=np.int64))
                             for t in trees])  # (classes, pairs)
        for idx, p in enumerate(checks):
            L = caller.common(p)
            bad |= L != want[:, idx][labels]
            if bad.any():
                sig_pairs.append(p)
                sigs.append(L)
                break
        if bad.any():
            continue
        classes = _merge(trees, labels)
        stats = {"calls": caller.calls, "probes": probes + (signature_pairs + check_pairs)
                 * labels.size, "rounds": rnd + 1, "checked": len(checks) * labels.size}
        return classes, stats
    raise RevealError("inconsistent", f"the outputs' answers fit no set of trees after "
                      f"{max_rounds} splits (nondeterministic or data-dependent order?)")


def _merge(trees: list[SumTree], labels: np.ndarray) -> list[OutputClass]:
    out: list[OutputClass] = []
    for k, t in enumerate(trees):
        m = labels == k
        for c in out:
            if c.tree == t:
                c.mask |= m
                break
        else:
            out.append(OutputClass(t, m.copy()))
    return out

# -- compact descriptions of position sets ---------------------------------------------------

def _runs(values) -> list[list[int]]:
    out: list[list[int]] = []
    for v in values:
        if out and v == out[-1][1] + 1:
            out[-1][1] = v
        else:
            out.append([v, v])
    return out


def describe_indices(idx, length: int) -> dict:
    """A compact description of sorted indices within range(length): ``{"all": true}``, or
    ``{"period": P, "residues": [[a, b], ...], "from": lo, "to": hi}`` (every i in lo..hi with
    i mod P in the residue ranges), or ``{"ranges": [[a, b], ...]}``; a periodic part may be
    followed by ``"then"``: the description of the indices after it."""
    idx = np.asarray(idx, dtype=np.int64)
    if len(idx) == length:
        return {"all": True}
    runs = _runs(idx.tolist())
    if len(runs) <= 3:
        return {"ranges": runs}
    lo = int(idx[0])
    best = None
    for P in range(2, min(length, 257)):
        res = np.unique((idx - lo) % P)
        if len(res) == P:
            continue
        # the longest stretch from lo where membership is exactly "(i - lo) mod P in res"
        span = np.arange(lo, length)
        pred = np.isin((span - lo) % P, res)
        actual = np.zeros(len(span), dtype=bool)
        actual[idx - lo] = True
        wrong = np.flatnonzero(pred != actual)
        end = int(wrong[0]) if len(wrong) else len(span)
        if end >= 2 * P and (best is None or end > best[1]):
            best = (P, end, res)
        if end == len(span):
            break
    if best is None:
        return {"ranges": runs}
    P, end, res = best
    members = idx[idx < lo + end]
    desc = {"period": int(P), "residues": _runs(np.unique(members % P).tolist()),
            "from": lo, "to": int(members[-1])}
    rest = idx[idx >= lo + end]
    if len(rest):
        desc["then"] = describe_indices(rest, length)
    return desc


def indices_text(desc: dict, var: str) -> str:
    """Words for :func:`describe_indices`: ``j mod 16 in 0..7 (j = 0..1023)``."""
    if desc.get("all"):
        return f"every {var}"
    if "ranges" in desc:
        parts = [f"{a}" if a == b else f"{a}..{b}" for a, b in desc["ranges"][:4]]
        more = f" and {len(desc['ranges']) - 4} more ranges" if len(desc["ranges"]) > 4 else ""
        return f"{var} = {', '.join(parts)}{more}"
    res = ", ".join(f"{a}" if a == b else f"{a}..{b}" for a, b in desc["residues"])
    text = f"{var} mod {desc['period']} in {res} ({var} = {desc['from']}..{desc['to']})"
    if "then" in desc:
        text += "; then " + indices_text(desc["then"], var)
    return text


def describe_positions(mask: np.ndarray) -> list[dict]:
    """Blocks of a boolean (M, N) position map: rows sharing one set of columns form a block
    ``{"rows": desc, "cols": desc}`` (descriptions of :func:`describe_indices`)."""
    M, N = mask.shape
    keys: dict = {}
    for r in range(M):
        cols = np.flatnonzero(mask[r])
        if len(cols):
            keys.setdefault(cols.tobytes(), (cols, []))[1].append(r)
    blocks = []
    for cols, rows in keys.values():
        blocks.append({"rows": describe_indices(rows, M), "cols": describe_indices(cols, N)})
    return blocks


def positions_text(blocks: list[dict], limit: int = 4, elements: bool = False) -> str:
    """Words for :func:`describe_positions`; ``elements``: the map is (E, 1), one row per
    element of a buffer (collectives), named ``e``."""
    if elements:
        parts = [indices_text(b["rows"], "e") for b in blocks[:limit]]
    else:
        parts = [f"rows {indices_text(b['rows'], 'i')}, columns {indices_text(b['cols'], 'j')}"
                 if not b["rows"].get("all") else f"columns {indices_text(b['cols'], 'j')}"
                 for b in blocks[:limit]]
    if len(blocks) > limit:
        parts.append(f"... ({len(blocks)} blocks; --format json has all)")
    return "; ".join(parts)


def expand_indices(desc: dict, length: int) -> np.ndarray:
    """Inverse of :func:`describe_indices`.

    Raises:
        ValueError: a malformed description.
    """
    if not isinstance(desc, dict):
        raise ValueError("an index description must be an object")
    if desc.get("all"):
        return np.arange(length)
    if "ranges" in desc:
        parts = [np.arange(int(a), int(b) + 1) for a, b in desc["ranges"]]
        out = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    elif "period" in desc:
        P, lo, hi = int(desc["period"]), int(desc["from"]), int(desc["to"])
        res = np.concatenate([np.arange(int(a), int(b) + 1) for a, b in desc["residues"]])
        span = np.arange(lo, hi + 1)
        out = span[np.isin(span % P, res % P)]
        if "then" in desc:
            out = np.concatenate([out, expand_indices(desc["then"], length)])
    else:
        raise ValueError(f"unknown index description {sorted(desc)}")
    if len(out) and (out.min() < 0 or out.max() >= length):
        raise ValueError(f"index out of range 0..{length - 1}")
    return out.astype(np.int64)


def positions_from_blocks(blocks: list, shape) -> np.ndarray:
    """Inverse of :func:`describe_positions`: the boolean (M, N) map.

    Raises:
        ValueError: a malformed block.
    """
    M, N = (int(v) for v in shape)
    mask = np.zeros((M, N), dtype=bool)
    for b in blocks:
        rows = expand_indices(b["rows"], M)
        cols = expand_indices(b["cols"], N)
        mask[np.ix_(rows, cols)] = True
    return mask
