"""`fpscope profiles` and `fpscope emulate`."""

import json

import numpy as np
import pytest

from fpscope.cli import main
from fpscope.emulate import output_bits, reference
from fpscope.profile import PRESETS


def cli(capsys, *args):
    rc = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return rc, out, err


def test_profiles_lists_every_preset_with_status(capsys):
    code, out, _ = cli(capsys, "profiles", "--format", "json")
    assert code == 0
    data = json.loads(out)
    assert set(data) == set(PRESETS)
    assert data["hopper-fp16"]["status"] == "validated"
    assert data["turing-fp16"]["status"] == "experimental"
    code, out, _ = cli(capsys, "profiles")
    assert code == 0 and "volta-fp16" in out and "experimental" in out


@pytest.mark.parametrize("name", ["hopper-fp16", "ampere-bf16", "volta-fp16-fp16out"])
def test_emulate_matches_the_reference_loop(capsys, tmp_path, name):
    p = PRESETS[name]
    rng = np.random.default_rng(1)
    dt = {"fp16": np.float16, "bf16": None}[p.in_format]
    K = 2 * p.k
    if dt is None:
        import ml_dtypes

        dt = ml_dtypes.bfloat16
    A = rng.standard_normal((3, K)).astype(np.float32).astype(dt)
    B = rng.standard_normal((K, 2)).astype(np.float32).astype(dt)
    # .npy cannot hold ml_dtypes types: narrow values travel as float32 (exactly)
    np.save(tmp_path / "A.npy", A.astype(np.float32) if p.in_format == "bf16" else A)
    np.save(tmp_path / "B.npy", B.astype(np.float32) if p.in_format == "bf16" else B)
    code, _, err = cli(capsys, "emulate", "--profile", name, "--a", tmp_path / "A.npy",
                       "--b", tmp_path / "B.npy", "-o", tmp_path / "D.npy")
    assert code == 0, err
    D = np.load(tmp_path / "D.npy")
    assert D.dtype == (np.float16 if p.out_format == "fp16" else np.float32)
    A64, B64 = A.astype(np.float64), B.astype(np.float64)
    for m in range(3):
        for n in range(2):
            d = 0.0
            for j in range(0, K, p.k):
                d = reference.fdpa(A64[m, j:j + p.k], B64[j:j + p.k, n], d, p)
            assert float(D[m, n]) == d


def test_emulate_errors(capsys, tmp_path):
    rng = np.random.default_rng(2)
    np.save(tmp_path / "A.npy", rng.standard_normal((2, 16)).astype(np.float16))
    np.save(tmp_path / "B.npy", rng.standard_normal((16, 2)).astype(np.float16))
    np.save(tmp_path / "F.npy", rng.standard_normal((2, 16)).astype(np.float32))  # not fp16 values
    np.save(tmp_path / "V.npy", np.ones(16))
    base = ["emulate", "--profile", "hopper-fp16", "--b", tmp_path / "B.npy"]
    for extra, fragment in (
        (["--a", tmp_path / "F.npy"], "not exactly representable"),
        (["--a", tmp_path / "V.npy"], "must be a matrix (2-D, or more dimensions for a batch)"),
        (["--a", tmp_path / "missing.npy"], "cannot read"),
    ):
        code, _, err = cli(capsys, *base, *extra, "-o", tmp_path / "D.npy")
        assert code == 2 and fragment in err and len(err.strip().splitlines()) == 1, err
    code, _, err = cli(capsys, "emulate", "--profile", "nope", "--a", tmp_path / "A.npy",
                       "--b", tmp_path / "B.npy", "-o", tmp_path / "D.npy")
    assert code == 2 and "unknown profile" in err
    (tmp_path / "D.npy").write_bytes(b"mine")
    code, _, err = cli(capsys, *base, "--a", tmp_path / "A.npy", "-o", tmp_path / "D.npy")
    assert code == 2 and "exists" in err and (tmp_path / "D.npy").read_bytes() == b"mine"


def test_emulate_reads_a_profile_file(capsys, tmp_path):
    prof = tmp_path / "p.json"
    prof.write_text(PRESETS["ada-fp16"].to_json())
    rng = np.random.default_rng(3)
    np.save(tmp_path / "A.npy", rng.standard_normal((1, 16)).astype(np.float16))
    np.save(tmp_path / "B.npy", rng.standard_normal((16, 1)).astype(np.float16))
    code, _, err = cli(capsys, "emulate", "--profile", prof, "--a", tmp_path / "A.npy",
                       "--b", tmp_path / "B.npy", "-o", tmp_path / "D.npy")
    assert code == 0, err
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "fpscope.profile/9"}')
    code, _, err = cli(capsys, "emulate", "--profile", bad, "--a", tmp_path / "A.npy",
                       "--b", tmp_path / "B.npy", "-o", tmp_path / "E.npy")
    assert code == 2 and len(err.strip().splitlines()) == 1


def test_emulate_engines_and_epilogue(capsys, tmp_path):
    rng = np.random.default_rng(4)
    np.save(tmp_path / "A.npy", rng.standard_normal((4, 32)).astype(np.float16))
    np.save(tmp_path / "B.npy", rng.standard_normal((32, 3)).astype(np.float16))
    outs = {}
    for engine in ("numba", "numpy"):
        code, _, err = cli(capsys, "emulate", "--profile", "hopper-fp16", "--a",
                           tmp_path / "A.npy", "--b", tmp_path / "B.npy", "--engine", engine,
                           "-o", tmp_path / f"{engine}.npy")
        assert code == 0, err
        outs[engine] = np.load(tmp_path / f"{engine}.npy")
    assert np.array_equal(outs["numba"].view(np.uint32), outs["numpy"].view(np.uint32))
    code, _, err = cli(capsys, "emulate", "--profile", "hopper-fp16", "--a", tmp_path / "A.npy",
                       "--b", tmp_path / "B.npy", "--out-format", "fp16", "--alpha", "0.5",
                       "-o", tmp_path / "h.npy")
    assert code == 0, err
    h = np.load(tmp_path / "h.npy")
    assert h.dtype == np.float16
    assert np.array_equal(h, (outs["numpy"].astype(np.float64) * 0.5).astype(np.float16))
    code, _, err = cli(capsys, "emulate", "--profile", "hopper-fp16", "--a", tmp_path / "A.npy",
                       "--b", tmp_path / "B.npy", "--alpha", "0.1", "-o", tmp_path / "x.npy")
    assert code == 2 and "fp32 value" in err and not (tmp_path / "x.npy").exists()


def test_emulate_mixed_input_formats(capsys, tmp_path):
    """A mixed preset (a e4m3, b e5m2): fpscope profiles shows both formats; emulate takes A and
    B each in its format and refuses a B that is only an e4m3 value, naming operand b."""
    from fpscope.formats import decode
    from fpscope.profile import resolve_format

    code, out, _ = cli(capsys, "profiles")
    assert code == 0 and "fp8_e4m3fn x fp8_e5m2" in out
    p = PRESETS["ada-e4m3-e5m2"]
    rng = np.random.default_rng(5)
    fa, fb = (resolve_format(f) for f in p.operand_formats)

    def finite(fmt, shape):
        x = decode(rng.integers(0, 1 << fmt.bits, size=shape, dtype=np.uint64), fmt)
        return np.where(np.isfinite(x), x, 0.0)

    K = 2 * p.k
    A, B = finite(fa, (3, K)), finite(fb, (K, 2))
    B[0, 0] = 2.0**-16  # an e5m2 subnormal, not an e4m3 value
    np.save(tmp_path / "A.npy", A.astype(np.float32))
    np.save(tmp_path / "B.npy", B.astype(np.float32))
    code, _, err = cli(capsys, "emulate", "--profile", "ada-e4m3-e5m2", "--a", tmp_path / "A.npy",
                       "--b", tmp_path / "B.npy", "-o", tmp_path / "D.npy")
    assert code == 0, err
    D = np.load(tmp_path / "D.npy")
    for m in range(3):
        for n in range(2):
            d = 0.0
            for j in range(0, K, p.k):
                d = reference.fdpa(A[m, j:j + p.k], B[j:j + p.k, n], d, p)
            assert float(D[m, n]) == d
    B[1, 1] = 1.125  # e4m3 only
    np.save(tmp_path / "B2.npy", B.astype(np.float32))
    code, _, err = cli(capsys, "emulate", "--profile", "ada-e4m3-e5m2", "--a", tmp_path / "A.npy",
                       "--b", tmp_path / "B2.npy", "-o", tmp_path / "E.npy")
    assert code == 2 and "B[1, 1] = 1.125" in err and "operand b" in err, err
    assert not (tmp_path / "E.npy").exists()


def test_emulate_block_scaled(capsys, tmp_path):
    """A block-scaled preset (NVFP4: ue4m3 scales per 16 elements of K) takes --scale-a and
    --scale-b; D equals fpscope.emulate.matmul with the same scales. Missing scales, scales for
    a plain profile, a wrong scale shape and a value outside the scale format are one-line
    usage errors; profiles shows the scale format and block."""
    from fpscope.emulate import matmul
    from fpscope.formats import decode
    from fpscope.profile import resolve_format

    p = PRESETS["blackwell-tcgen05-nvfp4"]
    rng = np.random.default_rng(6)
    fa, fs = resolve_format(p.in_format), resolve_format(p.scale_format)
    M, K, N = 3, 128, 2
    A = decode(rng.integers(0, 16, size=(M, K), dtype=np.uint64), fa)
    B = decode(rng.integers(0, 16, size=(K, N), dtype=np.uint64), fa)
    SA = decode(rng.integers(0, 127, size=(M, K // 16), dtype=np.uint64), fs)
    SB = decode(rng.integers(0, 127, size=(K // 16, N), dtype=np.uint64), fs)
    for name, x in (("A", A), ("B", B), ("SA", SA), ("SB", SB), ("SBt", SB.T),
                    ("bad", np.full(SA.shape, 500.0))):
        np.save(tmp_path / f"{name}.npy", x.astype(np.float32))
    base = ["emulate", "--a", tmp_path / "A.npy", "--b", tmp_path / "B.npy"]
    code, _, err = cli(capsys, *base, "--profile", p.name, "--scale-a", tmp_path / "SA.npy",
                       "--scale-b", tmp_path / "SB.npy", "-o", tmp_path / "D.npy")
    assert code == 0, err
    D = np.load(tmp_path / "D.npy")
    assert D.dtype == np.float32
    want = matmul(A, B, profile=p, scale_a=SA, scale_b=SB)
    assert np.array_equal(D.astype(np.float64), want, equal_nan=True)
    for extra, fragment in (
        (["--profile", p.name], "give --scale-a and --scale-b"),
        (["--profile", p.name, "--scale-a", tmp_path / "SA.npy"], "give --scale-a and --scale-b"),
        (["--profile", "hopper-fp16", "--scale-a", tmp_path / "SA.npy", "--scale-b",
          tmp_path / "SB.npy"], "has no block scales"),
        (["--profile", p.name, "--scale-a", tmp_path / "SA.npy", "--scale-b",
          tmp_path / "SBt.npy"], "scale_b must have shape (8, 2)"),
        (["--profile", p.name, "--scale-a", tmp_path / "bad.npy", "--scale-b",
          tmp_path / "SB.npy"], "scale_a[0, 0] = 500.0 is not exactly representable in ue4m3"),
    ):
        code, _, err = cli(capsys, *base, *extra, "-o", tmp_path / "E.npy")
        assert code == 2 and fragment in err and len(err.strip().splitlines()) == 1, err
        assert not (tmp_path / "E.npy").exists()
    code, out, _ = cli(capsys, "profiles")
    assert code == 0 and "fp4_e2m1, ue4m3/16" in out
    with pytest.raises(SystemExit):
        main(["emulate", "--help"])
    assert "--scale-a SA.npy --scale-b SB.npy" in capsys.readouterr().out


def test_emulate_progress_bar(capsys, monkeypatch, tmp_path):
    """The rows bar: nothing without a terminal or with --quiet; on a terminal, a bar that
    counts D's rows and is cleared when done."""
    from fpscope import cli_emulate as cli_mod

    assert cli_mod._rows_progress(True)[0] is None
    assert cli_mod._rows_progress(False)[0] is None  # pytest's stderr is not a terminal
    monkeypatch.setattr(type(__import__("sys").stderr), "isatty", lambda self: True,
                        raising=False)
    cb, finish = cli_mod._rows_progress(False)
    assert cb is not None
    cb(64, 150)
    cb(150, 150)
    finish()
    assert "emulating rows of D" in capsys.readouterr().err
    rng = np.random.default_rng(3)
    np.save(tmp_path / "A.npy", rng.standard_normal((130, 16)).astype(np.float16))
    np.save(tmp_path / "B.npy", rng.standard_normal((16, 3)).astype(np.float16))
    code, _, err = cli(capsys, "emulate", "--profile", "hopper-fp16", "--a", tmp_path / "A.npy",
                       "--b", tmp_path / "B.npy", "-o", tmp_path / "D.npy", "--quiet")
    assert code == 0 and "emulating" not in err, err
    assert np.load(tmp_path / "D.npy").shape == (130, 3)


@pytest.mark.parametrize("name,uint", [("hopper-fp16", np.uint32),
                                       ("hopper-fp16-fp16out", np.uint16)])
def test_emulate_writes_the_profiles_nan_bits(capsys, tmp_path, name, uint):
    """A NaN output is written as the profile's nan_bits (the H100's 0x7FFFFFFF, 0x7FFF), as
    emulate.output_bits gives it; numpy's cast of the float64 result would write its own
    canonical NaN (0x7FC00000, 0x7E00). Finite outputs keep their values."""
    p = PRESETS[name]
    A = np.ones((2, 16), np.float16)
    A[0, 3] = np.nan
    np.save(tmp_path / "A.npy", A)
    np.save(tmp_path / "B.npy", np.ones((16, 2), np.float16))
    code, _, err = cli(capsys, "emulate", "--profile", name, "--a", tmp_path / "A.npy",
                       "--b", tmp_path / "B.npy", "-o", tmp_path / "D.npy")
    assert code == 0, err
    D = np.load(tmp_path / "D.npy")
    assert D.view(uint)[0].tolist() == [p.nan_bits] * 2 == [output_bits(np.nan, p)] * 2
    assert D[1].tolist() == [16.0, 16.0]


def test_profile_files_with_impossible_values_are_refused(capsys, tmp_path):
    """Negative kept bits and a NaN pattern wider than the output format are errors (they ran
    before: F = -3 gave all-zero outputs)."""
    np.save(tmp_path / "A.npy", np.ones((1, 16), np.float16))
    np.save(tmp_path / "B.npy", np.ones((16, 1), np.float16))
    for field, value, fragment in (("frac_bits", -3, "at least 0"),
                                   ("nan_bits", -5, "32-bit pattern"),
                                   ("nan_bits", 0x7F800000, "NaN"),
                                   ("nan_bits", 2 ** 40, "32-bit pattern")):
        doc = json.loads(PRESETS["hopper-fp16"].to_json())
        doc[field] = value
        prof = tmp_path / f"{field}{value}.json"
        prof.write_text(json.dumps(doc))
        code, _, err = cli(capsys, "emulate", "--profile", prof, "--a", tmp_path / "A.npy",
                           "--b", tmp_path / "B.npy", "-o", tmp_path / "D.npy")
        assert code == 2 and fragment in err and len(err.strip().splitlines()) == 1, err
        assert not (tmp_path / "D.npy").exists()


def test_emulate_hands_fp32_words_to_a_tf32_profile(capsys, tmp_path):
    """A float32 A.npy reaches the tf32 profile as words: a signalling NaN whose payload lies
    only in the 13 bits tf32 drops is Inf there (Profile.operand_conversion), where a float64
    copy would have quieted it to a NaN; the quiet NaN of row 1 stays NaN."""
    A = np.ones((2, 8), np.float32)
    A.view(np.uint32)[:, 0] = [0xFF800001, 0x7FC00000]
    np.save(tmp_path / "A.npy", A)
    np.save(tmp_path / "B.npy", np.ones((8, 1), np.float32))
    code, _, err = cli(capsys, "emulate", "--profile", "hopper-tf32", "--a", tmp_path / "A.npy",
                       "--b", tmp_path / "B.npy", "-o", tmp_path / "D.npy")
    assert code == 0, err
    D = np.load(tmp_path / "D.npy")
    assert D.view(np.uint32)[:, 0].tolist() == [0xFF800000, PRESETS["hopper-tf32"].nan_bits]


def test_emulate_batched_operands_match_the_api(capsys, tmp_path):
    """(..., M, K) @ (..., K, N) operands are a batch, broadcast as numpy.matmul does; D has the
    batch shape and the bits of fpscope.emulate.matmul."""
    from fpscope.emulate import matmul

    rng = np.random.default_rng(7)
    Q = rng.standard_normal((3, 8, 32)).astype(np.float16)
    KT = rng.standard_normal((1, 32, 5)).astype(np.float16)  # broadcast over the batch
    np.save(tmp_path / "Q.npy", Q)
    np.save(tmp_path / "KT.npy", KT)
    code, _, err = cli(capsys, "emulate", "--profile", "hopper-fp16", "--a", tmp_path / "Q.npy",
                       "--b", tmp_path / "KT.npy", "-o", tmp_path / "S.npy", "--quiet")
    assert code == 0, err
    assert "D (3 x 8 x 5, fp32) written" in err
    got, want = np.load(tmp_path / "S.npy"), matmul(Q, KT, profile="hopper-fp16")
    assert got.shape == (3, 8, 5) and np.array_equal(got.view(np.uint32), want.view(np.uint32))
