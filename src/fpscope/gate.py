"""Regression gates: re-reveal a baseline record's target live and compare (``fpscope gate``).

A baseline is a reveal record (``fpscope reveal --record``). The gate rebuilds its target from
the record's ``"target"`` spec (as ``fpscope verify`` does; another target name, or another
environment with ``env``, may be given), reveals the live tree and node arithmetic with the
baseline's probe seed and compares the two with :func:`fpscope.diff.diff_trees`; then it runs
the live op on generated inputs of every distribution (uniform, normal, wide exponents,
cancellation; factor pairs for ops with products) and compares its output bits with the
baseline record's replay on the same inputs (:func:`fpscope.verify.compare_live`). Policies:

* ``bitwise``: pass only when the tree and the whole node arithmetic are the same AND every live
  output equals the baseline's replay bit for bit. Same structure but other bits fails as an
  "unmodelled difference" (the op changed in something no record models), with a witness;
* ``tolerant``: pass when every live output is within ``units`` units of u * sum|terms| of the
  baseline's replay on the same inputs (u = 2^-p, the unit roundoff of the output format, the
  terms the summands or exact products): a reordering or an FMA change moves a result by a few
  units, a narrowed accumulator by orders of magnitude (fpscope NUMERICS.md section 4);
* ``record``: always pass; the live record is written (by default next to the baseline, named
  ``<stem>.new.json``).

Collectives (records whose target has ``"communication"``): the live ranks start with the
baseline's algorithm variables (``communication.algorithm_env``, e.g. the ``OMPI_MCA_coll_tuned_*``
choice it was revealed under), then ``env`` on top, so ``--env
OMPI_MCA_coll_tuned_allreduce_algorithm=4`` changes that one variable; a change of these
variables is named in the verdict. ``bitwise`` also fails when the live ranks did not all
receive identical bits (the rank-identity check).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from .accuracy import DEFAULT_SAMPLES, record_accuracy
from .diff import DiffError, DiffResult, diff_trees, side_from_record
from .record import RecordError, load_record, probe_record, write_record
from .record import reveal_record as build_reveal_record
from .targets import make_target
from .targets.base import Target
from .tree import TreeError

__all__ = ["POLICIES", "GateError", "GateResult", "default_record_path", "gate",
           "reveal_record", "target_from_record"]

POLICIES = ("bitwise", "tolerant", "record")

#: the probe conditions of a record's "target" spec that make_target takes
_CONDITION_KEYS = ("n", "shape", "dtype", "layout", "offset", "threads", "axis", "index", "env",
                   "output", "batched", "world_size", "backend")


class GateError(ValueError):
    """Bad input to a gate: an unreadable or unsuitable baseline, a bad option, a record path
    that exists. The message is one line."""


def target_from_record(rec: dict, where: str = "record", name: str | None = None, **overrides) -> Target:
    """Rebuild the target of a reveal record from its ``"target"`` spec.

    Args:
        rec: a validated reveal record (:func:`fpscope.record.load_record`).
        where: the record's path or label, for messages.
        name: target name to use instead of the record's (same probe conditions).
        overrides: probe conditions replacing the record's (n, shape, dtype, layout, offset,
            threads, axis, index, device).

    Returns:
        A :class:`fpscope.targets.base.Target`; the caller closes it.

    Raises:
        GateError: the record names no target.
        fpscope.targets.base.TargetError: the target cannot be built.
    """
    spec = dict(rec["target"])
    name = name or spec.get("name")
    if callable(name) and not isinstance(name, str):  # a Python function (the Python API)
        pass
    elif not name or not isinstance(name, str):
        raise GateError(f"{where}: the target has no name")
    root = spec.get("import_root")
    if isinstance(root, str) and root not in sys.path:
        sys.path.insert(0, root)  # where the record's user module was imported from
    kw = {k: spec[k] for k in _CONDITION_KEYS if spec.get(k) is not None}
    if "shape" in kw:
        kw["shape"] = tuple(kw["shape"])
        kw.pop("n", None)
    if "shape" in overrides or "n" in overrides:
        kw.pop("shape", None)
        kw.pop("n", None)
    kw.update({k: v for k, v in overrides.items() if v is not None})
    if "shape" in kw and kw["shape"] is not None:
        kw["shape"] = tuple(kw["shape"])
    return make_target(name, **kw)


def baseline_candidates(tree, label: str = "baseline") -> list | str:
    """A baseline's tree as the first candidate of a live reveal (proven with n - 1 probes
    when the op still adds that way: :mod:`fpscope.reveal.candidates`), then the built-in
    ones; "auto" where the tree cannot be a candidate (multi-way nodes, a "C" leaf).
    ``label`` names the baseline in the record's ``probe.checks.candidate``."""
    from .reveal.candidates import of_tree

    if tree is None or tree.has_c or tree.max_fan_in() > 2:
        return "auto"
    return [of_tree(tree, f"the baseline's tree ({label})")]


def reveal_record(target: Target, seed: int = 0, samples: int = DEFAULT_SAMPLES,
                  candidates="auto"):
    """Reveal ``target`` and build its reveal record (the same keys as ``fpscope reveal
    --record``, with ``"accuracy"`` measured on ``samples`` inputs per distribution).

    Returns:
        (record dict, :class:`fpscope.reveal.RevealResult`, failure): ``failure`` is the
        :class:`fpscope.reveal.RevealError` of a failed replay check (the tree is still
        recorded), else None. ``candidates``: as :func:`fpscope.reveal.reveal` takes them.

    Raises:
        fpscope.reveal.RevealError: a check failed before a tree was found (nondeterminism,
            inconsistent probes, n too large).
        fpscope.targets.base.TargetError, fpscope.masks.MaskError: see :func:`fpscope.reveal.reveal`.
    """
    from .environment import capture_environment
    from .reveal import RevealError, reveal

    failure = None
    try:
        res = reveal(target, seed=seed, replay_samples=samples, candidates=candidates)
    except RevealError as exc:
        if getattr(exc, "result", None) is None:
            raise
        res, failure = exc.result, exc
    record = build_reveal_record(target, res, seed, capture_environment(),
                                 accuracy=record_accuracy(target, samples=samples))
    return record, res, failure


def default_record_path(baseline) -> Path:
    """Where ``--policy record`` writes without ``--record``: ``base.json`` -> ``base.new.json``
    in the baseline's folder."""
    p = Path(baseline)
    return p.with_name(p.name.removesuffix(".json") + ".new.json")


@dataclass
class GateResult:
    """The verdict of a gate.

    Attributes:
        policy: "bitwise", "tolerant" or "record".
        passed: the gate's verdict (exit code 0 when True, 1 when False).
        reason: one line: why it passed or failed.
        diff: the structural comparison of baseline (A) and live (B): tree and node arithmetic.
        bits: the live op's outputs against the baseline's replay on the same generated inputs
            (:func:`fpscope.verify.compare_live`), or None (probe records).
        accuracy: the live op's accuracy (:func:`fpscope.accuracy.measure_accuracy`; a
            ``{"skipped": reason}`` dict when it could not be measured).
        baseline_accuracy: the baseline record's "accuracy" object, or None (older records).
        units: the budget of the tolerant policy, in units of u * sum|terms|.
        record_path: where the live record was written, or None.
    """

    policy: str
    passed: bool
    reason: str
    baseline: str
    target: str
    diff: DiffResult
    bits: dict | None = None
    accuracy: dict | None = None
    baseline_accuracy: dict | None = None
    units: float | None = None
    record_path: str | None = None
    notes: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"verdict": "pass" if self.passed else "fail", "passed": self.passed,
                "policy": self.policy, "reason": self.reason, "baseline": self.baseline,
                "target": self.target, "units": self.units, "diff": self.diff.to_dict(),
                "bits": self.bits, "accuracy": self.accuracy,
                "baseline_accuracy": self.baseline_accuracy,
                "record": self.record_path, "notes": self.notes}

    def to_text(self) -> str:
        head = "PASSED" if self.passed else "FAILED"
        lines = [f"gate {head} (policy {self.policy}): {self.reason}",
                 f"A = baseline {self.baseline}; B = live {self.target}"]
        if not self.diff.same:  # the diff without its verdict line (the reason holds it)
            lines.extend(self.diff.to_text().splitlines()[1:])
        if self.bits is not None:
            lines.append("live bits vs baseline replay: " + _bits_text(self.bits))
            m = self.bits.get("first_mismatch")
            if m:
                lines.append(f"  witness ({m['distribution']}): baseline replay {m['baseline']}, "
                             f"live {m['live']} ({_g(m['units'])} units); --format json has "
                             f"the inputs")
        if self.accuracy is not None or self.bits is not None:  # probe gates measure none
            lines.append("accuracy (live): " + _acc_text(self.accuracy))
        if self.baseline_accuracy is not None:
            lines.append("accuracy (baseline): " + _acc_text(self.baseline_accuracy))
        lines.extend(self.notes)
        if self.record_path:
            lines.append(f"record written to {self.record_path}")
        return "\n".join(lines)


def _bits_text(bits: dict) -> str:
    parts = ", ".join(f"{k} {v['matched']}/{v['samples']}"
                      for k, v in bits["by_distribution"].items())
    return (f"{bits['matched']}/{bits['samples']} outputs bit-identical ({parts}); largest "
            f"difference {_g(bits['max_units'])} units of {bits['unit']}")


def _acc_text(acc: dict | None) -> str:
    if not acc:
        return "not measured"
    if acc.get("skipped"):
        return f"not measured ({acc['skipped']})"
    try:
        parts = ", ".join(f"{k} {_g(v.get('max_ulps'))}" for k, v in acc["by_distribution"].items())
        text = (f"max {_g(acc['max_ulps'])} ulps, mean {_g(acc['mean_ulps'])} ulps of "
                f"{acc['output_format']} over {acc['samples']} inputs (max by distribution: {parts})")
    except (KeyError, TypeError, AttributeError):
        return "unreadable accuracy entry"
    if acc.get("nonfinite"):
        text += f"; {acc['nonfinite']} outputs Inf or NaN"
    return text


def _algorithm_env(spec) -> dict | None:
    """The algorithm variables a collective's ranks ran with (a target spec's
    ``communication.algorithm_env``), or None for a target that is not a collective."""
    comm = spec.get("communication") if isinstance(spec, dict) else None
    if not isinstance(comm, dict):
        return None
    return {str(k): str(v) for k, v in (comm.get("algorithm_env") or {}).items()}


def _env_change(base: dict | None, live: dict | None) -> str:
    """"NAME=3 -> 4, OTHER unset -> 1" for the variables that differ, "" when none do."""
    if base is None or live is None:
        return ""
    parts = [f"{k}={base.get(k, 'unset')} -> {live.get(k, 'unset')}"
             for k in sorted(set(base) | set(live)) if base.get(k) != live.get(k)]
    return ", ".join(parts)


def _g(v) -> str:
    return "-" if v is None else f"{v:.4g}"


def _load_baseline(path) -> dict:
    from .record import validate_record

    try:
        rec = validate_record(path, "baseline") if isinstance(path, dict) else load_record(path)
    except RecordError as exc:
        raise GateError(str(exc).splitlines()[0]) from None
    if rec.get("kind", "reveal") not in ("reveal", "probe"):
        raise GateError(f"{path} is a {rec.get('kind')!r} record; gate reads reveal and probe "
                        f"records")
    return rec


def gate(
    baseline,
    target: str | None = None,
    policy: str = "bitwise",
    units: float = 4.0,
    samples: int = DEFAULT_SAMPLES,
    record: str | Path | None = None,
    force: bool = False,
    env: dict | None = None,
) -> GateResult:
    """Re-reveal the baseline's target live and judge it under ``policy`` (module docstring).

    Args:
        baseline: path of a reveal record (or a probe record: see ``fpscope gate --help``), or
            a record dict (policy "record" then needs ``record``).
        target: target name replacing the record's (same probe conditions), or a Python
            callable (:func:`fpscope.targets.make_target` takes function objects).
        policy: "bitwise", "tolerant" or "record".
        units: budget of "tolerant": the largest accepted |live - baseline replay|, in units
            of u * sum|terms| (u = 2^-p of the output format; >= 0).
        samples: generated inputs per distribution (4 distributions) for the live bits, the
            live tree's replay check and the accuracy measurement (>= 1).
        record: where to write the live record (default for "record": next to the baseline,
            see :func:`default_record_path`; other policies write only when given).
        force: replace an existing record file.
        env: environment variables for the live op, run in a child process
            (:class:`fpscope.targets.isolated.ChildTarget`); replaces the record's own "env".
            Collectives: the rank processes' variables, added to the baseline's algorithm
            variables and "env" (see the module docstring).

    Returns:
        :class:`GateResult`.

    Raises:
        GateError: bad baseline (unreadable, not JSON, unknown schema, not a reveal record,
            malformed tree), bad options, or a record file that exists without ``force``.
        fpscope.reveal.RevealError: the live op failed a reveal check (nondeterminism, ...).
        fpscope.targets.base.TargetError: the target cannot be rebuilt or the op failed.
    """
    from .record import classes_of_record
    from .reveal import RevealError
    from .verify import compare_live, merge_reports

    if policy not in POLICIES:
        raise GateError(f"unknown policy {policy!r}; known: {', '.join(POLICIES)}")
    if not units >= 0:
        raise GateError(f"--units must be 0 or more, got {units}")
    if samples < 1:
        raise GateError(f"--samples must be at least 1, got {samples}")
    rec = _load_baseline(baseline)
    if isinstance(baseline, dict):  # a record from the Python API: no file, no default path
        if policy == "record" and record is None:
            raise GateError("policy 'record' with a baseline dict needs record=PATH")
        baseline = "baseline"
    if rec.get("kind") == "probe":
        return _gate_probe(rec, str(baseline), target, policy, record, force)
    try:
        base = side_from_record(rec, str(baseline))
    except (DiffError, RecordError, TreeError, ValueError) as exc:
        raise GateError(f"{baseline}: {str(exc).splitlines()[0]}") from None
    if base.arith is None:
        raise GateError(f"{baseline}: the record names no accumulator format, so there is no "
                        f"arithmetic to replay")
    out = Path(record) if record is not None else (
        default_record_path(baseline) if policy == "record" else None)
    if out is not None and out.is_dir():
        raise GateError(f"{out} is a folder; give a file name to --record")
    if out is not None and out.exists() and not force:
        raise GateError(f"{out} exists; choose another name (--record) or pass --force to replace it")
    if out is not None and not out.parent.is_dir():
        raise GateError(f"cannot write {out}: folder {out.parent} does not exist")
    seed = (rec.get("probe") or {}).get("seed", 0)
    seed = seed if isinstance(seed, int) else 0
    checks = (rec.get("probe") or {}).get("checks") or {}
    shared = not str(checks.get("shared_k_order_outputs", "")).startswith("no:")
    base_algo = _algorithm_env(rec.get("target"))
    if base_algo is not None:  # a collective: the baseline's algorithm variables, then env
        env = {**base_algo, **(rec["target"].get("env") or {}), **(env or {})} or None
    overrides = {"env": env} if env is not None else {}
    live_target = target_from_record(rec, str(baseline), name=target, **overrides)
    own_checks: dict = {}
    try:
        if live_target.n != base.tree.n:
            raise GateError(f"{baseline}: the tree has {base.tree.n} leaves but the target has "
                            f"{live_target.n}")
        try:
            live_rec, _, failure = reveal_record(live_target, seed=seed, samples=samples,
                                                 candidates=baseline_candidates(
                                                     base.tree, str(baseline)))
        except RevealError as exc:  # no live tree: the bits still decide (and say why)
            live_rec, failure = None, exc
        base_classes = classes_of_record(rec)
        if base_classes:  # every class of outputs against its own tree and arithmetic
            bits = merge_reports([
                compare_live(live_target, t, a, samples=samples, seed=seed + 1, positions=m)
                for t, m, a in base_classes])
        else:
            bits = compare_live(live_target, base.tree, base.arith, samples=samples,
                                seed=seed + 1, first_output_only=not shared)
        if hasattr(live_target, "checks"):  # collectives: did every rank receive the same bits
            own_checks = live_target.checks()
        live_algo = _algorithm_env(live_target.spec())
    finally:
        live_target.close()
    notes = []
    ident = str(own_checks.get("rank_identity", ""))
    ranks_differ = ident.startswith("no:")  # the bits compared are rank 0's
    if ranks_differ:
        notes.append(f"note: rank identity of the live op: {ident}")
    algo_change = _env_change(base_algo, live_algo)
    if live_rec is None:
        d = DiffResult("tree", f"the live op could not be revealed ({failure.kind}: "
                       f"{str(failure).splitlines()[0]})", False)
        acc, failure = None, None
        if out is not None:
            notes.append("note: no live record written (the live op could not be revealed)")
            out = None
    else:
        d = diff_trees(base, side_from_record(live_rec, "live"), seed=seed)  # classes too
        acc = live_rec.get("accuracy")
        live_checks = (live_rec.get("probe") or {}).get("checks") or {}
        if live_checks.get("candidate"):  # how the live tree was found
            notes.append(f"live tree proven as a candidate: {live_checks['candidate']}")
    if failure is not None:
        notes.append(f"note: the live tree does not replay bit for bit: {failure}")
    differ = bits["samples"] - bits["matched"]
    if policy == "bitwise":
        passed = d.same and bits["bit_exact"] and not ranks_differ
        if d.same and bits["bit_exact"] and ranks_differ:
            reason = (f"{d.verdict}; rank 0's bits are the baseline's, but the live ranks did "
                      f"not all receive identical bits")
        elif d.same and not bits["bit_exact"]:
            reason = (f"unmodelled difference: tree and node arithmetic are the same, but the "
                      f"live op differs from the baseline's replay on {differ} of "
                      f"{bits['samples']} generated inputs")
        elif not d.same:
            reason = (f"{d.verdict}; live bits differ from the baseline's replay on {differ} of "
                      f"{bits['samples']} generated inputs")
        else:
            reason = (f"{d.verdict}; {bits['samples']} generated inputs give the baseline's "
                      f"bits")
    elif policy == "tolerant":
        passed = bits["max_units"] <= units
        rel = "<=" if passed else ">"
        reason = (f"{d.verdict}; largest difference from the baseline's replay "
                  f"{_g(bits['max_units'])} units {rel} budget {units:g} units (of u * sum|terms|)")
    else:
        passed = True
        reason = f"{d.verdict}; " + ("live record written" if live_rec is not None
                                     else "no live record to write")
    if algo_change:
        reason += f"; the ranks' algorithm variables differ from the baseline's: {algo_change}"
    written = None
    if out is not None:
        write_record(live_rec, out, overwrite=force)
        written = str(out)
    return GateResult(policy=policy, passed=passed, reason=reason, baseline=str(baseline),
                      target=live_target.name, diff=d, bits=bits,
                      accuracy=acc, baseline_accuracy=rec.get("accuracy"),
                      units=float(units) if policy == "tolerant" else None,
                      record_path=written, notes=notes)


def _gate_probe(rec: dict, baseline: str, target: str | None, policy: str, record, force: bool
                ) -> GateResult:
    """Re-probe a probe record's target and compare the profiles (fpscope.diff): "bitwise"
    passes when the arithmetic is the same and the live profile validates bit for bit;
    "record" writes the live probe record; "tolerant" has no meaning for node arithmetic."""
    from .diff import diff_profiles
    from .environment import capture_environment
    from .probes.blackbox import ProbeError, make_matrix_target
    from .probes.driver import probe
    from .profile import Profile

    if policy == "tolerant":
        raise GateError("--policy tolerant applies to reveal records; a probe record is gated "
                        "bitwise (or use --policy record)")
    t = rec.get("target") or {}
    spec = target or t.get("spec")
    if not rec.get("profile"):
        raise GateError(f"{baseline}: the baseline probe found no profile (the op did not fit a "
                        f"fused-block model), so there is no arithmetic to gate")
    if not isinstance(spec, str):
        raise GateError(f"{baseline}: the probe record names no target spec (written by an "
                        f"older fpscope?); give --target")
    try:
        base_profile = Profile.from_dict(rec["profile"])
    except ValueError as exc:
        raise GateError(f"{baseline}: bad profile: {str(exc).splitlines()[0]}") from None
    out = Path(record) if record is not None else (
        default_record_path(baseline) if policy == "record" else None)
    if out is not None and out.is_dir():
        raise GateError(f"{out} is a folder; give a file name to --record")
    if out is not None and out.exists() and not force:
        raise GateError(f"{out} exists; choose another name (--record) or pass --force to replace it")
    probe_info = rec.get("probe") or {}
    chain = None
    if probe_info.get("chain") is not None:  # the chain profile given to the baseline probe
        try:
            chain = Profile.from_dict(probe_info["chain"])
        except ValueError as exc:
            raise GateError(f"{baseline}: bad chain profile: {str(exc).splitlines()[0]}") from None
    try:
        live_target = make_matrix_target(spec, t.get("in_format"), t.get("out_format"),
                                          k=probe_info.get("k"), b_format=t.get("b_format"),
                                          scale_block_size=t.get("scale_block_size"),
                                          scale_format=t.get("scale_format"))
        rep = probe(live_target, t.get("in_format"), t.get("out_format"), k=probe_info.get("k"),
                    library_k=probe_info.get("library_k"), chain=chain,
                    b_format=t.get("b_format"))
    except ProbeError as exc:
        raise GateError(str(exc)) from None
    if rep.profile is None:
        d = DiffResult("profile", "different arithmetic", False,
                       notes=[f"the live op does not fit a fused-block model: {rep.reason}"])
    else:
        d = diff_profiles(base_profile, rep.profile)
    notes = []
    if rep.validation is not None and not rep.validation["accepted"]:
        notes.append("note: the live profile does not validate bit for bit against the live op")
    if policy == "bitwise":
        passed = d.same and rep.accepted
        reason = d.verdict if rep.accepted else f"{d.verdict}; live validation failed"
    else:
        passed, reason = True, f"{d.verdict}; live record written"
    written = None
    if out is not None:
        write_record(probe_record(rep.to_dict(), spec, capture_environment()), out,
                     overwrite=force)
        written = str(out)
    return GateResult(policy=policy, passed=passed, reason=reason, baseline=baseline,
                      target=spec, diff=d, record_path=written, notes=notes)
