"""The vectorised engine against the reference oracle, bit for bit, on every preset."""

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fpscope.emulate import HW_SETS, hw_c_values, load_hw_set, run_hw_set
from fpscope.emulate.reference import fdpa, output_bits
from fpscope.emulate.vectorized import check_exact, fdpa_batch, matmul
from fpscope.formats import FP32, decode, round_to_format
from fpscope.profile import PRESETS, Profile, get_profile, resolve_format

#: presets without block scales (the block-scaled ones, which take scales with every call:
#: tests/test_emulate_blockscale.py)
NAMES = sorted(n for n, p in PRESETS.items() if p.scale_format is None)


def _seed(name, salt):
    return [salt] + [ord(ch) for ch in name]


def _bits(values, p):
    return np.array([output_bits(float(v), p) for v in values], dtype=np.int64)


def _agree(a, b, c, p):
    """fdpa_batch equals the reference on every row (output bit patterns, NaN canonical)."""
    got = fdpa_batch(a, b, c, p)
    assert got.shape == (len(c),)
    want = [fdpa(a[i], b[i], float(c[i]), p) for i in range(len(c))]
    gb, wb = _bits(got, p), _bits(want, p)
    bad = np.flatnonzero(gb != wb)
    assert bad.size == 0, (f"{p.name}: {bad.size} rows differ, first {bad[0]}: "
                           f"a={a[bad[0]].tolist()} b={b[bad[0]].tolist()} c={c[bad[0]]!r} "
                           f"got {got[bad[0]]!r} want {want[bad[0]]!r}")


def _fmts(p):
    return resolve_format(p.in_format), resolve_format(p.out_format)


def _bfmt(p):
    """b's format (a mixed-input preset's b_format; in_format otherwise)."""
    return resolve_format(p.operand_formats[1])


def _random_patterns(rng, fmt, shape):
    return decode(rng.integers(0, 1 << fmt.bits, size=shape, dtype=np.uint64), fmt)


def _finite_patterns(rng, fmt, shape):
    x = _random_patterns(rng, fmt, shape)
    for _ in range(20):
        bad = ~np.isfinite(x)
        if not bad.any():
            break
        x[bad] = _random_patterns(rng, fmt, int(bad.sum()))
    return np.where(np.isfinite(x), x, 0.0)


def _no_neg_zero(x, fmt):
    """x with -0 read as +0 where fmt has no -0 (fnuz formats: AMD CDNA3 fp8 / bf8)."""
    return x if fmt.has_negative_zero else np.where(x == 0, 0.0, x)


def _values(rng, fmt, shape, emin, emax):
    """Finite values of fmt with exponents uniform in [emin, emax], random signs/significands."""
    e = rng.integers(emin, emax + 1, size=shape)
    m = rng.integers(0, 1 << (fmt.p - 1), size=shape)
    x = np.ldexp(1.0 + np.ldexp(m.astype(float), -(fmt.p - 1)), e)
    x = np.where(rng.random(shape) < 0.5, -x, x)
    return round_to_format(x, fmt, "RZ", overflow="saturate")  # clamps e4m3fn's 480 to 448


# -- (a) random bit patterns: NaN, Inf, subnormals, -0 --------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_random_bit_patterns(name):
    p = PRESETS[name]
    rng = np.random.default_rng(_seed(name, 1))
    fin, fout = _fmts(p)
    fb = _bfmt(p)
    n = 2000
    a = _random_patterns(rng, fin, (n, p.k))
    b = _random_patterns(rng, fb, (n, p.k))
    c = _random_patterns(rng, fout, n)
    _agree(a, b, c, p)
    # most rows above hold a NaN somewhere; the same patterns with the specials redrawn
    a = _finite_patterns(rng, fin, (n, p.k))
    b = _finite_patterns(rng, fb, (n, p.k))
    c = _finite_patterns(rng, fout, n)
    _agree(a, b, c, p)


@pytest.mark.parametrize("name", [n for n in NAMES if PRESETS[n].in_format == "tf32"])
def test_tf32_operands_are_reduced_from_fp32(name):
    p = PRESETS[name]
    rng = np.random.default_rng(_seed(name, 2))
    n = 300
    a = _random_patterns(rng, FP32, (n, p.k))
    b = _random_patterns(rng, FP32, (n, p.k))
    c = _finite_patterns(rng, FP32, n)
    _agree(a, b, c, p)
    _agree(a, b, c, p.replace(operand_conversion="round"))


# -- (b) cancellation, wide exponents, near overflow ----------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_cancellation_heavy(name):
    p = PRESETS[name]
    rng = np.random.default_rng(_seed(name, 3))
    fin, fout = _fmts(p)
    n, h = 500, p.k // 2
    a = _values(rng, fin, (n, p.k), -4, 4)
    b = _values(rng, _bfmt(p), (n, p.k), -4, 4)
    if h:
        a[:, h:2 * h] = -a[:, :h]  # exact pairwise cancellation ...
        b[:, h:2 * h] = b[:, :h]
        flip = rng.random((n, h)) < 0.3  # ... except some pairs perturbed
        a[:, h:2 * h] = np.where(flip, _values(rng, fin, (n, h), -4, 4), a[:, h:2 * h])
    s = (a * b).sum(axis=1)
    c = round_to_format(-s, fout, "RZ")  # c against the products
    c = np.where(rng.random(n) < 0.2, -c, c)
    c = np.where(rng.random(n) < 0.1, 0.0, c)
    _agree(a, b, c, p)


@pytest.mark.parametrize("name", NAMES)
def test_wide_exponents(name):
    p = PRESETS[name]
    rng = np.random.default_rng(_seed(name, 4))
    fin, fout = _fmts(p)
    fb = _bfmt(p)
    n = 500
    a = _values(rng, fin, (n, p.k), fin.emin - fin.p + 1, fin.emax)  # subnormals too (RZ)
    b = _values(rng, fb, (n, p.k), fb.emin - fb.p + 1, fb.emax)
    zero = rng.random((n, p.k)) < 0.1
    a = _no_neg_zero(np.where(zero, np.where(rng.random((n, p.k)) < 0.5, -0.0, 0.0), a), fin)
    c = _values(rng, fout, n, fout.emin - fout.p + 1, fout.emax)
    _agree(a, b, c, p)


@pytest.mark.parametrize("name", NAMES)
def test_near_overflow(name):
    p = PRESETS[name]
    rng = np.random.default_rng(_seed(name, 5))
    fin, fout = _fmts(p)
    n = 500
    fb = _bfmt(p)
    a = np.abs(_values(rng, fin, (n, p.k), fin.emax - 2, fin.emax))
    b = np.abs(_values(rng, fb, (n, p.k), fb.emax - 2, fb.emax))
    sign = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    a = a * sign[:, None]
    a = np.where(rng.random((n, p.k)) < 0.1, -a, a)
    mf = fout.max_finite
    ulp = math.ldexp(1.0, fout.emax - fout.p + 1)
    c = sign * (mf - ulp * rng.integers(0, 4, size=n))
    c = np.where(rng.random(n) < 0.2, -c, c)
    c = np.where(rng.random(n) < 0.2, sign * np.ldexp(1.0, fout.emax), c)
    _agree(a, b, c, p)


# -- (c) zero blocks ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_zero_blocks(name):
    p = PRESETS[name]
    rng = np.random.default_rng(_seed(name, 6))
    fin, fout = _fmts(p)
    n = 400
    sz = lambda shape: np.where(rng.random(shape) < 0.5, -0.0, 0.0)
    a, b = _no_neg_zero(sz((n, p.k)), fin), _no_neg_zero(sz((n, p.k)), _bfmt(p))
    # c: signed zeros, subnormals and small normals of the output format, random values
    c = np.concatenate([sz(n // 4),
                        _values(rng, fout, n // 4, fout.emin - fout.p + 1, fout.emin - 1),
                        _values(rng, fout, n // 4, fout.emin, fout.emin + 30),
                        _finite_patterns(rng, fout, n - 3 * (n // 4))])
    _agree(a, b, c, p)
    # one block of every instruction zero, the other ones small
    fb = _bfmt(p)
    a = _values(rng, fin, (n, p.k), fin.emin, fin.emin + 4)
    b = _values(rng, fb, (n, p.k), fb.emin, fb.emin + 4)
    L = p.block_size
    blk = rng.integers(0, p.stages, size=n)
    for s in range(p.stages):
        rows = blk == s
        a[rows, s * L:(s + 1) * L] = _no_neg_zero(sz((int(rows.sum()), L)), fin)
    _agree(a, b, c, p)
    # no zero product, every product below e_zero (where it is reachable): c = +-0 then takes
    # e_zero in the max on its own
    a = _values(rng, fin, (n, p.k), fin.emin - fin.p + 1, fin.emin + 1)
    b = _values(rng, fb, (n, p.k), fb.emin - fb.p + 1, fb.emin + 1)
    a = np.where(a == 0, math.ldexp(1.0, fin.emin), a)
    b = np.where(b == 0, math.ldexp(1.0, fb.emin), b)
    c[: n // 2] = sz(n // 2)
    _agree(a, b, c, p)


def test_profile_variants():
    """Non-preset knobs: floor/nearest alignment, e_zero None, flushing, -0 kept."""
    rng = np.random.default_rng(7)
    base = get_profile("ampere-fp16")
    fin, fout = _fmts(base)
    n = 400
    a = _values(rng, fin, (n, base.k), fin.emin - 10, fin.emax)
    b = _values(rng, fin, (n, base.k), fin.emin - 10, fin.emax)
    a = np.where(rng.random(a.shape) < 0.3, 0.0, a)
    c = np.concatenate([_values(rng, fout, n // 2, fout.emin - 23, 20), np.zeros(n - n // 2)])
    c = np.where(rng.random(n) < 0.5, -c, c)
    for kw in ({"alignment": "floor"}, {"alignment": "nearest"}, {"e_zero": None},
               {"e_zero": None, "neg_zero_to_pos": False}, {"neg_zero_to_pos": False},
               {"flush_inputs": True, "flush_outputs": True}, {"frac_bits": 3},
               {"block_size": 16, "alignment": "nearest"}):
        _agree(a, b, c, base.replace(**kw))
        _agree(np.zeros_like(a), b, c, base.replace(**kw))


# -- matmul ------------------------------------------------------------------------------------

def _loop_reference(A, B, C, p):
    M, K = A.shape
    N = B.shape[1]
    D = np.array(C, dtype=np.float64)
    for j in range(0, K, p.k):
        for m in range(M):
            for nn in range(N):
                D[m, nn] = fdpa(A[m, j:j + p.k], B[j:j + p.k, nn], float(D[m, nn]), p)
    return D


@pytest.mark.parametrize("name", NAMES)
def test_matmul_equals_reference_loop(name):
    p = PRESETS[name]
    rng = np.random.default_rng(_seed(name, 8))
    fin, fout = _fmts(p)
    fb = _bfmt(p)
    M, N, K = 3, 2, 2 * p.k if p.k >= 16 else 4 * p.k
    A = _values(rng, fin, (M, K), fin.emin, min(fin.emax, 6))
    B = _values(rng, fb, (K, N), fb.emin, min(fb.emax, 6))
    A[0, 1] = np.nan if fin.has_nan else A[0, 1]
    if fin.has_inf:
        A[2, 0] = np.inf
    C = _values(rng, fout, (M, N), -10, 10)
    D = matmul(A, B, C, profile=p, max_elems=2 * N * p.block_size)  # several row tiles
    want = _loop_reference(A, B, C, p)
    assert np.array_equal(_bits(D.ravel(), p), _bits(want.ravel(), p))
    D0 = matmul(A, B, profile=p)
    want0 = _loop_reference(A, B, np.zeros((M, N)), p)
    assert np.array_equal(_bits(D0.ravel(), p), _bits(want0.ravel(), p))


def test_matmul_pad():
    p = get_profile("hopper-fp16-fp16out")
    rng = np.random.default_rng(9)
    fin, _ = _fmts(p)
    A = _values(rng, fin, (2, 20), -20, 3)
    B = _values(rng, fin, (20, 3), -20, 3)
    with pytest.raises(ValueError, match="not a multiple"):
        matmul(A, B, profile=p)
    D = matmul(A, B, profile=p, pad=True)
    Ap = np.concatenate([A, np.zeros((2, 12))], axis=1)
    Bp = np.concatenate([B, np.zeros((12, 3))], axis=0)
    assert np.array_equal(D, _loop_reference(Ap, Bp, np.zeros((2, 3)), p))


# -- errors ------------------------------------------------------------------------------------

def test_errors():
    p = get_profile("ampere-fp16")
    a = np.ones((4, 16))
    with pytest.raises(ValueError, match="shape"):
        fdpa_batch(a[:, :8], a[:, :8], np.zeros(4), p)
    with pytest.raises(ValueError, match="shape"):
        fdpa_batch(a, a, np.zeros(3), p)
    with pytest.raises(ValueError, match="dimensional"):
        fdpa_batch(a[0], a[0], 0.0, p)
    bad = a.copy()
    bad[2, 5] = 1.0 + 2.0**-12
    with pytest.raises(ValueError, match=r"a\[2, 5\] = .*not exactly representable in fp16"):
        fdpa_batch(bad, a, np.zeros(4), p)
    with pytest.raises(ValueError, match="b\\[2, 5\\]"):
        fdpa_batch(a, bad, np.zeros(4), p)
    with pytest.raises(ValueError, match="c\\[1\\]"):
        fdpa_batch(a, a, np.array([0.0, 1.0 + 2.0**-30, 0.0, 0.0]), p)
    with pytest.raises(ValueError, match="fp16"):  # fp16 output: c must be an fp16 value
        fdpa_batch(a, a, np.array([0.0, 1.0 + 2.0**-20, 0.0, 0.0]),
                   get_profile("ampere-fp16-fp16out"))
    with pytest.raises(ValueError):
        fdpa_batch(np.full((4, 16), 70000.0), a, np.zeros(4), p)  # out of fp16's range
    with pytest.raises(ValueError, match="inner dimensions"):
        matmul(np.ones((2, 16)), np.ones((32, 2)), profile=p)
    with pytest.raises(ValueError, match="C must have shape"):
        matmul(np.ones((2, 16)), np.ones((16, 2)), np.zeros((2, 3)), profile=p)
    with pytest.raises(ValueError, match=r"B\[0, 1\]"):
        matmul(np.ones((2, 16)), np.array([[1.0, 0.1]] * 16), profile=p)
    with pytest.raises(ValueError, match="53"):
        check_exact(p.replace(frac_bits=50))


@pytest.mark.parametrize("name", NAMES)
def test_presets_are_exact_in_float64(name):
    p = PRESETS[name]
    check_exact(p)
    assert p.lossless or p.frac_bits + 2 + math.log2(p.block_size + 1) <= 53


def _odd_fraction(x):
    """A Fraction rounded to odd at 53 bits, as a float (the oracle of _exact_sum_odd)."""
    from fractions import Fraction

    if x == 0:
        return 0.0
    sign = -1 if x < 0 else 1
    x = abs(x)
    e = x.numerator.bit_length() - x.denominator.bit_length()
    while Fraction(2) ** e > x:
        e -= 1
    while Fraction(2) ** (e + 1) <= x:
        e += 1
    scaled = x / Fraction(2) ** (e - 52)  # in [2^52, 2^53)
    q = scaled.numerator // scaled.denominator
    if q != scaled:
        q |= 1
    return sign * math.ldexp(q, e - 52)


def test_exact_sum_odd_against_fractions():
    from fractions import Fraction

    from fpscope.emulate.vectorized import _exact_sum_odd

    rng = np.random.default_rng(5)
    rows = []
    for _ in range(3000):
        n = int(rng.integers(2, 18))
        e = rng.integers(-160, 160, size=n)
        t = np.ldexp(rng.integers(-(1 << 24), 1 << 24, size=n).astype(float), e)
        if rng.random() < 0.5:  # cancellation: a negated partner, one ulp off or exact
            j = int(rng.integers(0, n - 1))
            t[j + 1] = -t[j] * (1 + (rng.random() < 0.5) * 2.0**-23)
        if rng.random() < 0.2:
            t[rng.random(n) < 0.4] = 0.0
        rows.append(np.pad(t, (0, 17 - n)))
    T = np.array(rows)
    got = _exact_sum_odd(T)
    want = np.array([_odd_fraction(sum(Fraction(float(v)) for v in r)) for r in T])
    assert np.array_equal(got, want)
    # ties and sticky bits a plain float64 sum loses
    T = np.array([[1.0, 2.0**-53, 2.0**-110], [1.0, -(2.0**-54), -(2.0**-120)],
                  [2.0**60, -(2.0**60), 2.0**-80], [1.0, 2.0**-53, 0.0]])
    assert _exact_sum_odd(T).tolist() == [1.0 + 2.0**-52, 1.0 - 2.0**-53,
                                           2.0**-80, 1.0 + 2.0**-52]


def test_lossless_profile_uses_exact_sums():
    p = PRESETS["cdna1-fp16"]
    assert p.lossless and not PRESETS["hopper-fp16"].lossless
    a = np.zeros((3, 16))
    b = np.zeros((3, 16))
    c = np.array([1.0, 2.0**20, 1.0])
    # 1 + 2^-24 (a tie) + 2^-48 (sticky): rounds up; a 26-bit window would round to even
    a[0, :2], b[0, :2] = [2.0**-12, 2.0**-24], [2.0**-12, 2.0**-24]
    # 2^20 - 2^20 + 2^-48: the tiny product survives complete cancellation
    a[1, :2], b[1, :2] = [-(2.0**10), 2.0**-24], [2.0**10, 2.0**-24]
    # a tie alone rounds to even
    a[2, 0], b[2, 0] = 2.0**-12, 2.0**-12
    d = fdpa_batch(a, b, c, p)
    assert d.tolist() == [1.0 + 2.0**-23, 2.0**-48, 1.0]
    assert [fdpa(a[i], b[i], c[i], p) for i in range(3)] == d.tolist()
    assert fdpa_batch(a[:1], b[:1], c[:1], p.replace(frac_bits=24))[0] == 1.0


@pytest.mark.parametrize("name", [n for n in NAMES if PRESETS[n].in_format == "fp16"
                                  and PRESETS[n].out_format == "fp16"])
def test_zero_c_takes_e_zero(name):
    """c = +0 with no zero product: c's e_zero alone raises e_max and cuts a tiny product, which
    turns a sum just above an RNE tie into the tie (observable on the fp16-output presets)."""
    p = PRESETS[name]
    t = 2.0**-24
    a = np.array([[2.0**-14, t] + [t, -t] * ((p.k - 2) // 2)])  # 2^-25 (an fp16 tie) + 2^-48
    b = np.array([[2.0**-11, t] + [t, t] * ((p.k - 2) // 2)])  # + pairs that cancel
    assert fdpa(a[0], b[0], 0.0, p) == 0.0  # 2^-48 cut at 2^(e_zero - F): the tie, to even
    assert fdpa(a[0], b[0], 0.0, p.replace(e_zero=None)) == t
    for c in (0.0, -0.0, t):
        _agree(a, b, np.array([c]), p)
        _agree(a, b, np.array([c]), p.replace(e_zero=None))


def test_signed_zero_sums_when_negative_zero_is_kept():
    p = get_profile("ampere-fp16").replace(neg_zero_to_pos=False)
    a = np.full((4, 16), -0.0)
    b = np.ones((4, 16))
    c = np.array([-0.0, 0.0, -0.0, -0.0])
    a[2, 3] = 0.0  # one +0 product: the zero sum is +0
    a[3, :2] = [1.0, -1.0]  # exact cancellation, some terms positive: +0
    d = fdpa_batch(a, b, c, p)
    assert list(np.signbit(d)) == [True, False, False, False]
    _agree(a, b, c, p)
    _agree(a, b, c, p.replace(e_zero=None))


# -- AMD CDNA2 "pairwise" and CDNA3 "two-stage" nodes ---------------------------------------

_NODE_STEPS = [("fp32", "RNE"), ("fp32", "RZ"), ("fp32", "RD"), ("fp16", "RNE"), ("bf16", "RU"),
               ("e8m13", "RZ"), ("fp32", "RNA")]
_NODE_FORMATS = ["fp16", "bf16", "fp8_e4m3fn", "fp8_e5m2", "fp8_e4m3fnuz", "fp8_e5m2fnuz",
                 "fp6_e3m2", "fp4_e2m1"]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(node=st.sampled_from(["pairwise", "two-stage", "fused"]),
       L=st.sampled_from([1, 2, 4, 8, 16]), stages=st.integers(1, 3),
       G=st.sampled_from([1, 1, 2, 4]), F=st.integers(3, 30), dF2=st.integers(0, 14),
       alignment=st.sampled_from(["truncate", "floor", "nearest"]),
       alignment2=st.sampled_from(["truncate", "floor", "nearest"]),
       e_zero=st.one_of(st.none(), st.integers(-140, 10)),
       c_drop=st.one_of(st.none(), st.integers(0, 40)),
       overflow=st.sampled_from([None, None, "fp32", "fp16", "bf16"]),
       step=st.sampled_from(_NODE_STEPS), out=st.sampled_from(["fp32", "fp32", "fp16"]),
       a_fmt=st.sampled_from(_NODE_FORMATS),
       b_fmt=st.one_of(st.none(), st.sampled_from(_NODE_FORMATS)),
       flush_in=st.booleans(), flush_out=st.booleans(),
       zero_sign=st.sampled_from(["keep", "positive"]), nz2p=st.booleans(),
       specials=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_random_node_profiles(node, L, stages, G, F, dF2, alignment, alignment2, e_zero, c_drop,
                              overflow, step, out, a_fmt, b_fmt, flush_in, flush_out, zero_sign,
                              nz2p, specials, seed):
    """Random points of the CDNA2 / CDNA3 node space (and the fused node with the general
    product_overflow and input_zero_sign fields): the numpy engine equals the reference, bit
    for bit, on random bit patterns (NaN / Inf in some draws, subnormals, zeros)."""
    if node == "two-stage":
        if L % G:
            G = 1
        kw = {"frac_bits2": F - 1 + dF2, "alignment2": alignment2, "product_groups": G,
              "c_drop_bits": c_drop, "product_overflow": overflow, "e_zero": e_zero}
    elif node == "pairwise":
        kw = {"e_zero": None}
    else:
        kw = {"product_overflow": overflow, "e_zero": e_zero}
    p = Profile(name="random", arch="test", in_format=a_fmt, out_format=out, block_size=L,
                k=L * stages, frac_bits=F, alignment=alignment, step_rounding=step,
                flush_inputs=flush_in, flush_outputs=flush_out, neg_zero_to_pos=nz2p,
                input_zero_sign=zero_sign, b_format=b_fmt, node=node,
                nan_bits=0x7FFF if out == "fp16" else 0x7FFFFFFF,
                output_rounding=("fp16", "RNE") if out == "fp16" else None, **kw)
    try:
        check_exact(p)
    except ValueError:
        return  # a window the numpy engine refuses (the fused node's F + 2 + log2(L + 1) > 53)
    rng = np.random.default_rng(seed)
    fa, fout = _fmts(p)
    fb = _bfmt(p)
    n = 40
    pick = _random_patterns if specials else _finite_patterns
    a, b, c = pick(rng, fa, (n, p.k)), pick(rng, fb, (n, p.k)), pick(rng, fout, n)
    # a third of the rows small (subnormals, products below 2^-126), some operands zero
    small = rng.random(n) < 0.3
    a[small] = _values(rng, fa, (int(small.sum()), p.k), fa.emin - fa.p + 1, fa.emin + 2)
    zero = rng.random((n, p.k)) < 0.15
    a = _no_neg_zero(np.where(zero, np.where(rng.random((n, p.k)) < 0.5, -0.0, 0.0), a), fa)
    _agree(a, b, c, p)


def test_node_presets_run_on_every_engine():
    """The CDNA2 / CDNA3 presets give the same bits on engine "numba" (the kernel's pairwise
    and two-stage loops), "auto" and the numpy engine; the fields only those nodes read are
    refused in one line on a fused profile (kernel.unsupported)."""
    from fpscope.emulate import kernel
    from fpscope.emulate import matmul as api_matmul

    rng = np.random.default_rng(11)
    for name in ("cdna2-bf16", "cdna3-fp8-bf8"):
        p = PRESETS[name]
        fa, _ = _fmts(p)
        A = _values(rng, fa, (3, 2 * p.k), -3, 3)
        B = _values(rng, _bfmt(p), (2 * p.k, 4), -3, 3)
        assert kernel.unsupported(p) is None
        want = matmul(A, B, profile=p)
        for engine in ("auto", "numba"):
            assert np.array_equal(api_matmul(A, B, profile=p, engine=engine), want)
    for kw in ({"product_overflow": "fp32"}, {"input_zero_sign": "positive"}):
        why = kernel.unsupported(PRESETS["ampere-bf16"].replace(**kw))
        assert why is not None and "\n" not in why


def test_node_check_exact():
    p = PRESETS["cdna3-fp16"]
    check_exact(p)
    with pytest.raises(ValueError, match="two-stage sums do not fit"):
        check_exact(p.replace(frac_bits2=55))
    q = PRESETS["cdna2-fp16"]
    check_exact(q)
    with pytest.raises(ValueError, match="not exact in float64"):
        check_exact(q.replace(step_rounding=("fp64", "RNE")))


# -- mixed a/b input formats (b_format) --------------------------------------------------------

MIXED = [n for n in NAMES if PRESETS[n].b_format is not None]


def test_mixed_presets_exist():
    assert len(MIXED) >= 8
    assert {PRESETS[n].out_format for n in MIXED} == {"fp32", "fp16"}


def test_mixed_operands_are_checked_in_their_own_formats():
    """A in in_format, B in b_format: an e5m2-only b is accepted, an e4m3-only b is refused with
    a message naming operand b and both formats (and the other way round for a)."""
    p = get_profile("ada-e4m3-e5m2")
    a = np.ones((2, p.k))
    b = np.ones((2, p.k))
    b[1] = 0.0
    b[1, 3] = 2.0**-16  # e5m2's smallest subnormal: not an e4m3 value
    d = fdpa_batch(a, b, np.zeros(2), p)
    assert d.tolist() == [32.0, 2.0**-16]
    assert [fdpa(a[i], b[i], 0.0, p) for i in range(2)] == d.tolist()
    b[0, 0] = 1.125  # e4m3 only
    with pytest.raises(ValueError, match=r"^b\[0, 0\] = 1.125 is not exactly representable in "
                       r"fp8_e5m2, the format of operand b \(ada-e4m3-e5m2 takes a in "
                       r"fp8_e4m3fn, b in fp8_e5m2\)"):
        fdpa_batch(a, b, np.zeros(2), p)
    with pytest.raises(ValueError, match=r"^B\[0, 0\] = 1.125 .* operand b"):
        matmul(a, b.T, profile=p)
    with pytest.raises(ValueError, match="1.125 is not representable in fp8_e5m2"):
        fdpa(a[0], b[0], 0.0, p)
    a[1, 2] = 2.0**-16  # an e5m2 value is not an a (e4m3) value
    with pytest.raises(ValueError, match=r"^a\[1, 2\] = 1.52587890625e-05 is not exactly "
                       r"representable in fp8_e4m3fn, the format of operand a"):
        fdpa_batch(a, np.ones((2, p.k)), np.zeros(2), p)


def test_mixed_products_decode_each_operand_in_its_own_format():
    """b's precision and subnormal exponent are b's: e5m2 subnormals (emin -14) and e2m1 values
    as b against fp8 / fp6 a; the reference, the numpy engine and the kernel agree on the
    known answers."""
    e4m3_e5m2 = get_profile("ada-e4m3-e5m2")
    # 1.875 * 1.5 * 2^-15 = 2.8125 * 2^-15 (a subnormal e5m2 b; the product is exact in e8m13)
    a = np.array([[1.875] + [0.0] * 31])
    b = np.array([[1.5 * 2.0**-15] + [0.0] * 31])
    assert fdpa(a[0], b[0], 0.0, e4m3_e5m2) == 2.8125 * 2.0**-15
    # c = 1 sets e_max = 0; F = 13 cuts the product at 2^-13: trunc(2.8125 / 4) = 0 -> 1.0
    assert fdpa(a[0], b[0], 1.0, e4m3_e5m2) == 1.0
    assert fdpa_batch(a, b, np.array([1.0]), e4m3_e5m2).tolist() == [1.0]
    rtx = get_profile("rtx-blackwell-e5m2-e2m1")
    # a = 57344 (e5m2 max) times b = 6 (e2m1 max), plus 0.5 (e2m1 subnormal) times 2^-16
    a = np.array([[57344.0, 2.0**-16] + [0.0] * 30])
    b = np.array([[6.0, 0.5] + [0.0] * 30])
    want = 57344.0 * 6.0  # the tiny product is cut (F = 25 below 2^18)
    assert fdpa(a[0], b[0], 0.0, rtx) == want
    assert fdpa_batch(a, b, np.zeros(1), rtx).tolist() == [want]
    b[0, 0] = 0.0
    assert fdpa(a[0], b[0], 0.0, rtx) == 2.0**-17


def test_mixed_lossless_bound_uses_both_formats():
    from fpscope.profile import lossless_frac_bits

    assert lossless_frac_bits("fp16", "fp32", "fp16") == lossless_frac_bits("fp16", "fp32")
    # fp16 x bf16: top 15 + 127 = 142 (above fp32's 127), bottom -24 + -133 = -157 vs fp32 -149
    assert lossless_frac_bits("fp16", "fp32", "bf16") == 142 + 157
    assert lossless_frac_bits("bf16", "fp32", "fp16") == 142 + 157
    p = get_profile("cdna1-fp16").replace(b_format="bf16")
    assert not p.lossless
    assert p.replace(frac_bits=lossless_frac_bits("fp16", "fp32", "bf16")).lossless


# -- recorded hardware vectors (skipped where shared/data/hw-vectors is absent) ----------------

from hw_data import HW_ROOT, SKIP_REASON  # $FPSCOPE_HW_VECTORS, else ../shared


@pytest.mark.skipif(not HW_ROOT.is_dir(), reason=SKIP_REASON)
@pytest.mark.parametrize("key", sorted(HW_SETS))
def test_hw_vectors_match_reference_engine(key):
    """fdpa_batch gives the reference engine's bits on every recorded set (validated or not)."""
    p = PRESETS[HW_SETS[key]]
    a, b, c, d = load_hw_set(HW_ROOT, *key)
    cv = hw_c_values(*key, c)
    pad = np.zeros((len(a), p.k - a.shape[1]))
    got = _bits(fdpa_batch(np.hstack([a, pad]), np.hstack([b, pad]), cv, p), p)
    _, _, bad = run_hw_set(HW_ROOT, *key, limit=300)
    assert np.flatnonzero(got[:300] != d[:300]).tolist() == bad
    if p.status == "validated":
        assert np.array_equal(got, d.astype(np.int64))


@pytest.mark.parametrize("name", ["hopper-fp16", "hopper-e4m3", "ada-e4m3-fp16out",
                                  "hopper-bf16", "ampere-tf32"])
def test_inert_e_zero_is_e_zero_none(name):
    """Profile.e_zero_inert: where e_zero is at most every nonzero term's exponent (fp16 and
    fp8 inputs), e_zero None gives the same bits on every generator of the closed loop, the
    tiny and zero-heavy ones included; bf16 and tf32 products reach below it, so it is not
    inert there."""
    from fpscope.probes.validate import GENERATORS, generate

    p = get_profile(name)
    fin, fout = resolve_format(p.in_format), resolve_format(p.out_format)
    inert = p.e_zero_inert
    assert inert == (name not in ("hopper-bf16", "ampere-tf32"))
    rng = np.random.default_rng(5)
    if not inert:
        return
    for kind in GENERATORS:
        A, B, C = generate(kind, rng, fin, fout, 64, 2 * p.k, 8, p.block_size, fin)
        got = matmul(A, B, C, profile=p)
        want = matmul(A, B, C, profile=p.replace(e_zero=None))
        assert np.array_equal(got.view(np.int64), want.view(np.int64)), kind
