"""Issue 4: probing mmasim's instruction models as black boxes recovers bit-exact profiles.

A representative subset with 2048 validation cases each; scripts/probe_mmasim.py runs every
model with 10^5 cases (records/probe-mmasim.txt)."""

import importlib.util
import sys
from pathlib import Path

import pytest

pytest.importorskip("mmasim")

_SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "probe_mmasim.py"
_spec = importlib.util.spec_from_file_location("probe_mmasim", _SCRIPT)
pm = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("probe_mmasim", pm)
_spec.loader.exec_module(pm)


@pytest.mark.parametrize("preset, differs", [
    ("volta-fp16", []), ("ampere-bf16", []), ("ada-tf32", []), ("ada-e5m2", []),
    ("hopper-fp16", []), ("hopper-e4m3", []), ("blackwell-tcgen05-fp16", []),
    # mixed a/b input formats: B's format is probed as B's
    ("hopper-wgmma-e5m2-e4m3", []),
    # fp16 output: the probes observe e_zero, equal to the preset's since the validated
    # presets took mmasim's value (tests/test_mmasim_oracle.py; "e_zero" differed before)
    ("turing-fp16-fp16out", [])])
def test_probing_an_mmasim_model_gives_its_preset(preset, differs):
    r = pm.run(preset, cases=2048)
    assert r["accepted"], r
    assert r["matched"] == r["cases"] >= 2048
    assert r["differs"] == differs, r  # every other observable field equals fpscope's preset


def test_probing_mmasim_wgmma_fp8_fp16out_differs_from_the_mma_sync_preset():
    """mmasim models wgmma for Hopper fp8 with fp16 output; the probes recover that arithmetic
    (bit-exact against the model) and report where it differs from fpscope's mma.sync preset."""
    r = pm.run("hopper-e5m2-fp16out", cases=2048)
    assert r["accepted"] and {"block_size", "c_entry"} <= set(r["differs"])


@pytest.mark.parametrize("preset, node", [("cdna2-fp16", "pairwise"), ("cdna3-fp16", "two-stage")])
def test_amd_node_kinds_are_fitted_and_validated(preset, node):
    """CDNA2 / CDNA3 do not fit the fused-block model; the node family fits their node kind to
    random outputs and the closed loop accepts it (every observable field equals the preset)."""
    r = pm.run(preset, cases=2048)
    assert r["accepted"], r
    assert r["differs"] == [], r
    from fpscope.probes.mmasim_target import MmasimTarget
    from fpscope.probes.driver import probe

    rep = probe(MmasimTarget(preset), cases=0)
    found = {f.feature: f for f in rep.findings}
    assert found["node"].value == node and rep.profile.node == node


@pytest.mark.parametrize("preset", [
    "blackwell-tcgen05-mxfp8-e5m2",  # fused node, e8m0 per 32: e_zero found under tiny scales
    "blackwell-tcgen05-mxfp4",       # grouped node (kind::mxf4), e8m0 per 32 over k = 64
    "rtx-blackwell-nvfp4"])          # grouped node, ue4m3 per 16 (e_zero not observable)
def test_probing_a_block_scaled_mmasim_model_gives_its_preset(preset):
    """A CI-sized subset of the 16 block-scaled models (records/probe-mmasim.txt has all
    of them with 10^5 cases): probed through op(A, B, C, scale_a, scale_b), the profile is
    bit-exact against the model on random operands and scales and equals the preset in every
    observable field, the scale block size and the grouped node included."""
    r = pm.run(preset, cases=2048)
    assert r["accepted"], r
    assert r["matched"] == r["cases"] >= 2048
    assert r["differs"] == [], r
    assert "scale_format" in r["not_observable"]  # mmasim's interface encodes the scales
    assert ("e_zero" in r["not_observable"]) == (preset == "rtx-blackwell-nvfp4")


def test_every_model_is_probed_block_scaled_ones_included(capsys, monkeypatch):
    """scripts/probe_mmasim.py runs every mmasim model, the 16 block-scaled ones included, and
    a model whose profile is not accepted makes it fail with the reason in the table."""
    ran = []

    def fake(name, cases, seed):
        ran.append(name)
        ok = name != "rtx-blackwell-nvfp4"
        return {"accepted": ok, "fits": ok, "matched": 1, "cases": 1, "seconds": 0.0,
                "differs": [], "reason": "" if ok else "scale_entry: some reason",
                "nearest": None}

    monkeypatch.setattr(pm, "run", fake)
    assert pm.main(["--cases", "1"]) == 1
    out = capsys.readouterr().out
    from fpscope.profile import PRESETS

    assert ran == list(pm.MODELS)
    assert len([n for n in ran if PRESETS[n].scale_format is not None]) == 16
    line = next(x for x in out.splitlines() if x.startswith("rtx-blackwell-nvfp4 "))
    assert "no fit" in line and "scale_entry: some reason" in line


def test_cdna3_bf8_no_fit_is_mmasims_artifact_and_the_nearest_is_the_preset():
    """mmasim's gtr_fdpa loses an Inf / NaN accumulator (mmasim_validation.ORACLE_ARTIFACTS),
    which no profile expresses, so the probe fits no node; the nearest profile it names
    equals the preset in every observable field, and its every difference from the model on
    random cases is that artifact (checked case by case). The script counts it as explained
    (exit 0); a nearest that differs from the preset, or an unexplained case, would not."""
    r = pm.run("cdna3-bf8", cases=2048)
    assert not r["accepted"] and not r["fits"]
    n = r["nearest"]
    assert n["differs"] == [] and n["explained"] > 0
    assert n["matched"] + n["explained"] == n["cases"] >= 2048
    assert pm._explained(r)
    assert not pm._explained({**r, "nearest": {**n, "differs": ["frac_bits"]}})
    assert not pm._explained({**r, "nearest": {**n, "explained": n["explained"] - 1}})
