"""Whole-array sums of 2-D and 3-D arrays: leaves numbered in logical C order, summarised in
memory order (numpy.sum, torch.sum, jax.numpy.sum with --shape RxC or RxCxD, no axis)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fpscope.cli import main
from fpscope.formats import get_format, round_to_format
from fpscope.reveal import reveal
from fpscope.summary import array_order, summarize
from fpscope.targets import TargetError, make_target
from fpscope.targets._memory import placed_batch, placed_zeros
from fpscope.targets.numpy_targets import NumpySum
from fpscope.tree import SumTree

LAYOUTS = ["C", "F", "strided", "T"]
SHAPES = [(16, 12), (8, 6, 5)]
DTYPES = ["fp64", "fp32", "fp16", "bf16"]


@pytest.fixture
def rng():
    return np.random.default_rng(20250611)


def rand(rng, shape, dtype):
    return round_to_format(rng.standard_normal(shape), get_format(dtype))


def same_bits(a, b) -> bool:
    a = np.ascontiguousarray(a, dtype=np.float64)
    b = np.ascontiguousarray(b, dtype=np.float64)
    return a.shape == b.shape and np.array_equal(a.view(np.uint64), b.view(np.uint64))


def memory_order(shape, layout) -> np.ndarray:
    """perm[i] = logical C-order flat index of the element at memory position i, from the byte
    offsets of the placed array itself (independent of fpscope.summary's layout table)."""
    a = placed_zeros(shape, np.float32, layout)
    idx = np.indices(shape).reshape(len(shape), -1)
    offsets = (idx * np.array(a.strides)[:, None]).sum(axis=0)
    return np.argsort(offsets, kind="stable")


def relabel(tree: SumTree, perm) -> SumTree:
    """The tree with leaf i renamed perm[i]."""

    def walk(node):
        return [walk(c) for c in node] if isinstance(node, (list, tuple)) else int(perm[node])

    return SumTree(walk(tree.to_nested()))


def one_line_error(fn, *args, **kwargs) -> str:
    with pytest.raises(TargetError) as info:
        fn(*args, **kwargs)
    msg = str(info.value)
    assert msg and "\n" not in msg
    return msg


# -- placement ---------------------------------------------------------------------------------


@pytest.mark.parametrize("offset", [0, 24, 3])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("shape", SHAPES)
def test_placed_batch_is_placed_like_one_array(shape, layout, offset):
    one = placed_zeros(shape, np.float16, layout, offset)
    assert one.ctypes.data % 64 == offset % 64 and not one.any()
    batch = placed_batch(3, shape, np.float16, layout, offset)
    assert batch.shape == (3, *shape) and not batch.any()
    for b in range(3):
        assert batch[b].strides == one.strides
        assert batch[b].ctypes.data % 64 == offset % 64
    batch[...] = np.arange(batch.size, dtype=np.float16).reshape(batch.shape)  # no overlap
    assert len(np.unique(batch)) == batch.size


def test_layout_t_is_a_transposed_c_array():
    a = placed_zeros((5, 7), np.float32, "T")
    assert a.shape == (5, 7) and a.flags.f_contiguous and not a.flags.c_contiguous
    assert a.T.flags.c_contiguous  # the C buffer of shape (7, 5) it was made from
    assert a.strides == placed_zeros((5, 7), np.float32, "F").strides
    b = placed_zeros((4, 3, 2), np.float32, "T")
    assert b.T.flags.c_contiguous and b.T.shape == (2, 3, 4)
    assert placed_zeros((6,), np.float32, "T").strides == (4,)  # 1-D: C


# -- numpy.sum: the revealed tree is the 1-D sum in memory order --------------------------------


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("shape", SHAPES)
def test_numpy_sum_nd_is_the_memory_order_sum(shape, layout):
    n = int(np.prod(shape))
    t = make_target("numpy.sum", shape=shape, layout=layout)
    assert t.n == n and t.spec()["shape"] == list(shape) and t.spec()["layout"] == layout
    res = reveal(t, replay_samples=8)
    assert res.replay["bit_exact"]
    flat = make_target("numpy.sum", n=n, layout="strided" if layout == "strided" else "C")
    want = relabel(reveal(flat, replay_samples=2).tree, memory_order(shape, layout))
    assert res.tree == want


def test_numpy_sum_t_layout_is_the_f_tree():
    """T and F have the same strides (a transpose reaches the same memory); numpy sums both in
    memory order, so the trees agree."""
    trees = [reveal(make_target("numpy.sum", shape=(24, 10), layout=lay), replay_samples=2).tree
             for lay in ("F", "T")]
    assert trees[0] == trees[1]
    assert trees[0] != reveal(make_target("numpy.sum", shape=(24, 10)), replay_samples=2).tree


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["C", "F"])
def test_numpy_sum_256x96(layout):
    shape = (256, 96)
    t = make_target("numpy.sum", shape=shape, layout=layout)
    res = reveal(t, replay_samples=4)
    assert res.replay["bit_exact"]
    want = relabel(reveal(make_target("numpy.sum", n=t.n), replay_samples=2).tree,
                   memory_order(shape, layout))
    assert res.tree == want


# -- batched evaluate ----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_numpy_sum_nd_batched_equals_per_row_bitwise(dtype, rng):
    """The finding behind NumpySum.BATCHED_LAYOUTS: np.sum(rows, axis=(1, ..., ndim)) of a
    (B, *shape) array equals one np.sum call per array, for every layout."""
    assert NumpySum.BATCHED_LAYOUTS == frozenset(LAYOUTS)
    shapes = [*SHAPES, (1, 9), (9, 1), (3, 1, 7), (33, 65), (5, 4000), (256, 96)]
    for shape in shapes:
        for layout in LAYOUTS:
            for offset in (0, 24, 3) if max(shape) < 100 else (0, 3):  # 3: unaligned
                t = make_target("numpy.sum", shape=shape, dtype=dtype, layout=layout,
                                offset=offset)
                assert t.batched == (dtype in NumpySum.BATCHED)
                X = rand(rng, (3, t.n), dtype)
                calls = t.calls
                got = t.evaluate(X)
                if t.batched:
                    assert t.calls == calls + 1
                want = t.evaluate_each(X)
                assert same_bits(got, want), (shape, layout, offset)
                # the buffer handed out by input_buffer (no copy for C and strided)
                B = t.input_buffer(3)
                B[...] = t.as_storage(X)
                assert same_bits(t.evaluate(B), want), (shape, layout, offset)
                # one call of the op per row is what np.sum gives directly
                a = placed_zeros(shape, t.storage_dtype, layout, offset)
                a[...] = t.as_storage(X[0]).reshape(shape)
                assert same_bits([np.sum(a)], want[:1])


def test_numpy_sum_nd_batched_in_chunks(rng, monkeypatch):
    from fpscope.targets import numpy_targets

    monkeypatch.setattr(numpy_targets, "BATCH_BYTES", 1 << 20)
    for layout in LAYOUTS:
        t = make_target("numpy.sum", shape=(128, 64), layout=layout, offset=8)
        X = rand(rng, (40, t.n), "fp32")  # 16 rows of float64 per chunk: 3 chunks
        got = t.evaluate(X)
        assert t.calls == 3
        assert same_bits(got, t.evaluate_each(X))


def test_numpy_sum_nd_leaves_are_logical_c_order(rng):
    """Leaf k is a[np.unravel_index(k, shape)], whatever the layout."""
    for layout in LAYOUTS:
        t = make_target("numpy.sum", shape=(3, 4, 5), layout=layout, dtype="fp64")
        for k in (0, 1, 7, 59):
            x = np.zeros((1, 60))
            x[0, k] = 1.0
            t._call_one(t.as_storage(x)[0])
            assert t._buf[np.unravel_index(k, (3, 4, 5))] == 1.0 and t._buf.sum() == 1.0


# -- summary ---------------------------------------------------------------------------------------


def test_summary_f_layout_names_memory_order():
    t = make_target("numpy.sum", shape=(16, 12), layout="F")
    res = reveal(t, replay_samples=2)
    text = summarize(res.tree, spec=t.spec())
    assert "memory order (F layout)" in text
    first = text.index("x[")
    assert text[first:].startswith("x[0,0], x[1,0], x[2,0], ..., x[15,0], x[0,1]")
    assert "numbered m0..m191 in that order" in text
    assert "unrecognised" not in text and "scattered" not in text
    plain = summarize(res.tree)
    assert "unrecognised order" in plain  # what it said before (the logical numbering)


def test_summary_c_layout_and_3d():
    t = make_target("numpy.sum", shape=(8, 6, 5), layout="C")
    text = summarize(reveal(t, replay_samples=2).tree, spec=t.spec())
    assert "shape 8x6x5, taken in memory order (C layout): x[0,0,0], x[0,0,1]" in text
    assert "numbered x0..x239 in that order" in text


def test_summary_arguments():
    perm = np.arange(6).reshape(3, 2).ravel(order="F")
    t = relabel(SumTree.pairwise(6), perm)  # pairwise over the F order of a 3 x 2 array
    text = summarize(t, shape=(3, 2), order="F")
    assert text.startswith("6 terms, shape 3x2, taken in memory order (F layout): x[0,0], x[1,0], "
                           "x[2,0], x[0,1], x[1,1], x[2,1], numbered m0..m5 in that order; pairwise")
    assert summarize(t, shape=(3, 2), order=perm) == text.replace(" (F layout)", "")
    assert "memory order (T layout)" in summarize(t, shape=(3, 2), order="T")
    # the logical order is tried next when the memory order shows nothing
    text = summarize(SumTree.pairwise(6), shape=(3, 2), order="F")
    assert "taken in logical C order, not in memory order (F layout)" in text
    # neither: today's text
    odd = SumTree([[[0, 5], [2, 3]], [1, 4]])
    assert "unrecognised order" in summarize(odd)
    assert summarize(odd, shape=(3, 2), order="F") == summarize(odd)
    with pytest.raises(ValueError):
        summarize(t, shape=(4, 2), order="F")
    with pytest.raises(ValueError):
        summarize(t, shape=(3, 2), order=[0, 1, 2, 3, 4, 4])


def test_array_order_only_for_whole_array_sums():
    spec = make_target("numpy.sum", shape=(4, 5), layout="T").spec()
    assert array_order(spec) == {"shape": (4, 5), "order": "T"}
    assert array_order(make_target("numpy.sum", n=20).spec()) == {}
    assert array_order(make_target("numpy.add.reduce", shape=(1, 20), axis=1).spec()) == {}
    assert array_order(make_target("numpy.matmul", shape=(1, 20, 1)).spec()) == {}
    assert array_order(None) == {} and array_order({"name": "numpy.sum"}) == {}


def test_cli_reveal_f_layout(capsys, tmp_path):
    rec = tmp_path / "f.json"
    rc = main(["reveal", "numpy.sum", "--shape", "16x12", "--layout", "F", "--samples", "2",
               "--record", str(rec)])
    out, _ = capsys.readouterr()
    assert rc == 0
    flat = " ".join(out.split())
    assert "memory order (F layout): x[0,0], x[1,0]" in flat
    record = json.loads(rec.read_text())
    assert record["target"]["shape"] == [16, 12] and record["target"]["layout"] == "F"
    assert "memory order (F layout)" in record["summary"]
    assert main(["verify", str(rec)]) == 0


def test_cli_sweep_layout_summaries_follow_each_layout(capsys):
    """A layout sweep describes each tree in its own memory order: F's tree is "taken in memory
    order (F layout)", C's is not (the summary is given the layout of the value revealing it)."""
    rc = main(["reveal", "numpy.sum", "--shape", "16x12", "--samples", "2", "--sweep",
               "layout=C,F", "--format", "json"])
    assert rc == 0
    res = json.loads(capsys.readouterr().out)
    summaries = res["summaries"]
    assert len(summaries) == 2, summaries
    ids = {row["value"]: row["tree_id"] for row in res["sweep"]["rows"]}
    assert "memory order (F layout)" in summaries[ids["F"]]
    assert "F layout" not in summaries[ids["C"]]


# -- torch and jax -------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["C", "F"])
def test_torch_sum_2d(layout, rng):
    torch = pytest.importorskip("torch")
    t = make_target("torch.sum", shape=(16, 12), layout=layout)
    assert t.spec()["shape"] == [16, 12]
    X = rand(rng, (2, t.n), "fp32")
    for x, y in zip(X, t.evaluate(X)):
        a = x.astype(np.float32).reshape(16, 12)
        a = np.asfortranarray(a) if layout == "F" else a
        assert same_bits([float(torch.sum(torch.from_numpy(a)))], [y])
    res = reveal(t, replay_samples=4)
    assert res.replay["bit_exact"]
    summarize(res.tree, spec=t.spec())  # never raises


def test_jax_sum_2d(rng):
    pytest.importorskip("jax")
    import jax.numpy as jnp

    for shape in ((16, 12), (4, 6, 5)):
        t = make_target("jax.numpy.sum", shape=shape)
        X = rand(rng, (2, t.n), "fp32")
        want = [float(jnp.sum(x.astype(np.float32).reshape(shape))) for x in X]
        assert same_bits(t.evaluate(X), want)
    res = reveal(make_target("jax.numpy.sum", shape=(16, 12)), replay_samples=4)
    assert res.replay["bit_exact"]


# -- errors ----------------------------------------------------------------------------------------


def test_errors_are_one_line():
    assert "1, 2 or 3 dimensions" in one_line_error(make_target, "numpy.sum", shape=(2, 2, 2, 2))
    assert "at least 1" in one_line_error(make_target, "numpy.sum", shape=(4, 0))
    assert "disagrees" in one_line_error(make_target, "numpy.sum", n=10, shape=(4, 3))
    assert "1 dimensions" in one_line_error(make_target, "numpy.dot", shape=(4, 3))
    pytest.importorskip("jax")
    assert "layout" in one_line_error(make_target, "jax.numpy.sum", shape=(4, 3), layout="F")
    assert "dimensions" in one_line_error(make_target, "jax.numpy.sum", shape=(2, 2, 2, 2))


@pytest.mark.parametrize("args", [
    ["numpy.sum", "--shape", "2x2x2x2"],
    ["numpy.sum", "--shape", "4x0"],
    ["numpy.sum", "--shape", "4x3", "--layout", "Z"],
])
def test_cli_errors_exit_2(args, capsys):
    try:
        rc = main(["reveal", *args])
    except SystemExit as exc:  # argparse refuses an unknown --layout itself
        rc = exc.code
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert err and "Traceback" not in err


def test_cli_jax_f_layout_exit_2(capsys):
    pytest.importorskip("jax")
    assert main(["reveal", "jax.numpy.sum", "--shape", "4x3", "--layout", "F"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "layout" in err[0]
