"""Faults of ``fpscope matrix`` (resume, crashing cells) and the Dask fleet runner (issue 27)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import fpscope.matrix as matrix_mod
from fpscope.cli import main
from fpscope.matrix import Block, MatrixError, run_matrix, suite_cells
from fpscope.matrix_resume import CallableCell

CRASH = f"{Path(__file__).with_name('fleet_targets.py')}:crash"
SMALL = [Block("sum", ("fp32",), (8,)), Block("dot", ("fp32",), (8,))]


def _cells():
    """4 numpy cells: sum n=8 t1, dot n=8 t1, sum n=16, dot n=16."""
    return suite_cells([Block("sum", ("fp32",), (8, 16)), Block("dot", ("fp32",), (8, 16))],
                       ["numpy"])


def test_crashing_cell_is_failed_and_the_others_complete(tmp_path):
    cells = _cells()[:2] + [CallableCell("sum", "numpy", "fp32", (8,), spec=CRASH)]
    res = run_matrix(cells, tmp_path / "m", isolate=True, replay_samples=2)
    status = [c.status for c in res.cells]
    assert status == ["ok", "ok", "failed"]
    assert res.cells[2].error == "process exited with code 3: fleet_targets.crash: exiting"
    assert len(list((tmp_path / "m" / "cells").glob("*.json"))) == 2
    assert res.cells[0].tree is not None and res.cells[0].record_file.startswith("cells/001-")


def test_interrupted_run_resumes_only_missing_cells(tmp_path, monkeypatch):
    out = tmp_path / "m"

    def stop_after_two(done, total, label):
        if done == 2 and label:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_matrix(_cells(), out, replay_samples=2, progress=stop_after_two)
    kept = sorted((out / "cells").glob("*.json"))
    assert len(kept) == 2 and not (out / "matrix.json").exists()
    stamps = {p.name: p.stat().st_mtime_ns for p in kept}

    ran = []
    real = matrix_mod._run_cell
    monkeypatch.setattr(matrix_mod, "_run_cell", lambda i, *a: ran.append(i) or real(i, *a))
    res = run_matrix(_cells(), out, replay_samples=2)
    assert ran == [3, 4]  # only the missing cells
    assert [c.status for c in res.cells] == ["ok"] * 4
    assert "2 of 4 cells kept from an earlier run" in " ".join(res.notes)
    assert {p.name: p.stat().st_mtime_ns for p in kept} == stamps  # untouched
    assert res.cells[0].tree_id is not None

    ran.clear()
    run_matrix(_cells(), out, replay_samples=2, force=True)
    assert ran == [1, 2, 3, 4]


def test_resume_refuses_other_folders(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "x.txt").write_text("mine")
    with pytest.raises(MatrixError, match="not a matrix folder"):
        run_matrix(_cells()[:1], other)
    run_matrix(_cells()[:1], tmp_path / "q", suite="quick", replay_samples=0)
    with pytest.raises(MatrixError, match="suite 'quick', not 'full'"):
        run_matrix(_cells()[:1], tmp_path / "q", suite="full")


# -- Dask ------------------------------------------------------------------------------------------

distributed = pytest.importorskip("distributed")


def test_local_cluster_fleet_resume_and_crash(tmp_path, monkeypatch, capsys):
    from fpscope.fleet.compare import compare_folders
    from fpscope.fleet.run import run_fleet

    cells = _cells()[:2] + [CallableCell("sum", "numpy", "fp32", (8,), spec=CRASH)]
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        seen = []

        def stop(worker, done, total, text):
            seen.append((worker, text))
            if len(seen) == 2:
                raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            run_fleet(cluster.scheduler_address, tmp_path / "f", cells, replay_samples=2,
                      progress=stop)
        assert len(list((tmp_path / "f").glob("*/cells/*.json"))) == 2
        runs = run_fleet(cluster.scheduler_address, tmp_path / "f", cells, replay_samples=2)

        monkeypatch.setitem(matrix_mod.SUITES, "quick", tuple(SMALL))
        argv = ["matrix", "--dask", cluster.scheduler_address, "-o", str(tmp_path / "cli"),
                "--libraries", "numpy", "--samples", "2"]
        assert main(argv) == 0
        out, err = capsys.readouterr()
        assert out.count("2 cells, 0 kept, 2 run, 0 failed") == 2  # sum and dot, per worker
        assert err.count("[2/2]") == 2 and "fleet.html" in out
        assert main(argv + ["--suite", "full"]) == 2
        assert "holds a fleet run of suite 'quick'" in capsys.readouterr().err
    assert len(runs) == 2
    assert sum(r.kept for r in runs.values()) == 2
    assert sum(r.ran for r in runs.values()) == 4  # 6 cells, 2 kept
    for run in runs.values():
        assert [c.status for c in run.result.cells] == ["ok", "ok", "failed"]
        assert "exited with code 3" in run.result.cells[2].error
        worker = json.loads((run.folder / "worker.json").read_text())
        assert worker["address"] == run.address and worker["environment"]["platform"]
        assert (run.folder / "index.html").is_file() and (run.folder / "matrix.json").is_file()
    fleet = json.loads((tmp_path / "f" / "fleet.json").read_text())
    assert len(fleet["workers"]) == 2
    cmp = compare_folders({r.name: r.folder for r in runs.values()})
    # one machine, one environment; the crashed cell has no record on either worker
    assert [len(c["groups"]) for c in cmp["cells"]] == [1, 1, 0]


def _start(cmd, env=None, log=None):
    return subprocess.Popen(cmd, env={**os.environ, **(env or {})}, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)


def _stop(proc):
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_two_dask_workers_with_different_openblas_coretype(tmp_path):
    """Haswell sdot fuses its products, Sandybridge rounds them (NUMERICS.md section 4):
    numpy.dot cells form two groups, numpy.sum (numpy's own loop) one."""
    from fpscope.fleet.compare import compare_folders
    from fpscope.fleet.run import run_fleet

    bindir = Path(sys.executable).parent
    sched_file = tmp_path / "scheduler.json"
    log = open(tmp_path / "dask.log", "wb")
    procs = [_start([str(bindir / "dask"), "scheduler", "--port", "0", "--no-dashboard",
                     "--scheduler-file", str(sched_file)], log=log)]
    try:
        for _ in range(300):
            if sched_file.exists():
                break
            time.sleep(0.1)
        address = json.loads(sched_file.read_text())["address"]
        for name, core in (("haswell", "Haswell"), ("sandy", "Sandybridge")):
            procs.append(_start([str(bindir / "dask"), "worker", address, "--name", name,
                                 "--nthreads", "1", "--no-dashboard"],
                                env={"OPENBLAS_CORETYPE": core}, log=log))
        with distributed.Client(address) as client:
            client.wait_for_workers(2, timeout=60)
        cells = suite_cells([Block("sum", ("fp32",), (64,)), Block("dot", ("fp32",), (64,))],
                            ["numpy"])
        runs = run_fleet(address, tmp_path / "f", cells, replay_samples=2)
        assert sorted(runs) == ["haswell", "sandy"]
        cmp = compare_folders({r.name: r.folder for r in runs.values()})
        groups = {c["cell"].split()[0]: c["groups"] for c in cmp["cells"]}
        assert len(groups["numpy.sum"]) == 1
        assert sorted(map(sorted, groups["numpy.dot"])) == [["haswell"], ["sandy"]]
        env = json.loads((tmp_path / "f" / "sandy" / "worker.json").read_text())["environment"]
        assert "Sandybridge" in json.dumps(env)

        # a worker that leaves mid-run: its missing cells fail, the other worker completes
        def kill_sandy(worker, done, total, text):
            if worker == "sandy" and done == 1:
                _stop(procs[2])

        more = suite_cells([Block("sum", ("fp32",), (64, 100, 128, 256))], ["numpy"])
        runs = run_fleet(address, tmp_path / "g", more, replay_samples=2, leave_timeout=2,
                         progress=kill_sandy)
        assert [c.status for c in runs["haswell"].result.cells] == ["ok"] * 4
        sandy = runs["sandy"].result.cells
        assert sandy[0].status == "ok"
        assert all(c.status == "failed" and "worker left" in c.error for c in sandy[1:])
    finally:
        for p in reversed(procs):
            _stop(p)
        log.close()
