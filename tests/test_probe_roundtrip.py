"""Round trip: every preset run as a simulated black box is probed back to an equivalent profile.

The probed profile must (1) reproduce the preset bit for bit on >= 2000 random outputs of the
validation generators and (2) agree with the preset on every parameter the probes observe.
"""

import math

import pytest

from fpscope.probes.blackbox import SimulatedTarget
from fpscope.probes.driver import probe
from fpscope.probes.validate import validate
from fpscope.profile import PRESETS


#: Block-scaled presets of the round trip (a CI-sized subset; scripts/probe_mmasim.py probes all
#: 16 mmasim models): MXFP8 (fused node, e8m0 per 32), MXFP4 kind::mxf4 (grouped node, e8m0 per
#: 32 over k = 64) and NVFP4 (grouped node, ue4m3 per 16).
SCALED = ("blackwell-tcgen05-mxfp8-e4m3", "rtx-blackwell-mxfp4", "blackwell-tcgen05-nvfp4")


def _params():
    # fp6/fp4 inputs and CDNA1's lossless blocks are probed through the rounding-pair structure
    # probe and c as the third term (tests/test_probes_narrow.py); mixed a/b presets (e4m3 x
    # e5m2, ...) form each probe product from an a value and a power of two of b's format; the
    # AMD CDNA2 "pairwise" and CDNA3 "two-stage" nodes are fitted by the node family; of the
    # block-scaled presets, SCALED (their scales are probed by the scales family, the rest at
    # unit scales, the grouped node fitted by the node family)
    return [pytest.param(name, id=name) for name, p in PRESETS.items()
            if p.scale_format is None or name in SCALED]


def _blocks(order, L, K):
    order = list(order) if order is not None else list(range(K))
    return [sorted(order[s:s + L]) for s in range(0, K, L)]


@pytest.mark.parametrize("name", _params())
def test_probe_recovers_preset(name):
    p = PRESETS[name]
    rep = probe(SimulatedTarget(p), p.in_format, p.out_format, cases=2048, seed=3)
    assert rep.profile is not None, rep.reason
    assert rep.fits, rep.reason
    v = rep.validation
    assert v["cases"] >= 2000 and v["accepted"], v["first_mismatch"]
    q = rep.profile
    found = {f.feature: f for f in rep.findings}
    # the text marks a family's value the node family replaced (the grouped node's F read at
    # unit scales, the pairwise node's), and nothing else
    replaced = {f.feature for f in rep.findings if f.fits and f.observable and rep._superseded(f)}
    assert replaced == ({"frac_bits"} if p.node in ("grouped", "pairwise") else set())
    text = rep.to_text()
    assert all(f"[replaced: the profile's {x} is {getattr(q, x)}]" in text for x in replaced)
    assert q.status == "experimental"
    assert (q.in_format, q.b_format) == (p.in_format, p.b_format)
    assert (q.block_size, q.k, q.stages) == (p.block_size, p.k, p.stages)
    assert _blocks(q.k_order, q.block_size, q.k) == _blocks(p.k_order, p.block_size, p.k)
    assert q.c_entry == p.c_entry
    assert q.frac_bits == p.frac_bits
    assert q.alignment == p.alignment
    assert tuple(q.step_rounding) == tuple(p.step_rounding)
    under = found.get("neg_underflow_sign")
    if under is not None and not under.observable:  # no sum rounds to zero (CDNA1 fp16): only
        # the -0 sum is seen, +0 under neg_zero_to_pos and under zero_sum_sign "positive" alike
        assert q.neg_zero_to_pos == (p.neg_zero_to_pos or p.zero_sum_sign == "positive")
    else:
        assert (q.neg_zero_to_pos, q.zero_sum_sign) == (p.neg_zero_to_pos, p.zero_sum_sign)
    assert q.nan_bits == p.nan_bits
    assert q.operand_conversion == p.operand_conversion
    for f in ("node", "frac_bits2", "alignment2", "product_groups", "c_drop_bits",
              "product_overflow", "input_zero_sign", "group_size", "scale_block_size"):
        assert getattr(q, f) == getattr(p, f), f
    # a node fitted to random outputs (the node family) has no per-feature findings left
    for flag in ("flush_inputs", "flush_outputs"):
        if flag not in found or found[flag].observable:
            assert getattr(q, flag) == getattr(p, flag)
    if "e_zero" not in found or found["e_zero"].observable:
        assert q.e_zero == p.e_zero
    else:
        assert q.e_zero is None and "not observable" in found["e_zero"].note
    if p.scale_format is not None:  # fixed by the target's interface: not observable
        assert q.scale_format == p.scale_format and not found["scale_format"].observable
        assert found["scale_entry"].fits and found["scale_block_size"].observable


def test_e_zero_not_observable_for_fp16_in_fp32_out():
    """NUMERICS.md: e_zero is unobservable for fp16 inputs with fp32 output."""
    rep = probe("sim:ampere-fp16", "fp16", cases=0)
    assert "e_zero" in rep.not_observable
    assert rep.profile.e_zero is None


@pytest.mark.parametrize("F", [28, 29, 30])
def test_frac_bits_below_the_smallest_fp8_product(F):
    """fp8 e4m3 products of powers of two span 2^16 .. 2^-12 (t <= 28); with c added last c
    cannot be the third term, so the low bit of a product 2^-12 + 2^(-12 - j) carries t to 31
    (F = 29 and 30 were read as lossless blocks, F = 276, before). F >= 31 is still read so:
    c added last is never cut, like c in a lossless block (a known limit)."""
    p = PRESETS["hopper-e4m3"].replace(frac_bits=F, c_entry="last", k=32)
    rep = probe(SimulatedTarget(p), "fp8_e4m3fn", "fp32", cases=0)
    (f,) = [f for f in rep.findings if f.feature == "frac_bits"]
    assert (f.value, f.observable) == (F, True), f.note
    assert rep.profile.frac_bits == F


def test_e_zero_observed_for_fp16_output():
    rep = probe("sim:ampere-fp16-fp16out", "fp16", cases=0)
    assert rep.profile.e_zero == PRESETS["ampere-fp16-fp16out"].e_zero


def test_fingerprint_lines():
    for name, value in (("volta-fp16", "0.0"), ("ampere-fp16", "-0.5"), ("hopper-fp16", "-0.75")):
        rep = probe(f"sim:{name}", "fp16", cases=0)
        assert f"-> {value}:" in rep.fingerprint


def test_evidence_is_hex():
    rep = probe("sim:turing-fp16", "fp16", cases=0)
    d = rep.to_dict()
    f = next(x for x in d["findings"] if x["feature"] == "frac_bits")
    row = f["evidence"][0]
    assert row["d"].startswith("0x") and row["products"][0]["a"].startswith("0x")
    assert len(row["products"][0]["a"]) == 6  # fp16: 4 hex digits
    assert d["profile"]["schema"] == "fpscope.profile/1"


def test_validation_rejects_a_wrong_profile_and_shrinks():
    target = SimulatedTarget(PRESETS["ampere-fp16"])
    wrong = PRESETS["ampere-fp16"].replace(frac_bits=25)
    v = validate(target, wrong, cases=2000, seed=0)
    assert not v["accepted"] and v["mismatched"] > 0
    fm = v["first_mismatch"]
    assert fm["reproducible"] and 1 <= fm["nonzero_products"] <= 4
    assert fm["got"] != fm["expected"]
    assert validate(target, PRESETS["ampere-fp16"], cases=2000, seed=0)["accepted"]


@pytest.mark.parametrize("mode", ["RNA", "RNE"])
def test_tf32_conversion_round_is_found(mode):
    """Both nearest modes are profile options; "round" is the old spelling of "RNA"."""
    p = PRESETS["ampere-tf32"].replace(operand_conversion=mode)
    rep = probe(SimulatedTarget(p), "tf32", cases=1000)
    assert rep.profile.operand_conversion == mode and rep.accepted
    assert not math.isnan(rep.seconds)
    assert PRESETS["ampere-tf32"].replace(operand_conversion="round").operand_conversion == "RNA"


@pytest.mark.parametrize("kind", ["sim", "simgemm", "mmasim"])
def test_mixed_presets_take_b_in_their_own_format(kind):
    """A mixed a/b preset's target knows B's format; asking for another one is refused in one
    line, and the same format is accepted."""
    from fpscope.probes.blackbox import ProbeError, make_matrix_target

    if kind == "mmasim":
        pytest.importorskip("mmasim")
    t = make_matrix_target(f"{kind}:ada-e4m3-e5m2", b_format="fp8_e5m2")
    assert (t.fin.name, t.fb.name, t.b_format) == ("fp8_e4m3fn", "fp8_e5m2", "fp8_e5m2")
    with pytest.raises(ProbeError, match="takes B in fp8_e5m2, not fp8_e4m3fn"):
        make_matrix_target(f"{kind}:ada-e4m3-e5m2", b_format="fp8_e4m3fn")


def test_mixed_callable_is_probed_with_b_format():
    """A callable taking e5m2 A and e4m3 B (here the Hopper wgmma arithmetic run by the
    emulator) is probed with b_format: the profile carries B's format and reproduces the op
    bit for bit."""
    from fpscope.emulate import matmul

    p = PRESETS["hopper-wgmma-e5m2-e4m3"]

    def op(A, B, C):
        return matmul(A, B, C, profile=p, engine="numpy")

    rep = probe(op, "fp8_e5m2", "fp32", k=p.k, cases=1024, b_format="fp8_e4m3fn")
    assert rep.accepted and rep.profile.b_format == "fp8_e4m3fn", rep.reason
    assert (rep.profile.block_size, rep.profile.frac_bits) == (p.block_size, p.frac_bits)


@pytest.mark.parametrize("base,step,out", [
    ("hopper-fp16-fp16out", ("e8m13", "RZ"), ("fp16", "RNE")),
    ("ada-e4m3-fp16out", ("e8m13", "RZ"), ("fp16", "RNE")),
    ("hopper-fp16-fp16out", ("fp32", "RNE"), ("fp16", "RZ")),
])
def test_output_rounding_after_wider_steps_is_found(base, step, out):
    """Steps kept in a wider accumulator and one final rounding to fp16: no single fp16 rounding
    fits the probes, the (step, output) pair is found and validates."""
    prof = PRESETS[base].replace(name="wide-steps", step_rounding=step, output_rounding=out)
    rep = probe(SimulatedTarget(prof), cases=2000)
    assert rep.accepted, rep.reason
    assert rep.profile.step_rounding == step
    assert rep.profile.output_rounding == out
    assert rep.features()["output_rounding"] == list(out)


def test_no_output_rounding_for_single_rounding_presets():
    rep = probe(SimulatedTarget(PRESETS["hopper-fp16-fp16out"]), cases=500)
    assert rep.profile.output_rounding is None and "output_rounding" not in rep.features()


def test_block_scaled_gemm_is_refused():
    """A block-scaled preset is probed one instruction per call (sim:, with scales); as a GEMM
    of any K (simgemm:) or with the library level it is refused in one line."""
    from fpscope.probes.blackbox import ProbeError, make_matrix_target

    for name in ("blackwell-tcgen05-mxfp8-e4m3", "rtx-blackwell-nvfp4"):
        t = make_matrix_target(f"sim:{name}")
        assert t.scaled and t.scale_format == PRESETS[name].scale_format
        with pytest.raises(ProbeError, match="block-scaled .* use sim:") as exc:
            make_matrix_target(f"simgemm:{name}")
        assert "\n" not in str(exc.value)
        with pytest.raises(ProbeError, match="block-scaled: the library level"):
            probe(t, library_k=256, cases=0)




def test_no_node_fits_gives_the_nearest_profile_and_the_samples_it_misses():
    """An op that is cdna3-fp16 but for one quirk no profile expresses (the output's last bit
    cleared when c > 2^100): no node fits, the report keeps no profile, names the nearest
    (cdna3-fp16's node arithmetic) and lists as evidence samples the nearest misses, each with
    what it gives; a sample it reproduces is never listed."""
    import numpy as np

    from fpscope.emulate.vectorized import matmul
    from fpscope.probes.blackbox import CallableTarget, hex_out
    from fpscope.profile import Profile

    prof = PRESETS["cdna3-fp16"]

    def quirk(A, B, C):
        D = matmul(A, B, C, profile=prof).astype(np.float32)
        cut = D.view(np.uint32) & np.uint32(0xFFFFFFFE)
        return np.where(C > 2.0**100, cut.view(np.float32), D).astype(np.float64)

    target = CallableTarget(quirk, "fp16", "fp32", name="quirk", k=prof.k)
    rep = probe(target, cases=512)
    assert not rep.fits and rep.profile is None and rep.validation is None
    near = rep.nearest
    fields = ("node", "block_size", "frac_bits", "frac_bits2", "alignment", "alignment2",
              "product_groups", "c_drop_bits", "step_rounding")
    assert {f: getattr(near, f) for f in fields} == {f: getattr(prof, f) for f in fields}
    node = next(f for f in rep.findings if f.feature == "node")
    assert not node.fits and node.evidence
    for e in node.evidence:
        a, b = np.zeros(prof.k), np.zeros(prof.k)
        for q in e["products"]:
            a[q["k"]] = _value(q["a"], np.float16)
            b[q["k"]] = _value(q["b"], np.float16)
        c = np.array([[_value(e["c"], np.float32)]])
        d = quirk(a[None], b[:, None], c)
        gives = matmul(a[None], b[:, None], c, profile=near)
        assert e["d"] == hex_out(d.ravel(), target)[0]
        assert e["meaning"] == f"the nearest profile gives {hex_out(gives.ravel(), target)[0]}"
        assert c[0, 0] > 2.0**100 and e["d"] != hex_out(gives.ravel(), target)[0]
    text = rep.to_text()
    assert "nearest (NOT reproducing" in text and "first sample it misses" in text
    assert Profile.from_dict(rep.to_dict()["nearest"]).to_dict() == near.to_dict()
    from fpscope.report_probe import probe_page

    page = probe_page(rep.to_dict())
    assert "Nearest profile" in page and node.evidence[0]["meaning"] in page


def _value(hex_word: str, dtype):
    """The value of a report's hex word of ``dtype``'s width (e.g. "0x3c00" as float16)."""
    import numpy as np

    word = int(hex_word, 16)
    return float(np.array([word], dtype=f"u{np.dtype(dtype).itemsize}").view(dtype)[0])
