"""Issue 24: matrix ops whose outputs add in different orders: every tree and its positions."""

import json

import numpy as np
import pytest

from families import random_tree
from fpscope.masks import choose_mask
from fpscope.reveal import reveal
from fpscope.reveal.classes import (describe_positions, positions_from_blocks, positions_text,
                                    reveal_classes)
from fpscope.targets.simulated import SimulatedMatmul
from fpscope.tree import SumTree

K, M, N = 24, 20, 18


def _layouts():
    rng = np.random.default_rng(4)
    t = [SumTree.sequential(K), SumTree.pairwise(K), random_tree(K, rng), random_tree(K, rng)]
    return {
        "column parity": (lambda r, c: c % 2, t[:2]),
        "vector groups + last tile": (lambda r, c: 2 if r >= M - 3 else int(c % 8 >= 4), t[:3]),
        "four tiles": (lambda r, c: int(r >= 10) * 2 + int(c >= 9), t),
        "one tree": (lambda r, c: 0, t[:1]),
    }


@pytest.mark.parametrize("name", list(_layouts()))
def test_synthetic_classes_come_out_exactly(name):
    which, trees = _layouts()[name]
    target = SimulatedMatmul(trees[0], M, N, tree_for=lambda r, c: trees[which(r, c)])
    mask = choose_mask(K, target.in_format, target.out_format)
    classes, stats = reveal_classes(target, mask)
    truth = np.array([[which(r, c) for c in range(N)] for r in range(M)])
    assert len(classes) == len(set(truth.ravel().tolist()))
    for c in classes:
        k = truth[np.argwhere(c.mask)[0][0], np.argwhere(c.mask)[0][1]]
        assert c.tree == trees[k]
        assert np.array_equal(c.mask, truth == k)
    assert classes[0].mask[0, 0]
    # signatures, FPRev rows, checks: bounded (a class of 3 rows carries 3 pairs a call)
    assert stats["calls"] <= 64, stats


def test_reveal_reports_classes_and_replays_every_class():
    which, trees = _layouts()["vector groups + last tile"]
    target = SimulatedMatmul(trees[0], M, N, tree_for=lambda r, c: trees[which(r, c)])
    res = reveal(target)
    assert res.classes is not None and len(res.classes) == 3
    assert res.tree == trees[which(0, 0)]
    assert res.replay["bit_exact"] and res.replay["classes"] == 3
    assert res.stats.checks["output_classes"].startswith("3 classes")


def test_positions_round_trip():
    rng = np.random.default_rng(0)
    for t in range(200):
        R, C = (int(v) for v in rng.integers(1, 40, 2))
        if t % 2:
            P, Q = (int(v) for v in rng.integers(1, 9, 2))
            rr, cc = rng.random(P) < .5, rng.random(Q) < .5
            m = rr[np.arange(R) % P][:, None] & cc[np.arange(C) % Q][None, :]
            m[R - int(rng.integers(0, 3)):, :] = True
        else:
            m = rng.random((R, C)) < rng.random()
        blocks = describe_positions(m)
        assert np.array_equal(positions_from_blocks(json.loads(json.dumps(blocks)), m.shape), m)


def test_positions_text_is_compact():
    m = np.zeros((64, 64), dtype=bool)
    m[:, np.arange(64) % 16 < 8] = True
    assert positions_text(describe_positions(m)) == "columns j mod 16 in 0..7 (j = 0..55)"


def _openblas_matmul_classes(n):
    from fpscope.targets import make_target

    t = make_target("numpy.matmul", n=n)
    res = reveal(t, replay_samples=8)
    t.close()
    return res


def test_numpy_matmul_classes_equal_per_position_fprev():
    """Every class here: the tree equals what per-pair FPRev finds on one output of that
    class (fpscope reveal --position I,J)."""
    from fpscope.targets import make_target

    n = 64
    res = _openblas_matmul_classes(n)
    if res.classes is None:
        pytest.skip("this machine's numpy.matmul adds every output in one order")
    assert res.replay["bit_exact"]
    rng = np.random.default_rng(1)
    for c in res.classes:
        where = np.argwhere(c["mask"])
        for r, col in where[rng.choice(len(where), size=min(2, len(where)), replace=False)]:
            with make_target("numpy.matmul", n=n, output=(int(r), int(col))) as one:
                assert reveal(one, replay_samples=4).tree == c["tree"], (r, col)


def test_classes_in_the_record_verify_and_gate(tmp_path, capsys):
    from fpscope.cli import main
    from fpscope.gate import gate

    path = tmp_path / "mm.json"
    assert main(["reveal", "numpy.matmul", "--n", "64", "--record", str(path), "--quiet",
                 "--samples", "8"]) == 0
    out = capsys.readouterr().out
    rec = json.load(open(path))
    if not rec.get("classes"):
        pytest.skip("this machine's numpy.matmul adds every output in one order")
    assert "output classes (64x64 outputs" in out
    from fpscope.record import classes_of_record

    classes = classes_of_record(rec)
    assert sum(int(m.sum()) for _, m, _ in classes) == 64 * 64
    assert not np.logical_and(classes[0][1], classes[1][1]).any()
    assert main(["verify", str(path), "--samples", "16"]) == 0
    from fpscope.report import _classes_html

    html = _classes_html(rec)  # the matrix report's cell shows every class
    assert f"{len(classes)} trees among the outputs" in html and html.count("<li>") == len(classes)
    g = gate(str(path), samples=16)
    assert g.passed and g.bits["classes"] == len(classes)


@pytest.mark.parametrize("axis", [0, 1])
def test_add_reduce_every_output(axis):
    """numpy.add.reduce without an index: every output answers its own probe vector in one call;
    here they all share one tree, the one per-output reveals find."""
    from fpscope.targets import make_target
    from fpscope.targets.base import TargetError

    shape = (48, 6) if axis == 0 else (6, 48)
    with make_target("numpy.add.reduce", shape=shape, axis=axis) as t:
        assert t.is_matrix and (t.max_rows, t.max_cols) == (6, 1)
        res = reveal(t, replay_samples=8)
        with pytest.raises(TargetError, match="multiplies nothing"):
            t.evaluate_outer(np.ones((2, 48)), np.full((48, 1), 2.0))
    assert res.replay["bit_exact"]
    for index in (0, 5):
        with make_target("numpy.add.reduce", shape=shape, axis=axis, index=index) as one:
            assert reveal(one, replay_samples=4).tree == res.tree
