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

from .formats import Format, get_format, round_to_format, sum_round_to_odd
from .tree import C_LEAF, SumTree


def _levels(tree: SumTree):
    """Group internal nodes by height; return (node_index, children_indices, height) lists.

    Leaves take indices 0..n-1, "C" takes index n, internal nodes follow in post-order.
    Computed once per tree (:meth:`SumTree.memo`): a reveal replays one tree many times.
    """
    return tree.memo("replay_levels", lambda: _compute_levels(tree))


def _height_chunks(tree: SumTree) -> list:
    """Post-order node indices grouped by height, lowest first (one array per height)."""
    def compute():
        _, heights = _levels(tree)
        order = np.argsort(np.asarray(heights, dtype=np.int64), kind="stable")
        hs = np.asarray(heights, dtype=np.int64)[order]
        return np.split(order, np.flatnonzero(np.diff(hs)) + 1) if len(order) else []

    return tree.memo("replay_height_chunks", compute)


def _binary_kids(tree: SumTree) -> np.ndarray | None:
    """(nodes, 2) int64 children of every node (numbered as :func:`_levels`), for trees
    whose nodes all have two children; None otherwise."""
    def compute():
        nodes, _ = _levels(tree)
        if not nodes or any(len(k) != 2 for k in nodes):
            return None
        return np.asarray(nodes, dtype=np.int64)

    return tree.memo("replay_binary_kids", compute)


def _compute_levels(tree: SumTree):
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
        with np.errstate(all="ignore"):
            for chunk in _height_chunks(tree):
                KA = _binary_kids(tree)
                binary = chunk if KA is not None else [i for i in chunk if len(nodes[i]) == 2]
                if len(binary):
                    idx = np.asarray(binary)
                    kids = KA[idx] if KA is not None else np.asarray([nodes[i] for i in binary])
                    V[idx + tree.n + 1] = V[kids[:, 0]] + V[kids[:, 1]]
                for i in (() if KA is not None else chunk):
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


def two_product(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(hi, lo) with hi = fl(a * b) and hi + lo = a * b exactly (Dekker's product with
    Veltkamp's split; factors above 2^995 are scaled by 2^-64 first so the split cannot
    overflow). Exact while the product is finite and lo does not underflow (|a * b| above about
    2^-969); lo is 0 where hi is not finite."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    big_a, big_b = np.abs(a) > 2.0**995, np.abs(b) > 2.0**995
    a_s = np.where(big_a, a * 2.0**-64, a)
    b_s = np.where(big_b, b * 2.0**-64, b)
    k = np.ldexp(1.0, 64 * (big_a.astype(np.int64) + big_b.astype(np.int64)))
    hs = a_s * b_s
    split = 134217729.0  # 2^27 + 1
    ca, cb = split * a_s, split * b_s
    ah = ca - (ca - a_s)
    bh = cb - (cb - b_s)
    al, bl = a_s - ah, b_s - bh
    ls = ((ah * bh - hs) + ah * bl + al * bh) + al * bl
    hi = a * b
    lo = np.where(np.isfinite(hi) & np.isfinite(ls), ls * k, 0.0)
    return hi, lo


def _two_sum(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    hi = x + y
    bp = hi - x
    return hi, (x - (hi - bp)) + (y - bp)


def replay_arithmetic(tree: SumTree, arith, X=None, A=None, B=None) -> np.ndarray:
    """Evaluate ``tree`` with the node arithmetic ``arith`` (:class:`fpscope.arithmetic.Arithmetic`).

    Args:
        tree: n leaves, no "C".
        arith: one format per internal node (post-order), the product entry of every leaf (or
            None for a plain sum) and the output format.
        X: (B, n) float64 summands, for ``arith.products is None``; exactly representable in
            every node format they enter.
        A, B: (B, n) float64 factors, for ``arith.products`` given. Leaf i's term is A[:, i] *
            B[:, i], entering as its product entry says (rounded to its node's format, fused with
            one rounding, exact, or rounded to another format). Factors of up to 26 significand
            bits have exact float64 products; float64 factors use an exact two-term product, and
            a fused float64 node is evaluated as Boldo and Melquiond's emulated FMA (RN(th +
            RO(tl + pl)); "Emulation of FMA and correctly rounded sums", IEEE TC 2008).

    Every binary node returns the correctly rounded (RNE) sum of its two children; fused k-term
    nodes (k > 2) are modelled only for plain sums with one format (exact sum, one rounding, as
    :func:`replay`). The root's value is rounded to the output format.

    Returns:
        (B,) float64 outputs.

    Raises:
        ValueError: shapes that do not fit, a tree with "C", products with a fused k-term node,
            or two fused float64 products in one node (no FMA adds two products).
    """
    if tree.has_c:
        raise ValueError('replay_arithmetic does not take the accumulator leaf "C"')
    fmts = arith.formats
    out = arith.out_format
    if arith.products is None:
        if X is None:
            raise ValueError("a plain sum needs summands X")
        uni = arith.uniform_format
        if uni is not None or not fmts:
            acc = fmts[0] if fmts else out
            return replay(tree, X, acc, out)
        return replay(tree, X, min(fmts, key=lambda f: f.p), out, node_formats=fmts)
    if A is None or B is None:
        raise ValueError("an op with products needs factors A and B")
    A = np.atleast_2d(np.asarray(A, dtype=np.float64))
    B = np.atleast_2d(np.asarray(B, dtype=np.float64))
    n = tree.n
    if A.shape != B.shape or A.shape[1] != n:
        raise ValueError(f"factors must both have shape (batch, {n}); got {A.shape}, {B.shape}")
    if len(arith.products) != n:
        raise ValueError(f"{len(arith.products)} product entries for {n} leaves")
    nodes, heights = _levels(tree)
    if len(fmts) != len(nodes):
        raise ValueError(f"{len(fmts)} node formats for {len(nodes)} nodes")
    if tree.max_fan_in() > 2:
        raise ValueError("product entries are modelled for binary trees only")
    with np.errstate(all="ignore"):
        hi, lo = two_product(A, B)
        wide = bool(np.any(lo != 0))
        terms = hi.T.copy()  # (n, batch)
        tlo = lo.T.copy() if wide else None
        if not nodes:  # one leaf: its product, rounded to the output
            v = round_to_format(sum_round_to_odd(hi[:, 0], lo[:, 0]), out)
            return v
        parent = _leaf_parents(tree, nodes)
        for i, e in enumerate(arith.products):
            f = fmts[parent[i]]
            if e in ("exact", "fused"):
                continue
            target = f if e in ("rounded", None) else get_format(e.split(":", 1)[1])
            if target.p >= 53:  # hi is already fl64(a * b)
                if tlo is not None:
                    tlo[i] = 0.0
                continue
            terms[i] = round_to_format(sum_round_to_odd(terms[i], tlo[i]) if tlo is not None
                                       else terms[i], target)
            if tlo is not None:
                tlo[i] = 0.0
        V = np.zeros((n + 1 + len(nodes), A.shape[0]), dtype=np.float64)
        V[:n] = terms
        L = None
        if tlo is not None and np.any(tlo != 0):
            L = np.zeros_like(V)
            L[:n] = tlo
        names = np.asarray([f.name for f in fmts])
        by_name = {f.name: f for f in fmts}
        for chunk in _height_chunks(tree):
            for name in np.unique(names[chunk]):
                idx = chunk[names[chunk] == name]
                kids = _binary_kids(tree)[idx]
                a, b = V[kids[:, 0]], V[kids[:, 1]]
                fmt = by_name[str(name)]
                if L is not None:
                    la, lb = L[kids[:, 0]], L[kids[:, 1]]
                    both = (la != 0) & (lb != 0)
                    if both.any():
                        raise ValueError("two fused float64 products meet in one node (no FMA "
                                         "adds two products)")
                    extra = la + lb
                    if fmt.p >= 53:
                        th, tl = _two_sum(a, b)
                        V[idx + n + 1] = th + sum_round_to_odd(tl, extra)
                    elif np.any(extra != 0):
                        raise ValueError(f"a fused float64 product in a {fmt.name} node is not "
                                         f"modelled")
                    else:
                        V[idx + n + 1] = _add_round(a, b, fmt)
                else:
                    V[idx + n + 1] = a + b if fmt.p >= 53 else _add_round(a, b, fmt)
        return round_to_format(V[-1], out)


def _leaf_parents(tree: SumTree, nodes: list) -> np.ndarray:
    """For every leaf 0..n-1, the post-order index of the node it is a child of (``nodes`` as
    :func:`_levels` numbers them: leaves 0..n-1, "C" n, nodes from n + 1)."""
    def compute():
        parent = np.zeros(tree.n, dtype=np.int64)
        for k, kids in enumerate(nodes):
            for c in kids:
                if c < tree.n:
                    parent[c] = k
        return parent

    return tree.memo("replay_leaf_parents", compute)


def _replay_mixed(tree: SumTree, X, acc: Format, out, C, node_formats: list) -> np.ndarray:
    """Binary nodes with a format per node; values kept in float64, each sum correctly rounded."""
    nodes, heights = _levels(tree)
    if len(node_formats) != len(nodes):
        raise ValueError(f"node_formats has {len(node_formats)} entries for {len(nodes)} nodes")
    if tree.max_fan_in() > 2:
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
    with np.errstate(all="ignore"):
        for chunk in _height_chunks(tree):
            for name in np.unique(fmt_names[chunk]):
                idx = chunk[fmt_names[chunk] == name]
                kids = _binary_kids(tree)[idx]
                a, b = V[kids[:, 0]], V[kids[:, 1]]
                fmt = by_name[str(name)]
                V[idx + n + 1] = a + b if fmt.p >= 53 else _add_round(a, b, fmt)
    res = V[-1] if nodes else V[0]
    if out is not None:
        res = round_to_format(res, out)
    return res
