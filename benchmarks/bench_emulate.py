"""Benchmark: the vectorised matrix-unit emulator against np.matmul float32 of the same shape.

Run: python benchmarks/bench_emulate.py [--n 256] [--repeats 3]

Prints one table: median seconds of ``fpscope.emulate.matmul`` (a GEMM as a chain of
instructions of the preset) and of ``np.matmul`` on float32 copies, measured side by side in
one run, and their ratio. Issue 3's target is a ratio of at most 12 at 4096^3 (numba kernel,
not built yet); this measures the numpy engine at a size it can do in seconds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

from fpscope.emulate import matmul
from fpscope.formats import round_to_format
from fpscope.profile import PRESETS, resolve_format


def _median(fn, repeats):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--preset", action="append", help="preset name (repeatable); default a few")
    args = ap.parse_args(argv)
    names = args.preset or ["hopper-fp16", "ampere-bf16", "hopper-e4m3"]
    n = args.n
    rng = np.random.default_rng(0)
    print(f"{'preset':16s} {'n':>6s} {'emulate s':>10s} {'np.matmul s':>12s} {'ratio':>8s}")
    for name in names:
        p = PRESETS[name]
        fin = resolve_format(p.in_format)
        A = round_to_format(rng.standard_normal((n, n)), fin)
        B = round_to_format(rng.standard_normal((n, n)), fin)
        A32, B32 = A.astype(np.float32), B.astype(np.float32)
        t_emu = _median(lambda: matmul(A, B, profile=p), args.repeats)
        t_np = _median(lambda: A32 @ B32, max(args.repeats, 5))
        print(f"{name:16s} {n:6d} {t_emu:10.3f} {t_np:12.4f} {t_emu / t_np:7.0f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
