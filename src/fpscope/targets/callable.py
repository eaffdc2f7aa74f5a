"""Any user function as a target: ``package.module:function`` or ``path/to/file.py:function``.

The function takes one 1-D numpy array of n elements in the storage dtype of the input format
(``numpy.float32``, ``ml_dtypes.bfloat16``, ...) and returns its reduction as a scalar, a 0-d
array or a 1-element array (numpy, ml_dtypes, torch or jax). The output format is the format of
what it returns (a Python float is fp64, a numpy.float32 is fp32, ...), found by one call on
zeros. The array is placed as asked (layout, offset) and reused for every call: the function
must not keep it. Modules are imported with the current folder on ``sys.path`` (as ``python -m``
does); a file spec is recorded with its absolute path, so records verify from any folder. ``threads`` limits BLAS threads (threadpoolctl) until ``close()``.

Batched functions (``f.fpscope_batched = True``, the :func:`batched` decorator, or
``make_target(..., batched=True)`` / ``fpscope reveal ... --batched``) take a 2-D array of B probe
rows instead, shape (B, n), in the storage dtype and placed as asked (every row has the layout's
element stride and starts ``offset`` bytes after a 64-byte boundary, as numpy.sum's batched rows),
and return the B reductions, one per row: a 1-D array of length B (or a list) of fp64, fp32, fp16
or bf16 values, whose dtype is the output format. ``evaluate`` then calls the function on chunks
of rows (at most :data:`BATCH_BYTES` of storage per call), ``evaluate_each`` on one row at a time
(a (1, n) array), and the reveal's "batched = single" check compares the two. The rows passed are
the reveal's own probe buffer where it comes from ``input_buffer`` (no copy, as for numpy.sum),
else a reused placed copy: the function must neither keep nor modify them (a function that
writes into its rows spoils later probes; the reveal's checks then fail, since ``evaluate_each``
works on its own buffer).
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import os
import sys
from pathlib import Path

import numpy as np

from ._common import LibraryTarget
from ._memory import placed_rows, placed_zeros
from ._options import Conditions
from ._threads import BlasThreadLimit
from .base import TargetError

#: Bytes of probe rows (in the storage dtype) passed to one call of a batched function, as
#: numpy.sum's batched calls (:data:`fpscope.targets.numpy_targets.BATCH_BYTES`).
BATCH_BYTES = 32 << 20

#: The attribute that declares a function batched (see :func:`batched`).
BATCHED_ATTRIBUTE = "fpscope_batched"


def batched(fn):
    """Declare ``fn`` batched: it takes a (B, n) array of probe rows and returns B outputs.

    Sets ``fn.fpscope_batched = True`` and returns ``fn`` (use as ``@fpscope.batched``). An object
    that takes no attributes (a bound method, a builtin) is wrapped in a function that has it.

    Example::

        @fpscope.batched
        def my_sum(rows):          # rows: (B, n)
            return np.sum(rows, axis=1)
    """
    if not callable(fn):
        raise TypeError(f"batched() takes a callable, got {type(fn).__name__}")
    try:
        setattr(fn, BATCHED_ATTRIBUTE, True)
        return fn
    except (AttributeError, TypeError):
        pass

    @functools.wraps(fn)
    def wrapper(rows):
        return fn(rows)

    setattr(wrapper, BATCHED_ATTRIBUTE, True)
    return wrapper


def declared_batched(spec: str, fn) -> bool:
    """Whether ``fn`` declares itself batched (its ``fpscope_batched`` attribute).

    Raises:
        TargetError: the attribute is there but not True or False.
    """
    flag = getattr(fn, BATCHED_ATTRIBUTE, False)
    if isinstance(flag, (bool, np.bool_)):
        return bool(flag)
    raise TargetError(f"{spec}: {BATCHED_ATTRIBUTE} must be True or False, got {flag!r}")


def _one_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def _import_file(path_text: str):
    path = Path(path_text).expanduser()
    if not path.is_file():
        raise TargetError(f"cannot load {path_text!r}: no such file")
    resolved = str(path.resolve())
    mod_name = "_fpscope_user_" + hashlib.sha1(resolved.encode()).hexdigest()[:12]
    if mod_name in sys.modules:
        return sys.modules[mod_name]
    spec = importlib.util.spec_from_file_location(mod_name, resolved)
    if spec is None or spec.loader is None:
        raise TargetError(f"cannot load {path_text!r}: not a Python source file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as exc:
        del sys.modules[mod_name]
        raise TargetError(f"cannot load {path_text!r}: {_one_line(exc)}") from None
    return module


def _is_file(where: str) -> bool:
    return where.endswith(".py") or "/" in where or os.sep in where


def absolute_spec(spec: str) -> str:
    """``spec`` with a file path made absolute (module specs are returned unchanged)."""
    where, _, attr = spec.rpartition(":")
    if where and _is_file(where):
        return f"{Path(where).expanduser().resolve()}:{attr}"
    return spec


def result_format(name: str, y):
    """The Format of a function's result: its dtype, or fp64 for a Python float or int.

    Raises:
        TargetError: the result's dtype is not one of fp64, fp32, fp16, bf16.
    """
    from ..formats import format_of_dtype

    if isinstance(y, (float, int)) and not isinstance(y, bool):
        return format_of_dtype("float64")
    dtype = getattr(y, "dtype", None)
    if dtype is None:
        return format_of_dtype("float64")
    try:
        return format_of_dtype(dtype)
    except ValueError:
        raise TargetError(f"{name} returned {dtype}, which fpscope cannot read exactly") from None


def load_function(spec: str):
    """The callable named by ``"package.module:function"`` or ``"path/to/file.py:function"``.

    The function part may be dotted (``module:Class.method``).

    Raises:
        TargetError: malformed spec, import failure (missing module, error at import), missing
            attribute, or an attribute that is not callable.
    """
    where, _, attr = spec.rpartition(":")
    if not where or not attr:
        raise TargetError(
            f"bad callable {spec!r}: use package.module:function or path/to/file.py:function"
        )
    if _is_file(where):
        module = _import_file(where)
    else:
        if os.getcwd() not in sys.path and "" not in sys.path:
            sys.path.insert(0, os.getcwd())
        try:
            module = importlib.import_module(where)
        except (Exception, SystemExit) as exc:
            raise TargetError(f"cannot import {where!r}: {_one_line(exc)}") from None
    obj = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise TargetError(f"{where!r} has no attribute {attr!r}") from None
    if not callable(obj):
        raise TargetError(f"{spec} is a {type(obj).__name__}, not a callable")
    return obj


def scalar_of(name: str, y) -> float:
    """The float64 value of a function's result (scalar, 0-d or 1-element array; exact).

    Raises:
        TargetError: the result is not one real number.
    """
    try:
        a = np.asarray(y)
    except Exception:  # e.g. a torch bfloat16 tensor, which numpy cannot read
        a = None
    if a is not None and a.dtype != object:
        if a.size != 1:
            raise TargetError(f"{name} returned an array of shape {a.shape}, not a scalar")
        if a.dtype.kind == "c":
            raise TargetError(f"{name} returned a complex number, not a real scalar")
        try:
            return float(a.reshape(()).astype(np.float64))
        except (TypeError, ValueError):
            raise TargetError(f"{name} returned {a.dtype}, not a number") from None
    try:
        return float(y)
    except Exception:
        raise TargetError(f"{name} returned {type(y).__name__}, not a number") from None


def _describe(y) -> str:
    """A short description of a returned value for messages: type, and dtype and shape."""
    shape, dtype = getattr(y, "shape", None), getattr(y, "dtype", None)
    if shape is not None:
        return f"{type(y).__name__} of shape {tuple(shape)} and dtype {dtype}"
    if isinstance(y, (list, tuple)):
        return f"a {type(y).__name__} of {len(y)} items"
    return type(y).__name__


def outputs_of(name: str, y, rows: int) -> np.ndarray:
    """The (rows,) float64 values of a batched function's result (exact widening).

    Accepts a 1-D array (numpy, ml_dtypes, torch, jax) or a list / tuple of numbers, of length
    ``rows``.

    Raises:
        TargetError: a scalar, an array of more than one dimension, the wrong length, or values
            that are not real numbers; the message names what was returned.
    """
    want = f"a 1-D array of {rows} outputs (one per row)"
    try:
        a = np.asarray(y)
    except Exception:  # e.g. a torch bfloat16 tensor, which numpy cannot read
        a = None
    if a is None or a.dtype == object:
        if getattr(y, "ndim", 1) != 1 and hasattr(y, "shape"):
            raise TargetError(f"{name} returned {_describe(y)}, not {want}")
        try:
            a = np.array([float(v) for v in y], dtype=np.float64)
        except Exception:
            raise TargetError(f"{name} returned {_describe(y)}, not {want} of numbers") from None
    if a.ndim != 1:
        what = " (a scalar)" if a.ndim == 0 else ""
        raise TargetError(f"{name} returned {_describe(y)}{what}, not {want}")
    if a.shape[0] != rows:
        raise TargetError(f"{name} returned {a.shape[0]} outputs for {rows} rows "
                          f"({_describe(y)}), not {want}")
    if a.dtype.kind == "c":
        raise TargetError(f"{name} returned complex numbers ({_describe(y)}), not real outputs")
    if a.dtype.kind not in "fiuV":  # V: ml_dtypes' bfloat16 and friends
        raise TargetError(f"{name} returned {_describe(y)}, not numbers")
    try:
        return a.astype(np.float64)
    except (TypeError, ValueError):
        raise TargetError(f"{name} returned {_describe(y)}, not numbers") from None


def outputs_format(name: str, y):
    """The Format of a batched function's result: the dtype of the array, or of the numbers
    in a list (Python floats are fp64).

    Raises:
        TargetError: a dtype that is not one of fp64, fp32, fp16, bf16.
    """
    if getattr(y, "dtype", None) is not None:
        return result_format(name, y)
    try:
        a = np.asarray(y)
    except Exception:
        a = None
    if a is not None and a.dtype.kind not in "biuO":
        return result_format(name, a)
    first = y[0] if len(y) else 0.0
    return result_format(name, first)


class CallableTarget(LibraryTarget):
    """A user function f(x) -> scalar over a 1-D array x of n elements; n leaves. A batched
    function f(rows) -> B outputs over a (B, n) array of rows (see the module).

    Args:
        spec: ``"package.module:function"`` or ``"path/to/file.py:function"``.
        n: input length.
        cond: probe conditions (format, layout, offset, threads).
        batched: True: the function takes (B, n) rows; False: one 1-D array; None: as the
            function declares (its ``fpscope_batched`` attribute, default False).

    Raises:
        TargetError: the function cannot be loaded (see :func:`load_function`), or its first
            result (on zeros) is not what it should be. Errors raised by the function during
            ``evaluate`` also become one-line TargetErrors.
    """

    def __init__(self, spec: str, n: int, cond: Conditions, batched: bool | None = None,
                 fn=None):
        if fn is None:
            fn = load_function(spec)
            spec = absolute_spec(spec)
        self._in_process = fn is not None and not importable(spec, fn)
        super().__init__(spec, n, cond, (n,))
        self._fn = fn
        declared = declared_batched(spec, fn)
        self.batched = declared if batched is None else bool(batched)
        self._overridden = batched is not None and bool(batched) != declared
        limit = BlasThreadLimit(spec, cond.threads)
        self._closers.append(limit.restore)
        if self.batched:
            self._buf = self._placed_rows(1)  # evaluate_each: one row at a time
            self._rows: np.ndarray | None = None  # evaluate: where foreign rows are copied to
            self._given: np.ndarray | None = None  # the rows handed out by input_buffer
            self.step = max(1, BATCH_BYTES // (self.storage_dtype.itemsize * n))
            trial = self._placed_rows(min(2, self.step))
            first = self._guarded(self._fn, trial)
            outputs_of(spec, first, trial.shape[0])  # B real numbers, or a one-line error now
            self.out_format = outputs_format(spec, first)
        else:
            self._buf = placed_zeros((n,), self.storage_dtype, cond.layout, cond.offset)
            first = self._guarded(self._fn, self._buf)
            scalar_of(spec, first)  # one real number, or a one-line TargetError now
            self.out_format = result_format(spec, first)

    def _placed_rows(self, rows: int) -> np.ndarray:
        return placed_rows(rows, self.n, self.storage_dtype, self.cond.layout, self.cond.offset)

    def _call_one(self, x: np.ndarray) -> float:
        if self.batched:
            self._buf[0] = x
            return float(outputs_of(self.name, self._fn(self._buf), 1)[0])
        self._buf[...] = x
        return scalar_of(self.name, self._fn(self._buf))

    def input_buffer(self, rows: int) -> np.ndarray:
        """(rows, n) rows placed like the function's input (offset, layout) for a batched
        function, which ``evaluate`` then passes on without a copy; see Target.input_buffer."""
        if not self.batched:
            return super().input_buffer(rows)
        self._given = self._placed_rows(rows)
        return self._given

    def _owns(self, X: np.ndarray) -> bool:
        R = self._given
        return (
            R is not None
            and X.shape[0] <= R.shape[0]
            and X.strides == R.strides
            and X.__array_interface__["data"][0] == R.__array_interface__["data"][0]
        )

    def evaluate(self, X) -> np.ndarray:
        """(B,) float64 outputs of the function on each row of X (shape (B, n)): a batched
        function is called on chunks of at most :attr:`step` rows (X itself where it is the
        head of :meth:`input_buffer`'s rows, else a placed copy); an unbatched one once per row.
        Raises TargetError on a bad shape, a value not representable in the input format, a
        result that is not one output per row, or an exception of the function."""
        if not self.batched:
            return self.evaluate_each(X)
        X = self._check(X)
        out = np.empty(X.shape[0], dtype=np.float64)
        owned = self._owns(X)
        for lo in range(0, X.shape[0], self.step):
            chunk = X[lo : lo + self.step]
            r = chunk.shape[0]
            if owned:
                rows = chunk
            else:
                if self._rows is None or self._rows.shape[0] < r:
                    self._rows = self._placed_rows(min(self.step, X.shape[0]))
                rows = self._rows[:r]
                rows[...] = chunk
            y = self._guarded(self._fn, rows)
            out[lo : lo + r] = outputs_of(self.name, y, r)
        return out

    def spec(self) -> dict:
        """As LibraryTarget.spec, plus ``import_root``: the folder a module spec was imported
        from (``fpscope verify`` puts it on sys.path again), and ``"batched": true`` for a
        batched function (``"batched": false`` where make_target overrode the function's
        declaration), so that verify and gate rebuild it the same way."""
        out = super().spec()
        if self._in_process:
            out["in_process"] = True  # a function object that no spec can load again
        elif not _is_file(self.name.rpartition(":")[0]):
            out["import_root"] = os.getcwd()
        if self.batched or self._overridden:
            out["batched"] = self.batched
        return out


def build(name: str, *, n, shape, cond: Conditions, axis, index,
          batched: bool | None = None, fn=None) -> CallableTarget:
    """Build a callable target from its spec string, or from the function object ``fn`` (then
    ``name`` is :func:`spec_of`'s name for it).

    Raises:
        TargetError: see :class:`CallableTarget`; n missing; axis or index given.
    """
    from ._options import refuse, vector_length

    refuse(name, axis=axis, index=index)
    return CallableTarget(name, vector_length(name, n, shape), cond, batched=batched, fn=fn)


def spec_of(fn) -> str:
    """The name of a function object as a target: ``"module:qualname"`` (``__main__`` too).

    A module-level function, class method or callable object of an importable module gets a
    spec that :func:`load_function` loads again (so a record of it verifies from the CLI); a
    lambda, a nested function or a bound method gets the same form with its qualified name
    (``"__main__:<lambda>"``, ``"mymod:outer.<locals>.f"``), which only the Python API can
    re-run (pass the function again: ``fpscope.verify(record, target=fn)``)."""
    module = getattr(fn, "__module__", None) or type(fn).__module__ or "__main__"
    qual = (getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
            or type(fn).__qualname__)
    return f"{module}:{qual}"


def importable(spec: str, fn) -> bool:
    """Whether ``spec`` loads ``fn`` itself again (in another process too: not ``__main__``)."""
    where, _, attr = spec.rpartition(":")
    if not where or where == "__main__" or "<" in attr or _is_file(where):
        return _is_file(where)
    module = sys.modules.get(where)
    obj = module
    for part in attr.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return False
    return obj is fn or getattr(obj, "__func__", None) is getattr(fn, "__func__", fn)
