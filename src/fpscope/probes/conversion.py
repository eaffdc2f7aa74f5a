"""Operand conversion of tf32 inputs: how fp32 operands that are not tf32 values are reduced
(NUMERICS.md section 2, "TF32 operand conversion": MMA-Sim truncates; a cuBLAS report,
1024.5 * 1.0 = 1025 on Ampere, fits round-half-away; probe it, do not assume).

Inputs (fp32 operands, b = 1, c = 0, one product): a = 1024.5, 1025.5, 1024.75 and their
negatives (tf32 keeps 10 fraction bits, so 1024 and 1025 are neighbours and .5 is a tie):

    a          1024.5  1025.5  1024.75
    truncate   1024    1025    1024      (toward zero)
    RNA        1025    1026    1025      (nearest, ties away)
    RNE        1024    1026    1025      (nearest, ties to even)

(the three values of ``Profile.operand_conversion``, :mod:`fpscope.emulate.conversion`).

Not observable (not applicable) for other input formats: their operands are values of the format.
"""

from __future__ import annotations

from ._common import Ctx, Finding

FAMILY = "conversion"

A_VALUES = (1024.5, 1025.5, 1024.75)
PATTERNS = {"truncate": (1024, 1025, 1024), "RNA": (1025, 1026, 1025), "RNE": (1024, 1026, 1025)}


def run(ctx: Ctx) -> list[Finding]:
    if ctx.fin.name != "tf32":
        return [Finding(FAMILY, "operand_conversion", None, observable=False,
                        note=f"not applicable: {ctx.fin.name} operands are values of the format")]
    p0 = ctx.first_block[0]
    rows = [ctx.row([], raw=[(p0, s * a, 1.0)]) for s in (1.0, -1.0) for a in A_VALUES]
    d = ctx.run(rows)
    mags = tuple(float(x) for x in d[:3])
    neg = tuple(-float(x) for x in d[3:])
    ev = [ctx.evidence(r, float(v), f"a = {s * a} (fp32), b = 1")
          for r, v, (s, a) in zip(rows, d, [(s, a) for s in (1.0, -1.0) for a in A_VALUES])]
    mode = next((m for m, pat in PATTERNS.items() if pat == mags), None)
    if mode is None or neg != mags:
        return [Finding(FAMILY, "operand_conversion", None, fits=False, rows=6, evidence=ev,
                        note=f"outputs {mags} / {neg} match no conversion rule: does not fit")]
    ctx.known["operand_conversion"] = mode
    return [Finding(FAMILY, "operand_conversion", mode, rows=6, evidence=ev,
                    note={"truncate": "fp32 operands are truncated to tf32 (1024.5 -> 1024)",
                          "RNA": "fp32 operands are rounded to nearest, ties away (1024.5 -> 1025)",
                          "RNE": "fp32 operands are rounded to nearest, ties to even (1024.5 -> "
                                 "1024, 1025.5 -> 1026)"}[mode])]
