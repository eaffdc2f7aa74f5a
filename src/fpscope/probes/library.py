"""Library level of a GEMM: split-K, FP8 promotion interval, epilogue (NUMERICS.md section 2
"library level", section 3 probe 14; the model of :mod:`fpscope.emulate.library`).

A library kernel computes ``D = A @ B + C`` of any K from *chains* of matrix-unit instructions
(fused blocks of L products, each block's rounded result the accumulator of the next). Around the
chains it may (the model):

* restart the chain from +0 every P products and add its result to a register accumulator in the
  output format (``promotion_interval`` P; FP8 GEMMs without fast accumulation: P = 128);
* cut K into S equal contiguous slices (``split_k``), each computed from +0, round the partial
  results to ``split_k_format`` and add them up serially or as a balanced pairwise tree
  (``split_k_order``), then add C;
* scale by alpha in the epilogue.

Every addition outside the chains is one RNE addition in the output format.

The probe (targets that take any K, at a large K: :data:`DEFAULT_LIBRARY_K`):

1. **Tree of the K order over units.** One leaf per unit of ``unit`` products (the instruction-
   level probe's K, 32: a whole number of fused blocks, so slice widths and promotion intervals
   are found in whole units). Two positions of each unit's first block carry the probe values:
   one a large product +-M = +-2^E, one a small u = 2^(E - p - 3), p the output precision; one
   B column serves every row, so one call evaluates hundreds of rows. A row holds +M at leaf i,
   -M at leaf j and u at leaf m (every other product +0, C = 0, or C is one of the three): u is
   absorbed wherever it meets a partial sum holding +-M (fused-block truncation, chain rounding,
   RNE addition: M / u = 2^(p + 3)) and survives exactly when i and j cancel before u joins,
   i.e. when m lies outside the subtree of LCA(i, j) (FPRev's question, asked with a single
   unit: a sum of many units would not be absorbed by fp8 products). Outputs other than u or 0
   do not fit. C is a leaf too: first a row tells whether it joins beside leaf 0 (the chain's
   or the register's first accumulator) or at the root (after the split-K partials).
   For an *ordered* tree (every node a contiguous run of leaves) the span of LCA(a, j) inside a
   node [a, b] follows by binary search on m, all j and all open nodes of one depth in one
   batch: about n log2 n rows for n leaves (K = 1024: 32 leaves, about 200 rows in 6 calls per
   depth). Answers that no ordered tree gives do not fit.
2. **Fit.** The tree is compared with the tree of every model (S dividing the number of leaves,
   P a whole number of leaves dividing the slice width, serial or pairwise), up to the order of
   children. When models that differ elsewhere give the same tree at K (S = 8 pairwise and S = 4
   pairwise with P = K / 8, ...), the tree at 2K decides. A tree that matches no model
   (interleaved split-K tiles, unequal slices, a BLAS kernel's SIMD lanes, ...) is reported as
   not fitting; nothing is guessed.
3. **Partial-sum format** (S > 1): 1 + 2^-t (t = 1 .. the bits the chain keeps - 1) as two
   products in the first two units of slice 0, and 2^e near the top of the product range:
   which of the output format, fp16 and bf16 (RNE, overflow to Inf) reproduces every output.

The driver (:func:`fpscope.probes.driver.probe` with ``library_k``) runs this before the
instruction level: with split-K it probes the instruction level inside slice 0
(:class:`SliceView`), where K products are one chain; since C is then added after the chains
(one RNE addition, which no instruction profile models), the step rounding is found from rows
with c = 0 (:func:`chain_rounding`) and the chains' own c entry from random chains
(:func:`chain_c_entry`). With narrow partials (fp16, bf16) no call shows a chain unrounded: the
chains' arithmetic must be given (``chain``).

Not observable:

* P at or above the slice width, or of one unit (the same trees as no promotion; None is used);
  with S = 1, a chain whose result is added to C once ("C added after the chain") is P >= K:
  the profile takes P = K (valid for calls of at most this K);
* the combine order for S <= 3 (serial and pairwise are the same additions; serial is used);
* a partial format at least as precise as what the chain keeps (None is used);
* the epilogue: an op D = op(A, B, C) takes no alpha; with alpha = 1 and D in the accumulator's
  format it is the identity;
* everything, when the input format's products span fewer than p + 3 binades (fp6, fp4).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..formats import round_to_format
from ..profile import resolve_format
from ._common import Ctx, Finding, NotRepresentable, sample_evidence
from .blackbox import MatrixTarget, evaluate_rows

__all__ = ["DEFAULT_LIBRARY_K", "LibraryResult", "chain_c_entry", "chain_rounding", "model_tree",
           "run"]

FAMILY = "library"

#: K of the library probe calls: slices of 256 products still hold two promotion intervals of
#: 128 for S = 4.
DEFAULT_LIBRARY_K = 1024


class _Misfit(Exception):
    def __init__(self, note: str, evidence=None):
        super().__init__(note)
        self.note = note
        self.evidence = evidence or []


@dataclass
class LibraryResult:
    """What :func:`run` found.

    Attributes:
        findings: the family's findings (shown in the report).
        fields: the profile's library fields {split_k, split_k_order, split_k_format,
            promotion_interval} plus ``k`` (products per instruction of the profile), or None
            when the op does not fit the model (or nothing could be observed).
        K: K of the probe calls; rows, calls: probing cost.
        tree: the revealed tree over leaves (nested tuples; leaf = block index or "C").
    """

    findings: list = field(default_factory=list)
    fields: dict | None = None
    K: int = DEFAULT_LIBRARY_K
    rows: int = 0
    calls: int = 0
    tree: object = None

    @property
    def fits(self) -> bool:
        return all(f.fits for f in self.findings)


# -- model trees ----------------------------------------------------------------------------


def _join(x, y):
    if x is None:
        return y
    if y is None:
        return x
    return (x, y)


def model_tree(n: int, S: int, P: int | None, order: str):
    """The tree over ``n`` block leaves (0 .. n-1) and "C" of the library model
    (:mod:`fpscope.emulate.library`): S slices of n / S leaves, promotion every P leaves (None:
    one chain per slice), partials combined ``order``, C added last (S > 1) or as the initial
    accumulator (of the chain, or of the register with P).

    Raises:
        ValueError: S does not divide n.
    """
    if n % S:
        raise ValueError(f"{S} slices do not divide {n} leaves")
    W = n // S

    def chain(lo, hi, init):
        acc = init
        for i in range(lo, hi):
            acc = _join(acc, i)
        return acc

    def one_slice(lo, hi, init):
        if P is None:
            return chain(lo, hi, init)
        acc = init
        for t in range(lo, hi, P):
            acc = _join(acc, chain(t, min(t + P, hi), None))
        return acc

    if S == 1:
        return one_slice(0, n, "C")
    parts = [one_slice(s * W, (s + 1) * W, None) for s in range(S)]
    if order == "serial":
        total = parts[0]
        for p in parts[1:]:
            total = _join(total, p)
    else:
        while len(parts) > 1:
            nxt = [_join(parts[i], parts[i + 1]) for i in range(0, len(parts) - 1, 2)]
            parts = nxt + ([parts[-1]] if len(parts) % 2 else [])
        total = parts[0]
    return _join(total, "C")


def _canon(t):
    """The tree up to the order of children (addition commutes)."""
    if isinstance(t, tuple):
        return frozenset(_canon(x) for x in t)
    return t


def _describe(S: int, P: int | None, order: str, n: int, unit: int) -> str:
    c = ("C is the first chain's accumulator" if S == 1 and P is None else
         "C initialises the register" if S == 1 else "C is added after the partials")
    inner = ("one chain, then added to C" if P == _ALL else
             f"chains of {P * unit} products added to a register" if P else "one chain")
    top = (f"{S} slices of {n // S * unit} products, added {order}" if S > 1 else
           "no split-K")
    return f"{top}; per slice {inner}; {c}"


# -- the probe --------------------------------------------------------------------------------


class _Prober:
    """Rows of the tree probe at K products: one shared B column (:func:`run`, step 1)."""

    def __init__(self, target: MatrixTarget, K: int, unit: int, first: list, seed: int):
        self.target = target
        self.ctx = Ctx(target, K, seed=seed)
        self.K = K
        fin, fout = target.fin, target.fout
        gap = fout.p + 3
        hi = min(fin.emax + target.fb.emax, fout.emax - 2)
        lo = max(fin.emin + target.fb.emin, fout.emin)
        if hi - lo < gap:
            raise _Misfit(f"not observable: products of {self.ctx.operands} values span "
                          f"{hi - lo} binades; absorbing a unit in {fout.name} needs {gap}")
        self.E = min(hi, max(lo + gap, 15))  # M <= 2^15: also a value of fp16 partial sums
        self.e = self.E - gap
        self.M, self.u = math.ldexp(1.0, self.E), math.ldexp(1.0, self.e)
        try:
            self.aM, self.bM = self.ctx.split(self.M)
            self.au, self.bu = self.ctx.split(self.u)
        except NotRepresentable as exc:
            raise _Misfit(f"not observable: {exc}") from None
        # leaves: units of ``unit`` products; two positions of each (big, small)
        self.big = [t + first[0] for t in range(0, K, unit)]
        self.small = [t + first[1] for t in range(0, K, unit)]
        self.n = len(self.big)
        self.b = np.ones(K)
        self.b[self.big] = self.bM
        self.b[self.small] = self.bu
        self.rows = 0
        self.evidence: list = []

    def _row(self, plus, minus, unit):
        a = np.zeros(self.K)
        c = 0.0
        for leaf, val, pos, av in ((plus, self.M, self.big, self.aM),
                                   (minus, -self.M, self.big, -self.aM),
                                   (unit, self.u, self.small, self.au)):
            if leaf == "C":
                c = val
            else:
                a[pos[leaf]] = av
        return a, self.b, c

    def survive(self, triples) -> list[bool]:
        """For each (i, j, m) of leaves ("C" allowed): does u at m survive +M at i, -M at j?"""
        if not triples:
            return []
        rows = [self._row(*t) for t in triples]
        d = evaluate_rows(self.target, np.stack([r[0] for r in rows]),
                          np.stack([r[1] for r in rows]), np.array([r[2] for r in rows]))
        self.rows += len(rows)
        if len(self.evidence) < 8:
            self.evidence += sample_evidence(
                self.ctx, rows, d, [f"+M at {i}, -M at {j}, u at {m}" for i, j, m in triples],
                limit=2)
        good = (d == self.u) | (d == 0)
        if not good.all():
            r = int(np.flatnonzero(~good)[0])
            ev = [self.ctx.evidence(rows[r], float(d[r]), "neither u nor 0")]
            raise _Misfit(f"a cancellation probe (+M at leaf {triples[r][0]}, -M at "
                          f"{triples[r][1]}, u at {triples[r][2]}) returned {d[r]!r}, neither "
                          f"u = 2^{self.e} nor 0", ev)
        return [bool(x) for x in (d == self.u)]


def _reveal_ordered(prober: _Prober, labels: list):
    """The ordered binary tree over ``labels`` (module docstring, step 1).

    Raises:
        _Misfit: the answers are not those of an ordered binary tree.
    """
    n = len(labels)
    children: dict = {}
    open_nodes = [(0, n - 1)]
    while open_nodes:
        # r[(a, j)]: span end of LCA(a, j) in node (a, b); binary search on m in [j, b]
        state = {}
        for a, b in open_nodes:
            for j in range(a + 1, b):
                state[(a, b, j)] = [j, b]
        while True:
            asks = []
            for (a, b, j), (lo, hi) in state.items():
                if lo < hi:
                    asks.append(((a, b, j), (lo + hi + 1) // 2))
            if not asks:
                break
            ans = prober.survive([(labels[a], labels[j], labels[m]) for (a, _, j), m in asks])
            for (key, m), s in zip(asks, ans):
                if s:
                    state[key][1] = m - 1
                else:
                    state[key][0] = m
        nxt = []
        for a, b in open_nodes:
            r = {j: state[(a, b, j)][0] for j in range(a + 1, b)}
            r[b] = b
            ends = sorted(set(r.values()))
            prev = a
            parts = []
            for e in ends:
                if any(r[j] != e for j in range(prev + 1, e + 1)):
                    raise _Misfit("the cancellation probes do not form an ordered tree (a "
                                  "node whose leaves are not one contiguous run of K)")
                parts.append((prev + 1, e))
                if e > prev + 1:
                    nxt.append((prev + 1, e))
                prev = e
            children[(a, b)] = parts
        open_nodes = nxt

    def build(a, b):
        if a == b:
            return labels[a]
        t = labels[a]
        for lo, hi in children[(a, b)]:
            t = (t, build(lo, hi))
        return t

    return build(0, n - 1)


#: A promotion interval of "at least K" (S = 1: C added once after one chain), at every K.
_ALL = 1 << 40


def _candidates(n: int):
    """(S, P in leaves or None, order) of every distinguishable model over n leaves: S divides
    n; P divides the slice width W (2 <= P < W; for S = 1 also P >= K, :data:`_ALL`: C added
    once after one chain); the order only where S > 3 makes it matter."""
    for S in range(1, n + 1):
        if n % S:
            continue
        W = n // S
        Ps = [None, *(p for p in range(2, W) if W % p == 0)] + ([_ALL] if S == 1 else [])
        for P in Ps:
            for order in (("serial", "pairwise") if S > 3 else ("serial",)):
                yield S, P, order


def _tree(prober: _Prober):
    """(C joins first, the revealed tree) at the prober's K."""
    n = prober.n
    c_first = prober.survive([("C", 0, n - 1)])[0]
    labels = ["C", *range(n)] if c_first else [*range(n), "C"]
    return c_first, _reveal_ordered(prober, labels)


def run(target: MatrixTarget, K: int = DEFAULT_LIBRARY_K, *, unit: int = 32, k_order=None,
        chain_bits: int | None = None, seed: int = 0) -> LibraryResult:
    """Probe the library level of ``target`` (a GEMM: ``target.k`` None) at K products.

    Args:
        target: the op.
        K: products per probe row (a multiple of ``unit``).
        unit: products per leaf of the revealed tree (the instruction-level probe's K: a whole
            number of fused blocks); slice widths and the promotion interval are found in whole
            units.
        k_order: the instruction-level order of the ``unit`` products (None: natural); the
            leaf's two probe positions are the first two of its first block.
        chain_bits: significand bits the chain keeps (step rounding precision, at most F + 1):
            bounds the partial-format probe. None: 13 (e8m13 and fp32 chains keep at least
            that many), so fp16 and bf16 partials are told from the output format's.
        seed: seed of the evidence sampling.

    Returns:
        :class:`LibraryResult`; ``fields`` None when the op does not fit or nothing is
        observable (the findings say which).

    Raises:
        ValueError: K is not a multiple of ``unit``, or below two units.
    """
    res = LibraryResult(K=K)
    calls0 = target.calls
    if target.k is not None:
        res.findings.append(Finding(FAMILY, "split_k", None, observable=False,
                                    note=f"not observable: {target.name} is one instruction of "
                                         f"K = {target.k}, not a GEMM of any K"))
        return res
    if K % unit or K < 2 * unit:
        raise ValueError(f"library K = {K} must be a multiple of {unit}, at least {2 * unit}")
    first = list(k_order[:2]) if k_order is not None else [0, 1]
    prober = None
    try:
        prober = _Prober(target, K, unit, first, seed)
        c_first, tree = _tree(prober)
        n = prober.n
        match = [m for m in _candidates(n) if _canon(model_tree(n, *m)) == _canon(tree)]
        K2 = None
        if len({_canon(model_tree(2 * n, S, None if P is None else P, o)) for S, P, o in match}) > 1:
            # models that agree at K (S = 4 pairwise and S = 2 with P = K / 4, ...) differ at 2K
            K2 = 2 * K
            prober2 = _Prober(target, K2, unit, first, seed)
            _, tree2 = _tree(prober2)
            match = [(S, P, o) for S, P, o in match
                     if _canon(model_tree(2 * n, S, P, o)) == _canon(tree2)]
            prober.rows += prober2.rows
    except _Misfit as exc:
        res.rows, res.calls = (prober.rows if prober else 0), target.calls - calls0
        if exc.note.startswith("not observable"):
            res.findings = _not_observable(exc.note)
        else:
            res.findings.append(Finding(
                FAMILY, "library_structure", None, fits=False, rows=res.rows,
                evidence=exc.evidence, note=f"{exc.note} at K = {K}: does not fit the library "
                                            f"model (split-K slices, promotion interval)"))
        return res
    res.tree = tree
    ev = prober.evidence
    res.rows, res.calls = prober.rows, target.calls - calls0
    if not match:
        res.findings.append(Finding(
            FAMILY, "library_structure", None, fits=False, rows=prober.rows, evidence=ev,
            note=f"the K order over {n} units of {unit} products (K = {K}; C joins "
                 f"{'first' if c_first else 'last'}) is no split into equal contiguous slices "
                 f"with a promotion interval dividing them, added serially or pairwise"
                 f"{' (also at K = ' + str(K2) + ')' if K2 else ''}: does not fit the library "
                 f"model"))
        return res
    S, P, order = match[0]
    W = n // S
    P_prod = None if P is None else P * unit
    alt = (f"; {len(match) - 1} other model(s) give the same trees at K = {K}"
           f"{' and ' + str(K2) if K2 else ''}, the simplest is used" if len(match) > 1 else "")
    found = [Finding(FAMILY, "library_structure", _describe(S, P, order, n, unit),
                     rows=prober.rows, evidence=ev,
                     note=f"the K order over {n} units of {unit} products at K = {K}"
                          f"{' and ' + str(K2) if K2 else ''} matches this model{alt}")]
    if P is None:
        found.append(Finding(FAMILY, "promotion_interval", None,
                             note=f"none: each {'slice' if S > 1 else 'call'} is one chain (a "
                                  f"promotion interval of at least {W * unit} products or of one "
                                  f"unit would look the same; None used)"))
    elif P == _ALL:
        P_prod = K
        found.append(Finding(FAMILY, "promotion_interval", K, observable=False,
                             note=f"C is added once after one chain of all {K} products: any "
                                  f"promotion interval >= K looks the same; P = K used (the "
                                  f"profile holds for calls of at most K = {K})"))
    else:
        found.append(Finding(FAMILY, "promotion_interval", P_prod,
                             note=f"the chain restarts from +0 every {P_prod} products and is "
                                  f"added to a register in the output format"))
    if S == 1:
        found.append(Finding(FAMILY, "split_k", 1, note=f"no split-K at K = {K}"))
        found.append(Finding(FAMILY, "split_k_order", "serial", observable=False,
                             note="not observable: no split-K"))
        found.append(Finding(FAMILY, "split_k_format", None, observable=False,
                             note="not observable: no split-K"))
    else:
        found.append(Finding(FAMILY, "split_k", S,
                             note=f"{S} contiguous slices of {K // S} products from +0, C "
                                  f"added last"))
        if S <= 3:
            found.append(Finding(FAMILY, "split_k_order", "serial", observable=False,
                                 note=f"not observable: serial and pairwise add {S} partials "
                                      f"the same way"))
        else:
            found.append(Finding(FAMILY, "split_k_order", order,
                                 note="partials added left to right" if order == "serial" else
                                      "partials added as a balanced pairwise tree"))
    found.append(Finding(FAMILY, "epilogue", None, observable=False,
                         note="not observable: the op takes no alpha (D = op(A, B, C)); with "
                              "alpha = 1 and D in the accumulator's format the epilogue is "
                              "the identity"))
    res.findings = found
    res.fields = {"split_k": S, "split_k_order": order if S > 3 else "serial",
                  "split_k_format": None, "promotion_interval": P_prod}
    if S > 1:
        f = partial_format(target, K, S, unit, chain_bits or 13, seed=seed)
        res.findings.insert(-1, f)
        res.rows += f.rows
        if f.fits:
            res.fields["split_k_format"] = f.value
        else:
            res.fields = None
    res.calls = target.calls - calls0
    return res


def _not_observable(note: str) -> list[Finding]:
    return [Finding(FAMILY, f, None, observable=False, note=note)
            for f in ("promotion_interval", "split_k", "split_k_order", "split_k_format",
                      "epilogue")]


def partial_format(target: MatrixTarget, K: int, S: int, unit: int, chain_bits: int,
                   seed: int = 0) -> Finding:
    """Which format the split-K partials are rounded to (module docstring, step 3): x as one
    or two products in the first two units of slice 0 (one chain), everything else 0."""
    ctx = Ctx(target, K, seed=seed)
    fin, fout = target.fin, target.fout
    pos0, pos1 = 0, unit
    tmax = min(chain_bits - 1, fout.p - 1)
    vals = [(1.0 + math.ldexp(1.0, -t), [(pos0, 1.0), (pos1, math.ldexp(1.0, -t))])
            for t in range(1, tmax + 1)]
    top = min(fin.emax + target.fb.emax, fout.emax - 1)
    vals += [(math.ldexp(1.0, e), [(pos0, math.ldexp(1.0, e))])
             for e in range(max(10, top - 6), top + 1)]
    rows, xs = [], []
    for x, prods in vals:
        try:
            rows.append(ctx.row(prods))
            xs.append(x)
        except NotRepresentable:
            continue
    d = ctx.run(rows)
    xs = np.array(xs)
    names = [None] + [f for f in ("fp16", "bf16") if resolve_format(f).p < fout.p]
    ok = []
    for name in names:
        pred = xs if name is None else round_to_format(xs, resolve_format(name), "RNE",
                                                        overflow="inf")
        pred = round_to_format(pred, fout, "RNE", overflow="inf")
        if np.array_equal(pred, d):
            ok.append(name)
    ev = sample_evidence(ctx, rows, d, [f"x = {x!r} in slice 0" for x in xs])
    if not ok:
        return Finding(FAMILY, "split_k_format", None, fits=False, rows=len(rows), evidence=ev,
                       note=f"the partial sums of slice 0 ({len(rows)} probes: 1 + 2^-t, large "
                            f"powers of two) are rounded like none of {fout.name}, fp16, bf16: "
                            f"does not fit")
    name = ok[0]
    if name is None:
        obs = tmax + 1 >= fout.p
        note = (f"partial sums keep {fout.name} (1 + 2^-{tmax} survives)" if obs else
                f"not observable beyond the {tmax + 1} bits the chain keeps: partials are "
                f"kept in {fout.name} as far as seen; None used")
        return Finding(FAMILY, "split_k_format", None, observable=obs, rows=len(rows),
                       evidence=ev, note=note)
    return Finding(FAMILY, "split_k_format", name, rows=len(rows), evidence=ev,
                   note=f"partial sums are rounded to {name} (RNE) before they are added"
                        + (f" (equivalent here: {', '.join(map(str, ok[1:]))})"
                           if len(ok) > 1 else ""))


class SliceView(MatrixTarget):
    """``target`` on calls of ``S * K`` products whose first K are the given ones (the rest +0):
    with S contiguous split-K slices the K products then form one chain (slice 0), so the
    instruction-level families see a chain and C added after it."""

    def __init__(self, target: MatrixTarget, S: int):
        super().__init__(target.name, target.in_format, target.out_format, k=None,
                         max_rows=target.max_rows)
        self.inner = target
        self.S = S

    def __call__(self, A, B, C):
        A = np.asarray(A, dtype=np.float64)
        B = np.asarray(B, dtype=np.float64)
        K = A.shape[1]
        extra = (self.S - 1) * K
        A2 = np.concatenate([A, np.zeros((A.shape[0], extra))], axis=1)
        B2 = np.concatenate([B, np.ones((extra, B.shape[1]))], axis=0)
        self.calls += 1
        return self.inner(A2, B2, C)


# -- instruction-level help -----------------------------------------------------------------


def chain_rounding(ctx: Ctx) -> list[Finding]:
    """The step rounding from rows with c = 0 only: for a GEMM that adds C after its chains
    (split-K, promotion; the instruction-level c path is then one RNE addition that the
    rounding family's candidates do not model), the chain alone decides these rows. The rounding
    family's rows (:func:`fpscope.probes.rounding.probe_rows`) are built twice: in the first
    block and in the last one (a later block's cut at F could hide the first block's rounding).

    Returns:
        [Finding "step_rounding"], as :func:`fpscope.probes.rounding.run`.
    """
    from ..emulate.vectorized import fdpa_batch
    from . import rounding
    from ._common import candidate_profile, same_bits

    rows = []
    blocks = ctx.blocks
    for order in ([blocks] if len(blocks) == 1 else [blocks, [blocks[-1], *blocks[:-1]]]):
        ctx.blocks = order
        try:
            rows += [r for r in rounding.probe_rows(ctx) if r[2] == 0]
        finally:
            ctx.blocks = blocks
            ctx.known.pop("_tiny_from", None)
            ctx.known.pop("_tiny_to", None)
    d = ctx.run(rows)
    a = np.stack([r[0] for r in rows])
    b = np.stack([r[1] for r in rows])
    c = np.zeros(len(rows))
    alive = []
    for cand in rounding.candidates(ctx.fout):
        prof = candidate_profile(ctx, step_rounding=cand, c_entry="first")
        try:
            pred = fdpa_batch(a, b, c, prof)
        except ValueError:
            continue
        if bool(same_bits(pred, d).all()):
            alive.append(cand)
    ev = sample_evidence(ctx, rows, d)
    if not alive:
        return [Finding(rounding.FAMILY, "step_rounding", None, fits=False, rows=len(rows),
                        evidence=ev, note=f"no candidate rounding reproduces the {len(rows)} "
                                          f"rounding probes with c = 0: does not fit")]
    best = alive[0]
    ctx.known["step_rounding"] = best
    note = (f"every step rounds to {best[0]} {best[1]} (from {len(rows)} probes with c = 0: "
            f"C is added after the chain, in one more RNE addition)")
    if len(alive) > 1:
        note += " (equivalent: " + ", ".join(f"{f} {m}" for f, m in alive[1:]) + ")"
    return [Finding(rounding.FAMILY, "step_rounding", list(best), rows=len(rows), evidence=ev,
                    note=note)]


def chain_c_entry(target: MatrixTarget, profile, K: int, seed: int = 0, rows: int = 256):
    """How one instruction of a chain takes the previous one's result, for a GEMM whose C is
    added after its chains (the instruction-level c path then shows that addition, not the
    chain's): c_entry "first" (the accumulator is cut at 2^(e_max - F) like the products of the
    block) or "last" (added after the blocks in one more rounding), by elimination on random
    products in the first two instructions of the first chain (C = 0, every other product +0;
    one shared B column), predicted by :func:`fpscope.emulate.matmul` with ``profile``'s
    library fields.

    Returns:
        (Finding "c_entry", the c_entry found or None when none fits).
    """
    from ..emulate import matmul
    from ._common import same_bits
    from .determinism import random_normals

    fin = target.fin
    rng = np.random.default_rng(seed)
    k = profile.k
    span = min(2 * k, profile.promotion_interval or K, K // profile.split_k)
    if span <= k:
        return (Finding(FAMILY, "c_entry", profile.c_entry, observable=False,
                        note=f"not observable: a chain holds one instruction of {k} products at "
                             f"K = {K}"), profile.c_entry)
    b = np.ones(K)
    b[:span] = random_normals(rng, target.fb, span, -2, 2)
    A = np.zeros((rows, K))
    for r in range(rows):  # the second instruction larger: the first one's result is cut there
        A[r, :k] = random_normals(rng, fin, k, -4, 3)
        A[r, k:span] = random_normals(rng, fin, span - k, -2, 5)
    d = evaluate_rows(target, A, np.broadcast_to(b, A.shape), np.zeros(rows))
    alive = []
    for entry in ("first", "last"):
        pred = matmul(A, b[:, None], np.zeros((rows, 1)), profile=profile.replace(c_entry=entry),
                      engine="numpy", dtype="float64")[:, 0]
        if bool(same_bits(pred, d).all()):
            alive.append(entry)
    if not alive:
        return (Finding(FAMILY, "c_entry", None, fits=False, rows=rows,
                        note=f"neither c entry of the chained instructions reproduces {rows} "
                             f"random products in the first two instructions: does not fit"),
                None)
    if len(alive) == 2:
        return (Finding(FAMILY, "c_entry", "first", observable=False, rows=rows,
                        note=f"not observable: both c entries agree on {rows} random chains; "
                             f"first used"), "first")
    return (Finding(FAMILY, "c_entry", alive[0], rows=rows,
                    note=f"instruction c entry inside the chains: {alive[0]} (C itself is added "
                         f"after the chains)"), alive[0])
