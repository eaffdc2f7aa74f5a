"""Reveal the summation tree of a black-box reduction: FPRev, BasicFPRev and their checks.

Source: Xie et al., "FPRev: Revealing the Order of Floating-Point Summation by Numerical Testing",
USENIX ATC 2025 (arXiv 2411.00442). The probe is described in :mod:`fpscope.masks`; l(i, j) is the
number of leaves under the lowest common ancestor of leaves i and j.

Differences from the published reference implementation (fpscope NUMERICS.md section 1):
* iterative (breadth-first stages), so trees of any depth work;
* all probes of one stage are sent to the target as one batch (one GEMM for matrix ops);
* reductions pack the probes of several leaf sets into one input row (bit fields of unit
  counts, a guard leaf proving each set complete), and large sets whose levels repeat are
  classified with membership probes, one bit a leaf (:func:`fprev`);
* a pivot rule that switches to the highest index, then to random pivots, when a pivot keeps
  producing one giant group (chains in either direction cost about n to 2n probes);
* checks: output of each probe is a whole number of units; group sizes add up (this makes every
  probed l value agree with the tree); extra random pairs agree with the tree; repeated probes are
  identical (determinism); the batched path agrees with one call per probe.

Modules, each using only those above it:
* :mod:`.prober`: :class:`Prober`, one probe a row (or a GEMM answering many), and
  :class:`RevealError`;
* :mod:`.packing`: rows carrying the probes of several leaf sets: count probes in bit fields
  (:class:`CountRequest`, ``count_packed``) and membership probes (``membership_rows``), with
  why their answers are exact;
* :mod:`.tasks`: FPRev's leaf sets and the tree assembled from their groups;
* :mod:`.staged`: packed FPRev, with the method and its exactness argument;
* :mod:`.algorithms`: :func:`fprev` and :func:`basic_fprev`;
* :mod:`.checks`: :func:`lca_sizes_of_tree` and the consistency checks;
* :mod:`.driver`: :func:`reveal` and :class:`RevealResult`.
"""

from .algorithms import basic_fprev, fprev
from .checks import (
    check_absorbs,
    check_batched,
    check_random_pairs,
    check_repeat,
    check_shared_order,
    check_units,
    lca_sizes_of_tree,
)
from .driver import RevealResult, RevealStats, reveal
from .packing import CountRequest
from .prober import Prober, RevealError

__all__ = [
    "CountRequest", "Prober", "RevealError", "RevealResult", "RevealStats", "basic_fprev",
    "check_absorbs", "check_batched", "check_random_pairs", "check_repeat", "check_shared_order",
    "check_units", "fprev", "lca_sizes_of_tree", "reveal",
]
