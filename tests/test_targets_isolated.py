"""ChildTarget: a target run in a child process with its own environment variables."""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from fpscope.formats import get_format
from fpscope.targets import Target, TargetError, make_target
from fpscope.targets.isolated import ChildTarget

MARK = {"FPSCOPE_TEST_MARK": "1"}  # sets nothing that changes a kernel


def fp32_normals(rng, shape) -> np.ndarray:
    """Random normals rounded to fp32 (numpy's float64 -> float32 cast rounds correctly)."""
    return rng.standard_normal(shape).astype(np.float32).astype(np.float64)


def same_bits(a, b) -> bool:
    a = np.ascontiguousarray(a, dtype=np.float64)
    b = np.ascontiguousarray(b, dtype=np.float64)
    return a.shape == b.shape and bool(np.all(a.view(np.uint64) == b.view(np.uint64)))


def one_line_error(fn, *args, **kwargs) -> str:
    with pytest.raises(TargetError) as info:
        fn(*args, **kwargs)
    msg = str(info.value)
    assert msg and "\n" not in msg
    return msg


@pytest.fixture
def rng():
    return np.random.default_rng(20240611)


@pytest.fixture
def user_file(tmp_path):
    """Write a module of user callables; returns a function name -> "path.py:name"."""
    path = tmp_path / "user_ops.py"
    path.write_text(textwrap.dedent("""
        import os
        import numpy as np

        def env_len_plus_sum(x):
            return np.float64(len(os.environ.get("FPSCOPE_TEST_VALUE", ""))) + np.sum(x)

        def raises_on_positive(x):
            if np.sum(x) > 0:
                raise ZeroDivisionError("positive input")
            return np.sum(x)

        def prints_then_sums(x):
            print("library chatter on stdout")
            return np.sum(x)

        def dies(x):
            if np.sum(x) > 0:
                os._exit(7)
            return np.sum(x)
    """))
    return lambda fn: f"{path}:{fn}"


# -- bit-identical forwarding -------------------------------------------------------------------


def test_sum_is_bit_identical_to_in_process(rng):
    X = fp32_normals(rng, (64, 100))
    with make_target("numpy.sum", n=100, dtype="fp32") as local, \
            ChildTarget("numpy.sum", MARK, n=100, dtype="fp32") as child:
        assert isinstance(child, Target)
        assert (child.name, child.n, child.shape) == ("numpy.sum", 100, (100,))
        assert child.in_format == get_format("fp32") == child.out_format
        assert not child.is_matrix and not child.has_products
        assert same_bits(child.evaluate(X), local.evaluate(X))
        assert same_bits(child.evaluate_each(X), local.evaluate_each(X))
        out = child.evaluate(X)
        assert out.dtype == np.float64 and out.shape == (64,)
        # inputs in the storage dtype, and input_buffer / as_storage stay local
        buf = child.input_buffer(3)
        buf[...] = X[:3]
        assert same_bits(child.evaluate(buf), local.evaluate(X[:3]))
        assert child.as_storage(X).dtype == np.float32


def test_matmul_evaluate_outer_is_bit_identical(rng):
    P, Q = fp32_normals(rng, (4, 64)), fp32_normals(rng, (64, 3))
    with make_target("numpy.matmul", shape=(4, 64, 3)) as local, \
            make_target("numpy.matmul", shape=(4, 64, 3), env=MARK) as child:
        assert isinstance(child, ChildTarget)
        assert child.is_matrix and child.has_products
        assert (child.max_rows, child.max_cols) == (4, 3)
        assert (child.M, child.K, child.N) == (4, 64, 3)
        got = child.evaluate_outer(P, Q)
        assert got.shape == (4, 3)
        assert same_bits(got, local.evaluate_outer(P, Q))
        assert same_bits(child.evaluate_outer(P[:2], Q[:, :1]), local.evaluate_outer(P[:2], Q[:, :1]))


def test_dot_evaluate_products_is_bit_identical(rng):
    A, B = fp32_normals(rng, (50, 1000)), fp32_normals(rng, (50, 1000))
    with make_target("numpy.dot", n=1000) as local, \
            make_target("numpy.dot", n=1000, env=MARK) as child:
        assert same_bits(child.evaluate_products(A, B), local.evaluate_products(A, B))


def test_spec_calls_and_make_target_routing(rng):
    assert not isinstance(make_target("numpy.sum", n=8, env={}), ChildTarget)
    assert not isinstance(make_target("numpy.sum", n=8, env=None), ChildTarget)
    env = {"FPSCOPE_TEST_MARK": "1", "FPSCOPE_TEST_GONE": None}
    with make_target("numpy.dot", n=16, layout="strided", offset=4, env=env) as child, \
            make_target("numpy.dot", n=16, layout="strided", offset=4) as local:
        spec = json.loads(json.dumps(child.spec()))
        assert spec == {**local.spec(), "env": env}
        assert child.layout == "strided" and child.offset == 4
        assert child.calls == 0
        child.evaluate(fp32_normals(rng, (5, 16)))
        assert child.calls == 5
        child.evaluate_each(fp32_normals(rng, (3, 16)))
        child.evaluate_products(fp32_normals(rng, (2, 16)), fp32_normals(rng, (2, 16)))
        assert child.calls == 10
        child.close()
        assert child.calls == 10
        assert child.spec()["env"] == env  # still described after close


def test_environment_reaches_the_child(user_file, monkeypatch):
    monkeypatch.delenv("FPSCOPE_TEST_VALUE", raising=False)
    name = user_file("env_len_plus_sum")
    X = np.array([[1.0, 2.0, 3.0, 4.0], [0.5, -0.25, 0.0, 8.0]])
    with make_target(name, n=4, dtype="fp64") as local, \
            make_target(name, n=4, dtype="fp64", env={"FPSCOPE_TEST_VALUE": "abc"}) as child:
        np.testing.assert_array_equal(child.evaluate(X) - local.evaluate(X), [3.0, 3.0])
    # None removes a variable the parent has
    monkeypatch.setenv("FPSCOPE_TEST_VALUE", "abcdef")
    with ChildTarget(name, {"FPSCOPE_TEST_VALUE": None}, n=4, dtype="fp64") as child:
        np.testing.assert_array_equal(child.evaluate(X), [10.0, 8.25])


def test_child_stdout_does_not_corrupt_the_protocol(user_file, capfd):
    with ChildTarget(user_file("prints_then_sums"), MARK, n=3, dtype="fp64") as child:
        np.testing.assert_array_equal(child.evaluate([[1, 2, 3], [4, 5, 6]]), [6.0, 15.0])
    assert "library chatter on stdout" in capfd.readouterr().err


# -- OpenBLAS kernels chosen by the environment -------------------------------------------------


def _numpy_blas() -> str | None:
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return None
    for lib in threadpool_info():
        if lib.get("user_api") == "blas":
            return lib.get("internal_api")
    return None


def test_openblas_coretype_changes_the_kernel(rng):
    blas = _numpy_blas()
    if blas != "openblas":
        pytest.skip(f"numpy's BLAS is {blas or 'unknown (threadpoolctl found none)'}, "
                    "not OpenBLAS: OPENBLAS_CORETYPE selects nothing")
    A, B = fp32_normals(rng, (200, 1000)), fp32_normals(rng, (200, 1000))
    outs = {}
    for core in ("Haswell", "Sandybridge"):
        with make_target("numpy.dot", n=1000, dtype="fp32", env={"OPENBLAS_CORETYPE": core}) as t:
            outs[core] = t.evaluate_products(A, B)
    differ = int(np.sum(outs["Haswell"].view(np.uint64) != outs["Sandybridge"].view(np.uint64)))
    assert differ >= 1, "Haswell and Sandybridge sdot kernels gave the same bits on 200 pairs"


def test_an_openblas_coretype_that_did_not_take_is_reported():
    """OpenBLAS ignores a core name it does not know (and falls back silently): the child
    reports the kernels it runs, and the reveal says the variable did not take."""
    if _numpy_blas() != "openblas":
        pytest.skip("numpy's BLAS is not OpenBLAS")
    import platform

    if platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip("Sandybridge kernels exist on x86-64 only")
    with make_target("numpy.dot", n=64, env={"OPENBLAS_CORETYPE": "NoSuchCore"}) as t:
        said = t.checks()["env_applied"]
        runs = [b["architecture"] for b in t.blas if b["internal_api"] == "openblas"]
    assert said.startswith("no: OPENBLAS_CORETYPE=NoSuchCore did not take: the child's "
                           "OpenBLAS runs its ") and runs and runs[0] in said
    with make_target("numpy.dot", n=64, env={"OPENBLAS_CORETYPE": "Sandybridge"}) as t:
        assert t.checks() == {"env_applied": "ok"}
    with make_target("numpy.sum", n=64, env={"OMP_NUM_THREADS": "1"}) as t:
        assert t.checks() == {}  # no OPENBLAS_CORETYPE asked


def test_the_reveal_text_notes_an_env_that_did_not_take(capsys):
    if _numpy_blas() != "openblas":
        pytest.skip("numpy's BLAS is not OpenBLAS")
    from fpscope.cli import main

    assert main(["reveal", "numpy.dot", "--n", "64", "--samples", "4", "--env",
                 "OPENBLAS_CORETYPE=NoSuchCore"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "note: OPENBLAS_CORETYPE=NoSuchCore did not take: the child's OpenBLAS runs its" in out


# -- errors -------------------------------------------------------------------------------------


def test_unknown_target_is_one_line():
    msg = one_line_error(ChildTarget, "numpy.summ", MARK, n=4)
    assert "unknown target 'numpy.summ'" in msg


def test_callable_that_raises_names_the_exception(user_file):
    with ChildTarget(user_file("raises_on_positive"), MARK, n=2, dtype="fp64") as child:
        np.testing.assert_array_equal(child.evaluate([[-1.0, -2.0]]), [-3.0])
        msg = one_line_error(child.evaluate, [[1.0, 2.0]])
        assert "ZeroDivisionError" in msg and "positive input" in msg
        # the child is still usable after an error of the op
        np.testing.assert_array_equal(child.evaluate([[-1.0, 0.5]]), [-0.5])
        # errors of the probe interface come back as they are
        assert "shape" in one_line_error(child.evaluate, [[1.0, 2.0, 3.0]])
        assert "not a matrix operation" in one_line_error(child.evaluate_outer, [[1.0]], [[1.0]])


def test_killed_child_is_reported(rng):
    child = ChildTarget("numpy.sum", MARK, n=8)
    os.kill(child.pid, signal.SIGKILL)
    msg = one_line_error(child.evaluate, fp32_normals(rng, (2, 8)))
    assert "exited" in msg and "numpy.sum" in msg and "SIGKILL" in msg
    assert "exited" in one_line_error(child.evaluate, fp32_normals(rng, (2, 8)))  # stays so
    child.close()
    child.close()


def test_child_that_exits_is_reported(user_file):
    child = ChildTarget(user_file("dies"), MARK, n=2, dtype="fp64")
    assert "exited with status 7" in one_line_error(child.evaluate, [[1.0, 1.0]])
    child.close()


def test_child_that_cannot_start_is_reported():
    # a Python that cannot find its standard library dies at start-up, before the protocol
    msg = one_line_error(ChildTarget, "numpy.sum", {"PYTHONHOME": "/nonexistent"}, n=4)
    assert "the child process running numpy.sum exited with status 1" in msg
    assert "last line of its stderr: " in msg  # "ModuleNotFoundError: No module named ..."


@pytest.mark.parametrize("env", [
    ["OPENBLAS_CORETYPE=Haswell"],
    "OPENBLAS_CORETYPE=Haswell",
    {"": "1"},
    {"A=B": "1"},
    {1: "1"},
    {"OPENBLAS_CORETYPE": 1},
    {"OPENBLAS_CORETYPE": b"Haswell"},
])
def test_bad_env_is_refused_before_starting(env, monkeypatch):
    import fpscope.targets.isolated as iso

    def no_child(*a, **k):
        raise AssertionError("a child was started")

    monkeypatch.setattr(iso.subprocess, "Popen", no_child)
    one_line_error(make_target, "numpy.sum", n=4, env=env)
    one_line_error(ChildTarget, "numpy.sum", env, n=4)


def test_unknown_condition_is_refused():
    assert "unknown condition" in one_line_error(ChildTarget, "numpy.sum", MARK, n=4, colour=1)


def test_close_twice_and_the_child_is_gone():
    child = ChildTarget("numpy.sum", MARK, n=4)
    proc = child._child.proc
    assert proc.poll() is None and child.returncode is None
    child.close()
    assert proc.poll() == 0 and child.returncode == 0
    child.close()
    with pytest.raises(ProcessLookupError):
        os.kill(child.pid, 0)
    msg = one_line_error(child.evaluate, [[1, 2, 3, 4]])
    assert "closed" in msg


def test_garbage_collection_ends_the_child():
    child = ChildTarget("numpy.sum", MARK, n=4)
    proc = child._child.proc
    del child
    gc.collect()
    assert proc.poll() is not None


def test_interpreter_exit_ends_the_child():
    code = textwrap.dedent("""
        from fpscope.targets.isolated import ChildTarget
        t = ChildTarget("numpy.sum", {"FPSCOPE_TEST_MARK": "1"}, n=4)
        print(t.pid, flush=True)
        import fpscope.targets.isolated as iso
        iso._keep = t  # alive until exit
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True)
    pid = int(out.stdout.split()[0])
    # the finalizer reaped the child before the interpreter exited: its pid is gone (or, rarely,
    # reused by an unrelated process)
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            assert b"fpscope.targets._child" not in f.read()
    except (FileNotFoundError, ProcessLookupError):
        pass
