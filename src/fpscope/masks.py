"""Probe masks: the values +M, -M and the unit u that make a summation tree observable.

FPRev's probe (Xie et al., USENIX ATC 2025, arXiv 2411.00442, section 3): every input is the unit
u except x_i = +M and x_j = -M. When every partial sum that holds exactly one of +-M equals +-M (the
mask *absorbs* the units), the two cancel to exactly 0 at the lowest common ancestor of i and j and
the units added after it survive, so the output is (n - l) * u with l the number of leaves under
LCA(i, j).

Conditions for the answer to be exact (checked by :func:`choose_mask` and by the reveal):
* absorption: (n - 2) * u < ulp_acc(M) / 2 in the op's accumulator format;
* counting: every count k * u, k <= n - 2, is exact in the accumulator and the output format,
  i.e. n - 2 <= 2^p for both (fp16 output: about n <= 2050; bf16: n <= 258);
* M, -M and u are representable in the input format.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .formats import FP64, Format


class MaskError(ValueError):
    """No mask satisfies the conditions for this format and n."""


@dataclass(frozen=True)
class Mask:
    """The probe values. ``M`` and ``u`` are powers of two in the input format."""

    M: float
    u: float

    def to_json(self) -> dict:
        return {"M": self.M, "u": self.u, "M_log2": int(np.log2(self.M)), "u_log2": int(np.log2(self.u))}

    def absorbs(self, n: int, acc: Format) -> bool:
        """True if (n - 2) units vanish next to M in the accumulator ``acc`` (round to nearest)."""
        return (n - 2) * self.u < acc.ulp(self.M) / 2

    def counts_exactly(self, n: int, fmt: Format) -> bool:
        """True if every k * u with k <= n - 2 is exact in ``fmt``."""
        k = max(n - 2, 0)
        if k > fmt.exact_integer_limit():
            return False
        return k * self.u <= fmt.max_finite and self.u >= fmt.min_subnormal


def choose_mask(n: int, in_format: Format, out_format: Format, acc: Format | None = None) -> Mask:
    """Pick M and u for a reduction of n terms.

    M is the largest power of two of the input format (so it absorbs the units in the widest
    accumulator possible). u is 1 when that already absorbs n units in a float64 accumulator,
    otherwise the smallest power of two representable in the input format (fp16: 2^-24), which
    maximises the absorption margin.

    Args:
        n: number of leaves.
        in_format, out_format: formats of the op's inputs and output.
        acc: the accumulator format if known; default: assume it is at least as wide as
            ``in_format`` and check absorption against ``in_format`` and ``out_format``.

    Raises:
        MaskError: unit counts up to n - 2 are not exact in the output (or accumulator) format,
            or no u absorbs in ``acc``. The message says the largest n that works.
    """
    M = float(np.ldexp(1.0, in_format.emax))
    u = 1.0
    if not Mask(M, 1.0).absorbs(n, FP64):
        u = in_format.min_subnormal
    mask = Mask(M, u)
    limit_fmt = min((out_format, in_format) if acc is None else (out_format, acc), key=lambda f: f.p)
    if not mask.counts_exactly(n, out_format) or (acc is not None and not mask.counts_exactly(n, acc)):
        raise MaskError(
            f"n = {n} is too large for {limit_fmt.name}: the probe counts up to n - 2 units, which "
            f"must be exact (n <= {limit_fmt.exact_integer_limit() + 2} for the probes; an op that "
            f"also accumulates in {limit_fmt.name} counts only up to "
            f"{limit_fmt.exact_integer_limit()})"
        )
    check_acc = acc or in_format
    if not mask.absorbs(n, check_acc):
        raise MaskError(
            f"no mask absorbs {n} units in a {check_acc.name} accumulator with {in_format.name} inputs"
        )
    return mask
