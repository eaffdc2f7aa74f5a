"""Benchmark: fpscope's full reveal of an all-reduce beside per-pair FPRev, side by side in one run.

Run: python benchmarks/bench_collectives.py                      (8 ranks, 65,536 fp32 elements)
     python benchmarks/bench_collectives.py --world-size 4 --n 4096
     python benchmarks/bench_collectives.py --backend mpi        (mpi4py.MPI.Comm.Allreduce)
     python benchmarks/bench_collectives.py --per-pair-elements 16 --quiet

The collective is ``torch.distributed.all_reduce`` (gloo, CPU) or, with ``--backend mpi``,
``mpi4py.MPI.Comm.Allreduce`` (Open MPI under mpiexec); SUM over P ranks of buffers of E
elements. Leaves are ranks; every element is an output with its own tree (gloo's ring: one
tree per chunk; NUMERICS.md section 4). One run, in this order, on one started world:

* rank start-up: ``make_target(name, world_size=P, n=E)`` (P rank processes started and
  connected); counted once, both sides use these ranks;
* fpscope: ``fpscope.reveal.reveal(target, replay_samples=32)``, the whole reveal of every
  element (the trees with their checks, the accumulator, the node formats and the replay of 32
  inputs per distribution, for every class of elements); its calls and the trees found; "of
  which" rows: the trees and their checks (``RevealStats.seconds``; its calls and probes, the
  l(i, j) values obtained) and the seconds spent inside collective calls (the parent's side of
  ``World.run``: sending the buffers, the collective, receiving every rank's output);
* per-pair: the published FPRev (``fprev_published.fprev``, this folder: recursive, one call
  per probe pair, no checks) on ``--per-pair-elements`` element positions spread over the
  buffer, each through ``CollectiveTarget(name, world_size=P, elements=E, element=e,
  world=<the ranks above>)``: one collective call of the whole E-element buffer per probe pair
  and element position, the probe at element e and zeros elsewhere. Each element's tree must
  equal the tree fpscope found for it. Seconds and calls per element are the means over those
  positions; the row "extrapolated" multiplies them by E: it is not measured;
* close: the ranks stopped (``target.close()``), counted once.

The last line is the ratio of the whole runs: fpscope (start-up + reveal + close) over
per-pair (start-up + extrapolated per-pair + close); below 1 fpscope is faster. The per-pair
side reveals trees only; the row "of which: trees and their checks" is the like-for-like part.

Target (issue: this machine, AMD EPYC, 2 cores): fpscope's whole run at 8 ranks x 65,536
elements under 60 s.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import fprev_published as pub  # noqa: E402  (this folder's baseline)

from fpscope.collectives import CollectiveTarget  # noqa: E402
from fpscope.masks import choose_mask  # noqa: E402
from fpscope.reveal import reveal  # noqa: E402
from fpscope.targets import make_target  # noqa: E402
from fpscope.tree import SumTree  # noqa: E402

TARGETS = {"gloo": "torch.distributed.all_reduce", "mpi": "mpi4py.MPI.Comm.Allreduce"}


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


class ElementImpl:
    """The published algorithm's AccumImpl interface over element ``element`` of a collective:
    every rank holds one unit (``mask.u``) there, a probe sets +M at rank i and -M at rank j,
    and ``get_l`` is one collective call (l = P - result / u)."""

    def __init__(self, target: CollectiveTarget, mask):
        self.target, self.M, self.u = target, mask.M, mask.u
        self.n_summands = target.n
        self.data = np.full((1, target.n), mask.u, dtype=target.in_format.numpy_dtype())

    def set_mask(self, k: int, negative: bool):
        self.data[0, k] = -self.M if negative else self.M

    def reset_mask(self, k: int):
        self.data[0, k] = self.u

    def get_l(self) -> int:
        return self.n_summands - int(round(self.target.evaluate_each(self.data)[0] / self.u))


def timed_world(world) -> list:
    """Wrap ``world.run`` to add the seconds of every call to the returned one-item list."""
    spent = [0.0]
    run = world.run

    def timed(*args, **kw):
        t0 = time.perf_counter()
        try:
            return run(*args, **kw)
        finally:
            spent[0] += time.perf_counter() - t0

    world.run = timed
    return spent


def element_trees(res, elements: int) -> np.ndarray:
    """(E,) index into ``trees`` of each element's tree, and the list of trees, from a reveal."""
    if not res.classes:
        return np.zeros(elements, dtype=np.int64), [res.tree]
    which = np.full(elements, -1, dtype=np.int64)
    for k, c in enumerate(res.classes):
        which[np.asarray(c["mask"]).reshape(-1)[:elements]] = k
    return which, [c["tree"] for c in res.classes]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
               "  python benchmarks/bench_collectives.py\n"
               "  python benchmarks/bench_collectives.py --world-size 4 --n 4096\n"
               "  python benchmarks/bench_collectives.py --backend mpi --per-pair-elements 4")
    ap.add_argument("--world-size", type=int, default=8, metavar="P", help="ranks (leaves); "
                    "default 8")
    ap.add_argument("--n", type=int, default=65536, metavar="E", help="elements per rank "
                    "(outputs); default 65536")
    ap.add_argument("--dtype", default="fp32", help="fp32 (default), fp64; gloo also fp16, bf16")
    ap.add_argument("--backend", choices=tuple(TARGETS), default="gloo",
                    help="gloo: torch.distributed.all_reduce (default); mpi: "
                         "mpi4py.MPI.Comm.Allreduce")
    ap.add_argument("--per-pair-elements", type=int, default=8, metavar="K",
                    help="element positions per-pair FPRev reveals (spread over the buffer; "
                         "its time for all E is extrapolated from them); default 8")
    ap.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = ap.parse_args(argv)
    P, E = args.world_size, args.n
    if not 1 <= args.per_pair_elements <= E:
        ap.error(f"--per-pair-elements must be 1..{E}, got {args.per_pair_elements}")
    name = TARGETS[args.backend]

    def say(text: str) -> None:
        if not args.quiet:
            print(f"  {text}", file=sys.stderr, flush=True)

    print(f"CPU: {cpu_model()}, {os.cpu_count()} logical CPUs; load average at start: "
          f"{load_average()}", flush=True)
    say(f"starting {P} {args.backend} ranks")
    t0 = time.perf_counter()
    target = make_target(name, world_size=P, n=E, dtype=args.dtype, backend=args.backend)
    t_start = time.perf_counter() - t0
    try:
        spent = timed_world(target.world)
        say(f"fpscope: revealing all {E} elements")
        calls0, t0 = target.calls, time.perf_counter()
        res = reveal(target, replay_samples=32)
        t_reveal = time.perf_counter() - t0
        reveal_calls = target.calls - calls0
        in_calls = spent[0]
        which, trees = element_trees(res, E)

        positions = np.unique(np.linspace(0, E - 1, args.per_pair_elements).round().astype(int))
        mask = choose_mask(P, target.in_format, target.out_format)
        per = []  # (element, seconds, calls)
        for e in positions:
            t0 = time.perf_counter()
            one = CollectiveTarget(name, world_size=P, elements=E, dtype=args.dtype,
                                   backend=args.backend, element=int(e), world=target.world)
            nested, calls = pub.fprev(ElementImpl(one, mask))
            secs = time.perf_counter() - t0
            if SumTree(nested) != trees[which[e]]:
                raise AssertionError(f"element {e}: per-pair FPRev found {SumTree(nested)}, "
                                     f"fpscope {trees[which[e]]}")
            per.append((int(e), secs, calls))
            say(f"per-pair: element {e}: {calls} calls, {secs:.2f} s")
        communication = target.communication
    finally:
        t0 = time.perf_counter()
        target.close()
        t_close = time.perf_counter() - t0

    k = len(per)
    pp_secs = sum(s for _, s, _ in per)
    pp_calls = sum(c for _, _, c in per)
    ext_secs, ext_calls = pp_secs / k * E, pp_calls / k * E
    pp_trees = len({int(which[e]) for e, _, _ in per})
    whole_f = t_start + t_reveal + t_close
    whole_p = t_start + ext_secs + t_close
    lib = ", ".join(f"{key} {communication[key]}" for key in ("library", "version", "backend",
                                                                "mpi_library")
                    if key in communication)
    print(f"{name} {args.dtype}, {P} ranks x {E} elements ({lib})")
    head = (f"{'phase':44s} {'seconds':>11s} {'calls':>10s} {'probes':>10s} {'elements':>9s} "
            f"{'trees':>6s}")
    print(head)
    print("-" * len(head))

    def row(label, secs, calls="", probes="", elements="", ntrees=""):
        print(f"{label:44s} {secs:11.2f} {calls!s:>10s} {probes!s:>10s} {elements!s:>9s} "
              f"{ntrees!s:>6s}")

    row("rank start-up (once; both sides use it)", t_start)
    row("fpscope: full reveal, every element", t_reveal, reveal_calls, "", E, len(trees))
    row("  of which: trees and their checks", res.stats.seconds, res.stats.calls,
        res.stats.probes)
    row("  of which: inside collective calls", in_calls)
    row(f"per-pair FPRev, measured ({k} elements)", pp_secs, pp_calls, pp_calls, k, pp_trees)
    row("per-pair FPRev, per element (mean)", pp_secs / k, f"{pp_calls / k:.1f}",
        f"{pp_calls / k:.1f}", 1)
    row(f"per-pair FPRev, extrapolated to {E}", ext_secs, f"{ext_calls:.0f}", f"{ext_calls:.0f}",
        E)
    row("close (once)", t_close)
    row("whole: fpscope (start-up + reveal + close)", whole_f)
    row("whole: per-pair (start-up + extrap. + close)", whole_p)
    print("phases of fpscope's reveal (s): " + ", ".join(
        f"{p} {v:.2f}" for p, v in res.stats.phases.items()) + f"; every per-pair tree equals "
        f"fpscope's for its element; load average at the end: {load_average()}")
    print(f"ratio fpscope / per-pair (whole runs, per-pair extrapolated): "
          f"{whole_f / whole_p:.2e} (per-pair {whole_p / whole_f:,.0f}x longer; "
          f"{whole_p / 3600:.1f} h against {whole_f:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
