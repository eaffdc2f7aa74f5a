"""scripts/device_check.py on a machine without CUDA: GPU steps skip cleanly; the comparison
code is exercised with the emulator standing in for the GPU (--fake)."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

_SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "device_check.py"
_spec = importlib.util.spec_from_file_location("device_check", _SCRIPT)
dc = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("device_check", dc)
_spec.loader.exec_module(dc)


def test_without_gpu_every_gpu_step_is_skipped(tmp_path, capsys):
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is present: the real check runs instead")
    assert dc.main(["--out", str(tmp_path), "--cases", "256"]) == 0
    out = capsys.readouterr().out
    rows = json.loads((tmp_path / "summary.json").read_text())["rows"]
    assert rows[0][0] == "environment"
    assert all(status == "skipped" for _, status, _ in rows[1:]), rows
    assert "fpscope device check" in out and (tmp_path / "environment.json").is_file()


def test_fake_device_matches_its_own_preset(tmp_path):
    assert dc.main(["--out", str(tmp_path), "--cases", "4096", "--fake"]) == 0
    for fmt in dc.FORMATS:
        rec = json.loads((tmp_path / f"validate-{fmt}.json").read_text())
        res = rec["result"]
        hopper = [n for n in res["matched"] if n.startswith("hopper-") and "wgmma" not in n]
        assert hopper and all(res["matched"][n] == res["cases"] for n in hopper), res["matched"]
        assert res["cases"] >= 4096


def test_validation_reports_a_mismatch():
    """A 'GPU' that is off by one ulp somewhere is caught, with the failing inputs."""
    import numpy as np

    real = dc.fake_gemm("fp16", "hopper-fp16")

    def off(A, B):
        D = real(A, B)
        D[0, 0] = np.nextafter(np.float16(D[0, 0]), np.float16(np.inf)).astype(np.float64)
        return D

    res = dc.validate_format("fp16", off, cases=4096)
    assert res["matched"]["hopper-fp16"] == res["cases"] - 1
    assert res["first_mismatch"]["hopper-fp16"]["live"] != \
        res["first_mismatch"]["hopper-fp16"]["emulated"]


def test_special_cases_compare_bits(tmp_path):
    """The special-input step hands bit patterns over unchanged and flags a GPU whose output
    differs from the preset's (here a stand-in that keeps the low-payload tf32 NaN a NaN, as
    a kernel converting with cvt.rna.tf32.f32 would, where the preset truncates it to Inf)."""
    same = dc.special_cases(dc.fake_bits)
    assert same["matched"] == same["total"] == len(dc.SPECIALS)
    nan_case = same["cases"][0]
    assert nan_case["a"][0] == "0x7F801AA7" and nan_case["preset_output"] == "0x7F800000"
    assert same["cases"][1]["preset_output"] == "0x7FFFFFFF"  # the quiet NaN stays NaN

    def converting(fmt):
        real = dc.fake_bits(fmt)
        return lambda a, b: 0x7FFFFFFF if a[0] == 0x7F801AA7 else real(a, b)

    res = dc.special_cases(converting)
    assert res["matched"] == res["total"] - 1
    assert res["cases"][0]["live"] == "0x7FFFFFFF" and not res["cases"][0]["same"]
    assert dc.main(["--out", str(tmp_path), "--cases", "256", "--fake"]) == 0
    rec = json.loads((tmp_path / "specials.json").read_text())
    assert rec["result"]["matched"] == len(dc.SPECIALS)
