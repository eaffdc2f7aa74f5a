"""Shared machinery of the arithmetic probe families: findings, evidence, probe rows.

A probe row is one dot product ``d = op(a, b, c)`` of K products, built from a few chosen
products (position, exact value) with every other product +0 (a = +0, b = 1). A product value is
split into operands by :func:`split_product` (``a = v / 2^eb`` in a's format, ``b = 2^eb`` in
b's, which differ in a mixed-input instruction such as e4m3 x e5m2), so its leading exponent is
``e_a + e_b = floor(log2 |v|)`` and its significand lies in [1, 2); the probes never rely on
product significands in [2, 4) (the random validation covers them).

A block-scaled target (:attr:`MatrixTarget.scaled`) runs such rows at unit scales; a row built
with ``scales=(sa, sb)`` carries the block scales of its a and its b (K / s values each) and is
run with them.

Evidence: every probe family records rows of its inputs and outputs as hex bit patterns (inputs
in the input format, tf32 in its fp32 container; c and d in the output format; block scales in
the scale format).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..formats import Format, is_representable
from .blackbox import MatrixTarget, evaluate_rows, hex_in, hex_out, hex_scale

#: How many evidence rows a family keeps per feature (the counts of all rows are kept too).
MAX_EVIDENCE = 8


class NotRepresentable(ValueError):
    """A probe value cannot be formed from operands of the input format."""


@dataclass
class Finding:
    """What one probe family found about one feature.

    Attributes:
        family: the probe family (module name, e.g. "structure").
        feature: the parameter ("block_size", "frac_bits", ...).
        value: the value found (JSON-able), or None when not observable.
        observable: False when no input of these formats can show the feature; ``value`` is
            then the documented default that the profile uses.
        fits: False when the outputs contradict the fused-block model (``note`` says how).
        note: one line: what the outcome means.
        evidence: rows {"products": [{"k", "a", "b"}], "c", "d", "meaning"} as hex, at most
            :data:`MAX_EVIDENCE`; ``rows`` gives how many probe rows the family ran.
    """

    family: str
    feature: str
    value: Any
    observable: bool = True
    fits: bool = True
    note: str = ""
    evidence: list = field(default_factory=list)
    rows: int = 0

    def to_dict(self) -> dict:
        return {"family": self.family, "feature": self.feature, "value": self.value,
                "observable": self.observable, "fits": self.fits, "note": self.note,
                "rows": self.rows, "evidence": self.evidence}


def exponent(v: float) -> int:
    """floor(log2 |v|) of a nonzero finite float."""
    return math.frexp(abs(v))[1] - 1


def split_product(v: float, fin: Format, allow_subnormal: bool = False,
                  fb: Format | None = None) -> tuple[float, float]:
    """(a, b) with ``a * b == v`` exactly, a in ``fin``, b a power of two in ``fb`` (default
    ``fin``), both normal (a may be subnormal with ``allow_subnormal``); b = 1 where possible.
    Zeros and non-finite v: (v, 1).

    Raises:
        NotRepresentable: no such pair.
    """
    v = float(v)
    if v == 0 or not math.isfinite(v):
        return (v, 1.0)
    return _split(v, fin, fin if fb is None else fb, bool(allow_subnormal))


@functools.lru_cache(maxsize=65536)
def _split(v: float, fin: Format, fb: Format, allow_subnormal: bool) -> tuple[float, float]:
    cands = sorted(range(fb.emin, fb.emax + 1), key=lambda e: (abs(e), e))
    for eb in cands:  # both normal, b closest to 1
        a = math.ldexp(v, -eb)
        if fin.min_normal <= abs(a) <= fin.max_finite and bool(
                is_representable(np.array([a]), fin)[0]):
            return (a, math.ldexp(1.0, eb))
    if allow_subnormal:  # a and/or b subnormal: the smallest leading exponent e_a + e_b
        best = None
        for eb in range(fb.emin - fb.p + 1, fb.emax + 1):
            a = math.ldexp(v, -eb)
            if a == 0 or abs(a) > fin.max_finite:
                continue
            if bool(is_representable(np.array([a]), fin)[0]):
                lead = lead_exponent(a, math.ldexp(1.0, eb), fin, fb)
                if best is None or lead < best[0]:
                    best = (lead, a, math.ldexp(1.0, eb))
        if best is not None:
            return best[1], best[2]
    what = (f"two {fin.name} values" if fb.name == fin.name
            else f"a {fin.name} and a {fb.name} value")
    raise NotRepresentable(f"{v!r} is not a product of {what}")


def lead_exponent(a: float, b: float, fin: Format, fb: Format | None = None) -> int:
    """The leading exponent e_a + e_b of the product a * b (subnormals count as e_min of their
    own format; b's format ``fb`` defaults to a's)."""
    fb = fin if fb is None else fb
    return max(exponent(a), fin.emin) + max(exponent(b), fb.emin)


class Ctx:
    """The probing session: target, formats, K, what is known so far.

    Attributes:
        target: the op; fin, fout: its formats (fin: a's); fb: b's format (fin unless the
            instruction takes mixed inputs); K: products per probe row.
        blocks: block membership (list of lists of positions, in evaluation order) once the
            structure family has run; before that, one block of all positions.
        known: parameter name -> value found so far.
        log: None, or a list that :meth:`run` appends (rows, d) to (a family that weighs
            alternatives re-checks them on every row it ran).
    """

    def __init__(self, target: MatrixTarget, K: int, seed: int = 0):
        self.target = target
        self.fin = target.fin
        self.fb = target.fb
        self.fout = target.fout
        self.K = int(K)
        self.rng = np.random.default_rng(seed)
        self.blocks: list[list[int]] = [list(range(self.K))]
        self.known: dict[str, Any] = {}
        self.rows_run = 0
        self.log: list | None = None

    # -- rows -------------------------------------------------------------------------------
    def row(self, products, c: float = 0.0, allow_subnormal: bool = False, raw=None,
            scales=None):
        """(a, b, c) for products [(position, value), ...]; ``raw``: [(position, a, b)] taken as is;
        ``scales``: (sa, sb), the block scales of a and b (block-scaled targets): the row is then
        (a, b, c, sa, sb).

        Raises:
            NotRepresentable: a value cannot be split, or c is not a value of the output format.
        """
        a = np.zeros(self.K)
        b = np.ones(self.K)
        for pos, v in products:
            a[pos], b[pos] = split_product(v, self.fin, allow_subnormal, self.fb)
        for pos, x, y in raw or ():
            a[pos], b[pos] = x, y
        if not bool(is_representable(np.array([c]), self.fout)[0]):
            raise NotRepresentable(f"c = {c!r} is not a {self.fout.name} value")
        if scales is None:
            return a, b, float(c)
        sa, sb = (np.asarray(x, dtype=np.float64) for x in scales)
        return a, b, float(c), sa, sb

    def run(self, rows) -> np.ndarray:
        """Outputs d (R,) of rows [(a, b, c), ...] or, all with block scales, [(a, b, c, sa,
        sb), ...] (grouped into few calls)."""
        if not rows:
            return np.empty(0)
        a = np.stack([r[0] for r in rows])
        b = np.stack([r[1] for r in rows])
        c = np.array([r[2] for r in rows])
        self.rows_run += len(rows)
        if len(rows[0]) == 5:
            d = evaluate_rows(self.target, a, b, c, sa=np.stack([r[3] for r in rows]),
                              sb=np.stack([r[4] for r in rows]))
        else:
            d = evaluate_rows(self.target, a, b, c)
        if self.log is not None:
            self.log.append((list(rows), d))
        return d

    def evidence(self, row, d: float, meaning: str = "") -> dict:
        a, b, c = row[:3]
        nz = [int(i) for i in np.flatnonzero((a != 0) | np.signbit(a) | ~np.isfinite(a))]
        ha = hex_in(a[nz], self.target) if nz else []
        hb = hex_in(b[nz], self.target, "b") if nz else []
        item = {"products": [{"k": k, "a": x, "b": y} for k, x, y in zip(nz, ha, hb)],
                "c": hex_out([c], self.target)[0], "d": hex_out([d], self.target)[0]}
        if len(row) == 5:
            item["scale_a"] = hex_scale(row[3], self.target)
            item["scale_b"] = hex_scale(row[4], self.target)
        if meaning:
            item["meaning"] = meaning
        return item

    # -- scales ---------------------------------------------------------------------------
    @property
    def first_block(self) -> list[int]:
        return self.blocks[0]

    def big_exponent(self) -> int:
        """The largest exponent E with 2^E a product of two normal inputs and an output value."""
        return min(self.fout.emax, self.fin.emax + self.fb.emax)

    def small_exponent(self) -> int:
        """The smallest exponent with 2^e a product of two normal inputs and a normal output."""
        return max(self.fout.emin, self.fin.emin + self.fb.emin)

    @property
    def operands(self) -> str:
        """"two fp16" or "fp8_e4m3fn and fp8_e5m2": a's and b's formats, for notes."""
        if self.fb.name == self.fin.name:
            return f"two {self.fin.name}"
        return f"{self.fin.name} and {self.fb.name}"

    def split(self, v: float, allow_subnormal: bool = False) -> tuple[float, float]:
        """:func:`split_product` of v into this op's a and b formats."""
        return split_product(v, self.fin, allow_subnormal, self.fb)

    def lead(self, a: float, b: float) -> int:
        """:func:`lead_exponent` of a * b in this op's a and b formats."""
        return lead_exponent(a, b, self.fin, self.fb)

    def same(self, x: float, y: float) -> bool:
        """Bitwise equality of two outputs (NaN equals NaN)."""
        if math.isnan(x) or math.isnan(y):
            return math.isnan(x) and math.isnan(y)
        return x == y and math.copysign(1.0, x) == math.copysign(1.0, y)


def sample_evidence(ctx: Ctx, rows, d, meanings=None, limit: int = MAX_EVIDENCE) -> list:
    """Evidence of up to ``limit`` rows spread over ``rows``."""
    n = len(rows)
    if n == 0:
        return []
    idx = sorted(set(np.linspace(0, n - 1, min(limit, n)).astype(int).tolist()))
    return [ctx.evidence(rows[i], float(d[i]), meanings[i] if meanings else "") for i in idx]


def candidate_profile(ctx: Ctx, **changes):
    """A :class:`~fpscope.profile.Profile` from what ``ctx`` knows, with ``changes`` on top.

    Unknown fields take their defaults: step_rounding (out_format, "RZ"), no output_rounding,
    e_zero None, no flushes, NaN bits of the output format's canonical quiet NaN, -0 -> +0. No
    block scales unless ``changes`` give them: the families emulate their probe rows with it at
    unit scales (:func:`scale_fields` are the scales family's).
    """
    from ..profile import Profile

    kn = ctx.known
    L = kn.get("block_size", ctx.K)
    fields = dict(  # noqa: C408 - the Profile's keyword names
        name=f"probed:{ctx.target.name}", arch="unknown", in_format=ctx.fin.name,
        b_format=ctx.fb.name if ctx.fb.name != ctx.fin.name else None,
        out_format=ctx.fout.name, block_size=L, k=ctx.K, frac_bits=kn.get("frac_bits", 24),
        alignment=kn.get("alignment", "truncate"), e_zero=kn.get("e_zero"),
        step_rounding=tuple(kn.get("step_rounding", (ctx.fout.name, "RZ"))),
        output_rounding=tuple(kn["output_rounding"]) if kn.get("output_rounding") else None,
        flush_inputs=kn.get("flush_inputs", False), flush_outputs=kn.get("flush_outputs", False),
        nan_bits=kn.get("nan_bits", default_nan_bits(ctx.fout)),
        neg_zero_to_pos=kn.get("neg_zero_to_pos", True),
        zero_sum_sign=kn.get("zero_sum_sign", "ieee"),
        operand_conversion=kn.get("operand_conversion", "truncate" if ctx.fin.name == "tf32" else None),
        k_order=kn.get("k_order"), c_entry=kn.get("c_entry", kn.get("c_entry_hint", "first")),
        status="experimental")
    fields.update(changes)
    return Profile(**fields)


def grid_format(ctx: Ctx, step_rounding=None) -> Format:
    """The coarser of the step format (``step_rounding``, default what ``ctx`` knows, else
    the output format) and the output format: its subnormals set the smallest rounding grid
    of a result (e8m13 steps into an fp32 output: 2^-139, not 2^-149)."""
    from ..profile import resolve_format

    if step_rounding is None:
        step_rounding = ctx.known.get("step_rounding", (ctx.fout.name, "RZ"))
    step = resolve_format(step_rounding[0])
    return step if step.p < ctx.fout.p else ctx.fout


def scale_fields(ctx: Ctx) -> dict:
    """The block-scale fields of a profile of ``ctx.target``: ``scale_format`` and
    ``scale_block_size`` as the scales family found them ({} for a target without scales)."""
    if not ctx.target.scaled:
        return {}
    return {"scale_format": ctx.known.get("scale_format"),
            "scale_block_size": ctx.known.get("scale_block_size")}


def default_nan_bits(fmt: Format) -> int:
    """All-ones exponent and significand, sign clear (NVIDIA's canonical NaN: 0x7FFFFFFF, 0x7FFF)."""
    return (1 << (fmt.bits - 1)) - 1


def same_bits(x, y) -> np.ndarray:
    """Elementwise bitwise equality of float64 arrays, every NaN equal to every NaN."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    nan = np.isnan(x) | np.isnan(y)
    return np.where(nan, np.isnan(x) & np.isnan(y), x.view(np.uint64) == y.view(np.uint64))
