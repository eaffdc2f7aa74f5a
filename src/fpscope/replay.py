"""Replay: evaluate a summation tree on concrete inputs with IEEE node arithmetic.

Every binary node computes fl(a + b) in the accumulator format with round-to-nearest-even; a fused
k-term node (k > 2) computes the exact sum of its children and rounds once (the ideal fused
addition; matrix units differ and are modelled by the emulator). The result is rounded once more to
the output format, as a library's final cast does.

Binary nodes use the format's native numpy dtype: numpy's float64/float32 additions are IEEE
operations, and float16 (numpy) and bfloat16 (ml_dtypes) additions are computed in float32 and
rounded once more, which returns the correctly rounded sum because 24 >= 2p + 2 for p = 11 and 8
(double rounding is innocuous then; Figueroa, "When is double rounding innocuous?", SIGNUM 1995).
Fused nodes use exact integer arithmetic.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from .formats import Format, round_to_format, sum_round_to_odd
from .tree import C_LEAF, SumTree


def _levels(tree: SumTree):
    """Group internal nodes by height; return (node_index, children_indices, height) lists.

    Leaves take indices 0..n-1, "C" takes index n, internal nodes follow in post-order.
    """
    n = tree.n
    index: dict[int, int] = {}
    nodes = []
    heights = []
    nxt = n + 1
    for nd in tree.nodes_postorder():
        kids, h = [], 0
        for c in nd:
            if isinstance(c, tuple):
                kids.append(index[id(c)])
                h = max(h, heights[index[id(c)] - n - 1] + 1)
            else:
                kids.append(n if c == C_LEAF else c)
                h = max(h, 1)
        index[id(nd)] = nxt
        nodes.append(kids)
        heights.append(h)
        nxt += 1
    return nodes, heights


def _exact_sum_round(cols: list, fmt: Format, fused_frac_bits: int | None = None) -> np.ndarray:
    """Exact sum of k float64 arrays, rounded once (RNE) to fmt. Slow; for fused nodes only.

    With ``fused_frac_bits`` = F, each term is first truncated toward zero at weight
    2^(e_max - F), e_max the largest exponent among the nonzero terms (the alignment of a
    matrix unit's fused dot-product-add, NUMERICS.md section 2, steps 4-5).
    """
    B = len(cols[0])
    out = np.empty(B, dtype=np.float64)
    for b in range(B):
        terms = [float(c[b]) for c in cols]
        if not all(np.isfinite(terms)):
            out[b] = float(np.sum(np.array(terms)))
            continue
        if fused_frac_bits is not None:
            nz = [abs(t) for t in terms if t != 0]
            if nz:
                emax = max(int(np.frexp(t)[1]) - 1 for t in nz)
                w = Fraction(2) ** (emax - fused_frac_bits)
                terms = [float(int(Fraction(t) / w) * w) for t in terms]
        s = sum((Fraction(t) for t in terms), Fraction(0))
        out[b] = _round_fraction(s, fmt)
    return out


def _round_fraction(s: Fraction, fmt: Format) -> float:
    if s == 0:
        return 0.0
    sign = -1.0 if s < 0 else 1.0
    a = abs(s)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    q = max(e - fmt.p + 1, fmt.emin - fmt.p + 1)
    scaled = a / (Fraction(2) ** q)
    r = round(scaled)  # Python rounds half to even
    val = float(Fraction(r) * Fraction(2) ** q) if r else 0.0
    if val > fmt.max_finite:
        return sign * np.inf
    return sign * val


def replay(
    tree: SumTree,
    X,
    acc: Format,
    out: Format | None = None,
    C=None,
    fused_frac_bits: int | None = None,
    node_formats=None,
) -> np.ndarray:
    """Evaluate ``tree`` on each row of X.

    Args:
        tree: the summation tree, n leaves (and "C" if ``C`` is given).
        X: (B, n) or (n,) float64 summands, exactly representable in ``acc`` (they are converted
            to it exactly; a value that is not representable raises ValueError).
        acc: accumulator format of every node.
        out: output format (default: acc); the root value is rounded to it with RNE.
        C: optional (B,) values of the accumulator leaf "C".
        fused_frac_bits: if given, fused k-term nodes (k > 2) align their terms to the largest
            exponent and truncate them at that many fraction bits before the exact sum.
        node_formats: optional sequence of Formats, one per internal node in post-order
            (``tree.nodes_postorder()``), for ops whose nodes round to different formats (e.g. a
            vectorised float32 body and a float64 scalar tail); overrides ``acc`` per node.

    Returns:
        (B,) float64 outputs (a scalar array for 1-D X).

    Raises:
        ValueError: shapes do not match the tree, or the tree has "C" and no C was given.
    """
    X = np.asarray(X, dtype=np.float64)
    one = X.ndim == 1
    if one:
        X = X[None, :]
    if X.ndim != 2 or X.shape[1] != tree.n:
        raise ValueError(f"replay inputs must have shape (B, {tree.n}), got {X.shape}")
    if tree.has_c and C is None:
        raise ValueError('the tree has the accumulator leaf "C" but no C values were given')
    B = X.shape[0]
    if node_formats is not None:
        return _replay_mixed(tree, X, acc, out, C, list(node_formats))
    dt = acc.numpy_dtype()
    if not np.array_equal(round_to_format(X, acc), X, equal_nan=True):
        raise ValueError(f"replay inputs are not all representable in the accumulator {acc.name}")
    nodes, heights = _levels(tree)
    total = tree.n + 1 + len(nodes)
    V = np.zeros((total, B), dtype=dt)
    V[: tree.n] = X.T.astype(dt)
    if C is not None:
        V[tree.n] = np.broadcast_to(np.asarray(C, dtype=np.float64), (B,)).astype(dt)
    if not nodes:  # a single leaf
        res = V[0].astype(np.float64)
    else:
        order = np.argsort(np.asarray(heights), kind="stable")
        hs = np.asarray(heights)[order]
        bounds = np.flatnonzero(np.diff(hs)) + 1
        with np.errstate(all="ignore"):
            for chunk in np.split(order, bounds):
                binary = [i for i in chunk if len(nodes[i]) == 2]
                if binary:
                    idx = np.asarray(binary)
                    kids = np.asarray([nodes[i] for i in binary])
                    V[idx + tree.n + 1] = V[kids[:, 0]] + V[kids[:, 1]]
                for i in chunk:
                    if len(nodes[i]) > 2:
                        cols = [V[k].astype(np.float64) for k in nodes[i]]
                        V[i + tree.n + 1] = _exact_sum_round(cols, acc, fused_frac_bits).astype(dt)
        res = V[-1].astype(np.float64)
    if out is not None and out != acc:
        res = round_to_format(res, out)
    return res[0] if one else res


def _add_round(x: np.ndarray, y: np.ndarray, fmt: Format) -> np.ndarray:
    """Correctly rounded (RNE) fmt value of the exact sum x + y of float64 arrays (fmt.p <= 51),
    via :func:`fpscope.formats.sum_round_to_odd`."""
    return round_to_format(sum_round_to_odd(x, y), fmt)


def replay_dot(tree: SumTree, A, B, acc: Format, out: Format | None = None, fma: bool = False) -> np.ndarray:
    """Evaluate ``tree`` over the products A[:, k] * B[:, k] (a dot product per row).

    Args:
        tree: summation tree over n leaves (no "C").
        A, B: (batch, n) float64 factors, exactly representable in a format of at most 26 bits
            of precision (fp32, tf32, fp16, bf16), so each product is exact in float64.
        acc: accumulator format (at most 51 bits when ``fma``).
        out: output format (default acc).
        fma: False: every product is rounded to ``acc``, then added as in :func:`replay`.
            True: a binary node with a leaf child computes fl(s + a*b) with one rounding (an FMA);
            a node of two leaves rounds the lower-index product first, then fuses the other (the
            first step of an FMA loop that starts from 0).

    Returns:
        (batch,) float64 outputs.

    Raises:
        ValueError: shapes differ, or ``fma`` with a fused k-term node or an fp64 accumulator.
    """
    A = np.atleast_2d(np.asarray(A, dtype=np.float64))
    B = np.atleast_2d(np.asarray(B, dtype=np.float64))
    if A.shape != B.shape or A.shape[1] != tree.n:
        raise ValueError(f"factors must both have shape (batch, {tree.n}); got {A.shape}, {B.shape}")
    prod = A * B
    if not fma:
        return replay(tree, round_to_format(prod, acc), acc, out)
    if acc.p > 51:
        raise ValueError("FMA replay needs an accumulator of at most 51 bits")
    nodes, heights = _levels(tree)
    if any(len(k) > 2 for k in nodes):
        raise ValueError("FMA replay supports binary trees only")
    n = tree.n
    Vnode = np.zeros((len(nodes), A.shape[0]), dtype=np.float64)
    with np.errstate(all="ignore"):
        for i in np.argsort(np.asarray(heights), kind="stable"):
            a, b = nodes[i]
            if a < n and b < n:  # two leaves: round the first product, fuse the second
                first, second = (a, b) if a < b else (b, a)
                Vnode[i] = _add_round(round_to_format(prod[:, first], acc), prod[:, second], acc)
            elif a < n or b < n:
                leaf, other = (a, b) if a < n else (b, a)
                Vnode[i] = _add_round(Vnode[other - n - 1], prod[:, leaf], acc)
            else:
                Vnode[i] = _add_round(Vnode[a - n - 1], Vnode[b - n - 1], acc)
    res = Vnode[-1] if nodes else round_to_format(prod[:, 0], acc)
    if out is not None and out != acc:
        res = round_to_format(res, out)
    return res


def _replay_mixed(tree: SumTree, X, acc: Format, out, C, node_formats: list) -> np.ndarray:
    """Binary nodes with a format per node; values kept in float64, each sum correctly rounded."""
    nodes, heights = _levels(tree)
    if len(node_formats) != len(nodes):
        raise ValueError(f"node_formats has {len(node_formats)} entries for {len(nodes)} nodes")
    if any(len(k) > 2 for k in nodes):
        raise ValueError("per-node formats are supported for binary trees only")
    if not np.array_equal(round_to_format(X, acc), X, equal_nan=True):
        raise ValueError(f"replay inputs are not all representable in {acc.name}")
    n = tree.n
    V = np.zeros((n + 1 + len(nodes), X.shape[0]), dtype=np.float64)
    V[:n] = X.T
    if C is not None:
        V[n] = C
    fmt_names = np.asarray([f.name for f in node_formats])
    by_name = {f.name: f for f in node_formats}
    order = np.argsort(np.asarray(heights), kind="stable")
    hs = np.asarray(heights)[order]
    with np.errstate(all="ignore"):
        for chunk in np.split(order, np.flatnonzero(np.diff(hs)) + 1):
            for name in np.unique(fmt_names[chunk]):
                idx = chunk[fmt_names[chunk] == name]
                kids = np.asarray([nodes[i] for i in idx])
                a, b = V[kids[:, 0]], V[kids[:, 1]]
                fmt = by_name[str(name)]
                V[idx + n + 1] = a + b if fmt.p >= 53 else _add_round(a, b, fmt)
    res = V[-1] if nodes else V[0]
    if out is not None:
        res = round_to_format(res, out)
    return res
