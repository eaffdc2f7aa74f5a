"""numba set-up shared by fpscope's numba modules (``fpscope._formats_jit``,
``fpscope.emulate._kernel_jit``): each calls :func:`prefer_wide_vectors` when it is imported,
so that it takes effect before the first of them compiles or loads any code (numba reads its
CPU features once per process); the GEMM kernels are compiled apart from the process that
runs them (:func:`load_compiled`)."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys


def prefer_wide_vectors() -> None:
    """On AVX-512 machines, let numba's LLVM use 512-bit vectors for fpscope's numba code.

    LLVM's tuning for recent Intel cores prefers 256-bit vectors (its "prefer-256-bit" feature);
    the GEMM ran about 14% faster with 512-bit ones on the 2-core AVX-512 CI machine
    (hopper-fp16, 2048^3, 2 threads: 1.72 s against 2.00 s, ``benchmarks/bench_emulate.py`` run
    with and without ``NUMBA_CPU_NAME`` set, which turns this off). numba reads its CPU features
    once, when its CPU target first compiles or loads code, from ``numba.config.CPU_FEATURES``
    (the ``NUMBA_CPU_FEATURES`` environment variable). So this sets them, to the host's features
    plus "-prefer-256-bit", only when the user has set neither ``NUMBA_CPU_FEATURES`` nor
    ``NUMBA_CPU_NAME`` and no numba code has been compiled in this process yet; otherwise it
    does nothing. The instruction set is the same either way, so the results are the same bits
    (tests/test_emulate_kernel.py compares them with the numpy engine).
    """
    try:
        import numba
        from numba.core.registry import cpu_target

        cfg = numba.config
        if cfg.CPU_FEATURES is not None or cfg.CPU_NAME is not None:
            return
        if "_toplevel_target_context" in vars(cpu_target):  # numba's CPU target is set up
            return
        import llvmlite.binding as llvm

        feats = llvm.get_host_cpu_features()
        if feats.get("avx512f"):
            cfg.CPU_FEATURES = feats.flatten() + ",-prefer-256-bit"
    except Exception:  # noqa: BLE001 - a numba/llvmlite without these internals: leave it be
        return


#: The child of :func:`load_compiled`: compiles one signature of one dispatcher, which writes it
#: to numba's cache (the functions it is used for have ``cache=True``).
_CHILD = """
import pickle, sys
from importlib import import_module
module, name, sig = pickle.load(sys.stdin.buffer)
getattr(import_module(module), name).compile(sig)
"""


#: ``callable()`` told once (until :func:`set_compile_notice` is called again) that numba is
#: about to compile emulator code that neither this process nor its cache holds; None: nobody.
_compile_notice = None
_announced = False


def set_compile_notice(notice):
    """Install ``notice`` (a ``callable()`` or None), called at most once, just before the
    first emulator kernel compile that numba's on-disk cache cannot spare (a kernel's first run
    on a machine takes tens of seconds: the CLI prints a line so that a user does not wait on
    a silent bar). Returns the previous notice. Errors: none raised."""
    global _compile_notice, _announced
    old, _compile_notice, _announced = _compile_notice, notice, False
    return old


def is_cold(dispatcher, args) -> bool:
    """True when ``dispatcher(*args)`` (a ``cache=True`` numba function) will compile: neither
    this process nor numba's on-disk cache holds its code for these argument types. False
    when it will not or when that cannot be told (numba internals that moved, no cache).
    Errors: none raised."""
    try:
        sig = tuple(dispatcher.typeof_pyval(a) for a in args)
        if sig in dispatcher.overloads:
            return False
        cache = dispatcher._cache
        key = cache._index_key(sig, dispatcher.targetctx.codegen())
        return key not in cache._cache_file._load_index()
    except Exception:  # noqa: BLE001 - cannot tell: say nothing
        return False


def announce_compile(dispatcher, args) -> None:
    """Call the notice of :func:`set_compile_notice` when ``dispatcher(*args)`` is about to
    compile (:func:`is_cold`) and none was given yet. Errors: none raised (a failing notice is
    ignored)."""
    if _compile_notice is not None and not _announced and is_cold(dispatcher, args):
        _announce()


def _announce() -> None:
    global _announced
    if _compile_notice is None or _announced:
        return
    _announced = True
    try:
        _compile_notice()
    except Exception:  # noqa: BLE001 - a notice never stops the work
        pass


def load_compiled(dispatcher, args) -> None:
    """Before ``dispatcher(*args)`` (a ``parallel=True, cache=True`` numba function): where
    neither this process nor numba's cache holds its code for these argument types, compile it
    in a child Python process, which writes the cache, so that the call loads it from there.

    Why: numba's parallel code runs several times slower in the process that compiled it than
    the same function loaded from the cache (numba issue #10617; the GEMM kernel on 1024^3 took
    5-6x as long in the compiling process here: ``python benchmarks/bench_compile.py
    --in-process``), and code once loaded keeps its symbols for the process's life. The child
    gets the same environment, import path and numba CPU name and features (the cache key),
    and the same signature (pickled numba types on its stdin, never written to disk).
    Anything unexpected (no cache, a child that fails, numba internals that moved:
    ``Dispatcher._cache``, ``Cache._index_key``) leaves the call to compile in this process,
    as numba always does; ``FPSCOPE_COMPILE_APART=0`` in the environment asks for that.
    Errors: none raised."""
    if not is_cold(dispatcher, args):
        return
    _announce()
    if os.environ.get("FPSCOPE_COMPILE_APART", "1") == "0":
        return
    _compile_apart(dispatcher, args)


def _compile_apart(dispatcher, args) -> None:
    """Compile ``dispatcher`` for ``args``' types in a child process, which writes numba's
    cache (:func:`load_compiled`). Errors: none raised."""
    try:
        sig = tuple(dispatcher.typeof_pyval(a) for a in args)
        codegen = dispatcher.targetctx.codegen()
        _, cpu, features = codegen.magic_tuple()
        # the same modules as here: this process's import path (fpscope may come from a folder
        # put on sys.path at run time) and numba's CPU settings
        env = dict(os.environ, NUMBA_CPU_NAME=cpu, NUMBA_CPU_FEATURES=features,
                   PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        fn = dispatcher.py_func
        subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True,
                       input=pickle.dumps((fn.__module__, fn.__qualname__, sig)), check=True,
                       timeout=3600)
    except Exception:  # noqa: BLE001 - the call compiles in this process instead
        return
