"""Blackwell B200 (sm_100) ``mma.sync`` fp8 presets: blackwell-{e4m3,e5m2}[-fp16out].

Source: Khattak and Mikaitis, arXiv 2512.07004, and their MATLAB B200 model (fpscope/presets.py
restates it). :func:`source_model` below is that model
written out with exact rationals, independently of fpscope's engines: two fused steps of 16
products (k = 0, 1 mod 4 from zero, then k = 2, 3 mod 4 on the first step's result), each cut at
2^(e_max - 25) toward zero and rounded (fp32 output: toward zero; fp16 output: nearest-even),
then c added with one nearest-even rounding. The presets are that model: the fp32-output ones
with steps rounded toward zero and c's addition to nearest-even (Profile.c_rounding).
"""

import importlib.util
import json
import math
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from fpscope.cli import main
from fpscope.emulate import fdpa, matmul
from fpscope.formats import decode, encode, get_format, round_to_format
from fpscope.profile import PRESETS, Profile, get_profile

NAMES = ["blackwell-e4m3", "blackwell-e4m3-fp16out", "blackwell-e5m2", "blackwell-e5m2-fp16out"]
FP8 = {"e4m3": "fp8_e4m3fn", "e5m2": "fp8_e5m2"}
#: The source's interleaving, written out: step 1 takes k = 0, 1 mod 4, step 2 k = 2, 3 mod 4.
ORDER = [j for j in range(32) if j % 4 < 2] + [j for j in range(32) if j % 4 >= 2]

_SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "final_rounding_check.py"
_spec = importlib.util.spec_from_file_location("final_rounding_check", _SCRIPT)
frc = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("final_rounding_check", frc)
_spec.loader.exec_module(frc)


# -- the source model, exact ----------------------------------------------------------------------

_OUT = {"fp32": (24, -126, 127), "fp16": (11, -14, 15)}  # significand bits, emin, emax


def _exp(x: Fraction, emin: int) -> int:
    """floor(log2|x|), clamped at emin (subnormals keep the format's emin)."""
    e = x.numerator.bit_length() - x.denominator.bit_length()
    if Fraction(2) ** e > abs(x):
        e -= 1
    return max(e, emin)


def _round(x: Fraction, out: str, mode: str) -> Fraction:
    """x rounded to the output format (subnormals kept; the tests stay below overflow)."""
    p, emin, emax = _OUT[out]
    if x == 0:
        return Fraction(0)
    ulp = Fraction(2) ** (_exp(abs(x), emin) - (p - 1))
    q, r = divmod(abs(x), ulp)
    if mode == "RNE" and (r > ulp / 2 or (r == ulp / 2 and q % 2)):
        q += 1
    v = q * ulp
    assert v < Fraction(2) ** (emax + 1), "the source-model tests stay below overflow"
    return v if x > 0 else -v


def _step(terms, out: str, mode: str) -> Fraction:
    """One fused step: nonzero terms (value, exponent) cut toward zero at 2^(e_max - 25),
    summed exactly, rounded."""
    terms = [(v, e) for v, e in terms if v != 0]
    if not terms:
        return Fraction(0)
    cut = Fraction(2) ** (max(e for _, e in terms) - 25)
    total = sum((abs(v) // cut) * cut * (1 if v > 0 else -1) for v, e in terms)
    return _round(total, out, mode)


def source_model(a, b, c, fmt: str, out: str) -> float:
    """The Khattak-Mikaitis B200 fp8 mma.sync model (module docstring), finite inputs."""
    emin = get_format(fmt).emin
    step_mode = "RZ" if out == "fp32" else "RNE"
    prods = [(Fraction(x) * Fraction(y), _exp(Fraction(x), emin) + _exp(Fraction(y), emin))
             for x, y in zip(a, b)]
    d1 = _step([prods[j] for j in ORDER[:16]], out, step_mode)
    acc = [(d1, _exp(d1, _OUT[out][1]))] if d1 else []
    d2 = _step([prods[j] for j in ORDER[16:]] + acc, out, step_mode)
    d = _round(d2 + Fraction(c), out, "RNE")
    return float(d)  # -0 results are +0 (NVIDIA)


def _step_sums_exact(a, b, fmt: str) -> bool:
    """Whether both steps' cut sums are fp32 values (then RZ and RNE steps agree)."""
    emin = get_format(fmt).emin
    prods = [(Fraction(x) * Fraction(y), _exp(Fraction(x), emin) + _exp(Fraction(y), emin))
             for x, y in zip(a, b)]
    d1 = _step([prods[j] for j in ORDER[:16]], "fp32", "RZ")
    acc = [(d1, _exp(d1, -126))] if d1 else []
    return (d1 == _step([prods[j] for j in ORDER[:16]], "fp32", "RNE")
            and _step([prods[j] for j in ORDER[16:]] + acc, "fp32", "RZ")
            == _step([prods[j] for j in ORDER[16:]] + acc, "fp32", "RNE"))


def _bits(x, out: str) -> int:
    x = float(x)  # works on float64 and on output-format dtypes alike
    return int(np.float32(x).view(np.uint32)) if out == "fp32" else int(
        np.float16(x).view(np.uint16))


def _fp8(rng, fmt: str, shape, kind: str) -> np.ndarray:
    """fp8 values: "normal" (standard normal data rounded to the format), "wide" (uniformly
    random finite bit patterns), "unit" (magnitudes below 2, as the recordings' operands)."""
    f = get_format(fmt)
    if kind == "normal":
        return round_to_format(rng.standard_normal(shape).astype(np.float32).astype(np.float64),
                               f, "RNE")
    v = decode(rng.integers(0, 256, size=shape).astype(np.uint8), f)
    v = np.where(np.isfinite(v), v, 0.0)
    return np.where(np.abs(v) < 2, v, 0.0) if kind == "unit" else v


# -- declaration ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_presets_are_declared_experimental_with_the_source_structure(name):
    p = get_profile(name)
    out = "fp16" if name.endswith("fp16out") else "fp32"
    assert p.status == "experimental" and p.evidence == ""
    assert (p.arch, p.in_format, p.b_format, p.out_format) == (
        "blackwell", FP8[name.split("-")[1]], None, out)
    assert (p.block_size, p.k, p.frac_bits, p.alignment) == (16, 32, 25, "truncate")
    assert list(p.k_order) == ORDER and p.c_entry == "last" and p.output_rounding is None
    assert p.step_rounding == (out, "RZ" if out == "fp32" else "RNE")
    assert p.c_rounding == ("RNE" if out == "fp32" else None)
    assert not (p.flush_inputs or p.flush_outputs) and p.neg_zero_to_pos
    assert p.nan_bits == (0x7FFFFFFF if out == "fp32" else 0x7FFF)
    assert p.e_zero_inert or out == "fp16"  # fp16: see test_e_zero_decides_nothing
    assert Profile.from_json(p.to_json()) == p
    assert Profile.from_dict(json.loads(json.dumps(p.to_dict()))) == p


def test_profiles_cli_lists_them_as_experimental(capsys):
    assert main(["profiles", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    for name in NAMES:
        assert data[name]["status"] == "experimental"
        assert Profile.from_dict(data[name]) == PRESETS[name]
    assert main(["profiles"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines()
            if line.split()[:1] and line.split()[0] in NAMES]
    assert len(rows) == 4 and all("experimental" in r for r in rows)


def test_mmasim_has_no_blackwell_mma_sync_fp8_model():
    """If mmasim gains the model, compare it with these presets (and drop NO_MODEL)."""
    pytest.importorskip("mmasim")
    from mmasim.nv_ptx import MMA

    from fpscope.probes.mmasim_target import MODELS, NO_MODEL

    MMA("RTX Blackwell", "m16n8k32.f32.e4m3.e4m3.f32")  # the shape string is mmasim's
    for t in ("e4m3", "e5m2"):
        for d in ("f32", "f16"):
            with pytest.raises(AssertionError):
                MMA("Blackwell", f"m16n8k32.{d}.{t}.{t}.{d}")
    assert set(NO_MODEL) == set(NAMES) and not set(NAMES) & set(MODELS)
    from fpscope.probes.blackbox import ProbeError
    from fpscope.probes.mmasim_target import MmasimTarget

    with pytest.raises(ProbeError, match="no mmasim model for 'blackwell-e4m3': mmasim has no"):
        MmasimTarget("blackwell-e4m3")


# -- the source model ----------------------------------------------------------------------------

@pytest.mark.parametrize("short", ["e4m3", "e5m2"])
@pytest.mark.parametrize("kind", ["normal", "wide", "unit"])
def test_fp16out_presets_are_the_source_model(short, kind):
    p, fmt = PRESETS[f"blackwell-{short}-fp16out"], FP8[short]
    rng = np.random.default_rng([len(short), len(kind)])
    n = 0
    for _ in range(150):
        a, b = _fp8(rng, fmt, (2, 32), kind if kind != "wide" else "unit")
        if kind == "wide":  # wide exponent spread below fp16 overflow
            a = a * 2.0 ** rng.integers(-6, 4, size=32)
            a = np.where(np.isin(a, decode(np.arange(256, dtype=np.uint8), get_format(fmt))),
                         a, 0.0)
        c = float(np.float16(rng.standard_normal() * 2.0 ** int(rng.integers(-12, 6))))
        want = source_model(a, b, c, fmt, "fp16")
        assert _bits(fdpa(a.tolist(), b.tolist(), c, p), "fp16") == _bits(want, "fp16"), (a, b, c)
        n += want != 0
    assert n > 100


@pytest.mark.parametrize("short", ["e4m3", "e5m2"])
def test_fp16out_presets_are_the_validated_hopper_mma_sync_arithmetic(short):
    """The source gives H100 and B200 the same fp8 mma.sync model; hopper-*-fp16out reproduces
    the H100 recordings 5000/5000. Same bits on random patterns (NaN, Inf, subnormals too)."""
    from fpscope.emulate.vectorized import fdpa_batch

    b200, h100 = PRESETS[f"blackwell-{short}-fp16out"], PRESETS[f"hopper-{short}-fp16out"]
    f = get_format(FP8[short])
    rng = np.random.default_rng(7)
    a = decode(rng.integers(0, 256, size=(4000, 32)).astype(np.uint8), f)
    b = decode(rng.integers(0, 256, size=(4000, 32)).astype(np.uint8), f)
    c = decode(rng.integers(0, 1 << 16, size=4000).astype(np.uint16), get_format("fp16"))
    d1, d2 = fdpa_batch(a, b, c, b200), fdpa_batch(a, b, c, h100)
    assert np.array_equal(np.isnan(d1), np.isnan(d2))
    fin = ~np.isnan(d1)
    assert np.array_equal(encode(d1[fin], get_format("fp16")), encode(d2[fin], get_format("fp16")))
    assert 0 < fin.sum() < 4000


@pytest.mark.parametrize("short", ["e4m3", "e5m2"])
def test_fp32_presets_are_the_source_model(short):
    """Steps rounded toward zero, c's addition to nearest-even (c_rounding): the source model
    bit for bit, also where a step's sum must be rounded (wide exponent spreads), in both
    engines."""
    from fpscope.emulate.vectorized import fdpa_batch

    p, fmt = PRESETS[f"blackwell-{short}"], FP8[short]
    rng = np.random.default_rng(len(short))
    inexact = 0
    rows = []
    for kind in ("normal", "unit", "wide"):
        for _ in range(150):
            a, b = _fp8(rng, fmt, (2, 32), kind)
            c = float(np.float32(rng.standard_normal() * 2.0 ** int(rng.integers(-20, 20))))
            want = source_model(a, b, c, fmt, "fp32")
            assert _bits(fdpa(a.tolist(), b.tolist(), c, p), "fp32") == _bits(want, "fp32"), \
                (kind, a, b, c)
            inexact += not _step_sums_exact(a, b, fmt)
            rows.append((a, b, c, want))
    assert inexact > 30  # the cases a step rounding decides are covered
    d = fdpa_batch(np.array([r[0] for r in rows]), np.array([r[1] for r in rows]),
                   np.array([r[2] for r in rows]), p)
    assert [_bits(x, "fp32") for x in d] == [_bits(r[3], "fp32") for r in rows]


# -- facts on hand-made inputs -------------------------------------------------------------------

@pytest.mark.parametrize("short", ["e4m3", "e5m2"])
def test_c_is_added_last_with_one_nearest_even_rounding(short):
    """Products 2^-16 and 2^-18 with c = 256 (an fp32 ulp there is 2^-15): the source adds c
    after the steps, rounding 256 + 2^-16 + 2^-18 to nearest: 256 + 2^-15. With c inside one
    fused window (cut at 2^(8 - 25)) 2^-18 is cut off and 256 + 2^-16 is a tie that goes to
    256; a single step rounding toward zero (mmasim's Blackwell fp8 models) gives 256 too."""
    p = PRESETS[f"blackwell-{short}"]
    a, b = [0.0] * 32, [0.0] * 32
    a[0], b[0], a[2], b[2] = 2.0**-8, 2.0**-8, 2.0**-9, 2.0**-9  # k = 0: step 1, k = 2: step 2
    want = 256.0 + 2.0**-15
    assert fdpa(a, b, 256.0, p) == want == source_model(a, b, 256.0, FP8[short], "fp32")
    assert fdpa(a, b, 256.0, p.replace(c_entry="first", c_rounding=None)) == 256.0
    assert fdpa(a, b, 256.0, PRESETS[f"rtx-blackwell-{short}"]) == 256.0
    assert fdpa(a, b, 256.0, PRESETS[f"blackwell-tcgen05-{short}"]) == 256.0


@pytest.mark.parametrize("short", ["e4m3", "e5m2"])
def test_fp16out_steps_are_interleaved(short):
    """Products 1 (k = 0), 2^-11 (k = 2), 2^-13 (k = 4), c = 0, fp16 output (ulp of 1: 2^-10).
    Interleaved: step 1 = 1 + 2^-13 -> 1, step 2 = 1 + 2^-11, a tie -> 1. In natural order
    the first step holds all three: 1 + 2^-11 + 2^-13 -> 1 + 2^-10."""
    p = PRESETS[f"blackwell-{short}-fp16out"]
    a, b = [0.0] * 32, [0.0] * 32
    a[0], b[0], a[2], b[2], a[4], b[4] = 1.0, 1.0, 2.0**-6, 2.0**-5, 2.0**-6, 2.0**-7
    assert fdpa(a, b, 0.0, p) == 1.0 == source_model(a, b, 0.0, FP8[short], "fp16")
    assert fdpa(a, b, 0.0, p.replace(k_order=None)) == 1.0 + 2.0**-10


@pytest.mark.parametrize("short", ["e4m3", "e5m2"])
def test_fp32_steps_round_toward_zero_and_c_to_nearest(short):
    """64 + 3 * 2^-18 in step 1 (an fp32 ulp at 64 is 2^-17): the step rounds toward zero,
    64 + 2^-17 (nearest-even would give 64 + 2^-16); c's addition rounds to nearest (see
    test_c_is_added_last_with_one_nearest_even_rounding): c_rounding, not the step's mode."""
    p = PRESETS[f"blackwell-{short}"]
    a, b = [0.0] * 32, [0.0] * 32
    for j, (x, y) in zip((0, 1, 4, 5), ((8.0, 8.0), (2.0**-9, 2.0**-9), (2.0**-9, 2.0**-9),
                                        (2.0**-9, 2.0**-9))):
        a[j], b[j] = x, y
    assert source_model(a, b, 0.0, FP8[short], "fp32") == 64.0 + 2.0**-17 == fdpa(a, b, 0.0, p)
    assert fdpa(a, b, 0.0, p.replace(step_rounding=("fp32", "RNE"))) == 64.0 + 2.0**-16
    a2, b2 = [0.0] * 32, [0.0] * 32
    a2[0], b2[0], a2[2], b2[2] = 2.0**-8, 2.0**-8, 2.0**-9, 2.0**-9
    assert fdpa(a2, b2, 256.0, p) == 256.0 + 2.0**-15
    assert fdpa(a2, b2, 256.0, p.replace(c_rounding=None)) == 256.0  # RZ for c too
    with pytest.raises(ValueError, match="c_rounding applies to c_entry 'last'"):
        p.replace(c_entry="first")
    with pytest.raises(ValueError, match="unknown rounding mode"):
        p.replace(c_rounding="nearest")


@pytest.mark.parametrize("name", NAMES)
def test_e_zero_decides_nothing(name):
    """No fp8 product bit lies below 2^(e_zero - 25): e_zero far up or down changes nothing."""
    from fpscope.emulate.vectorized import fdpa_batch

    p = PRESETS[name]
    f, fout = get_format(p.in_format), get_format(p.out_format)
    rng = np.random.default_rng(3)
    tiny = decode(rng.integers(0, 8, size=(3000, 32)).astype(np.uint8), f)  # subnormals, zeros
    a = np.where(rng.random((3000, 32)) < 0.5, tiny, decode(
        rng.integers(0, 256, size=(3000, 32)).astype(np.uint8), f))
    b = decode(rng.integers(0, 16, size=(3000, 32)).astype(np.uint8), f)
    c = np.zeros(3000)
    base = fdpa_batch(a, b, c, p)
    for ez in (p.e_zero - 40, p.e_zero + 5):
        assert np.array_equal(fdpa_batch(a, b, c, p.replace(e_zero=ez)), base, equal_nan=True)
    assert np.count_nonzero(base) > 1000 and fout.name in ("fp32", "fp16")


@pytest.mark.parametrize("name", ["blackwell-e4m3", "blackwell-e5m2-fp16out"])
def test_matmul_chains_instructions(name):
    """K = 64: two instructions, the first one's d the second one's c (bits, whatever dtype
    matmul returns)."""
    p = PRESETS[name]
    rng = np.random.default_rng(5)
    A = _fp8(rng, p.in_format, (3, 64), "normal")
    B = _fp8(rng, p.in_format, (64, 2), "normal")
    C = (rng.standard_normal((3, 2)) * 4).astype(np.float16).astype(np.float64)
    D = matmul(A, B, C, profile=name, engine="numpy")
    for i in range(3):
        for j in range(2):
            d = fdpa(A[i, :32].tolist(), B[:32, j].tolist(), float(C[i, j]), p)
            d = fdpa(A[i, 32:].tolist(), B[32:, j].tolist(), d, p)
            assert _bits(D[i, j], p.out_format) == _bits(d, p.out_format)


# -- the recordings' c / d check (scripts/final_rounding_check.py) ------------------------------

def _recording_like(name: str, n: int = 300):
    """(c, d) of ``name`` on operands as in the published H100 / Ada E4M3 sets (|x| <= 4)."""
    rng = np.random.default_rng(11)
    p = PRESETS[name]
    c, d = [], []
    for _ in range(n):
        a, b = _fp8(rng, "fp8_e4m3fn", (2, 32), "unit") * 2.0
        ci = float(np.float32(rng.random()))
        c.append(ci)
        d.append(fdpa(a.tolist(), b.tolist(), ci, p))
    return c, d


def test_final_rounding_check_tells_nearest_from_toward_zero():
    """The check on outputs of the RNE preset finds no RZ-only sample and many RNE-only ones,
    positive sums among them; on a single RZ step with c in its window (rtx-blackwell-e4m3,
    mmasim's model) many RZ-only ones and no positive sum rounded away from zero (its few
    others are negative sums whose c was cut); on a corrupted output, "neither"."""
    c, d = _recording_like("blackwell-e4m3")
    r = frc.classify(c, d)
    assert r["RZ"] == r["neither"] == 0 and r["RNE"] > 50 and r["away"] == r["RNE"]
    assert r["away_positive"] > 10 and r["ties_down"] + r["ties_up"] > 0 and r["skipped"] < 30
    c, d = _recording_like("rtx-blackwell-e4m3")
    r = frc.classify(c, d)
    assert r["away_positive"] == 0 and r["RZ"] > 50 and r["RNE"] + r["neither"] < 10
    i = next(i for i, x in enumerate(d) if 0.5 < abs(x) < 4)
    bad = float(np.nextafter(np.nextafter(np.float32(d[i]), np.float32(9)), np.float32(9)))
    assert frc.classify([c[i]], [bad])["neither"] == 1  # 2 ulps off: neither rounding


def test_final_rounding_check_cli(tmp_path, capsys):
    c, d = _recording_like("blackwell-e4m3", n=40)
    for name, v in (("c_X_fp32.txt", c), ("d_X_fp32.txt", d)):
        words = np.asarray(v, dtype=np.float32).view(np.uint32)
        (tmp_path / name).write_text("".join(f"{int(w):032b}\n" for w in words))
    assert frc.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("40 samples:") and "RZ 0" in out and "neither 0" in out
    assert frc.main([str(tmp_path / "missing")]) == 2
    assert math.isfinite(frc._round_fp32(3, "RNE"))
