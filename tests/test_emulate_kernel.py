"""The numba GEMM kernel against the numpy engine (itself tested against the exact reference,
tests/test_emulate_vectorized.py) and against the reference directly, bit for bit."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("numba")

from fpscope.emulate import HW_SETS, dot, hw_c_values, kernel, load_hw_set, matmul
from fpscope.emulate.reference import fdpa, output_bits
from fpscope.emulate.vectorized import matmul as numpy_matmul
from fpscope.emulate.vectorized import prepare
from fpscope.formats import FP32, decode, round_to_format
from fpscope.profile import PRESETS, Profile, get_profile, resolve_format

from hw_data import HW_ROOT, SKIP_REASON  # $FPSCOPE_HW_VECTORS, else ../shared

# the block-scaled (MX) presets the kernel runs take scales: tests/test_emulate_blockscale.py
SUPPORTED = sorted(n for n, p in PRESETS.items()
                   if kernel.unsupported(p) is None and p.scale_format is None)
TILE = {"rows": 3, "cols": 16}  # small tiles: ragged edges in both directions


def _assert_same(got, want, what=""):
    """Equal bit patterns: of one output dtype (emulate.matmul's results: NaN bits included),
    else of the float64 values (widened exactly), NaN in both counting as equal."""
    if got.dtype == want.dtype and got.dtype != np.float64:
        u = f"u{got.dtype.itemsize}"
        bad = got.view(u) != want.view(u)
    else:
        got, want = got.astype(np.float64), want.astype(np.float64)
        gb, wb = got.view(np.int64), want.view(np.int64)
        bad = (gb != wb) & ~(np.isnan(got) & np.isnan(want))
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        raise AssertionError(f"{what}: {int(bad.sum())} of {bad.size} outputs differ; first at "
                             f"{idx}: kernel {got[idx]!r}, numpy engine {want[idx]!r}")


def _engines_agree(A, B, C, p, **tile):
    got = kernel.matmul(*prepare(A, B, C, p)[:3], p, **(tile or TILE))
    _assert_same(got, numpy_matmul(A, B, C, profile=p), p.name)
    return got


def _operand_format(p):
    return FP32 if p.operand_conversion else resolve_format(p.in_format)


def _b_format(p):
    """B's format: a mixed-input profile's b_format, else as A's."""
    return FP32 if p.operand_conversion else resolve_format(p.operand_formats[1])


def _patterns(rng, fmt, shape, finite=True):
    x = decode(rng.integers(0, 1 << fmt.bits, size=shape, dtype=np.uint64), fmt)
    return np.where(np.isfinite(x), x, 0.0) if finite else x


def _values(rng, fmt, shape, emin, emax):
    e = rng.integers(emin, emax + 1, size=shape)
    m = rng.integers(0, 1 << (fmt.p - 1), size=shape)
    x = np.ldexp(1.0 + np.ldexp(m.astype(float), -(fmt.p - 1)), e)
    x = np.where(rng.random(shape) < 0.5, -x, x)
    return round_to_format(x, fmt, "RZ", overflow="saturate")


def _seed(name, salt):
    return [salt] + [ord(ch) for ch in name]


def test_every_nvidia_preset_runs_on_the_kernel():
    """The kernel is the fast path of every validated preset (and refuses none of them)."""
    validated = sorted(n for n, p in PRESETS.items() if p.status == "validated")
    assert validated and set(validated) <= set(SUPPORTED)


@pytest.mark.parametrize("name", SUPPORTED)
def test_random_bit_patterns(name):
    """Random finite bit patterns (subnormals, zeros, -0) in A, B and C; then NaN / Inf in some
    rows of A, columns of B and entries of C (recomputed or carried)."""
    p = PRESETS[name]
    rng = np.random.default_rng(_seed(name, 1))
    fa, fc = _operand_format(p), resolve_format(p.out_format)
    fb = _b_format(p)
    M, N, K = 7, 37, 3 * p.k
    A = _patterns(rng, fa, (M, K))
    B = _patterns(rng, fb, (K, N))
    A[rng.random(A.shape) < 0.1] = 0.0
    C = _patterns(rng, fc, (M, N))
    _engines_agree(A, B, C, p)
    A2, B2, C2 = A.copy(), B.copy(), C.copy()
    A2[1, 2] = np.nan if fa.has_nan else A2[1, 2]
    if fa.has_inf:
        A2[4, 0] = -np.inf
    if fb.has_inf:
        B2[K - 1, 5] = np.inf
    C2[0, 3], C2[2, 7] = np.nan, np.inf if fc.has_inf else np.nan
    _engines_agree(A2, B2, C2, p)


@pytest.mark.parametrize("name", SUPPORTED)
def test_cancellation_wide_exponents_and_overflow(name):
    """Cancelling pairs with small survivors (alignment cuts), exponents over the whole range
    (subnormal products, tiny and huge c), and steps that overflow to Inf mid-chain."""
    p = PRESETS[name]
    rng = np.random.default_rng(_seed(name, 2))
    fa, fc = _operand_format(p), resolve_format(p.out_format)
    fb = _b_format(p)
    M, N, K = 6, 24, 2 * p.k
    big = _values(rng, fa, (M, K), min(fa.emax, 5), min(fa.emax, 8))
    small = _values(rng, fa, (M, K), fa.emin - 3, max(fa.emin, -8))
    A = np.where(rng.random((M, K)) < 0.5, big, small)
    A[:, 1::2] = -A[:, 0::2]  # pairs that cancel against equal columns of B
    A = A if fa.has_negative_zero else A + 0.0  # fnuz formats have no -0
    B = _values(rng, fb, (K, N), -4, 4)
    B[1::2] = B[0::2]
    B[:, :4] = _values(rng, fb, (K, 4), fb.emin - 3, fb.emax)  # wide
    C = _values(rng, fc, (M, N), fc.emin - 5, min(fc.emax, 40))
    _engines_agree(A, B, C, p)
    A_max = np.full((2, K), fa.max_finite)
    B_max = np.full((K, 3), fb.max_finite)
    C_max = np.array([[fc.max_finite, -fc.max_finite, 0.0]] * 2)
    _engines_agree(A_max, B_max, C_max, p)


@pytest.mark.parametrize("name", ["ampere-fp16", "hopper-bf16", "ada-tf32", "hopper-e5m2",
                                  "hopper-e4m3-fp16out", "volta-fp16-fp16out",
                                  "ada-e5m2-e4m3-fp16out", "rtx-blackwell-e5m2-e2m1"])
def test_kernel_equals_reference_loop(name):
    """Directly against the exact reference: the K loop of fdpa calls."""
    p = PRESETS[name]
    rng = np.random.default_rng(_seed(name, 3))
    fa, fc = _operand_format(p), resolve_format(p.out_format)
    fb = _b_format(p)
    M, N, K = 3, 4, 2 * p.k
    A = _values(rng, fa, (M, K), fa.emin, min(fa.emax, 6))
    B = _values(rng, fb, (K, N), fb.emin, min(fb.emax, 6))
    C = _values(rng, fc, (M, N), -10, 10)
    D = kernel.matmul(*prepare(A, B, C, p)[:3], p, rows=2, cols=3)
    for m in range(M):
        for n in range(N):
            d = float(C[m, n])
            for j in range(0, K, p.k):
                d = fdpa(A[m, j:j + p.k], B[j:j + p.k, n], d, p)
            assert output_bits(float(D[m, n]), p) == output_bits(d, p), (m, n)


@pytest.mark.parametrize("name", ["hopper-tf32", "cdna3-xf32"])
def test_tf32_words_on_every_engine(name):
    """float32 operands of a truncating tf32 profile are read as fp32 words on all three
    engines: signalling NaNs whose payload lies in the 13 dropped bits are +-Inf, other NaNs
    NaN (tests/test_emulate_reference.py: test_tf32_truncation_reads_the_fp32_word)."""
    p = PRESETS[name]
    rng = np.random.default_rng(_seed(name, 5))
    M, N, K = 6, 5, 2 * p.k
    words = rng.integers(0x3E000000, 0x41000000, size=(M + N, K), dtype=np.uint32)
    words[rng.random(words.shape) < 0.5] ^= 0x80000000
    nans = np.array([0x7F800001, 0xFF801AA7, 0x7F802000, 0x7FC00000], dtype=np.uint32)
    words[np.arange(M + N), rng.integers(0, K, M + N)] = nans[np.arange(M + N) % 4]
    A, B = words[:M].view(np.float32), words[M:].view(np.float32).T.copy()
    C = np.zeros((M, N))
    D = {e: matmul(A, B, C, profile=p, engine=e) for e in ("numpy", "numba")}
    assert np.isinf(D["numpy"]).any() and np.isnan(D["numpy"]).any()
    for m in range(M):
        for n in range(N):
            d = 0.0
            for j in range(0, K, p.k):
                d = fdpa(A[m, j:j + p.k], B[j:j + p.k, n], d, p)
            for e in D:
                assert output_bits(float(D[e][m, n]), p) == output_bits(d, p), (e, m, n)


def test_profile_variants():
    """Knobs no validated preset uses: floor / nearest alignment, e_zero None, flushing, other
    step and output roundings, c added last with a k order, an odd block size, and a window
    so wide that a block is summed in several int32 runs."""
    rng = np.random.default_rng(11)
    base = get_profile("ampere-fp16")
    fc = FP32
    M, N = 5, 21
    variants = (
        {"alignment": "floor"}, {"alignment": "nearest"}, {"e_zero": None},
        {"flush_inputs": True, "flush_outputs": True}, {"frac_bits": 3},
        {"step_rounding": ("fp32", "RNE")}, {"step_rounding": ("fp32", "RNA")},
        {"step_rounding": ("fp32", "RU")}, {"step_rounding": ("fp32", "RD")},
        {"step_rounding": ("e8m13", "RZ"), "output_rounding": ("fp16", "RNE")},
        {"c_entry": "last", "k_order": tuple(range(15, -1, -1))},
        {"block_size": 3, "k": 6}, {"block_size": 5, "k": 5, "alignment": "nearest"},
        {"block_size": 16, "frac_bits": 28}, {"block_size": 16, "frac_bits": 28,
                                              "alignment": "floor"},
        {"in_format": "bf16", "alignment": "floor", "flush_inputs": True},
        # mixed a/b formats: int16 exponents (bf16 b), int8 ones (fp8 x fp6), flushes per format
        {"b_format": "bf16"}, {"in_format": "bf16", "b_format": "fp16", "alignment": "nearest"},
        {"in_format": "fp8_e4m3fn", "b_format": "fp6_e2m3", "flush_inputs": True},
        {"in_format": "fp4_e2m1", "b_format": "fp8_e5m2", "e_zero": None},
    )
    for kw in variants:
        p = base.replace(**kw)
        fin, fb = (resolve_format(f) for f in p.operand_formats)
        K = 3 * p.k
        A = _values(rng, fin, (M, K), fin.emin - 10, min(fin.emax, 12))
        A[rng.random(A.shape) < 0.3] = 0.0
        B = _values(rng, fb, (K, N), fb.emin - 10, min(fb.emax, 12))
        C = _values(rng, fc, (M, N), fc.emin - 23, 20)
        C[rng.random(C.shape) < 0.3] = 0.0
        try:
            _engines_agree(A, B, C, p)
            _engines_agree(np.zeros_like(A), B, C, p)
        except AssertionError as exc:
            raise AssertionError(f"variant {kw}: {exc}") from None


_ROUNDINGS = [("fp32", "RZ"), ("fp32", "RNE"), ("fp16", "RNE"), ("e8m13", "RZ"),
              ("fp32", "RU"), ("bf16", "RD")]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(L=st.sampled_from([1, 2, 4, 8, 16, 32]), stages=st.integers(1, 3),
       F=st.integers(3, 28), alignment=st.sampled_from(["truncate", "floor", "nearest"]),
       e_zero=st.one_of(st.none(), st.integers(-140, 0)),
       step=st.sampled_from(_ROUNDINGS), in_format=st.sampled_from(["fp16", "bf16", "fp8_e4m3fn",
                                                                    "fp8_e5m2", "tf32"]),
       b_format=st.sampled_from([None, None, "fp16", "bf16", "fp8_e4m3fn", "fp8_e5m2",
                                 "fp6_e3m2", "fp4_e2m1"]),
       flush=st.booleans(), c_last=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_random_profiles(L, stages, F, alignment, e_zero, step, in_format, b_format, flush,
                         c_last, seed):
    """Random points of the profile space (mixed a/b formats included): the kernel equals the
    numpy engine."""
    k = L * stages
    fmt = resolve_format(in_format)
    if F + 2 + np.log2(L + 1) > 53:
        return
    if in_format == "tf32":
        b_format = None  # tf32 operands are fp32 values reduced by operand_conversion
    p = Profile(name="random", arch="test", in_format=in_format, out_format="fp32",
                block_size=L, k=k, frac_bits=F, alignment=alignment, e_zero=e_zero,
                step_rounding=step, flush_inputs=flush, flush_outputs=flush,
                operand_conversion="round" if in_format == "tf32" else None,
                c_entry="last" if c_last else "first", b_format=b_format)
    assert kernel.unsupported(p) is None
    rng = np.random.default_rng(seed)
    src = FP32 if in_format == "tf32" else fmt
    M, N, K = 3, 9, 2 * k
    A = _patterns(rng, src, (M, K))
    B = _patterns(rng, _b_format(p) if b_format else src, (K, N))
    C = _patterns(rng, FP32, (M, N))
    _engines_agree(A, B, C, p, rows=2, cols=4)


def test_mixed_presets_run_on_the_kernel():
    """Every fused mixed-input preset is on the kernel's fast path (SUPPORTED covers them in the
    agreement tests above, which also run the AMD CDNA3 fp8 x bf8 two-stage presets;
    block-scaled ones are tested in tests/test_emulate_blockscale.py), and a B of a's format
    but not b's is refused naming operand b."""
    mixed = [n for n, p in PRESETS.items()
             if p.b_format is not None and p.node == "fused" and p.scale_format is None]
    assert mixed and set(mixed) <= set(SUPPORTED)
    rng = np.random.default_rng(13)
    for name in mixed:  # small and subnormal operands of each format: e_max from tiny products
        q = PRESETS[name]
        fa, fb = _operand_format(q), _b_format(q)
        A = _values(rng, fa, (4, 2 * q.k), fa.emin - fa.p + 1, fa.emin + 3)
        B = _values(rng, fb, (2 * q.k, 9), fb.emin - fb.p + 1, fb.emin + 3)
        B[:, :3] = _values(rng, fb, (2 * q.k, 3), fb.emin - fb.p + 1, fb.emax)
        _engines_agree(A, B, np.zeros((4, 9)), q)
    p = PRESETS["ada-e4m3-e5m2"]
    A = np.ones((2, 32))
    B = np.full((32, 3), 1.125)  # e4m3, not e5m2
    with pytest.raises(ValueError, match=r"B\[0, 0\] = 1.125 .*fp8_e5m2, the format of operand b"):
        matmul(A, B, profile=p, engine="numba")


def test_unsupported_profiles_are_refused_or_routed():
    p = get_profile("ampere-fp16").replace(neg_zero_to_pos=False)
    assert "neg_zero_to_pos" in kernel.unsupported(p)
    A = np.ones((2, 16))
    B = np.ones((16, 3))
    with pytest.raises(ValueError, match="numba engine cannot run"):
        matmul(A, B, profile=p, engine="numba")
    _assert_same(matmul(A, B, profile=p, engine="auto"), numpy_matmul(A, B, profile=p))
    wide = get_profile("ampere-fp16").replace(frac_bits=30)
    assert "int32" in kernel.unsupported(wide)
    # a grouped profile with product_overflow: refused in one line, "auto" routes it to numpy
    q = get_profile("rtx-blackwell-mxfp4").replace(product_overflow="fp32")
    assert kernel.unsupported(q).startswith("product_overflow")
    A4, B4 = np.ones((2, 64)), np.ones((64, 3))
    sc = {"scale_a": np.ones((2, 2)), "scale_b": np.ones((2, 3))}
    with pytest.raises(ValueError, match="cannot run this profile: product_overflow"):
        matmul(A4, B4, profile=q, engine="numba", **sc)
    _assert_same(matmul(A4, B4, profile=q, engine="auto", **sc),
                 numpy_matmul(A4, B4, profile=q, **sc))
    q = get_profile("cdna3-fp16").replace(input_zero_sign="positive")
    assert kernel.unsupported(q) is None  # the two-stage node reads no input_zero_sign
    with pytest.raises(ValueError, match="unknown engine"):
        matmul(A, B, profile=get_profile("ampere-fp16"), engine="cuda")
    # a preset name works as the profile; a misspelt one gets a suggestion
    _assert_same(matmul(A, B, profile="ampere-fp16"), matmul(A, B, profile=get_profile("ampere-fp16")))
    with pytest.raises(ValueError, match="did you mean 'ampere-fp16'"):
        matmul(A, B, profile="ampere-fp61")


def test_engines_and_threads_agree_through_the_public_api():
    p = get_profile("hopper-fp16")
    rng = np.random.default_rng(5)
    fin = resolve_format(p.in_format)
    A = _values(rng, fin, (40, 64), -6, 6)
    B = _values(rng, fin, (64, 70), -6, 6)
    want = matmul(A, B, profile=p, engine="numpy")
    _assert_same(matmul(A, B, profile=p, engine="numba"), want)
    _assert_same(matmul(A, B, profile=p, engine="numba", threads=1), want)
    _assert_same(matmul(A.astype(np.float16), B.astype(np.float16), profile=p), want)
    with pytest.raises(ValueError, match="not exactly representable"):
        matmul(A + 1e-4, B, profile=p, engine="numba")  # never silently re-rounded


def test_dot():
    p = get_profile("ampere-fp16")
    rng = np.random.default_rng(6)
    fin = resolve_format(p.in_format)
    a = _values(rng, fin, 32, -6, 6)
    b = _values(rng, fin, 32, -6, 6)
    d = 0.75
    for j in range(0, 32, p.k):
        d = fdpa(a[j:j + p.k], b[j:j + p.k], d, p)
    for engine in ("numba", "numpy"):
        assert output_bits(dot(a, b, 0.75, profile=p, engine=engine), p) == output_bits(d, p)
    with pytest.raises(ValueError, match="1-D"):
        dot(a[:, None], b, profile=p)


#: recorded sets whose data take kernel specialisations that no other test compiles (tens of
#: seconds of numba compilation each on a fresh machine): scripts/kernel_hw_vectors.py runs
#: them, with every other set, 5000 samples each (records/kernel-recorded-sets.txt)
SCRIPT_ONLY = {("A100", "fp16", "fp16"), ("A100", "tf32", "fp32"), ("Ada", "E4M3", "fp16"),
               ("Ada", "E4M3", "fp32"), ("H100", "E4M3", "fp32"), ("H100", "bf16", "fp32"),
               ("V100", "fp16", "fp16"), ("V100", "fp16", "fp32")}


@pytest.mark.skipif(not HW_ROOT.is_dir(), reason=SKIP_REASON)
@pytest.mark.parametrize("key", sorted(set(HW_SETS) - SCRIPT_ONLY))
def test_hw_vectors_through_the_kernel(key):
    """The recorded sets (all but SCRIPT_ONLY; every one in scripts/kernel_hw_vectors.py), run
    as the diagonals of small GEMMs on the kernel: bit for bit."""
    gpu, folder, out = key
    p = PRESETS[HW_SETS[key]]
    a, b, c, d = load_hw_set(HW_ROOT, gpu, folder, out)
    cv = hw_c_values(gpu, folder, out, c)
    n = 1024  # of 5000 samples; all of them run in tests/test_hw_vectors.py
    pad = p.k - a.shape[1] if a.shape[1] % p.k else 0
    a = np.pad(a[:n], ((0, 0), (0, pad)))
    b = np.pad(b[:n], ((0, 0), (0, pad)))
    got = np.empty(n)
    g = 64
    for s in range(0, n, g):
        D = matmul(a[s:s + g], b[s:s + g].T, np.diag(cv[s:s + g]), profile=p, engine="numba")
        got[s:s + g] = np.diag(D)
    bits = np.array([output_bits(float(v), p) for v in got])
    assert np.array_equal(bits, d[:n].astype(np.int64)), \
        f"{int((bits != d[:n]).sum())} of {n} differ"


@pytest.mark.parametrize("name", ["hopper-bf16", "ampere-tf32", "ampere-fp16-fp16out",
                                  "hopper-e4m3-fp16out"])
def test_zero_results_are_positive(name):
    """Sums that round to zero from below (a negative product under the output's smallest
    subnormal, above 2^e_zero), -0 operands, and -0 + -0 with c added last give +0 as the
    reference does."""
    p = PRESETS[name]
    fin = resolve_format(p.in_format)
    K = p.k
    A = np.zeros((3, K))
    B = np.zeros((K, 2))
    A[0, 0], B[0, 0] = -fin.min_normal, (2.0 ** -24 if fin.emin < -100 else fin.min_normal)
    A[1, :] = -0.0
    B[:, 1] = 1.0
    C = np.array([[0.0, -0.0], [-0.0, -0.0], [-0.0, 0.0]])
    got = _engines_agree(A, B, C, p)
    assert (got[1:] == 0).all() and (got[0, 0] == 0) == (name != "hopper-e4m3-fp16out")
    assert not np.signbit(got[got == 0]).any(), got


def test_pairwise_node_on_the_kernel():
    """The "pairwise" node (AMD CDNA2; the presets run in the agreement tests above): every
    CDNA2 and CDNA3 preset is on the kernel, and variants whose zero signs show in D (c read
    with its sign: input_zero_sign "keep", neg_zero_to_pos False) equal the numpy engine on
    operands and c drawn from zeros, subnormals (flushed or not) and small normals of both signs, so
    that flushed products, (-0) + (-0) and flushed c decide the signs; also an output rounding,
    RZ steps and a product order."""
    amd = [n for n, p in PRESETS.items() if p.arch in ("cdna2", "cdna3")]
    assert len(amd) == 10 and set(amd) <= set(SUPPORTED)
    base = PRESETS["cdna2-fp16"]
    variants = [base.replace(input_zero_sign="keep"),
                PRESETS["cdna2-bf16"].replace(input_zero_sign="keep", flush_inputs=False),
                base.replace(input_zero_sign="keep", flush_outputs=False,
                             step_rounding=("fp32", "RD")),
                base.replace(output_rounding=("fp16", "RNE")),
                PRESETS["cdna2-bf16"].replace(step_rounding=("fp32", "RZ"),
                                              k_order=tuple(range(7, -1, -1)))]
    negative_zeros = 0
    for i, p in enumerate(variants):
        rng = np.random.default_rng(40 + i)
        fa, fc = resolve_format(p.in_format), resolve_format(p.out_format)
        M, N, K = 6, 21, 2 * p.k
        sub = fa.min_normal / 2
        A = rng.choice([0.0, -0.0, sub, -sub, fa.min_normal, -fa.min_normal], (M, K),
                       p=[.3, .3, .1, .1, .1, .1])
        B = rng.choice([1.0, -1.0, 0.0, -0.0, sub, -sub], (K, N))
        C = rng.choice([0.0, -0.0, fc.min_normal / 2, -fc.min_normal / 2], (M, N))
        A[0], B[:, 0], C[0] = -0.0, 1.0, -0.0  # -0 products: D[0, 0] -0 where signs are kept
        got = _engines_agree(A, B, C, p)
        negative_zeros += int(((got == 0) & np.signbit(got)).sum())
        _engines_agree(_patterns(rng, fa, (M, K), False), _patterns(rng, fa, (K, N), False),
                       _patterns(rng, fc, (M, N), False), p)
    assert negative_zeros > 0


def test_two_stage_node_on_the_kernel():
    """The "two-stage" node (AMD CDNA3; the presets run in the agreement tests above) with the
    other alignments and rounding modes, an output rounding, a product order, flushed inputs
    and no e_zero: equal to the numpy engine on random patterns (NaN / Inf rows recomputed),
    on huge bf16 operands (products of 2^128 and more are Inf: rows that may reach it are
    recomputed), and on zeros and tiny values whose results round to zeros of both signs."""
    fp16, bf16 = PRESETS["cdna3-fp16"], PRESETS["cdna3-bf16"]
    variants = [fp16.replace(output_rounding=("fp16", "RNE"), step_rounding=("fp32", "RZ")),
                PRESETS["cdna3-fp8"].replace(k_order=tuple(range(31, -1, -1)),
                                             alignment="nearest", alignment2="truncate"),
                bf16.replace(flush_inputs=True, alignment2="nearest", e_zero=None),
                PRESETS["cdna3-bf8-fp8"].replace(alignment="floor",
                                                 step_rounding=("fp32", "RD")),
                bf16]
    negative_zeros = 0
    for i, p in enumerate(variants):
        rng = np.random.default_rng(60 + i)
        fa, fb, fc = _operand_format(p), _b_format(p), resolve_format(p.out_format)
        M, N, K = 6, 21, 2 * p.k
        _engines_agree(_patterns(rng, fa, (M, K), False), _patterns(rng, fb, (K, N), False),
                       _patterns(rng, fc, (M, N), False), p)
        A = _values(rng, fa, (M, K), fa.emax - 3, fa.emax)
        A[1::2] = _values(rng, fa, (M // 2, K), -2, 2)
        _engines_agree(A, _values(rng, fb, (K, N), fb.emax - 3, fb.emax),
                       _values(rng, fc, (M, N), 0, fc.emax), p)
        A = np.where(rng.random((M, K)) < 0.6, 0.0, _values(rng, fa, (M, K), fa.emin, 0))
        B = _values(rng, fb, (K, N), fb.emin, fb.emin + 2)
        C = rng.choice([0.0, fc.min_normal / 4, -fc.min_normal / 4], (M, N))
        got = _engines_agree(A, B, C, p)
        negative_zeros += int(((got == 0) & np.signbit(got)).sum())
    assert negative_zeros > 0


def test_lossless_fused_node_on_the_kernel():
    """Lossless fused profiles (AMD CDNA1: F = 276 / 520, every block the exact sum rounded
    once; the presets run in the agreement tests above) on the kernel's own loop: equal to the
    numpy engine with e_zero set or not, flushes, RZ / RD steps and an fp16 output, a product
    order, on random patterns and on zeros and subnormals of both signs (exact zero sums:
    +0 under the presets' zero_sum_sign "positive"; with "ieee" -0 where every term is
    negative, e_zero set or not)."""
    c1 = [n for n, p in PRESETS.items() if p.arch == "cdna1"]
    assert c1 and set(c1) <= set(SUPPORTED)
    fp16, bf16 = PRESETS["cdna1-fp16"], PRESETS["cdna1-bf16"]
    variants = [fp16.replace(e_zero=-30), bf16,
                fp16.replace(flush_inputs=True, flush_outputs=True, step_rounding=("fp32", "RZ"),
                             output_rounding=("fp16", "RNE")),
                bf16.replace(k_order=tuple(range(7, -1, -1)), step_rounding=("fp32", "RD")),
                fp16.replace(neg_zero_to_pos=True), bf16.replace(zero_sum_sign="ieee"),
                fp16.replace(e_zero=-30, zero_sum_sign="ieee")]
    negative_zeros = {}
    for i, p in enumerate(variants):
        assert p.lossless and kernel.unsupported(p) is None
        rng = np.random.default_rng(90 + i)
        fa, fc = resolve_format(p.in_format), resolve_format(p.out_format)
        M, N, K = 6, 21, 2 * p.k
        _engines_agree(_patterns(rng, fa, (M, K), False), _patterns(rng, fa, (K, N), False),
                       _patterns(rng, fc, (M, N), False), p)
        sub = fa.min_normal / 2
        A = rng.choice([0.0, -0.0, sub, -sub, fa.min_normal, -fa.min_normal], (M, K),
                       p=[.3, .3, .1, .1, .1, .1])
        B = rng.choice([1.0, -1.0, 0.0, -0.0, sub, -sub], (K, N))
        C = rng.choice([0.0, -0.0, fc.min_normal / 2, -fc.min_normal / 2], (M, N))
        A[0], B[:, 0], C[0] = -0.0, 1.0, -0.0  # -0 products and c: D[0, 0] -0 where kept
        got = _engines_agree(A, B, C, p)
        negative_zeros[i] = int(((got == 0) & np.signbit(got)).sum())
        # D[0, 0], a sum of -0 terms: -0 only under "ieee" with -0 kept
        assert bool(np.signbit(got[0, 0])) == (p.zero_sum_sign == "ieee"
                                                and not p.neg_zero_to_pos), i
    # -0 results: rounded ones (bf16) under "positive", exact zero sums too under "ieee"; the
    # fp16 presets' exact sums never round to zero (products reach 2^-48), so they have none
    assert negative_zeros[0] == negative_zeros[4] == 0
    assert min(negative_zeros[1], negative_zeros[5], negative_zeros[6]) > 0


def test_bf16_and_tf32_take_float32_only_when_the_data_allows():
    """Ordinary bf16 / tf32 data runs on the float32 path, wide or tiny data on float64, and
    both agree with the numpy engine (the agreement tests above run both paths too)."""
    rng = np.random.default_rng(12)
    for name in ("hopper-bf16", "ampere-tf32"):
        p = PRESETS[name]
        fin = resolve_format(p.in_format)
        A = _values(rng, fin, (5, 2 * p.k), -8, 8)
        B = _values(rng, fin, (2 * p.k, 7), -8, 8)
        assert kernel._value_dtype(p, A, B) == np.float32
        _engines_agree(A, B, np.zeros((5, 7)), p)
        for tiny in (2.0 ** -120, 2.0 ** 120):
            A2 = A.copy()
            A2[0, 0] = tiny
            assert kernel._value_dtype(p, A2, B) == np.float64
            _engines_agree(A2, B, np.zeros((5, 7)), p)
    assert kernel._value_dtype(PRESETS["hopper-fp16"]) == np.float32  # any fp16 operands
    # mixed: fp8 x fp4 statically float32 and int8 exponents; fp16 x bf16 by the data, int16
    mixed = PRESETS["rtx-blackwell-e5m2-e2m1"]
    assert kernel._value_dtype(mixed) == np.float32
    assert kernel._exponent_coding(*(resolve_format(f) for f in mixed.operand_formats))[0] \
        == np.int8
    fb16 = PRESETS["hopper-fp16"].replace(b_format="bf16")
    assert kernel._value_dtype(fb16) == np.float64
    assert kernel._value_dtype(fb16, np.ones((1, 1)), np.ones((1, 1))) == np.float32
    assert kernel._exponent_coding(resolve_format("fp16"), resolve_format("bf16"))[0] == np.int16
    assert kernel._value_dtype(PRESETS["hopper-bf16"].replace(alignment="floor"),
                               np.ones((1, 1)), np.ones((1, 1))) == np.float64


@pytest.mark.parametrize("name", ["hopper-fp16", "hopper-bf16", "ampere-fp16",
                                  "hopper-e4m3-fp16out"])
def test_float32_running_values(name, monkeypatch):
    """The float32 running-value path (kernel._run32, the set-up on 16 lanes): Inf in C carried
    through the chain, the smallest subnormal and the largest c, a row of A that is all zero
    (so the cut scale of a tiny c, 2^(F + 126), lies beyond float32's range and is applied in
    two steps), and wide exponents (fp16 outputs overflow mid-chain). Bitwise equal to the
    numpy engine, to the kernel whose fused pass leaves the rounding to a pass of its own (these
    four presets round in the fused pass, RZ or RNE: the blocks it cannot round exactly are set
    up again from c, which in the second k-chunk is the output row it writes), to the kernel
    without its fused pass (the general set-up for every block) and to the kernel's float64
    path."""
    p = PRESETS[name]
    fa, fb, fc = _operand_format(p), _b_format(p), resolve_format(p.out_format)
    rng = np.random.default_rng(_seed(name, 7))
    M, N, K = 6, 40, 2 * p.k
    # every exponent of fp16 / fp8; bf16 as wide as keeps its products in float32 (_value_dtype)
    A = _values(rng, fa, (M, K), max(fa.emin, -45), min(fa.emax, 45))
    B = _values(rng, fb, (K, N), max(fb.emin, -45), min(fb.emax, 45))
    A[1] = 0.0  # every product of row 1 is zero
    C = _patterns(rng, fc, (M, N))
    C[1, :4] = [fc.min_subnormal, -fc.min_subnormal, fc.max_finite, 0.0]
    C[2, 5], C[3, 6] = (np.inf, -np.inf) if fc.has_inf else (fc.max_finite, -fc.max_finite)
    assert kernel._run32(p, kernel._value_dtype(p, A, B))
    got = _engines_agree(A, B, C, p)
    if fc.has_inf:
        assert got[2, 5] == np.inf and got[3, 6] == -np.inf
    assert kernel._first_products(p, np.float32) > 0  # the fused pass took ordinary blocks
    fin = {"RZ": (0,), "RNE": (0, 0)}[p.step_rounding[1]]
    assert kernel._rounds_in_pass(p, np.float32) == fin  # and rounded the block there
    monkeypatch.setattr(kernel, "_rounds_in_pass", lambda *args: ())
    _assert_same(kernel.matmul(*prepare(A, B, C, p)[:3], p, **TILE), got, "rounding pass")
    monkeypatch.setattr(kernel, "_first_products", lambda *args: 0)
    _assert_same(kernel.matmul(*prepare(A, B, C, p)[:3], p, **TILE), got, "general set-up")
    monkeypatch.setattr(kernel, "_run32", lambda *args: False)
    _assert_same(kernel.matmul(*prepare(A, B, C, p)[:3], p, **TILE), got, "float64 path")


def test_every_kernel_preset_keeps_float32_running_values():
    """Every preset the int32 GEMM kernel runs (the other node kinds have loops of their own)
    takes the float32 running values (the 16-lane set-up) on ordinary data, as README's
    benchmark paragraph says; floor alignment does not."""
    one = np.ones((1, 1))
    slow = [n for n in SUPPORTED if kernel._loop(PRESETS[n]) == "fused"
            and not kernel._run32(PRESETS[n], kernel._value_dtype(PRESETS[n], one, one))]
    assert SUPPORTED and not slow, slow
    floor = PRESETS["hopper-fp16"].replace(alignment="floor")
    assert not kernel._run32(floor, kernel._value_dtype(floor, one, one))


# -- the fused pass (set-up and first products in one loop) against the general set-up -------

FUSED = ["volta-fp16", "ada-tf32", "ada-fp16", "ada-bf16", "hopper-fp16", "blackwell-bf16",
         "blackwell-tcgen05-e2m1", "blackwell-fp16-fp16out", "ada-e4m3"]


@pytest.fixture(scope="module")
def setups():
    """A jitted pair: the kernel's fused pass (_kernel_jit._fused_first) and its general path
    (_prepare_block, then _cut_products over the same P products) on one row-block."""
    from numba import njit

    from fpscope.emulate import _kernel_jit as J

    @njit
    def both(src, AV, EA, BV, EB, tiny_c, c_emin, ez, F, zb, need_min, align, P):
        w = src.size
        mx, mn = np.empty(w, EA.dtype), np.empty(w, EA.dtype)
        J._exponent_range(EA, EB, 0, 0, EA.shape[1], 0, w, mx, mn, need_min)
        out = []
        for fused in (True, False):
            lsb, sc = np.empty(w, np.int32), np.empty(w, np.float32)
            ct, acc = np.empty(w, np.int32), np.zeros(w + 2, np.int32)
            if fused:
                J._fused_first(src, mx, mn, AV, BV, 0, 0, 0, w, lsb, sc, ct, acc, tiny_c,
                               c_emin, ez, F, 126, zb, need_min, P)
            else:
                J._prepare_block(src, mx, mn, lsb, sc, ct, acc, w, tiny_c, c_emin, ez, F, 126,
                                 align, zb, need_min)
                J._cut_products(AV, BV, 0, 0, P, 0, w, sc, acc, align)
            out.append((lsb, sc, ct, acc))
        return out[0], out[1]

    return both


def _fused_and_general(setups, p, A, B, c):
    """Both set-ups of the first block of A (1, L) @ B (L, w) with c (w,) on float32 running
    values: ((lsb, sc, ct, acc) fused, the same general) and whether the kernel keeps the
    fused set-up (every lo in [-126, 127 - F], as gemm_kernel decides)."""
    fa, fb = kernel._operand_formats(p)
    coding = kernel._exponent_coding(fa, fb)
    AV, EA, _ = kernel._codes(A, fa, p.flush_inputs, coding, np.float32, True)
    BV, EB, _ = kernel._codes(B, fb, p.flush_inputs, coding, np.float32, False)
    fout = resolve_format(p.out_format)
    tiny = 2.0 ** fout.emin if p.flush_inputs else 0.0
    ez = kernel._NONE if p.e_zero is None else p.e_zero
    fused, general = setups(c.astype(np.float32), AV, EA, BV, EB, tiny, fout.emin, ez,
                            p.frac_bits, coding[2], not p.e_zero_inert,
                            kernel._ALIGN[p.alignment], kernel._first_products(p, np.float32))
    w = c.size
    kept = fused[3][w] >= -126 and fused[3][w + 1] <= 127 - p.frac_bits
    return fused, general, kept


@pytest.mark.parametrize("name", FUSED)
def test_fused_pass_equals_the_general_set_up(name, setups):
    """On ordinary data the kernel keeps the fused pass's set-up, which gives the general
    path's weight exponents, scales, cut c and the int32 sum of the first P cut products, bit
    for bit; a NaN or Inf c, and for fp32 outputs a block with nothing but zeros and a tiny c,
    make it set the block up again (their weight exponents lie outside [-126, 127 - F]), and
    the kernel then agrees with the numpy engine."""
    p = PRESETS[name]
    assert kernel._first_products(p, np.float32) in (4, 8, 16)
    fa, fb, fc = _operand_format(p), _b_format(p), resolve_format(p.out_format)
    rng = np.random.default_rng(_seed(name, 21))
    L, w = p.block_size, 200
    A = round_to_format(rng.standard_normal((1, L)), fa)
    B = round_to_format(rng.standard_normal((L, w)), fb)
    B[:, :3] = 0.0  # zero products (e_zero)
    c = round_to_format(rng.standard_normal(w) * 4, fc)
    c[5:9] = [0.0, -0.0, fc.min_subnormal, -fc.max_finite / 2 ** 20]
    fused, general, kept = _fused_and_general(setups, p, A, B, c)
    assert kept, "ordinary data left the fused pass"
    for what, x, y in zip(("lsb", "sc", "ct", "acc"), fused, general):
        assert np.array_equal(x[:w].view(np.int32), y[:w].view(np.int32)), what

    def set_up_again(A, B, c):
        r = p.k // L  # the same block through the kernel, as whole instructions
        _engines_agree(np.tile(A, (2, r)), np.tile(B, (r, 1)), np.vstack([c, c]), p, rows=1,
                       cols=64)
        return not _fused_and_general(setups, p, A, B, c)[2]

    for special in (np.nan, np.inf, -np.inf) if fc.has_inf else (np.nan,):
        c2 = c.copy()
        c2[17] = special
        assert set_up_again(A, B, c2), special
    c3 = np.zeros(w)
    c3[4] = fc.min_subnormal  # e_max = the output format's emin: lo = emin - F
    assert set_up_again(np.zeros((1, L)), B, c3) == (fc.emin - p.frac_bits < -126)


def test_unchecked_rounding_equals_the_checked_one():
    """_kernel_jit._finish with ``exact`` (no range check, as the fused pass allows) equals the
    checked rounding on every block sum and weight the fused pass lets through
    (kernel._exact_weights), at both ends of the weight range and at the largest sums, for
    RZ to fp32 and e8m13 and RNE to fp16; a weight one past either end does differ somewhere
    for the fp16 steps, so the range is not looser than it must be there."""
    from fpscope.emulate import _kernel_jit as J

    rng = np.random.default_rng(33)
    for name in ("hopper-fp16", "hopper-e4m3", "hopper-fp16-fp16out", "ampere-fp16-fp16out"):
        p = PRESETS[name]
        fstep = resolve_format(p.step_rounding[0])
        args = kernel._rounding_args(fstep, p.step_rounding[1], p.flush_outputs)
        lo_min, lo_max = kernel._exact_weights(p, fstep)
        top = kernel._cut_product_bound(p)
        T, L = kernel._int32_terms(p), p.block_size
        w = 4000
        acc = rng.integers(-min(T, L) * top, min(T, L) * top + 1, w).astype(np.int32)
        acc[:8] = [min(T, L) * top, -min(T, L) * top, 0, 0, 1, -1, 3, 2 ** 24 + 1]
        ct = rng.integers(-2 ** (p.frac_bits + 1) + 1, 2 ** (p.frac_bits + 1), w)
        ct = ct.astype(np.int32)
        ct[:8] = [2 ** (p.frac_bits + 1) - 1, -2 ** (p.frac_bits + 1) + 1, 0, -5, 0, 0, 0, 0]

        def both(lsb):
            runs = []
            for exact in (True, False):
                run = np.empty(w, np.float32)
                J._finish(run, acc, ct, lsb.astype(np.int32), w, *args, exact)
                runs.append(run)
            return runs

        for lsb in (rng.integers(lo_min, lo_max + 1, w), np.full(w, lo_min),
                    np.full(w, lo_max)):
            fast, checked = both(lsb)
            assert np.array_equal(fast.view(np.int32), checked.view(np.int32)), name
        # one below the range: 3 * 2^(lo_min - 1) is off the subnormals' grid; two above, the
        # largest sums overflow under RNE (h, kernel._exact_weights, rounds the bound up)
        for outside in (lo_min - 1, lo_max + 2) if p.step_rounding[1] == "RNE" else (
                lo_min - 1,):
            fast, checked = both(np.full(w, outside))
            assert not np.array_equal(fast.view(np.int32), checked.view(np.int32)), \
                (name, outside)


def test_long_blocks_whose_int32_runs_would_overflow_take_float64():
    """A block of more products than fit one int32 run adds each full run into the cut c,
    which the float32 path keeps as int32: with fp16 operands, F = 25 and 32-product blocks,
    c and the first 16-product run together exceed int32 (the kernel used to wrap: 1.875
    instead of 129.875). kernel._run32 sends such profiles to the float64 path, and keeps the
    float32 one for the 32-product fp8 / fp6 / fp4 presets, whose shorter significands fit."""
    p = PRESETS["hopper-fp16"].replace(name="long", block_size=32, k=32)
    assert kernel._int32_terms(p) == 16 and not kernel._run32(p, np.float32)
    a = 2047 / 1024  # the largest fp16 significand: each cut product near 2^27
    A, B = np.full((3, 64), a), np.full((64, 5), a)
    C = np.full((3, 5), np.nextafter(np.float32(2), np.float32(0)), dtype=np.float64)
    got = _engines_agree(A, B, C, p)
    assert (got > 64 * a * a).all()  # 64 products near 4 and c near 2: no wrap-around
    assert kernel._run32(PRESETS["blackwell-tcgen05-e4m3"], np.float32)
