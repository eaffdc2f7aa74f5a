"""Black-box operations under test ("targets") and how to build one from its name.

``make_target("numpy.sum", n=1024, dtype="fp32")`` returns a :class:`Target`: the probe interface
that the revealing algorithms use (``evaluate``, ``evaluate_outer``; see :mod:`.base`). Library
adapters live in one module per library; torch and jax are imported only when one of their
targets is requested.
"""

from __future__ import annotations

import builtins
import difflib
import importlib
from collections.abc import Mapping

import numpy as np

from ._options import conditions, refuse
from .base import Target, TargetError

__all__ = ["Target", "TargetError", "make_target", "list_targets"]

#: target name -> adapter module (relative to this package)
_MODULES = {
    **{n: ".numpy_targets" for n in (
        "numpy.sum", "numpy.dot", "numpy.vecmat", "numpy.matvec", "numpy.matmul",
        "numpy.einsum", "numpy.cumsum", "numpy.add.reduce",
    )},
    **{n: ".torch_targets" for n in ("torch.sum", "torch.dot", "torch.mv", "torch.mm",
                                      "torch.matmul")},
    **{n: ".jax_targets" for n in ("jax.numpy.sum", "jax.numpy.dot", "jax.numpy.matmul")},
    "emulate.matmul": ".simulated",
}

#: targets that take a bracketed argument: einsum subscripts, the preset of an emulated GEMM
_BRACKETED = ("numpy.einsum", "emulate.matmul")

#: short spellings accepted for the library prefix
_PREFIXES = {"np.": "numpy.", "jnp.": "jax.numpy."}


def list_targets() -> list[str]:
    """Names of the built-in targets, whether or not torch / jax is installed.

    ``numpy.einsum`` takes its subscripts in brackets (``numpy.einsum[ij,jk->ik]``; default
    ``i,i->``); ``emulate.matmul`` a preset (``emulate.matmul[hopper-fp16]``: the matrix-unit
    emulator as a black box). Any user function is a target too: ``package.module:function`` or
    ``path/to/file.py:function``.
    """
    from ..collectives.target import NAMES

    return list(_MODULES) + list(NAMES)


def _split_name(name: str) -> tuple[str, str | None]:
    """(canonical name, einsum subscripts or None)."""
    base, subscripts = name.strip(), None
    if base.endswith("]") and "[" in base:
        base, _, subscripts = base[:-1].partition("[")
    for short, full in _PREFIXES.items():
        if base.startswith(short):
            base = full + base[len(short):]
    if subscripts is not None and base not in _BRACKETED:
        raise TargetError(f"only {' and '.join(_BRACKETED)} take [...], got {name!r}")
    return base, subscripts


def make_target(
    name: str,
    *,
    n: int | None = None,
    shape: tuple[int, ...] | None = None,
    dtype: str | None = None,
    layout: str = "C",
    offset: int = 0,
    threads: int | None = None,
    axis: int | None = None,
    index: int | None = None,
    device: str | None = None,
    env: dict[str, str | None] | None = None,
    batched: bool | None = None,
    output=None,
    world_size: int | None = None,
    backend: str | None = None,
) -> Target:
    """Build the target ``name`` under the given probe conditions.

    Args:
        name: one of :func:`list_targets` (``np.`` and ``jnp.`` are accepted for ``numpy.`` and
            ``jax.numpy.``; ``numpy.einsum[SUBSCRIPTS]``), a user callable
            ``package.module:function`` / ``path/to/file.py:function``, or a Python callable
            object itself (a function, lambda or bound method; the target is named
            ``module:qualname``, :func:`fpscope.targets.callable.spec_of`; it runs in this
            process, so ``env`` is refused).
        n: number of leaves: the reduction length for 1-D ops, K for matrix ops (an N x N x N
            matmul when ``shape`` is not given; N x N matrices for vecmat/matvec), the array
            length for ``numpy.cumsum``, the side of a square array for ``numpy.add.reduce``.
            When ``shape`` is also given, n must equal the leaf count the shape implies.
        shape: the operation's input shape: (n,) for 1-D ops; (R, C) or (R, C, D) for
            ``numpy.sum``, ``torch.sum`` and ``jax.numpy.sum`` of a whole 2-D or 3-D array (no
            axis; n = R * C (* D) leaves, leaf k the element at the logical C-order flat index
            k, ``np.unravel_index(k, shape)``, whatever the layout); (M, K, N) for matmul/mm (and
            einsum matrix products); (K, N) of A for ``numpy.vecmat``; (M, K) of A for
            ``numpy.matvec`` and ``torch.mv``; (R, C) for ``numpy.add.reduce``; (length,) for
            ``numpy.cumsum``.
        dtype: input format "fp64", "fp32", "fp16" or "bf16" (aliases as in
            :func:`fpscope.formats.get_format`); None: fp32 (``emulate.matmul``: the preset's
            input format).
        layout: "C", "F" (2-D and 3-D operands; a 1-D array is both), "strided" (a view with a
            stride of 2 elements along the last axis) or "T" (the transpose of a C-order array
            of the reversed shape: F's strides, reached through a transpose) for every probed
            operand (numpy, torch CPU, callables; jax takes "C" only).
        offset: bytes after a 64-byte-aligned address at which each probed operand starts.
        threads: BLAS threads (numpy, callables; threadpoolctl) or torch threads, held until
            ``close()``; None keeps the library's setting.
        axis: reduced axis of ``numpy.add.reduce`` (0 or 1; default 0).
        index: probed output: of ``numpy.add.reduce`` (default 0) and of ``numpy.cumsum``
            (default the last; the tree then has index + 1 leaves).
        device: "cpu" (default) or "cuda" for torch targets; "cpu" for jax.
        output: one output position of a matrix op, ``(i, j)``: the target is that output alone
            (probe vectors in row i of A, B = ones; factor pairs in row i of A and column j of
            B), for a per-output reveal (:class:`~fpscope.targets._common.OutputTarget`); or one
            flat index E for ``numpy.add.reduce`` / ``numpy.cumsum`` (the same as ``index``).
        env: environment variables for the operation, e.g. ``{"OPENBLAS_CORETYPE": "Haswell"}``
            or ``{"OPENBLAS_CORETYPE": "Sandybridge"}`` (OpenBLAS kernels), ``{"MKL_CBWR":
            "AVX2"}``, ``{"XLA_FLAGS": "..."}``, ``{"OMP_NUM_THREADS": "1"}``; a value of None
            removes the variable. Libraries read these when they load, so a non-empty env
            builds the target in a child Python process started with ``os.environ`` updated by
            it and returns a :class:`~fpscope.targets.isolated.ChildTarget` (same name and
            conditions; its ``spec()`` adds ``"env"``). None or {}: the target runs in this
            process.
        batched: user callables only: True when the function takes a (B, n) array of probe
            rows and returns B outputs (:mod:`fpscope.targets.callable`), False when it takes
            one 1-D array; None: as the function declares (``fpscope_batched``, the
            :func:`fpscope.batched` decorator). Built-in targets refuse it (they batch their
            probes themselves).
        world_size, backend: collectives only (``torch.distributed.all_reduce`` / ``reduce`` /
            ``reduce_scatter``, ``mpi4py.MPI.Comm.Allreduce`` / ``Reduce`` /
            ``Reduce_scatter``; :mod:`fpscope.collectives`): the number of ranks P (the
            leaves; default 4) and "gloo" (default) or "nccl" for torch. For a collective,
            ``n`` is the number of elements per rank (default 4096; every element is an
            output), ``output`` one element E, and ``env`` applies to the rank processes.

    Returns:
        A :class:`Target`; call ``close()`` (or use it in a ``with`` block) when done.

    Raises:
        TargetError: unknown name, unsupported dtype or layout, a missing optional library
            (torch, jax), bad or inconsistent sizes, an option the target does not take, a
            callable that cannot be loaded, a bad ``env`` (not a mapping of variable names to
            strings) or a child process that failed, ``batched`` for a built-in target. The
            message is one line.
    """
    if isinstance(name, str) and _collective(name):
        return _make_collective(name, n=n, shape=shape, dtype=dtype, layout=layout,
                                offset=offset, threads=threads, axis=axis, index=index,
                                device=device, env=env, batched=batched, output=output,
                                world_size=world_size, backend=backend)
    if world_size is not None or backend is not None:
        raise TargetError(f"{name}: world_size and backend apply to collectives "
                          "(torch.distributed.*, mpi4py.MPI.Comm.*)")
    if env is not None and not isinstance(name, str) and _is_function(name) \
            and not (isinstance(env, Mapping) and len(env) == 0):
        raise TargetError("env runs the op in a child process, which cannot receive a function "
                          "object: name it as 'package.module:function' or "
                          "'path/to/file.py:function' instead")
    if batched is not None:
        if not isinstance(batched, bool):
            raise TargetError(f"{name}: batched must be True or False, got {batched!r}")
        if not ((isinstance(name, str) and ":" in name and "[" not in name)
                or (_is_function(name) and not isinstance(name, str))):
            raise TargetError(
                f"{name}: batched applies to user callables (package.module:function or "
                "path/to/file.py:function); built-in targets batch their probes themselves"
            )
    if output is not None:  # one output position as a reduction of its own
        from ._common import at_output

        if isinstance(output, (int, np.integer)) or (isinstance(output, (tuple, list))
                                                      and len(output) == 1):
            flat = int(output if isinstance(output, (int, np.integer)) else output[0])
            if not isinstance(name, str) or _split_name(name)[0] not in ("numpy.add.reduce",
                                                                         "numpy.cumsum"):
                raise TargetError("--position E (one flat index) applies to numpy.add.reduce "
                                  "and numpy.cumsum; a matrix op takes --position I,J")
            if index is not None and index != flat:
                raise TargetError(f"--position {flat} and --index {index} disagree")
            return make_target(name, n=n, shape=shape, dtype=dtype, layout=layout,
                               offset=offset, threads=threads, axis=axis, index=flat,
                               device=device, env=env, batched=batched)
        whole = make_target(name, n=n, shape=shape, dtype=dtype, layout=layout, offset=offset,
                            threads=threads, axis=axis, index=index, device=device, env=env,
                            batched=batched)
        return at_output(whole, output)
    if env is not None and not (isinstance(env, Mapping) and len(env) == 0):
        from .isolated import ChildTarget

        extra = {} if batched is None else {"batched": batched}
        return ChildTarget(name, env, n=n, shape=shape, dtype=dtype, layout=layout, offset=offset,
                           threads=threads, axis=axis, index=index, device=device, **extra)
    if _is_function(name) and not isinstance(name, str):  # a function object (the Python API)
        from . import callable as user

        if isinstance(name, Target):
            raise TargetError(f"{name.name} is already a target; pass it to reveal() as it is")
        spec = user.spec_of(name)
        refuse(spec, device=device)
        cond = conditions(spec, dtype or "fp32", layout, offset, threads)
        return user.build(spec, n=n, shape=shape, cond=cond, axis=axis, index=index,
                          batched=batched, fn=name)
    if not isinstance(name, str) or not name.strip():
        raise TargetError(f"target name must be a non-empty string or a callable, got {name!r}")
    if dtype is None:
        dtype = _default_dtype(name)
    if ":" in name and "[" not in name:
        from . import callable as user

        refuse(name, device=device)
        cond = conditions(name, dtype, layout, offset, threads)
        return user.build(name.strip(), n=n, shape=shape, cond=cond, axis=axis, index=index,
                          batched=batched)
    base, subscripts = _split_name(name)
    if base not in _MODULES:
        close = difflib.get_close_matches(base, list(_MODULES), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise TargetError(
            f"unknown target {name!r}; {hint}known: {', '.join(_MODULES)}, "
            "or package.module:function"
        )
    cond = conditions(base, dtype, layout, offset, threads)
    module = importlib.import_module(_MODULES[base], __name__)
    options = dict(n=n, shape=shape, cond=cond, axis=axis, index=index)
    if base in _BRACKETED:
        options["subscripts"] = subscripts
    if module.__name__.endswith("numpy_targets"):
        if device not in (None, "cpu"):
            raise TargetError(f"{base} runs on the CPU only, got device {device!r}")
    else:
        options["device"] = device
    try:
        return module.build(base, **options)
    except MemoryError:
        raise TargetError(f"{base}: not enough memory for shape {shape or n}") from None


def _collective(name: str) -> bool:
    base = name.strip()
    return base.startswith(("torch.distributed.", "dist.", "mpi4py.", "MPI."))


def _make_collective(name: str, *, n, shape, dtype, layout, offset, threads, axis, index, device,
                     env, batched, output, world_size, backend) -> Target:
    """A collective target (:mod:`fpscope.collectives`); options it does not take are refused."""
    from ..collectives.target import DEFAULT_ELEMENTS, DEFAULT_WORLD_SIZE, NAMES, canonical
    from .isolated import check_env

    full = canonical(name)
    if full is None:
        close = difflib.get_close_matches(name.strip(), list(NAMES), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise TargetError(f"unknown collective {name!r}; {hint}known: {', '.join(NAMES)}")
    given = {"shape": shape, "offset": offset or None, "threads": threads, "axis": axis,
             "index": index, "batched": batched, "layout": None if layout == "C" else layout}
    bad = [k for k, v in given.items() if v is not None]
    if bad:
        raise TargetError(f"{full} takes --world-size, --n (elements per rank), --dtype, "
                          f"--backend, --env and --position E; not "
                          f"{', '.join('--' + k for k in bad)}")
    if device not in (None, "cpu") and not (device == "cuda" and backend == "nccl"):
        raise TargetError(f"{full}: the device follows the backend (gloo and mpi: CPU; nccl: "
                          f"one GPU per rank), got device {device!r}")
    if output is not None:
        if isinstance(output, (tuple, list)):
            if len(output) != 1:
                raise TargetError(f"{full}: --position takes one element index E")
            output = output[0]
        if not isinstance(output, (int, np.integer)):
            raise TargetError(f"{full}: --position takes one element index E, got {output!r}")
    from ..collectives.target import CollectiveTarget

    return CollectiveTarget(full, world_size=DEFAULT_WORLD_SIZE if world_size is None
                            else world_size, elements=DEFAULT_ELEMENTS if n is None else n,
                            dtype=dtype or "fp32", backend=backend,
                            env=check_env(env) if env else None, element=output)


def _is_function(obj) -> bool:
    """A Python callable object (not a name). builtins.callable: this package's own
    ``callable`` submodule shadows the builtin in its namespace."""
    return builtins.callable(obj) and not isinstance(obj, str)


def _default_dtype(name: str) -> str:
    """fp32, or the preset's input format for ``emulate.matmul[PRESET]``."""
    base, _, rest = name.strip().partition("[")
    if base != "emulate.matmul":
        return "fp32"
    from ..profile import PRESETS  # only here: building the presets takes a noticeable time

    if rest[:-1] in PRESETS:
        return PRESETS[rest[:-1]].in_format
    return "fp32"
