#!/usr/bin/env python
"""The GPU check: run on a machine with an NVIDIA GPU (an H200 here), in one call, under 8 min.

Usage: python scripts/device_check.py [--out DIR] [--cases N] [--budget SECONDS]
       (DIR defaults to $OUT, then ./device-out; N = 100000 cases per format)

Steps, each written as a JSON record into DIR and summed up in one table printed last:
1. environment: GPU name, compute capability, SM count, driver/CUDA/torch versions;
2. validate the Hopper presets against live ``torch.matmul`` / ``torch._scaled_mm`` outputs on
   N random cases per format (one tensor-core instruction's K per dot product: fp16, bf16 with
   K = 16, tf32 with K = 8, fp8 e4m3/e5m2 with K = 32; the probe suite's generators; C = 0).
   torch returns fp16 / bf16 for fp16 / bf16 inputs: its epilogue rounds the fp32 accumulator,
   which the emulator models with ``out_format`` (through fp32). Every preset of the input
   format with an fp32 output is tried (mma.sync and wgmma readings), with its match count;
3. ``fpscope probe`` of torch.matmul on CUDA for fp16 and bf16 (the probe suite, report kept);
4. reveal torch.sum on CUDA for fp32 n = 4096 (case C7) and torch.matmul's K order
   (1 x 256 x 1 and 64 x 256 x 64);
5. special inputs that only a GPU can settle (:data:`SPECIALS`: a tf32 NaN whose payload lies
   below tf32's fraction bits, where the tensor core's bit truncation, as mmasim and fpscope's
   presets model it, gives Inf, and a kernel that converts with ``cvt.rna.tf32.f32`` first
   would give NaN; Inf * 0 and a sum of -0 products in fp16), fed as raw bit patterns, with
   the live and the preset's output bits side by side.
Without CUDA every GPU step is reported as skipped and the script exits 0, so it can be tested
on any machine (tests/test_device_check.py); ``--fake`` runs step 2 against the emulator itself
(every preset must then match its own outputs), which tests the comparison code.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path

import numpy as np

#: input format -> (K of one instruction, torch input dtype name, output of torch's op)
FORMATS = {"fp16": (16, "float16", "fp16"), "bf16": (16, "bfloat16", "bf16"),
           "tf32": (8, "float32", "fp32"), "fp8_e4m3fn": (32, "float8_e4m3fn", "fp32"),
           "fp8_e5m2": (32, "float8_e5m2", "fp32")}


def _write(out: Path, name: str, obj: dict) -> None:
    from fpscope.record import new_record, write_record

    write_record(new_record("device-check", step=name, **obj), out / f"{name}.json",
                 overwrite=True)


def environment() -> dict:
    env = {"python": platform.python_version(), "platform": platform.platform()}
    try:
        import torch

        env["torch"] = torch.__version__
        env["cuda_available"] = bool(torch.cuda.is_available())
        if torch.cuda.is_available():
            p = torch.cuda.get_device_properties(0)
            env.update(gpu=p.name, compute_capability=f"{p.major}.{p.minor}",
                       sm_count=p.multi_processor_count, cuda=torch.version.cuda,
                       cudnn=torch.backends.cudnn.version(),
                       tf32_matmul=torch.backends.cuda.matmul.allow_tf32)
            try:
                import subprocess

                env["driver"] = subprocess.run(
                    ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                    capture_output=True, text=True, check=False, timeout=20).stdout.strip()
            except (OSError, subprocess.SubprocessError):
                env["driver"] = "unknown"
    except ImportError:
        env["torch"] = None
        env["cuda_available"] = False
    return env


def live_gemm(fmt: str):
    """A function (A, B) -> D float64 running one GEMM on the GPU, or None without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return None
    _, tname, _ = FORMATS[fmt]
    dt = getattr(torch, tname)

    def run(A, B):
        a = torch.from_numpy(A.astype(np.float32)).cuda()
        b = torch.from_numpy(B.astype(np.float32)).cuda()
        if fmt.startswith("fp8"):
            one = torch.ones((), device="cuda", dtype=torch.float32)
            d = torch._scaled_mm(a.to(dt), b.t().contiguous().to(dt).t(), scale_a=one,
                                 scale_b=one, out_dtype=torch.float32)
        elif fmt == "tf32":
            torch.backends.cuda.matmul.allow_tf32 = True
            d = a @ b
        else:
            d = a.to(dt) @ b.to(dt)
        torch.cuda.synchronize()
        return d.float().cpu().numpy().astype(np.float64)

    return run


#: (name, input format, K, a bit patterns, b bit patterns, preset): one dot product each, the
#: other products 0. tf32 inputs are fp32 bit patterns (the tensor core reads the top 19 bits).
SPECIALS = [
    ("tf32 NaN, payload only below tf32's fraction bits", "tf32", 8,
     [0x7F801AA7] + [0] * 7, [0x3F800000] * 8, "hopper-tf32"),
    ("tf32 NaN, quiet bit set", "tf32", 8, [0x7FC00000] + [0] * 7, [0x3F800000] * 8,
     "hopper-tf32"),
    ("fp16 Inf * 0", "fp16", 16, [0x7C00] + [0] * 15, [0x0000] * 16, "hopper-fp16"),
    ("fp16 sum of -0 products", "fp16", 16, [0x8000] * 16, [0x3C00] * 16, "hopper-fp16"),
]


def live_bits(fmt: str):
    """(a bits (K,), b bits (K,)) -> output bit pattern of torch's op on the GPU, the operands
    handed over bit for bit (no float64 round trip, which would quiet a signalling NaN), or
    None without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return None

    def run(a_bits, b_bits):
        if fmt == "tf32":
            torch.backends.cuda.matmul.allow_tf32 = True
            a = torch.from_numpy(np.asarray(a_bits, np.uint32).view(np.float32)[None, :].copy())
            b = torch.from_numpy(np.asarray(b_bits, np.uint32).view(np.float32)[:, None].copy())
            d = (a.cuda() @ b.cuda()).cpu().numpy().view(np.uint32)
        else:
            a = torch.from_numpy(np.asarray(a_bits, np.uint16).view(np.float16)[None, :].copy())
            b = torch.from_numpy(np.asarray(b_bits, np.uint16).view(np.float16)[:, None].copy())
            d = (a.cuda() @ b.cuda()).cpu().numpy().view(np.uint16)
        return int(d[0, 0])

    return run


def preset_bits(fmt: str, preset: str, a_bits, b_bits) -> int:
    """The output bits fpscope's preset gives for the same special input (torch's output
    format: fp32 for tf32, fp16 through the fp32 accumulator for fp16; NaN as the preset's
    canonical NaN)."""
    from fpscope.emulate import matmul
    from fpscope.formats import decode, encode
    from fpscope.profile import PRESETS, resolve_format

    p = PRESETS[preset]
    if fmt == "tf32":  # fp32 words as float32 arrays: a signalling NaN keeps its payload
        a = np.asarray(a_bits, np.uint32).view(np.float32)
        b = np.asarray(b_bits, np.uint32).view(np.float32)
    else:
        a = decode(np.asarray(a_bits, np.uint64), resolve_format(fmt))
        b = decode(np.asarray(b_bits, np.uint64), resolve_format(fmt))
    out = "fp32" if fmt == "tf32" else "fp16"
    d = matmul(a[None, :], b[:, None], profile=p, out_format=None if out == "fp32" else out)
    v = float(d[0, 0])
    fout = resolve_format(out)
    if np.isnan(v):
        return (1 << (fout.bits - 1)) - 1 if fout.bits == 16 else p.nan_bits
    return int(encode(np.array([v]), fout)[0])


def special_cases(run_for) -> dict:
    """Each of :data:`SPECIALS` on ``run_for(fmt)`` (a bits runner) beside the preset."""
    rows = []
    for name, fmt, K, a_bits, b_bits, preset in SPECIALS:
        run = run_for(fmt)
        live = run(a_bits, b_bits)
        mine = preset_bits(fmt, preset, a_bits, b_bits)
        w = 8 if fmt == "tf32" else 4
        rows.append({"case": name, "format": fmt, "K": K, "preset": preset,
                     "a": [f"0x{x:0{w}X}" for x in a_bits], "b": [f"0x{x:0{w}X}" for x in b_bits],
                     "live": f"0x{live:0{w}X}", "preset_output": f"0x{mine:0{w}X}",
                     "same": live == mine})
    return {"cases": rows, "matched": sum(r["same"] for r in rows), "total": len(rows)}


def fake_bits(fmt: str):
    """The emulator's hopper preset standing in for the GPU in :func:`special_cases`."""
    preset = {"tf32": "hopper-tf32", "fp16": "hopper-fp16"}[fmt]
    return lambda a_bits, b_bits: preset_bits(fmt, preset, a_bits, b_bits)


def fake_gemm(fmt: str, preset: str):
    """The emulator standing in for the GPU (``--fake``)."""
    from fpscope.emulate import matmul
    from fpscope.profile import PRESETS

    p = PRESETS[preset]
    out = FORMATS[fmt][2]

    def run(A, B):
        return matmul(A, B, profile=p, out_format=None if out == "fp32" else out,
                      dtype="float64")

    return run


def validate_format(fmt: str, run, cases: int, seed: int = 0) -> dict:
    """Compare every fp32-output preset of ``fmt`` with ``run`` on about ``cases`` outputs."""
    from fpscope.emulate import matmul
    from fpscope.probes.validate import GENERATORS, generate
    from fpscope.profile import PRESETS, resolve_format

    K, _, out = FORMATS[fmt]
    presets = [n for n, p in PRESETS.items() if p.in_format == fmt and p.out_format == "fp32"
               and p.k == K and p.b_format is None  # live GEMMs take a and b in one format
               and p.scale_format is None]  # and no block scales
    fin, f32 = resolve_format(fmt), resolve_format("fp32")
    M = N = 64
    rng = np.random.default_rng(seed)
    matched = dict.fromkeys(presets, 0)
    by_gen: dict = {n: {} for n in presets}
    first: dict = dict.fromkeys(presets)
    total = 0
    gens = [g for g in GENERATORS if g not in ("bits", "overflow")]  # finite, in range
    calls = max(1, -(-cases // (M * N)))
    for i in range(calls):
        kind = gens[i % len(gens)]
        A, B, _ = generate(kind, rng, fin, f32, M, K, N, K)
        live = run(A, B)
        total += live.size
        for name in presets:
            emu = matmul(A, B, profile=PRESETS[name], out_format=None if out == "fp32" else out,
                         dtype="float64")
            ok = (emu.view(np.int64) == live.view(np.int64)) | (np.isnan(emu) & np.isnan(live))
            matched[name] += int(ok.sum())
            g = by_gen[name].setdefault(kind, [0, 0])
            g[0] += int(ok.sum())
            g[1] += ok.size
            if first[name] is None and not ok.all():
                m, n = (int(x) for x in np.argwhere(~ok)[0])
                first[name] = {"a": A[m].tolist(), "b": B[:, n].tolist(),
                               "live": float(live[m, n]), "emulated": float(emu[m, n])}
    return {"format": fmt, "K": K, "torch_output": out, "cases": total, "matched": matched,
            "by_generator": by_gen, "first_mismatch": first}


def probe_cuda(fmt: str) -> dict:
    from fpscope.probes.blackbox import TorchMatmulTarget
    from fpscope.probes.driver import probe

    rep = probe(TorchMatmulTarget(fmt, device="cuda"), fmt)
    return {**rep.to_dict(), "text": rep.to_text()}


def reveal_cuda(name: str, **kw) -> dict:
    from fpscope.reveal import reveal
    from fpscope.summary import summarize
    from fpscope.targets import make_target

    t = make_target(name, device="cuda", **kw)
    try:
        r = reveal(t)
        return {"target": t.spec(), "tree": r.tree.to_json(), "summary": summarize(r.tree),
                "calls": r.stats.calls, "seconds": r.stats.seconds}
    finally:
        t.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or "device-out")
    ap.add_argument("--cases", type=int, default=100_000)
    ap.add_argument("--budget", type=float, default=420.0, help="seconds; later steps are "
                    "skipped once it is spent (default 420)")
    ap.add_argument("--fake", action="store_true", help="the emulator stands in for the GPU")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    rows = []
    env = environment()
    _write(out, "environment", {"environment": env})
    cuda = env.get("cuda_available", False)
    rows.append(("environment", "ok", env.get("gpu", "no CUDA GPU")))

    def step(name, fn, needs_gpu=True):
        if needs_gpu and not cuda:
            rows.append((name, "skipped", "no CUDA"))
            return
        if time.time() - t0 > args.budget:
            rows.append((name, "skipped", "time budget spent"))
            return
        t = time.time()
        try:
            res = fn()
            _write(out, name, {"result": res, "seconds": round(time.time() - t, 2)})
            rows.append((name, "ok", _brief(res)))
        except Exception as exc:  # noqa: BLE001 - one failing step must not lose the others
            _write(out, name, {"error": f"{type(exc).__name__}: {exc}",
                               "traceback": traceback.format_exc()})
            rows.append((name, "error", f"{type(exc).__name__}: {str(exc)[:80]}"))

    for fmt in FORMATS:
        if args.fake:
            from fpscope.profile import PRESETS

            K = FORMATS[fmt][0]
            name = next(n for n, p in PRESETS.items() if p.in_format == fmt
                        and p.out_format == "fp32" and p.k == K and p.arch == "hopper"
                        and p.b_format is None)
            step(f"validate-{fmt}", lambda f=fmt, n=name: validate_format(
                f, fake_gemm(f, n), args.cases), needs_gpu=False)
        else:
            step(f"validate-{fmt}", lambda f=fmt: validate_format(f, live_gemm(f), args.cases))
    for fmt in ("fp16", "bf16"):
        step(f"probe-{fmt}", lambda f=fmt: probe_cuda(f))
    step("specials", lambda: special_cases(fake_bits if args.fake else live_bits),
         needs_gpu=not args.fake)
    step("reveal-torch.sum-fp32-4096", lambda: reveal_cuda("torch.sum", n=4096, dtype="fp32"))
    step("reveal-torch.matmul-1x256x1",
         lambda: reveal_cuda("torch.matmul", shape=(1, 256, 1), dtype="fp16"))
    step("reveal-torch.matmul-64x256x64",
         lambda: reveal_cuda("torch.matmul", shape=(64, 256, 64), dtype="fp16"))
    print(f"\nfpscope device check ({time.time() - t0:.0f} s), records in {out}")
    width = max(len(r[0]) for r in rows)
    for name, status, detail in rows:
        print(f"{name:<{width}}  {status:<8} {detail}")
    (out / "summary.json").write_text(json.dumps({"rows": rows}, indent=2))
    return 0


def _brief(res) -> str:
    if isinstance(res, dict) and "cases" in res and isinstance(res["cases"], list):
        return "; ".join(f"{r['case']}: live {r['live']} preset {r['preset_output']}"
                         for r in res["cases"])[:200]
    if isinstance(res, dict) and "matched" in res and isinstance(res["matched"], dict):
        return "; ".join(f"{n} {m}/{res['cases']}" for n, m in res["matched"].items())
    if isinstance(res, dict) and "summary" in res:
        return str(res["summary"]).splitlines()[0][:100]
    if isinstance(res, dict) and "fingerprint" in res:
        return str(res["fingerprint"])[:100]
    return "done"


if __name__ == "__main__":
    sys.exit(main())
