#!/usr/bin/env python
"""Fit a profile to every recorded set in shared/data/hw-vectors and print one table.

Usage: python scripts/fit_table.py [--no-presets] [HW_VECTORS_DIR]   (default: the
FPSCOPE_HW_VECTORS environment variable, else ../shared/data/hw-vectors beside the repository;
the data are the public Khattak-Mikaitis recordings, see README "Recorded hardware vectors").
Issue 4's validation: ``fpscope fit`` returns a profile reproducing 100% of each set. With ``--no-presets`` the search starts from
the grid alone, as for a device no preset describes. The table lists the best profile's block
size, kept bits F, alignment, step (and output) rounding and where c enters, its match count,
and the parameters the data cannot pin down.
"""

import sys
import time

from _hw_vectors import hw_root, missing

from fpscope.emulate import HW_SETS
from fpscope.fit import fit, load_recording


def main(argv):
    presets = "--no-presets" not in argv
    args = [a for a in argv[1:] if a != "--no-presets"]
    root = hw_root(args[0] if args else None)
    if not root.is_dir():
        print(missing(root), file=sys.stderr)
        return 2
    print(f"{'set':<20} {'L x stages':>10} {'F':>3} {'align':<9} {'rounding':<26} {'c':<6} "
          f"{'matched':>10} {'time':>6}  open (not separated by the data)")
    worst = 1.0
    for gpu, folder, out in HW_SETS:
        t = time.time()
        res = fit(load_recording(root / gpu / folder, out), use_presets=presets)
        p = res.profile
        rounding = "-".join(p.step_rounding) + (f" then {'-'.join(p.output_rounding)}"
                                                if p.output_rounding else "")
        open_ = ", ".join(k for k, v in res.consistent.items() if len(v) > 1)
        worst = min(worst, res.matched / res.total)
        print(f"{gpu + '/' + folder + ' d_' + out:<20} {f'{p.block_size} x {p.stages}':>10} "
              f"{p.frac_bits:>3} {p.alignment:<9} {rounding:<26} {p.c_entry:<6} "
              f"{f'{res.matched}/{res.total}':>10} {time.time() - t:5.1f}s  {open_}", flush=True)
    return 0 if worst == 1.0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
