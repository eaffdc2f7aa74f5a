"""Candidate trees (fpscope.reveal.candidates): the families are the trees the test oracles in
families.py build, their node tables are those trees' nodes, a candidate is reported only when
every node is proven, and the tree found is FPRev's."""

import json

import numpy as np
import pytest
from families import numpy_pairwise_sum_tree, pairwise_split, random_tree, seq_fold

import fpscope
from fpscope.reveal import candidates as cand
from fpscope.reveal import reveal
from fpscope.reveal.checks import _lca_nodes, leaf_ranges
from fpscope.targets import make_target
from fpscope.targets.simulated import SimulatedSum
from fpscope.tree import SumTree

SIZES = list(range(1, 140)) + [255, 256, 257, 511, 1000, 1023, 1024, 1025, 3000]

ORACLES = {
    "numpy": (cand.BUILT_IN[0], numpy_pairwise_sum_tree),
    "sequential": (cand.BUILT_IN[1], lambda n: SumTree(seq_fold(list(range(n))))),
    "halving": (cand.BUILT_IN[2], lambda n: SumTree(pairwise_split(list(range(n))))),
}


@pytest.mark.parametrize("family", ORACLES)
def test_family_trees_are_the_oracles_trees_in_canonical_form(family):
    c, oracle = ORACLES[family]
    for n in SIZES:
        want = oracle(n)
        assert SumTree(c.build(n)) == want, n
        assert SumTree.from_canonical(c.build(n), n) == want, n  # already canonical


@pytest.mark.parametrize("family", ORACLES)
def test_node_tables_name_every_node_once_with_its_size(family):
    c, oracle = ORACLES[family]
    for n in [k for k in SIZES if 2 <= k <= 1100]:
        p, w, size = c.nodes(n)
        assert len(p) == len(w) == len(size) == n - 1, n
        tree = oracle(n)
        order, lo, hi = leaf_ranges(tree)
        node, got = _lca_nodes(order, lo, hi, np.stack([p, w], axis=1))
        assert np.array_equal(got, size), n
        assert len(np.unique(node)) == n - 1, n  # every internal node, once


@pytest.mark.parametrize("family", ORACLES)
def test_leaf_ranges_from_the_order_and_node_table_are_the_walks(family):
    from fpscope.reveal.checks import _leaf_ranges

    c, oracle = ORACLES[family]
    for n in [k for k in SIZES if k >= 2]:
        order, lo, hi = cand.leaf_ranges_of(c, n, c.nodes(n))
        w_order, w_lo, w_hi = _leaf_ranges(oracle(n))
        assert order == w_order, n
        assert sorted(zip(lo.tolist(), hi.tolist())) == sorted(zip(w_lo.tolist(), w_hi.tolist())), n


def _ops(n, rng):
    yield numpy_pairwise_sum_tree(n), cand.BUILT_IN[0].name
    yield SumTree(seq_fold(list(range(n)))), cand.BUILT_IN[1].name
    yield SumTree(pairwise_split(list(range(n)))), cand.BUILT_IN[2].name
    yield random_tree(n, rng), None


@pytest.mark.parametrize("n", [64, 200, 1000])
def test_the_tree_found_is_fprevs_and_a_candidate_is_named_only_when_it_is_that_tree(n):
    rng = np.random.default_rng(n)
    for tree, name in _ops(n, rng):
        res = reveal(SimulatedSum(tree), replay_samples=4)
        plain = reveal(SimulatedSum(tree), replay_samples=0, candidates=None)
        assert res.tree == plain.tree == tree
        assert "candidate" not in plain.stats.checks
        if name is None:
            assert "candidate" not in res.stats.checks
        else:
            assert res.stats.checks["candidate"].startswith(name)
            assert f"all {n - 1} nodes proven" in res.stats.checks["candidate"]


def _swap_lanes(n: int) -> SumTree:
    """numpy's pairwise tree for n (<= 128 per block) with the first block's lanes combined
    ((l0+l2)+(l1+l3)) instead of ((l0+l1)+(l2+l3)): two nodes differ."""
    def block(a, m):
        t = cand._numpy_block(a, m)
        if a != 0:
            return t
        (l01, l23), hi = t
        (l0, l1), (l2, l3) = l01, l23
        return ((l0, l2), (l1, l3)), hi

    return SumTree(cand._split_tree(0, n, cand._numpy_split, 128, block))


def test_a_tree_two_nodes_away_is_not_proven_even_when_the_screen_misses_them(monkeypatch):
    n = 1024
    op = _swap_lanes(n)
    assert op != numpy_pairwise_sum_tree(n)
    monkeypatch.setattr(cand, "SCREEN_NODES", 1)  # the full proof must find the difference
    res = reveal(SimulatedSum(op), replay_samples=4)
    assert res.tree == op
    assert "candidate" not in res.stats.checks


def test_a_multiway_node_is_not_proven_by_its_binary_refinement():
    n = 12
    op = SumTree((((0, 1, 2), 3),) + tuple(range(4, 12)))  # a fused 3-term node, then more
    seq = SumTree(seq_fold(list(range(n))))
    res = reveal(SimulatedSum(op, fused_frac_bits=24), replay_samples=4, candidates=[seq])
    assert res.tree == op
    assert "candidate" not in res.stats.checks


def test_given_trees_are_proven_first_and_checked():
    rng = np.random.default_rng(3)
    n = 300
    tree = random_tree(n, rng)
    other = random_tree(n, rng)
    res = reveal(SimulatedSum(tree), replay_samples=0, candidates=[other, tree])
    assert res.tree == tree and res.stats.checks["candidate"].startswith("candidates[1]")
    assert res.algorithm == "candidate"
    assert res.stats.checks["candidates_rejected"].startswith("candidates[0]: leaves x")
    res = reveal(SimulatedSum(tree), replay_samples=0, candidates=tree)  # one tree, no list
    assert res.stats.checks["candidate"].startswith("candidates[0]")
    res = reveal(SimulatedSum(numpy_pairwise_sum_tree(n)), replay_samples=0, candidates=[])
    assert res.stats.checks["candidate"].startswith("numpy's pairwise")  # []: the built-ins
    res = reveal(SimulatedSum(tree), replay_samples=0, candidates=None)
    assert res.algorithm == "fprev" and "candidate" not in res.stats.checks
    with pytest.raises(ValueError, match="algorithm 'basic' takes none"):
        reveal(SimulatedSum(SumTree.sequential(8)), algorithm="basic",
               candidates=[SumTree.sequential(8)])
    with pytest.raises(ValueError, match=r"candidates\[0\] has 10 leaves, the op 300"):
        reveal(SimulatedSum(tree), candidates=[SumTree.sequential(10)])
    with pytest.raises(ValueError, match="must be binary"):
        reveal(SimulatedSum(tree), candidates=[random_tree(n, rng, max_fan_in=4)])
    with pytest.raises(ValueError, match="candidates must be"):
        reveal(SimulatedSum(tree), candidates="numpy")
    with pytest.raises(ValueError, match="candidates must be"):
        reveal(SimulatedSum(tree), candidates=3)
    with pytest.raises(ValueError, match="hold SumTree or Candidate"):
        reveal(SimulatedSum(tree), candidates=[[0, 1]])


@pytest.mark.parametrize("kw", [dict(n=16384), dict(n=5000, layout="strided"),
                                dict(n=777, offset=1), dict(n=1000, dtype="fp16")])
def test_numpy_sum_is_proven_and_equals_fprevs_tree(kw):
    t = make_target("numpy.sum", **kw)
    try:
        res = reveal(t, replay_samples=8)
        plain = reveal(t, replay_samples=0, candidates=None)
    finally:
        t.close()
    assert res.tree == plain.tree == numpy_pairwise_sum_tree(kw["n"])
    assert res.stats.checks["candidate"].startswith("numpy's pairwise summation")
    assert res.replay["bit_exact"]


def test_api_record_names_the_candidate_and_none_turns_them_off():
    rec = fpscope.reveal("numpy.sum", n=1000, samples=0, environment=False).record
    assert rec["probe"]["checks"]["candidate"].startswith("numpy's pairwise summation")
    rec = fpscope.reveal("numpy.sum", n=1000, samples=0, environment=False,
                         candidates=None).record
    assert "candidate" not in rec["probe"]["checks"]


def _flat(text: str) -> str:
    """The terminal text with its line wraps undone."""
    return " ".join(text.split())


def test_cli_candidate_record_no_candidates_and_bad_input(tmp_path, capsys):
    from fpscope.cli import main

    rec = tmp_path / "r.json"
    assert main(["reveal", "numpy.sum", "--n", "300", "--samples", "4", "--record",
                 str(rec)]) == 0
    out = capsys.readouterr().out
    assert "tree proven as a candidate: numpy's pairwise summation" in out
    assert main(["reveal", "numpy.sum", "--n", "300", "--samples", "4", "--candidate",
                 str(rec)]) == 0
    assert f"tree proven as a candidate: the tree of {rec}: all 299 nodes proven" in \
        _flat(capsys.readouterr().out)
    # a tree that does not hold, and an op that takes no candidates: named, FPRev runs
    seq = tmp_path / "seq.json"
    seq.write_text(json.dumps({"tree": SumTree.sequential(300).to_json()}))
    assert main(["reveal", "numpy.sum", "--n", "300", "--samples", "4", "--candidate",
                 str(seq)]) == 0
    out = _flat(capsys.readouterr().out)
    assert f"note: candidate not used: the tree of {seq}: leaves x" in out
    assert "tree proven as a candidate: numpy's pairwise" in out
    mm = tmp_path / "mm.json"
    mm.write_text(json.dumps({"tree": SumTree.sequential(16).to_json()}))
    assert main(["reveal", "numpy.matmul", "--n", "16", "--samples", "4", "--candidate",
                 str(mm)]) == 0
    assert "candidate not used: not tried: only ops probed one row per probe" in \
        _flat(capsys.readouterr().out)
    assert main(["reveal", "numpy.sum", "--n", "300", "--samples", "4",
                 "--no-candidates"]) == 0
    assert "proven as a candidate" not in capsys.readouterr().out
    (tmp_path / "bad.json").write_text("not json")
    for args, msg in ((["--n", "299", "--candidate", str(rec)], "its tree has 300 leaves"),
                      (["--candidate", str(tmp_path / "none.json")], "No such file"),
                      (["--candidate", str(tmp_path / "bad.json")], "not a reveal record or tree"),
                      (["--candidate", str(rec), "--no-candidates"], "exclude each other"),
                      (["--candidate", str(rec), "--sweep", "n=8,16"], "not to --sweep"),
                      (["--candidate", str(rec), "--runs", "2"], "not to --runs"),
                      (["--candidate", str(rec), "--algorithm", "basic"],
                       "not to --algorithm basic")):
        assert main(["reveal", "numpy.sum", *args]) == 2, args
        err = capsys.readouterr().err
        assert msg in err and len(err.strip().splitlines()) == 1, err


def test_gate_and_pin_order_prove_the_baseline_tree_first(tmp_path, monkeypatch):
    import sys

    from fpscope.gate import baseline_candidates, gate
    from fpscope.testing import assert_same_order

    base = tmp_path / "base.json"
    fpscope.reveal("numpy.sum", n=500, samples=8).save(base)
    live = tmp_path / "live.json"
    res = gate(base, samples=8, record=live)
    assert res.passed
    checks = fpscope.load_record(live)["probe"]["checks"]
    assert checks["candidate"].startswith(f"the baseline's tree ({base}): all 499 nodes proven")
    assert f"live tree proven as a candidate: the baseline's tree ({base})" in res.to_text()
    seen = []
    reveal_pkg = sys.modules["fpscope.reveal"]  # the package (fpscope.reveal is the API call)
    real = reveal_pkg.reveal

    def spy(*args, **kw):
        seen.append(kw.get("candidates"))
        return real(*args, **kw)

    monkeypatch.setattr(reveal_pkg, "reveal", spy)
    tree = assert_same_order("numpy.sum", base, n=500)
    (given,) = seen
    assert len(given) == 1 and given[0].build(500) == tree.root
    assert given[0].name == f"the baseline's tree ({base})"
    assert baseline_candidates(SumTree((0, 1, 2))) == "auto"  # multi-way: not a candidate
    assert baseline_candidates(None) == "auto"


@pytest.mark.parametrize("shape, layout", [((60, 50), "F"), ((100, 30), "T"), ((4, 8, 9), "F")])
def test_whole_array_sums_prove_the_families_over_memory_order(shape, layout):
    t = make_target("numpy.sum", shape=shape, layout=layout)
    try:
        res = reveal(t, replay_samples=8)
        plain = reveal(t, replay_samples=0, candidates=None)
    finally:
        t.close()
    n = int(np.prod(shape))
    perm = np.arange(n).reshape(shape).ravel(order="F")  # leaf at each memory position

    def relabel(node):  # numpy's tree is shallow (depth ~ 25): recursion is fine
        return int(perm[node]) if isinstance(node, int) else tuple(relabel(c) for c in node)

    want = SumTree(relabel(numpy_pairwise_sum_tree(n).root))
    assert res.tree == plain.tree == want
    assert res.stats.checks["candidate"].startswith(
        f"numpy's pairwise summation (blocks of at most 128, 8 lanes with stride 8), over "
        f"memory order ({layout} layout): all {n - 1} nodes proven")
    assert res.replay["bit_exact"]
