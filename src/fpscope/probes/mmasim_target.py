"""MMA-Sim's instruction models (the ``mmasim`` package, Xie et al., arXiv 2511.10909) as
black-box targets of the probe suite, and the table of which model each preset describes.

``MmasimTarget(preset)`` runs ``D = op(A, B, C)`` through mmasim's model of the preset's
instruction: the operands are encoded to the instruction's types (tf32 as fp32 bit patterns,
fp6/fp4 one per byte as mmasim holds them, AMD fp8 / bf8 as torch's float8_e4m3fnuz /
float8_e5m2fnuz; A in the preset's ``in_format``, B in its ``b_format`` where the preset has
mixed input formats) and cut into its m x n x k tiles, zero-padded. The CLI spelling is
``fpscope probe mmasim:PRESET``. mmasim (and torch) are imported on first use.

Block-scaled presets (``Profile.scale_format``: MX / NVFP4) map to mmasim's ``TCGen05MMABlockScale``
and ``MMABlockScale`` models, called ``op(A, B, C, scale_a, scale_b)``; :func:`block_scaled_call`
builds their inputs (:func:`scales_to_torch`, fp4 packed two per byte by :func:`pack_fp4` for
``kind::mxf4*``). Their MmasimTarget is block-scaled (``target(A, B, C, scale_a, scale_b)``,
scales encoded to the preset's scale format, which the interface therefore fixes; padded rows
and columns take scale 1); scripts/mmasim_validation.py compares the presets with them too.
"""

from __future__ import annotations

import numpy as np

from ..formats import decode, encode
from ..profile import PRESETS, resolve_format
from .blackbox import MatrixTarget, ProbeError

__all__ = ["MODELS", "NO_MODEL", "MmasimTarget", "block_scaled_call", "build_model", "from_torch",
           "model_name", "pack_fp4", "scales_to_torch", "to_torch"]

#: preset -> (mmasim class name, arch, shape_and_type). Hopper fp8: mmasim has no Hopper mma.sync
#: fp8 model (its Hopper mma list has no sm_89 fp8 shapes), only wgmma m64nNk32; the fpscope
#: fp8 fp32-output presets are the wgmma arithmetic, the fp16-output presets model mma.sync.
MODELS: dict[str, tuple[str, str, str]] = {
    "volta-fp16": ("MMA", "Volta", "m8n8k4.f32.f16.f16.f32"),
    "volta-fp16-fp16out": ("MMA", "Volta", "m8n8k4.f16.f16.f16.f16"),
    "turing-fp16": ("MMA", "Turing", "m16n8k8.f32.f16.f16.f32"),
    "turing-fp16-fp16out": ("MMA", "Turing", "m16n8k8.f16.f16.f16.f16"),
    "ampere-fp16": ("MMA", "Ampere", "m16n8k16.f32.f16.f16.f32"),
    "ampere-fp16-fp16out": ("MMA", "Ampere", "m16n8k16.f16.f16.f16.f16"),
    "ampere-bf16": ("MMA", "Ampere", "m16n8k16.f32.bf16.bf16.f32"),
    "ampere-tf32": ("MMA", "Ampere", "m16n8k8.f32.tf32.tf32.f32"),
    "ada-fp16": ("MMA", "Ada Lovelace", "m16n8k16.f32.f16.f16.f32"),
    "ada-fp16-fp16out": ("MMA", "Ada Lovelace", "m16n8k16.f16.f16.f16.f16"),
    "ada-bf16": ("MMA", "Ada Lovelace", "m16n8k16.f32.bf16.bf16.f32"),
    "ada-tf32": ("MMA", "Ada Lovelace", "m16n8k8.f32.tf32.tf32.f32"),
    "ada-e4m3": ("MMA", "Ada Lovelace", "m16n8k32.f32.e4m3.e4m3.f32"),
    "ada-e4m3-fp16out": ("MMA", "Ada Lovelace", "m16n8k32.f16.e4m3.e4m3.f16"),
    "ada-e5m2": ("MMA", "Ada Lovelace", "m16n8k32.f32.e5m2.e5m2.f32"),
    "ada-e5m2-fp16out": ("MMA", "Ada Lovelace", "m16n8k32.f16.e5m2.e5m2.f16"),
    "hopper-fp16": ("MMA", "Hopper", "m16n8k16.f32.f16.f16.f32"),
    "hopper-fp16-fp16out": ("MMA", "Hopper", "m16n8k16.f16.f16.f16.f16"),
    "hopper-bf16": ("MMA", "Hopper", "m16n8k16.f32.bf16.bf16.f32"),
    "hopper-tf32": ("MMA", "Hopper", "m16n8k8.f32.tf32.tf32.f32"),
    "hopper-e4m3": ("WGMMA", "Hopper", "m64n8k32.f32.e4m3.e4m3"),
    "hopper-e4m3-fp16out": ("WGMMA", "Hopper", "m64n8k32.f16.e4m3.e4m3"),
    "hopper-e5m2": ("WGMMA", "Hopper", "m64n8k32.f32.e5m2.e5m2"),
    "hopper-e5m2-fp16out": ("WGMMA", "Hopper", "m64n8k32.f16.e5m2.e5m2"),
}

_PTX_TYPES = {"tf32": "tf32", "fp16": "f16", "bf16": "bf16", "fp8_e4m3fn": "e4m3",
              "fp8_e5m2": "e5m2", "fp6_e3m2": "e3m2", "fp6_e2m3": "e2m3", "fp4_e2m1": "e2m1"}


def _nv_shape(preset: str) -> tuple[str, str, str]:
    """The mmasim model of an experimental NVIDIA preset, from its name and formats (a mixed
    preset: a's type, then b's, as PTX spells the instruction). Block-scaled presets: the
    fused node is ``kind::mxf8f6f4`` (k = 32), the grouped node ``kind::mxf4`` (e8m0 scales per
    32) or ``kind::mxf4nvf4`` (k = 64); tcgen05 ``m128n8``, RTX Blackwell mma.sync ``m16n8``."""
    prof = PRESETS[preset]
    d = "f16" if prof.out_format == "fp16" else "f32"
    t, tb = (_PTX_TYPES[f] for f in prof.operand_formats)
    if prof.scale_format is not None:
        st = {"e8m0": "ue8m0", "ue4m3": "ue4m3"}[prof.scale_format]
        block = f"block{prof.scale_block_size}"
        kind = ("mxf8f6f4" if prof.node == "fused" else
                "mxf4" if (st, block) == ("ue8m0", "block32") else "mxf4nvf4")
        if preset.startswith("blackwell-tcgen05-"):
            return ("TCGen05MMABlockScale", "Blackwell",
                    f"m128n8k{prof.k}.kind::{kind}.{block}.{d}.{t}.{tb}.{st}")
        return ("MMABlockScale", "RTX Blackwell",
                f"m16n8k{prof.k}.kind::{kind}.{block}.{d}.{t}.{tb}.{d}.{st}")
    kind = {"tf32": "tf32", "f16": "f16", "bf16": "f16"}.get(t, "f8f6f4")
    if preset.startswith("ada-"):  # mixed fp8 (sm_89 mma.sync m16n8k32)
        return ("MMA", "Ada Lovelace", f"m16n8k{prof.k}.{d}.{t}.{tb}.{d}")
    if preset.startswith("hopper-wgmma-"):
        return ("WGMMA", "Hopper", f"m64n8k{prof.k}.{d}.{t}.{tb}")
    if preset.startswith("blackwell-tcgen05-"):
        return ("TCGen05MMA", "Blackwell", f"m64n8k{prof.k}.kind::{kind}.{d}.{t}.{tb}")
    arch = "RTX Blackwell" if preset.startswith("rtx-") else "Blackwell"
    if {t, tb} & {"e3m2", "e2m3", "e2m1"}:  # sm_120 only
        return ("MMA", arch, f"m16n8k{prof.k}.kind::f8f6f4.{d}.{t}.{tb}.{d}")
    return ("MMA", arch, f"m16n8k{prof.k}.{d}.{t}.{tb}.{d}")


#: Presets without an mmasim 2.1.1 instruction model, and why: B200 (sm_100) mma.sync with fp8
#: operands (mmasim's sm_100 mma list holds the sm_80 / sm_75 shapes only; these presets follow
#: the Khattak-Mikaitis B200 model, fpscope/presets.py).
NO_MODEL: dict[str, str] = {
    p: "mmasim has no Blackwell (sm_100) mma.sync fp8 model" for p in (
        "blackwell-e4m3", "blackwell-e4m3-fp16out", "blackwell-e5m2", "blackwell-e5m2-fp16out")}

MODELS.update((p, _nv_shape(p)) for p in PRESETS
              if p not in NO_MODEL and (
                  p.startswith(("hopper-wgmma-", "blackwell-", "rtx-blackwell-"))
                  or (PRESETS[p].b_format is not None and not p.startswith("cdna"))))
MODELS.update({
    "cdna1-fp16": ("MFMA", "CDNA1", "f32_16x16x16f16"),
    "cdna1-bf16": ("MFMA", "CDNA1", "f32_16x16x8bf16"),
    # CDNA2: the CDNA1 instructions (MMA_FTZ_MUL_ADD: P = 2 for bf16, 4 for fp16) and bf16_1k (4)
    "cdna2-fp16": ("MFMA", "CDNA2", "f32_16x16x16f16"),
    "cdna2-bf16": ("MFMA", "CDNA2", "f32_16x16x8bf16"),
    "cdna2-bf16-1k": ("MFMA", "CDNA2", "f32_16x16x16bf16_1k"),
    # CDNA3: MMA_TR_FDPA (f16, bf16, xf32), MMA_GTR_FDPA (fp8 / bf8, a's type then b's)
    "cdna3-fp16": ("MFMA", "CDNA3", "f32_16x16x16_f16"),
    "cdna3-bf16": ("MFMA", "CDNA3", "f32_16x16x16_bf16"),
    "cdna3-xf32": ("MFMA", "CDNA3", "f32_16x16x8_xf32"),
    "cdna3-fp8": ("MFMA", "CDNA3", "f32_16x16x32_fp8_fp8"),
    "cdna3-bf8": ("MFMA", "CDNA3", "f32_16x16x32_bf8_bf8"),
    "cdna3-fp8-bf8": ("MFMA", "CDNA3", "f32_16x16x32_fp8_bf8"),
    "cdna3-bf8-fp8": ("MFMA", "CDNA3", "f32_16x16x32_bf8_fp8"),
})

def model_name(preset: str) -> str:
    cls, arch, st = MODELS[preset]
    return f"{cls}({arch!r}, {st!r})"


def build_model(preset: str):
    import mmasim.nv_ptx as nv
    from mmasim import amd

    cls, arch, st = MODELS[preset]
    return getattr(amd if cls == "MFMA" else nv, cls)(arch, st)



def torch_dtypes():
    import torch

    return {
        "fp16": (torch.int16, torch.float16),
        "bf16": (torch.int16, torch.bfloat16),
        "fp32": (torch.int32, torch.float32),
        "tf32": (torch.int32, torch.float32),
        "fp8_e4m3fn": (torch.uint8, torch.float8_e4m3fn),
        "fp8_e5m2": (torch.uint8, torch.float8_e5m2),
        "fp8_e4m3fnuz": (torch.uint8, torch.float8_e4m3fnuz),  # AMD CDNA3 fp8
        "fp8_e5m2fnuz": (torch.uint8, torch.float8_e5m2fnuz),  # AMD CDNA3 bf8
        # mmasim holds fp6 / fp4 one per uint8: fp6 in bits 5:0, fp4 in bits 5:2
        # (helper.decode_uint8_to_fp6_fp4)
        "fp6_e3m2": (torch.uint8, torch.uint8),
        "fp6_e2m3": (torch.uint8, torch.uint8),
        "fp4_e2m1": (torch.uint8, torch.uint8),
    }


def to_torch(pat: np.ndarray, fmt_name: str):
    import torch

    itype, ftype = torch_dtypes()[fmt_name]
    bits = {torch.int16: 16, torch.int32: 32, torch.uint8: 8}[itype]
    signed = pat.astype(np.int64)
    if fmt_name == "fp4_e2m1":
        signed = signed << 2
    if itype != torch.uint8:
        signed = np.where(signed >= 1 << (bits - 1), signed - (1 << bits), signed)
    t = torch.from_numpy(signed).to(itype)
    return t if ftype == itype else t.view(ftype)


def pack_fp4(pat: np.ndarray, axis: int) -> np.ndarray:
    """fp4 bit patterns two per byte along ``axis`` (even length), element 2i in the high nibble
    and 2i + 1 in the low one, as mmasim unpacks them (``helper.unpack_uint8_to_fp4``)."""
    pat = np.moveaxis(np.asarray(pat, dtype=np.int64), axis, -1)
    return np.moveaxis((pat[..., 0::2] << 4) | pat[..., 1::2], -1, axis)


def scales_to_torch(pat: np.ndarray, scale_format: str):
    """Block-scale bit patterns (fpscope's e8m0 or ue4m3 encoding) as mmasim takes them:
    torch.float8_e8m0fnu, or for ue4m3 the float8_e4m3fn byte with a clear sign bit (mmasim
    clears it itself, ``helper.truncate_e4m3_to_ue4m3``)."""
    import torch

    dtype = {"e8m0": torch.float8_e8m0fnu, "ue4m3": torch.float8_e4m3fn}[scale_format]
    return torch.from_numpy(np.asarray(pat, dtype=np.uint8)).view(dtype)


def block_scaled_call(op, A, B, C, SA, SB, a_name: str, b_name: str, out_name: str,
                      scale_format: str) -> np.ndarray:
    """Output bit patterns (m, n) of one tile of an mmasim block-scale model ``op``.

    A (m, k), B (k, n), C (m, n), SA (m, k / s), SB (k / s, n): bit patterns of the formats
    ``a_name``, ``b_name``, ``out_name`` and ``scale_format``. fp4 operands of ``kind::mxf4*``
    (``op.packing == 2``) travel two per byte (:func:`pack_fp4`), others one per byte or as
    their torch dtype (:func:`to_torch`).
    """
    import torch

    if op.packing == 2:
        At = torch.from_numpy(pack_fp4(A, -1).astype(np.uint8))
        Bt = torch.from_numpy(pack_fp4(B, 0).astype(np.uint8))
    else:
        At, Bt = to_torch(np.asarray(A), a_name), to_torch(np.asarray(B), b_name)
    with torch.no_grad():
        d = op(At.contiguous(), Bt.contiguous(), to_torch(np.asarray(C), out_name).contiguous(),
               scales_to_torch(SA, scale_format), scales_to_torch(SB, scale_format))
    return from_torch(d, out_name)


def from_torch(d, out_name: str) -> np.ndarray:
    import torch

    itype, _ = torch_dtypes()[out_name]
    bits = {torch.int16: 16, torch.int32: 32}[itype]
    v = d.contiguous().view(itype).numpy().astype(np.int64)
    return v & ((1 << bits) - 1)



class MmasimTarget(MatrixTarget):
    """An mmasim instruction model as a black box (module docstring).

    Raises:
        ProbeError: no mmasim model for the preset, or mmasim / torch missing.
    """

    def __init__(self, preset: str):
        if preset in NO_MODEL:
            raise ProbeError(f"no mmasim model for {preset!r}: {NO_MODEL[preset]}")
        if preset not in MODELS:
            import difflib

            close = difflib.get_close_matches(preset, list(MODELS), n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ProbeError(f"no mmasim model for {preset!r}; {hint}'fpscope profiles' lists "
                             f"the presets, {len(MODELS)} of which have an mmasim model")
        try:
            self.op = build_model(preset)
        except ImportError:
            raise ProbeError("mmasim is not installed; pip install mmasim") from None
        prof = PRESETS[preset]
        super().__init__(f"mmasim:{model_name(preset)}", prof.in_format, prof.out_format,
                         k=self.op.k, b_format=prof.b_format, scale_format=prof.scale_format,
                         scale_block_size=prof.scale_block_size)
        self.in_name = "fp32" if prof.in_format == "tf32" else prof.in_format
        fb = prof.operand_formats[1]
        self.b_name = "fp32" if fb == "tf32" else fb  # B's encoding (A's unless mixed)

    def _call(self, A, B, C, SA=None, SB=None):
        import torch

        m, n = self.op.m, self.op.n
        M, N = C.shape
        Mp, Np = -(-M // m) * m, -(-N // n) * n
        fin, fout = resolve_format(self.in_name), resolve_format(self.out_format)
        fb = resolve_format(self.b_name)

        def padded(x, rows, cols, fill=0.0):
            out = np.full((rows, cols), fill)
            out[:x.shape[0], :x.shape[1]] = x
            return out

        Ap = encode(padded(A, Mp, A.shape[1]), fin).astype(np.int64)
        Bp = encode(padded(B, B.shape[0], Np), fb).astype(np.int64)
        Cp = encode(padded(C, Mp, Np), fout).astype(np.int64)
        D = np.empty((Mp, Np), dtype=np.int64)
        if self.scaled:
            SAp = encode(padded(SA, Mp, SA.shape[1], 1.0), self.fscale).astype(np.int64)
            SBp = encode(padded(SB, SB.shape[0], Np, 1.0), self.fscale).astype(np.int64)
            for i in range(0, Mp, m):
                for j in range(0, Np, n):
                    D[i:i + m, j:j + n] = block_scaled_call(
                        self.op, Ap[i:i + m], Bp[:, j:j + n], Cp[i:i + m, j:j + n],
                        SAp[i:i + m], SBp[:, j:j + n], self.in_name, self.b_name,
                        self.out_format, self.scale_format)
            return decode(D[:M, :N].astype(np.uint64), fout)
        At = to_torch(Ap, self.in_name)
        Bt = to_torch(Bp, self.b_name)
        Ct = to_torch(Cp, self.out_format)
        with torch.no_grad():
            for i in range(0, Mp, m):
                for j in range(0, Np, n):
                    d = self.op(At[i:i + m].contiguous(), Bt[:, j:j + n].contiguous(),
                                Ct[i:i + m, j:j + n].contiguous())
                    D[i:i + m, j:j + n] = from_torch(d, self.out_format)
        return decode(D[:M, :N].astype(np.uint64), fout)
