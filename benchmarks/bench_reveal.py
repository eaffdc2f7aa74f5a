"""Benchmark: time to reveal real numpy trees, beside a re-implementation of the published FPRev.

Run: python benchmarks/bench_reveal.py [--repeats 3] [--quick] [--rows N]

Prints one table: median seconds of fpscope's reveal (tree + consistency checks, without the
replay check), probes and calls per leaf, the published algorithm's median seconds on the same
op in the same run (recursive, pivot = lowest index, one op call per probe, no checks; written
from the paper's description, FPRev, Xie et al., USENIX ATC 2025), and the ratio. Targets from
issue 2: np.sum fp32 n=16384 <= 0.35 s; numpy matmul fp32 K-order n=1024 < 1 s.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

from fpscope.reveal import reveal
from fpscope.targets import make_target


def published_fprev(f, n: int, M: float = 2.0**127, u: float = 1.0):
    """The published recursive FPRev: lowest-index pivot, one call of f per probe."""
    sys.setrecursionlimit(max(10000, 4 * n))
    base = np.full(n, u, dtype=np.float32)
    calls = [0]

    def lca(i, j):
        x = base.copy()
        x[i], x[j] = M, -M
        calls[0] += 1
        return n - int(round(float(f(x)) / u))

    def solve(leaves):
        if len(leaves) == 1:
            return leaves[0], 1
        p = leaves[0]
        groups: dict[int, list] = {}
        for j in leaves[1:]:
            groups.setdefault(lca(p, j), []).append(j)
        node, size = p, 1
        for L in sorted(groups):
            sub, sub_size = solve(groups[L])
            if sub_size == len(groups[L]):
                node = (node, sub)
            else:
                node = tuple(sub) + (node,) if isinstance(sub, tuple) else (sub, node)
            size = L
        return node, size

    solve(list(range(n)))
    return calls[0]


def _gemm_c00(n: int):
    """C[0, 0] of an n x n x n float32 GEMM whose row 0 of A is the probe (B = ones): what the
    published FPRev probes for a matrix multiplication, one GEMM per probe."""
    A = np.zeros((n, n), dtype=np.float32)
    B = np.ones((n, n), dtype=np.float32)

    def f(x):
        A[0] = x
        return (A @ B)[0, 0]

    return f


def _dot_ones(n: int):
    """np.dot(x, ones): the published probe of a dot product."""
    y = np.ones(n, dtype=np.float32)
    return lambda x: np.dot(x, y)


def _vecmat_0(n: int):
    """Output 0 of x @ A with A = ones (n x n): the published probe of a vector-matrix product."""
    A = np.ones((n, n), dtype=np.float32)
    return lambda x: (x @ A)[0]


def _median_time(fn, repeats: int):
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def rows_report(n: int) -> int:
    """Rows of n floats that one reveal of np.sum sums (every call's batch counted), the time
    np.sum takes per such row in 256-row batches (the reveal's batch at n = 16384), and their
    product beside the reveal's time."""
    t = make_target("numpy.sum", n=n)
    rows = [0]
    evaluate = t.evaluate

    def counting(X):
        rows[0] += len(X)
        return evaluate(X)

    t.evaluate = counting
    res = reveal(t, replay_samples=0)
    t.close()
    X = np.ones((256, n), dtype=np.float32)
    per_row, _ = _median_time(lambda: [np.sum(X, axis=1) for _ in range(50)], 3)
    per_row /= 50 * 256
    print(f"np.sum fp32 n = {n}: {rows[0]} probe rows in {res.stats.calls} calls; np.sum takes "
          f"{per_row * 1e6:.2f} us per row, {rows[0] * per_row:.3f} s for all of them; the "
          f"reveal took {res.stats.seconds:.3f} s")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="smaller sizes (a smoke run)")
    ap.add_argument("--rows", type=int, metavar="N", help="instead of the table: probe rows "
                    "that revealing np.sum fp32 of N leaves evaluates, and np.sum's time per row")
    args = ap.parse_args(argv)
    if args.rows:
        return rows_report(args.rows)
    q = args.quick
    cases = [
        ("np.sum fp32", "numpy.sum", {"n": 1024 if q else 8192}, lambda x: np.sum(x)),
        ("np.sum fp32", "numpy.sum", {"n": 2048 if q else 16384}, lambda x: np.sum(x)),
        ("np.dot fp32", "numpy.dot", {"n": 1024 if q else 8192}, _dot_ones(1024 if q else 8192)),
        ("x @ A fp32", "numpy.vecmat", {"n": 256 if q else 2048}, _vecmat_0(256 if q else 2048)),
        ("matmul K-order fp32", "numpy.matmul", {"n": 128 if q else 512}, _gemm_c00(128 if q else 512)),
        ("matmul K-order fp32", "numpy.matmul", {"n": 256 if q else 1024}, None),
    ]
    rows = []
    for label, name, kw, direct in cases:
        def run():
            t = make_target(name, **kw)
            try:
                return reveal(t, replay_samples=0)
            finally:
                t.close()

        secs, res = _median_time(run, args.repeats)
        n = res.tree.n
        base_secs = base_calls = None
        if direct is not None:
            base_secs, base_calls = _median_time(lambda: published_fprev(direct, n), args.repeats)
        rows.append((label, n, secs, res.stats.probes / n, res.stats.calls / n, base_secs, base_calls))

    head = f"{'case':22s} {'n':>6s} {'fpscope s':>10s} {'probes/leaf':>12s} {'calls/leaf':>11s} " \
           f"{'published s':>12s} {'calls/leaf':>11s} {'speed-up':>9s}"
    print(head)
    print("-" * len(head))
    for label, n, secs, ppl, cpl, bs, bc in rows:
        pub = f"{bs:12.3f} {bc / n:11.2f} {bs / secs:8.2f}x" if bs else f"{'-':>12s} {'-':>11s} {'-':>9s}"
        print(f"{label:22s} {n:6d} {secs:10.3f} {ppl:12.2f} {cpl:11.3f} {pub}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
