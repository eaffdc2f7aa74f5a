"""Infer a complete node-arithmetic profile from a black-box ``D = op(A, B, C)`` (issue 4).

:func:`probe` runs the probe families of NUMERICS.md section 3 in dependency order:

    determinism -> conversion (tf32) -> structure (L, stages, k_order, c entry) -> precision (F)
    -> alignment (product and c paths, c entry) -> subnormal (flush in/out)
    -> rounding (step format and mode) -> specials (-0, NaN bits, Inf, overflow) -> zeros (e_zero)
    -> one-shot fingerprint

assembles a :class:`~fpscope.profile.Profile` (status "experimental"; parameters that no input of
these formats can show take the documented default of their family and are listed as not
observable), checks its zero rules once more with everything else known
(:func:`fpscope.probes.specials.zero_rules`), and proves it by
:func:`fpscope.probes.validate.validate` (random differential testing against the vectorised
engine). When a family's outputs contradict the fused-block model,
the report says "does not fit a fused-block model" with the reason, and no profile is invented.

Block-scaled targets (MX / NVFP4, ``target(A, B, C, scale_a, scale_b)``;
:attr:`~fpscope.probes.blackbox.MatrixTarget.scaled`): the scales family's layout probes
(:func:`fpscope.probes.scales.layout`: scale block size, scale format) run right after
determinism; every other family runs at unit scales. Then random outputs at unit scales are
sampled and, where the fused profile the families assembled does not reproduce them (the
"grouped" node of NVFP4 / MXFP4 passes every family), the node family fits the node
(:mod:`fpscope.probes.nodes`). :func:`fpscope.probes.scales.entry` then checks with scaled rows,
against the emulator, how the scales enter the node and finds e_zero where scales reach the zero
terms; the profile carries the scale fields and is validated on random scales as well.

Library level (``library_k``, CLI ``--library [K]``; targets that take any K only): after the
instruction-level families at K = ``k`` (default 32), :mod:`fpscope.probes.library` probes
calls of ``library_k`` products for split-K, the promotion interval and the partial-sum format;
the profile then carries those fields and is validated at ``library_k``. Such a GEMM adds C
after its chains (one RNE addition in the output format), which the rounding family's candidates
do not model: in library mode a failed step rounding is found again from the rows with c = 0
(:func:`fpscope.probes.library.chain_rounding`) when the structure family saw c enter last.
"""

from __future__ import annotations

import dataclasses

import time
from dataclasses import dataclass, field

from . import (
    alignment,
    conversion,
    determinism,
    fingerprint,
    library,
    nodes,
    precision,
    rounding,
    scales,
    specials,
    structure,
    subnormal,
    zeros,
)
from ._common import Ctx, Finding, candidate_profile, scale_fields
from .blackbox import MatrixTarget, ProbeError, make_matrix_target
from .validate import validate

__all__ = ["DEFAULT_K", "DEFAULT_LIBRARY_K", "ProbeReport", "probe"]

DEFAULT_LIBRARY_K = library.DEFAULT_LIBRARY_K

SCHEMA = "fpscope.probe/1"
#: K used for targets that take any K (a GEMM); the profile then describes calls of this K.
DEFAULT_K = 32

#: Families whose failure leaves no profile to build.
_CRITICAL = {"deterministic", "lane_independent", "block_size", "c_entry", "frac_bits",
             "alignment", "c_alignment", "step_rounding", "operand_conversion",
             "scale_block_size", "scale_format"}


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
        library_k: K of the library-level probe (None: not run); the validation then ran at
            this K.
        nearest: when no node kind reproduces the sampled outputs, the profile that came
            closest (a hypothesis the node finding's evidence contradicts; never validated,
            never ``profile``); else None.
        chain: the chain profile given with the library level (``Profile.to_dict()``), or None;
            kept so that ``fpscope gate`` can re-probe the same way.
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
    library_k: int | None = None
    chain: dict | None = None
    nearest: object = None

    @property
    def accepted(self) -> bool:
        return bool(self.fits and self.profile is not None and self.validation
                    and self.validation["accepted"])

    @property
    def not_observable(self) -> list[str]:
        return [f.feature for f in self.findings if not f.observable]

    def features(self) -> dict:
        return {f.feature: f.value for f in self.findings}

    def _superseded(self, f: Finding) -> bool:
        """A family's value that the final profile overrides: a node-kind finding (e.g. the
        grouped node of NVFP4, found after the fused-block families read F at unit scales) or a
        later family (the zeros family's choice of step grid) replaced it."""
        p = self.profile
        if p is None or f.feature not in {x.name for x in dataclasses.fields(p)}:
            return False
        v, have = f.value, getattr(p, f.feature)
        if isinstance(v, list) and isinstance(have, (list, tuple)):  # step_rounding, ...
            return tuple(v) != tuple(have)
        return isinstance(v, (int, str)) and not isinstance(v, bool) and have != v

    def to_dict(self) -> dict:
        return {
            "schema": SCHEMA, "target": self.target, "k": self.k,
            "library_k": self.library_k, "chain": self.chain, "fits": self.fits,
            "accepted": self.accepted, "reason": self.reason, "features": self.features(),
            "not_observable": self.not_observable,
            "findings": [f.to_dict() for f in self.findings],
            "fingerprint": self.fingerprint, "fingerprint_evidence": self.fingerprint_evidence,
            "profile": self.profile.to_dict() if self.profile is not None else None,
            "nearest": self.nearest.to_dict() if self.nearest is not None else None,
            "validation": self.validation, "seconds": round(self.seconds, 3),
            "calls": self.calls, "rows": self.rows,
        }

    def to_text(self) -> str:
        t = self.target
        ins = (f"{t['in_format']} x {t['b_format']}" if t.get("b_format") else t["in_format"])
        if t.get("scale_block_size"):
            ins += (f" with {t.get('scale_format') or 'float'} block scales per "
                    f"{t['scale_block_size']}")
        lines = [f"{t['name']}: {ins} inputs, {t['out_format']} output, K = {self.k}"]
        width = max([17, *(len(f.feature) for f in self.findings)])  # the label column
        for f in self.findings:
            val = f.value if f.value is not None else "-"
            if isinstance(val, list) and f.feature == "step_rounding":
                val = " ".join(map(str, val))
            elif f.feature == "nan_bits" and isinstance(val, int):
                val = f"0x{val:X}"
            tag = "" if f.observable else "  [not observable]"
            if not f.fits:
                tag += "  [DOES NOT FIT]"
            elif f.observable and self._superseded(f):
                have = getattr(self.profile, f.feature)
                have = " ".join(map(str, have)) if isinstance(have, (list, tuple)) else have
                tag += f"  [replaced: the profile's {f.feature} is {have}]"
            shown = f"{val!s:12s} " if len(str(val)) <= 12 else f"{val} -- "  # value, then note
            lines.append(f"  {f.feature:{width}s} {shown}{f.note}{tag}")
        if self.fingerprint:
            lines.append("  " + self.fingerprint)
        if self.profile is not None:
            p = self.profile
            lines += _profile_lines("profile", p)
            if self.library_k is not None:
                lines.append(f"library (K = {self.library_k}): k = {p.k}, split_k = {p.split_k}"
                             f" ({p.split_k_order}, partials {p.split_k_format or p.out_format}), "
                             f"promotion_interval = {p.promotion_interval}")
        if self.nearest is not None:
            lines += _profile_lines("nearest (NOT reproducing the node finding's evidence rows)",
                                    self.nearest)
            ev = next((f.evidence for f in self.findings if f.feature == "node" and not f.fits
                       and f.evidence), None)
            if ev:
                e = ev[0]
                prods = ", ".join(f"k{q['k']}: {q['a']}*{q['b']}" for q in e["products"][:6])
                more = len(e["products"]) - 6
                prods += f" and {more} more" if more > 0 else ""
                lines.append(f"  first sample it misses: {prods or 'no nonzero product'}; "
                             f"c = {e['c']}; got {e['d']}, {e['meaning']}")
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
                if "scale_a" in fm:
                    prods += (f"; scales a {' '.join(fm['scale_a'])}, b "
                              f"{' '.join(fm['scale_b'])}")
                lines.append(f"  first mismatch ({fm['generator']}), shrunk to "
                             f"{fm.get('nonzero_products')} product(s): {prods}; c = {fm['c']}; "
                             f"got {fm.get('got', fm['got_full'])}, "
                             f"profile gives {fm.get('expected', fm['expected_full'])}")
        elif self.profile is not None:
            lines.append("validation: not run")
        lines.append(f"probing: {self.rows} probe rows in {self.calls} calls, {self.seconds:.2f} s")
        return "\n".join(lines) + "\n"


def _profile_lines(label: str, p) -> list[str]:
    """The report's lines of profile ``p``: block, F, alignment, rounding, c entry, e_zero,
    flushes and status; block scales and the node kind where the profile has them."""
    stages = f" x {p.stages}" if p.stages > 1 else ""
    lines = [f"{label}: L = {p.block_size}{stages}, F = {p.frac_bits}, {p.alignment}, "
             f"rho = {' '.join(p.step_rounding)}, c {p.c_entry}, e_zero = {p.e_zero}, "
             f"flush in/out = {p.flush_inputs}/{p.flush_outputs} (status {p.status})"]
    if p.scale_format is not None:
        lines.append(f"block scales: {p.scale_format} per {p.scale_block_size} elements of K")
    if p.node != "fused":
        from ..fit import node_text

        lines.append(node_text(p).lstrip(", "))
    return lines


#: Features whose misfit can mean another node kind (a rounded tree, two stages): only these
#: send the op to the node family; a special-value rule no profile expresses stays a misfit.
_NODE_SHAPE = {"block_size", "stages", "k_order", "c_entry", "frac_bits", "alignment",
               "c_alignment", "step_rounding"}


def _deterministic(rep: ProbeReport) -> bool:
    """The op is deterministic and lane independent (no node kind describes it otherwise)."""
    return all(f.fits for f in rep.findings if f.feature in ("deterministic", "lane_independent"))


def _families(ctx: Ctx):
    yield determinism.run
    if ctx.target.scaled:
        yield scales.layout
    yield conversion.run
    yield structure.run
    yield precision.run
    yield alignment.run
    yield subnormal.run
    yield rounding.run
    yield specials.run
    yield zeros.run


def probe(target, in_format: str | None = None, out_format: str | None = None, *,
          k: int | None = None, cases: int = 2000, seed: int = 0,
          library_k: int | None = None, chain=None, b_format: str | None = None) -> ProbeReport:
    """Infer the node arithmetic of ``target`` and validate it.

    Args:
        target: a :class:`MatrixTarget`, a target name (``sim:PRESET``, ``mmasim:PRESET``,
            ``torch.matmul``, ``package.module:function``; :func:`make_matrix_target`) or a
            Python callable ``(A, B, C) -> D``. A block-scaled target (MX / NVFP4 presets; a
            :class:`~fpscope.probes.blackbox.CallableTarget` with ``scale_block_size``) is
            called ``(A, B, C, scale_a, scale_b)`` (module docstring); its K must be a multiple
            of its scale block size.
        in_format: A's format name, and B's unless ``b_format`` (must match a
            MatrixTarget's own).
        out_format: C/D format name (default: the target's; callables: fp32).
        k: K of the probe calls for targets that take any K (default :data:`DEFAULT_K`).
        cases: random outputs for the closed-loop validation (0: skip it).
        seed: seed of the random probes and the validation.
        library_k: also probe the library level (split-K, promotion interval, partial format;
            :mod:`fpscope.probes.library`) on calls of this many products (a multiple of the
            instruction-level K; :data:`DEFAULT_LIBRARY_K` is a good choice). Targets that take
            any K only. The profile then carries the library fields and is validated at this K.
        chain: with ``library_k``: the chains' arithmetic as a :class:`~fpscope.profile.Profile`
            or preset name, instead of probing the instruction level (needed when the split-K
            partials are rounded to a narrow format: then no call shows a chain unrounded). Its
            formats must be the target's; ``library_k`` a multiple of its k.
        b_format: B's format name where it differs from A's (a mixed-input instruction such
            as e4m3 x e5m2; every probe family forms its products from an A value of
            ``in_format`` and a power of two of ``b_format``).

    Returns:
        :class:`ProbeReport`.

    Raises:
        ProbeError: the target fails (raises, wrong shape, values outside its format), the
            formats do not match it, or a block-scaled target gets a K that is not a multiple
            of its scale block size or the library level.
    """
    t0 = time.perf_counter()
    if isinstance(target, str):
        target = make_matrix_target(target, in_format, out_format, k=k, b_format=b_format)
    elif not isinstance(target, MatrixTarget):
        from .blackbox import CallableTarget

        if in_format is None:
            raise ProbeError("a callable target needs in_format")
        target = CallableTarget(target, in_format, out_format or "fp32", k=k, b_format=b_format)
    for what, given, have in (("in_format", in_format, target.in_format),
                              ("b_format", b_format, target.fb.name),
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
    if target.scaled:
        if K % target.scale_block_size:
            raise ProbeError(f"{target.name} takes a block scale per {target.scale_block_size} "
                             f"elements of K: K = {K} is not a multiple of it")
        if library_k is not None or chain is not None:
            raise ProbeError(f"{target.name} is block-scaled: the library level (split-K, "
                             f"promotion) is probed for GEMMs without block scales only")
    if chain is not None:
        if library_k is None:
            raise ProbeError("a given chain profile needs the library level (library_k, "
                             "CLI --library)")
        if isinstance(chain, str):
            from ..profile import get_profile

            try:
                chain = get_profile(chain)
            except ValueError as exc:
                raise ProbeError(str(exc)) from None
        from ..emulate.library import has_library_level, instruction_level
        from ..profile import resolve_format
        from .blackbox import refuse_block_scales

        refuse_block_scales(chain, f"chain profile {chain.name}")
        if (*(resolve_format(f).name for f in chain.operand_formats),
                resolve_format(chain.out_format).name) != \
                (target.fin.name, target.fb.name, target.out_format):
            raise ProbeError(f"chain profile {chain.name} is {'/'.join(chain.operand_formats)} -> "
                             f"{chain.out_format}, {target.name} {target.fin.name}/"
                             f"{target.fb.name} -> {target.out_format}")
        if has_library_level(chain):
            chain = instruction_level(chain)
        K = chain.k
    if library_k is not None:
        if target.k is not None:
            raise ProbeError(f"the library level needs a target that takes any K (a GEMM); "
                             f"{target.name} takes K = {target.k}")
        if library_k < 2 * K or library_k % K:
            raise ProbeError(f"library K = {library_k} must be a multiple of the instruction-"
                             f"level K = {K}, at least {2 * K}")
    rep = ProbeReport(target=target.describe(), k=K, library_k=library_k,
                      chain=None if chain is None else chain.to_dict())
    calls0 = target.calls
    lib = None
    view = target
    if library_k is not None:
        # first the K order of long calls (split-K slices, promotion interval) in units of K:
        # with split-K the instruction level then runs inside slice 0, where K is one chain
        bits = None if chain is None else _chain_bits(chain.step_rounding, chain.frac_bits)
        lib = library.run(target, library_k, unit=K, seed=seed, chain_bits=bits,
                          k_order=None if chain is None else chain.k_order)
        if chain is not None or (lib.fields is not None and lib.fields["split_k_format"]):
            return _finish_given_chain(rep, target, lib, chain, library_k, cases, seed, t0,
                                       calls0)
        if lib.fields is not None and lib.fields["split_k"] > 1:
            view = library.SliceView(target, lib.fields["split_k"])
    # C added after the chains (split-K, promotion): the instruction level sees that addition
    c_after = bool(lib is not None and lib.fields is not None and (
        lib.fields["split_k"] > 1 or lib.fields["promotion_interval"] is not None))
    ctx = Ctx(view, K, seed=seed)
    for fam in _families(ctx):
        found: list[Finding] = fam(ctx)
        if c_after and fam is rounding.run and any(not f.fits for f in found):
            found = library.chain_rounding(ctx)
        rep.findings.extend(found)
        bad = [f for f in found if not f.fits]
        if bad:
            rep.fits = False
            rep.reason = f"{bad[0].feature}: {bad[0].note}"
            if any(f.feature in _CRITICAL for f in bad):
                break
    rep.fingerprint, rep.fingerprint_evidence = fingerprint.run(ctx)
    node_profile = None
    if not rep.fits and lib is None and _deterministic(rep) and any(
            f.feature in _NODE_SHAPE for f in rep.findings if not f.fits):
        # not a fused block: does another node kind fpscope models reproduce the op?
        found, node_profile, rep.nearest = nodes.run(ctx, seed=seed)
        rep.findings.append(found)
        if node_profile is not None:
            rep.fits, rep.reason, rep.profile = True, "", node_profile
        else:
            rep.reason += f"; {found.note}"
    elif rep.fits and target.scaled:
        # the grouped node fits every family at unit scales (probes.nodes): sample the op
        found, node_profile, rep.nearest = _scaled_node(ctx, seed)
        if found is not None:
            rep.findings.append(found)
            if node_profile is None:
                rep.fits, rep.reason = False, f"{found.feature}: {found.note}"
            else:
                rep.profile = node_profile
    if node_profile is None and (
            rep.fits or not any(f.feature in _CRITICAL for f in rep.findings if not f.fits)):
        try:
            ctx.known.setdefault("c_entry", ctx.known.get("c_entry_hint", "first"))
            rep.profile = candidate_profile(
                ctx, evidence=f"fpscope probe of {target.name} (K = {K})", **scale_fields(ctx))
        except ValueError as exc:
            rep.fits = False
            rep.reason = f"the parameters found do not form a valid profile: {exc}"
    if (rep.fits and node_profile is None and not target.scaled and lib is None
            and rep.profile is not None):
        found, rep.profile = specials.zero_rules(ctx, rep.profile)
        rep.findings.extend(found)
        if any(not f.fits for f in found):
            rep.fits, rep.reason = False, f"{found[0].feature}: {found[0].note}"
    if target.scaled and rep.fits and rep.profile is not None:
        found, rep.profile = scales.entry(ctx, rep.profile)
        for f in found:
            old = next((i for i, g in enumerate(rep.findings) if g.feature == f.feature), None)
            if old is None:
                rep.findings.append(f)
            else:  # e_zero: the zero-term rows with scales reach where unit scales do not
                rep.findings[old] = f
        bad = [f for f in found if not f.fits]
        if bad:
            rep.fits, rep.reason = False, f"{bad[0].feature}: {bad[0].note}"
    rep.rows = ctx.rows_run
    vk = None
    if lib is not None:
        vk = _library(ctx, rep, lib, library_k, seed)
    if rep.profile is not None and cases > 0 and (vk is not None or library_k is None):
        rep.validation = validate(target, rep.profile, cases=cases, seed=seed + 1, K=vk)
        if not rep.validation["accepted"] and rep.fits:
            rep.fits = False
            rep.reason = (f"the profile found by the probes mismatches "
                          f"{rep.validation['mismatched']} of {rep.validation['cases']} random outputs")
    rep.calls = target.calls - calls0
    rep.seconds = time.perf_counter() - t0
    return rep


def _scaled_node(ctx: Ctx, seed: int):
    """(None, None, None) when the fused profile the families assembled reproduces random
    outputs of a block-scaled op at unit scales; else the node family's (Finding, profile or
    None, nearest or None) fitted to those outputs (:func:`fpscope.probes.nodes.fit_samples`)."""
    from ..fit import unmatched

    rec = nodes.sample(ctx, samples=4096, seed=seed)
    try:
        fused = candidate_profile(ctx)
    except ValueError:
        fused = None
    bad = len(rec.d) if fused is None else len(unmatched(rec, fused))
    if not bad:
        return None, None, None
    return nodes.fit_samples(ctx, rec, f"the fused profile the families assembled at unit "
                                       f"scales misses {bad} of {len(rec.d)} random outputs")


def _library(ctx: Ctx, rep: ProbeReport, lib, library_k: int, seed: int) -> int | None:
    """Join the library family's findings to the report and its fields to the profile; when C
    is added after the chains, find the chains' own c entry. Returns the K to validate at
    (None: no library-level profile)."""
    rep.findings.extend(lib.findings)
    rep.rows += lib.rows
    target = ctx.target.inner if isinstance(ctx.target, library.SliceView) else ctx.target
    if lib.fields is None or rep.profile is None:
        bad = [f for f in lib.findings if not f.fits]
        basic = any(f.feature in ("deterministic", "lane_independent") and not f.fits
                    for f in rep.findings)
        if (bad and not basic) or rep.fits:  # it explains instruction-level misfits (C last)
            rep.fits = False
            rep.reason = (f"{bad[0].feature}: {bad[0].note}" if bad else
                          "the library level is not observable with these formats")
        return None
    fields = dict(lib.fields)
    kn = ctx.known
    old = next((f for f in rep.findings if f.family == library.FAMILY
                and f.feature == "split_k_format"), None)
    if fields["split_k"] > 1 and old is not None and not old.observable and "frac_bits" in kn:
        # the library family assumed a 13-bit chain; now the chain's precision is known
        bits = _chain_bits(kn.get("step_rounding", (ctx.fout.name, "RZ")), kn["frac_bits"])
        f = library.partial_format(target, library_k, fields["split_k"], ctx.K, bits, seed=seed)
        rep.findings[rep.findings.index(old)] = f
        rep.rows += f.rows
        if not f.fits:
            rep.fits = False
            rep.reason = f"{f.feature}: {f.note}"
            return None
        fields["split_k_format"] = f.value
    try:
        prof = candidate_profile(ctx, evidence=f"fpscope probe of {target.name} (K = {ctx.K}; "
                                               f"library level at K = {library_k})", **fields)
    except ValueError as exc:
        rep.fits = False
        rep.reason = f"the library fields found do not form a valid profile: {exc}"
        return None
    if fields["split_k"] > 1 or fields["promotion_interval"] is not None:
        # C is added after the chains: the instruction level saw that addition as its c
        f, entry = library.chain_c_entry(target, prof, library_k, seed=seed)
        rep.findings.append(f)
        rep.rows += f.rows
        if entry is None:
            rep.fits = False
            rep.reason = f"{f.feature}: {f.note}"
            return None
        prof = prof.replace(c_entry=entry)
    rep.profile = prof
    return library_k


def _chain_bits(step_rounding, frac_bits: int) -> int:
    """Significand bits a chain keeps: its step format's precision, at most F + 1."""
    from ..profile import resolve_format

    return min(resolve_format(step_rounding[0]).p, frac_bits + 1)


def _finish_given_chain(rep: ProbeReport, target, lib, chain, library_k: int, cases: int,
                        seed: int, t0: float, calls0: int) -> ProbeReport:
    """The library level with the chains' arithmetic given (``chain``), or, without it,
    split-K partials in a narrow format that hide the chains from every call."""
    rep.findings.extend(lib.findings)
    rep.rows = lib.rows
    if lib.fields is not None and chain is None:
        rep.findings.append(Finding(
            library.FAMILY, "chain", None, observable=False, fits=False,
            note=f"the split-K partials are rounded to {lib.fields['split_k_format']}: no call "
                 f"shows a chain unrounded, so the instruction level cannot be probed through "
                 f"this op; give the chains' arithmetic (chain=PRESET or profile; CLI --chain)"))
    bad = [f for f in rep.findings if not f.fits]
    if bad:
        rep.fits = False
        rep.reason = f"{bad[0].feature}: {bad[0].note}"
    elif lib.fields is None:
        rep.fits = False
        rep.reason = "the library level is not observable with these formats"
    if rep.fits:
        fields = dict(lib.fields)
        prof = chain.replace(name=f"probed:{target.name}", status="experimental",
                             evidence=f"fpscope probe of {target.name}: library level at "
                                      f"K = {library_k} around the given chain {chain.name}",
                             **fields)
        if fields["split_k"] > 1 or fields["promotion_interval"] is not None:
            f, entry = library.chain_c_entry(target, prof, library_k, seed=seed)
            if entry is not None and entry != prof.c_entry:
                f.fits = False
                f.note += f", but the given chain has c_entry {prof.c_entry}"
            rep.findings.append(f)
            rep.rows += f.rows
            if not f.fits:
                rep.fits = False
                rep.reason = f"{f.feature}: {f.note}"
        rep.profile = prof
        if cases > 0:
            rep.validation = validate(target, prof, cases=cases, seed=seed + 1, K=library_k)
            if not rep.validation["accepted"] and rep.fits:
                rep.fits = False
                rep.reason = (f"the given chain with the library fields found mismatches "
                              f"{rep.validation['mismatched']} of {rep.validation['cases']} "
                              f"random outputs")
    rep.calls = target.calls - calls0
    rep.seconds = time.perf_counter() - t0
    return rep
