"""Operand conversion (issue 25, item 5): fp32 operands into tf32 / bf16 / fp16 profiles through
"RNA", "RNE" or "truncate" (fpscope.emulate.conversion), the --operand-conversion flag of
fpscope emulate, and the conversion column of fpscope profiles."""

import json
import math

import numpy as np
import pytest

from fpscope.cli import main
from fpscope.emulate import dot, matmul
from fpscope.emulate.reference import fdpa
from fpscope.emulate.vectorized import fdpa_batch
from fpscope.profile import PRESETS, Profile

#: (preset, fp32 value x, {conversion: x converted}): ties and a non-tie per input format.
#: tf32 and fp16 keep 10 fraction bits (1024 and 1025 are neighbours; 1024 is even, 1025 odd);
#: bf16 keeps 7 (256 and 258 are neighbours at 2^8; 256 even, 258 odd).
CASES = [
    ("ampere-tf32", 1024.5, {"RNA": 1025, "RNE": 1024, "truncate": 1024}),
    ("ampere-tf32", 1025.5, {"RNA": 1026, "RNE": 1026, "truncate": 1025}),
    ("ampere-tf32", 1024.75, {"RNA": 1025, "RNE": 1025, "truncate": 1024}),
    ("ampere-fp16", 1024.5, {"RNA": 1025, "RNE": 1024, "truncate": 1024}),
    ("ampere-fp16", 1025.5, {"RNA": 1026, "RNE": 1026, "truncate": 1025}),
    ("hopper-fp16", 2.0 ** -25, {"RNA": 2.0 ** -24, "RNE": 0.0, "truncate": 0.0}),  # subnormal tie
    ("ampere-bf16", 257.0, {"RNA": 258, "RNE": 256, "truncate": 256}),
    ("ampere-bf16", 259.0, {"RNA": 260, "RNE": 260, "truncate": 258}),
    ("ampere-bf16", 256.5, {"RNA": 256, "RNE": 256, "truncate": 256}),
    ("hopper-bf16", 2.0 ** -134, {"RNA": 2.0 ** -133, "RNE": 0.0, "truncate": 0.0}),
]


def _one(p, x, conversion, c=0.0):
    """x * 1 + c as one dot product of the profile (the other products 0), fp32 operands."""
    a = np.zeros(p.k, np.float32)
    b = np.zeros(p.k, np.float32)
    a[0], b[0] = x, 1.0
    return dot(a, b, c, profile=p, operand_conversion=conversion, dtype="float64")


@pytest.mark.parametrize("preset, x, want", CASES)
@pytest.mark.parametrize("conversion", ["RNA", "RNE", "truncate"])
def test_conversion_ties(preset, x, want, conversion):
    p = PRESETS[preset]
    for s in (1.0, -1.0):
        got = _one(p, s * x, conversion)
        assert got == s * want[conversion], (s, got)  # (a zero result is +0 on NVIDIA)
    # the reference (fdpa), the vectorised engine and matmul agree on the converted profile
    q = p.replace(operand_conversion=conversion)
    a = [x] + [0.0] * (p.k - 1)
    b = [1.0] + [0.0] * (p.k - 1)
    assert fdpa(a, b, 0.0, q) == want[conversion]
    assert fdpa_batch(np.array([a]), np.array([b]), np.zeros(1), q)[0] == want[conversion]


def test_without_conversion_non_values_are_refused_with_a_hint():
    a = np.zeros(16)
    a[0] = 1024.5
    with pytest.raises(ValueError, match=r"A\[0, 0\] = 1024.5 is not exactly representable in "
                                         r"fp16.*operand_conversion"):
        dot(a, np.ones(16), profile="ampere-fp16")
    a[0] = 1024.0 + 2.0 ** -30  # not an fp32 value: refused even with a conversion
    with pytest.raises(ValueError, match="fp32"):
        dot(a, np.ones(16), profile="ampere-fp16", operand_conversion="RNA")


@pytest.mark.parametrize("preset", ["ampere-fp16", "ampere-bf16", "ampere-tf32"])
@pytest.mark.parametrize("conversion", ["RNA", "RNE", "truncate"])
def test_specials(preset, conversion):
    """NaN stays NaN (output nan_bits), Inf stays Inf, -0 stays -0; fp32 overflow of fp16 is
    Inf under RNA / RNE and the largest finite value (65504) under truncate; values of the
    input format pass unchanged."""
    p = PRESETS[preset]
    assert math.isnan(_one(p, np.nan, conversion))
    bits = dot(np.float32([np.nan] + [0] * (p.k - 1)), np.ones(p.k, np.float32), profile=p,
               operand_conversion=conversion)
    assert int(np.array([bits]).view(np.uint32)[0]) == p.nan_bits
    assert _one(p, np.inf, conversion) == np.inf
    assert _one(p, -np.inf, conversion) == -np.inf
    assert _one(p, 1.5, conversion) == 1.5
    big = float(np.finfo(np.float32).max)
    if p.in_format == "fp16":
        assert _one(p, 70000.0, conversion) == (65504.0 if conversion == "truncate" else np.inf)
    else:  # fp32's range: the largest fp32 rounds up to Inf only under the nearest modes
        assert (_one(p, big, conversion) == np.inf) == (conversion != "truncate")


def test_truncate_reads_float32_words_of_bf16():
    """A float32 signalling NaN whose payload lies only in the 16 bits bf16 drops reads as
    +-Inf under "truncate" (the word's top 16 bits), NaN under the nearest modes."""
    p = PRESETS["ampere-bf16"]
    a = np.zeros(16, np.float32)
    a[0] = np.uint32(0xFF800001).view(np.float32)
    b = np.ones(16, np.float32)
    assert dot(a, b, profile=p, operand_conversion="truncate", dtype="float64") == -np.inf
    assert math.isnan(dot(a, b, profile=p, operand_conversion="RNE", dtype="float64"))
    assert fdpa_batch(a[None], b[None], np.zeros(1),
                      p.replace(operand_conversion="truncate"))[0] == -np.inf


def test_flush_inputs_apply_after_conversion():
    p = PRESETS["ampere-bf16"].replace(flush_inputs=True)
    x = 2.0 ** -130  # an fp32 subnormal, a bf16 subnormal: flushed
    assert _one(p, x, "RNE") == 0.0
    assert _one(PRESETS["ampere-bf16"], x, "RNE") == x


def test_profile_field():
    p = PRESETS["ampere-fp16"]
    assert p.operand_conversion is None
    q = p.replace(operand_conversion="RNE")
    assert Profile.from_json(q.to_json()) == q
    assert PRESETS["ampere-tf32"].replace(operand_conversion="round").operand_conversion == "RNA"
    with pytest.raises(ValueError, match="unknown operand_conversion 'RZ'"):
        p.replace(operand_conversion="RZ")
    with pytest.raises(ValueError, match="takes fp8_e4m3fn"):
        PRESETS["hopper-e4m3"].replace(operand_conversion="RNA")
    with pytest.raises(ValueError, match="fp8_e4m3fn"):
        matmul(np.ones((1, 32)), np.ones((32, 1)), profile="hopper-e4m3",
               operand_conversion="RNE")


def _run(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_cli_operand_conversion_flag(tmp_path, capsys):
    A = np.zeros((2, 16), np.float32)
    A[0, 0], A[1, 0] = 1024.5, 1025.5
    B = np.zeros((16, 1), np.float32)
    B[0, 0] = 1.0
    np.save(tmp_path / "A.npy", A)
    np.save(tmp_path / "B.npy", B)
    base = ["emulate", "--profile", "ampere-fp16", "--a", tmp_path / "A.npy", "--b",
            tmp_path / "B.npy", "--quiet"]
    for mode, want in (("RNA", [1025, 1026]), ("RNE", [1024, 1026]), ("truncate", [1024, 1025])):
        rc, _, err = _run(capsys, *base, "--operand-conversion", mode, "-o",
                          tmp_path / f"{mode}.npy")
        assert rc == 0, err
        D = np.load(tmp_path / f"{mode}.npy")
        assert D.dtype == np.float32 and D[:, 0].tolist() == want
    rc, _, err = _run(capsys, *base, "-o", tmp_path / "none.npy")  # no conversion: refused
    assert rc == 2 and "--operand-conversion" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "none.npy").exists()
    with pytest.raises(SystemExit) as exc:  # argparse: exit 2, the choices named
        main([str(a) for a in base] + ["--operand-conversion", "RZ", "-o", "x.npy"])
    assert exc.value.code == 2 and "choose from RNA, RNE, truncate" in capsys.readouterr().err
    # the flag overrides a tf32 preset's "truncate"
    np.save(tmp_path / "A8.npy", A[:, :8])
    np.save(tmp_path / "B8.npy", B[:8])
    rc, _, err = _run(capsys, "emulate", "--profile", "ampere-tf32", "--a", tmp_path / "A8.npy",
                      "--b", tmp_path / "B8.npy", "--quiet", "--operand-conversion", "RNA", "-o",
                      tmp_path / "t.npy")
    assert rc == 0 and np.load(tmp_path / "t.npy")[:, 0].tolist() == [1025, 1026]


def test_profiles_conversion_column(capsys):
    rc, out, _ = _run(capsys, "profiles")
    assert rc == 0 and "conversion" in out.splitlines()[2]
    row = next(line for line in out.splitlines() if line.split()[:1] == ["ampere-tf32"])
    assert "truncate" in row.split()
    row = next(line for line in out.splitlines() if line.split()[:1] == ["ampere-fp16"])
    assert "truncate" not in row and " - " in row
    rc, out, _ = _run(capsys, "profiles", "--format", "json")
    data = json.loads(out)
    assert data["ampere-tf32"]["operand_conversion"] == "truncate"
    assert data["ampere-fp16"]["operand_conversion"] is None
