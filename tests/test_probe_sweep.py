"""scripts/probe_sweep.py: the exhaustive round trip near the subnormal range reports the
profiles it probes wrongly (and only those)."""

import dataclasses
import importlib.util
from pathlib import Path

import numpy as np

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "probe_sweep.py"


def _sweep():
    spec = importlib.util.spec_from_file_location("probe_sweep", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_sweep_passes_where_the_probe_reads_e_zero(capsys):
    # truncate, e_zero None and -138 (at the lead of the largest X on e8m13's grid)
    rc = _sweep().main(["--steps", "e8m13-RZ", "--block-sizes", "2", "--e-zero=-138:-138",
                        "--limit", "24"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert out.strip().splitlines()[-1].startswith("0 of 24 profiles probed wrongly")


def test_sweep_reports_profiles_probed_wrongly(capsys, monkeypatch):
    # the probe made to read e_zero -127 as None (as it did under flushed outputs before the
    # zeros family's sums past a rounding point): each such profile is listed, nothing else
    mod = _sweep()
    real = mod.probe

    def probe_without_e_zero(target, *args, **kw):
        rep = real(target, *args, **kw)
        if rep.profile is not None and rep.profile.e_zero == -127:
            rep.profile = dataclasses.replace(rep.profile, e_zero=None)
        return rep

    monkeypatch.setattr(mod, "probe", probe_without_e_zero)
    rc = mod.main(["--steps", "e8m13-RZ", "--block-sizes", "4", "--e-zero=-127:-127",
                   "--limit", "24"])
    lines = capsys.readouterr().out.strip().splitlines()
    wrong = [ln for ln in lines if ln.startswith("WRONG")]
    assert rc == 1 and len(wrong) == 12, lines  # the 12 of e_zero -127 (12 of None)
    assert all("e_zero=-127" in ln for ln in wrong), wrong
    assert lines[-1].startswith("12 of 24 profiles probed wrongly")


def test_sweep_refuses_a_bad_range(capsys):
    assert _sweep().main(["--e-zero=-140"]) == 2
    assert "bad argument" in capsys.readouterr().err


def test_sweep_of_fp16_outputs(capsys):
    # fp16 -> fp16, RZ steps, L = 2, truncate, e_zero None and -22: among them the flushed
    # inputs whose e_zero -22 the zeros family read as -23 before its "halves" rows
    rc = _sweep().main(["--formats", "fp16:fp16", "--steps", "fp16-RZ", "--block-sizes", "2",
                        "--e-zero=-22:-22", "--limit", "24"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert out.strip().splitlines()[-1].startswith("0 of 24 profiles probed wrongly")


def test_sweep_tiny_rows_are_values_of_the_formats():
    from fpscope.formats import FORMATS, is_representable

    mod = _sweep()
    for fin, fout in mod.TINY:
        a, b, c = mod.tiny_rows(8, rows=500, formats=(fin, fout))
        assert a.shape == b.shape == (500, 8) and c.shape == (500,)
        assert is_representable(a, FORMATS[fin]).all() and is_representable(b, FORMATS[fin]).all()
        assert is_representable(c, FORMATS[fout]).all()
        assert (c != 0).any() and (c == 0).any() and (a == 0).any()
        prods = np.abs(a * b)[a * b != 0]  # some products below the output's subnormals
        assert (prods < FORMATS[fout].min_subnormal).any()


def test_sweep_refuses_unknown_formats(capsys):
    assert _sweep().main(["--formats", "fp16:fp32"]) == 2
    assert "--formats fp16:fp32: not one of bf16:fp32, fp16:fp16" in capsys.readouterr().err
