"""Pictures of summation trees: a rich terminal tree, Graphviz DOT source, SVG and PNG files.

* :func:`to_rich` -- a :class:`rich.tree.Tree` for the terminal. Long chains (running sums such as a
  sequential fold, a fused K loop or a tail) are drawn as one list of steps with the middle elided;
  once a line budget is spent, the remaining sub-trees are collapsed into one line each that names
  their shape ("x0..x127 (128 terms): 8 lanes with stride 8, ..."). A 65536-leaf tree prints in
  well under 60 lines.
* :func:`to_dot` -- Graphviz DOT source (built with the ``graphviz`` package). The root is at the
  top; edges run parent -> child with the arrowhead drawn at the parent (``dir=back``), i.e. in the
  direction the values flow. Leaves are labelled with their input index, binary additions "+",
  fused k-term nodes "+k" (filled boxes), the accumulator "C" as a red box. Trees with more than
  ``max_leaves`` leaves are expanded top-down, largest sub-tree first, until ``max_nodes`` nodes
  are drawn; the rest are collapsed into dashed boxes labelled with their leaf range, size and shape.
* :func:`render` / :func:`render_bytes` -- SVG or PNG through the Graphviz ``dot`` program (Debian:
  ``apt-get install graphviz``), or the DOT source itself.

All traversals are iterative (depth ~10^5 is fine).
"""

from __future__ import annotations

import heapq
import itertools
import os
import shutil
from collections import deque
from pathlib import Path
from typing import Optional, Union

import graphviz
from rich.text import Text
from rich.tree import Tree

from .summary import NodeStats, describe, describe_subtree, phrase
from .tree import C_LEAF, SumTree

__all__ = ["RenderError", "to_rich", "to_dot", "render", "render_bytes", "FORMATS"]

FORMATS = ("svg", "png", "dot")
_NO_DOT = (
    "the Graphviz 'dot' program is not installed; install it (Debian: apt-get install graphviz) "
    "or use --format dot"
)


class RenderError(RuntimeError):
    """A picture could not be produced or written (no Graphviz ``dot`` program, an unknown format,
    an existing file without ``overwrite=True``, or a failing ``dot`` run). The message is one line."""


def _is_node(x) -> bool:
    return x.__class__ is tuple


def _leaf_name(x) -> str:
    return "C" if x == C_LEAF else f"x{x}"


def _span(st: NodeStats, x, noun: str = "terms") -> str:
    """'x0..x127 (128 terms)' (+ ' + C'), or '5 scattered terms' for a non-contiguous set."""
    m, lo, hi = st.cnt(x), st.mn(x), st.mx(x)
    has_c = _has_c(x)
    k = m - has_c
    if k <= 0:
        return "C"
    if hi - lo + 1 == k:
        text = f"x{lo}" if k == 1 else f"x{lo}..x{hi} ({k} {noun})"
    else:
        text = f"{k} scattered {noun} (x{lo}..x{hi})"
    return text + (" + C" if has_c else "")


def _has_c(x) -> bool:
    # canonical form: "C" sorts first, so it can only be on the leftmost path
    while _is_node(x):
        x = x[0]
    return x == C_LEAF


def _shape(x, brief: bool = True) -> str:
    d = describe_subtree(x)
    try:
        return phrase(d, top=False, brief=brief)
    except Exception:  # pragma: no cover - defensive
        return d.get("family", "?")


def _chain(st: NodeStats, node) -> tuple[object, list]:
    """Follow the running sum down from ``node``.

    A step continues into a child that is the only internal child, or that holds at least twice
    as many leaves as the node's other children together. Returns (bottom, steps) with steps in
    evaluation order (bottom-up), each step = (chain node, the children it adds)."""
    steps = []
    cur = node
    while _is_node(cur):
        inner = [c for c in cur if _is_node(c)]
        cont = None
        if len(inner) == 1:
            cont = inner[0]
        elif inner:
            big = max(inner, key=st.cnt)
            if st.cnt(big) >= 2 * (st.cnt(cur) - st.cnt(big)):
                cont = big
        if cont is None:
            break
        steps.append((cur, [c for c in cur if c is not cont]))
        cur = cont
    steps.reverse()
    return cur, steps


def _names(leaves: list, limit: int) -> str:
    names = [_leaf_name(x) for x in leaves]
    if len(names) > limit:
        names = names[: max(limit - 1, 1)] + [f"… {len(names) - max(limit - 1, 1)} more"]
    return " ".join(names)


def _op(x) -> str:
    return "+" if len(x) == 2 else f"+{len(x)}"


_OP_STYLE = {True: "bold yellow", False: "bold"}


def to_rich(
    tree: SumTree,
    max_leaves: int = 64,
    max_lines: int = 50,
    width: int = 120,
    chain_ends: int = 4,
) -> Tree:
    """A :class:`rich.tree.Tree` showing the structure of ``tree``.

    Args:
        tree: the summation tree.
        max_leaves: at most about this many leaf names are printed in total; further leaves appear
            as "… 120 more" or inside collapsed sub-trees.
        max_lines: line budget: the output has at most this many lines; sub-trees that do not fit
            are collapsed into one line naming their leaf range, size and shape
            ("▸ x0..x127 (128 terms): 8 lanes, ...").
        width: every line, indentation included, is cut to this many columns ("…"); labels never
            wrap, a narrower console cuts them at its edge.
        chain_ends: a running sum (a chain of nodes, each adding a few terms or one sub-tree to the
            sum below it) is drawn as a flat list of steps; this many steps are shown at each end
            and the middle is elided ("… 4990 more steps adding 4990 terms (x5..x4994)").

    The first line names the tree and its shape (:func:`fpscope.summary.describe`). Binary additions
    are "+", fused k-term nodes "+k" (yellow). Never raises for a SumTree.
    """
    max_lines = max(max_lines, 4)
    width = max(width, 30)
    st = NodeStats(tree.root)
    noun = "products" if tree.has_c else "terms"
    d = describe(tree)
    head = Text.assemble(
        ("SumTree", "bold"),
        f" n={tree.n}{' + C' if tree.has_c else ''}, depth {d.get('depth', 0)}: ",
        (phrase(d, brief=True), "italic"),
    )
    if d.get("c"):
        head.append(f"; C enters {d['c']['entry'].replace('_', ' ')}")
    head.truncate(width, overflow="ellipsis")
    head.no_wrap, head.overflow = True, "ellipsis"
    out = Tree(head)
    lines = 1
    leaf_budget = [max(max_leaves, 1)]

    def cut(text: Text, level: int) -> Text:
        text.truncate(max(width - 4 * level, 12), overflow="ellipsis")
        text.no_wrap = True  # a narrower console cuts the line ("…") instead of wrapping it
        text.overflow = "ellipsis"
        return text

    def leaf_text(x) -> Text:
        leaf_budget[0] -= 1
        return Text("C", style="bold magenta") if x == C_LEAF else Text(_leaf_name(x))

    def op_text(x) -> Text:
        return Text(_op(x), style=_OP_STYLE[len(x) > 2])

    def names(leaves: list) -> str:
        text = _names(leaves, max(leaf_budget[0], 2))
        leaf_budget[0] -= len(leaves)
        return text

    def collapsed(x) -> Text:
        return Text.assemble(("▸ ", "dim"), f"{_span(st, x, noun)}: ", (_shape(x), "italic"))

    if not _is_node(tree.root):
        out.add(leaf_text(tree.root))
        return out
    # queue items: (node, rich handle already counted in `lines`, prefix, level)
    queue: deque = deque()
    queue.append((tree.root, out.add(""), "", 1))
    lines += 1
    while queue:
        x, h, prefix, level = queue.popleft()
        if not _is_node(x):
            h.label = cut(Text(prefix) + leaf_text(x), level)
            continue
        bottom, steps = _chain(st, x)
        if len(steps) >= 3:
            shown: list = steps
            elided: list = []
            if len(steps) > 2 * chain_ends + 3:
                shown = steps[:chain_ends] + [None] + steps[-chain_ends:]
                elided = steps[chain_ends:-chain_ends]
            if lines + 1 + len(shown) <= max_lines:
                lines += 1 + len(shown)
                h.label = cut(
                    Text.assemble(
                        prefix,
                        ("running sum", "bold cyan"),
                        f" of {len(steps) + 1} nodes over {_span(st, x, noun)}",
                    ),
                    level,
                )
                if _is_node(bottom) and not any(_is_node(c) for c in bottom):
                    h.add(cut(Text("start: ") + op_text(bottom) + Text(" " + names(list(bottom))),
                              level + 1))
                else:
                    queue.append((bottom, h.add(""), "start: ", level + 1))
                for step in shown:
                    if step is None:
                        added = [c for s_ in elided for c in s_[1]]
                        los = [st.mn(c) for c in added if st.mn(c) >= 0]
                        k = sum(st.cnt(c) for c in added)
                        where = f" (x{min(los)}..x{max(st.mx(c) for c in added)})" if los else ""
                        h.add(cut(Text(f"… {len(elided)} more steps adding {k} {noun}{where}",
                                       style="dim"), level + 1))
                        continue
                    node, added = step
                    subs = [c for c in added if _is_node(c)]
                    leaves = [c for c in added if not _is_node(c)]
                    if len(subs) == 1 and not leaves and len(node) == 2:
                        queue.append((subs[0], h.add(""), "+ ", level + 1))
                        continue
                    label = op_text(node)
                    if leaves:
                        label.append(" " + names(leaves))
                    if subs and lines + len(subs) <= max_lines:
                        line = h.add(cut(label, level + 1))
                        for c in subs:
                            lines += 1
                            queue.append((c, line.add(""), "", level + 2))
                    else:
                        for c in subs:
                            label.append(f" [{_span(st, c, noun)}]")
                        h.add(cut(label, level + 1))
                continue
        leaves = [c for c in x if not _is_node(c)]
        subs = [c for c in x if _is_node(c)]
        if not subs:
            if prefix == "+ ":
                h.label = cut(Text("+ (") + op_text(x) + Text(" " + names(leaves) + ")"), level)
            else:
                h.label = cut(Text(prefix) + op_text(x) + Text(" " + names(leaves)), level)
            continue
        need = len(subs) + (1 if leaves else 0)
        if lines + need > max_lines or (leaf_budget[0] <= 0 and st.cnt(x) > 2):
            h.label = cut(Text(prefix) + collapsed(x), level)
            continue
        if prefix == "+ ":
            label = Text("+ sum of ") + Text(_span(st, x, noun))
            if len(x) > 2:
                label += Text(" (") + op_text(x) + Text(")")
        else:
            label = Text(prefix) + op_text(x) + Text(" " + _span(st, x, noun))
        h.label = cut(label, level)
        lines += need
        leaves_shown = False
        for c in x:
            if _is_node(c):
                queue.append((c, h.add(""), "", level + 1))
            elif not leaves_shown:
                leaves_shown = True
                h.add(cut(Text(names(leaves)), level + 1))
    return out


# -- Graphviz --------------------------------------------------------------------------------------
def _digraph(tree: SumTree, max_leaves: int, max_nodes: int) -> graphviz.Digraph:
    st = NodeStats(tree.root)
    noun = "products" if tree.has_c else "terms"
    g = graphviz.Digraph("sumtree", comment=f"fpscope SumTree n={tree.n}")
    g.attr(rankdir="TB", ordering="out", nodesep="0.15", ranksep="0.3")
    g.attr("node", fontname="Helvetica", fontsize="10", margin="0.02,0.02")
    g.attr("edge", dir="back", arrowsize="0.5")

    def leaf(x) -> str:
        if x == C_LEAF:
            g.node("xC", "C", shape="box", color="red", fontcolor="red", style="bold", width="0.3",
                   height="0.25")
            return "xC"
        g.node(f"x{x}", str(x), shape="plaintext", width="0.2", height="0.2")
        return f"x{x}"

    counter = [0]

    def new_id(prefix: str) -> str:
        counter[0] += 1
        return f"{prefix}{counter[0]}"

    def op(x, nid: str) -> None:
        if len(x) == 2:
            g.node(nid, "+", shape="circle", width="0.25", height="0.25", fixedsize="true")
        else:
            g.node(nid, f"+{len(x)}", shape="box", style="filled,bold", fillcolor="gold",
                   width="0.3", height="0.25")

    def box(x, nid: str) -> None:
        text = f"{_span(st, x, noun)}\\n{_wrap(_shape(x), 30)}"  # DOT's \n: centred line break
        g.node(nid, text, shape="box", style="rounded,dashed", fontsize="9", margin="0.1,0.06")

    root = tree.root
    if not _is_node(root):
        leaf(root)
        return g
    full = tree.n + tree.has_c <= max_leaves
    # expand the largest pending sub-tree first (a blocked spine or a long chain stays readable);
    # a pending child's name (n<k> or b<k>) is known only when it is popped, so edges are emitted
    # at the end, in child order (``ordering=out``)
    drawn = 1
    tie = itertools.count()
    edges: list[tuple[str, list]] = []
    root_slot = [""]
    heap = [(-st.cnt(root), next(tie), root, root_slot)]
    while heap:
        _, _, x, slot = heapq.heappop(heap)
        if not full and drawn + len(x) > max_nodes:
            slot[0] = new_id("b")
            box(x, slot[0])
            continue
        slot[0] = xid = new_id("n")
        op(x, xid)
        for c in x:
            if _is_node(c):
                cslot = [""]
                heapq.heappush(heap, (-st.cnt(c), next(tie), c, cslot))
            else:
                cslot = [leaf(c)]
            drawn += 1
            edges.append((xid, cslot))
    for a, cslot in edges:
        g.edge(a, cslot[0])
    return g


def _wrap(text: str, width: int) -> str:
    words, lines, cur = text.split(), [], ""
    for w in words:
        if cur and len(cur) + 1 + len(w) > width:
            lines.append(cur)
            cur = w
        else:
            cur = f"{cur} {w}" if cur else w
    if cur:
        lines.append(cur)
    return "\\n".join(lines[:6]) + ("\\n…" if len(lines) > 6 else "")


def to_dot(tree: SumTree, max_leaves: int = 512, max_nodes: int = 48) -> str:
    """Graphviz DOT source for ``tree``.

    Node names: leaves ``x<i>`` (label ``i``) and ``xC`` (label ``C``), additions ``n<k>``
    (label ``+``, or ``+k`` for a fused k-term node), collapsed sub-trees ``b<k>``. Every edge is
    ``parent -> child`` with ``dir=back`` (arrowhead at the parent). A tree with at most
    ``max_leaves`` leaves (counting "C") is drawn in full: exactly one node per leaf. A larger one
    is expanded top-down, largest pending sub-tree first, until about ``max_nodes`` nodes are drawn;
    the rest are collapsed into labelled boxes (leaf range, size and shape).
    """
    return _digraph(tree, max_leaves, max_nodes).source


def _check_dot() -> None:
    if shutil.which("dot") is None:
        raise RenderError(_NO_DOT)


def render_bytes(tree: SumTree, fmt: str = "svg", max_leaves: int = 512, max_nodes: int = 48) -> bytes:
    """The picture of ``tree`` as bytes: ``fmt`` "svg" (UTF-8 XML), "png", or "dot" (the source).

    Raises RenderError for an unknown format, when the Graphviz ``dot`` program is missing
    (svg/png), or when ``dot`` fails.
    """
    fmt = fmt.lower()
    if fmt not in FORMATS:
        raise RenderError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
    g = _digraph(tree, max_leaves, max_nodes)
    if fmt == "dot":
        return g.source.encode("utf-8")
    _check_dot()
    try:
        return g.pipe(format=fmt, quiet=True)
    except graphviz.ExecutableNotFound:
        raise RenderError(_NO_DOT) from None
    except graphviz.CalledProcessError as exc:
        err = (exc.stderr or b"").decode("utf-8", "replace").strip().splitlines()
        raise RenderError(f"Graphviz 'dot' failed ({err[-1] if err else exc.returncode})") from None


def render(
    tree: SumTree,
    path: Union[str, os.PathLike],
    fmt: Optional[str] = None,
    *,
    overwrite: bool = False,
    max_leaves: int = 512,
    max_nodes: int = 48,
) -> Path:
    """Write a picture of ``tree`` to ``path`` and return the path.

    ``fmt`` is "svg", "png" or "dot"; by default it is taken from the file suffix. An existing file
    is replaced only with ``overwrite=True``. svg/png need the Graphviz ``dot`` program.

    Raises:
        RenderError: unknown or missing format, ``dot`` not installed or failing, the file exists
            and overwrite is False, or the file cannot be written (one-line message).
    """
    p = Path(path)
    if fmt is None:
        fmt = p.suffix.lstrip(".").lower()
        if fmt not in FORMATS:
            raise RenderError(
                f"cannot tell the format from {str(p)!r}; pass fmt= one of {', '.join(FORMATS)}"
            )
    fmt = fmt.lower()
    if fmt not in FORMATS:
        raise RenderError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
    if p.exists() and not overwrite:
        raise RenderError(f"{p} already exists; pass overwrite=True (or --force) to replace it")
    data = render_bytes(tree, fmt, max_leaves=max_leaves, max_nodes=max_nodes)
    try:
        with open(p, "wb" if overwrite else "xb") as fh:
            fh.write(data)
    except FileExistsError:
        raise RenderError(f"{p} already exists; pass overwrite=True (or --force) to replace it") from None
    except OSError as exc:
        raise RenderError(f"cannot write {p}: {exc.strerror or exc}") from None
    return p
