"""Benchmark: whole-GEMM emulation of matrix units against np.matmul float32, side by side.

Run: python benchmarks/bench_emulate.py [--n 4096] [--repeats 1] [--engine numba]
     [--preset hopper-fp16 ...]
 For each preset, one child process builds A and B (n x n, random normal values rounded to the
preset's input format; tf32: fp32 values), times ``np.matmul`` on float32 copies (best of 3) and
then ``fpscope.emulate.matmul(A, B, profile=preset)`` (the public API: operand checks, exponent
extraction and the GEMM; a 512 x 512 warm-up call first loads every numba function it runs
from the cache, or compiles it), and reports its peak resident memory (the whole process: operands
included). A block-scaled preset takes random scales 2^-2 .. 2^2. Issue 3's targets at n = 4096:
ratio at most 12 for hopper-fp16, peak memory under 2 GB. The table prints one row per preset,
all measured in this one run.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import numpy as np

DEFAULT_PRESETS = ["hopper-fp16", "hopper-bf16", "hopper-tf32", "hopper-e4m3", "ada-e4m3",
                   "ampere-fp16", "blackwell-tcgen05-mxfp8-e4m3"]


def _operands(name: str, n: int):
    """(profile, (A, B), scales): random normal operands rounded to the preset's formats; for
    a block-scaled preset, scales 2^-2 .. 2^2 ({"scale_a": (n, n / s), "scale_b": (n / s, n)}),
    else {}."""
    from fpscope.formats import round_to_format
    from fpscope.profile import PRESETS, resolve_format

    p = PRESETS[name]
    rng = np.random.default_rng(0)
    if p.operand_conversion:  # tf32: fp32 containers, reduced by the emulator
        return p, (rng.standard_normal((n, n), dtype=np.float32),
                   rng.standard_normal((n, n), dtype=np.float32)), {}
    fa, fb = (resolve_format(f) for f in p.operand_formats)
    ops = (round_to_format(rng.standard_normal((n, n)), fa),
           round_to_format(rng.standard_normal((n, n)), fb))
    if p.scale_format is None:
        return p, ops, {}
    nb = n // p.scale_block_size
    return p, ops, {"scale_a": np.ldexp(1.0, rng.integers(-2, 3, (n, nb))),
                    "scale_b": np.ldexp(1.0, rng.integers(-2, 3, (nb, n)))}


def child(name: str, n: int, repeats: int, engine: str) -> dict:
    from fpscope.emulate import matmul

    p, (A, B), sc = _operands(name, n)
    t_np = _time_np_matmul(A.astype(np.float32), B.astype(np.float32))
    # a warm-up call loads (or compiles) every numba function the timed call runs: 512 x 512
    # operands, as from 2^18 values the operand check takes its numba pass too
    m = min(n, 512)
    small = {k: v[:m, :m // p.scale_block_size] if k == "scale_a" else
             v[:m // p.scale_block_size, :m] for k, v in sc.items()}
    matmul(A[:m, :m], B[:m, :m], profile=p, engine=engine, **small)
    t_emu = min(_timed(lambda: matmul(A, B, profile=p, engine=engine, **sc))
                for _ in range(repeats))
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
    return {"preset": name, "n": n, "engine": engine, "emulate_s": t_emu, "np_s": t_np,
            "peak_mb": peak_mb}


def _time_np_matmul(A32, B32) -> float:
    return min(_timed(lambda: A32 @ B32) for _ in range(3))


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--engine", default="numba", choices=["numba", "numpy", "auto"])
    ap.add_argument("--preset", action="append", help="preset name (repeatable); default: "
                    + ", ".join(DEFAULT_PRESETS))
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.n, args.repeats, args.engine)))
        return 0
    names = args.preset or DEFAULT_PRESETS
    print(f"{'preset':30s} {'n':>5s} {'engine':>6s} {'emulate s':>10s} {'np.matmul s':>12s} "
          f"{'ratio':>7s} {'peak MB':>8s}")
    for name in names:
        out = subprocess.run([sys.executable, __file__, "--child", name, "--n", str(args.n),
                              "--repeats", str(args.repeats), "--engine", args.engine],
                             capture_output=True, text=True, check=False)
        if out.returncode:
            print(f"{name:30s} failed: {out.stderr.strip().splitlines()[-1]}")
            continue
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{name:30s} {r['n']:5d} {r['engine']:>6s} {r['emulate_s']:10.2f} "
              f"{r['np_s']:12.3f} {r['emulate_s'] / r['np_s']:6.1f}x {r['peak_mb']:8.0f}",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
