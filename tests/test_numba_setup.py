"""fpscope._numba_setup.load_compiled: the GEMM loops are compiled in a child process and the
calling process loads them from numba's cache (code compiled in the calling process runs
several times slower there, numba issue #10617). Each case runs in a fresh Python with an empty
cache folder of its own, on the lossless loop (AMD CDNA1), the quickest to compile."""

from __future__ import annotations

import os
import subprocess
import sys

SCRIPT = """
import sys
import numpy as np
from fpscope.emulate import kernel, _kernel_jit as J
from fpscope.profile import PRESETS
if sys.argv[1] == "failing-child":
    sys.executable = "/nonexistent/python"  # the child cannot start
p = PRESETS["cdna1-fp16"]
D = kernel.matmul(np.ones((8, p.k)), np.ones((p.k, 8)), np.zeros((8, 8)), p)
stats = J.lossless_kernel.stats
print(sum(stats.cache_hits.values()), sum(stats.cache_misses.values()), D[0, 0])
"""


def _run(tmp_path, mode, **env):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / mode), **env)
    out = subprocess.run([sys.executable, "-c", SCRIPT, mode], env=env, capture_output=True,
                         text=True, check=True, timeout=900)
    hits, misses, d = out.stdout.split()
    return int(hits), int(misses), float(d)


def test_the_gemm_loop_is_compiled_in_a_child_and_loaded_from_the_cache(tmp_path):
    k = 16  # cdna1-fp16's k: D = k everywhere
    from fpscope.profile import PRESETS

    assert PRESETS["cdna1-fp16"].k == k
    assert _run(tmp_path, "apart") == (1, 0, k)  # loaded, never compiled here
    assert _run(tmp_path, "in-process", FPSCOPE_COMPILE_APART="0") == (0, 1, k)
    # a child that cannot run: the call compiles in this process, as numba does
    assert _run(tmp_path, "failing-child") == (0, 1, k)


def test_the_child_imports_the_callers_fpscope(tmp_path):
    """A caller that imports a copy of fpscope from a folder it put on sys.path (a checkout in
    front of the installed package): the child imports that copy too, so the cache entry it
    writes is the one the caller looks up (with the installed package instead, the caller
    compiled the loop itself: 0 hits, 1 miss)."""
    import shutil

    import fpscope

    shutil.copytree(os.path.dirname(fpscope.__file__), tmp_path / "copy" / "fpscope",
                    ignore=shutil.ignore_patterns("__pycache__"))
    script = f"import sys; sys.path.insert(0, {str(tmp_path / 'copy')!r})\n" + SCRIPT + (
        "\nimport fpscope; assert fpscope.__file__.startswith(sys.path[0]), fpscope.__file__\n")
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    out = subprocess.run([sys.executable, "-c", script, "apart"], env=env, capture_output=True,
                         text=True, check=True, timeout=900)
    assert out.stdout.split()[:2] == ["1", "0"], out.stdout
