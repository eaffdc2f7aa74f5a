"""Block-scaled (MX / NVFP4) targets: the scale interface, the scales family (block size,
format, entry), random scales in the closed loop, and bad input.

The round trip of sim: block-scaled presets is in tests/test_probe_roundtrip.py (SCALED), the
mmasim models in tests/test_probe_mmasim.py."""

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fpscope.emulate import matmul
from fpscope.formats import FP32, round_to_format
from fpscope.probes import scales
from fpscope.probes._common import Ctx
from fpscope.probes.blackbox import (
    CallableTarget,
    ProbeError,
    SimulatedTarget,
    evaluate_rows,
    make_matrix_target,
)
from fpscope.probes.driver import probe
from fpscope.probes.validate import validate
from fpscope.profile import PRESETS

MXFP8 = PRESETS["blackwell-tcgen05-mxfp8-e4m3"]
MXFP4 = PRESETS["blackwell-tcgen05-mxfp4"]
NVFP4 = PRESETS["blackwell-tcgen05-nvfp4"]


def _operands(rng, prof, M, N):
    """Random (A, B, C, SA, SB) of a block-scaled profile: small exact values, e8m0 scales
    2^-3 .. 2^3 (ue4m3: their e4m3 values 0.125 .. 8)."""
    K, nb = prof.k, prof.k // prof.scale_block_size
    A = rng.choice([0.0, 0.5, 1.0, -1.5, 2.0, -3.0], size=(M, K))
    B = rng.choice([0.0, 1.0, -0.5, 4.0, 6.0], size=(K, N))
    C = np.ldexp(rng.integers(-8, 9, size=(M, N)).astype(float), -2)
    SA = np.ldexp(1.0, rng.integers(-3, 4, size=(M, nb)))
    SB = np.ldexp(1.0, rng.integers(-3, 4, size=(nb, N)))
    return A, B, C, SA, SB


def test_sim_target_takes_scales_and_unit_scales_by_default():
    rng = np.random.default_rng(0)
    t = make_matrix_target(f"sim:{NVFP4.name}")
    A, B, C, SA, SB = _operands(rng, NVFP4, 5, 3)
    assert t.scaled and (t.scale_format, t.scale_block_size) == ("ue4m3", 16)
    assert np.array_equal(t(A, B, C, SA, SB), matmul(A, B, C, profile=NVFP4, scale_a=SA,
                                                     scale_b=SB))
    ones = np.ones_like(SA), np.ones_like(SB)
    assert np.array_equal(t(A, B, C), t(A, B, C, *ones))
    assert not np.array_equal(t(A, B, C), t(A, B, C, SA, SB))
    assert t.describe()["scale_block_size"] == 16


@pytest.mark.parametrize("kw, words", [
    (dict(scale_a=np.ones((4, 2))), r"scale_a must have shape \(4, 4\)"),
    (dict(scale_b=np.ones((4, 2))), r"scale_b must have shape \(4, 3\)"),
    (dict(scale_a=np.full((4, 4), 1.5)), r"scale_a\[0, 0\] = 1.5 is not a value of its scale "
                                         r"format e8m0"),
    (dict(scale_b=np.full((4, 3), -1.0)), "not a value of its scale format e8m0"),
])
def test_bad_scales_are_one_line_errors(kw, words):
    t = SimulatedTarget(MXFP4.replace(scale_block_size=16))
    A, B, C = np.zeros((4, 64)), np.zeros((64, 3)), np.zeros((4, 3))
    with pytest.raises(ProbeError, match=words) as exc:
        t(A, B, C, **kw)
    assert "\n" not in str(exc.value)


def test_scales_to_an_unscaled_target_and_a_k_off_the_blocks_are_refused():
    with pytest.raises(ProbeError, match="takes no block scales"):
        SimulatedTarget(PRESETS["hopper-fp16"])(np.zeros((1, 16)), np.zeros((16, 1)),
                                                np.zeros((1, 1)), scale_a=np.ones((1, 1)))
    t = CallableTarget(lambda A, B, C, sa, sb: C, "fp8_e4m3fn", scale_block_size=32)
    with pytest.raises(ProbeError, match="K = 48 is not a multiple of its scale block size 32"):
        t(np.zeros((1, 48)), np.zeros((48, 1)), np.zeros((1, 1)))
    with pytest.raises(ProbeError, match="K = 48 is not a multiple"):
        probe(t, k=48, cases=0)
    with pytest.raises(ProbeError, match="scale_format must be one of e8m0, ue4m3"):
        CallableTarget(lambda *x: x[2], "fp16", scale_block_size=8, scale_format="fp16")
    with pytest.raises(ProbeError, match="a scale_format needs scale_block_size"):
        CallableTarget(lambda *x: x[2], "fp16", scale_format="e8m0")


@pytest.mark.parametrize("spec, kw, words", [
    (f"sim:{NVFP4.name}", dict(scale_block_size=32), "takes a block scale per 16 elements of "
                                                     "K, not one per 32"),
    (f"sim:{NVFP4.name}", dict(scale_format="e8m0"), "takes ue4m3 scales, not e8m0"),
    ("sim:hopper-fp16", dict(scale_block_size=16), "takes no block scales, not one per 16"),
    (f"simgemm:{MXFP8.name}", {}, "block-scaled .* use sim:"),
])
def test_make_matrix_target_checks_the_scale_fields(spec, kw, words):
    with pytest.raises(ProbeError, match=words):
        make_matrix_target(spec, **kw)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 40))
def test_evaluate_rows_with_scales_is_one_call_per_row(seed, R):
    """Rows grouped into few calls (by b and its scales) give each row's own output: rows that
    share b but not b's scales must not share a column."""
    rng = np.random.default_rng(seed)
    prof = MXFP4.replace(scale_block_size=16)
    t = SimulatedTarget(prof)
    A, B, _, SA, SB = _operands(rng, prof, R, 3)
    b = B.T[rng.integers(0, 3, size=R)]  # few distinct b ...
    sb = SB.T[rng.integers(0, 3, size=R)]  # ... with scales drawn apart from them
    c = np.ldexp(rng.integers(-4, 5, size=R).astype(float), -1)
    d = evaluate_rows(t, A, b, c, sa=SA, sb=sb)
    for r in range(R):
        one = matmul(A[r:r + 1], b[r][:, None], np.array([[c[r]]]), profile=prof,
                     scale_a=SA[r:r + 1], scale_b=sb[r][:, None])[0, 0]
        assert d[r] == one


@settings(max_examples=8, deadline=None)
@given(st.sampled_from([(MXFP8, 8), (MXFP8, 16), (MXFP8, 32), (MXFP4, 16), (MXFP4, 32),
                        (NVFP4, 16), (NVFP4, 32)]))
def test_layout_probe_finds_the_scale_block_size(case):
    """The scales family finds the block size of a target whose block size differs from its
    preset's (kind::mxf4nvf4 .block16 .ue8m0, MXFP8 with 8 or 16 elements per scale)."""
    base, s = case
    prof = base.replace(scale_block_size=s)
    ctx = Ctx(SimulatedTarget(prof), prof.k)
    found = {f.feature: f for f in scales.layout(ctx)}
    assert found["scale_block_size"].value == s and found["scale_block_size"].fits
    assert found["scale_format"].value == prof.scale_format
    assert not found["scale_format"].observable  # the interface checks every scale


def test_probe_of_a_target_with_another_scale_block_size_is_accepted():
    """MXFP8 arithmetic with a scale per 16 elements (two scale blocks per instruction): the
    probe finds 16 and the profile validates on random scales."""
    prof = MXFP8.replace(name="mxfp8-block16", scale_block_size=16)
    rep = probe(SimulatedTarget(prof), cases=1024)
    assert rep.accepted, rep.reason
    assert (rep.profile.scale_block_size, rep.profile.node, rep.profile.e_zero) == (16, "fused",
                                                                                     -133)
    assert rep.features()["scale_block_size"] == 16


def test_interleaved_scales_do_not_fit():
    """An op whose scale j covers elements j, j + nb, ... (not a contiguous block) does not fit
    the layout the emulator models: the probe stops there, with the positions it saw."""
    def interleaved(A, B, C, sa, sb):
        return matmul(A * np.tile(sa, 16), B * np.tile(sb, (16, 1)), C,
                      profile=PRESETS["blackwell-tcgen05-e4m3"])

    t = CallableTarget(interleaved, "fp8_e4m3fn", k=32, scale_block_size=16,
                       scale_format="e8m0")
    rep = probe(t, cases=256)
    f = {x.feature: x for x in rep.findings}["scale_block_size"]
    assert not f.fits and "0, 2, 4, " in f.note and "not contiguous blocks of 16" in f.note
    assert not rep.fits and rep.profile is None and rep.validation is None


def _float_scale_callable(prof):
    """A callable of ``prof`` that takes float64 scales: scales not in the profile's scale
    format are refused (the emulator raises ValueError), the others applied."""
    def op(A, B, C, sa, sb):
        return matmul(A, B, C, profile=prof, scale_a=sa, scale_b=sb)

    return CallableTarget(op, prof.in_format, k=prof.k, scale_block_size=prof.scale_block_size)


@pytest.mark.parametrize("prof", [MXFP8, NVFP4])
def test_scale_format_probe_on_a_callable_that_takes_float_scales(prof):
    t = _float_scale_callable(prof)
    ctx = Ctx(t, prof.k)
    found = {f.feature: f for f in scales.layout(ctx)}
    f = found["scale_format"]
    assert f.observable and f.fits and f.value == prof.scale_format
    assert ("1.5 refused" in f.note) == (prof.scale_format == "e8m0")
    assert ("4096 refused" in f.note) == (prof.scale_format == "ue4m3")


def test_a_scale_format_wider_than_e8m0_and_ue4m3_does_not_fit():
    """Float scales (every probe value applied exactly: a float64 GEMM of the scaled operands,
    rounded once to fp32) are neither e8m0 nor ue4m3."""
    def fp32_scales(A, B, C, sa, sb):
        exact = (A * np.repeat(sa, 32, axis=1)) @ (B * np.repeat(sb, 32, axis=0)) + C
        return round_to_format(exact, FP32, "RNE")

    t = CallableTarget(fp32_scales, "fp8_e4m3fn", k=32, scale_block_size=32)
    rep = probe(t, cases=0)
    f = {x.feature: x for x in rep.findings}["scale_format"]
    assert not f.fits and "1.5 taken" in f.note and "4096 taken" in f.note
    assert not rep.fits and rep.profile is None


def test_an_op_that_ignores_a_nan_scale_fails_the_entry_check():
    def nan_as_one(A, B, C, sa, sb):
        return matmul(A, B, C, profile=MXFP8, scale_a=np.where(np.isnan(sa), 1.0, sa),
                      scale_b=np.where(np.isnan(sb), 1.0, sb))

    t = CallableTarget(nan_as_one, "fp8_e4m3fn", k=32, scale_block_size=32, scale_format="e8m0")
    rep = probe(t, cases=0)
    f = {x.feature: x for x in rep.findings}["scale_entry"]
    assert not f.fits and "a NaN scale of a: NaN: got 0x40000000" in f.note
    assert not rep.fits and rep.reason.startswith("scale_entry:")
    assert f.evidence[0]["scale_a"] == ["0xFF"]


def test_e_zero_is_found_under_scales():
    """At unit scales no fp8 product reaches the zero terms (the zeros family: not observable);
    scaled below them it does, and a target whose e_zero is one higher is told apart."""
    for e_zero in (-133, -132):
        rep = probe(SimulatedTarget(MXFP8.replace(e_zero=e_zero)), cases=512)
        f = {x.feature: x for x in rep.findings}["e_zero"]
        assert f.family == "scales" and f.observable and f.value == e_zero
        assert rep.accepted and rep.profile.e_zero == e_zero


def test_validation_draws_random_scales_and_reports_them():
    """A profile that matches the op at unit scales but not with scales (scale exponents
    ignored) is rejected; the shrunk mismatch shows its scales in the scale format."""
    def unscaled(A, B, C, sa, sb):
        return matmul(A, B, C, profile=MXFP8, scale_a=np.ones_like(sa),
                      scale_b=np.ones_like(sb))  # the op ignores its scales

    t = CallableTarget(unscaled, "fp8_e4m3fn", k=32, scale_block_size=32, scale_format="e8m0")
    v = validate(t, MXFP8, cases=512, generators=("normal",))
    assert not v["accepted"]
    fm = v["first_mismatch"]
    assert fm["reproducible"] and len(fm["scale_a"]) == len(fm["scale_b"]) == 1
    assert fm["scale_a"][0] != "0x7F" or fm["scale_b"][0] != "0x7F"  # a scale other than 1 kept
    # and a profile without scales is refused for a block-scaled target
    with pytest.raises(ProbeError, match="takes no block scales, the target e8m0 scales per 32"):
        validate(t, PRESETS["blackwell-tcgen05-e4m3"], cases=16)


def test_report_text_names_the_scales():
    rep = probe(f"sim:{MXFP8.name}", cases=256)
    text = rep.to_text()
    assert "with e8m0 block scales per 32 inputs" in text.splitlines()[0]
    assert "block scales: e8m0 per 32 elements of K" in text
    d = rep.to_dict()
    assert d["profile"]["scale_format"] == "e8m0" and d["target"]["scale_block_size"] == 32
    assert d["features"]["scale_block_size"] == 32


@pytest.mark.parametrize("preset", ["blackwell-tcgen05-mxfp4", "rtx-blackwell-mxfp8-e4m3-e2m1",
                                    "rtx-blackwell-nvfp4"])
def test_mmasim_target_with_scales_equals_the_preset(preset):
    """MmasimTarget of a block-scaled model (tiles padded with scale 1, fp4 packed for
    kind::mxf4*) gives the preset's emulation bit for bit on random operands and scales."""
    pytest.importorskip("mmasim")
    from fpscope.probes.mmasim_target import MmasimTarget

    prof = PRESETS[preset]
    t = MmasimTarget(preset)
    assert (t.scale_format, t.scale_block_size, t.k) == (prof.scale_format,
                                                         prof.scale_block_size, prof.k)
    rng = np.random.default_rng(1)
    A, B, C, SA, SB = _operands(rng, prof, 5, 11)
    if prof.b_format is not None:
        B = np.clip(B, -6.0, 6.0)
    SA[0, 0] = np.nan
    assert bool(np.array_equal(t(A, B, C, SA, SB),
                               matmul(A, B, C, profile=prof, scale_a=SA, scale_b=SB),
                               equal_nan=True))
    with pytest.raises(ProbeError, match="not a value of its scale format"):
        t(A, B, C, np.full_like(SA, 3.0 if prof.scale_format == "e8m0" else 500.0), SB)


def _cli(capsys, *args):
    from fpscope.cli import main

    rc = main(list(args))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_cli_probes_a_block_scaled_mmasim_model(capsys):
    pytest.importorskip("mmasim")
    rc, out, err = _cli(capsys, "probe", "mmasim:blackwell-tcgen05-mxfp6-e2m3", "--cases", "256")
    assert rc == 0, err
    assert "with e8m0 block scales per 32 inputs" in out.splitlines()[0]
    assert re.search(r"\n  scale_block_size +32 ", out) and "scale_entry" in out
    assert "ACCEPTED" in out


def test_cli_probes_a_block_scaled_callable(capsys, monkeypatch):
    import sys
    import types

    mod = types.ModuleType("fpscope_scaled_user")

    def mma(A, B, C, scale_a, scale_b):
        return matmul(A, B, C, profile=MXFP8, scale_a=scale_a, scale_b=scale_b)

    mod.mma = mma
    monkeypatch.setitem(sys.modules, "fpscope_scaled_user", mod)
    rc, out, err = _cli(capsys, "probe", "fpscope_scaled_user:mma", "--in-format", "fp8_e4m3fn",
                        "--k", "32", "--scale-block-size", "32", "--cases", "256", "--format",
                        "json")
    assert rc == 0, err
    import json

    d = json.loads(out)
    assert d["accepted"] and d["features"]["scale_format"] == "e8m0"  # found, not given
    assert d["profile"]["scale_block_size"] == 32 and d["profile"]["e_zero"] == -133


@pytest.mark.parametrize("args, words", [
    (["sim:rtx-blackwell-nvfp4", "--scale-format", "e8m0"], "takes ue4m3 scales, not e8m0"),
    (["sim:rtx-blackwell-nvfp4", "--scale-block-size", "32"], "per 16 elements of K"),
    (["sim:rtx-blackwell-nvfp4", "--scale-block-size", "0"], "--scale-block-size must be"),
    (["sim:hopper-fp16", "--scale-block-size", "16"], "takes no block scales"),
    (["simgemm:rtx-blackwell-nvfp4"], "block-scaled"),
    (["fpscope.emulate:matmul", "--in-format", "fp16", "--scale-format", "e8m0"],
     "a scale_format needs scale_block_size"),
])
def test_cli_scale_errors_are_one_line(capsys, args, words):
    rc, _, err = _cli(capsys, "probe", *args)
    assert rc == 2 and err.startswith("fpscope: ") and err.count("\n") == 1 and words in err
