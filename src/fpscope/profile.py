"""Profiles: the node arithmetic of one matrix-unit instruction (NUMERICS.md section 2).

A :class:`Profile` holds the parameters of the fused dot-product-add ("T-FDPA") of one
tensor-core instruction: ``d = rho(sum_i a_i * b_i + c)`` over blocks of ``block_size``
products, ``k / block_size`` blocks chained (the rounded result of a block is the ``c`` of the
next). :mod:`fpscope.emulate.reference` evaluates a profile exactly.

Convention for ``frac_bits`` (F): a product's significand ``s_a * s_b`` lies in [0, 4) (two
integer bits) and its exponent is ``e_a + e_b``; c's significand lies in [1, 2) with exponent
``e_c``. ``e_max`` is the largest of these exponents, and every term is cut at weight
``2^(e_max - F)``: the window holds F fraction bits below ``2^e_max`` plus the two integer bits,
so F = 24 on Ampere is a 26-bit window. (This is the convention under which the recorded
hardware outputs in shared/data/hw-vectors reproduce bit for bit; see tests/test_hw_vectors.py.)

Mixed input formats (``b_format``): a product's significand ``s_a * s_b`` still lies in [0, 4)
and its exponent is ``e_a + e_b``, each operand decoded in its own format (its own precision
and subnormal exponent ``emin``); nothing else of the node arithmetic changes.

Node kinds (``node``): "fused" is the one fused step above (every NVIDIA preset, AMD CDNA1).
"pairwise" (AMD CDNA2) rounds every product and every addition of a balanced tree over the block
to the step format, then adds the tree to c in one more rounding. "two-stage" (AMD CDNA3) sums
the products in a fused step of their own (cut at F below their largest exponent), then aligns
that sum with c at a second precision F2 and rounds the result in three cuts (see
:class:`Profile`, ``frac_bits2``). The fields that only these kinds read keep their defaults in
a fused profile.

Block scales (``scale_format``, ``scale_block_size``; Blackwell MX / NVFP4 instructions): every
run of ``scale_block_size`` elements along K of a row of A shares one scale of A (an e8m0 or
ue4m3 value), and likewise along a column of B; the instruction reads the scales beside the
operands. In the fused node a product's significand is ``s_a * s_b * s_sa * s_sb`` and its
exponent ``e_a + e_b + e_sa + e_sb`` (the scale exponents are added to the product exponent,
NUMERICS.md section 2); the "grouped" node (NVFP4 / MXFP4 ``kind::mxf4*``) sums groups of
``group_size`` products exactly and aligns each group sum at its scale's exponent
(:class:`Profile`). A profile without ``scale_format`` has no block scales.

JSON schema "fpscope.profile/1": an object with "schema" and exactly the dataclass fields;
``step_rounding`` and ``output_rounding`` are ``[format, mode]`` pairs (or null). Optional fields
missing from the object take their defaults (a profile written before ``b_format`` existed
reads as a same-format profile; one written before ``node`` and the CDNA2 / CDNA3 fields
existed reads as the fused node it describes; one written before the block-scale fields reads
as a profile without block scales).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

import numpy as np

from .formats import ROUNDING_MODES, Format, decode, get_format

SCHEMA = "fpscope.profile/1"

#: The fp8 accumulator of Ada/Hopper tensor cores: fp32 range, 13 fraction bits ("FP22").
E8M13 = Format("e8m13", 14, -126, 127)

_EXTRA_FORMATS = {"e8m13": E8M13}

ALIGNMENTS = ("truncate", "floor", "nearest")
STATUSES = ("validated", "experimental")
#: ``Profile.operand_conversion``: how fp32 operands reach a tf32 / bf16 / fp16 instruction
#: ("truncate": toward zero, RZ; "RNA": nearest, ties away; "RNE": nearest, ties to even).
OPERAND_CONVERSIONS = ("truncate", "RNA", "RNE")
#: Older spellings read as today's ("round" was the only nearest mode: ties away).
_CONVERSION_ALIASES = {"round": "RNA"}
#: The input formats an fp32 operand can be converted to (``operand_conversion``).
CONVERTIBLE_FORMATS = ("tf32", "bf16", "fp16")
C_ENTRIES = ("first", "last")
SPLIT_K_ORDERS = ("serial", "pairwise")
NODES = ("fused", "pairwise", "two-stage", "grouped")
#: Block-scale formats (``Profile.scale_format``): OCP MX's E8M0 and NVFP4's unsigned E4M3.
SCALE_FORMATS = ("e8m0", "ue4m3")
INPUT_ZERO_SIGNS = ("keep", "positive")
ZERO_SUM_SIGNS = ("ieee", "positive")


def resolve_format(name: str) -> Format:
    """A format by name: the names of :func:`fpscope.formats.get_format` plus "e8m13"."""
    key = str(name).lower()
    if key in _EXTRA_FORMATS:
        return _EXTRA_FORMATS[key]
    return get_format(key)


def _check_rounding(field: str, value) -> None:
    if not (isinstance(value, tuple) and len(value) == 2):
        raise ValueError(f"{field} must be a (format, mode) pair, not {value!r}")
    resolve_format(value[0])
    if value[1] not in ROUNDING_MODES:
        raise ValueError(f"{field}: unknown rounding mode {value[1]!r}")


@dataclass(frozen=True)
class Profile:
    """Node arithmetic of one matrix-unit instruction.

    Attributes:
        name: preset key ("ampere-fp16", ...).
        arch: architecture ("volta", "turing", "ampere", "ada", "hopper", ...).
        in_format: name of the a operand's format, and of b's too unless ``b_format`` is given.
        out_format: name of the c/d format ("fp32" or "fp16").
        block_size: L, products per fused step.
        k: products per instruction; ``k // block_size`` steps are chained.
        frac_bits: F, fraction bits kept below ``2^e_max`` (module docstring for the convention).
        alignment: how each term is cut at ``2^(e_max - F)``: "truncate" (magnitude toward zero),
            "floor" (toward -inf, AMD CDNA3), "nearest" (ties to even).
        e_zero: exponent a zero term (zero product, zero c) takes in the max; None = zeros are
            left out of the max.
        step_rounding: (format, mode) of rho, the rounding of every fused step.
        output_rounding: (format, mode) applied after the last step, or None. The validated
            fp16-output presets (Ada fp8 included) round every step straight to fp16 RNE
            (step_rounding ("fp16", "RNE"), no output_rounding): the recorded Ada E4M3/E5M2
            fp16 outputs match that and not RZ-E8M13 followed by RNE-FP16. The Hopper fp8
            fp16-output presets (mma.sync m16n8k32 .f16) are two fp16 steps of 16 products in
            the order ``k_order``, then c (``c_entry`` "last"), each rounded RNE to fp16.
        flush_inputs: subnormal a, b, c are read as zero.
        flush_outputs: subnormal step results become zero.
        nan_bits: canonical NaN bit pattern of the output format (None: the positive NaN with
            every fraction bit set, 0x7FFFFFFF for fp32 and 0x7FFF for fp16, the recorded
            H100 / A100 / Ada / V100 patterns); at most the format's width.
        neg_zero_to_pos: a -0 result is returned as +0.
        zero_sum_sign: the sign of a fused step whose exact sum is zero (every term zero, or
            terms that cancel), where ``neg_zero_to_pos`` is False: "ieee" (default): -0 when
            every term (zero products with their signs, and c) is -0, as IEEE 754 addition
            gives, whatever e_zero; else +0; "positive": always +0, as an integer accumulator
            without a signed zero gives, while a nonzero negative sum that rounds to zero
            keeps its -0 (mmasim's AMD CDNA1 model, ``arithmetic/fdpa.py: e_fdpa``:
            ``exact_sum`` then ``normalize_parts_to_fp32``). Fused node only.
        operand_conversion: how fp32 operands are reduced to a tf32, bf16 or fp16 input
            format (:mod:`fpscope.emulate.conversion`): "truncate" (toward zero), "RNA"
            (nearest, ties away: cuBLAS's TF32 conversion as its users report it, 1024.5 * 1.0
            = 1025 on an RTX 3090, pytorch/pytorch issue 53635; NUMERICS.md section 2), "RNE"
            (nearest, ties to even); "round" is read as "RNA". None: operands must be values of
            the input format (tf32 presets: "truncate"). With a conversion, operands must be
            fp32 values; each is rounded once, exactly; overflow gives Inf, except under
            "truncate" (the largest finite value, IEEE 754 rounding toward zero). "truncate"
            reads a float32 operand of a tf32 or bf16 profile as its fp32 word without the low
            fraction bits (13 for tf32, 16 for bf16), as mmasim
            (``helper.truncate_fp32_to_tf32``) and a tensor core reading the top 19 bits of a
            register do: numbers round toward zero, and a signalling NaN whose payload lies only
            in those bits is +-Inf (float64 NaNs are quiet; no recording has such a NaN).
        k_order: the order the k products are taken in before they are cut into blocks (block
            s holds products ``k_order[s*L:(s+1)*L]``); None = natural order.
        c_entry: "first": c is the accumulator of the first block; "last": the blocks start from
            +0 and c is added after the last block, ``d = rho(d + c)`` with step_rounding (H100
            fp8 ``mma.sync ... .f16`` outputs: emulated as two fp16 HMMA k16 steps then an add).
        c_rounding: with c_entry "last", the rounding mode of c's addition when it differs from
            step_rounding's (the format stays step_rounding's): B200 ``mma.sync`` fp8 with fp32
            output rounds its steps toward zero and c's addition to nearest (Khattak-Mikaitis
            B200 model). None: step_rounding's mode. The numba kernel refuses it.
        split_k: library level (a whole GEMM, :mod:`fpscope.emulate.library`): K is cut into
            this many equal contiguous slices, each a chain of instructions from +0; their
            results, rounded to nearest-even to ``split_k_format`` (None: kept in the output
            format; "bf16"/"fp16": low-precision partial sums, case C8), are added up in
            ``split_k_order`` ("serial": ``((p0 + p1) + p2) ...``; "pairwise": a balanced
            tree), each addition rounded to nearest-even in the output format, and C is added
            last.
        promotion_interval: library level: every this many products of K (a multiple of k) the
            instruction chain restarts from +0 and its result is added to a register
            accumulator in the output format, rounded to nearest-even (FP8 GEMMs without "fast
            accumulation" promote every 128 products; NUMERICS.md section 2). None: one chain.
        status: "validated" (reproduces recorded hardware outputs bit for bit) or "experimental".
        evidence: the data that reproduces it (empty while experimental).
        b_format: name of the b operand's format where it differs from a's (mixed-input
            instructions: fp8 e4m3 x e5m2 ``mma.sync`` / ``wgmma``, ``kind::f8f6f4`` fp8 x fp6 x
            fp4); None = the same as ``in_format``. A b_format naming in_format's format is
            stored as None, so a profile has one spelling. Each operand is decoded, checked
            (values are never re-rounded) and, under ``operand_conversion``, reduced in its own
            format; :attr:`operand_formats` gives the pair.
        node: the node arithmetic of a block (module docstring):

            * "fused" (default): ``rho(sum_i a_i * b_i + c)`` in the window of ``frac_bits``, as
              above.
            * "pairwise": every product ``a_i * b_i`` is rounded with ``step_rounding``; the L
              rounded products (L a power of two) are added in a balanced tree of adjacent
              pairs, ``((p0 + p1) + (p2 + p3)) + ...``, each addition rounded with
              ``step_rounding``; then ``d = rho(c + tree)``. ``flush_outputs`` flushes every
              product and every sum to a zero of its sign; NaN and Inf follow IEEE 754 (Inf
              times 0, a flushed subnormal included, is NaN); an exact zero sum is +0 unless
              both addends are -0. ``frac_bits`` and ``alignment`` are not read (presets: 0,
              "truncate"); ``e_zero`` must be None. Source: mmasim
              ``arithmetic/ftz_mul_add.py: MMA_FTZ_MUL_ADD(P)`` (AMD CDNA2, L = P: fp32
              products, ``ftz_add`` of pairs, then of the pair sums, then c).
            * "two-stage": (1) the block's nonzero products (a zero product never joins a
              maximum) are cut at ``2^(e_p - F)`` with ``alignment``, e_p the largest product
              exponent, and summed exactly; with ``product_groups`` G > 1, each interleaved
              group (product j of the block in group j mod G) is summed so against its own
              maximum, and the G sums are cut at ``2^(e_dot - F)`` with ``alignment2`` (e_dot:
              the largest group maximum) and added; with G = 1, e_dot = e_p. (2) ``e2 =
              max(e_dot, e_c)``, e_c c's exponent (``max(floor(log2|c|), emin)``; a zero c
              takes ``e_zero``, None: left out; no nonzero product and no e_c: d = +0); c is
              read as zero when ``e_c < e2 - c_drop_bits``; the dot is cut at ``2^(e2 - F2 -
              1)`` and c at ``2^(e2 - F)``, both with ``alignment2``, and added exactly to S.
              (3) S is cut at ``2^(max(floor(log2|S|), emin_step) - F2)`` with ``alignment2``
              (F2 fraction bits; ``emin_step`` the step format's emin). (4) rho
              (``step_rounding``). An exact zero S is +0. Source: mmasim ``arithmetic/fdpa.py:
              tr_fdpa`` (``MMA_TR_FDPA``, G = 1) and ``gtr_fdpa`` (``MMA_GTR_FDPA``, G = 2), AMD
              CDNA3: F = 24, F2 = 31, floor (``torch.floor``), rho RNE to fp32.
            * "grouped" (block scales required): the block's products form contiguous groups
              of ``group_size`` G (product j in group j // G); each group's products ``a_j *
              b_j`` are summed exactly to P; the group's term is ``P * s_sa * s_sb`` with
              alignment exponent ``e_sa + e_sb``, the exponent of its scales (not of P), or
              ``e_zero`` when every product of the group is zero or the scale is zero (a P that
              cancels to 0 keeps the scale's exponent). Then as the fused node: ``e_max`` over
              the group terms and c, every term cut at ``2^(e_max - F)`` (``alignment``),
              summed exactly, rho. An exact zero sum follows the fused node's sign rule, a
              group term being negative when P < 0 or when P = 0 and every product is -0.
              Source: mmasim ``arithmetic/fdpa.py: gst_fdpa`` (``MMA_GST_FDPA(G=16, F=35,
              rho="RZ-FP32", L_max=64, e_zero=-139)``, ``nv_ptx/sim.py`` for ``kind::mxf4``
              and ``kind::mxf4nvf4``), which sums the fp4 products of a group in fp32 (exact
              for them). NUMERICS.md section 2 says "exact sums of groups of 16, then 64";
              mmasim decides what "then 64" means: one fused step over the 4 group terms and
              c, aligned at the scale exponents.
        frac_bits2: F2 of the "two-stage" node; None for the other nodes.
        alignment2: the cut of the "two-stage" node's stages 2 and 3 and of its group sums (one
            of ``ALIGNMENTS``; CDNA3: "floor", toward -inf); None for the other nodes.
        product_groups: G, the interleaved product groups of the "two-stage" node's first
            stage (1: one group; 2: even and odd products, mmasim ``gtr_fdpa``, CDNA3 fp8); 1
            for the other nodes; it divides ``block_size``.
        c_drop_bits: "two-stage" node: c is read as zero when its exponent is below
            ``e2 - c_drop_bits`` (mmasim ``gtr_fdpa``: ``s_c[e_c < e_max - F - 1] = 0``, so
            F + 1 = 25); None: c is always cut at ``2^(e2 - F)``.
        product_overflow: a format name: a product of finite operands with ``|a * b| >=
            2^(emax + 1)`` of that format is +-Inf, and the block is Inf or NaN as with an Inf
            operand (mmasim ``tr_fdpa``: ``overflow = (|s| >= 2) + e >= 128``, "fp32"); None:
            products are exact. Not for the "pairwise" node (its products are rounded with
            ``step_rounding``, overflow included).
        input_zero_sign: "keep" (default): a zero a, b or c (and a subnormal flushed under
            ``flush_inputs``) keeps its sign; "positive": it is read as +0, so a zero product
            has the sign of the other operand (mmasim CDNA2 ``flush_subnormal(x,
            keep_sign=False)`` on a, b and c). It applies to the instruction's c, not to the
            results chained between blocks.
        scale_format: the format of the block scales, "e8m0" (OCP MX: MXFP8 / MXFP6 / MXFP4,
            PTX ``.ue8m0``) or "ue4m3" (NVFP4, PTX ``.ue4m3``), or None: no block scales (every
            other field's meaning unchanged). A scale multiplies the products of its block: in
            the fused node the scale exponents are added to each product's exponent and the
            scale significands multiply its significand (``e8m0`` has none); a NaN scale makes
            the block's result NaN; a zero scale (ue4m3) makes its products zero terms (an
            Inf operand times a zero scale is NaN). Source: mmasim ``arithmetic/fdpa.py:
            st_fdpa`` (``MMA_ST_FDPA(F=25, rho="RZ-FP32", L_max=32, e_zero=-133)`` for
            ``kind::mxf8f6f4``), ``gst_fdpa`` for the "grouped" node. Block-scaled profiles
            take the fused or grouped node.
        scale_block_size: elements along K that share one scale (the MX block size; PTX
            ``.block32`` / ``.block16``): scale j of a row of A covers its elements
            ``j * scale_block_size .. (j + 1) * scale_block_size - 1``, likewise down a column
            of B. It divides k. None exactly when ``scale_format`` is None.
        group_size: G of the "grouped" node (products summed exactly per group; mmasim 16); it
            divides ``block_size`` and ``scale_block_size``. None for the other nodes.
    """

    name: str
    arch: str
    in_format: str
    out_format: str
    block_size: int
    k: int
    frac_bits: int
    alignment: str = "truncate"
    e_zero: int | None = None
    step_rounding: tuple = ("fp32", "RZ")
    output_rounding: tuple | None = None
    flush_inputs: bool = False
    flush_outputs: bool = False
    nan_bits: int | None = None
    neg_zero_to_pos: bool = True
    operand_conversion: str | None = None
    k_order: tuple | None = None
    c_entry: str = "first"
    split_k: int = 1
    split_k_order: str = "serial"
    split_k_format: str | None = None
    promotion_interval: int | None = None
    status: str = "experimental"
    evidence: str = ""
    b_format: str | None = None
    node: str = "fused"
    frac_bits2: int | None = None
    alignment2: str | None = None
    product_groups: int = 1
    c_drop_bits: int | None = None
    product_overflow: str | None = None
    input_zero_sign: str = "keep"
    zero_sum_sign: str = "ieee"
    scale_format: str | None = None
    scale_block_size: int | None = None
    group_size: int | None = None
    c_rounding: str | None = None

    def __post_init__(self):
        if isinstance(self.step_rounding, list):
            object.__setattr__(self, "step_rounding", tuple(self.step_rounding))
        if isinstance(self.output_rounding, list):
            object.__setattr__(self, "output_rounding", tuple(self.output_rounding))
        for f in ("name", "arch", "in_format", "out_format", "status", "evidence"):
            if not isinstance(getattr(self, f), str):
                raise ValueError(f"{f} must be a string")
        fa = resolve_format(self.in_format)
        resolve_format(self.out_format)
        if self.b_format is not None:
            if not isinstance(self.b_format, str):
                raise ValueError(f"b_format must be a format name or None, not "
                                 f"{self.b_format!r}")
            if resolve_format(self.b_format) == fa:
                object.__setattr__(self, "b_format", None)  # one spelling of "same format"
        fout = resolve_format(self.out_format)
        width = fout.bits
        if self.nan_bits is None:
            object.__setattr__(self, "nan_bits", (1 << (width - 1)) - 1)
        for f in ("block_size", "k", "frac_bits", "nan_bits"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool):
                raise ValueError(f"{f} must be an integer, not {v!r}")
        if self.frac_bits < 0:
            raise ValueError(f"frac_bits (kept fraction bits F) must be at least 0, not "
                             f"{self.frac_bits}")
        if not 0 <= self.nan_bits < 1 << width or (
                fout.has_nan and not np.isnan(decode([self.nan_bits], fout)[0])):
            raise ValueError(f"nan_bits must be a NaN's {width}-bit pattern in "
                             f"{self.out_format}, not {self.nan_bits!r}")
        if self.block_size < 1 or self.k < 1 or self.k % self.block_size:
            raise ValueError(f"k ({self.k}) must be a positive multiple of block_size "
                             f"({self.block_size})")
        if self.alignment not in ALIGNMENTS:
            raise ValueError(f"unknown alignment {self.alignment!r}; known: {ALIGNMENTS}")
        if self.e_zero is not None and (not isinstance(self.e_zero, int)
                                        or isinstance(self.e_zero, bool)):
            raise ValueError("e_zero must be an integer or None")
        _check_rounding("step_rounding", self.step_rounding)
        if self.output_rounding is not None:
            _check_rounding("output_rounding", self.output_rounding)
        for f in ("flush_inputs", "flush_outputs", "neg_zero_to_pos"):
            if not isinstance(getattr(self, f), bool):
                raise ValueError(f"{f} must be a boolean")
        oc = _CONVERSION_ALIASES.get(self.operand_conversion, self.operand_conversion)
        if oc not in (None, *OPERAND_CONVERSIONS):
            raise ValueError(f"unknown operand_conversion {self.operand_conversion!r}; known: "
                             f"{', '.join(OPERAND_CONVERSIONS)}")
        object.__setattr__(self, "operand_conversion", oc)  # one spelling per mode
        if oc is not None:
            odd = [f for f in (self.in_format, self.b_format) if f is not None
                   and resolve_format(f).name not in CONVERTIBLE_FORMATS]
            if odd:
                raise ValueError(f"operand_conversion {oc!r} converts fp32 operands to "
                                 f"{', '.join(CONVERTIBLE_FORMATS)}; this profile takes {odd[0]}")
        if isinstance(self.k_order, list):
            object.__setattr__(self, "k_order", tuple(self.k_order))
        if self.k_order is not None and sorted(self.k_order) != list(range(self.k)):
            raise ValueError(f"k_order must be a permutation of range({self.k})")
        if self.c_entry not in C_ENTRIES:
            raise ValueError(f"unknown c_entry {self.c_entry!r}; known: {C_ENTRIES}")
        if self.c_rounding is not None:
            _check_rounding("c_rounding", (self.step_rounding[0], self.c_rounding))
            if self.c_entry != "last":
                raise ValueError("c_rounding applies to c_entry 'last' (c added after the "
                                 "blocks)")
        if not isinstance(self.split_k, int) or isinstance(self.split_k, bool) or self.split_k < 1:
            raise ValueError(f"split_k must be a positive integer, not {self.split_k!r}")
        if self.split_k_format is not None:
            resolve_format(self.split_k_format)
        if self.split_k_order not in SPLIT_K_ORDERS:
            raise ValueError(f"unknown split_k_order {self.split_k_order!r}; known: "
                             f"{SPLIT_K_ORDERS}")
        pi = self.promotion_interval
        if pi is not None and (not isinstance(pi, int) or isinstance(pi, bool) or pi < 1
                               or pi % self.k):
            raise ValueError(f"promotion_interval must be a positive multiple of k ({self.k}), "
                             f"not {pi!r}")
        if self.status not in STATUSES:
            raise ValueError(f"unknown status {self.status!r}; known: {STATUSES}")
        self._check_node()
        self._check_scales()

    def _check_scales(self) -> None:
        """The block-scale fields (class docstring)."""
        sf, sb, G = self.scale_format, self.scale_block_size, self.group_size
        if sf is None:
            if sb is not None:
                raise ValueError("scale_block_size is read with block scales only: a profile "
                                 "without scale_format takes None")
            if self.node == "grouped":
                raise ValueError("the grouped node aligns each group at its scale's exponent: "
                                 "it needs scale_format (e8m0 or ue4m3)")
            return
        if not isinstance(sf, str) or resolve_format(sf).name not in SCALE_FORMATS:
            raise ValueError(f"scale_format must be one of {SCALE_FORMATS} or None, not {sf!r}")
        object.__setattr__(self, "scale_format", resolve_format(sf).name)
        if not isinstance(sb, int) or isinstance(sb, bool) or sb < 1 or self.k % sb:
            raise ValueError(f"scale_block_size must be a positive divisor of k ({self.k}), "
                             f"not {sb!r}")
        if self.node not in ("fused", "grouped"):
            raise ValueError(f"block scales are modelled for the fused and grouped nodes, not "
                             f"{self.node}")
        if self.node == "grouped":
            if not isinstance(G, int) or isinstance(G, bool) or G < 1:
                raise ValueError(f"the grouped node needs group_size (G), a positive integer, "
                                 f"not {G!r}")
            if self.block_size % G or sb % G:
                raise ValueError(f"group_size ({G}) must divide block_size ({self.block_size}) "
                                 f"and scale_block_size ({sb})")
            if self.k_order is not None:
                raise ValueError("the grouped node sums contiguous groups of one scale block: "
                                 "k_order must be None")

    def _check_node(self) -> None:
        """The node kind and the fields only some kinds read (class docstring)."""
        node = self.node
        if node not in NODES:
            raise ValueError(f"unknown node {node!r}; known: {NODES}")
        if self.input_zero_sign not in INPUT_ZERO_SIGNS:
            raise ValueError(f"unknown input_zero_sign {self.input_zero_sign!r}; known: "
                             f"{INPUT_ZERO_SIGNS}")
        if self.zero_sum_sign not in ZERO_SUM_SIGNS:
            raise ValueError(f"unknown zero_sum_sign {self.zero_sum_sign!r}; known: "
                             f"{ZERO_SUM_SIGNS}")
        if node != "fused" and self.zero_sum_sign != "ieee":
            raise ValueError(f"zero_sum_sign is read by the fused node only; the {node} node "
                             f"takes 'ieee'")
        if self.product_overflow is not None:
            if not isinstance(self.product_overflow, str):
                raise ValueError(f"product_overflow must be a format name or None, not "
                                 f"{self.product_overflow!r}")
            resolve_format(self.product_overflow)
        g = self.product_groups
        if not isinstance(g, int) or isinstance(g, bool) or g < 1:
            raise ValueError(f"product_groups must be a positive integer, not {g!r}")
        if node != "grouped" and self.group_size is not None:
            raise ValueError(f"group_size is read by the grouped node only; the {node} node "
                             f"takes None")
        two = node == "two-stage"
        if not two:
            for f in ("frac_bits2", "alignment2", "c_drop_bits"):
                if getattr(self, f) is not None:
                    raise ValueError(f"{f} is read by the two-stage node only; the {node} node "
                                     f"takes None")
            if g != 1:
                raise ValueError(f"product_groups is read by the two-stage node only; the {node} "
                                 f"node takes 1")
        if node != "fused" and self.c_entry != "first":
            raise ValueError(f"c_entry 'last' is modelled for the fused node only, not {node}")
        if node == "pairwise":
            L = self.block_size
            if L & (L - 1):
                raise ValueError(f"the pairwise node adds a balanced tree: block_size must be a "
                                 f"power of two, not {L}")
            if self.e_zero is not None:
                raise ValueError("the pairwise node has no alignment window: e_zero must be None")
            if self.product_overflow is not None:
                raise ValueError("the pairwise node rounds its products with step_rounding: "
                                 "product_overflow must be None")
        if two:
            F2 = self.frac_bits2
            if not isinstance(F2, int) or isinstance(F2, bool) or F2 < 0:
                raise ValueError(f"the two-stage node needs frac_bits2 (F2), a non-negative "
                                 f"integer, not {F2!r}")
            if self.frac_bits > F2 + 1:
                raise ValueError(f"the two-stage node cuts c at 2^(e2 - F) and the dot at "
                                 f"2^(e2 - F2 - 1): F ({self.frac_bits}) must not exceed "
                                 f"F2 + 1 ({F2 + 1})")
            if self.alignment2 not in ALIGNMENTS:
                raise ValueError(f"the two-stage node needs alignment2, one of {ALIGNMENTS}, "
                                 f"not {self.alignment2!r}")
            if self.block_size % g:
                raise ValueError(f"product_groups ({g}) must divide block_size "
                                 f"({self.block_size})")
            cd = self.c_drop_bits
            if cd is not None and (not isinstance(cd, int) or isinstance(cd, bool) or cd < 0):
                raise ValueError(f"c_drop_bits must be a non-negative integer or None, not "
                                 f"{cd!r}")

    @property
    def stages(self) -> int:
        return self.k // self.block_size

    @property
    def operand_formats(self) -> tuple[str, str]:
        """(a's format, b's format): ``(in_format, b_format or in_format)``."""
        return self.in_format, self.b_format or self.in_format

    @property
    def negative_zero_sums(self) -> bool:
        """True when a fused step whose exact sum is zero gives -0 where every term is negative
        (IEEE 754's sign of an exact zero sum in RNE / RZ): -0 results are kept
        (``neg_zero_to_pos`` False) and ``zero_sum_sign`` is "ieee". False: every exact zero
        sum is +0 (NVIDIA's -0 -> +0; AMD CDNA1's "positive", mmasim ``e_fdpa``)."""
        return not self.neg_zero_to_pos and self.zero_sum_sign == "ieee"

    @property
    def e_zero_inert(self) -> bool:
        """True when e_zero can never decide a block's e_max, so that every input gives the same
        bits with ``e_zero=None``: a fused node without block scales whose e_zero is at most the
        exponent of every nonzero term it can meet. Leading exponents are clamped to emin, so a
        nonzero product's is at least ``emin_a + emin_b`` and c's at least the emin of the
        output and step formats; e_zero only joins the max where a term is zero, and where every
        term is zero the sum is zero whatever the weight (NUMERICS.md section 2: e_zero).
        Scaled products (MX / NVFP4) and the AMD node kinds can fall below it."""
        if self.e_zero is None:
            return True
        if self.node != "fused" or self.scale_format is not None:
            return False
        fa, fb = (resolve_format(f) for f in self.operand_formats)
        c_emin = min(resolve_format(self.out_format).emin,
                     resolve_format(self.step_rounding[0]).emin)
        return self.e_zero <= min(fa.emin + fb.emin, c_emin)

    @property
    def lossless(self) -> bool:
        """True when the cut at ``2^(e_max - F)`` can never drop a bit of any term.

        That is ``frac_bits >= lossless_frac_bits(...)`` for the input formats and every format
        c arrives in (out_format; the step format for chained blocks): each block is then the
        exact sum rounded once by rho (AMD CDNA1, mmasim ``arithmetic/fdpa.py: e_fdpa``).
        Always False for the "pairwise", "two-stage" and "grouped" nodes (they round inside a
        block, or cut at a scale's exponent) and for block-scaled profiles (the scales widen
        the exponent range).
        """
        if self.node != "fused" or self.scale_format is not None:
            return False
        c_formats = {self.out_format, self.step_rounding[0]}
        return self.frac_bits >= max(lossless_frac_bits(self.in_format, c, self.b_format)
                                     for c in c_formats)

    def replace(self, **changes) -> "Profile":
        """A copy with ``changes``; a new out_format without a nan_bits of its own takes its
        format's default NaN (nan_bits is a pattern of the output format)."""
        if changes.get("out_format", self.out_format) != self.out_format:
            changes.setdefault("nan_bits", None)
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        d = {"schema": SCHEMA}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            d[f.name] = list(v) if isinstance(v, tuple) else v
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_dict(cls, d: dict) -> "Profile":
        if not isinstance(d, dict):
            raise ValueError("a profile is a JSON object")
        schema = d.get("schema")
        if schema != SCHEMA:
            raise ValueError(f"unknown profile schema {schema!r}; this version reads {SCHEMA!r}")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names - {"schema"})
        if unknown:
            raise ValueError(f"unknown profile fields: {', '.join(unknown)}")
        try:
            return cls(**{key: v for key, v in d.items() if key != "schema"})
        except TypeError as exc:  # missing required fields
            raise ValueError(str(exc)) from None

    @classmethod
    def from_json(cls, text: str) -> "Profile":
        try:
            d = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not JSON: {exc}") from None
        return cls.from_dict(d)


def lossless_frac_bits(in_format: str, c_format: str, b_format: str | None = None) -> int:
    """The smallest F at which no term of a block is ever cut (fpscope's F convention).

    The largest leading exponent a term can have (a product ``emax_a + emax_b`` of the input
    formats, c ``emax`` of its format) minus the smallest weight of a last bit (a product of two
    smallest subnormals ``(emin_a - (p_a - 1)) + (emin_b - (p_b - 1))``, c ``emin - (p - 1)``):
    fp16 inputs with fp32 c 276, bf16 inputs with fp32 c 520. ``b_format``: b's format where it
    differs from ``in_format`` (a's).
    """
    fa, fc = resolve_format(in_format), resolve_format(c_format)
    fb = resolve_format(b_format) if b_format is not None else fa
    top = max(fa.emax + fb.emax, fc.emax)
    bottom = min(fa.emin - (fa.p - 1) + fb.emin - (fb.p - 1), fc.emin - (fc.p - 1))
    return top - bottom


def __getattr__(name: str):
    """``PRESETS`` is built on first use (:mod:`fpscope.presets` holds the tables; building
    them takes a noticeable time, and a module importing Profile alone need not pay it)."""
    if name == "PRESETS":
        from .presets import PRESETS

        return PRESETS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def get_profile(name: str) -> Profile:
    """The preset called ``name`` (ValueError with the closest name as a hint)."""
    from .presets import PRESETS

    try:
        return PRESETS[name]
    except KeyError:
        import difflib

        close = difflib.get_close_matches(str(name), list(PRESETS), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise ValueError(f"unknown profile {name!r}; {hint}'fpscope profiles' lists the "
                         f"{len(PRESETS)} presets") from None


def load_profile(profile) -> Profile:
    """A :class:`Profile` from a preset name, a Profile, or the path of a profile JSON file.

    Args:
        profile: a :class:`Profile` (returned as it is); a preset name (``fpscope profiles``
            lists them; a name wins over a file of the same name); or a ``str`` /
            ``os.PathLike`` path of a JSON file in the "fpscope.profile/1" schema
            (:meth:`Profile.to_json`; ``fpscope probe`` and ``fpscope fit`` write them), or of
            a probe record (``fpscope probe --record``), whose profile is used.

    Returns:
        The Profile.

    Raises:
        ValueError, one line each: None or another type; an unknown name (with the closest
            preset name as a hint); a folder; a missing or unreadable file; a file that is not
            JSON or not a valid profile (the reason after the path).
    """
    import os
    from pathlib import Path

    from .presets import PRESETS

    if isinstance(profile, Profile):
        return profile
    if profile is None:
        raise ValueError("a profile is required: a preset name ('fpscope profiles' lists them), "
                         "a Profile, or a profile JSON file")
    if not isinstance(profile, (str, os.PathLike)):
        raise ValueError(f"profile must be a preset name, a Profile or the path of a profile "
                         f"JSON file, not {type(profile).__name__}")
    if isinstance(profile, str) and profile in PRESETS:
        return PRESETS[profile]
    path = Path(profile)
    text = str(profile)
    if path.is_dir():
        raise ValueError(f"{text} is a folder, not a profile: give a preset name or a profile "
                         f"JSON file")
    if not path.exists():
        if isinstance(profile, str) and not text.endswith(".json") and os.sep not in text:
            return get_profile(text)  # ValueError: unknown name, with a hint
        raise ValueError(f"no such profile file: {text}")
    try:
        data = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ValueError(f"cannot read profile {text}: {why}") from None
    try:
        obj = json.loads(data)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{text}: not JSON: {exc}") from None
    if isinstance(obj, dict) and obj.get("kind") == "probe" and "profile" in obj:
        if not isinstance(obj["profile"], dict):  # a probe whose arithmetic fit no profile
            raise ValueError(f"{text} is a probe record without a profile (the probed op fit "
                             f"no fused-block model)")
        obj = obj["profile"]  # a probe record (fpscope probe --record): the profile it found
    elif isinstance(obj, dict) and str(obj.get("schema", "")).startswith("fpscope.record"):
        raise ValueError(f"{text} is a {obj.get('kind', 'reveal')!r} record, not a profile: give a "
                         f"preset name, a profile JSON or a probe record")
    try:
        return Profile.from_dict(obj)
    except (ValueError, TypeError, KeyError) as exc:
        raise ValueError(f"{text}: {str(exc).splitlines()[0]}") from None
