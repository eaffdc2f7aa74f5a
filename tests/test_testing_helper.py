"""fpscope.testing: assert_same_order, pin_order and the fpscope_pin fixture.

The kernel is ``tests/kernels_env.py:env_sum`` (sequential or pairwise float32 sum, chosen by
FPSCOPE_TEST_ORDER at every call).
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from fpscope.cli import main
from fpscope.record import RecordError
from fpscope.testing import assert_same_order, pin_order
from fpscope.tree import SumTree

pytest_plugins = ["pytester"]

KERNEL = f"{Path(__file__).with_name('kernels_env.py').resolve()}:env_sum"
N = 16


@pytest.fixture
def sequential(monkeypatch):
    monkeypatch.setenv("FPSCOPE_TEST_ORDER", "sequential")


@pytest.fixture
def pairwise(monkeypatch):
    monkeypatch.setenv("FPSCOPE_TEST_ORDER", "pairwise")


@pytest.fixture(scope="module")
def record(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("pin") / "seq.json"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FPSCOPE_TEST_ORDER", "sequential")
        assert main(["reveal", KERNEL, "--n", str(N), "--samples", "4", "--record", str(path)]) == 0
    return path


def test_record_baseline_passes_unchanged(record, sequential):
    assert assert_same_order(KERNEL, record) == SumTree.sequential(N)
    assert assert_same_order(None, str(record)) == SumTree.sequential(N)  # the record's target


def test_record_baseline_fails_changed_with_diff_text(record, pairwise):
    with pytest.raises(AssertionError) as exc:
        assert_same_order(KERNEL, record)
    msg = str(exc.value)
    assert "summation order differs from the baseline" in msg
    assert "different tree" in msg
    assert "smallest differing subtree (2 leaves): A [[[0,1],2],3]  vs  B [2,3]" in msg
    assert "witness" in msg


def test_sumtree_baseline(sequential, monkeypatch):
    assert_same_order(KERNEL, SumTree.sequential(N))
    with pytest.raises(AssertionError, match="smallest differing subtree"):
        assert_same_order(KERNEL, SumTree.pairwise(N))
    monkeypatch.setenv("FPSCOPE_TEST_ORDER", "pairwise")
    assert_same_order(KERNEL, SumTree.pairwise(N))
    # numpy.sum of 8 float32 values: 8 lanes combined pairwise
    assert_same_order("numpy.sum", SumTree.pairwise(8), dtype="fp32")


def test_conditions_override_the_record(record, sequential):
    # the record is n = 16; n = 17 gives a 17-leaf tree: a clear assertion, not a crash
    with pytest.raises(AssertionError, match="17 leaves"):
        assert_same_order(KERNEL, record, n=17)


def test_bad_baselines(tmp_path):
    with pytest.raises(TypeError, match="record path or a SumTree"):
        assert_same_order(KERNEL, [0, 1])
    with pytest.raises(RecordError, match="cannot read"):
        assert_same_order(KERNEL, tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema": "fpscope.record/9"}))
    with pytest.raises(RecordError, match="schema"):
        assert_same_order(KERNEL, bad)


@pytest.fixture
def no_record_env(monkeypatch):
    for name in ("FPSCOPE_RECORD", "FPSCOPE_UPDATE_PINS"):
        monkeypatch.delenv(name, raising=False)


def test_pin_order_missing_baseline_fails_then_records_and_checks(tmp_path, monkeypatch,
                                                                  no_record_env):
    monkeypatch.setenv("FPSCOPE_TEST_ORDER", "sequential")
    path = tmp_path / "pins" / "env_sum.json"
    # a missing baseline is a failure, not a silent first recording
    with pytest.raises(AssertionError, match="no baseline at .*--fpscope-record or "
                                             "FPSCOPE_RECORD=1"):
        pin_order(KERNEL, path, n=N)
    assert not path.exists()
    monkeypatch.setenv("FPSCOPE_RECORD", "1")
    with pytest.warns(UserWarning, match="baseline of .* written"):
        pin_order(KERNEL, path, n=N)
    monkeypatch.delenv("FPSCOPE_RECORD")
    assert json.loads(path.read_text())["accuracy"]["samples"] == 64  # 16 per distribution
    pin_order(KERNEL, path, n=N)  # passes, writes nothing
    monkeypatch.setenv("FPSCOPE_TEST_ORDER", "pairwise")
    with pytest.raises(AssertionError, match="differs"):
        pin_order(KERNEL, path, n=N)
    monkeypatch.setenv("FPSCOPE_UPDATE_PINS", "1")  # the older name: accept the new order
    with pytest.warns(UserWarning):
        pin_order(KERNEL, path, n=N)
    monkeypatch.delenv("FPSCOPE_UPDATE_PINS")
    assert pin_order(KERNEL, path, n=N) == SumTree.pairwise(N)


def test_same_order_other_arithmetic_fails(record, monkeypatch):
    """The "no false identical" case: the same left-to-right tree with a float64 accumulator
    is not the baseline's fp32 arithmetic; comparing the order alone passed it."""
    monkeypatch.setenv("FPSCOPE_TEST_ORDER", "sequential-fp64")
    with pytest.raises(AssertionError) as exc:
        assert_same_order(KERNEL, record)
    msg = str(exc.value)
    assert "node arithmetic differs from the baseline" in msg
    assert "same tree, different node arithmetic" in msg
    assert "first differing parameter" in msg


def test_relative_baseline_is_found_next_to_the_test_file(record, sequential, tmp_path,
                                                          monkeypatch, no_record_env):
    """A relative path names a file beside the calling test file, from any current folder."""
    rel = Path(os.path.relpath(record, Path(__file__).resolve().parent))
    assert not rel.is_absolute()
    # a folder deep enough that the path's ".." steps stay inside tmp_path, where it names
    # nothing (from a shallow folder they may climb to / and find the file again)
    ups = sum(part == ".." for part in rel.parts)
    here = tmp_path.joinpath(*["d"] * ups)
    here.mkdir(parents=True, exist_ok=True)
    monkeypatch.chdir(here)  # the path does not resolve from here
    assert not (here / rel).exists()
    assert assert_same_order(KERNEL, rel) == SumTree.sequential(N)
    assert pin_order(KERNEL, str(rel), n=N) == SumTree.sequential(N)


def test_fpscope_pin_fixture_as_documented(pytester, monkeypatch, no_record_env):
    """The documented set-up: conftest.py with pytest_plugins = ["fpscope.testing"]; the
    first run without --fpscope-record fails (no baseline), with it records."""
    monkeypatch.setenv("FPSCOPE_TEST_ORDER", "sequential")
    pytester.makeconftest('pytest_plugins = ["fpscope.testing"]\n')
    pytester.makepyfile(test_kernel=textwrap.dedent(f"""
        def test_order(fpscope_pin):
            fpscope_pin({KERNEL!r}, name="env16", n={N})
    """))
    res = pytester.runpytest_inprocess("-q", "-p", "no:cacheprovider")
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines(["*no baseline at*--fpscope-record*"])
    assert not (pytester.path / "fpscope_baselines" / "env16.json").exists()
    res = pytester.runpytest_inprocess("-q", "-p", "no:cacheprovider", "-W", "ignore::UserWarning",
                                       "--fpscope-record")
    res.assert_outcomes(passed=1)
    assert (pytester.path / "fpscope_baselines" / "env16.json").is_file()
    res = pytester.runpytest_inprocess("-q", "-p", "no:cacheprovider")
    res.assert_outcomes(passed=1)
    monkeypatch.setenv("FPSCOPE_TEST_ORDER", "pairwise")
    res = pytester.runpytest_inprocess("-q", "-p", "no:cacheprovider")
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines(["*smallest differing subtree*"])


def test_record_option_through_the_plugin_flag(pytester, monkeypatch, no_record_env):
    """``pytest -p fpscope.testing --fpscope-record`` (what the pytest11 entry point loads):
    pin_order in a test file with a relative path records beside that file, whatever the
    current folder."""
    monkeypatch.setenv("FPSCOPE_TEST_ORDER", "sequential")
    sub = pytester.mkpydir("suite")
    (sub / "test_pin.py").write_text(textwrap.dedent(f"""
        from fpscope.testing import pin_order

        def test_pin():
            pin_order({KERNEL!r}, "baselines/env.json", n={N})
    """))
    elsewhere = pytester.mkdir("elsewhere")
    monkeypatch.chdir(elsewhere)
    args = ("-q", "-p", "no:cacheprovider", "-p", "fpscope.testing", str(sub / "test_pin.py"))
    pytester.runpytest_inprocess(*args).assert_outcomes(failed=1)
    res = pytester.runpytest_inprocess(*args, "--fpscope-record", "-W", "ignore::UserWarning")
    res.assert_outcomes(passed=1)
    assert (sub / "baselines" / "env.json").is_file()
    assert not (elsewhere / "baselines").exists()
    pytester.runpytest_inprocess(*args).assert_outcomes(passed=1)
