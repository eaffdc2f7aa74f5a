"""Benchmark: where the numba GEMM kernel's time goes, one kernel function at a time.

Run: python benchmarks/bench_kernel_parts.py [--n 2048] [--preset hopper-fp16]

Each step of ``fpscope.emulate._kernel_jit.gemm_kernel`` is called alone, single-threaded, as
often as one n x n x n GEMM calls it (one call per row of A, instruction block and 1024-column
tile) and in the kernel's order (each block of B serves the 64 rows of a tile before the next
block, so it stays in cache as it does in the GEMM), on the preset's real operand codes (random
normal values rounded to its input format): the block's exponent range, the block set-up
(e_max, scale, c cut), the cut products, and the rounding of the block result. Prints seconds
and shares, the sum, and the whole single-thread kernel beside it (the difference is the loop,
slicing and call overhead; the GEMM itself runs on every core).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--preset", default="hopper-fp16")
    args = ap.parse_args(argv)

    from fpscope.emulate import kernel

    kernel._prefer_wide_vectors()  # compile the parts as the kernel is compiled
    from numba import njit

    from fpscope.emulate import _kernel_jit as J
    from fpscope.formats import round_to_format
    from fpscope.profile import PRESETS, resolve_format

    p = PRESETS[args.preset]
    why = kernel.unsupported(p)
    if why:
        print(f"{args.preset}: the numba kernel does not run it ({why})")
        return 2
    n, L, W = args.n, p.block_size, 1024
    fa, fb = resolve_format(p.in_format), resolve_format(p.b_format or p.in_format)
    rng = np.random.default_rng(0)
    A = round_to_format(rng.standard_normal((n, n)), fa)
    B = round_to_format(rng.standard_normal((n, n)), fb)
    coding = kernel._exponent_coding(fa, fb)
    AV, EA, _ = kernel._codes(A, fa, p.flush_inputs, coding, np.float32, True)
    BV, EB, _ = kernel._codes(B, fb, p.flush_inputs, coding, np.float32, False)
    w = min(W, n)
    mx, mn = np.empty(w, EA.dtype), np.empty(w, EA.dtype)
    sc, acc = np.ones(w, np.float32), np.zeros(w + 1, np.int32)
    # the running values' dtype the kernel takes for this preset (kernel._run32): float32
    # running values keep the cut c and the weight exponent as int32
    rt = np.float32 if kernel._run32(p, np.float32) else np.float64
    bt = np.int32 if rt == np.float32 else np.float64
    ct, run = np.zeros(w, bt), np.empty(w, rt)
    lsb = np.zeros(w, bt) if bt == np.int32 else np.ones(w)  # weight 2^0 (the set-up refills it)
    src = round_to_format(rng.standard_normal(w), resolve_format(p.out_format)).astype(rt)
    fout, fstep = resolve_format(p.out_format), resolve_format(p.step_rounding[0])
    sp, sq, smf, smode, stiny, sbig = kernel._rounding_args(fstep, p.step_rounding[1],
                                                            p.flush_outputs)
    align = {"truncate": 0, "floor": 1, "nearest": 2}[p.alignment]
    ez = kernel._NONE if p.e_zero is None else p.e_zero
    zb = coding[2]
    need_min = not p.e_zero_inert
    c_emin, F = fout.emin, p.frac_bits
    calls = n * (n // L) * max(1, n // W)  # rows x blocks x column tiles

    # arrays go in as arguments: numba treats arrays captured from the enclosing scope as
    # read-only constants
    MI = 64  # rows of a tile (kernel.matmul's default): a block of B serves them in turn

    @njit
    def t_exp(reps, EA, EB, mx, mn):
        for r in range(reps):
            J._exponent_range(EA, EB, r % MI, (r // MI * L) % n, L, 0, w, mx, mn,
                               need_min)

    @njit
    def t_prep(reps, src, mx, mn, lsb, sc, ct, acc):
        for _ in range(reps):
            J._prepare_block(src, mx, mn, lsb, sc, ct, acc, w, 0.0, c_emin, ez, F, 126,
                             align, zb, need_min)

    @njit
    def t_cut(reps, AV, BV, sc, acc):
        for r in range(reps):
            J._cut_products(AV, BV, r % MI, (r // MI * L) % n, L, 0, w, sc, acc, align)

    @njit
    def t_round(reps, run, acc, ct, lsb):
        for _ in range(reps):
            J._finish(run, acc, ct, lsb, w, sp, sq, smf, smode, stiny, sbig)

    parts = [("exponent range", t_exp, (EA, EB, mx, mn)),
             ("block set-up", t_prep, (src, mx, mn, lsb, sc, ct, acc)),
             ("cut products", t_cut, (AV, BV, sc, acc)),
             ("block rounding", t_round, (run, acc, ct, lsb))]
    secs = []
    for _, fn, arrays in parts:
        fn(2, *arrays)  # compile
        t0 = time.perf_counter()
        fn(calls, *arrays)
        secs.append(time.perf_counter() - t0)
    total = sum(secs)
    whole = np.zeros((n, n))
    kernel.matmul(A[:64, :L], B[:L, :64], whole[:64, :64], p, threads=1)  # compile
    t0 = time.perf_counter()
    kernel.matmul(A, B, whole, p, threads=1)
    whole_s = time.perf_counter() - t0
    print(f"{args.preset}, n = {n}: {calls} calls of each step (single thread, "
          f"{np.dtype(rt).name} running values)")
    print(f"{'step':16s} {'seconds':>8s} {'share':>6s}")
    for (name, _, _), s in zip(parts, secs):
        print(f"{name:16s} {s:8.3f} {s / total:6.0%}")
    print(f"{'sum':16s} {total:8.3f}")
    print(f"{'whole kernel':16s} {whole_s:8.3f}  (kernel.matmul, one thread)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
