"""Any user function as a target: ``package.module:function`` or ``path/to/file.py:function``.

The function takes one 1-D numpy array of n elements in the storage dtype of the input format
(``numpy.float32``, ``ml_dtypes.bfloat16``, ...) and returns its reduction as a scalar, a 0-d
array or a 1-element array (numpy, ml_dtypes, torch or jax). The output format is the format of
what it returns (a Python float is fp64, a numpy.float32 is fp32, ...), found by one call on
zeros. The array is placed as asked (layout, offset) and reused for every call: the function
must not keep it. Modules are imported with the current folder on ``sys.path`` (as ``python -m``
does); a file spec is recorded with its absolute path, so records verify from any folder. ``threads`` limits BLAS threads (threadpoolctl) until ``close()``.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
from pathlib import Path

import numpy as np

from ._common import LibraryTarget
from ._memory import placed_zeros
from ._options import Conditions
from ._threads import BlasThreadLimit
from .base import TargetError


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


class CallableTarget(LibraryTarget):
    """A user function f(x) -> scalar over a 1-D array x of n elements; n leaves.

    Args:
        spec: ``"package.module:function"`` or ``"path/to/file.py:function"``.
        n: input length.
        cond: probe conditions (format, layout, offset, threads).

    Raises:
        TargetError: the function cannot be loaded (see :func:`load_function`). Errors raised by
            the function during ``evaluate`` also become one-line TargetErrors.
    """

    def __init__(self, spec: str, n: int, cond: Conditions):
        fn = load_function(spec)
        spec = absolute_spec(spec)
        super().__init__(spec, n, cond, (n,))
        self._fn = fn
        self._buf = placed_zeros((n,), self.storage_dtype, cond.layout, cond.offset)
        limit = BlasThreadLimit(spec, cond.threads)
        self._closers.append(limit.restore)
        first = self._guarded(self._fn, self._buf)
        scalar_of(spec, first)  # one real number, or a one-line TargetError now
        self.out_format = result_format(spec, first)

    def _call_one(self, x: np.ndarray) -> float:
        self._buf[...] = x
        return scalar_of(self.name, self._fn(self._buf))

    def spec(self) -> dict:
        """As LibraryTarget.spec, plus ``import_root``: the folder a module spec was imported
        from (``fpscope verify`` puts it on sys.path again)."""
        out = super().spec()
        if not _is_file(self.name.rpartition(":")[0]):
            out["import_root"] = os.getcwd()
        return out


def build(name: str, *, n, shape, cond: Conditions, axis, index) -> CallableTarget:
    """Build a callable target from its spec string.

    Raises:
        TargetError: see :class:`CallableTarget`; n missing; axis or index given.
    """
    from ._options import refuse, vector_length

    refuse(name, axis=axis, index=index)
    return CallableTarget(name, vector_length(name, n, shape), cond)
