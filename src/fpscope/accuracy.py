"""Accuracy of an operation against the exact sum: max and mean error in ulps of its output format.

The exact reference is computed without any rounding. Every finite binary float is ``m * 2^e``
with an integer significand ``|m| < 2^53`` (``numpy.frexp``: ``x = f * 2^k`` with ``0.5 <= |f| <
1``, so ``m = f * 2^53`` and ``e = k - 53``, both exact). A sum of such values is

    sum_i m_i * 2^e_i  =  (sum_i m_i * 2^(e_i - e_min)) * 2^e_min,

an integer times a power of two; a product ``a * b`` is ``(m_a * m_b) * 2^(e_a + e_b)``, so a dot
product is exact in the same way. The integer is formed without overflow by a superaccumulator:
significands are cut into 18-bit parts, each part is shifted into an int64 bin of 8 exponents
(numpy, vectorised over all samples), and the bins are joined in Python's arbitrary-precision
integers. No float operation touches the reference; it equals
``sum(fractions.Fraction(x) for x in xs)`` (the tests check this on random and extreme inputs).

The error of one output ``y`` is ``|y - S| / ulp(S)`` where ``S`` is the exact result and
``ulp(S)`` the spacing of the output format at ``|S|`` (``2^(max(floor(log2|S|), emin) - p + 1)``;
the smallest subnormal for ``S = 0``), the usual definition of an error in ulps (Muller et al.,
*Handbook of Floating-Point Arithmetic*, 2nd ed., section 2.6). A correctly rounded result has an
error of at most 0.5 ulp. The division is exact (``fractions.Fraction``) and then rounded to a
float. Cancellation-heavy inputs have a small ``|S|`` and so errors of many ulps: that is the
forward error of the op on ill-conditioned sums, reported per distribution so it is visible.

Inputs are drawn by :func:`fpscope.verify.random_inputs` (``uniform``, ``normal``, ``wide``
exponent range, ``cancel``: cancellation-heavy), ``samples`` per distribution, from a fixed seed
(:data:`ACCURACY_SEED`), so records of the same op are comparable.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from .formats import Format
from .verify import DISTRIBUTIONS, random_inputs

__all__ = ["ACCURACY_SEED", "DEFAULT_SAMPLES", "REFERENCE", "accuracy_text", "exact_dot",
           "exact_dots", "exact_sum", "exact_sums", "measure_accuracy", "record_accuracy",
           "ulp_error"]

#: seed of the generated inputs (fixed, so that records of the same op compare)
ACCURACY_SEED = 20240501
#: inputs per distribution (4 distributions: 256 inputs in all)
DEFAULT_SAMPLES = 64
#: how the reference is computed, as stored in records
REFERENCE = ("exact: integer significands scaled to the smallest exponent and added in Python "
             "integers (no rounding); error = |y - S| / ulp of the output format at |S|")


_PART = 18  # significands are cut into 3 parts of 18 bits (53 = 18 + 18 + 17)
_BIN = 8  # exponent bins of 8 bits in the integer accumulator
_CHUNK = 1 << 13  # columns per accumulation pass (bounds every int64 bin sum, below)


def _decompose(X) -> tuple[np.ndarray, list[np.ndarray], np.ndarray]:
    """Sign, three 18-bit significand parts and exponent of every value of X (exact):
    ``x = sign * (p0 + p1 * 2^18 + p2 * 2^36) * 2^e``."""
    X = np.asarray(X, dtype=np.float64)
    if not np.all(np.isfinite(X)):
        raise ValueError("the exact sum needs finite inputs (got Inf or NaN)")
    f, k = np.frexp(X)
    m = np.ldexp(f, 53).astype(np.int64)  # |f| < 1: |m| < 2^53, exact
    a, mask = np.abs(m), (1 << _PART) - 1
    parts = [a & mask, (a >> _PART) & mask, a >> (2 * _PART)]
    return np.sign(m), parts, k.astype(np.int64) - 53


def _accumulate(V: np.ndarray, Ex: np.ndarray) -> list[tuple[int, int]]:
    """Exact row sums of ``V * 2^Ex`` (int64 arrays of shape (R, T), ``|V| < 2^36``) as
    ``(N, E)`` pairs: a superaccumulator of int64 bins, 8 exponents wide. A term lands in bin
    ``(Ex - e0) // 8`` as ``V << ((Ex - e0) % 8)``, below 2^43 in magnitude; a pass adds at most
    2^13 terms to a bin (< 2^56: no overflow); bins and passes are then joined in Python
    integers."""
    R = V.shape[0]
    if V.shape[1] == 0:
        return [(0, 0)] * R
    e0 = int(Ex.min())
    totals = [0] * R
    for c in range(0, V.shape[1], _CHUNK):
        v, rel = V[:, c:c + _CHUNK], Ex[:, c:c + _CHUNK] - e0
        bins = rel >> 3
        acc = np.zeros((R, int(bins.max()) + 1), dtype=np.int64)
        rows = np.broadcast_to(np.arange(R)[:, None], v.shape)
        np.add.at(acc, (rows, bins), v << (rel & (_BIN - 1)))
        for r in range(R):
            t = totals[r]
            for b in np.flatnonzero(acc[r]).tolist():
                t += int(acc[r, b]) << (_BIN * b)
            totals[r] = t
    return [(t, e0) for t in totals]


def exact_sums(X) -> list[tuple[int, int]]:
    """Exact sum of each row of ``X``, as for :func:`exact_sum`.

    Args:
        X: (R, n) array-like of finite floats (widened to float64 exactly).

    Returns:
        R pairs ``(N, E)``: row r sums to ``N * 2**E`` exactly.

    Raises:
        ValueError: an input is Inf or NaN, or X is not 2-D.
    """
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"exact_sums needs a 2-D array, got shape {X.shape}")
    sign, parts, e = _decompose(X)
    V = np.concatenate([sign * p for p in parts], axis=1)
    Ex = np.concatenate([e + _PART * j for j in range(3)], axis=1)
    return _accumulate(V, Ex)


def exact_dots(A, B) -> list[tuple[int, int]]:
    """Exact dot product of each row of ``A`` with the same row of ``B``, as for
    :func:`exact_dot`.

    Args:
        A, B: (R, n) array-likes of finite floats.

    Returns:
        R pairs ``(N, E)``: ``sum_k A[r, k] * B[r, k] = N * 2**E`` exactly.

    Raises:
        ValueError: different shapes, not 2-D, or an input is Inf or NaN.
    """
    A, B = np.asarray(A, dtype=np.float64), np.asarray(B, dtype=np.float64)
    if A.shape != B.shape or A.ndim != 2:
        raise ValueError(f"exact_dots: shapes differ or are not 2-D ({A.shape} and {B.shape})")
    sa, pa, ea = _decompose(A)
    sb, pb, eb = _decompose(B)
    s, e = sa * sb, ea + eb
    V = np.concatenate([s * (pa[i] * pb[j]) for i in range(3) for j in range(3)], axis=1)
    Ex = np.concatenate([e + _PART * (i + j) for i in range(3) for j in range(3)], axis=1)
    return _accumulate(V, Ex)


def exact_sum(x) -> tuple[int, int]:
    """The exact sum of the finite float values ``x`` as ``(N, E)``, meaning ``N * 2**E``.

    Args:
        x: 1-D array-like of floats (any numpy float dtype; widened to float64 exactly).

    Returns:
        (N, E): Python ints; the sum equals ``N * 2**E`` exactly (``N = 0`` for a zero sum).

    Raises:
        ValueError: an input is Inf or NaN.
    """
    return exact_sums(np.asarray(x, dtype=np.float64).reshape(1, -1))[0]


def exact_dot(a, b) -> tuple[int, int]:
    """The exact dot product ``sum_k a[k] * b[k]`` as ``(N, E)``, meaning ``N * 2**E``.

    Args:
        a, b: 1-D array-likes of finite floats of the same length.

    Raises:
        ValueError: different lengths, or an input is Inf or NaN.
    """
    a, b = np.asarray(a, dtype=np.float64).ravel(), np.asarray(b, dtype=np.float64).ravel()
    if a.shape != b.shape:
        raise ValueError(f"exact_dot: lengths differ ({a.size} and {b.size})")
    return exact_dots(a[None, :], b[None, :])[0]


def ulp_error(y: float, exact: tuple[int, int], fmt: Format) -> float:
    """``|y - S| / ulp(S)`` in ulps of ``fmt``, where ``S = N * 2**E`` is ``exact``.

    Args:
        y: the op's output (a float64 holding the output format's value exactly).
        exact: ``(N, E)`` from :func:`exact_sum` or :func:`exact_dot`.
        fmt: the output format (its precision ``p`` and ``emin`` define the ulp).

    Returns:
        The error in ulps (0.0 when ``y == S``); ``math.inf`` when ``y`` is Inf or NaN or the
        error exceeds the float range.
    """
    y = float(y)
    if not math.isfinite(y):
        return math.inf
    N, E = exact
    ny, dy = y.as_integer_ratio()  # dy is a power of two
    ey = 1 - dy.bit_length()
    lo = min(ey, E)
    D = abs((ny << (ey - lo)) - (N << (E - lo)))
    if D == 0:
        return 0.0
    top = abs(N).bit_length() - 1 + E if N else fmt.emin
    u = max(top, fmt.emin) - fmt.p + 1  # ulp(S) = 2^u
    k = lo - u  # error = D * 2^k ulps
    try:
        return float(Fraction(D << k) if k >= 0 else Fraction(D, 1 << -k))
    except OverflowError:
        return math.inf


def _stats(errs: list[float]) -> dict:
    finite = [v for v in errs if math.isfinite(v)]
    return {"samples": len(errs),
            "max_ulps": max(finite) if finite else None,
            "mean_ulps": sum(finite) / len(finite) if finite else None,
            "nonfinite": len(errs) - len(finite)}


def _diagonal_outputs(target, X, Y) -> list[float]:
    """Output (r, r) of ``evaluate_outer(P, Q)`` with P = rows of X and Q = rows of Y (as
    columns): one dot product X[b] . Y[b] per sample, min(max_rows, max_cols) per call."""
    step = max(1, min(target.max_rows, target.max_cols))
    out = []
    for b in range(0, len(X), step):
        P, Q = X[b:b + step], Y[b:b + step]
        D = np.asarray(target.evaluate_outer(P, Q.T), dtype=np.float64)
        out.extend(float(D[r, r]) for r in range(len(P)))
    return out


def measure_accuracy(target, samples: int = DEFAULT_SAMPLES, seed: int = ACCURACY_SEED,
                     distributions=DISTRIBUTIONS) -> dict:
    """Max and mean error in ulps of ``target`` against the exact result on generated inputs.

    Reductions: ``samples`` summand vectors of n values per distribution, evaluated with
    ``target.evaluate``, against :func:`exact_sum`. Matrix ops (``target.is_matrix``): one dot
    product per input, a random row of A times a random column of B drawn from the same
    distribution (B = ones for ``cancel``, so that the products cancel), read from the diagonal
    outputs (r, r) of ``evaluate_outer`` (min(M, N) inputs per call), against :func:`exact_dot`
    (this includes the op's product rounding).

    Args:
        target: a :class:`fpscope.targets.base.Target` (n leaves, ``in_format``,
            ``out_format``).
        samples: inputs per distribution (>= 1); the total is ``samples * len(distributions)``.
        seed: seed of the inputs (default :data:`ACCURACY_SEED`).
        distributions: names from :data:`fpscope.verify.DISTRIBUTIONS`.

    Returns:
        JSON-able dict: ``max_ulps``, ``mean_ulps`` (floats; None when no output was finite), ``samples`` (total), ``per_distribution``, ``nonfinite`` (outputs
        that were Inf or NaN: an infinite error, left out of max and mean), ``by_distribution``
        ({name: {"samples", "max_ulps", "mean_ulps", "nonfinite"}}), ``output_format``,
        ``unit``, ``inputs`` (what was measured), ``reference`` (how), ``seed``.

    Raises:
        ValueError: ``samples`` < 1 or an unknown distribution.
        fpscope.targets.base.TargetError: the op failed.
    """
    if samples < 1:
        raise ValueError(f"samples must be at least 1, got {samples}")
    rng = np.random.default_rng(seed)
    fin, fout, n = target.in_format, target.out_format, target.n
    by, every = {}, []
    for kind in distributions:
        X = random_inputs(kind, (samples, n), fin, rng)
        if target.is_matrix and target.has_products:
            Y = np.ones_like(X) if kind == "cancel" else random_inputs(kind, (samples, n), fin, rng)
            got = _diagonal_outputs(target, X, Y)
            ref = exact_dots(X, Y)
        else:
            got = np.asarray(target.evaluate(X), dtype=np.float64).tolist()
            ref = exact_sums(X)
        errs = [ulp_error(y, s, fout) for y, s in zip(got, ref)]
        by[kind] = _stats(errs)
        every.extend(errs)
    total = _stats(every)
    what = ("dot products (diagonal outputs): a row of A times a column of B"
            if target.is_matrix and target.has_products else f"sums of {n} summands")
    return {"max_ulps": total["max_ulps"], "mean_ulps": total["mean_ulps"],
            "samples": total["samples"], "per_distribution": samples,
            "nonfinite": total["nonfinite"], "by_distribution": by,
            "output_format": fout.name, "unit": f"ulps of {fout.name} at the exact result",
            "inputs": f"{what}, {fin.name} inputs", "reference": REFERENCE, "seed": seed}


def accuracy_text(acc: dict) -> str:
    """One line for the text output, e.g. ``accuracy vs exact: max 3.2 ulps, mean 0.41 ulps
    (fp32, 256 inputs; cancel: max 1.2e+04)``."""
    if acc.get("skipped"):
        return f"accuracy: not measured ({acc['skipped']})"
    worst = max(acc["by_distribution"].items(),
                key=lambda kv: -1 if kv[1]["max_ulps"] is None else kv[1]["max_ulps"])
    text = (f"accuracy vs the exact result: max {_fmt(acc['max_ulps'])} ulps, mean "
            f"{_fmt(acc['mean_ulps'])} ulps ({acc['output_format']}, {acc['samples']} inputs; "
            f"worst: {worst[0]})")
    if acc.get("nonfinite"):
        text += f"; {acc['nonfinite']} outputs Inf or NaN"
    return text


def _fmt(v) -> str:
    return "-" if v is None else f"{v:.3g}"


#: at most this many summands per distribution in a record's measurement (keeps it cheap)
RECORD_VALUES = 1 << 18


def record_accuracy(target, samples: int = DEFAULT_SAMPLES) -> dict:
    """:func:`measure_accuracy` for a record, kept cheap: ``samples`` inputs per distribution,
    but no more than :data:`RECORD_VALUES` summands (``max(4, RECORD_VALUES // n)`` inputs for
    a large n; the record says how many). A failure of the op on the generated inputs (or an
    input the op cannot take) gives ``{"skipped": reason}`` instead of an exception, so that the
    record of a revealed tree is still written."""
    from .targets.base import TargetError

    samples = max(1, min(samples, max(4, RECORD_VALUES // max(target.n, 1))))
    try:
        return measure_accuracy(target, samples=samples)
    except (TargetError, ValueError) as exc:
        lines = str(exc).strip().splitlines()
        return {"skipped": lines[0] if lines else type(exc).__name__}
