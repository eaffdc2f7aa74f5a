"""What a record needs to know about the machine and libraries a target ran on.

An accumulation order depends on more than the library version: the BLAS build and its core type
(OpenBLAS picks kernels per CPU, ``OPENBLAS_CORETYPE`` overrides it), the thread count, the SIMD
extensions numpy dispatched to, environment variables such as ``MKL_CBWR`` or ``XLA_FLAGS``, and on
GPUs the device model and the TF32 switches (fpscope NUMERICS.md sections 1 and 2, cuBLAS
reproducibility). :func:`capture_environment` collects them as a JSON-able dict.

It never imports torch or jax: they are described only when already loaded (``"not loaded"``
otherwise; their installed versions are read from package metadata, which imports nothing).
"""

from __future__ import annotations

import os
import platform
import re
import sys
from collections.abc import Callable

#: Environment variables that change kernels, thread counts or precision.
ENV_VARS = (
    "OPENBLAS_NUM_THREADS", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OMP_NUM_THREADS",
    "MKL_NUM_THREADS", "MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS", "XLA_FLAGS",
    "CUBLAS_WORKSPACE_CONFIG", "CUDA_VISIBLE_DEVICES", "NVIDIA_TF32_OVERRIDE",
)
#: Prefixes of further environment variables recorded (numpy's own switches).
ENV_PREFIXES = ("NPY_",)
#: CPU flags kept from /proc/cpuinfo: the SIMD and matrix extensions (x86 and Arm).
SIMD_FLAG = re.compile(r"^(sse|ssse|avx|fma|f16c|amx|xop|neon|asimd|sve|sme(?!p)|bf16|i8mm|fphp)")
#: Packages whose versions are recorded.
PACKAGES = ("numpy", "ml_dtypes", "numba", "torch", "jax", "jaxlib", "cupy", "mmasim", "threadpoolctl",
            "fpscope")
#: Packages imported here to read their version only when loaded already (heavy imports).
HEAVY = ("numba", "torch", "jax", "jaxlib", "cupy", "mmasim")
#: Packages whose version is read from their metadata unless loaded already: importing ml_dtypes
#: takes 0.5-2 s on a 2-core machine, longer than the rest of ``fpscope reveal numpy.sum``.
BY_METADATA = ("ml_dtypes",)


def _safe(fn: Callable[[], object]) -> object:
    """fn(), or {"error": "..."} when it raises: capture must never fail."""
    try:
        return fn()
    except Exception as exc:  # pragma: no cover - depends on the machine
        return {"error": f"{type(exc).__name__}: {exc}"}


def _platform() -> dict:
    return {
        "system": platform.system(),
        "release": platform.release(),
        "machine": platform.machine(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "executable": sys.executable,
    }


def _installed_version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _packages() -> dict:
    out: dict = {}
    for name in PACKAGES:
        if name in HEAVY and name not in sys.modules:
            out[name] = "not loaded"
            continue
        if name in BY_METADATA and name not in sys.modules:
            out[name] = _installed_version(name) or "not installed"
            continue
        try:
            module = sys.modules.get(name) or __import__(name)
            out[name] = str(getattr(module, "__version__", None) or _installed_version(name))
        except ImportError:
            out[name] = "not installed"
    return out


def _installed() -> dict:
    """Installed versions from package metadata (imports nothing)."""
    return {name: _installed_version(name) for name in PACKAGES}


def _blas() -> list[dict]:
    from threadpoolctl import threadpool_info

    keys = ("user_api", "internal_api", "prefix", "version", "num_threads",
            "threading_layer", "architecture", "filepath")
    return [{k: info.get(k) for k in keys if k in info} for info in threadpool_info()]


def _numpy_build() -> dict:
    import numpy as np

    config = np.show_config(mode="dicts")
    deps = config.get("Build Dependencies", {})
    return {
        "simd": config.get("SIMD Extensions"),
        "blas": {
            k: deps.get("blas", {}).get(k) for k in ("name", "version", "openblas configuration")
        },
    }


def _cpuinfo() -> dict:
    info: dict = {
        "processor": platform.processor() or None,
        "count": os.cpu_count(),
    }
    if hasattr(os, "sched_getaffinity"):
        info["available"] = len(os.sched_getaffinity(0))
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return info
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() not in fields:
            fields[key.strip()] = value.strip()
    info["model"] = fields.get("model name") or fields.get("Hardware") or fields.get("CPU part")
    flags = (fields.get("flags") or fields.get("Features") or "").split()
    info["flags"] = sorted(f for f in set(flags) if SIMD_FLAG.match(f))
    return info


def _env_vars() -> dict:
    return {
        k: v for k, v in sorted(os.environ.items())
        if k in ENV_VARS or k.startswith(ENV_PREFIXES)
    }


def _torch() -> dict:
    torch = sys.modules["torch"]
    out: dict = {
        "num_threads": _safe(torch.get_num_threads),
        "num_interop_threads": _safe(torch.get_num_interop_threads),
        "deterministic_algorithms": _safe(torch.are_deterministic_algorithms_enabled),
        "float32_matmul_precision": _safe(torch.get_float32_matmul_precision),
        "cpu_capability": _safe(lambda: torch.backends.cpu.get_cpu_capability()),
        "cuda_matmul_allow_tf32": _safe(lambda: bool(torch.backends.cuda.matmul.allow_tf32)),
        "cudnn_allow_tf32": _safe(lambda: bool(torch.backends.cudnn.allow_tf32)),
        "allow_fp16_reduced_precision_reduction": _safe(
            lambda: bool(torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction)),
        "allow_bf16_reduced_precision_reduction": _safe(
            lambda: bool(torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction)),
        "cuda_version": _safe(lambda: torch.version.cuda),
        "cuda_available": _safe(lambda: bool(torch.cuda.is_available())),
    }
    if out["cuda_available"] is True:
        def gpus() -> list[dict]:
            return [
                {
                    "name": torch.cuda.get_device_name(i),
                    "capability": list(torch.cuda.get_device_capability(i)),
                    "multiprocessors": torch.cuda.get_device_properties(i).multi_processor_count,
                }
                for i in range(torch.cuda.device_count())
            ]
        out["gpus"] = _safe(gpus)
        out["cudnn_version"] = _safe(torch.backends.cudnn.version)
        out["driver_version"] = _safe(_nvidia_driver)
    return out


def _nvidia_driver() -> str | None:
    """The NVIDIA driver version from ``nvidia-smi`` (None where it is not installed)."""
    import shutil
    import subprocess

    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    res = subprocess.run([exe, "--query-gpu=driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True, timeout=20, check=False)
    return res.stdout.strip().splitlines()[0] if res.returncode == 0 and res.stdout.strip() \
        else None


def _jax() -> dict:
    jax = sys.modules["jax"]
    return {
        "enable_x64": _safe(lambda: bool(jax.config.jax_enable_x64)),
        "default_matmul_precision": _safe(lambda: jax.config.jax_default_matmul_precision),
    }


def capture_environment() -> dict:
    """Describe the platform, libraries, BLAS, CPU, environment variables and torch settings.

    Returns:
        A JSON-able dict with keys ``platform``, ``packages`` (versions of loaded or cheaply
        importable packages; "not loaded" for torch/jax/jaxlib unless already imported; ml_dtypes from
        its metadata unless already imported),
        ``installed`` (versions from package metadata), ``blas`` (threadpoolctl's
        ``threadpool_info()``: library, version, threads, threading layer, core type),
        ``numpy_build`` (SIMD extensions, BLAS build), ``cpu`` (model, SIMD flags, CPU counts),
        ``env`` (the variables of :data:`ENV_VARS` and ``NPY_*`` that are set), and ``torch`` /
        ``jax`` (settings, only when loaded). A part that fails becomes ``{"error": "..."}``;
        this function never raises.
    """
    env: dict = {
        "platform": _safe(_platform),
        "packages": _safe(_packages),
        "installed": _safe(_installed),
        "blas": _safe(_blas),
        "numpy_build": _safe(_numpy_build),
        "cpu": _safe(_cpuinfo),
        "env": _safe(_env_vars),
    }
    env["torch"] = _safe(_torch) if "torch" in sys.modules else "not loaded"
    env["jax"] = _safe(_jax) if "jax" in sys.modules else "not loaded"
    return env
