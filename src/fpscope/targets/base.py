"""The probe interface: what every black-box operation under test offers to the algorithms.

A target knows nothing about revealing algorithms (fpscope DESIGN.md, layers). It only evaluates
the operation on inputs the algorithm chooses, through two calls:

* ``evaluate(X)``: X has shape (B, n), float64 values exactly representable in ``in_format``; row b
  is one input vector of the reduction (for a matrix op: the K-vector of one output, multiplied by
  ones). Returns the (B,) outputs as float64 (exact widening of the op's output).
* ``evaluate_outer(P, Q)`` (matrix ops only): P has shape (R, n), Q shape (n, C) with R <= max_rows
  and C <= max_cols; returns the (R, C) outputs where output (r, c) reduces P[r, k] * Q[k, c] over
  k. One call yields R * C probes when all outputs share one K-order (the algorithm checks that).
* ``evaluate_products(A, B)`` (ops that multiply before they add: dot, matvec, vecmat, matmul,
  two-operand einsum; ``has_products`` is True): A and B have shape (B, n); row b is one call of
  the op on the factor vectors A[b] and B[b] (for a matrix op: row 0 of A and column 0 of B, the
  rest zero), returning output (0, 0). How each product enters the sum (rounded, or fused in an
  FMA) is only visible through this call: with B = ones every product is exact.
"""

from __future__ import annotations

import contextlib

import numpy as np

from ..formats import Format, to_storage


class TargetError(RuntimeError):
    """The operation under test failed or cannot be set up; the message is one line for the user."""


class Target:
    """Base class of black-box operations.

    Attributes:
        name: target name as typed by the user ("numpy.sum", "pkg.mod:func").
        n: number of leaves of the revealed tree (reduction length; K for matrix ops).
        in_format: format of the inputs (values passed in must be exactly representable).
        out_format: format of the op's output.
        is_matrix: True when ``evaluate_outer`` is available.
        has_products: True when ``evaluate_products`` is available (the op multiplies factor
            pairs before it adds them).
        max_rows, max_cols: the largest R and C accepted by ``evaluate_outer``.
        calls: number of calls made to the underlying operation so far.
    """

    name: str = "target"
    is_matrix: bool = False
    has_products: bool = False
    max_rows: int = 0
    max_cols: int = 0

    def __init__(self, n: int, in_format: Format, out_format: Format | None = None):
        if n < 1:
            raise TargetError(f"n must be at least 1, got {n}")
        self.n = int(n)
        self.in_format = in_format
        self.out_format = out_format or in_format
        self.calls = 0

    # -- to override -----------------------------------------------------------------------
    def _call_one(self, x: np.ndarray) -> float:
        """Run the op once on the input vector x (storage dtype of in_format, shape (n,))."""
        raise NotImplementedError

    def spec(self) -> dict:
        """JSON-able description of the target and its probe conditions, for records."""
        return {"name": self.name, "n": self.n, "dtype": self.in_format.name}

    # -- the probe interface -----------------------------------------------------------------
    def evaluate(self, X) -> np.ndarray:
        """Outputs for each row of X, one call of the op per row (subclasses may batch)."""
        return self.evaluate_each(X)

    def evaluate_each(self, X) -> np.ndarray:
        """Outputs for each row of X, always one separate call of the op per row."""
        X = self._check(X)
        out = np.empty(X.shape[0], dtype=np.float64)
        call = self._call_one
        with self._errors_reported():
            for b in range(X.shape[0]):
                self.calls += 1
                out[b] = call(X[b])
        return out

    def input_buffer(self, rows: int) -> np.ndarray:
        """A (rows, n) array in the storage dtype for probe inputs. Targets that place their
        inputs (alignment offset, layout) return a buffer already placed, so that ``evaluate`` on
        it (or on its leading rows) needs no copy; the default is a plain array."""
        return np.empty((rows, self.n), dtype=self.in_format.numpy_dtype())

    def evaluate_outer(self, P, Q) -> np.ndarray:
        raise TargetError(f"{self.name} is not a matrix operation")

    def _call_pair(self, a: np.ndarray, b: np.ndarray) -> float:
        """Run the op once on the factor vectors a and b (storage dtype, shape (n,))."""
        raise TargetError(f"{self.name} takes no factor pairs (it adds its inputs as they are)")

    def evaluate_products(self, A, B) -> np.ndarray:
        """Outputs of the op on the factor vectors (A[b], B[b]), one call per row.

        Args:
            A, B: (batch, n) float64 values exactly representable in ``in_format``.

        Returns:
            (batch,) float64 outputs (the exact widening of the op's output).

        Raises:
            TargetError: the op has no products (``has_products`` is False), bad shapes, a value
                not representable in ``in_format``, or the op failed.
        """
        if not self.has_products:
            raise TargetError(f"{self.name} takes no factor pairs (it adds its inputs as they are)")
        A, B = self._check(A), self._check(B)
        if A.shape != B.shape:
            raise TargetError(f"factor arrays differ in shape: {A.shape} and {B.shape}")
        out = np.empty(A.shape[0], dtype=np.float64)
        with self._errors_reported():
            for r in range(A.shape[0]):
                self.calls += 1
                out[r] = self._call_pair(A[r], B[r])
        return out

    # -- helpers for subclasses ---------------------------------------------------------------
    def _check(self, X) -> np.ndarray:
        """(B, n) inputs in the storage dtype (see :meth:`as_storage`)."""
        X = self.as_storage(X)
        if X.ndim != 2 or X.shape[1] != self.n:
            raise TargetError(f"probe inputs must have shape (B, {self.n}), got {X.shape}")
        return X

    def as_storage(self, X) -> np.ndarray:
        """X in the storage dtype of ``in_format``. Arrays already of that dtype pass unchanged
        (they are exact by construction); anything else is converted with
        :func:`fpscope.formats.to_storage`, which refuses values that are not representable.

        Raises:
            TargetError: a value is not exactly representable in ``in_format``.
        """
        if isinstance(X, np.ndarray) and X.dtype == self.in_format.numpy_dtype():
            return X
        try:
            return to_storage(np.asarray(X, dtype=np.float64), self.in_format)
        except ValueError as exc:
            raise TargetError(str(exc)) from None

    def _guarded(self, fn, *args):
        """One counted call of ``fn``; its exceptions become one-line TargetErrors."""
        self.calls += 1
        with self._errors_reported():
            return fn(*args)

    @contextlib.contextmanager
    def _errors_reported(self):
        """Floating-point warnings off; an exception of the user's op becomes a TargetError."""
        try:
            with np.errstate(all="ignore"):
                yield
        except TargetError:
            raise
        except Exception as exc:  # the user's op raised: report it in one line
            msg = str(exc).strip().splitlines()
            raise TargetError(
                f"{self.name} raised {type(exc).__name__}: {msg[0] if msg else ''}"
            ) from None

    def close(self) -> None:
        """Release resources (thread limits, device memory); safe to call twice."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
