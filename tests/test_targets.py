"""Target adapters: each evaluates exactly what a direct library call gives, bit for bit."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from fpscope.formats import get_format, round_to_format, to_storage
from fpscope.targets import Target, TargetError, list_targets, make_target
from fpscope.targets._memory import placed_rows, placed_zeros
from fpscope.targets.numpy_targets import NumpySum

DTYPES = ["fp64", "fp32", "fp16", "bf16"]


def rand(rng, shape, dtype):
    """Random normal values rounded to ``dtype``, as float64."""
    return round_to_format(rng.standard_normal(shape), get_format(dtype))


def storage(x, dtype):
    return to_storage(x, get_format(dtype))


def assert_same_bits(a, b):
    a = np.ascontiguousarray(a, dtype=np.float64)
    b = np.ascontiguousarray(b, dtype=np.float64)
    assert a.shape == b.shape
    np.testing.assert_array_equal(a.view(np.uint64), b.view(np.uint64))


def one_line_error(fn, *args, **kwargs) -> str:
    with pytest.raises(TargetError) as info:
        fn(*args, **kwargs)
    msg = str(info.value)
    assert msg and "\n" not in msg
    return msg


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


# -- registry --------------------------------------------------------------------------------


def test_list_targets_names():
    names = list_targets()
    for name in ("numpy.sum", "numpy.dot", "numpy.vecmat", "numpy.matvec", "numpy.matmul",
                 "numpy.einsum", "numpy.cumsum", "numpy.add.reduce", "torch.sum", "torch.dot",
                 "torch.mv", "torch.mm", "torch.matmul", "jax.numpy.sum", "jax.numpy.dot",
                 "jax.numpy.matmul"):
        assert name in names


def test_numpy_targets_do_not_import_torch_or_jax():
    code = textwrap.dedent("""
        import sys
        from fpscope.targets import list_targets, make_target
        list_targets()
        t = make_target("numpy.sum", n=4)
        t.evaluate([[1, 2, 3, 4]])
        print(sorted(m for m in ("torch", "jax") if m in sys.modules))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_is_a_target_and_spec_is_json():
    t = make_target("numpy.matmul", shape=(2, 5, 3), dtype="bf16", layout="F", offset=8)
    assert isinstance(t, Target) and t.is_matrix
    spec = json.loads(json.dumps(t.spec()))
    assert spec["name"] == "numpy.matmul" and spec["n"] == 5
    assert (spec["M"], spec["K"], spec["N"]) == (2, 5, 3)
    assert spec["dtype"] == "bf16" and spec["out_dtype"] == "fp32"  # ml_dtypes matmul -> f32
    assert spec["layout"] == "F" and spec["offset"] == 8 and spec["threads"] is None
    for key in ("shape", "axis", "index"):
        assert key in spec


@pytest.mark.parametrize("name, kwargs", [
    ("numpy.sum", dict(n=9, layout="strided", offset=8)),
    ("numpy.cumsum", dict(n=30, index=11)),
    ("numpy.add.reduce", dict(shape=(5, 3), axis=1, index=4, dtype="fp16")),
    ("numpy.matmul", dict(shape=(2, 5, 3), layout="F")),
    ("numpy.vecmat", dict(n=6)),
    ("numpy.matvec", dict(shape=(4, 6))),
    ("numpy.einsum[k,kj->j]", dict(shape=(6, 2))),
])
def test_spec_rebuilds_the_same_target(name, kwargs):
    """A record's target spec (minus n where a shape is given) builds the same target again."""
    spec = make_target(name, **kwargs).spec()
    keys = ("shape", "dtype", "layout", "offset", "threads", "axis", "index")
    again = make_target(spec["name"], **{k: spec[k] for k in keys if spec[k] is not None})
    assert again.spec() == spec
    with_n = make_target(spec["name"], n=spec["n"],
                         **{k: spec[k] for k in keys if spec[k] is not None})
    assert with_n.spec() == spec


def test_aliases_and_context_manager():
    with make_target("np.sum", n=3, dtype="float16") as t:
        assert t.name == "numpy.sum" and t.in_format.name == "fp16"
        assert t.evaluate([[1, 2, 3]])[0] == 6


# -- numpy vector targets ------------------------------------------------------------------


VECTOR_REFS = {
    "numpy.sum": lambda x: np.sum(x),
    "numpy.dot": lambda x: np.dot(x, np.ones_like(x)),
    "numpy.einsum[i,i->]": lambda x: np.einsum("i,i->", x, np.ones_like(x)),
    "numpy.einsum[i->]": lambda x: np.einsum("i->", x),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(VECTOR_REFS))
def test_numpy_vector_targets_match_direct_call(name, dtype, rng):
    if name.startswith("numpy.einsum") and dtype == "bf16":
        assert "bf16" in one_line_error(make_target, name, n=4, dtype=dtype)
        return
    for n in (1, 7, 8, 33, 130, 1000):
        X = rand(rng, (3, n), dtype)
        t = make_target(name, n=n, dtype=dtype)
        want = [float(VECTOR_REFS[name](storage(x, dtype))) for x in X]
        assert_same_bits(t.evaluate(X), want)
        assert_same_bits(t.evaluate_each(X), want)


def test_case_c1_eight_value_sum():
    x = np.array([-462914.25, -4450888, -3546839, 7919.854, -3874966.25, -1358369.625,
                  -420256.46875, -336801.9375], dtype=np.float32).astype(np.float64)
    t = make_target("numpy.sum", n=8, dtype="fp32")
    assert t.evaluate(x[None])[0] == -14443116.0


@pytest.mark.parametrize("dtype", DTYPES)
def test_numpy_cumsum(dtype, rng):
    t = make_target("numpy.cumsum", n=50, index=20, dtype=dtype)
    assert t.n == 21 and t.spec()["shape"] == [50] and t.spec()["index"] == 20
    X = rand(rng, (3, 21), dtype)
    want = []
    for x in X:
        full = np.zeros(50, dtype=get_format(dtype).numpy_dtype())
        full[:21] = storage(x, dtype)
        want.append(float(np.cumsum(full)[20]))
    assert_same_bits(t.evaluate(X), want)
    assert make_target("numpy.cumsum", n=10, dtype=dtype).n == 10  # default: the last output


def test_numpy_cumsum_stalls_like_case_c3():
    # C3 in fp16: a scan of ones stalls at 2048 where np.sum (fp32 accumulation) does not
    ones = np.ones((1, 4096))
    assert make_target("numpy.cumsum", n=4096, dtype="fp16").evaluate(ones)[0] == 2048
    assert make_target("numpy.sum", n=4096, dtype="fp16").evaluate(ones)[0] == 4096


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("layout", ["C", "F", "strided"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_numpy_add_reduce(axis, layout, dtype, rng):
    shape = (40, 3)
    index = 2 if axis == 0 else 17
    t = make_target("numpy.add.reduce", shape=shape, axis=axis, index=index, dtype=dtype,
                    layout=layout)
    assert t.n == shape[axis]
    X = rand(rng, (3, t.n), dtype)
    want = []
    for x in X:
        A = placed_zeros(shape, get_format(dtype).numpy_dtype(), layout)
        if axis == 0:
            A[:, index] = storage(x, dtype)
        else:
            A[index, :] = storage(x, dtype)
        want.append(float(np.add.reduce(A, axis=axis)[index]))
    assert_same_bits(t.evaluate(X), want)


def test_numpy_add_reduce_case_c2_is_a_sequential_chain():
    # C2 in fp16: each output of an axis-0 reduction is a chain that stalls at 2048
    t = make_target("numpy.add.reduce", shape=(4096, 2), axis=0, index=1, dtype="fp16")
    assert t.evaluate(np.ones((1, 4096)))[0] == 2048


# -- numpy.sum batched evaluate -------------------------------------------------------------


BIG_N = (511, 1000, 1024, 4095, 4097, 8191, 8192, 8193, 16385, 65536)


@pytest.mark.parametrize("dtype", DTYPES)
def test_numpy_sum_batched_equals_per_row_bitwise(dtype, rng):
    """The finding behind NumpySum.BATCHED: np.sum(rows, axis=1) == per-row np.sum."""
    conditions = [("C", 0), ("strided", 0), ("C", 24), ("C", 3)]  # last: unaligned
    for layout, offset in conditions:
        ns = list(range(1, 301)) if (layout, offset) == ("C", 0) else [*range(1, 41), 127, 129]
        for n in [*ns, *BIG_N]:
            t = make_target("numpy.sum", n=n, dtype=dtype, layout=layout, offset=offset)
            assert t.batched == (dtype in NumpySum.BATCHED)
            X = rand(rng, (4 if n <= 300 else 2, n), dtype)
            calls = t.calls
            got = t.evaluate(X)
            if t.batched:
                assert t.calls == calls + 1  # one call for all rows
            assert_same_bits(got, t.evaluate_each(X))


def test_numpy_sum_batched_in_chunks(rng, monkeypatch):
    from fpscope.targets import numpy_targets

    monkeypatch.setattr(numpy_targets, "BATCH_BYTES", 8 << 20)
    n = 65536
    t = make_target("numpy.sum", n=n, dtype="fp32", offset=16)
    X = rand(rng, (40, n), "fp32")  # 8 MB of float64 per chunk: 16 rows, 3 chunks
    got = t.evaluate(X)
    assert t.calls == 3
    assert_same_bits(got, t.evaluate_each(X))


def test_placed_buffers_alignment_and_layout():
    for offset in (0, 3, 8, 24, 48, 64, 100):
        for layout in ("C", "F", "strided"):
            a = placed_zeros((5, 7), np.float32, layout, offset)
            assert a.ctypes.data % 64 == offset % 64 and not a.any()
            assert a.flags.f_contiguous if layout == "F" else True
            assert a.strides[-1] == (8 if layout == "strided" else 4) or layout == "F"
        rows = placed_rows(3, 10, np.float16, "strided", offset)
        assert [r.ctypes.data % 64 for r in rows] == [offset % 64] * 3
        assert rows.strides[1] == 4


@pytest.mark.parametrize("offset", [0, 8, 24, 48, 3])
def test_numpy_sum_honours_offset_and_layout_in_both_paths(offset, monkeypatch, rng):
    seen = []
    original = np.sum

    def spy(a, *args, **kwargs):
        if isinstance(a, np.ndarray) and a.dtype == np.float32:
            rows = a if a.ndim == 2 else a[None]
            seen.extend((r.ctypes.data % 64, r.strides) for r in rows)
        return original(a, *args, **kwargs)

    t = make_target("numpy.sum", n=20, dtype="fp32", layout="strided", offset=offset)
    monkeypatch.setattr(np, "sum", spy)
    X = rand(rng, (3, 20), "fp32")
    t.evaluate(X)
    t.evaluate_each(X)
    assert len(seen) >= 6
    assert all(s == (offset % 64, (8,)) for s in seen)


@pytest.mark.parametrize("offset", [0, 24])
def test_matmul_honours_offset_and_f_layout(offset, monkeypatch, rng):
    seen = []
    original = np.matmul

    def spy(a, b, *args, **kwargs):
        seen.append((a.ctypes.data % 64, b.ctypes.data % 64,
                     a.flags.f_contiguous, b.flags.f_contiguous))
        return original(a, b, *args, **kwargs)

    t = make_target("numpy.matmul", shape=(4, 6, 5), layout="F", offset=offset)
    monkeypatch.setattr(np, "matmul", spy)
    t.evaluate(rand(rng, (2, 6), "fp32"))
    t.evaluate_outer(rand(rng, (4, 6), "fp32"), rand(rng, (6, 5), "fp32"))
    assert seen == [(offset, offset, True, True)] * 3


# -- numpy matrix targets ---------------------------------------------------------------------


MATRIX_CASES = {
    "numpy.matmul": ((3, 17, 4), lambda A, B: np.matmul(A, B)),
    "numpy.vecmat": ((17, 4), lambda A, B: np.vecmat(A[0], B)[None, :]),
    "numpy.matvec": ((3, 17), lambda A, B: np.matvec(A, B[:, 0])[:, None]),
    "numpy.einsum[ij,jk->ik]": ((3, 17, 4), lambda A, B: np.einsum("ij,jk->ik", A, B)),
    "numpy.einsum[ij,kj->ki]": (
        (3, 17, 4), lambda A, B: np.einsum("ij,kj->ki", A, np.ascontiguousarray(B.T)).T
    ),
    "numpy.einsum[k,kj->j]": ((17, 4), lambda A, B: np.einsum("k,kj->j", A[0], B)[None, :]),
}


def check_matrix_target(t, direct, dtype, rng):
    """evaluate and evaluate_outer against direct calls on operands built the same way."""
    st = get_format(dtype).numpy_dtype()
    M, K, N = t.M, t.K, t.N
    assert t.max_rows == M and t.max_cols == N and t.n == K
    for R, C in {(M, N), (1, 1), (max(1, M - 1), max(1, N - 1))}:
        P, Q = rand(rng, (R, K), dtype), rand(rng, (K, C), dtype)
        A = np.zeros((M, K), st)
        A[:R] = storage(P, dtype)
        B = np.zeros((K, N), st)
        B[:, :C] = storage(Q, dtype)
        want = np.asarray(direct(A, B)).astype(np.float64)[:R, :C]
        calls = t.calls
        assert_same_bits(t.evaluate_outer(P, Q), want)
        assert t.calls == calls + 1
    X = rand(rng, (3, K), dtype)
    want = []
    for x in X:
        A = np.zeros((M, K), st)
        A[0] = storage(x, dtype)
        want.append(float(np.asarray(direct(A, np.ones((K, N), st)))[0, 0]))
    assert_same_bits(t.evaluate(X), want)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(MATRIX_CASES))
def test_numpy_matrix_targets(name, dtype, rng):
    shape, direct = MATRIX_CASES[name]
    if name.startswith("numpy.einsum") and dtype == "bf16":
        assert "bf16" in one_line_error(make_target, name, shape=shape, dtype=dtype)
        return
    t = make_target(name, shape=shape, dtype=dtype)
    assert t.is_matrix
    check_matrix_target(t, direct, dtype, rng)


def test_matrix_shapes_from_n():
    t = make_target("numpy.matmul", n=6)
    assert (t.M, t.K, t.N) == (6, 6, 6)
    t = make_target("numpy.vecmat", n=6)
    assert (t.M, t.K, t.N, t.max_rows) == (1, 6, 6, 1)
    t = make_target("numpy.matvec", n=6)
    assert (t.M, t.K, t.N, t.max_cols) == (6, 6, 1, 1)
    t = make_target("numpy.matmul", n=5, shape=(2, 5, 3))
    assert (t.M, t.K, t.N) == (2, 5, 3)


def test_matrix_layouts_strided(rng):
    t = make_target("numpy.matmul", shape=(3, 9, 2), layout="strided", offset=4)
    check_matrix_target(t, lambda A, B: np.matmul(
        np.ascontiguousarray(np.repeat(A, 2, axis=1))[:, ::2],
        np.ascontiguousarray(np.repeat(B, 2, axis=1))[:, ::2]), "fp32", rng)


def test_evaluate_outer_errors(rng):
    t = make_target("numpy.matmul", shape=(2, 4, 3))
    one_line_error(t.evaluate_outer, np.ones((3, 4)), np.ones((4, 3)))  # R > M
    one_line_error(t.evaluate_outer, np.ones((2, 4)), np.ones((4, 4)))  # C > N
    one_line_error(t.evaluate_outer, np.ones((2, 5)), np.ones((4, 3)))  # K
    one_line_error(make_target("numpy.sum", n=4).evaluate_outer, np.ones((1, 4)), np.ones((4, 1)))
    with pytest.raises((ValueError, TargetError)):
        t.evaluate_outer(np.full((1, 4), 0.1), np.ones((4, 1)))  # not representable in fp32


# -- threads ---------------------------------------------------------------------------------


def test_numpy_threads_limited_for_lifetime():
    threadpoolctl = pytest.importorskip("threadpoolctl")

    def blas_threads():
        info = threadpoolctl.threadpool_info()
        return [i["num_threads"] for i in info if i["user_api"] == "blas"]

    before = blas_threads()
    if not before:
        pytest.skip("no BLAS library visible to threadpoolctl")
    t = make_target("numpy.matmul", n=8, threads=1)
    assert blas_threads() == [1] * len(before)
    assert t.spec()["threads"] == 1
    t.close()
    t.close()
    assert blas_threads() == before


# -- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize("call, fragment", [
    (lambda: make_target("numpy.summ", n=4), "did you mean 'numpy.sum'"),
    (lambda: make_target("nothing", n=4), "unknown target"),
    (lambda: make_target("numpy.sum", n=4, dtype="fp8"), "unknown format"),
    (lambda: make_target("numpy.sum", n=0), "at least 1"),
    (lambda: make_target("numpy.sum", n=-3), "at least 1"),
    (lambda: make_target("numpy.sum", n=2.5), "integer"),
    (lambda: make_target("numpy.sum"), "needs n"),
    (lambda: make_target("numpy.sum", n=4, shape=(5,)), "disagrees"),
    (lambda: make_target("numpy.sum", n=4, axis=0), "does not take axis"),
    (lambda: make_target("numpy.sum", n=4, layout="Z"), "unknown layout"),
    (lambda: make_target("numpy.sum", n=4, offset=-1), "offset"),
    (lambda: make_target("numpy.sum", n=4, threads=0), "threads"),
    (lambda: make_target("numpy.sum", n=4, device="cuda"), "CPU only"),
    (lambda: make_target("numpy.matmul", shape=(2, 3)), "3 dimensions"),
    (lambda: make_target("numpy.matmul", shape=(2, 0, 3)), "at least 1"),
    (lambda: make_target("numpy.matmul", n=4, shape=(2, 3, 3)), "disagrees"),
    (lambda: make_target("numpy.vecmat", shape=(2, 3, 4)), "M must be 1"),
    (lambda: make_target("numpy.matvec", shape=(2, 3, 4)), "N must be 1"),
    (lambda: make_target("numpy.add.reduce", shape=(3, 4), axis=2), "axis"),
    (lambda: make_target("numpy.add.reduce", shape=(3, 4), index=4), "index"),
    (lambda: make_target("numpy.add.reduce"), "needs shape"),
    (lambda: make_target("numpy.cumsum", n=4, index=4), "index"),
    (lambda: make_target("numpy.einsum[ij,jk->ijk]", n=4), "batch"),
    (lambda: make_target("numpy.einsum[ij,kl->ik]", n=4), "exactly one"),
    (lambda: make_target("numpy.einsum[ii->]", n=4), "repeat"),
    (lambda: make_target("numpy.einsum[...i,i->]", n=4), "ellipsis"),
    (lambda: make_target("numpy.sum[i->]", n=4), "only numpy.einsum"),
])
def test_errors_are_one_line(call, fragment):
    assert fragment in one_line_error(call)


def test_bad_probe_shape_is_target_error():
    t = make_target("numpy.sum", n=4)
    one_line_error(t.evaluate, np.ones((2, 5)))
    one_line_error(t.evaluate, np.ones(4))


@pytest.mark.parametrize("lib, target", [("torch", "torch.sum"), ("jax", "jax.numpy.sum")])
def test_missing_optional_library(lib, target, monkeypatch):
    monkeypatch.setitem(sys.modules, lib, None)  # makes "import lib" fail like a missing package
    msg = one_line_error(make_target, target, n=4)
    assert msg == f"{lib} is not installed; pip install fpscope[{lib}]"


# -- callables -------------------------------------------------------------------------------


USER_MODULE = '''
import numpy as np

SEEN = []
NOT_CALLABLE = 3


def total(x):
    SEEN.append((x.ctypes.data % 64, x.strides, x.dtype.name))
    return np.sum(x)


def as_array(x):
    return np.array([np.add.reduce(x)])


def boom(x):
    raise ValueError("bad input\\nsecond line")


def vector(x):
    return x


def text(x):
    return "abc"


class Ops:
    @staticmethod
    def first(x):
        return x[0]
'''


@pytest.fixture(scope="module")
def user_module(tmp_path_factory):
    path = tmp_path_factory.mktemp("user") / "fpscope_test_userops.py"
    path.write_text(USER_MODULE)
    sys.path.insert(0, str(path.parent))
    yield path
    sys.path.remove(str(path.parent))
    sys.modules.pop("fpscope_test_userops", None)


@pytest.mark.parametrize("dtype", DTYPES)
def test_callable_by_module_and_file(user_module, dtype, rng):
    X = rand(rng, (3, 11), dtype)
    want = [float(np.sum(storage(x, dtype))) for x in X]
    for name in ("fpscope_test_userops:total", f"{user_module}:total"):
        t = make_target(name, n=11, dtype=dtype)
        assert t.name == name
        assert_same_bits(t.evaluate(X), want)
    t = make_target("fpscope_test_userops:as_array", n=11, dtype=dtype)
    assert_same_bits(t.evaluate(X), [float(np.add.reduce(storage(x, dtype))) for x in X])
    t = make_target("fpscope_test_userops:Ops.first", n=11, dtype=dtype)
    assert_same_bits(t.evaluate(X), X[:, 0])


def test_callable_placement(user_module):
    import fpscope_test_userops as mod

    t = make_target("fpscope_test_userops:total", n=5, dtype="fp64", layout="strided", offset=24)
    mod.SEEN.clear()  # the target called it once already, to learn its output format
    t.evaluate(np.ones((2, 5)))
    assert mod.SEEN == [(24, (16,), "float64")] * 2


@pytest.mark.parametrize("name, fragment", [
    ("fpscope_test_userops:boom", "raised ValueError: bad input"),
    ("fpscope_test_userops:vector", "not a scalar"),
    ("fpscope_test_userops:text", "not a number"),
])
def test_callable_bad_results(user_module, name, fragment):
    # the first call happens when the target is made (it learns the output format there)
    assert fragment in one_line_error(make_target, name, n=3)


def test_callable_load_errors(user_module, tmp_path):
    bad = tmp_path / "broken.py"
    bad.write_text("raise RuntimeError('broken at import')\n")
    cases = {
        "no_such_package_xyz.mod:f": "cannot import",
        "fpscope_test_userops:missing": "has no attribute",
        "fpscope_test_userops:NOT_CALLABLE": "not a callable",
        f"{tmp_path}/absent.py:f": "no such file",
        f"{bad}:f": "broken at import",
        ":f": "bad callable",
        "fpscope_test_userops:": "bad callable",
    }
    for name, fragment in cases.items():
        assert fragment in one_line_error(make_target, name, n=3)
    assert "needs n" in one_line_error(make_target, "fpscope_test_userops:total")


# -- torch -----------------------------------------------------------------------------------


def torch_tensor(torch, x, dtype):
    """A CPU tensor of x (float64 values representable in dtype), converted exactly."""
    if dtype == "fp64":
        return torch.from_numpy(np.array(x, dtype=np.float64))
    tdt = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
    return torch.from_numpy(np.array(x, dtype=np.float32)).to(tdt)


@pytest.mark.parametrize("dtype", DTYPES)
def test_torch_vector_targets(dtype, rng):
    torch = pytest.importorskip("torch")
    for name, fn in (("torch.sum", torch.sum),
                     ("torch.dot", lambda x: torch.dot(x, torch.ones_like(x)))):
        for n in (1, 9, 100, 1000):
            t = make_target(name, n=n, dtype=dtype)
            assert t.spec()["device"] == "cpu"
            X = rand(rng, (3, n), dtype)
            want = [float(fn(torch_tensor(torch, x, dtype)).double()) for x in X]
            assert_same_bits(t.evaluate(X), want)


@pytest.mark.parametrize("dtype", DTYPES)
def test_torch_matrix_targets(dtype, rng):
    torch = pytest.importorskip("torch")

    def run(fn):
        def direct(A, B):
            a = torch_tensor(torch, A.astype(np.float64), dtype)
            b = torch_tensor(torch, B.astype(np.float64), dtype)
            return fn(a, b).double().numpy()
        return direct

    cases = [("torch.mm", (3, 17, 4), run(torch.mm)),
             ("torch.matmul", (3, 17, 4), run(torch.matmul)),
             ("torch.mv", (3, 17), run(lambda a, b: torch.mv(a, b[:, 0])[:, None]))]
    for name, shape, direct in cases:
        t = make_target(name, shape=shape, dtype=dtype)
        check_matrix_target(t, direct, dtype, rng)


def test_torch_threads_layout_offset(monkeypatch, rng):
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    seen = []
    original = torch.sum

    def spy(x, *args, **kwargs):
        seen.append((x.data_ptr() % 64, x.stride()))
        return original(x, *args, **kwargs)

    monkeypatch.setattr(torch, "sum", spy)
    t = make_target("torch.sum", n=10, dtype="bf16", layout="strided", offset=6, threads=1)
    assert torch.get_num_threads() == 1
    X = rand(rng, (2, 10), "bf16")
    want = []
    for x in X:
        wide = np.zeros(20)
        wide[::2] = x
        want.append(float(original(torch_tensor(torch, wide, "bf16")[::2]).double()))
    assert_same_bits(t.evaluate(X), want)
    assert seen[-2:] == [(6, (2,))] * 2
    t.close()
    assert torch.get_num_threads() == before
    assert "multiple of the item size" in one_line_error(make_target, "torch.sum", n=4, offset=3)
    assert "device" in one_line_error(make_target, "torch.sum", n=4, device="tpu")


def test_callable_returning_torch_bf16(tmp_path):
    pytest.importorskip("torch")
    path = tmp_path / "tops.py"
    path.write_text("import torch\n"
                    "def f(x):\n"
                    "    return torch.from_numpy(x.astype('float32')).to(torch.bfloat16).sum()\n")
    t = make_target(f"{path}:f", n=4, dtype="bf16")
    assert t.evaluate([[1, 2, 3, 4.5]])[0] == 10.5


# -- jax -------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_jax_targets(dtype, rng):
    pytest.importorskip("jax")
    import jax.numpy as jnp

    for name, fn in (("jax.numpy.sum", jnp.sum),
                     ("jax.numpy.dot", lambda x: jnp.dot(x, jnp.ones_like(x)))):
        for n in (1, 9, 100, 1000):
            t = make_target(name, n=n, dtype=dtype)
            X = rand(rng, (2, n), dtype)
            want = [float(np.asarray(fn(storage(x, dtype))).astype(np.float64)) for x in X]
            assert_same_bits(t.evaluate(X), want)

    def direct(A, B):
        return np.asarray(jnp.matmul(A, B)).astype(np.float64)

    t = make_target("jax.numpy.matmul", shape=(3, 17, 4), dtype=dtype)
    check_matrix_target(t, direct, dtype, rng)
    if dtype == "fp64":
        import jax

        assert jax.config.jax_enable_x64
        assert t.out_format.name == "fp64"


def test_jax_refuses_threads_layout_offset():
    pytest.importorskip("jax")
    assert "XLA_FLAGS" in one_line_error(make_target, "jax.numpy.sum", n=4, threads=1)
    assert "layout" in one_line_error(make_target, "jax.numpy.sum", n=4, layout="F")
    assert "offset" in one_line_error(make_target, "jax.numpy.dot", n=4, offset=8)
    assert "cpu" in one_line_error(make_target, "jax.numpy.matmul", n=4, device="gpu")


@pytest.mark.parametrize("dtype", ["tf32", "fp8_e4m3fn", "e8m0"])
@pytest.mark.parametrize("name", ["numpy.sum", "torch.sum"])
def test_narrow_formats_are_refused_by_library_targets(name, dtype):
    if name.startswith("torch"):
        pytest.importorskip("torch")
    assert "not supported here" in one_line_error(make_target, name, n=8, dtype=dtype)
