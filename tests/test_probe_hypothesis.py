"""Random profiles from the parameter space, run as simulated black boxes, are probed back to an
equivalent profile (bit-exact on the validation generators, observable parameters equal)."""

import math
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fpscope.emulate.vectorized import fdpa_batch
from fpscope.probes import zeros
from fpscope.probes._common import Ctx, Finding
from fpscope.probes.blackbox import SimulatedTarget
from fpscope.probes.driver import probe
from fpscope.probes.specials import zero_sign_rows
from fpscope.profile import Profile

STEPS = [("fp32", "RZ"), ("fp32", "RNE"), ("e8m13", "RZ"), ("e8m13", "RNE"), ("fp16", "RZ"),
         ("fp16", "RNE")]


@st.composite
def profiles(draw):
    step = draw(st.sampled_from(STEPS))
    out = "fp16" if step[0] == "fp16" else "fp32"
    fp8 = ["fp8_e4m3fn", "fp8_e5m2"]
    fin = draw(st.sampled_from((["fp16"] if out == "fp16" else ["fp16", "bf16"]) + fp8))
    L = draw(st.sampled_from([2, 4, 8, 16, 32]))
    stages = 2 if L == 2 else draw(st.sampled_from([1, 2] if L <= 16 else [1]))
    # fp16 outputs: the cancellation probes see at most 26 kept bits (2^15 .. 2^-14); fp8
    # products (e4m3: 2^16 .. 2^-12) at most about 30, and devices keep 13 (Hopper, Ada) or 25
    # (Blackwell, mmasim): F >= 31 with c added last reads as lossless (a known limit)
    # (FPSCOPE_HYP_FP8_F=26:30: fp8 F from 26 .. 30 instead, fp32 and fp16 outputs; README,
    # "fp8 with F = 26 .. 30")
    lo8, hi8 = map(int, os.environ.get("FPSCOPE_HYP_FP8_F", "10:25").split(":"))
    F = draw((st.integers(lo8, hi8) if fin in fp8 else
              st.integers(10, 26 if out == "fp16" else 30)).filter(
        lambda f: f + 2 + math.log2(L + 1) <= 53))
    # e_zero around the output's subnormal range (NUMERICS.md: -19 .. -22 for fp16 outputs;
    # scripts/probe_sweep.py --formats fp16:fp16 found corners up to -15)
    e_zero = draw(st.one_of(st.none(), st.integers(-26, -13) if out == "fp16"
                            else st.integers(-140, -127)))
    # the zero-sign rules: NVIDIA's -0 -> +0, IEEE's signed zeros, CDNA1's +0 exact zero sums
    nz2p, zss = draw(st.sampled_from([(True, "ieee"), (False, "ieee"), (False, "positive")]))
    return Profile(
        name="random", arch="test", in_format=fin, out_format=out, block_size=L, k=L * stages,
        frac_bits=F, alignment=draw(st.sampled_from(["truncate", "floor", "nearest"])),
        e_zero=e_zero, step_rounding=step, flush_inputs=draw(st.booleans()),
        flush_outputs=draw(st.booleans()), nan_bits=0x7FFF if out == "fp16" else 0x7FFFFFFF,
        neg_zero_to_pos=nz2p, zero_sum_sign=zss,
        # L = 2 with c added last leaves no three-term block for the F probe (known limitation)
        c_entry="first" if L == 2 else draw(st.sampled_from(["first", "first", "last"])))


@settings(max_examples=int(os.environ.get("FPSCOPE_HYP_EXAMPLES", "8")), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(profiles())
def test_random_profile_round_trip(p):
    rep = probe(SimulatedTarget(p), p.in_format, p.out_format, cases=2048, seed=1)
    assert rep.profile is not None and rep.fits, rep.reason
    assert rep.accepted, rep.validation["first_mismatch"]
    q = rep.profile
    found = {f.feature: f for f in rep.findings}
    assert (q.block_size, q.k) == (p.block_size, p.k)
    if found["frac_bits"].observable and "at least" not in found["frac_bits"].note:
        assert q.frac_bits == p.frac_bits
    if found["alignment"].observable:
        assert q.alignment == p.alignment
    if found["c_entry"].observable:
        assert q.c_entry == p.c_entry
    for flag in ("flush_inputs", "flush_outputs"):
        if found[flag].observable:
            assert getattr(q, flag) == getattr(p, flag)
    if found["e_zero"].observable:
        assert q.e_zero == p.e_zero
    # the zero-sign rules (neg_zero_to_pos, zero_sum_sign) need not be equal where the formats
    # or the structure make them act alike (c added last to a block started from +0, no sum
    # small enough to round to zero): the outputs must be, on zero-sign rows
    A, B, C = zero_sign_rows(p)
    assert len(A) >= 4
    want, got = fdpa_batch(A, B, C, p), fdpa_batch(A, B, C, q)
    assert (want.view(np.int64) == got.view(np.int64)).all(), (p, q)


def _edge(**kw):
    base = dict(name="edge", arch="test", in_format="bf16", out_format="fp32", block_size=2,
                k=4, frac_bits=10, e_zero=-127, step_rounding=("fp32", "RZ"))
    return Profile(**{**base, **kw})


#: Profiles the random round trip (or scripts/probe_sweep.py) once found probed wrongly (each
#: fixed in the family named).
EDGES = {
    # zeros: under floor alignment a cut -delta is -2^(e_max - F), not 0
    "floor e_zero": _edge(alignment="floor"),
    "floor no e_zero": _edge(in_format="fp16", out_format="fp16", alignment="floor",
                             e_zero=None, step_rounding=("fp16", "RZ")),
    # specials: the underflow row's product cut by e_zero read as "no profile fits"
    "cut underflow row": _edge(neg_zero_to_pos=False),
    # rounding: a tiny row's zero sign taken for a rounding difference (e8m13 lost); zeros:
    # the e8m13 grid, not fp32's
    "e8m13 steps, -0 kept": _edge(e_zero=None, step_rounding=("e8m13", "RZ"),
                                  neg_zero_to_pos=False, flush_inputs=True),
    # zeros: the sign route where outputs are flushed
    "flushed, -0 kept": _edge(flush_outputs=True, neg_zero_to_pos=False),
    "flushed floor, -0 kept": _edge(block_size=4, alignment="floor", flush_inputs=True,
                                    flush_outputs=True, neg_zero_to_pos=False),
    # specials: c added last, -0 carried from the first block into the second
    "c last, chained -0": _edge(block_size=4, k=8, e_zero=None, c_entry="last",
                                neg_zero_to_pos=False),
    # zeros: every power-of-two product survives the cut; the low bits of products do not
    "cut among low bits": _edge(in_format="fp16", out_format="fp16", block_size=4,
                                e_zero=-18, step_rounding=("fp16", "RZ"), flush_inputs=True),
    # zeros: the sign route with products of subnormal operands (their lead above their value)
    "flushed fp16, -0 kept": _edge(in_format="fp16", out_format="fp16", e_zero=-18,
                                   step_rounding=("fp16", "RZ"), flush_outputs=True,
                                   neg_zero_to_pos=False),
    # specials: fp16 products cannot round to zero in fp32; a flushed c can
    "c last, flushed c": _edge(in_format="fp16", block_size=4, e_zero=None, c_entry="last",
                               flush_inputs=True, flush_outputs=True, neg_zero_to_pos=False),
    # specials' zero_rules: a -0 only from a chained subnormal flushed on input, beside a
    # product that e_zero cuts (seen once e_zero is known)
    "c last, flushed chained -0": _edge(block_size=4, k=8, flush_inputs=True, c_entry="last",
                                        neg_zero_to_pos=False),
    # zeros: fp32 and e8m13 steps agree on the rounding probes (F = 10); only e_zero's
    # sums on 2^-140 show e8m13's subnormal grid (read as fp32 with e_zero -129 before)
    "e8m13 grid, nearest": _edge(alignment="nearest", e_zero=-130,
                                 step_rounding=("e8m13", "RZ")),
    "e8m13 grid, floor": _edge(alignment="floor", e_zero=-130, step_rounding=("e8m13", "RZ")),
    # zeros: under nearest alignment the low bit 2^(cut - 1) of 2^s_lo + 2^(cut - 1), at a cut
    # at 2^s_lo, is a tie that rounds up to even (read as e_zero -19 before)
    "low bits, nearest": _edge(in_format="fp16", out_format="fp16", block_size=4,
                               alignment="nearest", e_zero=-18, step_rounding=("fp16", "RZ"),
                               flush_inputs=True),
    # specials' zero_rules: a negative product kept by the window (at 2^(e_zero - F)) that
    # rounds to -0 on e8m13's grid; the rows had only half fp32's smallest subnormal, cut
    "e8m13 grid, zero sums +0": _edge(block_size=4, e_zero=-137, step_rounding=("e8m13", "RZ"),
                                      flush_inputs=True, neg_zero_to_pos=False,
                                      zero_sum_sign="positive"),
    # zeros: every step the rounding family left open is tried, not one per grid (e8m13 RZ
    # came first for an e8m13 RNE device: e_zero -129 read, fp32 kept)
    "e8m13 RNE grid": _edge(e_zero=-130, step_rounding=("e8m13", "RNE")),
    # zeros: e_zero at the lead of the largest X on e8m13's grid (3 * 2^-139): the cut
    # follows it there, and only the smaller X show the zeros (read as None before)
    "e_zero at the top X, floor": _edge(alignment="floor", e_zero=-138,
                                        step_rounding=("e8m13", "RZ"), flush_inputs=True),
    "e_zero at the top X, L = 4": _edge(block_size=4, k=8, e_zero=-138,
                                        step_rounding=("e8m13", "RZ")),
    # specials: the negative underflow row on e8m13's grid (half fp32's smallest subnormal,
    # 2^-150, was cut by e_zero and read as -0 -> +0; e_zero -139 shows only in zero signs)
    "underflow on the step grid": _edge(e_zero=-139, step_rounding=("e8m13", "RZ"),
                                        neg_zero_to_pos=False, zero_sum_sign="positive"),
    # specials: the underflow under flushed outputs
    "flushed, zero sums +0": _edge(e_zero=-132, frac_bits=24, flush_outputs=True,
                                   neg_zero_to_pos=False, zero_sum_sign="positive"),
    # zeros (found by scripts/probe_sweep.py): flushed outputs hide the grid, but sums of a
    # few products below 2^-127 reach the smallest normal (read as None, fp32 steps, before)
    "flushed, e_zero -127": _edge(block_size=4, k=8, flush_outputs=True),
    "flushed, e_zero -127, nearest": _edge(alignment="nearest", flush_outputs=True,
                                           flush_inputs=True),
    # zeros (scripts/probe_sweep.py): -0 made +0 and e_zero at or below the smallest X's lead
    # on e8m13's grid: only sums of terms below 2^e_zero at a tie or a grid point show it
    "e_zero below the grid, RNE": _edge(e_zero=-140, step_rounding=("e8m13", "RNE")),
    "e_zero below the grid, RZ": _edge(alignment="nearest", e_zero=-139,
                                       step_rounding=("e8m13", "RZ")),
    # zeros (random round trip): F = 12 bits below e_max = -138 reach below fp32's grid, where
    # RNE and RZ steps differ; the rounding probes left them equal (read as RZ before)
    "step mode below the grid": _edge(frac_bits=12, e_zero=-138, step_rounding=("fp32", "RNE")),
    # zeros (random round trip): L = 2 leaves no slot for the low-bit rows; only a sum at a grid
    # point with its low bit a term of its own shows e_zero (read as None before)
    "fp16, L = 2, low bit apart": _edge(in_format="fp16", out_format="fp16", e_zero=-18,
                                        step_rounding=("fp16", "RZ"), flush_inputs=True),
    # zeros (scripts/probe_sweep.py --formats fp16:fp16): flushed inputs leave no product
    # below 2^-28, flushed outputs no grid; the sign of a zero from a product's low bit
    # beside one cancelling the rest shows e_zero (read as None before)
    "flushed fp16, low-bit signs": _edge(in_format="fp16", out_format="fp16", block_size=4,
                                         k=8, e_zero=-18, step_rounding=("fp16", "RZ"),
                                         flush_inputs=True, flush_outputs=True,
                                         neg_zero_to_pos=False),
    "flushed fp16, low-bit signs, floor": _edge(in_format="fp16", out_format="fp16",
                                                block_size=4, k=8, alignment="floor",
                                                e_zero=-19, step_rounding=("fp16", "RNE"),
                                                flush_inputs=True, flush_outputs=True,
                                                neg_zero_to_pos=False),
    # zeros (the same sweep): a grid point as two halves carrying the bit (+-2^(E - 1 - F)):
    # neither the bit alone nor the point less the bit is one product here (e_zero -22 read
    # as -23, and -15 under flushed outputs as None, before)
    "fp16, L = 2, halves": _edge(in_format="fp16", out_format="fp16", e_zero=-22,
                                 step_rounding=("fp16", "RZ"), flush_inputs=True,
                                 neg_zero_to_pos=True),
    # rounding (random fp8 profiles): F = 11 bits below e_max with fp8 products; n copies of
    # 2^Eh never carried a sum past e8m13's 14 bits (every step mode read as equal, fp32 RZ
    # taken, rejected by the validation); L - 1 products of 1.875 * 2^Eh do
    "fp8, e8m13 RNE steps, F = 11": _edge(in_format="fp8_e4m3fn", block_size=8, k=8,
                                          frac_bits=11, e_zero=None, alignment="floor",
                                          step_rounding=("e8m13", "RNE")),
    "fp16, L = 2, halves at the smallest normal": _edge(in_format="fp16", out_format="fp16",
                                                        e_zero=-15,
                                                        step_rounding=("fp16", "RZ"),
                                                        flush_outputs=True,
                                                        neg_zero_to_pos=True),
    # zeros: the sums past a rounding point were reproduced by e_zero -14 and -13 alike, and
    # the first, -14, was taken (the validation's 2048 random outputs accepted it); rows on
    # which the two disagree, run through the op, decide (round trip, FPSCOPE_HYP_FP8_F=26:30)
    "e_zero -13 flushed, two fitting": _edge(in_format="fp16", out_format="fp16", block_size=4,
                                             k=8, frac_bits=18, e_zero=-13,
                                             step_rounding=("fp16", "RZ"), flush_inputs=True,
                                             flush_outputs=True, neg_zero_to_pos=True),
}


@pytest.mark.parametrize("name", EDGES)
def test_edge_profile_round_trip(name):
    p = EDGES[name]
    rep = probe(SimulatedTarget(p), p.in_format, p.out_format, cases=2048, seed=1)
    assert rep.fits and rep.accepted, rep.reason
    q = rep.profile
    assert (q.e_zero, tuple(q.step_rounding), q.neg_zero_to_pos) == \
        (p.e_zero, tuple(p.step_rounding), p.neg_zero_to_pos)
    A, B, C = zero_sign_rows(p)  # zero_sum_sign: equal, or alike for this structure
    assert (fdpa_batch(A, B, C, p).view(np.int64) == fdpa_batch(A, B, C, q).view(np.int64)).all()
    if p.k > p.block_size and p.c_entry == "first":
        assert q.zero_sum_sign == p.zero_sum_sign


def test_e_zero_above_the_smallest_normal():
    """An e_zero above fp16's smallest normal exponent cuts bits of normal sums only: the
    zeros family's sums past ties in the binade below 2^E read it (found by the 6000-example
    random round trip; before, rejected by the validation)."""
    p = _edge(in_format="fp16", out_format="fp16", frac_bits=13, e_zero=-13,
              step_rounding=("fp16", "RNE"), flush_inputs=True, flush_outputs=True)
    rep = probe(SimulatedTarget(p), p.in_format, p.out_format, cases=2048, seed=1)
    assert rep.fits and rep.accepted, rep.reason
    assert rep.profile.e_zero == -13


def test_e_zero_above_the_smallest_normal_fp8_inputs():
    """e5m2 products hold too few bits for a point of a normal fp16 binade beside the cut bit:
    c carries the point (found by the 6000-example random round trip; before, e_zero read
    as None and rejected by the validation)."""
    p = _edge(in_format="fp8_e5m2", out_format="fp16", frac_bits=12, e_zero=-13,
              step_rounding=("fp16", "RZ"), flush_inputs=True, flush_outputs=True)
    rep = probe(SimulatedTarget(p), p.in_format, p.out_format, cases=2048, seed=1)
    assert rep.fits and rep.accepted, rep.reason
    assert rep.profile.e_zero == -13


def test_fp8_two_product_blocks_and_e8m13_steps():
    """With two products per block only c, entering first, makes a third big term whose
    carries pass e8m13's 14 bits at F = 12 (found by the random round trip with fp8 inputs;
    before, e8m13 RZ was taken and rejected by the validation)."""
    p = _edge(in_format="fp8_e4m3fn", frac_bits=12, e_zero=None, alignment="floor",
              step_rounding=("e8m13", "RNE"))
    rep = probe(SimulatedTarget(p), p.in_format, p.out_format, cases=2048, seed=1)
    assert rep.fits and rep.accepted, rep.reason
    assert tuple(rep.profile.step_rounding) == ("e8m13", "RNE")


@pytest.mark.parametrize("kw", [
    # alignment: 0.25 * 2^(16 - 28) = 2^-14 is no product of two normal e4m3 values (they reach
    # 2^-12), so the product path read "not observable", default truncate, and the validation
    # rejected it; 2.25 * 2^-12 is such a product and shows floor
    dict(block_size=4, k=4, frac_bits=28, alignment="floor", e_zero=-139,
         step_rounding=("fp32", "RNE"), flush_outputs=True, c_entry="last"),
    dict(block_size=32, k=32, frac_bits=27, alignment="nearest", e_zero=-139,
         flush_inputs=True, c_entry="last"),
    # precision: the low-bit row t = 29 was 2^-12 + 2^-13 beside -2^-12, a tie at the cut 2^-12
    # that nearest rounds to 2^-11, read as "neither the term nor 0: does not fit"
    dict(block_size=8, k=8, frac_bits=28, alignment="nearest", e_zero=-132),
], ids=["floor F=28 c last", "nearest F=27 c last", "nearest F=28"])
def test_fp8_kept_bits_beyond_the_normal_products(kw):
    """fp8 e4m3 profiles with F above the 28 binades its normal products span (found by the
    round trip with F widened to 26 .. 30 for fp8)."""
    p = _edge(in_format="fp8_e4m3fn", **kw)
    rep = probe(SimulatedTarget(p), p.in_format, p.out_format, cases=2048, seed=1)
    assert rep.fits and rep.accepted, rep.reason
    assert (rep.profile.frac_bits, rep.profile.alignment) == (p.frac_bits, p.alignment)
    found = {f.feature: f for f in rep.findings}  # read by the families, not the node fit
    assert found["frac_bits"].fits and found["alignment"].observable


@pytest.mark.parametrize("kw", [
    # alignment: the pair at 2^15 (the fp16 output's largest binade) put 0.25 * 2^(15 - 30)
    # below the smallest normal fp16 value: "not observable", default truncate, then the
    # rounding probes did not fit and the node fit read F = 29; the pair at 2^30 (an e5m2
    # product) shows floor
    dict(in_format="fp8_e5m2", block_size=4, k=4, frac_bits=30, alignment="floor"),
    # precision: e4m3 products beside a pair at 2^15 show t <= 30 only, and c (added last)
    # is never cut: F read as lossless (40), the node fit then took F = 21 and the validation
    # rejected it; 2^-12 beside the pair 2^16 shows t = 31 cut
    dict(in_format="fp8_e4m3fn", block_size=4, k=4, frac_bits=30, alignment="floor"),
    # c path: with flushed outputs c = 0.25 * 2^(15 - 28) (subnormal fp16) never came back, so
    # c_entry defaulted to "first"; beside the pair 2^16 c = 2^-14 is normal and shows "last"
    dict(in_format="fp8_e4m3fn", block_size=16, k=16, frac_bits=28, alignment="nearest",
         flush_outputs=True),
], ids=["e5m2 floor F=30", "e4m3 floor F=30", "e4m3 nearest F=28 flushed"])
def test_fp8_fp16_output_pair_above_the_output_range(kw):
    """fp8 inputs, fp16 output, c added last, F >= 28 (found by the round trip with
    FPSCOPE_HYP_FP8_F=26:30): the probes' cancelling pair may lie above the output's range,
    up to the largest product, where the fp16 output cannot show the cut beside 2^15."""
    p = _edge(out_format="fp16", step_rounding=("fp16", "RZ"), nan_bits=0x7FFF, e_zero=None,
              c_entry="last", **kw)
    rep = probe(SimulatedTarget(p), p.in_format, p.out_format, cases=2048, seed=1)
    assert rep.fits and rep.accepted, rep.reason
    q = rep.profile
    assert (q.frac_bits, q.alignment, q.c_entry) == (p.frac_bits, p.alignment, "last")
    found = {f.feature: f for f in rep.findings}  # read by the families, not the node fit
    assert found["frac_bits"].fits and found["alignment"].observable
    assert found["c_entry"].observable and "node" not in found


@pytest.mark.parametrize("kw", [
    dict(block_size=4, k=8, frac_bits=29, alignment="floor", e_zero=-137,
         step_rounding=("e8m13", "RNE"), flush_inputs=True),
    dict(block_size=16, k=32, frac_bits=28, alignment="nearest", e_zero=-133,
         flush_inputs=True),
], ids=["L=4 x 2, e8m13 RNE", "L=16 x 2, fp32 RZ"])
def test_fp8_blocks_with_c_last_and_no_cut_unit(kw):
    """e4m3 products span 28 binades, so with F >= 28 no unit is cut beside a cancelling pair,
    and with c added last two units beside c = 2^p always sum exactly: one block was read (8 or
    32 products). The big term as a product in the first block shows the blocks."""
    p = _edge(in_format="fp8_e4m3fn", c_entry="last", **kw)
    rep = probe(SimulatedTarget(p), p.in_format, p.out_format, cases=2048, seed=1)
    assert rep.fits and rep.accepted, rep.reason
    q = rep.profile
    assert (q.block_size, q.k, q.k_order, q.c_entry) == (p.block_size, p.k, None, "last")
    found = {f.feature: f for f in rep.findings}  # read by the structure family, not a node fit
    assert found["block_size"].fits and found["block_size"].value == p.block_size


def test_step_grid_choice_is_reported():
    """The zeros family's choice of step grid replaces the rounding family's first candidate,
    and the text report says so."""
    p = EDGES["e8m13 grid, floor"]
    rep = probe(SimulatedTarget(p), p.in_format, p.out_format, cases=0, seed=1)
    steps = [(f.family, f.value) for f in rep.findings if f.feature == "step_rounding"]
    assert steps == [("rounding", ["fp32", "RZ"]), ("zeros", ["e8m13", "RZ"])]
    assert rep.features()["step_rounding"] == ["e8m13", "RZ"]
    assert "[replaced: the profile's step_rounding is e8m13 RZ]" in rep.to_text()


def test_boundary_sums_report_their_reading():
    """Where only sums past a rounding point show e_zero (flushed outputs), the zeros
    family's e_zero finding says so and holds rows that the routes' reading got wrong."""
    p = EDGES["flushed, e_zero -127"]
    rep = probe(SimulatedTarget(p), p.in_format, p.out_format, cases=0, seed=1)
    (f,) = [f for f in rep.findings if f.feature == "e_zero"]
    assert (f.family, f.value, f.observable, f.fits) == ("zeros", -127, True, True)
    assert "past a rounding point differ from the reading (e_zero None, not observable, fp32 RZ" \
        in f.note
    assert 1 <= len(f.evidence) <= 8 and all(e["products"] for e in f.evidence)


class _SignFlipped(SimulatedTarget):
    """A simulated target whose nonzero outputs below 2^-120 change sign: no profile of the
    fused-block model gives them."""

    def _call(self, A, B, C, SA=None, SB=None):
        D = super()._call(A, B, C, SA, SB)
        return np.where((D != 0) & (np.abs(D) < 2.0 ** -120), -D, D)


def test_boundary_sums_that_no_e_zero_fits():
    """Sums past a rounding point that no e_zero reproduces make the e_zero finding not fit
    (never a reading that contradicts the outputs)."""
    p = EDGES["flushed, e_zero -127"]
    ctx = Ctx(_SignFlipped(p), p.k)
    ctx.blocks = [[0, 1, 2, 3], [4, 5, 6, 7]]
    ctx.known.update(frac_bits=10, frac_bits_at_least=False, flush_outputs=True)
    before = Finding("zeros", "e_zero", None, observable=False)
    (f,) = zeros._boundary_sums(ctx, [before], [], [])
    assert not f.fits and f.value is None
    assert "no e_zero in -151 .. -122 or None reproduces them" in f.note
    ctx = Ctx(SimulatedTarget(p), p.k)  # the same rows from the target itself: e_zero -127
    ctx.blocks = [[0, 1, 2, 3], [4, 5, 6, 7]]
    ctx.known.update(frac_bits=10, frac_bits_at_least=False, flush_outputs=True)
    (f,) = zeros._boundary_sums(ctx, [before], [], [])
    assert f.fits and f.value == -127 and ctx.known["e_zero"] == -127
