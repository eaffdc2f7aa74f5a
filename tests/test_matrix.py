"""Tests for fpscope.matrix, fpscope.report and ``fpscope matrix``: cells and records, tree groups,
neighbour comparisons, the HTML report, the output folder rules and exit codes.

Tiny suites (numpy only, n <= 32) keep this file to a few seconds."""

from __future__ import annotations

import json
import re
import shutil

import pytest

import fpscope.matrix as matrix_mod
import fpscope.render as render_mod
from fpscope.cli import main
from fpscope.matrix import (
    Block,
    Cell,
    MatrixError,
    agreement_rows,
    available_libraries,
    check_output,
    run_matrix,
    suite_cells,
)
from fpscope.record import load_record
from fpscope.report import render_html, write_report

HAVE_DOT = shutil.which("dot") is not None

#: numpy.sum fp32 and fp16 of the same n share a tree (numpy adds fp16 in fp32 pairwise blocks);
#: numpy.dot at 1 and 2 threads too (OpenBLAS splits only long vectors).
TINY = (
    Block("sum", ("fp32", "fp16"), (8, 32)),
    Block("dot", ("fp32",), (16,), threads=(1, 2)),
    Block("matmul", ("fp32",), ((1, 16, 4), (2, 16, 4))),
)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    out = tmp_path_factory.mktemp("matrix") / "m"
    cells = suite_cells(TINY, ["numpy"])
    res = run_matrix(cells, out, suite="tiny", replay_samples=4, libraries=["numpy"],
                     notes=["torch skipped: not installed (test note)"])
    index = write_report(res, out)
    return res, out, index


# -- suites ---------------------------------------------------------------------------------------
def test_suite_cells_quick_covers_all_libraries_and_fixed_jax_conditions():
    cells = suite_cells("quick")
    libs = {c.library for c in cells}
    assert libs == {"numpy", "torch", "jax"}
    assert {c.op for c in cells} == {"sum", "dot", "matmul"}
    assert {c.dtype for c in cells} >= {"fp32", "fp16"}
    assert len(cells) == len(set(cells)) <= 60  # quick stays small
    for c in cells:
        if c.library == "jax":
            assert c.threads is None and c.layout == "C"
        else:
            assert c.threads is not None
    rows = {c.rows for c in cells if c.op == "matmul"}
    assert {1, 2} <= rows  # the C5 comparison


def test_suite_cells_full_is_larger_and_drops_sizes_a_dtype_cannot_count():
    full = suite_cells("full", ["numpy"])
    assert len(full) > 3 * len(suite_cells("quick", ["numpy"]))
    assert not any(c.dtype == "bf16" and c.n > 258 for c in full)
    assert not any(c.dtype == "fp16" and c.n > 2050 for c in full)
    assert {c.layout for c in full} == {"C", "F", "strided"}


def test_suite_cells_rejects_unknown_names():
    with pytest.raises(MatrixError, match="unknown suite 'huge'"):
        suite_cells("huge")
    with pytest.raises(MatrixError, match="unknown library 'cupy'"):
        suite_cells("quick", ["cupy"])
    with pytest.raises(MatrixError, match="matmul: size 8"):
        suite_cells([Block("matmul", ("fp32",), (8,))], ["numpy"])


def test_cell_names():
    c = Cell("matmul", "torch", "fp32", (2, 256, 16), "C", 1)
    assert c.target == "torch.matmul" and c.n == 256 and c.rows == 2
    assert c.slug(7) == "007-torch.matmul-fp32-2x256x16-C-t1"
    j = Cell("sum", "jax", "fp16", (64,))
    assert j.target == "jax.numpy.sum" and j.size_text == "n=64" and j.threads_text == "default"


def test_available_libraries_skips_with_a_note(monkeypatch):
    real = matrix_mod.importlib.import_module

    def fake(name, *a, **k):
        if name == "torch":
            raise ModuleNotFoundError("No module named 'torch'")
        if name == "jax":
            raise RuntimeError("broken install")
        return real(name, *a, **k)

    monkeypatch.setattr(matrix_mod.importlib, "import_module", fake)
    libs, notes = available_libraries()
    assert libs == ["numpy"]
    assert any(n.startswith("torch skipped: not installed") for n in notes)
    assert any("jax skipped: fails to import (RuntimeError: broken install)" in n for n in notes)
    with pytest.raises(MatrixError, match="unknown library"):
        available_libraries(["numpy", "tensorflow"])


# -- running ----------------------------------------------------------------------------------------
def test_one_record_per_cell(tiny):
    res, out, _ = tiny
    assert [c.status for c in res.cells] == ["ok"] * len(res.cells)
    files = sorted(p.name for p in (out / "cells").iterdir())
    assert len(files) == len(res.cells)
    for cr in res.cells:
        assert cr.record_file == f"cells/{cr.cell.slug(cr.index)}.json"
        rec = load_record(out / cr.record_file)
        assert rec["kind"] == "reveal"
        assert rec["target"]["name"] == cr.cell.target
        assert rec["target"]["dtype"] == cr.cell.dtype
        assert rec["summary"] == cr.summary
        assert rec["validation"]["replay"]["bit_exact"] is True
        assert "environment" in rec
    # no temporary files left behind (atomic writes)
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]


def test_identical_trees_share_an_id(tiny):
    res, _, _ = tiny
    by_tree: dict = {}
    for cr in res.cells:
        by_tree.setdefault(cr.tree, set()).add(cr.tree_id)
    assert all(len(ids) == 1 for ids in by_tree.values())  # equal trees, one id
    assert len(set(res.trees)) == len(by_tree)  # different trees, different ids
    sums = {(c.cell.dtype, c.cell.n): c.tree_id for c in res.cells if c.cell.op == "sum"}
    assert sums[("fp32", 8)] == sums[("fp16", 8)]
    assert sums[("fp32", 8)] != sums[("fp32", 32)]
    assert list(res.trees) == [chr(65 + k) for k in range(len(res.trees))]


def test_comparisons_of_neighbours(tiny):
    res, _, _ = tiny
    dims = {c["dimension"] for c in res.comparisons}
    assert {"rows", "threads", "dtype", "n"} <= dims
    for cmp in res.comparisons:
        a, b = res.cells[cmp["a"] - 1], res.cells[cmp["b"] - 1]
        if cmp["dimension"] == "n":
            assert a.cell.n != b.cell.n
            assert cmp["verdict"] in ("same family", "family changes")
            continue
        assert a.cell.n == b.cell.n
        same_tree = a.tree_id == b.tree_id
        if not same_tree:
            assert cmp["verdict"] == "different tree" and not cmp["same"]
            assert cmp["subtree"]["leaves"]
        else:
            assert cmp["verdict"] in ("identical", "same tree, different node arithmetic")
    dtype = [c for c in res.comparisons if c["dimension"] == "dtype"]
    # numpy.sum n=8: fp16 adds in fp32 in the same tree, but rounds its result to fp16: the
    # whole arithmetic differs in the output format (never "identical")
    assert any(c["verdict"] == "same tree, different node arithmetic"
               and c["parameter"]["name"] == "output format" for c in dtype)


def test_agreement_rows(tiny):
    res, _, _ = tiny
    rows = agreement_rows(res)
    dot = next(r for r in rows if r["op"] == "dot")
    assert set(dot["cells"]) == {("numpy", 1), ("numpy", 2)}
    assert dot["verdict"] in ("all agree", "numpy 1t \u2260 numpy 2t")
    summ = next(r for r in rows if r["op"] == "sum")
    assert summ["verdict"] == "one cell only"


def test_manifest(tiny):
    res, out, _ = tiny
    man = json.loads((out / "matrix.json").read_text())
    assert man["schema"] == "fpscope.record/2" and man["kind"] == "matrix"
    assert man["suite"] == "tiny" and len(man["cells"]) == len(res.cells)
    assert set(man["trees"]) == set(res.trees)
    assert man["comparisons"] and man["environment"]["packages"]["numpy"]


# -- report -----------------------------------------------------------------------------------------
def test_report_html(tiny):
    res, out, index = tiny
    assert index == out / "index.html"
    page = index.read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert "<script" not in page.lower()
    assert not re.search(r"(src|href)=\"(https?:)?//", page)  # nothing from the network
    for section in ("agreement", "cells", "changes", "trees", "environment"):
        assert f'id="{section}"' in page
    # one table row per cell, with its summary and record link
    for cr in res.cells:
        assert f'id="cell-{cr.index}"' in page
        assert f'href="{cr.record_file}"' in page
    assert "same tree as #" in page
    assert "torch skipped: not installed (test note)" in page
    assert "OpenBLAS" in page or "BLAS" in page
    if HAVE_DOT:
        assert page.count("<svg") == len(res.trees)
        assert sorted(p.name for p in (out / "trees").iterdir()) == \
            [f"{t}.svg" for t in sorted(res.trees)]
        assert "<?xml" not in page
        ids = re.findall(r'\bid="([^"]+)"', page)
        assert len(ids) == len(set(ids))  # the inlined pictures' ids do not collide


def test_report_links_pictures_beyond_the_inline_limit(tiny):
    res, out, _ = tiny
    pictures = {t: (out / "trees" / f"{t}.svg").read_bytes() for t in res.trees} if HAVE_DOT else {}
    page = render_html(res, pictures, inline_limit=0)
    assert "<svg" not in page
    if HAVE_DOT:
        assert page.count('<img src="trees/') == len(res.trees)


def test_report_without_graphviz(tiny, monkeypatch, tmp_path):
    res, _, _ = tiny

    def no_dot():
        raise render_mod.RenderError("the Graphviz 'dot' program is not installed")

    monkeypatch.setattr(render_mod, "_check_dot", no_dot)
    (tmp_path / "trees").mkdir()
    page = write_report(res, tmp_path).read_text()
    assert "<svg" not in page
    assert "no picture: the Graphviz &#x27;dot&#x27; program is not installed" in page


def test_check_output(tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x.txt").write_text("keep")
    (tmp_path / "file").write_text("")
    with pytest.raises(MatrixError, match="exists and is not empty"):
        check_output(tmp_path / "full")
    check_output(tmp_path / "full", force=True)
    with pytest.raises(MatrixError, match="is a file"):
        check_output(tmp_path / "file", force=True)
    check_output(tmp_path / "new")
    assert not (tmp_path / "new").exists()  # checking creates nothing
    with pytest.raises(MatrixError, match="folder .*missing does not exist"):
        check_output(tmp_path / "missing" / "report")


# -- command line -----------------------------------------------------------------------------------
@pytest.fixture
def numpy_quick(monkeypatch):
    """Shrink the quick suite for the CLI tests (numpy: 4 cells)."""
    monkeypatch.setitem(matrix_mod.SUITES, "quick", (Block("sum", ("fp32",), (8,)),
                                                      Block("dot", ("fp32",), (8,), threads=(1, 2)),
                                                      Block("matmul", ("fp32",), ((2, 8, 2),))))


def test_cli_matrix_writes_report_and_refuses_to_overwrite(numpy_quick, tmp_path, capsys):
    out = tmp_path / "m"
    assert main(["matrix", "--libraries", "numpy", "-o", str(out), "--quiet", "--samples", "2"]) == 0
    text = capsys.readouterr().out
    assert "4 cells (4 ok, 0 failed, 0 skipped)" in text
    assert f"report: {out / 'index.html'}" in text
    assert (out / "index.html").is_file() and (out / "matrix.json").is_file()
    assert len(list((out / "cells").glob("*.json"))) == 4
    before = (out / "index.html").read_bytes()

    assert main(["matrix", "--libraries", "numpy", "-o", str(out), "--quiet"]) == 0
    assert "4 of 4 cells kept from an earlier run" in capsys.readouterr().out  # resumed
    other = tmp_path / "other"
    other.mkdir()
    (other / "x.txt").write_text("mine")
    assert main(["matrix", "--libraries", "numpy", "-o", str(other), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "is not a matrix folder" in err and "--force" in err
    assert len(err.strip().splitlines()) == 1
    assert before  # the first report was written

    stale = out / "cells" / "999-numpy.sum-fp32-n9-C-t1.json"
    stale.write_text("{}")
    (out / "notes.txt").write_text("mine")
    assert main(["matrix", "--libraries", "numpy", "-o", str(out), "--quiet", "--force",
                 "--samples", "2", "--format", "json"]) == 0
    man = json.loads(capsys.readouterr().out)
    assert man["kind"] == "matrix" and len(man["cells"]) == 4
    assert not stale.exists()  # an earlier run's cell record is replaced
    assert (out / "notes.txt").read_text() == "mine"  # other files are left alone


@pytest.mark.parametrize("argv, message", [
    (["--libraries", "numpy,cupy"], "unknown library 'cupy'"),
    (["--libraries", ","], "--libraries"),
    (["--samples", "-1"], "--samples must be 0 or more"),
])
def test_cli_matrix_bad_input(numpy_quick, tmp_path, capsys, argv, message):
    assert main(["matrix", "-o", str(tmp_path / "m"), "--quiet", *argv]) == 2
    assert message in capsys.readouterr().err


def test_cli_matrix_output_is_a_file(numpy_quick, tmp_path, capsys):
    f = tmp_path / "report"
    f.write_text("")
    assert main(["matrix", "--libraries", "numpy", "-o", str(f), "--quiet", "--force"]) == 2
    assert "is a file" in capsys.readouterr().err


def test_cli_matrix_help_has_examples(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["matrix", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "fpscope matrix -o" in out.split("examples:", 1)[1]


def test_cli_matrix_unknown_suite(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["matrix", "--suite", "huge", "-o", str(tmp_path / "m")])
    assert exc.value.code == 2


def test_cli_matrix_failed_cell_exits_1(numpy_quick, tmp_path, capsys, monkeypatch):
    import importlib

    reveal_mod = importlib.import_module("fpscope.reveal")  # not the API function
    real = reveal_mod.reveal

    def flaky(target, **kw):
        if target.name == "numpy.dot":
            raise reveal_mod.RevealError("nondeterministic", "repeated probes differ")
        return real(target, **kw)

    monkeypatch.setattr(reveal_mod, "reveal", flaky)
    out = tmp_path / "m"
    assert main(["matrix", "--libraries", "numpy", "-o", str(out), "--quiet", "--samples", "2"]) == 1
    text = capsys.readouterr().out
    assert "failed #2 numpy.dot" in text and "2 failed" in text
    page = (out / "index.html").read_text()
    assert "nondeterministic: repeated probes differ" in page


def test_cli_matrix_refuses_a_timeout_that_is_not_positive(tmp_path, capsys):
    for bad in ("0", "-3"):
        assert main(["matrix", "--timeout", bad, "-o", str(tmp_path / "m")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "--timeout must be a positive number" in err[0]
    assert not (tmp_path / "m").exists()
