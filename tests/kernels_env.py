"""A test kernel whose summation order is chosen by an environment variable (tests of gates).

``env_sum(x)`` sums a 1-D float32 array in float32: left to right (``FPSCOPE_TEST_ORDER`` unset or
``sequential``) or pairwise (``pairwise``: adjacent pairs, then pairs of pairs, an odd last
element carried up a level); ``sequential-fp64`` is the left-to-right order with a float64
accumulator rounded to float32 once at the end (the same tree, other node arithmetic). The variable is read on every call, so a test can change the
kernel's order with ``monkeypatch.setenv`` without re-importing it. Used as the target
``<absolute path>/kernels_env.py:env_sum``.
"""

from __future__ import annotations

import os

import numpy as np


def env_sum(x):
    """Sum of ``x`` (1-D, float32) as a numpy.float32, in the order FPSCOPE_TEST_ORDER names.

    Raises:
        ValueError: FPSCOPE_TEST_ORDER is not "sequential", "sequential-fp64" or "pairwise".
    """
    order = os.environ.get("FPSCOPE_TEST_ORDER", "sequential")
    v = np.asarray(x, dtype=np.float32)
    if order == "sequential":
        return np.add.accumulate(v, dtype=np.float32)[-1]  # ((x0 + x1) + x2) + ...
    if order == "sequential-fp64":  # float64 partial sums (exact widening), one rounding
        return np.float32(np.add.accumulate(v.astype(np.float64))[-1])
    if order != "pairwise":
        raise ValueError(f"FPSCOPE_TEST_ORDER must be sequential, sequential-fp64 or pairwise, "
                         f"got {order!r}")
    while v.size > 1:
        head = v[: v.size // 2 * 2]
        pairs = head[0::2] + head[1::2]  # float32 + float32 rounds to float32
        v = np.concatenate([pairs, v[head.size:]])
    return v[0]
