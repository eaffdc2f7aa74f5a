"""Collectives in ``fpscope matrix`` (cells, records, the report's Collectives section) and in
``fpscope gate`` (collective baselines: pass unchanged, fail on another algorithm).

Independent expectations (NUMERICS.md section 4): a sum over 2 ranks has the one tree r0 + r1 on
every element; Open MPI's ring all_reduce (``OMPI_MCA_coll_tuned_allreduce_algorithm=4``) on 4
ranks and 64 elements adds a chain per chunk of 16 elements (4 element classes), its recursive
doubling (algorithm 3) adds (r0 + r1) + (r2 + r3) on every element, so a recursive-doubling
baseline gated against ring must fail. Real worlds where the backend is installed (gloo needs
torch; mpi needs mpi4py and mpiexec); a simulated world (no processes) for the rank-identity
verdict. About 50 s on two shared cores, most of it starting rank processes.
"""

from __future__ import annotations

import importlib
import importlib.util
import json

import numpy as np
import pytest

import fpscope.collectives.target as coll_target
import fpscope.matrix_collectives as mc
from fpscope.cli import main
from fpscope.collectives import CollectiveTarget
from fpscope.collectives.world import find_mpiexec
from fpscope.gate import gate, reveal_record
from fpscope.matrix import (
    Block,
    MatrixError,
    agreement_rows,
    columns,
    run_matrix,
    suite_cells,
)
from fpscope.matrix_collectives import CollectiveBlock, CollectiveCell, available
from fpscope.record import load_record
from fpscope.report import write_report
from fpscope.report_collectives import text_lines
from fpscope.tree import SumTree

HAVE_TORCH = importlib.util.find_spec("torch") is not None
HAVE_MPI = importlib.util.find_spec("mpi4py") is not None and find_mpiexec() is not None
needs_torch = pytest.mark.skipif(not HAVE_TORCH, reason="gloo needs torch (the test extra "
                                 "installs it)")
needs_mpi = pytest.mark.skipif(not HAVE_MPI, reason="mpi4py or mpiexec missing: pip install "
                               "'fpscope[mpi]'")
RD = {"OMPI_MCA_coll_tuned_use_dynamic_rules": "1", "OMPI_MCA_coll_tuned_allreduce_algorithm": "3"}
RING = {"OMPI_MCA_coll_tuned_use_dynamic_rules": "1",
        "OMPI_MCA_coll_tuned_allreduce_algorithm": "4"}

SUITE = (
    Block("sum", ("fp32",), (8,)),
    CollectiveBlock("all_reduce", ("fp32",), (64,), world_sizes=(2,)),
    CollectiveBlock("all_reduce", ("fp32",), (64,), world_sizes=(4,), backends=("mpi",)),
)


# -- cells (no processes) ------------------------------------------------------------------------
def test_collective_blocks_make_cells_with_world_size_as_a_condition():
    block = CollectiveBlock("all_reduce", ("fp32", "fp16"), (64, 1024), world_sizes=(2, 4),
                            backends=("gloo", "mpi"))
    cells = suite_cells((block,), ["gloo", "mpi"])
    # gloo: 2 dtypes x 2 sizes x 2 world sizes; mpi has no fp16: 1 x 2 x 2
    assert len(cells) == 8 + 4 == len(set(cells))
    assert {c.world_size for c in cells} == {2, 4}
    assert not any(c.library == "mpi" and c.dtype == "fp16" for c in cells)
    c = CollectiveCell("all_reduce", "mpi", "fp32", (1024,), 4)
    assert c in cells
    assert (c.target, c.n, c.elements) == ("mpi4py.MPI.Comm.Allreduce", 4, 1024)
    assert c.size_text == "4 ranks x 1024"
    assert c.slug(3) == "003-mpi4py.MPI.Comm.Allreduce-fp32-p4-e1024"
    assert c.to_json()["world_size"] == 4 and c.to_json()["elements"] == 1024
    # only the backends named; the default libraries (numpy, torch, jax) name none
    assert {x.library for x in suite_cells((block,), ["gloo"])} == {"gloo"}
    assert suite_cells((block,)) == []
    # reduce_scatter needs E to split into P chunks
    rs = suite_cells((CollectiveBlock("reduce_scatter", ("fp32",), (6,), world_sizes=(2, 4)),),
                     ["gloo"])
    assert [(x.target, x.world_size) for x in rs] == [("torch.distributed.reduce_scatter", 2)]


def test_collective_blocks_refuse_bad_conditions():
    with pytest.raises(MatrixError, match="unknown backend 'nccl2'"):
        suite_cells((CollectiveBlock("all_reduce", ("fp32",), (8,), backends=("nccl2",)),),
                    ["gloo"])
    with pytest.raises(MatrixError, match="unknown collective 'all_gather'"):
        suite_cells((CollectiveBlock("all_gather", ("fp32",), (8,)),), ["gloo"])
    with pytest.raises(MatrixError, match="world sizes must be integers of 2 or more"):
        suite_cells((CollectiveBlock("all_reduce", ("fp32",), (8,), world_sizes=(1,)),),
                    ["gloo"])
    with pytest.raises(MatrixError, match="unknown library 'ucc'"):
        suite_cells(SUITE, ["numpy", "ucc"])


def test_builtin_suites_hold_a_small_collectives_block():
    quick = [c for c in suite_cells("quick", ["numpy", "gloo", "mpi"])
             if isinstance(c, CollectiveCell)]
    assert len(quick) == 1 and (quick[0].world_size, quick[0].elements) == (2, 1024)
    full = {(c.library, c.world_size, c.elements, c.dtype)
            for c in suite_cells("full", ["gloo", "mpi"])}
    assert full == {("gloo", 2, 4096, "fp32"), ("gloo", 4, 4096, "fp32"),
                    ("mpi", 4, 4096, "fp32")}


def test_available_skips_missing_backends_with_a_note(monkeypatch):
    real_spec, real_import = importlib.util.find_spec, mc.importlib.import_module

    def no_mpi4py(name, *a, **k):
        return None if name == "mpi4py" else real_spec(name, *a, **k)

    def no_torch(name, *a, **k):
        if name.startswith("torch"):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return real_import(name, *a, **k)

    monkeypatch.setattr(importlib.util, "find_spec", no_mpi4py)
    monkeypatch.setattr(mc.importlib, "import_module", no_torch)
    libs, notes = available(["numpy", "gloo", "mpi"])
    assert libs == ["numpy"]
    assert any(n.startswith("gloo skipped: torch not installed") for n in notes)
    assert any(n.startswith("mpi skipped: mpi4py not installed") for n in notes)
    with pytest.raises(MatrixError, match="unknown library 'ucc'"):
        available(["ucc"])


# -- a matrix with collective cells, and its report --------------------------------------------
@pytest.fixture(scope="module")
def coll_matrix(tmp_path_factory):
    libs = ["numpy"] + (["gloo"] if HAVE_TORCH else []) + (["mpi"] if HAVE_MPI else [])
    if len(libs) == 1:
        pytest.skip("neither gloo (torch) nor mpi (mpi4py + mpiexec) is installed")
    out = tmp_path_factory.mktemp("collmatrix") / "m"
    with pytest.MonkeyPatch.context() as mp:
        for k, v in RING.items():  # the mpi cell's ranks inherit it: ring, a chain per chunk
            mp.setenv(k, v)
        res = run_matrix(suite_cells(SUITE, libs), out, suite="coll", replay_samples=4,
                         libraries=libs)
    write_report(res, out)
    return res, out, (out / "index.html").read_text(encoding="utf-8")


def _cell(res, library):
    found = [cr for cr in res.cells if cr.cell.library == library]
    assert len(found) == 1
    return found[0]


def test_collective_cells_are_revealed_and_recorded(coll_matrix):
    res, out, _ = coll_matrix
    assert [cr.status for cr in res.cells] == ["ok"] * len(res.cells)
    manifest = json.loads((out / "matrix.json").read_text())
    for cr in res.cells[1:]:
        rec = load_record(out / cr.record_file)
        assert rec["target"]["world_size"] == cr.cell.world_size
        assert rec["target"]["n"] == 64
        assert rec["probe"]["checks"]["rank_identity"].startswith("ok:")
        assert rec["matrix"]["library"] == cr.cell.library
        entry = manifest["cells"][cr.index - 1]
        assert (entry["world_size"], entry["elements"]) == (cr.cell.world_size, 64)
    # collectives stay out of the library agreement table and the comparisons
    assert columns(res) == [("numpy", 1)]
    assert [r["op"] for r in agreement_rows(res)] == ["sum"]
    assert res.comparisons == []


@needs_torch
def test_gloo_cell_two_ranks_one_tree(coll_matrix):
    res, _, _ = coll_matrix
    cr = _cell(res, "gloo")
    assert cr.tree == SumTree((0, 1)) and "classes" not in cr.record
    assert cr.record["target"]["communication"]["backend"] == "gloo"


@needs_mpi
def test_mpi_ring_cell_has_one_class_per_chunk(coll_matrix):
    res, _, _ = coll_matrix
    rec = _cell(res, "mpi").record
    algo = rec["target"]["communication"]["algorithm_env"]
    assert algo["OMPI_MCA_coll_tuned_allreduce_algorithm"] == "4"
    classes = rec["classes"]
    assert [c["count"] for c in classes] == [16] * 4
    assert [c["outputs"][0]["rows"]["ranges"] for c in classes] == \
        [[[0, 15]], [[16, 31]], [[32, 47]], [[48, 63]]]
    assert len({json.dumps(c["tree"]) for c in classes}) == 4


def test_report_has_a_collectives_section(coll_matrix):
    res, _, page = coll_matrix
    assert '<a href="#collectives">collectives</a>' in page
    section = page[page.index('<section id="collectives">'):]
    section = section[:section.index("</section>")]
    for cr in res.cells[1:]:
        rec = cr.record
        comm = rec["target"]["communication"]
        row = section[section.index(f'<tr id="coll-{cr.index}">'):]
        row = row[:row.index("</tr>")]
        assert f'<td class="num">{cr.cell.world_size}</td><td class="num">64</td>' in row
        assert f"{comm['library']} {comm['version']}" in row
        assert 'pill ok">ok</span>' in row  # rank identity
        assert f'href="#coll-{cr.index}">Collectives</a>' in page  # from the cells table
        if cr.cell.library == "mpi":
            assert "4 element classes" in row
            for span in ("e = 0..15", "e = 16..31", "e = 32..47", "e = 48..63"):
                assert span in row
            assert "OMPI_MCA_coll_tuned_allreduce_algorithm=4" in row
            assert rec["classes"][1]["summary"] in row
        else:
            assert "1 element class" in row and "e = 0..63" in row
            assert rec["summary"] in row
    lines = text_lines(res)
    assert len(lines) == len(res.cells) - 1
    assert all("rank identity: ok" in line for line in lines)


def test_report_without_collectives_has_no_section(tmp_path):
    res = run_matrix(suite_cells((Block("sum", ("fp32",), (8,)),), ["numpy"]), tmp_path / "m",
                     replay_samples=2, libraries=["numpy"])
    page = write_report(res, tmp_path / "m").read_text(encoding="utf-8")
    assert 'id="collectives"' not in page and "#collectives" not in page


@needs_mpi
def test_cli_quick_suite_on_mpi_alone(tmp_path, capsys):
    out = tmp_path / "q"
    assert main(["matrix", "--libraries", "mpi", "-o", str(out), "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "collective #1 mpi4py.MPI.Comm.Allreduce fp32 2 ranks x 1024" in text
    assert "1 element class; rank identity: ok" in text
    assert 'id="collectives"' in (out / "index.html").read_text(encoding="utf-8")


# -- gate ------------------------------------------------------------------------------------------
@needs_torch
def test_gate_passes_an_unchanged_gloo_record(tmp_path, capsys):
    base = tmp_path / "gloo.json"
    assert main(["reveal", "torch.distributed.all_reduce", "--world-size", "2", "--n", "256",
                 "--record", str(base)]) == 0
    capsys.readouterr()
    assert main(["gate", str(base), "--samples", "16"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("gate PASSED (policy bitwise): identical; 64 generated inputs")
    assert "algorithm variables differ" not in text


@needs_mpi
def test_gate_fails_when_the_mpi_algorithm_changes(tmp_path, capsys, monkeypatch):
    base = tmp_path / "rd.json"
    for k, v in RD.items():
        monkeypatch.setenv(k, v)
    assert main(["reveal", "mpi4py.MPI.Comm.Allreduce", "--world-size", "4", "--n", "256",
                 "--record", str(base)]) == 0
    rec = load_record(base)
    assert rec["tree"] == SumTree(((0, 1), (2, 3))).to_json()
    assert rec["target"]["communication"]["algorithm_env"] == RD
    for k in RD:  # the gate must restore the baseline's variables itself
        monkeypatch.delenv(k)
    capsys.readouterr()
    rc = main(["gate", str(base), "--samples", "16", "--format", "json",
               "--env", "OMPI_MCA_coll_tuned_allreduce_algorithm=4"])
    verdict = json.loads(capsys.readouterr().out)
    assert rc == 1 and verdict["verdict"] == "fail"
    assert verdict["reason"].startswith("different tree")
    assert verdict["reason"].endswith("the ranks' algorithm variables differ from the "
                                      "baseline's: OMPI_MCA_coll_tuned_allreduce_algorithm=3 -> 4")


class _FakeWorld:
    """Ranks without processes: every element is added as ((r0 + r1) + (r2 + r3)) in fp32;
    ``corrupt``: rank 2 receives the next float above the sum at element 5."""

    def __init__(self, corrupt: bool):
        self.corrupt = corrupt
        self.info = {"library": "fake", "version": "0", "backend": "gloo"}
        self.env = {}

    def run(self, op, buffers, dtype):
        b = buffers.astype(np.float32)
        out = ((b[0] + b[1]) + (b[2] + b[3])).astype(buffers.dtype)
        outs = [out.copy() for _ in range(len(buffers))]
        if self.corrupt:
            outs[2][5] = np.nextafter(outs[2][5], np.float32(np.inf))
        return outs

    def close(self):
        pass


def test_gate_fails_when_live_ranks_receive_different_bits(monkeypatch):
    base_target = CollectiveTarget("torch.distributed.all_reduce", world_size=4, elements=16,
                                   world=_FakeWorld(corrupt=False))
    rec, _, _ = reveal_record(base_target, samples=8)
    for corrupt, passed in ((False, True), (True, False)):
        monkeypatch.setattr(coll_target, "World",
                            lambda *a, corrupt=corrupt, **k: _FakeWorld(corrupt))
        res = gate(rec, samples=8)
        assert res.passed is passed
    assert res.reason == ("identical; rank 0's bits are the baseline's, but the live ranks did "
                          "not all receive identical bits")
    assert any(n.startswith("note: rank identity of the live op: no: ranks 2 ")
               for n in res.notes)
