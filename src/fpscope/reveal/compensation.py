"""Two-input probes: does every addition of the op round to nearest, or does the op carry the
rounding error of one addition into a later one (compensated summation, e.g. Kahan)?

Every input is 0 except x_i = a = 1 + 2^(1-p) and x_j = b = 2^-p (p: the precision of the input
format; a's last bit is odd and b is half of a's ulp), then the same with a and b swapped. A
fixed tree of rounded additions forms a + b = 1 + 3 * 2^-p at LCA(i, j) and afterwards adds only
zeros, which are exact, so whatever the node and output formats it returns a + b rounded to
nearest (ties to even) at some precision: a + b itself, 1 + 2^(2-p) (the tie of a p-bit format
goes to even), or 1. Kahan's summation instead subtracts the lost half-ulp from a later (zero)
input and returns a: the tie went to odd, which no tree of round-to-nearest additions gives.
The probe costs two rows per probed node; it runs when the replay has already failed
(:func:`fpscope.reveal.driver.reveal`), to say what the replay could not model.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from ..formats import is_representable
from ..targets.base import Target
from ..tree import SumTree

#: probe rows times leaves, at most (2 rows per probed node)
ELEMENT_BUDGET = 1 << 25
#: multiply-adds of the matrix calls, at most, when each probe row is one call
FLOP_BUDGET = 1 << 31


def _rne(s: Fraction, q: int) -> Fraction:
    """``s`` (1 <= s < 2) rounded to q significand bits, ties to even."""
    scaled = s * (1 << (q - 1))
    k, rem = divmod(scaled.numerator, scaled.denominator)
    twice = 2 * rem
    if twice > scaled.denominator or (twice == scaled.denominator and k % 2 == 1):
        k += 1
    return Fraction(k, 1 << (q - 1))


def _name(v: Fraction, p: int) -> str:
    """``v`` written as 1 + k * 2^-p (k a power of two where possible), or as a number."""
    d = (v - 1) * (1 << p)
    if v == 1:
        return "1"
    if d.denominator == 1 and d > 0:
        k = int(d)
        if k & (k - 1) == 0:
            return f"1 + 2^-{p - k.bit_length() + 1}"
        return f"1 + {k}*2^-{p}"
    return float(v).hex()


def _nodes_to_probe(tree: SumTree, arith, limit: int) -> list[int]:
    """Post-order indices of the nodes to probe: all when they fit ``limit``; else every node
    whose measured format is not the most common one (the format probe saw something there),
    plus a spread sample of the others."""
    from .arithmetic import _spread

    m = tree.n_nodes
    if m <= limit:
        return list(range(m))
    keep: list[int] = []
    if arith is not None and len(arith.node_formats) == m:
        names = list(arith.node_formats)
        common = max(set(names), key=names.count)
        keep = [k for k, f in enumerate(names) if f != common][:limit]
    return _spread(m, max(2, limit - len(keep)), keep=keep + [m - 1])


def probe_two_inputs(target: Target, tree: SumTree, arith=None, evaluate=None,
                     budget: int = ELEMENT_BUDGET) -> dict:
    """Two-input probes at the nodes of a binary ``tree`` (see the module docstring).

    Args:
        target: the op; ``tree`` is its revealed tree.
        tree: a tree with binary nodes only (fused nodes are skipped).
        arith: the measured :class:`fpscope.arithmetic.Arithmetic`, used to pick nodes when not
            every node fits the budget.
        evaluate: batched evaluator with the semantics of ``target.evaluate`` (default that).
        budget: probe rows times leaves, at most.

    Returns:
        JSON-able dict: ``probed`` (nodes probed), ``nodes`` (internal nodes), ``values``
        (text), ``allowed`` (what a tree of round-to-nearest additions returns), ``violations``
        (how many probed nodes returned something else), ``examples`` (up to 4: leaves i and
        j, the leaf count of LCA(i, j), x_i, x_j and the output), ``summary`` (one sentence).
        ``probed`` is 0 (and ``summary`` says why) where the probe does not apply.
    """
    n = target.n
    fin = target.in_format
    p = fin.p
    a, b = 1.0 + 2.0 ** (1 - p), 2.0 ** -p
    report: dict = {"probed": 0, "nodes": tree.n_nodes, "violations": 0, "examples": []}
    if n < 2 or tree.n_nodes == 0:
        report["summary"] = "two-input probes: the tree has no addition"
        return report
    if not bool(np.all(is_representable(np.array([a, b]), fin))):
        report["summary"] = f"two-input probes: 1 + 2^-{p - 1} or 2^-{p} is not a {fin.name} value"
        return report
    s = Fraction(a) + Fraction(b)
    allowed = sorted({_rne(s, q) for q in range(1, p + 3)})
    report["values"] = (f"x_i = 2^-{p}, x_j = 1 + 2^-{p - 1} and the reverse, every other input 0")
    report["allowed"] = [_name(v, p) for v in allowed]
    nodes = list(tree.nodes_postorder())
    limit = max(8, budget // max(2 * n, 1))
    if evaluate is None and target.is_matrix:  # one whole product per row: cap the work
        per_call = max(target.max_rows * n * target.max_cols, 1)
        limit = min(limit, max(4, FLOP_BUDGET // (2 * per_call)))
    picked = _nodes_to_probe(tree, arith, limit)
    rows, owners = [], []
    dt = fin.numpy_dtype()
    for k in picked:
        nd = nodes[k]
        if len(nd) != 2:
            continue
        li = [x for x in tree.leaves(nd[0]) if not isinstance(x, str)]
        lj = [x for x in tree.leaves(nd[1]) if not isinstance(x, str)]
        if not li or not lj:
            continue
        i, j = int(li[0]), int(lj[0])
        for vi, vj in ((b, a), (a, b)):
            x = np.zeros(n, dtype=dt)
            x[i], x[j] = vi, vj
            rows.append(x)
            owners.append((k, i, j, vi, vj))
    if not rows:
        report["summary"] = "two-input probes: no binary node to probe"
        return report
    out = np.asarray((evaluate or target.evaluate)(np.asarray(rows)), dtype=np.float64)
    allowed_set = set(allowed)
    bad: dict[int, tuple] = {}
    for (k, i, j, vi, vj), y in zip(owners, out):
        ok = bool(np.isfinite(y)) and Fraction(float(y)) in allowed_set
        if not ok and k not in bad:
            bad[k] = (i, j, vi, vj, float(y))
    probed = len({o[0] for o in owners})
    report["probed"] = probed
    report["violations"] = len(bad)
    for k, (i, j, vi, vj, y) in list(bad.items())[:4]:
        report["examples"].append({
            "leaves": [i, j], "lca_leaves": len(tree.leaves(nodes[k])),
            "x_i": float(vi).hex(), "x_j": float(vj).hex(), "output": float(y).hex(),
        })
    allowed_text = ", ".join(report["allowed"])
    if not bad:
        report["summary"] = (
            f"two-input probes ({report['values']}) at {probed} of {tree.n_nodes} nodes all "
            f"returned x_i + x_j rounded to nearest ({allowed_text})")
        return report
    k0 = next(iter(bad))
    i, j, vi, vj, y = bad[k0]
    got = _name(Fraction(y), p) if np.isfinite(y) else repr(y)
    name = {a: f"1 + 2^-{p - 1}", b: f"2^-{p}"}
    report["summary"] = (
        f"two-input probes: at {len(bad)} of {probed} probed nodes the op does not round "
        f"x_i + x_j to nearest: e.g. x{i} = {name[vi]} and x{j} = {name[vj]} (they meet at a "
        f"node of {len(tree.leaves(nodes[k0]))} leaves), every other input 0, give {got}, while "
        f"a tree of round-to-nearest additions gives one of {allowed_text} whatever its node "
        f"formats; the op carries a rounding error into a later addition (compensated "
        f"summation, e.g. Kahan) between such leaves")
    return report
