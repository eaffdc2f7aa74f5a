"""numba set-up shared by fpscope's numba modules (``fpscope._formats_jit``,
``fpscope.emulate._kernel_jit``): each calls :func:`prefer_wide_vectors` when it is imported,
so that it takes effect before the first of them compiles or loads any code (numba reads its
CPU features once per process)."""

from __future__ import annotations


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
