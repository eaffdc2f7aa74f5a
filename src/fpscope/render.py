"""Pictures of summation trees: a rich terminal tree, Graphviz DOT source, SVG and PNG files.

* :func:`to_rich` -- a :class:`rich.tree.Tree` for the terminal. The first line names the sum
  ("sum of x0..x1023 (1024 terms), depth 21"). Long chains (running sums such as a sequential fold,
  a fused K loop or a tail) are always drawn as one list of steps with the middle elided, or
  collapsed whole. The tree is expanded breadth-first, one level at a time, while the line budget
  allows the whole level; the sub-trees of the first level that does not fit are each collapsed
  into one line that names their leaves and shape ("▸ x0..x127 (128 terms): 8 lanes, stride 8,
  ..."), so siblings are always shown to the same depth. Leaf sets are named by their real input
  indices ("x0, x8, ..., x120 and x1, x9, ..., x121 (32 terms)"). A 65536-leaf tree prints in well
  under 60 lines.
* :func:`to_dot` -- Graphviz DOT source (built with the ``graphviz`` package). The root is at the
  top; edges run parent -> child with the arrowhead drawn at the parent (``dir=back``), i.e. in the
  direction the values flow. Leaves are labelled with their input index, binary additions "+",
  fused k-term nodes "+k" (filled boxes), the accumulator "C" as a red box. Trees with more than
  ``max_leaves`` leaves are expanded top-down one level at a time while ``max_nodes`` allows a
  whole level; the sub-trees of the first level that does not fit are collapsed into dashed boxes
  labelled with their leaves, their number and their shape (siblings always end at one depth).
* :func:`render` / :func:`render_bytes` -- SVG or PNG through the Graphviz ``dot`` program (Debian:
  ``apt-get install graphviz``), or the DOT source itself.

All traversals are iterative (depth ~10^5 is fine).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Optional, Union

from rich.text import Text
from rich.tree import Tree

from .summary import NodeStats, describe_subtree, index_set, phrase, set_phrase
from .tree import C_LEAF, SumTree, leaves_of

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


class _Spans:
    """Names of the leaf sets of sub-trees, cached: "x0..x127 (128 terms)", "x0, x8, ..., x120 and
    x1, x9, ..., x121 (32 terms)", "x[r + 8k] for r in {0, 1, 4, 5}, k = 0..1023 (4096 terms)",
    "240 terms from x0..x477" (see :func:`fpscope.summary.set_phrase`), plus " + C"."""

    def __init__(self, st: NodeStats, noun: str) -> None:
        self.st, self.noun = st, noun
        self._cache: dict[int, str] = {}

    def __call__(self, x) -> str:
        key = id(x)
        text = self._cache.get(key)
        if text is None:
            text = self._cache[key] = self._make(x)
        return text

    def _make(self, x) -> str:
        st = self.st
        if not _is_node(x):
            return _leaf_name(x)
        m, lo, hi = st.cnt(x), st.mn(x), st.mx(x)
        has_c = _has_c(x)
        k = m - has_c
        if k <= 0:
            return "C"
        if hi - lo + 1 == k:
            text = f"x{lo}" if k == 1 else f"x{lo}..x{hi} ({k} {self.noun})"
        else:
            text = set_phrase(index_set(leaves_of(x)), self.noun)
        return text + (" + C" if has_c else "")

    def of_items(self, items: list) -> str:
        """The leaves of several sub-trees and leaves together, e.g. elided chain steps:
        "4990 terms (x4..x4993)", "3 terms (x40, x48, x56)", "12 terms from x3..x99"."""
        st, noun = self.st, self.noun
        ints = [c for c in items if c != C_LEAF]
        k = sum(st.cnt(c) - _has_c(c) for c in ints)
        los = [st.mn(c) for c in ints if st.mn(c) >= 0]
        if not los:
            return f"{k} {noun}"
        lo, hi = min(los), max(st.mx(c) for c in ints)
        if hi - lo + 1 == k:
            return f"{k} {noun} ({_rng_text(lo, hi)})"
        if k > 200_000:
            return f"{k} {noun} from x{lo}..x{hi}"
        leaves = [v for c in ints for v in (leaves_of(c) if _is_node(c) else [c])]
        info = index_set(leaves)
        if info["kind"] == "scattered":
            return set_phrase(info, noun)
        return f"{k} {noun} ({set_phrase(info, noun, count=False)})"


def _rng_text(lo: int, hi: int) -> str:
    return f"x{lo}" if lo == hi else f"x{lo}..x{hi}"


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


class _Item:
    """A sub-tree waiting in the breadth-first expansion of :func:`to_rich`: its line (``handle``)
    is already drawn and counted; its label is set once its level is expanded or collapsed."""

    __slots__ = ("node", "handle", "prefix", "indent", "kind", "bottom", "steps", "shown", "cost")

    def __init__(self, node, handle, prefix: str, indent: int) -> None:
        self.node, self.handle, self.prefix, self.indent = node, handle, prefix, indent


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
        max_lines: line budget: the output has at most this many lines. The tree is expanded
            breadth-first, one level at a time, and a level is either expanded as a whole or
            collapsed as a whole, so sibling sub-trees are always shown to the same depth. A
            collapsed sub-tree is one line naming its leaves, their number and its shape
            ("▸ x0..x127 (128 terms): 8 lanes, ...").
        width: every line, indentation included, is cut to this many columns ("…"); labels never
            wrap, a narrower console cuts them at its edge.
        chain_ends: a running sum (a chain of nodes, each adding a few terms or one sub-tree to the
            sum below it) is always drawn as one list of steps, or collapsed as a whole; this many
            steps are shown at each end and the middle is elided ("… 4990 more steps adding 4990
            terms (x5..x4994)").

    The first line names the whole sum ("sum of x0..x1023 (1024 terms), depth 21", or "running
    sum of ... " when the root is a chain); the plain-words summary is :func:`fpscope.summary.
    summarize`. Leaf sets are named by their real input indices ("x0, x8, ..., x120 and x1, x9,
    ..., x121 (32 terms)"). Binary additions are "+", fused k-term nodes "+k" (yellow). Never
    raises for a SumTree.
    """
    max_lines = max(max_lines, 4)
    width = max(width, 30)
    root = tree.root
    st = NodeStats(root)
    noun = "products" if tree.has_c else "terms"
    span = _Spans(st, noun)
    depth = st.height(root)
    leaf_budget = [max(max_leaves, 1)]

    def cut(text: Text, indent: int) -> Text:
        text.truncate(max(width - 4 * indent, 12), overflow="ellipsis")
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

    if not _is_node(root):
        out = Tree(cut(Text("C (no terms)") if root == C_LEAF else
                       Text(f"the single term {_leaf_name(root)} (no additions)"), 0))
        return out

    def head(rest: str) -> Text:
        return Text.assemble(("sum", "bold"), f" of {span(root)}, depth {depth}{rest}")

    out = Tree("")
    if not any(_is_node(c) for c in root):  # one node adding leaves only (e.g. one fused node)
        out.label = cut(head(""), 0)
        out.add(cut(op_text(root) + Text(" " + names(list(root))), 1))
        return out

    lines = [1]

    def plan(it: _Item) -> None:
        """Decide how ``it`` would be expanded and how many lines that adds."""
        x = it.node
        bottom, steps = _chain(st, x)
        if len(steps) >= 3:
            it.kind, it.bottom, it.steps = "chain", bottom, steps
            shown: list = steps
            if len(steps) > 2 * chain_ends + 3:
                shown = steps[:chain_ends] + [None] + steps[-chain_ends:]
            it.shown = shown
            cost = 1  # the start line
            for step in shown:
                cost += 1
                if step is not None:
                    node, added = step
                    subs = [c for c in added if _is_node(c)]
                    if subs and not (len(subs) == 1 and len(added) == 1 and len(node) == 2):
                        cost += len(subs)
            it.cost = cost
        else:
            it.kind = "node"
            it.cost = sum(1 for c in x if _is_node(c)) + (1 if any(not _is_node(c) for c in x) else 0)

    def place(node, parent, prefix: str, indent: int, pending: list) -> None:
        """Draw one child line: final for a leaf or a node of leaves only, else a pending item."""
        if not _is_node(node):
            parent.add(cut(Text(prefix) + leaf_text(node), indent))
            lines[0] += 1
            return
        if not any(_is_node(c) for c in node):
            label = op_text(node) + Text(" " + names(list(node)))
            if prefix == "+ ":
                label = Text("+ (") + label + Text(")")
            else:
                label = Text(prefix) + label
            parent.add(cut(label, indent))
            lines[0] += 1
            return
        pending.append(_Item(node, parent.add(""), prefix, indent))
        lines[0] += 1

    def expanded_label(it: _Item) -> Text:
        x = it.node
        if it.kind == "chain":
            label = Text.assemble(("running sum", "bold cyan"),
                                  f" of {len(it.steps) + 1} nodes over {span(x)}")
            if it.handle is out:
                label.append(f", depth {depth}")
            return Text(it.prefix) + label
        if it.handle is out:
            return head(f" (root: one fused {len(x)}-term node)" if len(x) > 2 else "")
        if it.prefix == "+ ":
            label = Text("+ sum of ") + Text(span(x))
            if len(x) > 2:
                label += Text(" (") + op_text(x) + Text(")")
            return label
        return Text(it.prefix) + op_text(x) + Text(" " + span(x))

    def collapsed_label(it: _Item) -> Text:
        x = it.node
        if it.handle is out:
            return head(": ") + Text(_shape(x), style="italic")
        if it.kind == "chain":  # a running sum reads the same collapsed as expanded
            return Text.assemble(it.prefix, ("▸ ", "dim"), ("running sum", "bold cyan"),
                                 f" of {len(it.steps) + 1} nodes over {span(x)}: ",
                                 (_shape(x), "italic"))
        return Text.assemble(it.prefix, ("▸ ", "dim"), f"{span(x)}: ", (_shape(x), "italic"))

    def expand(it: _Item, pending: list) -> None:
        x, h, ind = it.node, it.handle, it.indent + 1
        if it.handle is out:
            ind = 1
        if it.kind == "chain":
            bottom = it.bottom
            place(bottom, h, "start: ", ind, pending)
            for step in it.shown:
                if step is None:
                    elided = [st_[1] for st_ in it.steps[chain_ends:-chain_ends]]
                    added = [c for group in elided for c in group]
                    h.add(cut(Text(f"… {len(elided)} more steps adding {span.of_items(added)}",
                                   style="dim"), ind))
                    lines[0] += 1
                    continue
                node, added = step
                subs = [c for c in added if _is_node(c)]
                leaves = [c for c in added if not _is_node(c)]
                if len(subs) == 1 and not leaves and len(node) == 2:
                    place(subs[0], h, "+ ", ind, pending)
                    continue
                label = op_text(node)
                if leaves:
                    label.append(" " + names(leaves))
                line = h.add(cut(label, ind))
                lines[0] += 1
                for c in subs:
                    place(c, line, "", ind + 1, pending)
            return
        leaves = [c for c in x if not _is_node(c)]
        leaves_shown = False
        for c in x:
            if _is_node(c):
                place(c, h, "", ind, pending)
            elif not leaves_shown:
                leaves_shown = True
                h.add(cut(Text(names(leaves)), ind))
                lines[0] += 1

    first = _Item(root, out, "", 0)
    level = [first]
    while level:
        for it in level:
            plan(it)
        need = sum(it.cost for it in level)
        big = any(st.cnt(it.node) > 2 for it in level)
        if lines[0] + need > max_lines or (leaf_budget[0] <= 0 and big):
            for it in level:  # the whole level is collapsed, each sub-tree named by its shape
                it.handle.label = cut(collapsed_label(it), it.indent)
            break
        pending: list = []
        for it in level:
            it.handle.label = cut(expanded_label(it), it.indent)
            expand(it, pending)
        level = pending
    return out


# -- Graphviz --------------------------------------------------------------------------------------
def _digraph(tree: SumTree, max_leaves: int, max_nodes: int) -> "graphviz.Digraph":
    import graphviz  # here, not at import: the text output of the CLI never needs it

    st = NodeStats(tree.root)
    noun = "products" if tree.has_c else "terms"
    spans = _Spans(st, noun)
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
        text = f"{_wrap(spans(x), 36)}\\n{_wrap(_shape(x), 30)}"  # DOT's \n: centred line break
        g.node(nid, text, shape="box", style="rounded,dashed", fontsize="9", margin="0.1,0.06")

    root = tree.root
    if not _is_node(root):
        leaf(root)
        return g
    full = tree.n + tree.has_c <= max_leaves
    # expand breadth-first, one level at a time: a level is drawn as a whole or boxed as a whole,
    # so sibling sub-trees always end at the same depth. A child's name (n<k> or b<k>) is known
    # only when its level is drawn, so edges are emitted at the end, in child order (ordering=out)
    drawn = 1
    edges: list[tuple[str, list]] = []
    level = [(root, [""])]
    while level:
        need = sum(len(x) for x, _ in level)
        if not full and drawn + need > max_nodes:
            for x, slot in level:
                slot[0] = new_id("b")
                box(x, slot[0])
            break
        nxt = []
        for x, slot in level:
            slot[0] = xid = new_id("n")
            op(x, xid)
            for c in x:
                if _is_node(c):
                    cslot = [""]
                    nxt.append((c, cslot))
                else:
                    cslot = [leaf(c)]
                drawn += 1
                edges.append((xid, cslot))
        level = nxt
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
    is expanded top-down, one whole level at a time, while at most ``max_nodes`` nodes are drawn;
    the sub-trees of the first level that does not fit are collapsed into labelled boxes (leaves,
    their number and shape), so sibling sub-trees always end at the same depth.
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
    import graphviz

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
    if p.is_dir():
        raise RenderError(f"{p} is a folder; give a file name (e.g. {p / ('tree.' + fmt)})")
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
