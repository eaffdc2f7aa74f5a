"""scripts/probe_sweep.py: the exhaustive round trip near the subnormal range reports the
profiles it probes wrongly (and only those)."""

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


def test_sweep_reports_the_documented_gap(capsys):
    # e_zero -127 under flushed outputs: observable through sums of several terms reaching the
    # normal range, which the zeros family does not probe (its docstring says so)
    rc = _sweep().main(["--steps", "e8m13-RZ", "--block-sizes", "2", "--e-zero=-127:-127",
                        "--limit", "24"])
    lines = capsys.readouterr().out.strip().splitlines()
    wrong = [ln for ln in lines if ln.startswith("WRONG")]
    assert rc == 1 and len(wrong) == 2, lines
    assert all("e_zero=-127" in ln and "/True:" in ln for ln in wrong), wrong
    assert lines[-1].startswith("2 of 24 profiles probed wrongly")


def test_sweep_refuses_a_bad_range(capsys):
    assert _sweep().main(["--e-zero=-140"]) == 2
    assert "bad argument" in capsys.readouterr().err
