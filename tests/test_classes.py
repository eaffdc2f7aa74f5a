"""Issue 24: matrix ops whose outputs add in different orders: every tree and its positions."""

import json

import numpy as np
import pytest

from families import random_tree
from fpscope.masks import choose_mask
from fpscope.reveal import RevealError, reveal
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


#: OpenBLAS's Haswell sgemm adds the outputs of a 64 x 64 product in two orders (edge columns);
#: its default kernels on AVX-512 machines (SkylakeX) use one: the tests force Haswell kernels
#: in a child process so they run on either (they skip where no output differs, e.g. on ARM)
HASWELL = {"OPENBLAS_CORETYPE": "Haswell"}


def _openblas_matmul_classes(n):
    from fpscope.targets import make_target

    t = make_target("numpy.matmul", n=n, env=HASWELL)
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
            with make_target("numpy.matmul", n=n, output=(int(r), int(col)),
                             env=HASWELL) as one:
                assert reveal(one, replay_samples=4).tree == c["tree"], (r, col)


def test_classes_in_the_record_verify_and_gate(tmp_path, capsys):
    from fpscope.cli import main
    from fpscope.gate import gate

    path = tmp_path / "mm.json"
    assert main(["reveal", "numpy.matmul", "--n", "64", "--record", str(path), "--quiet",
                 "--samples", "8", "--env", "OPENBLAS_CORETYPE=Haswell"]) == 0
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


# -- fast paths of reveal_classes against the obviously right ones -------------------------------

def _labels_reference(sigs):
    """Equal answers to every signature pair, equal label; numbered by first appearance in
    row-major order (np.unique one signature at a time)."""
    shape = sigs[0].shape
    lab = np.zeros(shape[0] * shape[1], dtype=np.int64)
    for L in sigs:
        key = lab * (int(L.max()) + 1) + L.reshape(-1)
        _, first, lab = np.unique(key, return_index=True, return_inverse=True)
        order = np.argsort(first)
        remap = np.empty_like(order)
        remap[order] = np.arange(len(order))
        lab = remap[lab.reshape(-1)]
    return lab.reshape(shape)


@pytest.mark.parametrize("seed", range(6))
def test_labels_match_the_sorting_reference(seed):
    from fpscope.reveal.classes import _labels

    rng = np.random.default_rng(seed)
    R, C = (int(v) for v in rng.integers(1, 70, 2))
    classes = int(rng.integers(1, 60))  # beyond 32: the np.unique numbering
    truth = rng.integers(0, classes, (R, C))
    hi = [8, 1 << 12, 1 << 21][seed % 3]  # the last: the key table is too large, np.unique
    answers = rng.integers(2, hi, (int(rng.integers(1, 10)), classes))
    sigs = [a[truth].astype(np.int32) for a in answers]
    assert np.array_equal(_labels(sigs), _labels_reference(sigs))


def test_lca_values_match_the_elementwise_check():
    from fpscope.reveal.classes import _lca_values

    rng = np.random.default_rng(3)
    n = 40
    for trial in range(300):
        k = rng.integers(0, n - 1, (5, 7)).astype(np.float64)
        if trial % 3:
            r, c = rng.integers(0, 5), rng.integers(0, 7)
            k[r, c] = [np.nan, np.inf, -np.inf, 0.5, -1.0, n - 1, 2.0**127, -2.0**31, 2.0**31][trial % 9]
        ok = np.isfinite(k) & (k == np.round(k)) & (k >= 0) & (k <= n - 2)
        rows = np.arange(5)
        pairs = np.stack([rows, rows + 1], axis=1)
        if ok.all():
            got = _lca_values(k, n, k, rows, pairs, 1.0)
            assert np.array_equal(got, (n - k).astype(np.int64))
        else:
            with pytest.raises(RevealError) as err:
                _lca_values(k, n, k, rows, pairs, 1.0)
            r, c = (int(v) for v in np.argwhere(~ok)[0])
            assert err.value.kind == "not-units" and f"at output ({r}, {c})" in str(err.value)


def _store_reference(labels, rows, pairs, L):
    """Per class and row: the outputs' min and max must agree; the first class (in label order)
    with a row that disagrees names the split pair; otherwise each class present in a row keeps
    the row's answer."""
    K = int(labels.max()) + 1
    caches = [dict() for _ in range(K)]
    for k in range(K):
        mem = labels[rows] == k
        for t in range(len(rows)):
            vals = L[t][mem[t]]
            if len(vals) and vals.min() != vals.max():
                return ("split", t)
            if len(vals):
                caches[k][tuple(sorted(int(v) for v in pairs[t]))] = int(vals[0])
    return caches


def test_store_matches_per_class_min_and_max():
    from fpscope.reveal.classes import _Caller, _Shared, _Split

    rng = np.random.default_rng(5)
    for trial in range(120):
        R, C, K = int(rng.integers(1, 12)), int(rng.integers(1, 12)), int(rng.integers(1, 6))
        labels = rng.integers(0, K, (R, C))
        labels = np.unique(labels, return_inverse=True)[1].reshape(R, C)  # no empty class
        caller = _Caller.__new__(_Caller)
        caller.n = 64
        sh = _Shared(caller, labels)
        rows = rng.permutation(R)[: int(rng.integers(1, R + 1))]
        pairs = np.stack([rng.integers(0, 32, len(rows)), rng.integers(32, 64, len(rows))], axis=1)
        per = rng.integers(2, 60, (len(rows), sh.K))
        L = np.take_along_axis(per, labels[rows], axis=1)
        if trial % 2:  # one output disagrees with its class in its row
            t, c = int(rng.integers(0, len(rows))), int(rng.integers(0, C))
            L[t, c] += 1
        ref = _store_reference(labels, rows, pairs, L)
        if isinstance(ref, tuple):
            with pytest.raises(_Split):
                sh.store(rows, pairs, L)
        else:
            sh.store(rows, pairs, L)
            assert sh.cache == ref


@pytest.mark.parametrize("seed", range(4))
def test_fprev_stages_is_plain_fprev(seed):
    from fpscope.reveal import Prober
    from fpscope.reveal.algorithms import fprev, fprev_stages
    from fpscope.targets.simulated import SimulatedSum

    rng = np.random.default_rng(seed)
    tree = random_tree(int(rng.integers(1, 200)), rng)
    target = SimulatedSum(tree, fused_frac_bits=24)
    prober = Prober(target, choose_mask(tree.n, target.in_format, target.out_format))
    L = tree.lca_size_matrix()
    stages, vals = fprev_stages(np.arange(tree.n), seed), None
    while True:
        try:
            pairs = stages.send(vals)
        except StopIteration as stop:
            nested = stop.value
            break
        vals = L[pairs[:, 0], pairs[:, 1]]
    assert SumTree(nested) == tree == SumTree(fprev(prober, seed=seed))


def test_lockstep_classes_equal_one_class_at_a_time():
    """Classes revealed together in shared calls give what each class's own FPRev gives, in no
    more calls than one class after the other (tests/test_classes.py layouts)."""
    from fpscope.reveal import classes as cl

    for name, (which, trees) in _layouts().items():
        target = SimulatedMatmul(trees[0], M, N, tree_for=lambda r, c: trees[which(r, c)])
        mask = choose_mask(K, target.in_format, target.out_format)
        classes, stats = reveal_classes(target, mask)
        caller = cl._Caller(target, mask)
        labels = np.array([[which(r, c) for c in range(N)] for r in range(M)])
        labels = cl._labels([labels.astype(np.int32)])
        sh = cl._Shared(caller, labels)
        together, _ = cl._fprev_all(sh, K, 0)
        calls_together = caller.calls
        for k in range(sh.K):  # one class alone, its pairs on its own rows only
            alone = cl._Shared(caller, labels)
            nested, _ = cl._fprev_all(_OnlyClass(alone, k), K, 0)
            assert SumTree(nested[0]) == SumTree(together[k]) == trees[which(*np.argwhere(labels == k)[0])]
        assert len(classes) == len({c.tree.key() for c in classes})
        assert calls_together <= caller.calls - calls_together, name


class _OnlyClass:
    """A _Shared that holds class k only (for the lockstep test)."""

    def __init__(self, sh, k):
        self.sh, self.k, self.K = sh, k, 1
        self.cache = [sh.cache[k]]

    def answer(self, needs):
        self.sh.answer({self.k: needs[0]})


@pytest.mark.parametrize("seed", range(5))
def test_lca_sizes_match_lca_sizes_of_tree(seed):
    from fpscope.reveal import lca_sizes_of_tree
    from fpscope.reveal.classes import _lca_sizes

    rng = np.random.default_rng(seed)
    for t in range(60):
        n = int(rng.integers(2, 400))
        tree = (random_tree(n, rng) if t % 3 else SumTree.sequential(n) if t % 2
                else SumTree.reverse_sequential(n))
        i = rng.integers(0, n, 50)
        j = rng.integers(0, n - 1, 50)
        pairs = np.stack([i, np.where(j >= i, j + 1, j)], axis=1)
        assert np.array_equal(_lca_sizes(tree, pairs), lca_sizes_of_tree(tree, pairs))
    with_c = SumTree((("C", 0), (1, (2, 3, 4))))
    pairs = np.array([[0, 1], [1, 2], [2, 4], [4, 3], [0, 3]])
    assert np.array_equal(_lca_sizes(with_c, pairs), lca_sizes_of_tree(with_c, pairs))


def test_diff_is_not_identical_when_only_another_class_differs():
    """Output (0, 0)'s tree and arithmetic agree, a second class differs: never "identical"."""
    from fpscope.arithmetic import Arithmetic
    from fpscope.diff import Side, diff_trees

    base, other = SumTree.pairwise(K), SumTree.sequential(K)
    arith = Arithmetic.uniform(K - 1, "fp32", "fp32")
    m0 = np.zeros((2, 2), dtype=bool)
    m0[0] = True
    a = Side("a", tree=base, arith=arith, classes=[(base, m0, arith), (other, ~m0, arith)])
    b = Side("b", tree=base, arith=arith,
             classes=[(base, m0, arith), (SumTree.reverse_sequential(K), ~m0, arith)])
    d = diff_trees(a, b)
    assert not d.same and d.verdict.startswith("different output classes")
    assert diff_trees(a, Side("c", tree=base, arith=arith, classes=a.classes)).same
