"""The compiled engine: a tiled, parallel numba kernel for whole GEMMs.

Same arithmetic, same bits, as :mod:`fpscope.emulate.vectorized` (and so as the exact
:mod:`fpscope.emulate.reference`; NUMERICS.md section 2), laid out for speed:

* Operands are split once, in one parallel pass each (``_kernel_jit.operand_codes``), into
  values and leading exponents, and their NaN / Inf rows and columns are found. The leading
  exponent of a nonzero operand is ``max(floor(log2|x|), emin)`` (subnormals keep ``emin``; a
  and b each with their own format's ``emin`` in a mixed-input profile), stored as int8 where
  both operand formats' exponents lie in [-20, 20] (fp16, fp8, fp6, fp4), else int16; zeros (and
  subnormals under ``flush_inputs``) get a sentinel far below every real exponent, so
  ``e_a + e_b`` of a zero product is recognisably below a bound (:func:`_exponent_coding`).
* Per block of L products and each output element, ``e_max`` is the max of the product exponents
  ``e_a + e_b``, of ``e_zero`` if any term is zero, and of c's exponent.
* Cutting a term at weight ``2^lsb`` (``lsb = e_max - F``) is cutting the real number ``t *
  2^-lsb`` to an integer: the product ``a * b`` is exact in the value dtype (float32 for inputs
  of at most 12 significand bits and a small exponent range: fp16, fp8, fp6, fp4; also bf16 and
  tf32 operands whose magnitudes keep every product normal there, see :func:`_value_dtype`;
  float64 otherwise), scaling by the power of two ``2^-lsb`` is exact, and the cut is the
  float->int32 conversion (truncation toward zero) or ``floor`` / ``rint`` first. A scaled
  product is below ``2^(F+2)``; they are summed in int32 in runs of as many as cannot overflow
  (all L of a block for every NVIDIA fp16 preset), the runs added up in float64 (exact: a
  block's sum has at most 53 bits, :func:`fpscope.emulate.vectorized.check_exact`). In float32,
  a scaled product can underflow only when it is below ``2^-126``, where truncation and rounding
  to nearest give 0 anyway (floor alignment therefore uses float64).
* c is cut in float64 and added to the block's integer sum exactly; ``sum * 2^lsb`` is exact in
  float64 and is rounded by ``_kernel_jit._round`` (through a bit-level fast path where the
  result is normal, or, by the block's weights, cannot be anything else: ``_kernel_jit._finish``,
  :func:`_exact_weights`), the branch-free twin of
  :func:`fpscope.formats.round_to_format` (overflow ``inf``) with the reference's rules: +-Inf
  when ``|x| >= 2^(emax + 1)`` in every mode, subnormal results flushed under ``flush_outputs``,
  ``-0 -> +0``.
* The running values (C, each step's result, D) are float32 wherever every value they can take
  converts exactly (:func:`_run32`: every rounding format within float32's, float32 products, no
  NaN in C, whose payload float64 carries unchanged); the block set-up then works on 16 lanes
  (``_kernel_jit._prepare_loop32``) instead of float64's 8, and with truncation it cuts the
  block's first products in the same pass (``_kernel_jit._fused_first``,
  :func:`_first_products`) and, where those are all of the block's, rounds it there too
  (:func:`_rounds_in_pass`). Each tile keeps its running values in a buffer of their own: C is
  read into it and D written from it, never converted whole. A NaN or Inf c is carried.
* Block scales (MX: ``scale_format`` on the fused node) are folded into the operands
  (:func:`_scaled_codes`): the value ``x * s`` and the leading exponent ``e_x + e_s``, as
  ``vectorized._fold`` folds them, so the arithmetic below is unchanged; a NaN scale marks its
  row or column for recomputation.
* Outputs whose row of A or column of B holds NaN or Inf are recomputed by the vectorised
  engine; a non-finite c (or a step that overflowed) is carried, as the reference does when the
  products are finite.

The other node kinds have loops of their own on the same tiles (:func:`_loop`): the "pairwise"
node (AMD CDNA2) in float64 (:func:`_pairwise`), the "two-stage" node (AMD CDNA3) and the
"grouped" node (MXFP4 / NVFP4 with k = 64) in int64 on the operands decoded as the numpy engine
decodes them (:func:`_two_stage`, :func:`_grouped`), and lossless fused profiles (AMD CDNA1:
exact float64 products, summed exactly and rounded once, :func:`_lossless`). Profiles the
kernel does not handle (see :func:`unsupported`) go to the vectorised engine.
Loops: tiles of ``rows`` rows of A by ``cols`` columns of B run in parallel (numba ``prange``);
the first k-chunk reads C, the later ones the running D (C is not copied into D); inside a tile,
each k-chunk of B (k x cols values and exponents) stays in cache while every row of the tile
runs its instruction; the innermost loops run over the tile's columns, contiguous in memory, so
they compile to SIMD code. Compilation is cached on disk (``cache=True``), and the loops are
compiled in a child process and loaded from that cache (:func:`_call`: numba's parallel code
can run several times slower in the process that compiled it).
"""

from __future__ import annotations

import contextlib
import dataclasses

import numpy as np

from ..formats import ROUNDING_MODES, Format
from ..profile import Profile, resolve_format

__all__ = ["matmul", "unsupported"]

#: The Profile fields the kernel implements; others must keep their defaults (unsupported()).
_KNOWN_FIELDS = frozenset((
    "name", "arch", "in_format", "out_format", "block_size", "k", "frac_bits", "alignment",
    "e_zero", "step_rounding", "output_rounding", "flush_inputs", "flush_outputs", "nan_bits",
    "neg_zero_to_pos", "operand_conversion", "k_order", "c_entry", "status", "evidence",
    "b_format", "scale_format", "scale_block_size", "zero_sum_sign"))
#: The fields the other node kinds read besides those (_pairwise, _two_stage, _grouped).
_OTHER_NODE_FIELDS = frozenset(("node", "input_zero_sign", "frac_bits2", "alignment2",
                                "product_groups", "c_drop_bits", "product_overflow",
                                "group_size"))
_MODES = {m: i for i, m in enumerate(ROUNDING_MODES)}
_ALIGN = {"truncate": 0, "floor": 1, "nearest": 2}  # the loops' alignment codes
_NONE = -(1 << 30)  # "no exponent yet" in the e_max computation


def _call(kernel_fn, *args) -> None:
    """``kernel_fn(*args)`` (a parallel GEMM loop of ``_kernel_jit``) on code loaded from numba's
    cache, compiled in a child process where the cache lacks it
    (``fpscope._numba_setup.load_compiled``: code compiled in this process would run several
    times slower here)."""
    from .._numba_setup import load_compiled

    load_compiled(kernel_fn, args)
    kernel_fn(*args)


def _announce_compile(fn, args) -> None:
    """Tell the compile notice (``fpscope._numba_setup.set_compile_notice``) before a loop
    that runs in this process compiles (its first run on a machine)."""
    from .._numba_setup import announce_compile

    announce_compile(fn, args)


def _value_dtype(profile: Profile, A: np.ndarray | None = None, B: np.ndarray | None = None,
                 scales=None):
    """float32 when every product of two inputs is exact in float32 and a scale ``2^-lsb``
    that meets a nonzero product stays below ``2^127``; float64 otherwise.

    Statically (any operands of the formats: fp16, fp8, fp6, fp4, and mixed pairs of them), or
    for the given operands A, B (bf16, tf32; 2-D float64): every nonzero product of their
    finite values (flushed subnormals excluded under ``flush_inputs``) then lies in
    ``[min|a| min|b|, max|a| max|b|]``; at most ``2^124`` means no product overflows, at least
    ``2^(F - 124)`` means each is normal and ``F - e_max <= 126``. Floor alignment always takes
    float64 (a negative scaled product that underflows to -0 would floor to 0, not -1).
    Block-scaled profiles are judged on the operands with their scales folded in (``scales``:
    (SA, SB, block) in :func:`_scaled_codes`'s layout), flushed subnormals included (a folded
    value below the format's smallest normal need not be one); with ue4m3 scales the
    significands hold ``p + p_s`` bits and the bound on small products is ``2^(F - 122)``.
    """
    fa, fb = _operand_formats(profile)
    scaled = profile.scale_format is not None
    ps = resolve_format(profile.scale_format).p if _wide_scales(profile) else 0
    if profile.alignment == "floor" or fa.p + fb.p + 2 * ps > 24:
        return np.float64
    if (not scaled and fa.emax + fb.emax + 2 <= 126
            and (fa.emin - fa.p + 1) + (fb.emin - fb.p + 1) >= -126
            and profile.frac_bits - fa.emin - fb.emin <= 126):
        return np.float32
    if A is None or B is None or (scaled and scales is None):
        return np.float64
    if A.size == 0 or B.size == 0:
        return np.float32  # no product at all
    from ._kernel_jit import abs_range

    if scales is None:  # a unit scale per row
        args = [(X, np.ones((X.shape[0], 1)), X.shape[1], True) for X in (A, B)]
    else:
        SA, SB, block = scales
        args = [(A, SA, block, True), (B, SB, block, False)]
    tiny = [f.min_normal if profile.flush_inputs and not scaled else 0.0 for f in (fa, fb)]
    calls = [(np.ascontiguousarray(X, dtype=np.float64), np.ascontiguousarray(S, dtype=np.float64),
              block, rows, t) for (X, S, block, rows), t in zip(args, tiny)]
    _announce_compile(abs_range, calls[0])
    (lo_a, hi_a), (lo_b, hi_b) = (abs_range(*c) for c in calls)
    if hi_a == 0 or hi_b == 0:
        return np.float32  # every product is zero
    margin = 124 - 2 * (ps > 0)  # a scaled significand below 4: e_max > log2|a b| - 4
    if hi_a * hi_b <= 2.0 ** 124 and lo_a * lo_b >= 2.0 ** (profile.frac_bits - margin):
        return np.float32
    return np.float64


def _run32(profile: Profile, vt) -> bool:
    """Whether the kernel can keep the running values (C, each step's result, D) in float32,
    which puts the block set-up on 16 lanes (``_kernel_jit._prepare_loop32``): float32
    products (``vt``, which also rules out floor alignment), every rounding format and C's
    format within float32 (at most 24 significand bits, emin >= -126, emax <= 127, so each
    value converts exactly), and 1 <= F (so that a scale ``2^-lsb`` of a nonzero product or c
    is a normal float32), and a block's cut c plus its int32 runs before the last fit int32
    (the float32 path keeps the cut c as int32 and adds each full run into it; F = 25 with
    fp16 operands and 32-product blocks would not fit: :func:`_cut_product_bound`)."""
    fmts = [resolve_format(profile.out_format), resolve_format(profile.step_rounding[0])]
    if profile.output_rounding is not None:
        fmts.append(resolve_format(profile.output_rounding[0]))
    L, T = profile.block_size, _int32_terms(profile)
    before_last = (L - 1) // T * T  # products in the runs added into the cut c
    ct_max = 2 ** (profile.frac_bits + 1) + before_last * _cut_product_bound(profile)
    return (vt == np.float32 and profile.frac_bits >= 1 and profile.alignment != "floor"
            and all(f.p <= 24 and f.emin >= -126 and f.emax <= 127 for f in fmts)
            and ct_max < 2 ** 31)


def _cut_product_bound(profile: Profile) -> int:
    """The largest magnitude of a cut product, in units of its cut weight ``2^(e_max - F)``:
    a product of leading exponent ``e_a + e_b <= e_max`` is at most ``2^(e_a + e_b)`` times
    the product of the largest significands, ``(2^p - 1) / 2^(p - 1)`` for each operand and
    for each of its two block scales (:func:`_scaled_codes`), so the cut value is at most
    ``2^F`` times that, plus one where the cut rounds to nearest. (:func:`_int32_terms` uses
    the looser ``2^(F+2)``.)"""
    fa, fb = _operand_formats(profile)
    num, den = (2 ** fa.p - 1) * (2 ** fb.p - 1), 2 ** (fa.p + fb.p - 2)
    if profile.scale_format is not None:
        fs = resolve_format(profile.scale_format)
        num, den = num * (2 ** fs.p - 1) ** 2, den * 2 ** (2 * fs.p - 2)
    return num * 2 ** profile.frac_bits // den + (profile.alignment != "truncate")


def unsupported(profile: Profile) -> str | None:
    """Why the kernel cannot run ``profile`` (None when it can).

    The kernel runs every node kind (:func:`_loop`): the fused node (block-scaled MX ones
    included), and with loops of their own the "pairwise" node (AMD CDNA2, :func:`_pairwise`),
    the "two-stage" node (AMD CDNA3, :func:`_two_stage`), the "grouped" node (MXFP4 / NVFP4 with
    k = 64, :func:`_grouped`) and lossless fused profiles (AMD CDNA1, :func:`_lossless`). It
    handles the fields of :class:`~fpscope.profile.Profile` in ``_KNOWN_FIELDS`` and, for the
    other nodes, ``_OTHER_NODE_FIELDS`` (any other field must hold its default) except
    ``product_overflow`` in the fused and grouped nodes, and in the fused node
    ``input_zero_sign`` "positive" and, unless the window is lossless (then c added last, and
    products not exact in float64), ``neg_zero_to_pos=False`` (the sign of an exact zero sum is
    not tracked), ``F > 28`` (one cut product may not fit int32) and input formats wider than
    24 significand bits; no rounding format may lie outside float64's normal range.
    """
    other = profile.node != "fused"  # pairwise, two-stage, grouped
    known = _KNOWN_FIELDS | (_OTHER_NODE_FIELDS if other else frozenset())
    if profile.product_overflow is not None and profile.node in ("fused", "grouped"):
        return "product_overflow (products that overflow to Inf) runs on the numpy engine only"
    for f in dataclasses.fields(profile):  # a field added after the kernel was written
        if f.name not in known and getattr(profile, f.name) != f.default:
            if f.name in _OTHER_NODE_FIELDS:
                return f"{f.name} {getattr(profile, f.name)!r} runs on the numpy engine only"
            return f"the kernel does not model the profile field {f.name!r}"
    for fmt in (resolve_format(profile.out_format), resolve_format(profile.step_rounding[0]),
                resolve_format(profile.output_rounding[0]) if profile.output_rounding else None):
        if fmt is not None and (fmt.emin - fmt.p < -1000 or fmt.emax > 1000 or fmt.p > 53):
            return f"rounding format {fmt.name} is outside the kernel's range"
    if other:
        return None
    if _loop(profile) == "lossless":
        return _lossless_unsupported(profile)
    if not profile.neg_zero_to_pos:
        return "neg_zero_to_pos=False (the kernel returns +0 for every zero sum)"
    if _int32_terms(profile) < 1:
        return f"F = {profile.frac_bits}: one cut product may not fit int32"
    for fin in _operand_formats(profile):
        if fin.p > 24:
            return f"{fin.name} inputs are wider than the kernel's products allow"
    return None


def _loop(profile: Profile) -> str:
    """Which of the kernel's loops runs ``profile``: "fused" (the int32 GEMM kernel), or the
    node's own loop: "pairwise", "two-stage", "grouped", or "lossless" (a fused profile whose
    window never cuts, ``Profile.lossless``, when the int32 kernel cannot hold it, F > 28, or
    its zero signs are kept)."""
    if profile.node != "fused":
        return profile.node
    if profile.lossless and (profile.frac_bits > 28 or not profile.neg_zero_to_pos):
        return "lossless"
    return "fused"


def _lossless_unsupported(profile: Profile) -> str | None:
    """Why :func:`_lossless` cannot run a profile :func:`_loop` gives it; None when it can."""
    if profile.c_entry != "first":
        return "c_entry 'last' with a lossless window runs on the numpy engine only"
    fa, fb = _operand_formats(profile)
    if fa.p + fb.p > 53 or fa.emax + fb.emax > 1000 or fa.emin + fb.emin - fa.p - fb.p < -1000:
        return f"{fa.name} x {fb.name} products are not exact in float64"
    return None


def _int32_terms(profile: Profile) -> int:
    """How many cut products sum exactly in int32: a cut product's magnitude is below
    ``2^(F+2)`` (at most ``2^(F+2) - 1`` when truncated, ``2^(F+2)`` when rounded); with block
    scales of more than one significand bit (ue4m3) below ``2^(F+4)``, for each operand's
    significand is then a product of two below 2 (:func:`_scaled_codes`)."""
    top = 2 ** (profile.frac_bits + 2 + 2 * _wide_scales(profile))
    return (2 ** 31 - 1) // (top - (1 if profile.alignment == "truncate" else 0))


def _first_products(profile: Profile, rt) -> int:
    """How many products the block set-up cuts in its own pass (``_kernel_jit._fused_first``):
    the largest of 16, 8, 4 within the block and within :func:`_int32_terms`, where the running
    values are float32 (``rt``) and the alignment truncates (every preset); else 0 (the set-up
    runs alone)."""
    if rt != np.float32 or profile.alignment != "truncate":
        return 0
    most = min(profile.block_size, _int32_terms(profile))
    return next((P for P in (16, 8, 4) if P <= most), 0)


def _rounds_in_pass(profile: Profile, rt) -> tuple:
    """``fin`` of ``_kernel_jit.gemm_kernel``: (0,) (RZ) or (0, 0) (RNE) where the fused pass
    takes the whole block (:func:`_first_products` is the block size) and the step rounds RZ or
    RNE, so that the pass rounds the block as well (``_kernel_jit._fused_loop``: the block's
    sums never leave registers); else () (the rounding is a pass of its own,
    ``_kernel_jit._finish``)."""
    if _first_products(profile, rt) != profile.block_size:
        return ()
    return {"RZ": (0,), "RNE": (0, 0)}.get(profile.step_rounding[1], ())


def _exact_weights(profile: Profile, fstep: Format) -> tuple[int, int]:
    """(lo_min, lo_max): the weight exponents lo (e_max - F) for which every step result of a
    block is exactly what the bit-level rounding gives unchecked (``_kernel_jit._finish``). The
    block's integer sum s (its cut products and cut c) has ``|s| < 2^h``, h the bit length of
    ``L * top + 2^(F+1)`` (top: a cut product's bound, :func:`_int32_terms`), and the result
    is ``v = s * 2^lo``. Up to ``lo <= emax - h``, ``|v| < 2^emax``: RZ and RNE stay finite.
    From ``lo >= emin - p + 1`` (the last place of ``fstep``'s subnormals) a v below
    ``2^emin`` is a multiple of that place with fewer than p bits, so it is a subnormal of
    ``fstep`` exactly and the rounding keeps it; under ``flush_outputs`` such a v must become
    0, so there lo >= emin."""
    top = 2 ** (profile.frac_bits + 2 + 2 * _wide_scales(profile))
    h = (profile.block_size * top + 2 ** (profile.frac_bits + 1)).bit_length()
    lo_min = fstep.emin if profile.flush_outputs else fstep.emin - fstep.p + 1
    return lo_min, fstep.emax - h


def _wide_scales(profile: Profile) -> bool:
    """Block scales whose significands have more than one bit (ue4m3; e8m0 are powers of 2)."""
    return profile.scale_format is not None and resolve_format(profile.scale_format).p > 1


def _roundings(profile: Profile):
    """(output format, step format, the step rounding's :func:`_rounding_args`, whether there
    is an output rounding, its args (the step's where there is none)) of ``profile``."""
    fout = resolve_format(profile.out_format)
    fstep = resolve_format(profile.step_rounding[0])
    has_out = profile.output_rounding is not None
    fo = resolve_format(profile.output_rounding[0]) if has_out else fstep
    mo = profile.output_rounding[1] if has_out else profile.step_rounding[1]
    return (fout, fstep, _rounding_args(fstep, profile.step_rounding[1], profile.flush_outputs),
            has_out, _rounding_args(fo, mo, profile.flush_outputs))


def _c_tiny(profile: Profile):
    """``tiny(fmt)``: below it a c read in ``fmt`` is a zero (its smallest normal under
    ``flush_inputs``, else 0)."""
    return lambda f: f.min_normal if profile.flush_inputs else 0.0


def _k_permutation(profile: Profile, K: int):
    """The columns of A (rows of B) in the order the blocks take the products (``k_order`` in
    every k-chunk of K), or None for the natural order."""
    if profile.k_order is None:
        return None
    k = profile.k
    return (np.arange(0, K, k)[:, None] + np.asarray(profile.k_order)[None, :]).ravel()


def _in_k_order(A, B, profile: Profile):
    """A, B with K permuted by :func:`_k_permutation`."""
    perm = _k_permutation(profile, A.shape[1])
    return (A, B) if perm is None else (A[:, perm], B[perm, :])


def _rounding_args(fmt: Format, mode: str, flush: bool):
    """(p, q_lo, max_finite, mode code, tiny, big) of _kernel_jit._round."""
    q_lo = -1000 if flush else fmt.emin - fmt.p + 1
    tiny = fmt.min_normal if flush else 0.0
    return (fmt.p, q_lo, fmt.max_finite, _MODES[mode], tiny, 2.0 ** (fmt.emax + 1))


def _operand_formats(profile: Profile) -> tuple[Format, Format]:
    """The formats of a and b (``profile.operand_formats``)."""
    fa = resolve_format(profile.in_format)
    return fa, (fa if profile.b_format is None else resolve_format(profile.b_format))


def _exponent_coding(*fmts: Format, scale: Format | None = None):
    """(dtype, sentinel, zero_below) of the exponent arrays of both operands (one coding for a
    and b, so that ``e_a + e_b`` is one narrow sum). An operand's exponent is its format's
    (``emin..emax``) or, with block scales folded in (``scale``, :func:`_scaled_codes`), that
    plus the scale's (``emin + scale.emin .. emax + scale.emax``). int8 when every operand's
    exponent lies in [-20, 20]: real sums lie in [-40, 40], a sentinel -62 plus any real
    exponent in [-82, -42], two sentinels -124 (no int8 overflow), so "a sum below -41" is
    exactly "a zero product". int16 otherwise, with sentinel -16000 and bound -8000. (e5m2
    with ue4m3 scales folded in reaches 15 + 8 = 23: int16; with int8, a zero product beside
    an operand of exponent 23 read as a real one, which cut a tiny c to 0.)"""
    lo, hi = (0, 0) if scale is None else (scale.emin, scale.emax)
    if all(f.emin + lo >= -20 and f.emax + hi <= 20 for f in fmts):
        return np.int8, -62, -41
    return np.int16, -16000, -8000


def _codes(X: np.ndarray, fmt: Format, flush: bool, coding, vt, rows: bool):
    """(values, exponents, bad) of an operand, from one parallel pass
    (``_kernel_jit.operand_codes``): values in ``vt``, exponents in ``coding`` (the sentinel
    for zeros, non-finite values and, when ``flush``, subnormals; their values are 0), and the
    indices of the rows (``rows``) or columns that hold NaN or Inf."""
    from ._kernel_jit import operand_codes

    X = np.ascontiguousarray(X, dtype=np.float64)
    V = np.empty(X.shape, vt)
    E = np.empty(X.shape, coding[0])
    bad = np.zeros(X.shape[0] if rows else X.shape[1], np.bool_)
    args = (X, V, E, fmt.emin, fmt.min_normal if flush else 0.0, coding[1], bad, rows)
    _announce_compile(operand_codes, args)
    operand_codes(*args)
    return V, E, np.flatnonzero(bad)


def _scaled_codes(X, S, block: int, fmt: Format, fs: Format, flush: bool, coding, vt,
                  rows: bool):
    """:func:`_codes` of an operand X (2-D float64) with its block scales S folded in, as the
    numpy engine folds them (``vectorized._fold``), in one parallel pass
    (``_kernel_jit.scaled_operand_codes``): A (``rows``): S (M, K / block), S[m, j] scaling
    A[m, j*block:(j+1)*block]; B: S (K / block, N), S[j, n] scaling B[j*block:(j+1)*block, n].
    The value is ``x * s`` (exact: an operand's and a scale's significands have at most 28
    bits together), the leading exponent ``e_x + e_s``, each ``max(floor(log2|.|), emin)`` in
    its own format (so a subnormal operand keeps its format's emin, not its folded value's
    exponent); a zero or flushed operand or a zero scale gives a zero term (the sentinel), a
    NaN scale marks its row or column bad, like a non-finite operand."""
    from ._kernel_jit import scaled_operand_codes

    X = np.ascontiguousarray(X, dtype=np.float64)
    V = np.empty(X.shape, vt)
    E = np.empty(X.shape, coding[0])
    bad = np.zeros(X.shape[0] if rows else X.shape[1], np.bool_)
    args = (X, np.ascontiguousarray(S, dtype=np.float64), block, rows, V, E, fmt.emin,
            fmt.min_normal if flush else 0.0, fs.emin, coding[1], bad)
    _announce_compile(scaled_operand_codes, args)
    scaled_operand_codes(*args)
    return V, E, np.flatnonzero(bad)


def _pairwise(A, B, C, profile: Profile, rows: int, cols: int, threads: int | None):
    """:func:`matmul` of a "pairwise" profile (AMD CDNA2) on ``_kernel_jit.pairwise_kernel``,
    float64 throughout: A and B are read as the node reads them first (under ``flush_inputs``
    values below their format's smallest normal become zeros of their sign; under
    ``input_zero_sign`` "positive" zeros become +0), then permuted by ``k_order``."""
    from ._kernel_jit import pairwise_kernel

    positive = profile.input_zero_sign == "positive"

    def read(X, fmt):
        X = np.asarray(X, dtype=np.float64)
        if profile.flush_inputs:
            with np.errstate(invalid="ignore"):
                X = np.where(np.abs(X) < fmt.min_normal, np.copysign(0.0, X), X)
        return np.where(X == 0, 0.0, X) if positive else X

    fa, fb = _operand_formats(profile)
    A, B = read(A, fa), read(B, fb)
    k = profile.k
    A, B = _in_k_order(A, B, profile)
    fout, _, step_args, has_out, out_args = _roundings(profile)
    D = np.empty(C.shape)
    with _threads(threads):
        _call(pairwise_kernel, np.ascontiguousarray(A), np.ascontiguousarray(B),
                        np.ascontiguousarray(C, dtype=np.float64), D, k, profile.block_size,
                        step_args, not profile.neg_zero_to_pos, _c_tiny(profile)(fout),
                        positive, has_out, out_args, max(1, rows), max(1, cols))
    return D


def _two_stage(A, B, C, profile: Profile, rows: int, cols: int, threads: int | None):
    """:func:`matmul` of a "two-stage" profile (AMD CDNA3) on ``_kernel_jit.two_stage_kernel``,
    from the operands decoded as the numpy engine decodes them (``vectorized._decode``:
    integer significands, leading exponents, signs), permuted by ``k_order``. Rows of A or
    columns of B with NaN / Inf, and rows of A with a product that may reach
    ``product_overflow``'s threshold (``max|a| * max|b| >= 2^(emax + 1)``), are computed by
    the numpy engine."""
    from ._kernel_jit import two_stage_kernel
    from .vectorized import _decode, _overflow_threshold

    fa, fb = _operand_formats(profile)
    A_in, B_in = A, B
    k = profile.k
    A, B = _in_k_order(A, B, profile)
    DA, DB = _decode(A, fa, profile.flush_inputs), _decode(B, fb, profile.flush_inputs)
    finA, finB = np.isfinite(A), np.isfinite(B)
    bad_rows = ~finA.all(axis=1)
    bad_cols = np.flatnonzero(~finB.all(axis=0))
    limit = _overflow_threshold(profile)
    if limit is not None and A.size and B.size:
        big_b = np.abs(np.where(finB, B, 0.0)).max()
        bad_rows |= np.abs(np.where(finA, A, 0.0)).max(axis=1) * big_b >= limit
    fout, fstep, step_args, has_out, out_args = _roundings(profile)
    tiny = _c_tiny(profile)

    def c_args(f):  # (p, emin, tiny) of c read in format f
        return f.p, f.emin, tiny(f)

    D = np.empty(C.shape)
    with _threads(threads):
        _call(two_stage_kernel,
            DA.S, DA.e.astype(np.int32), DA.neg, DB.S, DB.e.astype(np.int32), DB.neg,
            np.ascontiguousarray(C, dtype=np.float64), D, k, profile.block_size,
            profile.product_groups, profile.frac_bits, profile.frac_bits2,
            _ALIGN[profile.alignment], _ALIGN[profile.alignment2], fa.p - 1 + fb.p - 1,
            _NONE if profile.e_zero is None else profile.e_zero, profile.c_drop_bits or 0,
            c_args(fout), c_args(fstep), fstep.emin, step_args, not profile.neg_zero_to_pos,
            has_out, out_args, max(1, rows), max(1, cols))
    return _recompute(D, A_in, B_in, C, profile, np.flatnonzero(bad_rows), bad_cols)


def _grouped(A, B, C, profile: Profile, rows: int, cols: int, threads: int | None, scales):
    """:func:`matmul` of a "grouped" profile (MXFP4 / NVFP4 with k = 64) on
    ``_kernel_jit.grouped_kernel``, from the operands and block scales decoded as the numpy
    engine decodes them (``vectorized._decode``; under ``input_zero_sign`` "positive" a zero
    operand counts as positive). Rows of A or columns of B with NaN / Inf operands or NaN
    scales are computed by the numpy engine."""
    from ._kernel_jit import grouped_kernel
    from .vectorized import _decode, _positive_zeros

    fa, fb = _operand_formats(profile)
    fs = resolve_format(profile.scale_format)
    SA, SB = scales
    DA, DB = _decode(A, fa, profile.flush_inputs), _decode(B, fb, profile.flush_inputs)
    QA, QB = _decode(SA, fs, False), _decode(SB, fs, False)
    positive = profile.input_zero_sign == "positive"
    NA, NB = (_positive_zeros(DA), _positive_zeros(DB)) if positive else (DA.neg, DB.neg)
    bad_rows = np.flatnonzero(~(np.isfinite(A).all(axis=1) & np.isfinite(SA).all(axis=1)))
    bad_cols = np.flatnonzero(~(np.isfinite(B).all(axis=0) & np.isfinite(SB).all(axis=0)))
    fout, fstep, step_args, has_out, out_args = _roundings(profile)
    tiny = _c_tiny(profile)
    D = np.empty(C.shape)
    with _threads(threads):
        _call(grouped_kernel,
            DA.S, DA.e.astype(np.int32), NA, DB.S, DB.e.astype(np.int32), NB,
            QA.S, QA.e.astype(np.int32), QB.S, QB.e.astype(np.int32),
            np.ascontiguousarray(C, dtype=np.float64), D, profile.k, profile.block_size,
            profile.group_size, profile.scale_block_size, profile.frac_bits,
            _ALIGN[profile.alignment], _NONE if profile.e_zero is None else profile.e_zero,
            fa.emin + fb.emin, fa.emin + fb.emin - (fa.p - 1) - (fb.p - 1) - 2 * (fs.p - 1),
            (fout.p, fout.emin, tiny(fout), positive), (fstep.p, fstep.emin, tiny(fstep), False),
            step_args, not profile.neg_zero_to_pos, has_out, out_args, max(1, rows),
            max(1, cols))
    return _recompute(D, A, B, C, profile, bad_rows, bad_cols, scales)


def _lossless(A, B, C, profile: Profile, rows: int, cols: int, threads: int | None):
    """:func:`matmul` of a lossless fused profile (``Profile.lossless``: AMD CDNA1) whose
    window the int32 kernel does not hold, on ``_kernel_jit.lossless_kernel``: operands with
    flushed values zero and their sign bits (False for zeros under input_zero_sign
    "positive"), permuted by ``k_order``. Rows of A or columns of B with NaN / Inf are computed
    by the numpy engine."""
    from ._kernel_jit import lossless_kernel
    from .vectorized import _decode, _positive_zeros

    fa, fb = _operand_formats(profile)
    A_in, B_in = A, B
    k = profile.k
    A, B = _in_k_order(A, B, profile)
    positive = profile.input_zero_sign == "positive"
    ops = []
    for X, f in ((A, fa), (B, fb)):
        dec = _decode(X, f, profile.flush_inputs)
        V = np.where(dec.S == 0, 0.0, np.where(np.isfinite(X), X, 0.0))
        ops += [V, _positive_zeros(dec) if positive else dec.neg]
    bad_rows = np.flatnonzero(~np.isfinite(A).all(axis=1))
    bad_cols = np.flatnonzero(~np.isfinite(B).all(axis=0))
    fout, fstep, step_args, has_out, out_args = _roundings(profile)
    tiny = _c_tiny(profile)
    D = np.empty(C.shape)
    with _threads(threads):
        _call(lossless_kernel, *ops, np.ascontiguousarray(C, dtype=np.float64), D, k,
                        profile.block_size, (tiny(fout), positive), (tiny(fstep), False),
                        step_args, not profile.neg_zero_to_pos,
                        profile.negative_zero_sums, has_out,
                        out_args, max(1, rows), max(1, cols))
    return _recompute(D, A_in, B_in, C, profile, bad_rows, bad_cols)


@contextlib.contextmanager
def _threads(n: int | None):
    """``with _threads(n):`` runs numba code on n threads (None: as set), then restores them."""
    if n is None:
        yield
        return
    import numba

    old = numba.get_num_threads()
    numba.set_num_threads(max(1, min(n, numba.config.NUMBA_NUM_THREADS)))
    try:
        yield
    finally:
        numba.set_num_threads(old)


#: The default tile of one parallel task: rows of A by columns of B.
TILE_ROWS, TILE_COLS = 64, 1024


def matmul(A: np.ndarray, B: np.ndarray, C: np.ndarray, profile: Profile,
           rows: int = TILE_ROWS, cols: int = TILE_COLS,
           threads: int | None = None, scales=None) -> np.ndarray:
    """``D = A @ B + C`` as a chain of ``profile`` instructions, bitwise equal to
    :func:`fpscope.emulate.vectorized.matmul`.

    Args:
        A: (M, K) float64, values of the input format (tf32: already reduced), K a positive
            multiple of ``profile.k``; validated by the caller (``fpscope.emulate.matmul``).
        B: (K, N) float64, likewise (values of ``profile.b_format`` where set).
        C: (M, N) float64 values of ``profile.out_format``.
        profile: a profile for which :func:`unsupported` is None.
        rows, cols: tile shape (rows of A, columns of B) of one parallel task.
        threads: numba threads (None: numba's default, the number of cores).
        scales: a block-scaled profile's (SA (M, K / s), SB (K / s, N)) float64 scales from
            ``vectorized.prepare`` (s = ``profile.scale_block_size``); None otherwise. They
            are folded into the operands (:func:`_scaled_codes`).

    Returns:
        float64 array (M, N).

    Raises:
        ValueError: the profile is unsupported, or scales are missing or given wrongly.
    """
    from ._kernel_jit import gemm_kernel

    why = unsupported(profile)
    if why:
        raise ValueError(f"{profile.name}: the numba kernel cannot run this profile: {why}")
    if (scales is None) != (profile.scale_format is None):
        raise ValueError(f"{profile.name}: block scales must be given exactly when the profile "
                         f"has them (scale_format {profile.scale_format})")
    loop = _loop(profile)
    if loop == "pairwise":
        return _pairwise(A, B, C, profile, rows, cols, threads)
    if loop == "two-stage":
        return _two_stage(A, B, C, profile, rows, cols, threads)
    if loop == "grouped":
        return _grouped(A, B, C, profile, rows, cols, threads, scales)
    if loop == "lossless":
        return _lossless(A, B, C, profile, rows, cols, threads)
    fa, fb = _operand_formats(profile)
    A_in, B_in = A, B
    if scales is None:
        coding = _exponent_coding(fa, fb)
    else:  # folded exponents reach the scale format's range (e8m0: int16)
        fs = resolve_format(profile.scale_format)
        coding = _exponent_coding(fa, fb, scale=fs)
        SA, SB = scales
        sblock = profile.scale_block_size
    K = A.shape[1]
    k = profile.k
    perm = _k_permutation(profile, K)  # the products in the order the blocks take them
    if perm is not None:
        A, B = A[:, perm], B[perm, :]
        if scales is not None:  # a scale per element, permuted with it
            SA = np.repeat(SA, sblock, axis=1)[:, perm]
            SB = np.repeat(SB, sblock, axis=0)[perm, :]
            sblock = 1
    fout, fstep, step_args, has_out, out_args = _roundings(profile)
    align = _ALIGN[profile.alignment]
    ez = _NONE if profile.e_zero is None else profile.e_zero
    with _threads(threads):
        if scales is None:
            vt = _value_dtype(profile, A, B)
            AV, EA, bad_rows = _codes(A, fa, profile.flush_inputs, coding, vt, True)
            BV, EB, bad_cols = _codes(B, fb, profile.flush_inputs, coding, vt, False)
        else:
            vt = _value_dtype(profile, A, B, (SA, SB, sblock))
            flush = profile.flush_inputs
            AV, EA, bad_rows = _scaled_codes(A, SA, sblock, fa, fs, flush, coding, vt, True)
            BV, EB, bad_cols = _scaled_codes(B, SB, sblock, fb, fs, flush, coding, vt, False)
        C = np.ascontiguousarray(C, dtype=np.float64)
        # float32 running values where they convert exactly; a NaN in C keeps float64, which
        # carries its payload bits unchanged
        rt = np.float32 if _run32(profile, vt) and not np.isnan(C).any() else np.float64
        D = np.empty(C.shape)  # the kernel's first k-chunk reads C
        _call(gemm_kernel, AV, EA, BV, EB, C, D, np.empty(0, rt),
                    k, profile.block_size, profile.frac_bits, align, ez,
                    profile.c_entry == "last", fout.emin, fstep.emin, step_args, has_out,
                    out_args,
                    profile.flush_inputs, 126 if vt == np.float32 else 1000,
                    _int32_terms(profile), (0,) * (_first_products(profile, rt) // 4),
                    _rounds_in_pass(profile, rt),
                    *_exact_weights(profile, fstep), coding[2],
                    not profile.e_zero_inert,
                    max(1, rows), max(1, cols))
    return _recompute(D, A_in, B_in, C, profile, bad_rows, bad_cols, scales)


def _recompute(D, A, B, C, profile: Profile, bad_rows, bad_cols, scales=None) -> np.ndarray:
    """D with the rows ``bad_rows`` and columns ``bad_cols`` computed again by the numpy
    engine (``vectorized.gemm_prepared``) from the caller's operands A, B, C (and block
    scales): the outputs the kernel leaves to it (NaN / Inf operands, overflowing products)."""
    if len(bad_rows) or len(bad_cols):
        from .vectorized import gemm_prepared

        sa, sb = (None, None) if scales is None else scales
        if len(bad_rows):
            D[bad_rows] = gemm_prepared(A[bad_rows], B, C[bad_rows], profile,
                                        scales=None if sa is None else (sa[bad_rows], sb))
        if len(bad_cols):
            D[:, bad_cols] = gemm_prepared(A, B[:, bad_cols], C[:, bad_cols], profile,
                                           scales=None if sa is None else (sa, sb[:, bad_cols]))
    return D
