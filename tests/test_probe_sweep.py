"""scripts/probe_sweep.py: the exhaustive round trip near the subnormal range reports the
profiles it probes wrongly (and only those)."""

import dataclasses
import importlib.util
from pathlib import Path

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
