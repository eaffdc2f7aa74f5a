"""Wording: a description dict (:func:`fpscope.summary.describe`) as a phrase, with the lane
combinations, block groups and where the accumulator leaf C enters."""

from __future__ import annotations

from typing import Optional

from ..tree import SumTree
from .stats import _MAX_GROUPS, NodeStats, _is_node, _plural, _rng, _strip_parens


# -- phrases -------------------------------------------------------------------------------------
def _seq_text(lo: int, hi: int, reverse: bool = False) -> str:
    idx = list(range(lo, hi + 1))
    if reverse:
        idx.reverse()
    names = [f"x{i}" for i in idx]
    if len(names) <= 4:
        text = names[0]
        for i, nm in enumerate(names[1:]):
            text = f"({text} + {nm})" if i < len(names) - 2 else f"{text} + {nm}"
        return text
    return f"(({names[0]} + {names[1]}) + {names[2]}) + ... + {names[-1]}"


_FAMILY_WORDS = {
    "power_of_two_split": "power-of-two splits",
    "balanced_binary": "a balanced binary tree",
    "reverse_sequential": "a reverse fold",
    "recursive_split": "recursive splits",
    "blocked": "blocks added in turn",
    "fused_node": "one fused node",
    "fused_chain": "a chain of fused nodes",
    "strided_lanes": "interleaved lanes",
}


def _ordinal(k: int) -> str:
    suffix = "th" if 10 <= k % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(k % 10, "th")
    return f"{k}{suffix}"


def _and_list(items) -> str:
    items = [str(i) for i in items]
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def _lanes_words(d: dict, brief: bool) -> str:
    """'8 lanes with stride 8' (all residues), 'lanes 0 and 1 of stride 8' (a few lanes of a
    wider reduction, named by their residue mod the stride), '32 lanes of stride 64'."""
    k, s = d["lanes"], d["stride"]
    if d.get("order") == "index_order":
        return f"{k} interleaved lanes (every {_ordinal(k)} term, in index order)"
    starts = d.get("lane_starts")
    if d.get("all_residues", True) or not starts:
        return f"{k} lanes, stride {s}" if brief else f"{k} lanes with stride {s}"
    if k <= (2 if brief else 4):
        return f"lanes {_and_list(sorted(a % s for a in starts))} of stride {s}"
    return f"{k} lanes of stride {s}"


def _combine_short(d: dict) -> str:
    comb = d.get("combine", "irregular")
    if d.get("lanes") == 2:
        return "added"
    if comb == "pairwise":
        return "combined pairwise"
    if comb == "sequential":
        return "combined sequentially"
    if comb == "halving":
        return "combined by halving"
    if comb == "two_stage":
        return "combined in two stages"
    if comb in ("irregular", "other"):
        return "combined in an irregular order"
    cd = d.get("combine_description") or {}
    if comb == "blocked" and cd.get("block_size") and not cd.get("uneven"):
        return f"combined in blocks of {cd['block_size']} added in turn"
    return "combined by " + _FAMILY_WORDS.get(comb, comb.replace("_", " "))


def _tree_text(nested, names: list) -> str:
    """Infix text of a tree over 0..k-1 (flat JSON form, or nested lists) with leaf i printed as
    names[i]."""
    if isinstance(nested, dict):
        nested = SumTree.from_flat(nested).to_nested()
    parts: dict[int, str] = {}
    if not isinstance(nested, list):
        return str(names[nested])
    stack = [(nested, False)]
    while stack:
        cur, visited = stack.pop()
        if visited:
            inner = "+".join(parts.pop(id(ch)) if isinstance(ch, list) else str(names[ch]) for ch in cur)
            parts[id(cur)] = f"({inner})" if len(cur) == 2 else "{" + inner + "}"
        else:
            stack.append((cur, True))
            stack.extend((ch, False) for ch in cur if isinstance(ch, list))
    return _strip_parens(parts[id(nested)])


def _combine_long(c: dict, k: int, names: Optional[list] = None) -> str:
    """Words for how k lane sums are added ("pairwise ((0+1)+(2+3))", "as ((0+4)+(1+5))", "in
    two stages: ...", "in an irregular order (depth 6)"); ``c`` is a :func:`_combine_info` dict
    (or a strided_lanes description, which holds the same keys). With ``names`` (the lanes' own
    numbers, e.g. [0, 8, 16, 24] for some lanes of a stride-64 reduction) the tree is printed
    with those numbers and position-based details (two-stage groups) are left out."""
    comb = c.get("combine", "irregular")
    if names is not None:
        ctext = _tree_text(c["combine_tree"], names) if k <= 16 and c.get("combine_tree") else ""
        if comb == "pairwise":
            return f"pairwise {ctext}".rstrip()
        if comb == "sequential":
            return f"sequentially {ctext}".rstrip()
        if ctext:
            return f"as {ctext}"
        return _combine_short({"combine": comb, "lanes": k}).replace("combined ", "", 1)
    ctext = (c.get("combine_text") or "") if k <= 16 else ""
    if comb == "pairwise":
        return f"pairwise {ctext}".rstrip()
    if comb == "sequential":
        return "sequentially" + (f" (((0+1)+2)+...+{k - 1})" if k > 3 else f" {ctext}").rstrip()
    if comb == "halving":
        return f"by halving (lane j + lane j+{k // 2}, repeatedly) {ctext}".rstrip()
    if ctext:
        return f"as {ctext}"
    if comb == "two_stage" and c.get("combine_stages"):
        sg = c["combine_stages"]
        g, b = sg["groups"], sg["group_size"]
        gw = _combine_long(sg["group"], b)
        ow = _combine_long(sg["outer"], g)
        lanes = f"e + {g}p" if sg["kind"] == "interleaved" else f"{b}e + p"
        return (
            f"in two stages: first, for each e = 0..{g - 1}, the {b} lanes {lanes} (p = 0..{b - 1}) "
            f"are summed {gw} over p; then the {g} sums are combined {ow} over e"
        )
    if c.get("combine_description"):
        try:
            return "by " + phrase(c["combine_description"], top=False)
        except Exception:  # pragma: no cover - defensive
            pass
    depth = c.get("combine_depth")
    return "in an irregular order" + (f" (depth {depth})" if depth else "")


def _panels_text(sizes: list, noun: str) -> str:
    """'of 448, 288 and 288 terms', '(21 of 448, then 2 of 288 terms)' or 'of 3-448 terms'."""
    text = _sizes_text(sizes)
    return f"({text} {noun})" if " of " in text else f"of {text} {noun}"


def _sizes_text(sizes: list) -> str:
    """'448, 288 and 288' or '21 of 448, then 2 of 288' (run lengths) or '3-448'."""
    if len(sizes) <= 6:
        return _and_list(sizes)
    runs: list[list[int]] = []
    for x in sizes:
        if runs and runs[-1][0] == x:
            runs[-1][1] += 1
        else:
            runs.append([x, 1])
    if len(runs) <= 4:
        return ", then ".join(f"{c} of {x}" if c > 1 else f"{x}" for x, c in runs)
    return f"{min(sizes)}-{max(sizes)}"


def _brief(d: dict) -> str:
    fam = d.get("family", "generic")
    tail = d.get("tail", 0) or 0
    if fam == "fused_chain":
        text = f"chain of fused {d['terms_per_node'] + 1}-term nodes"
    elif fam == "strided_lanes":
        text = f"{_lanes_words(d, brief=True)}, {_combine_short(d)}"
    elif fam == "blocked":
        if d.get("uneven"):
            text = f"{d['n_blocks']} panels {_panels_text(d['block_sizes'], 'terms')} added left to right"
        else:
            text = f"{d['n_blocks']} blocks of {d['block_size']} added sequentially"
        if d.get("block"):
            text += f", each {_brief(d['block'])}"
    elif fam == "recursive_split":
        text = f"recursive split into {d['n_blocks']} blocks"
        if d.get("block"):
            text += f", each {_brief(d['block'])}"
        else:
            text += f" of {len(d.get('block_groups', []))} shapes"
    elif fam == "generic":
        text = f"irregular, depth {d.get('depth', '?')}"
    elif fam in ("pairwise", "sequential", "reverse_sequential", "single", "empty"):
        text = fam.replace("_", " ")
    else:
        text = phrase(d, top=False)
    if tail:
        text += f", then {tail} one at a time"
    return text


def phrase(d: dict, top: bool = True, noun: str = "terms", lo: int = 0, brief: bool = False) -> str:
    """Words for one description dict (from :func:`describe` or a nested block description).

    ``top`` adds index ranges and counts that depend on the position (x0..x9); nested block
    shapes use ``top=False`` so that equal shapes at different offsets read the same. ``lo`` is the
    index of the first leaf. ``brief`` gives a short label (a few words, for pictures). Never
    raises for a dict produced by this module.
    """
    if brief:
        return _brief(d)
    fam = d.get("family", "generic")
    n = d.get("n", 0)
    tail = d.get("tail", 0) or 0
    m = n - tail
    hi = lo + m - 1
    text: str
    if fam == "single":
        text = f"the single term x{lo}" if top else "a single term"
    elif fam == "empty":
        text = "no terms"
    elif fam == "sequential":
        text = f"sequential left fold {_seq_text(lo, hi)}" if top else "sequential"
    elif fam == "reverse_sequential":
        text = f"reverse sequential fold {_seq_text(lo, hi, True)}" if top else "reverse sequential"
    elif fam == "pairwise":
        text = "pairwise (recursive halving: split at floor(n/2), add the two halves' sums)"
        if not top:
            text = "pairwise (split at floor(n/2))"
    elif fam == "balanced_binary":
        how = "split at ceil(n/2)" if d.get("split") == "ceil" else "halves differ by at most one"
        text = f"balanced binary tree ({how})"
    elif fam == "power_of_two_split":
        text = "recursive split at the largest power of two below n"
    elif fam == "fused_node":
        text = f"one fused {d['fan_in']}-term node"
    elif fam == "fused_chain":
        L = d["terms_per_node"]
        text = f"fused {L + 1}-term nodes: {L} {noun} plus the running sum"
        if top:
            text = f"chain of {d['chain_nodes']} {text}"
        extra = []
        first = d.get("first_node_terms")
        if first is not None and (first != L or not d.get("c_in_first_node")):
            extra.append(f"the first node sums {first} {noun}" + ("" if first > L else " alone"))
        if d.get("last_node_terms") not in (None, L):
            extra.append(f"the last node adds {d['last_node_terms']}")
        if extra:
            text += " (" + ", ".join(extra) + ")"
    elif fam == "strided_lanes":
        k = d["lanes"]
        if top and d.get("all_residues", True) and d.get("order") != "index_order":
            lens = (
                f"{d['lane_length_max']} {noun} each"
                if d["lane_length_min"] == d["lane_length_max"]
                else f"{d['lane_length_min']}-{d['lane_length_max']} {noun} each"
            )
            over = f" over {_rng(lo, hi)}" if tail else ""
            if d["lane_length_max"] <= 2:
                terms = f"x[r] and x[r+{k}]"
            elif d["lane_length_max"] == 3:
                terms = f"x[r], x[r+{k}], x[r+{2 * k}]"
            else:
                terms = f"x[r], x[r+{k}], x[r+{2 * k}], ..."
            text = f"{k} lanes with stride {k}{over} (lane r sums {terms} sequentially, {lens})"
            text += ", lanes combined " + _combine_long(d, k)
        else:
            text = _lanes_words(d, brief=False)
            if d["lane_length_min"] != d["lane_length_max"]:
                text += " (lanes of unequal length)"
            starts = d.get("lane_starts")
            if d.get("all_residues", True) or not starts or d.get("order") == "index_order":
                text += ", lanes combined " + _combine_long(d, k)
            elif k == 2:
                text += ", added"
            else:
                text += ", combined " + _combine_long(d, k, names=[a % d["stride"] for a in starts])
    elif fam == "blocked":
        b, nb = d["block_size"], d["n_blocks"]
        if d.get("uneven"):
            text = f"{nb} blocked panels {_panels_text(d['block_sizes'], noun)} added left to right"
            if top:
                text += " (((P0 + P1) + P2) + ...)" if nb > 3 else " ((P0 + P1) + P2)"
            text += "; " + _groups_text(d["block_groups"], noun, unit="panel", sizes=False)
        else:
            text = f"blocked panels: {nb} blocks of {b}"
            if d["last_block_size"] != b:
                text += f" (the last of {d['last_block_size']})"
            text += " added sequentially"
            if top:
                text += " (((B0 + B1) + B2) + ...)" if nb > 3 else " ((B0 + B1) + B2)"
            text += "; " + _groups_text(d["block_groups"], noun)
    elif fam == "recursive_split":
        rule = {
            "floor": "split at floor(n/2)",
            "ceil": "split at ceil(n/2)",
            "floor_aligned": f"split at floor(n/2) rounded down to a multiple of {d.get('align')}",
            "pow2": "split at the largest power of two below n",
            "irregular": "uneven splits",
        }.get(d.get("split_rule"), "contiguous splits")
        nb = d["n_blocks"]
        text = (
            f"recursive split into {nb} blocks ({rule}, down to blocks of at most "
            f"{d['block_size_max']} {noun}, each split adding its two halves' sums); "
            + _groups_text(d["block_groups"], noun)
        )
    else:  # generic
        fan = d.get("max_fan_in", 0)
        nf = d.get("n_fused_nodes", 0)
        shape = "binary tree" if d.get("binary", fan <= 2) else f"tree with max fan-in {fan}"
        text = f"unrecognised order: {shape} of depth {d.get('depth', '?')}"
        if nf:
            text += f", {_plural(nf, 'fused node')}"
        parts = d.get("root_parts") or []
        if top and parts:
            descr = []
            for p in parts:
                if p["n"] == 1:
                    descr.append(f"x{p['lo']}" if p["lo"] >= 0 else "C")
                elif p["contiguous"]:
                    descr.append(f"{_rng(p['lo'], p['hi'])} ({p['n']} {noun})")
                else:
                    descr.append(f"{p['n']} scattered {noun}")
            text += "; the root adds " + " and ".join(descr) if len(descr) <= 2 else (
                "; the root combines " + ", ".join(descr)
            )
    if tail:
        if top and fam not in ("strided_lanes", "generic"):
            text += f" over {_rng(lo, hi)}"
        text += f", then the remaining {tail} added one at a time"
        if top:
            text += f" ({_rng(hi + 1, lo + n - 1)})"
    return text


def _groups_text(groups: list[dict], noun: str, unit: str = "block", sizes: bool = True) -> str:
    def size_text(g):
        a, b = g["size_min"], g["size_max"]
        return f"{a} {noun}" if a == b else f"{a}-{b} {noun}"

    if len(groups) == 1:
        g = groups[0]
        return f"each {unit} ({size_text(g)}): {g['shape']}" if sizes else f"each {unit}: {g['shape']}"
    shown = groups[:_MAX_GROUPS]
    parts = [f"{_plural(g['count'], unit)} ({size_text(g)}): {g['shape']}" for g in shown]
    text = "; ".join(parts)
    if len(groups) > _MAX_GROUPS:
        rest = sum(g["count"] for g in groups[_MAX_GROUPS:])
        text += f"; {_plural(rest, 'more ' + unit)} in {len(groups) - _MAX_GROUPS} other shapes"
    return text


# -- where C enters --------------------------------------------------------------------------------
def _c_info(path: list, stripped_stats: NodeStats, n: int) -> dict:
    parent = path[-1]
    others = parent[1:]
    joins = sum(stripped_stats.cnt(c) for c in others)
    lo = min(stripped_stats.mn(c) for c in others)
    hi = max(stripped_stats.mx(c) for c in others)
    all_leaves = all(not _is_node(c) for c in others)
    if len(path) == 1 and all_leaves:
        entry = "only_node"
    elif len(path) == 1:
        entry = "last"
    elif all_leaves:
        entry = "first"
    else:
        entry = "middle"
    return {
        "entry": entry,
        "parent_fan_in": len(parent),
        "joins_terms": joins,
        "joins_lo": lo,
        "joins_hi": hi,
        "joins_contiguous": hi - lo + 1 == joins,
        "joins_leaves": sorted(others) if all_leaves and len(others) <= 4 else None,
        "terms_after": n - joins,
        "depth": len(path),
    }


def _c_phrase(c: dict, noun: str) -> str:
    e = c["entry"]
    fan = c["parent_fan_in"]
    if c["joins_contiguous"]:
        span = _rng(c["joins_lo"], c["joins_hi"])
    elif c.get("joins_leaves"):
        span = ", ".join(f"x{i}" for i in c["joins_leaves"])
    else:
        span = f"{c['joins_terms']} {noun}"
    if e == "only_node":
        return f"C enters with all {c['joins_terms']} {noun} in one {fan}-input node"
    if e == "last":
        return "C is added last" + (f" (in the final fused {fan}-term node)" if fan > 2 else "")
    if e == "first":
        if c["joins_lo"] != 0:
            return f"C enters before any partial sum is formed, in a node with {span}"
        if fan == 2:
            return f"C enters first (added to {span})"
        return f"C enters first (in the first node, with {span})"
    return (
        f"C is added to the partial sum of {span} ({c['joins_terms']} {noun}); "
        f"{c['terms_after']} more {noun} are added after it"
    )
