"""fpscope presets vs the MMA-Sim oracle (``mmasim``, Xie et al., arXiv 2511.10909).

The comparison lives in scripts/mmasim_validation.py (which also runs larger counts): for each
preset with an mmasim instruction model, full m x n x k tiles of random bit patterns (NaN, Inf,
subnormals), cancellation-heavy, wide-exponent and tiny-operand generators are run through the
mmasim model and through :func:`fpscope.emulate.vectorized.fdpa_batch` (one instruction per
output element), and the output bit patterns are compared.

Disagreements are strict xfails with their pinned counts; fpscope is not changed to follow
mmasim, because fpscope's presets reproduce the recorded GPU outputs (tests/test_hw_vectors.py):

* hopper-e{4m3,5m2}-fp16out: mmasim has no Hopper ``mma.sync`` fp8 model, only ``wgmma``
  (F=13, one 32-product block, RNE-FP16). The recorded H100 fp16-output sets were made with
  ``mma.sync``; fpscope reproduces them 5000/5000, while the preset with mmasim's wgmma
  parameters reproduces only 3113/5000 (E4M3) and 3340/5000 (E5M2). Different instructions.
* fp16-output e_zero: mmasim's zero-term exponent is one above fpscope's for every fp16 output
  (Volta -19/-20, Turing/Ampere/Ada -20/-21, Hopper -21/-22). Random inputs never show it; the
  hand-made RNE-tie cases of ``E_ZERO_TIE_CASES`` do. The recorded sets do not decide it: the
  fp16-output presets with mmasim's e_zero also reproduce their sets 5000/5000.
"""

import importlib.util
import sys
from pathlib import Path

import pytest

pytest.importorskip("mmasim")

_SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "mmasim_validation.py"
_spec = importlib.util.spec_from_file_location("mmasim_validation", _SCRIPT)
mv = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("mmasim_validation", mv)
_spec.loader.exec_module(mv)

CASES = 10_000  # per preset (all 24 presets: about 5 s on one CPU core)

#: preset -> (matched, cases) with CASES and seed 0, and why.
KNOWN_MISMATCH = {
    "hopper-e4m3-fp16out": (7875, 10240, "mmasim models wgmma (F=13, L=32); fpscope models the "
                            "recorded mma.sync (two fp16 k16 steps, then c)"),
    "hopper-e5m2-fp16out": (8282, 10240, "mmasim models wgmma (F=13, L=32); fpscope models the "
                            "recorded mma.sync (two fp16 k16 steps, then c)"),
}


def _param(preset):
    marks = ()
    if preset in KNOWN_MISMATCH:
        matched, cases, why = KNOWN_MISMATCH[preset]
        marks = pytest.mark.xfail(strict=True, reason=f"{cases - matched}/{cases} differ: {why}")
    return pytest.param(preset, id=preset, marks=marks)


def test_every_preset_has_a_model():
    from fpscope.profile import PRESETS

    assert sorted(mv.MODELS) == sorted(PRESETS)


@pytest.mark.parametrize("preset", [_param(p) for p in mv.MODELS])
def test_preset_matches_mmasim(preset):
    r = mv.compare(preset, CASES, seed=0)
    assert r.matched == r.cases, (
        f"{preset} vs {r.model}: {r.matched}/{r.cases}; first: {r.examples[:1]}")


@pytest.mark.parametrize("preset", list(KNOWN_MISMATCH))
def test_known_mismatch_counts(preset):
    matched, cases, _ = KNOWN_MISMATCH[preset]
    r = mv.compare(preset, CASES, seed=0)
    assert (r.matched, r.cases) == (matched, cases)


@pytest.mark.parametrize("preset", [
    pytest.param(p, id=p, marks=pytest.mark.xfail(
        strict=True, reason="1/1 differ: mmasim e_zero is one above fpscope's for fp16 output; "
                            "the recorded sets match both"))
    for p in mv.E_ZERO_TIE_CASES])
def test_e_zero_tie_case(preset):
    d_sim, d_fp, _ = mv.e_zero_tie(preset)
    assert d_sim == d_fp, f"mmasim {d_sim:04x}, fpscope {d_fp:04x}"
