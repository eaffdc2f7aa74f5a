"""Infer a complete node-arithmetic profile from a black-box ``D = op(A, B, C)`` (issue 4).

:func:`probe` runs the probe families of NUMERICS.md section 3 in dependency order:

    determinism -> conversion (tf32) -> structure (L, stages, k_order, c entry) -> precision (F)
    -> alignment (product and c paths, c entry) -> subnormal (flush in/out)
    -> rounding (step format and mode) -> specials (-0, NaN bits, Inf, overflow) -> zeros (e_zero)
    -> one-shot fingerprint

assembles a :class:`~fpscope.profile.Profile` (status "experimental"; parameters that no input of
these formats can show take the documented default of their family and are listed as not
observable), and proves it by :func:`fpscope.probes.validate.validate` (random differential
testing against the vectorised engine). When a family's outputs contradict the fused-block model,
the report says "does not fit a fused-block model" with the reason, and no profile is invented.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from . import (
    alignment,
    conversion,
    determinism,
    fingerprint,
    precision,
    rounding,
    specials,
    structure,
    subnormal,
    zeros,
)
from ._common import Ctx, Finding, candidate_profile
from .blackbox import MatrixTarget, ProbeError, make_matrix_target
from .validate import validate

__all__ = ["DEFAULT_K", "ProbeReport", "probe"]

SCHEMA = "fpscope.probe/1"
#: K used for targets that take any K (a GEMM); the profile then describes calls of this K.
DEFAULT_K = 32

#: Families whose failure leaves no profile to build.
_CRITICAL = {"deterministic", "lane_independent", "block_size", "c_entry", "frac_bits",
             "alignment", "c_alignment", "step_rounding", "operand_conversion"}


@dataclass
class ProbeReport:
    """What :func:`probe` found.

    Attributes:
        target: the target's description; k: K of the probe calls.
        findings: every :class:`~fpscope.probes._common.Finding`, in run order.
        profile: the assembled profile, or None when the op does not fit the model.
        fits: False when a family contradicted the model or the validation found a mismatch.
        reason: one line, why it does not fit ("" when it fits).
        fingerprint: the one-shot fingerprint line; fingerprint_evidence its hex row.
        validation: the :func:`validate` result, or None (not run).
        seconds, calls, rows: probing cost (validation excluded from rows).
    """

    target: dict
    k: int
    findings: list = field(default_factory=list)
    profile: object = None
    fits: bool = True
    reason: str = ""
    fingerprint: str = ""
    fingerprint_evidence: dict = field(default_factory=dict)
    validation: dict | None = None
    seconds: float = 0.0
    calls: int = 0
    rows: int = 0

    @property
    def accepted(self) -> bool:
        return bool(self.fits and self.profile is not None and self.validation
                    and self.validation["accepted"])

    @property
    def not_observable(self) -> list[str]:
        return [f.feature for f in self.findings if not f.observable]

    def features(self) -> dict:
        return {f.feature: f.value for f in self.findings}

    def to_dict(self) -> dict:
        return {
            "schema": SCHEMA, "target": self.target, "k": self.k, "fits": self.fits,
            "accepted": self.accepted, "reason": self.reason, "features": self.features(),
            "not_observable": self.not_observable,
            "findings": [f.to_dict() for f in self.findings],
            "fingerprint": self.fingerprint, "fingerprint_evidence": self.fingerprint_evidence,
            "profile": self.profile.to_dict() if self.profile is not None else None,
            "validation": self.validation, "seconds": round(self.seconds, 3),
            "calls": self.calls, "rows": self.rows,
        }

    def to_text(self) -> str:
        t = self.target
        lines = [f"{t['name']}: {t['in_format']} inputs, {t['out_format']} output, K = {self.k}"]
        for f in self.findings:
            val = f.value if f.value is not None else "-"
            if isinstance(val, list) and f.feature == "step_rounding":
                val = " ".join(map(str, val))
            elif f.feature == "nan_bits" and isinstance(val, int):
                val = f"0x{val:X}"
            tag = "" if f.observable else "  [not observable]"
            if not f.fits:
                tag += "  [DOES NOT FIT]"
            lines.append(f"  {f.feature:17s} {val!s:12s} {f.note}{tag}")
        if self.fingerprint:
            lines.append("  " + self.fingerprint)
        if self.profile is not None:
            p = self.profile
            stages = f" x {p.stages}" if p.stages > 1 else ""
            lines.append(f"profile: L = {p.block_size}{stages}, F = {p.frac_bits}, "
                         f"{p.alignment}, rho = {' '.join(p.step_rounding)}, c {p.c_entry}, "
                         f"e_zero = {p.e_zero}, flush in/out = {p.flush_inputs}/{p.flush_outputs}"
                         f" (status {p.status})")
        if self.not_observable:
            lines.append("not observable (defaults used): " + ", ".join(self.not_observable))
        if not self.fits:
            lines.append(f"result: does not fit a fused-block model: {self.reason}")
        v = self.validation
        if v is not None:
            state = "ACCEPTED: bit-exact" if v["accepted"] else "REJECTED"
            lines.append(f"validation: {v['matched']}/{v['cases']} random outputs match "
                         f"({state}; {v['seconds']:.2f} s)")
            fm = v.get("first_mismatch")
            if fm:
                prods = ", ".join(f"k{p['k']}: {p['a']}*{p['b']}" for p in fm["products"])
                lines.append(f"  first mismatch ({fm['generator']}), shrunk to "
                             f"{fm.get('nonzero_products')} product(s): {prods}; c = {fm['c']}; "
                             f"got {fm.get('got', fm['got_full'])}, "
                             f"profile gives {fm.get('expected', fm['expected_full'])}")
        elif self.profile is not None:
            lines.append("validation: not run")
        lines.append(f"probing: {self.rows} probe rows in {self.calls} calls, {self.seconds:.2f} s")
        return "\n".join(lines) + "\n"


def _families(ctx: Ctx):
    yield determinism.run
    yield conversion.run
    yield structure.run
    yield precision.run
    yield alignment.run
    yield subnormal.run
    yield rounding.run
    yield specials.run
    yield zeros.run


def probe(target, in_format: str | None = None, out_format: str | None = None, *,
          k: int | None = None, cases: int = 2000, seed: int = 0) -> ProbeReport:
    """Infer the node arithmetic of ``target`` and validate it.

    Args:
        target: a :class:`MatrixTarget`, a target name (``sim:PRESET``, ``torch.matmul``,
            ``package.module:function``; :func:`make_matrix_target`) or a Python callable
            ``(A, B, C) -> D``.
        in_format: A/B format name (must match a MatrixTarget's own).
        out_format: C/D format name (default: the target's; callables: fp32).
        k: K of the probe calls for targets that take any K (default :data:`DEFAULT_K`).
        cases: random outputs for the closed-loop validation (0: skip it).
        seed: seed of the random probes and the validation.

    Returns:
        :class:`ProbeReport`.

    Raises:
        ProbeError: the target fails (raises, wrong shape, values outside its format) or the
            formats do not match it.
    """
    t0 = time.perf_counter()
    if isinstance(target, str):
        target = make_matrix_target(target, in_format, out_format, k=k)
    elif not isinstance(target, MatrixTarget):
        from .blackbox import CallableTarget

        if in_format is None:
            raise ProbeError("a callable target needs in_format")
        target = CallableTarget(target, in_format, out_format or "fp32", k=k)
    for what, given, have in (("in_format", in_format, target.in_format),
                              ("out_format", out_format, target.out_format)):
        if given is not None:
            from ..profile import resolve_format

            try:
                name = resolve_format(given).name
            except ValueError as exc:
                raise ProbeError(str(exc)) from None
            if name != have:
                raise ProbeError(f"{target.name} has {what} {have}, not {given}")
    K = target.k or k or DEFAULT_K
    if k is not None and target.k is not None and k != target.k:
        raise ProbeError(f"{target.name} takes K = {target.k}, not {k}")
    ctx = Ctx(target, K, seed=seed)
    rep = ProbeReport(target=target.describe(), k=K)
    calls0 = target.calls
    for fam in _families(ctx):
        found: list[Finding] = fam(ctx)
        rep.findings.extend(found)
        bad = [f for f in found if not f.fits]
        if bad:
            rep.fits = False
            rep.reason = f"{bad[0].feature}: {bad[0].note}"
            if any(f.feature in _CRITICAL for f in bad):
                break
    rep.fingerprint, rep.fingerprint_evidence = fingerprint.run(ctx)
    if rep.fits or not any(f.feature in _CRITICAL for f in rep.findings if not f.fits):
        try:
            ctx.known.setdefault("c_entry", ctx.known.get("c_entry_hint", "first"))
            rep.profile = candidate_profile(
                ctx, evidence=f"fpscope probe of {target.name} (K = {K})")
        except ValueError as exc:
            rep.fits = False
            rep.reason = f"the parameters found do not form a valid profile: {exc}"
    rep.rows = ctx.rows_run
    if rep.profile is not None and cases > 0:
        rep.validation = validate(target, rep.profile, cases=cases, seed=seed + 1)
        if not rep.validation["accepted"] and rep.fits:
            rep.fits = False
            rep.reason = (f"the profile found by the probes mismatches "
                          f"{rep.validation['mismatched']} of {rep.validation['cases']} random outputs")
    rep.calls = target.calls - calls0
    rep.seconds = time.perf_counter() - t0
    return rep
