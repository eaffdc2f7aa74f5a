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

    Reductions are compared on summand vectors; matrix ops (``target.is_matrix``) on random
    A and B blocks through ``evaluate_outer``, under two product models (rounded products, and an
    FMA chain) — the first that matches everything is reported, else the better one.
    ``node_formats`` (one Format per internal node, post-order) replays a mixed-precision tree.
    ``first_output_only``: for a matrix op whose outputs use different K-orders, compare output
    (0, 0) only (summand vectors times ones, one call each).

    Returns:
        JSON-able dict: ``samples``, ``matched``, ``bit_exact`` (bool), ``by_distribution``
        ({name: {"samples", "matched"}}), ``model`` ("sum", "products" or "fma"),
        ``first_mismatch`` (inputs as hex strings, expected and got) when something differs.
    """
    rng = np.random.default_rng(seed)
    fin, fout = target.in_format, target.out_format
    report = {"samples": 0, "matched": 0, "by_distribution": {}, "model": "sum",
              "accumulator": "mixed" if node_formats is not None else acc.name}
    first = None
    for kind in distributions:
        if target.is_matrix and not first_output_only:
            got_want, model = _matrix_case(target, tree, acc, kind, samples, rng)
            report["model"] = model
        else:
            X = random_inputs(kind, (samples, target.n), fin, rng)
            want = replay(tree, X, acc, fout, node_formats=node_formats)
            got = target.evaluate_each(X)
            got_want = (got, want, X)
        got, want, X = got_want
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
    return report


def _matrix_case(target: Target, tree: SumTree, acc: Format, kind: str, samples: int, rng):
    """(got, want, inputs) for ``samples`` outputs of a matrix op; model chosen per call."""
    R = max(1, min(target.max_rows, samples))
    C = max(1, min(target.max_cols, -(-samples // R)))
    n, fin = target.n, target.in_format
    P = random_inputs(kind, (R, n), fin, rng)
    Q = random_inputs("normal" if kind == "cancel" else kind, (C, n), fin, rng)
    got = np.asarray(target.evaluate_outer(P, Q.T), dtype=np.float64).reshape(-1)
    A = np.repeat(P, C, axis=0)
    B = np.tile(Q, (R, 1))
    best = None
    for model, fma in (("products", False), ("fma", True)):
        try:
            want = replay_dot(tree, A, B, acc, target.out_format, fma=fma)
        except ValueError:
            continue
        score = int(((got == want) | (np.isnan(got) & np.isnan(want))).sum())
        if best is None or score > best[0]:
            best = (score, want, model)
        if score == len(got):
            break
    return (got, best[1], A * B), best[2]
