"""torch operations as black-box targets (CPU; CUDA accepted but untested here).

==============  =========================================  ======
name            one call                                   leaves
==============  =========================================  ======
torch.sum       ``torch.sum(x)``, x (n,), (R,C), (R,C,D)   prod
torch.dot       ``torch.dot(x, ones(n))``                  n
torch.mv        ``torch.mv(A, x)``, A (M, K), x (K,)       K
torch.mm        ``torch.mm(A, B)``, (M, K) @ (K, N)        K
torch.matmul    ``torch.matmul(A, B)``, (M, K) @ (K, N)    K
==============  =========================================  ======

Dtypes fp64, fp32, fp16, bf16. Inputs are converted exactly: float64 -> storage dtype with
:func:`fpscope.formats.to_storage` (which refuses values that are not representable; torch's own
float64 -> bf16/fp16 cast rounds twice, NUMERICS.md "Conversions"), then shared with torch through
``torch.from_numpy`` (bf16 through an int16 view), so layout and byte offset are those of the
numpy buffer. Outputs are widened to float64 exactly. ``threads`` sets ``torch.set_num_threads``
until ``close()``. On ``device="cuda"`` the operands live on the GPU; only layout "C" and offset 0
are accepted there.
"""

from __future__ import annotations

import numpy as np

from ._common import LibraryTarget, MatrixTarget, output_format
from ._memory import placed_zeros
from .base import TargetError

_TORCH_DTYPES = {"fp64": "float64", "fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def import_torch():
    """The torch module.

    Raises:
        TargetError: torch is not installed or fails to import.
    """
    try:
        import torch
    except ImportError:
        raise TargetError("torch is not installed; pip install fpscope[torch]") from None
    except Exception as exc:  # a broken installation (missing shared libraries, ...)
        raise TargetError(f"torch failed to import: {type(exc).__name__}: {exc}") from None
    return torch


class _TorchTarget(LibraryTarget):
    """Operand handling shared by the torch targets; ``_torch_init`` runs after ``__init__``."""

    def _torch_init(self, device: str | None, trial) -> None:
        torch = self.torch = import_torch()
        dev = "cpu" if device is None else str(device)
        if dev.startswith("cuda"):
            if not torch.cuda.is_available():
                raise TargetError(
                    f"{self.name}: device {dev!r} asked for but CUDA is not available"
                )
            if self.cond.layout != "C" or self.cond.offset:
                raise TargetError(f"{self.name}: layout and offset can be chosen on the CPU only")
        elif dev != "cpu":
            raise TargetError(f"{self.name}: unknown device {dev!r}; use 'cpu' or 'cuda'")
        elif self.cond.offset % self.storage_dtype.itemsize:
            raise TargetError(
                f"{self.name}: offset must be a multiple of the item size "
                f"({self.storage_dtype.itemsize} bytes for {self.in_format.name}), "
                f"got {self.cond.offset}"
            )
        self.device = dev
        self.cond.extra["device"] = dev
        self.tdtype = getattr(torch, _TORCH_DTYPES[self.in_format.name])
        try:
            y = trial(lambda *shape: torch.zeros(shape, dtype=self.tdtype, device=dev))
        except Exception as exc:
            msg = str(exc).strip().splitlines()
            raise TargetError(
                f"{self.name} does not support {self.in_format.name} on {dev}: "
                f"{msg[0] if msg else type(exc).__name__}"
            ) from None
        self.out_format = output_format(self.name, y.dtype)

    def _start(self) -> None:
        """Set the thread count (last step of ``__init__``)."""
        if self.cond.threads is None:
            return
        torch = self.torch
        before = torch.get_num_threads()
        torch.set_num_threads(self.cond.threads)
        self._closers.append(lambda: torch.set_num_threads(before))

    def _from_numpy(self, arr: np.ndarray):
        """A CPU tensor sharing ``arr``'s memory (strides and address kept)."""
        if self.in_format.name == "bf16":
            return self.torch.from_numpy(arr.view(np.int16)).view(self.torch.bfloat16)
        return self.torch.from_numpy(arr)

    def _operand(self, shape: tuple[int, ...]):
        """(numpy buffer or None, tensor): a zero operand placed as asked (CPU) or on the GPU."""
        if self.device == "cpu":
            buf = placed_zeros(shape, self.storage_dtype, self.cond.layout, self.cond.offset)
            return buf, self._from_numpy(buf)
        return None, self.torch.zeros(shape, dtype=self.tdtype, device=self.device)

    def _fill(self, operand, values: np.ndarray) -> None:
        buf, tensor = operand
        if buf is not None:
            buf[...] = values
        else:
            tensor.copy_(self._from_numpy(np.ascontiguousarray(values)))

    def _widen(self, y) -> np.ndarray:
        """float64 numpy copy of a result tensor (exact)."""
        return y.detach().to(device="cpu", dtype=self.torch.float64).numpy()


class TorchReduce(_TorchTarget):
    """``torch.sum(x)`` or ``torch.dot(x, ones(n))`` for a 1-D x of n elements; ``torch.sum``
    also of a whole 2-D or 3-D x (no dim), whose leaves are numbered by the element's logical
    C-order flat index (leaf k is ``x[np.unravel_index(k, shape)]``) whatever the layout."""

    def __init__(self, name: str, n, cond, device: str | None = None):
        shape = tuple(int(s) for s in n) if isinstance(n, tuple) else (int(n),)
        n = int(np.prod(shape))
        super().__init__(name, n, cond, shape)
        self._dot = name == "torch.dot"
        fn = name.split(".", 1)[1]
        arity = 2 if self._dot else 1
        self._torch_init(device, lambda z: getattr(self.torch, fn)(*[z(1)] * arity))
        self._fn = getattr(self.torch, fn)
        self._x = self._operand(shape)
        self._args = [self._x[1]]
        if self._dot:
            ones = self._operand((n,))
            self._fill(ones, np.ones(n, dtype=self.storage_dtype))
            self._args.append(ones[1])
            self._y = self._operand((n,))
        self.has_products = self._dot
        self._start()

    def _call_one(self, x: np.ndarray) -> float:
        self._fill(self._x, x.reshape(self.shape))
        return float(self._widen(self._fn(*self._args)))

    def _call_pair(self, a: np.ndarray, b: np.ndarray) -> float:
        if not self._dot:
            return super()._call_pair(a, b)
        self._fill(self._x, a)
        self._fill(self._y, b)
        return float(self._widen(self._fn(self._x[1], self._y[1])))


class TorchProduct(_TorchTarget, MatrixTarget):
    """``torch.mm``/``torch.matmul`` (A (M, K) @ B (K, N)) or ``torch.mv`` (A (M, K) @ x (K,))."""

    def __init__(self, name: str, dims: tuple[int, int, int], cond, device: str | None = None):
        self._mv = name == "torch.mv"
        super().__init__(name, dims, cond, shape=dims[:2] if self._mv else dims)
        fn = name.split(".", 1)[1]
        second = (lambda z: z(1)) if self._mv else (lambda z: z(1, 1))
        self._torch_init(device, lambda z: getattr(self.torch, fn)(z(1, 1), second(z)))
        self._fn = getattr(self.torch, fn)
        self._a = self._operand((self.M, self.K))
        self._b = self._operand((self.K,) if self._mv else (self.K, self.N))
        self._start()

    def _product(self, A: np.ndarray, B: np.ndarray) -> np.ndarray:
        self._fill(self._a, A)
        self._fill(self._b, B[:, 0] if self._mv else B)
        y = self._widen(self._fn(self._a[1], self._b[1]))
        return y[:, None] if self._mv else y


#: Names of the torch targets.
TARGETS = ("torch.sum", "torch.dot", "torch.mv", "torch.mm", "torch.matmul")


def build(name: str, *, n, shape, cond, axis, index, device=None) -> LibraryTarget:
    """Build the torch target ``name`` (one of :data:`TARGETS`).

    Raises:
        TargetError: torch missing, or options that do not fit the target.
    """
    from ._options import array_shape, matrix_dims, refuse, vector_length

    refuse(name, axis=axis, index=index)
    import_torch()
    if name == "torch.sum":
        return TorchReduce(name, array_shape(name, n, shape), cond, device)
    if name == "torch.dot":
        return TorchReduce(name, vector_length(name, n, shape), cond, device)
    if name == "torch.mv":
        return TorchProduct(name, matrix_dims(name, n, shape, True, False), cond, device)
    if name in ("torch.mm", "torch.matmul"):
        return TorchProduct(name, matrix_dims(name, n, shape, True, True), cond, device)
    raise TargetError(f"unknown torch target {name!r}")
