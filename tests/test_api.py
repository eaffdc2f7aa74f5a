"""The Python API at the package top (fpscope.api): names, targets as function objects, results,
and that each function agrees with the layer it wraps."""

import json

import numpy as np
import pytest

import fpscope
from families import kahan_sum as kahan


def reversed_sum(x):
    """A sequential sum from the last element down: a tree numpy.sum does not use."""
    acc = np.float32(0)
    for v in x[::-1]:
        acc = np.float32(acc + v)
    return acc


def local_reversed_sum():
    """reversed_sum as a nested function: no module attribute names it (in-process only)."""
    def reversed_local(x):
        return reversed_sum(x)

    return reversed_local


def test_top_level_names_are_the_api():
    for name in ("reveal", "verify", "probe", "fit", "diff", "gate", "load_record",
                 "load_profile", "make_target", "batched", "emulate", "Revelation"):
        assert name in dir(fpscope)
        assert getattr(fpscope, name) is not None
    # importing the modules of the same names does not replace the functions
    from fpscope.diff import DiffError  # noqa: F401
    from fpscope.gate import GateError  # noqa: F401
    from fpscope.reveal import RevealError  # noqa: F401

    for name in ("reveal", "verify", "fit", "diff", "gate"):
        assert callable(getattr(fpscope, name)) and not isinstance(getattr(fpscope, name), type(fpscope))
    assert fpscope.RevealError is RevealError
    # ... and the names still read the modules: attributes, submodules, `import ... as`
    import importlib

    import fpscope.gate as g

    importlib.import_module("fpscope.reveal.checks")

    assert g.GateError is GateError and fpscope.diff.DiffError is DiffError
    assert fpscope.reveal.checks is importlib.import_module("fpscope.reveal.checks")
    assert "target_from_record" in dir(fpscope.gate)
    mod = importlib.import_module("fpscope.gate")
    fpscope.gate.some_setting = 7  # set on the module (monkeypatch through the name works)
    try:
        assert mod.some_setting == 7
    finally:
        del fpscope.gate.some_setting
    assert not hasattr(mod, "some_setting")
    import inspect

    assert "samples" in inspect.signature(fpscope.reveal).parameters
    assert fpscope.reveal.__doc__.startswith("Reveal the summation tree")
    with pytest.raises(AttributeError):
        fpscope.no_such_name


def test_reveal_by_name_matches_numpy_and_replays():
    r = fpscope.reveal("numpy.sum", n=256)
    assert isinstance(r, fpscope.Revelation)
    assert r.tree.n == 256 and r.bit_exact is True
    assert r.summary == r.record["summary"] and "256 terms" in r.summary
    assert r.record["target"]["name"] == "numpy.sum"
    x = np.random.default_rng(0).standard_normal((5, 256)).astype(np.float32)
    got = r.replay(x)
    want = np.sum(x, axis=1)
    assert got.shape == (5,)
    assert np.array_equal(got.astype(np.float32).view(np.uint32), want.view(np.uint32))
    assert r.replay(x[0]).shape == ()
    with pytest.raises(ValueError, match="n = 256"):
        r.replay(x[:, :10])
    with pytest.raises(ValueError, match="adds summands"):
        r.replay(a=x, b=x)
    assert "numpy.sum" in r.text() and "replay" in r.text()


def test_reveal_function_object_lambda_and_bound_method():
    r = fpscope.reveal(reversed_sum, n=32, samples=4)
    assert r.record["target"]["name"].endswith(":reversed_sum")
    # a sequential chain from x31 down: x31 and x30 meet first, x0 joins last
    from fpscope.reveal import lca_sizes_of_tree

    sizes = lca_sizes_of_tree(r.tree, np.array([[31, 30], [30, 29], [1, 0], [5, 4]]))
    assert sizes.tolist() == [2, 3, 32, 28]
    lam = fpscope.reveal(lambda x: np.sum(x), n=64, samples=4)
    assert lam.record["target"]["in_process"] is True
    assert fpscope.diff(lam, fpscope.reveal("numpy.sum", n=64, samples=4)).same

    class Op:
        def __call__(self, x):
            return np.sum(x)

        def method(self, x):
            return np.sum(x)

    assert fpscope.reveal(Op().method, n=16, samples=2).tree.n == 16
    assert fpscope.reveal(Op(), n=16, samples=2).tree.n == 16


def test_make_target_takes_functions_and_refuses_env_for_them():
    t = fpscope.make_target(local_reversed_sum(), n=8)
    try:
        assert t.n == 8 and t.spec()["in_process"] is True
        assert t.name.endswith("local_reversed_sum.<locals>.reversed_local")
    finally:
        t.close()
    with pytest.raises(fpscope.TargetError, match="child process"):
        fpscope.make_target(reversed_sum, n=8, env={"OMP_NUM_THREADS": "1"})
    # an importable module function gets a spec that loads again (no in_process flag)
    for fn, name in ((np.sum, "numpy:sum"), (reversed_sum, __name__ + ":reversed_sum")):
        t = fpscope.make_target(fn, n=8)
        try:
            assert t.name == name and "in_process" not in t.spec()
        finally:
            t.close()


def test_verify_and_gate_take_paths_dicts_and_revelations(tmp_path):
    r = fpscope.reveal("numpy.sum", n=128, samples=4)
    path = r.save(tmp_path / "sum.json")
    from fpscope.record import RecordError

    with pytest.raises(RecordError, match="exists"):
        r.save(path)
    rec = fpscope.load_record(path)
    assert rec["tree"] == json.loads(json.dumps(r.record["tree"]))
    for src in (path, str(path), rec, r):
        rep = fpscope.verify(src, samples=8)
        assert rep["bit_exact"] and rep["target"] == "numpy.sum" and rep["n"] == 128
    # the wrong live op: verify says so
    bad = fpscope.verify(r, target=reversed_sum, samples=8)
    assert not bad["bit_exact"]
    g = fpscope.gate(r)
    assert g.passed
    g = fpscope.gate(r, target=reversed_sum)
    assert not g.passed and "tree" in g.reason


def test_function_records_need_the_function_again():
    fn = local_reversed_sum()
    r = fpscope.reveal(fn, n=16, samples=2)
    assert r.verify(samples=4)["bit_exact"]  # the Revelation keeps the function
    with pytest.raises(ValueError, match="Python function object"):
        fpscope.verify(r.record, samples=4)
    assert fpscope.verify(r.record, target=fn, samples=4)["bit_exact"]
    assert fpscope.gate(r).passed
    with pytest.raises(ValueError, match="Python function object"):
        fpscope.gate(r.record)


def test_check_false_returns_the_failed_replay():
    with pytest.raises(fpscope.RevealError):
        fpscope.reveal(kahan, n=64, samples=8)
    r = fpscope.reveal(kahan, n=64, samples=8, check=False)
    assert r.failure is not None and r.failure.kind == "replay"
    assert r.bit_exact is False


def test_products_replay_and_output_classes():
    r = fpscope.reveal("numpy.dot", n=64, samples=4)
    rng = np.random.default_rng(3)
    a = rng.standard_normal((4, 64)).astype(np.float32)
    b = rng.standard_normal((4, 64)).astype(np.float32)
    want = np.array([np.dot(a[i], b[i]) for i in range(4)], dtype=np.float32)
    got = r.replay(a=a, b=b).astype(np.float32)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    with pytest.raises(ValueError, match="multiplies"):
        r.replay(a)
    with pytest.raises(ValueError, match="position is not needed"):
        r.replay(a=a, b=b, position=(0, 1))


def test_diff_takes_every_kind_of_operand(tmp_path):
    from fpscope.profile import get_profile

    a = fpscope.reveal("numpy.sum", n=64, samples=2)
    b = fpscope.reveal(reversed_sum, n=64, samples=2)
    assert fpscope.diff(a, a.record).same
    d = fpscope.diff(a, b)
    assert not d.same and d.verdict
    assert fpscope.diff(a.tree, a.tree).same
    assert fpscope.diff(a.tree, a).verdict == "same tree; node arithmetic not compared"
    p = tmp_path / "a.json"
    a.save(p)
    assert fpscope.diff(str(p), a).same
    assert fpscope.diff("hopper-fp16", get_profile("hopper-fp16")).same
    assert not fpscope.diff("hopper-fp16", "ampere-fp16").same
    from fpscope.diff import DiffError

    with pytest.raises(DiffError, match="cannot compare"):
        fpscope.diff(a, "hopper-fp16")


def test_probe_takes_a_python_callable():
    from fpscope import emulate

    def mma(A, B, C):
        return emulate.matmul(A, B, C, profile="hopper-fp16")

    rep = fpscope.probe(mma, "fp16", "fp32", k=16, cases=200)
    assert rep.validation["matched"] == rep.validation["cases"] >= 200
    d = fpscope.diff(rep.profile, "hopper-fp16")
    assert d.same, d.text()


def test_fit_takes_a_path_or_a_recording(tmp_path):
    from fpscope.fit import FitError, load_recording
    from fpscope.profile import PRESETS
    from test_fit import _npz

    path = _npz(tmp_path, PRESETS["ada-e4m3-e5m2"], n=300)
    res = fpscope.fit(path)
    assert res.exact, res.to_text()
    assert fpscope.fit(load_recording(path)).exact
    with pytest.raises(FitError):
        fpscope.fit(tmp_path / "missing.npz")
