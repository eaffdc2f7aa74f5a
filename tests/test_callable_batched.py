"""Batched user callables: a function of a (B, n) array of probe rows returning B outputs.

Declared by the ``fpscope_batched`` attribute, the :func:`fpscope.batched` decorator,
``make_target(..., batched=True)`` or ``fpscope reveal ... --batched``
(:mod:`fpscope.targets.callable`). ``evaluate`` calls the function on chunks of rows,
``evaluate_each`` on one row at a time, and the reveal's "batched = single" check compares them.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import fpscope
from fpscope.gate import target_from_record
from fpscope.cli import main
from fpscope.record import load_record
from fpscope.reveal import RevealError, reveal
from fpscope.targets import TargetError, make_target
from fpscope.targets import callable as user

SOURCE = textwrap.dedent(
    '''
    import numpy as np
    import fpscope

    SEEN = []   # (rows, address % 64, strides, dtype) of every call


    @fpscope.batched
    def decorated(rows):
        SEEN.append((rows.shape[0], rows.ctypes.data % 64, rows.strides, rows.dtype.name))
        return np.sum(rows, axis=1)


    def by_attribute(rows):
        return np.sum(rows, axis=1)


    by_attribute.fpscope_batched = True


    def undeclared(rows):
        return np.sum(rows, axis=1)


    def as_list(rows):
        return [float(v) for v in np.sum(rows, axis=1, dtype=np.float64)]


    @fpscope.batched
    def either(x):
        return np.sum(x, axis=-1)


    ADDRESSES = []


    def addresses(rows):
        ADDRESSES.append(rows.__array_interface__["data"][0])
        return np.sum(rows, axis=1)


    # functions that write into their rows (not allowed): the reveal's checks fail

    def zeroes_first_leaf(rows):
        out = np.sum(rows, axis=1)
        rows[:, 0] = 0
        return out


    def fills(rows):
        out = np.sum(rows, axis=1)
        rows[...] = 7
        return out


    def wrong_length(rows):
        return np.sum(rows, axis=1)[:-1]


    def two_d(rows):
        return np.sum(rows, axis=1, keepdims=True)


    def scalar(rows):
        return np.sum(rows)


    def text(rows):
        return ["abc"] * len(rows)


    def boom(rows):
        raise ValueError("bad rows\\nsecond line")


    def bad_flag(rows):
        return np.sum(rows, axis=1)


    bad_flag.fpscope_batched = "yes"


    # rows that interact: each must be caught by the reveal's checks, never give a tree

    def adds_previous(rows):
        s = np.sum(rows, axis=1)
        out = s.copy()
        out[1:] += s[:-1]
        return out


    def cumsum_first_column(rows):
        return np.cumsum(rows[:, 0]) + np.sum(rows[:, 1:], axis=1)


    def reversed_rows(rows):
        return np.sum(rows, axis=1)[::-1]


    def fold_when_alone(rows):
        # one row: a left-to-right fold; several: numpy's pairwise sum (a different op)
        if len(rows) == 1:
            acc = rows.dtype.type(0)
            for v in rows[0]:
                acc = rows.dtype.type(acc + v)
            return [acc]
        return np.sum(rows, axis=1)
    '''
)


@pytest.fixture(scope="module")
def ops(tmp_path_factory):
    """(path of the module file, the module as fpscope loaded it)."""
    path = tmp_path_factory.mktemp("batched") / "fpscope_batched_ops.py"
    path.write_text(SOURCE, encoding="utf-8")
    t = make_target(f"{path}:decorated", n=3)
    module = sys.modules[t._fn.__module__]
    t.close()
    return path, module


def one_line_error(fn, *args, **kwargs) -> str:
    with pytest.raises(TargetError) as info:
        fn(*args, **kwargs)
    msg = str(info.value)
    assert msg and "\n" not in msg
    return msg


# -- declaration -------------------------------------------------------------------------------


def test_decorator_and_attribute(ops):
    path, mod = ops
    assert fpscope.batched is user.batched
    assert mod.decorated.fpscope_batched is True
    for name in ("decorated", "by_attribute"):
        t = make_target(f"{path}:{name}", n=8)
        assert t.batched and t.spec()["batched"] is True
        assert t.out_format.name == "fp32"
    t = make_target(f"{path}:undeclared", n=8, batched=True)
    assert t.batched and t.spec()["batched"] is True
    t = make_target(f"{path}:as_list", n=8, batched=True)
    assert t.out_format.name == "fp64"  # a list of Python floats
    # False overrides the declaration (the function then gets one 1-D array a call)
    t = make_target(f"{path}:either", n=8, batched=False)
    assert not t.batched and t.spec()["batched"] is False
    assert t.evaluate(np.ones((3, 8))).tolist() == [8.0] * 3


def test_decorator_wraps_what_takes_no_attributes():
    class Summer:
        def rows(self, r):
            return np.sum(r, axis=1)

    f = fpscope.batched(Summer().rows)  # a bound method takes no attributes: wrapped
    assert f.fpscope_batched is True
    assert f(np.ones((2, 3))).tolist() == [3.0, 3.0]
    with pytest.raises(TypeError):
        fpscope.batched(3)


def test_import_fpscope_stays_light():
    code = ("import sys, fpscope; assert 'fpscope.targets' not in sys.modules; "
            "assert 'numpy' not in sys.modules; "
            "b = fpscope.batched; assert 'fpscope.targets.callable' in sys.modules; "
            "assert 'batched' in dir(fpscope)")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


# -- evaluate: chunks, placement, one row at a time -------------------------------------------


def test_evaluate_chunks_and_placement(ops, monkeypatch):
    path, mod = ops
    monkeypatch.setattr(user, "BATCH_BYTES", 3 * 5 * 8)  # 3 fp64 rows of 5 per call
    t = make_target(f"{path}:decorated", n=5, dtype="fp64", layout="strided", offset=24)
    assert t.step == 3
    rng = np.random.default_rng(1)
    X = rng.standard_normal((7, 5))
    mod.SEEN.clear()
    out = t.evaluate(X)
    assert out.tolist() == [float(np.sum(x)) for x in X]  # exact: same rows, same op
    # chunks of 3, 3 and 1 rows, every row strided (2 elements) at 24 bytes after a boundary,
    # row stride padded to a multiple of 64 bytes
    assert [s[0] for s in mod.SEEN] == [3, 3, 1]
    assert all(s[1] == 24 and s[2] == (128, 16) and s[3] == "float64" for s in mod.SEEN)
    mod.SEEN.clear()
    assert t.evaluate_each(X[:2]).tolist() == out[:2].tolist()
    assert [s[0] for s in mod.SEEN] == [1, 1]  # one (1, n) call per row


def test_probe_buffer_passed_without_copy(ops):
    path, mod = ops
    t = make_target(f"{path}:addresses", n=6, batched=True, offset=8)
    buf = t.input_buffer(4)  # what the reveal's prober asks for and fills
    assert buf.__array_interface__["data"][0] % 64 == 8
    buf[...] = np.arange(24).reshape(4, 6)
    mod.ADDRESSES.clear()
    assert t.evaluate(buf[:3]).tolist() == [15.0, 51.0, 87.0]
    assert mod.ADDRESSES == [buf.__array_interface__["data"][0]]  # the buffer itself
    X = np.arange(12, dtype=np.float32).reshape(2, 6)  # a foreign array: copied, placed
    assert t.evaluate(X).tolist() == [15.0, 51.0]
    assert mod.ADDRESSES[-1] != X.__array_interface__["data"][0]
    assert mod.ADDRESSES[-1] % 64 == 8


@pytest.mark.parametrize("name", ["zeroes_first_leaf", "fills"])
def test_function_writing_its_rows_is_caught(ops, name):
    path, _ = ops
    with make_target(f"{path}:{name}", n=1000, batched=True) as t:
        with pytest.raises(RevealError):
            reveal(t, replay_samples=10)
    with make_target(f"{path}:{name}", n=6, batched=True) as t:  # a foreign array: a copy
        X = np.ones((2, 6))
        assert t.evaluate(X).tolist() == [6.0, 6.0] and (X == 1).all()


# -- the reveal ----------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1000, 4096])
def test_reveals_the_tree_of_numpy_sum(ops, n):
    path, _ = ops
    with make_target("numpy.sum", n=n, dtype="fp32") as builtin:
        want = reveal(builtin, replay_samples=0).tree
    with make_target(f"{path}:decorated", n=n, dtype="fp32") as t:
        res = reveal(t, replay_samples=50)
        assert res.tree == want
        assert res.stats.checks["batched_vs_single"] > 0
        assert res.replay["bit_exact"] and res.replay["matched"] == res.replay["samples"]
        # batched: a reveal takes few calls (one call per probe row would take thousands)
        assert res.stats.calls < res.stats.probes / 10


@pytest.mark.parametrize("name, kind", [
    ("adds_previous", None),
    ("cumsum_first_column", None),
    ("reversed_rows", None),
    ("fold_when_alone", "batch-mismatch"),  # every batch consistent; only the check sees it
])
@pytest.mark.parametrize("n", [100, 1000])
def test_rows_that_interact_are_caught(ops, name, kind, n):
    path, _ = ops
    with make_target(f"{path}:{name}", n=n, dtype="fp32", batched=True) as t:
        with pytest.raises(RevealError) as info:
            reveal(t, replay_samples=20)
    if kind is not None:
        assert info.value.kind == kind


# -- errors --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name, fragments", [
    ("wrong_length", ["returned 1 outputs for 2 rows", "shape (1,)"]),
    ("two_d", ["ndarray of shape (2, 1)", "not a 1-D array of 2 outputs"]),
    ("scalar", ["(a scalar)"]),
    ("text", ["a list of 2 items", "not numbers"]),
    ("boom", ["raised ValueError: bad rows"]),
])
def test_bad_results(ops, name, fragments):
    path, _ = ops
    msg = one_line_error(make_target, f"{path}:{name}", n=4, batched=True)
    assert msg.startswith(str(path))
    for fragment in fragments:
        assert fragment in msg


def test_bad_declarations(ops):
    path, _ = ops
    assert "must be True or False" in one_line_error(make_target, f"{path}:bad_flag", n=4)
    assert "must be True or False" in one_line_error(
        make_target, f"{path}:undeclared", n=4, batched="yes")
    for name in ("numpy.sum", "numpy.einsum[i,i->]", "torch.sum"):
        msg = one_line_error(make_target, name, n=4, batched=True)
        assert "batched applies to user callables" in msg
    # refused before any child process starts
    msg = one_line_error(make_target, "numpy.sum", n=4, batched=True, env={"X_FPSCOPE": "1"})
    assert "batched applies to user callables" in msg


def test_batched_in_a_child_process(ops):
    path, _ = ops
    with make_target(f"{path}:undeclared", n=16, batched=True, env={"X_FPSCOPE": "1"}) as t:
        assert t.spec()["batched"] is True and t.spec()["env"] == {"X_FPSCOPE": "1"}
        assert t.evaluate(np.ones((5, 16))).tolist() == [16.0] * 5


# -- command line, records -----------------------------------------------------------------------


def test_cli_batched_flag(ops, tmp_path, capsys):
    path, _ = ops
    rec = tmp_path / "b.json"
    rc = main(["reveal", f"{path}:undeclared", "--batched", "--n", "300", "--samples", "10",
               "--record", str(rec), "--quiet"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "batched = single" in " ".join(out.split())
    record = load_record(rec)
    assert record["target"]["batched"] is True
    with make_target("numpy.sum", n=300) as builtin:
        from fpscope.tree import SumTree

        assert SumTree.from_json(record["tree"]) == reveal(builtin, replay_samples=0).tree


@pytest.mark.parametrize("args", [
    ["numpy.sum", "--batched"],
    ["numpy.dot", "--n", "8", "--batched"],
])
def test_cli_batched_refused_for_builtins(args, capsys):
    rc = main(["reveal", *args])
    _, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err
    assert lines[0].startswith("fpscope: ") and "batched applies to user callables" in lines[0]


def test_cli_wrong_length_exit_2(ops, capsys):
    path, _ = ops
    rc = main(["reveal", f"{path}:wrong_length", "--batched", "--n", "16"])
    _, err = capsys.readouterr()
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert "returned 1 outputs for 2 rows" in err


def test_record_rebuilds_batched(ops, tmp_path, capsys):
    """verify / gate rebuild the target from the record's spec, batched as it was."""
    path, _ = ops
    rec = tmp_path / "d.json"
    assert main(["reveal", f"{path}:decorated", "--n", "128", "--samples", "5",
                 "--record", str(rec), "--quiet"]) == 0
    assert main(["verify", str(rec), "--samples", "20"]) == 0  # the attribute survives
    rec2 = tmp_path / "u.json"
    assert main(["reveal", f"{path}:undeclared", "--batched", "--n", "128", "--samples", "5",
                 "--record", str(rec2), "--quiet"]) == 0
    capsys.readouterr()
    with target_from_record(load_record(rec2)) as t:
        assert t.batched and t.spec()["batched"] is True


def test_verify_rebuilds_a_flag_batched_record(ops, tmp_path, capsys):
    path, _ = ops
    rec = tmp_path / "u.json"
    assert main(["reveal", f"{path}:undeclared", "--batched", "--n", "128", "--samples", "5",
                 "--record", str(rec), "--quiet"]) == 0
    assert main(["verify", str(rec), "--samples", "20"]) == 0
