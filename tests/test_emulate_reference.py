"""Hand-made cases with known answers for the reference engine and the Profile schema."""

import json
import math

import pytest

from fpscope.emulate import fdpa, output_bits
from fpscope.profile import PRESETS, SCHEMA, Profile, get_profile


def pad(xs, k):
    return list(xs) + [0.0] * (k - len(xs))


def run(name_or_profile, a, b, c):
    p = get_profile(name_or_profile) if isinstance(name_or_profile, str) else name_or_profile
    return fdpa(pad(a, p.k), pad(b, p.k), c, p)


# -- NUMERICS.md one-shot fingerprint ---------------------------------------------------------

FP_A = [-2.0**13, -0.5, -0.25, -0.125]
FP_B = [2.0**10, 1.0, 1.0, 1.0]
FINGERPRINT = {
    "volta-fp16": 0.0, "turing-fp16": -0.5, "ampere-fp16": -0.5, "ada-fp16": -0.5,
    "ampere-bf16": -0.5, "ada-bf16": -0.5, "hopper-fp16": -0.75, "hopper-bf16": -0.75,
    # AMD CDNA2 (pairwise fp32 RNE): -2^23 - 0.5 is a tie, to even -2^23; with P = 4 the pair
    # (-0.25 - 0.125) is then lost against it, with P = 2 it is the next group's sum
    "cdna2-fp16": 0.0, "cdna2-bf16-1k": 0.0, "cdna2-bf16": -0.375,
    # AMD CDNA3 (two-stage): products truncated at 2^(23 - 24): -0.25 and -0.125 are cut
    "cdna3-fp16": -0.5, "cdna3-bf16": -0.5,
}


@pytest.mark.parametrize("name", sorted(FINGERPRINT))
def test_fingerprint(name):
    d = run(name, FP_A, FP_B, 2.0**23)
    assert d == FINGERPRINT[name]
    if d == 0:
        assert math.copysign(1.0, d) > 0  # the Volta 0 is +0


# -- cases/README.md C9: the 13-bit fp8 accumulator --------------------------------------------

@pytest.mark.parametrize("name", ["ada-e4m3", "hopper-e4m3", "ada-e5m2", "hopper-e5m2"])
def test_c9a_zero_products_keep_13_bits_of_c(name):
    c = 1.0 + 2.0**-20
    assert run(name, [], [], c) == 1.0
    wide = get_profile(name).replace(frac_bits=25, step_rounding=("fp32", "RZ"))
    assert run(wide, [], [], c) == c


@pytest.mark.parametrize("name", ["ada-e4m3", "hopper-e4m3"])
def test_c9b_small_product_below_the_window(name):
    a, b = [448.0, 2.0**-6], [1.0, 2.0**-3]
    assert run(name, a, b, 0.0) == 448.0
    wide = get_profile(name).replace(frac_bits=25, step_rounding=("fp32", "RZ"))
    assert run(wide, a, b, 0.0) == 448.001953125


# -- chaining, alignment, operands ----------------------------------------------------------

def test_chained_blocks_round_between_steps():
    # block 1: 2^24 + 1 -> RZ-fp32 2^24; block 2: 2^24 + 1 -> 2^24. One block of 16: 2^24 + 2.
    a = [2.0**12, 1.0] + [0.0] * 6 + [1.0] + [0.0] * 7
    b = [2.0**12, 1.0] + [0.0] * 6 + [1.0] + [0.0] * 7
    ampere = get_profile("ampere-fp16")
    assert fdpa(a, b, 0.0, ampere) == 2.0**24
    assert fdpa(a, b, 0.0, ampere.replace(block_size=16)) == 2.0**24 + 2


def test_alignment_modes():
    # Hopper window at 2^(23-25) = 0.25: -0.125 is cut to 0 (truncate) or -0.25 (floor);
    # -0.375 = -1.5 quanta goes to -2 quanta under nearest-even. fp32 ulp below 2^23 is 0.5.
    p = get_profile("hopper-fp16")
    a, b, c = [-0.125], [1.0], 2.0**23
    assert run(p, a, b, c) == 2.0**23
    assert run(p.replace(alignment="floor"), a, b, c) == 2.0**23 - 0.5  # RZ of 2^23 - 0.25
    assert run(p, [-0.375], [1.0], c) == 2.0**23 - 0.5  # truncate: -0.25, RZ
    assert run(p.replace(alignment="nearest"), [-0.375], [1.0], c) == 2.0**23 - 0.5  # -0.5
    assert run(p.replace(alignment="nearest"), [-0.625], [1.0], c) == 2.0**23 - 0.5  # -2.5 -> -2


def test_tf32_operand_conversion():
    p = get_profile("ampere-tf32")
    assert p.operand_conversion == "truncate"
    assert run(p, [1024.5], [1.0], 0.0) == 1024.0
    assert run(p.replace(operand_conversion="round"), [1024.5], [1.0], 0.0) == 1025.0


def _f32(*words):
    import numpy as np

    return list(np.array(words, dtype=np.uint32).view(np.float32))


def test_tf32_truncation_reads_the_fp32_word():
    """"truncate" clears the 13 low bits of a float32 operand's word: a signalling NaN whose
    payload lies only there is +-Inf (as mmasim's ``truncate_fp32_to_tf32``); a NaN with a
    payload bit above them, and every float64 NaN (quiet), stays NaN; "round" keeps NaN."""
    p = get_profile("hopper-tf32")
    one = _f32(0x3F800000)
    assert run(p, _f32(0x7F801AA7), one, 0.0) == math.inf
    assert run(p, _f32(0xFF800001), one, 0.0) == -math.inf
    assert math.isnan(run(p, _f32(0x7F802000), one, 0.0))  # payload bit 13: kept
    assert math.isnan(run(p, _f32(0x7FC00000), one, 0.0))
    assert math.isnan(run(p, [math.nan], [1.0], 0.0))
    assert math.isnan(run(p.replace(operand_conversion="round"), _f32(0x7F801AA7), one, 0.0))
    assert run(p, _f32(0x44801000), one, 0.0) == 1024.0  # 1024.5 as a word: truncated


def test_subnormal_inputs():
    assert run("ampere-fp16", [2.0**-24], [1.0], 0.0) == 2.0**-24  # fp16 subnormal operand
    assert run("ampere-bf16", [2.0**-126], [2.0**-10], 0.0) == 2.0**-136  # fp32 subnormal d
    flushing = get_profile("ampere-fp16").replace(flush_inputs=True)
    assert run(flushing, [2.0**-24], [1.0], 0.0) == 0.0


def test_not_representable_input_is_refused():
    with pytest.raises(ValueError):
        run("ampere-fp16", [1.0 + 2.0**-12], [1.0], 0.0)


# -- special values ---------------------------------------------------------------------------

@pytest.mark.parametrize("a,b,c", [
    ([math.inf], [0.0], 0.0),                    # Inf * 0
    ([math.inf, math.inf], [1.0, -1.0], 0.0),    # Inf - Inf
    ([math.inf], [1.0], -math.inf),              # Inf - Inf through c
    ([math.nan], [1.0], 0.0),                    # NaN operand
    ([1.0], [1.0], math.nan),                    # NaN c
])
def test_nan_results(a, b, c):
    p = get_profile("ampere-bf16")
    d = run(p, a, b, c)
    assert math.isnan(d)
    assert output_bits(d, p) == 0x7FFFFFFF


def test_infinities_propagate():
    assert run("ampere-bf16", [-math.inf, 2.0], [2.0, 1.0], 1.0) == -math.inf
    p = get_profile("ampere-fp16-fp16out")
    d = run(p, [1.0], [math.inf], 0.0)
    assert d == math.inf and output_bits(d, p) == 0x7C00
    assert output_bits(run(p, [math.inf], [0.0], 0.0), p) == 0x7FFF


def test_negative_zero_becomes_positive_zero():
    for name in ("ampere-fp16", "hopper-e4m3", "volta-fp16-fp16out"):
        p = get_profile(name)
        d = run(p, [-0.0], [1.0], -0.0)
        assert d == 0 and output_bits(d, p) == 0
        d = run(p, [1.0, -1.0], [1.0, 1.0], -0.0)  # exact cancellation
        assert output_bits(d, p) == 0


def test_overflow_is_inf_even_under_rz():
    big = 2.0**127
    d = run("ampere-bf16", [big, big], [1.5, 1.5], 0.0)
    assert d == math.inf
    assert run("ampere-bf16", [big, big], [-1.5, -1.5], 0.0) == -math.inf
    # below 2^128 RZ stays finite: 2^127 * 1.9921875 truncates to a finite fp32
    assert math.isfinite(run("ampere-bf16", [big], [1.9921875], 0.0))
    # fp16 output, RNE: 65504 + 16 rounds to Inf
    assert run("ampere-fp16-fp16out", [65504.0, 16.0], [1.0, 1.0], 0.0) == math.inf


# -- Profile schema ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(PRESETS))
def test_profile_json_round_trip(name):
    p = PRESETS[name]
    text = p.to_json()
    assert json.loads(text)["schema"] == SCHEMA
    assert Profile.from_json(text) == p


def test_profile_refuses_unknown_schema_and_fields():
    d = json.loads(PRESETS["ampere-fp16"].to_json())
    with pytest.raises(ValueError, match="schema"):
        Profile.from_json(json.dumps({**d, "schema": "fpscope.profile/2"}))
    with pytest.raises(ValueError, match="schema"):
        Profile.from_json(json.dumps({k: v for k, v in d.items() if k != "schema"}))
    with pytest.raises(ValueError, match="unknown profile fields"):
        Profile.from_json(json.dumps({**d, "carry_bits": 3}))
    with pytest.raises(ValueError):
        Profile.from_json(json.dumps({**d, "alignment": "sideways"}))
    with pytest.raises(ValueError):
        Profile.from_json(json.dumps({**d, "k": 12}))  # not a multiple of block_size 8
    with pytest.raises(ValueError):
        Profile.from_json(json.dumps({**d, "step_rounding": ["fp32", "RX"]}))
    with pytest.raises(ValueError):
        Profile.from_json("not json")


def test_presets_cover_the_brief():
    for name in ("volta-fp16", "volta-fp16-fp16out", "turing-fp16", "ampere-fp16", "ampere-bf16",
                 "ampere-tf32", "ada-fp16", "ada-bf16", "ada-tf32", "ada-e4m3", "ada-e5m2",
                 "hopper-fp16", "hopper-bf16", "hopper-tf32", "hopper-e4m3", "hopper-e5m2"):
        assert name in PRESETS
    for p in PRESETS.values():
        assert (p.status == "validated") == bool(p.evidence)


# -- mixed a/b input formats (b_format) ----------------------------------------------------------

#: A profile as fpscope wrote it before b_format existed (no "b_format" key).
OLD_PROFILE_JSON = """{
  "schema": "fpscope.profile/1", "name": "ada-e4m3", "arch": "ada",
  "in_format": "fp8_e4m3fn", "out_format": "fp32", "block_size": 16, "k": 32, "frac_bits": 13,
  "alignment": "truncate", "e_zero": -132, "step_rounding": ["e8m13", "RZ"],
  "output_rounding": null, "flush_inputs": false, "flush_outputs": false,
  "nan_bits": 2147483647, "neg_zero_to_pos": true, "operand_conversion": null, "k_order": null,
  "c_entry": "first", "split_k": 1, "split_k_order": "serial", "split_k_format": null,
  "promotion_interval": null, "status": "validated", "evidence": "hw-vectors Ada/E4M3 d_fp32: 5000/5000"
}"""


def test_old_profile_json_without_b_format_loads():
    p = Profile.from_json(OLD_PROFILE_JSON)
    assert p.b_format is None and p.operand_formats == ("fp8_e4m3fn", "fp8_e4m3fn")
    assert p == PRESETS["ada-e4m3"]
    assert json.loads(p.to_json())["b_format"] is None  # written back with the field
    # nor the node fields (AMD CDNA2 / CDNA3): a fused node with their defaults
    assert (p.node, p.frac_bits2, p.alignment2, p.product_groups, p.c_drop_bits,
            p.product_overflow, p.input_zero_sign) == ("fused", None, None, 1, None, None, "keep")


def test_mixed_profile_json_round_trip():
    p = PRESETS["blackwell-tcgen05-e4m3-e2m1"]
    d = json.loads(p.to_json())
    assert (d["in_format"], d["b_format"]) == ("fp8_e4m3fn", "fp4_e2m1")
    q = Profile.from_json(p.to_json())
    assert q == p and q.operand_formats == ("fp8_e4m3fn", "fp4_e2m1") and q.b_format is not None
    assert Profile.from_dict({**d, "b_format": None}) == PRESETS["blackwell-tcgen05-e4m3"].replace(
        name=p.name)


def test_b_format_is_validated_and_normalised():
    base = PRESETS["ada-e4m3"]
    with pytest.raises(ValueError, match="unknown format 'fp7'"):
        base.replace(b_format="fp7")
    with pytest.raises(ValueError, match="b_format must be"):
        base.replace(b_format=5)
    d = json.loads(base.to_json())
    with pytest.raises(ValueError, match="unknown format"):
        Profile.from_json(json.dumps({**d, "b_format": "e5m3"}))
    same = base.replace(b_format="fp8_e4m3fn")  # b's format named although it is a's
    assert same.b_format is None and same == base
    assert base.replace(b_format="fp8_e5m2").operand_formats == ("fp8_e4m3fn", "fp8_e5m2")


def test_mixed_presets_follow_their_same_format_preset():
    """Each mixed preset is the preset of its a type, same instruction and output, with b's
    format changed (mmasim builds mixed kinds with the same F, L, rounding, e_zero)."""
    short = {"fp8_e4m3fn": "e4m3", "fp8_e5m2": "e5m2", "fp6_e3m2": "e3m2", "fp6_e2m3": "e2m3",
             "fp4_e2m1": "e2m1", "fp8_e4m3fnuz": "fp8", "fp8_e5m2fnuz": "bf8"}  # AMD: fnuz
    mixed = [p for p in PRESETS.values() if p.b_format is not None]
    assert 8 <= len(mixed) <= 18  # a representative set (two of them block-scaled)
    for p in mixed:
        a, b = short[p.in_format], short[p.b_format]
        assert f"-{a}-{b}" in p.name and p.status == "experimental" and not p.evidence
        base = PRESETS[p.name.replace(f"-{a}-{b}", f"-{a}")]
        assert p == base.replace(name=p.name, b_format=p.b_format, status="experimental",
                                 evidence=""), p.name


def test_mixed_reference_known_answers():
    """a and b decoded each in its format: e5m2's subnormal 2^-16 times e4m3's 448; fp4's
    subnormal 0.5 times fp6 e3m2's 28 (its max)."""
    p = get_profile("ada-e4m3-e5m2")
    assert run(p, [448.0], [2.0**-16], 0.0) == 448.0 * 2.0**-16
    with pytest.raises(ValueError, match="not representable in fp8_e5m2"):
        run(p, [1.0], [1.125], 0.0)  # an e4m3 value as b
    with pytest.raises(ValueError, match="not representable in fp8_e4m3fn"):
        run(p, [2.0**-16], [1.0], 0.0)  # an e5m2 value as a
    q = get_profile("blackwell-tcgen05-e3m2-e2m3").replace(b_format="fp4_e2m1")
    assert run(q, [28.0, 2.0**-4], [0.5, 6.0], 0.0) == 14.0 + 0.375


# -- AMD CDNA2 "pairwise" and CDNA3 "two-stage" nodes ------------------------------------------

def test_node_profile_json_round_trip_and_fields():
    for name in ("cdna2-bf16", "cdna3-xf32", "cdna3-fp8-bf8"):
        p = PRESETS[name]
        d = json.loads(p.to_json())
        assert d["node"] == p.node and Profile.from_dict(d) == p
    d = json.loads(PRESETS["cdna3-fp8"].to_json())
    assert (d["node"], d["frac_bits"], d["frac_bits2"], d["alignment2"], d["product_groups"],
            d["c_drop_bits"], d["product_overflow"]) == ("two-stage", 24, 31, "floor", 2, 25, None)
    d = json.loads(PRESETS["cdna2-fp16"].to_json())
    assert (d["node"], d["block_size"], d["input_zero_sign"], d["flush_inputs"],
            d["flush_outputs"], d["step_rounding"]) == ("pairwise", 4, "positive", True, True,
                                                        ["fp32", "RNE"])


@pytest.mark.parametrize("base, change, match", [
    ("cdna3-fp16", {"node": "tree"}, "unknown node 'tree'"),
    ("cdna3-fp16", {"frac_bits2": None}, "needs frac_bits2"),
    ("cdna3-fp16", {"frac_bits2": -1}, "needs frac_bits2"),
    ("cdna3-fp16", {"frac_bits2": 22}, r"F \(24\) must not exceed F2 \+ 1 \(23\)"),
    ("cdna3-fp16", {"alignment2": None}, "needs alignment2"),
    ("cdna3-fp16", {"alignment2": "up"}, "needs alignment2"),
    ("cdna3-fp16", {"product_groups": 3}, r"product_groups \(3\) must divide block_size"),
    ("cdna3-fp16", {"product_groups": 0}, "positive integer"),
    ("cdna3-fp16", {"c_drop_bits": -1}, "c_drop_bits must be"),
    ("cdna3-fp16", {"product_overflow": "fp33"}, "unknown format"),
    ("cdna3-fp16", {"c_entry": "last"}, "fused node only"),
    ("cdna3-fp16", {"input_zero_sign": "negative"}, "unknown input_zero_sign"),
    ("cdna1-fp16", {"zero_sum_sign": "negative"}, "unknown zero_sum_sign"),
    ("cdna2-fp16", {"zero_sum_sign": "positive"}, "fused node only"),
    ("ampere-fp16", {"frac_bits2": 31}, "two-stage node only"),
    ("ampere-fp16", {"alignment2": "floor"}, "two-stage node only"),
    ("ampere-fp16", {"product_groups": 2}, "two-stage node only"),
    ("ampere-fp16", {"c_drop_bits": 25}, "two-stage node only"),
    ("cdna2-fp16", {"block_size": 6, "k": 24}, "power of two"),
    ("cdna2-fp16", {"e_zero": -126}, "e_zero must be None"),
    ("cdna2-fp16", {"product_overflow": "fp32"}, "product_overflow must be None"),
])
def test_node_fields_are_validated(base, change, match):
    with pytest.raises(ValueError, match=match):
        PRESETS[base].replace(**change)
    d = json.loads(PRESETS[base].to_json())  # the same through JSON, one line
    with pytest.raises(ValueError, match=match) as info:
        Profile.from_json(json.dumps({**d, **change}))
    assert "\n" not in str(info.value)


def test_product_overflow_and_zero_sign_on_the_fused_node():
    """The two general fields also apply to the fused node: products of 2^128 overflow to
    +-Inf (then Inf - Inf = NaN), and zeros read as +0 change the sign of a zero sum."""
    base = PRESETS["ampere-bf16"]
    big = [2.0**127, 2.0**127]
    assert run(base, big, [2.0, -2.0], 0.0) == 0.0
    assert math.isnan(run(base.replace(product_overflow="fp32"), big, [2.0, -2.0], 0.0))
    assert run(base.replace(product_overflow="fp32"), big[:1], [2.0], 0.0) == math.inf
    keep = base.replace(neg_zero_to_pos=False)
    d = fdpa([-0.0] * 16, [1.0] * 16, -0.0, keep)
    assert d == 0 and math.copysign(1.0, d) < 0
    d = fdpa([-0.0] * 16, [1.0] * 16, -0.0, keep.replace(input_zero_sign="positive"))
    assert d == 0 and math.copysign(1.0, d) > 0
    d = fdpa([-0.0] * 16, [-1.0] * 16, 0.0, keep.replace(input_zero_sign="positive"))
    assert d == 0 and math.copysign(1.0, d) > 0  # +0 * -1 = -0, but c is +0


def test_zero_sum_sign():
    """zero_sum_sign "positive" (the CDNA1 presets, mmasim ``e_fdpa``): an exact zero sum is +0,
    -0 terms and chained -0 results included, while a sum that rounds to zero keeps its sign;
    "ieee" gives -0 where every term is -0, e_zero set or not (so that an e_zero below every
    term's exponent changes nothing, ``Profile.e_zero_inert``). Both ignored where
    neg_zero_to_pos is True."""
    p = PRESETS["cdna1-bf16"]
    assert (p.zero_sum_sign, p.neg_zero_to_pos) == ("positive", False)
    ieee = p.replace(zero_sum_sign="ieee")
    tiny = [0.0] * 7 + [2.0**-80], [0.0] * 7 + [-(2.0**-80)]  # -2^-160 in the last block

    def sign(d):
        assert d == 0
        return "-" if math.copysign(1.0, d) < 0 else "+"

    for q, want in ((p, "+-++"), (ieee, "--++"), (p.replace(neg_zero_to_pos=True), "++++")):
        got = [fdpa([-0.0] * 8, [1.0] * 8, -0.0, q),  # -0 products and c
               fdpa(*tiny, 0.0, q),  # rounds to -0
               fdpa([-0.0] * 8, [1.0] * 8, 0.0, q.replace(e_zero=-300)),  # -0 products, +0 c
               fdpa([1.0, -1.0] + [0.0] * 6, [1.0] * 8, -0.0, q)]  # cancellation
        assert "".join(sign(d) for d in got) == want, q
    # zero products and a zero c, e_zero None or set: -0 only where every term is -0
    for q in (ieee, ieee.replace(e_zero=-300)):
        assert [sign(fdpa([x] * 8, [1.0] * 8, c, q)) for x, c in
                ((-0.0, 0.0), (0.0, -0.0), (-0.0, -0.0))] == ["+", "+", "-"], q.e_zero
        assert sign(fdpa([0.0] * 8, [1.0] * 8, -0.0, p)) == "+"
    d = json.loads(p.to_json())
    assert d["zero_sum_sign"] == "positive"
    del d["zero_sum_sign"]  # profile JSON written before the field: IEEE's rule
    assert Profile.from_dict(d).zero_sum_sign == "ieee"


def test_pairwise_rounds_every_product_and_pair():
    """CDNA2 fp16, P = 4: 1 + 2^-24 (a tie) rounds to 1 before the other 2^-24 is added; the
    exact CDNA1 block keeps both."""
    a, b = [1.0, 2.0**-12, 2.0**-12], [1.0, 2.0**-12, 2.0**-12]
    assert run("cdna2-fp16", a, b, 0.0) == 1.0
    assert run("cdna1-fp16", a, b, 0.0) == 1.0 + 2.0**-23
    # c added last: c + (p0 + p1) with p0 + p1 = 2^-23 exactly
    assert run("cdna2-fp16", [2.0**-12, 2.0**-12], [2.0**-12, 2.0**-12], 1.0) == 1.0 + 2.0**-23
    # flushes: a subnormal input is +0 (and Inf * it is NaN); a product below 2^-126 is a zero
    assert run("cdna2-fp16", [2.0**-20], [2.0**10], 0.0) == 0.0
    assert math.isnan(run("cdna2-fp16", [2.0**-20], [math.inf], 0.0))
    d = run("cdna2-bf16", [2.0**-70], [-(2.0**-60)], 0.0)
    assert d == 0 and math.copysign(1.0, d) > 0  # -0 product + c (+0) = +0
    # a negative sum flushed to -0 stays -0 while later sums add -0 products
    d = fdpa([2.0**-63, 0.0] + [0.0] * 6, [-1.75 * 2.0**-63, 1.0] + [-1.0] * 6,
             1.5 * 2.0**-126, PRESETS["cdna2-bf16"])
    assert d == 0 and math.copysign(1.0, d) < 0
    assert output_bits(d, PRESETS["cdna2-bf16"]) == 0x80000000


def test_two_stage_known_answers():
    """CDNA3: stage 3 keeps F2 = 31 fraction bits below 1 (2^-31 breaks the RNE tie at 2^-24,
    2^-32 does not); the dot is floored (a tiny negative product makes a tie); fp8 c far below
    the products is dropped; fp8 even / odd products are summed apart."""
    p = PRESETS["cdna3-fp16"]
    assert run(p, [2.0**-12, 2.0**-16], [2.0**-12, 2.0**-15], 1.0) == 1.0 + 2.0**-23
    assert run(p, [2.0**-12, 2.0**-16], [2.0**-12, 2.0**-16], 1.0) == 1.0
    c = -(1.0 + 2.0**-23)
    assert run(p, [-(2.0**-12), 2.0**-20], [2.0**-12, 2.0**-20], c) == -(1.0 + 2.0**-22)
    assert run(p.replace(alignment2="truncate"), [-(2.0**-12), 2.0**-20], [2.0**-12, 2.0**-20],
               c) == c
    # c = -2^-30 against a product 1: floored to -2^-24 (fp16), dropped (fp8: c_drop_bits 25)
    assert run(p, [1.0], [1.0], -(2.0**-30)) == 1.0 - 2.0**-24
    assert run("cdna3-fp8", [1.0], [1.0], -(2.0**-30)) == 1.0
    # 32 + (-1.5 * 2^-15 * ...): one group truncates the small odd product at 2^(10 - 24) to 0,
    # two groups floor its group sum to -2^-14
    a, b = [32.0, -1.5 * 2.0**-8], [32.0, 2.0**-7]
    assert run(p, a, b, 0.0) == 1024.0
    assert run("cdna3-fp8", a, b, 0.0) == 1024.0 - 2.0**-14
    # bf16 products of 2^128 overflow (mmasim tr_fdpa): Inf - Inf = NaN
    assert math.isnan(run("cdna3-bf16", [2.0**127, 2.0**127], [2.0, -2.0], 0.0))
    # an exact zero is +0; a tiny negative sum rounds to -0 (neg_zero_to_pos False)
    d = run("cdna3-bf16", [-0.0, 1.0], [1.0, 1.0], -1.0)
    assert d == 0 and math.copysign(1.0, d) > 0
    from fpscope.emulate.reference import two_stage_block

    p = PRESETS["cdna3-bf16"]
    d = two_stage_block([-(2.0**-133)] + [0.0] * 7, [2.0**-30] + [0.0] * 7, 0.0, p)
    assert d == 0 and math.copysign(1.0, d) < 0  # -2^-163 floored to -2^-157, rounded to -0
    d = run(p, [-(2.0**-133)], [2.0**-30], 0.0)  # the second block: +0 (zero products) + -0
    assert d == 0 and math.copysign(1.0, d) > 0
