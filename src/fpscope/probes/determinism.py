"""Determinism and lane independence (NUMERICS.md section 3, probe 1).

Inputs: 64 random dot products (in-format normals with exponents in [-4, 4], random c of the
output format); each is run three times (as rows of one call), and once more placed among other,
different rows, and as a 4 x 3 block where every row of A and every column of B is the same.

Outcomes:
* deterministic: the three runs agree bit for bit. Otherwise the op cannot be described by a
  profile at all (the report says so and stops).
* lane independent: an output does not depend on the other rows/columns of the call (the same
  dot product gives the same bits wherever it sits, and a broadcast block gives equal outputs).

Always observable.
"""

from __future__ import annotations

import numpy as np

from ..formats import round_to_format
from ._common import Ctx, Finding

FAMILY = "determinism"


def random_normals(rng, fmt, shape, elo: int = -4, ehi: int = 4) -> np.ndarray:
    """Random normal values of ``fmt`` with exponents in [elo, ehi] (exact, via round_to_format)."""
    e = rng.integers(max(elo, fmt.emin), min(ehi, fmt.emax - 1) + 1, size=shape)
    m = 1 + rng.random(shape)
    s = np.where(rng.random(shape) < 0.5, -1.0, 1.0)
    return round_to_format(s * np.ldexp(m, e), fmt, "RZ")


def run(ctx: Ctx) -> list[Finding]:
    rng = ctx.rng
    R, K = 64, ctx.K
    a = random_normals(rng, ctx.fin, (R, K))
    b = random_normals(rng, ctx.fb, (R, K))
    c = random_normals(rng, ctx.fout, (R,))
    rows = [(a[i], b[i], float(c[i])) for i in range(R)]
    d1, d2, d3 = ctx.run(rows), ctx.run(rows), ctx.run(rows)
    bits = [np.asarray(x).view(np.uint64) for x in (d1, d2, d3)]
    nan = np.isnan(d1)
    same = ((bits[0] == bits[1]) & (bits[1] == bits[2])) | (nan & np.isnan(d2) & np.isnan(d3))
    out = []
    ev = [ctx.evidence(rows[i], float(d1[i]), "run 1") for i in range(2)]
    if not same.all():
        i = int(np.flatnonzero(~same)[0])
        ev = [ctx.evidence(rows[i], float(x[i]), f"run {j + 1}") for j, x in enumerate((d1, d2, d3))]
        out.append(Finding(FAMILY, "deterministic", False, fits=False, evidence=ev, rows=3 * R,
                           note=f"{int((~same).sum())} of {R} outputs changed between identical "
                                f"calls: no profile can describe a nondeterministic op"))
        return out
    out.append(Finding(FAMILY, "deterministic", True, evidence=ev, rows=3 * R,
                       note=f"{R} dot products, 3 identical calls each: bit-identical"))
    # lane independence: the same dot product among other rows / broadcast in a block
    t = ctx.target
    i0 = 0
    A = np.repeat(a[i0][None, :], 4, axis=0)
    B = np.repeat(b[i0][:, None], 3, axis=1)
    C = np.full((4, 3), float(c[i0]))
    D = t(A, B, C)
    block_ok = bool(np.all(D.view(np.uint64) == np.asarray(d1[i0]).view(np.uint64))) or bool(
        np.isnan(D).all() and np.isnan(d1[i0]))
    A2 = a[:8].copy()
    C2 = np.zeros((8, 3))
    C2[:, 0] = c[:8]
    B2 = np.stack([b[i0], b[1], b[2]], axis=1)
    D2 = t(A2, B2, C2)
    among_ok = ctx.same(float(D2[0, 0]), float(d1[i0]))
    ok = block_ok and among_ok
    ctx.rows_run += 12 + 24
    note = ("an output depends only on its own row of A, column of B and element of C"
            if ok else "the same dot product gave different bits in another position of the call")
    out.append(Finding(FAMILY, "lane_independent", ok, fits=ok, rows=36, note=note,
                       evidence=[ctx.evidence(rows[i0], float(D[1, 2]), "broadcast block, (1, 2)"),
                                 ctx.evidence(rows[i0], float(D2[0, 0]), "among other rows")]))
    return out
