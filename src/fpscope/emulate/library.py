"""Library level: a whole GEMM as a library kernel runs it, around the instruction chain.

An engine computes one *chain*: K walked in k-chunks, each instruction's d the next one's c
(:func:`fpscope.emulate.matmul`). A library kernel adds structure around chains
(NUMERICS.md section 2, "library level"; experimental: no recorded evidence yet):

* ``promotion_interval`` P: the chain restarts from +0 every P products and its result is added
  to a register accumulator (FP8 GEMMs without fast accumulation: P = 128);
* ``split_k`` S: K is cut into S equal contiguous slices computed independently from +0; their
  results (rounded to ``split_k_format`` where given) are added up serially or pairwise, then
  C is added;
* the epilogue: ``alpha * acc`` rounded to fp32, then to the output type (through fp32 for
  fp16/bf16 outputs, a double rounding as cuBLAS does).

Every addition outside the chains is one IEEE addition in the profile's output format, rounded
to nearest-even: the exact sum rounded to odd in float64, then rounded once
(:func:`fpscope.formats.sum_round_to_odd`).
"""

from __future__ import annotations

import numpy as np

from ..formats import (
    FP32,
    get_format,
    is_representable,
    round_to_format,
    sum_round_to_odd,
)
from ..profile import Profile, resolve_format

__all__ = ["epilogue", "has_library_level", "instruction_level", "library_gemm"]

_PLAIN = {"split_k": 1, "split_k_order": "serial", "split_k_format": None,
          "promotion_interval": None}


def instruction_level(profile: Profile) -> Profile:
    """The profile without its library-level fields (one instruction chain)."""
    return profile.replace(**_PLAIN)


def has_library_level(profile: Profile) -> bool:
    """True when the profile uses split-K or a promotion interval."""
    return any(getattr(profile, f) != v for f, v in _PLAIN.items())


def _add(x: np.ndarray, y: np.ndarray, fmt) -> np.ndarray:
    """x + y, one IEEE addition in ``fmt`` rounded to nearest-even (overflow to Inf)."""
    return round_to_format(sum_round_to_odd(x, y), fmt, "RNE", overflow="inf")


def library_gemm(A: np.ndarray, B: np.ndarray, C: np.ndarray, profile: Profile, chain,
                 scales=None):
    """``D = A @ B + C`` with the profile's split-K and promotion interval.

    Args:
        A: (M, K), B: (K, N), C: (M, N) float64 operands already validated (``prepare``).
        profile: the profile; its instruction fields drive ``chain``.
        chain: ``chain(A, B, C, inner_profile, scales) -> D``: one instruction chain on an
            engine.
        scales: None, or a block-scaled profile's (SA (M, K / s), SB (K / s, N)) from
            ``prepare``; every slice of K is whole instructions, so whole scale blocks.

    Returns:
        float64 (M, N).

    Raises:
        ValueError: K is not a multiple of ``split_k * k``.
    """
    inner = instruction_level(profile)
    K = A.shape[1]
    S, k = profile.split_k, profile.k
    if K % (S * k):
        raise ValueError(f"K = {K} cannot be split into {S} slices of whole {k}-product "
                         f"instructions (split_k = {S})")
    fout = resolve_format(profile.out_format)
    width = K // S
    step = profile.promotion_interval or width

    def run(lo: int, hi: int, init: np.ndarray) -> np.ndarray:
        """The chain over K's columns lo .. hi - 1 (and their block scales)."""
        part = None
        if scales is not None:
            sb = profile.scale_block_size
            part = (scales[0][:, lo // sb:hi // sb], scales[1][lo // sb:hi // sb])
        return chain(A[:, lo:hi], B[lo:hi], init, inner, part)

    def one_slice(lo: int, init: np.ndarray) -> np.ndarray:
        if profile.promotion_interval is None:
            return run(lo, lo + width, init)
        reg = init
        zeros = np.zeros_like(init)
        for s in range(lo, lo + width, step):
            e = min(s + step, lo + width)
            reg = _add(reg, run(s, e, zeros), fout)
        return reg

    if S == 1:
        return one_slice(0, C)
    zeros = np.zeros_like(C)
    parts = [one_slice(s * width, zeros) for s in range(S)]
    if profile.split_k_format is not None:  # partial sums stored in a narrower format (C8)
        pf = resolve_format(profile.split_k_format)
        parts = [round_to_format(p, pf, "RNE", overflow="inf") for p in parts]
    if profile.split_k_order == "serial":
        total = parts[0]
        for p in parts[1:]:
            total = _add(total, p, fout)
    else:  # pairwise: neighbours, level by level
        while len(parts) > 1:
            nxt = [_add(parts[i], parts[i + 1], fout) for i in range(0, len(parts) - 1, 2)]
            if len(parts) % 2:
                nxt.append(parts[-1])
            parts = nxt
        total = parts[0]
    return _add(total, C, fout)


def epilogue(D: np.ndarray, alpha: float = 1.0, out_format: str | None = None) -> np.ndarray:
    """``alpha * D`` rounded to fp32 (nearest-even), then to ``out_format`` (through fp32, a
    double rounding for fp16 / bf16 outputs, as cuBLAS's epilogue does; NUMERICS.md).

    Args:
        D: float64 array of fp32 (or narrower) values.
        alpha: an fp32 value (then ``alpha * D`` is exact in float64).
        out_format: "fp32", "fp16", "bf16" or None (fp32).

    Raises:
        ValueError: alpha not an fp32 value; an unknown output format.
    """
    if not bool(is_representable(np.float64(alpha), FP32)):
        raise ValueError(f"alpha = {alpha!r} is not an fp32 value")
    fmt = get_format(out_format) if out_format else FP32
    if fmt.name not in ("fp32", "fp16", "bf16"):
        raise ValueError(f"out_format must be fp32, fp16 or bf16, not {out_format!r}")
    with np.errstate(over="ignore", invalid="ignore"):
        t = round_to_format(np.asarray(D, dtype=np.float64) * alpha, FP32, "RNE",
                            overflow="inf")
    return t if fmt is FP32 or fmt.name == "fp32" else round_to_format(t, fmt, "RNE",
                                                                       overflow="inf")
