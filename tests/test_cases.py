"""The field cases C1-C5 of shared/cases/README.md as tests, with their concrete values, plus the
real numpy float32 sum against its known tree and the numpy.sum target's batched fast path.

Machine facts used here were verified on the project's 2-core x86-64 machine (numpy 2.4, AVX-512);
the tests compare against the revealed tree or against numpy itself wherever possible, so that the
claims stay about fpscope rather than about one CPU.
"""

from __future__ import annotations

import numpy as np
import pytest

from families import numpy_pairwise_sum_tree, seq_fold
from fpscope.formats import FP16, FP32, FP64
from fpscope.replay import replay
from fpscope.reveal import reveal
from fpscope.sweep import sweep
from fpscope.targets import make_target
from fpscope.targets._memory import placed_zeros
from fpscope.targets.base import Target
from fpscope.tree import SumTree


def same_bits(a, b) -> bool:
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return a.shape == b.shape and np.array_equal(a.view(np.int64), b.view(np.int64))


def reveal_tree(name, **kw) -> SumTree:
    t = make_target(name, **kw)
    try:
        return reveal(t, replay_samples=0).tree
    finally:
        t.close()


# -- C1: an 8-value float32 sum depends on the permutation ------------------------------------

C1_X = np.array(
    [-462914.25, -4450888, -3546839, 7919.854, -3874966.25, -1358369.625, -420256.46875,
     -336801.9375],
    dtype=np.float32,
)


def test_c1_balanced_tree_reproduces_numpy_sum():
    tree = reveal_tree("numpy.sum", n=8)
    assert tree.to_nested() == [[[0, 1], [2, 3]], [[4, 5], [6, 7]]]
    assert tree.to_json() == {"leaves": 8, "nodes": [[0, 1], [2, 3], [8, 9], [4, 5], [6, 7],
                                                     [11, 12], [10, 13]]}
    x = C1_X.astype(np.float64)  # exact widening
    got = replay(tree, x, FP32)
    assert got == -14443116.0
    assert same_bits(got, np.sum(C1_X))
    fold = replay(SumTree.sequential(8), x, FP32)
    assert fold == -14443115.0
    # the same left fold done by hand in float32
    acc = np.float32(0)
    for v in C1_X:
        acc = np.float32(acc + v)
    assert float(acc) == -14443115.0


# -- C2: axis reductions are sequential chains per output --------------------------------------


@pytest.mark.parametrize("rows", [5, 100, 1000])
def test_c2_axis0_reduction_is_a_chain(rows):
    t = make_target("numpy.add.reduce", shape=(rows, 2), axis=0, index=1)
    try:
        res = reveal(t, replay_samples=8)
    finally:
        t.close()
    assert res.tree == SumTree.sequential(rows)
    assert res.replay["bit_exact"]
    assert res.accumulator["precision_bits"] == 24


def test_c2_random_columns_equal_a_left_fold():
    """Random 1000x2 float32: the axis-0 sums equal a left-to-right loop bit for bit."""
    tree = reveal_tree("numpy.add.reduce", shape=(1000, 2), axis=0, index=1)
    A = np.random.default_rng(2).standard_normal((1000, 2)).astype(np.float32)
    want = replay(tree, A.T.astype(np.float64), FP32)
    assert same_bits(np.sum(A, axis=0), want)
    assert same_bits(want, replay(SumTree.sequential(1000), A.T.astype(np.float64), FP32))


def test_c2_chain_stalls_fp16_analogue():
    """The 2^24 stall of float32 ones, at fp16 scale: a chain of ones stalls at 2^11 = 2048."""
    tree = reveal_tree("numpy.add.reduce", shape=(100, 2), axis=0, index=1, dtype="fp16")
    assert tree == SumTree.sequential(100)
    n = 4100
    stalled = replay(SumTree.sequential(n), np.ones(n), FP16)
    assert stalled == 2048.0
    live = np.add.reduce(np.ones((n, 2), dtype=np.float16), axis=0)
    assert live.tolist() == [2048.0, 2048.0]
    assert replay(SumTree.sequential(n), np.ones(n), FP32) == n  # a wider accumulator counts on


def test_c2_fp16_chain_accumulates_in_fp16():
    t = make_target("numpy.add.reduce", shape=(100, 2), axis=0, index=1, dtype="fp16")
    try:
        res = reveal(t, replay_samples=8)
    finally:
        t.close()
    assert res.accumulator["precision_bits"] == 11
    assert res.replay["bit_exact"]


# -- C3: scans ---------------------------------------------------------------------------------


@pytest.mark.parametrize("index", [0, 1, 5, 40, 63])
def test_c3_cumsum_output_is_a_left_fold(index):
    tree = reveal_tree("numpy.cumsum", n=64, index=index)
    assert tree.n == index + 1
    assert tree == SumTree.sequential(index + 1)


def test_c3_cumsum_stalls_sum_does_not_fp16():
    n = 4096
    ones = np.ones(n, dtype=np.float16)
    assert float(np.cumsum(ones)[-1]) == 2048.0
    assert float(np.sum(ones)) == 4096.0
    # the revealed scan is a chain that stalls at 2048 in fp16 ...
    scan = reveal_tree("numpy.cumsum", n=200, index=199, dtype="fp16")
    assert scan == SumTree.sequential(200)
    assert replay(SumTree.sequential(n), np.ones(n), FP16) == 2048.0
    # ... while numpy's fp16 sum accumulates in fp32 (24 significand bits) over its pairwise tree
    t = make_target("numpy.sum", n=256, dtype="fp16")
    try:
        res = reveal(t, replay_samples=16)
    finally:
        t.close()
    assert res.accumulator["precision_bits"] == 24
    assert res.tree == numpy_pairwise_sum_tree(256)
    assert res.replay["bit_exact"]
    assert replay(numpy_pairwise_sum_tree(n), np.ones(n), FP32, FP16) == 4096.0


def test_c3_fp16_sum_needs_the_fp32_accumulator():
    """Bitwise: np.sum of fp16 data equals the tree replayed with an fp32 accumulator and one
    final rounding to fp16, and an fp16 accumulator would differ on some inputs."""
    n = 256
    tree = numpy_pairwise_sum_tree(n)
    X = np.random.default_rng(3).random((200, n)).astype(np.float16)
    live = np.array([float(np.sum(x)) for x in X])
    wide = replay(tree, X.astype(np.float64), FP32, FP16)
    narrow = replay(tree, X.astype(np.float64), FP16)
    assert same_bits(live, wide)
    assert not same_bits(live, narrow)


# -- C4: the order may depend on the buffer address --------------------------------------------


class PeelingSum(Target):
    """A synthetic fp64 sum with an address-dependent order (the old OpenBLAS AVX-512 kernels):
    peel leading elements one at a time until the pointer is 64-byte aligned, then run 4
    accumulators with stride 4 over the rest, combine them as (a0 + a1) + (a2 + a3), and add
    the peeled partial sum first. The pointer is the real address of a buffer placed ``offset``
    bytes after a 64-byte boundary."""

    name = "test.peeling_sum"

    def __init__(self, n: int, offset: int):
        super().__init__(n, FP64)
        self.offset = offset
        self.buf = placed_zeros((n,), np.float64, "C", offset)

    @property
    def peel(self) -> int:
        return min(self.n, ((-self.buf.ctypes.data) % 64) // 8)

    def expected_tree(self) -> SumTree:
        p, n = self.peel, self.n
        lanes = [seq_fold(list(range(p + r, n, 4))) for r in range(4)]
        body = ((lanes[0], lanes[1]), (lanes[2], lanes[3]))
        return SumTree(body if p == 0 else (seq_fold(list(range(p))), body))

    def _sum_rows(self, X: np.ndarray) -> np.ndarray:
        p = self.peel
        lanes = [X[:, p + r].copy() for r in range(4)]
        for k in range(p + 4, self.n):
            lanes[(k - p) % 4] = lanes[(k - p) % 4] + X[:, k]
        body = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3])
        if p == 0:
            return body
        head = X[:, 0].copy()
        for k in range(1, p):
            head = head + X[:, k]
        return head + body

    def evaluate(self, X) -> np.ndarray:
        X = self._check(X).astype(np.float64)
        self.calls += X.shape[0]
        return self._sum_rows(X)

    def _call_one(self, x) -> float:
        self.buf[...] = x
        return float(self._sum_rows(self.buf[None, :])[0])


OFFSETS = list(range(0, 64, 8))


@pytest.mark.parametrize("name", ["numpy.sum", "numpy.dot"])
def test_c4_numpy_fp64_n430_alignment_independent(name):
    res = sweep("offset", OFFSETS, lambda o: make_target(name, n=430, dtype="fp64", offset=o),
                replay_samples=4)
    assert [r["value"] for r in res.rows] == OFFSETS
    assert all(r["error"] is None for r in res.rows), res.rows
    assert {r["tree_id"] for r in res.rows} == {"A"}
    assert res.changes == []


def test_c4_sweep_reports_address_dependent_order():
    targets = {}

    def build(o):
        targets[o] = PeelingSum(430, o)
        return targets[o]

    res = sweep("offset", OFFSETS, build, replay_samples=4)
    assert all(r["error"] is None for r in res.rows), res.rows
    ids = [r["tree_id"] for r in res.rows]
    assert len(set(ids)) == 8  # peel counts 0, 7, 6, ..., 1
    assert res.changes == list(zip(OFFSETS, OFFSETS[1:]))
    for row in res.rows:
        t = targets[row["value"]]
        assert t.buf.ctypes.data % 64 == row["value"]
        assert t.peel == (-(row["value"] // 8)) % 8
        assert res.trees[row["tree_id"]] == t.expected_tree()


@pytest.mark.parametrize("offset", [0, 8, 24, 48, 56])
def test_c4_numpy_targets_place_operands_at_the_offset(offset, monkeypatch):
    """Every array numpy.sum / numpy.dot is called on during a reveal starts ``offset`` bytes
    after a 64-byte boundary (batched rows included)."""
    seen = []
    real_sum, real_dot = np.sum, np.dot

    def spy_sum(a, *args, **kwargs):
        if isinstance(a, np.ndarray) and a.dtype == np.float64:
            rows = a if a.ndim == 2 else a[None]
            seen.extend(("sum", r.ctypes.data % 64) for r in rows)
        return real_sum(a, *args, **kwargs)

    def spy_dot(a, b, *args, **kwargs):
        seen.extend([("dot", a.ctypes.data % 64), ("dot", b.ctypes.data % 64)])
        return real_dot(a, b, *args, **kwargs)

    for name in ("numpy.sum", "numpy.dot"):
        t = make_target(name, n=100, dtype="fp64", offset=offset)
        monkeypatch.setattr(np, "sum", spy_sum)
        monkeypatch.setattr(np, "dot", spy_dot)
        try:
            reveal(t, replay_samples=2)
        finally:
            monkeypatch.setattr(np, "sum", real_sum)
            monkeypatch.setattr(np, "dot", real_dot)
            t.close()
    kinds = {k for k, _ in seen}
    assert kinds == {"sum", "dot"}
    assert {addr for _, addr in seen} == {offset}


# -- C5: the K-order of a matmul depends on the number of rows ---------------------------------


def test_c5_torch_matmul_rows_sweep():
    """K = 300 instead of 1000 to stay fast. threads=1: on the shared 2-core machine torch's
    default thread pool made the M = 1 reveal take 0.1 to 7 s under load; the revealed trees are
    the same with the default threads (checked for M = 1, 2, 64; test_cli sweeps rows with the
    default). Where the tree changes is the CPU's (torch picks its kernels by CPU): on an
    AVX-512 Xeon between M = 1 and 2 (M >= 2 one left fold), on an AMD EPYC between M = 3 and 4
    (M <= 3 one left fold); every revealed tree is replayed bit for bit by the sweep."""
    pytest.importorskip("torch")
    rows = [1, 2, 4, 8, 16, 32, 64]
    res = sweep("rows", rows,
                lambda m: make_target("torch.matmul", shape=(m, 300, 300), threads=1),
                replay_samples=4)
    assert all(r["error"] is None for r in res.rows), res.rows
    ids = [(r["tree_id"], r["arithmetic_id"]) for r in res.rows]
    assert res.changes == [(rows[i], rows[i + 1]) for i in range(len(rows) - 1)
                           if ids[i] != ids[i + 1]]
    trees = [r["tree_id"] for r in res.rows]
    for ch in res.change_details:  # each change says what changed: the tree, the arithmetic
        i = rows.index(ch["from"])
        assert (ch["tree"] is not None) == (trees[i] != trees[i + 1])
        assert ch["tree"] is not None or ch["arithmetic"] is not None
    if not res.changes:
        pytest.skip("this machine's torch takes one K-order for every M (case C5 not seen)")
    # a tree, once left, does not come back (M picks a kernel by thresholds), and one of the
    # kernels adds the K products in one left fold
    assert len(set(ids)) == len(res.changes) + 1
    assert SumTree.sequential(300) in res.trees.values()


# -- the real numpy float32 sum ----------------------------------------------------------------


def test_numpy_sum_fp32_tree_for_every_n_up_to_300():
    rng = np.random.default_rng(4)
    wrong = []
    for n in range(1, 301):
        tree = reveal_tree("numpy.sum", n=n)
        if tree != numpy_pairwise_sum_tree(n):
            wrong.append(n)
            continue
        X = rng.standard_normal((6, n)).astype(np.float32)
        live = np.array([float(np.sum(x)) for x in X])
        assert same_bits(replay(tree, X.astype(np.float64), FP32), live), f"n = {n}"
    assert wrong == [], f"revealed tree differs from numpy's pairwise sum at n = {wrong}"


@pytest.mark.parametrize("n", [
    1000, 4097, 16384,
    pytest.param(65536, marks=pytest.mark.slow),  # about 10 s of probing
])
def test_numpy_sum_fp32_large_n_replays_bit_exact(n):
    tree = reveal_tree("numpy.sum", n=n)
    assert tree == numpy_pairwise_sum_tree(n)
    rng = np.random.default_rng(n)
    X = np.concatenate([
        rng.standard_normal((10, n)),
        rng.random((5, n)),
        rng.standard_normal((5, n)) * np.ldexp(1.0, rng.integers(-20, 20, size=(5, n))),
    ]).astype(np.float32)
    live = np.array([float(np.sum(x)) for x in X])
    assert same_bits(replay(tree, X.astype(np.float64), FP32), live)


# -- the numpy.sum target's batched fast path --------------------------------------------------


@pytest.mark.parametrize("layout, offset", [("C", 0), ("C", 24), ("strided", 0), ("strided", 24)])
@pytest.mark.parametrize("n", [7, 8, 130, 1000])
def test_numpy_sum_in_place_buffer_matches_copies(layout, offset, n, monkeypatch):
    rng = np.random.default_rng(n + offset)
    t = make_target("numpy.sum", n=n, dtype="fp32", layout=layout, offset=offset)
    try:
        rows = 9
        buf = t.input_buffer(rows)
        assert buf.shape == (rows, n)
        assert all(r.ctypes.data % 64 == offset for r in buf)
        data = rng.standard_normal((rows, n)).astype(np.float32)
        data[1] = rng.random(n) * 1e6
        data[2, ::3] *= -1e-4
        buf[...] = data

        passed = []
        real_sum = np.sum

        def spy(a, *args, **kwargs):
            passed.append(a)
            return real_sum(a, *args, **kwargs)

        monkeypatch.setattr(np, "sum", spy)
        in_place = t.evaluate(buf)
        head = t.evaluate(buf[:4])
        monkeypatch.setattr(np, "sum", real_sum)
        # the in-place path hands numpy the probe buffer itself, no copy
        assert passed and all(
            a.__array_interface__["data"][0] == buf.__array_interface__["data"][0] for a in passed
        )

        plain = np.array(data, dtype=np.float32, order="C")  # an ordinary array, not placed
        copied = t.evaluate(plain)
        each = t.evaluate_each(plain)
        one_d = np.array([float(np.sum(r)) for r in placed_rows_like(data, layout, offset)])
        assert same_bits(in_place, copied)
        assert same_bits(in_place, each)
        assert same_bits(in_place, one_d)
        assert same_bits(head, in_place[:4])
        assert same_bits(buf, data)  # evaluation leaves the probe buffer unchanged
    finally:
        t.close()


def placed_rows_like(data: np.ndarray, layout: str, offset: int):
    """Each row as its own 1-D array placed like the target's input."""
    for row in data:
        a = placed_zeros(row.shape, row.dtype, layout, offset)
        a[...] = row
        yield a


# -- C6: bf16 matmul accumulating in bf16 ------------------------------------------------------

def test_c6_bf16_running_sum_of_ones_stalls_at_256():
    """A bf16 accumulator stalls at 256 (257 is a tie that rounds to 256); fp32 reaches 1024.
    Both the tree replay and the matrix-unit emulator (a chain of one-product steps) show it."""
    from fpscope.emulate import matmul
    from fpscope.formats import BF16
    from fpscope.profile import Profile

    ones = np.ones(1024)
    chain = SumTree.sequential(1024)
    assert float(replay(chain, ones, BF16)) == 256.0
    assert float(replay(chain, ones, FP32)) == 1024.0
    bf16_chain = Profile(name="bf16-chain", arch="cpu", in_format="bf16", out_format="bf16",
                         block_size=1, k=1, frac_bits=50, e_zero=None,
                         step_rounding=("bf16", "RNE"))
    fp32_chain = bf16_chain.replace(out_format="fp32", step_rounding=("fp32", "RNE"))
    A = np.ones((2, 1024))
    assert (matmul(A, A.T, profile=bf16_chain) == 256.0).all()
    assert (matmul(A, A.T, profile=fp32_chain) == 1024.0).all()


def test_c6_reveal_reports_the_accumulator_of_a_bf16_sum():
    """The reveal reports the accumulator format with the tree (here numpy's fp32 for bf16
    inputs would need ml_dtypes; torch CPU bf16 sum is the library case)."""
    pytest.importorskip("torch")
    target = make_target("torch.sum", n=64, dtype="bf16")
    try:
        result = reveal(target, replay_samples=8)
    finally:
        target.close()
    acc = result.accumulator
    assert acc["observable"] and acc["precision_bits"] in (8, 24), acc


# -- C8: split-K with low-precision partial sums -----------------------------------------------

@pytest.mark.parametrize("S, fmt", [(2, "bf16"), (4, "bf16"), (2, "fp16"), (2, None),
                                    (4, None)])
def test_c8_split_k_partial_format_is_revealed_by_a_half_and_half_input(S, fmt):
    """First half of K at +x, second half at -x with one product -x + eps (x = 1, eps = 2^-7):
    the last slice's partial sum is -K/S + eps; rounded to a bf16 or fp16 partial-sum format
    it loses eps (below half an ulp of K/S there), kept in fp32 it survives (case C8)."""
    from fpscope.emulate import matmul
    from fpscope.profile import get_profile

    p = get_profile("hopper-bf16").replace(split_k=S, split_k_format=fmt)
    K, eps = 64, 2.0 ** -7
    A = np.ones((1, K))
    B = np.ones((K, 1))
    B[K // 2:] = -1.0
    B[-1] = -1.0 + eps  # 0.9921875 is a bf16 value
    d = matmul(A, B, profile=p)[0, 0]
    assert d == (0.0 if fmt else eps)


# -- C9 / C10: fp8 accumulation keeps 13 fraction bits on Ada/Hopper, 25 on Blackwell tcgen05 --

@pytest.mark.parametrize("preset, kept", [("ada-e4m3", 13), ("hopper-e4m3", 13),
                                          ("blackwell-tcgen05-e4m3", 25)])
def test_c9_c10_fp8_accumulator_width(preset, kept):
    from fpscope.emulate import matmul
    from fpscope.profile import get_profile

    p = get_profile(preset)
    K = p.k
    # (a) A = B = 0, C = 1 + 2^-20: a 13-bit accumulator returns 1.0, a 25-bit one returns C
    c = 1.0 + 2.0 ** -20
    d = matmul(np.zeros((1, K)), np.zeros((K, 1)), np.array([[c]]), profile=p)[0, 0]
    assert d == (1.0 if kept == 13 else c)
    # (b) products 448 * 1 and 2^-6 * 2^-3: fp32 gives 448.001953125, 13 bits give 448.0
    A = np.zeros((1, K))
    B = np.zeros((K, 1))
    A[0, 0], B[0, 0], A[0, 1], B[1, 0] = 448.0, 1.0, 2.0 ** -6, 2.0 ** -3
    d = matmul(A, B, profile=p)[0, 0]
    assert d == (448.0 if kept == 13 else 448.001953125)
