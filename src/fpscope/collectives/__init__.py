"""Collectives: how distributed reductions add, across ranks, message sizes and algorithms.

This subpackage owns the collective targets and the processes behind them: leaves are ranks
0..P-1 and every element of the buffer is an output with its own summation tree (ring
all-reduce uses one tree per chunk; NUMERICS.md section 4). :mod:`.world` starts the P rank
processes itself (torch.distributed with gloo on 127.0.0.1, or nccl where GPUs exist; mpi4py
under mpiexec) and moves buffers to and from them; :mod:`.rank` is the code each rank runs;
:mod:`.runs` reveals again with fresh ranks where a library picks its order per communicator;
:mod:`.target` presents a collective as a matrix op without products, so that the multi-output
reveal (:mod:`fpscope.reveal.classes`) finds every tree from shared calls, and checks on every
call that all ranks received identical bits. The revealing algorithms know nothing of ranks.
"""

from __future__ import annotations

from .target import ALIASES, NAMES, CollectiveTarget, canonical

__all__ = ["CollectiveTarget", "NAMES", "ALIASES", "canonical", "reveal_runs"]


def __getattr__(name):
    if name == "reveal_runs":  # imports the reveal machinery: only when asked
        from .runs import reveal_runs

        return reveal_runs
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
