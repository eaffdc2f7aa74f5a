"""Node kinds beyond the fused block: when the fused-block model does not fit, fit the node.

The probe families assume one fused step per block (every NVIDIA tensor core, AMD CDNA1). AMD
CDNA2 rounds every product and every addition of a tree ("pairwise" node) and CDNA3 sums in two
stages at two precisions ("two-stage" node; :class:`fpscope.profile.Profile`), so the rounding
or alignment probes report "does not fit" there. This family then samples the op on random
inputs (the closed-loop generators of :mod:`fpscope.probes.validate`, ``samples`` outputs) and
searches the profile space for a profile that reproduces every sampled bit
(:func:`fpscope.fit.fit`: every preset with the op's formats as a starting point, then
single-parameter descent). The search recognises the node kinds fpscope models; it does not
invent a new kind. The result is only a hypothesis until the probe's own closed-loop validation,
on fresh random inputs, accepts it.

Block-scaled targets (MX / NVFP4) are sampled at unit scales. Their "grouped" node (NVFP4 /
MXFP4 ``kind::mxf4*``: exact sums of groups of 16 products, each aligned at its scale's
exponent, not at its own) looks like a fused block with a wider window to every probe family
(they all fit), so the driver samples such a target whatever the families found and calls the
fit when the fused profile they assembled does not reproduce the samples; the fit then scores
the presets with the target's scale fields (:class:`fpscope.fit.Recording`).
"""

from __future__ import annotations

import numpy as np

from ..formats import decode, encode
from ._common import MAX_EVIDENCE, Ctx, Finding, scale_fields
from .blackbox import hex_out

FAMILY = "node"

#: generators of the sampled outputs (finite inputs of every scale, cancellation, zero blocks)
_GENERATORS = ("normal", "cancel", "wide", "zero_block", "subnormal", "bits")


def sample(ctx: Ctx, samples: int = 1536, seed: int = 0):
    """A :class:`fpscope.fit.Recording` of about ``samples`` random outputs of ``ctx.target``
    (whole 16 x 16 calls, the generators in turn). A block-scaled target is sampled at unit
    scales; the recording then carries the scale fields the scales family found, so that the
    fit scores block-scaled candidates."""
    from ..fit import Recording
    from .validate import generate

    t = ctx.target
    fin, fb, fout = ctx.fin, ctx.fb, ctx.fout
    rng = np.random.default_rng(seed)
    K, per = ctx.K, 16 * 16
    a, b, c, d = [], [], [], []
    for i in range(max(1, -(-samples // per))):
        kind = _GENERATORS[i % len(_GENERATORS)]
        A, B, C = generate(kind, rng, fin, fout, 16, K, 16, K, fb)
        D = t(A, B, C)
        a.append(np.repeat(A, 16, axis=0))
        b.append(np.tile(B.T, (16, 1)))
        c.append(C.ravel())
        d.append(D.ravel())
    D = np.concatenate(d)
    with np.errstate(all="ignore"):
        bits = encode(D, fout)
    ctx.rows_run += len(D)
    return Recording(np.concatenate(a), np.concatenate(b), np.concatenate(c),
                     np.asarray(bits, dtype=np.uint64), fin.name, fout.name, t.name,
                     fb.name if fb.name != fin.name else None, **scale_fields(ctx))


def fit_samples(ctx: Ctx, rec, why: str = "the fused-block model does not fit"):
    """(Finding "node", profile or None, nearest or None): the node the recording ``rec``
    (:func:`sample`) fits.

    The profile (``k`` = ctx.K, status experimental) reproduces every sample; None when no
    profile of the search does. Then the Finding does not fit, says how close the best came
    and holds as evidence the samples the best misses (each with what it gives), and
    ``nearest`` is that best profile (a hypothesis that some samples contradict, for a person to
    judge: :attr:`fpscope.probes.driver.ProbeReport.nearest`); else ``nearest`` is None.
    ``why``: the note's first words, why the node is fitted.
    """
    from ..emulate.vectorized import fdpa_batch
    from ..fit import fit, unmatched

    t, K, n = ctx.target, ctx.K, len(rec.d)
    res = fit(rec)
    p = res.profile
    if not res.exact:
        nearest = _named(p, t, K, f"nearest node to {n} random outputs ({res.matched} "
                                  f"reproduced)")
        bad = unmatched(rec, p)[:MAX_EVIDENCE]
        scales = ({} if rec.scale_a is None else
                  {"scale_a": rec.scale_a[bad], "scale_b": rec.scale_b[bad]})
        gives = fdpa_batch(rec.a[bad], rec.b[bad], rec.c[bad], rec.scaled(p), **scales)
        got = decode(rec.d[bad], ctx.fout)
        sc = [] if rec.scale_a is None else [(rec.scale_a[i], rec.scale_b[i]) for i in bad]
        evidence = [ctx.evidence((rec.a[i], rec.b[i], rec.c[i], *(sc[j] if sc else ())),
                                 float(d),
                                 f"the nearest profile gives {hex_out([g], t)[0]}")
                    for j, (i, d, g) in enumerate(zip(bad, got, gives))]
        return (Finding(FAMILY, "node", None, fits=False, rows=n, evidence=evidence,
                        note=f"no node kind fpscope models reproduces the {n} sampled "
                             f"outputs (the best, a {p.node} node, {res.matched} of them)"),
                None, nearest)
    open_fields = sorted(k for k, v in res.consistent.items() if len(v) > 1)
    scales = " at unit scales" if rec.scale_block_size is not None else ""
    note = (f"{why}; {n} random outputs{scales} are reproduced bit "
            f"for bit by a {p.node} node (fit from the presets' node arithmetic, "
            f"L = {p.block_size})")
    if open_fields:
        note += f"; the samples leave open: {', '.join(open_fields)}"
    prof = _named(p, t, K, f"node fitted to {n} random outputs{scales}")
    return Finding(FAMILY, "node", p.node, rows=n, note=note), prof, None


def _named(p, target, K: int, what: str):
    """``p`` as a probed profile of ``target`` (name, status experimental, evidence)."""
    return p.replace(name=f"probed:{target.name}", status="experimental",
                     evidence=f"fpscope probe of {target.name} (K = {K}): {what}")


def run(ctx: Ctx, samples: int = 1536, seed: int = 0):
    """(Finding "node", profile or None, nearest or None) from ``samples`` random outputs of
    ``ctx.target`` (:func:`sample`, then :func:`fit_samples`)."""
    return fit_samples(ctx, sample(ctx, samples, seed))
