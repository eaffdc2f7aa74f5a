"""Test helpers: pin the summation order of your kernels in your own test suite.

A project that depends on a kernel's accumulation order (bitwise-reproducible results, golden
files) can assert in its tests that the order has not changed::

    from fpscope.testing import assert_same_order

    def test_my_sum_keeps_its_order():
        # baseline written once with: fpscope reveal mypkg.kernels:my_sum --n 1024 --record
        #                                                          tests/baselines/my_sum.json
        assert_same_order("mypkg.kernels:my_sum", "tests/baselines/my_sum.json")

    def test_numpy_sum_is_pairwise_blocks():
        from fpscope.tree import SumTree
        assert_same_order("numpy.sum", SumTree.pairwise(8), dtype="fp32")

When the live order differs, :func:`assert_same_order` raises ``AssertionError`` whose message is
the ``fpscope diff`` text: the smallest differing subtree and a witness input that gives
different output bits.

No plugin is needed. :func:`pin_order` writes the baseline on the first run (and whenever
``FPSCOPE_UPDATE_PINS=1`` is set) and checks it afterwards::

    from fpscope.testing import pin_order

    def test_pinned():
        pin_order("mypkg.kernels:my_sum", "tests/baselines/my_sum_1024.json", n=1024)

For pytest users the fixture ``fpscope_pin`` does the same with baselines stored next to the
test file, in ``fpscope_baselines/<name>.json``. Enable it in ``conftest.py`` with
``pytest_plugins = ["fpscope.testing"]`` (or ``from fpscope.testing import fpscope_pin``)::

    def test_kernel_order(fpscope_pin):
        fpscope_pin("mypkg.kernels:my_sum", name="my_sum_1024", n=1024, dtype="fp32")

The helpers compare the summation tree only (the order). ``fpscope gate BASELINE`` also compares
the node arithmetic and the accuracy, for CI scripts.
"""

from __future__ import annotations

import os
import re
import warnings
from pathlib import Path

from .tree import SumTree

__all__ = ["UPDATE_ENV", "assert_same_order", "pin_order"]

#: environment variable that makes :func:`pin_order` and ``fpscope_pin`` rewrite their baselines
UPDATE_ENV = "FPSCOPE_UPDATE_PINS"


def _reveal(target, seed: int):
    from .reveal import reveal

    try:
        return reveal(target, seed=seed, replay_samples=0)
    finally:
        target.close()


def assert_same_order(target_name: str | None, baseline, *, seed: int | None = None,
                      **conditions) -> SumTree:
    """Reveal ``target_name`` live and assert that its summation tree equals the baseline's.

    Args:
        target_name: a target name (``numpy.sum``, ``package.module:function``,
            ``path/to/file.py:function``, ...); None: the baseline record's target.
        baseline: a reveal record (path, ``str`` or ``os.PathLike``) or a
            :class:`fpscope.tree.SumTree`.
        seed: probe seed (default: the record's, else 0).
        conditions: probe conditions of :func:`fpscope.targets.make_target` (n, shape, dtype,
            layout, offset, threads, axis, index, device). With a record they replace the
            record's own; with a SumTree, n defaults to the tree's leaf count.

    Returns:
        The live tree (equal to the baseline's).

    Raises:
        AssertionError: the live tree differs; the message holds the diff (smallest differing
            subtree, witness input).
        fpscope.record.RecordError: the record cannot be read or is not a reveal record.
        fpscope.targets.base.TargetError, fpscope.reveal.RevealError: the target cannot be
            built, or it failed a reveal check (e.g. it is nondeterministic).
        TypeError: ``baseline`` is neither a path nor a SumTree.
    """
    from .diff import Side, diff_trees, side_from_record
    from .gate import target_from_record
    from .record import RecordError, load_record

    if isinstance(baseline, SumTree):
        if target_name is None:
            raise TypeError("assert_same_order: a SumTree baseline needs a target name")
        from .targets import make_target

        if "n" not in conditions and "shape" not in conditions:
            conditions["n"] = baseline.n
        base = Side("baseline", tree=baseline)
        label = "the baseline tree"
        target = make_target(target_name, **conditions)
    elif isinstance(baseline, (str, os.PathLike)):
        rec = load_record(baseline)
        if rec.get("kind", "reveal") != "reveal":
            raise RecordError(f"{baseline} is a {rec.get('kind')!r} record, not a reveal record")
        base = side_from_record(rec, str(baseline))
        label = f"the baseline {baseline}"
        if seed is None:
            s = (rec.get("probe") or {}).get("seed", 0)
            seed = s if isinstance(s, int) else 0
        target = target_from_record(rec, str(baseline), name=target_name, **conditions)
    else:
        raise TypeError(f"baseline must be a record path or a SumTree, got {type(baseline).__name__}")
    name = target.name
    if target.n != base.tree.n:
        target.close()
        raise AssertionError(f"{name}: the live op has {target.n} leaves, {label} {base.tree.n}")
    res = _reveal(target, 0 if seed is None else seed)
    if res.tree == base.tree:
        return res.tree
    from .arithmetic import Arithmetic

    live = Side("live", tree=res.tree, arith=res.arithmetic)
    if base.arith is None and res.arithmetic is not None:
        # a bare tree: replay it with the live op's uniform accumulator for the witness
        fmt = res.arithmetic.formats[0].name if res.arithmetic.node_formats else res.arithmetic.out
        base = Side(base.label, tree=base.tree, arith=Arithmetic.uniform(
            base.tree.n_nodes, fmt, res.arithmetic.out, base.tree.n,
            None if res.arithmetic.products is None else "rounded"))
    d = diff_trees(base, live)
    raise AssertionError(f"{name}: the summation order differs from {label} (A = baseline, "
                         f"B = live)\n{d.to_text()}")


def _wants_update(update: bool | None) -> bool:
    if update is not None:
        return update
    return os.environ.get(UPDATE_ENV, "") not in ("", "0", "false", "no")


def pin_order(target_name: str, record, *, update: bool | None = None, seed: int = 0,
              **conditions) -> SumTree:
    """Check ``target_name``'s order against the reveal record ``record``, writing it first when
    it does not exist (a warning says so) or when ``update`` is true (default: the
    ``FPSCOPE_UPDATE_PINS`` environment variable is set to something other than 0/false/no).

    Args:
        target_name: target name, as for :func:`assert_same_order`.
        record: path of the baseline record (its folder is created when missing).
        update: rewrite the baseline from the live op instead of checking it.
        seed: probe seed of a new baseline.
        conditions: probe conditions (n, dtype, ...), as for :func:`assert_same_order`; also
            those of a new baseline.

    Returns:
        The live tree.

    Raises:
        AssertionError: the live order differs from the baseline's.
        See :func:`assert_same_order` for the other errors.
    """
    from .gate import reveal_record
    from .record import write_record
    from .targets import make_target

    path = Path(record)
    if path.exists() and not _wants_update(update):
        return assert_same_order(target_name, path, **conditions)
    target = make_target(target_name, **conditions)
    try:
        rec, res, _ = reveal_record(target, seed=seed, samples=16)
    finally:
        target.close()
    path.parent.mkdir(parents=True, exist_ok=True)
    write_record(rec, path, overwrite=True)
    warnings.warn(f"fpscope: baseline of {target_name} written to {path}", stacklevel=2)
    return res.tree


def _pin_name(target_name: str, conditions: dict) -> str:
    text = target_name.rpartition("/")[2] + "".join(f"_{k}{v}" for k, v in sorted(conditions.items()))
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_.") or "baseline"


try:  # the fixture exists where pytest does; fpscope itself does not need pytest
    import pytest as _pytest
except ImportError:  # pragma: no cover
    _pytest = None

if _pytest is not None:

    @_pytest.fixture
    def fpscope_pin(request):
        """``fpscope_pin(target_name, name=None, **conditions)``: :func:`pin_order` with the
        baseline at ``<test file folder>/fpscope_baselines/<name>.json`` (name default: the target
        name and conditions)."""
        folder = Path(request.path).parent / "fpscope_baselines"

        def pin(target_name: str, name: str | None = None, **conditions) -> SumTree:
            return pin_order(target_name, folder / f"{name or _pin_name(target_name, conditions)}.json",
                             **conditions)

        return pin

    __all__.append("fpscope_pin")
