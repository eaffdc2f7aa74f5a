"""Benchmark: the numba kernel's first-use compile time and its cache-load time, per preset.

Run: python benchmarks/bench_compile.py [--preset hopper-fp16 ...] [--in-process]

For each preset, two child processes share one empty numba cache folder (``NUMBA_CACHE_DIR``,
a temporary folder, so the user's cache is neither read nor changed): the first times the first
``fpscope.emulate.matmul(A, B, profile=preset, engine="numba")`` of a 64 x 64 x 64 GEMM
(numba compiles every kernel function it calls and writes the cache), the second times the same
call again (numba loads the compiled code from the cache). Presets of different loops
(``kernel._loop``) compile different functions; the first preset also compiles what they all
share (operand checks, the rounding of formats). The table prints one row per preset, all
measured in this one run; a later preset that shares functions with an earlier one still
compiles them, since each preset has a cache folder of its own.

Each child then times a 1024 x 1024 x 1024 GEMM of the preset (the second of two: the first
also compiles the operand checks that only large operands take): numba's
parallel code runs several times slower in the process that compiled it (numba issue #10617),
so fpscope compiles the GEMM loops in a child process of its own and the first process, too,
loads them from the cache (``fpscope._numba_setup.load_compiled``). ``--in-process`` turns
that off (``FPSCOPE_COMPILE_APART=0``) to show the difference: the first child's GEMM is then
the slow one.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

DEFAULT_PRESETS = ["hopper-fp16", "ampere-fp16", "blackwell-tcgen05-mxfp8-e4m3", "cdna2-fp16",
                   "cdna3-fp16", "rtx-blackwell-nvfp4", "cdna1-fp16"]


def child(name: str) -> dict:
    import numpy as np

    from fpscope.emulate import kernel, matmul
    from fpscope.formats import round_to_format
    from fpscope.profile import PRESETS, resolve_format

    p = PRESETS[name]
    rng = np.random.default_rng(0)
    fa, fb = (resolve_format(f) for f in p.operand_formats)
    A = round_to_format(rng.standard_normal((64, 64)), fa)
    B = round_to_format(rng.standard_normal((64, 64)), fb)
    sc = {}
    if p.scale_format is not None:
        nb = 64 // p.scale_block_size
        sc = {"scale_a": np.ones((64, nb)), "scale_b": np.ones((nb, 64))}
    t0 = time.perf_counter()
    matmul(A, B, profile=p, engine="numba", **sc)
    first = time.perf_counter() - t0
    n = 1024
    A = round_to_format(rng.standard_normal((n, n)), fa)
    B = round_to_format(rng.standard_normal((n, n)), fb)
    if sc:
        sc = {"scale_a": np.ones((n, n // p.scale_block_size)),
              "scale_b": np.ones((n // p.scale_block_size, n))}
    matmul(A, B, profile=p, engine="numba", **sc)  # (compiles the checks of large operands)
    t0 = time.perf_counter()
    matmul(A, B, profile=p, engine="numba", **sc)
    return {"preset": name, "loop": kernel._loop(p), "s": first,
            "gemm_s": time.perf_counter() - t0}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", action="append", help="preset name (repeatable); default: "
                    + ", ".join(DEFAULT_PRESETS))
    ap.add_argument("--in-process", action="store_true",
                    help="compile in the process that runs the GEMM (FPSCOPE_COMPILE_APART=0)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child)))
        return 0
    print(f"{'preset':30s} {'loop':>10s} {'compile s':>10s} {'cache load s':>13s} "
          f"{'GEMM 1024 s, compiling process':>31s} {'later process':>14s}")
    for name in args.preset or DEFAULT_PRESETS:
        with tempfile.TemporaryDirectory(prefix="fpscope-numba-cache-") as cache:
            env = dict(os.environ, NUMBA_CACHE_DIR=cache)
            if args.in_process:
                env["FPSCOPE_COMPILE_APART"] = "0"
            rows = []
            for _ in range(2):  # compile (empty cache), then load
                out = subprocess.run([sys.executable, __file__, "--child", name],
                                     capture_output=True, text=True, check=False, env=env)
                if out.returncode:
                    print(f"{name:30s} failed: {out.stderr.strip().splitlines()[-1]}")
                    break
                rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
            if len(rows) == 2:
                print(f"{name:30s} {rows[0]['loop']:>10s} {rows[0]['s']:10.1f} "
                      f"{rows[1]['s']:13.2f} {rows[0]['gemm_s']:31.3f} "
                      f"{rows[1]['gemm_s']:14.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
