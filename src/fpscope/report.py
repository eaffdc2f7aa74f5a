"""The HTML report of ``fpscope matrix``: one static page that works offline.

:func:`write_report` writes ``DIR/index.html``, ``DIR/matrix.json`` (the manifest) and one SVG
picture per distinct tree (``DIR/trees/<ID>.svg``, :func:`fpscope.render.render_bytes`; trees
with more than ``max_leaves`` leaves are drawn top-down and their lower levels collapsed into
labelled boxes). The page has inline CSS and no script; up to ``inline_limit`` pictures are
inlined in the page, beyond that they are linked ``<img>`` files in ``DIR/trees/``. Sections:

* agreement: one row per condition (operation, dtype, size, layout), one column per library and
  thread count, the tree id of each cell: equal letters mean identical summation trees;
* cells: every cell with its conditions, tree id ("same tree as #3"), plain-words summary,
  accumulator, time and record file;
* changes: neighbouring cells (one condition apart) compared with :mod:`fpscope.diff`;
* collectives: world size, elements, library, element classes and rank identity of each
  collective cell (:mod:`fpscope.report_collectives`);
* trees: the picture and summary of each distinct tree, with the cells that share it;
* environment: machine, libraries, BLAS and settings (:mod:`fpscope.environment`).
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

from .matrix import (
    DIMENSIONS,
    LIBRARIES,
    MatrixResult,
    agreement_rows,
    columns,
)
from .matrix_collectives import BACKENDS, is_collective
from .record import write_text_atomic
from .report_collectives import cell_note, section_collectives

__all__ = ["render_html", "tree_pictures", "write_report"]

# tree-id colours: light backgrounds that keep black text readable, distinct neighbours
_PALETTE = ("#cfe3ff", "#ffd9b3", "#c9f0d0", "#f6c9d6", "#e3d5ff", "#fff1a8", "#c7eef0",
            "#e8d9c5", "#d9f2b3", "#ffd0c4", "#d5dbe8", "#f0d4f5")

_DIM_TITLES = {
    "rows": ("With the number of rows M of a matmul",
             ("The K-order of output (0, 0) for M = 1, 2, ... rows and otherwise equal "
              "conditions (field case C5: libraries pick GEMV or GEMM kernels, and block by M).")),
    "threads": ("With the thread count", "The same call with 1 and 2 threads."),
    "layout": ("With the memory layout", "C order, Fortran order or a strided view."),
    "dtype": ("With the dtype", ("The same n in different input formats: the tree, and the "
                                 "accumulator format of its nodes.")),
    "library": ("Between libraries", ("The same operation and conditions in numpy (its BLAS for "
                                      "dot and matmul), torch and jax.")),
    "n": ("With n", ("Trees of different sizes cannot be compared leaf by leaf; this compares "
                     "their families (fpscope.summary).")),
}

_CSS = """
:root { --ink: #1d2330; --muted: #5b6475; --line: #dfe3ea; --bg: #f6f7f9; --ok: #1f7a3a;
  --warn: #a35b00; --bad: #b3261e; --accent: #2f5fb3; }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, Helvetica, Arial,
  sans-serif; color: var(--ink); background: var(--bg); }
header { background: #1d2a44; color: #fff; padding: 22px 32px 16px; }
header h1 { margin: 0 0 4px; font-size: 24px; font-weight: 650; letter-spacing: .2px; }
header h1 .suite { font-weight: 400; opacity: .8; }
header p { margin: 2px 0; color: #d6def0; }
header nav { margin-top: 12px; display: flex; gap: 18px; flex-wrap: wrap; }
header nav a { color: #fff; text-decoration: none; border-bottom: 1px solid rgba(255,255,255,.35); }
main { max-width: 1500px; margin: 0 auto; padding: 8px 32px 48px; }
section { background: #fff; border: 1px solid var(--line); border-radius: 10px;
  padding: 18px 22px; margin: 20px 0; }
h2 { font-size: 19px; margin: 0 0 6px; }
h3 { font-size: 16px; margin: 20px 0 4px; }
p.help { color: var(--muted); margin: 0 0 12px; max-width: 110ch; }
.stats { display: flex; gap: 14px; flex-wrap: wrap; margin: 6px 0 0; }
.stat { background: rgba(255,255,255,.1); border-radius: 8px; padding: 6px 14px; }
.stat b { display: block; font-size: 20px; color: #fff; }
.notes li { color: var(--warn); }
table { border-collapse: collapse; width: 100%; font-size: 14px; }
th, td { text-align: left; padding: 6px 9px; border-bottom: 1px solid var(--line);
  vertical-align: top; }
th { background: #eef1f6; font-weight: 600; position: sticky; top: 0; z-index: 1; }
tbody tr:hover { background: #fafbfd; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.nowrap { white-space: nowrap; }
td.summary { min-width: 40ch; max-width: 80ch; }
table.collectives td.summary { min-width: 30ch; }
table.collectives td.ident { max-width: 30ch; }
table.collectives .mono { word-break: break-all; }
td.acc { max-width: 16ch; }
td.same { min-width: 15ch; }
details.json code { word-break: break-all; }
details.pairs > summary { margin: 4px 0 8px; }
.tablewrap { overflow-x: auto; }
code, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace;
  font-size: 12.5px; }
.badge { display: inline-block; min-width: 2.1em; text-align: center; font-weight: 700;
  border-radius: 6px; padding: 1px 7px; border: 1px solid rgba(0,0,0,.12); color: #111;
  text-decoration: none; font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
.badge.none { background: #eee; color: #888; font-weight: 400; }
.pill { display: inline-block; border-radius: 999px; padding: 1px 10px; font-size: 13px;
  white-space: nowrap; }
.pill.ok { background: #e3f4e8; color: var(--ok); }
.pill.diff { background: #fff0dc; color: var(--warn); }
.pill.bad { background: #fde4e1; color: var(--bad); }
.pill.muted { background: #eef0f3; color: var(--muted); }
.muted { color: var(--muted); }
.err { color: var(--bad); }
td.agree { text-align: center; }
.trees { display: grid; grid-template-columns: repeat(auto-fill, minmax(600px, 1fr)); gap: 16px;
  grid-auto-flow: dense; }
.tree { border: 1px solid var(--line); border-radius: 10px; padding: 12px 14px; background: #fff;
  min-width: 0; }
.tree h3 { margin: 0 0 4px; display: flex; gap: 10px; align-items: center; }
.tree p { margin: 4px 0 8px; }
.picture { overflow: auto; max-height: 760px; border-top: 1px solid var(--line); padding-top: 8px; }
.picture svg, .picture img { display: block; margin: 0 auto; }
.tree.wide { grid-column: 1 / -1; }
.changes td.detail { font-size: 13px; }
.changes .same { color: var(--muted); font-size: 13.5px; }
dl.env { display: grid; grid-template-columns: max-content 1fr; gap: 4px 18px; margin: 0; }
dl.env dt { font-weight: 600; color: var(--muted); }
dl.env dd { margin: 0; }
details summary { cursor: pointer; color: var(--accent); margin-top: 12px; }
pre { background: #f3f5f8; padding: 12px; border-radius: 8px; overflow: auto; max-height: 480px;
  font-size: 12px; }
footer { color: var(--muted); font-size: 13px; text-align: center; padding: 10px; }
"""


def _e(text) -> str:
    return html.escape("" if text is None else str(text), quote=True)


def _colour(tree_id: str) -> str:
    k = 0
    for ch in tree_id:
        k = k * 26 + (ord(ch) - 64)
    return _PALETTE[(k - 1) % len(_PALETTE)]


def _badge(tree_id: str | None, title: str = "") -> str:
    if tree_id is None:
        return '<span class="badge none">&ndash;</span>'
    t = f' title="{_e(title)}"' if title else ""
    return (f'<a class="badge" href="#tree-{_e(tree_id)}" style="background:{_colour(tree_id)}"'
            f'{t}>{_e(tree_id)}</a>')


def _col_label(lib: str, threads) -> str:
    return lib if threads is None else f"{lib} &middot; {threads}t"


def _blas_name(env: dict) -> str:
    for info in env.get("blas") or []:
        if isinstance(info, dict) and info.get("user_api") == "blas":
            name = {"openblas": "OpenBLAS", "mkl": "MKL", "blis": "BLIS"}.get(
                info.get("internal_api"), info.get("internal_api") or "BLAS")
            version = info.get("version")
            return f"{name} {version}" if version else name
    return "BLAS"


_SVG_ID = re.compile(r'\bid="([^"]*)"')
_SVG_SIZE = re.compile(r'<svg\b[^>]*?\swidth="([\d.]+)pt"\s+height="([\d.]+)pt"')
_NARROW_PX, _WIDE_PX, _TALL_PX, _MIN_SCALE = 560, 1240, 720, 0.55


def _picture_size(svg: str) -> tuple[float, float, bool] | None:
    """(width px, height px, wide) to show a graphviz SVG at: scaled down to fit a card
    (``_NARROW_PX`` wide, or the whole row when it would be wider; ``_TALL_PX`` high) but not
    below ``_MIN_SCALE`` (the card then scrolls). None when the SVG has no pt size."""
    m = _SVG_SIZE.search(svg)
    if m is None:
        return None
    w, h = float(m.group(1)) * 4 / 3, float(m.group(2)) * 4 / 3  # 1 pt = 4/3 CSS px
    fit_h = min(1.0, _TALL_PX / h)
    wide = w * fit_h > _NARROW_PX
    scale = max(_MIN_SCALE, min(fit_h, (_WIDE_PX if wide else _NARROW_PX) / w))
    return round(w * scale), round(h * scale), wide


def _inline_svg(svg: str, prefix: str, title: str, size) -> str:
    """An SVG document as an element to inline: no XML prolog, DOCTYPE or comments; ids
    prefixed (several pictures share one page); shown at ``size`` (see :func:`_picture_size`)."""
    text = re.sub(r"<\?xml[^>]*\?>", "", svg)
    text = re.sub(r"<!DOCTYPE[^>]*>", "", text, flags=re.DOTALL)
    text = re.sub(r"<!--.*?-->", "", text, flags=re.DOTALL)
    text = _SVG_ID.sub(lambda m: f'id="{prefix}-{m.group(1)}"', text)
    if size is not None:
        text = re.sub(r'(<svg\b[^>]*?\s)width="[\d.]+pt"\s+height="[\d.]+pt"',
                      rf'\1width="{size[0]}" height="{size[1]}"', text, count=1)
    text = text.replace("<svg ", f'<svg role="img" aria-label="{_e(title)}" class="treesvg" ', 1)
    return text.strip()


def tree_pictures(result: MatrixResult, out_dir, max_leaves: int = 64, max_nodes: int = 24
                  ) -> tuple[dict, str | None]:
    """Write ``out_dir/trees/<ID>.svg`` for each distinct tree of ``result``.

    Args:
        result: the matrix.
        out_dir: the output folder (``trees/`` must exist: :func:`fpscope.matrix.prepare_output`).
        max_leaves, max_nodes: as in :func:`fpscope.render.to_dot`: trees with at most
            ``max_leaves`` leaves are drawn in full; larger ones down to about ``max_nodes``
            nodes, then collapsed into labelled boxes.

    Returns:
        (tree id -> SVG bytes, None) or ({}, reason) when Graphviz ``dot`` is missing or fails
        (the report then shows the summaries without pictures).
    """
    from .render import RenderError, render_bytes

    out = Path(out_dir) / "trees"
    pictures: dict = {}
    for tid, tree in result.trees.items():
        try:
            svg = render_bytes(tree, "svg", max_leaves=max_leaves, max_nodes=max_nodes)
        except RenderError as exc:
            return {}, str(exc)
        write_text_atomic(out / f"{tid}.svg", svg.decode("utf-8"))
        pictures[tid] = svg
    return pictures, None


def _same_as(result: MatrixResult) -> dict:
    """cell index -> text for the "same tree as" column."""
    out = {}
    for tid in result.trees:
        members = result.members(tid)
        first = members[0]
        others = [m.index for m in members[1:]]
        if others:
            shown = ", ".join(f"#{i}" for i in others[:6]) + (" ..." if len(others) > 6 else "")
            out[first.index] = f"first of {len(members)}; also {shown}"
        else:
            out[first.index] = "unique"
        for m in members[1:]:
            out[m.index] = f"same tree as #{first.index}"
    return out


def _classes_html(rec: dict | None) -> str:
    """Matrix ops whose outputs add in different orders: each class's positions and summary."""
    classes = (rec or {}).get("classes")
    if not classes:
        return ""
    from .reveal.classes import positions_text

    items = "".join(
        f'<li><b>{chr(65 + k) if k < 26 else k}</b>: {c["count"]} outputs, '
        f'{_e(positions_text(c["outputs"]))}: {_e(c["summary"])}</li>'
        for k, c in enumerate(classes))
    return (f'<div class="muted">{len(classes)} trees among the outputs (the summary above is '
            f'output (0, 0)\'s):<ul>{items}</ul></div>')


def _acc_text(rec: dict | None) -> str:
    """The node arithmetic in words (node formats, product entries); /1 records: the
    accumulator."""
    ar = (rec or {}).get("arithmetic") or {}
    if isinstance(ar, dict) and ar.get("described"):
        return str(ar["described"])
    acc = (rec or {}).get("accumulator") or {}
    if acc.get("node_formats"):
        return "mixed: " + ", ".join(f"{c} {f}" for f, c in acc["node_formats"])
    if acc.get("observable"):
        more = "+" if acc.get("at_least") else ""
        name = acc.get("format") or f"{acc.get('precision_bits')}{more} bits"
        return str(name)
    return "not observable" if acc else ""


def _section_agreement(result: MatrixResult) -> str:
    cols = columns(result)
    blas = _blas_name(result.environment)
    head = "".join(f'<th class="agree">{_col_label(lib, t)}</th>' for lib, t in cols)
    body = []
    for row in agreement_rows(result):
        op = row["op"]
        impl = ""
        if op in ("dot", "matmul") and "numpy" in {lib for lib, _ in cols}:
            impl = f' <span class="muted">(numpy: {_e(blas)})</span>'
        cells = []
        for key in cols:
            cr = row["cells"].get(key)
            if cr is None:
                cells.append('<td class="agree muted">&middot;</td>')
            elif cr.tree_id is None:
                cls = "bad" if cr.status == "failed" else "muted"
                cells.append(f'<td class="agree"><span class="pill {cls}" title="{_e(cr.error)}">'
                             f'{_e(cr.status)}</span></td>')
            else:
                extra = ' <span class="err" title="a check failed">!</span>' \
                    if cr.status == "failed" else ""
                cells.append(f'<td class="agree">{_badge(cr.tree_id, f"cell #{cr.index}")}'
                             f'{extra}</td>')
        v = row["verdict"]
        cls = "ok" if v == "all agree" else ("diff" if row["orders"] > 1 else "muted")
        body.append(f"<tr><td class=nowrap>{_e(op)}{impl}</td><td>{_e(row['dtype'])}</td>"
                    f"<td class=nowrap>{_e(row['size'])}</td><td>{_e(row['layout'])}</td>"
                    f"{''.join(cells)}<td><span class='pill {cls}'>{_e(v)}</span></td></tr>")
    return (
        '<section id="agreement"><h2>Where the orders agree</h2>'
        '<p class="help">One row per operation and condition; one column per library and thread '
        'count. Each letter is a distinct summation tree: the same letter means the same order '
        'of additions, so the same output bits for every input (given the same accumulator '
        f'format). numpy.sum is numpy&rsquo;s own loop; numpy.dot and numpy.matmul call '
        f'{_e(blas)}. A dot marks a combination not in the suite.</p>'
        '<div class="tablewrap"><table class="agreement"><thead><tr><th>operation</th>'
        f'<th>dtype</th><th>size</th><th>layout</th>{head}<th>verdict</th></tr></thead>'
        f'<tbody>{"".join(body)}</tbody></table></div></section>')


def _section_cells(result: MatrixResult) -> str:
    same = _same_as(result)
    rows = []
    for cr in result.cells:
        c = cr.cell
        if cr.status == "ok":
            state = f'<div class="muted">note: {_e(cr.error)}</div>' if cr.error else ""
        else:
            cls = "bad" if cr.status == "failed" else "muted"
            state = f'<div><span class="pill {cls}">{_e(cr.status)}</span> ' \
                    f'<span class="{"err" if cr.status == "failed" else "muted"}">' \
                    f'{_e(cr.error)}</span></div>'
        record = (f'<a href="{_e(cr.record_file)}">record</a>' if cr.record_file else "")
        rows.append(
            f'<tr id="cell-{cr.index}"><td class="num">{cr.index}</td>'
            f'<td class="nowrap mono">{_e(c.target)}</td><td>{_e(c.dtype)}</td>'
            f'<td class="nowrap">{_e(c.size_text)}</td><td>{_e(c.layout)}</td>'
            f'<td class="num">{_e(c.threads_text)}</td>'
            f'<td>{_badge(cr.tree_id)}</td><td class="muted same">{_e(same.get(cr.index, ""))}</td>'
            f'<td class="summary">{_e(cr.summary or "")}'
            f'{cell_note(cr) if is_collective(c) else _classes_html(cr.record)}{state}</td>'
            f'<td class="acc">{_e(_acc_text(cr.record))}</td>'
            f'<td class="num">{cr.seconds:.2f}</td><td>{record}</td></tr>')
    return (
        '<section id="cells"><h2>Cells</h2>'
        '<p class="help">Every reveal of the suite, in suite order. &ldquo;same tree as&rdquo; '
        'names the first cell with an identical tree. The summary describes the revealed order in '
        'plain words; the accumulator is the precision of the additions, measured separately. '
        'Each record is a <code>fpscope.record/2</code> file (<code>fpscope verify</code> '
        'replays it).</p>'
        '<div class="tablewrap"><table class="cells"><thead><tr><th class="num">#</th>'
        '<th>target</th><th>dtype</th><th>n / M&times;K&times;N</th><th>layout</th>'
        '<th class="num">threads</th><th>tree</th><th>same tree as</th><th>summary</th>'
        '<th>node arithmetic</th><th class="num">s</th><th>file</th></tr></thead>'
        f'<tbody>{"".join(rows)}</tbody></table></div></section>')


def _context(result: MatrixResult, idx: int, dim: str) -> str:
    c = result.cells[idx - 1].cell
    parts = [c.target if dim != "library" else c.op]
    if dim != "dtype":
        parts.append(c.dtype)
    if dim == "rows":
        parts.append(f"K={c.shape[1]} N={c.shape[2]}")
    elif dim != "n":
        parts.append(c.size_text)
    elif c.op == "matmul":
        parts.append(f"M={c.shape[0]} N={c.shape[2]}")
    if dim != "layout":
        parts.append(c.layout)
    if dim not in ("threads", "library"):
        parts.append(f"t{c.threads_text}")
    return " ".join(parts)


def _as_node(x):
    return tuple(_as_node(c) for c in x) if isinstance(x, list) else x


def _subtree_words(nested) -> str:
    """"x0, x8 (2 terms): one addition" for a sub-tree given as nested lists."""
    from .summary import describe_subtree, index_set, phrase, set_phrase
    from .tree import leaves_of

    node = _as_node(nested)
    leaves = leaves_of(node) if isinstance(node, tuple) else [node]
    span = set_phrase(index_set(leaves))
    if not isinstance(node, tuple):
        return span
    if len(leaves) == 2:
        return f"{span}: one addition"
    if len(node) == len(leaves):
        return f"{span}: one fused {len(node)}-term addition"
    try:
        shape = phrase(describe_subtree(node), top=False, brief=True)
    except Exception:  # noqa: BLE001 - words are a courtesy; the JSON is shown too
        shape = ""
    return f"{span}: {shape}" if shape else span


def _detail(cmp: dict) -> str:
    try:
        return _detail_text(cmp)
    except RecursionError:  # a sub-tree too deep to describe: the verdict stands alone
        return '<span class="muted">(sub-trees too deep to describe)</span>'


def _detail_text(cmp: dict) -> str:
    out = []
    if cmp["dimension"] == "n":
        if cmp["same"]:
            return f'<span class="muted">{_e(cmp["a_family"])}</span>'
        return f'<code>{_e(cmp["a_family"])}</code> &rarr; <code>{_e(cmp["b_family"])}</code>'
    sub = cmp.get("subtree")
    if sub:
        out.append(f'<b>A</b> {_e(_subtree_words(sub["a"]))}<br><b>B</b> '
                   f'{_e(_subtree_words(sub["b"]))}')
    par = cmp.get("parameter")
    if par:
        out.append(f'first differing parameter: {_e(par["name"])}: <code>{_e(par["a"])}</code> vs '
                   f'<code>{_e(par["b"])}</code>')
    wit = cmp.get("witness")
    if wit:
        inp = wit.get("input")
        if isinstance(inp, dict) and "i" in inp:
            what = f'x[{inp["i"]}] = M, x[{inp["j"]}] = &minus;M, units elsewhere'
        else:
            what = _e(wit.get("how", "random input"))
        out.append(f'<span class="muted">witness:</span> {what} gives <code>{_e(wit["a"])}</code>'
                   f' vs <code>{_e(wit["b"])}</code>')
    for note in cmp.get("notes") or []:
        out.append(f'<span class="muted">{_e(note)}</span>')
    if sub:
        out.append(f'<details class="json"><summary>smallest differing subtree as JSON</summary>'
                   f'<code>A {_e(sub["a_text"])}</code><br><code>B {_e(sub["b_text"])}</code>'
                   f'</details>')
    return "".join(f"<div>{x}</div>" for x in out)


def _section_changes(result: MatrixResult) -> str:
    parts = [('<section id="changes" class="changes"><h2>Changes between neighbouring cells</h2>'
              '<p class="help">Cells that differ in one condition only, compared with '
              '<code>fpscope diff</code>: the verdict, the smallest subtree of one tree whose '
              'leaves are no subtree of the other, and an input that gives different output bits '
              '(checked by replaying both trees).</p>')]
    by_dim: dict = {}
    for cmp in result.comparisons:
        by_dim.setdefault(cmp["dimension"], []).append(cmp)
    if not by_dim:
        parts.append('<p class="muted">No two cells differ in one condition only.</p>')
    for dim in DIMENSIONS:
        items = by_dim.get(dim)
        if not items:
            continue
        title, help_text = _DIM_TITLES[dim]
        changed = [c for c in items if not c["same"]]
        parts.append(f'<h3>{_e(title)} <span class="muted">&middot; {len(changed)} of '
                     f'{len(items)} pairs differ</span></h3><p class="help">{_e(help_text)}</p>')
        if changed:
            rows = []
            for cmp in changed:
                a, b = cmp["a"], cmp["b"]
                ta, tb = result.cells[a - 1].tree_id, result.cells[b - 1].tree_id
                pill = "diff" if cmp["verdict"] != "not compared" else "muted"
                rows.append(
                    f'<tr><td class="nowrap mono">{_e(_context(result, a, dim))}</td>'
                    f'<td class="nowrap"><a href="#cell-{a}">#{a}</a> {_badge(ta)} '
                    f'{_e(cmp["a_value"])} &rarr; <a href="#cell-{b}">#{b}</a> {_badge(tb)} '
                    f'{_e(cmp["b_value"])}</td>'
                    f'<td><span class="pill {pill}">{_e(cmp["verdict"])}</span></td>'
                    f'<td class="detail">{_detail(cmp)}</td></tr>')
            table = ('<div class="tablewrap"><table><thead><tr><th>conditions</th>'
                     '<th>cells</th><th>verdict</th><th>details</th></tr></thead>'
                     f'<tbody>{"".join(rows)}</tbody></table></div>')
            if len(rows) > 12:  # long lists (libraries, n) fold; the agreement table has them
                table = (f'<details class="pairs"><summary>show the {len(rows)} differing '
                         f'pairs</summary>{table}</details>')
            parts.append(table)
        same = [c for c in items if c["same"]]
        if same:
            shown = ", ".join(f'<a href="#cell-{c["a"]}">#{c["a"]}</a>&ndash;'
                              f'<a href="#cell-{c["b"]}">#{c["b"]}</a>' for c in same[:40])
            more = f" and {len(same) - 40} more" if len(same) > 40 else ""
            word = "same family" if dim == "n" else "identical"
            parts.append(f'<p class="same">{word} ({len(same)}): {shown}{more}</p>')
    parts.append("</section>")
    return "".join(parts)


def _section_trees(result: MatrixResult, pictures: dict, reason: str | None,
                   inline_limit: int) -> str:
    inline = len(pictures) <= inline_limit
    cards = []
    for tid, tree in result.trees.items():
        members = result.members(tid)
        summary = members[0].summary if members else ""
        cells = ", ".join(f'<a href="#cell-{m.index}">#{m.index}</a> '
                          f'<span class="muted">{_e(m.cell.library)}</span>'
                          for m in members)
        wide = False
        if tid in pictures:
            title = f"tree {tid}: {summary}"
            svg = pictures[tid].decode("utf-8")
            size = _picture_size(svg)
            wide = bool(size and size[2])
            if inline:
                pic = _inline_svg(svg, f"t{tid}", title, size)
            else:
                dims = f' width="{size[0]}" height="{size[1]}"' if size else ""
                pic = f'<img src="trees/{_e(tid)}.svg" alt="{_e(title)}"{dims} loading="lazy">'
            pic = f'<div class="picture">{pic}</div>'
        else:
            pic = f'<p class="muted">no picture: {_e(reason or "not drawn")}</p>'
        cards.append(
            f'<div class="tree{" wide" if wide else ""}" id="tree-{_e(tid)}"><h3>{_badge(tid)} '
            f'<span>{tree.n} leaves{" + C" if tree.has_c else ""}</span></h3>'
            f'<p>{_e(summary)}</p><p class="muted">cells: {cells}</p>{pic}</div>')
    note = ""
    if result.trees and any(t.n > 64 for t in result.trees.values()):
        note = (" Trees of more than 64 leaves are drawn from the root down while the picture "
                "stays small; the levels below are collapsed into dashed boxes that name their "
                "leaves and shape.")
    return ('<section id="trees"><h2>Trees</h2><p class="help">One picture per distinct tree. '
            'The root is at the top; each circle adds two values, a box &ldquo;+k&rdquo; adds k '
            f'values in one fused step; leaves are input indices.{note}</p>'
            f'<div class="trees">{"".join(cards)}</div></section>')


def _env_items(env: dict) -> list:
    items = []
    plat = env.get("platform") or {}
    cpu = env.get("cpu") or {}
    pk = env.get("packages") or {}
    if plat:
        items.append(("platform", f'{plat.get("platform", "")} · Python {plat.get("python", "")}'))
    if cpu:
        avail = cpu.get("available")
        items.append(("CPU", f'{cpu.get("model") or cpu.get("processor") or "?"} · '
                             f'{cpu.get("count")} cores' + (f" ({avail} available)" if avail else "")))
        if cpu.get("flags"):
            items.append(("SIMD flags", " ".join(cpu["flags"])))
    if pk:
        items.append(("packages", ", ".join(f"{k} {v}" for k, v in pk.items())))
    for info in env.get("blas") or []:
        if isinstance(info, dict):
            items.append((f'{info.get("user_api")} ({info.get("internal_api")})',
                          ", ".join(f"{k} {info[k]}" for k in ("version", "num_threads",
                                    "threading_layer", "architecture") if info.get(k) is not None)))
    nb = env.get("numpy_build") or {}
    if isinstance(nb, dict) and nb.get("simd"):
        found = (nb["simd"] or {}).get("found") if isinstance(nb["simd"], dict) else nb["simd"]
        items.append(("numpy SIMD dispatch", " ".join(found or [])))
    for lib in ("torch", "jax"):
        v = env.get(lib)
        if isinstance(v, dict):
            items.append((f"{lib} settings", ", ".join(f"{k} {v[k]}" for k in v)))
    ev = env.get("env") or {}
    items.append(("environment variables", ", ".join(f"{k}={v}" for k, v in ev.items())
                  if ev else "none of the watched ones set"))
    return items


def _section_env(result: MatrixResult) -> str:
    env = result.environment or {}
    rows = "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in _env_items(env))
    full = _e(json.dumps(env, indent=2, default=str))
    return ('<section id="environment"><h2>Environment</h2>'
            '<p class="help">What the orders depend on besides the library version: the BLAS '
            'build and core type, SIMD extensions, threads and settings (captured after the run; '
            'each record holds its own copy).</p>'
            f'<dl class="env">{rows}</dl><details><summary>full environment (JSON)</summary>'
            f'<pre>{full}</pre></details></section>')


def render_html(result: MatrixResult, pictures: dict | None = None, reason: str | None = None,
                inline_limit: int = 60) -> str:
    """The report page as one HTML string (see the module docstring).

    Args:
        result: the matrix.
        pictures: tree id -> SVG bytes (:func:`tree_pictures`); missing ids get a note.
        reason: why there are no pictures (e.g. Graphviz missing), shown instead of them.
        inline_limit: at most this many pictures are inlined; beyond it every picture is an
            ``<img>`` of ``trees/<ID>.svg``.
    """
    pictures = pictures or {}
    ok = sum(c.status == "ok" for c in result.cells)
    failed = len(result.failed)
    skipped = sum(c.status == "skipped" for c in result.cells)
    libs = ", ".join(result.libraries) or ", ".join(sorted({c.cell.library for c in result.cells},
                                                           key=(LIBRARIES + BACKENDS).index))
    created = ""
    for c in result.cells:
        if c.record:
            created = c.record.get("created", "")
            break
    notes = ""
    if result.notes:
        notes = ('<section id="notes"><h2>Notes</h2><ul class="notes">' +
                 "".join(f"<li>{_e(n)}</li>" for n in result.notes) + "</ul></section>")

    def stat(value, label):
        return f'<div class="stat"><b>{value}</b>{_e(label)}</div>'

    collectives = section_collectives(result)
    coll_link = '<a href="#collectives">collectives</a>' if collectives else ""
    stats = "".join([stat(len(result.cells), "cells"), stat(len(result.trees), "distinct trees"),
                     stat(ok, "ok"), stat(failed, "failed"), stat(skipped, "skipped"),
                     stat(f"{result.seconds:.1f} s", "run time")])
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        f"<title>fpscope matrix: {_e(result.suite)}</title><style>{_CSS}</style></head><body>"
        f"<header><h1>fpscope matrix <span class=\"suite\">&middot; {_e(result.suite)} "
        f"suite</span></h1><p>Summation trees of {_e(libs)} on this machine"
        f"{' &middot; ' + _e(created) if created else ''}</p><div class=\"stats\">{stats}</div>"
        "<nav><a href=\"#agreement\">agreement</a><a href=\"#cells\">cells</a>"
        f"<a href=\"#changes\">changes</a>{coll_link}<a href=\"#trees\">trees</a>"
        "<a href=\"#environment\">environment</a><a href=\"matrix.json\">matrix.json</a></nav>"
        "</header><main>"
        f"{notes}{_section_agreement(result)}{_section_cells(result)}"
        f"{_section_changes(result)}{collectives}"
        f"{_section_trees(result, pictures, reason, inline_limit)}"
        f"{_section_env(result)}</main><footer>written by fpscope "
        f"{_e((result.environment.get('packages') or {}).get('fpscope', ''))}; "
        "a static page: no scripts, no network.</footer></body></html>\n")


def write_report(result: MatrixResult, out_dir, inline_limit: int = 60,
                 max_leaves: int = 64, max_nodes: int = 24) -> Path:
    """Write the pictures, ``matrix.json`` and ``index.html`` into ``out_dir``; return the path
    of index.html.

    Args:
        result: the matrix (:func:`fpscope.matrix.run_matrix`).
        out_dir: the folder the run wrote its records to.
        inline_limit: see :func:`render_html`.
        max_leaves, max_nodes: see :func:`tree_pictures`.

    Raises:
        OSError: a file cannot be written. A missing Graphviz ``dot`` is not an error: the page
            then says so in place of the pictures.
    """
    from .record import dumps

    out = Path(out_dir)
    pictures, reason = tree_pictures(result, out, max_leaves=max_leaves, max_nodes=max_nodes)
    write_text_atomic(out / "matrix.json", dumps(result.to_record()))
    return write_text_atomic(out / "index.html",
                             render_html(result, pictures, reason, inline_limit=inline_limit))
