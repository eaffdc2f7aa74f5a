#!/usr/bin/env python
"""Probe a grid of simulated profiles near the subnormal range and list those probed wrongly.

Usage: python scripts/probe_sweep.py [--steps e8m13-RZ,e8m13-RNE] [--block-sizes 2,4]
[--frac-bits 10] [--e-zero=-140:-127] [--limit N]   (negative ranges take the
``--e-zero=LO:HI`` form)

Issue 4's round trip, made exhaustive where the random one (tests/test_probe_hypothesis.py)
found its corners: bf16 inputs, fp32 output, two chained blocks, steps on a coarser grid than
fp32's (e8m13: 2^-139), few kept bits, e_zero in (or near) the subnormal range, and every
alignment, zero rule and flush. Each profile runs as a simulated black box through
:func:`fpscope.probes.driver.probe` (2048 validation cases); it is wrong when it is not
accepted, when an observable e_zero differs, or when the probed profile's outputs differ from
the truth's on the zero-sign rows or on 20,000 random rows of tiny products (2^-160 .. 2^-120,
30% zeros, random signs; c zero or a subnormal), which the validation's generators rarely
reach. Prints one line per wrong profile and a summary line; exit status 1 if any is wrong.
"""

import argparse
import itertools
import sys
import time

import numpy as np

from fpscope.emulate.vectorized import fdpa_batch
from fpscope.probes.blackbox import SimulatedTarget
from fpscope.probes.driver import probe
from fpscope.probes.specials import zero_sign_rows
from fpscope.profile import Profile

ZERO_RULES = [(True, "ieee"), (False, "ieee"), (False, "positive")]


def tiny_rows(k: int, rows: int = 20000, seed: int = 5):
    """(a, b, c): bf16 values 1.m * 2^e (7 fraction bits, e in -80 .. -61, exact in bf16), 30%
    zeros, random signs; c +0 or a multiple of 2^-149 below 2^-139 of random sign."""
    rng = np.random.default_rng(seed)

    def vals(shape):
        v = np.ldexp(1 + rng.integers(0, 128, size=shape) / 128, rng.integers(-80, -60, size=shape))
        v *= rng.choice([-1.0, 1.0], size=shape)
        v[rng.random(shape) < 0.3] = 0.0
        return v

    c = np.ldexp(rng.integers(1, 1 << 10, rows).astype(np.float64), -149)
    c *= rng.choice([-1.0, 1.0], rows)
    return vals((rows, k)), vals((rows, k)), np.where(rng.random(rows) < 0.5, 0.0, c)


def profiles(steps, block_sizes, frac_bits, e_zeros):
    for step, L, F, al, ez, (nz, zs), fi, fo in itertools.product(
            steps, block_sizes, frac_bits, ["truncate", "floor", "nearest"], [None, *e_zeros],
            ZERO_RULES, [False, True], [False, True]):
        yield Profile(name="sweep", arch="test", in_format="bf16", out_format="fp32",
                      block_size=L, k=2 * L, frac_bits=F, alignment=al, e_zero=ez,
                      step_rounding=step, flush_inputs=fi, flush_outputs=fo,
                      neg_zero_to_pos=nz, zero_sum_sign=zs)


def check(p: Profile, tiny) -> str:
    """"" when ``p`` is probed back equivalently, else why not (one line)."""
    rep = probe(SimulatedTarget(p), p.in_format, p.out_format, cases=2048, seed=1)
    if not (rep.fits and rep.accepted):
        return rep.reason or "not accepted"
    q = rep.profile
    found = {f.feature: f for f in rep.findings}
    if found["e_zero"].observable and q.e_zero != p.e_zero:
        return f"e_zero {q.e_zero}"
    for what, (a, b, c) in (("zero-sign", zero_sign_rows(p)),
                            ("tiny", (tiny[0][:, :p.k], tiny[1][:, :p.k], tiny[2]))):
        same = fdpa_batch(a, b, c, p).view(np.int64) == fdpa_batch(a, b, c, q).view(np.int64)
        if not same.all():
            return (f"{what} rows differ (probed: step {' '.join(q.step_rounding)}, "
                    f"e_zero {q.e_zero})")
    return ""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", default="e8m13-RZ,e8m13-RNE",
                    help="step roundings FORMAT-MODE, comma-separated")
    ap.add_argument("--block-sizes", default="2,4", help="L values, comma-separated")
    ap.add_argument("--frac-bits", default="10", help="F values, comma-separated")
    ap.add_argument("--e-zero", default="-140:-127",
                    help="e_zero range LO:HI, inclusive, as --e-zero=LO:HI (None is always "
                         "included)")
    ap.add_argument("--limit", type=int, default=None, help="probe only the first N profiles")
    args = ap.parse_args(argv)
    try:
        steps = [tuple(s.split("-")) for s in args.steps.split(",")]
        Ls = [int(x) for x in args.block_sizes.split(",")]
        Fs = [int(x) for x in args.frac_bits.split(",")]
        lo, hi = (int(x) for x in args.e_zero.split(":"))
    except ValueError as exc:
        print(f"probe_sweep: bad argument: {exc}", file=sys.stderr)
        return 2
    tiny = tiny_rows(2 * max(Ls))
    t0, n, bad = time.time(), 0, 0
    for p in itertools.islice(profiles(steps, Ls, Fs, range(lo, hi + 1)), args.limit):
        n += 1
        why = check(p, tiny)
        if why:
            bad += 1
            print(f"WRONG step={'-'.join(p.step_rounding)} L={p.block_size} F={p.frac_bits} "
                  f"{p.alignment} e_zero={p.e_zero} neg_zero_to_pos={p.neg_zero_to_pos} "
                  f"zero_sum_sign={p.zero_sum_sign} flush in/out={p.flush_inputs}/"
                  f"{p.flush_outputs}: {why}", flush=True)
    print(f"{bad} of {n} profiles probed wrongly ({time.time() - t0:.0f} s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
