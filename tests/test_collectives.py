"""Collectives (fpscope.collectives): leaves are ranks, every buffer element is an output.

Independent expectations (NUMERICS.md section 4): Open MPI with recursive doubling forced on 4
ranks adds ((r0 + r1) + (r2 + r3)) on every element; its ring adds chains whose start rank
moves with the chunk; gloo's ring all_reduce on 4 ranks and 4096 fp32 elements uses 4 trees,
one per chunk of 1024 elements, and every element replays bit for bit. The simulated worlds
below (no processes) check the bookkeeping against trees chosen by the test.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import numpy as np
import pytest

from fpscope.collectives import CollectiveTarget
from fpscope.collectives.runs import reveal_runs
from fpscope.collectives.world import find_mpiexec
from fpscope.reveal import reveal
from fpscope.targets import TargetError, make_target
from fpscope.tree import SumTree

HAVE_TORCH = importlib.util.find_spec("torch") is not None
HAVE_MPI = importlib.util.find_spec("mpi4py") is not None and find_mpiexec() is not None
needs_torch = pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed (the test extra "
                                 "installs it)")
needs_mpi = pytest.mark.skipif(not HAVE_MPI, reason="mpi4py or mpiexec missing: pip install "
                               "'fpscope[mpi]'")
RD = {"OMPI_MCA_coll_tuned_use_dynamic_rules": "1", "OMPI_MCA_coll_tuned_allreduce_algorithm": "3"}
RING = {"OMPI_MCA_coll_tuned_use_dynamic_rules": "1",
        "OMPI_MCA_coll_tuned_allreduce_algorithm": "4"}


# -- a simulated world: the test chooses every element's tree ---------------------------------

def _eval(node, x):
    """The tree's sum of the values x (float32 rounding at every node)."""
    if isinstance(node, SumTree):
        node = node.root
    if isinstance(node, int):
        return np.float32(x[node])
    acc = _eval(node[0], x)
    for c in node[1:]:
        acc = np.float32(acc + _eval(c, x))
    return acc


class FakeWorld:
    """A stand-in for World: element e of the buffer is added along trees[chunk(e)];
    ``corrupt`` = (rank, element): that rank receives another bit pattern there."""

    def __init__(self, trees, corrupt=None):
        self.trees, self.corrupt = trees, corrupt
        self.info = {"library": "fake", "version": "0", "backend": "fake"}
        self.env = {}
        self.closed = False

    def run(self, op, buffers, dtype):
        P, E = buffers.shape
        chunk = -(-E // len(self.trees))
        out = np.array([_eval(self.trees[e // chunk], buffers[:, e].astype(np.float64))
                        for e in range(E)], dtype=buffers.dtype)
        outs = [out.copy() for _ in range(P)]
        if self.corrupt:
            r, e = self.corrupt
            outs[r][e] = np.nextafter(outs[r][e], np.float32(np.inf))
        if op == "reduce_scatter":
            return [o[r * (E // P):(r + 1) * (E // P)] for r, o in enumerate(outs)]
        return outs

    def close(self):
        self.closed = True


CHAIN_FROM = [(((0, 1), 2), 3), (((1, 2), 3), 0), (((2, 3), 0), 1), (((3, 0), 1), 2)]


def _fake(trees, elements=64, op="torch.distributed.all_reduce", **kw):
    return CollectiveTarget(op, world_size=4, elements=elements,
                            world=FakeWorld([SumTree(t) for t in trees], **kw))


def test_simulated_ring_gives_one_class_per_chunk():
    t = _fake(CHAIN_FROM, elements=64)
    res = reveal(t, replay_samples=8)
    assert len(res.classes) == 4
    for k, c in enumerate(res.classes):
        assert c["tree"] == SumTree(CHAIN_FROM[k])
        want = np.zeros((64, 1), dtype=bool)
        want[16 * k:16 * (k + 1)] = True
        assert np.array_equal(c["mask"], want)
    assert res.replay["bit_exact"]
    assert res.stats.checks["rank_identity"].startswith("ok:")


def test_simulated_single_tree_and_reduce_scatter():
    rd = ((0, 1), (2, 3))
    res = reveal(_fake([rd], elements=32, op="torch.distributed.reduce_scatter"),
                 replay_samples=8)
    assert res.classes is None and res.tree == SumTree(rd)
    assert res.stats.checks["rank_identity"].startswith("not applicable")


def test_ranks_that_receive_other_bits_are_reported():
    t = _fake([((0, 1), (2, 3))], elements=16, corrupt=(2, 5))
    res = reveal(t, replay_samples=4)
    said = res.stats.checks["rank_identity"]
    assert said.startswith("no: ranks 2 ") and "element 5" in said


def test_runs_count_outcomes_of_fresh_worlds():
    rng = np.random.default_rng(3)
    choices = [[((0, 1), (2, 3))], [(((0, 1), 2), 3)]]
    picks = []

    def build():
        k = int(rng.integers(2))
        picks.append(k)
        return _fake(choices[k], elements=8)

    out = reveal_runs(build, 6, replay_samples=4)
    counts = sorted(o["count"] for o in out["outcomes"])
    assert sum(counts) == 6 and counts == sorted([picks.count(0), picks.count(1)])
    assert out["deterministic"] == (len(set(picks)) == 1)


@pytest.mark.parametrize("kw, match", [
    (dict(world_size=1), "world-size must be 2"),
    (dict(elements=0), "elements per rank"),
    (dict(dtype="fp8_e4m3fn"), "dtype must be"),
    (dict(backend="mpi"), "backend must be gloo or nccl"),
    (dict(elements=10, name="torch.distributed.reduce_scatter"), "multiple of 4"),
    (dict(element=99, elements=16), "--position 99: elements are 0..15"),
])
def test_bad_options_are_refused_before_any_rank_starts(kw, match):
    name = kw.pop("name", "torch.distributed.all_reduce")
    kw.setdefault("world_size", 4)
    with pytest.raises(TargetError, match=match):
        CollectiveTarget(name, world=FakeWorld([(0, 1)]), **kw)


def test_make_target_refuses_options_collectives_do_not_take():
    with pytest.raises(TargetError, match="not --layout"):
        make_target("torch.distributed.all_reduce", layout="F")
    with pytest.raises(TargetError, match="--position takes one element index E"):
        make_target("torch.distributed.all_reduce", output=(1, 2))
    with pytest.raises(TargetError, match="MPI has no standard fp16"):
        make_target("MPI.Allreduce", dtype="fp16")
    with pytest.raises(TargetError, match="did you mean"):
        make_target("torch.distributed.allreduce")
    with pytest.raises(TargetError, match="apply to collectives"):
        make_target("numpy.sum", n=8, world_size=2)


# -- gloo, started by fpscope ------------------------------------------------------------------

@needs_torch
def test_gloo_all_reduce_4_ranks_4096_elements_one_tree_per_chunk():
    """Measured here (NUMERICS.md section 4): 4 trees, one per chunk of 1024 elements; each a
    chain whose first two ranks move with the chunk; every element replays bit for bit."""
    with make_target("torch.distributed.all_reduce", world_size=4, n=4096) as t:
        res = reveal(t, replay_samples=16)
        assert t.communication["backend"] == "gloo"
    assert len(res.classes) == 4
    starts = set()
    for k, c in enumerate(res.classes):
        assert c["mask"][1024 * k:1024 * (k + 1)].all() and c["mask"].sum() == 1024
        chain = _chain_of(c["tree"])
        assert chain is not None, f"chunk {k}: {c['tree']} is not a chain"
        starts.add(frozenset(chain[:2]))
    assert len(starts) == 4  # the start moves with the chunk
    assert res.replay["bit_exact"] and res.replay["classes"] == 4
    assert res.stats.checks["rank_identity"].startswith("ok:")


def _chain_of(tree: SumTree):
    from fpscope.rank_summary import _chain

    return _chain(tree.root)


@needs_torch
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_gloo_narrow_dtypes_round_at_every_hop(dtype):
    with make_target("torch.distributed.all_reduce", world_size=3, n=96, dtype=dtype) as t:
        res = reveal(t, replay_samples=16)
    assert res.replay["bit_exact"]
    for c in res.classes or [{"arithmetic": res.arithmetic}]:
        assert c["arithmetic"].describe() == f"every node rounds to {dtype}"


@needs_torch
def test_gloo_reduce_and_reduce_scatter():
    for name in ("torch.distributed.reduce", "torch.distributed.reduce_scatter"):
        with make_target(name, world_size=2, n=64) as t:
            res = reveal(t, replay_samples=8)
        assert res.tree == SumTree((0, 1)) and res.replay["bit_exact"], name


@needs_torch
def test_cli_reveal_record_verify_and_one_element(tmp_path):
    rec = tmp_path / "ar.json"
    out = subprocess.run([sys.executable, "-m", "fpscope", "reveal", "torch.distributed.all_reduce",
                          "--world-size", "4", "--n", "256", "--samples", "8", "--record",
                          str(rec)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "world_size=4 (leaves = ranks)  elements=256" in text
    assert "element classes (256 elements" in text and "e = 0..63" in text
    assert "every rank received identical bits" in text
    r = json.loads(rec.read_text())
    assert r["target"]["world_size"] == 4 and r["target"]["communication"]["backend"] == "gloo"
    assert len(r["classes"]) == 4
    v = subprocess.run([sys.executable, "-m", "fpscope", "verify", str(rec), "--samples", "20"],
                       capture_output=True, text=True, timeout=300)
    assert v.returncode == 0, v.stdout + v.stderr
    assert "ranks: ok: every rank received identical bits" in v.stdout
    # one element alone: its tree is its class's tree
    e = 200
    cls = next(c for c in r["classes"] if _holds(c, e, 256))
    one = subprocess.run([sys.executable, "-m", "fpscope", "reveal", "torch.distributed.all_reduce",
                          "--world-size", "4", "--n", "256", "--position", str(e), "--samples",
                          "4", "--format", "json"], capture_output=True, text=True, timeout=300)
    assert one.returncode == 0, one.stderr
    assert SumTree.from_json(json.loads(one.stdout)["tree"]) == SumTree.from_json(cls["tree"])


def _holds(cls: dict, e: int, elements: int) -> bool:
    from fpscope.reveal.classes import positions_from_blocks

    return bool(positions_from_blocks(cls["outputs"], (elements, 1))[e, 0])


@needs_torch
def test_python_api_reveals_a_collective():
    import fpscope

    found = fpscope.reveal("torch.distributed.all_reduce", world_size=2, n=16, samples=4)
    assert found.tree == SumTree((0, 1))
    assert found.record["target"]["world_size"] == 2
    assert found.summary.startswith("2 ranks:")


def test_cli_bad_collective_input_is_one_line():
    for args in (["--world-size", "1"], ["--dtype", "fp8_e4m3fn"], ["--layout", "F"],
                 ["--runs", "0"]):
        out = subprocess.run([sys.executable, "-m", "fpscope", "reveal",
                              "torch.distributed.all_reduce", *args],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 2, (args, out.stderr)
        assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr


# -- Open MPI, started through mpiexec ----------------------------------------------------------

@needs_mpi
def test_open_mpi_recursive_doubling_adds_pairs_of_pairs():
    with make_target("mpi4py.MPI.Comm.Allreduce", world_size=4, n=1024, env=RD) as t:
        res = reveal(t, replay_samples=16)
        assert t.communication["algorithm_env"] == dict(sorted(RD.items()))
        assert t.communication["mpi_library"].startswith(("Open MPI", "MPICH"))
    assert res.classes is None
    assert res.tree == SumTree(((0, 1), (2, 3)))
    assert res.replay["bit_exact"]


@needs_mpi
def test_open_mpi_ring_chains_start_where_the_chunk_does():
    with make_target("mpi4py.MPI.Comm.Allreduce", world_size=4, n=1024, env=RING) as t:
        res = reveal(t, replay_samples=16)
    assert len(res.classes) == 4
    firsts = []
    for k, c in enumerate(res.classes):
        assert c["mask"][256 * k:256 * (k + 1)].all()
        chain = _chain_of(c["tree"])
        assert chain is not None
        firsts.append(frozenset(chain[:2]))
    assert len(set(firsts)) == 4
    assert res.replay["bit_exact"]


@needs_mpi
def test_open_mpi_sweep_over_the_algorithm_and_world_size():
    out = subprocess.run([sys.executable, "-m", "fpscope", "reveal", "MPI.Allreduce", "--n", "64",
                          "--samples", "4", "--env", "OMPI_MCA_coll_tuned_use_dynamic_rules=1",
                          "--sweep", "env:OMPI_MCA_coll_tuned_allreduce_algorithm=3,4"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "(r0 + r1) + (r2 + r3)" in out.stdout
    assert "changes between 3 -> 4" in out.stdout
    assert "(4 ranges)" in out.stdout  # the ring's four chunk trees, in element order
    assert "trees by element: A (every element) -> B,C,D,E (4 ranges)" in out.stdout
    assert "a1: every node rounds to fp32" in out.stdout and "a2:" not in out.stdout  # one
    out = subprocess.run([sys.executable, "-m", "fpscope", "reveal", "MPI.Allreduce", "--n", "64",
                          "--samples", "4", "--sweep", "world_size=2,3", "--format", "json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)["sweep"]["rows"]
    assert [r["value"] for r in rows] == [2, 3] and all(r["tree_id"] for r in rows)


@needs_mpi
def test_runs_of_a_deterministic_collective_agree():
    out = subprocess.run([sys.executable, "-m", "fpscope", "reveal", "MPI.Allreduce",
                          "--world-size", "2", "--n", "32", "--samples", "4", "--runs", "2"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "outcome 1: 2 of 2 runs" in out.stdout and "the same outcome every run" in out.stdout


@pytest.mark.gpu
@pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed")
def test_nccl_all_reduce_on_two_gpus():
    """NCCL needs one GPU per rank: untested where fewer than two GPUs exist."""
    import torch

    if torch.cuda.device_count() < 2:
        pytest.skip("NCCL needs two or more CUDA GPUs; this machine has "
                    f"{torch.cuda.device_count()}")
    with make_target("torch.distributed.all_reduce", world_size=2, n=4096, backend="nccl",
                     device="cuda") as t:
        res = reveal(t, replay_samples=16)
    assert res.replay["bit_exact"]


@needs_mpi
def test_eight_ranks_connect_at_once():
    """Every rank connects back when the library's start-up ends, all at the same moment: the
    listener must queue them all (a backlog of 1 lost 2 of 8 gloo ranks, which then hung)."""
    with make_target("MPI.Allreduce", world_size=8, n=64) as t:
        res = reveal(t, replay_samples=4)
    assert res.tree.n == 8 and res.replay["bit_exact"]
