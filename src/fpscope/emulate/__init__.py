"""Emulation of matrix-unit (tensor-core) arithmetic from a :class:`fpscope.profile.Profile`.

:mod:`fpscope.emulate.reference` is the exact, slow oracle; :mod:`.vectorized` and
:mod:`.kernel` are the engines; :mod:`.library` the library level (split-K, promotion,
epilogue); :mod:`.conversion` the conversion of fp32 operands; :mod:`.batched` operands of more
than two dimensions; :mod:`.outputs` the results in the output format's dtype;
:mod:`.distributed` row bands of D on a Dask cluster (``matmul(client=)``).
"""

from .reference import fdpa, fdpa_block, output_bits

__all__ = ["fdpa", "fdpa_block", "output_bits"]

from .vectorized import fdpa_batch  # the vectorised engine

__all__ += ["ENGINES", "dot", "fdpa_batch", "matmul"]

__all__ += ["emulating"]  # torch's GEMMs with a profile's arithmetic (.torch_mode; lazy)


def __getattr__(name: str):
    if name == "emulating":  # lazy: torch_mode imports torch only when a context is made
        from .torch_mode import emulating

        return emulating
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), "emulating"])


#: GEMM engines: "numba" (:mod:`.kernel`, compiled), "numpy" (:mod:`.vectorized`), "auto".
ENGINES = ("auto", "numba", "numpy")

#: "auto" uses the numba kernel from this many multiply-adds (M * N * K) up; below it the
#: numpy engine answers before numba has loaded its compiled code.
AUTO_NUMBA_FROM = 1 << 21


def matmul(A, B, C=None, profile=None, pad: bool = False, engine: str = "auto",
           threads: int | None = None, alpha: float = 1.0, out_format: str | None = None,
           scale_a=None, scale_b=None, progress=None, dtype=None,
           operand_conversion: str | None = None, client=None, bands: int | None = None):
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

    Operands of more than two dimensions are stacks of matrices, as numpy.matmul takes them
    (:mod:`fpscope.emulate.batched`): A (..., M, K) and B (..., K, N) broadcast their batch
    dimensions, D is ``batch + (M, N)``; a 1-D A is one row and a 1-D B one column (their axis
    is dropped from D); C and the scales broadcast likewise.

    Args:
        A: (M, K) or (..., M, K) array of values exactly representable in
            ``profile.in_format``; NaN, Inf, -0 and subnormals allowed. Any float dtype;
            values are never re-rounded. With an operand conversion (``operand_conversion``
            below, or the profile's; tf32 presets: "truncate"), fp32 values instead, converted
            to the input format (:mod:`fpscope.emulate.conversion`; a float32 array is read
            as fp32 words, so a signalling NaN keeps its payload).
        B: (K, N) or (..., K, N) likewise, in ``profile.b_format`` where the profile sets it
            (mixed-input instructions; an error names the operand and both formats).
        C: values of ``profile.out_format`` broadcastable to D's shape, or None (zeros).
        profile: a preset name such as "hopper-fp16" (``fpscope profiles`` lists them), a
            :class:`fpscope.profile.Profile`, or the path of a profile JSON file
            (:func:`fpscope.profile.load_profile`; keyword; required).
        pad: pad a K that is not a multiple of ``profile.k`` with zero products (see
            :func:`fpscope.emulate.vectorized.matmul`: not neutral in general).
        engine: "numba" (tiled parallel kernel; profiles it cannot run are refused, see
            :func:`fpscope.emulate.kernel.unsupported`), "numpy" (vectorised engine), or
            "auto" (numba when installed, the profile is supported and M*N*K is at least
            ``AUTO_NUMBA_FROM``; otherwise numpy).
        threads: numba threads (None: all cores).
        alpha, out_format: the epilogue (:func:`fpscope.emulate.library.epilogue`):
            ``alpha * acc`` rounded to fp32, then to ``out_format`` (None: the profile's
            output format). With the defaults (1.0, None) D is returned as the chain leaves
            it.
        scale_a, scale_b: block-scaled profiles only: scale_a an (M, K // s) array of values
            of ``profile.scale_format`` (any float dtype; e8m0: powers of two 2^-127 .. 2^127;
            ue4m3: 0 and the non-negative e4m3 values up to 448; NaN allowed: the outputs that
            use a NaN scale are NaN), scale_a[m, j] scaling ``A[m, j*s:(j+1)*s]``; scale_b a
            (K // s, N) array, scale_b[j, n] scaling ``B[j*s:(j+1)*s, n]``. K must be a
            multiple of s. With ``pad``, the padded blocks take scale 1. Batched: (..., M,
            K // s) and (..., K // s, N).
        progress: None, or ``progress(rows_done, total)``, called after each band of rows of
            D (:func:`_band_rows`; each row of D depends only on its rows of A, C and scale_a,
            so the bands give the same bits as one call). Batched: rows of the stacked GEMM
            (:func:`fpscope.emulate.batched.run`); the last call has ``rows_done == total``.
        dtype: None (default): D in the output format's numpy dtype (float32 for fp32,
            float16 for fp16, ml_dtypes bfloat16 / float8_* for those formats;
            :meth:`fpscope.formats.Format.numpy_dtype`) with the device's bits: every NaN
            output is ``profile.nan_bits`` (0x7FFFFFFF / 0x7FFF on the NVIDIA presets, the
            recorded hw-vectors patterns), or, for an epilogue ``out_format`` other than the
            profile's, the format's canonical quiet NaN (a pattern not modelled).
            ``"float64"``: float64 values of the output format, NaN as a float NaN (no
            pattern; :func:`output_bits` gives it).
        operand_conversion: None (the profile's), or "RNA", "RNE" or "truncate": how fp32
            operands are converted to a tf32, bf16 or fp16 input format
            (``Profile.operand_conversion``), overriding the profile's.
        client: None (run here), or a ``dask.distributed.Client``: each 2-D GEMM is cut into
            row bands of D, computed on the cluster's workers by this same code and gathered
            (:mod:`fpscope.emulate.distributed`; needs ``pip install 'fpscope[dask]'``). Same
            bits as a local run; each band runs on ``threads`` numba threads (None: 1, the
            cluster's worker threads being the parallelism); ``progress`` is called as bands
            finish. A band that still fails after Dask's retries raises (never a partial D).
        bands: with ``client``: the number of row bands (None: twice the cluster's worker
            threads; at most M).

    Returns:
        array of shape (M, N) (batched: ``batch + (M, N)``) of the output format's dtype, or
        float64 with ``dtype="float64"`` (module :mod:`fpscope.emulate.outputs`).

    Raises:
        ValueError: bad shapes (or batch dimensions, C or scales that do not broadcast), a
            value not representable in its format (the first is named), K not a multiple of
            k without ``pad`` (or of ``split_k * k``), a bad profile (unknown preset name,
            with a hint; a folder; an unreadable or invalid JSON file), an unknown engine,
            dtype or operand conversion, an operand conversion for a profile whose inputs are
            not tf32, bf16 or fp16, or ``engine="numba"`` with a profile the kernel cannot run
            (or without numba); block scales missing for a block-scaled profile or given to
            another, of the wrong shape, or not values of the scale format; ``client`` not a
            synchronous ``dask.distributed.Client``, ``bands`` not a positive integer. Each
            message is one line.
        RuntimeError: with ``client``: a band failed on the cluster after its retries (the
            band's rows and the worker's error are named); ImportError: dask is missing.
    """
    from . import batched, library, outputs
    from ..profile import load_profile

    profile = load_profile(profile)
    if operand_conversion is not None:
        profile = profile.replace(operand_conversion=operand_conversion)
    as_float64 = outputs.check_dtype(dtype)
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; known: {', '.join(ENGINES)}")
    fmt = outputs.output_format(profile, alpha, out_format)

    if client is not None:
        from .distributed import check

        check(client, bands)

    def core(a, b, c, sa, sb, cb):
        return _matmul2d(a, b, c, profile, pad, engine, threads, sa, sb, cb, client, bands)

    D = batched.run(core, A, B, C, scale_a, scale_b, progress)
    if alpha != 1.0 or out_format is not None:
        D = library.epilogue(D, alpha, fmt.name)
    if as_float64:
        return D
    same = fmt.name == outputs.resolve_format(profile.out_format).name
    return outputs.to_output(D, fmt, profile.nan_bits if same else None)


def _matmul2d(A, B, C, profile, pad, engine, threads, scale_a, scale_b, progress,
              client=None, bands=None):
    """One 2-D GEMM of :func:`matmul` (validated profile and engine): float64 (M, N)."""
    from . import kernel, library, vectorized

    A, B, C, scales = vectorized.prepare(A, B, C, profile, pad, scale_a, scale_b)
    why = kernel.unsupported(library.instruction_level(profile))
    if engine == "auto":
        big = A.shape[0] * A.shape[1] * B.shape[1] >= AUTO_NUMBA_FROM
        engine = "numba" if big and why is None and _have_numba() else "numpy"
    if engine == "numba":
        if why is not None:
            raise ValueError(f"{profile.name}: the numba engine cannot run this profile: {why}")
        if not _have_numba():
            raise ValueError("the numba engine needs the numba package (pip install numba)")
    if client is not None:
        from .distributed import gemm_bands

        return gemm_bands(client, A, B, C, scales, profile, engine, threads, bands, progress)

    def rows(a, c, sc):
        return _prepared_rows(a, B, c, sc, profile, engine, threads)

    if progress is None:
        return rows(A, C, scales)
    import numpy as np

    M = A.shape[0]
    band = _band_rows(M, B.shape[1], threads)
    D = np.empty(C.shape)
    for r0 in range(0, M, band):
        r1 = min(M, r0 + band)
        sc = None if scales is None else (scales[0][r0:r1], scales[1])
        D[r0:r1] = rows(A[r0:r1], C[r0:r1], sc)
        progress(r1, M)
    return D


def _prepared_rows(A, B, C, scales, profile, engine: str, threads: int | None):
    """``D = A @ B + C`` on operands already through ``vectorized.prepare`` (A (M, K), B
    (K, N), C (M, N) float64; ``scales`` None or (SA, SB)) with a resolved engine ("numba" or
    "numpy") and the profile's library level: float64 (M, N). Each row of D depends only on
    its rows of A, C and SA: the local bands of :func:`_matmul2d` and the cluster's
    (:mod:`fpscope.emulate.distributed`) call this on row slices."""
    from . import kernel, library, vectorized

    if engine == "numba":
        def chain(a, b, c, p, s=None):
            return kernel.matmul(a, b, c, p, threads=threads, scales=s)
    else:
        def chain(a, b, c, p, s=None):
            return vectorized.gemm_prepared(a, b, c, p, scales=s)

    if library.has_library_level(profile):
        return library.library_gemm(A, B, C, profile, chain, scales)
    return chain(A, B, C, profile, scales)


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
        scale_b=None, dtype=None, operand_conversion: str | None = None):
    """``d = a . b + c`` (1-D a, b of length K) as :func:`matmul` of one row and one column.

    ``scale_a``, ``scale_b``: block-scaled profiles only, 1-D arrays of K // s values of the
    scale format (s = ``profile.scale_block_size``), the scales of a's and b's blocks.
    ``profile``, ``dtype``, ``operand_conversion``: as :func:`matmul`.

    Returns:
        a numpy scalar of the output format's dtype (``numpy.float32`` for fp32, ...) with the
        device's bits (a NaN is ``profile.nan_bits``); a Python float with
        ``dtype="float64"``.

    Raises:
        ValueError: as :func:`matmul`; a or b not 1-D, or of different lengths; a scale array
            not 1-D.
    """
    import numpy as np

    a, b = np.asarray(a), np.asarray(b)  # float32 kept: fp32 words (operand conversion)
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
    D = matmul(a[None, :], b[:, None], C, profile=profile, pad=pad, engine=engine,
               scale_a=sa, scale_b=sb, dtype=dtype, operand_conversion=operand_conversion)
    return D[0, 0] if dtype is None else float(D[0, 0])  # matmul checked dtype


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
