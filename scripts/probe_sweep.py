#!/usr/bin/env python
"""Probe a grid of simulated profiles near the subnormal range and list those probed wrongly.

Usage: python scripts/probe_sweep.py [--formats bf16:fp32] [--steps e8m13-RZ,e8m13-RNE]
[--block-sizes 2,4] [--frac-bits 10] [--e-zero=-140:-127] [--limit N]   (negative ranges
take the ``--e-zero=LO:HI`` form)

Issue 4's round trip, made exhaustive where the random one (tests/test_probe_hypothesis.py)
found its corners: bf16 inputs, fp32 output, two chained blocks, steps on a coarser grid than
fp32's (e8m13: 2^-139), few kept bits, e_zero in (or near) the subnormal range, and every
alignment, zero rule and flush. ``--formats fp16:fp16`` (with fp16 steps and an e_zero range
near fp16's, e.g. ``--steps fp16-RZ,fp16-RNE --e-zero=-26:-13``) sweeps fp16 inputs with fp16
output, where the random round trip found the "fp16, L = 2" corners. Each profile runs as
a simulated black box through :func:`fpscope.probes.driver.probe` (2048 validation cases); it
is wrong when it is not accepted, when an observable e_zero differs, or when the probed
profile's outputs differ from the truth's on the zero-sign rows or on 20,000 random rows of
tiny products (:func:`tiny_rows`: bf16 2^-160 .. 2^-120, fp16 2^-28 .. 2^-8; 30% zeros,
random signs; c zero or a subnormal), which the validation's generators rarely reach.
Prints one line per wrong profile and a summary line; exit status 1 if any is wrong.
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


#: (in, out) -> (operand fraction bits, operand exponent range [lo, hi), output's smallest
#: subnormal exponent) of :func:`tiny_rows`: products reach below the output's subnormal range.
TINY = {("bf16", "fp32"): (7, (-80, -60), -149), ("fp16", "fp16"): (10, (-14, -4), -24)}


def tiny_rows(k: int, rows: int = 20000, seed: int = 5, formats=("bf16", "fp32")):
    """(a, b, c) for ``formats`` (a key of :data:`TINY`): values 1.m * 2^e exact in the input
    format (bf16: 7 fraction bits, e in -80 .. -61; fp16: 10 bits, e in -14 .. -5), 30% zeros,
    random signs; c +0 or a multiple of the output's smallest subnormal (2^-149, 2^-24) below
    2^10 of them, of random sign."""
    frac, (e_lo, e_hi), c_lsb = TINY[tuple(formats)]
    rng = np.random.default_rng(seed)

    def vals(shape):
        v = np.ldexp(1 + rng.integers(0, 1 << frac, size=shape) / (1 << frac),
                     rng.integers(e_lo, e_hi, size=shape))
        v *= rng.choice([-1.0, 1.0], size=shape)
        v[rng.random(shape) < 0.3] = 0.0
        return v

    c = np.ldexp(rng.integers(1, 1 << 10, rows).astype(np.float64), c_lsb)
    c *= rng.choice([-1.0, 1.0], rows)
    return vals((rows, k)), vals((rows, k)), np.where(rng.random(rows) < 0.5, 0.0, c)


def profiles(steps, block_sizes, frac_bits, e_zeros, formats=("bf16", "fp32")):
    fin, fout = formats
    for step, L, F, al, ez, (nz, zs), fi, fo in itertools.product(
            steps, block_sizes, frac_bits, ["truncate", "floor", "nearest"], [None, *e_zeros],
            ZERO_RULES, [False, True], [False, True]):
        yield Profile(name="sweep", arch="test", in_format=fin, out_format=fout,
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
    ap.add_argument("--formats", default="bf16:fp32",
                    help=f"IN:OUT, one of {', '.join(':'.join(f) for f in TINY)}")
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
        formats = tuple(args.formats.split(":"))
        if formats not in TINY:
            raise ValueError(f"--formats {args.formats}: not one of "
                             f"{', '.join(':'.join(f) for f in TINY)}")
    except ValueError as exc:
        print(f"probe_sweep: bad argument: {exc}", file=sys.stderr)
        return 2
    tiny = tiny_rows(2 * max(Ls), formats=formats)
    t0, n, bad = time.time(), 0, 0
    for p in itertools.islice(profiles(steps, Ls, Fs, range(lo, hi + 1), formats), args.limit):
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
