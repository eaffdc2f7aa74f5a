"""Reading einsum subscripts as a reduction fpscope can probe.

An einsum target is named ``numpy.einsum[SUBSCRIPTS]``, e.g. ``numpy.einsum[i,i->]`` (a dot
product), ``numpy.einsum[i->]`` (a sum) or ``numpy.einsum[ij,jk->ik]`` (a matrix product). The
subscripts must describe a reduction over exactly one index k:

* one operand with one index summed away (``i->``): a vector reduction of x;
* two operands sharing k: a vector reduction of x * 1 when nothing else is left (``i,i->``),
  otherwise a product of a logical (M, K) operand (its other index a, rows) and a logical (K, N)
  operand (its other index b, columns), each stored with its axes in the order written
  (``ij,kj->ik`` stores the second operand transposed). The output may list a and b in either
  order.

Batch indices (in both operands and the output), more than one contracted index, ellipses, and
indices summed within one operand are refused.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .base import TargetError


@dataclass(frozen=True)
class EinsumPlan:
    """The roles of the indices of an einsum.

    Attributes:
        subscripts: normalised subscripts with an explicit output ("ij,jk->ik").
        inputs: subscripts of each operand.
        output: subscripts of the output.
        k: the contracted index.
        a: index of operand 0 kept in the output (rows), or None.
        b: index of operand 1 kept in the output (columns), or None.
    """

    subscripts: str
    inputs: tuple[str, ...]
    output: str
    k: str
    a: str | None
    b: str | None

    @property
    def is_matrix(self) -> bool:
        return self.a is not None or self.b is not None

    def operand(self, i: int, logical: np.ndarray) -> np.ndarray:
        """Operand i in the axis order of its subscripts, from its logical matrix.

        Operand 0's logical form is (M, K) with axes (a, k); operand 1's is (K, N) with axes
        (k, b). An operand without its a or b index is row 0 / column 0 of it.
        """
        letters = (self.a, self.k) if i == 0 else (self.k, self.b)
        if None in letters:
            logical = logical[0] if i == 0 else logical[:, 0]
            letters = (self.k,)
        return logical.transpose([letters.index(ch) for ch in self.inputs[i]])

    def logical_output(self, y: np.ndarray) -> np.ndarray:
        """The op's output as an (M, N) array with axes (a, b)."""
        y = np.asarray(y)
        if self.a is not None and self.b is not None:
            return y if self.output == self.a + self.b else y.T
        return y[:, None] if self.a is not None else y[None, :]


def parse_einsum(target: str, subscripts: str) -> EinsumPlan:
    """Check einsum subscripts and name the roles of their indices.

    Raises:
        TargetError: the subscripts are malformed or not a single-index reduction (see module).
    """
    text = subscripts.replace(" ", "")

    def bad(why: str) -> TargetError:
        return TargetError(f"{target}: subscripts {subscripts!r} {why}")

    if "." in text:
        raise bad("use an ellipsis, which fpscope does not probe")
    if "->" in text:
        lhs, out = text.split("->", 1)
    else:  # numpy's implicit mode: indices seen once, alphabetical
        lhs = text
        out = "".join(sorted(ch for ch in set(lhs.replace(",", "")) if lhs.count(ch) == 1))
    ins = tuple(lhs.split(","))
    if not all(s.isalpha() and s.isascii() for s in (*ins, out or "x")):
        raise bad("are malformed: use letters, commas and one '->'")
    if len(ins) not in (1, 2):
        raise bad("must have one or two operands")
    for s in (*ins, out):
        if len(set(s)) != len(s):
            raise bad(f"repeat an index in {s!r}")
    if len(ins) == 1:
        if len(ins[0]) != 1 or out:
            raise bad("with one operand must sum its one index away ('i->'); two operands "
                      "take a dot or matrix product ('i,i->', 'ij,jk->ik')")
        return EinsumPlan(f"{ins[0]}->", ins, "", ins[0], None, None)
    s0, s1 = ins
    shared = set(s0) & set(s1)
    if shared & set(out):
        raise bad("have a batch index (in both operands and the output)")
    if len(shared) != 1:
        raise bad("must contract exactly one index shared by both operands")
    (k,) = shared
    if (set(s0) | set(s1)) - shared - set(out):
        raise bad("sum an index within one operand")
    if set(out) - set(s0) - set(s1):
        raise bad("have an output index that no operand has")
    if len(s0) > 2 or len(s1) > 2:
        raise bad("have an operand with more than two indices")
    a = (s0.replace(k, "") or None)
    b = (s1.replace(k, "") or None)
    return EinsumPlan(f"{s0},{s1}->{out}", ins, out, k, a, b)
