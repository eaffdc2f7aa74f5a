"""Placement of probe operands in memory: layout (C, F, strided, T) and byte offset from alignment.

Some kernels change their accumulation order with the buffer address: older OpenBLAS AVX-512
asum kernels peel scalar elements until the pointer is 64-byte aligned (fpscope cases/README.md,
C4). A target therefore puts its probed operands ``offset`` bytes after a 64-byte-aligned address,
so that ``address % 64 == offset % 64``, and keeps the buffer for all later calls.
"""

from __future__ import annotations

import numpy as np

#: Alignment (bytes) the offset is measured from: an AVX-512 vector, a common cache line.
ALIGN = 64


def _raw_view(nbytes: int, offset: int) -> np.ndarray:
    """uint8 array of ``nbytes`` zero bytes starting ``offset`` bytes after a 64-byte boundary.
    np.zeros (calloc): a large buffer's pages are zeroed by the OS when first touched, so
    building a target costs no time for memory its probes never use (n = 2e9 fp32 took 43 s
    of zero filling before the reveal refused n)."""
    raw = np.zeros(nbytes + ALIGN + offset, dtype=np.uint8)
    start = (-raw.ctypes.data) % ALIGN + offset
    return raw[start : start + nbytes]


def placed_zeros(shape: tuple[int, ...], dtype, layout: str = "C", offset: int = 0) -> np.ndarray:
    """Zero array of ``shape`` and ``dtype`` laid out as asked.

    Args:
        shape: shape of any number of dimensions (1-D, 2-D and 3-D are used).
        dtype: numpy or ml_dtypes dtype.
        layout: "C" (row-major), "F" (column-major; a 1-D array is both), "strided" (the last
            axis has a stride of two elements: a view of every second element of a C-order buffer
            twice as long along that axis), or "T" (the transpose of a C-order array of the
            reversed shape: the strides of "F", reached through a transpose; a 1-D array is C).
        offset: bytes between a 64-byte-aligned address and the first element (any value >= 0;
            one that is not a multiple of the item size gives an unaligned array, which numpy
            processes through its unaligned, buffered loops).

    Returns:
        A writeable view ``a`` with ``a.ctypes.data % 64 == offset % 64``.
    """
    dtype = np.dtype(dtype)
    shape = tuple(int(s) for s in shape)
    full = shape[:-1] + (2 * shape[-1],) if layout == "strided" else shape
    nbytes = int(np.prod(full)) * dtype.itemsize
    buf = _raw_view(nbytes, offset).view(dtype)
    if layout == "T":
        arr = buf.reshape(full[::-1]).T
    else:
        arr = buf.reshape(full, order="F" if layout == "F" else "C")
    if layout == "strided":
        arr = arr[..., ::2]
    return arr  # zero: _raw_view's buffer is


def placed_rows(rows: int, n: int, dtype, layout: str = "C", offset: int = 0) -> np.ndarray:
    """(rows, n) zero array whose every row is placed like ``placed_zeros((n,), ...)``.

    Each row has the element stride of the 1-D layout (1, or 2 for "strided") and starts at the
    same address modulo 64: the row stride is padded to a multiple of 64 bytes. This lets one
    reduction along axis 1 stand for ``rows`` separate 1-D calls (where the library gives the
    same bits; see the numpy.sum target).
    """
    dtype = np.dtype(dtype)
    step = 2 if layout == "strided" else 1
    row_bytes = n * step * dtype.itemsize
    row_bytes = -(-row_bytes // ALIGN) * ALIGN
    if row_bytes % dtype.itemsize:
        raise ValueError(f"item size {dtype.itemsize} does not divide {ALIGN}")
    buf = _raw_view(rows * row_bytes, offset).view(dtype)
    arr = buf.reshape(rows, row_bytes // dtype.itemsize)[:, : n * step : step]
    return arr  # zero: _raw_view's buffer is


def placed_batch(rows: int, shape: tuple[int, ...], dtype, layout: str = "C",
                 offset: int = 0) -> np.ndarray:
    """(rows, *shape) zero array whose every ``a[b]`` is placed like ``placed_zeros(shape, ...)``.

    Each ``a[b]`` has the element strides of the layout and starts at the same address modulo
    64 (the row stride is padded to a multiple of 64 bytes), so that one reduction over axes
    1..len(shape) can stand for ``rows`` separate whole-array calls where the library gives the
    same bits (see the numpy.sum target). For a 1-D shape the strides equal those of
    :func:`placed_rows`.
    """
    dtype = np.dtype(dtype)
    shape = tuple(int(s) for s in shape)
    one = placed_zeros(shape, dtype, layout, 0)  # the element strides of one placed array
    full = shape[:-1] + (2 * shape[-1],) if layout == "strided" else shape
    row_bytes = -(-int(np.prod(full)) * dtype.itemsize // ALIGN) * ALIGN
    if row_bytes % dtype.itemsize:
        raise ValueError(f"item size {dtype.itemsize} does not divide {ALIGN}")
    buf = _raw_view(rows * row_bytes, offset).view(dtype)
    arr = np.lib.stride_tricks.as_strided(
        buf, shape=(rows, *shape), strides=(row_bytes, *one.strides), writeable=True
    )
    return arr  # zero: _raw_view's buffer is
