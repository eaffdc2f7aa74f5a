"""Benchmark: fpscope's reveal beside the published FPRev algorithm, side by side in one run.

Run: python benchmarks/bench_reveal.py [--repeats 3] [--quick] [--gemm-1024-runs 1]
     python benchmarks/bench_reveal.py --rows N     (probe rows of one np.sum reveal)
     python benchmarks/bench_reveal.py --phases     (only the phases table below)
     python benchmarks/bench_reveal.py --process    (only the two whole-process rows)
     python benchmarks/bench_reveal.py --proof-limit  (candidate proof vs FPRev at large n)

The baseline is :mod:`fprev_published` (this folder): the published algorithm as its reference
code runs it (recursive, lowest-index pivot, one op call per probe, the input built once and
modified in place per probe). Every case is run ``--repeats`` times, fpscope and the baseline
interleaved (fpscope, published, fpscope, published, ...), and the table shows medians and the
ratio fpscope / published (below 1: fpscope is faster). Every case asserts that both found the
same tree (for a GEMM: the tree of output C[0, 0], the only one the baseline reveals).

Cases:

* np.sum fp32 n = 8192 and 16384, np.dot fp32 n = 8192: fpscope's time is
  ``RevealResult.stats.seconds`` of ``fpscope.reveal.reveal(target, replay_samples=0)`` (the
  tree and its consistency checks; not the accumulator probe, the node arithmetic or the replay).
  For np.sum fpscope first proves its built-in candidate trees with one probe per node
  (fpscope.reveal.candidates; numpy's pairwise sum holds, so FPRev does not run); the rows
  "FPRev only" run the same reveal with ``candidates=None``, the packed FPRev alone;
  "in op s" is the part of it spent inside the target's calls (the op and the target's copies
  of the probe inputs), the rest is fpscope's own work;
* numpy.matmul fp32 n x n x n, n = 256 and 1024: fpscope reveals every tree among the n^2
  outputs and where each is used (fpscope.reveal.classes; same time measure); the baseline
  reveals C[0, 0] only, one n^3 GEMM per probe. Its n = 1024 run takes minutes here, so it runs
  ``--gemm-1024-runs`` times (default 1; 0 skips it);
* the whole process ``fpscope reveal numpy.sum --n 1000`` (tree, checks, accumulator, node
  arithmetic, replay of 32 inputs per distribution, environment capture, text output) against
  a process running ``benchmarks/fprev_published.py 1000`` (np.sum, the tree printed): wall
  time of each subprocess, Python start-up and imports included. Both run with a warm
  bytecode cache in a private folder (PYTHONPYCACHEPREFIX, as an installed package has its
  .pyc files), after one warm-up run each; the row "(no .pyc)" runs them with
  PYTHONDONTWRITEBYTECODE=1 and no private cache, as the development environment here does:
  fpscope's sources (no __pycache__ in the checkout) are then compiled on every run, numpy's
  .pyc files in site-packages are used.

After the table, "phases": where the time of a whole reveal goes (``reveal(target)`` with its
default replay of 32 inputs per distribution; ``RevealStats.phases``): the tree and its checks,
the accumulator probe, the node-format probes, the product-entry probes (ops that multiply) and
the replay, for np.sum fp32 n = 16384, np.dot fp32 n = 4096 and numpy.matmul fp32 n = 256.

Targets (issue: this machine, AMD EPYC, 2 cores): np.sum fp32 n = 16384 ratio <= 0.25
(stretch 0.15); numpy.matmul every output revealed: n = 1024 < 2 s, n = 256 < 0.5 s; the whole
process at most 3x the published one.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import fprev_published as pub  # noqa: E402  (this folder's baseline)

from fpscope.reveal import reveal  # noqa: E402
from fpscope.targets import make_target  # noqa: E402
from fpscope.tree import SumTree  # noqa: E402


def cpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return "unknown CPU"


def load_average() -> str:
    try:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "?"


# -- one run of each side ----------------------------------------------------------------------

_OP_METHODS = ("evaluate", "evaluate_each", "evaluate_outer", "evaluate_products")


def _time_op_calls(target) -> list:
    """Wrap the target's probe methods to record (start, seconds) of every outermost call."""
    spans, depth = [], [0]

    def wrap(fn):
        def timed(*args, **kw):
            depth[0] += 1
            t0 = time.perf_counter()
            try:
                return fn(*args, **kw)
            finally:
                depth[0] -= 1
                if not depth[0]:
                    spans.append((t0, time.perf_counter() - t0))
        return timed

    for m in _OP_METHODS:
        if hasattr(target, m):
            setattr(target, m, wrap(getattr(target, m)))
    return spans


def run_fpscope(name: str, n: int, candidates="auto"):
    """fpscope's reveal: (seconds of the tree and its checks, seconds of those spent inside the
    op's calls, calls, the tree of output 0 / (0, 0), number of trees among the outputs).
    ``candidates=None``: FPRev only (no candidate trees proven first)."""
    t = make_target(name, n=n)
    spans = _time_op_calls(t)
    try:
        t0 = time.perf_counter()
        res = reveal(t, replay_samples=0, candidates=candidates)
    finally:
        t.close()
    end = t0 + res.stats.seconds  # the accumulator and arithmetic probes come after
    op = sum(dt for start, dt in spans if start < end)
    return res.stats.seconds, op, res.stats.calls, res.tree, len(res.classes or [res.tree])


def run_published(impl_cls, n: int):
    """The published FPRev on a fresh op: (seconds, calls, tree)."""
    impl = impl_cls(n)
    t0 = time.perf_counter()
    nested, calls = pub.fprev(impl)
    return time.perf_counter() - t0, calls, SumTree(nested)


PHASE_CASES = (("numpy.sum", 16384), ("numpy.dot", 4096), ("numpy.matmul", 256))
PHASES = ("tree", "accumulator", "node_formats", "product_entries", "replay")


def phases_report(repeats: int, quick: bool = False) -> None:
    """Median seconds of each phase of a whole reveal (RevealStats.phases), per case."""
    head = f"{'phases of a whole reveal':28s} {'n':>6s} " + " ".join(f"{p:>15s}" for p in PHASES) \
        + f" {'total':>8s}"
    print(head)
    print("-" * len(head))
    for name, n in PHASE_CASES:
        n = n // 8 if quick else n
        runs = []
        for _ in range(repeats):
            t = make_target(name, n=n)
            try:
                t0 = time.perf_counter()
                res = reveal(t)
                total = time.perf_counter() - t0
            finally:
                t.close()
            runs.append({**res.stats.phases, "total": total})
        med = {k: statistics.median(r[k] for r in runs) for k in (*PHASES, "total")
               if all(k in r for r in runs)}  # a phase the op has not (products): "-"
        print(f"{name:28s} {n:6d} " + " ".join(f"{med[p]:15.3f}" if p in med else f"{'-':>15s}"
                                               for p in PHASES)
              + f" {med['total']:8.3f}", flush=True)


def _process_env(pyc_dir: str | None) -> dict:
    env = dict(os.environ)
    if pyc_dir is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = pyc_dir
    return env


def _fpscope_command(n: int) -> list[str]:
    exe = Path(sys.executable).with_name("fpscope")
    if exe.exists():
        return [str(exe), "reveal", "numpy.sum", "--n", str(n)]
    return [sys.executable, "-c", "import sys; from fpscope.cli import main; sys.exit(main())",
            "reveal", "numpy.sum", "--n", str(n)]


def run_process(cmd: list[str], env: dict) -> float:
    t0 = time.perf_counter()
    res = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    dt = time.perf_counter() - t0
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {res.stderr.decode(errors='replace')[-500:]}")
    return dt


# -- the table -----------------------------------------------------------------------------------

def process_rows(repeats: int) -> tuple[list, int]:
    """The whole process ``fpscope reveal numpy.sum --n 1000`` beside a process running the
    published algorithm, with and without .pyc files: [(label, fpscope s, published s)], n."""
    n_cli = 1000
    ftree = run_fpscope("numpy.sum", n_cli)[3]
    assert SumTree(pub.fprev(pub.NumpySum(n_cli))[0]) == ftree
    proc_rows = []
    pyc = tempfile.mkdtemp(prefix="fpscope-bench-pyc-")
    try:
        no_pyc = _process_env(None) | {"PYTHONDONTWRITEBYTECODE": "1"}
        for label, env in (("whole process", _process_env(pyc)),
                           ("whole process (no .pyc)", no_pyc)):
            cmds = (_fpscope_command(n_cli),
                    [sys.executable, str(HERE / "fprev_published.py"), str(n_cli)])
            for c in cmds:  # warm-up (fills the bytecode cache)
                run_process(c, env)
            fs, ps = [], []
            for _ in range(repeats):
                fs.append(run_process(cmds[0], env))
                ps.append(run_process(cmds[1], env))
            proc_rows.append((label, statistics.median(fs), statistics.median(ps)))
    finally:
        shutil.rmtree(pyc, ignore_errors=True)

    return proc_rows, n_cli


PROOF_CASES = (("numpy.sum", 32768, "fp64"), ("numpy.sum", 65536, "fp64"),
               ("numpy.sum", 100000, "fp64"))


def proof_limit_report(repeats: int) -> None:
    """Where the candidate proof (n - 1 full probe rows) stops paying against packed FPRev:
    median ``stats.seconds`` of a reveal that proves numpy's tree (the size limit
    ``MAX_PROOF_BYTES`` lifted for this table) and of one with ``candidates=None``."""
    import fpscope.reveal.driver as driver

    print(f"{'candidate proof vs FPRev':28s} {'n':>7s} {'dtype':>6s} {'bytes/1e9':>10s} "
          f"{'proof s':>8s} {'FPRev s':>8s} {'proof/FPRev':>12s}")
    for name, n, dtype in PROOF_CASES:
        limit = driver.MAX_PROOF_BYTES
        t = make_target(name, n=n, dtype=dtype)
        proof, plain = [], []
        try:
            for _ in range(repeats):
                driver.MAX_PROOF_BYTES = 1 << 62
                try:
                    r = reveal(t, replay_samples=0)
                finally:
                    driver.MAX_PROOF_BYTES = limit
                assert "candidate" in r.stats.checks, "the proof did not run"
                q = reveal(t, replay_samples=0, candidates=None)
                assert q.tree == r.tree
                proof.append(r.stats.seconds)
                plain.append(q.stats.seconds)
        finally:
            t.close()
        a, b = statistics.median(proof), statistics.median(plain)
        size = n * n * t.in_format.numpy_dtype().itemsize / 1e9
        print(f"{name:28s} {n:7d} {dtype:>6s} {size:10.1f} {a:8.3f} {b:8.3f} {a / b:12.3f}",
              flush=True)
    print(f"medians of {repeats}; fpscope uses the proof up to MAX_PROOF_BYTES = "
          f"{driver.MAX_PROOF_BYTES / 1e9:.1f} GB of probe input (n^2 x itemsize)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3, help="interleaved runs per case (median)")
    ap.add_argument("--quick", action="store_true", help="smaller sizes (a smoke run)")
    ap.add_argument("--gemm-1024-runs", type=int, default=1, metavar="R",
                    help="runs of the published GEMM at the largest n (minutes each; 0: skip)")
    ap.add_argument("--process", action="store_true", help="only the whole-process rows "
                    "(fpscope reveal numpy.sum --n 1000 beside the published script)")
    ap.add_argument("--phases", action="store_true", help="only the table of where a whole "
                    "reveal's time goes (tree, accumulator, node formats, products, replay)")
    ap.add_argument("--rows", type=int, metavar="N", help="instead of the table: probe rows "
                    "that revealing np.sum fp32 of N leaves evaluates, and np.sum's time per row")
    ap.add_argument("--proof-limit", action="store_true", help="instead of the table: the "
                    "candidate proof against FPRev for numpy.sum fp64 at n = 32768..100000")
    args = ap.parse_args(argv)
    if args.proof_limit:
        print(f"CPU: {cpu_model()}; load average: {load_average()}")
        proof_limit_report(args.repeats)
        return 0
    if args.rows:
        return rows_report(args.rows)
    if args.process:
        print(f"CPU: {cpu_model()}; load average: {load_average()}")
        rows, n_cli = process_rows(args.repeats)
        for label, fsec, psec in rows:
            print(f"{label:28s} {n_cli:6d} fpscope {fsec:.3f} s, published {psec:.3f} s, "
                  f"ratio {fsec / psec:.2f}")
        print(f"medians of {args.repeats} interleaved runs; load average at the end: "
              f"{load_average()}")
        return 0
    if args.phases:
        print(f"CPU: {cpu_model()}; load average: {load_average()}")
        phases_report(args.repeats, args.quick)
        return 0
    q = args.quick
    big_gemm = 256 if q else 1024
    cases = [  # label, fpscope target, n, published op, published runs[, candidates]
        ("np.sum fp32", "numpy.sum", 1024 if q else 8192, pub.NumpySum, args.repeats),
        ("np.sum fp32", "numpy.sum", 2048 if q else 16384, pub.NumpySum, args.repeats),
        ("np.sum fp32, FPRev only", "numpy.sum", 1024 if q else 8192, pub.NumpySum,
         args.repeats, None),
        ("np.sum fp32, FPRev only", "numpy.sum", 2048 if q else 16384, pub.NumpySum,
         args.repeats, None),
        ("np.dot fp32", "numpy.dot", 1024 if q else 8192, pub.NumpyDot, args.repeats),
        ("matmul fp32, every output", "numpy.matmul", 64 if q else 256, pub.NumpyGEMM,
         args.repeats),
        ("matmul fp32, every output", "numpy.matmul", big_gemm, pub.NumpyGEMM, args.gemm_1024_runs),
    ]
    print(f"CPU: {cpu_model()}, {os.cpu_count()} logical CPUs; numpy {np.__version__}; "
          f"load average at start: {load_average()}", flush=True)
    results = []
    for label, name, n, impl, pub_runs, *cand in cases:
        fs, fops, ps, calls = [], [], [], None
        tree = None
        for r in range(max(args.repeats, pub_runs)):
            if r < args.repeats:
                secs, op, fcalls, ftree, ntrees = run_fpscope(name, n, *cand)
                fs.append(secs)
                fops.append(op)
                if tree is None:
                    tree = ftree
                assert ftree == tree, f"{label} n={n}: fpscope's tree changed between runs"
            if r < pub_runs:
                secs, pcalls, ptree = run_published(impl, n)
                ps.append(secs)
                calls = pcalls
                assert ptree == tree, (f"{label} n={n}: the published algorithm and fpscope "
                                       f"found different trees")
        results.append((label, n, statistics.median(fs), statistics.median(fops), fcalls, ntrees,
                        statistics.median(ps) if ps else None, calls, len(ps)))
        print(f"  done: {label} n={n}", file=sys.stderr, flush=True)

    proc_rows, n_cli = process_rows(args.repeats)

    head = (f"{'case':28s} {'n':>6s} {'fpscope s':>10s} {'in op s':>8s} {'calls':>7s} "
            f"{'trees':>6s} {'published s':>12s} {'calls':>7s} {'fpscope/published':>18s}")
    print(head)
    print("-" * len(head))
    for label, n, fsec, fop, fcalls, ntrees, psec, pcalls, pruns in results:
        pubtxt = (f"{psec:12.3f} {pcalls:7d} {fsec / psec:18.3f}" if psec is not None
                  else f"{'-':>12s} {'-':>7s} {'-':>18s}")
        note = "" if pruns in (0, args.repeats) else f"  (published: {pruns} run)"
        print(f"{label:28s} {n:6d} {fsec:10.3f} {fop:8.3f} {fcalls:7d} {ntrees:6d} {pubtxt}{note}")
    for label, fsec, psec in proc_rows:
        print(f"{label:28s} {n_cli:6d} {fsec:10.3f} {'':>8s} {'':>7s} {'':>6s} {psec:12.3f} "
              f"{'':>7s} {fsec / psec:18.3f}")
    print(f"medians of {args.repeats} interleaved runs; 'in op s': of fpscope's seconds, those "
          f"inside the target's calls (the op and its copies); 'trees': distinct trees among "
          f"the outputs (matmul: fpscope reveals every output's tree, the published algorithm "
          f"C[0,0]'s only); load average at the end: {load_average()}")
    print()
    phases_report(args.repeats, q)
    return 0


def rows_report(n: int) -> int:
    """Rows of n floats that one reveal of np.sum sums (every call's batch counted), with the
    candidate proof and with FPRev alone, beside the time np.sum takes per row in 256-row
    batches of ones and each reveal's time."""
    found = []
    for label, candidates in (("candidate proof", "auto"), ("FPRev only", None)):
        t = make_target("numpy.sum", n=n)
        rows = [0]
        evaluate = t.evaluate

        def counting(X, evaluate=evaluate, rows=rows):
            rows[0] += len(X)
            return evaluate(X)

        t.evaluate = counting
        res = reveal(t, replay_samples=0, candidates=candidates)
        t.close()
        found.append((label, rows[0], res))
    X = np.ones((256, n), dtype=np.float32)  # touched memory (np.zeros would read one zero page)
    reps = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(20):
            np.sum(X, axis=1)
        reps.append((time.perf_counter() - t0) / (20 * 256))
    per_row = statistics.median(reps)
    for label, count, res in found:
        print(f"np.sum fp32 n = {n}, {label}: {count} probe rows in {res.stats.calls} calls (the "
              f"reveal, its accumulator and node-arithmetic probes); np.sum takes "
              f"{per_row * 1e6:.2f} us per row, {count * per_row:.3f} s for all of them; the "
              f"reveal took {res.stats.seconds:.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
