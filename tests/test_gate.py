"""``fpscope gate``: policies bitwise / tolerant / record, exit codes, bad baselines.

The kernel under test is ``tests/kernels_env.py:env_sum``, a float32 sum whose order (sequential
or pairwise) is chosen by the environment variable FPSCOPE_TEST_ORDER at every call, so that a
"changed kernel" is one ``monkeypatch.setenv`` away. The baseline is the sequential kernel.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fpscope.cli import main
from fpscope.tree import SumTree

KERNEL = f"{Path(__file__).with_name('kernels_env.py').resolve()}:env_sum"
N = 32


def cli(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture(scope="module")
def baseline(tmp_path_factory) -> Path:
    """Reveal record of the sequential kernel, n = 32 (written once for the module)."""
    path = tmp_path_factory.mktemp("gate") / "base.json"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FPSCOPE_TEST_ORDER", "sequential")
        assert main(["reveal", KERNEL, "--n", str(N), "--samples", "8", "--record", str(path)]) == 0
    return path


@pytest.fixture
def sequential(monkeypatch):
    monkeypatch.setenv("FPSCOPE_TEST_ORDER", "sequential")


@pytest.fixture
def pairwise(monkeypatch):
    monkeypatch.setenv("FPSCOPE_TEST_ORDER", "pairwise")


def test_baseline_record_has_accuracy(baseline):
    rec = json.loads(baseline.read_text())
    assert SumTree.from_json(rec["tree"]) == SumTree.sequential(N)
    acc = rec["accuracy"]
    assert acc["samples"] == 4 * acc["per_distribution"] == 256
    assert acc["output_format"] == "fp32" and acc["nonfinite"] == 0
    assert set(acc["by_distribution"]) == {"uniform", "normal", "wide", "cancel"}
    # a sequential float32 sum of 32 terms is not correctly rounded everywhere, nor wildly off
    # on all-positive inputs (error bound (n - 1) u sum|x| / |S| = 31 u: 31 * 2 ulps at most)
    assert 0.5 < acc["max_ulps"] and acc["mean_ulps"] <= acc["max_ulps"]
    assert 0 < acc["by_distribution"]["uniform"]["max_ulps"] <= 62


# -- bitwise ------------------------------------------------------------------------------------

def test_bitwise_passes_unchanged_kernel(capsys, baseline, sequential):
    rc, out, err = cli(capsys, "gate", baseline)
    assert rc == 0, err
    assert out.startswith("gate PASSED (policy bitwise): identical")
    assert "accuracy (live): max" in out and "accuracy (baseline): max" in out


def test_bitwise_fails_changed_kernel_and_names_the_subtree(capsys, baseline, pairwise):
    rc, out, err = cli(capsys, "gate", baseline)
    assert rc == 1, err
    assert out.startswith("gate FAILED (policy bitwise): different tree")
    # pairwise adds x2 + x3 first; the sequential tree has no node {2, 3}: its smallest cover
    # is ((x0 + x1) + x2) + x3
    assert "smallest differing subtree (2 leaves): A [[[0,1],2],3]  vs  B [2,3]" in out
    assert "witness (FPRev probe x[2] = M, x[3] = -M" in out


def test_bitwise_json(capsys, baseline, pairwise):
    rc, out, _ = cli(capsys, "gate", baseline, "--format", "json")
    assert rc == 1
    res = json.loads(out)
    assert res["verdict"] == "fail" and res["policy"] == "bitwise"
    assert res["diff"]["verdict"] == "different tree"
    assert sorted(res["diff"]["subtree"]["leaves"]) == [2, 3]
    assert res["diff"]["witness"]["a"] != res["diff"]["witness"]["b"]
    assert res["record"] is None


def test_target_override(capsys, baseline, sequential):
    # the same kernel through its module path (tests/ is on sys.path): the same order
    rc, out, err = cli(capsys, "gate", baseline, "--target", "kernels_env:env_sum")
    assert rc == 0, err
    assert "B = live kernels_env:env_sum" in out


# -- tolerant -----------------------------------------------------------------------------------

def _tolerant(capsys, baseline, units, flag="--units"):
    rc, out, err = cli(capsys, "gate", baseline, "--policy", "tolerant", flag, repr(units),
                       "--format", "json")
    assert rc in (0, 1), err
    return rc, json.loads(out)


def test_tolerant_judges_changed_tree_by_live_bits_against_the_baseline_replay(
        capsys, baseline, pairwise):
    rc, res = _tolerant(capsys, baseline, 0.0)
    measured = res["bits"]["max_units"]
    assert measured > 0  # pairwise and sequential float32 sums differ on these inputs
    assert rc == 1 and res["verdict"] == "fail" and not res["diff"]["same"]
    assert "> budget 0 units" in res["reason"]
    # the inputs come from a fixed seed: the same measurement on every run, so the budget
    # decides at exactly the measured value (--ulps is the old spelling of --units)
    rc, res = _tolerant(capsys, baseline, measured, flag="--ulps")
    assert res["bits"]["max_units"] == measured
    assert rc == 0 and res["verdict"] == "pass" and "<= budget" in res["reason"]
    rc, _ = _tolerant(capsys, baseline, measured * (1 - 1e-9))
    assert rc == 1
    # a reordering of 32 terms stays within a few units of u * sum|terms|
    assert measured < 8


def test_tolerant_text_reports_the_units(capsys, baseline, pairwise):
    rc, out, _ = cli(capsys, "gate", baseline, "--policy", "tolerant", "--units", "0")
    assert rc == 1
    assert out.startswith("gate FAILED (policy tolerant): different tree; largest difference "
                          "from the baseline's replay ")
    assert "smallest differing subtree" in out
    assert "live bits vs baseline replay: " in out and "units of u * sum|terms|" in out
    assert "accuracy (live): max " in out and " ulps, mean " in out


def test_tolerant_passes_unchanged_op_whatever_the_budget(capsys, baseline, sequential):
    rc, res = _tolerant(capsys, baseline, 0.0)
    assert rc == 0 and res["reason"].startswith("identical")
    assert res["bits"]["max_units"] == 0 and res["bits"]["matched"] == res["bits"]["samples"]
    assert res["accuracy"]["max_ulps"] > 0  # measured and reported all the same


# -- record -------------------------------------------------------------------------------------

def test_record_policy_writes_new_record(capsys, baseline, pairwise, tmp_path):
    base = tmp_path / "kern.json"
    base.write_text(baseline.read_text())
    rc, out, err = cli(capsys, "gate", base, "--policy", "record")
    assert rc == 0, err  # never fails, although the tree changed
    new = tmp_path / "kern.new.json"
    assert out.startswith("gate PASSED (policy record): different tree")
    assert f"record written to {new}" in out
    rec = json.loads(new.read_text())
    assert rec["schema"] == "fpscope.record/2"
    assert SumTree.from_json(rec["tree"]) == SumTree.pairwise(N)
    assert rec["accuracy"]["max_ulps"] > 0
    # never overwritten without --force
    before = new.read_text()
    rc, out, err = cli(capsys, "gate", base, "--policy", "record")
    assert rc == 2 and err.count("\n") == 1 and "exists" in err and "--force" in err
    assert new.read_text() == before
    rc, _, err = cli(capsys, "gate", base, "--policy", "record", "--force")
    assert rc == 0, err
    # the new record is itself a baseline: the pairwise kernel passes against it
    rc, out, err = cli(capsys, "gate", new)
    assert rc == 0, err


def test_record_option_with_bitwise(capsys, baseline, pairwise, tmp_path):
    out_path = tmp_path / "live.json"
    rc, _, _ = cli(capsys, "gate", baseline, "--record", out_path)
    assert rc == 1  # bitwise still fails; the live record is written for inspection
    assert SumTree.from_json(json.loads(out_path.read_text())["tree"]) == SumTree.pairwise(N)


# -- bad input: exit 2, one line ----------------------------------------------------------------

def _bad(tmp_path, baseline, case):
    p = tmp_path / "bad.json"
    rec = json.loads(baseline.read_text())
    if case == "missing":
        return tmp_path / "nope.json"
    text = {
        "not-json": "{ not json",
        "not-object": "[1, 2",
        "no-schema": json.dumps({"tree": [0, 1]}),
        "unknown-schema": json.dumps(dict(rec, schema="fpscope.record/9")),
        "sweep-record": json.dumps(dict(rec, kind="sweep")),
        "profile": json.dumps({"schema": "fpscope.profile/1", "name": "x"}),
        "bad-tree": json.dumps(dict(rec, tree=[0, [1, 1]])),
        "wrong-leaf-count": json.dumps(dict(rec, tree=SumTree.sequential(N + 1).to_json())),
        "no-target-name": json.dumps(dict(rec, target={"n": N})),
        "bad-accuracy": json.dumps(dict(rec, accuracy=[1])),
    }[case]
    p.write_text(text)
    return p


@pytest.mark.parametrize("case", ["missing", "not-json", "not-object", "no-schema", "unknown-schema",
                                  "sweep-record", "profile", "bad-tree", "wrong-leaf-count",
                                  "no-target-name", "bad-accuracy"])
def test_bad_baseline_exit_2_one_line(capsys, baseline, tmp_path, sequential, case):
    rc, out, err = cli(capsys, "gate", _bad(tmp_path, baseline, case))
    assert rc == 2, (out, err)
    assert err.startswith("fpscope: ") and err.count("\n") == 1, err
    assert "Traceback" not in err and out == ""


@pytest.mark.parametrize("opts", [["--samples", "0"], ["--ulps", "-1"], ["--ulps", "nan"],
                                  ["--target", "no.such.module:f"]])
def test_bad_options_exit_2(capsys, baseline, opts):
    rc, _, err = cli(capsys, "gate", baseline, *opts)
    assert rc == 2 and err.startswith("fpscope: ") and err.count("\n") == 1, err


def test_record_without_accuracy_still_gates(capsys, baseline, sequential, tmp_path):
    old = tmp_path / "old.json"
    rec = json.loads(baseline.read_text())
    del rec["accuracy"]
    old.write_text(json.dumps(rec))
    rc, out, err = cli(capsys, "gate", old)
    assert rc == 0, err
    assert "accuracy (baseline)" not in out
    rc, out, err = cli(capsys, "verify", old, "--samples", "3")
    assert rc == 0, err


def test_help_has_examples(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["gate", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "examples:" in out and "fpscope gate base.json --policy tolerant" in out
    for opt in ("--target", "--policy", "--ulps", "--samples", "--record", "--force", "--format"):
        assert opt in out


def test_subprocess_exit_codes(baseline):
    """The real command: the environment of the process changes the kernel."""
    env = dict(os.environ, FPSCOPE_TEST_ORDER="pairwise")
    cmd = [sys.executable, "-m", "fpscope.cli", "gate", str(baseline), "--samples", "4"]
    p = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 1, p.stderr
    assert "smallest differing subtree" in p.stdout
    env["FPSCOPE_TEST_ORDER"] = "sequential"
    p = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr


def test_gate_on_a_probe_record(tmp_path, capsys):
    """A probe baseline is re-probed live: unchanged arithmetic passes, another instruction
    (a different target) fails with the first differing parameter, tolerant is refused."""
    from fpscope.cli import main as cli_main

    base = tmp_path / "probe.json"
    assert cli_main(["probe", "sim:hopper-fp16", "--in-format", "fp16", "--cases", "256",
                     "--record", str(base)]) == 0
    capsys.readouterr()
    assert cli_main(["gate", str(base)]) == 0
    out = capsys.readouterr().out
    assert "same arithmetic" in out and "accuracy" not in out  # a probe gate measures none
    assert cli_main(["gate", str(base), "--target", "sim:ampere-fp16"]) == 1
    assert "block_size" in capsys.readouterr().out
    assert cli_main(["gate", str(base), "--policy", "tolerant"]) == 2
    assert "tolerant" in capsys.readouterr().err
    assert cli_main(["gate", str(base), "--policy", "record"]) == 0
    assert (tmp_path / "probe.new.json").is_file()


def test_gate_re_probes_the_library_level(tmp_path, capsys):
    """A probe record made with --library is re-probed at the library level: the same split-K
    passes, a GEMM with another split-K fails naming split_k."""
    from fpscope.cli import main as cli_main

    base = tmp_path / "lib.json"
    spec = "simgemm:hopper-fp16,split_k=2"
    assert cli_main(["probe", spec, "--in-format", "fp16", "--library", "256", "--cases", "256",
                     "--record", str(base)]) == 0
    capsys.readouterr()
    assert cli_main(["gate", str(base)]) == 0
    assert "same arithmetic" in capsys.readouterr().out
    assert cli_main(["gate", str(base), "--target", "simgemm:hopper-fp16,split_k=4"]) == 1
    assert "split_k" in capsys.readouterr().out


def test_gate_re_probes_with_the_recorded_chain(tmp_path, capsys):
    """A --library --chain probe record keeps the chain profile; gate re-probes with it (without
    it, narrow partial sums would make the live probe refuse to guess)."""
    import json

    from fpscope.cli import main as cli_main

    base = tmp_path / "chain.json"
    spec = "simgemm:hopper-e4m3,split_k=2,split_k_format=bf16"
    assert cli_main(["probe", spec, "--in-format", "fp8_e4m3fn", "--library", "--chain",
                     "hopper-e4m3", "--cases", "256", "--record", str(base)]) == 0
    rec = json.loads(base.read_text())
    assert rec["probe"]["chain"]["name"] == "hopper-e4m3"
    capsys.readouterr()
    assert cli_main(["gate", str(base)]) == 0
    assert "same arithmetic" in capsys.readouterr().out
    rec["probe"]["chain"] = None  # as written before the chain was kept: the live probe refuses
    base.write_text(json.dumps(rec))
    assert cli_main(["gate", str(base)]) == 1
