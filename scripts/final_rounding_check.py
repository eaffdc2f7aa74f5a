#!/usr/bin/env python
"""Which rounding gave recorded fp32 matrix-unit outputs, from c and d alone (a and b unknown).

When every product of an instruction lies on a known grid g (fp8 e4m3: every value is a
multiple of 2^-9, so every product and the products' sum S are multiples of 2^-18), and the
output's rounding error is below g / 2 (fp32 outputs with |d| < 16: an ulp is at most 2^-20),
S is the multiple of g nearest d - c. Each sample is then classified by whether d is
RNE(S + c) and whether it is RZ(S + c), both exact roundings to fp32. A nearest-even
instruction gives no "RZ only" sample. A round-toward-zero one gives no d beyond S + c on a
positive sum ("away_positive") as long as no product bit is cut (cutting c, or a negative
product, toward zero only lowers a positive sum; a negative sum can move away from zero when c
is cut), which holds for small operands: |a|, |b| <= 4 as in the published H100 and Ada sets
puts every product within 2^4, and a window of 25 bits below it holds every e4m3 product bit.

Used on the public B200 recordings of Khattak and Mikaitis (github.com/north-numerical-computing/
MATLAB-tensor-core, model_validation/B200/E4M3; a and b are not published there): see the
blackwell-e4m3 notes in fpscope/presets.py.

Usage: python scripts/final_rounding_check.py FOLDER [--grid-exp E] [--limit N]
FOLDER holds c_<GPU>_fp32.txt and d_<GPU>_fp32.txt, one fp32 word per line as a 32-character
binary string (the layout of those recordings); --grid-exp: log2 of the products' grid
(default -18, fp8 e4m3).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

#: fp32: significand bits, smallest exponent of a normal number.
_P, _EMIN = 24, -126
#: Fixed-point scale: every fp32 value and every multiple of 2^-18 is an integer times 2^-_Q.
_Q = 160


def _round_fp32(n: int, mode: str) -> float:
    """The integer ``n * 2^-_Q`` rounded to fp32 ("RNE" or "RZ"), exactly (no overflow: the
    values here stay far below fp32's largest)."""
    if n == 0:
        return 0.0
    mag = abs(n)
    lsb = max(mag.bit_length() - _P, _EMIN - (_P - 1) + _Q)  # units of 2^-_Q per last bit
    q, r = divmod(mag, 1 << lsb) if lsb > 0 else (mag << -lsb, 0)
    if mode == "RNE" and (2 * r > (1 << lsb) or (2 * r == (1 << lsb) and q & 1)):
        q += 1
    return math.copysign(math.ldexp(q, lsb - _Q), n)


def classify(c, d, grid_exp: int = -18) -> dict:
    """Counts of samples by the roundings of ``S + c`` that give ``d`` (module docstring).

    Args:
        c, d: sequences of fp32 values (the accumulator input and the recorded output).
        grid_exp: log2 of the grid every product lies on.

    Returns:
        dict with "both" (d is RNE(S + c) and RZ(S + c): an exact or tie-down case), "RNE"
        (RNE only), "RZ" (RZ only), "neither", "skipped" (|d| >= 16, non-finite, or S not
        unique), "away" (RNE-only samples rounded away from zero), "away_positive" (those of
        them with a positive S + c), "ties_down" / "ties_up" (samples whose S + c lies halfway
        between two fp32 values, by the way d went).
    """
    out = dict.fromkeys(("both", "RNE", "RZ", "neither", "skipped", "away", "away_positive",
                         "ties_down", "ties_up"), 0)
    g = 1 << (grid_exp + _Q)
    for ci, di in zip(c, d):
        ci, di = float(np.float32(ci)), float(np.float32(di))
        if not (math.isfinite(ci) and math.isfinite(di)) or abs(di) >= 16:
            out["skipped"] += 1
            continue
        nc, nd = int(math.ldexp(ci, _Q)), int(math.ldexp(di, _Q))
        k, rem = divmod(nd - nc, g)
        if 2 * rem == g:  # d - c halfway between two grid points: S not unique
            out["skipped"] += 1
            continue
        t = (k + (2 * rem > g)) * g + nc  # S + c, in units of 2^-_Q
        rne, rz = _round_fp32(t, "RNE") == di, _round_fp32(t, "RZ") == di
        out["both" if rne and rz else "RNE" if rne else "RZ" if rz else "neither"] += 1
        away = rne and not rz and abs(nd) > abs(t)
        out["away"] += away
        out["away_positive"] += away and t > 0
        lsb = max(abs(t).bit_length() - _P, _EMIN - (_P - 1) + _Q)
        if lsb > 0 and abs(t) % (1 << lsb) == 1 << (lsb - 1):
            out["ties_down" if abs(nd) < abs(t) else "ties_up"] += 1
    return out


def _words(path: Path) -> np.ndarray:
    lines = [s.strip() for s in path.read_text().splitlines() if s.strip()]
    return np.array([int(s, 2) for s in lines], dtype=np.uint32).view(np.float32)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--grid-exp", type=int, default=-18)
    ap.add_argument("--limit", type=int, default=None)
    args = ap.parse_args(argv)
    cs, ds = sorted(args.folder.glob("c_*_fp32.txt")), sorted(args.folder.glob("d_*_fp32.txt"))
    if len(cs) != 1 or len(ds) != 1:
        print(f"{args.folder}: expected one c_*_fp32.txt and one d_*_fp32.txt", file=sys.stderr)
        return 2
    c, d = _words(cs[0]), _words(ds[0])
    n = min(len(c), len(d)) if args.limit is None else min(args.limit, len(c), len(d))
    res = classify(c[:n], d[:n], args.grid_exp)
    print(f"{n} samples: " + ", ".join(f"{k} {v}" for k, v in res.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
