"""capture_environment: JSON-able, complete enough to tell two machines apart, never raises."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from fpscope import environment
from fpscope.environment import SIMD_FLAG, capture_environment


def test_json_and_main_parts():
    env = capture_environment()
    env = json.loads(json.dumps(env))
    for key in ("platform", "packages", "installed", "blas", "numpy_build", "cpu", "env",
                "torch", "jax"):
        assert key in env
    assert env["platform"]["python"] == ".".join(map(str, sys.version_info[:3]))
    assert env["packages"]["numpy"] == np.__version__
    assert env["packages"]["ml_dtypes"] not in ("not loaded", None)
    assert isinstance(env["cpu"]["count"], int)
    assert all(SIMD_FLAG.match(f) for f in env["cpu"].get("flags", []))


def test_blas_from_threadpoolctl():
    pytest.importorskip("threadpoolctl")
    blas = capture_environment()["blas"]
    assert isinstance(blas, list)
    for lib in blas:
        assert {"internal_api", "version", "num_threads"} <= set(lib)


def test_does_not_import_torch_or_jax():
    code = textwrap.dedent("""
        import json, sys
        from fpscope.environment import capture_environment
        env = capture_environment()
        json.dumps(env)
        loaded = sorted(m for m in ("torch", "jax") if m in sys.modules)
        print(json.dumps([loaded, env["packages"]["torch"], env["torch"], env["jax"]]))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded, torch_version, torch_part, jax_part = json.loads(out.stdout)
    assert loaded == []
    assert torch_version == torch_part == jax_part == "not loaded"


def test_environment_variables(monkeypatch):
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell")
    monkeypatch.setenv("NPY_DISABLE_CPU_FEATURES", "AVX512F")
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")
    monkeypatch.setenv("FPSCOPE_UNRELATED", "x")
    env = capture_environment()["env"]
    assert env["OPENBLAS_CORETYPE"] == "Haswell"
    assert env["NPY_DISABLE_CPU_FEATURES"] == "AVX512F"
    assert env["XLA_FLAGS"].startswith("--xla")
    assert "FPSCOPE_UNRELATED" not in env


def test_never_raises(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(environment, "_blas", broken)
    monkeypatch.setattr(environment, "_cpuinfo", broken)
    monkeypatch.setattr(environment.platform, "platform", broken)
    env = capture_environment()
    assert env["blas"] == {"error": "RuntimeError: boom"}
    assert env["cpu"] == {"error": "RuntimeError: boom"}
    assert "error" in env["platform"]
    json.dumps(env)


def test_simd_flag_filter():
    kept = [f for f in ("sse4_2", "avx512f", "fma", "f16c", "amx_tile", "asimd", "sve2", "sme",
                        "smep", "smap", "pni", "aes", "lm") if SIMD_FLAG.match(f)]
    assert kept == ["sse4_2", "avx512f", "fma", "f16c", "amx_tile", "asimd", "sve2", "sme"]


def test_torch_settings_when_loaded():
    torch = pytest.importorskip("torch")
    env = capture_environment()
    part = env["torch"]
    assert env["packages"]["torch"] == torch.__version__
    assert part["num_threads"] == torch.get_num_threads()
    assert part["deterministic_algorithms"] == torch.are_deterministic_algorithms_enabled()
    for key in ("cuda_matmul_allow_tf32", "cudnn_allow_tf32", "cuda_available",
                "float32_matmul_precision"):
        assert key in part
    if part["cuda_available"]:
        assert part["gpus"] and "capability" in part["gpus"][0]
    json.dumps(env)


def test_ml_dtypes_version_without_importing_it():
    """Importing ml_dtypes takes 0.5-2 s on a 2-core machine: capture_environment reads its
    version from the package metadata unless it is loaded already."""
    code = textwrap.dedent("""
        import sys
        from fpscope.environment import capture_environment
        env = capture_environment()
        print("ml_dtypes" in sys.modules, env["packages"]["ml_dtypes"], env["installed"]["ml_dtypes"])
        import ml_dtypes
        print(capture_environment()["packages"]["ml_dtypes"] == ml_dtypes.__version__)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    first, second = out.stdout.split("\n")[:2]
    loaded, version, installed = first.split()
    assert loaded == "False" and version == installed and version not in ("None", "not")
    assert second == "True"
