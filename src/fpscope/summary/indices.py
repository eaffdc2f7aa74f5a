"""Names for sets of input indices ("x0, x8, ..., x120 (16 terms)"): :func:`index_set` and
:func:`set_phrase`, used for sub-tree labels by the renderer and the reports."""

from __future__ import annotations

import numpy as np

from ..tree import C_LEAF
from .stats import _MAX_LISTED


# -- sets of input indices -------------------------------------------------------------------------
def index_set(indices) -> dict:
    """Classify a set of input indices (ints; "C" is ignored).

    Returns ``kind`` and ``n``, ``lo``, ``hi`` (-1 when empty):

    * "empty"; "contiguous" (lo..hi);
    * "progressions": a union of q <= 64 arithmetic progressions with one ``stride``, each
      starting below lo + stride (``starts``, ascending, and ``lengths``): x0, x8, ..., x120 is
      one (stride 8), x0, x1, x8, x9, ..., x121 two; on average at least two terms each;
    * "scattered": anything else.

    Sets of at most 6 non-contiguous indices also list them (``indices``). O(q n log n) in numpy for q progressions; fast for sets of 10^5 indices.
    """
    vals = [v for v in indices if v != C_LEAF]
    if not vals:
        return {"kind": "empty", "n": 0, "lo": -1, "hi": -1}
    a = np.unique(np.asarray(vals, dtype=np.int64))
    m, lo, hi = len(a), int(a[0]), int(a[-1])
    base = {"n": m, "lo": lo, "hi": hi}
    if hi - lo + 1 == m:
        return {"kind": "contiguous", **base}
    if m <= 6:
        base["indices"] = [int(v) for v in a]

    def closed(x, s: int) -> bool:
        # every element at or above lo + s has its predecessor x - s in the set
        y = x[x >= lo + s] - s
        if not len(y):
            return True
        i = np.searchsorted(a, y)
        i[i >= m] = m - 1
        return bool(np.all(a[i] == y))

    for q in range(1, min(_MAX_LISTED, m // 2) + 1):
        s = int(a[q] - lo)
        if not closed(a[: min(m, 4 * q + 4)], s) or not closed(a, s):
            continue
        starts = a[:q]
        counts = np.bincount((a - lo) % s, minlength=s)[starts - lo]
        return {"kind": "progressions", **base, "stride": s, "starts": [int(v) for v in starts],
                "lengths": [int(c) for c in counts]}
    return {"kind": "scattered", **base}


def _ap_text(start: int, step: int, length: int, prefix: str = "x") -> str:
    items = [f"{prefix}{start + i * step}" for i in range(min(length, 3))]
    if length <= 3:
        return ", ".join(items)
    return f"{items[0]}, {items[1]}, ..., {prefix}{start + (length - 1) * step}"


def _int_set_text(values: list) -> str:
    values = sorted(values)
    if len(values) <= 6:
        return "{" + ", ".join(str(v) for v in values) + "}"
    info = index_set(values)
    if info["kind"] == "contiguous":
        return f"{{{values[0]}, ..., {values[-1]}}}"
    if info["kind"] == "progressions" and len(info["starts"]) == 1:
        return "{" + _ap_text(values[0], info["stride"], len(values), prefix="") + "}"
    return "{" + ", ".join(str(v) for v in values[:4]) + f", ..., {values[-1]}}}"


def set_phrase(info: dict, noun: str = "terms", count: bool = True) -> str:
    """Words for an :func:`index_set` result: "x0..x127 (128 terms)", "x0, x8, ..., x120
    (16 terms)", "x0, x8, ..., x472 and x1, x9, ..., x473 (120 terms)", "x[r + 8k] for r in
    {0, 1, 4, 5}, k = 0..1023 (4096 terms)", or "240 terms from x0..x477". ``count=False``
    leaves out the "(128 terms)" suffix."""
    kind, m, lo, hi = info["kind"], info["n"], info["lo"], info["hi"]
    one = noun.rstrip("s") if m == 1 else noun
    if kind == "empty":
        return f"no {noun}"
    if kind == "contiguous":
        return f"x{lo}" if m == 1 else f"x{lo}..x{hi}" + (f" ({m} {noun})" if count else "")
    if m <= 6 and info.get("indices"):
        return ", ".join(f"x{v}" for v in info["indices"]) + (f" ({m} {noun})" if count else "")
    if kind == "progressions":
        s, starts, lens = info["stride"], info["starts"], info["lengths"]
        if len(starts) <= 2:
            text = " and ".join(_ap_text(a, s, c) for a, c in zip(starts, lens))
        else:
            if len(starts) >= 3 and starts[-1] - starts[0] == len(starts) - 1:
                text = f"x[r + {s}k] for r = {starts[0]}..{starts[-1]}"
            else:
                text = f"x[r + {s}k] for r in {_int_set_text(starts)}"
            if min(lens) == max(lens):
                text += f", k = 0..{lens[0] - 1}"
            elif all(a + s * c > hi for a, c in zip(starts, lens)):
                text += f", up to x{hi}"
            else:
                text += f", {min(lens)}-{max(lens)} {noun} each"
        return f"{text} ({m} {one})" if count else text
    return f"{m} {noun} from x{lo}..x{hi}"
