"""The node arithmetic of a revealed tree: every node's format and every product's entry,
measured by probes and confirmed by a bitwise replay (:func:`measure_arithmetic`).

Node formats come from :func:`fpscope.probes.accumulator.detect_node_formats` (the root, which
the probe cannot see, is chosen among the candidates by the replay); product entries (rounded,
fused, exact) from :func:`fpscope.probes.product_entry.detect_product_entries`. Both cost one
probe row per node or leaf (four per node), so past a budget a spread sample is probed and the
others take the nearest probed node's format (post-order) or the most common entry among
probed leaves entering nodes of the same format; the evidence says how many were probed, and
the replay on random inputs checks the inferred rest.
"""

from __future__ import annotations

import time

import numpy as np

from ..arithmetic import Arithmetic
from ..formats import get_format
from ..targets.base import Target
from ..tree import SumTree

#: probe rows times leaves evaluated for one property, at most (about 0.1-0.3 s of np.sum here)
ELEMENT_BUDGET = 1 << 26
#: probe rows for one property, at most, when every row is one call of the op
ROW_BUDGET = 8192
#: multiply-adds of one matrix call times the calls, at most, where each row is a call
FLOP_BUDGET = 1 << 31


def _row_limit(target: Target, shared: bool) -> int:
    n = target.n
    if target.is_matrix:
        per_call = target.max_rows * target.n * target.max_cols
        if shared and min(target.max_rows, target.max_cols) > 1:
            return max(64, 64 * min(target.max_rows, target.max_cols))
        return max(16, FLOP_BUDGET // max(per_call, 1))
    return max(64, min(ROW_BUDGET * 4, ELEMENT_BUDGET // max(n, 1)))


def _spread(total: int, count: int, keep=()) -> list[int]:
    """About ``count`` indices spread over range(total), plus ``keep``."""
    if count >= total:
        return list(range(total))
    picks = set(np.linspace(0, total - 1, max(count, 2)).round().astype(int).tolist())
    picks.update(k for k in keep if 0 <= k < total)
    return sorted(picks)


def rows_evaluator(target: Target):
    """For matrix ops whose outputs share one K-order: many probe vectors per call, one per
    row of A (B = ones). None when that does not apply."""
    if not (target.is_matrix and target.max_rows > 1):
        return None

    def evaluate(X):
        X = target.as_storage(np.asarray(X))
        ones = np.ones((target.n, 1), dtype=X.dtype)
        return np.concatenate([
            np.asarray(target.evaluate_outer(X[s : s + target.max_rows], ones))[:, 0]
            for s in range(0, len(X), target.max_rows)
        ])

    return evaluate


def products_evaluator(target: Target):
    """For matrix ops whose outputs share one K-order: factor pairs on the diagonal of one
    call (row r of A with column r of B), min(M, N) pairs per call. None when that does not
    apply (use ``target.evaluate_products``)."""
    if not target.is_matrix:
        return None
    d = min(target.max_rows, target.max_cols)
    if d < 2:
        return None

    def evaluate(A, B):
        A, B = np.asarray(A), np.asarray(B)
        out = []
        for s in range(0, len(A), d):
            P, Q = A[s : s + d], B[s : s + d]
            out.append(np.diagonal(np.asarray(target.evaluate_outer(P, Q.T))))
        return np.concatenate(out) if out else np.zeros(0)

    return evaluate


def class_rows_evaluator(target: Target, positions: np.ndarray):
    """Probe vectors of one class of outputs (boolean (M, N) ``positions``): row r of A carries
    a vector, B = ones, and output (r, c_r) answers it, c_r a column of that row in the class;
    one call takes as many vectors as the class has rows."""
    rows = np.flatnonzero(positions.any(axis=1))
    cols = positions[rows].argmax(axis=1)

    def evaluate(X):
        X = target.as_storage(np.asarray(X))
        ones = np.ones((target.n, target.max_cols), dtype=X.dtype)
        out = []
        for s in range(0, len(X), len(rows)):
            chunk = X[s : s + len(rows)]
            P = np.zeros((target.max_rows, target.n), dtype=X.dtype)
            P[rows[: len(chunk)]] = chunk
            Y = np.asarray(target.evaluate_outer(P, ones))
            out.append(Y[rows[: len(chunk)], cols[: len(chunk)]])
        return np.concatenate(out) if out else np.zeros(0)

    return evaluate


def _matching(positions: np.ndarray):
    """Distinct (row, column) pairs inside ``positions`` (greedy), for factor pairs."""
    used = np.zeros(positions.shape[1], dtype=bool)
    rr, cc = [], []
    for r in np.flatnonzero(positions.any(axis=1)):
        free = np.flatnonzero(positions[r] & ~used)
        if len(free):
            used[free[0]] = True
            rr.append(r)
            cc.append(int(free[0]))
    return np.asarray(rr, dtype=np.int64), np.asarray(cc, dtype=np.int64)


def class_products_evaluator(target: Target, positions: np.ndarray):
    """Factor pairs of one class: row r of A holds a, column c of B holds b, for distinct
    (r, c) in the class; output (r, c) answers; one call takes one pair per matched row."""
    rows, cols = _matching(positions)

    def evaluate(A, B):
        A, B = np.asarray(A), np.asarray(B)
        out = []
        for s in range(0, len(A), len(rows)):
            a, b = A[s : s + len(rows)], B[s : s + len(rows)]
            P = np.zeros((target.max_rows, target.n))
            Q = np.zeros((target.n, target.max_cols))
            P[rows[: len(a)]] = a
            Q[:, cols[: len(b)]] = b.T
            Y = np.asarray(target.evaluate_outer(P, Q))
            out.append(Y[rows[: len(a)], cols[: len(b)]])
        return np.concatenate(out) if out else np.zeros(0)

    return evaluate


def _fill_nodes(names: list, probed: list[int]) -> list:
    """Unprobed non-root nodes take the format of the nearest probed node in post-order."""
    if not probed:
        return names
    arr = np.sort(np.asarray(probed, dtype=np.int64))
    out = list(names)
    missing = np.asarray([k for k in range(len(names) - 1) if out[k] is None], dtype=np.int64)
    if not len(missing):
        return out
    pos = np.searchsorted(arr, missing)
    left = arr[np.clip(pos - 1, 0, len(arr) - 1)]
    right = arr[np.clip(pos, 0, len(arr) - 1)]
    # the nearest probed node; on a tie the lower index (as argmin over the sorted indices)
    near = np.where(np.abs(missing - left) <= np.abs(right - missing), left, right)
    for k, j in zip(missing.tolist(), near.tolist()):
        out[k] = names[j]
    return out


def _root_options(tree: SumTree, names: list, acc_name: str) -> list[str]:
    nodes = list(tree.nodes_postorder())
    index = {id(nd): i for i, nd in enumerate(nodes)}
    child = [names[index[id(c)]] for c in nodes[-1] if isinstance(c, tuple)]
    child = [c for c in child if c is not None]
    opts: list[str] = []
    by_p = sorted(set(child), key=lambda f: -get_format(f).p)
    for cand in [acc_name] + by_p + ["fp64"]:
        if cand not in opts:
            opts.append(cand)
    if child and acc_name not in child:  # the children's widest format first
        opts.remove(by_p[0])
        opts.insert(0, by_p[0])
    return opts


def measure_arithmetic(target: Target, tree: SumTree, acc: dict, shared: bool,
                       samples: int, seed: int, positions: np.ndarray | None = None,
                       timings: dict | None = None) -> tuple[Arithmetic, dict, dict | None]:
    """Node formats and product entries of ``target`` (whose tree is ``tree``), checked by
    replay.

    Args:
        target: the op.
        tree: its revealed tree (output (0, 0)'s for matrix ops).
        acc: :func:`fpscope.probes.accumulator.detect_accumulator`'s result.
        shared: every output of a matrix op shares the tree (batched probes are then used).
        samples: random inputs per distribution for the replay (0: no replay).
        seed: seed of the replay inputs.
        positions: for a matrix op whose outputs use several trees, the boolean (M, N) map of
            the outputs that use ``tree`` (:mod:`fpscope.reveal.classes`): probes and replay go
            to those outputs.
        timings: a dict that gets the wall seconds of each part added to its keys
            "node_formats", "product_entries" and "replay" (benchmarks/bench_reveal.py).

    Returns:
        (Arithmetic, evidence dict, replay report or None). The evidence says how many nodes and
        leaves were probed and what could not be modelled; when no candidate replays bit for
        bit, the first candidate and its failed report are returned.
    """
    from ..probes.accumulator import detect_node_formats
    from ..verify import verify

    fin, fout = target.in_format, target.out_format
    acc_name = acc["format"] if acc.get("format") else fin.name
    timings = {} if timings is None else timings
    clock = [time.perf_counter()]

    def lap(part: str) -> None:
        now = time.perf_counter()
        timings[part] = timings.get(part, 0.0) + now - clock[0]
        clock[0] = now

    m = tree.n_nodes
    evidence: dict = {}
    binary = tree.max_fan_in() <= 2
    if not binary or m == 0:
        arith = Arithmetic.uniform(m, acc_name, fout.name)
        if not binary:
            evidence["products"] = ("not modelled: fused multi-term nodes (matrix units; "
                                    "fpscope probe characterises them)")
        rep = (verify(target, tree, samples=samples, seed=seed, arithmetic=arith,
                      first_output_only=not shared and positions is None,
                      positions=positions) if samples > 0 else None)
        lap("replay")
        return arith, evidence, rep
    batched = shared or positions is not None
    limit = _row_limit(target, batched)
    rows_eval = (rows_evaluator(target) if shared else
                 class_rows_evaluator(target, positions) if positions is not None else None)
    node_count = m - 1
    probe_nodes = _spread(node_count, limit // 4) if node_count else []
    names = detect_node_formats(target, tree, evaluate=rows_eval, nodes=probe_nodes)
    lap("node_formats")
    evidence["node_formats_probed"] = (f"{len(probe_nodes)} of {node_count} non-root nodes"
                                       + (" (the others take the nearest probed node's format)"
                                          if len(probe_nodes) < node_count else ""))
    wider = sorted({x for x in names if x and x.startswith(">")})
    if wider:
        evidence["node_formats_note"] = (f"some nodes keep more bits than the input format can "
                                         f"probe ({', '.join(wider)}); modelled as {acc_name}")
        names = [acc_name if (x and x.startswith(">")) else x for x in names]
    names = _fill_nodes(names, probe_nodes)
    options = _root_options(tree, names, acc_name)
    if node_count == 0:
        options = [acc_name] + [o for o in ("fp64",) if o != acc_name]
    entries = None
    first = None
    for root in options:
        full = [x if x is not None else acc_name for x in names[:-1]] + [root]
        if target.has_products and entries is None:
            entries = _entries(target, tree, full, shared, limit, evidence, positions)
        lap("node_formats" if entries is None else "product_entries")
        arith = Arithmetic(tuple(full), None if entries is None else tuple(entries), fout.name)
        if samples <= 0:
            return arith, evidence, None
        rep = verify(target, tree, samples=samples, seed=seed, arithmetic=arith,
                     first_output_only=not shared and positions is None, positions=positions)
        lap("replay")
        if rep["bit_exact"]:
            return arith, evidence, rep
        if first is None:
            first = (arith, rep)
    return first[0], evidence, first[1]


def _entries(target: Target, tree: SumTree, full: list, shared: bool, limit: int,
             evidence: dict, positions=None) -> list:
    from ..probes.product_entry import detect_product_entries, leaf_positions

    n = tree.n
    leaves = _spread(n, max(8, limit // 2), keep=list(range(min(n, 16))) + list(range(n - 16, n)))
    ev = (products_evaluator(target) if shared else
          class_products_evaluator(target, positions) if positions is not None else None)
    res = detect_product_entries(target, tree, full, evaluate=ev, leaves=leaves)
    entries = res["entries"]
    pos = leaf_positions(tree)
    evidence["products_probed"] = (f"{res['probed']} of {n} leaves in {res['rows']} rows"
                                   + (" (the others take the most common entry among probed "
                                      "leaves entering nodes of the same format)"
                                      if res["probed"] < n else ""))
    if res["unexplained"]:
        evidence["products_unexplained"] = res["unexplained"][:8]
    common: dict = {}
    for i, e in enumerate(entries):
        if e is not None and pos[i] is not None:
            key = full[pos[i][0]]
            common.setdefault(key, {}).setdefault(e, 0)
            common[key][e] += 1
    for i in range(n):
        if entries[i] is None:
            key = full[pos[i][0]] if pos[i] is not None else None
            votes = common.get(key) or {}
            entries[i] = max(votes, key=votes.get) if votes else "rounded"
    return entries
