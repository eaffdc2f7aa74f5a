"""Closed loop: random differential testing of a profile against its black box (NUMERICS.md
section 3, probe 15; Hawkeye's and MMA-Sim's bitwise validation).

:func:`validate` runs the target and the vectorised engine
(:func:`fpscope.emulate.matmul` with ``engine="numpy"``, library-level fields included) on the same random 16 x K x 16 problems and compares
every output bit for bit (all NaNs compare equal: the float64 interface of a target does not
promise NaN payloads). Generators, in turn:

* ``bits``: random bit patterns of the input and output formats (NaN, Inf, subnormals
  included; tf32 inputs: fp32 patterns, so the operand conversion is exercised);
* ``normal``: normal values with exponents in [-8, 8];
* ``cancel``: products in pairs of opposite sign that nearly cancel (b_{2i+1} = b_{2i},
  a_{2i+1} = -a_{2i} (1 + 2^-r));
* ``wide``: normal values over the whole exponent range;
* ``subnormal``: subnormal and tiny normal operands and c;
* ``zero_block``: normal values with whole blocks of L products zeroed (signed zeros) and c = +-0;
* ``overflow``: operands and c near the largest finite values.

Block-scaled targets (MX / NVFP4; :attr:`MatrixTarget.scaled`) are validated on random block
scales too, drawn per generator in the profile's scale format (:func:`generate_scales`):
``bits`` every pattern (NaN and ue4m3's zero included); ``normal`` and ``cancel`` scales near
1 (2^-4 .. 2^4); ``zero_block`` the same plus, for ue4m3, zero scales; ``wide`` the extreme
scales (e8m0 2^-127 .. 2^-125 and 2^125 .. 2^127, ue4m3 the subnormals and 256 .. 448);
``subnormal`` tiny scales (e8m0 2^-85 .. 2^-55 each, so a scale pair puts products near fp32's
subnormal range and the zero terms' e_zero; ue4m3 zero and the subnormals); ``overflow``
large scales (e8m0 2^100 .. 2^127, ue4m3 256 .. 448). The emulator takes the same scales
(:func:`fpscope.emulate.matmul`'s ``scale_a``, ``scale_b``).

A mismatch is shrunk (fewer nonzero products, c = 0, simpler values: +-1, a power of two, fewer
significand bits) while it persists, and reported as hex. A profile is "accepted" only when no
mismatch is found.
"""

from __future__ import annotations

import math
import time

import numpy as np

from ..emulate import matmul
from ..formats import FP32, Format, decode, is_representable, round_to_format
from ..profile import Profile, resolve_format
from ._common import same_bits
from .blackbox import MatrixTarget, ProbeError, hex_in, hex_out, hex_scale

__all__ = ["GENERATORS", "generate", "generate_scales", "shrink", "validate"]

GENERATORS = ("bits", "normal", "cancel", "wide", "subnormal", "zero_block", "overflow")


def _gen_format(fin: Format) -> Format:
    return FP32 if fin.name == "tf32" else fin


def _bits(rng, fmt: Format, shape) -> np.ndarray:
    return decode(rng.integers(0, 1 << fmt.bits, size=shape, dtype=np.uint64), fmt)


def _normals(rng, fmt: Format, shape, elo: int, ehi: int) -> np.ndarray:
    elo, ehi = max(elo, fmt.emin), min(ehi, fmt.emax)
    e = rng.integers(elo, ehi + 1, size=shape)
    m = 1 + rng.random(shape)
    s = np.where(rng.random(shape) < 0.5, -1.0, 1.0)
    return round_to_format(s * np.ldexp(m, e), fmt, "RZ", overflow="saturate")


def _subnormals(rng, fmt: Format, shape) -> np.ndarray:
    m = rng.random(shape)
    s = np.where(rng.random(shape) < 0.5, -1.0, 1.0)
    return round_to_format(s * np.ldexp(m, fmt.emin), fmt, "RZ")


def generate(kind: str, rng, fin: Format, fout: Format, M: int, K: int, N: int, L: int,
             fb: Format | None = None):
    """(A (M, K), B (K, N), C (M, N)) float64 of generator ``kind`` (see the module docstring);
    A's values in ``fin``, B's in ``fb`` (default ``fin``; a mixed-input instruction)."""
    g = _gen_format(fin)
    h = g if fb is None else _gen_format(fb)
    if kind == "bits":
        A, B, C = _bits(rng, g, (M, K)), _bits(rng, h, (K, N)), _bits(rng, fout, (M, N))
    elif kind == "normal":
        A, B = _normals(rng, g, (M, K), -8, 8), _normals(rng, h, (K, N), -8, 8)
        C = _normals(rng, fout, (M, N), -8, 8)
    elif kind == "cancel":
        A = _normals(rng, g, (M, K), -6, 6)
        B = _normals(rng, h, (K, N), -6, 6)
        B[1::2] = B[0::2][: B[1::2].shape[0]]
        r = rng.integers(1, g.p + 2, size=A[:, 1::2].shape)
        A[:, 1::2] = round_to_format(-A[:, 0::2][:, : A[:, 1::2].shape[1]] * (1 + np.ldexp(1.0, -r)),
                                     g, "RZ")
        C = np.where(rng.random((M, N)) < 0.5, 0.0, _normals(rng, fout, (M, N), -12, 0))
    elif kind == "wide":
        A = _normals(rng, g, (M, K), g.emin, g.emax)
        B = _normals(rng, h, (K, N), h.emin, h.emax)
        C = _normals(rng, fout, (M, N), fout.emin, fout.emax)
    elif kind == "subnormal":
        A = np.where(rng.random((M, K)) < 0.6, _subnormals(rng, g, (M, K)),
                     _normals(rng, g, (M, K), g.emin, g.emin + 4))
        B = np.where(rng.random((K, N)) < 0.3, _subnormals(rng, h, (K, N)),
                     _normals(rng, h, (K, N), h.emin, max(h.emin, -h.emin // 2)))
        C = np.where(rng.random((M, N)) < 0.5, _subnormals(rng, fout, (M, N)),
                     _normals(rng, fout, (M, N), fout.emin, fout.emin + 3))
    elif kind == "zero_block":
        A = _normals(rng, g, (M, K), -8, 8)
        B = _normals(rng, h, (K, N), -8, 8)
        for m in range(M):
            for s in range(0, K, max(L, 1)):
                if rng.random() < 0.5:
                    A[m, s:s + L] = np.where(rng.random(min(L, K - s)) < 0.5, 0.0, -0.0)
        C = np.where(rng.random((M, N)) < 0.5, _normals(rng, fout, (M, N), -8, 8),
                     np.where(rng.random((M, N)) < 0.5, 0.0, -0.0))
    elif kind == "overflow":
        A = _normals(rng, g, (M, K), g.emax - 3, g.emax)
        B = _normals(rng, h, (K, N), h.emax // 2 - 2, h.emax // 2 + 1)
        C = _normals(rng, fout, (M, N), fout.emax - 2, fout.emax)
    else:
        raise ValueError(f"unknown generator {kind!r}; known: {', '.join(GENERATORS)}")
    # formats without -0 (fnuz): a generated -0 is the one zero, +0
    A, B, C = (x + 0.0 if not f.has_negative_zero else x for x, f in ((A, g), (B, h), (C, fout)))
    return A, B, C


def generate_scales(kind: str, rng, fs: Format, shape) -> np.ndarray:
    """Block scales (float64 values of the scale format ``fs``, e8m0 or ue4m3) of generator
    ``kind`` (module docstring), of ``shape``."""
    nan = (1 << fs.bits) - 1  # the NaN pattern: e8m0 0xFF, ue4m3 0x7F
    pat = rng.integers(0, nan + 1, size=shape)
    one = fs.exponent_bias << (fs.p - 1)  # the pattern of 1.0
    step = 1 << (fs.p - 1)  # one binade in patterns
    top = nan - 1  # the largest finite pattern
    if kind == "bits":
        pass
    elif kind in ("normal", "cancel", "zero_block"):
        pat = one + rng.integers(-4 * step, 4 * step + 1, size=shape)
        if kind == "zero_block" and fs.name == "ue4m3":
            pat = np.where(rng.random(shape) < 0.25, 0, pat)
    elif kind == "wide":
        lo = pat % 3 if fs.name == "e8m0" else pat % step
        pat = np.where(rng.random(shape) < 0.5, lo, top - pat % (3 if fs.name == "e8m0" else step))
    elif kind == "subnormal":
        pat = (fs.exponent_bias + rng.integers(-85, -54, size=shape) if fs.name == "e8m0"
               else pat % step)
    elif kind == "overflow":
        pat = top - pat % (28 if fs.name == "e8m0" else step)
    else:
        raise ValueError(f"unknown generator {kind!r}; known: {', '.join(GENERATORS)}")
    return decode(np.asarray(pat, dtype=np.uint64), fs)


def _formats(fa: str, fb: str, fout: str) -> str:
    """"fp16 -> fp32" or "fp8_e4m3fn x fp8_e5m2 -> fp32" for messages."""
    return f"{fa} -> {fout}" if fa == fb else f"{fa} x {fb} -> {fout}"


def _scales(fmt, size) -> str:
    """"e8m0 scales per 32" or "no block scales" for messages."""
    return f"{fmt} scales per {size}" if size else "no block scales"


def _emulate(A, B, C, profile: Profile, scales=()) -> np.ndarray:
    """The profile's GEMM on the vectorised engine (library-level fields included);
    ``scales``: () or (scale_a, scale_b) of a block-scaled profile."""
    SA, SB = scales or (None, None)
    return matmul(A, B, C, profile=profile, engine="numpy", scale_a=SA, scale_b=SB,
                  dtype="float64")


def _mismatch(target: MatrixTarget, profile: Profile, a, b, c,
              s=()) -> tuple[bool, float, float]:
    """One dot product on the target and the profile; ``s``: () or (sa, sb), its 1-D block
    scales."""
    sc = (s[0][None, :], s[1][:, None]) if s else ()
    got = float(target(a[None, :], b[:, None], np.array([[c]]), *sc)[0, 0])
    exp = float(_emulate(a[None, :], b[:, None], np.array([[c]]), profile, sc)[0, 0])
    return (not bool(same_bits(got, exp)), got, exp)


def _simpler(v: float, fmt: Format):
    """Simpler values than v, simplest first (exact in ``fmt``)."""
    if v == 0:
        return []
    if not math.isfinite(v):
        return [1.0]
    s = math.copysign(1.0, v)
    out = [s]
    p2 = s * math.ldexp(1.0, math.frexp(abs(v))[1] - 1)
    if p2 != v:
        out.append(p2)
    m, _ = math.frexp(abs(v))
    bits = 0
    while m != int(m):
        m *= 2
        bits += 1
    if bits > 1:
        fewer = Format("tmp", bits - 1, fmt.emin, fmt.emax)
        out.append(float(round_to_format(np.array([v]), fewer, "RZ")[0]))
    return [x for x in out if x != v and bool(is_representable(np.array([x]), fmt)[0])]


def shrink(target: MatrixTarget, profile: Profile, a, b, c, max_rounds: int = 6,
           scales=()) -> dict:
    """A minimal input that still mismatches, from one mismatching dot product (a, b (K,), c;
    ``scales``: () or (sa, sb), its block scales, K / s each).

    Returns:
        dict: ``products`` [{"k", "a", "b"}] (hex, nonzero products only), ``c``, ``got``,
        ``expected`` (hex), ``nonzero_products``, ``reproducible`` (False: the single dot
        product alone does not mismatch: the op's output depends on the other rows/columns);
        block-scaled: ``scale_a``, ``scale_b`` (hex of the scale format; a scale is shrunk to
        1 where the mismatch persists).
    """
    a, b = np.array(a, dtype=np.float64), np.array(b, dtype=np.float64)
    c = float(c)
    s = tuple(np.array(x, dtype=np.float64) for x in scales)
    fin = _gen_format(resolve_format(profile.in_format))
    fb = _gen_format(resolve_format(profile.b_format or profile.in_format))
    fout = resolve_format(profile.out_format)

    def bad(c=None) -> bool:
        return _mismatch(target, profile, a, b, c_ if c is None else c, s)[0]

    c_ = c
    if not bad():
        return {"reproducible": False, "products": _products(target, a, b),
                "c": hex_out([c], target)[0], "nonzero_products": int(np.count_nonzero(a * b)),
                **_scale_hex(target, s)}
    size = len(a) // 2
    while size >= 4:  # long K (a GEMM): drop runs of products first, then single ones
        for lo in range(0, len(a), size):
            part = slice(lo, lo + size)
            if not (a[part] != 0).any():
                continue
            old = a[part].copy(), b[part].copy()
            a[part], b[part] = 0.0, 1.0
            if not bad():
                a[part], b[part] = old
        size //= 2
    for _ in range(max_rounds):
        changed = False
        for i in range(len(a)):
            if a[i] != 0 or np.signbit(a[i]) or not np.isfinite(a[i] * b[i]):
                old = a[i], b[i]
                a[i], b[i] = 0.0, 1.0
                if bad():
                    changed = True
                else:
                    a[i], b[i] = old
        if (c_ != 0 or math.copysign(1.0, c_) < 0) and bad(0.0):
            c_, changed = 0.0, True
        for i in range(len(a)):
            for arr, fmt in ((a, fin), (b, fb)):
                for v in _simpler(float(arr[i]), fmt):
                    old = arr[i]
                    arr[i] = v
                    if bad():
                        changed = True
                        break
                    arr[i] = old
        for v in _simpler(c_, fout):
            if bad(v):
                c_, changed = v, True
                break
        for x in s:  # block scales: 1 where the mismatch persists
            for j in range(len(x)):
                if x[j] != 1.0:
                    old = x[j]
                    x[j] = 1.0
                    if bad():
                        changed = True
                    else:
                        x[j] = old
        if not changed:
            break
    _, got, exp = _mismatch(target, profile, a, b, c_, s)
    return {"reproducible": True, "products": _products(target, a, b),
            "c": hex_out([c_], target)[0], "got": hex_out([got], target)[0],
            "expected": hex_out([exp], target)[0],
            "nonzero_products": int(sum(1 for x, y in zip(a, b) if x * y != 0 or not np.isfinite(x * y))),
            **_scale_hex(target, s)}


def _scale_hex(target: MatrixTarget, s) -> dict:
    return {"scale_a": hex_scale(s[0], target), "scale_b": hex_scale(s[1], target)} if s else {}


def _products(target, a, b) -> list:
    nz = [i for i in range(len(a)) if a[i] != 0 or np.signbit(a[i]) or not np.isfinite(a[i])]
    return [{"k": i, "a": hex_in([a[i]], target)[0], "b": hex_in([b[i]], target, "b")[0]}
            for i in nz]


def validate(target: MatrixTarget, profile: Profile, cases: int = 2000, seed: int = 0,
             generators=GENERATORS, M: int = 16, N: int = 16, K: int | None = None) -> dict:
    """Compare ``target`` with ``profile`` bit for bit on about ``cases`` random outputs.

    Args:
        target: the black box; its K (if fixed) must equal ``profile.k``. A block-scaled target
            (``target.scaled``) needs a block-scaled profile of its scale block size (and of its
            scale format, where the target fixes one); both then take the same random scales
            (:func:`generate_scales`, in the profile's scale format).
        profile: the candidate profile (run by the vectorised engine).
        cases: number of outputs to compare (rounded up to whole 16 x 16 calls).
        seed: random seed.
        generators: the generator kinds to cycle through (:data:`GENERATORS`).
        K: products per output (default ``profile.k``; a GEMM with library-level fields is
            validated at the K it was probed at, a multiple of ``split_k * profile.k``).

    Returns:
        dict: ``cases``, ``matched``, ``mismatched``, ``by_generator`` {kind: [matched, total]},
        ``accepted`` (no mismatch), ``first_mismatch`` (shrunk, :func:`shrink`; with the block
        scales of the mismatching output for a block-scaled target) or None, ``seconds``.

    Raises:
        ProbeError: the target fails, or its formats / K / block scales do not match the
            profile.
    """
    t0 = time.perf_counter()
    fa_, fb_ = (resolve_format(f).name for f in profile.operand_formats)
    if (fa_, fb_, resolve_format(profile.out_format).name) != \
            (target.fin.name, target.fb.name, target.out_format):
        raise ProbeError(f"profile {profile.name} is {_formats(fa_, fb_, profile.out_format)}, "
                         f"the target {_formats(target.fin.name, target.fb.name, target.out_format)}")
    if profile.scale_block_size != target.scale_block_size or (
            target.scale_format is not None and profile.scale_format != target.scale_format):
        raise ProbeError(f"profile {profile.name} takes "
                         f"{_scales(profile.scale_format, profile.scale_block_size)}, the target "
                         f"{_scales(target.scale_format or 'its', target.scale_block_size)}")
    K = profile.k if K is None else int(K)
    if target.k is not None and target.k != K:
        raise ProbeError(f"the target takes K = {target.k}, the profile k = {K}")
    rng = np.random.default_rng(seed)
    fin, fout = resolve_format(profile.in_format), resolve_format(profile.out_format)
    fb = resolve_format(profile.b_format) if profile.b_format is not None else None
    fs = resolve_format(profile.scale_format) if profile.scale_format is not None else None
    per_call = M * N
    calls = max(1, math.ceil(cases / per_call))
    by = {g: [0, 0] for g in generators}
    matched = total = 0
    first = None
    for i in range(calls):
        kind = generators[i % len(generators)]
        A, B, C = generate(kind, rng, fin, fout, M, K, N, profile.block_size, fb)
        sc = () if fs is None else (
            generate_scales(kind, rng, fs, (M, K // profile.scale_block_size)),
            generate_scales(kind, rng, fs, (K // profile.scale_block_size, N)))
        got = target(A, B, C, *sc)
        exp = _emulate(A, B, C, profile, sc)
        ok = same_bits(got, exp)
        by[kind][0] += int(ok.sum())
        by[kind][1] += ok.size
        matched += int(ok.sum())
        total += ok.size
        if first is None and not ok.all():
            m, n = (int(x) for x in np.argwhere(~ok)[0])
            first = {"generator": kind, "got_full": hex_out([got[m, n]], target)[0],
                     "expected_full": hex_out([exp[m, n]], target)[0],
                     **shrink(target, profile, A[m], B[:, n], C[m, n],
                              scales=(sc[0][m], sc[1][:, n]) if sc else ())}
    return {"cases": total, "matched": matched, "mismatched": total - matched,
            "by_generator": by, "accepted": matched == total, "first_mismatch": first,
            "seconds": round(time.perf_counter() - t0, 3)}
