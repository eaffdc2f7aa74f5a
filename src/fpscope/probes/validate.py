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
from .blackbox import MatrixTarget, ProbeError, hex_in, hex_out

__all__ = ["GENERATORS", "generate", "shrink", "validate"]

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


def _formats(fa: str, fb: str, fout: str) -> str:
    """"fp16 -> fp32" or "fp8_e4m3fn x fp8_e5m2 -> fp32" for messages."""
    return f"{fa} -> {fout}" if fa == fb else f"{fa} x {fb} -> {fout}"


def _emulate(A, B, C, profile: Profile) -> np.ndarray:
    """The profile's GEMM on the vectorised engine (library-level fields included)."""
    return matmul(A, B, C, profile=profile, engine="numpy")


def _mismatch(target: MatrixTarget, profile: Profile, a, b, c) -> tuple[bool, float, float]:
    got = float(target(a[None, :], b[:, None], np.array([[c]]))[0, 0])
    exp = float(_emulate(a[None, :], b[:, None], np.array([[c]]), profile)[0, 0])
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


def shrink(target: MatrixTarget, profile: Profile, a, b, c, max_rounds: int = 6) -> dict:
    """A minimal input that still mismatches, from one mismatching dot product (a, b (K,), c).

    Returns:
        dict: ``products`` [{"k", "a", "b"}] (hex, nonzero products only), ``c``, ``got``,
        ``expected`` (hex), ``nonzero_products``, ``reproducible`` (False: the single dot
        product alone does not mismatch: the op's output depends on the other rows/columns).
    """
    a, b = np.array(a, dtype=np.float64), np.array(b, dtype=np.float64)
    c = float(c)
    fin = _gen_format(resolve_format(profile.in_format))
    fb = _gen_format(resolve_format(profile.b_format or profile.in_format))
    fout = resolve_format(profile.out_format)
    bad, got, exp = _mismatch(target, profile, a, b, c)
    if not bad:
        return {"reproducible": False, "products": _products(target, a, b),
                "c": hex_out([c], target)[0], "nonzero_products": int(np.count_nonzero(a * b))}
    size = len(a) // 2
    while size >= 4:  # long K (a GEMM): drop runs of products first, then single ones
        for lo in range(0, len(a), size):
            part = slice(lo, lo + size)
            if not (a[part] != 0).any():
                continue
            old = a[part].copy(), b[part].copy()
            a[part], b[part] = 0.0, 1.0
            if not _mismatch(target, profile, a, b, c)[0]:
                a[part], b[part] = old
        size //= 2
    for _ in range(max_rounds):
        changed = False
        for i in range(len(a)):
            if a[i] != 0 or np.signbit(a[i]) or not np.isfinite(a[i] * b[i]):
                old = a[i], b[i]
                a[i], b[i] = 0.0, 1.0
                if _mismatch(target, profile, a, b, c)[0]:
                    changed = True
                else:
                    a[i], b[i] = old
        if (c != 0 or math.copysign(1.0, c) < 0) and _mismatch(target, profile, a, b, 0.0)[0]:
            c, changed = 0.0, True
        for i in range(len(a)):
            for arr, fmt in ((a, fin), (b, fb)):
                for v in _simpler(float(arr[i]), fmt):
                    old = arr[i]
                    arr[i] = v
                    if _mismatch(target, profile, a, b, c)[0]:
                        changed = True
                        break
                    arr[i] = old
        for v in _simpler(c, fout):
            if _mismatch(target, profile, a, b, v)[0]:
                c, changed = v, True
                break
        if not changed:
            break
    _, got, exp = _mismatch(target, profile, a, b, c)
    return {"reproducible": True, "products": _products(target, a, b),
            "c": hex_out([c], target)[0], "got": hex_out([got], target)[0],
            "expected": hex_out([exp], target)[0],
            "nonzero_products": int(sum(1 for x, y in zip(a, b) if x * y != 0 or not np.isfinite(x * y)))}


def _products(target, a, b) -> list:
    nz = [i for i in range(len(a)) if a[i] != 0 or np.signbit(a[i]) or not np.isfinite(a[i])]
    return [{"k": i, "a": hex_in([a[i]], target)[0], "b": hex_in([b[i]], target, "b")[0]}
            for i in nz]


def validate(target: MatrixTarget, profile: Profile, cases: int = 2000, seed: int = 0,
             generators=GENERATORS, M: int = 16, N: int = 16, K: int | None = None) -> dict:
    """Compare ``target`` with ``profile`` bit for bit on about ``cases`` random outputs.

    Args:
        target: the black box; its K (if fixed) must equal ``profile.k``.
        profile: the candidate profile (run by the vectorised engine).
        cases: number of outputs to compare (rounded up to whole 16 x 16 calls).
        seed: random seed.
        generators: the generator kinds to cycle through (:data:`GENERATORS`).
        K: products per output (default ``profile.k``; a GEMM with library-level fields is
            validated at the K it was probed at, a multiple of ``split_k * profile.k``).

    Returns:
        dict: ``cases``, ``matched``, ``mismatched``, ``by_generator`` {kind: [matched, total]},
        ``accepted`` (no mismatch), ``first_mismatch`` (shrunk, :func:`shrink`) or None,
        ``seconds``.

    Raises:
        ProbeError: the target fails, or its formats / K do not match the profile.
    """
    t0 = time.perf_counter()
    fa_, fb_ = (resolve_format(f).name for f in profile.operand_formats)
    if (fa_, fb_, resolve_format(profile.out_format).name) != \
            (target.fin.name, target.fb.name, target.out_format):
        raise ProbeError(f"profile {profile.name} is {_formats(fa_, fb_, profile.out_format)}, "
                         f"the target {_formats(target.fin.name, target.fb.name, target.out_format)}")
    K = profile.k if K is None else int(K)
    if target.k is not None and target.k != K:
        raise ProbeError(f"the target takes K = {target.k}, the profile k = {K}")
    rng = np.random.default_rng(seed)
    fin, fout = resolve_format(profile.in_format), resolve_format(profile.out_format)
    fb = resolve_format(profile.b_format) if profile.b_format is not None else None
    per_call = M * N
    calls = max(1, math.ceil(cases / per_call))
    by = {g: [0, 0] for g in generators}
    matched = total = 0
    first = None
    for i in range(calls):
        kind = generators[i % len(generators)]
        A, B, C = generate(kind, rng, fin, fout, M, K, N, profile.block_size, fb)
        got = target(A, B, C)
        exp = _emulate(A, B, C, profile)
        ok = same_bits(got, exp)
        by[kind][0] += int(ok.sum())
        by[kind][1] += ok.size
        matched += int(ok.sum())
        total += ok.size
        if first is None and not ok.all():
            m, n = (int(x) for x in np.argwhere(~ok)[0])
            first = {"generator": kind, "got_full": hex_out([got[m, n]], target)[0],
                     "expected_full": hex_out([exp[m, n]], target)[0],
                     **shrink(target, profile, A[m], B[:, n], C[m, n])}
    return {"cases": total, "matched": matched, "mismatched": total - matched,
            "by_generator": by, "accepted": matched == total, "first_mismatch": first,
            "seconds": round(time.perf_counter() - t0, 3)}
