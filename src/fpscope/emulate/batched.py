"""Batched GEMMs: operands of more than two dimensions, with numpy.matmul's semantics.

``A`` (..., M, K) and ``B`` (..., K, N) hold stacks of matrices in their last two dimensions;
the leading (batch) dimensions broadcast against each other (numpy broadcasting rules), and D
has shape ``batch + (M, N)``. A 1-D A is one row (its M axis is removed from D), a 1-D B one
column (N removed), as numpy.matmul does. C, ``scale_a`` (..., M, K / s) and ``scale_b``
(..., K / s, N) broadcast the same way (C against D's shape).

Every element of D depends only on its row of A (and of ``scale_a``), its column of B (and of
``scale_b``) and its element of C (:func:`fpscope.emulate.matmul`), so a stack is computed as
one 2-D GEMM where that gives the same bits: A's batch folded into rows when B (and scale_b)
has no batch of its own, B's batch folded into columns when A (and scale_a) has none; otherwise
one 2-D GEMM per batch element. tests/test_emulate_outputs.py compares each with a loop of 2-D
calls, bit for bit.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["run"]


def _array(x):
    """x as a numpy array, its dtype kept (a float32 operand is read as fp32 words)."""
    return x if isinstance(x, np.ndarray) else np.asarray(x)


def _single(shape: tuple) -> bool:
    return all(d == 1 for d in shape)


def run(core, A, B, C=None, scale_a=None, scale_b=None, progress=None) -> np.ndarray:
    """D = A @ B + C over broadcast batch dimensions (module docstring).

    Args:
        core: ``core(A, B, C, scale_a, scale_b, progress) -> D``, one 2-D GEMM: A (M, K),
            B (K, N), C (M, N) or None, the scales 2-D or None; float64 D (M, N).
        A, B, C, scale_a, scale_b: array-likes (module docstring).
        progress: None, or ``progress(done, total)``: handed to ``core`` (rows of the 2-D
            GEMM); with one GEMM per batch element, ``total`` is every element's rows and
            ``done`` counts the rows of the elements finished before.

    Returns:
        float64 array: ``batch + (M, N)`` without the axes of 1-D operands.

    Raises:
        ValueError: a 0-d operand; inner dimensions that differ; batch dimensions, C or a scale
            array that do not broadcast; and whatever ``core`` raises.
    """
    A, B = _array(A), _array(B)
    if A.ndim == 0 or B.ndim == 0:
        raise ValueError(f"matmul takes arrays of at least one dimension; got shapes {A.shape} "
                         f"and {B.shape}")
    shapes = (A.shape, B.shape)
    a1, b1 = A.ndim == 1, B.ndim == 1
    sa = None if scale_a is None else _array(scale_a)
    sb = None if scale_b is None else _array(scale_b)
    if a1:
        A = A[None, :]
        sa = sa[None, :] if sa is not None and sa.ndim == 1 else sa
    if b1:
        B = B[:, None]
        sb = sb[:, None] if sb is not None and sb.ndim == 1 else sb
    (M, K), (K2, N) = A.shape[-2:], B.shape[-2:]
    if K != K2:
        raise ValueError(f"inner dimensions differ: A is {shapes[0]}, B is {shapes[1]}")
    try:
        batch = np.broadcast_shapes(A.shape[:-2], B.shape[:-2])
    except ValueError:
        raise ValueError(f"the batch dimensions of A {shapes[0]} and B {shapes[1]} do not "
                         f"broadcast") from None
    final = batch + (() if a1 else (M,)) + (() if b1 else (N,))
    if C is not None:
        C = _array(C)
        try:
            C = np.broadcast_to(C, final)
        except ValueError:
            raise ValueError(f"C of shape {C.shape} does not broadcast to D's shape "
                             f"{final}") from None
        if b1:
            C = C[..., None]
        if a1:
            C = C[..., None, :]
    if not batch:
        D = core(A, B, C, sa, sb, progress)
        return D.reshape(final)
    for what, s in (("scale_a", sa), ("scale_b", sb)):
        if s is not None and s.ndim < 2:
            raise ValueError(f"{what} must have the operand's dimensions, got shape {s.shape}")
    sa_batch = () if sa is None else sa.shape[:-2]
    sb_batch = () if sb is None else sb.shape[:-2]
    for what, s in (("scale_a", sa_batch), ("scale_b", sb_batch)):
        try:
            np.broadcast_shapes(s, batch)
        except ValueError:
            raise ValueError(f"the batch dimensions of {what} {s} do not broadcast to "
                             f"{batch}") from None
    P = math.prod(batch)

    def full(x, tail):
        return None if x is None else np.broadcast_to(x, batch + tail)

    if _single(B.shape[:-2]) and _single(sb_batch):  # A's batch folded into rows
        two = lambda x: None if x is None else x.reshape(x.shape[-2:])  # noqa: E731
        rows = lambda x: None if x is None else x.reshape((P * M,) + x.shape[-1:])  # noqa: E731
        D = core(rows(full(A, (M, K))), two(B), rows(full(C, (M, N))),
                 rows(full(sa, sa.shape[-2:] if sa is not None else None)), two(sb), progress)
        return D.reshape(batch + (M, N)).reshape(final)
    if _single(A.shape[:-2]) and _single(sa_batch):  # B's batch folded into columns
        two = lambda x: None if x is None else x.reshape(x.shape[-2:])  # noqa: E731

        def cols(x):
            if x is None:
                return None
            return np.moveaxis(x, -2, 0).reshape(x.shape[-2], P * x.shape[-1])

        D = core(two(A), cols(full(B, (K, N))), cols(full(C, (M, N))), two(sa),
                 cols(full(sb, sb.shape[-2:] if sb is not None else None)), progress)
        D = np.moveaxis(D.reshape((M,) + batch + (N,)), 0, -2)
        return np.ascontiguousarray(D).reshape(final)
    Af, Bf, Cf = full(A, (M, K)), full(B, (K, N)), full(C, (M, N))
    SAf = full(sa, sa.shape[-2:] if sa is not None else None)
    SBf = full(sb, sb.shape[-2:] if sb is not None else None)
    D = np.empty(batch + (M, N))

    def offset(base: int):
        """progress of one element's rows, counted after the elements before it"""
        return None if progress is None else (lambda done, _m: progress(base + done, P * M))

    for i, idx in enumerate(np.ndindex(*batch)):
        cb = offset(i * M)
        D[idx] = core(Af[idx], Bf[idx], None if Cf is None else Cf[idx],
                      None if SAf is None else SAf[idx], None if SBf is None else SBf[idx], cb)
    return D.reshape(final)
