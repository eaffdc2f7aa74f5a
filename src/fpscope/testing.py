"""Test helpers: pin the summation order and node arithmetic of your kernels in your own test
suite.

A project that depends on a kernel's floating-point behaviour (bitwise-reproducible results,
golden files) can assert in its tests that neither its accumulation order nor its node
arithmetic (every node's format, how each product enters, the output format) has changed::

    from fpscope.testing import assert_same_order

    def test_my_sum_keeps_its_order():
        # baseline written once with: fpscope reveal mypkg.kernels:my_sum --n 1024 --record
        #                                                          tests/baselines/my_sum.json
        assert_same_order("mypkg.kernels:my_sum", "baselines/my_sum.json")

    def test_numpy_sum_is_pairwise_blocks():
        from fpscope.tree import SumTree
        assert_same_order("numpy.sum", SumTree.pairwise(8), dtype="fp32")

A relative baseline path is resolved against the folder of the test file that calls the helper
(``tests/`` above), never against the current folder, so the tests pass from any folder.
The comparison is ``fpscope diff``'s (:func:`fpscope.diff.diff_trees`): tree, node arithmetic
and, for matrix ops, the output classes. When they differ, :func:`assert_same_order` raises
``AssertionError`` whose message is the ``fpscope diff`` text: the smallest differing subtree
or the first differing parameter, and a witness input that gives different output bits. A
bare :class:`~fpscope.tree.SumTree` baseline has no arithmetic: only the order is compared.

:func:`pin_order` checks a baseline record and fails when it is missing, unless recording is
asked for: then it writes (or rewrites) the baseline from the live op::

    from fpscope.testing import pin_order

    def test_pinned():
        pin_order("mypkg.kernels:my_sum", "baselines/my_sum_1024.json", n=1024)

Recording is asked for by ``pytest --fpscope-record`` or by the environment variable
``FPSCOPE_RECORD=1`` (``FPSCOPE_UPDATE_PINS=1``, the older name, too). The pytest option comes
with the plugin, which pytest loads from fpscope's ``pytest11`` entry point once fpscope is
installed (or, explicitly, ``pytest_plugins = ["fpscope.testing"]`` in ``conftest.py``, or
``pytest -p fpscope.testing``). The plugin also gives the fixture ``fpscope_pin``, which keeps
baselines next to the test file, in ``fpscope_baselines/<name>.json``::

    def test_kernel_order(fpscope_pin):
        fpscope_pin("mypkg.kernels:my_sum", name="my_sum_1024", n=1024, dtype="fp32")

``fpscope gate BASELINE`` also compares the accuracy and the live output bits, for CI scripts.
"""

from __future__ import annotations

import os
import re
import sys
import warnings
from pathlib import Path

from .tree import SumTree

__all__ = ["RECORD_ENV", "UPDATE_ENV", "assert_same_order", "pin_order"]

#: environment variable that makes :func:`pin_order` and ``fpscope_pin`` write (or rewrite)
#: their baselines from the live op (as ``pytest --fpscope-record`` does)
RECORD_ENV = "FPSCOPE_RECORD"
#: the older name of :data:`RECORD_ENV`, still read
UPDATE_ENV = "FPSCOPE_UPDATE_PINS"

_record_option = False  # pytest --fpscope-record (set by the plugin hooks below)


def _caller_folder() -> Path:
    """The folder of the file of the first calling frame outside this module (the test file);
    the current folder where that is no file (an interactive session)."""
    here = os.path.abspath(__file__)
    frame = sys._getframe(1)
    while frame is not None and os.path.abspath(frame.f_code.co_filename) == here:
        frame = frame.f_back
    if frame is not None and os.path.isfile(frame.f_code.co_filename):
        return Path(frame.f_code.co_filename).resolve().parent
    return Path.cwd()


def _resolve(path, folder: Path | None) -> Path:
    """``path`` as given when absolute, else relative to ``folder`` (the calling test file's)."""
    path = Path(path)
    if path.is_absolute():
        return path
    return (folder if folder is not None else _caller_folder()) / path


def _live_side(target, res, seed: int):
    """The live op as ``fpscope diff`` sees a record: tree, node arithmetic, output classes
    (the record is built and read back through JSON, as a baseline record is)."""
    from .diff import side_from_record
    from .record import dumps, json_loads
    from .record import reveal_record as build

    rec = json_loads(dumps(build(target, res, seed, {})))
    return side_from_record(rec, "live")


def assert_same_order(target_name, baseline, *, seed: int | None = None,
                      _folder: Path | None = None, **conditions) -> SumTree:
    """Reveal ``target_name`` live and assert that its summation tree and node arithmetic equal
    the baseline's (the comparison of ``fpscope diff``: :func:`fpscope.diff.diff_trees`).

    Args:
        target_name: a target name (``numpy.sum``, ``package.module:function``,
            ``path/to/file.py:function``, ...); None: the baseline record's target.
        baseline: a reveal record (path, ``str`` or ``os.PathLike``; a relative path is
            resolved against the folder of the calling test file) or a
            :class:`fpscope.tree.SumTree` (the order only: a bare tree has no arithmetic).
        seed: probe seed (default: the record's, else 0).
        conditions: probe conditions of :func:`fpscope.targets.make_target` (n, shape, dtype,
            layout, offset, threads, axis, index, device). With a record they replace the
            record's own; with a SumTree, n defaults to the tree's leaf count.

    Returns:
        The live tree (equal to the baseline's).

    Raises:
        AssertionError: the live tree, node arithmetic (node formats, product entries, output
            format) or output classes differ, or the baseline record holds no node arithmetic
            to compare (an fpscope.record/1 record: record it again); the message holds the
            diff (smallest differing subtree or first differing parameter, witness input).
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
        label, source = "the baseline tree", "a SumTree"
        target = make_target(target_name, **conditions)
    elif isinstance(baseline, (str, os.PathLike)):
        path = _resolve(baseline, _folder)
        rec = load_record(path)
        if rec.get("kind", "reveal") != "reveal":
            raise RecordError(f"{path} is a {rec.get('kind')!r} record, not a reveal record")
        base = side_from_record(rec, str(path))
        label, source = f"the baseline {path}", str(path)
        if base.arith is None:
            raise AssertionError(
                f"{path} holds no node arithmetic (an older record), so only the order could be "
                f"compared; record it again ({RECORD_ENV}=1 or pytest --fpscope-record with "
                f"pin_order, or fpscope reveal --record)")
        if seed is None:
            s = (rec.get("probe") or {}).get("seed", 0)
            seed = s if isinstance(s, int) else 0
        target = target_from_record(rec, str(path), name=target_name, **conditions)
    else:
        raise TypeError(f"baseline must be a record path or a SumTree, got {type(baseline).__name__}")
    name = target.name
    if target.n != base.tree.n:
        target.close()
        raise AssertionError(f"{name}: the live op has {target.n} leaves, {label} {base.tree.n}")
    seed = 0 if seed is None else seed
    try:
        res = _reveal_open(target, seed, base.tree, source)
        live = _live_side(target, res, seed) if base.arith is not None else \
            Side("live", tree=res.tree, arith=res.arithmetic)
    finally:
        target.close()
    if base.arith is None:  # a bare tree: the order only
        if res.tree == base.tree:
            return res.tree
        if res.arithmetic is not None:
            # replay the bare tree with the live op's uniform accumulator for the witness
            from .arithmetic import Arithmetic

            a = res.arithmetic
            fmt = a.formats[0].name if a.node_formats else a.out
            base = Side(base.label, tree=base.tree, arith=Arithmetic.uniform(
                base.tree.n_nodes, fmt, a.out, base.tree.n,
                None if a.products is None else "rounded"))
    d = diff_trees(base, live)
    if d.same:
        return res.tree
    what = ("summation order" if res.tree != base.tree else "node arithmetic"
            if d.parameter is not None else "output classes")
    raise AssertionError(f"{name}: the {what} differs from {label} (A = baseline, B = live)\n"
                         f"{d.to_text()}")


def _reveal_open(target, seed: int, baseline_tree=None, label: str = "baseline"):
    """Reveal without closing the target (the live record needs its spec afterwards); the
    baseline's tree is proven first (n - 1 probes when the op still adds that way)."""
    from .gate import baseline_candidates
    from .reveal import reveal

    return reveal(target, seed=seed, replay_samples=0,
                  candidates=baseline_candidates(baseline_tree, label))


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() not in ("", "0", "false", "no")


def recording(update: bool | None = None) -> bool:
    """Whether baselines are written from the live op instead of checked: ``update`` when
    given, else ``pytest --fpscope-record``, ``FPSCOPE_RECORD`` or ``FPSCOPE_UPDATE_PINS`` set to
    anything but 0 / false / no."""
    if update is not None:
        return bool(update)
    return (_record_option or _truthy(os.environ.get(RECORD_ENV))
            or _truthy(os.environ.get(UPDATE_ENV)))


def pin_order(target_name: str, record, *, update: bool | None = None, seed: int = 0,
              _folder: Path | None = None, **conditions) -> SumTree:
    """Check ``target_name``'s order and node arithmetic against the reveal record ``record``
    (:func:`assert_same_order`); when recording is asked for (:func:`recording`: ``update``,
    ``pytest --fpscope-record`` or ``FPSCOPE_RECORD=1``), write (or rewrite) it from the live
    op instead (a warning says so).

    Args:
        target_name: target name, as for :func:`assert_same_order`.
        record: path of the baseline record; a relative path is resolved against the folder
            of the calling test file (its folder is created when recording).
        update: True: record; False: check, whatever the option and environment say.
        seed: probe seed of a new baseline.
        conditions: probe conditions (n, dtype, ...), as for :func:`assert_same_order`; also
            those of a new baseline.

    Returns:
        The live tree.

    Raises:
        AssertionError: the baseline is missing and recording was not asked for, or the live
            order or arithmetic differs from the baseline's.
        See :func:`assert_same_order` for the other errors.
    """
    from .gate import reveal_record
    from .record import write_record
    from .targets import make_target

    path = _resolve(record, _folder)
    if not recording(update):
        if not path.exists():
            raise AssertionError(
                f"no baseline at {path}: run the tests once with pytest --fpscope-record or "
                f"{RECORD_ENV}=1 to write it from the live {target_name}")
        return assert_same_order(target_name, path, _folder=path.parent, **conditions)
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

    def pytest_addoption(parser):
        """The plugin's option: ``--fpscope-record``."""
        parser.getgroup("fpscope").addoption(
            "--fpscope-record", action="store_true", default=False,
            help="fpscope.testing: write (or rewrite) the baselines of pin_order and "
                 "fpscope_pin from the live ops instead of checking them")

    def pytest_configure(config):
        global _record_option
        config.stash[_OLD_OPTION] = _record_option  # a nested run (pytester) restores it
        _record_option = bool(config.getoption("--fpscope-record", default=False))

    def pytest_unconfigure(config):
        global _record_option
        _record_option = config.stash.get(_OLD_OPTION, False)

    _OLD_OPTION = _pytest.StashKey[bool]()

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
