"""The reveal as a whole: :func:`reveal` runs the checks, FPRev, the accumulator probe and the
replay, and returns a :class:`RevealResult`.

Order: units and absorption (:mod:`fpscope.reveal.checks`); FPRev with packed probes where the
target allows (:mod:`fpscope.reveal.staged`), falling back to one probe a row at a node with
three or more children; the checks of the tree; for matrix ops whose outputs do not share one
K-order, the tree of output (0, 0) alone; the accumulator precision
(:mod:`fpscope.probes.accumulator`); the node arithmetic, every node's format and every product's
entry (:mod:`fpscope.reveal.arithmetic`), confirmed by the bitwise replay (:mod:`fpscope.verify`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..arithmetic import Arithmetic
from ..masks import Mask, choose_mask
from ..targets.base import Target
from ..tree import SumTree
from .algorithms import basic_fprev, fprev
from .candidates import (BUILT_IN, MAX_PROOF_BYTES, MIN_LEAVES, Candidate, of_tree,
                         over_memory_order, try_candidates)
from .checks import (
    check_absorbs,
    check_batched,
    check_random_pairs,
    check_repeat,
    check_scan_prefixes,
    check_shared_order,
    check_units,
)
from .packing import pack_bits
from .prober import Prober, RevealError


@dataclass
class RevealStats:
    """Counts of one reveal and the outcome of each check (:attr:`RevealResult.stats`)."""

    calls: int = 0  # calls of the underlying operation
    probes: int = 0  # l(i, j) values obtained
    seconds: float = 0.0
    checks: dict = field(default_factory=dict)
    #: wall seconds per part of the reveal: "tree" (= seconds), "accumulator", "node_formats",
    #: "product_entries", "replay" (every output class's together)
    phases: dict = field(default_factory=dict)


@dataclass
class RevealResult:
    """What :func:`reveal` found: the tree, the mask, stats, the accumulator probe, the node
    arithmetic (node formats, product entries) and the replay report."""

    tree: SumTree
    mask: Mask
    stats: RevealStats
    algorithm: str
    accumulator: dict = field(default_factory=dict)
    replay: dict | None = None
    arithmetic: "Arithmetic | None" = None  # node formats and product entries (fpscope.arithmetic)
    arithmetic_evidence: dict = field(default_factory=dict)
    #: matrix ops whose outputs use several trees: one dict per class ("tree", "mask": boolean
    #: (M, N) positions, "arithmetic", "replay"); class 0 holds output (0, 0). None otherwise.
    classes: list | None = None


def reveal(
    target: Target,
    algorithm: str = "fprev",
    mask: Mask | None = None,
    seed: int = 0,
    repeats: int = 32,
    extra_pairs: int = 64,
    replay_samples: int = 32,
    progress: Callable[[int, int], None] | None = None,
    candidates="auto",
) -> RevealResult:
    """Reveal the summation tree of ``target``, check it, and replay it against the op.

    Steps: unit and absorption checks; FPRev (or BasicFPRev) with batched probes; the tree's
    sizes, repeated probes (determinism), batched-vs-single probes, random extra pairs and (matrix
    ops) every output's K-order are checked; the accumulator precision is measured
    (:mod:`fpscope.probes.accumulator`); finally the tree is replayed on ``replay_samples`` random
    inputs per distribution (:mod:`fpscope.verify`) and must match bit for bit.

    Args:
        target: the operation (n leaves).
        algorithm: "fprev" (default) or "basic" (all pairs; n(n-1)/2 probes).
        mask: probe values; default :func:`fpscope.masks.choose_mask` for the target's formats.
        seed: seed of the pivot and sampling choices (results are reproducible).
        repeats: how many probes to repeat for the determinism check.
        extra_pairs: how many random unprobed pairs to check against the tree.
        replay_samples: random inputs per distribution for the replay check (0 skips it).
        progress: optional callback(probes_done, n).
        candidates: with algorithm "fprev" on ops probed a row per probe: trees to prove node
            by node before running FPRev (:mod:`fpscope.reveal.candidates`: n - 1 probes, a
            proof; FPRev runs when none holds). "auto" or []: the built-in families (numpy's
            pairwise sum, sequential, recursive halving) for n >= 64; a SumTree (binary, no
            "C"), a Candidate or a list of them: those, then the built-in ones; None: FPRev
            only. ``stats.checks["candidate"]`` names the one proven (``result.algorithm`` is
            then "candidate"); ``stats.checks["candidates_rejected"]`` says why given ones
            were not used. ValueError: a given tree of another n or with multi-way nodes, or
            given candidates with algorithm "basic".

    Returns:
        RevealResult (stats.seconds is the wall time of the tree reveal and its checks, without
        the accumulator probe and the replay check).

    Raises:
        fpscope.masks.MaskError: n too large for the formats.
        RevealError: a check failed (see its ``kind``; "replay" when the op is not a fixed tree
            of rounded additions, e.g. compensated summation).
        fpscope.targets.base.TargetError: the op itself failed.
    """
    from ..formats import get_format
    from ..probes.accumulator import detect_accumulator
    from .arithmetic import class_rows_evaluator, measure_arithmetic, rows_evaluator
    from .classes import reveal_classes

    t0 = time.perf_counter()
    calls0 = target.calls
    classes = None
    if mask is None:
        mask = choose_mask(target.n, target.in_format, target.out_format)
    stats = RevealStats()
    n = target.n
    if n == 1:
        tree, probes = SumTree(0), 0
    else:
        prober = Prober(target, mask)
        check_units(prober)
        check_absorbs(prober)
        stats.checks["units"] = "ok"
        stats.checks["absorption"] = "ok"
        try:
            tree = _tree_and_checks(prober, algorithm, seed, repeats, extra_pairs, progress, stats,
                                    candidates)
            probes = prober.probes
        except RevealError as exc:
            if not (target.is_matrix and exc.kind == "inconsistent" and prober.mode != "single"):
                raise
            # outputs do not share one K-order (edge tiles, split-K): every tree and where it
            # is used (reveal/classes.py); if that fails, output (0, 0) alone
            try:
                classes, cst = reveal_classes(target, mask, seed=seed)
            except RevealError as exc_classes:
                classes = None
                single = Prober(target, mask, mode="single")
                tree = _tree_and_checks(single, algorithm, seed, repeats, extra_pairs, progress,
                                        stats)
                try:  # name the outputs that differ from output (0, 0), where possible
                    check_shared_order(prober, tree, 8, np.random.default_rng(seed + 2))
                    where = str(exc)
                except RevealError as exc2:
                    where = str(exc2)
                stats.checks["shared_k_order_outputs"] = (
                    f"no: {where}; the tree is that of output (0, 0) (the outputs' trees could "
                    f"not be separated: {exc_classes})")
                probes = prober.probes + single.probes
            else:
                tree = classes[0].tree
                stats.checks["shared_k_order_outputs"] = (
                    f"no: {len(classes)} trees among the {classes[0].mask.size} outputs; the tree "
                    f"is that of output (0, 0)")
                stats.checks["output_classes"] = (f"{len(classes)} classes; every output checked "
                                                  f"on {cst['checked'] // classes[0].mask.size} "
                                                  f"random pairs")
                probes = prober.probes + cst["probes"]
    stats.calls = target.calls - calls0
    stats.probes = probes
    stats.seconds = time.perf_counter() - t0
    stats.phases["tree"] = stats.seconds
    t1 = time.perf_counter()
    shared = not str(stats.checks.get("shared_k_order_outputs", "")).startswith("no:")
    evaluate = (rows_evaluator(target) if shared else
                class_rows_evaluator(target, classes[0].mask) if classes else None)
    acc = detect_accumulator(target, tree, evaluate=evaluate)
    stats.phases["accumulator"] = time.perf_counter() - t1
    found_by = "candidate" if "candidate" in stats.checks else algorithm
    result = RevealResult(tree=tree, mask=mask, stats=stats, algorithm=found_by, accumulator=acc)
    if acc.get("format") and not mask.absorbs(n, get_format(acc["format"])):
        raise RevealError(
            "mask",
            f"the op accumulates in {acc['format']}, where the mask M = {mask.M!r} does not absorb "
            f"{n - 2} units of {mask.u!r}; the tree cannot be trusted",
        )
    arith, evidence, rep = measure_arithmetic(target, tree, acc, shared, replay_samples, seed,
                                              positions=classes[0].mask if classes else None,
                                              timings=stats.phases)
    result.arithmetic, result.arithmetic_evidence = arith, evidence
    if classes:
        result.classes = [{"tree": classes[0].tree, "mask": classes[0].mask,
                           "arithmetic": arith, "replay": rep}]
        for c in classes[1:]:
            acc_c = detect_accumulator(target, c.tree,
                                       evaluate=class_rows_evaluator(target, c.mask))
            a_c, _, rep_c = measure_arithmetic(target, c.tree, acc_c, False, replay_samples,
                                               seed, positions=c.mask, timings=stats.phases)
            result.classes.append({"tree": c.tree, "mask": c.mask, "arithmetic": a_c,
                                   "replay": rep_c})
        if rep is not None:  # the replay report covers every class
            for c in result.classes[1:]:
                r = c["replay"]
                if r is None:
                    continue
                rep["samples"] += r["samples"]
                rep["matched"] += r["matched"]
                rep["bit_exact"] = rep["bit_exact"] and r["bit_exact"]
                if "first_mismatch" in r and "first_mismatch" not in rep:
                    rep["first_mismatch"] = r["first_mismatch"]
            rep["classes"] = len(result.classes)
    if hasattr(target, "checks"):  # checks a target makes of its own (collectives: ranks)
        stats.checks.update(target.checks())
    if rep is not None:
        result.replay = rep
        if tree.max_fan_in() > 2:
            # fused k-term nodes of matrix units align and truncate (NUMERICS.md section 2);
            # the replay models them as exact sums, so a mismatch here is not evidence
            rep["enforced"] = False
            rep["note"] = ("the tree has fused multi-term nodes; their node arithmetic is not "
                           "modelled by the replay (exact sum, one rounding)")
        elif not rep["bit_exact"]:
            from .compensation import probe_two_inputs  # what the replay could not model

            two = probe_two_inputs(target, tree, arith, evaluate=evaluate)
            rep["two_input_probes"] = two
            err = RevealError(
                "replay",
                f"the revealed tree, replayed with its measured node arithmetic "
                f"({arith.describe()}), matches the op on only {rep['matched']} of "
                f"{rep['samples']} random inputs: the op is not a fixed tree of rounded "
                f"additions (compensated or exact summation, data-dependent order, or an "
                f"arithmetic the probes did not see); {two['summary']}",
            )
            err.result = result  # the tree and the failed replay, kept as evidence
            raise err
    return result


def _given_candidates(candidates, n: int) -> list:
    """The caller's candidates (``reveal(candidates=...)``) as Candidate objects."""
    if candidates is None or (isinstance(candidates, str) and candidates == "auto"):
        return []
    if isinstance(candidates, str):
        raise ValueError(f"candidates must be 'auto', None or a list of trees, got {candidates!r}")
    if isinstance(candidates, (SumTree, Candidate)):
        candidates = [candidates]
    try:
        given = list(candidates)
    except TypeError:
        raise ValueError(f"candidates must be 'auto', None or a list of trees, got "
                         f"{type(candidates).__name__}") from None
    out = []
    for k, c in enumerate(given):
        if isinstance(c, SumTree):
            if c.n != n:
                raise ValueError(f"candidates[{k}] has {c.n} leaves, the op {n}")
            c = of_tree(c, f"candidates[{k}]")
        elif not isinstance(c, Candidate):
            raise ValueError(f"candidates hold SumTree or Candidate, got {type(c).__name__}")
        out.append(c)
    return out


def _built_in_candidates(n: int, spec: dict) -> list:
    """The built-in families for an op of n leaves (none below MIN_LEAVES), over the
    elements' memory order for whole-array sums of F and T layouts."""
    if n < MIN_LEAVES:
        return []
    from ..summary.memory import memory_permutation, array_order

    layout = array_order(spec)
    perm = memory_permutation(layout["shape"], layout["order"], n) if layout else None
    if perm is None:
        return list(BUILT_IN)
    return [over_memory_order(c, perm, layout["order"]) for c in BUILT_IN]


def _tree_and_checks(prober, algorithm, seed, repeats, extra_pairs, progress, stats,
                     candidates=None) -> SumTree:
    rng = np.random.default_rng(seed + 1)
    prober.prefetch_all()
    proven = None
    given = _given_candidates(candidates, prober.n)
    if given and algorithm != "fprev":
        raise ValueError(f"candidate trees are proven before FPRev; algorithm {algorithm!r} "
                         f"takes none")
    cands = [] if candidates is None else \
        given + _built_in_candidates(prober.n, prober.target.spec())
    why_not = (None if prober.mode == "rows" and prober.table is None else
               "only ops probed one row per probe (not matrix ops or collectives) take them")
    if why_not is None and hasattr(prober.target, "evaluate_scan"):
        why_not = "scans take none"
    if why_not is None and prober.n * prober.n * prober.dtype.itemsize > MAX_PROOF_BYTES:
        why_not = (f"n = {prober.n}: the proof would read more than {MAX_PROOF_BYTES >> 30} GiB "
                   f"of probe input")
    if cands and algorithm == "fprev" and why_not is None:
        rejected: list = []
        proven = try_candidates(prober, cands, np.random.default_rng(seed + 2), progress,
                                rejected)
        names = {c.name for c in given}
        failed = [f"{name}: {why}" for name, why in rejected if name in names]
        if failed:  # the caller's trees that do not hold, and why
            stats.checks["candidates_rejected"] = "; ".join(failed)
    elif given:
        stats.checks["candidates_rejected"] = f"not tried: {why_not}"
    if proven is not None:
        nested, name = proven
        stats.checks["candidate"] = f"{name}: all {prober.n - 1} nodes proven, one probe each"
    elif algorithm == "basic":
        nested = basic_fprev(prober)
    elif algorithm == "fprev":
        nested = None
        if pack_bits(prober) >= 4 and prober.table is None:
            try:
                tree = SumTree.from_canonical(fprev(prober, seed=seed, progress=progress, packed=True), prober.n)
                if prober.packed_calls:  # every packed set proven a complete subtree (guards)
                    stats.checks["packed_probes"] = "ok"
                nested = tree
            except RevealError as exc:  # not a binary tree: plain FPRev decides
                stats.checks["packed_probes"] = f"fell back to one probe per call ({exc.kind})"
                prober.history.clear()  # packed answers assume binary nodes: forget them
        if nested is None:
            nested = SumTree.from_canonical(fprev(prober, seed=seed, progress=progress), prober.n)
    else:
        raise ValueError(f"unknown algorithm {algorithm!r}; known: fprev, basic")
    tree = nested if isinstance(nested, SumTree) else SumTree(nested)
    stats.checks["sizes"] = "ok"
    stats.checks["repeated_probes"] = check_repeat(prober, repeats, rng)
    stats.checks["batched_vs_single"] = check_batched(prober, min(repeats, 16), rng)
    stats.checks["random_pairs"] = check_random_pairs(prober, tree, extra_pairs, rng)
    if prober.mode != "single":
        stats.checks["shared_k_order_outputs"] = check_shared_order(prober, tree, 4, rng)
    if hasattr(prober.target, "evaluate_scan"):  # a scan: every output against its prefix
        stats.checks["scan_prefixes"] = check_scan_prefixes(prober, tree, extra_pairs, rng)
    return tree
