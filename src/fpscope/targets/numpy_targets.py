"""numpy operations as black-box targets.

Targets (dtypes fp64, fp32, fp16, bf16; bf16 arrays are ``ml_dtypes.bfloat16``, whose loops numpy
calls like its own):

==========================  ==================================================  ================
name                        one call                                            leaves
==========================  ==================================================  ================
numpy.sum                   ``np.sum(x)``, x of shape (n,), (R,C) or (R,C,D)    prod(shape)
numpy.dot                   ``np.dot(x, ones(n))``                              n
numpy.cumsum                ``np.cumsum(x)[index]``, x of shape (n,)            index + 1
numpy.add.reduce            ``np.add.reduce(A, axis)[index]``, A of shape (R,C) shape[axis]
numpy.vecmat                ``x @ A``, A of shape (K, N)      K
numpy.matvec                ``A @ x``, A of shape (M, K)      K
numpy.matmul                ``np.matmul(A, B)``, (M, K) @ (K, N)                K
numpy.einsum[SUBSCRIPTS]    ``np.einsum(subscripts, ...)`` (see ``_einsum``)    K
==========================  ==================================================  ================

Every probed operand is placed in memory as asked (layout "C", "F", "strided" or "T"; ``offset``
bytes after a 64-byte boundary, cases/README.md C4) and reused for every call. ``threads`` limits
the BLAS threads (threadpoolctl) until ``close()``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ._common import LibraryTarget, MatrixTarget, output_format
from ._einsum import EinsumPlan, parse_einsum
from ._memory import placed_batch, placed_rows, placed_zeros
from ._options import Conditions, array_shape, as_int, as_shape, check_leaves, vector_length
from ._threads import BlasThreadLimit
from .base import TargetError

#: Bytes of float64 probe rows converted and summed per batched ``np.sum`` call (the storage
#: buffer and the conversion's temporaries stay well under 64 MB). 32 MB is 256 fp32 rows at
#: n = 16384: fewer, larger calls made the reveal ~15% faster than 8 MB on the 2-core CI
#: machine (benchmarks/bench_reveal.py), larger ones slower again (cache).
BATCH_BYTES = 32 << 20


def _out_format(name: str, fmt, trial: Callable[[np.dtype], object]):
    """Output format of the op, from a call on tiny zero operands (this also checks the dtype).

    Raises:
        TargetError: the op does not accept the dtype.
    """
    try:
        with np.errstate(all="ignore"):
            y = trial(fmt.numpy_dtype())
    except AttributeError as exc:
        raise TargetError(
            f"{name} is not available in numpy {np.__version__}: {exc}"
        ) from None
    except Exception as exc:
        raise TargetError(f"{name} does not support {fmt.name}: {exc}") from None
    return output_format(name, np.asarray(y).dtype)


class _NumpyTarget(LibraryTarget):
    """Holds the BLAS thread limit; subclasses call ``_start()`` at the end of ``__init__``."""

    def _start(self) -> None:
        limit = BlasThreadLimit(self.name, self.cond.threads)
        self._closers.append(limit.restore)

    def _placed(self, shape: tuple[int, ...]) -> np.ndarray:
        return placed_zeros(shape, self.storage_dtype, self.cond.layout, self.cond.offset)


class NumpySum(_NumpyTarget):
    """``np.sum`` of a whole array: 1-D of n elements, or 2-D / 3-D of shape ``shape`` (no axis).

    Leaves are numbered by the element's logical C-order flat index, whatever the layout: leaf k
    is ``a[np.unravel_index(k, shape)]``, so a probe row x fills ``a[...] = x.reshape(shape)``.
    ``np.sum`` of an array whose dimensions its iterator can merge (C, F, T and strided are all
    such) adds the elements in memory order, like the 1-D sum of the memory-order vector (checked
    bitwise by tests/test_sum_nd.py on numpy 2.4.6).

    ``evaluate(X)`` sums all probe rows of X in few calls, ``np.sum(rows, axis=1)`` on a (B, n)
    array whose rows are placed like the 1-D input (same element stride, same address modulo
    64), where that is known to give the bits of one ``np.sum`` call per row (dtypes in
    :attr:`BATCHED`; checked bitwise by the tests); for a 2-D or 3-D shape, ``np.sum`` over axes
    1..ndim of a (B, *shape) array each of whose ``[b]`` is placed like the input (layouts in
    :attr:`BATCHED_LAYOUTS`). Elsewhere it makes one call per row, like ``evaluate_each``. Set
    ``batched = False`` on an instance to force one call per row.
    """

    #: dtypes for which a row-wise ``np.sum(axis=1)`` equals per-row ``np.sum`` bit for bit:
    #: all four on numpy 2.4.6 / x86-64 AVX-512 (tests/test_targets.py: n = 1..300 and up to
    #: 2^16, random normal data, C and strided layouts, aligned and unaligned offsets).
    BATCHED = frozenset({"fp64", "fp32", "fp16", "bf16"})

    #: layouts of 2-D / 3-D arrays for which ``np.sum`` over all axes but the first of a
    #: (B, *shape) array equals per-``[b]`` ``np.sum`` bit for bit: all four on numpy 2.4.6
    #: (tests/test_sum_nd.py: 2-D and 3-D shapes, every dtype, aligned and unaligned offsets).
    BATCHED_LAYOUTS = frozenset({"C", "F", "strided", "T"})

    def __init__(self, shape, cond: Conditions):
        if not isinstance(shape, tuple):
            shape = (int(shape),)
        shape = tuple(int(s) for s in shape)
        n = int(np.prod(shape))
        super().__init__("numpy.sum", n, cond, shape)
        self.out_format = _out_format(self.name, cond.fmt, lambda dt: np.sum(np.zeros(1, dt)))
        self._nd = len(shape) > 1
        self._axes = tuple(range(1, len(shape) + 1)) if self._nd else 1
        self._buf = self._placed(shape)
        self._rows: np.ndarray | None = None  # where foreign inputs are copied to
        self._given: np.ndarray | None = None  # the buffer handed out by input_buffer
        self.batched = cond.fmt.name in self.BATCHED and (
            not self._nd or cond.layout in self.BATCHED_LAYOUTS
        )
        self._start()

    def _call_one(self, x: np.ndarray) -> float:
        self._buf[...] = x.reshape(self.shape) if self._nd else x
        return float(np.sum(self._buf))

    def _flat_rows(self) -> bool:
        """True when a (B, n) array of placed 1-D rows, reshaped to (B, *shape), is placed like
        the input (layouts whose memory order is the logical C order)."""
        return not self._nd or self.cond.layout in ("C", "strided")

    def input_buffer(self, rows: int) -> np.ndarray:
        """(rows, n) rows placed like the op's input (offset, layout); see Target.input_buffer."""
        if not self.batched or not self._flat_rows():
            return super().input_buffer(rows)
        self._given = placed_rows(rows, self.n, self.storage_dtype, self.cond.layout, self.cond.offset)
        return self._given

    def _owns(self, X: np.ndarray) -> bool:
        R = self._given
        return (
            R is not None
            and X.shape[0] <= R.shape[0]
            and X.strides == R.strides
            and X.__array_interface__["data"][0] == R.__array_interface__["data"][0]
        )

    def _arrays(self, rows: np.ndarray) -> np.ndarray:
        """(B, n) placed rows as (B, *shape) arrays, a view (never a copy: that would lose the
        placement)."""
        if not self._nd:
            return rows
        view = rows.reshape(rows.shape[0], *self.shape)
        if not np.may_share_memory(view, rows):  # pragma: no cover - numpy always views here
            raise TargetError(f"{self.name}: internal error: placed rows were copied")
        return view

    def _placed_rows(self, rows: int) -> np.ndarray:
        """Staging buffer for ``rows`` probe rows: (rows, n) placed rows (1-D), or a
        (rows, *shape) array each of whose ``[b]`` is placed like the input."""
        dtype, layout, offset = self.storage_dtype, self.cond.layout, self.cond.offset
        if not self._nd:
            return placed_rows(rows, self.n, dtype, layout, offset)
        return placed_batch(rows, self.shape, dtype, layout, offset)

    def evaluate(self, X) -> np.ndarray:
        """(B,) float64 outputs of ``np.sum`` on each row of X (shape (B, n), row b the array in
        logical C order); batched where exact (see the class). Raises TargetError on a bad shape
        or a value not representable in the input format."""
        if not self.batched:
            return self.evaluate_each(X)
        X = self._check(X)
        step = max(1, BATCH_BYTES // (8 * self.n))
        out = np.empty(X.shape[0], dtype=np.float64)
        if self._owns(X):  # X is (the head of) our placed buffer: no copy needed
            for lo in range(0, X.shape[0], step):
                rows = self._arrays(X[lo : lo + step])
                out[lo : lo + step] = self._guarded(np.sum, rows, self._axes)
            return out
        for lo in range(0, X.shape[0], step):
            chunk = X[lo : lo + step]
            r = chunk.shape[0]
            if self._rows is None or self._rows.shape[0] < r:
                self._rows = self._placed_rows(min(step, X.shape[0]))
            rows = self._rows[:r]
            rows[...] = chunk.reshape(rows.shape)
            out[lo : lo + r] = self._guarded(np.sum, rows, self._axes)
        return out


class NumpyDot(_NumpyTarget):
    """``np.dot(x, ones(n))`` for a 1-D x of n elements; both operands placed as asked."""

    def __init__(self, n: int, cond: Conditions):
        super().__init__("numpy.dot", n, cond, (n,))
        self.out_format = _out_format(
            self.name, cond.fmt, lambda dt: np.dot(np.zeros(1, dt), np.zeros(1, dt))
        )
        self._x = self._placed((n,))
        self._ones = self._placed((n,))
        self._ones[...] = 1
        self._y = self._placed((n,))
        self._start()

    has_products = True

    def _call_one(self, x: np.ndarray) -> float:
        self._x[...] = x
        return float(np.dot(self._x, self._ones))

    def _call_pair(self, a: np.ndarray, b: np.ndarray) -> float:
        self._x[...] = a
        self._y[...] = b
        return float(np.dot(self._x, self._y))


class NumpyCumsum(_NumpyTarget):
    """Output ``index`` of ``np.cumsum`` of a 1-D array of ``length`` elements (a scan).

    Output i is a fold of x[0..i] (cases/README.md C3), so the tree has index + 1 leaves: the
    probe fills x[0..index] and the inputs after index are zero.
    """

    def __init__(self, length: int, index: int, cond: Conditions):
        super().__init__("numpy.cumsum", index + 1, cond, (length,), index=index)
        self.out_format = _out_format(
            self.name, cond.fmt, lambda dt: np.cumsum(np.zeros(1, dt))
        )
        self._buf = self._placed((length,))
        self._start()

    def _call_one(self, x: np.ndarray) -> float:
        self._buf[: self.n] = x
        return float(self._scan(self._buf)[self.index])

    @staticmethod
    def _scan(x: np.ndarray) -> np.ndarray:
        return np.cumsum(x)

    def evaluate_scan(self, X) -> np.ndarray:
        """Every output 0..index of the scan: (B, n) rows (the n = index + 1 leaves, inputs
        after index zero, as ``evaluate``) -> (B, n) float64, output j of row b at [b, j]; one
        ``np.cumsum`` call per row, the same call ``evaluate`` makes.

        Raises:
            TargetError: as ``evaluate``.
        """
        X = self._check(X)
        out = np.empty(X.shape, dtype=np.float64)
        for b in range(X.shape[0]):
            self._buf[: self.n] = X[b]
            out[b] = self._scan(self._buf)[: self.n]
            self.calls += 1
        return out


class NumpyAddReduce(_NumpyTarget):
    """``np.add.reduce(A, axis)`` for a 2-D A of shape (R, C): output ``index``, or with
    ``index`` None every output at once.

    One output: the probe vector fills column ``index`` (axis 0) or row ``index`` (axis 1) of A
    and every other entry is 0; the tree has shape[axis] leaves (cases/README.md C2: a reduction
    along a non-contiguous axis is a sequential chain per output).

    Every output (``index`` None): the target is a multi-output op (``is_matrix``, outputs as an
    (outputs, 1) grid): ``evaluate_outer(P, ones)`` puts row r of P in output r's slice and
    returns the outputs of one call, so each output answers its own probe vector and the
    reveal finds every tree among the outputs (:mod:`fpscope.reveal.classes`). ``evaluate``
    reads output 0.
    """

    def __init__(self, shape: tuple[int, int], axis: int, index: int | None, cond: Conditions):
        super().__init__("numpy.add.reduce", shape[axis], cond, shape, axis=axis, index=index)
        self.out_format = _out_format(
            self.name, cond.fmt, lambda dt: np.add.reduce(np.zeros((1, 1), dt), axis=0)
        )
        self._buf = self._placed(shape)
        if index is None:
            self.is_matrix = True
            self.max_rows, self.max_cols = shape[1 - axis], 1
        self._start()

    def _call_one(self, x: np.ndarray) -> float:
        index = 0 if self.index is None else self.index
        if self.axis == 0:
            self._buf[:, index] = x
        else:
            self._buf[index, :] = x
        return float(np.add.reduce(self._buf, axis=self.axis)[index])

    def evaluate_outer(self, P, Q) -> np.ndarray:
        """Every output at once (``index`` None): row r of P is output r's input vector; Q must
        be ones of shape (n, 1) (the op multiplies nothing). Returns (R, 1) float64.

        Raises:
            TargetError: one output was asked for, bad shapes, Q not ones, a value not
                representable in the input format.
        """
        if self.index is None:
            P = self.as_storage(P)
            Q = np.asarray(Q)
            if P.ndim != 2 or P.shape[1] != self.n or not 1 <= P.shape[0] <= self.max_rows:
                raise TargetError(f"{self.name}: P must have shape (R, {self.n}) with 1 <= R <= "
                                  f"{self.max_rows}, got {P.shape}")
            if Q.shape != (self.n, 1) or not np.all(Q == 1):
                raise TargetError(f"{self.name} multiplies nothing: B must be ones of shape "
                                  f"({self.n}, 1)")
            R = P.shape[0]
            self._buf[...] = 0
            if self.axis == 0:
                self._buf[:, :R] = P.T
            else:
                self._buf[:R, :] = P
            out = self._guarded(np.add.reduce, self._buf, self.axis)
            return np.asarray(out[:R], dtype=np.float64)[:, None]
        return super().evaluate_outer(P, Q)


class NumpyEinsumVector(_NumpyTarget):
    """``np.einsum`` of one vector (``i->``) or of x and ones (``i,i->``); n leaves."""

    def __init__(self, n: int, plan: EinsumPlan, cond: Conditions):
        super().__init__(f"numpy.einsum[{plan.subscripts}]", n, cond, (n,))
        self.plan = plan
        ones = len(plan.inputs) == 2
        self.out_format = _out_format(
            self.name, cond.fmt,
            lambda dt: np.einsum(plan.subscripts, *[np.zeros(1, dt)] * len(plan.inputs)),
        )
        self._x = self._placed((n,))
        self._operands = [self._x]
        self.has_products = ones
        if ones:
            self._operands.append(self._placed((n,)))
            self._operands[1][...] = 1
            self._y = self._placed((n,))
        self._start()

    def _call_one(self, x: np.ndarray) -> float:
        self._x[...] = x
        return float(np.einsum(self.plan.subscripts, *self._operands))

    def _call_pair(self, a: np.ndarray, b: np.ndarray) -> float:
        if not self.has_products:
            return super()._call_pair(a, b)
        self._x[...] = a
        self._y[...] = b
        return float(np.einsum(self.plan.subscripts, self._x, self._y))


class _NumpyProduct(_NumpyTarget, MatrixTarget):
    """A numpy matrix operation; subclasses define ``_operands`` shapes and ``_op``."""

    def _finish(self, trial: Callable[[np.dtype], object]) -> None:
        self.out_format = _out_format(self.name, self.in_format, trial)
        self._start()


class NumpyMatmul(_NumpyProduct):
    """``np.matmul(A, B)`` with A of shape (M, K) and B of shape (K, N); K leaves."""

    def __init__(self, dims: tuple[int, int, int], cond: Conditions):
        super().__init__("numpy.matmul", dims, cond)
        self._a = self._placed((self.M, self.K))
        self._b = self._placed((self.K, self.N))
        self._finish(lambda dt: np.matmul(np.zeros((1, 1), dt), np.zeros((1, 1), dt)))

    def _product(self, A: np.ndarray, B: np.ndarray) -> np.ndarray:
        self._a[...] = A
        self._b[...] = B
        return np.matmul(self._a, self._b).astype(np.float64)


class NumpyVecmat(_NumpyProduct):
    """``x @ A`` (a vector-matrix product) with x of shape (K,) and A of shape (K, N); K leaves.

    As a product: M = 1, the logical left operand is x as one row.
    """

    def __init__(self, dims: tuple[int, int, int], cond: Conditions):
        super().__init__("numpy.vecmat", dims, cond, shape=dims[1:])
        self._x = self._placed((self.K,))
        self._b = self._placed((self.K, self.N))
        self._finish(lambda dt: np.zeros(1, dt) @ np.zeros((1, 1), dt))

    def _product(self, A: np.ndarray, B: np.ndarray) -> np.ndarray:
        self._x[...] = A[0]
        self._b[...] = B
        return (self._x @ self._b).astype(np.float64)[None, :]


class NumpyMatvec(_NumpyProduct):
    """``A @ x`` (a matrix-vector product) with A of shape (M, K) and x of shape (K,); K leaves.

    As a product: N = 1, the logical right operand is x as one column.
    """

    def __init__(self, dims: tuple[int, int, int], cond: Conditions):
        super().__init__("numpy.matvec", dims, cond, shape=dims[:2])
        self._a = self._placed((self.M, self.K))
        self._x = self._placed((self.K,))
        self._finish(lambda dt: np.zeros((1, 1), dt) @ np.zeros(1, dt))

    def _product(self, A: np.ndarray, B: np.ndarray) -> np.ndarray:
        self._a[...] = A
        self._x[...] = B[:, 0]
        return (self._a @ self._x).astype(np.float64)[:, None]


class NumpyEinsumMatrix(_NumpyProduct):
    """``np.einsum`` of two operands that is a matrix, vector-matrix or matrix-vector product."""

    def __init__(self, dims: tuple[int, int, int], plan: EinsumPlan, cond: Conditions):
        super().__init__(f"numpy.einsum[{plan.subscripts}]", dims, cond)
        self.plan = plan
        logical = (np.zeros((self.M, self.K)), np.zeros((self.K, self.N)))
        self._ops = [self._placed(plan.operand(i, logical[i]).shape) for i in (0, 1)]

        def trial(dt):
            tiny = (np.zeros((1, 1), dt), np.zeros((1, 1), dt))
            return np.einsum(plan.subscripts, *(plan.operand(i, tiny[i]) for i in (0, 1)))

        self._finish(trial)

    def _product(self, A: np.ndarray, B: np.ndarray) -> np.ndarray:
        self._ops[0][...] = self.plan.operand(0, A)
        self._ops[1][...] = self.plan.operand(1, B)
        y = np.einsum(self.plan.subscripts, *self._ops)
        return self.plan.logical_output(y).astype(np.float64)


# -- construction from the options of make_target ---------------------------------------------


def build(name: str, *, n, shape, cond: Conditions, axis, index, subscripts=None) -> LibraryTarget:
    """Build the numpy target ``name`` (a key of :data:`TARGETS`, or "numpy.einsum").

    Raises:
        TargetError: options that do not fit the target (see :func:`make_target`).
    """
    from ._options import matrix_dims, refuse

    if name == "numpy.add.reduce":
        return _build_add_reduce(n, shape, axis, index, cond)
    if name == "numpy.cumsum":
        refuse(name, axis=axis)
        length = vector_length(name, n if shape is None else None, shape)
        if index is None:
            index = length - 1
        index = as_int(name, "index", index, 0)
        if index >= length:
            raise TargetError(f"{name}: index must be below the length {length}, got {index}")
        if shape is not None:
            check_leaves(name, n, index + 1)
        return NumpyCumsum(length, index, cond)
    refuse(name, axis=axis, index=index)
    if name == "numpy.sum":
        return NumpySum(array_shape(name, n, shape), cond)
    if name == "numpy.dot":
        return NumpyDot(vector_length(name, n, shape), cond)
    if name == "numpy.matmul":
        return NumpyMatmul(matrix_dims(name, n, shape, True, True), cond)
    if name == "numpy.vecmat":
        return NumpyVecmat(matrix_dims(name, n, shape, False, True), cond)
    if name == "numpy.matvec":
        return NumpyMatvec(matrix_dims(name, n, shape, True, False), cond)
    if name == "numpy.einsum":
        plan = parse_einsum(name, subscripts or "i,i->")
        if not plan.is_matrix:
            return NumpyEinsumVector(vector_length(name, n, shape), plan, cond)
        dims = matrix_dims(name, n, shape, plan.a is not None, plan.b is not None)
        return NumpyEinsumMatrix(dims, plan, cond)
    raise TargetError(f"unknown numpy target {name!r}")


def _build_add_reduce(n, shape, axis, index, cond: Conditions) -> NumpyAddReduce:
    name = "numpy.add.reduce"
    if shape is None:
        if n is None:
            raise TargetError(f"{name} needs shape=(R, C) (or n for an n x n array)")
        k = as_int(name, "n", n, 1)
        shape = (k, k)
    shape = as_shape(name, shape, (2,))
    axis = 0 if axis is None else axis
    if isinstance(axis, bool) or axis not in (0, 1, -1, -2):
        raise TargetError(f"{name}: axis must be 0 or 1 for a 2-D array, got {axis!r}")
    axis %= 2
    check_leaves(name, n, shape[axis])
    other = shape[1 - axis]
    if index is None:  # every output
        return NumpyAddReduce(shape, axis, None, cond)
    index = as_int(name, "index", index, 0)
    if index >= other:
        raise TargetError(
            f"{name}: index must be below {other} (the outputs of axis {axis}), got {index}"
        )
    return NumpyAddReduce(shape, axis, index, cond)


#: Names of the numpy targets (einsum takes its subscripts in brackets).
TARGETS = (
    "numpy.sum",
    "numpy.dot",
    "numpy.vecmat",
    "numpy.matvec",
    "numpy.matmul",
    "numpy.einsum",
    "numpy.cumsum",
    "numpy.add.reduce",
)
