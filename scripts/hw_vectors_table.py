#!/usr/bin/env python
"""Print how each preset reproduces the recorded GPU outputs in shared/data/hw-vectors.

Usage: python scripts/hw_vectors_table.py [HW_VECTORS_DIR]   (default: the FPSCOPE_HW_VECTORS
environment variable, else ../shared/data/hw-vectors beside the repository; the data are the
public Khattak-Mikaitis recordings, see README "Recorded hardware vectors"). Runs all 5000
samples of every set through the reference engine.
"""

import sys
import time

from _hw_vectors import hw_root, missing

from fpscope.emulate import HW_SETS, run_hw_set
from fpscope.profile import PRESETS


def main(argv):
    root = hw_root(argv[1] if len(argv) > 1 else None)
    if not root.is_dir():
        print(missing(root), file=sys.stderr)
        return 2
    print(f"{'set':<22} {'preset':<22} {'matched/total':>14}  {'status':<12} {'time':>6}")
    for key, name in HW_SETS.items():
        t = time.time()
        matched, total, bad = run_hw_set(root, *key)
        gpu, folder, out = key
        label = f"{gpu}/{folder} d_{out}"
        print(f"{label:<22} {name:<22} {f'{matched}/{total}':>14}  {PRESETS[name].status:<12} "
              f"{time.time() - t:5.1f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
