"""Benchmark: where the numba GEMM kernel's time goes, one kernel function at a time.

Run: python benchmarks/bench_kernel_parts.py [--n 2048] [--preset hopper-fp16]

Each step of ``fpscope.emulate._kernel_jit.gemm_kernel`` is called alone, single-threaded, as
often as one n x n x n GEMM calls it (one call per row of A, instruction block and 1024-column
tile) and in the kernel's order (each block of B serves the 64 rows of a tile before the next
block, so it stays in cache as it does in the GEMM), on the preset's real operand codes (random
normal values rounded to its input format): the block's exponent range; the block set-up
(e_max, scale, c cut) together with the cut of the block's first 4, 8 or 16 products, one pass
where the kernel takes it (``_kernel_jit._fused_first``: float32 running values, truncation),
else the set-up alone; the other cut products; and the rounding of the block result. Prints
how many blocks the fused pass handed to the general set-up, seconds and shares, the sum, and
the whole single-thread kernel beside it (the difference is the loop, slicing and call
overhead; the GEMM itself runs on every core). Where the kernel rounds the block in the fused
pass as well (``kernel._rounds_in_pass``: the pass takes all of the block, the step rounds RZ
or RNE), one more row times that pass, the one the kernel runs instead of the staged three.
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

    from numba import njit, prange

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
    mx, mn = np.empty(w, EA.dtype), np.empty(w, EA.dtype)  # the exponent step fills them
    sc, acc = np.ones(w, np.float32), np.zeros(w + 1, np.int32)
    # the running values' dtype the kernel takes for this preset (kernel._run32): float32
    # running values keep the cut c and the weight exponent as int32
    rt = np.float32 if kernel._run32(p, np.float32) else np.float64
    bt = np.int32 if rt == np.float32 else np.float64
    # a block result as ordinary data give it (sums of about 2^(F+2), weight 2^-(F-2)); zeros
    # would send every block through the rounding's slow path
    acc[:w] = rng.integers(-2 ** (p.frac_bits + 2), 2 ** (p.frac_bits + 2), w)
    ct = rng.integers(-2 ** p.frac_bits, 2 ** p.frac_bits, w).astype(bt)
    lsb = (np.full(w, 2 - p.frac_bits, bt) if bt == np.int32
           else np.full(w, 2.0 ** (2 - p.frac_bits)))
    src = round_to_format(rng.standard_normal(w), resolve_format(p.out_format)).astype(rt)
    fout, fstep = resolve_format(p.out_format), resolve_format(p.step_rounding[0])
    sp, sq, smf, smode, stiny, sbig = kernel._rounding_args(fstep, p.step_rounding[1],
                                                            p.flush_outputs)
    align = kernel._ALIGN[p.alignment]
    ez = kernel._NONE if p.e_zero is None else p.e_zero
    zb = coding[2]
    need_min = not p.e_zero_inert
    c_emin, F = fout.emin, p.frac_bits
    calls = n * (n // L) * max(1, n // W)  # rows x blocks x column tiles
    P = kernel._first_products(p, rt)
    fin = kernel._rounds_in_pass(p, rt)
    drop = 52 - (sp - 1)  # (as gemm_kernel passes them)
    mask = ~((np.int64(1) << drop) - 1)
    first = {4: J._fused_first4, 8: J._fused_first8, 16: J._fused_first16}.get(P)
    lo_min, lo_max = kernel._exact_weights(p, fstep)

    # arrays go in as arguments: numba treats arrays captured from the enclosing scope as
    # read-only constants
    MI = 64  # rows of a tile (kernel.matmul's default): a block of B serves them in turn

    @njit
    def t_exp(reps, EA, EB, mx, mn):
        for r in range(reps):
            J._exponent_range(EA, EB, r % MI, (r // MI * L) % n, L, 0, w, mx, mn,
                               need_min)

    # the kernel runs each tile in a prange body, whose own scratch arrays let LLVM vectorise
    # the fused pass without overlap checks (_kernel_jit._fused_first; in a plain function
    # the loop stays scalar): so this step runs as one tile of a prange too
    def fused(fin):
        @njit(parallel=True)
        def t_fused(reps, src, mx, mn, AV, BV):
            general = checked = 0  # blocks set up again, blocks rounded with the check
            for _ in prange(1):
                lsb, sc = np.empty(w, np.int32), np.empty(w, np.float32)
                ct, acc = np.empty(w, np.int32), np.zeros(w + 2, np.int32)
                res = np.empty(w, np.float32)
                for r in range(reps):
                    first(src, mx, mn, AV, BV, r % MI, (r // MI * L) % n, 0, w, lsb, sc, ct,
                          acc, 0.0, c_emin, ez, F, 126, zb, need_min, fin, res, drop, mask)
                    fast = acc[w] >= -126 and acc[w + 1] <= 127 - F  # as gemm_kernel decides
                    general += not fast
                    checked += not (fast and acc[w] >= lo_min and acc[w + 1] <= lo_max)
            return general, checked
        return t_fused

    t_fused = fused(())

    @njit
    def t_prep(reps, src, mx, mn):
        lsb, sc, ct = np.empty(w, bt), np.empty(w, np.float32), np.empty(w, bt)
        acc = np.zeros(w + 2, np.int32)
        for _ in range(reps):
            J._prepare_block(src, mx, mn, lsb, sc, ct, acc, w, 0.0, c_emin, ez, F, 126,
                             align, zb, need_min)
        return 0

    @njit
    def t_cut(reps, AV, BV, sc):
        acc = np.zeros(w + 2, np.int32)
        for r in range(reps):
            J._cut_products(AV, BV, r % MI, (r // MI * L) % n + P, L - P, 0, w, sc, acc, align)
        return 0

    @njit
    def t_round(reps, acc, ct, lsb, exact):
        run = np.empty(w, rt)
        for _ in range(reps):
            J._finish(run, acc, ct, lsb, w, sp, sq, smf, smode, stiny, sbig, exact)
        return 0

    parts = [("exponent range", t_exp, (EA, EB, mx, mn))]
    if P:  # the set-up and the first P products in one pass (float32 values, truncation)
        parts.append((f"set-up + {P} products", t_fused, (src, mx, mn, AV, BV)))
    else:
        parts.append(("block set-up", t_prep, (src, mx, mn)))
    if L > P:
        parts.append((f"{L - P} cut products", t_cut, (AV, BV, sc)))
    secs, general, checked = [], 0, calls
    for name, fn, arrays in parts:
        fn(2, *arrays)  # compile
        t0 = time.perf_counter()
        out = fn(calls, *arrays)
        secs.append(time.perf_counter() - t0)
        if fn is t_fused:
            general, checked = out
    # the rounding as the kernel runs it for most blocks: unchecked where the fused pass
    # found every weight in range (kernel._exact_weights)
    exact = bool(P) and 2 * checked < calls
    parts.append((f"block rounding{'' if exact else ' (checked)'}", t_round,
                  (acc, ct, lsb, exact)))
    t_round(2, acc, ct, lsb, exact)
    t0 = time.perf_counter()
    t_round(calls, acc, ct, lsb, exact)
    secs.append(time.perf_counter() - t0)
    total = sum(secs)
    one_pass = None
    if fin:  # the kernel's pass: the set-up, the products and the rounding
        t_one = fused(fin)
        t_one(2, src, mx, mn, AV, BV)
        t0 = time.perf_counter()
        t_one(calls, src, mx, mn, AV, BV)
        one_pass = time.perf_counter() - t0
    whole = np.zeros((n, n))
    kernel.matmul(A[:64, :L], B[:L, :64], whole[:64, :64], p, threads=1)  # compile
    t0 = time.perf_counter()
    kernel.matmul(A, B, whole, p, threads=1)
    whole_s = time.perf_counter() - t0
    print(f"{args.preset}, n = {n}: {calls} calls of each step (single thread, "
          f"{np.dtype(rt).name} running values)")
    if P:
        print(f"blocks of the fused pass set up again: {general}, rounded with the check: "
              f"{checked}, of {calls}")
    print(f"{'step':22s} {'seconds':>8s} {'share':>6s}")
    for (name, _, _), s in zip(parts, secs):
        print(f"{name:22s} {s:8.3f} {s / total:6.0%}")
    print(f"{'sum':22s} {total:8.3f}")
    if one_pass is not None:
        print(f"{'set-up .. rounding':22s} {one_pass:8.3f}  (the kernel's one pass; with the "
              f"exponent range {secs[0] + one_pass:.3f}, {(secs[0] + one_pass) / total:.0%} of "
              f"the sum)")
    print(f"{'whole kernel':22s} {whole_s:8.3f}  (kernel.matmul, one thread)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
