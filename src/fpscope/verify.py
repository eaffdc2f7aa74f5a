"""Replay a revealed tree against the live operation on random inputs, bit for bit.

Input distributions (values are drawn in float64 and rounded to the input format with
:func:`fpscope.formats.round_to_format`, never with a library cast):

* ``uniform``: U[0, 1) (all positive: errors accumulate);
* ``normal``: N(0, 1);
* ``wide``: random sign, significand U[1, 2), exponent uniform over a range that keeps every
  partial sum finite (about a third of the format's exponent range);
* ``cancel``: pairs x and -x (1 + 2^-12 * noise for one of them) in random positions plus
  small terms, so that most of the result comes from rounding errors.
"""

from __future__ import annotations

import numpy as np

from .formats import Format, round_to_format
from .replay import replay, replay_dot
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


def verify(
    target: Target,
    tree: SumTree,
    acc: Format,
    samples: int = 200,
    seed: int = 0,
    distributions=DISTRIBUTIONS,
    node_formats=None,
    first_output_only: bool = False,
) -> dict:
    """Compare the replayed tree with the live op on ``samples`` inputs per distribution.

    Reductions are compared on summand vectors. Matrix ops (``target.is_matrix``) are compared on
    every output of ``evaluate_outer`` with random rows of A as the summands and B = ones (so the
    products are exact and only the order and the accumulator matter); how the op rounds
    products of random A and B is reported separately under "products" (not part of
    ``bit_exact``).
    ``node_formats`` (one Format per internal node, post-order) replays a mixed-precision tree.
    ``first_output_only``: for a matrix op whose outputs use different K-orders, compare output
    (0, 0) only (summand vectors times ones, one call each).

    Returns:
        JSON-able dict: ``samples``, ``matched``, ``bit_exact`` (bool), ``by_distribution``
        ({name: {"samples", "matched"}}), ``products`` (matrix ops: see :func:`product_rounding`),
        ``first_mismatch`` (inputs as hex strings, expected and got) when something differs.
    """
    rng = np.random.default_rng(seed)
    fin, fout = target.in_format, target.out_format
    report = {"samples": 0, "matched": 0, "by_distribution": {},
              "accumulator": "mixed" if node_formats is not None else acc.name}
    first = None
    all_outputs = target.is_matrix and not first_output_only
    for kind in distributions:
        if all_outputs:  # every output of one call: rows of A as summands, B = ones
            R = max(1, min(target.max_rows, samples))
            C = max(1, min(target.max_cols, -(-samples // R)))
            X = random_inputs(kind, (R, target.n), fin, rng)
            got = np.asarray(target.evaluate_outer(X, np.ones((target.n, C))), dtype=np.float64)
            want = np.repeat(replay(tree, X, acc, fout, node_formats=node_formats)[:, None], C, axis=1)
            got, want, X = got.reshape(-1), want.reshape(-1), np.repeat(X, C, axis=0)
        else:
            X = random_inputs(kind, (samples, target.n), fin, rng)
            want = replay(tree, X, acc, fout, node_formats=node_formats)
            got = target.evaluate_each(X)
        same = (got == want) | (np.isnan(got) & np.isnan(want))
        report["by_distribution"][kind] = {"samples": int(len(same)), "matched": int(same.sum())}
        report["samples"] += int(len(same))
        report["matched"] += int(same.sum())
        if first is None and not same.all():
            b = int(np.flatnonzero(~same)[0])
            first = {
                "distribution": kind,
                "expected": float(want[b]).hex(),
                "got": float(got[b]).hex(),
                "inputs": [float(v).hex() for v in np.atleast_1d(X[b])[:64]],
            }
    report["bit_exact"] = report["matched"] == report["samples"]
    if first:
        report["first_mismatch"] = first
    if all_outputs and node_formats is None:
        report["products"] = product_rounding(target, tree, acc, samples, rng)
    return report


def product_rounding(target: Target, tree: SumTree, acc: Format, samples: int, rng) -> dict:
    """Which product model reproduces a matrix op on random A and B: "rounded" (each product
    rounded to the accumulator, then added in tree order), "fma" (an FMA chain, see
    :func:`fpscope.replay.replay_dot`), or None when neither matches every output (the kernel
    mixes them, or rounds differently; issue 4's probes characterise it).

    Returns:
        {"model": str or None, "samples": int, "matched": {model: count}, "untested": [models
        that cannot be replayed here, e.g. "fma" with an fp64 accumulator]}.
    """
    R = max(1, min(target.max_rows, samples))
    C = max(1, min(target.max_cols, -(-samples // R)))
    n, fin = target.n, target.in_format
    P = random_inputs("normal", (R, n), fin, rng)
    Q = random_inputs("normal", (C, n), fin, rng)
    got = np.asarray(target.evaluate_outer(P, Q.T), dtype=np.float64).reshape(-1)
    A, B = np.repeat(P, C, axis=0), np.tile(Q, (R, 1))
    matched, model, untested = {}, None, []
    for name, fma in (("rounded", False), ("fma", True)):
        try:
            want = replay_dot(tree, A, B, acc, target.out_format, fma=fma)
        except ValueError:  # e.g. FMA replay of an fp64 accumulator
            untested.append(name)
            continue
        matched[name] = int(((got == want) | (np.isnan(got) & np.isnan(want))).sum())
        if matched[name] == len(got) and model is None:
            model = name
    return {"model": model, "samples": int(len(got)), "matched": matched, "untested": untested}
