"""Random profiles from the parameter space, run as simulated black boxes, are probed back to an
equivalent profile (bit-exact on the validation generators, observable parameters equal)."""

import math
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fpscope.emulate.vectorized import fdpa_batch
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
    fin = "fp16" if out == "fp16" else draw(st.sampled_from(["fp16", "bf16"]))
    L = draw(st.sampled_from([2, 4, 8, 16, 32]))
    stages = 2 if L == 2 else draw(st.sampled_from([1, 2] if L <= 16 else [1]))
    # fp16 outputs: the cancellation probes see at most 26 kept bits (2^15 .. 2^-14)
    F = draw(st.integers(10, 26 if out == "fp16" else 30).filter(
        lambda f: f + 2 + math.log2(L + 1) <= 53))
    e_zero = draw(st.one_of(st.none(), st.integers(-22, -18) if out == "fp16"
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


#: Profiles the random round trip once found probed wrongly (each fixed in the family named).
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


def test_step_grid_choice_is_reported():
    """The zeros family's choice of step grid replaces the rounding family's first candidate,
    and the text report says so."""
    p = EDGES["e8m13 grid, floor"]
    rep = probe(SimulatedTarget(p), p.in_format, p.out_format, cases=0, seed=1)
    steps = [(f.family, f.value) for f in rep.findings if f.feature == "step_rounding"]
    assert steps == [("rounding", ["fp32", "RZ"]), ("zeros", ["e8m13", "RZ"])]
    assert rep.features()["step_rounding"] == ["e8m13", "RZ"]
    assert "[replaced: the profile's step_rounding is e8m13 RZ]" in rep.to_text()
