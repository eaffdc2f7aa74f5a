"""The HTML fleet report (``fleet.html``): one static page, inline CSS, no script, no network.

Sections (the house style of :mod:`fpscope.report`):

* grid: one row per cell, one column per worker; each worker's cell shows the letter of its
  group ("A" is the largest group), one colour per letter; "&ndash;" where the worker has no
  result for the cell (hover for the reason);
* differences: for each cell with more than one group, the :mod:`fpscope.diff` verdict between
  group A and each other group, the smallest differing subtree and the witness input;
* workers: name, address and the environment entries that decide the orders: CPU, numpy, BLAS
  (version and core type), ``OPENBLAS_CORETYPE`` when set.
"""

from __future__ import annotations

from ..report import _CSS, _blas_name, _colour, _e

__all__ = ["group_letter", "key_environment", "render_fleet_html"]

_FLEET_CSS = """
td.grid, th.grid { text-align: center; white-space: nowrap; }
td.cell { white-space: nowrap; }
"""


def _badge(letter: str | None, title: str = "") -> str:
    if letter is None:
        return '<span class="badge none">&ndash;</span>'
    t = f' title="{_e(title)}"' if title else ""
    return f'<span class="badge" style="background:{_colour(letter)}"{t}>{_e(letter)}</span>'


def group_letter(k: int) -> str:
    """The letter of the k-th group (0-based): "A", ..., "Z", "AA", ..."""
    from ..sweep import _tree_id

    return _tree_id(k)


def key_environment(env: dict) -> dict:
    """The entries of a captured environment (:func:`fpscope.environment.capture_environment`)
    that decide summation orders, as text: ``CPU`` (model, cores), ``numpy`` (version),
    ``BLAS`` (library, version, core type), ``OPENBLAS_CORETYPE`` (only when set). Entries the
    environment lacks are left out."""
    env = env if isinstance(env, dict) else {}
    out = {}
    cpu = env.get("cpu") if isinstance(env.get("cpu"), dict) else {}
    if cpu:
        out["CPU"] = f'{cpu.get("model") or cpu.get("processor") or "?"}' + \
            (f' · {cpu["count"]} cores' if cpu.get("count") else "")
    pk = env.get("packages") if isinstance(env.get("packages"), dict) else {}
    if pk.get("numpy"):
        out["numpy"] = str(pk["numpy"])
    blas = [b for b in env.get("blas") or [] if isinstance(b, dict) and b.get("user_api") == "blas"]
    if blas:
        arch = blas[0].get("architecture")
        out["BLAS"] = _blas_name(env) + (f" ({arch})" if arch else "")
    ev = env.get("env") if isinstance(env.get("env"), dict) else {}
    if ev.get("OPENBLAS_CORETYPE"):
        out["OPENBLAS_CORETYPE"] = str(ev["OPENBLAS_CORETYPE"])
    return out


def _witness_text(w: dict | None) -> str:
    if not w:
        return '<span class="muted">no witness</span>'
    shown = w.get("input")
    if isinstance(shown, list):
        shown = " ".join(shown[:8]) + (f" ... ({len(shown)} values; fleet.json has all)"
                                       if len(shown) > 8 else "")
    elif isinstance(shown, dict):
        shown = ", ".join(f"{k} = {v}" for k, v in shown.items())
    return (f'<code>{_e(shown)}</code><br><span class="muted">{_e(w.get("how"))}: gives '
            f'A {_e(w.get("a"))}, B {_e(w.get("b"))}</span>')


def _section_grid(fleet: dict) -> str:
    names = [w["name"] for w in fleet["workers"]]
    head = "".join(f'<th class="grid"><span title="{_e(n)}">{_e(n)}</span></th>' for n in names)
    rows = []
    for c in fleet["cells"]:
        letter = {n: group_letter(k) for k, members in enumerate(c["groups"]) for n in members}
        why = {m["worker"]: m["reason"] for m in c["missing"]}
        tds = "".join(f'<td class="grid">{_badge(letter.get(n), f"{n}: group {letter.get(n)}")}'
                      f"</td>" if n in letter else
                      f'<td class="grid"><span class="badge none" title="{_e(why.get(n))}">'
                      f"&ndash;</span></td>" for n in names)
        k = len(c["groups"])
        pill = ('<span class="pill ok">all agree</span>' if k == 1 else
                '<span class="pill muted">no result</span>' if k == 0 else
                f'<a class="pill diff" href="#diff-{_e(_anchor(c["cell"]))}">{k} groups</a>')
        rows.append(f'<tr><td class="cell"><code>{_e(c["cell"])}</code></td>{tds}'
                    f"<td>{pill}</td></tr>")
    return ('<section id="grid"><h2>Workers &times; cells</h2><p class="help">The letter is the '
            "worker's group for the cell: equal letters agree bit for bit (the same summation "
            "tree, node arithmetic and output classes; fpscope diff says \u201cidentical\u201d). "
            "A is the largest group. &ndash;: no result (hover for the reason).</p>"
            f'<div class="tablewrap"><table><thead><tr><th>cell</th>{head}<th>verdict</th></tr>'
            f'</thead><tbody>{"".join(rows)}</tbody></table></div></section>')


def _anchor(label: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in label)


def _section_diffs(fleet: dict) -> str:
    rows = []
    for c in fleet["cells"]:
        for d in c["diff"]:
            sub = d.get("subtree")
            where = (f'<br><span class="muted">smallest differing subtree '
                     f'({len(sub["leaves"])} leaves): A <code>{_e(sub["a_text"])}</code> vs B '
                     f'<code>{_e(sub["b_text"])}</code></span>') if sub else ""
            par = d.get("parameter")
            if par:
                where += (f'<br><span class="muted">first differing parameter: {_e(par["name"])}'
                          f': A {_e(par["a"])}, B {_e(par["b"])}</span>')
            groups = (f'{_badge("A")} {_e(", ".join(c["groups"][0]))} vs '
                      f'{_badge(group_letter(d["group"] - 1))} '
                      f'{_e(", ".join(c["groups"][d["group"] - 1]))}')
            anchor = f' id="diff-{_e(_anchor(c["cell"]))}"' if d["group"] == 2 else ""
            rows.append(f'<tr{anchor}><td class="cell"><code>'
                        f'{_e(c["cell"])}</code></td><td>{groups}</td><td>'
                        f'<b>{_e(d["verdict"])}</b>{where}</td>'
                        f'<td class="detail">{_witness_text(d.get("witness"))}</td></tr>')
    body = ('<p class="muted">Every cell gives the same bits on every worker that has it.</p>'
            if not rows else
            '<div class="tablewrap"><table class="changes"><thead><tr><th>cell</th>'
            '<th>groups</th><th>difference (fpscope diff)</th><th>witness: an input whose output '
            f'bits differ</th></tr></thead><tbody>{"".join(rows)}</tbody></table></div>')
    return ('<section id="differences"><h2>Differences</h2><p class="help">Group A\'s first '
            "worker against each other group's first worker, compared with fpscope diff.</p>"
            f"{body}</section>")


def _section_workers(fleet: dict) -> str:
    keys = ("CPU", "numpy", "BLAS", "OPENBLAS_CORETYPE")
    rows = []
    for w in fleet["workers"]:
        env = key_environment(w.get("environment") or {})
        cells = "".join(f"<td>{_e(env.get(k, ''))}</td>" for k in keys)
        rows.append(f'<tr><td class="nowrap"><b>{_e(w["name"])}</b></td>'
                    f'<td class="mono">{_e(w.get("address") or "")}</td>{cells}'
                    f'<td class="mono">{_e(w.get("folder") or "")}</td></tr>')
    head = "".join(f"<th>{_e(k)}</th>" for k in keys)
    return ('<section id="workers"><h2>Workers</h2><p class="help">What the orders depend on: '
            "the CPU, numpy and its BLAS with the core type it picked (OPENBLAS_CORETYPE forces "
            "one). fleet.json holds each worker's whole environment.</p>"
            f'<div class="tablewrap"><table><thead><tr><th>name</th><th>address</th>{head}'
            f'<th>folder</th></tr></thead><tbody>{"".join(rows)}</tbody></table></div>'
            "</section>")


def render_fleet_html(fleet: dict) -> str:
    """The fleet report as one HTML string.

    Args:
        fleet: the content of ``fleet.json`` (:func:`fpscope.fleet.compare.compare_folders`).
    """
    cells = fleet["cells"]
    split = sum(len(c["groups"]) > 1 for c in cells)
    agree = sum(len(c["groups"]) == 1 for c in cells)

    def stat(value, label):
        return f'<div class="stat"><b>{value}</b>{_e(label)}</div>'

    stats = "".join([stat(len(fleet["workers"]), "workers"), stat(len(cells), "cells"),
                     stat(agree, "agree everywhere"), stat(split, "differ")])
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        f"<title>fpscope fleet</title><style>{_CSS}{_FLEET_CSS}</style></head><body>"
        "<header><h1>fpscope fleet</h1><p>Which machines sum each cell of the matrix bit for "
        f"bit alike</p><div class=\"stats\">{stats}</div>"
        "<nav><a href=\"#grid\">grid</a><a href=\"#differences\">differences</a>"
        "<a href=\"#workers\">workers</a><a href=\"fleet.json\">fleet.json</a></nav>"
        f"</header><main>{_section_grid(fleet)}{_section_diffs(fleet)}"
        f"{_section_workers(fleet)}</main><footer>written by fpscope fleet; a static page: no "
        "scripts, no network.</footer></body></html>\n")
