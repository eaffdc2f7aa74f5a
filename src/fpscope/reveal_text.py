"""The text report of a reveal record: what ``fpscope reveal`` prints and
:meth:`fpscope.api.Revelation.text` returns (target and conditions, summary, tree, accumulator,
node arithmetic, probes, checks, output classes with their position map, replay, accuracy)."""

from __future__ import annotations

from rich.markup import escape


def class_difference(classes: list, k: int) -> str:
    """How class k's tree differs from class 0's: the smallest differing subtree."""
    from .diff import Side, diff_trees
    from .tree import SumTree

    a, b = (SumTree.from_json(classes[i]["tree"]) for i in (0, k))
    d = diff_trees(Side("A", tree=a), Side("B", tree=b))
    if d.subtree is None:
        return d.verdict
    s = d.subtree
    return (f"smallest differing subtree ({len(s['leaves'])} leaves): A {s['a_text']}, "
            f"here {s['b_text']} (this tree's smallest node that holds those leaves)")


_CONDITIONS = ("shape", "axis", "index", "output", "layout", "offset", "threads", "out_dtype")
_CHECK_WORDS = {
    "units": "unit count", "absorption": "mask absorbs", "sizes": "group sizes",
    "packed_probes": "packed probes",
    "repeated_probes": "repeats", "batched_vs_single": "batched = single",
    "random_pairs": "random pairs", "shared_k_order_outputs": "outputs share the K-order",
    "output_classes": "every output matches its class's tree",
    "scan_prefixes": "every output is the tree's prefix",
    "rank_identity": "every rank received identical bits",
    "env_applied": "OpenBLAS runs the OPENBLAS_CORETYPE kernels",
}


def _conditions(t: dict) -> str:
    if t.get("world_size"):  # a collective: leaves are ranks, n is the elements per rank
        parts = [f"world_size={t['world_size']} (leaves = ranks)", f"elements={t.get('n')}",
                 f"dtype={t.get('dtype')}", f"backend={t.get('backend')}"]
        if t.get("output") is not None:
            parts.append(f"element={t['output']}")
        return "  ".join(parts)
    parts = [f"n={t.get('n')}", f"dtype={t.get('dtype')}"]
    for key in _CONDITIONS:
        v = t.get(key)
        if v is None or (key == "layout" and v == "C") or (key == "offset" and v == 0) \
                or (key == "out_dtype" and v == t.get("dtype")) or (key == "shape" and v == [t.get("n")]):
            continue
        parts.append(f"{key}={'x'.join(map(str, v)) if isinstance(v, list) else v}")
    return "  ".join(parts)


def _checks_text(checks: dict) -> str:
    """Only the checks that ran, with their counts where they have one."""
    out = []
    for key, v in checks.items():
        if v in (0, None) or str(v).startswith(("no:", "fell back")):
            continue
        word = _CHECK_WORDS.get(key, key)
        out.append(f"{word} ({v})" if isinstance(v, int) else word)
    return ", ".join(out) or "none needed"


def write_reveal_text(console, record: dict, tree, record_path=None) -> None:
    from .render import to_rich

    t = record["target"]
    pr = record["probe"]
    acc = record["accumulator"]
    console.print(f"[bold]{escape(t['name'])}[/bold]  {escape(_conditions(t))}", highlight=False)
    console.print(f"[bold green]{escape(record['summary'])}[/bold green]", highlight=False)
    comm = t.get("communication")
    if comm:
        env = " ".join(f"{k}={v}" for k, v in (comm.get("algorithm_env") or {}).items())
        lib = comm.get("mpi_library") or comm.get("backend")
        console.print(f"communication: {escape(str(comm.get('library')))} "
                      f"{escape(str(comm.get('version')))} ({escape(str(lib))}); algorithm "
                      f"variables: {escape(env or 'none set')}", highlight=False)
    if not (t.get("world_size") and tree.n <= 32):  # the summary spells out a collective's tree
        console.print(to_rich(tree))
    if acc.get("observable"):
        more = " or more" if acc.get("at_least") else ""
        name = f" ({acc['format']})" if acc.get("format") else ""
        console.print(f"accumulator: {acc['precision_bits']} significand bits{more}{name}", highlight=False)
    else:
        console.print(f"accumulator: not observable: {acc.get('note', '')}", highlight=False)
    ar = record.get("arithmetic")
    if ar:
        console.print(f"arithmetic: {escape(ar.get('described', ''))}", highlight=False)
        ev = ar.get("evidence") or {}
        probed = [ev[k] for k in ("node_formats_probed", "products_probed") if k in ev]
        if probed:
            console.print(f"  probed: {escape('; '.join(probed))}", highlight=False)
        for key in ("products", "node_formats_note"):
            if ev.get(key):
                console.print(f"  [yellow]note:[/yellow] {escape(ev[key])}", highlight=False)
    m = pr["mask"]
    console.print(
        f"probes: {pr['probes']} ({pr['probes'] / max(tree.n, 1):.1f} per leaf) in {pr['calls']} calls, "
        f"{pr['seconds']:.3f} s; mask M=2^{m['M_log2']}, u=2^{m['u_log2']}", highlight=False)
    if pr["checks"].get("candidate"):  # how the tree was found
        console.print(f"tree proven as a candidate: {escape(pr['checks']['candidate'])}",
                      highlight=False)
    if pr["checks"].get("candidates_rejected"):  # the caller's trees that did not hold
        console.print(f"[yellow]note:[/yellow] candidate not used: "
                      f"{escape(pr['checks']['candidates_rejected'])}", highlight=False)
    passed = _checks_text({k: v for k, v in pr["checks"].items()
                           if k not in ("candidate", "candidates_rejected")})
    if t.get("world_size"):  # a collective's outputs are the buffer's elements
        passed = passed.replace("every output matches", "every element matches")
    console.print(f"checks passed: {passed}", highlight=False)
    for key in ("shared_k_order_outputs", "scan_prefixes", "rank_identity", "env_applied"):
        said = str(pr["checks"].get(key, ""))
        if said.startswith("no:"):
            if t.get("world_size"):  # a collective's outputs are the buffer's elements
                said = said.replace(" outputs;", " elements;").replace("output (0, 0)",
                                                                       "element 0")
            console.print(f"[yellow]note:[/yellow] {escape(said[3:].strip())}", highlight=False)
    if record.get("classes"):
        from .reveal.classes import positions_text

        elements = bool(t.get("world_size"))
        grid = "x".join(map(str, record["classes"][0]["grid"]))
        console.print(f"element classes ({t.get('n')} elements, a tree per element):" if elements
                      else f"output classes ({grid} outputs, tree per position):", highlight=False)
        for k, c in enumerate(record["classes"]):
            letter = chr(65 + k) if k < 26 else str(k)
            where = escape(positions_text(c["outputs"], elements=elements))
            console.print(f"  {letter}: {c['count']} {'elements' if elements else 'outputs'}: "
                          f"{where}", highlight=False)
            console.print(f"     {escape(c['summary'])}", highlight=False)
            if k:
                console.print(f"     vs A: {escape(class_difference(record['classes'], k))}",
                              highlight=False)
            if c.get("arithmetic"):
                console.print(f"     arithmetic: {escape(c['arithmetic']['described'])}",
                              highlight=False)
    rep = record["validation"].get("replay")
    if rep:
        differ = rep["samples"] - rep["matched"]
        state = "[green]bit-exact[/green]" if rep["bit_exact"] else \
            f"bit-exact, [red]{differ} DIFFER[/red]"
        console.print(f"replay ({rep['accumulator']} accumulator): "
                      f"{rep['matched']}/{rep['samples']} outputs {state}", highlight=False)
        if rep.get("products"):
            console.print("  (inputs: random factor pairs, so each product's entry is compared)",
                          highlight=False)
        if rep.get("enforced") is False and rep.get("note"):  # a difference is not evidence here
            console.print(f"  [yellow]note:[/yellow] {escape(rep['note'])}, so the replay does "
                          f"not decide (fpscope probe characterises such nodes)", highlight=False)
    else:
        console.print("replay: skipped (--samples 0)", highlight=False)
    if record.get("accuracy"):
        from .accuracy import accuracy_text

        console.print(accuracy_text(record["accuracy"]), highlight=False)
    if record_path:
        console.print(f"record written to {record_path}", highlight=False)


def reveal_text(record: dict, tree, width: int = 120, record_path=None) -> str:
    """:func:`write_reveal_text` as plain text (no colour), ``width`` columns."""
    import io

    from rich.console import Console

    buf = io.StringIO()
    write_reveal_text(Console(file=buf, width=width, color_system=None, force_terminal=False),
                      record, tree, record_path)
    return buf.getvalue()
