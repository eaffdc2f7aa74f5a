"""The ``fpscope`` command line: verbs, output formats, records and exit codes.

Exit codes (fpscope DESIGN.md): 0 success, 1 a check failed, 2 bad usage or input with a one-line
reason on stderr and never a traceback. Most tests drive :func:`fpscope.cli.main` in-process;
``test_subprocess_*`` run the real interpreter to check the process exit code and stderr.
"""

from __future__ import annotations

import gc
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

from families import numpy_pairwise_sum_tree
from fpscope.cli import main
from fpscope.tree import SumTree

# A module of user callables, written into a temporary folder that is put on sys.path (and on
# PYTHONPATH for the subprocess tests). The name is unique to this file.
USER_MODULE = "fpscope_cli_userops"
USER_SOURCE = textwrap.dedent(
    """
    import numpy as np

    _rng = np.random.default_rng(20240601)


    def left_fold(x):
        acc = np.float32(0)
        for v in x:
            acc = np.float32(acc + v)
        return acc


    def shuffled(x):
        # a different order on every call: nondeterministic
        acc = np.float32(0)
        for i in _rng.permutation(len(x)):
            acc = np.float32(acc + x[i])
        return acc


    def boom(x):
        raise RuntimeError("kaboom\\nsecond line of the message")
    """
)


def flat(text: str) -> str:
    """Collapse all whitespace (rich wraps long lines at the console width)."""
    return " ".join(text.split())


def assert_one_line_error(err: str, fragment: str | None = None) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got:\n{err}"
    assert "Traceback" not in err
    assert lines[0].startswith("fpscope: ")
    if fragment is not None:
        assert fragment in lines[0], lines[0]


def cli(capsys, *args):
    """(exit code, stdout, stderr) of ``fpscope ARGS`` run in-process."""
    rc = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return rc, out, err


def cli_subprocess(*args, env_extra=None, cwd=None):
    env = dict(os.environ)
    env.update(env_extra or {})
    return subprocess.run(
        [sys.executable, "-m", "fpscope.cli", *[str(a) for a in args]],
        capture_output=True, text=True, env=env, cwd=cwd, timeout=120,
    )


@pytest.fixture(scope="module")
def user_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("userops")
    (d / f"{USER_MODULE}.py").write_text(USER_SOURCE, encoding="utf-8")
    return d


@pytest.fixture
def user_module(user_dir, monkeypatch):
    monkeypatch.syspath_prepend(str(user_dir))
    return USER_MODULE


@pytest.fixture(scope="module")
def record_300(tmp_path_factory):
    """A record of numpy.sum, n = 300, float32 (written once for the module)."""
    path = tmp_path_factory.mktemp("rec") / "sum300.json"
    assert main(["reveal", "numpy.sum", "--n", "300", "--samples", "10", "--record", str(path)]) == 0
    return path


def write_json(path: Path, obj) -> Path:
    path.write_text(obj if isinstance(obj, str) else json.dumps(obj), encoding="utf-8")
    return path


# -- reveal: text and JSON ---------------------------------------------------------------------


def test_default_reveal_text(capsys):
    rc, out, err = cli(capsys, "reveal")
    assert rc == 0, err
    text = flat(out)
    assert "numpy.sum" in text and "n=1024" in text and "fp32" in text
    assert "8 lanes" in text
    assert "bit-exact" in text and "DIFFER" not in text
    assert "accumulator: 24 significand bits" in text


def test_reveal_json_record(capsys):
    rc, out, err = cli(capsys, "reveal", "numpy.sum", "--n", "200", "--format", "json", "--samples", "5")
    assert rc == 0, err
    rec = json.loads(out)
    assert rec["schema"] == "fpscope.record/2"
    for key in ("target", "tree", "summary", "probe", "environment", "validation"):
        assert key in rec
    tree = SumTree.from_json(rec["tree"])
    assert tree.n == 200
    assert tree == numpy_pairwise_sum_tree(200)
    assert rec["tree"] == tree.to_flat()  # schema /2: the flat form
    probe = rec["probe"]
    assert isinstance(probe["calls"], int) and not isinstance(probe["calls"], bool)
    assert probe["calls"] >= 1
    assert isinstance(probe["seconds"], float) and probe["seconds"] >= 0
    assert rec["target"]["name"] == "numpy.sum" and rec["target"]["n"] == 200
    assert rec["validation"]["replay"]["bit_exact"] is True


@pytest.mark.parametrize("sweep", [False, True], ids=["reveal", "sweep"])
def test_text_output_shows_the_summary_verbatim(capsys, tmp_path, sweep):
    """Every character of the record's summary must reach the text output."""
    rec_path = tmp_path / "r.json"
    rc, _, _ = cli(capsys, "reveal", "numpy.sum", "--n", "64", "--samples", "2", "--record", rec_path)
    assert rc == 0
    summary = json.loads(rec_path.read_text())["summary"]
    assert "x[r]" in summary  # "lane r sums x[r], x[r+8], ..."
    args = ["reveal", "numpy.sum", "--n", "64", "--samples", "2"]
    rc, out, _ = cli(capsys, *args, *(["--sweep", "offset=0"] if sweep else []))
    assert rc == 0
    assert flat(summary) in flat(out)


# -- records: --record, --force, verify ------------------------------------------------------


def test_record_refuses_to_overwrite_then_force_replaces(capsys, tmp_path):
    path = tmp_path / "rec.json"
    rc, _, err = cli(capsys, "reveal", "numpy.sum", "--n", "40", "--samples", "2", "--record", path)
    assert rc == 0, err
    first = path.read_bytes()
    assert json.loads(first)["target"]["n"] == 40

    rc, out, err = cli(capsys, "reveal", "numpy.sum", "--n", "48", "--samples", "2", "--record", path)
    assert rc == 2
    assert_one_line_error(err, "--force")
    assert path.read_bytes() == first  # unchanged, byte for byte

    rc, _, err = cli(capsys, "reveal", "numpy.sum", "--n", "48", "--samples", "2", "--record", path,
                     "--force")
    assert rc == 0, err
    assert json.loads(path.read_bytes())["target"]["n"] == 48


def test_output_file_refuses_to_overwrite(capsys, tmp_path):
    out_path = tmp_path / "out.json"
    out_path.write_text("keep me")
    rc, _, err = cli(capsys, "reveal", "numpy.sum", "--n", "16", "--format", "json", "-o", out_path)
    assert rc == 2
    assert_one_line_error(err, "--force")
    assert out_path.read_text() == "keep me"
    rc, _, err = cli(capsys, "reveal", "numpy.sum", "--n", "16", "--format", "json", "-o", out_path,
                     "--force", "--samples", "2")
    assert rc == 0, err
    assert json.loads(out_path.read_text())["schema"] == "fpscope.record/2"


def test_verify_record_bit_exact(capsys, record_300):
    rc, out, err = cli(capsys, "verify", record_300, "--samples", "20")
    assert rc == 0, err
    assert "80/80 outputs bit-exact" in out
    for kind in ("uniform", "normal", "wide", "cancel"):
        assert kind in out


def test_verify_json(capsys, record_300):
    rc, out, _ = cli(capsys, "verify", record_300, "--samples", "5", "--format", "json")
    assert rc == 0
    rep = json.loads(out)
    assert rep["bit_exact"] is True and rep["samples"] == rep["matched"] == 20


def test_verify_tampered_tree_fails(capsys, record_300, tmp_path):
    rec = json.loads(record_300.read_text())
    rec["tree"] = SumTree.sequential(300).to_json()  # numpy.sum is not a left fold at n = 300
    bad = write_json(tmp_path / "tampered.json", rec)
    rc, out, err = cli(capsys, "verify", bad, "--samples", "20")
    assert rc == 1
    assert "first mismatch" in out
    assert "Traceback" not in err


MALFORMED = {
    "not-json": "this is {not JSON",
    "unknown-schema": lambda rec: dict(rec, schema="fpscope.record/9"),
    "no-schema": lambda rec: {k: v for k, v in rec.items() if k != "schema"},
    "no-tree": lambda rec: {k: v for k, v in rec.items() if k != "tree"},
    "no-target": lambda rec: {k: v for k, v in rec.items() if k != "target"},
    "no-probe": lambda rec: {k: v for k, v in rec.items() if k != "probe"},
    "json-list": [1, 2, 3],
    "target-not-object": lambda rec: dict(rec, target="numpy.sum"),
    "target-without-name": lambda rec: dict(rec, target={"n": 300}),
    "tree-not-a-tree": lambda rec: dict(rec, tree=[0, [1]]),
    "tree-wrong-size": lambda rec: dict(rec, tree=[0, 1]),
    "unknown-dtype": lambda rec: dict(rec, target=dict(rec["target"], dtype="fp99")),
    "accumulator-not-object": lambda rec: dict(rec, accumulator=[24]),
    # these three raised tracebacks in cmd_verify until record.validate_record checked them
    "probe-list": lambda rec: dict(rec, probe=[1, 2]),
    "probe-checks-list": lambda rec: dict(rec, probe=dict(rec["probe"], checks=[1])),
    "shape-not-a-list": lambda rec: dict(rec, target=dict(rec["target"], shape=300)),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_verify_malformed_records_exit_2(capsys, record_300, tmp_path, case):
    make = MALFORMED[case]
    obj = make(json.loads(record_300.read_text())) if callable(make) else make
    path = write_json(tmp_path / f"{case}.json", obj)
    rc, out, err = cli(capsys, "verify", path, "--samples", "2")
    assert rc == 2, (out, err)
    assert_one_line_error(err)


def test_verify_missing_file(capsys, tmp_path):
    rc, _, err = cli(capsys, "verify", tmp_path / "nope.json")
    assert rc == 2
    assert_one_line_error(err, "nope.json")


# -- bad input --------------------------------------------------------------------------------


@pytest.mark.parametrize("args, fragment", [
    (["reveal", "nope.sum"], "unknown target"),
    (["reveal", "numpy.sum", "--dtype", "fp13"], "fp13"),
    (["reveal", "numpy.sum", "--n", "0"], "--n"),
    (["reveal", "numpy.sum", "--n", "300", "--dtype", "bf16"], "too large for bf16"),
    (["reveal", "no_such_pkg_fpscope.kernels:my_sum", "--n", "8"], "no_such_pkg_fpscope"),
    (["reveal", "json:no_such_function", "--n", "8"], "no_such_function"),
    (["reveal", "numpy.sum", "--n", "8", "--offset", "-8"], "offset"),
    (["reveal", "numpy.sum", "--n", "8", "--index", "3"], "index"),
    (["reveal", "numpy.sum", "--shape", "0x4"], "--shape"),
    (["reveal", "numpy.sum", "--n", "8", "--format", "svg"], "-o"),
    (["reveal", "numpy.sum", "--n", "8", "--sweep", "colour=1,2"], "--sweep"),
    (["reveal", "numpy.sum", "--n", "8", "--sweep", "offset=a,b"], "--sweep"),
])
def test_bad_input_exit_2(capsys, args, fragment):
    rc, out, err = cli(capsys, *args)
    assert rc == 2, (out, err)
    assert_one_line_error(err, fragment)


def test_callable_that_raises_exit_2(capsys, user_module):
    rc, _, err = cli(capsys, "reveal", f"{user_module}:boom", "--n", "8")
    assert rc == 2
    assert_one_line_error(err, "raised RuntimeError: kaboom")
    assert "second line" not in err


def test_user_callable_reveal(capsys, user_module):
    rc, out, err = cli(capsys, "reveal", f"{user_module}:left_fold", "--n", "20", "--samples", "5",
                       "--format", "json")
    assert rc == 0, err
    assert SumTree.from_json(json.loads(out)["tree"]) == SumTree.sequential(20)


def test_nondeterministic_callable_exit_1(capsys, user_module):
    rc, out, err = cli(capsys, "reveal", f"{user_module}:shuffled", "--n", "16", "--samples", "5")
    assert rc == 1, (out, err)
    assert_one_line_error(err, "check failed")


# -- other formats, help, targets -------------------------------------------------------------


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz 'dot' is not installed")
def test_svg_output(capsys, tmp_path):
    svg = tmp_path / "out.svg"
    rc, _, err = cli(capsys, "reveal", "numpy.sum", "--n", "64", "--samples", "2", "--format", "svg",
                     "-o", svg)
    assert rc == 0, err
    text = svg.read_text(encoding="utf-8")
    assert "<svg" in text and "</svg>" in text


def test_dot_output(capsys):
    rc, out, err = cli(capsys, "reveal", "numpy.sum", "--n", "16", "--samples", "2", "--format", "dot")
    assert rc == 0, err
    assert "digraph" in out and out.rstrip().endswith("}")
    assert out.count("->") == 2 * 15  # 15 binary additions, two edges each


def test_text_output_file(capsys, tmp_path):
    path = tmp_path / "out.txt"
    rc, out, err = cli(capsys, "reveal", "numpy.sum", "--n", "16", "--samples", "2", "-o", path)
    assert rc == 0, err
    gc.collect()
    assert "8 lanes" in flat(path.read_text(encoding="utf-8"))


def test_text_output_file_is_closed(capsys, tmp_path):
    path = tmp_path / "out.txt"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rc = main(["reveal", "numpy.sum", "--n", "16", "--samples", "2", "-o", str(path)])
        gc.collect()
    capsys.readouterr()
    assert rc == 0
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]


@pytest.mark.parametrize("verb", ["reveal", "verify"])
def test_help_has_examples(capsys, verb):
    with pytest.raises(SystemExit) as exc:
        main([verb, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "examples:" in out
    assert f"fpscope {verb}" in out.split("examples:", 1)[1]


def test_no_verb_prints_usage_exit_2(capsys):
    rc, out, err = cli(capsys)
    assert rc == 2
    assert "usage" in (out + err).lower()


def test_targets(capsys):
    rc, out, _ = cli(capsys, "targets")
    assert rc == 0
    names = out.split()
    for name in ("numpy.sum", "numpy.dot", "numpy.cumsum", "numpy.add.reduce", "torch.matmul"):
        assert name in names
    assert "package.module:function" in out


# -- sweeps -----------------------------------------------------------------------------------


def test_sweep_offset_numpy_sum(capsys):
    rc, out, err = cli(capsys, "reveal", "numpy.sum", "--n", "430", "--dtype", "fp64",
                       "--sweep", "offset=0:64:16", "--samples", "4")
    assert rc == 0, err
    text = flat(out)
    assert "offset" in text and "tree" in text
    tokens = out.split()
    for v in (0, 16, 32, 48):
        assert str(v) in tokens
    assert "the tree and the node arithmetic do not change with offset" in text
    assert "->" not in text


def test_sweep_json(capsys):
    rc, out, err = cli(capsys, "reveal", "numpy.cumsum", "--n", "16", "--sweep", "index=0,3,15",
                       "--samples", "2", "--format", "json")
    assert rc == 0, err
    rec = json.loads(out)
    assert rec["schema"] == "fpscope.record/2"
    sw = rec["sweep"]
    assert [r["value"] for r in sw["rows"]] == [0, 3, 15]
    assert all(set(v) == {"leaves", "nodes"} for v in sw["trees"].values())  # flat
    trees = {k: SumTree.from_json(v) for k, v in sw["trees"].items()}
    by_value = {r["value"]: trees[r["tree_id"]] for r in sw["rows"]}
    assert by_value[3] == SumTree.sequential(4) and by_value[15] == SumTree.sequential(16)
    assert sw["changes"] == [[0, 3], [3, 15]]


def test_sweep_rows_torch_matmul(capsys):
    """The CLI names the rows between which the tree changes, as its table shows them (where
    depends on the CPU: tests/test_cases.py::test_c5_torch_matmul_rows_sweep)."""
    pytest.importorskip("torch")
    rc, out, err = cli(capsys, "reveal", "torch.matmul", "--shape", "1x300x300", "--sweep",
                       "rows=1,2,4", "--samples", "4")
    assert rc == 0, err
    text = flat(out)
    rows = re.findall(r"│ (\d+) +│ ([A-Z]) +│ (a\d+) +│", out)
    assert [m for m, _, _ in rows] == ["1", "2", "4"], out
    changes = [(a, b, x != y) for (a, x, p), (b, y, q) in zip(rows, rows[1:]) if (x, p) != (y, q)]
    for a, b, tree in changes:
        assert f"changes between {a} -> {b}: " + ("tree " if tree else "arithmetic: ") in text
    if not changes:
        assert "the tree and the node arithmetic do not change with rows" in text


@pytest.mark.parametrize("extra, made", [
    (["--record", "rec.json"], "rec.json"),
    (["--format", "svg", "-o", "s.svg"], "s.svg"),
], ids=["record", "svg"])
def test_sweep_does_not_silently_ignore_output_options(capsys, tmp_path, extra, made):
    args = ["reveal", "numpy.sum", "--n", "16", "--sweep", "offset=0,8", "--samples", "2"]
    args += [str(tmp_path / a) if a.endswith((".json", ".svg")) else a for a in extra]
    rc, _, _ = cli(capsys, *args)
    assert rc == 2 or (rc == 0 and (tmp_path / made).exists())


# -- the real process -------------------------------------------------------------------------


def test_subprocess_success_and_console_script(tmp_path):
    r = cli_subprocess("reveal", "numpy.sum", "--n", "64", "--samples", "3", "--format", "json")
    assert r.returncode == 0, r.stderr
    assert SumTree.from_json(json.loads(r.stdout)["tree"]) == numpy_pairwise_sum_tree(64)
    script = Path(sys.executable).with_name("fpscope")
    if not script.exists():
        pytest.skip("the fpscope console script is not installed next to the interpreter")
    r = subprocess.run([str(script), "targets"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "numpy.sum" in r.stdout.split()


@pytest.mark.parametrize("args, code, fragment", [
    (["reveal", "nope.sum"], 2, "unknown target"),
    (["reveal", "numpy.sum", "--n", "300", "--dtype", "bf16"], 2, "too large"),
    (["reveal", f"{USER_MODULE}:boom", "--n", "8"], 2, "kaboom"),
    (["reveal", f"{USER_MODULE}:shuffled", "--n", "16", "--samples", "3"], 1, "check failed"),
    (["verify", "not-json.json"], 2, "not valid JSON"),
], ids=["unknown-target", "bf16-too-large", "raising-callable", "nondeterministic", "bad-record"])
def test_subprocess_errors_one_line(tmp_path, user_dir, args, code, fragment):
    (tmp_path / "not-json.json").write_text("{oops")
    r = cli_subprocess(*args, cwd=tmp_path, env_extra={"PYTHONPATH": str(user_dir)})
    assert r.returncode == code, (r.stdout, r.stderr)
    assert_one_line_error(r.stderr, fragment)


# -- later fixes: each of these failed once ------------------------------------------------------


def test_sweep_bad_value_gets_an_error_row(capsys):
    """The sweep goes on past a bad value, says that value failed and exits 2 (bad input), as
    a reveal of that value alone would (it exited 0 once, with "does not change")."""
    code, out, err = cli(capsys, "reveal", "numpy.sum", "--sweep", "n=0,4", "--samples", "5")
    assert code == 2, err
    text = flat(out)
    assert "at least 1" in text and "among the 1 values revealed (1 failed)" in text


def test_sweep_of_failed_checks_exits_1_and_concludes_nothing(tmp_path, user_dir):
    r = cli_subprocess("reveal", f"{USER_MODULE}:shuffled", "--sweep", "n=16,32", "--samples",
                       "3", cwd=tmp_path, env_extra={"PYTHONPATH": str(user_dir)})
    assert r.returncode == 1, (r.stdout, r.stderr)
    text = " ".join(r.stdout.split())
    assert "no value of n was revealed" in text and "does not change" not in text


def test_verify_refuses_bad_samples_and_sweep_records(capsys, tmp_path):
    rec = tmp_path / "s.json"
    code, _, err = cli(capsys, "reveal", "numpy.sum", "--n", "16", "--sweep", "offset=0,8",
                       "--samples", "5", "--record", str(rec))
    assert code == 0 and rec.exists(), err
    code, _, err = cli(capsys, "verify", str(rec))
    assert code == 2 and "'sweep' record" in err
    code, _, err = cli(capsys, "verify", str(rec), "--samples", "0")
    assert code == 2 and "--samples" in err
    code, _, err = cli(capsys, "reveal", "numpy.sum", "--samples", "-1")
    assert code == 2 and "--samples" in err


@pytest.mark.parametrize("target, shape", [("numpy.matvec", "5x100"), ("numpy.matmul", "1x200x3")])
def test_matrix_vector_paths_reveal_and_replay(capsys, target, shape):
    # the order is checked with B = ones; product rounding of random A, B is reported apart
    code, out, err = cli(capsys, "reveal", target, "--shape", shape, "--format", "json")
    assert code == 0, err
    rec = json.loads(out)
    assert rec["validation"]["replay"]["bit_exact"]
    assert "products" in rec["validation"]["replay"]


def test_callable_returning_python_float(capsys, tmp_path):
    mod = tmp_path / "pyloop.py"
    mod.write_text("def loop(x):\n    s = 0.0\n    for v in x:\n        s += float(v)\n    return s\n")
    code, out, err = cli(capsys, "reveal", f"{mod}:loop", "--n", "24", "--format", "json")
    assert code == 0, err
    rec = json.loads(out)
    assert rec["target"]["out_dtype"] == "fp64"  # a Python float is fp64, not the input format
    assert rec["accumulator"]["format"] == "fp64" and rec["validation"]["replay"]["bit_exact"]


def test_module_callable_verifies_from_another_folder(capsys, tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    (work / "kmod_fpscope_test.py").write_text(
        "import numpy as np\ndef fold(x):\n    s = np.float32(0)\n    for v in x:\n"
        "        s = np.float32(s + v)\n    return s\n")
    monkeypatch.chdir(work)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(work))])
    code, _, err = cli(capsys, "reveal", "kmod_fpscope_test:fold", "--n", "12", "--record", "r.json")
    assert code == 0, err
    monkeypatch.chdir(tmp_path)
    sys.modules.pop("kmod_fpscope_test", None)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(work)])
    code, out, err = cli(capsys, "verify", "work/r.json")
    assert code == 0, err
    assert "bit-exact" in out


def test_too_large_n_for_a_narrow_accumulator_is_bad_input(capsys):
    code, _, err = cli(capsys, "reveal", "numpy.sum", "--n", "257", "--dtype", "bf16")
    assert code == 2
    assert_one_line_error(err, "too large")
    assert "up to about 256" in err


def test_missing_dot_is_reported_before_probing(capsys, monkeypatch, tmp_path):
    import shutil

    real = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None if name == "dot" else real(name, *a, **k))
    calls = []
    import importlib

    rv = importlib.import_module("fpscope.reveal")  # fpscope.reveal is the API function
    monkeypatch.setattr(rv, "reveal", lambda *a, **k: calls.append(1))
    code, _, err = cli(capsys, "reveal", "numpy.sum", "--n", "16", "--format", "svg", "-o", str(tmp_path / "t.svg"))
    assert code == 2 and not calls
    assert_one_line_error(err, "dot")


def test_failed_replay_keeps_the_evidence(capsys, tmp_path):
    mod = tmp_path / "kahan_fpscope.py"
    mod.write_text(
        "import numpy as np\ndef kahan(x):\n    s = np.float32(0); c = np.float32(0)\n"
        "    for v in x:\n        y = np.float32(v - c); t = np.float32(s + y)\n"
        "        c = np.float32(np.float32(t - s) - y); s = t\n    return s\n")
    rec = tmp_path / "k.json"
    code, out, err = cli(capsys, "reveal", f"{mod}:kahan", "--n", "16", "--record", str(rec))
    assert code == 1 and "check failed (replay)" in err
    assert re.search(r"\d+/\d+ outputs bit-exact, \d+ DIFFER", flat(out))
    data = json.loads(rec.read_text())
    assert data["validation"]["replay"]["bit_exact"] is False
    assert data["tree"]


def test_record_tree_is_compact_and_file_is_readable(capsys, tmp_path):
    import stat

    rec = tmp_path / "r.json"
    code, _, err = cli(capsys, "reveal", "numpy.sum", "--n", "2048", "--samples", "5", "--record", str(rec))
    assert code == 0, err
    text = rec.read_text()
    assert len(text.splitlines()) < 400  # the tree is one line, not one line per leaf
    assert json.loads(text)["tree"]
    assert rec.stat().st_mode & stat.S_IRGRP  # not mkstemp's 0600


def test_replay_of_fused_nodes_is_shown_as_not_deciding(capsys):
    """A tree with fused multi-term nodes (a tensor-core chain, emulated): the replay models
    them as exact sums, so its differences are shown with the reason, not as a failed check."""
    code, out, err = cli(capsys, "reveal", "emulate.matmul[hopper-fp16]", "--shape", "2x64x2",
                         "--samples", "20")
    assert code == 0, err
    text = flat(out)
    assert re.search(r"replay \(fp32 accumulator\): \d+/80 outputs bit-exact", text)
    assert "fused multi-term nodes; their node arithmetic is not modelled by the replay" in text
    assert "so the replay does not decide" in text


@pytest.mark.parametrize("args, want", [
    (["reveal", "numpy.dot", "--n", "abc"], "fpscope reveal: argument --n: invalid int value"),
    (["gate", "x.json", "--policy", "lenient"],
     "fpscope gate: argument --policy: invalid choice 'lenient' (choose from bitwise, "),
    (["revael"], "invalid choice 'revael'; did you mean 'reveal'?"),
    (["matrix", "--suite", "quik"], "did you mean 'quick'?"),
    (["emulate", "--a"], "fpscope emulate: argument --a: expected one argument"),
])
def test_argparse_errors_are_one_line_with_exit_2(capsys, args, want):
    with pytest.raises(SystemExit) as exc:
        main(args)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert want in err and len(err.strip().splitlines()) == 1, err
    assert "--help' shows the options" in err


@pytest.mark.parametrize("args, want", [
    (["reveal", "emulate.matmul[hoper-fp16]", "--shape", "2x64x2"],
     "emulate.matmul[hoper-fp16]: unknown preset; did you mean 'hopper-fp16'?"),
    (["reveal", "emulate.matmul", "--shape", "2x64x2"], "needs a preset in brackets"),
    (["probe", "numpy.matmull"], "unknown target 'numpy.matmull': did you mean 'numpy.matmul'?"),
])
def test_typos_in_targets_get_the_closest_name(capsys, args, want):
    code, _, err = cli(capsys, *args)
    assert code == 2 and want in err and len(err.strip().splitlines()) == 1, err
    assert len(err) < 300  # not the list of every preset
