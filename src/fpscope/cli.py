"""The ``fpscope`` command.

Exit codes (fpscope DESIGN.md): 0 success, 1 a check failed (nondeterminism, not a tree,
replay mismatch), 2 bad usage or input (one line on stderr, never a traceback).
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from rich.markup import escape

EPILOG_REVEAL = """examples:
  fpscope reveal                                  numpy.sum, n = 1024, float32
  fpscope reveal numpy.sum --n 100 --dtype fp16
  fpscope reveal numpy.add.reduce --shape 1000x2 --axis 0 --index 1
  fpscope reveal numpy.cumsum --n 64 --index 40
  fpscope reveal numpy.matmul --n 256 --format json > mm.json
  fpscope reveal torch.matmul --shape 1x512x512 --record mv.json
  fpscope reveal numpy.sum --n 64 --format svg -o sum64.svg
  fpscope reveal mypkg.kernels:my_sum --n 32
  fpscope reveal numpy.sum --n 430 --dtype fp64 --sweep offset=0:64:8
  fpscope reveal torch.matmul --shape 1x1000x1000 --sweep rows=1,2,4,8,16,32,64
  fpscope reveal "emulate.matmul[hopper-fp16]" --shape 2x64x2     a tensor-core GEMM, emulated
  fpscope reveal torch.distributed.all_reduce --world-size 4 --n 4096    gloo, 4 ranks
  fpscope reveal mpi4py.MPI.Comm.Allreduce --world-size 4 \
      --env OMPI_MCA_coll_tuned_use_dynamic_rules=1 --env OMPI_MCA_coll_tuned_allreduce_algorithm=4
  fpscope reveal torch.distributed.all_reduce --world-size 4 --sweep n=256,4096,65536
"""

EPILOG_VERIFY = """examples:
  fpscope reveal numpy.dot --n 500 --record dot.json
  fpscope verify dot.json --samples 1000
"""


EPILOG_PROBE = """examples:
  fpscope probe sim:ampere-fp16 --in-format fp16
  fpscope probe sim:hopper-e4m3 --in-format fp8_e4m3fn --format json > probe.json
  fpscope probe mmasim:ada-e4m3-e5m2 --in-format fp8_e4m3fn --b-format fp8_e5m2
  fpscope probe torch.matmul --in-format fp32 --cases 500
  fpscope probe mypkg.kernels:mma --in-format fp16 --out-format fp32 --k 16 -o my_mma.json
  fpscope probe simgemm:hopper-e4m3,promotion_interval=128 --in-format fp8_e4m3fn --library
  fpscope probe simgemm:hopper-fp16,split_k=4,split_k_order=pairwise --in-format fp16 --library 2048
  fpscope probe simgemm:hopper-e4m3,split_k=2,split_k_format=bf16 --in-format fp8_e4m3fn \
      --library --chain hopper-e4m3
block-scaled (MX / NVFP4) instructions, called D = op(A, B, C, scale_a, scale_b):
  fpscope probe mmasim:blackwell-tcgen05-nvfp4
  fpscope probe sim:rtx-blackwell-mxfp8-e4m3 --cases 100000
  fpscope probe mypkg.kernels:mxfp8_mma --in-format fp8_e4m3fn --k 32 --scale-block-size 32
"""


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit code 2."""


def _check_new_files(force: bool, *paths) -> None:
    """:func:`fpscope.record.check_new_file` for each given path (None: an option not given)."""
    from .record import check_new_file

    for path in paths:
        if path:
            check_new_file(path, force)


def _parse_shape(text: str | None):
    if text is None:
        return None
    try:
        dims = tuple(int(p) for p in text.lower().replace(",", "x").split("x"))
    except ValueError:
        raise UsageError(f"--shape {text!r}: expected integers separated by 'x', e.g. 64x512x64") from None
    if not dims or any(d < 1 for d in dims):
        raise UsageError(f"--shape {text!r}: dimensions must be positive integers")
    return dims


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    p = argparse.ArgumentParser(
        prog="fpscope",
        description="Reveal and reproduce the floating-point accumulation order of black-box kernels.",
        epilog="examples:\n  fpscope reveal\n  fpscope reveal numpy.dot --n 500 --record dot.json\n"
        "  fpscope verify dot.json\n  fpscope targets\n\n'fpscope VERB --help' shows each verb's options.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"fpscope {__version__}")
    sub = p.add_subparsers(dest="verb", metavar="VERB")

    r = sub.add_parser(
        "reveal",
        help="reveal the summation tree of an operation",
        description="Reveal the summation tree (accumulation order) of TARGET with FPRev probes, "
        "check it, detect the accumulator precision and replay it against the live op.",
        epilog=EPILOG_REVEAL,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    r.add_argument("target", nargs="?", default="numpy.sum",
                   help="numpy.sum, numpy.dot, numpy.matmul, torch.matmul, jax.numpy.sum, ... or "
                   "package.module:function (see 'fpscope targets'); default numpy.sum")
    r.add_argument("--n", type=int, help="number of summands (matrix ops: N x N x N); default 1024, "
                   "matrix ops 256")
    r.add_argument("--shape", help="operand shape: MxKxN for matmul, RxC for an axis reduction, KxN "
                   "for x @ A, MxK for A @ x, RxC or RxCxD for a whole-array sum")
    r.add_argument("--dtype", help="fp64, fp32, fp16 or bf16 (default fp32; emulate.matmul[P]: "
                   "the preset's input format)")
    r.add_argument("--layout", default="C", choices=["C", "F", "strided", "T"],
                   help="memory layout (T: a transposed C array)")
    r.add_argument("--offset", type=int, default=0, help="byte offset of the input buffer from a "
                   "64-byte boundary (default 0)")
    r.add_argument("--threads", type=int, help="thread count (BLAS, torch)")
    r.add_argument("--axis", type=int, help="reduction axis of a 2-D input")
    r.add_argument("--index", type=int, help="output index (axis reductions, scans)")
    r.add_argument("--batched", action="store_true",
                   help="the user function takes a (B, n) array of probe rows and returns B "
                   "outputs (as fpscope.batched declares it); built-in targets refuse it")
    r.add_argument("--world-size", type=int, metavar="P",
                   help="collectives: number of ranks, the leaves (default 4); --n is then the "
                   "number of elements per rank (default 4096), each an output")
    r.add_argument("--backend", choices=["gloo", "nccl"],
                   help="torch.distributed collectives: gloo (default, CPU) or nccl (one GPU "
                   "per rank; untested by fpscope's own tests)")
    r.add_argument("--runs", type=int, metavar="N",
                   help="collectives: reveal N times, each with newly started ranks, and count "
                   "the distinct outcomes (for libraries that choose their algorithm per "
                   "communicator); also reports runs whose order changed between calls")
    r.add_argument("--algorithm", default="fprev", choices=["fprev", "basic"],
                   help="fprev (default) or basic (all pairs, for cross-checks)")
    r.add_argument("--format", default="text", choices=["text", "json", "dot", "svg", "png"],
                   help="what to print or write (default text)")
    r.add_argument("-o", "--output", help="write the --format output to this file instead of stdout")
    r.add_argument("--record", help="also write the JSON record to this file")
    r.add_argument("--force", action="store_true", help="replace existing output files")
    r.add_argument("--samples", type=int, default=100,
                   help="random inputs per distribution for the replay check (default 100; 0 skips)")
    r.add_argument("--seed", type=int, default=0, help="seed of pivots and random inputs")
    r.add_argument("--quiet", action="store_true", help="no progress bar")
    r.add_argument("--sweep", metavar="NAME=VALUES",
                   help="reveal once per value and report where the tree or the node arithmetic "
                   "changes; NAME is offset, rows (M of a matmul shape), n, threads, layout, index, "
                   "dtype, world_size (collectives) or env:VARIABLE (VALUES are then strings: env:OPENBLAS_CORETYPE="
                   "Haswell,Sandybridge); VALUES is a comma list or start:stop:step")
    r.add_argument("--env", action="append", default=None, metavar="NAME=VALUE",
                   help="run the op in a child process with this environment variable "
                   "(repeatable; e.g. OPENBLAS_CORETYPE=Sandybridge); the record keeps it")
    r.add_argument("--position", metavar="I,J", help="reveal one output position: I,J of a "
                   "matrix op (its own tree, one call per probe), or one flat index E of "
                   "numpy.add.reduce / numpy.cumsum or one element E of a collective "
                   "(-o/--output is the output file)")

    v = sub.add_parser(
        "verify",
        help="replay a record's tree against the live target",
        description="Rebuild the target of RECORD, replay its tree on random inputs (uniform, "
        "normal, wide exponent range, cancellation-heavy) and count bit-exact matches. "
        "Exit code 1 if any output differs.",
        epilog=EPILOG_VERIFY,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    v.add_argument("record", help="a record written by 'fpscope reveal --record'")
    v.add_argument("--samples", type=int, default=250, help="inputs per distribution (default 250)")
    v.add_argument("--seed", type=int, default=1)
    v.add_argument("--env", action="append", default=None, metavar="NAME=VALUE",
                   help="run the op in a child process with this environment variable "
                   "(repeatable); replaces the record's own env")
    v.add_argument("--format", default="text", choices=["text", "json"])

    pb = sub.add_parser(
        "probe",
        help="infer the node arithmetic of a matrix op (block size, F, rounding, ...)",
        description="Infer the node arithmetic of TARGET, an operation D = op(A, B, C) (a "
        "matrix-unit instruction or a GEMM), with crafted probes: determinism, block structure, "
        "kept bits F, alignment, step rounding, specials, subnormals, e_zero, tf32 operand "
        "conversion; for a block-scaled (MX / NVFP4) instruction, D = op(A, B, C, scale_a, "
        "scale_b), also the scale block size, the scale format and how the scales enter the "
        "node (the other probes run at unit scales). The profile found is then validated bit for "
        "bit against the op on random inputs (--cases; random scales too). Exit code 1 if the op "
        "does not fit a fused-block model or the validation finds a mismatch.",
        epilog=EPILOG_PROBE, formatter_class=argparse.RawDescriptionHelpFormatter)
    pb.add_argument("target", help="sim:PRESET (a simulated preset, see 'fpscope profiles'; "
                    "block-scaled presets take scales), "
                    "simgemm:PRESET[,split_k=S,split_k_order=serial|pairwise,split_k_format=F,"
                    "promotion_interval=P] (a simulated GEMM of any K with library-level fields), "
                    "mmasim:PRESET (mmasim's model of that instruction, the block-scaled MX / "
                    "NVFP4 ones included), numpy.matmul (the CPU BLAS), torch.matmul (CUDA when "
                    "available; torch.matmul:cpu to force the CPU), or package.module:function, "
                    "a callable (A, B, C) -> D of float64 arrays ((A, B, C, scale_a, scale_b) -> "
                    "D with --scale-block-size)")
    pb.add_argument("--in-format", help="format of A and B (fp16, bf16, tf32, fp8_e4m3fn, "
                    "fp32, ...); default: the target's (sim:, mmasim:), fp32 (numpy.matmul, "
                    "torch.matmul); required for package.module:function")
    pb.add_argument("--b-format", help="format of B where it differs from A's (mixed-input "
                    "instructions, e.g. --in-format fp8_e4m3fn --b-format fp8_e5m2)")
    pb.add_argument("--out-format", help="format of C and D (default: the target's; callables: "
                    "fp32)")
    pb.add_argument("--k", type=int, help="K of the probe calls for targets that take any K "
                    "(default 32); a callable with a fixed K needs its K here")
    pb.add_argument("--scale-block-size", type=int, metavar="S", help="a block-scaled callable: "
                    "it takes scale_a (M, K/S) and scale_b (K/S, N), one scale per S elements of "
                    "K (MX: 32, NVFP4: 16); sim: and mmasim: targets know theirs")
    pb.add_argument("--scale-format", choices=["e8m0", "ue4m3"], help="with --scale-block-size: "
                    "the scale format the callable takes (every scale is checked against it); "
                    "left out, the callable gets any float64 scale and the probes find the "
                    "format")
    pb.add_argument("--library", nargs="?", type=int, const=1024, default=None, metavar="K",
                    help="also probe the library level of a GEMM (split-K slices, their order "
                    "and partial-sum format, FP8 promotion interval) on calls of K products "
                    "(default 1024, a multiple of --k); the profile then carries those fields "
                    "and is validated at K")
    pb.add_argument("--chain", metavar="PROFILE", help="with --library: the chains' arithmetic "
                    "(a preset name or an fpscope.profile/1 JSON file) instead of probing the "
                    "instruction level; needed when split-K partials are rounded to a narrow "
                    "format")
    pb.add_argument("--cases", type=int, default=2000,
                    help="random outputs of the closed-loop validation (default 2000, rounded up "
                    "to whole 16 x 16 calls; 0 skips)")
    pb.add_argument("--seed", type=int, default=0)
    pb.add_argument("--format", default="text", choices=["text", "json", "html"],
                    help="print the report as text (default), JSON or a static HTML page")
    pb.add_argument("--record", help="also write an fpscope.record/2 record (kind 'probe': "
                    "report, profile, environment) to this file")
    pb.add_argument("-o", "--output", help="write the profile found (fpscope.profile/1 JSON) "
                    "to this file")
    pb.add_argument("--force", action="store_true", help="replace an existing -o file")

    sub.add_parser("targets", help="list the built-in target names",
                   description="List the built-in target names.")

    pr = sub.add_parser(
        "profiles", help="list the matrix-unit arithmetic presets",
        description="List the node-arithmetic presets of matrix-unit instructions, with their "
        "status: validated (reproduces recorded hardware outputs bit for bit, evidence named) or "
        "experimental. F: fraction bits of the alignment window ('exact': never cuts; 'F/F2': "
        "AMD CDNA3's two-stage node; '-': AMD CDNA2's pairwise node, no window).",
        epilog="examples:\n  fpscope profiles\n  fpscope profiles --format json",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    pr.add_argument("--format", default="text", choices=["text", "json"])

    ft = sub.add_parser(
        "fit", help="find the profiles that reproduce recorded (a, b, c, d) vectors",
        description="Search the profile space for the node arithmetic that reproduces every "
        "recorded output bit of one instruction. RECORDING is a folder in the hw-vectors layout "
        "(<GPU>/<format>/a_..., b_..., c_..._fp32.txt, d_..._<out>.txt) or an .npz file with "
        "arrays a (n, K), b (n, K), c (n,), d (n,) output bit patterns, and 0-d strings "
        "in_format and out_format. Exit 0 when a profile reproduces every sample, 1 when none "
        "does, 2 on bad input.",
        epilog="examples (FPSCOPE_HW_VECTORS: a copy of the Khattak-Mikaitis recordings, "
        "README 'Recorded hardware vectors'):\n"
        "  fpscope fit \"$FPSCOPE_HW_VECTORS/H100/fp16\" -o h100.json\n"
        "  fpscope fit \"$FPSCOPE_HW_VECTORS/A100/fp16\" --out fp16 --no-presets\n"
        "  fpscope fit my_device.npz --format json",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ft.add_argument("recording", help="hw-vectors folder or .npz file")
    ft.add_argument("--out", choices=["fp32", "fp16"], help="which recorded output of a folder "
                    "to fit (default fp32 where recorded)")
    ft.add_argument("--no-presets", action="store_true", help="do not start from the presets "
                    "(search the grid as for an unknown device)")
    ft.add_argument("--format", default="text", choices=["text", "json"])
    ft.add_argument("-o", "--output", help="write the best profile (JSON) here")
    ft.add_argument("--record", help="also write an fpscope.record/2 record (kind 'fit': the "
                    "result, the profile, the environment) to this file")
    ft.add_argument("--force", action="store_true", help="replace an existing output file")

    df = sub.add_parser(
        "diff", help="compare two trees (reveal records) or two profiles",
        description="Compare A and B: reveal records (tree and node arithmetic), bare tree JSON "
        "files, profile JSON files or preset names. Prints the verdict, the smallest differing "
        "subtree, the first differing parameter and an input that gives different output bits "
        "under the two (checked by replay or by the emulator). Exit 0 when they agree, 1 when "
        "they differ, 2 on bad input.",
        epilog="examples:\n  fpscope reveal numpy.sum --n 64 --record a.json\n"
        "  OPENBLAS_NUM_THREADS=1 fpscope reveal numpy.sum --n 64 --record b.json\n"
        "  fpscope diff a.json b.json\n  fpscope diff ampere-fp16 hopper-fp16 --format json",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    df.add_argument("a", help="reveal record, tree JSON, profile JSON or preset name")
    df.add_argument("b", help="the same kinds as A")
    df.add_argument("--format", default="text", choices=["text", "json"])
    df.add_argument("--cases", type=int, default=4096,
                    help="random cases searched for a witness of two profiles (default 4096)")
    df.add_argument("--seed", type=int, default=0)

    gt = sub.add_parser(
        "gate", help="re-reveal (re-probe) a baseline record's target; fail when its order changed",
        description="Regression gate: rebuild the target of BASELINE (a reveal record; a probe "
        "record is re-probed and its profile compared instead) from its "
        "\"target\" spec, reveal its tree and node arithmetic live (node formats, how each "
        "product enters: rounded or fused), compare them with the baseline (as 'fpscope diff'), "
        "and run the live op on generated inputs (uniform, normal, wide exponent range, "
        "cancellation-heavy; --samples each, fixed seed) against the baseline record's replay "
        "on the same inputs. Policies: bitwise (default) passes only when tree and arithmetic "
        "are the same AND every live output has the baseline replay's bits (same structure but "
        "other bits: 'unmodelled difference'); tolerant passes when every live output is within "
        "--units units of u*sum|terms| of the baseline replay (u = 2^-p, the unit roundoff of the "
        "output format; the terms are the summands or the exact products of that output): a "
        "reordering or an FMA change stays within a few units, a narrowed accumulator does not; "
        "record never fails and writes the live record (--record, default BASELINE with "
        ".new.json, never replaced without --force). --env NAME=VALUE runs the live op in a "
        "child process with that environment (OPENBLAS_CORETYPE, MKL_CBWR, XLA_FLAGS, "
        "OMP_NUM_THREADS, ...). Exit 0 pass, 1 gate failed, 2 bad input.",
        epilog="examples:\n"
        "  fpscope reveal numpy.sum --n 1024 --record base.json\n"
        "  fpscope gate base.json                          same tree, arithmetic and bits, or exit 1\n"
        "  fpscope gate base.json --policy tolerant --units 4\n"
        "  fpscope gate base.json --env OPENBLAS_CORETYPE=Sandybridge\n"
        "  fpscope gate base.json --policy record          writes base.new.json\n"
        "  fpscope gate base.json --target mypkg.kernels:my_sum_v2 --format json",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    gt.add_argument("baseline", help="a record written by 'fpscope reveal --record'")
    gt.add_argument("--target", help="target name to reveal instead of the baseline's (same "
                    "probe conditions)")
    gt.add_argument("--policy", default="bitwise", choices=["bitwise", "tolerant", "record"],
                    help="bitwise (default), tolerant or record (see above)")
    gt.add_argument("--units", "--ulps", dest="units", type=float, default=4.0,
                    help="tolerant: largest accepted |live - baseline replay|, in units of "
                    "u*sum|terms| (default 4; --ulps is the old spelling)")
    gt.add_argument("--env", action="append", default=None, metavar="NAME=VALUE",
                    help="run the live op in a child process with this environment variable "
                    "(repeatable); replaces the baseline record's own env (collectives: the "
                    "ranks start with the baseline's algorithm variables, changed by these)")
    gt.add_argument("--samples", type=int, default=64,
                    help="random inputs per distribution for the live replay check and the "
                    "accuracy measurement (default 64)")
    gt.add_argument("--record", help="write the live reveal record here (policy record: default "
                    "BASELINE.new.json next to the baseline)")
    gt.add_argument("--force", action="store_true", help="replace an existing --record file")
    gt.add_argument("--format", default="text", choices=["text", "json"])

    em = sub.add_parser(
        "emulate", help="run a GEMM with a matrix unit's arithmetic on the CPU",
        description="D = A @ B + C computed as a chain of matrix-unit instructions of PROFILE, "
        "bit for bit. A, B, C are .npy files of floats whose values must be exactly "
        "representable in the profile's input (A, B) and output (C) formats (.npy cannot hold "
        "bf16 or fp8: store such values as float32, which holds them exactly); D is written in "
        "the output format (float32 or float16). Block-scaled profiles (MXFP8/6/4: e8m0 "
        "scales per 32 elements of K; NVFP4: ue4m3 scales per 16) also take the scales: "
        "SA (M, K/s) and SB (K/s, N) .npy files of scale values (powers of two for e8m0, NaN "
        "allowed), s the profile's scale block size.",
        epilog="examples:\n  fpscope emulate --profile hopper-fp16 --a A.npy --b B.npy -o D.npy\n"
        "  fpscope emulate --profile my_profile.json --a A.npy --b B.npy --c C.npy -o D.npy\n"
        "  fpscope emulate --profile blackwell-tcgen05-nvfp4 --a A.npy --b B.npy "
        "--scale-a SA.npy --scale-b SB.npy -o D.npy",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    em.add_argument("--profile", required=True, help="a preset name (fpscope profiles) or a "
                    "profile JSON file")
    em.add_argument("--a", required=True, help="A, an (M, K) .npy file")
    em.add_argument("--b", required=True, help="B, a (K, N) .npy file")
    em.add_argument("--c", help="C, an (M, N) .npy file (default zeros)")
    em.add_argument("--scale-a", help="block-scaled profiles: A's scales, an (M, K/s) .npy file")
    em.add_argument("--scale-b", help="block-scaled profiles: B's scales, a (K/s, N) .npy file")
    em.add_argument("-o", "--output", required=True, help="where to write D (.npy)")
    em.add_argument("--pad", action="store_true", help="pad K with zero products up to a "
                    "multiple of the instruction's k (not always equal to a shorter dot product)")
    em.add_argument("--engine", default="auto", choices=["auto", "numba", "numpy"],
                    help="numba: compiled tiled kernel; numpy: vectorised engine; auto (default): "
                    "numba for large GEMMs whose profile it runs (same bits either way)")
    em.add_argument("--threads", type=int, help="threads of the numba engine (default: all cores)")
    em.add_argument("--alpha", type=float, default=1.0, help="epilogue scale (an fp32 value): "
                    "D = round(alpha * acc), through fp32 (default 1)")
    em.add_argument("--out-format", choices=["fp32", "fp16", "bf16"], help="epilogue output "
                    "type (rounded through fp32, as cuBLAS does; bf16 is stored as float32)")
    em.add_argument("--operand-conversion", choices=["RNA", "RNE", "truncate"],
                    help="convert fp32 operands to the profile's tf32, bf16 or fp16 inputs: RNA "
                    "(nearest, ties away: cuBLAS TF32), RNE (ties to even) or truncate "
                    "(toward zero); overrides the profile's (fpscope profiles, column "
                    "'conversion'; without one, operands must be values of the input format)")
    em.add_argument("--force", action="store_true", help="replace an existing output file")
    em.add_argument("--quiet", action="store_true", help="no progress bar")

    mx = sub.add_parser(
        "matrix", help="reveal a suite of ops x dtypes x sizes x layouts x threads; HTML report",
        description="Reveal the summation tree of every cell of a suite (sum, dot and matmul "
        "x dtypes x sizes x layouts x thread counts) on numpy (numpy.dot/matmul: its BLAS), and "
        "on torch and jax (CPU) when they import, and collectives (all_reduce across ranks with "
        "torch.distributed + gloo, and MPI Allreduce when mpi4py and mpiexec are found; world "
        "size is a condition); write one reveal record per cell into "
        "DIR/cells/, a manifest DIR/matrix.json and a static HTML report DIR/index.html (works "
        "offline): which cells share a tree, where the libraries agree, and how the tree changes "
        "between neighbouring cells (rows of a matmul, threads, layout, dtype, library, n). "
        "Exit 0 when every cell passed its checks, 1 when a cell's check failed (the report is "
        "still written), 2 on bad input (e.g. DIR exists and is not empty without --force).",
        epilog="examples:\n  fpscope matrix -o matrix-quick                 the quick suite "
        "(seconds)\n  fpscope matrix --suite full -o matrix-full --force\n"
        "  fpscope matrix --libraries numpy,torch -o m && xdg-open m/index.html",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    mx.add_argument("--suite", default="quick", choices=["quick", "full"],
                    help="quick (default; about 40 cells, seconds) or full (about 500 cells, minutes)")
    mx.add_argument("-o", "--output", required=True, metavar="DIR",
                    help="output folder (created; must be empty unless --force)")
    mx.add_argument("--force", action="store_true",
                    help="write into an existing, non-empty DIR, replacing an earlier run's files")
    mx.add_argument("--libraries", help="comma list of numpy, torch, jax and the collective "
                    "backends gloo, mpi (default: all that work here; the others are skipped "
                    "with a note)")
    mx.add_argument("--samples", type=int, default=32,
                    help="random inputs per distribution of each replay check (default 32)")
    mx.add_argument("--seed", type=int, default=0)
    mx.add_argument("--format", default="text", choices=["text", "json"],
                    help="what to print when done: a table (text) or the manifest (json)")
    mx.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


# ----------------------------------------------------------------------------------------------


def _make_target(args):
    from .targets import make_target

    shape = _parse_shape(args.shape)
    n = args.n
    if n is not None and n < 1:
        raise UsageError(f"--n must be at least 1, got {n}")
    if n is None and shape is None:
        from .api import default_n

        n = default_n(args.target)
    extra = {k: getattr(args, k) for k in ("world_size", "backend")
             if getattr(args, k, None) is not None}
    if extra.get("world_size", 2) < 2:
        raise UsageError(f"--world-size must be 2 or more, got {extra['world_size']}")
    if _is_collective(args.target) and not getattr(args, "quiet", True) and sys.stderr.isatty():
        print(f"starting {extra.get('world_size', 4)} ranks of {args.target} ...",
              file=sys.stderr)
    return make_target(args.target, n=n, shape=shape, dtype=args.dtype, layout=args.layout,
                       offset=args.offset, threads=args.threads, axis=args.axis, index=args.index,
                       env=_parse_env(getattr(args, "env", None)),
                       batched=True if getattr(args, "batched", False) else None,
                       output=_parse_position(getattr(args, "position", None)), **extra)


def _is_collective(name: str) -> bool:
    return isinstance(name, str) and name.startswith(("torch.distributed.", "dist.", "mpi4py.",
                                                      "MPI."))


def _parse_position(text):
    """``"I,J"`` -> (I, J); ``"E"`` -> E; None stays None."""
    if text is None:
        return None
    try:
        parts = [int(p) for p in text.split(",")]
    except ValueError:
        raise UsageError(f"--position {text!r}: expected I,J or E (integers)") from None
    if len(parts) not in (1, 2) or min(parts) < 0:
        raise UsageError(f"--position {text!r}: expected I,J or E (non-negative integers)")
    return parts[0] if len(parts) == 1 else tuple(parts)


def _parse_env(items) -> dict | None:
    """``["NAME=VALUE", ...]`` -> dict (None when no --env was given)."""
    if not items:
        return None
    out = {}
    for item in items:
        name, eq, value = item.partition("=")
        if not eq or not name or not name.replace("_", "").isalnum() or name[0].isdigit():
            raise UsageError(f"--env {item!r}: expected NAME=VALUE with NAME a variable name")
        out[name] = value
    return out


def _progress(quiet: bool, n: int):
    """A rich progress bar on stderr (a terminal only), shown one second after this call
    whether or not a probe has been answered by then: before the first answer a large reveal
    checks the op and builds its first probe rows (seconds at n = 10^7), which the bar says;
    the reveal then reports every op call (``Prober.heartbeat``). (callback, finish)."""
    if quiet or not sys.stderr.isatty():
        return None, lambda: None
    import threading

    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    est = max(n, int(n * math.log2(max(n, 2)) / 2))
    lock = threading.Lock()
    state = {"prog": None, "task": None, "done": 0, "over": False}

    def describe(done):
        return "revealing" if done else f"preparing the probes (n = {n:,}: checks, probe rows)"

    def show():
        with lock:
            if state["over"] or state["prog"] is not None:
                return
            prog = Progress(TextColumn("{task.description}"), BarColumn(),
                            TextColumn("{task.completed} probes"), TimeElapsedColumn(),
                            console=Console(stderr=True), transient=True)
            state["task"] = prog.add_task(describe(state["done"]), total=est,
                                          completed=min(state["done"], est))
            prog.start()
            state["prog"] = prog

    timer = threading.Timer(1.0, show)
    timer.daemon = True
    timer.start()

    def cb(done, _n):
        with lock:
            state["done"] = max(done, state["done"])
            if state["prog"] is not None:
                state["prog"].update(state["task"], completed=min(state["done"], est),
                                     description=describe(state["done"]))

    def finish():
        timer.cancel()
        with lock:
            state["over"] = True
            if state["prog"] is not None:
                state["prog"].stop()

    return cb, finish


_SWEEPABLE = ("offset", "rows", "n", "threads", "layout", "index", "dtype", "world_size")


def _parse_sweep(text: str):
    name, sep, vals = text.partition("=")
    name = name.strip()
    is_env = name.startswith("env:") and _parse_env([name[4:] + "=x"]) is not None
    if not sep or (name not in _SWEEPABLE and not is_env):
        raise UsageError(f"--sweep {text!r}: expected NAME=VALUES with NAME one of "
                         f"{', '.join(_SWEEPABLE)} or env:VARIABLE")
    if name in ("layout", "dtype") or is_env:
        values = [v.strip() for v in vals.split(",") if v.strip()]
    else:
        try:
            if ":" in vals:
                parts = [int(p) for p in vals.split(":")]
                if len(parts) == 3 and parts[2] == 0:
                    raise UsageError(f"--sweep {text!r}: the step must not be 0")
                values = list(range(*parts))
            else:
                values = [int(v) for v in vals.split(",") if v.strip()]
        except (ValueError, TypeError):
            raise UsageError(f"--sweep {text!r}: values must be integers (a,b,c or start:stop:step)") from None
    if not values:
        raise UsageError(f"--sweep {text!r}: no values")
    return name, values


def cmd_sweep(args) -> int:
    import copy

    from rich.console import Console

    from .summary import summarize
    from .sweep import sweep
    from .targets.base import TargetError

    name, values = _parse_sweep(args.sweep)
    if args.format in ("svg", "png", "dot"):
        raise UsageError(f"--sweep writes a table or JSON, not --format {args.format}")
    _check_new_files(args.force, args.record, args.output)

    def build(v):
        a = copy.copy(args)
        if name == "rows":
            shape = _parse_shape(args.shape) or (args.n or 256,) * 3
            if len(shape) != 3:
                raise UsageError("--sweep rows=... needs a matmul shape MxKxN (or --n)")
            a.shape, a.n = f"{v}x{shape[1]}x{shape[2]}", None
        elif name.startswith("env:"):
            a.env = list(args.env or []) + [f"{name[4:]}={v}"]
        else:
            setattr(a, name, v)
        try:
            return _make_target(a)
        except UsageError as exc:  # a bad value gets an error row; the sweep goes on
            raise TargetError(str(exc)) from None

    res = sweep(name, values, build, seed=args.seed, replay_samples=args.samples)
    from .record import dumps, new_record, write_record

    rec = new_record("sweep", target={"name": args.target}, sweep=res.to_json(),
                     summaries={k: summarize(t, spec=res.specs.get(k))
                                for k, t in res.trees.items()})
    if args.record:
        write_record(rec, args.record, overwrite=args.force)
    # exit as a single reveal would for its worst value: 2 bad input, 1 a failed check
    failures = {row.get("failure") for row in res.rows if row["error"]}
    code = 2 if "input" in failures else 1 if failures else 0
    if args.format == "json":
        _emit(dumps(rec), args)
        return code
    if args.output:
        with open(args.output, "w", encoding="utf-8") as fh:
            _sweep_text(Console(file=fh, width=120), res, name, args.target)
    else:
        _sweep_text(_console(), res, name, args.target)
    return code


def _sweep_text(console, res, name: str, target: str) -> None:
    from rich.table import Table

    from .summary import summarize
    from .sweep import classes_text

    table = Table(title=f"{escape(target)}: tree and node arithmetic per {name}")
    table.add_column(name)
    table.add_column("tree")
    table.add_column("arithmetic")
    table.add_column("note")
    for row in res.rows:
        tree = row["tree_id"] or "-"
        if row.get("classes"):  # outputs use several trees: all of them, in position order
            tree = classes_text(row)
        table.add_row(str(row["value"]), tree, row.get("arithmetic_id") or "-",
                      escape(row["error"] or ""))
    console.print(table)
    for tid, tree in res.trees.items():
        console.print(f"[bold]{tid}[/bold]: {escape(summarize(tree, spec=res.specs.get(tid)))}",
                      highlight=False)
    for aid, arith in res.arithmetics.items():
        console.print(f"[bold]{aid}[/bold]: {escape(arith.describe())}", highlight=False)
    failed = sum(1 for row in res.rows if row["error"])
    if res.changes:
        for ch in res.change_details:
            what = []
            if ch["tree"]:
                what.append(f"tree {ch['tree']}")
            if ch["arithmetic"]:
                p = ch["arithmetic"]
                what.append(f"arithmetic: {p['name']} {p['a']} -> {p['b']}")
            console.print(f"changes between {ch['from']} -> {ch['to']}: {escape('; '.join(what))}",
                          highlight=False)
    elif failed == len(res.rows):
        console.print(f"no value of {name} was revealed", highlight=False)
    elif failed:
        console.print(f"the tree and the node arithmetic do not change with {name} among the "
                      f"{len(res.rows) - failed} values revealed ({failed} failed)",
                      highlight=False)
    else:
        console.print(f"the tree and the node arithmetic do not change with {name}",
                      highlight=False)


def cmd_reveal(args) -> int:
    if args.samples < 0:
        raise UsageError(f"--samples must be 0 or more, got {args.samples}")
    if args.sweep:
        if args.runs:
            raise UsageError("--runs and --sweep do not combine; sweep first, then repeat a "
                             "value with --runs")
        return cmd_sweep(args)
    if args.runs is not None:
        return cmd_runs(args)

    from . import api
    from .record import dumps, write_record

    _check_new_files(args.force, args.record, args.output)
    if args.format in ("svg", "png") and not args.output:
        raise UsageError(f"--format {args.format} needs -o FILE")
    if args.format in ("svg", "png"):
        from .render import _check_dot

        _check_dot()  # before the probes, not after them
    target = _make_target(args)
    try:
        cb, finish = _progress(args.quiet, target.n)
        try:
            keep = bool(args.record or args.format == "json")  # a record leaves the process
            found = api.reveal(target, algorithm=args.algorithm, seed=args.seed, progress=cb,
                               samples=args.samples, check=False, accuracy=keep,
                               environment=keep)
        finally:
            finish()
    finally:
        target.close()
    res, record, failure = found.result, found.record, found.failure
    if args.record:
        write_record(record, args.record, overwrite=args.force)
    fmt = args.format
    if fmt == "json":
        _emit(dumps(record), args)
    elif fmt in ("svg", "png", "dot"):
        from .render import render, to_dot

        if args.output:
            render(res.tree, args.output, fmt, overwrite=args.force)
            print(f"{fmt} picture of the tree written to {args.output}", file=sys.stderr)
        elif fmt == "dot":
            sys.stdout.write(to_dot(res.tree))
        else:
            raise UsageError(f"--format {fmt} needs -o FILE")
    else:
        _print_text(record, res.tree, args)
    if failure is not None:
        raise failure
    return 0


def cmd_runs(args) -> int:
    """``fpscope reveal COLLECTIVE --runs N``: the distribution of outcomes over N reveals."""
    from .collectives.runs import reveal_runs
    from .record import dumps, new_record, write_record

    if args.runs < 1:
        raise UsageError(f"--runs must be 1 or more, got {args.runs}")
    if not _is_collective(args.target):
        raise UsageError("--runs applies to collectives (torch.distributed.*, mpi4py.MPI.Comm.*): "
                         "other targets run in this process, where a repeat finds the same order")
    if args.format not in ("text", "json"):
        raise UsageError(f"--runs writes a table or JSON, not --format {args.format}")
    _check_new_files(args.force, args.record, args.output)
    first = _make_target(args)  # bad options fail here, before N runs
    spec = first.spec()
    pending = [first]

    def build():
        return pending.pop() if pending else _make_target(args)

    def progress(i):
        if not args.quiet and sys.stderr.isatty():
            print(f"run {i + 1} of {args.runs} ...", file=sys.stderr)

    try:
        res = reveal_runs(build, args.runs, seed=args.seed, replay_samples=args.samples,
                          progress=progress)
    finally:
        for t in pending:
            t.close()
    rec = new_record("runs", target=spec, runs=res)
    if args.record:
        write_record(rec, args.record, overwrite=args.force)
    if args.format == "json":
        _emit(dumps(rec), args)
    else:
        lines = [f"{args.target}: {res['runs']} runs with newly started ranks"]
        for k, o in enumerate(res["outcomes"]):
            trees = (f"{len(o['classes'])} trees by element" if o["classes"] else "one tree")
            lines.append(f"  outcome {k + 1}: {o['count']} of {res['runs']} runs ({trees}); "
                         f"element 0: {o['summary']}")
        for f in res["failed"]:
            lines.append(f"  not revealed: {f['count']} of {res['runs']} runs: {f['error']}")
        lines.append("the same outcome every run" if res["deterministic"] else
                     "the outcome varies between runs" if len(res["outcomes"]) > 1 else
                     "some runs could not be revealed")
        text = "\n".join(lines) + "\n"
        if args.output:
            with open(args.output, "w", encoding="utf-8") as fh:
                fh.write(text)
        else:
            sys.stdout.write(text)
    return 0 if res["deterministic"] else 1


def _emit(text: str, args) -> None:
    if args.output:
        from pathlib import Path

        _check_new_files(args.force, args.output)
        Path(args.output).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)


def _console():
    """stdout console; 120 columns when piped (rich would cut at 80)."""
    from rich.console import Console

    return Console() if sys.stdout.isatty() else Console(width=120)


def _print_text(record: dict, tree, args) -> None:
    from rich.console import Console

    from .reveal_text import write_reveal_text

    if args.output:
        with open(args.output, "w", encoding="utf-8") as fh:
            write_reveal_text(Console(file=fh, width=120), record, tree, args.record)
    else:
        write_reveal_text(_console(), record, tree, args.record)


def cmd_verify(args) -> int:
    from . import api
    from .gate import GateError

    if args.samples < 1:
        raise UsageError(f"--samples must be at least 1, got {args.samples}")
    try:
        rep = api.verify(args.record, samples=args.samples, seed=args.seed,
                         env=_parse_env(args.env))
    except GateError as exc:
        raise UsageError(str(exc)) from None
    if args.format == "json":
        sys.stdout.write(json.dumps(rep, indent=2) + "\n")
    else:
        leaves = f"ranks={rep['n']}" if rep.get("rank_identity") else f"n={rep['n']}"
        print(f"{rep['target']} {leaves}: {rep['matched']}/{rep['samples']} outputs "
              f"bit-exact ({rep['accumulator']} accumulator)")
        if rep["arithmetic"] is not None:
            print(f"  arithmetic: {rep['arithmetic']}")
            if not rep["products_compared"]:
                print("  note: the record has no product entries (an fpscope.record/1 record): "
                      "inputs were x * 1, so how products enter (rounded or FMA) was not "
                      "compared; reveal again to record it")
        for kind, d in rep["by_distribution"].items():
            print(f"  {kind:8s} {d['matched']}/{d['samples']}")
        if rep.get("rank_identity"):
            print(f"  ranks: {rep['rank_identity']}")
        fm = rep.get("first_mismatch")
        if not rep["bit_exact"] and fm:
            print(f"  first mismatch ({fm['distribution']}): expected {fm['expected']}, got {fm['got']}")
    return 0 if rep["bit_exact"] else 1


def cmd_profiles(args) -> int:
    from .profile import PRESETS

    if args.format == "json":
        sys.stdout.write(json.dumps({k: json.loads(p.to_json()) for k, p in PRESETS.items()},
                                    indent=2) + "\n")
        return 0
    from rich import box
    from rich.table import Table

    table = Table(title="matrix-unit presets", box=box.SIMPLE_HEAD, pad_edge=False,
                  padding=(0, 1), collapse_padding=True)
    # names are never cut or folded (they are what --profile takes); evidence wraps instead
    table.add_column("name", no_wrap=True, min_width=max(len(n) for n in PRESETS))
    # inputs may wrap after a comma (block scales) so that the columns fit in 120
    table.add_column("inputs", min_width=21)
    # conversion: how fp32 operands reach tf32 / bf16 / fp16 inputs (Profile.operand_conversion;
    # "-": operands must be values of the input format; emulate --operand-conversion overrides)
    for col in ("output", "products", "F", "step", "conversion", "status"):
        table.add_column(col, no_wrap=True)
    table.add_column("evidence (hw-vectors)", min_width=26)
    for p in PRESETS.values():
        steps = p.k // p.block_size
        shape = f"{p.block_size}" + (f" x {steps}" if steps > 1 else "")
        inputs = p.in_format if p.b_format is None else f"{p.in_format} x {p.b_format}"
        if p.scale_format is not None:
            inputs += f", {p.scale_format}/{p.scale_block_size}"
        F = ("exact" if p.lossless else "-" if p.node == "pairwise"  # pairwise: no window
             else f"{p.frac_bits}/{p.frac_bits2}" if p.node == "two-stage" else str(p.frac_bits))
        table.add_row(p.name, inputs, p.out_format, shape, F,
                      " ".join(p.step_rounding), p.operand_conversion or "-", p.status,
                      escape(p.evidence.removeprefix("hw-vectors ").replace(": ", " ") or "-"))
    _console().print(table)
    return 0


def _load_profile(text: str):
    from .profile import load_profile

    try:
        return load_profile(text)  # a preset name or a profile JSON file
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _check_npy(path: str, what: str) -> None:
    """Refuse a file that is not a .npy file before numpy guesses "pickled data" for it."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(6)
    except IsADirectoryError:
        raise UsageError(f"cannot read {what} from {path}: it is a folder, not a .npy file") from None
    except OSError as exc:
        raise UsageError(f"cannot read {what} from {path}: {exc.strerror or exc}") from None
    if head == b"\x93NUMPY":
        return
    if head.startswith(b"PK"):
        raise UsageError(f"{what}: {path} is an .npz archive; give one array as a .npy file "
                         f"(numpy.save)")
    kind = "an empty file" if not head else "not a .npy file (no NumPy header; a text file?)"
    raise UsageError(f"{what}: {path} is {kind}; write the array with numpy.save")


def _load_matrix(path: str, what: str):
    import numpy as np

    _check_npy(path, what)
    try:
        arr = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise UsageError(f"cannot read {what} from {path}: {str(exc).splitlines()[0]}") from None
    if arr.ndim != 2:
        raise UsageError(f"{what} must be a 2-D array, {path} holds shape {arr.shape}")
    if arr.dtype.kind != "f":
        raise UsageError(f"{what} must hold float16, float32 or float64 values (bf16 and fp8 values "
                         f"as float32), {path} holds {arr.dtype}")
    if arr.dtype == np.float32:  # kept: tf32 profiles read fp32 words (a float64 copy would
        return arr               # quiet a signalling NaN, Profile.operand_conversion)
    return arr.astype(np.float64)  # widening is exact


def _rows_progress(quiet: bool, rows: int | None = None):
    """A rich progress bar over D's ``rows`` rows on stderr (a terminal only), started at once
    so that its clock runs while numba compiles the kernel on a profile's first use (tens of
    seconds, then cached; :func:`_compile_notice` says so above the bar); (callback for
    ``emulate.matmul(progress=)``, finish)."""
    if quiet or not sys.stderr.isatty():
        return None, lambda: None
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
    from rich.progress import TimeElapsedColumn, TimeRemainingColumn

    prog = Progress(TextColumn("emulating rows of D"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), TimeRemainingColumn(), console=Console(stderr=True),
                    transient=True)
    task = prog.add_task("emulate", total=rows)
    prog.start()

    def cb(done, total):
        prog.update(task, completed=done, total=total)

    return cb, prog.stop


def cmd_emulate(args) -> int:
    from pathlib import Path

    import numpy as np

    from .emulate import matmul

    out = Path(args.output)
    _check_new_files(args.force, out)
    if args.threads is not None and args.threads < 1:
        raise UsageError(f"--threads must be at least 1, got {args.threads}")
    profile = _load_profile(args.profile)
    A = _load_matrix(args.a, "A")
    B = _load_matrix(args.b, "B")
    C = _load_matrix(args.c, "C") if args.c else None
    scaled = profile.scale_format is not None
    if scaled and not (args.scale_a and args.scale_b):
        raise UsageError(f"{profile.name} is block-scaled ({profile.scale_format} per "
                         f"{profile.scale_block_size} elements of K): give --scale-a and "
                         f"--scale-b")
    if not scaled and (args.scale_a or args.scale_b):
        raise UsageError(f"{profile.name} has no block scales: drop --scale-a / --scale-b")
    SA = _load_matrix(args.scale_a, "scale_a") if scaled else None
    SB = _load_matrix(args.scale_b, "scale_b") if scaled else None
    cb, finish = _rows_progress(args.quiet, A.shape[0])
    try:
        D = matmul(A, B, C, profile=profile, pad=args.pad, engine=args.engine,
                   threads=args.threads, alpha=args.alpha, out_format=args.out_format,
                   scale_a=SA, scale_b=SB, progress=cb,
                   operand_conversion=args.operand_conversion)
    except ValueError as exc:
        msg = str(exc).splitlines()[0].replace("pass pad=True", "pass --pad").replace(
            " see matmul's docstring", " see --help").replace(
            "operand_conversion 'RNA', 'RNE' or 'truncate' converts",
            "--operand-conversion RNA, RNE or truncate converts")
        raise UsageError(msg) from None
    finally:
        finish()
    out_name = args.out_format or profile.out_format
    # D is in the output format's dtype with the device's NaN bits (emulate.outputs); .npy
    # cannot hold bf16 or fp8: those are widened to float32, exactly (payloads kept)
    Dout = D if D.dtype in (np.float32, np.float16) else D.astype(np.float32)
    with open(out, "wb") as fh:
        np.save(fh, Dout)
    if profile.status != "validated":
        print(f"fpscope: note: profile {profile.name} is experimental (not validated on hardware)",
              file=sys.stderr)
    print(f"D ({D.shape[0]} x {D.shape[1]}, {out_name}) written to {out}", file=sys.stderr)
    return 0


def cmd_probe(args) -> int:

    from .probes.blackbox import make_matrix_target
    from .probes.driver import probe

    if args.cases < 0:
        raise UsageError(f"--cases must be 0 or more, got {args.cases}")
    if args.k is not None and args.k < 1:
        raise UsageError(f"--k must be at least 1, got {args.k}")
    _check_new_files(args.force, args.output, args.record)
    from .environment import capture_environment as capture
    from .profile import resolve_format
    from .record import probe_record, write_record

    for what, name in (("--in-format", args.in_format), ("--b-format", args.b_format),
                       ("--out-format", args.out_format)):
        if name is not None:
            try:
                resolve_format(name)
            except ValueError as exc:
                raise UsageError(f"{what}: {exc}") from None
    if args.library is not None and args.library < 2:
        raise UsageError(f"--library K must be at least 2, got {args.library}")
    if args.chain is not None and args.library is None:
        raise UsageError("--chain needs --library (the chains' arithmetic is only used there)")
    chain = _load_profile(args.chain) if args.chain is not None else None
    if args.scale_block_size is not None and args.scale_block_size < 1:
        raise UsageError(f"--scale-block-size must be at least 1, got {args.scale_block_size}")
    target = make_matrix_target(args.target, args.in_format, args.out_format, k=args.k,
                                b_format=args.b_format, scale_block_size=args.scale_block_size,
                                scale_format=args.scale_format)
    rep = probe(target, args.in_format, args.out_format, k=args.k, cases=args.cases,
                seed=args.seed, library_k=args.library, chain=chain, b_format=args.b_format)
    env = capture() if (args.record or args.format == "html") else None
    if args.format == "json":
        sys.stdout.write(json.dumps(rep.to_dict(), indent=2) + "\n")
    elif args.format == "html":
        from .report import probe_page

        sys.stdout.write(probe_page(rep.to_dict(), env))
    else:
        sys.stdout.write(rep.to_text())
    if args.output:
        if rep.profile is None:
            print(f"fpscope: no profile to write to {args.output}: the op does not fit a "
                  f"fused-block model", file=sys.stderr)
        else:
            write_record(rep.profile.to_dict(), args.output, overwrite=args.force)
            print(f"profile written to {args.output}", file=sys.stderr)
    if args.record:
        write_record(probe_record(rep.to_dict(), args.target, env), args.record,
                     overwrite=args.force)
        print(f"record written to {args.record}", file=sys.stderr)
    return 0 if rep.fits else 1


def cmd_fit(args) -> int:
    from pathlib import Path

    from .fit import FitError, fit, load_recording

    out = Path(args.output) if args.output else None
    _check_new_files(args.force, args.output, args.record)
    try:
        rec = load_recording(args.recording, args.out)
    except FitError as exc:
        raise UsageError(str(exc)) from None
    res = fit(rec, use_presets=not args.no_presets)
    if args.format == "json":
        sys.stdout.write(json.dumps(res.to_dict(), indent=2) + "\n")
    else:
        ins = rec.in_format if rec.b_format is None else f"{rec.in_format} x {rec.b_format}"
        print(f"{rec.source}: {len(rec.a)} samples of {rec.K} products, {ins} -> "
              f"{rec.out_format}")
        print(res.to_text())
    if out is not None:
        from .record import write_record

        write_record(res.profile.replace(evidence=f"fpscope fit: {res.matched}/{res.total} of "
                                                  f"{rec.source}").to_dict(), out,
                     overwrite=args.force)
        print(f"profile written to {out}", file=sys.stderr)
    if args.record:
        from .environment import capture_environment as capture
        from .record import new_record, write_record

        d = res.to_dict()
        write_record(new_record("fit", target={"name": "recording", "source": rec.source,
                                               "samples": len(rec.a), "K": rec.K,
                                               "in_format": rec.in_format,
                                               "b_format": rec.b_format,
                                               "out_format": rec.out_format},
                                profile=d.pop("profile"), fit=d, environment=capture()),
                     args.record, overwrite=args.force)
        print(f"record written to {args.record}", file=sys.stderr)
    return 0 if res.exact else 1


def cmd_diff(args) -> int:
    from .diff import DiffError, diff

    if args.cases < 1:
        raise UsageError(f"--cases must be at least 1, got {args.cases}")
    try:
        res = diff(args.a, args.b, cases=args.cases, seed=args.seed)
    except DiffError as exc:
        raise UsageError(str(exc)) from None
    _print_result(res, args.format)
    return 0 if res.same else 1


def cmd_gate(args) -> int:
    from .gate import GateError, gate

    try:
        res = gate(args.baseline, target=args.target, policy=args.policy, units=args.units,
                   env=_parse_env(args.env),
                   samples=args.samples, record=args.record, force=args.force)
    except GateError as exc:
        raise UsageError(str(exc)) from None
    _print_result(res, args.format)
    return 0 if res.passed else 1


def _print_result(res, fmt: str) -> None:
    """A result with to_dict() / to_text() as JSON (any nesting depth) or as text."""
    if fmt == "json":
        from .record import json_text

        sys.stdout.write(json_text(res.to_dict(), indent=2) + "\n")
    else:
        print(res.to_text())


def _matrix_progress(quiet: bool):
    """A rich progress bar over the cells on stderr (a terminal only); (callback, finish)."""
    if quiet or not sys.stderr.isatty():
        return None, lambda: None
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    state = {"prog": None, "task": None}

    def cb(done, total, label):
        if state["prog"] is None:
            state["prog"] = Progress(TextColumn("matrix"), BarColumn(), MofNCompleteColumn(),
                                     TimeElapsedColumn(), TextColumn("{task.description}"),
                                     console=Console(stderr=True), transient=True)
            state["task"] = state["prog"].add_task(label, total=total)
            state["prog"].start()
        state["prog"].update(state["task"], completed=done, description=escape(label))

    def finish():
        if state["prog"] is not None:
            state["prog"].stop()

    return cb, finish


def cmd_matrix(args) -> int:
    from .matrix import (
        MatrixError,
        agreement_rows,
        check_output,
        columns,
        run_matrix,
        suite_cells,
    )
    from .matrix_collectives import available
    from .record import dumps
    from .report import write_report
    from .report_collectives import text_lines

    if args.samples < 0:
        raise UsageError(f"--samples must be 0 or more, got {args.samples}")
    wanted = None
    if args.libraries is not None:
        wanted = [x.strip() for x in args.libraries.split(",") if x.strip()]
        if not wanted:
            raise UsageError("--libraries: name at least one of numpy, torch, jax, gloo, mpi")
    try:
        check_output(args.output, args.force)  # before the slow imports and reveals
        libs, notes = available(wanted)
        cells = suite_cells(args.suite, libs)
        cb, finish = _matrix_progress(args.quiet)
        try:
            res = run_matrix(cells, args.output, suite=args.suite, force=args.force,
                             seed=args.seed, replay_samples=args.samples, notes=notes,
                             libraries=libs, progress=cb)
        finally:
            finish()
        index = write_report(res, args.output)
    except MatrixError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"cannot write the report to {args.output}: {exc.strerror or exc}") from None
    if args.format == "json":
        sys.stdout.write(dumps(res.to_record()))
    else:
        from rich.table import Table

        console = _console()
        cols = columns(res)
        table = Table(title=f"{args.suite} suite: tree per library (same letter = same order)")
        for name in ("op", "dtype", "size", "layout"):
            table.add_column(name)
        for lib, t in cols:
            table.add_column(lib if t is None else f"{lib} {t}t", justify="center")
        table.add_column("verdict")
        for row in agreement_rows(res):
            ids = [(row["cells"][k].tree_id or row["cells"][k].status) if k in row["cells"]
                   else "." for k in cols]
            table.add_row(row["op"], row["dtype"], row["size"], row["layout"], *ids,
                          row["verdict"])
        if table.rows:  # not when the suite ran collectives alone
            console.print(table)
        for line in text_lines(res):
            console.print(f"collective {escape(line)}", highlight=False, soft_wrap=True)
        for note in res.notes:
            console.print(f"[yellow]note:[/yellow] {escape(note)}", highlight=False)
        for c in res.failed:
            console.print(f"[red]failed[/red] #{c.index} {escape(c.cell.target)} "
                          f"{escape(c.cell.size_text)}: {escape(c.error or '')}", highlight=False)
        ok = sum(c.status == "ok" for c in res.cells)
        skipped = sum(c.status == "skipped" for c in res.cells)
        changed = sum(not c["same"] for c in res.comparisons if c["dimension"] != "n")
        console.print(f"{len(res.cells)} cells ({ok} ok, {len(res.failed)} failed, {skipped} "
                      f"skipped), {len(res.trees)} distinct trees, {changed} neighbouring pairs "
                      f"with different trees, {res.seconds:.1f} s", highlight=False)
        console.print(f"report: {escape(str(index))}", highlight=False)
    return 1 if res.failed else 0


def cmd_targets(args) -> int:
    from .targets import list_targets

    for name in list_targets():
        hint = {"numpy.einsum": "[SUBSCRIPTS]   e.g. numpy.einsum[ij,jk->ik]; default i,i->",
                "emulate.matmul": "[PRESET]    a GEMM on the matrix-unit emulator, e.g. "
                                  "emulate.matmul[hopper-fp16] (fpscope profiles)"}
        print(name + hint.get(name, ""))
    print("package.module:function        any callable: 1-D array -> scalar (imported from the current folder)")
    print("path/to/file.py:function       the same, from a file")
    return 0


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.verb is None:
        parser.print_help()
        return 2
    handlers = {"reveal": cmd_reveal, "verify": cmd_verify, "targets": cmd_targets,
                "profiles": cmd_profiles, "emulate": cmd_emulate, "probe": cmd_probe,
                "diff": cmd_diff, "fit": cmd_fit, "gate": cmd_gate,
                "matrix": cmd_matrix}
    from ._numba_setup import set_compile_notice

    old_notice = set_compile_notice(None if getattr(args, "quiet", False) else _compile_notice)
    try:
        return handlers[args.verb](args)
    except BrokenPipeError:  # e.g. piped into head: not an error of the op
        sys.stderr.close()
        return 0
    except (UsageError, ValueError, RuntimeError) as exc:
        reveal_error = _loaded("fpscope.reveal.prober", "RevealError")
        if reveal_error is not None and isinstance(exc, reveal_error):
            if exc.kind in ("units", "nan"):  # n too large, or NaN for finite probes: bad input
                print(f"fpscope: {exc}", file=sys.stderr)
                return 2
            print(f"fpscope: check failed ({exc.kind}): {exc}", file=sys.stderr)
            return 1
        if not isinstance(exc, (UsageError, ValueError, *_user_errors())):
            raise
        # bad input: ours (TargetError, MaskError, RecordError, TreeError, RenderError,
        # ProbeError) or a ValueError, e.g. an unknown format name from formats.get_format
        print(f"fpscope: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("fpscope: interrupted", file=sys.stderr)
        return 130
    finally:
        set_compile_notice(old_notice)


#: the error types that mean bad input (exit 2), by module: a command that never imported a
#: module cannot have raised its error, so none is imported just to be caught
_USER_ERRORS = (("fpscope.targets.base", "TargetError"), ("fpscope.probes.blackbox", "ProbeError"),
                ("fpscope.render", "RenderError"))


def _loaded(module: str, name: str):
    mod = sys.modules.get(module)
    return None if mod is None else getattr(mod, name, None)


def _user_errors() -> tuple:
    return tuple(t for t in (_loaded(m, n) for m, n in _USER_ERRORS) if t is not None)


def _compile_notice() -> None:
    """Said once when numba compiles an emulator kernel its cache does not hold (tens of
    seconds on a machine's first run; ``fpscope._numba_setup.set_compile_notice``)."""
    print("fpscope: compiling the emulator kernel (first run, ~30 s; cached afterwards)...",
          file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
