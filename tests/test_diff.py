"""fpscope diff: trees (reveal records) and profiles."""

import json

import numpy as np
import pytest

from fpscope.arithmetic import Arithmetic
from fpscope.cli import main
from fpscope.diff import DiffError, Side, diff, diff_profiles, diff_trees
from fpscope.formats import FP32, FP64
from fpscope.profile import get_profile
from fpscope.record import new_record, write_record
from fpscope.replay import replay
from fpscope.tree import SumTree


def _uni(tree, fmt, out=None):
    return Arithmetic.uniform(tree.n_nodes, fmt.name, (out or fmt).name)


def _record(path, tree, acc="fp32"):
    rec = new_record("reveal", target={"name": "simulated.sum", "n": tree.n, "dtype": "fp32"},
                     tree=tree.to_json(), probe={}, accumulator={"format": acc})
    write_record(rec, path)
    return str(path)


def test_identical_trees_and_records(tmp_path):
    t = SumTree.pairwise(32)
    res = diff(_record(tmp_path / "a.json", t), _record(tmp_path / "b.json", t))
    assert res.same and res.verdict == "identical"


def test_different_trees_give_subtree_and_a_checked_witness():
    a = Side("a", tree=SumTree.sequential(16), arith=_uni(SumTree.sequential(16), FP32))
    b = Side("b", tree=SumTree.pairwise(16), arith=_uni(SumTree.pairwise(16), FP32))
    res = diff_trees(a, b)
    assert res.verdict == "different tree" and not res.same
    # the smallest node one tree has and the other lacks: (2+3) of the pairwise tree
    assert sorted(res.subtree["leaves"]) == [2, 3]
    w = res.witness["input"]
    x = np.full(16, w["u"])
    x[w["i"]], x[w["j"]] = w["M"], -w["M"]
    assert replay(a.tree, x, FP32) != replay(b.tree, x, FP32)


def test_witness_outputs_are_in_the_ops_output_format():
    """A record's tree accumulating in fp64 for an fp32 op (OpenBLAS sdot): the witness is
    replayed to the op's output format and printed as fp32 bits, not the accumulator's."""
    a = Side("a", tree=SumTree.sequential(16), arith=_uni(SumTree.sequential(16), FP64, FP32))
    b = Side("b", tree=SumTree.pairwise(16), arith=_uni(SumTree.pairwise(16), FP64, FP32))
    res = diff_trees(a, b)
    assert res.witness is not None
    for side in ("a", "b"):
        bits = res.witness[side].split()[0]
        assert len(bits) == 2 + 8, res.witness  # "0x" and eight hex digits



def test_smallest_subtree_is_local():
    """Trees that differ only in the last four leaves report a 4-leaf subtree or smaller."""
    left = SumTree.pairwise(8).to_nested()
    a = Side("a", tree=SumTree([left, [[8, 9], [10, 11]]]), arith=_uni(SumTree([left, [[8, 9], [10, 11]]]), FP32))
    b = Side("b", tree=SumTree([left, [[[8, 9], 10], 11]]), arith=_uni(SumTree([left, [[[8, 9], 10], 11]]), FP32))
    res = diff_trees(a, b)
    assert set(res.subtree["leaves"]) <= {8, 9, 10, 11}
    assert res.witness is not None


def test_same_tree_other_accumulator():
    t = SumTree.sequential(40)
    res = diff_trees(Side("a", tree=t, arith=_uni(t, FP32)), Side("b", tree=t, arith=_uni(t, FP64, FP32)))
    assert res.verdict == "same tree, different node arithmetic"
    assert res.parameter == {"name": "accumulator", "a": "fp32", "b": "fp64"}
    assert res.witness is not None and res.witness["a"] != res.witness["b"]


def test_profiles():
    same = diff_profiles(get_profile("ampere-fp16"), get_profile("ada-fp16"))
    assert same.same and same.verdict == "same arithmetic"
    res = diff_profiles(get_profile("ampere-fp16"), get_profile("hopper-fp16"), cases=1024)
    assert not res.same and res.parameter["name"] == "block_size"
    assert res.witness and res.witness["a"] != res.witness["b"]
    other_k = diff_profiles(get_profile("volta-fp16"), get_profile("ampere-fp16"), cases=1024)
    assert other_k.witness and "K = 16" in other_k.witness["how"]
    fmts = diff_profiles(get_profile("ampere-fp16"), get_profile("ampere-bf16"))
    assert fmts.witness is None and any("formats" in n for n in fmts.notes)
    # another node kind (AMD CDNA3's two-stage) is named first, and a witness separates them
    amd = diff_profiles(get_profile("cdna3-fp16"), get_profile("ampere-fp16"), cases=1024)
    assert amd.parameter == {"name": "node", "a": "two-stage", "b": "fused"}
    assert amd.witness and amd.witness["a"] != amd.witness["b"]


def test_cli_exit_codes(tmp_path, capsys):
    t = SumTree.sequential(8)
    a = _record(tmp_path / "a.json", t)
    b = _record(tmp_path / "b.json", SumTree.pairwise(8))
    assert main(["diff", a, a]) == 0
    assert main(["diff", a, b]) == 1
    capsys.readouterr()
    assert main(["diff", a, b, "--format", "json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["verdict"] == "different tree" and data["witness"]
    (tmp_path / "bad.json").write_text("{not json")
    for args in ([a, "hopper-fp16"], [a, str(tmp_path / "missing.json")],
                 [a, str(tmp_path / "bad.json")], ["hopper-fp16", "no-such-preset"]):
        assert main(["diff", *args]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1, err


def test_tree_and_profile_cannot_be_compared(tmp_path):
    with pytest.raises(DiffError, match="cannot compare"):
        diff(_record(tmp_path / "a.json", SumTree.sequential(4)), "ampere-fp16")


def test_mixed_input_profiles_get_a_witness():
    """Two e4m3 x e5m2 profiles that differ in F: the witness search draws A in e4m3 and B in
    e5m2, and the witness shows B's bits in B's format (one byte each)."""
    a = get_profile("ada-e4m3-e5m2")
    b = a.replace(name="ada-e4m3-e5m2-f12", frac_bits=12)
    res = diff_profiles(a, b, cases=2048)
    assert not res.same and res.parameter["name"] == "frac_bits"
    assert res.witness and res.witness["a"] != res.witness["b"]
    for p in res.witness["input"]["products"]:
        assert len(p["a"]) == len(p["b"]) == 4  # "0xNN": one fp8 byte each


def test_block_scaled_profiles_get_a_witness_with_scales():
    """Block-scaled profiles of one scale format, scale block size and k are compared on random
    block scales (validate draws them): the witness names the scales and the two outputs
    differ. Different scale formats have no common input: a note, no witness."""
    nv = get_profile("rtx-blackwell-nvfp4")
    res = diff_profiles(nv, nv.replace(frac_bits=20), cases=2048)
    assert not res.same and res.parameter["name"] == "frac_bits"
    assert res.witness and res.witness["a"] != res.witness["b"]
    assert {"scale_a", "scale_b"} <= set(res.witness["input"])
    mx = get_profile("rtx-blackwell-mxfp8-e4m3")
    res = diff_profiles(mx, mx.replace(frac_bits=mx.frac_bits - 2), cases=2048)
    assert res.parameter["name"] == "frac_bits" and res.witness
    res = diff_profiles(mx, get_profile("rtx-blackwell-e4m3"), cases=256)
    assert res.parameter["name"] == "scale_format" and res.witness is None
    assert any("different block scales" in n for n in res.notes)
    assert diff_profiles(nv, nv).same


def test_inert_e_zero_is_no_difference_and_nan_bits_get_a_witness():
    """An e_zero that cannot decide any e_max (Profile.e_zero_inert: what a probe reports as
    not observable, None) is no difference, with a note; a difference in nan_bits, which random
    inputs compare as equal NaNs, gets a NaN-c witness with each profile's pattern."""
    p = get_profile("hopper-fp16")
    res = diff_profiles(p.replace(e_zero=None, name="probed"), p, cases=256)
    assert res.same and any("cannot decide any e_max" in n for n in res.notes)
    bf = get_profile("hopper-bf16")  # bf16 products reach below -133: a real difference
    res = diff_profiles(bf.replace(e_zero=None, name="probed"), bf, cases=256)
    assert not res.same and res.parameter["name"] == "e_zero"
    res = diff_profiles(p.replace(nan_bits=0x7FC00000, name="torch"), p, cases=256)
    assert not res.same and res.parameter == {"name": "nan_bits", "a": "0x7fc00000",
                                              "b": "0x7fffffff"}
    assert res.witness["a"] == "0x7fc00000" and res.witness["b"] == "0x7fffffff"


def test_zero_sign_rules_get_a_witness():
    """Random inputs almost never make a zero whose sign the zero rules decide: the zero-sign
    rows do (CDNA1 bf16's zero_sum_sign "positive" against "ieee": a -0 from a product that
    rounds to zero, met by -0 products in the next block). CDNA1 fp16 cannot show the
    difference between its rules and -0 -> +0 (no fp16 product rounds to zero in fp32): no
    witness, and the note says which cases were tried."""
    c1 = get_profile("cdna1-bf16")
    res = diff_profiles(c1, c1.replace(zero_sum_sign="ieee", name="ieee"), cases=256)
    assert not res.same and res.parameter["name"] == "zero_sum_sign"
    w = res.witness
    assert w is not None and "zero-sign" in w["how"]
    assert (w["a"], w["b"]) == ("0x00000000", "0x80000000")
    res = diff_profiles(c1, c1.replace(neg_zero_to_pos=True, name="nvidia"), cases=256)
    assert res.witness is not None and (res.witness["a"], res.witness["b"]) == (
        "0x80000000", "0x00000000")  # the product that rounds to zero keeps its -0
    c16 = get_profile("cdna1-fp16")
    res = diff_profiles(c16, c16.replace(neg_zero_to_pos=True, zero_sum_sign="ieee", name="n"),
                        cases=256)
    assert not res.same and res.witness is None
    assert any("zero-sign cases" in n for n in res.notes)
