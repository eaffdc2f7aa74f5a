"""Constructors of known summation-tree families, used as ground truth by the tests.

Import from a test module as ``from families import numpy_pairwise_sum_tree`` (pytest's default
"prepend" import mode puts ``tests/`` on ``sys.path``; no conftest is needed).

Every constructor returns a :class:`fpscope.tree.SumTree` over the leaves 0..n-1 (plus the
accumulator leaf ``"C"`` where asked). Nested structures are built iteratively or with recursion
depth O(log n), so n in the tens of thousands is fine.
"""

from __future__ import annotations

from typing import Callable, Sequence, Union

import numpy as np

from fpscope.tree import C_LEAF, SumTree

Inner = Union[str, Callable[[Sequence[int]], object]]


# -- nested-structure builders (operate on explicit lists of leaf indices) -----------------------
def seq_fold(items: Sequence) -> object:
    """Left fold ((items[0] + items[1]) + items[2]) + ... ; items may be leaves or subtrees."""
    if len(items) == 0:
        raise ValueError("seq_fold of an empty list")
    acc = items[0]
    for it in items[1:]:
        acc = (acc, it)
    return acc


def pairwise_split(items: Sequence) -> object:
    """Recursive halving: split at floor(len/2), sum each half, add the halves (depth O(log n))."""
    if len(items) == 1:
        return items[0]
    h = len(items) // 2
    return (pairwise_split(items[:h]), pairwise_split(items[h:]))


def _numpy_block(idx: Sequence[int]) -> object:
    """numpy's float32 contiguous-sum kernel for one block of <= 128 elements (see below)."""
    m = len(idx)
    if m < 8:
        return seq_fold(list(idx))
    main = m - m % 8
    lanes = [seq_fold([idx[i] for i in range(r, main, 8)]) for r in range(8)]
    acc = ((lanes[0], lanes[1]), (lanes[2], lanes[3])), ((lanes[4], lanes[5]), (lanes[6], lanes[7]))
    for i in range(main, m):
        acc = (acc, idx[i])
    return acc


def _numpy_rec(idx: Sequence[int]) -> object:
    m = len(idx)
    if m <= 128:
        return _numpy_block(idx)
    n2 = m // 2
    n2 -= n2 % 8
    return (_numpy_rec(idx[:n2]), _numpy_rec(idx[n2:]))


def numpy_pairwise_sum_tree(n: int) -> SumTree:
    """The accumulation order of ``numpy.sum`` on a contiguous float32 vector of length n.

    numpy's ``pairwise_sum`` (numpy/_core/src/umath/loops_utils.h.src), as revealed with FPRev on
    numpy 2.4.6 / AVX-512 (NUMERICS.md section 1):

    * n < 8: sequential left fold.
    * 8 <= n <= 128: 8 lane accumulators r = 0..7; lane r is the sequential fold of x[r], x[r+8],
      x[r+16], ... over the first n - n % 8 elements; the lanes are combined as
      ((0+1)+(2+3))+((4+5)+(6+7)); then the n % 8 tail elements are added one at a time.
    * n > 128: split at n2 = n//2 - (n//2) % 8, recurse on x[:n2] and x[n2:], add the two results.

    Raises ValueError for n < 1.
    """
    if n < 1:
        raise ValueError("n must be >= 1")
    return SumTree(_numpy_rec(list(range(n))))


def strided_lanes_tree(n: int, k: int, combine: str = "pairwise") -> SumTree:
    """k accumulators with stride k; lane r sums x[r], x[r+k], x[r+2k], ... sequentially.

    All n elements go into the lanes (lanes r < n % k hold one element more). The k lane results
    are combined ``"pairwise"`` (recursive halving over lane indices: ((0+1)+(2+3))+... for k = 8),
    ``"sequential"`` (((0+1)+2)+...) or ``"halving"`` (SIMD horizontal reduction: lane j + lane
    j + k/2, repeatedly; k a power of two).

    Raises ValueError unless 1 <= k <= n and combine is one of the three names.
    """
    if not 1 <= k <= n:
        raise ValueError("need 1 <= k <= n")
    lanes = [seq_fold(list(range(r, n, k))) for r in range(k)]
    if combine == "pairwise":
        root = pairwise_split(lanes)
    elif combine == "sequential":
        root = seq_fold(lanes)
    elif combine == "halving":
        if k & (k - 1):
            raise ValueError("halving needs k a power of two")
        items = lanes
        while len(items) > 1:
            h = len(items) // 2
            items = [(items[j], items[j + h]) for j in range(h)]
        root = items[0]
    else:
        raise ValueError(f"unknown combine {combine!r}")
    return SumTree(root)


def _inner_builder(inner: Inner) -> Callable[[Sequence[int]], object]:
    if callable(inner):
        return inner
    table = {
        "sequential": lambda idx: seq_fold(list(idx)),
        "reverse": lambda idx: seq_fold(list(idx)[::-1]),
        "pairwise": lambda idx: pairwise_split(list(idx)),
        "numpy": _numpy_rec,
    }
    if inner not in table:
        raise ValueError(f"unknown inner tree {inner!r}; use one of {sorted(table)} or a callable")
    return table[inner]


def blocked_tree(n: int, b: int, inner: Inner = "sequential") -> SumTree:
    """Blocked panels: x is cut into blocks of b (the last one may be shorter); each block is summed
    by its own sub-tree ``inner`` and the block results are added sequentially
    (((B0 + B1) + B2) + ...).

    ``inner`` is "sequential", "reverse", "pairwise", "numpy" or a callable mapping a list of leaf
    indices to a nested tuple. Raises ValueError unless 1 <= b <= n.
    """
    if not 1 <= b <= n:
        raise ValueError("need 1 <= b <= n")
    build = _inner_builder(inner)
    blocks = [build(list(range(s, min(s + b, n)))) for s in range(0, n, b)]
    return SumTree(seq_fold(blocks))


def fused_chain_tree(n: int, L: int, with_c: bool = True) -> SumTree:
    """A chain of fused nodes as in a tensor-core K loop (FPRev: fan-in 5/9/17 on V100/A100/H100).

    The first node is C + the first L leaves (or just the first L leaves if ``with_c`` is False);
    each next node is the previous node + the next L leaves; the last node takes what is left.
    Raises ValueError unless 1 <= L and n >= 1 (and n >= 2 when with_c is False).
    """
    if L < 1 or n < 1 or (not with_c and n < 2):
        raise ValueError("need L >= 1 and n >= 1 (n >= 2 without C)")
    first = list(range(min(L, n)))
    acc: object = tuple([C_LEAF] + first) if with_c else (tuple(first) if len(first) > 1 else first[0])
    start = len(first)
    while start < n:
        chunk = list(range(start, min(start + L, n)))
        acc = tuple([acc] + chunk)
        start += len(chunk)
    return SumTree(acc)


def random_tree(n: int, rng: np.random.Generator, max_fan_in: int = 2, with_c: bool = False) -> SumTree:
    """A random summation tree: repeatedly merge 2..max_fan_in randomly chosen partial sums.

    ``rng`` is a numpy Generator (e.g. ``np.random.default_rng(seed)``). With ``with_c`` the leaf
    "C" is one more initial item. Raises ValueError for n < 1 or max_fan_in < 2.
    """
    if n < 1 or max_fan_in < 2:
        raise ValueError("need n >= 1 and max_fan_in >= 2")
    items: list = list(range(n)) + ([C_LEAF] if with_c else [])
    if len(items) == 1:
        return SumTree(items[0])
    while len(items) > 1:
        k = int(rng.integers(2, min(max_fan_in, len(items)) + 1))
        pick = sorted(rng.choice(len(items), size=k, replace=False).tolist(), reverse=True)
        group = [items.pop(i) for i in pick]
        items.append(tuple(group))
    return SumTree(items[0])


def register_lanes_tree(n: int, registers: int = 8, width: int = 8) -> SumTree:
    """A SIMD kernel with ``registers`` vector accumulators of ``width`` lanes each (numpy.dot via
    OpenBLAS sdot, float32, as revealed by fpscope on x86-64: 8 registers x 8 lanes).

    Lane j = register j // width, element j % width accumulates x[j], x[j + k], x[j + 2k], ...
    sequentially (k = registers * width). At the end the registers are added element-wise as
    ((R0 + R1) + (R2 + R3)) + (R4 + R5) + ... (pairs, then a left fold of the pairs), and the
    ``width`` elements of the result are summed horizontally by halving:
    ((e0 + e4) + (e1 + e5)) + ((e2 + e6) + (e3 + e7)) for width 8.

    Raises ValueError unless registers and width are even, n is a multiple of k and n >= 2k.
    """
    k = registers * width
    if registers % 2 or width % 2 or n % k or n < 2 * k:
        raise ValueError("need even registers and width, and n a multiple of registers*width, >= 2x")
    lanes = [seq_fold(list(range(j, n, k))) for j in range(k)]
    elems = []
    for e in range(width):
        regs = [lanes[p * width + e] for p in range(registers)]
        elems.append(seq_fold([(regs[i], regs[i + 1]) for i in range(0, registers, 2)]))
    return SumTree(pairwise_split([(elems[e], elems[e + width // 2]) for e in range(width // 2)]))


def kahan_sum(x) -> np.float32:
    """Kahan's compensated float32 summation of x: no tree of rounded additions reproduces it
    (the reveal must refuse it in the replay)."""
    s = np.float32(0)
    c = np.float32(0)
    for v in x:
        y = np.float32(v - c)
        t = np.float32(s + y)
        c = np.float32(np.float32(t - s) - y)
        s = t
    return s
