"""Probing narrow-format and lossless-block models: fp6/fp4 inputs (Blackwell tcgen05.mma, RTX
Blackwell mma.sync kind::f8f6f4) and AMD CDNA1's exact blocks.

The cancellation probes of :mod:`fpscope.probes.structure` cannot see these blocks (fp6/fp4
products span fewer binades than F; exact blocks never cut a unit), so the structure comes from
the "rounding pairs" fallback and F from c as the third term (:mod:`fpscope.probes.precision`).
"""

import itertools
import math

import numpy as np
import pytest

from fpscope.probes import precision, structure
from fpscope.probes._common import Ctx
from fpscope.probes.blackbox import SimulatedTarget
from fpscope.probes.driver import probe
from fpscope.profile import PRESETS, lossless_frac_bits

SUBSET = ("blackwell-tcgen05-e2m1", "rtx-blackwell-e3m2-fp16out", "cdna1-fp16", "cdna1-bf16",
          "blackwell-tcgen05-e2m3-fp16out")


def _blocks(order, L, K):
    order = list(order) if order is not None else list(range(K))
    return [sorted(order[s:s + L]) for s in range(0, K, L)]


def _check_against_preset(rep, p, differs=()):
    assert rep.fits and rep.profile is not None, rep.reason
    v = rep.validation
    assert v["cases"] >= 2000 and v["accepted"], v.get("first_mismatch")
    q = rep.profile
    found = {f.feature: f for f in rep.findings}
    assert (q.block_size, q.k, q.stages) == (p.block_size, p.k, p.stages)
    assert _blocks(q.k_order, q.block_size, q.k) == _blocks(p.k_order, p.block_size, p.k)
    assert q.frac_bits == p.frac_bits
    assert tuple(q.step_rounding) == tuple(p.step_rounding)
    assert q.c_entry == p.c_entry
    assert q.alignment == p.alignment
    if "neg_zero_to_pos" in differs:  # CDNA1 fp16: no sum rounds to zero, so +0 either way
        assert (q.neg_zero_to_pos, q.zero_sum_sign) == (True, "ieee")
        assert (p.neg_zero_to_pos, p.zero_sum_sign) == (False, "positive")
    else:
        assert (q.neg_zero_to_pos, q.zero_sum_sign) == (p.neg_zero_to_pos, p.zero_sum_sign)
    for flag in ("flush_inputs", "flush_outputs"):
        assert found[flag].observable and getattr(q, flag) == getattr(p, flag)
    assert not found["e_zero"].observable and q.e_zero is None
    assert "rounding pairs" in found["block_size"].note
    return found


@pytest.mark.parametrize("name", SUBSET)
def test_sim_narrow_probe_gives_preset(name):
    p = PRESETS[name]
    rep = probe(SimulatedTarget(p), p.in_format, p.out_format, cases=2048, seed=5)
    found = _check_against_preset(rep, p, ("neg_zero_to_pos",) if name == "cdna1-fp16" else ())
    if p.lossless:  # every gap the formats allow is kept: reported as lossless
        assert "lossless" in found["frac_bits"].note and rep.profile.lossless
        assert found["c_entry"].observable and found["k_order"].observable
    else:  # F bounded through c; the c path shows the cut and where c enters
        assert "c as the third term" in found["frac_bits"].note
        assert found["alignment"].observable and found["c_entry"].observable
        assert not found["k_order"].observable  # one block: nothing to order


@pytest.mark.parametrize("name, differs", [
    ("blackwell-tcgen05-e2m1", ()),
    ("rtx-blackwell-e3m2-fp16out", ()),
    # no negative fp16 product is small enough to round to zero in fp32: the -0 sum gives +0,
    # which neg_zero_to_pos True (the probe's reading) and the preset's zero_sum_sign
    # "positive" with neg_zero_to_pos False both give; random validation agrees
    ("cdna1-fp16", ("neg_zero_to_pos",)),
    # the negative tiny sum's -0 after the -0 sum's +0: zero_sum_sign "positive"
    ("cdna1-bf16", ()),
])
def test_mmasim_narrow_probe_gives_preset(name, differs):
    pytest.importorskip("mmasim")
    from fpscope.probes.mmasim_target import MmasimTarget

    p = PRESETS[name]
    rep = probe(MmasimTarget(name), p.in_format, p.out_format, cases=2048, seed=0)
    found = _check_against_preset(rep, p, differs)
    assert (rep.profile.neg_zero_to_pos != p.neg_zero_to_pos) == ("neg_zero_to_pos" in differs)
    if name == "cdna1-bf16":
        assert found["zero_sum_sign"].value == "positive" and found["zero_sum_sign"].fits
        assert rep.profile.zero_sum_sign == "positive" and not rep.profile.neg_zero_to_pos


def _structure(profile):
    ctx = Ctx(SimulatedTarget(profile), profile.k)
    return ctx, {f.feature: f for f in structure.run(ctx)}


@pytest.mark.parametrize("L", [2, 4, 8, 16])
@pytest.mark.parametrize("base", ["blackwell-tcgen05-e2m1", "rtx-blackwell-e2m3-fp16out",
                                  "cdna1-fp16"])
def test_rounding_pairs_find_the_blocks(base, L):
    p = PRESETS[base].replace(block_size=L, k=32)
    ctx, found = _structure(p)
    f = found["block_size"]
    assert f.fits and f.value == L, f.note
    assert "rounding pairs" in f.note
    assert ctx.blocks == _blocks(None, L, 32)
    assert found["stages"].value == 32 // L
    assert found["k_order"].value is None
    assert found["c_entry"].value == "first"


def test_rounding_pairs_find_the_block_order():
    """Blocks that are neither contiguous nor in natural order (a k_order)."""
    order = [j for s in (3, 1, 0, 2) for j in range(32) if j % 4 == s]
    p = PRESETS["cdna1-fp16"].replace(block_size=8, k=32, k_order=tuple(order))
    ctx, found = _structure(p)
    assert found["block_size"].value == 8
    assert ctx.blocks == _blocks(order, 8, 32)
    assert found["k_order"].value == order
    rep = probe(SimulatedTarget(p), "fp16", cases=2000, seed=1)
    assert rep.accepted and rep.profile.k_order == tuple(order)


def test_rounding_pairs_one_block():
    p = PRESETS["cdna1-fp16"].replace(block_size=16, k=16)
    _, found = _structure(p)
    assert found["block_size"].value == 16 and found["stages"].value == 1
    assert not found["k_order"].observable


def _exact_blocks_target(sizes):
    """fp16 -> fp32 op: blocks of the given sizes, each (block + running c) summed exactly and
    rounded once to fp32 nearest-even."""
    bounds = np.cumsum([0, *sizes])

    def fn(A, B, C):
        D = np.empty_like(C)
        with np.errstate(all="ignore"):
            for m in range(A.shape[0]):
                for n in range(B.shape[1]):
                    acc = C[m, n]
                    for lo, hi in itertools.pairwise(bounds):
                        terms = [acc, *(A[m, lo:hi] * B[lo:hi, n])]
                        s = math.fsum(terms) if np.isfinite(terms).all() else sum(terms)
                        acc = float(np.float32(s))
                    D[m, n] = acc
        return D

    return fn


def test_rounding_pairs_refuse_unequal_blocks():
    rep = probe(_exact_blocks_target([3, 5, 8]), "fp16", "fp32", k=16, cases=0)
    assert not rep.fits and rep.profile is None
    f = next(f for f in rep.findings if f.feature == "block_size")
    assert not f.fits
    assert "sizes [3, 5, 8]" in f.note and "does not fit" in f.note, f.note


def test_rounding_pairs_accept_equal_exact_blocks():
    """The same callable with equal blocks is probed to a lossless profile (control for the
    refusal above)."""
    rep = probe(_exact_blocks_target([4, 4, 4, 4]), "fp16", "fp32", k=16, cases=0)
    assert rep.profile is not None, rep.reason
    q = rep.profile
    assert (q.block_size, q.stages, q.k_order) == (4, 4, None)
    assert q.frac_bits == lossless_frac_bits("fp16", "fp32")
    assert tuple(q.step_rounding) == ("fp32", "RNE")


def test_rounding_pairs_refuse_when_units_are_cut_beside_c():
    """F < 24: units are cut beside c = 2^24 in a block, so no pair makes c + 2 and the blocks
    cannot be seen (and with fp4 products the cancellation probes cannot see them either)."""
    p = PRESETS["blackwell-tcgen05-e2m1"].replace(frac_bits=20, block_size=8)
    _, found = _structure(p)
    f = found["block_size"]
    assert not f.fits and f.value is None
    assert "rounding-pair probe shows no block" in f.note


def test_precision_c_path_bounds_F():
    for F in (12, 25, 30):
        p = PRESETS["blackwell-tcgen05-e3m2"].replace(frac_bits=F)
        ctx = Ctx(SimulatedTarget(p), p.k)
        structure.run(ctx)
        (f,) = precision.run(ctx)
        assert f.value == F, f.note
        # e3m2 products of powers of two reach t = 12 alone, their low bits t = 14; beyond, c
        assert ("c as the third term" in f.note) == (F > 14), f.note
        assert ctx.known["frac_bits_at_least"] is False
