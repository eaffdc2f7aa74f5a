"""Validation of the probe conditions shared by all target adapters.

Every function here raises :class:`~fpscope.targets.base.TargetError` with a one-line reason that
names the target, the option, the value seen and what is accepted, so that the command line can
print it as is (fpscope DESIGN.md: "exit code 2 on bad usage or input, with a one-line reason").
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field

from ..formats import FORMATS, Format, get_format
from .base import TargetError

#: Memory layouts of the probed operands: C order, Fortran order (2-D and 3-D operands; a 1-D
#: array is both), a view whose last axis has a stride of two elements, or "T": the transpose of
#: a C-order array of the reversed shape (F's strides, reached through a transpose; 1-D: C).
LAYOUTS = ("C", "F", "strided", "T")


def as_int(target: str, option: str, value, minimum: int) -> int:
    """``value`` as a Python int >= ``minimum``.

    Raises:
        TargetError: not an integer (bools and floats are refused) or below ``minimum``.
    """
    if isinstance(value, bool):
        raise TargetError(f"{target}: {option} must be an integer, got {value!r}")
    try:
        v = operator.index(value)
    except TypeError:
        raise TargetError(f"{target}: {option} must be an integer, got {value!r}") from None
    if v < minimum:
        raise TargetError(f"{target}: {option} must be at least {minimum}, got {v}")
    return int(v)


def as_format(target: str, dtype) -> Format:
    """The :class:`Format` named by ``dtype`` ("fp32", "float16", "bfloat16", ...).

    Raises:
        TargetError: unknown format name.
    """
    try:
        fmt = dtype if isinstance(dtype, Format) else get_format(str(dtype))
    except ValueError as exc:
        raise TargetError(f"{target}: {exc}") from None
    if fmt not in FORMATS.values():
        # the narrow formats (tf32, fp8, fp6, fp4, e8m0) are matrix-unit inputs: the emulator's
        # business, not a library reduction's
        raise TargetError(f"{target}: dtype {fmt.name} is not supported here; use one of "
                          f"{', '.join(FORMATS)}")
    return fmt


def as_layout(target: str, layout) -> str:
    """One of :data:`LAYOUTS` (case-insensitive for "c" and "f").

    Raises:
        TargetError: any other value.
    """
    text = str(layout)
    for known in LAYOUTS:
        if text.lower() == known.lower():
            return known
    raise TargetError(
        f"{target}: unknown layout {layout!r}; use one of {', '.join(LAYOUTS)}"
    )


def as_shape(target: str, shape, lengths: tuple[int, ...]) -> tuple[int, ...]:
    """``shape`` as a tuple of positive ints whose length is one of ``lengths``.

    Raises:
        TargetError: not a sequence of positive integers, or of a length not in ``lengths``.
    """
    if isinstance(shape, (int, str)) or not hasattr(shape, "__len__"):
        raise TargetError(f"{target}: shape must be a tuple of integers, got {shape!r}")
    if len(shape) not in lengths:
        want = " or ".join(str(k) for k in lengths)
        if len(lengths) > 2:
            want = ", ".join(str(k) for k in lengths[:-1]) + f" or {lengths[-1]}"
        raise TargetError(
            f"{target}: shape must have {want} dimensions, got {tuple(shape)!r}"
        )
    return tuple(as_int(target, "every shape entry", s, 1) for s in shape)


def refuse(target: str, **options) -> None:
    """Raise when an option that ``target`` does not use was given (not None).

    Silently ignoring an option would report a tree for conditions other than those asked for.

    Raises:
        TargetError: naming the first such option.
    """
    for key, value in options.items():
        if value is not None:
            raise TargetError(f"{target} does not take {key} (got {value!r})")


def check_leaves(target: str, n, leaves: int) -> None:
    """When both n and a shape were given, n must equal the leaf count implied by the shape.

    Raises:
        TargetError: they disagree.
    """
    if n is not None and as_int(target, "n", n, 1) != leaves:
        raise TargetError(
            f"{target}: n={n} disagrees with the shape, which gives {leaves} leaves"
        )


def vector_length(target: str, n, shape) -> int:
    """Length of a 1-D input given as ``n`` or ``shape=(n,)``.

    Raises:
        TargetError: neither given, a bad value, or both given and different.
    """
    if shape is not None:
        (length,) = as_shape(target, shape, (1,))
        check_leaves(target, n, length)
        return length
    if n is None:
        raise TargetError(f"{target} needs n (the reduction length)")
    return as_int(target, "n", n, 1)


def array_shape(target: str, n, shape, dims: tuple[int, ...] = (1, 2, 3)) -> tuple[int, ...]:
    """Shape of an array reduced whole (no axis), given as ``n`` (1-D) or ``shape`` with a
    number of dimensions in ``dims``; the tree has prod(shape) leaves.

    Raises:
        TargetError: neither given, a bad value (a zero dimension), a number of dimensions not
            in ``dims``, or n given beside a shape with a different element count.
    """
    if shape is None:
        return (vector_length(target, n, None),)
    dims_ok = as_shape(target, shape, dims)
    leaves = 1
    for s in dims_ok:
        leaves *= s
    check_leaves(target, n, leaves)
    return dims_ok


def matrix_dims(target: str, n, shape, has_rows: bool, has_cols: bool) -> tuple[int, int, int]:
    """(M, K, N) of a product of an M x K and a K x N operand.

    Accepted forms: ``n`` alone gives K = n and M = n (N = n) where the op has rows (columns),
    else 1; ``shape=(M, K, N)``; ``shape=(K, N)`` for a vector-matrix product (M = 1);
    ``shape=(M, K)`` for a matrix-vector product (N = 1).

    Raises:
        TargetError: bad or missing sizes, M != 1 for an op without rows, N != 1 without columns,
            or n given beside a shape with a different K.
    """
    if shape is None:
        if n is None:
            raise TargetError(f"{target} needs n (K, the reduction length) or shape")
        k = as_int(target, "n", n, 1)
        return (k if has_rows else 1, k, k if has_cols else 1)
    if has_rows and has_cols:
        m, k, c = as_shape(target, shape, (3,))
    elif has_cols:  # vector-matrix: shape of the matrix (K, N)
        dims = as_shape(target, shape, (2, 3))
        m, k, c = dims if len(dims) == 3 else (1, *dims)
    elif has_rows:  # matrix-vector: shape of the matrix (M, K)
        dims = as_shape(target, shape, (2, 3))
        m, k, c = dims if len(dims) == 3 else (*dims, 1)
    else:
        m, k, c = 1, vector_length(target, None, shape), 1
    if not has_rows and m != 1:
        raise TargetError(f"{target} has a single row: M must be 1, got shape {shape!r}")
    if not has_cols and c != 1:
        raise TargetError(f"{target} has a single column: N must be 1, got shape {shape!r}")
    check_leaves(target, n, k)
    return m, k, c


@dataclass
class Conditions:
    """Probe conditions common to all adapters, validated.

    Attributes:
        fmt: input format.
        layout: one of :data:`LAYOUTS`.
        offset: bytes between a 64-byte-aligned address and the first element of each probed
            buffer (>= 0).
        threads: thread limit, or None for the library's default.
        extra: further JSON-able entries for ``spec()`` (device, subscripts, ...).
    """

    fmt: Format
    layout: str = "C"
    offset: int = 0
    threads: int | None = None
    extra: dict = field(default_factory=dict)


def conditions(target: str, dtype, layout, offset, threads) -> Conditions:
    """Validate the options every adapter takes.

    Raises:
        TargetError: unknown dtype or layout, negative or non-integer offset, threads < 1.
    """
    return Conditions(
        fmt=as_format(target, dtype),
        layout=as_layout(target, layout),
        offset=as_int(target, "offset", offset, 0),
        threads=None if threads is None else as_int(target, "threads", threads, 1),
    )
