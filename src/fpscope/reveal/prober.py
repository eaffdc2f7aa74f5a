"""The probe interface of the reveal: :class:`Prober` asks a target for l(i, j), one probe a row.

A probe (:mod:`fpscope.masks`) puts +M at leaf i, -M at leaf j and a unit u on every other leaf;
the op returns (n - l(i, j)) * u, l(i, j) the number of leaves under the lowest common ancestor
of i and j. Rows that carry the probes of several leaf sets at once are
:mod:`fpscope.reveal.packing`'s; :class:`RevealError` is the error of every part of the reveal.
"""

from __future__ import annotations

import numpy as np

from ..masks import Mask
from ..targets.base import Target


class RevealError(RuntimeError):
    """The target does not behave as a fixed tree of rounded additions; ``kind`` says which check.

    kinds: "not-units" (a probe output is not a whole number of units), "inconsistent" (probe
    results contradict each other or the tree), "nondeterministic", "batch-mismatch",
    "units" (n units do not sum to n * u), "mask" (the mask does not absorb), "nan" (the op
    returned NaN for finite probe inputs). "units" and "nan" (:data:`INPUT_KINDS`) say the op
    cannot be probed as given (bad input: CLI exit code 2), the others that a check failed.
    """

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind
        self.result = None  # for kind "replay": the RevealResult whose replay failed


INPUT_KINDS = ("units", "nan")


def nan_error(prober: "Prober", inputs: str) -> RevealError:
    """The one-line error for an op that returned NaN for finite probe ``inputs``."""
    t = prober.target
    name = str(getattr(t, "name", "the op"))
    who = f"the callable {name}" if ":" in name else name
    fmt = getattr(t.in_format, "name", t.in_format)
    return RevealError(
        "nan",
        f"{who} returned NaN for the probe inputs ({inputs}; n = {prober.n}, {fmt}): a sum of "
        f"finite inputs is never NaN, so it is not a plain sum of its inputs or it overflows or "
        f"divides on those values",
    )


class Prober:
    """Answers l(i, j) for batches of pairs through a target.

    Four ways to ask, chosen from what the target offers:
    * "rows": one probe vector per row of ``target.evaluate`` (reductions);
    * "outer-rows": matrix ops whose mask cannot be split across A and B (u != 1, e.g. fp16):
      one probe vector per row of A, B = ones;
    * "single": matrix ops whose outputs do not share one K-order: ``target.evaluate``, one
      call per probe, output (0, 0);
    * "grid": matrix ops with u = 1: +M in row r of A at the pivot, -M in column c of B at the
      partner; output (r, c) answers the pair (pivot_r, partner_c), so one call answers R * C
      pairs (NUMERICS.md section 1, batched probing). It assumes every output shares one K-order;
      the reveal checks that.

    In "rows" mode one row may also carry the probes of several leaf sets
    (:func:`fpscope.reveal.packing.count_packed`, :func:`fpscope.reveal.packing.membership_rows`);
    they share this prober's buffer (:meth:`buffer`), its ``history`` and its counters.

    Args:
        target: the black box (see :mod:`fpscope.targets.base`).
        mask: probe values.
        max_batch_bytes: memory cap of one batched call's input buffer (16 MB: 256 fp32 rows
            at n = 16384, the fastest of 4-32 MB in benchmarks/bench_reveal.py).
        mode: "single" for one op call per probe (output (0, 0) of a matrix op); by default
            the mode follows from the target and the mask as above.
    """

    def __init__(self, target: Target, mask: Mask, max_batch_bytes: int = 16 << 20, mode: str | None = None):
        self.target = target
        self.mask = mask
        self.n = target.n
        self.probes = 0
        self.dtype = target.in_format.numpy_dtype()
        self.max_rows = max(1, max_batch_bytes // (self.dtype.itemsize * self.n))
        if mode == "single":  # one op call per probe, output (0, 0) of a matrix op
            self.mode = "single"
        elif target.is_matrix:  # multi-output ops without products take probes on rows only
            self.mode = "grid" if mask.u == 1.0 and target.has_products else "outer-rows"
            if self.mode == "outer-rows":
                self.max_rows = max(1, min(self.max_rows, target.max_rows))
        else:
            self.mode = "rows"
        self.cache: dict[tuple[int, int], int] = {}  # grid mode answers more than was asked
        self.table: np.ndarray | None = None  # all pairs, after prefetch_all
        self.history: list[tuple[np.ndarray, np.ndarray]] = []
        self._buf: np.ndarray | None = None
        self._bg: tuple = (None, 0)  # (value, rows): the first rows hold only that value
        self.packed_calls = 0  # calls of packed count or membership rows
        self.membership_sets = 0  # leaf sets classified with membership probes
        self.hidden_leaves = 0  # leaves of interval sets below their pivot's subtree
        #: None, or ``heartbeat(probes)`` called after every op call of a batch with the probes
        #: answered so far (``probes`` counts a batch only at its end): progress bars move
        #: during batches that take minutes at large n (``fpscope reveal --n 10000000``)
        self.heartbeat = None
        self._flight = (0, 0)  # (self.probes when the running batch began, answered in it)

    def beat(self, answered: int) -> None:
        """After one op call of a batch that answered ``answered`` probes: tell
        :attr:`heartbeat` the probes answered so far, this batch's included."""
        base, done = self._flight
        if base != self.probes:  # a new batch (the last one was counted in self.probes)
            base, done = self.probes, 0
        self._flight = (base, done + answered)
        if self.heartbeat is not None:
            self.heartbeat(base + done + answered)

    # -- probe inputs -------------------------------------------------------------------------
    def probe_rows(self, pairs: np.ndarray) -> np.ndarray:
        """(P, n) probe inputs in the storage dtype: units, +M at pairs[:, 0], -M at pairs[:, 1]."""
        X = np.full((len(pairs), self.n), self.mask.u, dtype=self.dtype)
        rows = np.arange(len(pairs))
        X[rows, pairs[:, 0]] = self.mask.M
        X[rows, pairs[:, 1]] = -self.mask.M
        return X

    def to_lca_sizes(self, out: np.ndarray, pairs: np.ndarray) -> np.ndarray:
        """Convert probe outputs (n - l) * u to l, refusing anything that is not whole units."""
        out = np.asarray(out, dtype=np.float64)
        k = out / self.mask.u
        if np.isnan(out).any():
            b = int(np.flatnonzero(np.isnan(out))[0])
            i, j = (int(v) for v in pairs[b])
            raise nan_error(self, f"units with +M at {i} and -M at {j} (M = {self.mask.M!r})")
        ok = np.isfinite(k) & (k == np.round(k)) & (k >= 0) & (k <= self.n - 2)
        if not ok.all():
            b = int(np.flatnonzero(~ok)[0])
            i, j = (int(v) for v in pairs[b])
            raise RevealError(
                "not-units",
                f"probe ({i}, {j}) returned {out[b]!r}, not a whole number of units u = "
                f"{self.mask.u!r} in [0, n-2]: the mask does not absorb the units or the op is "
                f"not a fixed tree of rounded additions (compensated or exact summation?)",
            )
        return (self.n - k).astype(np.int64)

    # -- queries ------------------------------------------------------------------------------
    def lca_sizes(self, pairs) -> np.ndarray:
        """l values for an array of (i, j) pairs with i != j."""
        pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
        if self.table is not None:
            return self.table[pairs[:, 0], pairs[:, 1]]
        vals = self.fetch(pairs)
        self.history.append((pairs, vals))
        return vals

    def fetch(self, pairs: np.ndarray) -> np.ndarray:
        """Fresh answers from the target (no table; the grid cache is used and refreshed)."""
        if self.mode == "grid":
            return self._fetch_grid(pairs)
        res = np.empty(len(pairs), dtype=np.int64)
        buf, m = self.buffer(self.mask.u, min(len(pairs), self.max_rows)), self.mask
        for s in range(0, len(pairs), self.max_rows):
            chunk = pairs[s : s + self.max_rows]
            rows = np.arange(len(chunk))
            buf[rows, chunk[:, 0]] = m.M
            buf[rows, chunk[:, 1]] = -m.M
            try:
                X = buf[: len(chunk)]
                if self.mode in ("rows", "single"):
                    out = self.target.evaluate(X)
                else:
                    ones = np.ones((self.n, 1), dtype=self.dtype)
                    out = self.target.evaluate_outer(X, ones)[:, 0]
            finally:
                buf[rows, chunk[:, 0]] = m.u
                buf[rows, chunk[:, 1]] = m.u
            res[s : s + len(chunk)] = self.to_lca_sizes(out, chunk)
            self.beat(len(chunk))
        self.probes += len(pairs)
        return res

    def buffer(self, background: float, rows: int) -> np.ndarray:
        """The probe buffer, its first ``rows`` rows all ``background`` (u for plain probes, 0
        for packed and membership rows); callers use those rows only and leave them so. Rows
        are refilled only when the background changes or more of them are needed."""
        if self._buf is None:
            self._buf = self.target.input_buffer(self.max_rows) if self.mode == "rows" else \
                np.empty((self.max_rows, self.n), dtype=self.dtype)
        value, held = self._bg
        if value != background:
            value, held = background, 0
        if held < rows:
            self._buf[held:rows] = background
            held = rows
        self._bg = (value, held)
        return self._buf

    # -- grid mode (matrix ops, u = 1) -------------------------------------------------------
    def grid_call(self, prow: np.ndarray, ccol: np.ndarray) -> np.ndarray:
        """One call: output (r, c) answers (prow[r], ccol[c]); returns the (R, C) l values (-1
        where prow[r] == ccol[c])."""
        m = self.mask
        P = np.ones((len(prow), self.n), dtype=self.dtype)
        P[np.arange(len(prow)), prow] = m.M
        Q = np.ones((self.n, len(ccol)), dtype=self.dtype)
        Q[ccol, np.arange(len(ccol))] = -m.M
        # products: 1 for units, M at the pivot, -M at the partner; the product at
        # k = prow[r] = ccol[c] is -M*M (overflow), an output we never read.
        out = np.asarray(self.target.evaluate_outer(P, Q), dtype=np.float64)
        valid = prow[:, None] != ccol[None, :]
        L = self.grid_sizes(out, valid)
        if L is None:  # some output is not whole units: the slow path names it
            rr, cc = np.meshgrid(prow, ccol, indexing="ij")
            L = np.full(out.shape, -1, dtype=np.int64)
            L[valid] = self.to_lca_sizes(out[valid], np.stack([rr[valid], cc[valid]], axis=1))
        self.probes += int(valid.sum())
        self.beat(0)
        return L

    def grid_sizes(self, out: np.ndarray, valid: np.ndarray) -> np.ndarray | None:
        """:meth:`to_lca_sizes` of a grid call's (R, C) outputs where ``valid`` (-1 elsewhere),
        without building the pairs: None when an output is not a whole number of units in
        [0, n-2] (the caller asks :meth:`to_lca_sizes`, whose error names it)."""
        k = out / self.mask.u if self.mask.u != 1.0 else out
        with np.errstate(invalid="ignore"):
            ki = np.where(valid, k, 0.0).astype(np.int64)  # NaN, inf: an integer != k
        good = (ki == k) | ~valid
        if not (good.all() and ki.min() >= 0 and ki.max() <= self.n - 2):
            return None
        return np.where(valid, self.n - ki, -1)

    def _fetch_grid(self, pairs: np.ndarray) -> np.ndarray:
        t = self.target
        pivots = np.unique(pairs[:, 0])
        for ps in range(0, len(pivots), t.max_rows):
            prow = pivots[ps : ps + t.max_rows]
            cols = np.unique(pairs[np.isin(pairs[:, 0], prow), 1])
            for cs in range(0, len(cols), t.max_cols):
                ccol = cols[cs : cs + t.max_cols]
                L = self.grid_call(prow, ccol)
                for r, i in enumerate(prow.tolist()):
                    for c, j in enumerate(ccol.tolist()):
                        if i != j:
                            self.cache[(i, j)] = int(L[r, c])
        return np.asarray([self.cache[(i, j)] for i, j in pairs.tolist()], dtype=np.int64)

    def prefetch_all(self) -> bool:
        """Matrix ops with R, C >= n in grid mode: every pair in one call. True if done.

        Raises:
            RevealError("inconsistent"): outputs (i, j) and (j, i) disagree, i.e. the outputs
                do not share one K-order.
        """
        t = self.target
        if not (self.mode == "grid" and t.max_rows >= self.n and t.max_cols >= self.n and self.n >= 2):
            return False
        idx = np.arange(self.n)
        L = self.grid_call(idx, idx)
        np.fill_diagonal(L, 1)
        if not np.array_equal(L, L.T):
            i, j = (int(v) for v in np.argwhere(L != L.T)[0])
            raise RevealError(
                "inconsistent",
                f"outputs ({i},{j}) and ({j},{i}) disagree on l({i},{j}) ({L[i, j]} vs "
                f"{L[j, i]}): the outputs of this matrix op do not share one K-order",
            )
        self.table = L
        return True
