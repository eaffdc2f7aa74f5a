"""The published FPRev algorithm, re-implemented faithfully as the benchmarks' baseline.

FPRev: Xie et al., "Revealing Floating-Point Accumulation Orders in Software/Hardware
Implementations", USENIX ATC 2025 (arXiv 2411.00442); reference code github.com/peichenxie/FPRev.
What the reference code does, and this module does too:

* the operation is an ``AccumImpl``: its input array is built once (all ones, float32) and
  modified in place for every probe: ``set_mask(i, +M)``, ``set_mask(j, -M)``, one call of the
  op (``get_l``: ``n - int(op(data))``), ``reset_mask`` of both positions back to 1;
* M = 2^127, unit 1;
* FPRev is recursive, its pivot is the lowest index of the leaf set, one op call per probe,
  no checks (no determinism, ultrametric or mask check);
* the probed op is what the reference's ``accumimpls/numpy.py`` calls: ``data.sum()`` for
  np.sum, ``data @ ones`` for np.dot, ``(data @ ones)[0, 0]`` for a GEMM (an n x n operand whose
  row 0 is the probe, every other entry 1), and ``(data @ ones)[0]`` for x @ A.

The tree comes back as nested tuples (leaves are indices; a k-term node is a k-tuple), the
form :class:`fpscope.tree.SumTree` accepts, so the benchmark can compare it with fpscope's.

Run as a script (``python benchmarks/fprev_published.py [N]``) it reveals np.sum fp32 of N
leaves (default 1000) and prints the tree: the whole-process baseline of
``fpscope reveal numpy.sum --n N``. It imports numpy and nothing of fpscope.
"""

from __future__ import annotations

import sys

import numpy

M = 2.0**127


class NumpySum:
    """``data.sum()`` of a float32 vector (the reference's ``NumpySum``)."""

    def __init__(self, n: int):
        self.n_summands = n
        self.data = numpy.ones([n], dtype=numpy.float32)

    def set_mask(self, k: int, negative: bool):
        self.data[k] = -M if negative else M

    def reset_mask(self, k: int):
        self.data[k] = 1

    def get_l(self) -> int:
        return self.n_summands - int(self.data.sum())


class NumpyDot(NumpySum):
    """``data @ ones`` of two float32 vectors (the reference's ``NumpyDot``)."""

    def __init__(self, n: int):
        super().__init__(n)
        self.ones = numpy.ones([n], dtype=numpy.float32)

    def get_l(self) -> int:
        return self.n_summands - int(self.data @ self.ones)


class NumpyGEMV(NumpySum):
    """Output 0 of ``data @ ones`` with ones of shape (n, n) (the reference's ``NumpyGEMV``)."""

    def __init__(self, n: int):
        super().__init__(n)
        self.ones = numpy.ones([n, n], dtype=numpy.float32)

    def get_l(self) -> int:
        return self.n_summands - int((self.data @ self.ones)[0])


class NumpyGEMM:
    """C[0, 0] of ``data @ ones``, both n x n float32, the probe in row 0 of data (the
    reference's ``NumpyGEMM``: one full GEMM per probe)."""

    def __init__(self, n: int):
        self.n_summands = n
        self.data = numpy.ones([n, n], dtype=numpy.float32)
        self.ones = numpy.ones([n, n], dtype=numpy.float32)

    def set_mask(self, k: int, negative: bool):
        self.data[0, k] = -M if negative else M

    def reset_mask(self, k: int):
        self.data[0, k] = 1

    def get_l(self) -> int:
        return self.n_summands - int((self.data @ self.ones)[0, 0])


def fprev(impl):
    """The published FPRev: returns (tree as nested tuples, calls of the op).

    For a leaf set S (sorted): pivot i = its lowest index; for every other j in S one probe
    l(i, j) (set +M at i and -M at j, call, restore); group the j by l ascending; each group is
    revealed recursively; a group that is a complete subtree (the recursive call's root holds
    exactly the group's leaves) is joined to the running subtree by a new two-term node,
    otherwise the group's root is a multi-term node that also takes the running subtree as one
    more child.
    """
    n = impl.n_summands
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 4 * n + 100))
    calls = 0

    def solve(leaves):
        # returns (node, leaves under the root): the root of a multi-term node that is still
        # open (more children come from the caller's running subtree) has size > len(leaves)
        nonlocal calls
        if len(leaves) == 1:
            return leaves[0], 1
        i = leaves[0]
        groups: dict[int, list] = {}
        for j in leaves[1:]:
            impl.set_mask(i, False)
            impl.set_mask(j, True)
            l = impl.get_l()
            impl.reset_mask(i)
            impl.reset_mask(j)
            calls += 1
            groups.setdefault(l, []).append(j)
        node, size = i, 1
        for l in sorted(groups):
            group = groups[l]
            sub, sub_size = solve(group)
            if sub_size == len(group):  # a complete subtree: a new binary node
                node = (node, sub)
            else:  # group is some children of an l-leaf multi-term node: the running subtree joins
                node = sub + (node,) if isinstance(sub, tuple) else (sub, node)
            size = l
        return node, size

    root, _ = solve(list(range(n)))
    return root, calls


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    n = int(argv[0]) if argv else 1000
    tree, calls = fprev(NumpySum(n))
    print(f"np.sum fp32 n={n}: {calls} calls")
    print(tree)
    return 0


if __name__ == "__main__":
    sys.exit(main())
