"""Simulated targets: a known summation tree evaluated by :func:`fpscope.replay.replay`.

They are the ground truth of the tests (the revealed tree must equal the tree they were built
from) and a way to ask "what would this order do?" without the real library.
"""

from __future__ import annotations

import numpy as np

from ..formats import FP32, Format
from ..replay import replay
from ..tree import SumTree
from .base import Target, TargetError


class SimulatedSum(Target):
    """A reduction that adds its n inputs in the order of ``tree``.

    Args:
        tree: the summation tree (no "C" leaf).
        acc: accumulator format of every node (default fp32).
        in_format, out_format: formats of inputs and output (default: acc).
        fused_frac_bits: alignment width of fused nodes (see :func:`fpscope.replay.replay`); fused
            nodes of real matrix units truncate, which is what makes them revealable.
    """

    name = "simulated.sum"

    def __init__(
        self,
        tree: SumTree,
        acc: Format = FP32,
        in_format: Format | None = None,
        out_format: Format | None = None,
        fused_frac_bits: int | None = None,
    ):
        super().__init__(tree.n, in_format or acc, out_format or acc)
        self.tree = tree
        self.acc = acc
        self.fused_frac_bits = fused_frac_bits

    def evaluate(self, X) -> np.ndarray:
        X = self._check(X)
        self.calls += X.shape[0]
        return replay(self.tree, X.astype(np.float64), self.acc, self.out_format,
                      fused_frac_bits=self.fused_frac_bits)

    def _call_one(self, x) -> float:
        return float(replay(self.tree, np.asarray(x, dtype=np.float64), self.acc, self.out_format,
                            fused_frac_bits=self.fused_frac_bits))

    def spec(self) -> dict:
        return {"name": self.name, "n": self.n, "dtype": self.in_format.name, "acc": self.acc.name}


class SimulatedMatmul(Target):
    """A matrix op whose output (r, c) reduces its K products in the order of ``tree_for(r, c)``.

    Products are rounded to ``acc`` (no FMA), then added by :func:`fpscope.replay.replay`.

    Args:
        tree: the K-order of every output (n = K leaves).
        rows, cols: output shape M x N (the largest R and C of ``evaluate_outer``).
        acc: accumulator format (default fp32); inputs are in the same format.
        tree_for: optional function (r, c) -> SumTree overriding ``tree`` per output, to model
            outputs that do not share one K-order (edge tiles, split-K).
    """

    name = "simulated.matmul"
    is_matrix = True

    def __init__(self, tree: SumTree, rows: int, cols: int, acc: Format = FP32, tree_for=None):
        super().__init__(tree.n, acc, acc)
        self.tree = tree
        self.acc = acc
        self.max_rows, self.max_cols = rows, cols
        self.tree_for = tree_for

    def _outputs(self, prods: np.ndarray, coords) -> np.ndarray:
        from ..formats import round_to_format

        leaves = round_to_format(prods, self.acc)
        if self.tree_for is None:
            return replay(self.tree, leaves, self.acc)
        out = np.empty(len(coords))
        groups: dict = {}  # outputs of one tree replay in one batch
        for b, (r, c) in enumerate(coords):
            t = self.tree_for(r, c)
            groups.setdefault(id(t), (t, []))[1].append(b)
        for t, rows in groups.values():
            out[rows] = replay(t, leaves[rows], self.acc)
        return out

    def evaluate_outer(self, P, Q) -> np.ndarray:
        P = np.asarray(P, dtype=np.float64)
        Q = np.asarray(Q, dtype=np.float64)
        R, C = P.shape[0], Q.shape[1]
        self.calls += 1
        with np.errstate(all="ignore"):
            prods = (P[:, None, :] * Q.T[None, :, :]).reshape(R * C, self.n)
        coords = [(r, c) for r in range(R) for c in range(C)]
        return self._outputs(prods, coords).reshape(R, C)

    def _call_one(self, x) -> float:
        return float(self._outputs(np.asarray(x, dtype=np.float64)[None, :], [(0, 0)])[0])

    def spec(self) -> dict:
        return {"name": self.name, "n": self.n, "dtype": self.in_format.name,
                "shape": [self.max_rows, self.n, self.max_cols]}


class EmulatedMatmul(Target):
    """``D = A @ B`` computed by the matrix-unit emulator (:func:`fpscope.emulate.matmul`) with
    a preset's arithmetic: a tensor-core GEMM as a black box for the reveal machinery, whose
    tree shows the preset's fused nodes (e.g. fan-in 17 on Hopper fp16: 16 products plus the
    running sum).

    Args:
        profile: a :class:`fpscope.profile.Profile` with fp16 or bf16 inputs.
        dims: (M, K, N); K a multiple of ``profile.k``.

    Raises:
        TargetError: another input format, or K not a multiple of the instruction's k.
    """

    is_matrix = True

    def __init__(self, profile, dims: tuple[int, int, int]):
        from ..formats import FORMATS
        from ..profile import resolve_format

        m, k, n = dims
        if profile.in_format not in ("fp16", "bf16"):
            raise TargetError(f"emulate.matmul[{profile.name}]: revealing needs fp16 or bf16 "
                              f"inputs, the preset takes {profile.in_format}")
        if k % profile.k:
            raise TargetError(f"emulate.matmul[{profile.name}]: K = {k} is not a multiple of "
                              f"the instruction's k = {profile.k}")
        out = resolve_format(profile.out_format)
        super().__init__(k, FORMATS[profile.in_format], FORMATS.get(out.name, out))
        self.profile = profile
        self.name = f"emulate.matmul[{profile.name}]"
        self.max_rows, self.max_cols = m, n

    def _gemm(self, A, B) -> np.ndarray:
        from ..emulate import matmul

        return matmul(np.asarray(A, dtype=np.float64), np.asarray(B, dtype=np.float64),
                      profile=self.profile, dtype="float64")

    def evaluate(self, X) -> np.ndarray:
        X = self._check(X)
        self.calls += X.shape[0]
        return self._gemm(X, np.ones((self.n, 1)))[:, 0]

    def _call_one(self, x) -> float:
        return float(self._gemm(np.asarray(x)[None, :], np.ones((self.n, 1)))[0, 0])

    def evaluate_outer(self, P, Q) -> np.ndarray:
        self.calls += 1
        return self._gemm(self.as_storage(P), self.as_storage(Q))

    def spec(self) -> dict:
        return {"name": self.name, "n": self.n, "dtype": self.in_format.name,
                "out_dtype": self.out_format.name,
                "shape": [self.max_rows, self.n, self.max_cols]}


def build(name: str, *, n, shape, cond, axis, index, device=None, subscripts=None) -> Target:
    """Build ``emulate.matmul[PRESET]`` (``subscripts`` holds PRESET); see EmulatedMatmul.

    Raises:
        TargetError: unknown preset, a dtype other than the preset's input format, options the
            target does not take, bad sizes.
    """
    from ..profile import PRESETS
    from ._options import matrix_dims, refuse

    refuse(name, axis=axis, index=index)
    if device not in (None, "cpu"):
        raise TargetError(f"{name} runs on the CPU only, got device {device!r}")
    if cond.layout != "C" or cond.offset or cond.threads is not None:
        raise TargetError(f"{name} takes no --layout, --offset or --threads")
    if not subscripts:
        raise TargetError(f"{name} needs a preset in brackets, e.g. emulate.matmul[hopper-fp16] "
                          f"('fpscope profiles' lists the {len(PRESETS)} presets)")
    if subscripts not in PRESETS:
        import difflib

        close = difflib.get_close_matches(subscripts, list(PRESETS), n=1)
        raise TargetError(f"emulate.matmul[{subscripts}]: unknown preset; "
                          + (f"did you mean {close[0]!r}? " if close else "")
                          + f"'fpscope profiles' lists the {len(PRESETS)} presets")
    profile = PRESETS[subscripts]
    if cond.fmt.name != profile.in_format:
        raise TargetError(f"emulate.matmul[{subscripts}] takes {profile.in_format} inputs, "
                          f"not {cond.fmt.name}")
    return EmulatedMatmul(profile, matrix_dims(name, n, shape, True, True))
