"""The static HTML page of one probe run (``fpscope probe --format html``): every feature with
its value, meaning and evidence, the fingerprint, the profile and the closed-loop validation;
the matrix report's stylesheet (:mod:`fpscope.report`), no scripts, no network."""

from __future__ import annotations

import json

from .report import _CSS, _e


def probe_page(rep: dict, environment: dict | None = None) -> str:
    """A static HTML page of one probe run (the dict of ``ProbeReport.to_dict()``): every
    feature with its value, meaning and evidence (probe inputs and outputs as hex), the
    fingerprint, the profile and the closed-loop validation. No scripts, no network."""
    t = rep.get("target", {})
    verdict = ("ACCEPTED: bit-exact" if rep.get("accepted") else
               ("does not fit a fused-block model" if not rep.get("fits") else "REJECTED"))
    cls = "ok" if rep.get("accepted") else "bad"
    rows = []
    for f in rep.get("findings", []):
        state = ("not observable" if not f.get("observable") else
                 ("DOES NOT FIT" if not f.get("fits") else "observed"))
        ev = f.get("evidence") or []
        ev_html = ""
        if ev:
            lines = []
            for r in ev:
                prods = " ".join(f"k{p.get('k')}:{p.get('a')}*{p.get('b')}"
                                 for p in r.get("products", []))
                lines.append(f"{prods}  c={r.get('c', '')}  d={r.get('d', '')}  "
                             f"{r.get('meaning', '')}")
            ev_html = (f"<details><summary>{len(ev)} of {f.get('rows', len(ev))} rows"
                       f"</summary><pre>{_e(chr(10).join(lines))}</pre></details>")
        val = f.get("value")
        shown = (f"0x{val:X}" if f.get("feature") == "nan_bits" and isinstance(val, int)
                 else json.dumps(val))
        rows.append(f"<tr><td><b>{_e(f.get('feature'))}</b><br><span class=\"muted\">"
                    f"{_e(f.get('family'))}</span></td><td><code>{_e(shown)}</code>"
                    f"</td><td>{_e(state)}</td><td>{_e(f.get('note', ''))}{ev_html}</td></tr>")
    prof = rep.get("profile")
    prof_html = (f"<pre>{_e(json.dumps(prof, indent=2))}</pre>" if prof else
                 f"<p>No profile: {_e(rep.get('reason', ''))}</p>")
    if not prof and rep.get("nearest"):
        prof_html += ("<h3>Nearest profile</h3><p>Not reproducing the rows of the node "
                      "finding's evidence: a hypothesis, not validated.</p>"
                      f"<pre>{_e(json.dumps(rep['nearest'], indent=2))}</pre>")
    v = rep.get("validation") or {}
    val_html = "<p>not run</p>"
    if v:
        val_html = (f"<p>{v.get('matched')}/{v.get('cases')} random outputs match bit for bit "
                    f"({_e(v.get('seconds'))} s).</p>")
        by = v.get("by_generator") or {}
        if by:
            val_html += ("<table><tr><th>generator</th><th>matched</th></tr>" + "".join(
                f"<tr><td>{_e(g)}</td><td>{m}/{n}</td></tr>" for g, (m, n) in by.items())
                + "</table>")
        if v.get("first_mismatch"):
            val_html += (f"<h3>First mismatch, shrunk</h3><pre>"
                         f"{_e(json.dumps(v['first_mismatch'], indent=2))}</pre>")
    env_html = (f"<details><summary>environment</summary><pre>"
                f"{_e(json.dumps(environment, indent=2, default=str))}</pre></details>"
                if environment else "")
    title = f"fpscope probe: {t.get('name', '')}"
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>"
        f"<header><h1>{_e(title)}</h1><p>{_e(t.get('in_format'))} inputs, "
        f"{_e(t.get('out_format'))} output, K = {_e(rep.get('k'))} &middot; "
        f"<span class=\"{cls}\">{_e(verdict)}</span></p>"
        f"<p>{_e(rep.get('fingerprint', ''))}</p></header><main>"
        "<section id=\"features\"><h2>Features</h2><table><tr><th>feature</th><th>value</th>"
        f"<th>status</th><th>meaning and evidence</th></tr>{''.join(rows)}</table></section>"
        f"<section id=\"profile\"><h2>Profile</h2>{prof_html}</section>"
        f"<section id=\"validation\"><h2>Closed-loop validation</h2>{val_html}{env_html}"
        "</section></main><footer>written by fpscope; a static page: no scripts, no network."
        "</footer></body></html>\n")
