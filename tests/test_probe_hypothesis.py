"""Random profiles from the parameter space, run as simulated black boxes, are probed back to an
equivalent profile (bit-exact on the validation generators, observable parameters equal)."""

import math
import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fpscope.probes.blackbox import SimulatedTarget
from fpscope.probes.driver import probe
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
    return Profile(
        name="random", arch="test", in_format=fin, out_format=out, block_size=L, k=L * stages,
        frac_bits=F, alignment=draw(st.sampled_from(["truncate", "floor", "nearest"])),
        e_zero=e_zero, step_rounding=step, flush_inputs=draw(st.booleans()),
        flush_outputs=draw(st.booleans()), nan_bits=0x7FFF if out == "fp16" else 0x7FFFFFFF,
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
