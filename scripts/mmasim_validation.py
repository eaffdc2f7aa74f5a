"""fpscope presets vs MMA-Sim (``mmasim``, Xie et al., arXiv 2511.10909), output bit for bit.

For every preset in :data:`fpscope.profile.PRESETS` that has a matching mmasim instruction
model (:data:`MODELS`), draw operand tiles of the instruction's full m x n x k shape, run the
mmasim model on the tiles (``op(A, B, C) -> D``, A: (m, k), B: (k, n), C, D: (m, n) torch
tensors of the instruction's types) and fpscope's :func:`~fpscope.emulate.vectorized.fdpa_batch`
on one instruction per output element (row i of A, column j of B, C[i, j]), and compare the
output bit patterns. tf32 presets take fp32 words as float32 arrays (:func:`_operand_values`).
NaN: the patterns are compared as they are (:func:`_fpscope_bits`: fpscope's output words, a
NaN as the preset's ``nan_bits``; an output array in the output format's own dtype is read as
its words, payload included). Where mmasim returns another NaN pattern than fpscope (AMD
CDNA1 / CDNA2: mmasim computes in torch on the CPU, whose NaN payloads pass through, while the
presets write one fixed pattern) the output counts in its own column, "NaN, pattern not
modelled" (:attr:`Result.nan_pattern`), never as matched; a preset with such outputs and no
other difference has the status "NaN pattern".

Operand generators (each gets an equal share of the cases):

* ``bits``: uniformly random bit patterns of the input formats (a, b; each its own format in
  a mixed-input preset) and output format (c): NaN, Inf, subnormals, signed zeros included.
* ``finite``: random bit patterns with the all-ones exponent field excluded (no NaN/Inf).
* ``cancel``: cancellation-heavy: products come in pairs ``a*b`` and ``(-a)*b`` (one partner
  sometimes off by one ulp), c the negated value of a product (or random), some zeros.
* ``wide``: wide exponent spread: every operand is either near the top of its format's range
  or near the bottom (subnormals, zeros), so alignment shifts and ``e_zero`` matter.
* ``tiny``: only subnormal / smallest-binade operands and zeros (products far below c's range):
  the ``e_zero`` edge.

fnuz formats (AMD CDNA3 fp8 / bf8, ``fp8_e4m3fnuz`` / ``fp8_e5m2fnuz``): 0x80 is their NaN and
they have no -0, so ``bits`` draws 0x80 as any pattern (a NaN), while the finite generators
draw it as +0.

Block-scaled presets (MX / NVFP4, ``Profile.scale_format``) also draw the scales of A's rows
and B's columns, one per ``scale_block_size`` elements of K, per generator (:func:`_gen_scales`):
``bits`` every pattern (the NaN one, 0xFF e8m0 / 0x7F ue4m3, and ue4m3's zero included);
``finite`` every pattern but NaN; ``cancel`` scales near 1 (the cancelling products stay
comparable with c); ``wide`` the extreme exponents (2^-127 .. 2^-125 and 2^125 .. 2^127 for
e8m0: products far below fp32's range and overflowing it); ``tiny`` e8m0 exponents that put
the products near fp32's subnormal range and the zero terms' e_zero (-133: a scale pair near
2^-140), the smallest ue4m3 values (zero, subnormals). mmasim runs them through
``op(A, B, C, scale_a, scale_b)`` (mmasim_target.block_scaled_call), fpscope through
``fdpa_batch(..., scale_a, scale_b)``; :func:`scale_cases` adds hand-made cases that a scale
decides.

Besides the random cases: ``e_zero_cases`` / ``e_zero_probe`` build, per preset, inputs on which
``e_zero`` decides the output (or report it unobservable), and ``--sensitivity`` reruns every
one-parameter change of each preset (F +-1, e_zero +-1, L/2, 2L, step rounding, alignment,
flushes, -0 rule, operand conversion; for the AMD CDNA2 / CDNA3 nodes also F2, the second
alignment, product groups, c drop, product overflow and the input zero sign; for the grouped
node of NVFP4 / MXFP4 the group size and the fused node instead) on the same cases, which
mmasim computes once, and counts the outputs it changes.

Usage: ``python scripts/mmasim_validation.py [--cases N] [--preset NAME ...] [--seed S]
[--sensitivity]`` (about 3.3 s per preset per 10^5 cases on one idle core; the summary table,
then the e_zero cases, then the first mismatching cases).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from fpscope.emulate.vectorized import fdpa_batch
from fpscope.formats import decode, encode
from fpscope.probes.mmasim_target import MODELS, block_scaled_call, build_model, model_name
from fpscope.probes.mmasim_target import from_torch as _from_torch
from fpscope.probes.mmasim_target import to_torch as _to_torch
from fpscope.profile import PRESETS, resolve_format

GENERATORS = ("bits", "finite", "cancel", "wide", "tiny")


# -- operand bit patterns ----------------------------------------------------------------------

@dataclass(frozen=True)
class _Layout:
    bits: int
    mant: int   # trailing significand bits
    exp: int    # exponent field bits
    specials: str

    @property
    def exp_max_field(self) -> int:  # largest exponent field of a finite value
        return (1 << self.exp) - (2 if self.specials == "ieee" else 1)


def _layout(fmt_name: str) -> _Layout:
    fmt = resolve_format(fmt_name)
    mant = fmt.p - 1
    return _Layout(fmt.bits, mant, fmt.bits - 1 - mant, fmt.specials)


def _finite_ok(pat: np.ndarray, lay: _Layout) -> np.ndarray:
    ex = (pat >> lay.mant) & ((1 << lay.exp) - 1)
    if lay.specials == "ieee":
        return ex != (1 << lay.exp) - 1
    if lay.specials == "none":  # fp6, fp4: every pattern is finite
        return np.ones(np.shape(pat), dtype=bool)
    if lay.specials == "fnuz":  # AMD fp8 / bf8: the "negative zero" pattern is NaN
        return pat != (1 << (lay.bits - 1))
    mant = pat & ((1 << lay.mant) - 1)  # "fn": S.1111.111 is NaN
    return ~((ex == (1 << lay.exp) - 1) & (mant == (1 << lay.mant) - 1))


def _random_bits(rng, shape, lay: _Layout, finite: bool) -> np.ndarray:
    pat = rng.integers(0, 1 << lay.bits, size=shape, dtype=np.int64)
    if finite:
        bad = ~_finite_ok(pat, lay)
        while bad.any():
            pat[bad] = rng.integers(0, 1 << lay.bits, size=int(bad.sum()), dtype=np.int64)
            bad = ~_finite_ok(pat, lay)
    return pat


def _compose(sign, ex, mant, lay: _Layout) -> np.ndarray:
    pat = (sign.astype(np.int64) << (lay.bits - 1)) | (ex.astype(np.int64) << lay.mant) | mant
    if lay.specials == "fnuz":  # 0x80 (NaN) -> 0x00 (+0)
        return np.where(_finite_ok(pat, lay), pat, 0)
    return np.where(_finite_ok(pat, lay), pat, pat & ~np.int64(1))  # e4m3fn 0x7F -> 0x7E


def _wide_bits(rng, shape, lay: _Layout, tiny_only: bool) -> np.ndarray:
    sign = rng.integers(0, 2, size=shape)
    mant = rng.integers(0, 1 << lay.mant, size=shape, dtype=np.int64)
    lo = rng.integers(0, 3, size=shape)  # exponent fields 0 (subnormal), 1, 2
    if tiny_only:
        ex = lo
    else:
        hi = lay.exp_max_field - rng.integers(0, 4, size=shape)
        ex = np.where(rng.random(shape) < 0.5, lo, hi)
    pat = _compose(sign, ex, mant, lay)
    zero = rng.random(shape) < 0.15
    if lay.specials == "fnuz":  # one zero, +0 (the -0 pattern is NaN)
        return np.where(zero, 0, pat)
    return np.where(zero, sign.astype(np.int64) << (lay.bits - 1), pat)


def _gen_tiles(gen: str, rng, tiles: int, m: int, n: int, k: int, lin: _Layout,
               lout: _Layout, lb: _Layout | None = None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bit patterns A (tiles, m, k), B (tiles, k, n), C (tiles, m, n); B in layout ``lb``
    (a mixed-input preset's b format; default ``lin``, which draws exactly the cases drawn
    before mixed formats existed)."""
    lb = lin if lb is None else lb
    if gen in ("bits", "finite"):
        fin = gen == "finite"
        return (_random_bits(rng, (tiles, m, k), lin, fin),
                _random_bits(rng, (tiles, k, n), lb, fin),
                _random_bits(rng, (tiles, m, n), lout, fin))
    if gen in ("wide", "tiny"):
        t = gen == "tiny"
        C = (_wide_bits(rng, (tiles, m, n), lout, t) if not t else
             np.where(rng.random((tiles, m, n)) < 0.5,
                      _wide_bits(rng, (tiles, m, n), lout, True),
                      _random_bits(rng, (tiles, m, n), lout, True)))
        return (_wide_bits(rng, (tiles, m, k), lin, t),
                _wide_bits(rng, (tiles, k, n), lb, t), C)
    if gen == "cancel":
        # moderate exponents so products are normal and exact; pairs cancel along k
        def mid(shape, lay):
            bias_field = (1 << (lay.exp - 1)) - 1
            spread = max(1, min(4, bias_field - 1))
            sign = rng.integers(0, 2, size=shape)
            ex = bias_field + rng.integers(-spread, spread + 1, size=shape)
            mant = rng.integers(0, 1 << lay.mant, size=shape, dtype=np.int64)
            return _compose(sign, ex, mant, lay)

        A = mid((tiles, m, k), lin)
        B = mid((tiles, k, n), lb)
        half = k // 2
        signbit = np.int64(1) << (lin.bits - 1)
        A[:, :, half:2 * half] = A[:, :, :half] ^ signbit  # a_{j+half} = -a_j
        B[:, half:2 * half, :] = B[:, :half, :]
        # nudge some partners by one ulp (magnitude up/down), zero a few operands
        nudge = rng.random((tiles, m, half)) < 0.3
        step = np.where(rng.random((tiles, m, half)) < 0.5, 1, -1)
        part = A[:, :, half:2 * half]
        low = part & ((1 << lin.mant) - 1)
        ok = nudge & (low + step >= 0) & (low + step < (1 << lin.mant))
        A[:, :, half:2 * half] = np.where(ok, part + step, part)
        zero = rng.random((tiles, m, k)) < 0.05
        A = np.where(zero, 0, A)
        # c: minus a product (exact in the output format? round it), or random, or zero
        av = decode(A, resolve_format(_fmt_in_name(lin)))
        bv = decode(B, resolve_format(_fmt_in_name(lb)))
        j = rng.integers(0, k, size=(tiles, m, n))
        ti, mi, ni = np.indices((tiles, m, n))
        prod = -av[ti, mi, j] * bv[ti, j, ni]
        fout = resolve_format(_fmt_out_name(lout))
        cpat = encode(prod, fout, mode="RZ").astype(np.int64)
        r = rng.random((tiles, m, n))
        C = np.where(r < 0.6, cpat, _random_bits(rng, (tiles, m, n), lout, True))
        C = np.where(r > 0.9, 0, C)
        return A, B, C
    raise ValueError(f"unknown generator {gen!r}")


def _gen_scales(gen: str, rng, shape: tuple, scale_format: str) -> np.ndarray:
    """Bit patterns of block scales (module docstring), shape ``shape``."""
    fs = resolve_format(scale_format)
    nan = (1 << fs.bits) - 1  # e8m0 0xFF, ue4m3 0x7F
    pat = rng.integers(0, nan + 1, size=shape, dtype=np.int64)
    if gen == "bits":
        return pat
    if gen == "finite":
        return pat % nan
    one = fs.exponent_bias << (fs.p - 1)  # the pattern of 1.0
    if gen == "cancel":
        return np.where(rng.random(shape) < 0.6, one, one + rng.integers(-2, 3, size=shape))
    if gen == "wide":
        return np.where(rng.random(shape) < 0.5, pat % 3, nan - 1 - pat % 3)
    if scale_format == "e8m0":  # tiny: 2^-85 .. 2^-55 each
        return fs.exponent_bias + rng.integers(-85, -54, size=shape)
    return pat % 4  # tiny ue4m3: 0 and the smallest subnormals


_LAYOUT_NAMES: dict[_Layout, str] = {}


def _fmt_in_name(lay: _Layout) -> str:
    return _LAYOUT_NAMES[lay]


_fmt_out_name = _fmt_in_name


def _register(name: str) -> _Layout:
    lay = _layout(name)
    _LAYOUT_NAMES.setdefault(lay, name)
    return lay


# -- comparison ----------------------------------------------------------------------------------

def _hex(pat, lay: _Layout) -> str:
    w = (lay.bits + 3) // 4
    return " ".join(f"{int(x):0{w}x}" for x in np.ravel(pat))


@dataclass
class Result:
    preset: str
    model: str
    cases: int = 0
    matched: int = 0
    seconds: float = 0.0
    by_gen: dict = field(default_factory=dict)   # gen -> [cases, matched]
    examples: list = field(default_factory=list)  # dicts, first few mismatches per generator

    explained: int = 0  # mismatches that a documented mmasim artifact explains, checked
    explanation: str = ""
    #: outputs where both give a NaN but the patterns differ (not matched, not a mismatch of
    #: the arithmetic: fpscope writes the preset's one ``nan_bits``, mmasim a payload)
    nan_pattern: int = 0

    @property
    def status(self) -> str:
        if self.matched == self.cases:
            return "match"
        if self.matched + self.explained == self.cases:
            return "explained"
        if self.matched + self.explained + self.nan_pattern == self.cases:
            return "NaN pattern"
        return "MISMATCH"


def _operand_names(prof) -> tuple[str, str]:
    """The formats A and B are encoded in for mmasim: the preset's ``operand_formats``, tf32
    as fp32 bit patterns (mmasim truncates them itself)."""
    return tuple("fp32" if f == "tf32" else f for f in prof.operand_formats)


def _operand_values(pat: np.ndarray, fmt) -> np.ndarray:
    """Operands for fpscope: fp32 bit patterns (tf32 presets) as float32 arrays, whose words
    fpscope reads as mmasim does (a signalling NaN keeps its payload; float64 would quiet it),
    other formats decoded to float64 values."""
    if fmt.name == "fp32":
        return pat.astype(np.uint32).view(np.float32)
    return decode(pat, fmt)


#: Presets whose comparison differs from mmasim 2.1.1 through a defect of the simulator, and
#: which one. "dropped special accumulator": ``gtr_fdpa`` (CDNA3 fp8 / bf8) sets c's
#: significand to 0 when ``e_c < e_max - F - 1``, and ``torch.frexp`` gives Inf and NaN the
#: exponent 0, so an Inf / NaN c, or the Inf / NaN result of the previous block, vanishes once
#: the block's products reach 2^(F + 2) (only bf8's reach that: e4m3fnuz products stay below
#: 2^17). fpscope keeps the Inf / NaN, as mmasim's own ``tr_fdpa`` (CDNA3 fp16 / bf16 / xf32)
#: and IEEE 754 do; no MI300 recording decides it either way. Each mismatch is checked, never
#: assumed: :func:`dropped_special_accumulator`.
ORACLE_ARTIFACTS = {
    "cdna3-bf8": "dropped special accumulator",
}

#: Presets whose mmasim model runs another instruction, and the preset that models that
#: instruction: mmasim 2.1.1 has no Hopper mma.sync fp8 model, only wgmma (``MODELS``); the
#: ``hopper-e*-fp16out`` presets model the recorded H100 mma.sync (hw-vectors H100 E4M3 / E5M2
#: d_fp16), the ``hopper-wgmma-*`` presets mmasim's wgmma model.
OTHER_INSTRUCTION = {
    "hopper-e4m3-fp16out": "hopper-wgmma-e4m3-fp16out",
    "hopper-e5m2-fp16out": "hopper-wgmma-e5m2-fp16out",
}


def _fpscope_bits(d: np.ndarray, prof, fout) -> np.ndarray:
    """fpscope's output words (int64) of ``d``: an array in the output format's own dtype
    (float32, float16, an ml_dtypes type) is read as its words, NaN payload included; a
    float64 array (values only) is encoded in ``fout``, a NaN as the preset's ``nan_bits``."""
    d = np.asarray(d)
    if d.dtype != np.float64:
        if d.dtype.itemsize * 8 != fout.bits:
            raise TypeError(f"fpscope output of dtype {d.dtype} is not {fout.name}")
        return d.view(f"u{d.dtype.itemsize}").astype(np.int64)
    return np.where(np.isnan(d), prof.nan_bits, encode(d, fout).astype(np.int64))


def _same_bits(d_sim: np.ndarray, d: np.ndarray, prof, fout) -> np.ndarray:
    """Per case: fpscope's ``d`` gives mmasim's output bits ``d_sim`` exactly (a NaN too:
    its pattern must be the same, :func:`_fpscope_bits`)."""
    return d_sim == _fpscope_bits(d, prof, fout)


def _nan_pattern_only(d_sim: np.ndarray, bits: np.ndarray, fout) -> np.ndarray:
    """Per case: both words are NaNs of ``fout`` but not the same pattern."""
    return (d_sim != bits) & np.isnan(decode(d_sim, fout)) & np.isnan(decode(bits, fout))


def dropped_special_accumulator(prof, a, b, c, d_sim: np.ndarray) -> np.ndarray:
    """Which cases mmasim's dropped Inf / NaN accumulator explains (:data:`ORACLE_ARTIFACTS`).

    A case is explained when, running fpscope block by block (``prof`` with k = L, each
    block's result the next one's c), some block takes an Inf / NaN accumulator and fpscope
    restarted at that block with c = +0 gives mmasim's bits ``d_sim``.

    Args:
        prof: a "two-stage" profile (CDNA3) whose k is a multiple of its block size L.
        a, b: float64 arrays (cases, k); c: float64 (cases,); d_sim: int64 (cases,) of
            mmasim's output bit patterns.

    Raises:
        AssertionError: the block-by-block chain is not fpscope's whole instruction (then the
            restart would not be fpscope's own arithmetic).
    """
    fout = resolve_format(prof.out_format)
    L = prof.block_size
    one = prof.replace(k=L)
    blocks = [(a[:, j:j + L], b[:, j:j + L]) for j in range(0, prof.k, L)]

    def run(start, acc):
        for ab, bb in blocks[start:]:
            acc = fdpa_batch(ab, bb, acc, one)
        return acc

    whole = fdpa_batch(a, b, c, prof)
    chain = run(0, c)
    assert np.array_equal(whole, chain, equal_nan=True), "the block chain is not the instruction"
    explained = np.zeros(len(c), dtype=bool)
    acc = np.asarray(c, dtype=np.float64)
    for j in range(len(blocks)):
        idx = np.flatnonzero(~np.isfinite(acc))
        if idx.size:
            q = np.zeros(idx.size)
            for ab, bb in blocks[j:]:
                q = fdpa_batch(ab[idx], bb[idx], q, one)
            explained[idx] |= _same_bits(d_sim[idx], q, prof, fout)
        acc = fdpa_batch(*blocks[j], acc, one)
    return explained


#: mmasim's output bits per (preset, model, operand formats, seed, generator, tiles), which fix
#: the draws and the model: :func:`sensitivity` compares every variant with the same mmasim
#: outputs, computed once.
_SIM_CACHE: dict[tuple, np.ndarray] = {}


def compare(preset: str, cases: int, seed: int = 0, max_examples: int = 2,
            generators=GENERATORS, profile=None, explain: bool | None = None) -> Result:
    """Compare ``preset`` with its mmasim model on about ``cases`` output elements.

    ``profile``: evaluate this profile instead of the preset (same mmasim model and operands;
    :func:`sensitivity` uses it to show that a changed parameter is seen).
    ``explain``: check the mismatches of a preset of :data:`ORACLE_ARTIFACTS` against its
    artifact (``Result.explained``); default: only when ``profile`` is None.
    """
    explain = profile is None if explain is None else explain
    import torch

    prof = PRESETS[preset] if profile is None else profile
    op = build_model(preset)
    m, n, k = op.m, op.n, op.k
    assert k == prof.k, (preset, k, prof.k)
    in_name, b_name = _operand_names(prof)
    out_name = prof.out_format
    lin, lb, lout = _register(in_name), _register(b_name), _register(out_name)
    fin, fb, fout = resolve_format(in_name), resolve_format(b_name), resolve_format(out_name)
    sf = PRESETS[preset].scale_format  # block scales: laid out as the preset's model takes them
    if sf is not None:
        assert op.block_size == prof.scale_block_size, (preset, op.block_size)
        nb = k // op.block_size
    res = Result(preset, model_name(preset))
    t0 = time.perf_counter()
    per_gen = -(-cases // len(generators))
    for gi, gen in enumerate(generators):
        rng = np.random.default_rng([seed, gi, sum(map(ord, preset))])
        tiles = max(1, -(-per_gen // (m * n)))
        A, B, C = _gen_tiles(gen, rng, tiles, m, n, k, lin, lout, lb)
        scales = {}
        if sf is not None:
            SA = _gen_scales(gen, rng, (tiles, m, nb), sf)
            SB = _gen_scales(gen, rng, (tiles, nb, n), sf)
        key = (preset, model_name(preset), in_name, b_name, seed, gi, gen, tiles)  # same draws
        if key in _SIM_CACHE:
            d_sim = _SIM_CACHE[key]
        elif sf is None:  # mmasim: one call per full m x n x k tile
            At, Bt, Ct = _to_torch(A, in_name), _to_torch(B, b_name), _to_torch(C, out_name)
            with torch.no_grad():
                D = torch.stack([op(At[t], Bt[t], Ct[t]) for t in range(tiles)])
            d_sim = _SIM_CACHE[key] = _from_torch(D, out_name).reshape(-1)
        else:  # ... with the scales of its rows of A and columns of B
            d_sim = _SIM_CACHE[key] = np.stack([
                block_scaled_call(op, A[t], B[t], C[t], SA[t], SB[t], in_name, b_name,
                                  out_name, sf) for t in range(tiles)]).reshape(-1)
        if sf is not None:
            fs = resolve_format(sf)
            scales = {"scale_a": np.repeat(decode(SA, fs)[:, :, None, :], n, axis=2
                                           ).reshape(-1, nb),
                      "scale_b": np.repeat(np.swapaxes(decode(SB, fs), 1, 2)[:, None], m, axis=1
                                           ).reshape(-1, nb)}
        # fpscope: one instruction per output element
        av, bv, cv = _operand_values(A, fin), _operand_values(B, fb), decode(C, fout)
        a_rows = np.repeat(av[:, :, None, :], n, axis=2).reshape(-1, k)      # (t, m, n, k)
        b_cols = np.repeat(np.swapaxes(bv, 1, 2)[:, None, :, :], m, axis=1).reshape(-1, k)
        d_fp = fdpa_batch(a_rows, b_cols, cv.reshape(-1), prof, **scales)
        d_fp_bits = _fpscope_bits(d_fp, prof, fout)
        same = d_sim == d_fp_bits
        nan_only = _nan_pattern_only(d_sim, d_fp_bits, fout)
        res.by_gen[gen] = [same.size, int(same.sum())]
        res.cases += same.size
        res.matched += int(same.sum())
        res.nan_pattern += int(nan_only.sum())
        bad = np.flatnonzero(~same & ~nan_only)  # NaN-pattern-only outputs: their own column
        explained = np.zeros(bad.size, dtype=bool)
        if explain and preset in ORACLE_ARTIFACTS and bad.size:
            res.explanation = ORACLE_ARTIFACTS[preset]
            explained = dropped_special_accumulator(prof, a_rows[bad], b_cols[bad],
                                                    cv.reshape(-1)[bad], d_sim[bad])
            res.explained += int(explained.sum())
        a_pat = np.repeat(A[:, :, None, :], n, axis=2).reshape(-1, k)
        b_pat = np.repeat(np.swapaxes(B, 1, 2)[:, None, :, :], m, axis=1).reshape(-1, k)
        # unexplained ones first, then the explained ones, then one NaN-pattern-only output
        shown = np.concatenate([bad[~explained], bad[explained],
                                np.flatnonzero(nan_only)[:1]]).astype(np.int64)
        kinds = ["mismatch"] * int((~explained).sum()) + ["explained"] * int(explained.sum()) \
            + ["NaN pattern"] * int(nan_only.any())
        for i, kind in zip(shown[:max_examples], kinds[:max_examples]):
            res.examples.append({
                "generator": gen, "explained": kind == "explained", "kind": kind,
                "a": _hex(a_pat[i], lin), "b": _hex(b_pat[i], lb),
                "c": _hex(C.reshape(-1)[i], lout),
                "mmasim": _hex(d_sim[i], lout), "fpscope": _hex(d_fp_bits[i], lout),
                "a_values": a_rows[i].tolist(), "b_values": b_cols[i].tolist(),
                "c_value": float(cv.reshape(-1)[i]),
                **{f"{w}_values": v[i].tolist() for w, v in scales.items()},
            })
    res.seconds = time.perf_counter() - t0
    return res


#: Hand-made fp16-input, fp16-output cases where the exponent a zero term takes (``e_zero``)
#: decides an RNE tie: c = 0 and a zero product (so the zero's exponent is the block maximum),
#: nonzero products far below it, their exact sum (2^-25 + a low bit, or 2.5 * 2^-24 + a low
#: bit) sits one low bit above a tie. The e_zero one below mmasim's (Volta -20,
#: Turing/Ampere/Ada -21, Hopper -22: the validated presets' until 2026-12-01) keeps the low bit
#: that mmasim's window cut ``2^(e_zero - F)`` drops. a/b hold the leading products; the rest of
#: k is zeros.
E_ZERO_TIE_CASES: dict[str, tuple[list, list]] = {
    # 2^-23 + 2^-32 + 2^-43  +  (2^-25 - 2^-32); bit 2^-43: cut at -42 (mmasim) / -43 (fpscope)
    "volta-fp16-fp16out": ([(1 + 2**-10) * 2**-10, 1.984375 * 2**-13],
                           [(1 + 2**-10) * 2**-13, 2**-13]),
    # 2^-25 + 2^-34 + 2^-45  -  2^-34; bit 2^-45: cut at -44 (mmasim) / -45 (fpscope)
    **{p: ([(1 + 2**-10) * 2**-12, -2**-14], [(1 + 2**-10) * 2**-13, 2**-20])
       for p in ("turing-fp16-fp16out", "ampere-fp16-fp16out", "ada-fp16-fp16out")},
    # 2^-27 + 2^-36 + 2^-47  +  3 * 2^-27  -  2^-36; bit 2^-47: cut at -46 / -47
    "hopper-fp16-fp16out": ([(1 + 2**-10) * 2**-14, 1.5 * 2**-13, -2**-14],
                            [(1 + 2**-10) * 2**-13, 2**-13, 2**-22]),
}


def e_zero_tie(preset: str) -> tuple[int, int, np.ndarray]:
    """(mmasim bits, fpscope bits, A) of the :data:`E_ZERO_TIE_CASES` case of ``preset``."""
    import torch

    prof = PRESETS[preset]
    op = build_model(preset)
    av, bv = E_ZERO_TIE_CASES[preset]
    a = np.zeros(prof.k)
    b = np.zeros(prof.k)
    a[:len(av)] = av
    b[:len(bv)] = bv
    A = np.zeros((op.m, op.k))
    B = np.zeros((op.k, op.n))
    A[0], B[:, 0] = a, b
    with torch.no_grad():
        D = op(torch.tensor(A).half(), torch.tensor(B).half(), torch.zeros(op.m, op.n).half())
    d_sim = int(_from_torch(D, "fp16")[0, 0])
    d_fp = fdpa_batch(a[None], b[None], np.zeros(1), prof)
    return d_sim, int(encode(d_fp, resolve_format("fp16"))[0]), a


def _split(value: float, fmt, below: int, fmt_b=None) -> tuple[float, float] | None:
    """a of ``fmt``, b of ``fmt_b`` (default ``fmt``) with ``a * b == value`` whose product
    exponent ``e_a + e_b`` (each at least its format's emin: a subnormal keeps emin) is below
    ``below``; None if there are none."""
    from fpscope.formats import is_representable

    fmt_b = fmt if fmt_b is None else fmt_b
    e = int(np.frexp(value)[1]) - 1
    for eb in sorted(range(e // 2 - 40, e // 2 + 40), key=lambda x: abs(x - e / 2)):
        a, b = value / 2.0**eb, 2.0**eb
        lead = sum(max(int(np.frexp(abs(x))[1]) - 1, f.emin) for x, f in ((a, fmt), (b, fmt_b)))
        if (lead < below and is_representable(np.array([a]), fmt).all()
                and is_representable(np.array([b]), fmt_b).all() and a * b == value):
            return float(a), float(b)
    return None


def e_zero_cases(preset: str) -> list[tuple[str, list, list]]:
    """Hand-made cases on which ``e_zero`` decides the output, or [] where it cannot.

    c = 0 (a zero term: its exponent e_zero is the block maximum), a product P1 on the output
    grid below 2^e_zero (RZ: the smallest grid step 2^g; RNE: 1.5 * 2^g, a tie) and a product
    -2^w at the window's cut: w = e_zero - F is kept with e_zero and cut with e_zero + 1,
    w = e_zero - F - 1 is cut with e_zero and kept with e_zero - 1. Not possible (returns [])
    when the input format has no such products: fp16, fp8, fp6, fp4 inputs with fp32 output
    (products are never below 2^-32), e4m3 and narrower with fp16 output, lossless profiles,
    and the "pairwise" and "two-stage" nodes (AMD CDNA2 / CDNA3: no fused window with zero
    terms; the two-stage node's zero-c exponent cannot change an output, see
    fpscope/presets.py). Block-scaled presets: their e_zero cases need scales
    (:func:`scale_cases`).
    """
    prof = PRESETS[preset]
    if (prof.e_zero is None or prof.lossless or prof.node != "fused"
            or prof.scale_format is not None):
        return []
    fin, fb = (resolve_format(f) for f in prof.operand_formats)
    fstep = resolve_format(prof.step_rounding[0])
    g = fstep.emin - (fstep.p - 1)
    if g >= prof.e_zero:
        return []
    p1 = 2.0**g * (1.5 if prof.step_rounding[1] == "RNE" else 1.0)
    cases = []
    for label, w in (("e_zero+1", prof.e_zero - prof.frac_bits),
                     ("e_zero-1", prof.e_zero - prof.frac_bits - 1)):
        ab1, ab2 = (_split(v, fin, prof.e_zero, fb) for v in (p1, -(2.0**w)))
        if ab1 is None or ab2 is None:
            return []
        cases.append((label, [ab1[0], ab2[0]], [ab1[1], ab2[1]]))
    return cases


def e_zero_probe(preset: str) -> list[tuple[str, int, int, int]]:
    """(case, mmasim bits, fpscope bits, fpscope bits with the case's e_zero variant)."""
    import torch

    prof = PRESETS[preset]
    op = build_model(preset)
    in_name, b_name = _operand_names(prof)
    fout = resolve_format(prof.out_format)
    out = []
    for label, av, bv in e_zero_cases(preset):
        a = np.zeros(prof.k)
        b = np.zeros(prof.k)
        a[:len(av)], b[:len(bv)] = av, bv
        A = np.zeros((op.m, op.k))
        B = np.zeros((op.k, op.n))
        A[0], B[:, 0] = a, b
        fin, fb = resolve_format(in_name), resolve_format(b_name)
        At = _to_torch(encode(A, fin).astype(np.int64), in_name)
        Bt = _to_torch(encode(B, fb).astype(np.int64), b_name)
        Ct = _to_torch(np.zeros((op.m, op.n), dtype=np.int64), prof.out_format)
        with torch.no_grad():
            d_sim = int(_from_torch(op(At, Bt, Ct), prof.out_format)[0, 0])
        dz = prof.e_zero + (1 if label == "e_zero+1" else -1)
        d_fp, d_var = (int(encode(fdpa_batch(a[None], b[None], np.zeros(1), q), fout)[0])
                       for q in (prof, prof.replace(e_zero=dz)))
        out.append((label, d_sim, d_fp, d_var))
    return out


def node_cases(preset: str) -> list[tuple[str, np.ndarray, np.ndarray, float, object]]:
    """Hand-made cases for the AMD nodes (CDNA1's lossless fused one, CDNA2 "pairwise", CDNA3
    "two-stage"), each decided by one field: (label, a, b, c, variant), where ``variant`` is
    the preset with that field changed, which gives another output. [] for the other fused
    presets; a case the preset's formats cannot hold is left out.

    CDNA1 (``zero_sum_sign`` "positive"): ``zero sum`` (every a = -0, b = 1, c = -0: +0;
    variant zero_sum_sign "ieee", -0), ``-0 result`` (the last product -2^-160, c = +0: the
    last block's sum rounds to -0; bf16 only; variant neg_zero_to_pos).

    Two-stage (c = 1 unless said; products scaled together by a power of two until a and b
    fit the input formats): ``F2 keeps 2^-31`` (products 2^-24 + 2^-31: above the fp32 tie
    only if stage 3 keeps 31 fraction bits; variant F2 - 1), ``F2 cuts 2^-32`` (2^-24 +
    2^-32: the tie; variant F2 + 1), ``floor2`` (c = -(1 + 2^-23), products -2^-24 + 2^-40:
    flooring the dot makes an exact tie, rounded to even; variant alignment2 "truncate"),
    ``c drop`` (c = -2^-30 against a product 1: dropped, or floored to -2^-24; variant
    c_drop_bits toggled), ``groups`` (c = 0, products 2^10 (even) and -1.5 * 2^-15 (odd): cut
    toward zero in one group, floored to -2^-14 as a group sum; variant product_groups
    toggled), ``overflow`` (products 2^128 and -2^128: NaN under the overflow rule, +0 without;
    bf16 and xf32 only).

    Pairwise: ``flush_inputs`` (a subnormal a times 2^10; variant no input flush),
    ``flush_outputs`` (one product 2^-130, bf16 only; variant no output flush), ``zero sign``
    (every a = -0, b = 1, c = -0: +0 when zeros are read as +0, -0 when kept; variant
    input_zero_sign "keep"), ``-0 result`` (c = 1.5 * 2^-126 plus a product -1.75 * 2^-126
    flushes to -0, later -0 products keep it; bf16 only; variant neg_zero_to_pos).
    """
    from fpscope.formats import is_representable

    prof = PRESETS[preset]
    if prof.node not in ("pairwise", "two-stage") and prof.zero_sum_sign != "positive":
        return []
    fa, fb = (resolve_format(f) for f in prof.operand_formats)
    fc = resolve_format(prof.out_format)
    k = prof.k
    cases = []

    def ok(x, fmt) -> bool:
        return bool(is_representable(np.asarray(x, dtype=np.float64), fmt).all())

    def add(label, av, bv, c, variant, fill_b=0.0):
        a, b = np.zeros(k), np.full(k, fill_b)
        a[:len(av)], b[:len(bv)] = av, bv
        if ok(a, fa) and ok(b, fb) and ok([c], fc):
            cases.append((label, a, b, float(c), variant))

    def products(label, c, prods, variant, scale=True):
        for sh in (sorted(range(-40, 41), key=abs) if scale else [0]):
            f = 2.0**sh
            splits = [_split(v * f, fa, 10**9, fb) for v in prods]
            if all(sp is not None for sp in splits) and ok([c * f], fc):
                return add(label, [sp[0] for sp in splits], [sp[1] for sp in splits], c * f,
                           variant)

    if prof.node == "fused":
        add("zero sum", [-0.0] * k, [1.0] * k, -0.0, prof.replace(zero_sum_sign="ieee"))
        sp = _split(-(2.0**-160), fa, 10**9, fb)  # in the last block: a later one adds +0
        if sp is not None:
            add("-0 result", [0.0] * (k - 1) + [sp[0]], [0.0] * (k - 1) + [sp[1]], 0.0,
                prof.replace(neg_zero_to_pos=not prof.neg_zero_to_pos))
    elif prof.node == "two-stage":
        F2 = prof.frac_bits2
        products("F2 keeps 2^-31", 1.0, [2.0**-24, 2.0**-31], prof.replace(frac_bits2=F2 - 1))
        products("F2 cuts 2^-32", 1.0, [2.0**-24, 2.0**-32], prof.replace(frac_bits2=F2 + 1))
        products("floor2", -(1 + 2.0**-23), [-(2.0**-24), 2.0**-40],
                 prof.replace(alignment2="truncate"))
        drop = None if prof.c_drop_bits is not None else prof.frac_bits + 1
        products("c drop", -(2.0**-30), [1.0], prof.replace(c_drop_bits=drop))
        products("groups", 0.0, [2.0**10, -1.5 * 2.0**-15],
                 prof.replace(product_groups=1 if prof.product_groups > 1 else 2))
        overflow = None if prof.product_overflow else "fp32"
        products("overflow", 0.0, [2.0**128, -(2.0**128)],
                 prof.replace(product_overflow=overflow), scale=False)
    else:
        add("flush_inputs", [fa.min_normal / 2], [2.0**10], 0.0,
            prof.replace(flush_inputs=not prof.flush_inputs))
        products("flush_outputs", 0.0, [2.0**-130], prof.replace(flush_outputs=False),
                 scale=False)
        add("zero sign", [-0.0] * k, [1.0] * k, -0.0,
            prof.replace(input_zero_sign="keep" if prof.input_zero_sign == "positive"
                         else "positive"))
        add("-0 result", [2.0**-63, 0.0], [-1.75 * 2.0**-63, 1.0], 1.5 * 2.0**-126,
            prof.replace(neg_zero_to_pos=not prof.neg_zero_to_pos), fill_b=-1.0)
    return cases


def node_probe(preset: str) -> list[tuple[str, int, int, int]]:
    """(case, mmasim bits, fpscope bits, fpscope bits with the case's variant) of each
    :func:`node_cases` case; a NaN is written as the preset's ``nan_bits`` on all three."""
    import torch

    prof = PRESETS[preset]
    op = build_model(preset)
    in_name, b_name = _operand_names(prof)
    fin, fb = resolve_format(in_name), resolve_format(b_name)
    fout = resolve_format(prof.out_format)

    def bits(d) -> int:
        d = float(np.asarray(d).reshape(-1)[0])
        return prof.nan_bits if np.isnan(d) else int(encode(np.array([d]), fout)[0])

    out = []
    for label, a, b, c, variant in node_cases(preset):
        A = np.zeros((op.m, op.k))
        B = np.zeros((op.k, op.n))
        C = np.zeros((op.m, op.n))
        A[0], B[:, 0], C[0, 0] = a, b, c
        At = _to_torch(encode(A, fin).astype(np.int64), in_name)
        Bt = _to_torch(encode(B, fb).astype(np.int64), b_name)
        Ct = _to_torch(encode(C, fout).astype(np.int64), prof.out_format)
        with torch.no_grad():
            d_sim = decode(_from_torch(op(At, Bt, Ct), prof.out_format)[0, 0], fout)
        d_fp, d_var = (fdpa_batch(a[None], b[None], np.array([c]), q) for q in (prof, variant))
        out.append((label, bits(d_sim), bits(d_fp), bits(d_var)))
    return out


def _product_sum(target: float, fa, fb, slots: int) -> list[tuple[float, float]] | None:
    """At most ``slots`` products a * b of normal positive values of ``fa`` and ``fb`` that
    add up to the power of two ``target`` exactly, or None: greedily, largest product first,
    else as copies of the largest power-of-two product. Normal operands: a product's
    alignment exponent e_a + e_b is then at most log2 of its value (a subnormal keeps its
    format's emin, above its value's exponent)."""
    def normals(f):
        v = decode(np.arange(1 << f.bits, dtype=np.uint64), f)
        return np.unique(v[np.isfinite(v) & (v >= f.min_normal)])

    prods = {}
    for a in normals(fa):
        for b in normals(fb):
            prods.setdefault(float(a * b), (float(a), float(b)))
    out, rest = [], target
    for v in sorted(prods, reverse=True):
        while v <= rest and len(out) < slots:
            out.append(prods[v])
            rest -= v
    if rest == 0:
        return out
    pow2 = [v for v in prods if v <= target and float(np.log2(v)).is_integer()]
    if pow2 and target / max(pow2) <= slots:
        return [prods[max(pow2)]] * int(target / max(pow2))
    return None


def _e8m0_pair(x: int) -> tuple[float, float]:
    """Two e8m0 scales whose product is 2^x (|x| <= 254)."""
    ea = max(-127, min(127, x - max(-127, min(127, x // 2))))
    return 2.0**ea, 2.0**(x - ea)


def scale_cases(preset: str) -> list[tuple[str, tuple, object]]:
    """Hand-made cases that a block scale decides, for the block-scaled presets ([] for the
    others): (label, inputs, variant). ``inputs`` = (a, b, c, scale_a, scale_b) of one
    instruction (a, b length k; the scales k / scale_block_size each); ``variant`` is either
    the preset with one field changed (fpscope must then give other bits) or other inputs
    (mmasim and fpscope must agree on them too, and give other bits).

    Fused node (``kind::mxf8f6f4``, one e8m0 scale pair per instruction): ``e_zero+1`` /
    ``e_zero-1`` (c = 0, products adding up to 2^v on fp32's subnormal grid and one product
    -2^w, all scaled below e_zero = -133 by the common scale pair: the zero terms' e_zero sets
    the window, so -2^w at 2^(e_zero - F) is kept and at 2^(e_zero - F - 1) cut; variant
    e_zero +-1); ``window`` (c = 1, the product -1 scaled by 2^-25: kept at F = 25; variant F -
    1); ``NaN scale`` (a NaN scale of a: NaN; variant: scale 1); ``overflow`` (the largest
    operands, scales 2^127: Inf; variant: scales 1).

    Grouped node (``kind::mxf4*``, a scale per 32 or 16 elements): ``e_zero+1`` / ``e_zero-1``
    (e8m0: the product 1 in the first scale block at 2^-140, -1 in the second at 2^(e_zero -
    F) or one below; variant e_zero +-1); ``group at scale exponent`` (16 products 6 * 6 at
    scale 1, c = -2^-32: the group's alignment exponent is the scale's (0), not the sum's, so c
    survives; variant: the fused node); ``cancelled group`` (6 * 6 - 6 * 6 at scale 2^16, c = 1
    + 2^-20: the cancelled group keeps its scale's exponent and c loses 2^-20; variant: an
    all-zero group, whose e_zero keeps c); ue4m3 only: ``subnormal scale`` (576 at scale 2^-9,
    exponent emin = -6, c = -2^-42 cut away; variant c = -2^-41, kept), ``zero scale`` (576 at
    scales 0 and 448: a zero term at e_zero, so c = 2^-12 + 2^-35 survives; variant e_zero = 3,
    above the scale pair's 2^2, cuts it); ``NaN scale``; e8m0 only: ``overflow`` (576 at
    2^254: Inf).
    """
    prof = PRESETS[preset]
    if prof.scale_format is None:
        return []
    k, nb, F, ez = prof.k, prof.k // prof.scale_block_size, prof.frac_bits, prof.e_zero
    fa, fb = (resolve_format(f) for f in prof.operand_formats)
    e8m0 = prof.scale_format == "e8m0"
    cases = []

    def inputs(prods, c=0.0, sa=None, sb=None):
        a, b = np.zeros(k), np.zeros(k)
        for j, (x, y) in prods.items():
            a[j], b[j] = x, y
        return (a, b, float(c), np.ones(nb) if sa is None else np.asarray(sa, dtype=float),
                np.ones(nb) if sb is None else np.asarray(sb, dtype=float))

    if prof.node == "fused":
        tiny = fa.min_subnormal * fb.min_subnormal  # -2^w is the smallest product, scaled
        for label, w, dz in (("e_zero+1", ez - F, 1), ("e_zero-1", ez - F - 1, -1)):
            x = w - int(np.log2(tiny))  # the scale pair's exponent
            for v in range(ez - 1, -149, -1):  # 2^v below e_zero, above fp32's smallest 2^-149
                big = _product_sum(2.0**(v - x), fa, fb, k - 1)
                if big is not None:
                    sa, sb = _e8m0_pair(x)
                    prods = dict(enumerate(big))
                    prods[len(big)] = (-fa.min_subnormal, fb.min_subnormal)
                    cases.append((label, inputs(prods, 0.0, [sa], [sb]),
                                  prof.replace(e_zero=ez + dz)))
                    break
        cases.append(("window", inputs({0: (-1.0, 1.0)}, 1.0, [2.0**-25], [1.0]),
                      prof.replace(frac_bits=F - 1)))
        cases.append(("NaN scale", inputs({0: (1.0, 1.0)}, 1.0, [math.nan], [1.0]),
                      inputs({0: (1.0, 1.0)}, 1.0, [1.0], [1.0])))
        big = {0: (fa.max_finite, fb.max_finite)}
        cases.append(("overflow", inputs(big, 0.0, [2.0**127], [2.0**127]), inputs(big)))
        return cases
    G, sbs = prof.group_size, prof.scale_block_size
    sixes = {j: (6.0, 6.0) for j in range(G)}
    unit = np.ones(nb)
    if e8m0:
        second = sbs  # the first product of the second scale block
        for label, w, dz in (("e_zero+1", ez - F, 1), ("e_zero-1", ez - F - 1, -1)):
            sa, sb = unit.copy(), unit.copy()
            sa[0], sb[0] = _e8m0_pair(-140)
            sa[1], sb[1] = _e8m0_pair(w)
            cases.append((label, inputs({0: (1.0, 1.0), second: (-1.0, 1.0)}, 0.0, sa, sb),
                          prof.replace(e_zero=ez + dz)))
    cases.append(("group at scale exponent", inputs(sixes, -(2.0**-32)),
                  prof.replace(node="fused", group_size=None)))
    s16 = unit.copy()
    s16[0] = 2.0**8 if e8m0 else 256.0
    c = 1 + 2.0**-20
    cases.append(("cancelled group", inputs({0: (6.0, 6.0), 1: (-6.0, 6.0)}, c, s16, s16),
                  inputs({0: (0.0, 6.0), 1: (-0.0, 6.0)}, c, s16, s16)))
    nan = unit.copy()
    nan[-1] = math.nan
    cases.append(("NaN scale", inputs(sixes, 1.0, unit, nan), inputs(sixes, 1.0)))
    if e8m0:
        top = unit.copy()
        top[0] = 2.0**127
        cases.append(("overflow", inputs(sixes, 0.0, top, top), inputs(sixes)))
    else:
        sub = unit.copy()
        sub[0] = 2.0**-9
        cases.append(("subnormal scale", inputs(sixes, -(2.0**-42), sub),
                      inputs(sixes, -(2.0**-41), sub)))
        zero, s448 = unit.copy(), unit.copy()
        zero[0], s448[0] = 0.0, 448.0
        cases.append(("zero scale", inputs(sixes, 2.0**-12 + 2.0**-35, zero, s448),
                      prof.replace(e_zero=3)))
    return cases


def scale_probe(preset: str) -> list[tuple[str, int, int, int, int | None]]:
    """(case, mmasim bits, fpscope bits, fpscope bits of the variant, mmasim bits of the
    variant inputs or None for a profile variant) of each :func:`scale_cases` case; a NaN is
    written as the preset's ``nan_bits``."""
    from fpscope.profile import Profile

    prof = PRESETS[preset]
    op = build_model(preset)
    in_name, b_name = _operand_names(prof)
    fin, fb = resolve_format(in_name), resolve_format(b_name)
    fout, fs = resolve_format(prof.out_format), resolve_format(prof.scale_format)
    nb = prof.k // prof.scale_block_size

    def bits(d) -> int:
        d = float(np.asarray(d).reshape(-1)[0])
        return prof.nan_bits if np.isnan(d) else int(encode(np.array([d]), fout)[0])

    def sim(a, b, c, sa, sb) -> int:
        A, B, C = np.zeros((op.m, op.k)), np.zeros((op.k, op.n)), np.zeros((op.m, op.n))
        SA, SB = np.ones((op.m, nb)), np.ones((nb, op.n))
        A[0], B[:, 0], C[0, 0], SA[0], SB[:, 0] = a, b, c, sa, sb
        d = block_scaled_call(op, encode(A, fin), encode(B, fb), encode(C, fout),
                              encode(SA, fs), encode(SB, fs), in_name, b_name,
                              prof.out_format, prof.scale_format)
        return bits(decode(d[0, 0], fout))

    def fp(q, a, b, c, sa, sb) -> int:
        return bits(fdpa_batch(a[None], b[None], np.array([c]), q, sa[None], sb[None]))

    out = []
    for label, case, variant in scale_cases(preset):
        if isinstance(variant, Profile):
            out.append((label, sim(*case), fp(prof, *case), fp(variant, *case), None))
        else:
            out.append((label, sim(*case), fp(prof, *case), fp(prof, *variant), sim(*variant)))
    return out


def _variants(p) -> dict:
    """One-parameter changes of profile ``p`` (name -> changed profile)."""
    if p.node == "grouped":
        return _grouped_variants(p)
    if p.node != "fused":
        return _node_variants(p)
    out = {"F-1": p.replace(frac_bits=p.frac_bits - 1), "F+1": p.replace(frac_bits=p.frac_bits + 1)}
    if p.lossless:
        out = {"F=53": p.replace(frac_bits=53 - 2 - (p.block_size + 1).bit_length())}
    if p.e_zero is not None:
        out["e_zero-1"] = p.replace(e_zero=p.e_zero - 1)
        out["e_zero+1"] = p.replace(e_zero=p.e_zero + 1)
    for al in ("truncate", "floor", "nearest"):
        if al != p.alignment and not p.lossless:
            out[al] = p.replace(alignment=al)
    out.update(_shared_variants(p, halve=p.block_size % 2 == 0))
    return out


def _shared_variants(p, halve: bool) -> dict:
    """The one-parameter changes every node kind reads: L/2 (when ``halve``), 2L, the step
    rounding's mode, the flushes, the -0 rule and the tf32 operand conversion."""
    out = {}
    if halve:
        out["L/2"] = p.replace(block_size=p.block_size // 2)
    if p.k % (2 * p.block_size) == 0:
        out["2L"] = p.replace(block_size=2 * p.block_size)
    fmt, mode = p.step_rounding
    out["step " + ("RNE" if mode != "RNE" else "RZ")] = p.replace(
        step_rounding=(fmt, "RNE" if mode != "RNE" else "RZ"))
    out["flush_inputs"] = p.replace(flush_inputs=not p.flush_inputs)
    out["flush_outputs"] = p.replace(flush_outputs=not p.flush_outputs)
    out["neg_zero_to_pos"] = p.replace(neg_zero_to_pos=not p.neg_zero_to_pos)
    if p.node == "fused" and not p.neg_zero_to_pos:
        out["zero_sum_sign"] = p.replace(
            zero_sum_sign="ieee" if p.zero_sum_sign == "positive" else "positive")
    if p.operand_conversion is not None:
        out["operand round"] = p.replace(
            operand_conversion="RNA" if p.operand_conversion == "truncate" else "truncate")
    return out


def _grouped_variants(p) -> dict:
    """One-parameter changes of a "grouped" profile (NVFP4 / MXFP4 ``kind::mxf4*``); the
    scale format and block stay (they fix the scales' layout)."""
    out = {"F-1": p.replace(frac_bits=p.frac_bits - 1),
           "F+1": p.replace(frac_bits=p.frac_bits + 1),
           "e_zero-1": p.replace(e_zero=p.e_zero - 1), "e_zero+1": p.replace(e_zero=p.e_zero + 1),
           "fused node": p.replace(node="fused", group_size=None),
           "G/2": p.replace(group_size=p.group_size // 2)}
    if p.scale_block_size % (2 * p.group_size) == 0:
        out["2G"] = p.replace(group_size=2 * p.group_size)
    out["L/2"] = p.replace(block_size=p.block_size // 2)
    fmt, mode = p.step_rounding
    out["step RNE"] = p.replace(step_rounding=(fmt, "RNE"))
    for al in ("floor", "nearest"):
        out[al] = p.replace(alignment=al)
    out["flush_inputs"] = p.replace(flush_inputs=not p.flush_inputs)
    out["flush_outputs"] = p.replace(flush_outputs=not p.flush_outputs)
    out["neg_zero_to_pos"] = p.replace(neg_zero_to_pos=not p.neg_zero_to_pos)
    return out


def _node_variants(p) -> dict:
    """One-parameter changes of a "pairwise" (CDNA2) or "two-stage" (CDNA3) profile: the fields
    its node reads (frac_bits, alignment and e_zero are not read by the pairwise node)."""
    out = {}
    if p.node == "two-stage":
        out = {"F-1": p.replace(frac_bits=p.frac_bits - 1),
               "F+1": p.replace(frac_bits=p.frac_bits + 1),
               "F2-1": p.replace(frac_bits2=p.frac_bits2 - 1),
               "F2+1": p.replace(frac_bits2=p.frac_bits2 + 1)}
        if p.e_zero is not None:
            out["e_zero-1"] = p.replace(e_zero=p.e_zero - 1)
            out["e_zero+1"] = p.replace(e_zero=p.e_zero + 1)
            out["e_zero=None"] = p.replace(e_zero=None)
        for al in ("truncate", "floor", "nearest"):
            if al != p.alignment:
                out[al] = p.replace(alignment=al)
            if al != p.alignment2:
                out[f"{al}2"] = p.replace(alignment2=al)
        out["groups " + ("1" if p.product_groups > 1 else "2")] = p.replace(
            product_groups=1 if p.product_groups > 1 else 2)
        out["c_drop " + ("None" if p.c_drop_bits is not None else str(p.frac_bits + 1))] = (
            p.replace(c_drop_bits=None if p.c_drop_bits is not None else p.frac_bits + 1))
        out["overflow " + ("None" if p.product_overflow else "fp32")] = p.replace(
            product_overflow=None if p.product_overflow else "fp32")
    ok = p.node != "two-stage" or (p.block_size // 2) % p.product_groups == 0
    out.update(_shared_variants(p, halve=p.block_size % 2 == 0 and ok))
    out["zero sign"] = p.replace(
        input_zero_sign="keep" if p.input_zero_sign == "positive" else "positive")
    return out


def sensitivity(preset: str, cases: int, seed: int = 0) -> dict:
    """Variant name -> (matched, cases): each parameter must be seen (matched < cases) or
    is reported as not observed by these cases."""
    # NaN-pattern-only outputs (no field changes them) are not counted as the variant's
    return {name: (r.matched + r.nan_pattern, r.cases)
            for name, v in _variants(PRESETS[preset]).items()
            for r in [compare(preset, cases, seed=seed, max_examples=0, profile=v)]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", type=int, default=10_000, help="cases per preset (default 10^4)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--preset", action="append", help="only these presets (repeatable)")
    ap.add_argument("--examples", type=int, default=1,
                    help="mismatch examples printed per generator (default 1)")
    ap.add_argument("--sensitivity", action="store_true",
                    help="also run every one-parameter change of each preset on the same cases "
                         "and print how many outputs each changes (0: not seen by these cases)")
    args = ap.parse_args(argv)
    presets = args.preset or [p for p in PRESETS if p in MODELS]
    missing = [p for p in PRESETS if p not in MODELS]
    results = []
    wp = max(len(p) for p in presets) + 1
    wm = max(len(model_name(p)) for p in presets) + 1
    print(f"{'preset':<{wp}} {'mmasim model':<{wm}} {'cases':>8} {'matched':>8} "
          f"{'explained':>9} {'NaN, pattern not modelled':>25} {'status':<11} {'s':>6}  "
          f"per generator (matched/cases)")
    t0 = time.perf_counter()
    for p in presets:
        r = compare(p, args.cases, seed=args.seed, max_examples=args.examples)
        results.append(r)
        gens = " ".join(f"{g}:{mt}/{c}" for g, (c, mt) in r.by_gen.items())
        print(f"{p:<{wp}} {r.model:<{wm}} {r.cases:>8} {r.matched:>8} {r.explained:>9} "
              f"{r.nan_pattern:>25} {r.status:<11} {r.seconds:>6.1f}  {gens}", flush=True)
    for p in missing:
        print(f"{p:<{wp}} {'(no mmasim model)':<{wm}} {0:>8} {0:>8} skipped")
    agree = sum(r.status == "match" for r in results)
    print(f"\n{agree} of {len(results)} presets agree bit for bit; "
          f"{sum(r.cases for r in results)} cases in {time.perf_counter() - t0:.0f} s")
    for r in results:
        if r.nan_pattern:
            print(f"{r.preset}: {r.nan_pattern} of {r.cases} outputs are NaN in both with "
                  f"another pattern (NaN, pattern not modelled: fpscope writes "
                  f"{PRESETS[r.preset].nan_bits:#x}; not counted as matched)")
    by_name = {r.preset: r for r in results}
    for r in results:
        if r.status == "explained":
            print(f"{r.preset}: all {r.cases - r.matched} others are mmasim's "
                  f"{r.explanation} (ORACLE_ARTIFACTS; each checked)")
    other_ok = {}
    for p, twin in OTHER_INSTRUCTION.items():
        if p in by_name and by_name[p].status != "match":
            t = by_name.get(twin)
            other_ok[p] = (t is not None and t.status == "match"
                           and model_name(twin) == by_name[p].model)
            verdict = ("matches it" if other_ok[p] else
                       "NOT CHECKED: add it with --preset" if t is None else "DOES NOT match it")
            print(f"{p}: models the recorded H100 mma.sync; mmasim's {by_name[p].model} is "
                  f"wgmma, the instruction of {twin}, which {verdict}")
    print("\ne_zero tie cases (fp16 in, fp16 out; a, b of the leading products, c = 0):")
    for p, (av, bv) in E_ZERO_TIE_CASES.items():
        if p in presets:
            d_sim, d_fp, _ = e_zero_tie(p)
            print(f"  {p:<{wp}} a={_hex(encode(av, resolve_format('fp16')), _layout('fp16'))} "
                  f"b={_hex(encode(bv, resolve_format('fp16')), _layout('fp16'))} "
                  f"mmasim={d_sim:04x} fpscope={d_fp:04x} "
                  f"{'match' if d_sim == d_fp else 'MISMATCH'}")
    print("\ne_zero probes (e_zero_cases: c = 0, products below 2^e_zero; 'variant' is fpscope "
          "with e_zero moved by one, which must differ):")
    for p in presets:
        probe = e_zero_probe(p)
        if not probe:
            print(f"  {p:<{wp}} " + ("see the block-scale cases" if PRESETS[p].scale_format
                                     else "not observable"))
            continue
        cells = [f"{lab}: mmasim={s_:x} fpscope={f_:x} variant={v_:x}"
                 for lab, s_, f_, v_ in probe]
        ok = all(s_ == f_ != v_ for _, s_, f_, v_ in probe)
        print(f"  {p:<{wp}} {'; '.join(cells)}  {'match' if ok else 'MISMATCH'}")
    scaled = [p for p in presets if scale_cases(p)]
    if scaled:
        print("\nblock-scale cases (scale_cases: hand-made, each decided by a scale; 'variant' is "
              "fpscope with one field changed, or other inputs that mmasim also runs "
              "(mmasim/fpscope), which must differ):")
    for p in scaled:
        probe = scale_probe(p)
        cells = [f"{lab}: mmasim={s_:x} fpscope={f_:x} variant="
                 + (f"{v_:x}" if sv is None else f"{sv:x}/{v_:x}")
                 for lab, s_, f_, v_, sv in probe]
        ok = all(s_ == f_ != v_ and sv in (None, v_) for _, s_, f_, v_, sv in probe)
        print(f"  {p:<{wp}} {'; '.join(cells)}  {'match' if ok else 'MISMATCH'}")
    node = [p for p in presets if node_cases(p)]
    if node:
        print("\nAMD CDNA1 / CDNA2 / CDNA3 node cases (node_cases: hand-made, each decided by "
              "one field; "
              "'variant' is fpscope with that field changed, which must differ):")
    for p in node:
        cells = [f"{lab}: mmasim={s_:x} fpscope={f_:x} variant={v_:x}"
                 for lab, s_, f_, v_ in node_probe(p)]
        ok = all(s_ == f_ != v_ for _, s_, f_, v_ in node_probe(p))
        print(f"  {p:<{wp}} {'; '.join(cells)}  {'match' if ok else 'MISMATCH'}")
    if args.sensitivity:
        print("\nsensitivity (outputs changed by a one-parameter change, same cases):")
        for p in presets:
            res = sensitivity(p, args.cases, seed=args.seed)
            print(f"  {p:<{wp}} " + " ".join(f"{k}:{c - m}" for k, (m, c) in res.items()),
                  flush=True)
    for r in results:
        for ex in r.examples:
            why = (f" ({r.explanation})" if ex["explained"] else
                   " (NaN, pattern not modelled)" if ex.get("kind") == "NaN pattern" else "")
            print(f"\n{r.preset} [{ex['generator']}]{why} a={ex['a']}\n  b={ex['b']}\n"
                  f"  c={ex['c']} mmasim={ex['mmasim']} fpscope={ex['fpscope']}")
    return 0 if all(r.status not in ("MISMATCH", "NaN pattern") or other_ok.get(r.preset)
                    for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
