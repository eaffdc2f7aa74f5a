"""Reference engine vs recorded tensor-core outputs of real GPUs (shared/data/hw-vectors).

The data is read in place (never copied into the repository); the tests skip where the folder
is absent. Every preset whose set reproduces 100% bit for bit is "validated" with the set
named in its evidence; the sets that do not reproduce are strict xfails with their exact
mismatch counts pinned by ``test_known_mismatch_counts``.
"""

from pathlib import Path

import pytest

from fpscope.emulate import HW_SETS, run_hw_set
from fpscope.profile import PRESETS

HW_ROOT = Path(__file__).resolve().parents[2] / "shared" / "data" / "hw-vectors"

pytestmark = pytest.mark.skipif(
    not HW_ROOT.is_dir(), reason=f"recorded hardware vectors not found at {HW_ROOT}")

#: Sets the reference engine does not reproduce: key -> (matched of 5000, hypothesis).
#: H100 fp8 inputs with fp16 output (wgmma ... f16.e4m3/e5m2, k32): tried and rejected, on the
#: first 200-300 samples: c first in one fused block with rho = RZ-E8M13 then RNE-FP16 (the
#: preset; ~64%), RNE-FP16 as rho of the block, blocks of 2/4/8/16 with RNE-FP16 or RZ-E8M13
#: partial sums, sequential or interleaved K order, c first or last, F = 12..16 and 23, c from
#: fp32 instead of fp16; the best was the products through the fp32-output model (c = 0), then
#: RNE-FP16, then c added with one RNE-FP16 rounding (~80%). The residuals are up to 16 fp16
#: ulps and larger where |d| is small, so partial sums are rounded to a format near fp16
#: somewhere in the chain; the chunking/order that does it is not found yet.
KNOWN_MISMATCH = {
    ("H100", "E4M3", "fp16"): (3121, "fp16 accumulation order of H100 fp8 wgmma not modelled"),
    ("H100", "E5M2", "fp16"): (3343, "fp16 accumulation order of H100 fp8 wgmma not modelled"),
}


def _param(key):
    gpu, folder, out = key
    marks = ()
    if key in KNOWN_MISMATCH:
        matched, why = KNOWN_MISMATCH[key]
        marks = pytest.mark.xfail(strict=True, reason=f"{matched}/5000 bit-exact: {why}")
    return pytest.param(key, id=f"{gpu}-{folder}-d_{out}", marks=marks)


@pytest.mark.parametrize("key", [_param(k) for k in HW_SETS])
def test_preset_reproduces_hardware(key):
    matched, total, bad = run_hw_set(HW_ROOT, *key)
    assert total == 5000
    assert matched == total, f"{HW_SETS[key]}: {matched}/{total}; first differing: {bad[:10]}"


@pytest.mark.parametrize("key", sorted(KNOWN_MISMATCH))
def test_known_mismatch_counts(key):
    """The unreproduced sets stay exactly where they were (a change means the engine moved)."""
    matched, total, _ = run_hw_set(HW_ROOT, *key)
    assert (matched, total) == (KNOWN_MISMATCH[key][0], 5000)


@pytest.mark.parametrize("key", list(HW_SETS), ids=lambda k: "-".join(k))
def test_status_and_evidence(key):
    gpu, folder, out = key
    p = PRESETS[HW_SETS[key]]
    if key in KNOWN_MISMATCH:
        assert p.status == "experimental"
    else:
        assert p.status == "validated"
        assert p.evidence == f"hw-vectors {gpu}/{folder} d_{out}: 5000/5000"
