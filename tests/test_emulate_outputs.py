"""fpscope.emulate.matmul / dot results in the output format (issue 25, item 2): the dtype of
the output format, the device's bits (NaN = profile.nan_bits), equal bit for bit to the float64
path; batched operands with numpy.matmul semantics; profile= as a name, Profile or JSON path."""

import json

import numpy as np
import pytest

from fpscope.emulate import dot, matmul
from fpscope.emulate.outputs import to_output
from fpscope.formats import decode, get_format
from fpscope.probes.validate import generate, generate_scales
from fpscope.profile import PRESETS, load_profile, resolve_format

ml_dtypes = pytest.importorskip("ml_dtypes")


def _uint(a):
    return a.view(f"u{a.dtype.itemsize}")


def _data(p, M, K, N, kind="normal", seed=0):
    rng = np.random.default_rng(seed)
    fa, fb = (resolve_format(f) for f in p.operand_formats)
    A, B, C = generate(kind, rng, fa, resolve_format(p.out_format), M, K, N, p.block_size, fb)
    sc = {}
    if p.scale_format is not None:
        fs = resolve_format(p.scale_format)
        s = p.scale_block_size
        sc = {"scale_a": generate_scales(kind, rng, fs, (M, K // s)),
              "scale_b": generate_scales(kind, rng, fs, (K // s, N))}
    return A, B, C, sc


@pytest.mark.parametrize("preset, kw, dtype", [
    ("hopper-fp16", {}, np.float32),
    ("hopper-fp16-fp16out", {}, np.float16),
    ("hopper-fp16", {"out_format": "fp16"}, np.float16),
    ("hopper-fp16", {"out_format": "bf16"}, ml_dtypes.bfloat16),
    ("hopper-fp16-fp16out", {"alpha": 0.5}, np.float16),  # the epilogue returns to fp16
    ("hopper-fp16", {"dtype": "float64"}, np.float64),
    ("hopper-fp16", {"dtype": np.float64}, np.float64),
])
def test_output_dtype(preset, kw, dtype):
    p = PRESETS[preset]
    D = matmul(np.ones((2, p.k)), np.ones((p.k, 3)), profile=p, **kw)
    assert D.dtype == np.dtype(dtype) and D.shape == (2, 3)
    assert float(D[0, 0]) == 16.0 * kw.get("alpha", 1.0)


def test_bad_dtype():
    with pytest.raises(ValueError, match="dtype must be None"):
        matmul(np.ones((1, 16)), np.ones((16, 1)), profile="hopper-fp16", dtype="float32")


@pytest.mark.parametrize("preset", ["hopper-fp16", "hopper-fp16-fp16out", "ampere-bf16",
                                    "volta-fp16-fp16out"])
def test_nan_outputs_carry_the_profiles_bits(preset):
    """NaN from c, from Inf * 0 and from Inf - Inf: every NaN output is profile.nan_bits (the
    recorded H100 patterns 0x7FFFFFFF / 0x7FFF), in matmul and dot; a float64 result has none."""
    p = PRESETS[preset]
    A = np.zeros((3, p.k))
    B = np.ones((p.k, 2))
    C = np.zeros((3, 2))
    C[0, :] = np.nan
    A[1, 0], B[0, :] = np.inf, 0.0
    A[2, 0], A[2, 1] = np.inf, -np.inf
    D = matmul(A, B, C, profile=p)
    nan_bits = {"fp32": 0x7FFFFFFF, "fp16": 0x7FFF}[p.out_format]
    assert p.nan_bits == nan_bits
    assert (_uint(D)[:2] == nan_bits).all(), [hex(x) for x in _uint(D).ravel()]
    assert _uint(D)[2, 1] == nan_bits  # Inf - Inf; column 0 (b = 0 there) too
    d = dot(A[1], B[:, 1], 0.0, profile=p)
    assert isinstance(d, np.generic) and int(_uint(np.array([d]))[0]) == nan_bits
    assert np.isnan(dot(A[1], B[:, 1], 0.0, profile=p, dtype="float64"))
    assert isinstance(dot(A[1], B[:, 1], 0.0, profile=p, dtype="float64"), float)
    # another pattern in the profile: that one (not a constant of the converter)
    other = {"fp32": 0xFFC00001, "fp16": 0xFE01}[p.out_format]
    D2 = matmul(A, B, C, profile=p.replace(nan_bits=other))
    assert (_uint(D2)[:2] == other).all()


def test_epilogue_nan_in_another_format_is_canonical():
    """out_format other than the profile's: the format's canonical quiet NaN (not modelled)."""
    D = matmul(np.zeros((1, 16)), np.zeros((16, 1)), np.full((1, 1), np.nan),
               profile="hopper-fp16", out_format="bf16")
    assert _uint(D)[0, 0] == 0x7FC0


@pytest.mark.parametrize("preset, kw", [
    ("hopper-fp16", {}),
    ("hopper-fp16-fp16out", {}),
    ("ampere-bf16", {}),
    ("ampere-tf32", {}),
    ("hopper-e4m3", {"promotion_interval": 64}),               # library level
    ("ampere-fp16", {"split_k": 2, "split_k_order": "pairwise"}),  # library level
    ("blackwell-tcgen05-mxfp8-e4m3", {}),                      # block-scaled
    ("blackwell-tcgen05-nvfp4", {}),                           # block-scaled, grouped node
])
@pytest.mark.parametrize("kind", ["normal", "bits"])
def test_typed_equals_the_float64_path(preset, kw, kind):
    """Every value of the typed result is the float64 result's, bit for bit (widening is exact),
    and NaN exactly where it is NaN, with the profile's bits; random inputs, specials included
    ("bits": every bit pattern)."""
    p = PRESETS[preset].replace(**kw)
    K = p.k * p.split_k * (p.promotion_interval or p.k) // p.k * 2
    A, B, C, sc = _data(p, 5, K, 4, kind, seed=len(preset) + len(kind))
    if kind == "bits":
        C[0, 0] = np.nan  # at least one NaN output, whatever the draw
    wide = matmul(A, B, C, profile=p, dtype="float64", **sc)
    typed = matmul(A, B, C, profile=p, **sc)
    fout = resolve_format(p.out_format)
    assert typed.dtype == fout.numpy_dtype()
    nan = np.isnan(wide)
    back = typed.astype(np.float64)
    assert np.array_equal(np.isnan(back), nan)
    assert np.array_equal(back[~nan].view(np.int64), wide[~nan].view(np.int64))
    assert (_uint(typed)[nan] == p.nan_bits).all()
    assert nan.any() == (kind == "bits")


@pytest.mark.parametrize("name", ["fp16", "bf16", "fp8_e4m3fn", "fp8_e5m2"])
def test_to_output_every_pattern(name):
    """to_output gives every pattern of the format back from its float64 value (decode: the
    obviously-right path); NaN patterns become the given nan_bits."""
    fmt = get_format(name)
    pats = np.arange(1 << fmt.bits, dtype=np.uint64)
    vals = decode(pats, fmt)
    out = to_output(vals, fmt, None)
    nan = np.isnan(vals)
    assert out.dtype == fmt.numpy_dtype()
    assert np.array_equal(_uint(out)[~nan].astype(np.uint64), pats[~nan])
    nb = int(pats[nan][-1])
    assert (_uint(to_output(vals, fmt, nb))[nan] == nb).all()


def test_to_output_refuses_values_outside_the_format():
    with pytest.raises(ValueError, match="not exactly representable"):
        to_output(np.array([1.0 + 2.0 ** -12]), get_format("fp16"), None)


# -- batched operands ------------------------------------------------------------------------


def _loop(A, B, C, p, batch, sa=None, sb=None):
    """The obviously-right batched GEMM: one 2-D call per batch element."""
    M, N = A.shape[-2], B.shape[-1]
    Af = np.broadcast_to(A, batch + A.shape[-2:])
    Bf = np.broadcast_to(B, batch + B.shape[-2:])
    Cf = np.broadcast_to(C, batch + (M, N))
    out = None
    for idx in np.ndindex(*batch):
        kw = {}
        if sa is not None:
            kw = {"scale_a": np.broadcast_to(sa, batch + sa.shape[-2:])[idx],
                  "scale_b": np.broadcast_to(sb, batch + sb.shape[-2:])[idx]}
        d = matmul(Af[idx], Bf[idx], Cf[idx], profile=p, **kw)
        if out is None:
            out = np.empty(batch + (M, N), d.dtype)
        out[idx] = d
    return out


@pytest.mark.parametrize("a_batch, b_batch, c_shape", [
    ((4,), (), "full"),          # A's batch folded into rows
    ((), (3,), "full"),          # B's batch folded into columns
    ((1,), (3,), "row"),         # the same through a size-1 batch, C one row
    ((2, 1), (3,), "full"),      # broadcast both ways: one 2-D call per element
    ((2, 3), (2, 3), "scalar"),  # 4-D, no broadcasting, C a scalar
    ((4,), (1,), "none"),
])
@pytest.mark.parametrize("preset", ["hopper-fp16", "ampere-tf32"])
def test_batched_equals_a_loop_of_2d_calls(a_batch, b_batch, c_shape, preset):
    p = PRESETS[preset]
    M, K, N = 3, 2 * p.k, 5
    batch = np.broadcast_shapes(a_batch, b_batch)
    P = int(np.prod(batch))
    pa, pb = (max(1, int(np.prod(x))) for x in (a_batch, b_batch))
    A2, B2, C2, _ = _data(p, M * pa, K, N * pb, "bits", seed=P)
    A = A2.reshape(a_batch + (M, K)) if a_batch else A2[:M]
    B = B2.reshape(K, -1, N).transpose(1, 0, 2).reshape(b_batch + (K, N)) if b_batch \
        else B2[:, :N]
    A = A.copy()
    A[(0,) * A.ndim] = np.nan  # at least one NaN output row
    C = {"full": np.broadcast_to(C2[:M, :N], batch + (M, N)) * 1.0,
         "row": C2[0, :N], "scalar": np.array(C2[0, 0]), "none": None}[c_shape]
    calls = []
    D = matmul(A, B, C, profile=p, progress=lambda done, total: calls.append((done, total)))
    want = _loop(A, B, np.zeros((M, N)) if C is None else C, p, batch)
    assert D.shape == batch + (M, N) and D.dtype == want.dtype
    assert np.array_equal(_uint(D), _uint(want))
    assert calls and calls[-1][0] == calls[-1][1]
    assert all(a[0] <= b[0] for a, b in zip(calls, calls[1:]))
    assert np.isnan(want.astype(np.float64)).any()  # "bits": specials included


def test_batched_block_scales():
    p = PRESETS["blackwell-tcgen05-mxfp8-e4m3"]
    M, K, N = 2, 64, 3
    A, B, C, sc = _data(p, 4 * M, K, N, seed=3)
    A = A.reshape(4, M, K)
    SA = sc["scale_a"].reshape(4, M, K // 32)
    D = matmul(A, B, C[:M], profile=p, scale_a=SA, scale_b=sc["scale_b"])
    want = _loop(A, B, C[:M], p, (4,), SA, sc["scale_b"])
    assert np.array_equal(_uint(D), _uint(want))
    # B batched too (one 2-D call per element)
    B3 = np.stack([B, B[:, ::-1]])[:, None]  # (2, 1, K, N)
    SB3 = np.stack([sc["scale_b"], sc["scale_b"][:, ::-1]])[:, None]
    D = matmul(A, B3, C[:M], profile=p, scale_a=SA, scale_b=SB3)
    want = _loop(A, B3, C[:M], p, (2, 4), SA, SB3)
    assert D.shape == (2, 4, M, N) and np.array_equal(_uint(D), _uint(want))


def test_one_dimensional_operands_as_numpy_matmul():
    p = PRESETS["hopper-fp16"]
    rng = np.random.default_rng(2)
    A, B, C, _ = _data(p, 3, 32, 4, seed=2)
    v = A[0]
    assert matmul(v, B, profile=p).shape == (4,)
    assert np.array_equal(matmul(v, B, C[0], profile=p), matmul(v[None], B, C[:1], profile=p)[0])
    assert np.array_equal(matmul(A, B[:, 1], profile=p),
                          matmul(A, B[:, 1:2], profile=p)[:, 0])
    assert matmul(v, B[:, 0], profile=p).shape == ()
    assert matmul(rng.choice([1.0, 2.0], (5, 32)), np.ones((2, 32, 4)), profile=p).shape \
        == (2, 5, 4)


@pytest.mark.parametrize("args, msg", [
    ((np.ones((2, 3, 16)), np.ones((4, 16, 2))), "do not broadcast"),
    ((np.ones((2, 16)), np.ones((8, 2))), "inner dimensions differ"),
    ((np.ones((2, 2, 16)), np.ones((16, 3)), np.ones((3, 3))), "does not broadcast"),
    ((np.float64(1.0), np.ones((16, 3))), "at least one dimension"),
])
def test_batched_errors(args, msg):
    with pytest.raises(ValueError, match=msg):
        matmul(*args, profile="hopper-fp16")


# -- profile= as a name, a Profile or a JSON path ----------------------------------------------


def test_profile_from_a_json_path(tmp_path):
    p = PRESETS["hopper-fp16-fp16out"].replace(name="mine", nan_bits=0x7E01)
    path = tmp_path / "mine.json"
    path.write_text(p.to_json())
    A, B, C, _ = _data(p, 2, 32, 3, "bits", seed=5)
    want = matmul(A, B, C, profile=p)
    for spec in (str(path), path):
        assert load_profile(spec) == p
        assert np.array_equal(_uint(matmul(A, B, C, profile=spec)), _uint(want))
    got, exp = (np.array([dot(A[0], B[:, 0], C[0, 0], profile=q)]) for q in (str(path), p))
    assert got.dtype == np.float16 and _uint(got)[0] == _uint(exp)[0]
    assert _uint(np.array([dot(A[0], B[:, 0], np.nan, profile=str(path))]))[0] == 0x7E01
    assert load_profile(p) is p
    assert load_profile("hopper-fp16") is PRESETS["hopper-fp16"]


@pytest.mark.parametrize("make, msg", [
    (lambda d: str(d), "is a folder"),
    (lambda d: str(d / "missing.json"), "no such profile file"),
    (lambda d: "hoper-fp16", "did you mean 'hopper-fp16'"),
    (lambda d: _write(d / "bad.json", "{not json"), "not JSON"),
    (lambda d: _write(d / "empty.json", "{}"), "schema"),
    (lambda d: _write(d / "bin.json", b"\xff\xfe\x00"), "cannot read profile"),
    (lambda d: 3, "not int"),
    (lambda d: None, "a profile is required"),
    (lambda d: _write(d / "rev.json", '{"schema": "fpscope.record/2", "kind": "reveal"}'),
     "is a 'reveal' record, not a profile"),
    (lambda d: _write(d / "nofit.json", '{"schema": "fpscope.record/2", "kind": "probe", '
                                        '"profile": null}'), "probe record without a profile"),
])
def test_bad_profiles_get_one_line(tmp_path, make, msg):
    spec = make(tmp_path)
    for call in (lambda: load_profile(spec),
                 lambda: matmul(np.ones((1, 16)), np.ones((16, 1)), profile=spec)):
        with pytest.raises(ValueError, match=msg) as exc:
            call()
        assert "\n" not in str(exc.value)


def test_a_probe_record_gives_its_profile(tmp_path):
    from fpscope.record import new_record

    p = PRESETS["hopper-fp16"].replace(name="probed:mine")
    rec = new_record("probe", target={"name": "sim:hopper-fp16", "spec": "sim:hopper-fp16"},
                     profile=p.to_dict(), validation={}, probe={}, environment={})
    path = tmp_path / "probe.json"
    path.write_text(json.dumps(rec))
    assert load_profile(path) == p


def test_cli_folder_profile_is_one_line(tmp_path, capsys):
    from fpscope.cli import main

    np.save(tmp_path / "A.npy", np.ones((1, 16)))
    np.save(tmp_path / "B.npy", np.ones((16, 1)))
    rc = main(["emulate", "--profile", str(tmp_path), "--a", str(tmp_path / "A.npy"), "--b",
               str(tmp_path / "B.npy"), "-o", str(tmp_path / "D.npy")])
    err = capsys.readouterr().err
    assert rc == 2 and "is a folder" in err and len(err.strip().splitlines()) == 1


def _write(path, data):
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data)
    return str(path)


@pytest.mark.parametrize("preset", ["hopper-fp16", "hopper-fp16-fp16out"])
def test_the_emulator_as_a_callable_shows_its_presets_nan(preset):
    """Wrapped as a callable target, the emulator's NaN outputs read (as a probe reads them,
    blackbox.nan_bits_of) as the preset's nan_bits, so probing it finds the preset it runs;
    its float64 results (a float NaN, no pattern) read as 0x7FC00000 / 0x7E00 (issue 25)."""
    from fpscope.probes.blackbox import CallableTarget, nan_bits_of

    p = PRESETS[preset]
    fout = resolve_format(p.out_format)
    A, B = np.zeros((2, p.k)), np.ones((p.k, 2))
    A[0, 0] = np.inf  # Inf * 1 + (-Inf) = NaN; row 1: 0 + NaN
    C = np.array([[-np.inf, -np.inf], [np.nan, np.nan]])
    canonical = 0x7FC00000 if fout.bits == 32 else 0x7E00
    for dtype, want in ((None, p.nan_bits), ("float64", canonical)):
        t = CallableTarget(lambda A, B, C: matmul(A, B, C, profile=p, dtype=dtype),
                           p.in_format, p.out_format, k=p.k)
        D = t(A, B, C)
        assert D.dtype == np.float64 and np.isnan(D).all()
        assert {nan_bits_of(float(x), fout) for x in D.ravel()} == {want}
