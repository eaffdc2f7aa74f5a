"""Shared structure of the library adapters: probe conditions, ``spec()``, and matrix probing.

:class:`LibraryTarget` stores the validated probe conditions and describes them in ``spec()``.
:class:`MatrixTarget` implements the probe interface of a product C = A @ B (A: M x K, B: K x N)
once for every library: a subclass only supplies ``_product(A, B)``, one call of its operation.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..formats import Format, format_of_dtype
from ._options import Conditions
from ._size import check_memory
from .base import Target, TargetError


def output_format(target: str, dtype) -> Format:
    """The :class:`Format` of an operation's output dtype (numpy, ml_dtypes, torch or jax).

    Raises:
        TargetError: the dtype is not one of fp64, fp32, fp16, bf16.
    """
    try:
        return format_of_dtype(dtype)
    except ValueError:
        raise TargetError(f"{target} returns {dtype}, which fpscope cannot read") from None


class LibraryTarget(Target):
    """A target built from validated :class:`~fpscope.targets._options.Conditions`.

    Args:
        name: target name as typed by the user.
        n: number of leaves of the revealed tree.
        cond: input format, layout, offset, threads and extra spec entries.
        shape: shape of the operation's input as the user gave or implied it (for ``spec()``).
        out_format: format of the op's output (default: the input format).
        axis, index: the reduced axis and the probed output, where the target has them.
    """

    def __init__(
        self,
        name: str,
        n: int,
        cond: Conditions,
        shape: tuple[int, ...],
        out_format: Format | None = None,
        axis: int | None = None,
        index: int | None = None,
    ):
        self.name = name
        super().__init__(n, cond.fmt, out_format)
        self.cond = cond
        self.shape = tuple(int(s) for s in shape)
        if not self.is_matrix:  # before a subclass allocates its input (MatrixTarget: its own)
            check_memory(name, n, int(np.prod(self.shape, dtype=object)),
                         cond.fmt.numpy_dtype().itemsize, cond.fmt.name)
        self.axis = axis
        self.index = index
        self._closers: list[Callable[[], None]] = []

    @property
    def storage_dtype(self) -> np.dtype:
        """numpy / ml_dtypes dtype of the input format."""
        return self.in_format.numpy_dtype()

    def spec(self) -> dict:
        """JSON-able description: name, n, shape, dtype, out_dtype, layout, offset, threads, axis,
        index, plus adapter-specific entries (device, M/K/N for matrix ops)."""
        return {
            "name": self.name,
            "n": self.n,
            "shape": list(self.shape),
            "dtype": self.in_format.name,
            "out_dtype": self.out_format.name,
            "layout": self.cond.layout,
            "offset": self.cond.offset,
            "threads": self.cond.threads,
            "axis": self.axis,
            "index": self.index,
            **self.cond.extra,
        }

    def close(self) -> None:
        """Undo thread limits and other settings made for this target (idempotent)."""
        closers, self._closers = self._closers, []
        for fn in reversed(closers):
            fn()


class MatrixTarget(LibraryTarget):
    """A product C = A @ B with A of shape (M, K) and B of shape (K, N); the tree has K leaves.

    ``evaluate(X)``: per probe row, A = zeros with row 0 = X[b] and B = ones; returns C[0, 0]
    (one call of the op per probe: a GEMM may order K differently for other rows, case C5).
    ``evaluate_outer(P, Q)``: A = zeros with A[:R] = P, B = zeros with B[:, :C] = Q; one call;
    returns C[:R, :C]. ``max_rows`` = M and ``max_cols`` = N.
    ``evaluate_products(A, B)``: per row, A = zeros with row 0 = A[b], B = zeros with column 0 =
    B[b]; one call each; returns C[0, 0].
    Subclasses implement :meth:`_product`.
    """

    is_matrix = True
    has_products = True

    def __init__(
        self,
        name: str,
        dims: tuple[int, int, int],
        cond: Conditions,
        shape: tuple[int, ...] | None = None,
        out_format: Format | None = None,
    ):
        m, k, c = (int(d) for d in dims)
        check_memory(name, k, m * k + k * c + m * c, cond.fmt.numpy_dtype().itemsize,
                     cond.fmt.name)  # A, B and C, before a subclass allocates them
        super().__init__(name, k, cond, shape if shape is not None else dims, out_format)
        self.M, self.K, self.N = m, k, c
        self.max_rows, self.max_cols = m, c
        self._ones: np.ndarray | None = None
        self._stage: tuple[np.ndarray, np.ndarray] | None = None
        self._used = (0, 0)

    def _product(self, A: np.ndarray, B: np.ndarray) -> np.ndarray:
        """One call of the op. A: (M, K), B: (K, N), storage dtype, C order.

        Returns:
            (M, N) float64 array, the exact widening of the op's output.
        """
        raise NotImplementedError

    def spec(self) -> dict:
        return {**super().spec(), "M": self.M, "K": self.K, "N": self.N}

    def _call_one(self, x: np.ndarray) -> float:
        A = np.zeros((self.M, self.K), dtype=x.dtype)
        A[0] = x
        if self._ones is None:
            self._ones = np.ones((self.K, self.N), dtype=x.dtype)
        return float(self._product(A, self._ones)[0, 0])

    def _call_pair(self, a: np.ndarray, b: np.ndarray) -> float:
        A = np.zeros((self.M, self.K), dtype=a.dtype)
        A[0] = a
        B = np.zeros((self.K, self.N), dtype=b.dtype)
        B[:, 0] = b
        return float(self._product(A, B)[0, 0])

    def evaluate_outer(self, P, Q) -> np.ndarray:
        """Outputs (r, c) = the op's reduction over k of P[r, k] * Q[k, c], from one call.

        Args:
            P: (R, K) float64 values exactly representable in ``in_format``, 1 <= R <= max_rows.
            Q: (K, C) likewise, 1 <= C <= max_cols.

        Returns:
            (R, C) float64 array.

        Raises:
            TargetError: bad shapes, a value not exactly representable in ``in_format``, or the
                op failed.
        """
        P = self.as_storage(P)
        Q = self.as_storage(Q)
        if P.ndim != 2 or P.shape[1] != self.K or not 1 <= P.shape[0] <= self.M:
            raise TargetError(
                f"{self.name}: P must have shape (R, {self.K}) with 1 <= R <= {self.M}, "
                f"got {P.shape}"
            )
        if Q.ndim != 2 or Q.shape[0] != self.K or not 1 <= Q.shape[1] <= self.N:
            raise TargetError(
                f"{self.name}: Q must have shape ({self.K}, C) with 1 <= C <= {self.N}, "
                f"got {Q.shape}"
            )
        r, c = P.shape[0], Q.shape[1]
        A, B = self._staging()
        A[:r] = P
        A[r : self._used[0]] = 0  # rows a previous call filled
        B[:, :c] = Q
        B[:, c : self._used[1]] = 0
        self._used = (r, c)
        out = self._guarded(self._product, A, B)
        return np.array(out[:r, :c], dtype=np.float64)

    def _staging(self):
        """Reused (M, K) and (K, N) operand buffers (zero outside the rows/columns in use)."""
        if self._stage is None:
            dtype = self.storage_dtype
            self._stage = (np.zeros((self.M, self.K), dtype=dtype), np.zeros((self.K, self.N), dtype=dtype))
            self._used = (0, 0)
        return self._stage


class OutputTarget(Target):
    """Output (i, j) of a matrix op as a reduction of its own: ``evaluate`` puts each probe
    vector in row i of A (B = ones) and reads output (i, j), one call per vector;
    ``evaluate_products`` puts a in row i of A and b in column j of B. Per-pair FPRev on this
    target reveals that one output's tree (fpscope ``reveal --position I,J``).

    Raises (constructor):
        TargetError: (i, j) outside the op's (M, N) outputs.
    """

    has_products = True

    def __init__(self, whole: Target, i: int, j: int):
        if not (0 <= i < whole.max_rows and 0 <= j < whole.max_cols):
            raise TargetError(f"{whole.name}: output ({i}, {j}) is outside its "
                              f"{whole.max_rows}x{whole.max_cols} outputs")
        super().__init__(whole.n, whole.in_format, whole.out_format)
        self.name, self.whole, self.i, self.j = whole.name, whole, int(i), int(j)

    def _call_one(self, x: np.ndarray) -> float:
        P = np.zeros((self.i + 1, self.n), dtype=np.float64)
        P[self.i] = x
        Q = np.ones((self.n, self.j + 1))
        return float(self.whole.evaluate_outer(P, Q)[self.i, self.j])

    def _call_pair(self, a: np.ndarray, b: np.ndarray) -> float:
        P = np.zeros((self.i + 1, self.n), dtype=np.float64)
        P[self.i] = a
        Q = np.zeros((self.n, self.j + 1))
        Q[:, self.j] = b
        return float(self.whole.evaluate_outer(P, Q)[self.i, self.j])

    @property
    def calls(self) -> int:
        return self.whole.calls

    @calls.setter
    def calls(self, value) -> None:  # the whole op counts its calls
        pass

    def spec(self) -> dict:
        return {**self.whole.spec(), "output": [self.i, self.j]}

    def close(self) -> None:
        self.whole.close()


def at_output(whole: Target, output) -> Target:
    """:class:`OutputTarget` of ``whole`` at ``output`` = (i, j).

    Raises:
        TargetError: ``whole`` is not a matrix op, or a bad position.
    """
    if not whole.is_matrix:
        whole.close()
        raise TargetError(f"{whole.name} is not a matrix op: --position I,J needs one")
    try:
        i, j = (int(v) for v in output)
    except (TypeError, ValueError):
        whole.close()
        raise TargetError(f"--position must be I,J (two integers), got {output!r}") from None
    try:
        return OutputTarget(whole, i, j)
    except TargetError:
        whole.close()
        raise
