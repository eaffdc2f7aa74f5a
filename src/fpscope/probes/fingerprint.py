"""The one-shot fingerprint of NUMERICS.md section 2: a = [-2^13, -0.5, -0.25, -0.125],
b = [2^10, 1, 1, 1], c = 2^23 (exact answer -0.875) gives 0 on Volta (F = 23), -0.5 on
Turing/Ampere/Ada fp16 (F = 24), -0.75 on Hopper/Blackwell fp16 (F = 25).

The four products sit in the first four positions (the rest +0). Not applicable where the
values are not exact in the formats (fp8 inputs, fp16 outputs: 2^23 is not an fp16 value) or K < 4.
"""

from __future__ import annotations

from ._common import Ctx, NotRepresentable

A = (-2.0 ** 13, -0.5, -0.25, -0.125)
B = (2.0 ** 10, 1.0, 1.0, 1.0)
C = 2.0 ** 23
MEANING = {0.0: "Volta-like (F = 23)", -0.5: "Turing/Ampere/Ada-like (F = 24)",
           -0.75: "Hopper/Blackwell-like (F = 25)", -0.875: "exact (no alignment loss)"}
#: The reading holds for a fused block of >= 4 products with c entering first.
CAVEAT = " if the op is a fused block"


def run(ctx: Ctx) -> tuple[str, dict]:
    """(one line, evidence dict or {})."""
    if ctx.K < 4:
        return "fingerprint: not applicable (K < 4)", {}
    try:
        row = ctx.row([], c=C, raw=list(zip(range(4), A, B)))
        import numpy as np

        from ..formats import is_representable

        if not (is_representable(np.array(A), ctx.fin).all()
                and is_representable(np.array(B), ctx.fb).all()):
            raise NotRepresentable(f"a = -2^13, -0.5, -0.25, -0.125 and b = 2^10, 1, 1, 1 are "
                                   f"not all {ctx.fin.name} / {ctx.fb.name} values")
    except NotRepresentable as exc:
        return f"fingerprint: not applicable ({exc})", {}
    d = float(ctx.run([row])[0])
    what = MEANING.get(d, "no known architecture") + CAVEAT
    return (f"fingerprint: a=[-2^13,-0.5,-0.25,-0.125] b=[2^10,1,1,1] c=2^23 -> {d!r}: {what}",
            ctx.evidence(row, d, "NUMERICS.md one-shot fingerprint"))
