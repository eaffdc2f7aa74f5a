"""fpscope probe on an mmasim model and on the CPU BLAS (issue 4's "done when")."""

import pytest

from fpscope.cli import main


def test_probe_an_mmasim_model_from_the_cli(capsys):
    pytest.importorskip("mmasim")
    rc = main(["probe", "mmasim:ampere-fp16", "--in-format", "fp16", "--cases", "512"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "ACCEPTED" in out and "L = 8 x 2" in out and "F = 24" in out


def test_probe_the_cpu_blas_gives_a_readable_result(capsys):
    rc = main(["probe", "numpy.matmul", "--in-format", "fp32"])
    out, err = capsys.readouterr()
    assert rc in (0, 1), err
    assert "numpy.matmul: fp32 inputs" in out
    assert ("ACCEPTED" in out) or ("does not fit" in out)


@pytest.mark.parametrize("args, msg", [
    (["mmasim:no-such", "--in-format", "fp16"], "no mmasim model"),
    (["mmasim:ampere-fp16", "--in-format", "bf16"], "--in-format"),
    (["numpy.matmul", "--in-format", "fp16"], "fp32 or fp64"),
])
def test_bad_probe_targets(args, msg, capsys):
    if args[0].startswith("mmasim:"):
        pytest.importorskip("mmasim")
    assert main(["probe", *args]) == 2
    err = capsys.readouterr().err
    assert msg in err and len(err.strip().splitlines()) == 1, err


def test_probe_html_page_and_record(tmp_path, capsys):
    from fpscope.record import load_record

    rec_path = tmp_path / "probe.json"
    rc = main(["probe", "sim:ampere-bf16", "--in-format", "bf16", "--cases", "256",
               "--format", "html", "--record", str(rec_path)])
    page, err = capsys.readouterr()
    assert rc == 0, err
    assert page.startswith("<!DOCTYPE html>") and "block_size" in page and "<script" not in page
    assert "ACCEPTED" in page and "0x" in page  # evidence as hex
    rec = load_record(rec_path)
    assert rec["kind"] == "probe" and rec["profile"]["block_size"] == 8
    assert rec["validation"]["accepted"] and "platform" in str(rec["environment"])
    assert main(["probe", "sim:ampere-bf16", "--in-format", "bf16", "--record",
                 str(rec_path)]) == 2  # never overwritten without --force


def test_fit_record(tmp_path, capsys):
    import numpy as np

    from fpscope.emulate.vectorized import fdpa_batch
    from fpscope.formats import encode, round_to_format
    from fpscope.profile import get_profile, resolve_format
    from fpscope.record import load_record

    p = get_profile("hopper-fp16")
    rng = np.random.default_rng(3)
    fin = resolve_format("fp16")
    a = round_to_format(rng.standard_normal((300, 16)), fin)
    b = round_to_format(rng.standard_normal((300, 16)), fin)
    c = np.zeros(300)
    d = encode(fdpa_batch(a, b, c, p), resolve_format("fp32"))
    np.savez(tmp_path / "r.npz", a=a, b=b, c=c, d=d, in_format="fp16", out_format="fp32")
    assert main(["fit", str(tmp_path / "r.npz"), "--record", str(tmp_path / "fit.json")]) == 0
    capsys.readouterr()
    rec = load_record(tmp_path / "fit.json")
    assert rec["kind"] == "fit" and rec["fit"]["exact"] and rec["profile"]["frac_bits"] == 25
