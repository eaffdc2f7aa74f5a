"""Memory order of whole-array sums: which layouts store the elements in which order, so a
summary can say "pairwise over memory order (F layout): x[0,0], x[1,0], ..."."""

from __future__ import annotations

from typing import Optional

import numpy as np


#: Targets whose 2-D / 3-D ``shape`` is one array summed whole (no axis), leaf k being the element
#: at the logical C-order flat index k (``np.unravel_index(k, shape)``): fpscope.targets.
WHOLE_ARRAY_SUMS = ("numpy.sum", "torch.sum", "jax.numpy.sum")

#: Memory order of the elements of each layout of fpscope.targets (``placed_zeros``): "C" and
#: "strided" (a stride of two elements along the last axis) keep the logical C order; "F" and "T"
#: (a transposed C array, the strides of F) run along the first axis fastest.
LAYOUT_ORDER = {"C": "C", "strided": "C", "F": "F", "T": "F"}


def array_order(spec) -> dict:
    """The ``shape`` and ``order`` arguments of :func:`summarize` for a target ``spec()`` (a dict,
    as in a record's "target"): for ``numpy.sum``, ``torch.sum`` or ``jax.numpy.sum`` of a whole
    2-D or 3-D array, ``{"shape": (R, C[, D]), "order": layout}``; for anything else ``{}``.
    Never raises."""
    try:
        if not isinstance(spec, dict) or spec.get("name") not in WHOLE_ARRAY_SUMS:
            return {}
        shape = tuple(int(v) for v in spec.get("shape") or ())
        layout = spec.get("layout") or "C"
        if (len(shape) not in (2, 3) or spec.get("axis") is not None
                or spec.get("index") is not None or layout not in LAYOUT_ORDER
                or int(np.prod(shape)) != int(spec.get("n", -1))):
            return {}
        return {"shape": shape, "order": layout}
    except Exception:  # pragma: no cover - a malformed spec gets the plain summary
        return {}


def memory_permutation(shape: tuple, order, n: int) -> Optional[np.ndarray]:
    """perm[i] = the leaf (logical C-order flat index) at memory position i; None when ``order``
    keeps the logical order."""
    if isinstance(order, str):
        if order not in LAYOUT_ORDER:
            raise ValueError(f"order must be one of {', '.join(LAYOUT_ORDER)} or a permutation, "
                             f"got {order!r}")
        if LAYOUT_ORDER[order] == "C":
            return None
        return np.arange(n).reshape(shape).ravel(order="F")
    perm = np.asarray(order, dtype=np.int64).ravel()
    if perm.shape != (n,) or not np.array_equal(np.sort(perm), np.arange(n)):
        raise ValueError(f"order must be a permutation of 0..{n - 1}")
    return None if np.array_equal(perm, np.arange(n)) else perm


def _element(k: int, shape: tuple) -> str:
    return "x[" + ",".join(str(int(i)) for i in np.unravel_index(int(k), shape)) + "]"


def _elements_text(perm: Optional[np.ndarray], shape: tuple) -> str:
    """The first elements in the given order, by logical multi-index, up to where the fastest
    axis wraps: "x[0,0], x[1,0], x[2,0], ..., x[63,0], x[0,1], ..., x[63,47]"."""
    n = int(np.prod(shape))

    def at(i: int) -> str:
        return _element(i if perm is None else perm[i], shape)

    if n <= 6:
        return ", ".join(at(i) for i in range(n))
    if perm is None:
        run = shape[-1]  # elements before the last axis wraps
    else:
        step = np.diff(perm)
        breaks = np.flatnonzero(step != step[0])
        run = int(breaks[0]) + 1 if len(breaks) else n
    if run >= n - 1:
        items = [at(i) for i in range(4)]
    elif run <= 4:
        items = [at(i) for i in range(min(n - 1, run + 2))]
    else:
        items = [at(0), at(1), at(2), "...", at(run - 1), at(run)]
    return ", ".join(items) + f", ..., {at(n - 1)}"
