"""Benchmark: an emulated GEMM on a Dask LocalCluster against the same GEMM run locally.

Run: python benchmarks/bench_emulate_dask.py [--n 4096] [--preset hopper-fp16]
     [--workers 2] [--threads-per-worker 1] [--bands B] [--engine numba]

One run, side by side: ``fpscope.emulate.matmul(A, B, profile=preset)`` on n x n random normal
operands of the preset's input format, (1) locally with as many numba threads as the cluster has
worker threads, (2) on a LocalCluster (``--workers`` processes x ``--threads-per-worker``
threads; ``client=``, one numba thread per band). Both are warmed first (numba's cached kernels
loaded in this process and in every worker). The bits of the two D are compared, and the
overhead is (cluster time / local time): on a machine whose cores the local run already uses,
expect parity at best, not a speed-up.

Then a paper estimate of emulated time per token of a 7B-parameter model on N such workers:
the GEMMs of one token are 2 FLOP per parameter (one multiply-add per weight), 2 x 7e9 FLOP;
time = 1.4e10 / (N x measured per-worker-thread FLOP/s), assuming perfect scaling over bands.
Row bands split tokens (rows of the activations): the estimate holds for a batch of tokens
(prefill, teacher-forced evaluation) of at least 2 N rows, not for one-token decoding (M = 1).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

PARAMS_7B = 7e9
FLOP_PER_TOKEN = 2 * PARAMS_7B  # one multiply-add per weight per token


def _operands(preset: str, n: int):
    from fpscope.formats import round_to_format
    from fpscope.profile import PRESETS, resolve_format

    p = PRESETS[preset]
    rng = np.random.default_rng(0)
    fa, fb = (resolve_format(f) for f in p.operand_formats)
    return (round_to_format(rng.standard_normal((n, n)), fa),
            round_to_format(rng.standard_normal((n, n)), fb))


def _warm(preset: str, engine: str) -> bool:
    """Load (or compile) the kernels a GEMM of ``preset`` runs, in this process."""
    from fpscope.emulate import matmul

    A, B = _operands(preset, 256)
    matmul(A, B, profile=preset, engine=engine, threads=1)
    return True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=4096, help="M = N = K (default 4096)")
    ap.add_argument("--preset", default="hopper-fp16")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--threads-per-worker", type=int, default=1)
    ap.add_argument("--bands", type=int, help="row bands (default: 2 x worker threads)")
    ap.add_argument("--engine", default="numba", choices=["numba", "numpy"])
    args = ap.parse_args()

    from distributed import Client, LocalCluster

    from fpscope.emulate import matmul

    n = args.n
    A, B = _operands(args.preset, n)
    flop = 2.0 * n ** 3
    slots = args.workers * args.threads_per_worker
    _warm(args.preset, args.engine)
    t = time.perf_counter()
    D_local = matmul(A, B, profile=args.preset, engine=args.engine, threads=slots)
    t_local = time.perf_counter() - t

    with LocalCluster(n_workers=args.workers, threads_per_worker=args.threads_per_worker,
                      processes=True, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        client.run(_warm, args.preset, args.engine)
        t = time.perf_counter()
        D_dask = matmul(A, B, profile=args.preset, engine=args.engine, client=client,
                        bands=args.bands)
        t_dask = time.perf_counter() - t
    same = np.array_equal(D_local.view(np.uint32), D_dask.view(np.uint32))
    bands = args.bands or 2 * slots

    print(f"emulated GEMM {n}^3, {args.preset}, engine {args.engine} "
          f"({flop / 1e9:.1f} GFLOP)")
    print(f"{'run':44s} {'seconds':>9s} {'GFLOP/s':>9s}")
    print(f"{f'local, {slots} numba threads':44s} {t_local:9.2f} {flop / t_local / 1e9:9.3f}")
    label = (f"LocalCluster {args.workers} x {args.threads_per_worker} thread, "
             f"{bands} bands")
    print(f"{label:44s} {t_dask:9.2f} {flop / t_dask / 1e9:9.3f}")
    print(f"overhead (cluster / local): {t_dask / t_local:.3f}; bits identical: {same}")
    per_slot = flop / t_dask / slots  # FLOP/s of one worker thread, transfers included
    print(f"\npaper estimate, 7B parameters: {FLOP_PER_TOKEN:.2e} FLOP per token (2 x params), "
          f"at {per_slot / 1e9:.3f} GFLOP/s per worker thread (measured above, transfers "
          f"included), perfect scaling, a batch of >= 2N tokens:")
    for workers in (1, 8, 64):
        s = FLOP_PER_TOKEN / (workers * per_slot)
        print(f"  N = {workers:3d} single-thread workers: {s:10.1f} s per token "
              f"({s / 60:8.2f} min)")
    if not same:
        raise SystemExit("the cluster's D differs from the local D")


if __name__ == "__main__":
    main()
