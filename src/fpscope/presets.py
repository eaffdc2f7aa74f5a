"""The preset profiles (:data:`PRESETS`, also ``fpscope.profile.PRESETS``): NVIDIA tensor-core
instructions from NUMERICS.md section 2 (validated bit for bit against the recorded hardware
vectors where ``_EVIDENCE`` names a set), and experimental presets from MMA-Sim's instruction
models (AMD CDNA, mixed input formats, block-scaled MX / NVFP4) and the Khattak-Mikaitis B200
model. Every entry is a :class:`fpscope.profile.Profile`; ``status`` and ``evidence`` say how
far each is confirmed.
"""

from __future__ import annotations

from .profile import Profile, lossless_frac_bits

def _p(name, arch, in_format, L, k, F, e_zero, out="fp32", step=("fp32", "RZ"), **kw):
    if out == "fp16":
        kw.setdefault("nan_bits", 0x7FFF)
    if in_format == "tf32":
        kw.setdefault("operand_conversion", "truncate")
    return Profile(name=name, arch=arch, in_format=in_format, out_format=out, block_size=L, k=k,
                   frac_bits=F, e_zero=e_zero, step_rounding=step, **kw)


_FP16 = ("fp16", "RNE")
_E8M13 = ("e8m13", "RZ")
#: H100 fp8 mma.sync m16n8k32 with an f16 accumulator: the products k = 0, 1 mod 4 form the first
#: fp16 HMMA k16 step, k = 2, 3 mod 4 the second (each thread's fp8x4 register is unpacked into
#: two fp16x2 halves), then c is added (c_entry "last"). This reading of the hardware is an
#: interpretation; the evidence is that it reproduces the recorded H100 E4M3 and E5M2 fp16
#: outputs 5000/5000 (the recording code used mma.sync, not wgmma, for the fp16 output).
_H100_FP8_F16_ORDER = tuple(j for r in ((0, 1), (2, 3)) for j in range(32) if j % 4 in r)

#: Profiles from the NUMERICS.md section 2 table. ``k`` is the number of products of the
#: instruction form the presets model (the recorded hardware vectors use the same k).
PRESETS: dict[str, Profile] = {p.name: p for p in (
    _p("volta-fp16", "volta", "fp16", 4, 4, 23, -131),
    _p("volta-fp16-fp16out", "volta", "fp16", 4, 4, 23, -19, out="fp16", step=_FP16),
    _p("turing-fp16", "turing", "fp16", 8, 8, 24, -132),
    _p("turing-fp16-fp16out", "turing", "fp16", 8, 8, 24, -20, out="fp16", step=_FP16),
    _p("ampere-fp16", "ampere", "fp16", 8, 16, 24, -132),
    _p("ampere-fp16-fp16out", "ampere", "fp16", 8, 16, 24, -20, out="fp16", step=_FP16),
    _p("ampere-bf16", "ampere", "bf16", 8, 16, 24, -132),
    _p("ampere-tf32", "ampere", "tf32", 4, 8, 24, -132),
    _p("ada-fp16", "ada", "fp16", 8, 16, 24, -132),
    _p("ada-fp16-fp16out", "ada", "fp16", 8, 16, 24, -20, out="fp16", step=_FP16),
    _p("ada-bf16", "ada", "bf16", 8, 16, 24, -132),
    _p("ada-tf32", "ada", "tf32", 4, 8, 24, -132),
    _p("ada-e4m3", "ada", "fp8_e4m3fn", 16, 32, 13, -132, step=_E8M13),
    _p("ada-e4m3-fp16out", "ada", "fp8_e4m3fn", 16, 32, 13, -132, out="fp16", step=_FP16),
    _p("ada-e5m2", "ada", "fp8_e5m2", 16, 32, 13, -132, step=_E8M13),
    _p("ada-e5m2-fp16out", "ada", "fp8_e5m2", 16, 32, 13, -132, out="fp16", step=_FP16),
    _p("hopper-fp16", "hopper", "fp16", 16, 16, 25, -133),
    _p("hopper-fp16-fp16out", "hopper", "fp16", 16, 16, 25, -21, out="fp16", step=_FP16),
    _p("hopper-bf16", "hopper", "bf16", 16, 16, 25, -133),
    _p("hopper-tf32", "hopper", "tf32", 8, 8, 25, -133),
    _p("hopper-e4m3", "hopper", "fp8_e4m3fn", 32, 32, 13, -133, step=_E8M13),
    _p("hopper-e4m3-fp16out", "hopper", "fp8_e4m3fn", 16, 32, 25, -21, out="fp16",
       step=_FP16, k_order=_H100_FP8_F16_ORDER, c_entry="last"),
    _p("hopper-e5m2", "hopper", "fp8_e5m2", 32, 32, 13, -133, step=_E8M13),
    _p("hopper-e5m2-fp16out", "hopper", "fp8_e5m2", 16, 32, 25, -21, out="fp16",
       step=_FP16, k_order=_H100_FP8_F16_ORDER, c_entry="last"),
)}

# -- presets from MMA-Sim's instruction models (experimental: no recorded hardware evidence) --
#
# Naming: ``<arch>[-<instruction>]-<input>[-fp16out]``; no instruction = ``mma.sync``.
# Parameters read from mmasim 2.1.1 (pip package of MMA-Sim, Xie et al., arXiv 2511.10909):
# nv_ptx/sim.py builds every NVIDIA model as ``arithmetic/fdpa.py: MMA_T_FDPA(F, rho, L_max,
# e_zero)``: blocks of ``L = min(k, L_max)`` products, the rounded result of a block is the c of
# the next (``MMA_T_FDPA.dpa``); ``t_fdpa`` cuts every term toward zero at ``2^(e_max - F)``
# (``truncated_fused_sum``: ``trunc(s * 2^(e - e_max + F))``, s of a product in [1, 4) with
# exponent e_a + e_b, so mmasim's F is fpscope's ``frac_bits``), gives zero terms ``e_zero``,
# rounds with rho (``ldexp_and_normalize``: RZ to fp32 or e8m13 at the fp32 subnormal
# exponent -126, or RNE to fp16) and returns ``+ 0.0`` (-0 -> +0); NaN is 0x7FFF / 0x7FFFFFFF.
# tf32 operands are truncated (``helper.truncate_fp32_to_tf32``).
#
# * Hopper ``wgmma`` (``sim.WGMMA``): L_max = 32 bytes / operand size (tf32 8, fp16/bf16 16,
#   fp8 32); fp8 F = 13 with rho RZ-E8M13 (fp32 out) or RNE-FP16; otherwise F = 25; e_zero
#   -133 (fp32 out) or -21 (fp16 out).
# * Blackwell ``mma.sync`` (``sim.MMA``, arch "Blackwell", the sm_80 / sm_75 shapes) and RTX
#   Blackwell ``mma.sync`` (arch "RTX Blackwell", plus the sm_89 fp8 and sm_120 kind::f8f6f4
#   shapes): ``_mma_F_bits`` 25, ``_mma_L_max_bytes`` 32 (L = 32 / operand size), e_zero
#   ``_mma_e_zero_for_fp32`` -133 / ``_mma_e_zero_for_fp16`` -21; rho RZ-FP32 or RNE-FP16
#   (the Ada-only F = 13 / RZ-E8M13 fp8 rule does not apply).
# * Blackwell ``tcgen05.mma`` (``sim.TCGen05MMA``): F = 25, L_max = 32 bytes / operand size
#   (fp8, fp6 and fp4 operands one per byte: 32), e_zero -133 / -21, rho RZ-FP32 / RNE-FP16.
#   fp6/fp4 subnormals keep the format's emin (``helper.fp6_fp4_subnormal_exponent``).
#
# mmasim's fp16-output e_zero values (Volta -19, Turing / Ampere / Ada -20, Hopper -21) are
# the validated fp16-output presets' too since 2026-12-01 (before: one lower, hand-chosen; the
# recordings match both; tests/test_mmasim_oracle.py).
#
# Agreement (scripts/mmasim_validation.py, seed 0): every preset below agrees with mmasim 2.1.1
# bit for bit on 10^6 cases (records/mmasim-validation.txt, 2026-12-01). Earlier exceptions
# (tests/test_mmasim_oracle.py): cdna1-bf16 (-0 sums; agrees since zero_sum_sign "positive"),
# and every tf32 preset at about 3.5 cases per 10^5 (an fp32 NaN whose payload lies in the 13
# dropped bits: mmasim clears the bits and gets Inf) until float32 operands were read as words
# the same way. e_zero is confirmed by the script's e_zero probes where it can change an output
# (bf16, tf32 inputs; fp16 inputs with fp16 output) and cannot be observed elsewhere; F, L,
# rounding, flushes, operand conversion by the script's --sensitivity run (each one-parameter
# change alters outputs).
#
# mmasim 2.1.1 models left out (the Profile cannot express them; no feature was added):
# * mma.sync shapes with fewer products than the presets' (m16n8k8 bf16, m16n8k4 tf32, m16n8k16
#   fp8, m8n8k4 on Turing): the same arithmetic with L = k; ``m8n8k4.f32.f16.f16.f16`` (fp16 c,
#   fp32 d): c and d formats differ;
# * FP64 mma and AMD FP32/FP64 MFMA (``fma.MMA_FMA``): chains of IEEE FMAs, exact rounding of
#   a*b + c needs the whole exponent range of fp64 (not a fused block).
# AMD CDNA2 and CDNA3 are below (the "pairwise" and "two-stage" nodes), and so are the
# block-scaled MX / NVFP4 instructions (``scale_format``, the "grouped" node).
_NV_FP8 = (("e4m3", "fp8_e4m3fn"), ("e5m2", "fp8_e5m2"))
_NV_F8F6F4 = _NV_FP8 + (("e3m2", "fp6_e3m2"), ("e2m3", "fp6_e2m3"), ("e2m1", "fp4_e2m1"))


def _mmasim_f25(arch: str, prefix: str, narrow) -> list[Profile]:
    """The F = 25 presets of one mmasim NVIDIA model family (Blackwell, RTX Blackwell)."""
    out = [
        _p(f"{prefix}-tf32", arch, "tf32", 8, 8, 25, -133),
        _p(f"{prefix}-fp16", arch, "fp16", 16, 16, 25, -133),
        _p(f"{prefix}-fp16-fp16out", arch, "fp16", 16, 16, 25, -21, out="fp16", step=_FP16),
        _p(f"{prefix}-bf16", arch, "bf16", 16, 16, 25, -133),
    ]
    for short, fmt in narrow:
        out.append(_p(f"{prefix}-{short}", arch, fmt, 32, 32, 25, -133))
        out.append(_p(f"{prefix}-{short}-fp16out", arch, fmt, 32, 32, 25, -21, out="fp16",
                      step=_FP16))
    return out


_MMASIM_PRESETS = [
    # Hopper wgmma (sim.WGMMA)
    _p("hopper-wgmma-tf32", "hopper", "tf32", 8, 8, 25, -133),
    _p("hopper-wgmma-fp16", "hopper", "fp16", 16, 16, 25, -133),
    _p("hopper-wgmma-fp16-fp16out", "hopper", "fp16", 16, 16, 25, -21, out="fp16", step=_FP16),
    _p("hopper-wgmma-bf16", "hopper", "bf16", 16, 16, 25, -133),
    *(p for short, fmt in _NV_FP8 for p in (
        _p(f"hopper-wgmma-{short}", "hopper", fmt, 32, 32, 13, -133, step=_E8M13),
        _p(f"hopper-wgmma-{short}-fp16out", "hopper", fmt, 32, 32, 13, -21, out="fp16",
           step=_FP16))),
    # Blackwell (sm_100) mma.sync: tf32, fp16, bf16 only (sim.MMA, blackwell_mma_shape_and_type)
    *_mmasim_f25("blackwell", "blackwell", ()),
    # Blackwell tcgen05.mma kind::tf32, kind::f16, kind::f8f6f4 (sim.TCGen05MMA)
    *_mmasim_f25("blackwell", "blackwell-tcgen05", _NV_F8F6F4),
    # RTX Blackwell (sm_120) mma.sync: sm_80 shapes, sm_89 fp8, sm_120 kind::f8f6f4 (sim.MMA)
    *_mmasim_f25("rtx-blackwell", "rtx-blackwell", _NV_F8F6F4),
]

# AMD CDNA1 (MI100) v_mfma f32 <- fp16 / bf16: mmasim amd/sim.py ``MFMA`` builds
# ``arithmetic/fdpa.py: MMA_E_FDPA(L_max)`` with L_max 4 (fp16) or 2 (bf16): each block of L
# products plus c is summed exactly and rounded once to fp32 nearest-even (``e_fdpa``: exact
# float64 products, ``exact_sum`` + ``normalize_parts_to_fp32``), blocks chained as on NVIDIA;
# no flushes; an exact zero sum is +0 (zero_sum_sign "positive": the parts of ``exact_sum``
# hold no signed zero), a negative sum that rounds to zero -0 (neg_zero_to_pos False). No
# recording decides either for the hardware. Expressed as a lossless window (frac_bits
# = :func:`lossless_frac_bits`: no term is ever cut), e_zero None. NaN: mmasim returns whatever
# NaN the float64 sum makes; 0x7FC00000 (the IEEE default quiet NaN) is fpscope's choice,
# unverified. k: the longest instruction of each type (v_mfma_f32_16x16x16f16,
# v_mfma_f32_16x16x8bf16).
_RNE32 = ("fp32", "RNE")
_MMASIM_PRESETS += [
    _p("cdna1-fp16", "cdna1", "fp16", 4, 16, lossless_frac_bits("fp16", "fp32"), None,
       step=_RNE32, nan_bits=0x7FC00000, neg_zero_to_pos=False, zero_sum_sign="positive"),
    _p("cdna1-bf16", "cdna1", "bf16", 2, 8, lossless_frac_bits("bf16", "fp32"), None,
       step=_RNE32, nan_bits=0x7FC00000, neg_zero_to_pos=False, zero_sum_sign="positive"),
]

# AMD CDNA2 (MI200) v_mfma f32 <- fp16 / bf16: mmasim amd/sim.py ``MFMA`` builds
# ``arithmetic/ftz_mul_add.py: MMA_FTZ_MUL_ADD(P)``, P = 2 for the bf16 instructions without
# the _1k suffix and 4 otherwise (fp16, bf16_1k). Per group of P products: ``ftz_mul`` (inputs
# whose magnitude is below the format's smallest normal, zeros included, become +0; the fp32
# product, RNE, flushed to a zero of its sign below 2^-126), ``ftz_add`` (fp32 RNE addition,
# flushed the same way) of p0 + p1 (and p2 + p3, then the two sums), then c = ftz_add(c, sum);
# c is flushed to +0 first. The "pairwise" node with L = P, step RNE to fp32, flush_inputs and
# flush_outputs, input_zero_sign "positive" (NUMERICS.md section 2's "pairwise fp32 RNE adds in
# groups, flush-to-zero in and out"); mmasim keeps a -0 that a flushed negative sum makes
# (neg_zero_to_pos False). NaN: mmasim returns torch's NaN; 0x7FC00000 is fpscope's choice,
# unverified. k: v_mfma_f32_16x16x16f16, v_mfma_f32_16x16x8bf16, v_mfma_f32_16x16x16bf16_1k.
#
# AMD CDNA3 (MI300) v_mfma f32 <- fp16 / bf16 / xf32 / fp8 / bf8: ``arithmetic/fdpa.py``
# ``MMA_TR_FDPA(F=24, F2=31, rho="RNE-FP32", L_max)`` (L_max 8 for fp16 / bf16, 4 for xf32;
# xf32 operands are fp32 values with the 13 low bits cleared, ``truncate_fp32_to_tf32``) and
# ``MMA_GTR_FDPA(F=24, F2=31, rho="RNE-FP32", L_max=16)`` for fp8 (e4m3fnuz) / bf8 (e5m2fnuz),
# mixed pairs included. The "two-stage" node (Profile docstring): products truncated at F = 24
# below their own maximum (zero products left out, mmasim's -999), fp8 in even / odd groups
# summed apart (product_groups 2) and the two sums floored at 2^(e_dot - 24); then the sum
# floored at 2^(e2 - 32), c floored at 2^(e2 - 24) (fp8: c dropped below 2^(e2 - 25),
# c_drop_bits 25), the result floored to 31 fraction bits and rounded to fp32 nearest-even.
# A product of magnitude 2^128 or more is +-Inf (``tr_fdpa``'s overflow rule; product_overflow
# "fp32"; ``gtr_fdpa`` has none, fp8 products cannot reach it). Where NUMERICS.md section 2 says
# "c and sums rounded toward -inf at 31 bits", mmasim floors the dot at 32 bits (F2 + 1) below
# 2^e2, c at 24 (F) and the normalised sum at 31 (F2): mmasim decides. "No e_zero": a zero c
# takes exponent -126 in mmasim (``frexp_and_normalize`` gives zeros the subnormal exponent), so
# e_zero = -126 here; it cannot change an output (a zero c matters only when every product lies
# below 2^-126, where stage 3's cut at 2^(max(E, -126) - 31) is coarser than stage 2's at
# 2^(-126 - 32) and nested floors at nested grids are one floor). mmasim keeps the -0 that
# rounding a tiny negative sum to fp32 makes (neg_zero_to_pos False); NaN 0x7FFFFFFF.
# k: v_mfma_f32_16x16x16_f16 / _bf16, v_mfma_f32_16x16x8_xf32, v_mfma_f32_16x16x32_fp8_fp8 (and
# _bf8_bf8, _fp8_bf8, _bf8_fp8).
#
# Agreement (scripts/mmasim_validation.py --cases 100000 --sensitivity, seed 0;
# records/mmasim-validation-cdna.txt): 9 of the 10 agree with mmasim 2.1.1 bit for bit on
# 101,120 cases each. cdna3-bf8 differs on 650: mmasim drops an Inf or NaN c (the first block's
# NaN result included) once the products reach 2^25, since its frexp gives Inf / NaN exponent -1
# and ``gtr_fdpa`` zeroes a c below 2^(e2 - 25); fpscope returns the Inf / NaN, as mmasim's
# ``tr_fdpa`` and every other preset do (tests/test_mmasim_oracle.py pins the 10^4 count).
# cdna3-xf32 reads fp32 NaN words as the tf32 presets do (records/mmasim-validation.txt).
# Hand-made cases
# (mmasim_validation.node_cases) confirm F2, the stage-2 floor, c_drop_bits, product_groups,
# product_overflow, the flushes, input_zero_sign and -0 results against mmasim.
_CDNA2 = {"node": "pairwise", "step": _RNE32, "flush_inputs": True, "flush_outputs": True,
          "input_zero_sign": "positive", "neg_zero_to_pos": False, "nan_bits": 0x7FC00000}
_CDNA3 = {"node": "two-stage", "frac_bits2": 31, "alignment2": "floor", "step": _RNE32,
          "neg_zero_to_pos": False}
_CDNA3_FP8 = {**_CDNA3, "product_groups": 2, "c_drop_bits": 25}
_MMASIM_PRESETS += [
    _p("cdna2-fp16", "cdna2", "fp16", 4, 16, 0, None, **_CDNA2),
    _p("cdna2-bf16", "cdna2", "bf16", 2, 8, 0, None, **_CDNA2),
    _p("cdna2-bf16-1k", "cdna2", "bf16", 4, 16, 0, None, **_CDNA2),
    _p("cdna3-fp16", "cdna3", "fp16", 8, 16, 24, -126, product_overflow="fp32", **_CDNA3),
    _p("cdna3-bf16", "cdna3", "bf16", 8, 16, 24, -126, product_overflow="fp32", **_CDNA3),
    _p("cdna3-xf32", "cdna3", "tf32", 4, 8, 24, -126, product_overflow="fp32", **_CDNA3),
    _p("cdna3-fp8", "cdna3", "fp8_e4m3fnuz", 16, 32, 24, -126, **_CDNA3_FP8),
    _p("cdna3-bf8", "cdna3", "fp8_e5m2fnuz", 16, 32, 24, -126, **_CDNA3_FP8),
]
PRESETS.update((p.name, p) for p in _MMASIM_PRESETS)

# -- mixed a/b input formats (``b_format``; experimental, from mmasim's models) ---------------
#
# Naming: ``<arch>[-<instruction>]-<a>-<b>[-fp16out]`` (a = in_format, b = b_format). mmasim
# 2.1.1 builds a mixed-type instruction exactly as the same-type one: ``MMA_T_FDPA(F, rho,
# L_max, e_zero, a_type_ptx, b_type_ptx)`` with F, rho, e_zero chosen by the instruction, the
# arch and the output type, ``L_max = 32 bytes // a_type.itemsize`` (fp8 and, held one per byte,
# fp6 / fp4: 32), and the Ada / Hopper-wgmma fp8 rule (F = 13, RZ-E8M13 or RNE-FP16) keyed on
# a's type being fp8 (``nv_ptx/sim.py``); ``t_fdpa`` decodes a and b each with its own type
# (``frexp_and_normalize``, fp6 / fp4 with their own subnormal exponent) and multiplies
# ``s_a * s_b`` at ``e_a + e_b``. So each preset below is the same-type preset of its a type
# (same instruction, same output) with b's format changed: Ada ``mma.sync m16n8k32`` (sm_89)
# e4m3 x e5m2 both ways, Hopper ``wgmma m64nNk32`` e4m3 x e5m2 both ways, Blackwell
# ``tcgen05.mma kind::f8f6f4`` and RTX Blackwell ``mma.sync`` (sm_89 fp8 shape, sm_120
# kind::f8f6f4) pairs across fp8, fp6 and fp4. A representative set, not all 20 ordered pairs
# per instruction and output: every other pair is ``PRESETS[<a preset>].replace(b_format=...)``.
# Agreement (scripts/mmasim_validation.py --cases 100000 --sensitivity, seed 0;
# records/mmasim-validation-mixed.txt): each agrees with mmasim 2.1.1 bit for bit on 100,480
# (mma.sync) or 102,400 (wgmma, tcgen05) cases, A and B drawn and encoded each in its own
# format; F +-1, L / 2, the step rounding, the alignment and flush_inputs each change outputs
# (e_zero is not observable with these formats, as for the same-format fp8 / fp6 / fp4 presets).
_NV_SHORT = dict(_NV_F8F6F4, fp8="fp8_e4m3fnuz", bf8="fp8_e5m2fnuz")  # AMD's fp8 / bf8: fnuz


def _mixed(prefix: str, a: str, b: str, fp16out: bool = False) -> Profile:
    """The preset ``<prefix>-<a>[-fp16out]`` with b's format ``b`` (short names: e4m3, ...)."""
    out = "-fp16out" if fp16out else ""
    return PRESETS[f"{prefix}-{a}{out}"].replace(name=f"{prefix}-{a}-{b}{out}",
                                                 b_format=_NV_SHORT[b], status="experimental",
                                                 evidence="")


_MIXED_PRESETS = [
    *(_mixed(prefix, a, b, o) for prefix in ("ada", "hopper-wgmma")
      for a, b in (("e4m3", "e5m2"), ("e5m2", "e4m3")) for o in (False, True)),
    _mixed("blackwell-tcgen05", "e4m3", "e2m1"),
    _mixed("blackwell-tcgen05", "e3m2", "e2m3"),
    _mixed("blackwell-tcgen05", "e2m1", "e5m2", fp16out=True),
    _mixed("rtx-blackwell", "e4m3", "e5m2"),
    _mixed("rtx-blackwell", "e5m2", "e2m1"),
    _mixed("rtx-blackwell", "e2m3", "e3m2", fp16out=True),
    # AMD CDNA3 v_mfma_f32_16x16x32_fp8_bf8 / _bf8_fp8 (mmasim MMA_GTR_FDPA, as fp8_fp8)
    _mixed("cdna3", "fp8", "bf8"),
    _mixed("cdna3", "bf8", "fp8"),
]
PRESETS.update((p.name, p) for p in _MIXED_PRESETS)

# -- block-scaled MX / NVFP4 instructions (``scale_format``; experimental, from mmasim) --------
#
# Naming: ``<arch>[-<instruction>]-<block format>[-<a>[-<b>]]``. mmasim 2.1.1 models the
# block-scaled instructions of Blackwell ``tcgen05.mma`` (``nv_ptx/sim.py:
# TCGen05MMABlockScale``, shapes ``m128nNk32`` / ``m128nNk64``, ``isa_tcgen05mma.py``) and of
# RTX Blackwell ``mma.sync`` (``MMABlockScale``, ``m16n8k32`` / ``m16n8k64``, ``isa_mma.py``),
# fp32 accumulator only, with one arithmetic per k:
#
# * k = 32, ``kind::mxf8f6f4 .block32 ... .ue8m0`` (MXFP8 e4m3 / e5m2, MXFP6 e3m2 / e2m3, MXFP4
#   e2m1 held one per byte, and mixed pairs): ``arithmetic/fdpa.py: MMA_ST_FDPA(F=25,
#   rho="RZ-FP32", L_max=32, e_zero=-133)``: the fused node of the same-type
#   ``kind::f8f6f4`` instruction, each product's exponent plus the two e8m0 scale exponents
#   (``st_fdpa``: ``e_a + e_b + e_alpha + e_beta``), one scale per 32 elements, so one scale
#   pair per instruction. NUMERICS.md section 2 ("32, scale exponents added to product
#   exponents, F = 25, RZ-FP32, e_zero -133") agrees.
# * k = 64, ``kind::mxf4`` (MXFP4, ``.block32 ... .ue8m0``) and ``kind::mxf4nvf4`` (NVFP4,
#   ``.block16 ... .ue4m3``; also ``.block16`` / ``.block32`` with ue8m0): ``MMA_GST_FDPA(G=16,
#   F=35, rho="RZ-FP32", L_max=64, e_zero=-139)``: the "grouped" node, 4 groups of 16 exact
#   fp4 products, each aligned at its scale pair's exponent; fp4 operands packed two per byte
#   (``helper.unpack_uint8_to_fp4``: element 2i in the high nibble). NUMERICS.md's "exact sums
#   of groups of 16, then 64; F = 35; RZ-FP32; e_zero -139": mmasim fixes the details (the
#   alignment exponent of a group is its scale's, not its sum's; a cancelled group keeps it).
#
# The other block-scaled variants are ``replace`` of these: ``kind::mxf4nvf4 .block16 .ue8m0``
# is ``PRESETS["...-mxfp4"].replace(scale_block_size=16)``, any other ``kind::mxf8f6f4`` pair
# ``PRESETS["...-mxfp8-e4m3"].replace(in_format=..., b_format=...)``.
# Agreement (scripts/mmasim_validation.py --cases 100000 --sensitivity, seed 0; scales drawn
# with the operands: NaN, zero, the extreme e8m0 exponents, scale pairs near e_zero;
# records/mmasim-validation-blockscale.txt): all 16 agree with mmasim 2.1.1 bit for bit on
# 102,400 (tcgen05) or 100,480 (mma.sync) cases each, and F +-1, L / 2, the step rounding,
# the alignment, the flushes (and G, the grouped node itself) each change outputs. The
# hand-made cases of mmasim_validation.scale_cases (e_zero under tiny scales for every e8m0
# preset, the window at a scaled exponent, NaN scales, overflow, a group aligned at its
# scale's exponent, a cancelled group, ue4m3 subnormal and zero scales) agree too. NVFP4's
# e_zero (-139) cannot change an output (every nonzero term lies at 2^-12 or above).
_MX32 = {"scale_format": "e8m0", "scale_block_size": 32}


def _mxf8f6f4(prefix: str, arch: str, name: str, a: str, b: str | None = None) -> Profile:
    """``kind::mxf8f6f4 .block32 .ue8m0`` (mmasim MMA_ST_FDPA): a and b by short name."""
    return _p(f"{prefix}-{name}", arch, _NV_SHORT[a], 32, 32, 25, -133,
              b_format=_NV_SHORT[b] if b else None, **_MX32)


def _mxf4(prefix: str, arch: str, name: str, scale: str, block: int) -> Profile:
    """``kind::mxf4`` / ``kind::mxf4nvf4`` (mmasim MMA_GST_FDPA): fp4 x fp4, k = 64."""
    return _p(f"{prefix}-{name}", arch, "fp4_e2m1", 64, 64, 35, -139, node="grouped",
              group_size=16, scale_format=scale, scale_block_size=block)


_SCALED_PRESETS = [
    p for prefix, arch in (("blackwell-tcgen05", "blackwell"), ("rtx-blackwell", "rtx-blackwell"))
    for p in (
        _mxf8f6f4(prefix, arch, "mxfp8-e4m3", "e4m3"),
        _mxf8f6f4(prefix, arch, "mxfp8-e5m2", "e5m2"),
        _mxf8f6f4(prefix, arch, "mxfp6-e3m2", "e3m2"),
        _mxf8f6f4(prefix, arch, "mxfp6-e2m3", "e2m3"),
        _mxf8f6f4(prefix, arch, "mxfp4-f8f6f4", "e2m1"),  # MXFP4 through kind::mxf8f6f4
        _mxf8f6f4(prefix, arch, "mxfp8-e4m3-e2m1", "e4m3", "e2m1"),  # MXFP8 x MXFP4
        _mxf4(prefix, arch, "mxfp4", "e8m0", 32),
        _mxf4(prefix, arch, "nvfp4", "ue4m3", 16),
    )
]
PRESETS.update((p.name, p) for p in _SCALED_PRESETS)

# -- Blackwell B200 (sm_100) mma.sync with fp8 operands (experimental; Khattak-Mikaitis model) --
#
# ``blackwell-<e4m3|e5m2>[-fp16out]``: ``mma.sync.aligned.m16n8k32`` .e4m3 / .e5m2 (the sm_89
# fp8 shapes, kept by sm_100) on a B200. mmasim 2.1.1 has no model of them (its sm_100 mma list
# holds the sm_80 / sm_75 shapes only; probes/mmasim_target.NO_MODEL). Source: Khattak and
# Mikaitis, "Accurate Models of NVIDIA Tensor Cores" (arXiv 2512.07004), and their MATLAB models
# (github.com/north-numerical-computing/MATLAB-tensor-core: models/B200TC.m, models/tools/GEMM.m
# and Generic_BFMA_TC.m at commit 109e412d, the revision holding the B200 recordings; the README
# revision that cites the paper names the same set-up: fma 16, neab 2, rz, inter_pattern 1).
# Their B200 fp8 model, restated:
# * an instruction's 32 products are two fused steps of 16, interleaved: the products k = 0, 1
#   mod 4 from zero, then k = 2, 3 mod 4 with the first step's result as accumulator (the
#   k_order of the Hopper fp16-output presets); c is added after both;
# * a step keeps 2 alignment bits beyond fp32's 23 fraction bits, truncating (F = 25 here, as
#   the hopper-e*-fp16out presets), keeps subnormals, drops zero terms (so no e_zero), and is
#   rounded toward zero to fp32 (fp32 output) or to nearest-even to fp16 (fp16 output);
# * c's addition is rounded to nearest-even in the output format, exactly (two guard bits and a
#   sticky bit), for both outputs ("fixed to RN" for H100 / H200 / B200 in GEMM.m).
# fp16 output: expressed exactly (c_entry "last", step RNE to fp16): the arithmetic of the
# validated hopper-e*-fp16out presets, which the same source revision gives H100 as well.
# fp32 output: the steps round toward zero to fp32 and c's addition to nearest-even
# (c_rounding "RNE"; the numba kernel does not run c_rounding, the numpy engine does). Rounding
# all three RZ would differ from the source wherever c's addition is inexact and contradicts
# the B200 recordings (below).
# The B200 recordings (model_validation/B200/E4M3, c and d public, a and b not): every e4m3 value
# is a multiple of 2^-9, so the product sum S (a multiple of 2^-18) is recovered from d - c where
# |d| < 16; of the first 64 fp32-output samples, all 63 such are RNE(S + c), 23 of them lie
# beyond RZ(S + c) in magnitude (10 of these positive sums, which no round-toward-zero step
# gives while no product bit is cut: true for operands up to 4 in magnitude, as in the H100 /
# Ada sets; B200's a and b are not public), and 10 exact ties go 6 down, 4 up (ties to even):
# so not the single RZ-FP32 step of mmasim's other Blackwell fp8 models (tcgen05 kind::f8f6f4,
# RTX Blackwell mma.sync), nor of another revision of B200TC.m in the repository (fma 32, no
# interleaving).
# scripts/final_rounding_check.py repeats the check on any such folder.
# Assumed where the sources are silent: NaN 0x7FFFFFFF / 0x7FFF (as recorded on H100 / A100 /
# Ada / V100), -0 results -> +0 (NVIDIA), e_zero -133 / -21 (the Hopper / Blackwell values; no
# output depends on it: a zero term only lowers the cut, to 2^(e_zero - 25), below the last bit
# of any fp8 product, 2^-18 / 2^-32, and of any step result, c being added by itself). Mixed
# e4m3 x e5m2: ``PRESETS["blackwell-e4m3"].replace(b_format="fp8_e5m2")``
# (the source models same-type operands only).
_B200_FP8_PRESETS = [
    p for short, fmt in _NV_FP8 for p in (
        _p(f"blackwell-{short}", "blackwell", fmt, 16, 32, 25, -133, step=("fp32", "RZ"),
           k_order=_H100_FP8_F16_ORDER, c_entry="last", c_rounding="RNE"),
        _p(f"blackwell-{short}-fp16out", "blackwell", fmt, 16, 32, 25, -21, out="fp16",
           step=_FP16, k_order=_H100_FP8_F16_ORDER, c_entry="last"))
]
PRESETS.update((p.name, p) for p in _B200_FP8_PRESETS)


#: The recorded set (shared/data/hw-vectors) each preset reproduces bit for bit.
_EVIDENCE = {
    "volta-fp16": "V100/fp16 d_fp32", "volta-fp16-fp16out": "V100/fp16 d_fp16",
    "ampere-fp16": "A100/fp16 d_fp32", "ampere-fp16-fp16out": "A100/fp16 d_fp16",
    "ampere-bf16": "A100/bf16 d_fp32", "ampere-tf32": "A100/tf32 d_fp32",
    "ada-fp16": "Ada/fp16 d_fp32", "ada-fp16-fp16out": "Ada/fp16 d_fp16",
    "ada-bf16": "Ada/bf16 d_fp32", "ada-tf32": "Ada/tf32 d_fp32",
    "ada-e4m3": "Ada/E4M3 d_fp32", "ada-e4m3-fp16out": "Ada/E4M3 d_fp16",
    "ada-e5m2": "Ada/E5M2 d_fp32", "ada-e5m2-fp16out": "Ada/E5M2 d_fp16",
    "hopper-fp16": "H100/fp16 d_fp32", "hopper-fp16-fp16out": "H100/fp16 d_fp16",
    "hopper-bf16": "H100/bf16 d_fp32", "hopper-tf32": "H100/tf32 d_fp32",
    "hopper-e4m3": "H100/E4M3 d_fp32", "hopper-e5m2": "H100/E5M2 d_fp32",
    "hopper-e4m3-fp16out": "H100/E4M3 d_fp16", "hopper-e5m2-fp16out": "H100/E5M2 d_fp16",
}
for _name, _set in _EVIDENCE.items():
    PRESETS[_name] = PRESETS[_name].replace(status="validated",
                                            evidence=f"hw-vectors {_set}: 5000/5000")
del _name, _set
