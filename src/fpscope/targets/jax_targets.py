"""jax.numpy operations as black-box targets (CPU).

==================  ============================================  ======
name                one call                                      leaves
==================  ============================================  ======
jax.numpy.sum       ``jnp.sum(x)``, x (n,), (R,C) or (R,C,D)      prod
jax.numpy.dot       ``jnp.dot(x, ones(n))``                       n
jax.numpy.matmul    ``jnp.matmul(A, B)``, (M, K) @ (K, N)          K
==================  ============================================  ======

Dtypes fp64, fp32, fp16, bf16. Inputs are converted exactly with
:func:`fpscope.formats.to_storage` (jax's own float64 -> bf16/fp16 cast rounds twice,
NUMERICS.md "Conversions") and handed to jax as numpy arrays of the storage dtype. fp64 turns on
``jax_enable_x64`` for the whole process (it stays on after ``close()``: other live jax arrays may
need it). jax copies every input into its own buffers, so layout and offset cannot be chosen, and
XLA's CPU thread pool is fixed when jax starts (set ``XLA_FLAGS`` before that), so these targets
refuse ``layout``, ``offset`` and ``threads``.

From n = 4096 elements (jaxlib 0.10.2, every dtype, sum and dot) XLA's CPU backend hands the
reduction to a YNNPACK fusion (``__ynn_fusion`` in the compiled HLO). On an AVX2 machine it adds
each tile of 1024 inputs with a fixed tree, but joins the tiles with compensated (Kahan)
summation, finishing with s - c. That is not a tree of rounded additions: the reveal fails its
replay and the two-input probe (:mod:`fpscope.reveal.compensation`) says so. Every call path
here is one call on the op's own array (no batching), so the probes and the replay see the same
kernel. ``XLA_FLAGS=--xla_cpu_experimental_ynn_fusion_type=`` (``--env``) keeps XLA's own
reduce-window tree, which replays bit for bit.
"""

from __future__ import annotations

import numpy as np

from ._common import LibraryTarget, MatrixTarget, output_format
from .base import TargetError


def import_jax():
    """The (jax, jax.numpy) modules.

    Raises:
        TargetError: jax is not installed or fails to import.
    """
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        raise TargetError("jax is not installed; pip install fpscope[jax]") from None
    except Exception as exc:
        raise TargetError(f"jax failed to import: {type(exc).__name__}: {exc}") from None
    return jax, jnp


class _JaxTarget(LibraryTarget):
    """Checks and conversions shared by the jax targets; ``_jax_init`` runs after ``__init__``."""

    def _jax_init(self, device: str | None, trial) -> None:
        if device is not None and str(device) != "cpu":
            raise TargetError(f"{self.name}: only device 'cpu' is supported, got {device!r}")
        if self.cond.layout != "C" or self.cond.offset:
            raise TargetError(
                f"{self.name}: jax copies inputs into its own buffers; layout and offset "
                "cannot be chosen"
            )
        if self.cond.threads is not None:
            raise TargetError(
                f"{self.name}: jax fixes its CPU threads at start-up; set XLA_FLAGS="
                "'--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1' instead"
            )
        jax, self.jnp = import_jax()
        self._jax = jax
        if self.in_format.name == "fp64" and not jax.config.jax_enable_x64:
            jax.config.update("jax_enable_x64", True)
        self.cond.extra["device"] = "cpu"
        self._cpu = jax.devices("cpu")[0]
        try:
            y = trial(lambda *shape: np.zeros(shape, dtype=self.storage_dtype))
        except Exception as exc:
            msg = str(exc).strip().splitlines()
            raise TargetError(
                f"{self.name} does not support {self.in_format.name}: "
                f"{msg[0] if msg else type(exc).__name__}"
            ) from None
        self.out_format = output_format(self.name, y.dtype)

    def _array(self, values: np.ndarray):
        """A jax array on the CPU holding ``values`` (storage dtype; copied exactly)."""
        return self._jax.device_put(values, self._cpu)


class JaxReduce(_JaxTarget):
    """``jnp.sum(x)`` or ``jnp.dot(x, ones(n))`` for a 1-D x of n elements; ``jnp.sum`` also of
    a whole 2-D or 3-D x (no axis; C order only), leaf k being ``x[np.unravel_index(k, shape)]``."""

    def __init__(self, name: str, n, cond, device: str | None = None):
        shape = tuple(int(s) for s in n) if isinstance(n, tuple) else (int(n),)
        n = int(np.prod(shape))
        super().__init__(name, n, cond, shape)
        fn = name.rsplit(".", 1)[1]
        arity = 2 if fn == "dot" else 1
        self._jax_init(device, lambda z: getattr(self.jnp, fn)(*[z(1)] * arity))
        self._fn = getattr(self.jnp, fn)
        self._ones = (
            [self._array(np.ones(n, dtype=self.storage_dtype))] if arity == 2 else []
        )
        self.has_products = arity == 2

    def _call_one(self, x: np.ndarray) -> float:
        y = self._fn(self._array(x.reshape(self.shape)), *self._ones)
        return float(np.asarray(y).astype(np.float64))

    def _call_pair(self, a: np.ndarray, b: np.ndarray) -> float:
        if not self.has_products:
            return super()._call_pair(a, b)
        y = self._fn(self._array(a), self._array(b))
        return float(np.asarray(y).astype(np.float64))


class JaxMatmul(_JaxTarget, MatrixTarget):
    """``jnp.matmul(A, B)`` with A of shape (M, K) and B of shape (K, N); K leaves."""

    def __init__(self, dims: tuple[int, int, int], cond, device: str | None = None):
        super().__init__("jax.numpy.matmul", dims, cond)
        self._jax_init(device, lambda z: self.jnp.matmul(z(1, 1), z(1, 1)))

    def _product(self, A: np.ndarray, B: np.ndarray) -> np.ndarray:
        y = self.jnp.matmul(self._array(A), self._array(B))
        return np.asarray(y).astype(np.float64)


#: Names of the jax targets.
TARGETS = ("jax.numpy.sum", "jax.numpy.dot", "jax.numpy.matmul")


def build(name: str, *, n, shape, cond, axis, index, device=None) -> LibraryTarget:
    """Build the jax target ``name`` (one of :data:`TARGETS`).

    Raises:
        TargetError: jax missing, or options that do not fit the target.
    """
    from ._options import array_shape, matrix_dims, refuse, vector_length

    refuse(name, axis=axis, index=index)
    import_jax()
    if name == "jax.numpy.sum":
        return JaxReduce(name, array_shape(name, n, shape), cond, device)
    if name == "jax.numpy.dot":
        return JaxReduce(name, vector_length(name, n, shape), cond, device)
    if name == "jax.numpy.matmul":
        return JaxMatmul(matrix_dims(name, n, shape, True, True), cond, device)
    raise TargetError(f"unknown jax target {name!r}")
