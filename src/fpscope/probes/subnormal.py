"""Subnormal inputs and outputs, flush-to-zero (NUMERICS.md section 3, probe 10; CDNA2 flushes
in and out per NUMERICS.md section 2).

Inputs and what each outcome means:

* input flush: a = the largest subnormal of the input format's binade below 2^emin (2^(emin-1)),
  b = a power of two that brings the product to a normal output value well inside the range;
  c = 0. d = 0: subnormal a/b are read as zero (``flush_inputs``); d = the product: kept.
* c flush (same flag): no products, c = 2^(emin(out) - 1), a subnormal output value. d = c:
  kept; d = 0: flushed on input or on output (told apart by the next probe).
* output flush: a product in the last block equal to the subnormal output 2^(emin(out) - 2)
  (normal inputs; in an earlier block the subnormal step result would be chained into the next
  block as an input, and flushed there by ``flush_inputs``). d = 0: ``flush_outputs``. Where no such product exists (fp16 inputs, fp32 output: the
  smallest product is 2^-28), c alone is used when c is not flushed on input; otherwise the flag
  is not observable (default False; results cannot be subnormal then).
"""

from __future__ import annotations

import math

from ._common import Ctx, Finding, NotRepresentable

FAMILY = "subnormal"


def run(ctx: Ctx) -> list[Finding]:
    fin, fout = ctx.fin, ctx.fout
    p0 = ctx.first_block[0]
    out = []
    # input flush via a product
    a_sub = math.ldexp(1.0, fin.emin - 1)
    target_val = math.ldexp(1.0, max(fout.emin + 4, min(0, fout.emax - 4)))
    eb = math.frexp(target_val)[1] - 1 - (fin.emin - 1)
    flush_in = None
    ev = []
    if ctx.fb.emin <= eb <= ctx.fb.emax:  # b = 2^eb normal in b's format
        b = math.ldexp(1.0, eb)
        row = ctx.row([], raw=[(p0, a_sub, b)])
        d = float(ctx.run([row])[0])
        ev.append(ctx.evidence(row, d, "subnormal a times b"))
        if d == 0:
            flush_in = True
        elif d == a_sub * b:
            flush_in = False
    # c subnormal
    c_sub = math.ldexp(1.0, fout.emin - 1)
    row = ctx.row([], c=c_sub)
    dc = float(ctx.run([row])[0])
    ev.append(ctx.evidence(row, dc, "subnormal c, no products"))
    c_kept = dc == c_sub
    if flush_in is None:
        flush_in = not c_kept if dc in (0.0, c_sub) else None
        how = "c only: a flushed c may also be output flushing"
    else:
        how = "subnormal a times a power of two"
    if flush_in is None:
        out.append(Finding(FAMILY, "flush_inputs", False, observable=False, evidence=ev, rows=2,
                           note="not observable: default False"))
        flush_in = False
    else:
        ctx.known["flush_inputs"] = flush_in
        out.append(Finding(FAMILY, "flush_inputs", flush_in, evidence=ev, rows=2,
                           note=("subnormal inputs are read as zero" if flush_in else
                                 "subnormal inputs are used") + f" ({how})"))
    # output flush
    sub_out = math.ldexp(1.0, fout.emin - 2)
    flush_out = None
    ev = []
    try:
        # in the last block: a subnormal step result chained into a later block is read as an
        # input there (and flushed with flush_inputs)
        row = ctx.row([(ctx.blocks[-1][0], sub_out)])
        d = float(ctx.run([row])[0])
        ev.append(ctx.evidence(row, d, "a product equal to a subnormal output"))
        flush_out = d == 0 if d in (0.0, sub_out) else None
        how = "a subnormal product"
    except NotRepresentable:
        if not ctx.known.get("flush_inputs", False) or ctx.known.get("c_entry") == "last":
            flush_out = not c_kept  # c added after the blocks is not read as a block input
            how = "c alone (not flushed on input)"
        else:
            how = ""
    if flush_out is None:
        out.append(Finding(FAMILY, "flush_outputs", False, observable=False, evidence=ev,
                           note=f"no subnormal {fout.name} result can be formed from products of "
                                f"{ctx.operands} values here: not observable, default False"))
    else:
        ctx.known["flush_outputs"] = flush_out
        out.append(Finding(FAMILY, "flush_outputs", flush_out, evidence=ev, rows=len(ev),
                           note=("subnormal results become zero" if flush_out else
                                 "subnormal results are kept") + f" ({how})"))
    return out
