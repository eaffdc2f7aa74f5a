"""fpscope fit: profiles from recorded (a, b, c, d) vectors."""

import numpy as np
import pytest

from fpscope.cli import main
from fpscope.emulate.vectorized import fdpa_batch
from fpscope.fit import FitError, fit, load_recording
from fpscope.formats import encode, round_to_format
from fpscope.profile import PRESETS, Profile, resolve_format

from hw_data import HW_ROOT, SKIP_REASON  # $FPSCOPE_HW_VECTORS, else ../shared
needs_hw = pytest.mark.skipif(not HW_ROOT.is_dir(), reason=SKIP_REASON)


@needs_hw
@pytest.mark.parametrize("gpu, folder, out", [
    ("V100", "fp16", "fp32"), ("A100", "fp16", "fp16"), ("Ada", "E4M3", "fp16"),
    ("H100", "E5M2", "fp32"), ("H100", "E4M3", "fp16"), ("A100", "tf32", "fp32")])
def test_fit_reproduces_recorded_sets(gpu, folder, out):
    """A subset in CI; scripts/fit_table.py runs all 22 sets (records/fit-table.txt)."""
    res = fit(load_recording(HW_ROOT / gpu / folder, out))
    assert res.exact, res.to_text()


@needs_hw
@pytest.mark.parametrize("gpu, L", [("V100", 4), ("H100", 16)])
def test_fit_without_presets_finds_the_block_size(gpu, L):
    res = fit(load_recording(HW_ROOT / gpu / "fp16", "fp32"), use_presets=False)
    assert res.exact and res.profile.block_size == L
    assert res.consistent["block_size"] == [L]  # every other L is ruled out by some sample
    assert res.separating["block_size"]


def _npz(tmp_path, profile: Profile, n=600, seed=0):
    rng = np.random.default_rng(seed)
    fin, fout = resolve_format(profile.in_format), resolve_format(profile.out_format)
    fb = resolve_format(profile.operand_formats[1])
    a = round_to_format(rng.standard_normal((n, profile.k)) * 2.0 ** rng.integers(-6, 7, (n, profile.k)), fin)
    b = round_to_format(rng.standard_normal((n, profile.k)), fb)
    a[:, 1::2] = -a[:, 0::2]  # cancelling pairs expose the kept bits
    b[:, 1::2] = b[:, 0::2] * (1 + 2.0 ** -rng.integers(3, 10, (n, profile.k // 2)))
    b = round_to_format(b, fb)
    c = round_to_format(rng.standard_normal(n) * 4, fout)
    d = encode(fdpa_batch(a, b, c, profile), fout)
    path = tmp_path / "rec.npz"
    extra = {"b_format": profile.b_format} if profile.b_format else {}
    np.savez(path, a=a, b=b, c=c, d=d, in_format=profile.in_format,
             out_format=profile.out_format, **extra)
    return path


@pytest.mark.parametrize("use_presets", [True, False])
def test_fit_a_mixed_input_recording(tmp_path, use_presets):
    """An e4m3 x e5m2 recording (.npz with b_format): the fit keeps b's format and reproduces
    every sample, from the mixed presets or from the grid alone."""
    p = PRESETS["ada-e4m3-e5m2"]
    rec = load_recording(_npz(tmp_path, p))
    assert (rec.in_format, rec.b_format) == ("fp8_e4m3fn", "fp8_e5m2")
    res = fit(rec, use_presets=use_presets)
    assert res.exact, res.to_text()
    q = res.profile
    assert (q.in_format, q.b_format, q.block_size, q.frac_bits) == \
        ("fp8_e4m3fn", "fp8_e5m2", p.block_size, p.frac_bits)


def test_fit_an_unknown_device_from_npz(tmp_path):
    """A device no preset describes: L = 4, F = 26, nearest alignment, fp32 RNE steps."""
    dev = Profile(name="dev", arch="x", in_format="fp16", out_format="fp32", block_size=4,
                  k=8, frac_bits=26, alignment="nearest", e_zero=-133,
                  step_rounding=("fp32", "RNE"))
    res = fit(load_recording(_npz(tmp_path, dev)), use_presets=False)
    assert res.exact, res.to_text()
    p = res.profile
    assert (p.block_size, p.alignment, p.step_rounding) == (4, "nearest", ("fp32", "RNE"))
    assert 26 in res.consistent["frac_bits"]


def test_fit_finds_the_zero_rules(tmp_path):
    """A bf16 device that keeps -0 results but makes exact zero sums +0 (zero_sum_sign
    "positive", as mmasim's CDNA1): rows of zeros of both signs and tiny negative products that
    round to zero separate it from the default (-0 -> +0) and from IEEE's signed zeros. The
    recorded sets never do (records/fit-table.txt leaves neg_zero_to_pos open)."""
    dev = Profile(name="dev", arch="x", in_format="bf16", out_format="fp32", block_size=2, k=4,
                  frac_bits=24, e_zero=None, neg_zero_to_pos=False, zero_sum_sign="positive")
    rng = np.random.default_rng(5)
    n = 512
    a = rng.choice([0.0, -0.0, 2.0**-80, -(2.0**-80), 1.0, -1.0], (n, 4))
    b = rng.choice([0.0, -0.0, 2.0**-80, 1.0], (n, 4))
    c = rng.choice([0.0, -0.0, 1.0], n)
    a[:8], b[:8], c[:8] = -0.0, 1.0, -0.0  # sums of -0 terms
    a[4:8, rng.integers(0, 4, 4)], b[4:8, :] = -(2.0**-80), 2.0**-80  # a tiny one among them
    d = encode(fdpa_batch(a, b, c, dev), resolve_format("fp32"))
    path = tmp_path / "zeros.npz"
    np.savez(path, a=a, b=b, c=c, d=d, in_format="bf16", out_format="fp32")
    res = fit(load_recording(path), use_presets=False)
    assert res.exact, res.to_text()
    assert (res.profile.neg_zero_to_pos, res.profile.zero_sum_sign) == (False, "positive")
    assert res.consistent["neg_zero_to_pos"] == [False]
    assert res.consistent["zero_sum_sign"] == ["positive"]


def test_fit_reports_a_partial_match(tmp_path):
    """Outputs no profile explains (every 7th bit pattern flipped): not exact, exit 1."""
    path = _npz(tmp_path, PRESETS["ampere-fp16"].replace(k=8))
    z = dict(np.load(path))
    z["d"][::7] ^= 1
    np.savez(path, **z)
    res = fit(load_recording(path))
    assert not res.exact and res.matched < res.total
    assert main(["fit", str(path)]) == 1


def test_bad_recordings(tmp_path, capsys):
    np.savez(tmp_path / "a.npz", a=np.ones((3, 4)))
    np.savez(tmp_path / "b.npz", a=np.ones((3, 4)), b=np.ones((3, 4)), c=np.ones(2),
             d=np.ones(3, np.uint32), in_format="fp16", out_format="fp32")
    np.savez(tmp_path / "c.npz", a=np.ones((3, 4)), b=np.ones((3, 4)), c=np.ones(3),
             d=np.ones(3, np.uint32), in_format="fp64", out_format="fp32")
    np.savez(tmp_path / "d.npz", a=np.full((3, 4), 0.1), b=np.ones((3, 4)), c=np.ones(3),
             d=np.ones(3, np.uint32), in_format="fp16", out_format="fp32")
    np.savez(tmp_path / "e.npz", a=np.ones((3, 4)), b=np.full((3, 4), 15360.0), c=np.ones(3),
             d=np.ones(3, np.uint32), in_format="fp8_e4m3fn", out_format="fp32")
    for name, msg in (("a.npz", "missing"), ("b.npz", "shapes"), ("c.npz", "not supported"),
                      ("nope.npz", "does not exist"),
                      ("d.npz", r"a\[0, 0\] = 0.1 is not a value of fp16"),
                      ("e.npz", r"b\[0, 0\] = 15360.0 is not a value of fp8_e4m3fn .*bit patterns")):
        with pytest.raises(FitError, match=msg):
            load_recording(tmp_path / name)
        assert main(["fit", str(tmp_path / name)]) == 2
        assert len(capsys.readouterr().err.strip().splitlines()) == 1
    (tmp_path / "p.json").write_text("mine")
    rc = main(["fit", str(tmp_path / "b.npz"), "-o", str(tmp_path / "p.json")])
    assert rc == 2 and (tmp_path / "p.json").read_text() == "mine"


def _scaled_npz(tmp_path, profile: Profile, n=512, seed=3):
    """A block-scaled recording: sample i is row i of A, column i of B, with random scales
    (validate's generators), its output from the emulator."""
    from fpscope.emulate import matmul
    from fpscope.probes.validate import generate, generate_scales

    rng = np.random.default_rng(seed)
    fin, fout = resolve_format(profile.in_format), resolve_format(profile.out_format)
    fb, fs = resolve_format(profile.operand_formats[1]), resolve_format(profile.scale_format)
    A, B, C = generate("normal", rng, fin, fout, n, profile.k, n, profile.block_size, fb)
    nb = profile.k // profile.scale_block_size
    SA, SB = generate_scales("normal", rng, fs, (n, nb)), generate_scales("normal", rng, fs, (n, nb))
    d = np.diag(matmul(A, B, C, profile=profile, scale_a=SA, scale_b=SB.T)).copy()
    path = tmp_path / "scaled.npz"
    np.savez(path, a=A, b=B.T, c=np.diag(C).copy(), d=encode(d, fout), in_format=profile.in_format,
             out_format=profile.out_format, scale_format=profile.scale_format, scale_a=SA,
             scale_b=SB)
    return path


@pytest.mark.parametrize("name", ["rtx-blackwell-mxfp8-e4m3", "rtx-blackwell-nvfp4"])
def test_fit_a_block_scaled_recording(tmp_path, name):
    """An .npz with scale_format, scale_a and scale_b: the fit scores candidates at the
    recorded scales and reproduces every sample with the preset's node, window and scales."""
    p = PRESETS[name]
    rec = load_recording(_scaled_npz(tmp_path, p))
    assert (rec.scale_format, rec.scale_block_size) == (p.scale_format, p.scale_block_size)
    res = fit(rec)
    assert res.exact, res.to_text()
    q = res.profile
    assert (q.node, q.frac_bits, q.scale_format, q.scale_block_size) == \
        (p.node, p.frac_bits, p.scale_format, p.scale_block_size)


def test_bad_block_scaled_recordings(tmp_path):
    """Scales given in part, of an unknown format, of a wrong shape, or not values of the scale
    format: one-line FitErrors."""
    z = dict(np.load(_scaled_npz(tmp_path, PRESETS["rtx-blackwell-mxfp8-e4m3"], n=8)))
    cases = [({"scale_b": None}, "needs scale_format, scale_a and scale_b"),
             ({"scale_format": np.array("fp8")}, "is not one of e8m0, ue4m3"),
             ({"scale_a": z["scale_a"][:, :1].repeat(3, 1)}, "must both be"),
             ({"scale_a": np.full_like(z["scale_a"], 3.0)}, "is not a value of e8m0")]
    for change, msg in cases:
        bad = {k: v for k, v in {**z, **change}.items() if v is not None}
        np.savez(tmp_path / "bad.npz", **bad)
        with pytest.raises(FitError, match=msg):
            load_recording(tmp_path / "bad.npz")


@pytest.mark.parametrize("name", ["cdna2-fp16", "cdna3-fp16"])
def test_fit_finds_the_amd_node_kinds_through_their_presets(tmp_path, name):
    """The grid searches fused nodes only; an MI200 / MI300-like recording is fitted exactly
    from its preset seed (CDNA2 "pairwise", CDNA3 "two-stage"), and the text names the node."""
    res = fit(load_recording(_npz(tmp_path, PRESETS[name])))
    assert res.exact and res.profile.node == PRESETS[name].node
    assert f"node {PRESETS[name].node}" in res.to_text()


def test_a_gpu_folder_names_the_format_folders_inside(tmp_path):
    (tmp_path / "MYGPU" / "fp16").mkdir(parents=True)
    (tmp_path / "MYGPU" / "bf16").mkdir()
    with pytest.raises(FitError, match=r"folder 'MYGPU' is not one of .*; it holds the format "
                                       r"folders bf16, fp16: give one, e\.g\. .*bf16"):
        load_recording(tmp_path / "MYGPU")
