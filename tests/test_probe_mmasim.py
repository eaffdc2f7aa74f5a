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
    # mmasim's fp16-output e_zero is one above the validated preset's (tests/test_mmasim_oracle):
    # the probes observe mmasim's value
    ("turing-fp16-fp16out", ["e_zero"])])
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


def test_block_scaled_models_are_skipped_with_a_reason(capsys, monkeypatch):
    """The block-scaled (MX / NVFP4) models need scales the probes do not send:
    scripts/probe_mmasim.py lists them as skipped, with the reason, and runs every other model
    (CDNA2 / CDNA3 included: the node family fits them)."""
    from fpscope.probes.blackbox import ProbeError
    from fpscope.probes.mmasim_target import MmasimTarget
    from fpscope.profile import PRESETS

    scaled = [n for n in pm.MODELS if PRESETS[n].scale_format is not None]
    assert len(scaled) == 16 and all(pm.skip_reason(n) == pm.SKIPPED_BLOCK_SCALES for n in scaled)
    with pytest.raises(ProbeError, match="send no scales"):
        MmasimTarget(scaled[0])
    ran = []
    monkeypatch.setattr(pm, "run", lambda name, cases, seed: ran.append(name) or {
        "accepted": True, "fits": True, "matched": 1, "cases": 1, "seconds": 0.0,
        "differs": [], "reason": ""})
    assert pm.main(["--cases", "1"]) == 0
    out = capsys.readouterr().out
    assert ran == [n for n in pm.MODELS if n not in scaled]
    for n in scaled:
        assert f"{n} " in out and "skipped" in out.split(f"{n} ")[1].splitlines()[0]
