"""The Collectives section of the matrix report, and its lines in ``fpscope matrix``'s text.

One row per collective cell (:class:`fpscope.matrix_collectives.CollectiveCell`), read from the
cell's reveal record: the world size P (the leaves: ranks r0..r{P-1}), the elements per rank,
the backend and library version (``record["target"]["communication"]``, with the algorithm
variables the ranks were started with), the tree of element 0, the element classes (elements
that add in the same order; ``record["classes"]``: per class the element ranges and the summary;
a record without classes has one class, every element) and the rank-identity check
(``record["probe"]["checks"]["rank_identity"]``: whether every rank received identical bits).
"""

from __future__ import annotations

from .matrix_collectives import is_collective

__all__ = ["cell_note", "collective_results", "section_collectives", "text_lines"]


def collective_results(result) -> list:
    """The :class:`fpscope.matrix.CellResult` s of ``result`` whose cells are collectives."""
    return [cr for cr in result.cells if is_collective(cr.cell)]


def _classes(rec: dict) -> list:
    """[(element count, element ranges in words, summary)] of a collective record: one entry
    per class, or one for every element when the record has no classes."""
    from .reveal.classes import positions_text

    elements = int((rec.get("target") or {}).get("n") or 0)
    classes = rec.get("classes")
    if not classes:
        span = f"e = 0..{elements - 1}" if elements > 1 else "e = 0"
        return [(elements, span, rec.get("summary") or "")]
    return [(c.get("count"), positions_text(c.get("outputs") or [], elements=True),
             c.get("summary") or "") for c in classes]


def _communication(rec: dict) -> tuple[str, str]:
    """("torch.distributed 2.13.0+cpu (gloo)", "GLOO_SOCKET_IFNAME=lo") of a record."""
    comm = (rec.get("target") or {}).get("communication") or {}
    lib = comm.get("mpi_library") or comm.get("backend") or "?"
    head = f"{comm.get('library', '?')} {comm.get('version', '?')} ({lib})"
    env = " ".join(f"{k}={v}" for k, v in (comm.get("algorithm_env") or {}).items())
    return head, env


def _rank_identity(rec: dict) -> str:
    return str(((rec.get("probe") or {}).get("checks") or {}).get("rank_identity")
               or "not checked")


def _pill(text: str) -> str:
    """The class of a rank-identity pill: ok, bad or muted."""
    return "ok" if text.startswith("ok") else ("bad" if text.startswith("no") else "muted")


def cell_note(cr) -> str:
    """HTML for the Cells table: where the element classes of a collective cell are."""
    if not cr.record:
        return ""
    n = len(_classes(cr.record))
    what = ("every element uses this tree" if n == 1
            else f"{n} element classes; this is element 0's tree")
    return (f'<div class="muted">{what}: see <a href="#coll-{cr.index}">Collectives</a>'
            f'</div>')


def section_collectives(result) -> str:
    """The report's Collectives section as HTML, or "" when ``result`` has no collective cells."""
    from .report import _badge, _e

    cells = collective_results(result)
    if not cells:
        return ""
    rows = []
    for cr in cells:
        c, rec = cr.cell, cr.record
        head = (f'<tr id="coll-{cr.index}"><td class="num"><a href="#cell-{cr.index}">'
                f'{cr.index}</a></td><td class="nowrap mono">{_e(c.target)}</td>'
                f'<td>{_e(c.dtype)}</td><td class="num">{c.world_size}</td>'
                f'<td class="num">{c.elements}</td>')
        if rec is None:
            cls = "bad" if cr.status == "failed" else "muted"
            rows.append(f'{head}<td colspan="4"><span class="pill {cls}">{_e(cr.status)}</span> '
                        f'<span class="muted">{_e(cr.error)}</span></td></tr>')
            continue
        lib, env = _communication(rec)
        classes = _classes(rec)
        items = "".join(f"<li>{_e(count)} elements, {_e(span)}: {_e(summary)}</li>"
                        for count, span, summary in classes)
        word = "class" if len(classes) == 1 else "classes"
        failed = (f'<div><span class="pill bad">failed</span> <span class="err">'
                  f'{_e(cr.error)}</span></div>' if cr.status == "failed" else "")
        ident = _rank_identity(rec)
        rows.append(
            f'{head}<td>{_e(lib)}<div class="muted mono">{_e(env or "no algorithm variables")}'
            f'</div></td><td>{_badge(cr.tree_id, "element 0")}</td>'
            f'<td class="summary">{len(classes)} element {word}<ol>{items}</ol>{failed}</td>'
            f'<td class="ident"><span class="pill {_pill(ident)}">{_e(ident.split(":")[0])}</span> '
            f'<span class="muted">{_e(ident.partition(":")[2].strip())}</span></td></tr>')
    return (
        '<section id="collectives"><h2>Collectives</h2>'
        '<p class="help">Sums across ranks: the leaves of each tree are the ranks r0, r1, ...; '
        'every element of the buffer is an output with its own tree, and elements that add in '
        'the same order form a class (ring algorithms give one tree per chunk). The tree '
        'letter is element 0&rsquo;s. Rank identity: whether every rank received identical '
        'bits (all_reduce; the MPI standard requires it). The algorithm variables are those '
        'the ranks were started with; a library may choose its algorithm by size and world, so '
        'these trees hold for these conditions only.</p>'
        '<div class="tablewrap"><table class="collectives"><thead><tr><th class="num">#</th>'
        '<th>target</th><th>dtype</th><th class="num">world size</th>'
        '<th class="num">elements</th><th>backend &middot; library</th><th>tree</th>'
        '<th>element classes</th><th>rank identity</th></tr></thead>'
        f'<tbody>{"".join(rows)}</tbody></table></div></section>')


def text_lines(result) -> list[str]:
    """One line per collective cell for ``fpscope matrix``'s text output."""
    out = []
    for cr in collective_results(result):
        c, rec = cr.cell, cr.record
        head = f"#{cr.index} {c.target} {c.dtype} {c.size_text}"
        if rec is None:
            out.append(f"{head}: {cr.status} ({cr.error})")
            continue
        n = len(_classes(rec))
        out.append(f"{head} ({_communication(rec)[0]}): tree {cr.tree_id} (element 0), {n} "
                   f"element {'class' if n == 1 else 'classes'}; rank identity: "
                   f"{_rank_identity(rec)}")
    return out
