"""Tests for fpscope.fleet and ``fpscope fleet``: matrix folders of several "machines" compared.

Two real workers run the matrix runner on a tiny suite (numpy.sum and numpy.dot, fp32, n = 64):
"fast" in this process with the core type OpenBLAS picks here, "sandy" in a child process with
OPENBLAS_CORETYPE=Sandybridge (no FMA: its sdot adds in another order, NUMERICS.md section 4).
numpy.sum is numpy's own loop, the same on both. A third worker, "loose", is records gathered
without a manifest (renamed files, the dot cell left out). A few seconds in all."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from fpscope.cli import main
from fpscope.fleet import FleetError, cell_label, compare_folders, load_worker, worker_folders
from fpscope.fleet.compare import SCHEMA
from fpscope.matrix import Block, run_matrix, suite_cells
from fpscope.report import write_report

SUITE = (Block("sum", ("fp32",), (64,)), Block("dot", ("fp32",), (64,)))
SUM, DOT = "numpy.sum fp32 n=64 C t1", "numpy.dot fp32 n=64 C t1"

_CHILD = textwrap.dedent("""
    import sys
    from fpscope.matrix import Block, run_matrix, suite_cells
    from fpscope.report import write_report
    suite = (Block("sum", ("fp32",), (64,)), Block("dot", ("fp32",), (64,)))
    res = run_matrix(suite_cells(suite, ["numpy"]), sys.argv[1], replay_samples=4,
                     libraries=["numpy"])
    write_report(res, sys.argv[1])
    print(res.environment["blas"][0].get("architecture"))
""")


def _architecture(env: dict):
    blas = [b for b in env.get("blas") or [] if b.get("internal_api") == "openblas"]
    return blas[0].get("architecture") if blas else None


@pytest.fixture(scope="module")
def fleet_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("fleet")
    runs = root / "runs"  # the layout of fpscope matrix --dask: one subfolder per worker
    runs.mkdir()
    fast = runs / "fast"
    res = run_matrix(suite_cells(SUITE, ["numpy"]), fast, replay_samples=4, libraries=["numpy"])
    write_report(res, fast)
    here = _architecture(res.environment)
    if here is None or here == "Sandybridge":
        pytest.skip(f"needs OpenBLAS with a core type other than Sandybridge (here: {here})")
    sandy = runs / "sandy"
    env = dict(os.environ, OPENBLAS_CORETYPE="Sandybridge")
    child = subprocess.run([sys.executable, "-c", _CHILD, str(sandy)], env=env,
                           capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, child.stderr
    assert child.stdout.split()[-1] == "Sandybridge"
    info = {"name": "sandy", "address": "tcp://10.0.0.2:40000",
            "environment": json.loads((sandy / "matrix.json").read_text())["environment"]}
    (sandy / "worker.json").write_text(json.dumps(info))
    loose = root / "loose"  # scp'd records: no manifest, other file names, no dot cell
    loose.mkdir()
    for f in (fast / "cells").glob("*numpy.sum*.json"):
        shutil.copy(f, loose / "copied-sum-record.json")
    return {"root": root, "runs": runs, "fast": fast, "sandy": sandy, "loose": loose,
            "here": here}


def _cell(fleet: dict, label: str) -> dict:
    (cell,) = [c for c in fleet["cells"] if c["cell"] == label]
    return cell


# -- comparing ------------------------------------------------------------------------------------
def test_dot_splits_by_core_type_and_sum_agrees(fleet_dirs):
    d = fleet_dirs
    fleet = compare_folders([d["fast"], d["sandy"], d["loose"]])
    assert fleet["schema"] == SCHEMA
    assert [c["cell"] for c in fleet["cells"]] == [SUM, DOT]
    s = _cell(fleet, SUM)
    assert s["groups"] == [["fast", "sandy", "loose"]] and s["missing"] == [] and s["diff"] == []
    dot = _cell(fleet, DOT)
    assert dot["groups"] == [["fast"], ["sandy"]]
    assert dot["missing"] == [{"worker": "loose", "reason": "no such cell"}]
    (diff,) = dot["diff"]
    assert (diff["group"], diff["a"], diff["b"], diff["same"]) == (2, "fast", "sandy", False)
    assert diff["verdict"] == "different tree"
    w = diff["witness"]
    assert w is not None and w["a"] != w["b"]  # an input whose output bits differ, by replay
    assert diff["subtree"]["a_text"] != diff["subtree"]["b_text"]


def test_workers_name_address_environment(fleet_dirs):
    d = fleet_dirs
    fleet = compare_folders([d["fast"], d["sandy"], d["loose"]])
    fast, sandy, loose = fleet["workers"]
    assert (fast["name"], fast["address"]) == ("fast", None)
    assert (sandy["name"], sandy["address"]) == ("sandy", "tcp://10.0.0.2:40000")
    assert sandy["environment"]["env"]["OPENBLAS_CORETYPE"] == "Sandybridge"
    assert _architecture(fast["environment"]) == d["here"]
    assert _architecture(loose["environment"]) == d["here"]  # from its record


def test_identity_from_target_spec_not_file_name(fleet_dirs):
    w = load_worker(fleet_dirs["loose"])
    assert list(w["cells"]) == [SUM]
    assert w["cells"][SUM]["status"] == "ok"
    rec = w["cells"][SUM]["record"]
    assert cell_label(rec["target"]) == SUM
    assert cell_label({"name": "numpy.matmul", "dtype": "fp32", "n": 256, "shape": [2, 256, 16],
                       "layout": "F", "threads": 2}) == "numpy.matmul fp32 2x256x16 F t2"
    assert cell_label({"name": "torch.distributed.all_reduce", "dtype": "fp32", "n": 4096,
                       "world_size": 4, "env": {"X": "1"}}) == \
        "torch.distributed.all_reduce fp32 4 ranks x 4096"


def test_mapping_names_and_failed_cell(fleet_dirs, tmp_path):
    d = fleet_dirs
    broken = tmp_path / "broken"
    shutil.copytree(d["fast"], broken)
    (dot_file,) = (broken / "cells").glob("*numpy.dot*.json")
    rec = json.loads(dot_file.read_text())
    rec["matrix"]["failed"] = "replay: test failure"
    dot_file.write_text(json.dumps(rec))
    fleet = compare_folders({"x": d["fast"], "y": d["sandy"], "z": broken})
    assert [w["name"] for w in fleet["workers"]] == ["x", "y", "z"]
    assert _cell(fleet, SUM)["groups"] == [["x", "y", "z"]]
    dot = _cell(fleet, DOT)
    assert dot["groups"] == [["x"], ["y"]]
    assert dot["missing"] == [{"worker": "z", "reason": "failed: replay: test failure"}]


def test_skipped_cell_in_manifest_is_missing_with_reason(fleet_dirs, tmp_path):
    d = fleet_dirs
    skipper = tmp_path / "skipper"
    shutil.copytree(d["fast"], skipper)
    manifest = json.loads((skipper / "matrix.json").read_text())
    for entry in manifest["cells"]:
        if entry["target"] == "numpy.dot":
            entry.update(status="skipped", record=None, error="the library refuses")
    (skipper / "matrix.json").write_text(json.dumps(manifest))
    dot = _cell(compare_folders([d["fast"], skipper]), DOT)
    assert dot["groups"] == [["fast"]]
    assert dot["missing"] == [{"worker": "skipper", "reason": "skipped: the library refuses"}]


def test_worker_folders_expands_a_folder_of_workers(fleet_dirs):
    d = fleet_dirs
    assert worker_folders([d["runs"]]) == [d["fast"], d["sandy"]]
    assert worker_folders([d["fast"]]) == [d["fast"]]
    with pytest.raises(FleetError, match="no such folder"):
        worker_folders([d["root"] / "nope"])


# -- the command ----------------------------------------------------------------------------------
def test_cli_text_writes_json_and_html(fleet_dirs, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["fleet", str(fleet_dirs["runs"]), "-o", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"{SUM}: 1 group"
    assert lines[1] == f"{DOT}: 2 groups: [fast] | [sandy]: different tree"
    assert lines[2] == "2 workers, 2 cells, 1 differ between workers"
    assert lines[3] == f"report: {out / 'fleet.html'}"
    fleet = json.loads((out / "fleet.json").read_text())
    assert _cell(fleet, DOT)["groups"] == [["fast"], ["sandy"]]
    page = (out / "fleet.html").read_text()
    assert 'id="grid"' in page and 'id="differences"' in page and 'id="workers"' in page
    assert page.count('class="badge"') >= 4  # 2 workers x 2 cells, each with its group letter
    assert "Sandybridge" in page and "tcp://10.0.0.2:40000" in page
    assert "different tree" in page and "gives A 0x" in page
    assert "<script" not in page and "http" not in page.replace("http-equiv", "")


def test_cli_json(fleet_dirs, capsys):
    d = fleet_dirs
    assert main(["fleet", str(d["fast"]), str(d["sandy"]), "--format", "json"]) == 0
    fleet = json.loads(capsys.readouterr().out)
    assert fleet["schema"] == SCHEMA and [w["name"] for w in fleet["workers"]] == ["fast", "sandy"]
    assert [len(c["groups"]) for c in fleet["cells"]] == [1, 2]


def test_cli_bad_inputs_exit_2_with_one_line(fleet_dirs, tmp_path, capsys):
    d = fleet_dirs
    empty = tmp_path / "empty"
    empty.mkdir()
    out = tmp_path / "out"
    cases = [(["fleet", str(tmp_path / "nope")], "no such folder"),
             (["fleet", str(d["fast"]), str(empty)], "no matrix records"),
             (["fleet", str(d["fast"]), str(d["fast"])], "two workers named 'fast'"),
             (["fleet", str(d["fast"]), "-o", str(tmp_path / "a" / "b")], "does not exist")]
    for argv, words in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and words in err, (argv, err)
    assert main(["fleet", str(d["fast"]), "-o", str(out)]) == 0
    before = (out / "fleet.json").read_text()
    capsys.readouterr()
    assert main(["fleet", str(d["fast"]), str(d["sandy"]), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "exists" in err and "--force" in err
    assert (out / "fleet.json").read_text() == before  # nothing replaced
    assert main(["fleet", str(d["fast"]), str(d["sandy"]), "-o", str(out), "--force"]) == 0
    assert len(json.loads((out / "fleet.json").read_text())["workers"]) == 2


def test_cli_help_has_examples(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["fleet", "--help"])
    assert exc.value.code == 0
    assert "examples:" in capsys.readouterr().out
