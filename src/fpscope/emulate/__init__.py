"""Emulation of matrix-unit (tensor-core) arithmetic from a :class:`fpscope.profile.Profile`.

:mod:`fpscope.emulate.reference` is the exact, slow oracle.
"""

from .reference import fdpa, fdpa_block, output_bits

__all__ = ["fdpa", "fdpa_block", "output_bits"]

from .vectorized import fdpa_batch  # the vectorised engine

__all__ += ["ENGINES", "dot", "fdpa_batch", "matmul"]

#: GEMM engines: "numba" (:mod:`.kernel`, compiled), "numpy" (:mod:`.vectorized`), "auto".
ENGINES = ("auto", "numba", "numpy")

#: "auto" uses the numba kernel from this many multiply-adds (M * N * K) up; below it the
#: numpy engine answers before numba has loaded its compiled code.
AUTO_NUMBA_FROM = 1 << 21


def matmul(A, B, C=None, profile=None, pad: bool = False, engine: str = "auto",
           threads: int | None = None, alpha: float = 1.0, out_format: str | None = None,
           scale_a=None, scale_b=None, progress=None):
    """``D = A @ B + C`` as a chain of matrix-unit instructions of ``profile``, bit-exact.

    K is walked in k-chunks in order; instruction j computes
    ``fdpa(A[m, jk:(j+1)k], B[jk:(j+1)k, n], d_{j-1})`` with ``d_{-1} = C[m, n]``, so every
    engine returns the bits of that loop of :func:`reference.fdpa` calls. A profile with
    library-level fields (``split_k``, ``promotion_interval``) runs several such chains and
    adds them up (:mod:`fpscope.emulate.library`). A block-scaled profile
    (``profile.scale_format``: MXFP8 / MXFP6 / MXFP4 with e8m0 scales per 32 elements of K,
    NVFP4 with ue4m3 scales per 16) takes the scales of each instruction's blocks of K with
    its operands: ``fdpa(..., scale_a=scale_a[m, jk/s:(j+1)k/s], scale_b=scale_b[jk/s:(j+1)k/s,
    n])``, s = ``profile.scale_block_size`` (the scaled elements are ``A[m, i] *
    scale_a[m, i // s]`` and ``B[i, n] * scale_b[i // s, n]``, evaluated as the profile's node
    says, not as rounded float products).

    Args:
        A: (M, K) array of values exactly representable in ``profile.in_format`` (tf32
            profiles: fp32 values, reduced per ``profile.operand_conversion``; a float32 array
            is read as fp32 words, so a signalling NaN keeps its payload); NaN, Inf, -0 and
            subnormals allowed. Any float dtype; values are never re-rounded.
        B: (K, N) likewise, in ``profile.b_format`` where the profile sets it (mixed-input
            instructions; an error names the operand and both formats).
        C: (M, N) values of ``profile.out_format``, or None (zeros).
        profile: a :class:`fpscope.profile.Profile` or a preset name such as "hopper-fp16"
            (keyword; required; ``fpscope profiles`` lists the presets).
        pad: pad a K that is not a multiple of ``profile.k`` with zero products (see
            :func:`fpscope.emulate.vectorized.matmul`: not neutral in general).
        engine: "numba" (tiled parallel kernel; profiles it cannot run are refused, see
            :func:`fpscope.emulate.kernel.unsupported`), "numpy" (vectorised engine), or
            "auto" (numba when installed, the profile is supported and M*N*K is at least
            ``AUTO_NUMBA_FROM``; otherwise numpy).
        threads: numba threads (None: all cores).
        alpha, out_format: the epilogue (:func:`fpscope.emulate.library.epilogue`): with the
            defaults (1.0, None) D is returned as the chain leaves it.
        scale_a, scale_b: block-scaled profiles only: scale_a an (M, K // s) array of values
            of ``profile.scale_format`` (any float dtype; e8m0: powers of two 2^-127 .. 2^127;
            ue4m3: 0 and the non-negative e4m3 values up to 448; NaN allowed: the outputs that
            use a NaN scale are NaN), scale_a[m, j] scaling ``A[m, j*s:(j+1)*s]``; scale_b a
            (K // s, N) array, scale_b[j, n] scaling ``B[j*s:(j+1)*s, n]``. K must be a
            multiple of s. With ``pad``, the padded blocks take scale 1.
        progress: None, or ``progress(rows_done, M)``, called after each band of rows of D
            (:func:`_band_rows`; each row of D depends only on its rows of A, C and scale_a,
            so the bands give the same bits as one call).

    Returns:
        float64 array (M, N) of values of the output format (NaN as float NaN).

    Raises:
        ValueError: bad shapes, a value not representable in its format (the first is named),
            K not a multiple of k without ``pad`` (or of ``split_k * k``), an unknown preset
            name or engine,
            or ``engine="numba"`` with a profile the kernel cannot run (or without numba);
            block scales missing for a block-scaled profile or given to another, of the wrong
            shape, or not values of the scale format. Each message is one line.
    """
    from . import kernel, library, vectorized

    if isinstance(profile, str):
        from ..profile import get_profile

        profile = get_profile(profile)  # ValueError for an unknown name
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; known: {', '.join(ENGINES)}")
    A, B, C, scales = vectorized.prepare(A, B, C, profile, pad, scale_a, scale_b)
    layered = library.has_library_level(profile)
    why = kernel.unsupported(library.instruction_level(profile))
    if engine == "auto":
        big = A.shape[0] * A.shape[1] * B.shape[1] >= AUTO_NUMBA_FROM
        engine = "numba" if big and why is None and _have_numba() else "numpy"
    if engine == "numba":
        if why is not None:
            raise ValueError(f"{profile.name}: the numba engine cannot run this profile: {why}")
        if not _have_numba():
            raise ValueError("the numba engine needs the numba package (pip install numba)")

        def chain(a, b, c, p, s=None):
            return kernel.matmul(a, b, c, p, threads=threads, scales=s)
    else:
        def chain(a, b, c, p, s=None):
            return vectorized.gemm_prepared(a, b, c, p, scales=s)
    def rows(a, c, sc):
        return (library.library_gemm(a, B, c, profile, chain, sc) if layered
                else chain(a, B, c, profile, sc))

    if progress is None:
        D = rows(A, C, scales)
    else:
        import numpy as np

        M = A.shape[0]
        band = _band_rows(M, B.shape[1], threads)
        D = np.empty(C.shape)
        for r0 in range(0, M, band):
            r1 = min(M, r0 + band)
            sc = None if scales is None else (scales[0][r0:r1], scales[1])
            D[r0:r1] = rows(A[r0:r1], C[r0:r1], sc)
            progress(r1, M)
    if alpha != 1.0 or out_format is not None:
        D = library.epilogue(D, alpha, out_format)
    return D


def _band_rows(M: int, N: int, threads: int | None) -> int:
    """Rows per band of a GEMM run with progress: about M / 20, in whole kernel tiles
    (``kernel.TILE_ROWS``), and enough tiles per band (two per thread) that the numba kernel
    still uses every core."""
    import os

    from .kernel import TILE_COLS, TILE_ROWS

    cores = threads or os.cpu_count() or 1
    col_tiles = max(1, -(-N // TILE_COLS))
    least = TILE_ROWS * -(-2 * cores // col_tiles)
    return max(least, -(-max(1, -(-M // 20)) // TILE_ROWS) * TILE_ROWS)


def dot(a, b, c=0.0, profile=None, pad: bool = False, engine: str = "auto", scale_a=None,
        scale_b=None):
    """``d = a . b + c`` (1-D a, b of length K) as :func:`matmul` of one row and one column.

    ``scale_a``, ``scale_b``: block-scaled profiles only, 1-D arrays of K // s values of the
    scale format (s = ``profile.scale_block_size``), the scales of a's and b's blocks.

    Returns:
        float (a value of ``profile.out_format``).

    Raises:
        ValueError: as :func:`matmul`; a or b not 1-D, or of different lengths; a scale array
            not 1-D.
    """
    import numpy as np

    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.ndim != 1 or b.ndim != 1 or a.shape != b.shape:
        raise ValueError(f"dot takes two 1-D arrays of one length; got {a.shape} and {b.shape}")
    scales = []
    for what, sv in (("scale_a", scale_a), ("scale_b", scale_b)):
        if sv is not None:
            sv = np.asarray(sv, dtype=np.float64)
            if sv.ndim != 1:
                raise ValueError(f"dot takes a 1-D {what}; got shape {sv.shape}")
        scales.append(sv)
    C = np.full((1, 1), float(c))
    sa = None if scales[0] is None else scales[0][None, :]
    sb = None if scales[1] is None else scales[1][:, None]
    return float(matmul(a[None, :], b[:, None], C, profile=profile, pad=pad, engine=engine,
                        scale_a=sa, scale_b=sb)[0, 0])


def _have_numba() -> bool:
    import importlib.util

    return importlib.util.find_spec("numba") is not None


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
    from pathlib import Path

    import numpy as np

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
