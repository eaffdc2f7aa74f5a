"""Block scales of MX / NVFP4 instructions: which elements of K a scale covers, which values a
scale may take, and how the scales enter the node (NUMERICS.md section 2, "Blackwell MXFP8 (block
scales): scale exponents added to product exponents", "NVFP4/MXFP4: exact sums of groups of 16";
section 3, probe 13, "operand conversion ... block scales"). Block-scaled targets only
(:attr:`~fpscope.probes.blackbox.MatrixTarget.scaled`); every other family runs them at unit
scales.

Layout, :func:`layout` (``scale_block_size``; run right after the determinism family): c = 0,
one product 1 = 1 * 1 at position i, every other product +0; every scale 1 except column j of
A's scales (then of B's) set to 2, for every position i and each of the interface's K / s
columns j. Outcome: d = 2 where scale j covers position i, d = 1 where it does not. The op fits
the layout the emulator models (scale j covers elements j*s .. (j+1)*s - 1, for A along its row
and for B down its column) when the positions doubled by column j are exactly that run, for A
and for B alike; then the scale block size is s. Anything else (a scale that covers interleaved
elements or none, A and B laid out differently, d neither 1 nor 2) does not fit.

Format, :func:`layout` (``scale_format``): where the target's interface checks every scale
against a format before the op sees it (mmasim:, sim:, a callable given ``scale_format``), the
op can be sent nothing else: not observable, the interface's format is used. Otherwise (a
callable that takes float64 scales) one product 1 under a scale v of A's first block, one call
per v: 1.5 and 0 (ue4m3 values that e8m0 lacks: a significand bit, a zero), 2^12 (e8m0's, above
ue4m3's largest, 448) and 2^-3 (both). A value is "taken" when d = v and "refused" when the op
raises; anything else (a scale rounded to a power of two, or ignored) is shown as the d it gave.
e8m0 when 2^12 and 2^-3 are taken and 1.5 and 0 are not; ue4m3 when 1.5, 0 and 2^-3 are taken
and 2^12 is not; anything else does not fit (fpscope models e8m0 and ue4m3 scales: OCP MX v1.0's
E8M0, PTX ``.ue8m0`` / ``.ue4m3``).

Entry, :func:`entry` (after the node arithmetic at unit scales is known; every row is judged by
the emulator, :func:`fpscope.emulate.vectorized.fdpa_batch`, running the profile found with the
scale fields found on the same scales):

* zero terms under scales (``e_zero``): c = 0; n copies of a power-of-two product and, in a
  later group, one tiny product -2^t, every scale the pair 2^x (x scanned so that the sum lies
  just above the output's smallest subnormal); and, with two or more scale blocks, the product
  1 under the pair 2^u (u near the smallest subnormal) and -1 in the next block under 2^w, w
  scanned down. Scaled below the zero terms' exponent, the products no longer set e_max, so the
  tiny term survives exactly when it lies at or above 2^(e_zero - F): at unit scales no product
  of these formats is that small (the zeros family reports e_zero not observable), with scales
  it is. Outcome: the e_zero values (of -220 .. 0, or None: zeros left out of e_max) whose
  emulation gives every output; one value, or a range that these rows cannot split (its top is
  used, and said), or not observable when None gives them all. Where no row can tell any two
  values apart (NVFP4: ue4m3 scale pairs reach only 2^-18, so no scaled product comes near the
  zero terms), the zeros family's finding stands.
* the window: one product -1 under the scale pair 2^x beside c = 2^(x + F) (kept: d = c - 2^x
  rounded) and c = 2^(x + F + 1) (cut: d = c), for a few x: the scale exponents are added to the
  product's exponent before the cut at 2^(e_max - F), in the one window with c. (An op that
  adds c in a rounding of its own after the scaled block gives c - 2^x rounded in both rows; the
  unit-scale families have then found c entering last, and the emulator predicts that too.)
* grouped node only, a group at its scales' exponent: the first group full of the largest
  power-of-two product 2^E under 2^x beside c = -2^(x - F + 1): the grouped node aligns the
  group sum at the scales' exponent x and keeps c; aligned at the sum's own exponent (a fused
  node) c is cut. And a cancelled group (+2^E, -2^E) under 2^x beside c = 1 + 2^(x - F - 1): the
  cancelled group keeps its scales' exponent, so c loses its low bit where x > 0 (a zero term
  would take e_zero and keep it).
* special scales: a NaN scale (e8m0 0xFF, ue4m3 0x7F) makes the output NaN; a zero scale (ue4m3)
  makes its products zero terms.

The entry fits when every row agrees with the emulator bit for bit; the first row that does not
is shown with what it tests. Evidence: hex rows with their scales (in the scale format).
"""

from __future__ import annotations

import math

import numpy as np

from ..fit import _ranges
from ..formats import is_representable
from ..profile import SCALE_FORMATS, resolve_format
from ._common import Ctx, Finding, NotRepresentable, same_bits, sample_evidence
from .blackbox import ProbeError, hex_out

FAMILY = "scales"

#: The scale values the format probe sends, with the formats that hold them.
_FORMAT_PROBES = ((1.5, {"ue4m3"}), (0.0, {"ue4m3"}), (2.0**12, {"e8m0"}),
                  (2.0**-3, {"e8m0", "ue4m3"}))

#: The e_zero values the zero-term rows are emulated with (None: zeros left out of e_max).
_E_ZERO_CANDIDATES = (None, *range(-220, 1))


def _nb(ctx: Ctx) -> int:
    """Scale columns of the interface: K / scale_block_size."""
    return ctx.K // ctx.target.scale_block_size


def layout(ctx: Ctx) -> list[Finding]:
    """The scale block size and the scale format (module docstring)."""
    out = [_block_size(ctx)]
    if out[0].fits:
        out.append(_format(ctx))
    return out


def _block_size(ctx: Ctx) -> Finding:
    K, nb = ctx.K, _nb(ctx)
    s = K // nb
    rows, what = [], []
    for side in ("a", "b"):
        for j in range(nb):
            sc = np.ones(nb)
            sc[j] = 2.0
            for i in range(K):
                rows.append(ctx.row([], raw=[(i, 1.0, 1.0)],
                                    scales=(sc, np.ones(nb)) if side == "a" else (np.ones(nb), sc)))
                what.append((side, j, i))
    d = ctx.run(rows)
    ev_idx = [n for n, (side, j, i) in enumerate(what) if i in (j * s, (j + 1) * s - 1, (j + 1) * s)
              and j < 2]
    ev = [ctx.evidence(rows[n], float(d[n]), f"scale {what[n][1]} of {what[n][0]} = 2, product "
                                             f"1 at k{what[n][2]}") for n in ev_idx[:8]]
    odd = [n for n in range(len(rows)) if float(d[n]) not in (1.0, 2.0)]
    if odd:
        n = odd[0]
        side, j, i = what[n]
        return Finding(FAMILY, "scale_block_size", None, fits=False, rows=len(rows),
                       evidence=[ctx.evidence(rows[n], float(d[n]), "expected 1 or 2")],
                       note=f"product 1 at k{i} with scale {j} of {side} = 2 gave "
                            f"{hex_out([d[n]], ctx.target)[0]}, neither 1 nor 2: the scale does "
                            f"not multiply the product")
    doubled = {(side, j): sorted(i for (sd, jj, i), v in zip(what, d) if sd == side and jj == j
                                 and v == 2.0) for side in ("a", "b") for j in range(nb)}
    for side in ("a", "b"):
        for j in range(nb):
            if doubled[(side, j)] != list(range(j * s, (j + 1) * s)):
                got = doubled[(side, j)]
                return Finding(FAMILY, "scale_block_size", None, fits=False, rows=len(rows),
                               evidence=ev,
                               note=f"scale {j} of {side} doubles the products at "
                                    f"{_ranges(got) or 'no position'}, not {j * s}.."
                                    f"{(j + 1) * s - 1}: not contiguous blocks of {s} (the layout "
                                    f"the emulator models)")
    ctx.known["scale_block_size"] = s
    return Finding(FAMILY, "scale_block_size", s, rows=len(rows), evidence=ev,
                   note=f"scale j of a (and of b) doubles exactly the products k{s}j .. "
                        f"k{s}j+{s - 1}: one scale per {s} elements of K, contiguous")


def _format(ctx: Ctx) -> Finding:
    t = ctx.target
    if t.scale_format is not None:
        ctx.known["scale_format"] = t.scale_format
        return Finding(FAMILY, "scale_format", t.scale_format, observable=False,
                       note=f"the target's interface takes {t.scale_format} scales (it checks "
                            f"each before the op sees it): fixed by the interface, not observed")
    nb = _nb(ctx)
    taken, seen, ev = set(), [], []
    for v, _ in _FORMAT_PROBES:
        sa = np.ones(nb)
        sa[0] = v
        row = ctx.row([], raw=[(0, 1.0, 1.0)], scales=(sa, np.ones(nb)))
        try:
            d = float(ctx.run([row])[0])
        except ProbeError as exc:
            seen.append(f"{v:g} refused ({str(exc)[:60]})")
            continue
        ev.append(ctx.evidence(row, d, f"scale {v:g} of a's first block"))
        if ctx.same(d, v):
            taken.add(v)
            seen.append(f"{v:g} taken")
        else:
            seen.append(f"{v:g} gave {d!r}")
    fmts = [f for f in SCALE_FORMATS
            if all((v in taken) == (f in holds) for v, holds in _FORMAT_PROBES)]
    note = "; ".join(seen)
    if not fmts:
        return Finding(FAMILY, "scale_format", None, fits=False, rows=len(_FORMAT_PROBES),
                       evidence=ev, note=f"{note}: neither e8m0 (powers of two 2^-127 .. 2^127) "
                                         f"nor ue4m3 (0 and e4m3 values up to 448) takes exactly "
                                         f"these")
    ctx.known["scale_format"] = fmts[0]
    return Finding(FAMILY, "scale_format", fmts[0], rows=len(_FORMAT_PROBES), evidence=ev,
                   note=f"{note}: {fmts[0]} scales")


# -- entry ------------------------------------------------------------------------------------


class _Rows:
    """Scaled probe rows of the entry checks, each with what it tests."""

    def __init__(self, ctx: Ctx, profile):
        self.ctx = ctx
        self.nb = _nb(ctx)
        self.fs = resolve_format(profile.scale_format)
        self.rows: list = []
        self.meanings: list[str] = []
        #: exponents of the powers of two the scale format holds
        self.exps = {e for e in range(-200, 200)
                     if bool(is_representable(np.array([math.ldexp(1.0, e)]), self.fs)[0])}

    def pair(self, x: int) -> tuple[float, float] | None:
        """Two scales of the format whose product is 2^x, or None."""
        for xa in sorted(self.exps, key=lambda e: abs(e - x / 2)):
            if x - xa in self.exps:
                return math.ldexp(1.0, xa), math.ldexp(1.0, x - xa)
        return None

    def add(self, meaning: str, products=(), c: float = 0.0, blocks=None, raw=()) -> bool:
        """One row; ``blocks``: {block: x}, the scale pair 2^x of each block (others 1).
        Returns False (no row) when a value or a scale pair does not exist in these formats."""
        sa, sb = np.ones(self.nb), np.ones(self.nb)
        for j, x in (blocks or {}).items():
            p = self.pair(x)
            if p is None:
                return False
            sa[j], sb[j] = p
        try:
            self.rows.append(self.ctx.row(products, c=c, raw=list(raw), scales=(sa, sb),
                                          allow_subnormal=True))
        except NotRepresentable:
            return False
        self.meanings.append(meaning)
        return True

    def emulate(self, profile) -> np.ndarray:
        from ..emulate.vectorized import fdpa_batch

        r = self.rows
        return fdpa_batch(np.stack([x[0] for x in r]), np.stack([x[1] for x in r]),
                          np.array([x[2] for x in r]), profile,
                          scale_a=np.stack([x[3] for x in r]), scale_b=np.stack([x[4] for x in r]))


def _pow2_products(ctx: Ctx) -> list[int]:
    """Exponents e with 2^e a product of the operand formats (subnormal operands allowed)."""
    lo = ctx.fin.emin - ctx.fin.p + ctx.fb.emin - ctx.fb.p
    out = []
    for e in range(lo, ctx.fin.emax + ctx.fb.emax + 1):
        try:
            ctx.split(math.ldexp(1.0, e), allow_subnormal=True)
        except NotRepresentable:
            continue
        out.append(e)
    return out


def _zero_rows(ctx: Ctx, profile) -> _Rows:
    """The zero-term rows (module docstring): c = 0, products scaled below e_zero."""
    R = _Rows(ctx, profile)
    K, s = ctx.K, profile.scale_block_size
    G = profile.group_size or 1
    pows = _pow2_products(ctx)
    if not pows:
        return R
    lo_e, hi_e = pows[0], pows[-1]
    sub = ctx.fout.emin - ctx.fout.p + 1  # the output's smallest subnormal exponent
    for gap in range(8, 30, 2):  # the sum 2^(t + gap) over the tiny term 2^t
        for n_log in range(0, 6):
            n, eb = 1 << n_log, lo_e + gap - n_log
            t = -(-n // G) * G
            if eb > hi_e or eb not in pows or t >= K:
                continue
            for y in range(sub, sub + 31):  # the sum's exponent
                x = y - eb - n_log
                R.add(f"{n} x 2^{eb + x} and -2^{lo_e + x} (scales 2^{x}), c = 0",
                      [(i, math.ldexp(1.0, eb)) for i in range(n)] + [(t, -math.ldexp(1.0, lo_e))],
                      blocks={j: x for j in range(R.nb)})
            break
    if R.nb >= 2:
        for u in (sub + 1, sub + 2):
            for w in range(u - 1, u - 71, -1):
                R.add(f"1 under 2^{u}, -1 in the next block under 2^{w}, c = 0",
                      raw=[(0, 1.0, 1.0), (s, -1.0, 1.0)], blocks={0: u, 1: w})
    return R


def _e_zero(ctx: Ctx, profile) -> tuple[Finding | None, object]:
    """(Finding, e_zero) from the zero-term rows; (None, the zeros family's e_zero) when no
    row tells any two e_zero values apart (its finding then stands)."""
    R = _zero_rows(ctx, profile)
    unit = ctx.known.get("e_zero")
    if not R.rows:
        return None, unit
    em = np.stack([R.emulate(profile.replace(e_zero=v)) for v in _E_ZERO_CANDIDATES])
    informative = np.flatnonzero(~same_bits(em, em[:1]).all(axis=0))
    if not len(informative):
        return None, unit
    rows = [R.rows[i] for i in informative]
    d = ctx.run(rows)
    ok = same_bits(em[:, informative], d[None, :]).all(axis=1)
    cons = [v for v, good in zip(_E_ZERO_CANDIDATES, ok) if good]
    n = len(rows)
    if not cons:
        best = int(np.argmax(same_bits(em[:, informative], d[None, :]).sum(axis=1)))
        i = int(np.flatnonzero(~same_bits(em[best, informative], d))[0])
        return (Finding(FAMILY, "e_zero", None, fits=False, rows=n,
                        evidence=[ctx.evidence(rows[i], float(d[i]), R.meanings[informative[i]])],
                        note=f"no e_zero (-220 .. 0 or None) reproduces the {n} rows of products "
                             f"scaled below the zero terms; the nearest, "
                             f"{_E_ZERO_CANDIDATES[best]}, gives "
                             f"{hex_out([em[best, informative[i]]], ctx.target)[0]} for this one"),
                unit)
    if None in cons:
        return (Finding(FAMILY, "e_zero", None, observable=False, rows=n,
                        note=f"not observable: {n} rows of products scaled as far below 2^0 as "
                             f"{profile.scale_format} scales reach are reproduced with the zeros "
                             f"left out of e_max (e_zero <= {max(v for v in cons if v is not None)}"
                             f" gives the same); None used"), None)
    v = max(cons)
    # evidence: the rows that tell v from its neighbours
    k = _E_ZERO_CANDIDATES.index(v)
    near = [i for i in range(n) if any(not same_bits(em[j, informative[i]], em[k, informative[i]])
                                       for j in (k - 1, k + 1) if 0 < j < len(_E_ZERO_CANDIDATES))]
    ev = sample_evidence(ctx, [rows[i] for i in near], d[near],
                         [R.meanings[informative[i]] for i in near])
    span = f"e_zero = {v}" if len(cons) == 1 else \
        f"every e_zero in {min(cons)} .. {v} gives them ({v} used)"
    return (Finding(FAMILY, "e_zero", v, rows=n, evidence=ev,
                    note=f"{n} rows of products scaled below the zero terms (scale pairs down to "
                         f"their smallest): the tiny term is cut exactly as the emulator says "
                         f"for {span}"), v)


def entry(ctx: Ctx, profile) -> tuple[list[Finding], object]:
    """(findings, profile): the zero-term rows (an "e_zero" Finding where they tell e_zero
    values apart; the profile then takes the value found) and the entry rows ("scale_entry"),
    all judged by the emulator running ``profile`` (module docstring)."""
    out = []
    ef, ez = _e_zero(ctx, profile)
    if ef is not None:
        out.append(ef)
        if not ef.fits:
            return out, profile
    profile = profile.replace(e_zero=ez)
    R = _Rows(ctx, profile)
    F = profile.frac_bits
    fout = ctx.fout
    pows = _pow2_products(ctx)
    for x in (-24, -12, -4, 4, 12, 24):
        for extra, what in ((0, "kept"), (1, "cut")):
            e = x + F + extra
            if fout.emin <= e <= fout.emax:
                R.add(f"-1 under scales 2^{x} beside c = 2^{e}: {what} if the scale exponent joins "
                      f"the product's in the window", [(0, -1.0)], c=math.ldexp(1.0, e),
                      blocks={0: x})
    G = profile.group_size or 1
    if pows and profile.node == "grouped":
        eb = pows[-1]
        top = math.ldexp(1.0, eb)
        for x in (-8, 0, 8):
            R.add(f"{G} x 2^{eb} under 2^{x}, c = -2^{x - F + 1}: c kept if the group is aligned "
                  f"at its scales' exponent {x}, not at its sum's", [(i, top) for i in range(G)],
                  c=-math.ldexp(1.0, x - F + 1), blocks={0: x})
            R.add(f"+2^{eb} - 2^{eb} under 2^{x}, c = 1 + 2^{x - F - 1}: c loses its low bit if "
                  f"the cancelled group keeps its scales' exponent", [(0, top), (1, -top)],
                  c=1 + math.ldexp(1.0, x - F - 1), blocks={0: x})
    sa = np.ones(R.nb)
    sa[0] = math.nan  # e8m0 0xFF, ue4m3 0x7F
    R.rows.append(ctx.row([], raw=[(0, 1.0, 1.0)], c=1.0, scales=(sa, np.ones(R.nb))))
    R.meanings.append("a NaN scale of a: NaN")
    if bool(is_representable(np.array([0.0]), R.fs)[0]):
        sa = np.ones(R.nb)
        sa[0] = 0.0
        R.rows.append(ctx.row([], raw=[(0, 1.0, 1.0)], c=1.0, scales=(sa, np.ones(R.nb))))
        R.meanings.append("a zero scale of a: its products are zero terms, d = c")
    d = ctx.run(R.rows)
    exp = R.emulate(profile)
    ok = same_bits(d, exp)
    n = len(R.rows)
    if not ok.all():
        i = int(np.flatnonzero(~ok)[0])
        out.append(Finding(FAMILY, "scale_entry", None, fits=False, rows=n,
                           evidence=[ctx.evidence(R.rows[i], float(d[i]), R.meanings[i])],
                           note=f"{int((~ok).sum())} of {n} scaled rows differ from the emulator; "
                                f"first: {R.meanings[i]}: got {hex_out([d[i]], ctx.target)[0]}, "
                                f"the emulator gives {hex_out([exp[i]], ctx.target)[0]}"))
        return out, profile
    where = ("each group sum aligned at its scales' exponent" if profile.node == "grouped"
             else "the scale exponents added to each product's exponent")
    window = ("in one window with c (a product -1 under 2^x is kept beside 2^(x+F), cut beside "
              "2^(x+F+1))" if profile.c_entry == "first" else
              "c added after the block (c_entry last)")
    out.append(Finding(FAMILY, "scale_entry", "exponent", rows=n,
                       evidence=sample_evidence(ctx, R.rows, d, R.meanings),
                       note=f"{n} scaled rows agree with the emulator bit for bit: {where}, "
                            f"{window}; a NaN scale gives NaN"))
    return out, profile
