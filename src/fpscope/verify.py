"""Replay a revealed tree against the live operation on random inputs, bit for bit.

Input distributions (values are drawn in float64 and rounded to the input format with
:func:`fpscope.formats.round_to_format`, never with a library cast):

* ``uniform``: U[0, 1) (all positive: errors accumulate);
* ``normal``: N(0, 1);
* ``wide``: random sign, significand U[1, 2), exponent uniform over a range that keeps every
  partial sum finite (about a third of the format's exponent range);
* ``cancel``: pairs x and -x (1 + 2^-12 * noise for one of them) in random positions plus
  small terms, so that most of the result comes from rounding errors.

Ops with products (dot, matvec, matmul, ...) are verified on random factor pairs of the same
distributions (:func:`random_factors`), so that how each product enters the sum (rounded or fused)
is part of the comparison.
"""

from __future__ import annotations

import numpy as np

from .formats import Format, round_to_format
from .replay import replay_arithmetic
from .targets.base import Target
from .tree import SumTree

DISTRIBUTIONS = ("uniform", "normal", "wide", "cancel")


def random_inputs(kind: str, shape: tuple, fmt: Format, rng) -> np.ndarray:
    """float64 array of ``shape`` whose values are exactly representable in ``fmt``.

    Raises:
        ValueError: unknown ``kind`` (see DISTRIBUTIONS).
    """
    n = shape[-1]
    if kind == "uniform":
        x = rng.random(shape)
    elif kind == "normal":
        x = rng.standard_normal(shape)
    elif kind == "wide":
        span = max(2, min(fmt.emax - int(np.ceil(np.log2(max(n, 2)))) - 2, 3 * fmt.emax // 4) // 2)
        e = rng.integers(-span, span + 1, size=shape)
        x = rng.choice([-1.0, 1.0], size=shape) * (1 + rng.random(shape)) * np.ldexp(1.0, e)
    elif kind == "cancel":
        base = rng.standard_normal(shape) * np.ldexp(1.0, rng.integers(0, 8, size=shape))
        x = base.copy()
        half = n // 2
        perm = np.argsort(rng.random(shape), axis=-1)
        a, b = perm[..., :half], perm[..., half : 2 * half]
        vals = np.take_along_axis(base, a, axis=-1)
        noise = 1 + np.ldexp(rng.standard_normal(vals.shape), -12)
        np.put_along_axis(x, b, -vals * noise, axis=-1)
    else:
        raise ValueError(f"unknown distribution {kind!r}; known: {', '.join(DISTRIBUTIONS)}")
    return round_to_format(x, fmt)


def random_factors(kind: str, shape: tuple, fmt: Format, rng) -> tuple[np.ndarray, np.ndarray]:
    """Factor arrays A and B of ``shape`` (float64, exactly representable in ``fmt``) whose
    products a_k * b_k follow ``kind``: both factors uniform or normal; ``wide``: exponents over
    half the span of :func:`random_inputs` each (the products' exponents add); ``cancel``: normal
    factors where half the positions repeat another position's b and the negated a (times 1 +
    2^-12 * noise), so most products cancel in pairs.

    Raises:
        ValueError: unknown ``kind``.
    """
    n = shape[-1]
    if kind in ("uniform", "normal"):
        return random_inputs(kind, shape, fmt, rng), random_inputs(kind, shape, fmt, rng)
    if kind == "wide":
        span = max(1, min(fmt.emax - int(np.ceil(np.log2(max(n, 2)))) - 2, 3 * fmt.emax // 4) // 4)
        def one():
            e = rng.integers(-span, span + 1, size=shape)
            return rng.choice([-1.0, 1.0], size=shape) * (1 + rng.random(shape)) * np.ldexp(1.0, e)
        return round_to_format(one(), fmt), round_to_format(one(), fmt)
    if kind == "cancel":
        A = rng.standard_normal(shape) * np.ldexp(1.0, rng.integers(0, 4, size=shape))
        B = rng.standard_normal(shape)
        half = n // 2
        perm = np.argsort(rng.random(shape), axis=-1)
        src, dst = perm[..., :half], perm[..., half : 2 * half]
        noise = 1 + np.ldexp(rng.standard_normal(src.shape), -12)
        np.put_along_axis(A, dst, -np.take_along_axis(A, src, axis=-1) * noise, axis=-1)
        np.put_along_axis(B, dst, np.take_along_axis(B, src, axis=-1), axis=-1)
        return round_to_format(A, fmt), round_to_format(B, fmt)
    raise ValueError(f"unknown distribution {kind!r}; known: {', '.join(DISTRIBUTIONS)}")


def same_bits(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Elementwise: the same value, or both NaN (float64 widenings of the op's outputs, where a
    NaN's payload is not compared), with the sign of zero compared."""
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    return (got.view(np.int64) == want.view(np.int64)) | (np.isnan(got) & np.isnan(want))


def live_and_replay(target: Target, tree: SumTree, arith, kind: str, samples: int, rng,
                    first_output_only: bool = False, positions=None) -> dict:
    """Random inputs of one distribution, the live op's outputs on them and the replay of
    ``tree`` under ``arith`` (:class:`fpscope.arithmetic.Arithmetic`).

    Plain sums: ``samples`` summand vectors (matrix ops: rows of A, B = ones, every output of one
    call). Ops with products (``arith.products`` given): ``samples`` factor pairs (matrix ops whose
    outputs share one tree: rows of A times columns of B, every output of one call; otherwise
    output (0, 0), one call per pair).

    Returns:
        ``{"got", "want", "terms"}``: (S,) live outputs, (S,) replayed outputs, (S, n) the terms
        (summands or exact products, float64) of each output; ``"inputs"``: (S, n) or a pair of
        (S, n) factor arrays, for witnesses.
    """
    fin = target.in_format
    n = target.n
    if positions is not None:
        return _class_outputs(target, tree, arith, kind, samples, rng, positions)
    # every output of one call where one call has enough outputs; else one call per input
    all_outputs = (target.is_matrix and not first_output_only
                   and target.max_rows * target.max_cols >= min(samples, 64))
    if arith.products is None:
        if all_outputs:
            R = max(1, min(target.max_rows, samples))
            C = max(1, min(target.max_cols, -(-samples // R)))
            X = random_inputs(kind, (R, n), fin, rng)
            got = np.asarray(target.evaluate_outer(X, np.ones((n, C))), dtype=np.float64)
            want = np.repeat(replay_arithmetic(tree, arith, X=X)[:, None], C, axis=1)
            X = np.repeat(X, C, axis=0)
            got, want = got.reshape(-1), want.reshape(-1)
        else:
            X = random_inputs(kind, (samples, n), fin, rng)
            want = replay_arithmetic(tree, arith, X=X)
            got = target.evaluate_each(X)
        return {"got": got, "want": want, "terms": X, "inputs": X}
    if all_outputs:
        R = max(1, min(target.max_rows, samples))
        C = max(1, min(target.max_cols, -(-samples // R)))
        P, Q = random_factors(kind, (R, n), fin, rng)[0], random_factors(kind, (C, n), fin, rng)[1]
        if kind == "cancel":  # pairs within each product vector: one factor set per output
            P, Qr = random_factors(kind, (R, n), fin, rng)
            Q = np.resize(Qr, (C, n)) if C != R else Qr
        got = np.asarray(target.evaluate_outer(P, Q.T), dtype=np.float64).reshape(-1)
        A, B = np.repeat(P, C, axis=0), np.tile(Q, (R, 1))
    else:
        A, B = random_factors(kind, (samples, n), fin, rng)
        got = np.asarray(target.evaluate_products(A, B), dtype=np.float64)
    want = replay_arithmetic(tree, arith, A=A, B=B)
    return {"got": got, "want": want, "terms": A * B, "inputs": (A, B)}


def _class_outputs(target, tree, arith, kind, samples, rng, positions) -> dict:
    """One call on the whole output grid; up to ``samples`` outputs of the class
    ``positions`` (boolean (M, N)), chosen at random, compared with the replay."""
    fin, n = target.in_format, target.n
    rr, cc = np.nonzero(positions)
    pick = rng.choice(len(rr), size=min(samples, len(rr)), replace=False)
    rr, cc = rr[pick], cc[pick]
    if arith.products is None:
        P = random_inputs(kind, (target.max_rows, n), fin, rng)
        Q = np.ones((n, target.max_cols))
    else:
        P, Qt = random_factors(kind, (max(target.max_rows, target.max_cols), n), fin, rng)
        P, Q = P[: target.max_rows], Qt[: target.max_cols].T
    got = np.asarray(target.evaluate_outer(P, Q), dtype=np.float64)[rr, cc]
    A, B = P[rr], Q[:, cc].T
    if arith.products is None:
        want = replay_arithmetic(tree, arith, X=A)
        return {"got": got, "want": want, "terms": A, "inputs": A}
    want = replay_arithmetic(tree, arith, A=A, B=B)
    return {"got": got, "want": want, "terms": A * B, "inputs": (A, B)}


def verify(
    target: Target,
    tree: SumTree,
    acc: Format | None = None,
    samples: int = 200,
    seed: int = 0,
    distributions=DISTRIBUTIONS,
    node_formats=None,
    first_output_only: bool = False,
    arithmetic=None,
    positions=None,
) -> dict:
    """Compare the replayed tree with the live op on ``samples`` inputs per distribution.

    The node arithmetic is ``arithmetic`` (:class:`fpscope.arithmetic.Arithmetic`: node
    formats, product entries, output format) or, without it, ``acc`` in every node (or
    ``node_formats``, one Format per internal node, post-order) with products not modelled (a
    plain sum; matrix ops then use B = ones). See :func:`live_and_replay` for the inputs.
    ``first_output_only``: for a matrix op whose outputs use different K-orders, compare output
    (0, 0) only (one call per input). ``positions`` (boolean (M, N)): compare the outputs of that
    class of a matrix op (:mod:`fpscope.reveal.classes`), ``samples`` of them per distribution.

    Returns:
        JSON-able dict: ``samples``, ``matched``, ``bit_exact`` (bool), ``by_distribution``
        ({name: {"samples", "matched"}}), ``accumulator`` (a format name or "mixed"),
        ``products`` (True when factor pairs were compared), ``first_mismatch`` (inputs as hex
        strings, expected and got) when something differs.
    """
    from .arithmetic import Arithmetic

    if arithmetic is None:
        names = [f.name for f in node_formats] if node_formats is not None else None
        base = acc or target.in_format
        arithmetic = Arithmetic(tuple(names or [base.name] * tree.n_nodes), None,
                                target.out_format.name)
    rng = np.random.default_rng(seed)
    uni = arithmetic.uniform_format
    report = {"samples": 0, "matched": 0, "by_distribution": {},
              "accumulator": uni or "mixed", "products": arithmetic.products is not None}
    first = None
    for kind in distributions:
        r = live_and_replay(target, tree, arithmetic, kind, samples, rng, first_output_only,
                            positions)
        same = same_bits(r["got"], r["want"])
        report["by_distribution"][kind] = {"samples": int(len(same)), "matched": int(same.sum())}
        report["samples"] += int(len(same))
        report["matched"] += int(same.sum())
        if first is None and not same.all():
            b = int(np.flatnonzero(~same)[0])
            first = {"distribution": kind, "expected": float(r["want"][b]).hex(),
                     "got": float(r["got"][b]).hex()}
            if isinstance(r["inputs"], tuple):
                first["a"] = [float(v).hex() for v in r["inputs"][0][b][:64]]
                first["b"] = [float(v).hex() for v in r["inputs"][1][b][:64]]
            else:
                first["inputs"] = [float(v).hex() for v in np.atleast_1d(r["inputs"][b])[:64]]
    report["bit_exact"] = report["matched"] == report["samples"]
    if first:
        report["first_mismatch"] = first
    return report


def compare_live(target: Target, tree: SumTree, arith, samples: int = 200, seed: int = 0,
                 first_output_only: bool = False, distributions=DISTRIBUTIONS,
                 positions=None) -> dict:
    """The live op against a baseline's replay (``tree`` under ``arith``) on the same generated
    inputs: how many outputs have the same bits, and the largest difference in units of
    u * sum|terms| (u = 2^-p the unit roundoff of the output format, the terms the summands or
    the exact products of that output). Between two evaluation orders or product entries of
    one sum the difference stays within a small multiple of that unit (Higham, "Accuracy and
    Stability of Numerical Algorithms", 2nd ed., section 4.2; fpscope NUMERICS.md section 4);
    a narrowed accumulator exceeds it by orders of magnitude.

    Returns:
        JSON-able dict: ``samples``, ``matched`` (same bits, or both NaN), ``max_units`` (float;
        ``inf`` where one side is Inf / NaN and the other is not, or where the terms are all
        zero and the outputs differ), ``by_distribution`` ({name: {"samples", "matched",
        "max_units"}}), ``unit`` (text), ``first_mismatch`` (distribution, inputs as hex,
        baseline and live outputs) when something differs.
    """
    rng = np.random.default_rng(seed)
    u = np.ldexp(1.0, -target.out_format.p)
    rep = {"samples": 0, "matched": 0, "max_units": 0.0, "by_distribution": {},
           "unit": f"u * sum|terms|, u = 2^-{target.out_format.p} ({target.out_format.name})"}
    for kind in distributions:
        r = live_and_replay(target, tree, arith, kind, samples, rng, first_output_only,
                            positions)
        got, want = r["got"], r["want"]
        same = same_bits(got, want)
        scale = u * np.abs(r["terms"]).sum(axis=1)
        with np.errstate(all="ignore"):
            units = np.abs(got - want) / scale
        units = np.where(same, 0.0, units)
        units = np.where(~same & ~(np.isfinite(units)), np.inf, units)
        worst = float(units.max()) if len(units) else 0.0
        rep["by_distribution"][kind] = {"samples": int(len(same)), "matched": int(same.sum()),
                                        "max_units": worst}
        rep["samples"] += int(len(same))
        rep["matched"] += int(same.sum())
        rep["max_units"] = max(rep["max_units"], worst)
        if "first_mismatch" not in rep and not same.all():
            b = int(np.flatnonzero(~same)[0])
            m = {"distribution": kind, "baseline": float(want[b]).hex(), "live": float(got[b]).hex(),
                 "units": float(units[b])}
            if isinstance(r["inputs"], tuple):
                m["a"] = [float(v).hex() for v in r["inputs"][0][b]]
                m["b"] = [float(v).hex() for v in r["inputs"][1][b]]
            else:
                m["inputs"] = [float(v).hex() for v in np.atleast_1d(r["inputs"][b])]
            rep["first_mismatch"] = m
    rep["bit_exact"] = rep["matched"] == rep["samples"]
    return rep


def merge_reports(reports: list[dict]) -> dict:
    """One report of several (per output class): counts added, first mismatch kept, the
    largest difference (compare_live) the largest of all."""
    out = dict(reports[0])
    out["by_distribution"] = {k: dict(v) for k, v in reports[0]["by_distribution"].items()}
    for r in reports[1:]:
        out["samples"] += r["samples"]
        out["matched"] += r["matched"]
        if "max_units" in r:
            out["max_units"] = max(out["max_units"], r["max_units"])
        for k, v in r["by_distribution"].items():
            d = out["by_distribution"].setdefault(k, {"samples": 0, "matched": 0})
            d["samples"] += v["samples"]
            d["matched"] += v["matched"]
            if "max_units" in v:
                d["max_units"] = max(d.get("max_units", 0.0), v["max_units"])
        if "first_mismatch" in r and "first_mismatch" not in out:
            out["first_mismatch"] = r["first_mismatch"]
    out["bit_exact"] = out["matched"] == out["samples"]
    if len(reports) > 1:
        out["classes"] = len(reports)
    return out
