"""Library-level probing (fpscope.probes.library): split-K, its order and partial format, the FP8
promotion interval, on simulated GEMMs (simgemm:PRESET,...) and on ops that fit no model."""

import numpy as np
import pytest

from fpscope.cli import main
from fpscope.emulate import matmul
from fpscope.emulate.library import _add
from fpscope.formats import FP32
from fpscope.probes import library
from fpscope.probes.blackbox import (
    CallableTarget,
    ProbeError,
    SimGemmTarget,
    make_matrix_target,
)
from fpscope.probes.driver import probe
from fpscope.probes.validate import validate
from fpscope.profile import PRESETS

K = 1024
FIELDS = ("split_k", "split_k_order", "split_k_format", "promotion_interval")

# P in {None, 128} x S in {1, 2, 4} x order (the order only matters for S = 4)
GRID = [(P, S, o) for P in (None, 128) for S in (1, 2, 4)
        for o in (("serial", "pairwise") if S == 4 else ("serial",))]


def _spec(preset, S, order, P, fmt=None):
    return (f"simgemm:{preset},split_k={S},split_k_order={order},promotion_interval={P}"
            + (f",split_k_format={fmt}" if fmt else ""))


@pytest.mark.parametrize("preset", ["hopper-e4m3", "hopper-fp16"])
@pytest.mark.parametrize("P, S, order", GRID)
def test_round_trip_recovers_the_library_fields(preset, P, S, order):
    spec = _spec(preset, S, order, P)
    rep = probe(spec, library_k=K, cases=512)
    assert rep.fits, rep.reason
    p = rep.profile
    assert (p.split_k, p.split_k_order, p.split_k_format, p.promotion_interval) == \
        (S, order, None, P), rep.to_text()
    # the instruction level underneath is the preset's chain
    pre = PRESETS[preset]
    assert (p.block_size, p.frac_bits, tuple(p.step_rounding)) == \
        (pre.block_size, pre.frac_bits, tuple(pre.step_rounding))
    # closed loop at the library K: the profile reproduces the op bit for bit
    assert rep.validation["accepted"] and rep.validation["cases"] >= 512
    feats = rep.features()
    assert feats["split_k"] == S and feats["promotion_interval"] == P
    obs = {f.feature: f.observable for f in rep.findings if f.family == "library"}
    assert obs["split_k_order"] == (S == 4)  # serial = pairwise for 1 and 2 partials
    assert not obs["epilogue"]
    assert rep.library_k == K and rep.to_dict()["library_k"] == K
    assert "library (K = 1024)" in rep.to_text()


@pytest.mark.parametrize("preset, S, order, P, fmt", [
    ("hopper-e4m3", 4, "pairwise", 128, "bf16"),
    ("hopper-fp16", 2, "serial", None, "fp16"),
])
def test_narrow_partials_with_the_chain_given(preset, S, order, P, fmt):
    spec = _spec(preset, S, order, P, fmt)
    rep = probe(spec, library_k=K, cases=512, chain=preset)
    assert rep.accepted, rep.reason
    p = rep.profile
    assert (p.split_k, p.split_k_order, p.split_k_format, p.promotion_interval) == \
        (S, order, fmt, P)
    f = next(f for f in rep.findings if f.feature == "split_k_format")
    assert f.observable and f.value == fmt


def test_narrow_partials_without_a_chain_are_not_guessed():
    rep = probe(_spec("hopper-e4m3", 2, "serial", 128, "bf16"), library_k=K, cases=256)
    assert not rep.fits and rep.profile is None and rep.validation is None
    assert rep.reason.startswith("chain:") and "--chain" in rep.reason
    assert rep.features()["split_k_format"] == "bf16"  # what could be seen is still reported


def test_fp16_output_chains_and_a_k_order():
    # fp16 outputs (p = 11) and the H100 fp8 fp16-output k_order (two fp16 steps per 32)
    rep = probe(_spec("hopper-e4m3-fp16out", 4, "pairwise", 128), library_k=K, cases=512)
    assert rep.accepted, rep.reason
    p = rep.profile
    assert (p.split_k, p.split_k_order, p.promotion_interval) == (4, "pairwise", 128)


def test_c_added_after_one_chain_is_promotion_at_k():
    # S = 1 and P >= K: one chain, C added once by an RNE addition (a GEMM epilogue adding C)
    rep = probe("simgemm:hopper-fp16,promotion_interval=2048", library_k=K, cases=512)
    assert rep.accepted, rep.reason
    f = next(f for f in rep.findings if f.feature == "promotion_interval")
    assert f.value == K and not f.observable
    assert rep.profile.promotion_interval == K


def _interleaved(A, B, C):
    """Split-K over interleaved k-tiles: tiles of 32 products go to 2 partials in turn."""
    prof = PRESETS["hopper-e4m3"]
    Kc = A.shape[1]
    if Kc < 64:
        return matmul(A, B, C, profile=prof, engine="numpy", pad=True)
    idx0 = np.concatenate([np.arange(s, s + 32) for s in range(0, Kc - Kc % 64, 64)])
    z = np.zeros_like(C)
    p0 = matmul(A[:, idx0], B[idx0], z, profile=prof, engine="numpy")
    p1 = matmul(A[:, idx0 + 32], B[idx0 + 32], z, profile=prof, engine="numpy")
    return _add(_add(p0, p1, FP32), C, FP32)


def _unequal(A, B, C):
    """Two contiguous partials of 3/4 and 1/4 of K."""
    prof = PRESETS["hopper-e4m3"]
    Kc = A.shape[1]
    cut = max(32, (3 * Kc // 4) // 32 * 32)
    z = np.zeros_like(C)
    p0 = matmul(A[:, :cut], B[:cut], z, profile=prof, engine="numpy", pad=True)
    p1 = matmul(A[:, cut:], B[cut:], z, profile=prof, engine="numpy", pad=True) if cut < Kc else z
    return _add(_add(p0, p1, FP32), C, FP32)


@pytest.mark.parametrize("fn, why", [(_interleaved, "ordered tree"), (_unequal, "no split")])
def test_a_top_level_outside_the_model_does_not_fit(fn, why):
    rep = probe(CallableTarget(fn, "fp8_e4m3fn", "fp32"), library_k=K, cases=256)
    assert not rep.fits
    assert rep.reason.startswith("library_structure:") and why in rep.reason, rep.reason
    assert rep.validation is None  # nothing library-level was invented to validate
    assert rep.profile is None or (rep.profile.split_k, rep.profile.promotion_interval) == (1, None)
    assert "DOES NOT FIT" in rep.to_text()


def test_revealed_tree_equals_the_model_tree():
    t = make_matrix_target("simgemm:hopper-e4m3,split_k=4,split_k_order=pairwise,"
                           "promotion_interval=64")
    res = library.run(t, K, unit=32)
    assert res.fits and res.fields == {"split_k": 4, "split_k_order": "pairwise",
                                       "split_k_format": None, "promotion_interval": 64}
    assert library._canon(res.tree) == library._canon(library.model_tree(32, 4, 2, "pairwise"))
    assert res.rows < 600  # O(n log n) rows, batched
    assert res.calls < 40


def test_models_equal_at_k_are_told_apart_at_2k():
    # S = 8 pairwise and S = 4 pairwise with P = K / 8 have the same tree at K
    a = library._canon(library.model_tree(32, 8, None, "pairwise"))
    b = library._canon(library.model_tree(32, 4, 4, "pairwise"))
    assert a == b
    assert library._canon(library.model_tree(64, 8, None, "pairwise")) != \
        library._canon(library.model_tree(64, 4, 4, "pairwise"))
    res = library.run(make_matrix_target("simgemm:hopper-fp16,split_k=8,split_k_order=pairwise"),
                      K, unit=32)
    assert res.fields["split_k"] == 8 and res.fields["promotion_interval"] is None
    assert "2048" in res.findings[0].note


def test_model_tree_shapes():
    assert library.model_tree(4, 1, None, "serial") == (((("C", 0), 1), 2), 3)
    assert library.model_tree(4, 1, 2, "serial") == (("C", (0, 1)), (2, 3))
    assert library.model_tree(4, 4, None, "pairwise") == (((0, 1), (2, 3)), "C")
    assert library.model_tree(4, 4, None, "serial") == ((((0, 1), 2), 3), "C")
    with pytest.raises(ValueError):
        library.model_tree(6, 4, None, "serial")


def test_a_wrong_library_field_is_rejected_by_validation():
    t = make_matrix_target("simgemm:hopper-fp16,split_k=4,split_k_order=pairwise")
    good = t.profile
    assert validate(t, good, cases=512, K=K)["accepted"]
    for bad in (good.replace(split_k_order="serial"), good.replace(split_k=2),
                good.replace(promotion_interval=128)):
        assert not validate(t, bad, cases=512, K=K, generators=("normal",))["accepted"]


def test_instruction_targets_and_fp4_are_not_library_targets():
    with pytest.raises(ProbeError, match="takes any K"):
        probe("sim:hopper-fp16", library_k=K)
    res = library.run(make_matrix_target("sim:hopper-fp16"), K)
    assert res.fields is None and not res.findings[0].observable


def test_plain_probe_does_not_run_the_library_level():
    rep = probe("simgemm:hopper-fp16", cases=256)
    assert rep.library_k is None
    assert not any(f.family == "library" for f in rep.findings)


# -- the simgemm target ----------------------------------------------------------------------


def test_simgemm_target_is_emulate_matmul_with_library_fields():
    t = make_matrix_target("simgemm:hopper-e4m3,split_k=2,promotion_interval=128")
    assert isinstance(t, SimGemmTarget) and t.k is None
    assert t.profile.split_k == 2 and t.profile.promotion_interval == 128
    assert t.describe()["library"]["split_k"] == 2
    rng = np.random.default_rng(0)
    A = np.round(rng.standard_normal((3, 512)) * 4) / 4
    B = np.round(rng.standard_normal((512, 2)) * 4) / 4
    C = np.zeros((3, 2))
    assert np.array_equal(t(A, B, C), matmul(A, B, C, profile=t.profile, engine="numpy"))
    # any K works: padded with zero products to whole slices
    assert t(A[:, :40], B[:40], C).shape == (3, 2)


@pytest.mark.parametrize("spec, msg", [
    ("simgemm:hopper-fp16,split_k=0", "split_k must be a positive integer"),
    ("simgemm:hopper-fp16,split_k=two", "split_k must be a positive integer"),
    ("simgemm:hopper-fp16,split_k_order=tree", "split_k_order must be one of"),
    ("simgemm:hopper-fp16,split_k_format=fp7", "split_k_format"),
    ("simgemm:hopper-fp16,promotion_interval=100", "a positive multiple of k"),
    ("simgemm:hopper-fp16,split=2", "did you mean 'split_k'"),
    ("simgemm:hopper-fp16,split_k", "is not key=value"),
    ("simgemm:hopper-fp16,split_k=2,split_k=4", "given twice"),
    ("simgemm:no-such", "unknown preset"),
    ("sim:hopper-fp16,split_k=2", "simgemm:hopper-fp16"),
])
def test_bad_simgemm_names(spec, msg):
    with pytest.raises(ProbeError) as exc:
        make_matrix_target(spec)
    assert msg in str(exc.value) and "\n" not in str(exc.value)


# -- CLI ------------------------------------------------------------------------------------


def test_cli_probe_library(capsys):
    rc = main(["probe", "simgemm:hopper-e4m3,promotion_interval=128", "--in-format",
               "fp8_e4m3fn", "--library", "--cases", "256"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "promotion_interval 128" in out and "ACCEPTED" in out
    assert "library (K = 1024): k = 32, split_k = 1" in out


def test_cli_probe_library_with_chain(capsys):
    rc = main(["probe", "simgemm:hopper-e4m3,split_k=2,split_k_format=bf16", "--in-format",
               "fp8_e4m3fn", "--library", "--chain", "hopper-e4m3", "--cases", "256",
               "--format", "json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    import json

    d = json.loads(out)
    assert d["library_k"] == K and d["profile"]["split_k_format"] == "bf16"


@pytest.mark.parametrize("args, msg", [
    (["sim:hopper-fp16", "--in-format", "fp16", "--library"], "takes any K"),
    (["simgemm:hopper-fp16", "--in-format", "fp16", "--chain", "hopper-fp16"],
     "--chain needs --library"),
    (["simgemm:hopper-fp16", "--in-format", "fp16", "--library", "1000"], "multiple of"),
    (["simgemm:hopper-fp16", "--in-format", "fp16", "--library", "--chain", "hopper-e4m3"],
     "fp8_e4m3fn -> fp32"),
])
def test_cli_probe_library_usage_errors(args, msg, capsys):
    assert main(["probe", *args]) == 2
    err = capsys.readouterr().err
    assert msg in err and len(err.strip().splitlines()) == 1, err
