"""fpscope presets vs MMA-Sim (``mmasim``, Xie et al., arXiv 2511.10909), output bit for bit.

For every preset in :data:`fpscope.profile.PRESETS` that has a matching mmasim instruction
model (:data:`MODELS`), draw operand tiles of the instruction's full m x n x k shape, run the
mmasim model on the tiles (``op(A, B, C) -> D``, A: (m, k), B: (k, n), C, D: (m, n) torch
tensors of the instruction's types) and fpscope's :func:`~fpscope.emulate.vectorized.fdpa_batch`
on one instruction per output element (row i of A, column j of B, C[i, j]), and compare the
output bit patterns. NaN: both models return a canonical NaN (mmasim 0x7FFF / 0x7FFFFFFF,
fpscope ``profile.nan_bits``), so the patterns are compared as they are.

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

Besides the random cases: ``e_zero_cases`` / ``e_zero_probe`` build, per preset, inputs on which
``e_zero`` decides the output (or report it unobservable), and ``--sensitivity`` reruns every
one-parameter change of each preset (F +-1, e_zero +-1, L/2, 2L, step rounding, alignment,
flushes, -0 rule, operand conversion) on the same cases and counts the outputs it changes.

Usage: ``python scripts/mmasim_validation.py [--cases N] [--preset NAME ...] [--seed S]
[--sensitivity]`` (about 3.3 s per preset per 10^5 cases on one idle core; the summary table,
then the e_zero cases, then the first mismatching cases).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from fpscope.emulate.vectorized import fdpa_batch
from fpscope.formats import decode, encode
from fpscope.probes.mmasim_target import MODELS, build_model, model_name
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

    @property
    def status(self) -> str:
        return "match" if self.matched == self.cases else "MISMATCH"


def _operand_names(prof) -> tuple[str, str]:
    """The formats A and B are encoded in for mmasim: the preset's ``operand_formats``, tf32
    as fp32 bit patterns (mmasim truncates them itself)."""
    return tuple("fp32" if f == "tf32" else f for f in prof.operand_formats)


def compare(preset: str, cases: int, seed: int = 0, max_examples: int = 2,
            generators=GENERATORS, profile=None) -> Result:
    """Compare ``preset`` with its mmasim model on about ``cases`` output elements.

    ``profile``: evaluate this profile instead of the preset (same mmasim model and operands;
    :func:`sensitivity` uses it to show that a changed parameter is seen).
    """
    import torch

    prof = PRESETS[preset] if profile is None else profile
    op = build_model(preset)
    m, n, k = op.m, op.n, op.k
    assert k == prof.k, (preset, k, prof.k)
    in_name, b_name = _operand_names(prof)
    out_name = prof.out_format
    lin, lb, lout = _register(in_name), _register(b_name), _register(out_name)
    fin, fb, fout = resolve_format(in_name), resolve_format(b_name), resolve_format(out_name)
    res = Result(preset, model_name(preset))
    t0 = time.perf_counter()
    per_gen = -(-cases // len(generators))
    for gi, gen in enumerate(generators):
        rng = np.random.default_rng([seed, gi, sum(map(ord, preset))])
        tiles = max(1, -(-per_gen // (m * n)))
        A, B, C = _gen_tiles(gen, rng, tiles, m, n, k, lin, lout, lb)
        # mmasim: one call per full m x n x k tile
        At, Bt, Ct = _to_torch(A, in_name), _to_torch(B, b_name), _to_torch(C, out_name)
        with torch.no_grad():
            D = torch.stack([op(At[t], Bt[t], Ct[t]) for t in range(tiles)])
        d_sim = _from_torch(D, out_name).reshape(-1)
        # fpscope: one instruction per output element
        av, bv, cv = decode(A, fin), decode(B, fb), decode(C, fout)
        a_rows = np.repeat(av[:, :, None, :], n, axis=2).reshape(-1, k)      # (t, m, n, k)
        b_cols = np.repeat(np.swapaxes(bv, 1, 2)[:, None, :, :], m, axis=1).reshape(-1, k)
        d_fp = fdpa_batch(a_rows, b_cols, cv.reshape(-1), prof)
        d_fp_bits = encode(d_fp, fout).astype(np.int64)
        d_fp_bits = np.where(np.isnan(d_fp), prof.nan_bits, d_fp_bits)
        sim_nan = np.isnan(decode(d_sim, fout))
        same = (d_sim == d_fp_bits) | (sim_nan & np.isnan(d_fp))
        res.by_gen[gen] = [same.size, int(same.sum())]
        res.cases += same.size
        res.matched += int(same.sum())
        a_pat = np.repeat(A[:, :, None, :], n, axis=2).reshape(-1, k)
        b_pat = np.repeat(np.swapaxes(B, 1, 2)[:, None, :, :], m, axis=1).reshape(-1, k)
        for i in np.flatnonzero(~same)[:max_examples]:
            res.examples.append({
                "generator": gen,
                "a": _hex(a_pat[i], lin), "b": _hex(b_pat[i], lb),
                "c": _hex(C.reshape(-1)[i], lout),
                "mmasim": _hex(d_sim[i], lout), "fpscope": _hex(d_fp_bits[i], lout),
                "a_values": a_rows[i].tolist(), "b_values": b_cols[i].tolist(),
                "c_value": float(cv.reshape(-1)[i]),
            })
    res.seconds = time.perf_counter() - t0
    return res


#: Hand-made fp16-input, fp16-output cases where the exponent a zero term takes (``e_zero``)
#: decides an RNE tie: c = 0 and a zero product (so the zero's exponent is the block maximum),
#: nonzero products far below it, their exact sum (2^-25 + a low bit, or 2.5 * 2^-24 + a low
#: bit) sits one low bit above a tie. mmasim's e_zero is one above fpscope's for every fp16
#: output (Volta -19 vs -20, Turing/Ampere/Ada -20 vs -21, Hopper -21 vs -22), so mmasim's
#: window cut ``2^(e_zero - F)`` drops the low bit fpscope keeps. a/b hold the leading products;
#: the rest of k is zeros.
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
    (products are never below 2^-32), e4m3 and narrower with fp16 output, lossless profiles.
    """
    prof = PRESETS[preset]
    if prof.e_zero is None or prof.lossless:
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


def _variants(p) -> dict:
    """One-parameter changes of profile ``p`` (name -> changed profile)."""
    out = {"F-1": p.replace(frac_bits=p.frac_bits - 1), "F+1": p.replace(frac_bits=p.frac_bits + 1)}
    if p.lossless:
        out = {"F=53": p.replace(frac_bits=53 - 2 - (p.block_size + 1).bit_length())}
    if p.e_zero is not None:
        out["e_zero-1"] = p.replace(e_zero=p.e_zero - 1)
        out["e_zero+1"] = p.replace(e_zero=p.e_zero + 1)
    if p.block_size % 2 == 0:
        out["L/2"] = p.replace(block_size=p.block_size // 2)
    if p.k % (2 * p.block_size) == 0:
        out["2L"] = p.replace(block_size=2 * p.block_size)
    fmt, mode = p.step_rounding
    out["step " + ("RNE" if mode != "RNE" else "RZ")] = p.replace(
        step_rounding=(fmt, "RNE" if mode != "RNE" else "RZ"))
    for al in ("truncate", "floor", "nearest"):
        if al != p.alignment and not p.lossless:
            out[al] = p.replace(alignment=al)
    out["flush_inputs"] = p.replace(flush_inputs=not p.flush_inputs)
    out["flush_outputs"] = p.replace(flush_outputs=not p.flush_outputs)
    out["neg_zero_to_pos"] = p.replace(neg_zero_to_pos=not p.neg_zero_to_pos)
    if p.operand_conversion is not None:
        out["operand round"] = p.replace(
            operand_conversion="round" if p.operand_conversion == "truncate" else "truncate")
    return out


def sensitivity(preset: str, cases: int, seed: int = 0) -> dict:
    """Variant name -> (matched, cases): each parameter must be seen (matched < cases) or
    is reported as not observed by these cases."""
    return {name: (r.matched, r.cases) for name, v in _variants(PRESETS[preset]).items()
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
          f"{'status':<9} {'s':>6}  per generator (matched/cases)")
    t0 = time.perf_counter()
    for p in presets:
        r = compare(p, args.cases, seed=args.seed, max_examples=args.examples)
        results.append(r)
        gens = " ".join(f"{g}:{mt}/{c}" for g, (c, mt) in r.by_gen.items())
        print(f"{p:<{wp}} {r.model:<{wm}} {r.cases:>8} {r.matched:>8} {r.status:<9} "
              f"{r.seconds:>6.1f}  {gens}", flush=True)
    for p in missing:
        print(f"{p:<{wp}} {'(no mmasim model)':<{wm}} {0:>8} {0:>8} skipped")
    agree = sum(r.status == "match" for r in results)
    print(f"\n{agree} of {len(results)} presets agree bit for bit; "
          f"{sum(r.cases for r in results)} cases in {time.perf_counter() - t0:.0f} s")
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
            print(f"  {p:<{wp}} not observable")
            continue
        cells = [f"{lab}: mmasim={s_:x} fpscope={f_:x} variant={v_:x}"
                 for lab, s_, f_, v_ in probe]
        ok = all(s_ == f_ != v_ for _, s_, f_, v_ in probe)
        print(f"  {p:<{wp}} {'; '.join(cells)}  {'match' if ok else 'MISMATCH'}")
    if args.sensitivity:
        print("\nsensitivity (outputs changed by a one-parameter change, same cases):")
        for p in presets:
            res = sensitivity(p, args.cases, seed=args.seed)
            print(f"  {p:<{wp}} " + " ".join(f"{k}:{c - m}" for k, (m, c) in res.items()),
                  flush=True)
    for r in results:
        for ex in r.examples:
            print(f"\n{r.preset} [{ex['generator']}] a={ex['a']}\n  b={ex['b']}\n  c={ex['c']} "
                  f"mmasim={ex['mmasim']} fpscope={ex['fpscope']}")
    return 0 if all(r.status == "match" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
