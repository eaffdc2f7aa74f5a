"""Matrix ops whose outputs add in different orders: every distinct tree and the output
positions that use it ("classes"), from shared calls.

Real GEMM kernels do not add every output the same way (edge tiles, vector-width column groups,
split panels; NUMERICS.md section 1: most outputs of numpy's sgemm here do not share C[0, 0]'s
K-order). Probes ride on rows: row r of A carries the probe vector of a pair (i_r, j_r) (+M, -M,
units) and B = ones, so output (r, c) returns n - l(i_r, j_r) under ITS OWN tree, for every
column c of that row, from one call (FPRev, Xie et al., ATC 2025, with the batched matrix probe).

1. Signatures: a few calls put one random pair in every row; outputs that answer differently
   belong to different trees, so the answers group the positions into candidate classes.
2. Each class runs FPRev (:func:`fpscope.reveal.algorithms.fprev`) through a
   :class:`ClassOracle`: its pairs go to rows where the class has outputs, and every call's
   answers are kept for every class present in each row (later classes start from them). All
   outputs of one class in one row must agree, else the class is split and the search restarts.
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


class ClassOracle:
    """l(i, j) of one class of output positions, answered through shared row calls.

    ``n``, ``probes`` and :meth:`lca_sizes` are what :func:`fprev` asks of a prober.
    """

    def __init__(self, shared: "_Shared", k: int):
        self.shared, self.k, self.n = shared, k, shared.n
        self.probes = 0

    def lca_sizes(self, pairs) -> np.ndarray:
        pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
        cache = self.shared.cache[self.k]
        keys = [(min(a, b), max(a, b)) for a, b in pairs.tolist()]
        need = sorted({p for p in keys if p not in cache})
        if need:
            self.shared.ask(np.asarray(need, dtype=np.int64), self.k)
        self.probes += len(pairs)
        return np.asarray([cache[p] for p in keys], dtype=np.int64)


class _Shared:
    """The calls and the answers of all classes."""

    def __init__(self, target: Target, mask: Mask, labels: np.ndarray):
        self.target, self.mask, self.n = target, mask, target.n
        self.labels = labels
        self.K = int(labels.max()) + 1
        self.members = [labels == k for k in range(self.K)]
        self.rows = [np.flatnonzero(m.any(axis=1)) for m in self.members]
        self.cache: list[dict] = [dict() for _ in range(self.K)]
        self.calls = 0
        self.dtype = target.in_format.numpy_dtype()
        self._ones = np.ones((self.n, target.max_cols), dtype=self.dtype)

    def call(self, rows: np.ndarray, pairs: np.ndarray) -> np.ndarray:
        """One op call: row rows[t] carries pair pairs[t]; returns the (M, N) l values (0 in
        rows that carry no pair)."""
        t, m, n = self.target, self.mask, self.n
        P = np.full((t.max_rows, n), m.u, dtype=self.dtype)
        P[rows, pairs[:, 0]] = m.M
        P[rows, pairs[:, 1]] = -m.M
        out = np.asarray(t.evaluate_outer(P, self._ones), dtype=np.float64)
        self.calls += 1
        k = out[rows] / m.u
        ok = np.isfinite(k) & (k == np.round(k)) & (k >= 0) & (k <= n - 2)
        if not ok.all():
            r, c = (int(v) for v in np.argwhere(~ok)[0])
            i, j = (int(v) for v in pairs[r])
            raise RevealError("not-units", f"probe ({i}, {j}) at output ({rows[r]}, {c}) returned "
                              f"{out[rows[r], c]!r}, not a whole number of units u = {m.u!r}")
        L = np.zeros(out.shape, dtype=np.int64)
        L[rows] = n - k.astype(np.int64)
        return L

    def ask(self, need: np.ndarray, k: int) -> None:
        """Answer ``need`` (pairs i < j) for class k; keep what every call says of every class."""
        rows_k = self.rows[k]
        for s in range(0, len(need), len(rows_k)):
            chunk = need[s : s + len(rows_k)]
            rows = rows_k[: len(chunk)]
            L = self.call(rows, chunk)
            self._store(L, rows, chunk)

    def _store(self, L, rows, pairs) -> None:
        for k in range(self.K):
            mem = self.members[k][rows]
            present = mem.any(axis=1)
            if not present.any():
                continue
            vals = L[rows]
            lo = np.where(mem, vals, np.iinfo(np.int64).max).min(axis=1)
            hi = np.where(mem, vals, -1).max(axis=1)
            bad = present & (lo != hi)
            if bad.any():
                raise _Split(tuple(int(v) for v in pairs[int(np.flatnonzero(bad)[0])]))
            cache = self.cache[k]
            for (i, j), v in zip(pairs[present].tolist(), lo[present].tolist()):
                cache[(min(i, j), max(i, j))] = v

    def common(self, pair) -> np.ndarray:
        """Every output answers one pair: the (M, N) l values."""
        rows = np.arange(self.target.max_rows)
        return self.call(rows, np.repeat(np.asarray([pair], dtype=np.int64), len(rows), axis=0))


def _labels(sigs: list[np.ndarray]) -> np.ndarray:
    """Class labels of the positions: equal answers to every signature pair, equal label;
    numbered by first appearance in row-major order (output (0, 0) is class 0)."""
    shape = sigs[0].shape
    lab = np.zeros(shape[0] * shape[1], dtype=np.int64)
    for L in sigs:  # refine one pair at a time: 1-D uniques stay cheap at a million outputs
        key = lab * (int(L.max()) + 1) + L.reshape(-1)
        _, first, lab = np.unique(key, return_index=True, return_inverse=True)
        order = np.argsort(first)
        remap = np.empty_like(order)
        remap[order] = np.arange(len(order))
        lab = remap[lab.reshape(-1)]
    return lab.reshape(shape)


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
    from .algorithms import fprev
    from .checks import lca_sizes_of_tree

    n = target.n
    rng = np.random.default_rng(seed + 7)
    probe = _Shared(target, mask, np.zeros((target.max_rows, target.max_cols), dtype=np.int64))

    def rand_pair():
        i, j = rng.choice(n, size=2, replace=False)
        return int(min(i, j)), int(max(i, j))

    sig_pairs = [rand_pair() for _ in range(signature_pairs)]
    sigs = [probe.common(p) for p in sig_pairs]
    calls = probe.calls
    for rnd in range(max_rounds):
        labels = _labels(sigs)
        sh = _Shared(target, mask, labels)
        # the signature answers are known for every class
        for p, L in zip(sig_pairs, sigs):
            for k in range(sh.K):
                sh.cache[k][p] = int(L[sh.members[k]][0])
        try:
            trees, probes = [], 0
            for k in range(sh.K):
                oracle = ClassOracle(sh, k)
                nested = fprev(oracle, seed=seed)
                tree = SumTree.from_canonical(nested, n)
                cached = np.asarray(list(sh.cache[k].keys()), dtype=np.int64).reshape(-1, 2)
                want = np.asarray(list(sh.cache[k].values()), dtype=np.int64)
                if len(cached) and not np.array_equal(lca_sizes_of_tree(tree, cached), want):
                    raise RevealError("inconsistent", f"class {k}: the answers of its outputs "
                                      f"fit no single tree")
                trees.append(tree)
                probes += oracle.probes
        except _Split as exc:
            calls += sh.calls
            sig_pairs.append(exc.pair)
            sigs.append(probe.common(exc.pair))
            calls += 1
            continue
        calls += sh.calls
        # check every output against its class's tree on pairs all outputs answer at once
        bad = np.zeros(labels.shape, dtype=bool)
        checks = [rand_pair() for _ in range(check_pairs)]
        for p in checks:
            L = probe.common(p)
            calls += 1
            want = np.asarray([lca_sizes_of_tree(t, np.asarray([p]))[0] for t in trees])
            bad |= L != want[labels]
            if bad.any():
                sig_pairs.append(p)
                sigs.append(L)
                break
        if bad.any():
            continue
        classes = _merge(trees, labels)
        stats = {"calls": calls, "probes": probes + (signature_pairs + check_pairs)
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


def positions_text(blocks: list[dict], limit: int = 4) -> str:
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
