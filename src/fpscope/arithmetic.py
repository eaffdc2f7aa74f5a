"""The node arithmetic of a reduction: what every node of its summation tree rounds to, and how
each product enters the sum.

A revealed tree says in which order terms meet; two kernels with the same tree still give other
bits when one rounds each product before adding it and the other fuses it (an FMA: the exact
product added with one rounding), or when some nodes keep float64 partial sums (OpenBLAS sdot:
float32 vector lanes, a float64 scalar tail; fpscope NUMERICS.md section 4). :class:`Arithmetic`
holds those facts, one entry per node and per leaf, and is what records, replay, diff and gates
compare.

Product entries (one per leaf; ``None`` for an op that adds its inputs as they are, e.g. a sum):

* ``"rounded"``: the product is rounded (RNE) to the format of the node it enters, then added;
* ``"fused"``: the exact product is added with one rounding (an FMA; the node's format cannot hold
  every product of two inputs);
* ``"exact"``: the node's format holds every product of two inputs exactly, so rounded and fused
  entry give the same bits (e.g. fp32 products in a float64 node);
* ``"rounded:NAME"``: rounded to the narrower format NAME before a wider node adds it.
"""

from __future__ import annotations

from dataclasses import dataclass

from .formats import Format, get_format

ROUNDED, FUSED, EXACT = "rounded", "fused", "exact"

__all__ = ["Arithmetic", "ROUNDED", "FUSED", "EXACT", "run_lengths", "expand_run_lengths",
           "entry_words", "leaf_ranges"]


def run_lengths(names) -> list:
    """[["fp32", 480], ["fp64", 19]]: a compact, JSON-able form of a per-node or per-leaf list."""
    out: list = []
    for name in names:
        if out and out[-1][0] == name:
            out[-1][1] += 1
        else:
            out.append([name, 1])
    return out


def expand_run_lengths(runs) -> list:
    """Inverse of :func:`run_lengths`.

    Raises:
        ValueError: not a list of [value, count] pairs with counts >= 1.
    """
    if not isinstance(runs, list):
        raise ValueError("run lengths must be a list of [value, count] pairs")
    out = []
    for item in runs:
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[1], int)
                and not isinstance(item[1], bool) and item[1] >= 1):
            raise ValueError(f"bad run {item!r}: expected [value, count >= 1]")
        out.extend([item[0]] * item[1])
    return out


def _check_entry(e) -> None:
    if e is None or e in (ROUNDED, FUSED, EXACT):
        return
    if isinstance(e, str) and e.startswith("rounded:"):
        get_format(e.split(":", 1)[1])
        return
    raise ValueError(f"unknown product entry {e!r}; known: rounded, fused, exact, rounded:FORMAT")


@dataclass(frozen=True)
class Arithmetic:
    """Node formats (post-order, one name per internal node), product entries (one per leaf, or
    None for a plain sum) and the output format of a reduction.

    Raises (constructor):
        ValueError: an unknown format name or product entry.
    """

    node_formats: tuple
    products: tuple | None
    out: str

    def __post_init__(self):
        for f in self.node_formats:
            get_format(f)
        get_format(self.out)
        if self.products is not None:
            for e in self.products:
                _check_entry(e)

    # -- construction -----------------------------------------------------------------------
    @classmethod
    def uniform(cls, nodes: int, fmt: str, out: str, leaves: int | None = None,
                entry: str | None = None) -> "Arithmetic":
        """Every node in ``fmt``; with ``entry``, every one of ``leaves`` products enters so."""
        return cls(tuple([fmt] * nodes), None if entry is None else tuple([entry] * leaves), out)

    def to_json(self) -> dict:
        """``{"node_formats": runs, "products": runs or null, "output_format": name}``."""
        return {"node_formats": run_lengths(self.node_formats),
                "products": None if self.products is None else run_lengths(self.products),
                "output_format": self.out}

    @classmethod
    def from_json(cls, obj) -> "Arithmetic":
        """Inverse of :meth:`to_json` (extra keys, e.g. evidence, are ignored).

        Raises:
            ValueError: malformed entry.
        """
        if not isinstance(obj, dict):
            raise ValueError('"arithmetic" must be an object')
        nodes = tuple(expand_run_lengths(obj.get("node_formats")))
        prods = obj.get("products")
        prods = None if prods is None else tuple(expand_run_lengths(prods))
        out = obj.get("output_format")
        if not isinstance(out, str):
            raise ValueError('"arithmetic.output_format" must be a format name')
        return cls(nodes, prods, out)

    # -- queries ------------------------------------------------------------------------------
    @property
    def formats(self) -> list[Format]:
        """The Format of every node (post-order), one get_format per distinct name."""
        by_name = {name: get_format(name) for name in set(self.node_formats)}
        return [by_name[f] for f in self.node_formats]

    @property
    def out_format(self) -> Format:
        return get_format(self.out)

    @property
    def uniform_format(self) -> str | None:
        """The one format of every node, or None when they differ (or there is no node)."""
        s = set(self.node_formats)
        return next(iter(s)) if len(s) == 1 else None

    def first_difference(self, other: "Arithmetic") -> dict | None:
        """The first item in which two arithmetics of the same tree shape differ:
        ``{"name", "a", "b"}`` (output format, the accumulator where each has one format, node
        k's format, leaf i's product entry), or None
        when they are the same."""
        if self.out != other.out:
            return {"name": "output format", "a": self.out, "b": other.out}
        if (self.products is None) != (other.products is None):
            return {"name": "products", "a": "none" if self.products is None else "multiplied",
                    "b": "none" if other.products is None else "multiplied"}
        if len(self.node_formats) != len(other.node_formats):
            return {"name": "number of nodes", "a": len(self.node_formats),
                    "b": len(other.node_formats)}
        ua, ub = self.uniform_format, other.uniform_format
        if ua is not None and ub is not None and ua != ub:
            return {"name": "accumulator", "a": ua, "b": ub}
        for k, (x, y) in enumerate(zip(self.node_formats, other.node_formats)):
            if x != y:
                return {"name": f"node {k} format (post-order)", "a": x, "b": y}
        if self.products is not None:
            for i, (x, y) in enumerate(zip(self.products, other.products)):
                if x != y:
                    return {"name": f"product entry of leaf {i}", "a": x, "b": y}
        return None

    def describe(self) -> str:
        """One line in words: the nodes' formats, then how the products enter."""
        counts: dict[str, int] = {}
        for f in self.node_formats:
            counts[f] = counts.get(f, 0) + 1
        if not counts:
            nodes = "no addition (one term)"
        elif len(counts) == 1:
            nodes = f"every node rounds to {next(iter(counts))}"
        else:
            nodes = "nodes round to " + ", ".join(
                f"{f} ({c} node{'s' if c != 1 else ''})" for f, c in counts.items())
        if self.products is None:
            return nodes
        return f"{nodes}; products {entry_words(self.products)}"


_WORDS = {ROUNDED: "rounded, then added", FUSED: "fused (FMA)", EXACT: "exact (the node format "
          "holds them)", None: "not probed"}


def _word(e) -> str:
    if isinstance(e, str) and e.startswith("rounded:"):
        return f"rounded to {e.split(':', 1)[1]}, then added"
    return _WORDS.get(e, str(e))


def leaf_ranges(indices: list[int], limit: int = 3) -> str:
    """``x0..x991, x995`` for sorted leaf indices (at most ``limit`` ranges, then a count)."""
    runs: list[list[int]] = []
    for i in indices:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    parts = [f"x{a}" if a == b else f"x{a}..x{b}" for a, b in runs[:limit]]
    if len(runs) > limit:
        parts.append(f"... ({len(runs)} ranges)")
    return ", ".join(parts)


def entry_words(products) -> str:
    """How the products enter, in words: ``fused (FMA) at x0..x991; exact (...) at x992..x999``."""
    by: dict = {}
    for i, e in enumerate(products):
        by.setdefault(e, []).append(i)
    if len(by) == 1:
        return f"{_word(next(iter(by)))} (all {len(products)})"
    return "; ".join(f"{_word(e)} at {leaf_ranges(ix)} ({len(ix)})" for e, ix in by.items())
