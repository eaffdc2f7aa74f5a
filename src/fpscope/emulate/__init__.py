"""Emulation of matrix-unit (tensor-core) arithmetic from a :class:`fpscope.profile.Profile`.

:mod:`fpscope.emulate.reference` is the exact, slow oracle.
"""

from .reference import fdpa, fdpa_block, output_bits

__all__ = ["fdpa", "fdpa_block", "output_bits"]

from .vectorized import fdpa_batch, matmul  # the vectorised engine

__all__ += ["fdpa_batch", "matmul"]


# -- recorded hardware vectors (shared/data/hw-vectors; read in place, never copied) ---------

#: (gpu, folder, output) -> preset name. Output "fp32" or "fp16" (the d_<gpu>_<out>.txt file).
HW_SETS = {
    ("V100", "fp16", "fp32"): "volta-fp16",
    ("V100", "fp16", "fp16"): "volta-fp16-fp16out",
    ("A100", "fp16", "fp32"): "ampere-fp16",
    ("A100", "fp16", "fp16"): "ampere-fp16-fp16out",
    ("A100", "bf16", "fp32"): "ampere-bf16",
    ("A100", "tf32", "fp32"): "ampere-tf32",
    ("Ada", "fp16", "fp32"): "ada-fp16",
    ("Ada", "fp16", "fp16"): "ada-fp16-fp16out",
    ("Ada", "bf16", "fp32"): "ada-bf16",
    ("Ada", "tf32", "fp32"): "ada-tf32",
    ("Ada", "E4M3", "fp32"): "ada-e4m3",
    ("Ada", "E4M3", "fp16"): "ada-e4m3-fp16out",
    ("Ada", "E5M2", "fp32"): "ada-e5m2",
    ("Ada", "E5M2", "fp16"): "ada-e5m2-fp16out",
    ("H100", "fp16", "fp32"): "hopper-fp16",
    ("H100", "fp16", "fp16"): "hopper-fp16-fp16out",
    ("H100", "bf16", "fp32"): "hopper-bf16",
    ("H100", "tf32", "fp32"): "hopper-tf32",
    ("H100", "E4M3", "fp32"): "hopper-e4m3",
    ("H100", "E4M3", "fp16"): "hopper-e4m3-fp16out",
    ("H100", "E5M2", "fp32"): "hopper-e5m2",
    ("H100", "E5M2", "fp16"): "hopper-e5m2-fp16out",
}


def load_hw_set(root, gpu: str, folder: str, out: str):
    """(a, b, c, d) of one recorded set: a, b float64 arrays (n, K); c float64 (n,) as recorded
    (fp32); d the recorded output bit patterns (n,) of the output format (fp32 or fp16)."""
    import numpy as np
    from pathlib import Path

    base = Path(root) / gpu / folder

    def hexwords(name):
        rows = [line.split() for line in (base / name).read_text().splitlines() if line.strip()]
        return np.array([[int(w, 16) for w in r] for r in rows], dtype=np.uint32).view(
            np.float32).astype(np.float64)

    def binwords(name):
        lines = [line.strip() for line in (base / name).read_text().splitlines() if line.strip()]
        return np.array([int(s, 2) for s in lines], dtype=np.uint32)

    a = hexwords(f"a_{gpu}_{folder}.txt")
    b = hexwords(f"b_{gpu}_{folder}.txt")
    c = binwords(f"c_{gpu}_fp32.txt").view(np.float32).astype(np.float64)
    d32 = binwords(f"d_{gpu}_{out}.txt").view(np.float32)
    if out == "fp16":
        d = d32.astype(np.float16).view(np.uint16)  # stored widened to fp32, exactly
    else:
        d = d32.view(np.uint32)
    return a, b, c, d


def hw_c_values(gpu: str, folder: str, out: str, c):
    """The c each recorded output was computed with (hw-vectors README): rounded to fp16 (RNE)
    for fp16 outputs; 0 for the H100 fp8 fp32-output sets (wgmma with a zero accumulator);
    otherwise the recorded fp32 c."""
    import numpy as np

    from ..formats import FP16, round_to_format

    if out == "fp16":
        return round_to_format(c, FP16, "RNE")
    if gpu == "H100" and folder in ("E4M3", "E5M2"):
        return np.zeros_like(c)
    return np.asarray(c, dtype=np.float64)


def run_hw_set(root, gpu: str, folder: str, out: str, profile=None, limit: int | None = None):
    """Run one recorded set through the reference engine.

    The recorded K may be below the profile's k (e.g. A100 fp16: 8 products recorded, the
    m16n8k16 preset chains two blocks of 8): a and b are padded with zero products at the end.

    Returns:
        (matched, total, indices of the samples whose output bits differ).
    """
    from ..profile import PRESETS

    profile = profile or PRESETS[HW_SETS[(gpu, folder, out)]]
    a, b, c, d = load_hw_set(root, gpu, folder, out)
    cv = hw_c_values(gpu, folder, out, c)
    n = len(a) if limit is None else min(limit, len(a))
    pad = [0.0] * (profile.k - a.shape[1])
    bad = []
    for i in range(n):
        got = fdpa(a[i].tolist() + pad, b[i].tolist() + pad, float(cv[i]), profile)
        if output_bits(got, profile) != int(d[i]):
            bad.append(i)
    return n - len(bad), n, bad
