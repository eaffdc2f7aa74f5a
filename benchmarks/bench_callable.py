"""Benchmark: reveal time of a user callable wrapping np.sum, batched vs one call per row.

Run: python benchmarks/bench_callable.py [--n 100000] [--dtype fp32] [--samples 32]

Reveals, in one run and one after the other, the built-in ``numpy.sum``, a batched user function
(``np.sum(rows, axis=1)`` over a (B, n) array of probe rows, declared with ``fpscope.batched``)
and the same sum as an unbatched user function (``np.sum(x)``, one Python call per probe row),
and prints one table: case, n, seconds of the whole reveal (tree, checks, accumulator and node
arithmetic probes, replay of ``--samples`` inputs per distribution), seconds of the tree and its
checks alone, op calls, and the ratio of the whole reveal to the built-in's. All three must find
the same tree (checked). The functions are this file's own, loaded as ``path/file.py:function``.
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import numpy as np

import fpscope


@fpscope.batched
def rows_sum(rows):
    """Batched: one np.sum per row of a (B, n) array."""
    return np.sum(rows, axis=1)


def one_sum(x):
    """Unbatched: np.sum of one 1-D array."""
    return np.sum(x)


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main() -> None:
    from fpscope.reveal import reveal
    from fpscope.targets import make_target

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--dtype", default="fp32")
    ap.add_argument("--samples", type=int, default=32, help="replay inputs per distribution")
    args = ap.parse_args()

    here = Path(__file__).resolve()
    cases = [("numpy.sum (built-in)", "numpy.sum"),
             ("callable, batched", f"{here}:rows_sum"),
             ("callable, unbatched", f"{here}:one_sum")]
    rows, trees = [], []
    for label, name in cases:
        with make_target(name, n=args.n, dtype=args.dtype) as t:
            t0 = time.perf_counter()
            res = reveal(t, replay_samples=args.samples)
            total = time.perf_counter() - t0
        assert res.replay is None or res.replay["bit_exact"], label
        trees.append(res.tree)
        rows.append((label, total, res.stats.seconds, res.stats.calls))
    same = all(tr == trees[0] for tr in trees)
    import numpy

    print(f"{_cpu()}, numpy {numpy.__version__}, dtype {args.dtype}, replay {args.samples} "
          f"inputs per distribution; same tree in all cases: {same}")
    print(f"{'case':<22} {'n':>8} {'seconds':>9} {'tree+checks s':>14} {'calls':>8} "
          f"{'ratio to built-in':>18}")
    base = rows[0][1]
    for label, total, tree_s, calls in rows:
        print(f"{label:<22} {args.n:>8} {total:>9.2f} {tree_s:>14.2f} {calls:>8} "
              f"{total / base:>18.2f}")
    if not same:
        raise SystemExit("the trees differ")


if __name__ == "__main__":
    main()
