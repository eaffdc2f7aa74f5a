"""The probe verb, callable targets, torch.matmul on the CPU, and error paths."""

import json
import re
import sys
import types

import numpy as np
import pytest

from fpscope.cli import main
from fpscope.emulate.vectorized import matmul
from fpscope.probes.blackbox import CallableTarget, ProbeError
from fpscope.probes.driver import probe
from fpscope.profile import PRESETS


def cli(capsys, *args):
    rc = main(list(args))
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.fixture
def usermod(monkeypatch):
    """A module ``fpscope_probe_user`` with callables (A, B, C) -> D."""
    mod = types.ModuleType("fpscope_probe_user")
    amp = PRESETS["ampere-fp16"]

    def good(A, B, C):
        return matmul(A, B, C, profile=amp)

    def raises(A, B, C):
        raise RuntimeError("kernel exploded\nsecond line")

    def shape(A, B, C):
        return np.zeros((1, 1))

    def skewed(A, B, C):  # ampere-fp16, but one ulp off for large negative non-power-of-2 c
        D = matmul(A, B, C, profile=amp)
        m, _ = np.frexp(np.abs(C))
        hit = (C < -2.0 ** 40) & (C > -2.0 ** 100) & (m != 0.5)
        return np.where(hit, np.nextafter(D.astype(np.float32), np.float32(0)).astype(float), D)

    mixed = PRESETS["hopper-wgmma-e4m3-e5m2"]

    def mixed_op(A, B, C):  # e4m3 x e5m2: B's values are e5m2, not a's format
        return matmul(A, B, C, profile=mixed)

    mod.good, mod.raises, mod.shape, mod.skewed = good, raises, shape, skewed
    mod.mixed = mixed_op
    monkeypatch.setitem(sys.modules, "fpscope_probe_user", mod)
    return mod


def test_probe_cli_prints_a_readable_report(capsys):
    rc, out, err = cli(capsys, "probe", "sim:ampere-fp16", "--in-format", "fp16")
    assert rc == 0, err
    # one label column, as wide as the longest label (neg_underflow_sign)
    assert re.search(r"\n  block_size {9,}8 ", out) and re.search(r"\n  frac_bits {10,}24 ", out)
    cols = {line.index(line.split()[1]) for line in out.splitlines()
            if line.startswith("  ") and len(line.split()) > 2 and not line.startswith("  fingerprint")}
    assert len(cols) == 1, cols
    assert "fp32 RZ" in out and "ACCEPTED" in out and "-> -0.5" in out
    assert "e_zero" in out and "not observable" in out


def test_probe_cli_json_and_profile_file(capsys, tmp_path):
    out_file = tmp_path / "p.json"
    rc, out, _ = cli(capsys, "probe", "sim:hopper-tf32", "--in-format", "tf32", "--format",
                     "json", "--cases", "500", "-o", str(out_file))
    assert rc == 0
    d = json.loads(out)
    assert d["schema"] == "fpscope.probe/1" and d["accepted"]
    assert d["features"]["operand_conversion"] == "truncate"
    assert json.loads(out_file.read_text())["schema"] == "fpscope.profile/1"
    rc, _, err = cli(capsys, "probe", "sim:hopper-tf32", "--in-format", "tf32", "-o", str(out_file))
    assert rc == 2 and "exists" in err and "--force" in err


@pytest.mark.parametrize("args, words", [
    (["sim:nope-fp16", "--in-format", "fp16"], "unknown preset"),
    (["sim:ampere-fp16", "--in-format", "fp17"], "unknown format"),
    (["sim:ampere-fp16", "--in-format", "bf16"], "has --in-format fp16"),
    (["fpscope_probe_user:raises", "--in-format", "fp16"], "raised RuntimeError: kernel exploded"),
    (["fpscope_probe_user:shape", "--in-format", "fp16"], "returned shape (1, 1)"),
    (["fpscope_probe_user:missing", "--in-format", "fp16"], "no attribute"),
    (["nonsense", "--in-format", "fp16"], "unknown target"),
    (["sim:ada-e4m3-e5m2", "--in-format", "fp8_e4m3fn", "--b-format", "fp8_e4m3fn"],
     "takes B in fp8_e5m2, not fp8_e4m3fn"),
    (["sim:ada-e4m3-e5m2", "--in-format", "fp8_e4m3fn", "--b-format", "fp9"], "--b-format"),
])
def test_probe_cli_errors_are_one_line(capsys, usermod, args, words):
    rc, _, err = cli(capsys, "probe", *args)
    assert rc == 2
    assert err.startswith("fpscope: ") and err.count("\n") == 1 and words in err
    assert "Traceback" not in err


def test_probe_cli_mixed_input_instruction(capsys):
    """An e4m3 x e5m2 instruction is probed with --b-format; the report names both formats and
    the profile file carries b_format."""
    rc, out, err = cli(capsys, "probe", "sim:hopper-wgmma-e4m3-e5m2", "--in-format",
                       "fp8_e4m3fn", "--b-format", "fp8_e5m2", "--cases", "500", "--format",
                       "json")
    assert rc == 0, err
    d = json.loads(out)
    assert d["accepted"] and d["target"]["b_format"] == "fp8_e5m2"
    assert d["profile"]["b_format"] == "fp8_e5m2" and d["profile"]["block_size"] == 32
    rc, out, err = cli(capsys, "probe", "sim:hopper-wgmma-e4m3-e5m2", "--in-format",
                       "fp8_e4m3fn", "--cases", "200")
    assert rc == 0, err
    assert "fp8_e4m3fn x fp8_e5m2 inputs" in out.splitlines()[0]


def test_gate_re_probes_a_mixed_input_callable(capsys, usermod, tmp_path):
    """A callable e4m3 x e5m2 op probed with --b-format is re-probed by gate with b's format
    from the record (not a's), so the unchanged op passes."""
    base = tmp_path / "mixed.json"
    rc, _, err = cli(capsys, "probe", "fpscope_probe_user:mixed", "--in-format", "fp8_e4m3fn",
                     "--b-format", "fp8_e5m2", "--cases", "300", "--record", str(base))
    assert rc == 0, err
    rc, out, err = cli(capsys, "gate", str(base))
    assert rc == 0 and "same arithmetic" in out, out + err


def test_probe_callable_fits_and_validation_mismatch_exits_1(capsys, usermod):
    rc, out, _ = cli(capsys, "probe", "fpscope_probe_user:good", "--in-format", "fp16",
                     "--k", "16", "--cases", "500")
    assert rc == 0 and "ACCEPTED" in out
    rc, out, _ = cli(capsys, "probe", "fpscope_probe_user:skewed", "--in-format", "fp16",
                     "--k", "16", "--cases", "2000")
    assert rc == 1
    assert "REJECTED" in out and "first mismatch" in out and "does not fit" in out


def test_probe_error_from_python():
    with pytest.raises(ProbeError, match="raised ValueError: bad"):
        probe(CallableTarget(lambda A, B, C: (_ for _ in ()).throw(ValueError("bad")), "fp16",
                             k=16), "fp16", cases=0)


def test_torch_matmul_cpu_fp32_gives_a_clear_result():
    pytest.importorskip("torch")
    rep = probe("torch.matmul:cpu", "fp32", cases=500)
    text = rep.to_text()
    if rep.fits:  # an FMA chain or another fused-block fit, proven on the random cases
        assert rep.accepted and "ACCEPTED" in text
    else:
        assert "does not fit a fused-block model" in text and rep.reason
        assert not rep.accepted
    assert rep.to_dict()["fits"] == rep.fits
