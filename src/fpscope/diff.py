"""``fpscope diff A B``: compare two summation trees (reveal records) or two profiles.

Verdicts: "identical"; for trees "same tree, different node arithmetic", "different tree", or
"same tree; node arithmetic not compared" (a bare tree file has no arithmetic); for
profiles "same arithmetic" (names may differ) or "different arithmetic". A difference comes with

* the smallest differing subtree: the smallest node of one tree whose set of leaves is no node of
  the other, beside the smallest node of the other that holds those leaves;
* the first differing parameter (accumulator format, per-node formats, a profile field);
* a witness: an input that gives different output bits under the two, checked by evaluating both
  (trees: :func:`fpscope.replay.replay`; profiles: the emulator). For two trees the witness is the
  FPRev probe of a pair of leaves whose lowest common ancestor differs in size (Xie et al., ATC
  2025): ``x_i = M, x_j = -M``, units elsewhere; its output counts the units outside that ancestor.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .arithmetic import Arithmetic
from .formats import Format, encode, get_format
from .profile import PRESETS, Profile, resolve_format
from .tree import C_LEAF, SumTree, TreeError, leaves_of

__all__ = ["DiffError", "DiffResult", "Side", "diff", "load_side", "side_from_record"]

#: profile fields that name or document a profile rather than its arithmetic
_LABELS = ("name", "arch", "status", "evidence")


class DiffError(ValueError):
    """An operand of diff cannot be read, or the two cannot be compared."""


@dataclass
class Side:
    """One operand: a tree with its node arithmetic (:class:`fpscope.arithmetic.Arithmetic`:
    every node's format, every product's entry, the output format; None for a bare tree), or a
    profile."""

    label: str
    tree: SumTree | None = None
    arith: Arithmetic | None = None
    profile: Profile | None = None
    #: matrix ops whose outputs use several trees: (tree, positions, arithmetic) per class
    classes: list | None = None

    @property
    def out_format(self) -> Format | None:
        return None if self.arith is None else self.arith.out_format

    @property
    def acc(self) -> Format | None:
        """The narrowest node format (None for a bare tree)."""
        if self.arith is None:
            return None
        fmts = self.arith.formats
        return min(fmts, key=lambda f: f.p) if fmts else self.arith.out_format

    @property
    def kind(self) -> str:
        return "profile" if self.profile is not None else "tree"


@dataclass
class DiffResult:
    """The comparison; ``same`` is True for "identical" and "same arithmetic"."""

    kind: str
    verdict: str
    same: bool
    subtree: dict | None = None
    parameter: dict | None = None
    witness: dict | None = None
    notes: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "verdict": self.verdict, "same": self.same,
                "subtree": self.subtree, "parameter": self.parameter, "witness": self.witness,
                "notes": self.notes}

    def to_text(self) -> str:
        lines = [self.verdict]
        if self.subtree:
            s = self.subtree
            lines.append(f"smallest differing subtree ({len(s['leaves'])} leaves): "
                         f"A {s['a_text']}  vs  B {s['b_text']} (the other tree's smallest node "
                         f"that holds those leaves)")
        if self.parameter:
            p = self.parameter
            lines.append(f"first differing parameter: {p['name']}: A {p['a']!r}, B {p['b']!r}")
        if self.witness:
            w = self.witness
            shown = w["input"]
            if isinstance(shown, list) and len(shown) > 8:
                shown = " ".join(shown[:8]) + f" ... ({len(shown)} values; --format json has all)"
            elif isinstance(shown, dict) and "products" in shown:
                prods = " ".join(f"k{p['k']}: {p['a']}*{p['b']}" for p in shown["products"])
                scales = "".join(f", {k} = {' '.join(shown[k])}" for k in ("scale_a", "scale_b")
                                 if k in shown)
                shown = f"{prods or 'every product zero'}, c = {shown.get('c')}{scales}"
            elif isinstance(shown, dict):
                shown = ", ".join(
                    f"{k} = {' '.join(v[:8]) + f' ... ({len(v)} values; --format json has all)'}"
                    if isinstance(v, list) and len(v) > 8 else f"{k} = {v}"
                    for k, v in shown.items())
            lines.append(f"witness ({w['how']}): {shown}")
            lines.append(f"  gives A {w['a']}, B {w['b']}")
        lines.extend(self.notes)
        return "\n".join(lines)


# -- loading -------------------------------------------------------------------------------------

def load_side(spec: str) -> Side:
    """A reveal record, a profile JSON file, a bare tree JSON file, or a preset name.

    Raises:
        DiffError: not found, unreadable, or not one of those.
    """
    from .record import RecordError, json_loads, validate_record

    path = Path(spec)
    if not path.is_file():
        if spec in PRESETS:
            return Side(spec, profile=PRESETS[spec])
        import difflib

        close = difflib.get_close_matches(spec, list(PRESETS), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else " (fpscope profiles lists them)"
        raise DiffError(f"{spec}: no such file, and not a preset name{hint}")
    try:
        obj = json_loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise DiffError(f"cannot read {spec}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise DiffError(f"{spec} is not a text file (records, trees and profiles are JSON)") \
            from None
    except json.JSONDecodeError as exc:
        raise DiffError(f"{spec} is not valid JSON (line {exc.lineno}: {exc.msg})") from None
    try:
        if isinstance(obj, list) or (isinstance(obj, dict) and "schema" not in obj
                                     and "nodes" in obj):  # bare tree: nested or flat
            return Side(spec, tree=SumTree.from_json(obj))
        if isinstance(obj, dict) and obj.get("schema", "").startswith("fpscope.profile"):
            return Side(spec, profile=Profile.from_dict(obj))
        return side_from_record(validate_record(obj, spec), spec)
    except (RecordError, TreeError, ValueError) as exc:
        if isinstance(exc, DiffError):
            raise
        raise DiffError(f"{spec}: {str(exc).splitlines()[0]}") from None


def side_from_record(rec: dict, label: str) -> Side:
    """The tree and node arithmetic of a validated reveal record (see
    :func:`fpscope.record.validate_record`); ``label`` names it in messages.

    Raises:
        DiffError: not a reveal record.
        fpscope.tree.TreeError: a malformed tree.
        fpscope.record.RecordError, ValueError: a bad "accumulator" entry or dtype name.
    """
    from .record import arithmetic_of_record

    if rec.get("kind", "reveal") != "reveal":
        raise DiffError(f"{label} is a {rec.get('kind')!r} record; diff reads reveal records "
                        f"and profiles")
    tree = SumTree.from_json(rec["tree"])
    arith = arithmetic_of_record(rec, tree.n_nodes)
    if arith is not None and len(arith.node_formats) != tree.n_nodes:
        raise DiffError(f"{label}: the arithmetic has {len(arith.node_formats)} node formats "
                        f"for a tree of {tree.n_nodes} nodes")
    from .record import classes_of_record

    return Side(label, tree=tree, arith=arith, classes=classes_of_record(rec))


# -- trees ---------------------------------------------------------------------------------------

class _Index:
    """Parent pointers, leaf counts and leaf-set hashes of a tree's nodes (iterative)."""

    def __init__(self, tree: SumTree, salts: np.ndarray):
        self.parent: dict = {}
        self.size: dict = {}
        self.hash: dict = {}
        self.nodes = list(tree.nodes_postorder())
        mask = (1 << 64) - 1
        for nd in self.nodes:
            size, h = 0, 0
            for c in nd:
                self.parent[self._key(c)] = nd
                if isinstance(c, tuple):
                    size += self.size[id(c)]
                    h = (h + self.hash[id(c)]) & mask
                else:
                    size += 1
                    h = (h + int(salts[-1 if c == C_LEAF else c])) & mask
            self.size[id(nd)], self.hash[id(nd)] = size, h
        self.hashes = {self.hash[id(nd)]: nd for nd in self.nodes}

    @staticmethod
    def _key(c):
        return ("node", id(c)) if isinstance(c, tuple) else ("leaf", c)

    def lca(self, leaves):
        """The smallest node holding every leaf of ``leaves``."""
        chains = []
        for x in leaves:
            chain, cur = [], self.parent.get(("leaf", x))
            while cur is not None:
                chain.append(cur)
                cur = self.parent.get(("node", id(cur)))
            chains.append(chain)
        common = {id(nd) for nd in chains[0]}
        for chain in chains[1:]:
            common &= {id(nd) for nd in chain}
        return next(nd for nd in chains[0] if id(nd) in common)


def _smallest_unshared(a: _Index, b: _Index):
    """The smallest node of ``a`` whose leaf set is no node of ``b`` (None if every one is)."""
    best = None
    for nd in a.nodes:
        if a.hash[id(nd)] not in b.hashes and (best is None or a.size[id(nd)] < a.size[id(best)]):
            best = nd
    return best


def _text(node) -> str:
    text = json.dumps(_to_lists(node), separators=(",", ":"))
    return text if len(text) <= 120 else text[:117] + "..."


def _to_lists(node):
    return [_to_lists(c) for c in node] if isinstance(node, tuple) else node


def _probe_pair(node, a: _Index, b: _Index):
    """Leaves i, j under different children of ``node`` (a node of a) whose LCA in b has
    another size than ``node``; None if there is none (cannot happen for an unshared node)."""
    kids = [leaves_of(c) if isinstance(c, tuple) else [c] for c in node]
    kids = [[x for x in k if x != C_LEAF] for k in kids]
    want = a.size[id(node)]
    for p in range(len(kids)):
        for q in range(p + 1, len(kids)):
            for i in kids[p][:8]:
                for j in kids[q][:8]:
                    if b.size[id(b.lca([i, j]))] != want:
                        return i, j
    for p in range(len(kids)):  # exhaustive fallback
        for q in range(p + 1, len(kids)):
            for i in kids[p]:
                for j in kids[q]:
                    if b.size[id(b.lca([i, j]))] != want:
                        return i, j
    return None


def _hex(values, fmt: Format) -> list[str]:
    width = max(1, (fmt.bits + 3) // 4)
    return [f"0x{int(w):0{width}x}" for w in encode(np.asarray(values, dtype=np.float64), fmt)]


def _replay(side: Side, X=None, A=None, B=None) -> np.ndarray:
    from .replay import replay, replay_arithmetic

    if side.tree.has_c:
        C = np.zeros(len(X))
        fmts = side.arith.formats
        uniform = side.arith.uniform_format is not None
        return replay(side.tree, X, side.acc, side.out_format, C=C,
                      node_formats=None if uniform else fmts)
    if X is not None and side.arith.products is not None:  # summands as products x * 1
        A, B, X = X, np.ones_like(X), None
    return replay_arithmetic(side.tree, side.arith, X=X, A=A, B=B)


def _tree_witness(a: Side, b: Side, pair) -> dict | None:
    from .masks import MaskError, choose_mask

    i, j = pair
    acc = min((a.acc, b.acc), key=lambda f: f.p)
    try:
        mask = choose_mask(a.tree.n, acc, acc, acc)
    except MaskError:
        return None
    x = np.full(a.tree.n, mask.u)
    x[i], x[j] = mask.M, -mask.M
    ya, yb = _replay(a, x[None, :])[0], _replay(b, x[None, :])[0]
    if ya == yb:
        return None
    return {"how": f"FPRev probe x[{i}] = M, x[{j}] = -M, units elsewhere (M = {mask.M:g}, "
                   f"u = {mask.u:g}); checked by replay",
            "input": {"i": int(i), "j": int(j), "M": mask.M, "u": mask.u},
            "a": f"{_hex([ya], a.out_format)[0]} ({float(ya)!r})",
            "b": f"{_hex([yb], b.out_format)[0]} ({float(yb)!r})"}


def _random_witness(a: Side, b: Side, seed: int, tries: int = 16) -> dict | None:
    """A random input on which the two replays give other bits: summands (plain sums) or factor
    pairs (ops with products), over the verify distributions."""
    from .verify import DISTRIBUTIONS, random_factors, random_inputs

    rng = np.random.default_rng(seed)
    fin = min((a.acc, b.acc), key=lambda f: f.p)
    products = a.arith.products is not None and b.arith.products is not None
    if products:
        fin = min((a.arith.formats + b.arith.formats), key=lambda f: f.p)
        fin = get_format("fp16") if fin.p < 11 else fin
    n = a.tree.n
    for t in range(tries):
        kind = DISTRIBUTIONS[t % len(DISTRIBUTIONS)]
        if products:
            A, B = random_factors(kind, (256, n), fin, rng)
            ya, yb = _replay(a, A=A, B=B), _replay(b, A=A, B=B)
        else:
            X = random_inputs(kind, (256, n), fin, rng)
            ya, yb = _replay(a, X), _replay(b, X)
        diff = np.flatnonzero((ya.view(np.int64) != yb.view(np.int64))
                              & ~(np.isnan(ya) & np.isnan(yb)))
        if diff.size:
            r = diff[0]
            shown = ({"a": _hex(A[r], fin), "b": _hex(B[r], fin)} if products
                     else _hex(X[r], fin))
            return {"how": f"random {'factor pairs' if products else 'input'} ({kind}); "
                           f"checked by replay", "input": shown,
                    "a": f"{_hex([ya[r]], a.out_format)[0]} ({float(ya[r])!r})",
                    "b": f"{_hex([yb[r]], b.out_format)[0]} ({float(yb[r])!r})"}
    return None


def diff_trees(a: Side, b: Side, seed: int = 0) -> DiffResult:
    """Compare two trees and their node arithmetic (module docstring); where either side has
    output classes (several trees among a matrix op's outputs), those must agree too."""
    res = _diff_main(a, b, seed)
    why = compare_classes(a.classes, b.classes)
    if why is None:
        return res
    verdict = res.verdict if not res.same else f"different output classes ({why})"
    return DiffResult(res.kind, verdict, False, subtree=res.subtree, parameter=res.parameter,
                      witness=res.witness, notes=res.notes + [f"output classes: {why}"])


def compare_classes(base: list | None, live: list | None) -> str | None:
    """Why two lists of output classes (:func:`fpscope.record.classes_of_record`) differ, or
    None when they are the same (trees, positions and node arithmetic, class by class)."""
    if not base and not live:
        return None
    if bool(base) != bool(live):
        return f"only {'A' if base else 'B'} has outputs that add in different orders"
    if len(base) != len(live):
        return f"{len(base)} classes in A, {len(live)} in B"
    for k, ((tb, mb, ab), (tl, ml, al)) in enumerate(zip(base, live)):
        if tb != tl:
            return f"class {k}: a different tree"
        if mb.shape != ml.shape or not np.array_equal(mb, ml):
            return f"class {k}: other output positions"
        if ab != al:
            return f"class {k}: other node arithmetic"
    return None


def _diff_main(a: Side, b: Side, seed: int) -> DiffResult:
    if a.tree.n != b.tree.n or a.tree.has_c != b.tree.has_c:
        ca, cb = (" and C" if t.has_c else "" for t in (a.tree, b.tree))
        note = f"A has {a.tree.n} leaves{ca}, B {b.tree.n}{cb}: no common input"
        return DiffResult("tree", "different tree", False, notes=[note])
    if a.tree == b.tree:
        if a.arith is None or b.arith is None:
            # not "identical": the bits of the two may still differ in their node arithmetic
            return DiffResult("tree", "same tree; node arithmetic not compared", True,
                              notes=["a bare tree has no node arithmetic: compare two records "
                                     "to compare the bits"])
        param = a.arith.first_difference(b.arith)
        if param is None:
            return DiffResult("tree", "identical", True)
        res = DiffResult("tree", "same tree, different node arithmetic", False,
                         parameter=param, witness=_random_witness(a, b, seed))
        res.notes.append(f"A: {a.arith.describe()}")
        res.notes.append(f"B: {b.arith.describe()}")
        if res.witness is None:
            res.notes.append("no random input found whose output bits differ")
        return res
    salts = np.random.default_rng(12345).integers(0, 2**63, size=a.tree.n + 1, dtype=np.int64)
    ia, ib = _Index(a.tree, salts), _Index(b.tree, salts)
    na, nb = _smallest_unshared(ia, ib), _smallest_unshared(ib, ia)
    if na is None or (nb is not None and ib.size[id(nb)] < ia.size[id(na)]):
        node, own, other, swap = nb, ib, ia, True
    else:
        node, own, other, swap = na, ia, ib, False
    leaves = [x for x in leaves_of(node) if x != C_LEAF]
    cover = other.lca(leaves)
    sub = {"leaves": leaves, "a": _to_lists(cover if swap else node),
           "b": _to_lists(node if swap else cover)}
    sub["a_text"], sub["b_text"] = _text(cover if swap else node), _text(node if swap else cover)
    witness = None
    if a.acc is not None and b.acc is not None:
        pair = _probe_pair(node, own, other)
        witness = (_tree_witness(a, b, pair) if pair else None) or _random_witness(a, b, seed)
    res = DiffResult("tree", "different tree", False, subtree=sub, witness=witness)
    if witness is None and a.acc is not None:
        res.notes.append("no input found whose output bits differ (the trees may give the same "
                         "results for every input)")
    return res


# -- profiles ------------------------------------------------------------------------------------

def diff_profiles(a: Profile, b: Profile, cases: int = 4096, seed: int = 0) -> DiffResult:
    """Compare the arithmetic of two profiles: the first differing field (the node kind first,
    then the Profile's field order, names and evidence ignored) and a witness from random
    differential testing with the generators of :mod:`fpscope.probes.validate` (a shrunk one
    when both take the same k). Block-scaled profiles with the same scale format, scale block
    size and k are compared on random block scales too (the witness names them); others get a
    note instead of a witness."""
    import dataclasses

    from .emulate.library import has_library_level

    names = sorted((f.name for f in dataclasses.fields(Profile)), key=lambda n: n != "node")
    changed = [n for n in names if n not in _LABELS and getattr(a, n) != getattr(b, n)]
    inert = "e_zero" in changed and a.e_zero_inert and b.e_zero_inert
    if inert:  # e.g. a probe that could not observe e_zero against a preset that sets it
        changed.remove("e_zero")
    if not changed:
        res = DiffResult("profile", "same arithmetic", True)
        if a.name != b.name:
            res.notes.append(f"{a.name} and {b.name} differ only in name and documentation")
        if inert:
            res.notes.append(_INERT_NOTE.format(a=a.e_zero, b=b.e_zero))
        return res
    first = changed[0]
    param = {"name": first, "a": _plain(first, getattr(a, first)),
             "b": _plain(first, getattr(b, first))}
    res = DiffResult("profile", "different arithmetic", False, parameter=param)
    if len(changed) > 1:
        res.notes.append(f"also differ: {', '.join(changed[1:])}")
    if inert:
        res.notes.append(_INERT_NOTE.format(a=a.e_zero, b=b.e_zero))
    fa, fb = resolve_format(a.in_format), resolve_format(b.in_format)
    if (fa.name != fb.name or a.operand_formats != b.operand_formats
            or resolve_format(a.out_format).name != resolve_format(b.out_format).name):
        res.notes.append("different input or output formats: no common input to compare")
        return res
    scaled = a.scale_format is not None or b.scale_format is not None
    if scaled and (a.scale_format, a.scale_block_size) != (b.scale_format, b.scale_block_size):
        res.notes.append("different block scales (format or block size): no common input to "
                         "compare")
        return res
    if scaled and (a.k != b.k or has_library_level(a) or has_library_level(b)):
        res.notes.append("block-scaled profiles of different k (or library level): no witness "
                         "search")
        return res
    res.witness = _profile_witness(a, b, cases, seed)
    if res.witness is None and "nan_bits" in changed:
        res.witness = _nan_witness(a, b)
    zeros = bool({"neg_zero_to_pos", "zero_sum_sign"} & set(changed))
    if res.witness is None and zeros:
        res.witness = _zero_witness(a, b)
    if res.witness is None:
        res.notes.append(f"no input among {cases} random cases"
                         + (" and the zero-sign cases" if zeros else "") + " gives different bits")
    return res


_INERT_NOTE = ("e_zero differs (A {a}, B {b}) but cannot decide any e_max here: it is below "
               "every nonzero term's exponent (Profile.e_zero_inert), so it has no effect")


def _nan_witness(a: Profile, b: Profile) -> dict | None:
    """Profiles that differ in the NaN they write (``nan_bits``): a NaN c with zero products
    gives each profile's NaN pattern (checked by the emulator)."""
    from .emulate import matmul
    from .emulate.reference import output_bits

    A, B, C = np.zeros((1, a.k)), np.zeros((a.k, 1)), np.full((1, 1), np.nan)
    scales = ({} if a.scale_format is None else
              {"scale_a": np.ones((1, a.k // a.scale_block_size)),
               "scale_b": np.ones((a.k // a.scale_block_size, 1))})
    da, db = (matmul(A, B, C, profile=p, **scales)[0, 0] for p in (a, b))
    ba, bb = output_bits(da, a), output_bits(db, b)
    if ba == bb:
        return None
    fout = resolve_format(a.out_format)
    width = (fout.bits + 3) // 4
    return {"how": "a NaN c with zero products: each profile's NaN pattern (nan_bits); checked "
                   "by the emulator",
            "input": {"products": [], "c": _hex([np.nan], fout)[0]},
            "a": f"0x{ba:0{width}x}", "b": f"0x{bb:0{width}x}"}


def _zero_witness(a: Profile, b: Profile) -> dict | None:
    """Profiles that differ in the signs of zero results: the first of
    :func:`fpscope.probes.specials.zero_sign_rows` on which they differ (one instruction, the
    same k; checked by the emulator)."""
    from .emulate.library import has_library_level
    from .emulate.vectorized import fdpa_batch
    from .probes.specials import zero_sign_rows

    if a.k != b.k or has_library_level(a) or has_library_level(b):
        return None
    A, B, C = zero_sign_rows(a)
    scales = {}
    if a.scale_format is not None:
        s = np.ones((len(A), a.k // a.scale_block_size))
        scales = {"scale_a": s, "scale_b": s}
    da, db = (fdpa_batch(A, B, C, p, **scales) for p in (a, b))
    bad = np.flatnonzero(da.view(np.int64) != db.view(np.int64))
    if not len(bad):
        return None
    i = int(bad[0])
    fin, fb = (resolve_format(f) for f in a.operand_formats)
    fout = resolve_format(a.out_format)
    return {"how": "zeros of both signs and a product that rounds to zero (the zero-sign "
                   "rules); checked by the emulator",
            "input": {"a": _hex(A[i], fin), "b": _hex(B[i], fb), "c": _hex([C[i]], fout)[0]},
            "a": _hex([da[i]], fout)[0], "b": _hex([db[i]], fout)[0]}


def _plain(name: str, v):
    if name == "nan_bits":
        return hex(v)
    return list(v) if isinstance(v, tuple) else v


def _profile_witness(a: Profile, b: Profile, cases: int, seed: int) -> dict | None:
    from .emulate import matmul
    from .emulate.library import has_library_level
    from .probes.blackbox import SimulatedTarget
    from .probes.validate import GENERATORS, generate, validate

    if a.k == b.k and not has_library_level(a) and not has_library_level(b):
        rep = validate(SimulatedTarget(a), b, cases=cases, seed=seed)
        m = rep.get("first_mismatch")
        if not m:
            return None
        inputs = {"products": m["products"], "c": m["c"]}
        inputs.update({key: m[key] for key in ("scale_a", "scale_b") if key in m})
        return {"how": f"random differential test ({m['generator']} generator), shrunk to "
                       f"{m.get('nonzero_products')} nonzero products; checked by the emulator",
                "input": inputs,
                "a": m.get("got", m["got_full"]), "b": m.get("expected", m["expected_full"])}
    fin, fout = resolve_format(a.in_format), resolve_format(a.out_format)
    fb = resolve_format(a.operand_formats[1])
    # whole instructions in every split-K slice and promotion interval (P is a multiple of k)
    K = math.lcm(*((p.promotion_interval or p.k) * p.split_k for p in (a, b)))
    rng = np.random.default_rng(seed)
    for t in range(max(1, cases // 256)):
        kind = GENERATORS[t % len(GENERATORS)]
        A, B, C = generate(kind, rng, fin, fout, 16, K, 16, min(a.block_size, b.block_size),
                           fb)
        da, db = (matmul(A, B, C, profile=p, dtype="float64") for p in (a, b))
        bad = (da.view(np.int64) != db.view(np.int64)) & ~(np.isnan(da) & np.isnan(db))
        if bad.any():
            m, n = (int(x) for x in np.argwhere(bad)[0])
            return {"how": f"random GEMM row x column ({kind} generator, K = {K}); checked by "
                           f"the emulator",
                    "input": {"a": _hex(A[m], fin), "b": _hex(B[:, n], fb),
                              "c": _hex([C[m, n]], fout)[0]},
                    "a": _hex([da[m, n]], fout)[0], "b": _hex([db[m, n]], fout)[0]}
    return None


def diff(a_spec: str, b_spec: str, cases: int = 4096, seed: int = 0) -> DiffResult:
    """Compare two operands (see :func:`load_side`).

    Raises:
        DiffError: an operand cannot be read, or a tree is compared with a profile.
    """
    a, b = load_side(a_spec), load_side(b_spec)
    if a.kind != b.kind:
        raise DiffError(f"cannot compare a {a.kind} ({a.label}) with a {b.kind} ({b.label})")
    if a.kind == "profile":
        return diff_profiles(a.profile, b.profile, cases, seed)
    return diff_trees(a, b, seed)
