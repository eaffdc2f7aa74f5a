#!/usr/bin/env python
"""Run every recorded GPU set in shared/data/hw-vectors through the numba GEMM kernel.

Usage: python scripts/kernel_hw_vectors.py [HW_VECTORS_DIR] [--samples N]
(default: the FPSCOPE_HW_VECTORS environment variable, else ../shared/data/hw-vectors beside
the repository; all 5000 samples of each set). Each sample runs as one diagonal entry of a small
GEMM (64 samples per call, ``engine="numba"``), and its output word is compared with the recorded
one bit for bit; the table prints matched/total per set. The committed output is
records/kernel-recorded-sets.txt. tests/test_emulate_kernel.py runs 1024 samples of the sets whose
kernel specialisations the rest of the test suite compiles anyway; this script covers every set
(each new specialisation costs tens of seconds of numba compilation on first use).
"""

import argparse
import sys
import time

import numpy as np
from _hw_vectors import hw_root, missing

from fpscope.emulate import HW_SETS, hw_c_values, load_hw_set, matmul
from fpscope.emulate.reference import output_bits
from fpscope.profile import PRESETS


def run_set(root, key, samples: int):
    """(matched, total) of one recorded set through the kernel."""
    gpu, folder, out = key
    p = PRESETS[HW_SETS[key]]
    a, b, c, d = load_hw_set(root, gpu, folder, out)
    cv = hw_c_values(gpu, folder, out, c)
    n = min(samples, len(a))
    pad = p.k - a.shape[1] if a.shape[1] % p.k else 0
    a = np.pad(a[:n], ((0, 0), (0, pad)))
    b = np.pad(b[:n], ((0, 0), (0, pad)))
    got = np.empty(n)
    for s in range(0, n, 64):
        D = matmul(a[s:s + 64], b[s:s + 64].T, np.diag(cv[s:s + 64]), profile=p,
                   engine="numba", dtype="float64")
        got[s:s + 64] = np.diag(D)
    bits = np.array([output_bits(float(v), p) for v in got])
    return int((bits == d[:n].astype(np.int64)).sum()), n


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", nargs="?", help="the hw-vectors folder")
    ap.add_argument("--samples", type=int, default=5000, help="samples per set (default 5000)")
    args = ap.parse_args(argv)
    root = hw_root(args.root)
    if not root.is_dir():
        print(missing(root), file=sys.stderr)
        return 2
    print(f"{'set':<22} {'preset':<22} {'matched/total':>14}  {'time':>6}")
    bad = 0
    for key in sorted(HW_SETS):
        t = time.time()
        matched, total = run_set(root, key, args.samples)
        bad += total - matched
        gpu, folder, out = key
        print(f"{gpu + '/' + folder + ' d_' + out:<22} {HW_SETS[key]:<22} "
              f"{f'{matched}/{total}':>14}  {time.time() - t:5.1f}s", flush=True)
    print("every sample bit for bit" if not bad else f"{bad} samples differ")
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
