"""e_zero: the exponent a zero term takes in the alignment maximum (NUMERICS.md section 2 step 3
and section 3 probe 8).

Inputs (first block, every other product +0, c = +0): a term X on the output's rounding grid
(X = g, a representable value, and X = 0.5 g, 1.5 g, ties; g = the smallest subnormal output),
plus a term +-delta = +-2^s for s from just below X's exponent down to the smallest product. If
the zero terms set e_max (e_zero above X's exponent), delta survives the cut exactly when
s >= e_zero - F, and its presence moves X across a rounding point in at least one of the variants
(X - delta under RZ/RD, X + delta under RU, a tie +- delta under RNE/RNA). Under floor alignment
a -delta below the cut becomes -2^(e_max - F) instead of vanishing, so only +delta is used, with
X of both signs (-X + delta under RZ); RD is then not seen this way. Where even the smallest
power-of-two product survives, the low bit of a product (2^s_lo + 2^s beside -2^s_lo; under
nearest alignment 2^(s_lo + 1), whose multiple of the cut's weight is even, so that a tie below
the cut rounds down) carries delta further down, to s_lo - (p_in - 1) (one less under nearest).

Where -0 results are kept (``neg_zero_to_pos`` False), a third route reads the cut from the sign
of a zero (:func:`_sign_route`); it also works where outputs are flushed, which hides the grid
from the other routes.

A first route uses c alone (c entering the first block): c = 2^e + 2^(e - j) loses its low bit
once the zero products' e_zero - F lies above it (fp32 outputs: only e_zero above about -126;
NUMERICS.md's -132 .. -133 are then not observable this way).

Step grids: the rounding family cannot tell step formats apart whose difference is only their
subnormal grid (fp32 and e8m13 with few kept bits F: only a cut at 2^(e_zero - F) lets a sum
as fine as 2^-140 through). Where it left such candidates equal, e_zero is read under every
one of them, and the first (step, e_zero) pair that reproduces every row of all readings and
the rounding family's tiny rows is taken (a "step_rounding" finding of this family reports a
change).

Outcome: T = the smallest s whose delta changes the result; e_max = T + F. If e_max is above every
nonzero term's exponent, e_zero = T + F. If the cut follows the largest X, the X of smaller
leading exponents are tried alone (e_zero may lie between them: e8m13's X run from 2^-140 to
3 * 2^-139). Otherwise the zeros never set e_max for these formats:
e_zero is not observable and the profile uses None (zeros left out of the maximum), which gives
the same results for every input of these formats. NUMERICS.md: "e_zero is unobservable for fp16
inputs with fp32 output (the smallest product exponent is about -28)"; fp8 inputs likewise.
Needs F (bounded); outputs flushed to zero hide the grid from these routes (the sign route
still reads it where -0 is kept, and the check below where a sum reaches the normal range).

Last, every reading is checked on sums past a rounding point (:func:`_boundary_rows`): in
the last block, a few products each leading at E - 1 or below whose exact sum lies a bit
near 2^(E - 1 - F) past a rounding point B (half-multiples of the grid's smallest subnormal,
the smallest normal; ties and a grid point in a normal binade just below 2^E), for E around
the subnormal range. The zeros (e_zero >= E) cut that bit, the terms alone keep it. These show
what the routes above cannot: with flushed outputs an e_zero within log2(L + 1) of the
output's smallest normal exponent (e_zero -127 into fp32, where a sum of several terms below
2^-127 reaches the normal range; fp16's e_zero -13, cutting bits of normal sums only: found by
the random round trip), and where -0 results
become +0 an e_zero at or below the smallest X's lead (e8m13's grid: -139 under RZ, -140
under RNE; found by scripts/probe_sweep.py). Where the reading does not reproduce them, the
first e_zero (None, then upward) that does is taken and the finding says so; where none
does, the finding does not fit.
"""

from __future__ import annotations

import math

import numpy as np

from ..emulate.vectorized import fdpa_batch
from ._common import (
    Ctx,
    Finding,
    NotRepresentable,
    candidate_profile,
    exponent,
    grid_format,
    same_bits,
)

FAMILY = "zeros"


def _not_obs(ctx: Ctx, why: str) -> list[Finding]:
    ctx.known["e_zero"] = None
    return [Finding(FAMILY, "e_zero", None, observable=False,
                    note=f"not observable: {why}; None used (zeros left out of e_max)")]


def _c_route(ctx: Ctx, F: int):
    """c alone (all products +0): c = 2^e + 2^(e - j), j = min(F, p(out) - 1), for normal e
    downward. Without zeros in the max the low bit is kept; once e_zero - F > e - j it is cut.
    The largest e that loses it gives e_zero = e + 1 + F - j. None if the bit is never lost."""
    fout = ctx.fout
    from ..profile import resolve_format

    step = resolve_format(ctx.known.get("step_rounding", (fout.name, "RZ"))[0])
    j = min(F, fout.p - 1, step.p - 1)
    rows, es = [], []
    for e in range(min(fout.emax - 1, fout.emin + 60), fout.emin - 1, -1):
        c = math.ldexp(1.0, e) + math.ldexp(1.0, e - j)
        try:
            rows.append(ctx.row([], c=c))
            es.append(e)
        except NotRepresentable:
            continue
    if not rows:
        return None
    d = ctx.run(rows)
    cut = [float(v) != r[2] for v, r in zip(d, rows)]
    if not any(cut):
        return None
    top = max(e for e, c in zip(es, cut) if c)
    ev = [ctx.evidence(r, float(v), f"c = 2^{e} + 2^{e - j} alone")
          for r, v, e in zip(rows, d, es) if abs(e - top) <= 1]
    if top == es[0]:
        return None  # lost even at the largest e: not the zeros' doing
    if not all(c for e, c in zip(es, cut) if e <= top):
        return [Finding(FAMILY, "e_zero", None, fits=False, rows=len(rows), evidence=ev,
                        note="c's low bit is lost for no single threshold exponent")]
    e_zero = top + 1 + F - j
    ctx.known["e_zero"] = e_zero
    return [Finding(FAMILY, "e_zero", e_zero, rows=len(rows), evidence=ev,
                    note=f"c = 2^e + 2^(e-{j}) alone loses its low bit for e <= {top}: the zero "
                         f"products set e_max = e_zero = {e_zero}")]


def _sign_route(ctx: Ctx, F: int):
    """Where -0 results are kept (``neg_zero_to_pos`` False, from the specials family): one
    product -2^e alone (the other products +0; c = -0, which a c added last needs to keep a
    -0), so small that the result is a zero (below half the smallest subnormal of the grid, or
    below its smallest normal when outputs are flushed). Kept by the window, it is a negative
    sum rounded to -0; cut (e < e_zero - F), the exact zero sum of +0 and -0 terms is +0. The
    largest e giving +0, below an e giving -0, gives e_zero = e + 1 + F; None when no row is cut
    (or every row is). Floor alignment makes a cut negative term -2^(e_max - F): there the row
    is +2^e and -2^(e-1), +0 when kept (a positive sum rounded to zero) and -0 when both are cut
    (only the -2^(e_max - F) is left). Below the smallest power-of-two product (flushed inputs:
    2^-28 for fp16) the rows go on with the low bit 2^e of a product beside a product that
    cancels the rest (found by scripts/probe_sweep.py --formats fp16:fp16: e_zero -19 .. -17
    with flushed inputs and outputs read as not observable)."""
    fmt = grid_format(ctx)
    blk = ctx.blocks[-1]
    floor = ctx.known.get("alignment") == "floor"
    if floor and len(blk) < 2:
        return None
    sub_ok = not ctx.known.get("flush_inputs", False)
    top = fmt.emin - 1 if ctx.known.get("flush_outputs") else fmt.emin - fmt.p
    smallest = ctx.fin.min_subnormal * ctx.fb.min_subnormal
    rows, es, leads = [], [], []

    def add(e, terms):
        try:
            row = ctx.row(terms, c=-0.0, allow_subnormal=sub_ok)
        except NotRepresentable:
            return
        rows.append(row)  # a subnormal operand's product has a lead above its value
        es.append(e)
        leads.append(max(ctx.lead(row[0][k], row[1][k]) for k, _ in terms))

    for e in range(top, exponent(smallest) - 1 + floor, -1):
        add(e, [(blk[0], math.ldexp(1.0, e)), (blk[1], -math.ldexp(1.0, e - 1))] if floor
            else [(blk[0], -math.ldexp(1.0, e))])
    if len(rows) < 2:
        return None
    d = list(ctx.run(rows))
    s_lo = None
    if len(blk) >= 2 and all(float(v) == 0 and (math.copysign(1.0, float(v)) > 0) == floor
                             for v in d):
        # every row kept: below the smallest power-of-two product 2^s_lo (flushed inputs: the
        # smallest normal one), the low bit 2^s of a product beside a cancelling one: -(low +
        # 2^s) and +low (floor: +(low + 2^s) and -(low + 2^(s - 1))); low = 2^s_lo, under
        # nearest alignment 2^(s_lo + 1), an even multiple of the cut's weight (a tie below it
        # rounds down)
        s_lo, n = es[-1], len(rows)
        low = math.ldexp(1.0, s_lo + (ctx.known.get("alignment") == "nearest"))
        for e in range(s_lo - 1, s_lo - ctx.fin.p, -1):
            bit = math.ldexp(1.0, e)
            add(e, [(blk[0], low + bit), (blk[1], -(low + bit / 2))] if floor
                else [(blk[0], -(low + bit)), (blk[1], low)])
        d += list(ctx.run(rows[n:]))
    if any(float(v) != 0 for v in d):  # RD and the like: not a zero, no sign to read
        return None
    cut = [(math.copysign(1.0, float(v)) > 0) != floor for v in d]
    if not any(cut) or cut[0] or not all(cut[cut.index(True):]):
        return None
    T = es[cut.index(True)]
    e_zero = T + 1 + F
    # every row as the cut at max(lead, e_zero) - F predicts (a subnormal operand's product
    # leads above its value, and its own lead may set e_max)
    if (cut != [e < max(ld, e_zero) - F for e, ld in zip(es, leads)]
            or cut == [e < ld - F for e, ld in zip(es, leads)]):  # no zeros needed: None
        return None
    ctx.known["e_zero"] = e_zero
    what = "2^e and -2^(e-1)" if floor else "-2^e alone"
    if s_lo is not None and T < s_lo:
        what += f" (below 2^{s_lo}: the low bit 2^e of a product beside one cancelling the rest)"
    ev = [ctx.evidence(r, float(v), f"{what}, e = {e}") for r, v, e in zip(rows, d, es)
          if abs(e - T) <= 1]
    kept, cut_ = ("+0", "-0") if floor else ("-0", "+0")
    return [Finding(FAMILY, "e_zero", e_zero, rows=len(rows), evidence=ev,
                    note=f"products {what} give {kept} (kept, rounded to zero) for e > {T} "
                         f"and {cut_} (cut) for e <= {T}: the zero terms set "
                         f"e_max = e_zero = {e_zero}")]


def _single_route(ctx: Ctx, F: int, sub_ok: bool):
    """One product 2^e alone, e downward over the output's range: it is lost (d = 0) once
    e < e_zero - F (the zeros set e_max). The largest lost e gives e_zero = e + 1 + F."""
    p0 = ctx.blocks[-1][0]  # last block: a tiny step result is not chained into a later block
    fmt = grid_format(ctx)
    lo = fmt.emin if ctx.known.get("flush_outputs") else fmt.emin - fmt.p + 1
    rows, es = [], []
    for e in range(lo + 80, lo - 1, -1):
        try:
            row = ctx.row([(p0, math.ldexp(1.0, e))], allow_subnormal=sub_ok)
        except NotRepresentable:
            continue
        if ctx.lead(row[0][p0], row[1][p0]) == e:
            rows.append(row)
            es.append(e)
    if not rows:
        return None
    d = ctx.run(rows)
    lost = [float(v) == 0 for v in d]
    if not any(lost) or lost[0]:
        return None
    top = max(e for e, x in zip(es, lost) if x)
    if not all(x for e, x in zip(es, lost) if e <= top):
        return None
    e_zero = top + 1 + F
    ctx.known["e_zero"] = e_zero
    ev = [ctx.evidence(r, float(v), f"2^{e} alone") for r, v, e in zip(rows, d, es)
          if abs(e - top) <= 1]
    return [Finding(FAMILY, "e_zero", e_zero, rows=len(rows), evidence=ev,
                    note=f"a single product 2^e is lost for e <= {top}: the zero terms set "
                         f"e_max = e_zero = {e_zero}")]


def run(ctx: Ctx) -> list[Finding]:
    """e_zero; where the rounding family left steps of different subnormal grids equal (F
    bits below e_max: only a sum as fine as 2^(e_zero - F) tells e8m13's grid from fp32's),
    e_zero is read under every step it left, and the first (step, e_zero) pair that reproduces
    every row all readings ran, and the rounding family's tiny rows, is taken (a
    "step_rounding" finding says so when it is not the rounding family's first). Then the
    reading is checked on sums of a few products below it just past a rounding point
    (:func:`_boundary_sums`)."""
    alts = ctx.known.pop("_step_alternatives", None) or []
    grid_rows = ctx.known.pop("_grid_rows", None)
    steps = [tuple(step) for step in alts]
    if len({grid_format(ctx, step).min_subnormal for step in steps}) < 2:
        # one grid: e_zero's routes read alike under each mode; the sums past a rounding
        # point may still tell the modes apart (F bits reaching below the grid)
        return _boundary_sums(ctx, _e_zero(ctx), steps, [])
    saved, tries = dict(ctx.known), []
    ctx.log = [grid_rows] if grid_rows is not None else []
    try:
        for step in steps:
            ctx.known = {**saved, "step_rounding": step}
            tries.append((step, _e_zero(ctx), ctx.known))
    finally:
        log, ctx.log = ctx.log, None
    pick = _first_fit(ctx, [t[2] for t in tries], log) if log else None
    step, found, ctx.known = tries[0] if pick is None else tries[pick]
    if step != steps[0]:
        found = found + [_step_finding(ctx, steps, sum(len(rs) for rs, _ in log),
                                       "of the e_zero readings")]
    return _boundary_sums(ctx, found, steps, log)


def _first_fit(ctx: Ctx, knowns: list[dict], log) -> int | None:
    """The index of the first of ``knowns`` (what the families know, one alternative each)
    whose candidate profile reproduces every row of ``log`` ([(rows, d), ...]) bit for bit,
    else the first that does up to the signs of zeros (zero signs decide only where the
    specials family read the zero rules right, which is checked again after assembly); None
    if none does. Leaves ``ctx.known`` as it was."""
    rows = [r for rs, _ in log for r in rs]
    if not rows:  # no reading ran a row: nothing tells them apart
        return None
    d = np.concatenate([np.asarray(x, dtype=np.float64) for _, x in log])
    a, b, c = (np.stack([r[0] for r in rows]), np.stack([r[1] for r in rows]),
               np.array([r[2] for r in rows]))
    ok = []
    for pred in _predictions(ctx, knowns, a, b, c):
        if pred is None:
            ok.append(None)
            continue
        bits = same_bits(pred, d)
        ok.append((bool(bits.all()), bool((bits | ((pred == 0) & (d == 0))).all())))
    for how in (0, 1):  # bit for bit, then up to the signs of zeros
        for i, fit in enumerate(ok):
            if fit is not None and fit[how]:
                return i
    return None


def _predictions(ctx: Ctx, knowns: list[dict], a, b, c) -> list:
    """Each of ``knowns``' candidate profile's outputs on rows (a, b, c), or None where it
    cannot run. Leaves ``ctx.known`` as it was."""
    saved, out = ctx.known, []
    try:
        for known in knowns:
            ctx.known = known
            try:
                out.append(fdpa_batch(a, b, c, candidate_profile(ctx)))
            except ValueError:
                out.append(None)
    finally:
        ctx.known = saved
    return out


def _separating_rows(ctx: Ctx, knowns: list[dict], pick: int, log, samples: int = 4096,
                     limit: int = 256):
    """(rows, d): random rows (the closed loop's subnormal and zero-block generators, where
    e_zero acts) on which the candidates of ``knowns`` that reproduce ``log`` bit for bit, as
    ``knowns[pick]`` does, disagree, with the op's outputs (at most ``limit``); None when no
    other candidate fits or none of ``samples`` rows tells them apart. Rows that only the
    target can decide: the next :func:`_first_fit` over ``log`` and these keeps the right one."""
    from .validate import generate

    rows = [r for rs, _ in log for r in rs]
    d = np.concatenate([np.asarray(x, dtype=np.float64) for _, x in log])
    a, b, c = (np.stack([r[0] for r in rows]), np.stack([r[1] for r in rows]),
               np.array([r[2] for r in rows]))
    fits = [i for i, p in enumerate(_predictions(ctx, knowns, a, b, c))
            if p is not None and same_bits(p, d).all()]
    if len(fits) < 2 or pick not in fits:
        return None
    rng = np.random.default_rng([7, ctx.K])
    parts = [generate(kind, rng, ctx.fin, ctx.fout, samples // 2, ctx.K, 1, ctx.K, ctx.fb)
             for kind in ("subnormal", "zero_block")]
    A = np.concatenate([p[0] for p in parts])
    B = np.concatenate([np.repeat(p[1][:, 0][None], len(p[0]), axis=0) for p in parts])
    C = np.concatenate([p[2][:, 0] for p in parts])
    preds = [p for p in _predictions(ctx, [knowns[i] for i in fits], A, B, C) if p is not None]
    differ = np.zeros(len(C), dtype=bool)
    for p in preds[1:]:
        differ |= ~same_bits(p, preds[0])
    idx = np.flatnonzero(differ)[:limit]
    if not idx.size:
        return None
    sep = [(A[i], B[i], float(C[i])) for i in idx]
    return sep, ctx.run(sep)


def _step_finding(ctx: Ctx, steps, n: int, what: str) -> Finding:
    step = tuple(ctx.known["step_rounding"])
    return Finding(FAMILY, "step_rounding", list(step), rows=n,
                   note=f"every step rounds to {step[0]} {step[1]}: of the {len(steps)} steps "
                        f"equal on the rounding probes (first {steps[0][0]} {steps[0][1]}), "
                        f"with e_zero = {ctx.known.get('e_zero')} it is the first that "
                        f"reproduces all {n} rows {what}")


def _factor(ctx: Ctx, v: float, max_lead: int):
    """(a, b), both normal, a in a's format and b in b's, with a * b == v exactly and leading
    exponent e_a + e_b <= ``max_lead`` (a product significand in [2, 4) leads one below v's
    exponent); None if there is none. b's significand runs over all its values (at most 4096,
    else b = a power of two)."""
    fin, fb = ctx.fin, ctx.fb
    nb = 1 << (fb.p - 1) if fb.p <= 13 else 1
    bs = 1 + np.arange(nb) / nb
    x = v / bs
    ok = x * bs == v
    m, e = np.frexp(np.abs(x))  # x = m * 2^e, m in [0.5, 1)
    ok &= np.ldexp(m, fin.p) % 1 == 0  # x's significand fits a's precision
    lead = e - 1  # b's significand is in [1, 2): e_a + e_b = x's exponent
    ok &= lead <= max_lead
    for i in np.flatnonzero(ok):
        for eb in sorted(range(fb.emin, fb.emax), key=abs):  # below emax: no NaN encodings
            ea = int(lead[i]) - eb
            if fin.emin <= ea < fin.emax:
                return float(np.ldexp(x[i], -eb)), float(np.ldexp(bs[i], eb))
    return None


def _split_sum(ctx: Ctx, S: float, max_lead: int, slots: int):
    """S as a sum of at most ``slots`` products [(a, b), ...] each leading at ``max_lead`` or
    below: n - 1 equal terms (S / n rounded down to a's precision, less 0 .. 3 units in its
    last place) and a factored remainder (:func:`_factor`); the first that works, else None."""
    p = ctx.fin.p
    for n in range(1, slots + 1):
        for k in range(4 if n > 1 else 1):
            t0 = 0.0
            if n > 1:
                m, e = math.frexp(S / n)
                t0 = math.ldexp(math.floor(math.ldexp(m, p)) - k, e - p)
                if t0 <= 0 or exponent(t0) > max_lead + 1:  # significand [2, 4): lead - 1
                    continue
            first = _factor(ctx, t0, max_lead) if n > 1 else None
            rest = _factor(ctx, S - (n - 1) * t0, max_lead)
            if rest is not None and (n == 1 or first is not None):
                return [first] * (n - 1) + [rest]
    return None


def _boundary_rows(ctx: Ctx, F: int):
    """Rows of the last block whose exact sum lies a bit delta (2^(E - 1 - F) or 3 *
    2^(E - 2 - F)) past a rounding point B (B = j * g / 2 for j = 1 .. 6 with g the grid's
    smallest subnormal, the smallest normal of the output and of the step; where 2^(E - 1)
    is normal on the grid also 2^(E - 1) + k * u / 2 for k = 1, 2, 3, u its unit there), or
    is B with
    that bit a term of its own (B - delta and +delta, B + delta and -delta: truncation then
    moves the sum across B) or spread over two halves (B / 2 + delta and B / 2 - delta; found
    by scripts/probe_sweep.py --formats fp16:fp16, where flushed inputs leave no product as
    small as delta and no one product leading below E is as large as B - delta), every
    nonzero term leading at E - 1 or below, for E from 2 below
    g's exponent up to 2 above the output's smallest normal exponent: the zeros (e_zero >= E)
    cut that bit, a cut at max(e_zero, the terms' leads) - F <= E - 1 - F keeps it. Sums of
    both signs; the terms from :func:`_split_sum` and :func:`_factor`. A list of rows."""
    fout, grid, blk = ctx.fout, grid_format(ctx), ctx.blocks[-1]
    slots = min(len(blk), 4)
    g = grid.min_subnormal
    points = sorted({j * g / 2 for j in range(1, 7)} | {fout.min_normal, grid.min_normal})
    rows = []
    for E in range(max(fout.emin, grid.emin) + 2, exponent(g) - 3, -1):
        # in a normal binade just below 2^E also a tie under an even and an odd kept bit and
        # the grid point between (an e_zero above the smallest normal exponent cuts bits
        # of normal sums: found by the random round trip, fp16 outputs with e_zero -13)
        u = math.ldexp(1.0, E - grid.p)  # the grid's unit in [2^(E-1), 2^E)
        ties = [math.ldexp(1.0, E - 1) + k * u / 2 for k in (1, 2, 3)] if E > grid.emin else []
        for B in points + ties:
            for delta in (math.ldexp(1.0, E - 1 - F), math.ldexp(3.0, E - 2 - F)):
                cands = []  # (products, c)
                for dsign in (1.0, -1.0):
                    S = B + dsign * delta
                    if S <= 0:
                        continue
                    # the sum B + -delta, or B with the bit apart: B - -delta and +-delta
                    cands.append((_split_sum(ctx, S, E - 1, slots), 0.0))
                    if slots > 1:
                        head = _split_sum(ctx, S, E - 1, slots - 1)
                        tail = _factor(ctx, -dsign * delta, E - 1)
                        cands.append((None if head is None else head + [tail], 0.0))
                    if B >= fout.min_normal:
                        # c the output's grid point at or below B, the rest in products (fp8
                        # products hold too few bits for a point of a normal fp16 binade:
                        # found by the random round trip, e5m2 -> fp16 with e_zero -13)
                        cands.append(_with_c(ctx, S, B, E - 1, slots))
                if slots > 1 and B > 2 * delta:
                    # B as two halves that carry the bit, +-delta (where delta alone, or B
                    # -+ delta in one product, is not a product of the formats)
                    cands.append(([_factor(ctx, B / 2 + delta, E - 1),
                                   _factor(ctx, B / 2 - delta, E - 1)], 0.0))
                for parts, c in cands:
                    if parts is None or None in parts:
                        continue
                    for sign in (1.0, -1.0):
                        raw = [(k, sign * x, y) for k, (x, y) in zip(blk, parts)]
                        rows.append(ctx.row([], raw=raw, c=sign * c if c else 0.0))
    return rows


def _with_c(ctx: Ctx, S: float, B: float, max_lead: int, slots: int):
    """(products, c) summing to S: c = B rounded down to the output format's grid (B normal),
    the rest S - c split into products leading at ``max_lead`` or below (:func:`_split_sum`,
    negated where negative); (None, 0.0) where it cannot be split."""
    fout = ctx.fout
    unit = math.ldexp(1.0, exponent(B) - fout.p + 1)
    c = math.floor(B / unit) * unit
    rest = S - c
    if rest == 0:
        return None, 0.0
    parts = _split_sum(ctx, abs(rest), max_lead, slots)
    if parts is None or None in parts:
        return None, 0.0
    return [(math.copysign(x, rest), y) for x, y in parts], c


def _boundary_sums(ctx: Ctx, found: list[Finding], steps, log) -> list[Finding]:
    """Check the e_zero reading on :func:`_boundary_rows`: sums of a few products below
    2^e_zero just past a rounding point, where the routes above see nothing (flushed
    outputs: sums reaching the smallest normal; -0 results made +0: terms below the grid's
    smallest subnormal whose sum reaches a tie or a grid point). Where the profile known so
    far does not reproduce them, the first (e_zero, step) that reproduces them and every row
    of ``log`` is taken: e_zero the reading, None, then from the grid's smallest subnormal
    exponent - 2 up to the output's smallest normal exponent + 4; the step each of ``steps``
    (those the rounding family left equal; else the known step), which F bits reaching below
    the grid may tell apart (zero signs aside where none does bit for bit, as in
    :func:`_first_fit`); where none does, the e_zero finding does not fit."""
    e = next((f for f in found if f.feature == "e_zero"), None)
    if e is None or not e.fits or ctx.known.get("frac_bits_at_least", True):
        return found
    rows = _boundary_rows(ctx, ctx.known["frac_bits"])
    if not rows:
        return found
    d = ctx.run(rows)
    if _first_fit(ctx, [ctx.known], [(rows, d)]) == 0:
        return found
    grid = grid_format(ctx)
    ez = [None, *range(exponent(grid.min_subnormal) - 2, ctx.fout.emin + 5)]
    base = ctx.known
    steps = steps or [tuple(base.get("step_rounding", (ctx.fout.name, "RZ")))]
    # the reading under every step first, then the other e_zero
    knowns = [{**base, "step_rounding": s, "e_zero": z}
              for z in [e.value] + [z for z in ez if z != e.value] for s in steps]
    pick = _first_fit(ctx, knowns, log + [(rows, d)])
    sep = None if pick is None else _separating_rows(ctx, knowns, pick, log + [(rows, d)])
    if sep is not None:  # other e_zero / steps reproduce them too: random rows decide
        pick = _first_fit(ctx, knowns, log + [(rows, d), sep])
    try:
        pred = fdpa_batch(np.stack([r[0] for r in rows]), np.stack([r[1] for r in rows]),
                          np.array([r[2] for r in rows]), candidate_profile(ctx))
    except ValueError:  # the families' profile cannot run: their own findings say why
        return found
    differ = np.flatnonzero(~same_bits(pred, d))
    ev = [ctx.evidence(rows[i], float(d[i]), f"sum past a rounding point; the reading "
                                             f"predicts {float(pred[i])!r}") for i in differ[:4]]
    was = f"e_zero {e.value}" + ("" if e.observable else ", not observable")
    if pick is None:
        new = Finding(FAMILY, "e_zero", e.value, fits=False, rows=len(rows), evidence=ev,
                      note=f"{len(differ)} of {len(rows)} sums past a rounding point differ "
                           f"from the reading ({was}) and no e_zero in {ez[1]} .. {ez[-1]} or None "
                           f"reproduces them")
        return [new if f is e else f for f in found]
    ctx.known = knowns[pick]
    z, step = ctx.known["e_zero"], tuple(ctx.known["step_rounding"])
    ev += [ctx.evidence(rows[i], float(d[i]), "sum past a rounding point")
           for i in differ[4:8]]
    new = Finding(FAMILY, "e_zero", z, observable=z is not None, rows=len(rows), evidence=ev,
                  note=f"{len(differ)} of {len(rows)} sums of products below 2^e_zero past a "
                       f"rounding point differ from the reading ({was}, {steps[0][0]} "
                       f"{steps[0][1]} steps); e_zero = {z} with {step[0]} {step[1]} steps is "
                       f"the first that reproduces them all"
                       + ("" if sep is None else f" and {len(sep[0])} random rows on which "
                          f"the others that do disagree")
                       + ("" if z is not None else " (zeros left out of e_max)"))
    out = [new if f is e else f for f in found if f.feature != "step_rounding"]
    if step != steps[0]:
        out.append(_step_finding(ctx, steps, len(rows) + sum(len(rs) for rs, _ in log),
                                 "of the e_zero readings and the sums past a rounding point"))
    return out


def _e_zero(ctx: Ctx) -> list[Finding]:
    fin = ctx.fin
    if ctx.known.get("frac_bits_at_least", True):
        return _not_obs(ctx, "F is not bounded by the probes")
    F = ctx.known["frac_bits"]
    if ctx.known.get("c_entry", "first") == "first":
        found = _c_route(ctx, F)
        if found is not None:
            return found
    if not ctx.known.get("neg_zero_to_pos", True):
        found = _sign_route(ctx, F)
        if found is not None:
            return found
    if ctx.known.get("flush_outputs"):
        return _not_obs(ctx, "subnormal outputs are flushed")
    blk = ctx.blocks[-1]  # last block: tiny step results are not re-read (and flushed) as inputs
    if len(blk) < 2:
        return _not_obs(ctx, "one product per block")
    g = grid_format(ctx).min_subnormal
    sub_ok = not ctx.known.get("flush_inputs", False)
    # floor alignment makes a negative term below the cut -2^(e_max - F), not 0: only +delta
    # can vanish there, so X also takes negative values (X + delta crosses toward zero)
    floor = ctx.known.get("alignment") == "floor"
    xs, leads = [], []
    for x in [v * sx for sx in ((1.0, -1.0) if floor else (1.0,))
              for v in (g, 0.5 * g, 1.5 * g, 2 * g, 3 * g)]:
        try:
            a, b, _ = ctx.row([(blk[0], x)])  # normal operands: the lead is X's exponent
            xs.append(x)
            leads.append(ctx.lead(a[blk[0]], b[blk[0]]))
        except NotRepresentable:
            pass
    if not xs:
        return _not_obs(ctx, f"no product of {ctx.operands} values lies on the smallest "
                             f"{grid_format(ctx).name} rounding grid (the smallest product is "
                             f"too large)")
    smallest = (fin.min_subnormal * ctx.fb.min_subnormal if sub_ok
                else fin.min_normal * ctx.fb.min_normal)
    s_lo = exponent(smallest) if smallest > 0 else -1100
    found, follows = _delta_route(ctx, F, blk, xs, leads, s_lo, sub_ok, floor)
    # the largest X may set the cut itself (e_zero at its lead): zeros can still show on the
    # smaller ones (e8m13's grid 2^-139 puts X at 2^-139 .. 3 * 2^-139, e_zero -138)
    while follows and min(leads) < max(leads):
        keep = [i for i, ld in enumerate(leads) if ld < max(leads)]
        xs, leads = [xs[i] for i in keep], [leads[i] for i in keep]
        known = dict(ctx.known)
        again, follows = _delta_route(ctx, F, blk, xs, leads, s_lo, sub_ok, floor)
        if again[0].value is not None and again[0].fits:
            return again
        ctx.known = known
    return found


def _delta_route(ctx: Ctx, F: int, blk, xs, leads, s_lo: int, sub_ok: bool, floor: bool):
    """The rows X + delta of the module docstring for the terms X in ``xs`` (leading exponents
    ``leads``); s_lo: the smallest power-of-two product's exponent. Returns (findings, True
    where the cut found follows the largest X's lead, so that zeros never set e_max here)."""
    fin = ctx.fin
    e_top = max(leads)
    signs = (1.0,) if floor else (1.0, -1.0)
    # the low-bit rows' base term: under nearest alignment an odd multiple of the cut's weight
    # (2^s_lo at a cut at 2^s_lo) would round a tie 2^(cut - 1) up to even and show it
    low = math.ldexp(1.0, s_lo + (ctx.known.get("alignment") == "nearest"))

    def delta_rows(s_range, low_bit):
        """Rows X + sign * 2^s: a product 2^s, or (``low_bit``, s below every power-of-two
        product) the low bit of sign * (low + 2^s) beside -sign * low (low = 2^s_lo; 2^(s_lo +
        1) under nearest alignment, an even multiple of a cut at 2^s_lo)."""
        rows, meta = [], []
        for s in s_range:
            delta = math.ldexp(1.0, s)
            for x in xs:
                for sign in signs:
                    terms = ([(blk[1], sign * (low + delta)), (blk[2], -sign * low)] if low_bit
                             else [(blk[1], sign * delta)])
                    try:
                        row = ctx.row([(blk[0], x)] + terms, allow_subnormal=sub_ok)
                    except NotRepresentable:
                        continue
                    if all(ctx.lead(row[0][k], row[1][k]) <= e_top for k, _ in terms):
                        rows.append(row)
                        meta.append((s, x))
        return rows, meta

    rows, meta = delta_rows(range(e_top - 1, s_lo - 1, -1), False)
    if not rows:
        return _not_obs(ctx, "no small term can be formed"), False
    base_rows = [ctx.row([(blk[0], x)]) for x in xs]
    base = dict(zip(xs, ctx.run(base_rows)))
    d = list(ctx.run(rows))
    changed: dict[int, bool] = {}

    def tally(meta, d):
        for (s, x), v in zip(meta, d):
            changed[s] = changed.get(s, False) or not ctx.same(float(v), float(base[x]))

    tally(meta, d)
    if changed and changed[min(changed)] and len(blk) >= 3:
        # even 2^s_lo survives: the cut may still lie among the lower bits of products
        more, more_meta = delta_rows(range(s_lo - 1, s_lo - fin.p, -1), True)
        if more:
            more_d = list(ctx.run(more))
            tally(more_meta, more_d)
            rows, meta, d = rows + more, meta + more_meta, d + more_d
    ss = sorted(changed)
    hits = [s for s in ss if changed[s]]
    ev = [ctx.evidence(r, float(v), f"X = {x!r}, delta = 2^{s}")
          for r, v, (s, x) in list(zip(rows, d, meta))[:: max(1, len(rows) // 6)]]
    if not hits:
        found = _single_route(ctx, F, sub_ok)
        return (found if found is not None
                else _not_obs(ctx, "no small term changes the result")), False
    T = min(hits)
    if T == ss[0]:
        return _not_obs(ctx, f"even the smallest term 2^{T} survives the cut: zeros never set "
                             f"e_max for these formats"), False
    if any(not changed[s] for s in ss if s > T):
        return [Finding(FAMILY, "e_zero", None, fits=False, rows=len(rows), evidence=ev,
                        note="the small terms that change the result are not all above one "
                             "cut")], False
    e_max = T + F
    # the largest leading exponent of the nonzero terms in the rows that decide
    lead = max(e_top, T)
    if e_max <= lead:
        ctx.known["e_zero"] = None
        return [Finding(FAMILY, "e_zero", None, observable=False, rows=len(rows), evidence=ev,
                        note=f"the cut follows the nonzero terms (e_max = {e_max}): zeros never "
                             f"set e_max for these formats; None used")], True
    ctx.known["e_zero"] = e_max
    return [Finding(FAMILY, "e_zero", e_max, rows=len(rows), evidence=ev,
                    note=f"with tiny terms only, the cut is at 2^{T} = 2^(e_zero - F): "
                         f"e_zero = {e_max}")], False
