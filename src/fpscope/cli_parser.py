"""The ``fpscope`` argument parser: every verb, its options, help and examples."""

from __future__ import annotations

import argparse



EPILOG_REVEAL = """examples:
  fpscope reveal                                  numpy.sum, n = 1024, float32
  fpscope reveal numpy.sum --n 100 --dtype fp16
  fpscope reveal numpy.add.reduce --shape 1000x2 --axis 0 --index 1
  fpscope reveal numpy.cumsum --n 64 --index 40
  fpscope reveal numpy.matmul --n 256 --format json > mm.json
  fpscope reveal torch.matmul --shape 1x512x512 --record mv.json
  fpscope reveal numpy.sum --n 64 --format svg -o sum64.svg
  fpscope reveal numpy.sum --n 1000 --candidate sum1000.json   prove a record's tree first
  fpscope reveal mypkg.kernels:my_sum --n 32
  fpscope reveal numpy.sum --n 430 --dtype fp64 --sweep offset=0:64:8
  fpscope reveal torch.matmul --shape 1x1000x1000 --sweep rows=1,2,4,8,16,32,64
  fpscope reveal "emulate.matmul[hopper-fp16]" --shape 2x64x2     a tensor-core GEMM, emulated
  fpscope reveal torch.distributed.all_reduce --world-size 4 --n 4096    gloo, 4 ranks
  fpscope reveal mpi4py.MPI.Comm.Allreduce --world-size 4 \\
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
  fpscope probe simgemm:hopper-e4m3,split_k=2,split_k_format=bf16 --in-format fp8_e4m3fn \\
      --library --chain hopper-e4m3
block-scaled (MX / NVFP4) instructions, called D = op(A, B, C, scale_a, scale_b):
  fpscope probe mmasim:blackwell-tcgen05-nvfp4
  fpscope probe sim:rtx-blackwell-mxfp8-e4m3 --cases 100000
  fpscope probe mypkg.kernels:mxfp8_mma --in-format fp8_e4m3fn --k 32 --scale-block-size 32
"""


class _Parser(argparse.ArgumentParser):
    """argparse with fpscope's bad-input rule: one line on stderr and exit code 2 (argparse
    prints the whole usage block first), and a close match for a mistyped choice."""

    def error(self, message: str):
        import difflib
        import re
        import sys

        m = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if m:
            known = re.findall(r"'([^']*)'", m.group(2)) or [c.strip() for c in
                                                           m.group(2).split(",")]
            close = difflib.get_close_matches(m.group(1), known, n=1)
            message = message[:m.start()] + (
                f"invalid choice {m.group(1)!r}" + (f"; did you mean {close[0]!r}?" if close
                                                    else "") + f" (choose from {', '.join(known)})")
        print(f"{self.prog}: {message} ('{self.prog} --help' shows the options)",
              file=sys.stderr)
        sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    p = _Parser(
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
    r.add_argument("--candidate", action="append", metavar="RECORD", default=[],
                   help="a reveal record (or tree JSON) whose tree is proven first, one probe "
                   "per node (repeatable); FPRev runs if it does not hold")
    r.add_argument("--no-candidates", action="store_true",
                   help="run FPRev without first proving the built-in candidate trees "
                   "(numpy's pairwise sum, sequential, recursive halving)")
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
        "in_format and out_format; optional: b_format (b's format where it differs from a's), "
        "and for block-scaled ops scale_format (e8m0 or ue4m3) with scale_a and scale_b "
        "(n, K/s) scale values. Exit 0 when a profile reproduces every sample, 1 when none "
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
        "--scale-a SA.npy --scale-b SB.npy -o D.npy\n"
        "  fpscope emulate --profile hopper-fp16 --a A.npy --b B.npy -o D.npy "
        "--dask tcp://scheduler:8786\n"
        "  fpscope emulate --profile hopper-fp16 --a Q.npy --b KT.npy -o S.npy   "
        "batched: (8, 128, 64) @ (8, 64, 128)",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    em.add_argument("--profile", required=True, help="a preset name (fpscope profiles) or a "
                    "profile JSON file")
    em.add_argument("--a", required=True, help="A, an (M, K) .npy file, or (..., M, K): a "
                    "batch of matrices, broadcast against B's as numpy.matmul does")
    em.add_argument("--b", required=True, help="B, a (K, N) or (..., K, N) .npy file")
    em.add_argument("--c", help="C, an (M, N) or (..., M, N) .npy file (default zeros)")
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
    em.add_argument("--dask", metavar="ADDRESS", help="compute D's row bands on a Dask cluster: "
                    "a scheduler address (tcp://host:8786), or 'local' for a LocalCluster of "
                    "one single-threaded worker process per core (pip install 'fpscope[dask]'; "
                    "same bits as a local run; --threads: numba threads per band, default 1)")
    em.add_argument("--bands", type=int, help="with --dask: row bands of D (default: twice the "
                    "cluster's worker threads)")

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
        "  fpscope matrix --libraries numpy,torch -o m && xdg-open m/index.html\n"
        "  fpscope matrix -o matrix-quick               run again: resumes, only missing cells run\n"
        "  fpscope matrix --dask tcp://sched:8786 -o fleet   every Dask worker; fleet/fleet.html",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    mx.add_argument("--suite", default="quick", choices=["quick", "full"],
                    help="quick (default; about 40 cells, seconds) or full (about 500 cells, minutes)")
    mx.add_argument("-o", "--output", required=True, metavar="DIR",
                    help="output folder (created; a folder of an earlier run of the same suite "
                    "is resumed: only its missing cells run)")
    mx.add_argument("--force", action="store_true",
                    help="redo every cell; write into any existing, non-empty DIR, replacing an "
                    "earlier run's files")
    mx.add_argument("--libraries", help="comma list of numpy, torch, jax and the collective "
                    "backends gloo, mpi (default: all that work here; the others are skipped "
                    "with a note)")
    mx.add_argument("--samples", type=int, default=32,
                    help="random inputs per distribution of each replay check (default 32)")
    mx.add_argument("--dask", metavar="ADDRESS",
                    help="run the suite on every worker of the Dask cluster at ADDRESS (each cell "
                    "in a child process with the worker's environment); records go to "
                    "DIR/<worker>/, the comparison to DIR/fleet.json and DIR/fleet.html "
                    "(pip install 'fpscope[dask]')")
    mx.add_argument("--isolate", action="store_true",
                    help="run each cell in a child process: a cell that crashes it is a failed "
                    "cell and the others complete (always so with --dask)")
    mx.add_argument("--timeout", type=float, metavar="S",
                    help="with --isolate or --dask: seconds before a cell's process is killed")
    mx.add_argument("--seed", type=int, default=0)
    mx.add_argument("--format", default="text", choices=["text", "json"],
                    help="what to print when done: a table (text) or the manifest (json)")
    mx.add_argument("--quiet", action="store_true", help="no progress bar")

    fl = sub.add_parser(
        "fleet", help="compare the matrix records of many machines: who sums each cell alike",
        description="Compare the fpscope matrix output folders of several machines (workers): "
        "cells are matched by target and conditions, and for each cell the workers are split "
        "into groups that agree bit for bit (same tree, node arithmetic and output classes, as "
        "fpscope diff says 'identical'); each other group is compared with the largest by "
        "fpscope diff (verdict and witness input). One DIR holding worker subfolders (each with "
        "cells/ or matrix.json, as fpscope matrix --dask writes) stands for those subfolders. "
        "With -o, writes OUT/fleet.json and the static report OUT/fleet.html. Exit 0 when done "
        "(also when workers differ), 2 on bad input.",
        epilog="examples:\n  fpscope fleet host1/matrix host2/matrix host3/matrix -o fleet\n"
        "  fpscope fleet runs/                   a folder of worker folders (matrix --dask)\n"
        "  fpscope fleet a b --format json > fleet.json",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    fl.add_argument("dirs", nargs="+", metavar="DIR",
                    help="a worker's matrix output folder (or one folder of worker folders)")
    fl.add_argument("-o", "--output", metavar="OUT",
                    help="folder for fleet.json and fleet.html (created; without it nothing is "
                    "written)")
    fl.add_argument("--format", default="text", choices=["text", "json"],
                    help="what to print: one line per cell (text) or fleet.json's content (json)")
    fl.add_argument("--force", action="store_true", help="replace an existing fleet.json / "
                    "fleet.html in OUT")
    return p
