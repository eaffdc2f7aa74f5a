"""fpscope.emulate.emulating: torch's GEMMs on CPU tensors with a profile's arithmetic.

Every expected value is built by hand from per-call ``fpscope.emulate.matmul`` results and
plain numpy float32 / torch conversions (fp32 additions in numpy float32, fp32 -> fp16 by
numpy's single RNE rounding from float32, fp32 -> bf16 by torch's RNE), not by the module under
test. Crafted operands make the emulated result differ from torch's own CPU arithmetic, so a
call that is not routed fails the comparison. TIE: products 1 + u, u/2 and -2^-25 (u the ulp of
1 in fp16 / bf16) sum to just below the midpoint of 1 + u and 1 + 2u; hopper-fp16 / hopper-bf16
keep the -2^-25 (F = 25) and round the block toward zero to fp32, so the output rounds to 1 + u;
any fp32 round-to-nearest accumulation (torch's CPU GEMM) gives the midpoint, which rounds to
1 + 2u (NUMERICS.md section 2). CANCEL: products 2^23, -2^23 in one block cut everything below
2^-2 on those presets.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import fpscope.emulate as E  # noqa: E402
from fpscope.profile import PRESETS  # noqa: E402

F16, BF16, F32 = torch.float16, torch.bfloat16, torch.float32


def bits(t):
    """Bit patterns of a float tensor (NaN payloads included)."""
    view = {2: torch.int16, 4: torch.int32}[t.element_size()]
    return t.detach().contiguous().view(view).numpy()


def f32(t):
    """A float tensor's values as a float32 numpy array (exact for fp16 / bf16 / fp32)."""
    return t.detach().to(F32).numpy()


def acc(a, b, profile, c=None):
    """Per-call emulator result of a (M, K) @ b (K, N) (+ c as the chain's d_-1), float32."""
    return np.asarray(E.matmul(a, b, c, profile=profile, pad=True)).astype(np.float32)


def to_dtype(x32, dtype):
    """float32 numpy values rounded once to ``dtype`` (RNE)."""
    if dtype == F16:
        return torch.from_numpy(x32.astype(np.float16))
    return torch.from_numpy(np.ascontiguousarray(x32)).to(dtype)


def ref_linear(x, w, b, profile):
    """Linear with the bias added in the fp32 epilogue: fp32(acc + b), then the tensor dtype."""
    a = acc(f32(x).reshape(-1, x.shape[-1]), f32(w).T, profile)
    if b is not None:
        a = a + f32(b)[None, :]  # one IEEE fp32 addition, RNE
    return to_dtype(a, x.dtype).reshape(*x.shape[:-1], w.shape[0])


ULP = {F16: 2.0 ** -10, BF16: 2.0 ** -7}


def tie(dtype):
    """(operand row, operand column) of the TIE products 1 + u, u/2, -2^-25 (module docstring)."""
    u = ULP[dtype]
    return (torch.tensor([1 + u, u / 2, 2.0 ** -13], dtype=dtype),
            torch.tensor([1.0, 1.0, -(2.0 ** -12)], dtype=dtype))


def crafted_mlp(dtype, seed=0):
    """A Linear-ReLU-Linear MLP and input where output (0, 0) is hidden unit (0, 0), the TIE."""
    g = torch.Generator().manual_seed(seed)
    mlp = torch.nn.Sequential(torch.nn.Linear(32, 24), torch.nn.ReLU(), torch.nn.Linear(24, 8))
    mlp = mlp.to(dtype)
    with torch.no_grad():
        for p in mlp.parameters():
            p.copy_((torch.rand(p.shape, generator=g) - 0.5).to(dtype))
        row, col = tie(dtype)
        mlp[0].weight[0] = 0
        mlp[0].weight[0, :3] = col
        mlp[0].bias[0] = 0
        mlp[2].weight[0] = 0
        mlp[2].weight[0, 0] = 1
        mlp[2].bias[0] = 0
    x = (torch.rand(5, 32, generator=g) - 0.5).to(dtype)
    x[0] = 0
    x[0, :3] = row
    return mlp, x


@pytest.mark.parametrize("dtype,preset", [(F16, "hopper-fp16"), (BF16, "hopper-bf16")])
def test_mlp_equals_per_call_emulation_and_differs_from_torch(dtype, preset):
    mlp, x = crafted_mlp(dtype)
    with torch.no_grad():
        plain = mlp(x)
        with E.emulating(preset) as mode:
            got = mlp(x)
    assert mode.emulated == {"torch.nn.functional.linear": 2}
    assert got.dtype == dtype and got.shape == (5, 8)
    h = ref_linear(x, mlp[0].weight, mlp[0].bias, preset)
    h = torch.relu(h)
    want = ref_linear(h, mlp[2].weight, mlp[2].bias, preset)
    np.testing.assert_array_equal(bits(got), bits(want))
    u = ULP[dtype]
    assert float(got[0, 0]) == 1 + u and float(plain[0, 0]) == 1 + 2 * u


def test_mlp_random_seeds_equal_per_call_emulation():
    for seed in range(3):
        mlp, x = crafted_mlp(F16, seed)
        x = x[1:]  # random rows only
        with torch.no_grad(), E.emulating("ampere-fp16"):
            got = mlp(x)
        h = torch.relu(ref_linear(x, mlp[0].weight, mlp[0].bias, "ampere-fp16"))
        want = ref_linear(h, mlp[2].weight, mlp[2].bias, "ampere-fp16")
        np.testing.assert_array_equal(bits(got), bits(want))
        with torch.no_grad(), E.emulating("ampere-fp16"):
            got3 = mlp(x.reshape(2, 2, 32))  # a 3-D input: torch folds it into one GEMM
        np.testing.assert_array_equal(bits(got3), bits(want.reshape(2, 2, 8)))


def test_linear_with_grad_enabled_gives_a_detached_result():
    mlp, x = crafted_mlp(F16)
    with E.emulating("hopper-fp16"):
        got = mlp(x)  # parameters require grad; the emulated result is forward only
    assert not got.requires_grad
    assert got.dtype == F16


def test_tf32_linear_fp32_tensors():
    g = torch.Generator().manual_seed(1)
    lin = torch.nn.Linear(20, 6)  # K = 20: padded to 24 (hopper-tf32 k = 8)
    x = torch.rand(3, 20, generator=g)
    x[0, 0] = 1 + 2.0 ** -20  # not a tf32 value: truncated to 1 on the device
    with torch.no_grad():
        lin.weight.zero_()
        lin.weight[0, 0] = 1.0
        lin.weight[1:] = torch.rand(5, 20, generator=g)
        plain = lin(x)
        with E.emulating("hopper-tf32"):
            got = lin(x)
    want = ref_linear(x, lin.weight, lin.bias, "hopper-tf32")
    np.testing.assert_array_equal(bits(got), bits(want))
    assert bits(got)[0, 0] != bits(plain)[0, 0]


TIE16 = 1 + 2.0 ** -10  # the device's TIE result in fp16 (torch CPU: 1 + 2^-9)


def crafted_qk(cancel=False):
    """fp16 q, k (2, 4, 8, 16); q[1, 2, 3] . k[1, 2, 5] is the TIE (or, with cancel, the CANCEL
    products 2^23, -2^23, 2^-3 beside random ones)."""
    g = torch.Generator().manual_seed(2)
    q = (torch.rand(2, 4, 8, 16, generator=g) - 0.5).half()
    k = (torch.rand(2, 4, 8, 16, generator=g) - 0.5).half()
    if cancel:
        q[1, 2, 3, :3] = torch.tensor([4096.0, 4096.0, 1.0])
        k[1, 2, 5, :3] = torch.tensor([2048.0, -2048.0, 0.125])
    else:
        q[1, 2, 3], k[1, 2, 5] = 0, 0
        q[1, 2, 3, :3], k[1, 2, 5, :3] = tie(F16)
    return q, k


def test_batched_attention_scores_equal_per_batch_calls():
    q, k = crafted_qk()
    plain = q @ k.transpose(-1, -2)
    with E.emulating("hopper-fp16") as mode:
        got = q @ k.transpose(-1, -2)
    assert mode.emulated == {"Tensor.matmul": 1}
    assert got.shape == (2, 4, 8, 8) and got.dtype == F16
    for i in range(2):
        for j in range(4):
            want = to_dtype(acc(f32(q[i, j]), f32(k[i, j]).T, "hopper-fp16"), F16)
            np.testing.assert_array_equal(bits(got[i, j]), bits(want))
    assert float(got[1, 2, 3, 5]) == TIE16 != float(plain[1, 2, 3, 5])


def test_matmul_broadcasts_batch_dimensions_like_torch():
    g = torch.Generator().manual_seed(3)
    a = (torch.rand(2, 1, 3, 16, generator=g) - 0.5).half()
    b = (torch.rand(3, 16, 5, generator=g) - 0.5).half()
    a[1, 0, 2], b[2, :, 4] = 0, 0
    a[1, 0, 2, :3], b[2, :3, 4] = tie(F16)
    with E.emulating("hopper-fp16"):
        got = torch.matmul(a, b)
    assert got.shape == (2, 3, 3, 5)
    for i in range(2):
        for j in range(3):
            want = to_dtype(acc(f32(a[i, 0]), f32(b[j]), "hopper-fp16"), F16)
            np.testing.assert_array_equal(bits(got[i, j]), bits(want))
    assert float(got[1, 2, 2, 4]) == TIE16


def test_mm_bmm_methods_and_rmatmul():
    q, k = crafted_qk()
    a, b = q[1, 2], k[1, 2].T.contiguous()
    want = to_dtype(acc(f32(a), f32(b), "hopper-fp16"), F16)
    with E.emulating("hopper-fp16") as mode:
        outs = [torch.mm(a, b), a.mm(b), a.matmul(b), torch.linalg.matmul(a, b),
                torch.Tensor.__rmatmul__(b, a), torch.bmm(a[None], b[None])[0],
                a[None].bmm(b[None])[0]]
    for o in outs:
        np.testing.assert_array_equal(bits(o), bits(want))
    assert sum(mode.emulated.values()) == len(outs)
    assert float(want[3, 5]) == TIE16


def test_addmm_baddbmm_bias_in_the_epilogue_and_in_place_and_out():
    q, k = crafted_qk(cancel=True)
    a, b = q[1, 2], k[1, 2].T.contiguous()
    c = (torch.rand(8, generator=torch.Generator().manual_seed(4)) - 0.5).half()
    c[5] = 0.125
    want = to_dtype(acc(f32(a), f32(b), "hopper-fp16") + f32(c)[None, :], F16)
    assert float(want[3, 5]) == 0.125  # added after the chain, not cut with the products
    with E.emulating("hopper-fp16"):
        r1 = torch.addmm(c, a, b)
        r2 = torch.baddbmm(c, a[None], b[None])[0]
        r3 = c.expand(8, 8).clone().addmm_(a, b)
        out = torch.empty(0, dtype=F16)
        r4 = torch.addmm(c, a, b, out=out)
        r5 = torch.addmm(c, a, b, beta=0)  # C ignored
    for r in (r1, r2, r3, r4):
        np.testing.assert_array_equal(bits(r), bits(want))
    assert r4 is out
    np.testing.assert_array_equal(bits(r5), bits(to_dtype(acc(f32(a), f32(b), "hopper-fp16"),
                                                          F16)))


def test_bias_modes_accumulator_and_separate():
    q, k = crafted_qk(cancel=True)
    x, w = q[1, 2], k[1, 2]
    bias = torch.zeros(8, dtype=F16)
    bias[5] = 0.125
    with E.emulating("hopper-fp16", bias="accumulator"):
        got_acc = torch.nn.functional.linear(x, w, bias)
    with E.emulating("hopper-fp16", bias="separate"):
        got_sep = torch.nn.functional.linear(x, w, bias)
    c = np.broadcast_to(f32(bias).astype(np.float64), (8, 8))
    want_acc = to_dtype(acc(f32(x), f32(w).T, "hopper-fp16", c), F16)
    want_sep = to_dtype(acc(f32(x), f32(w).T, "hopper-fp16"), F16) + bias
    np.testing.assert_array_equal(bits(got_acc), bits(want_acc))
    np.testing.assert_array_equal(bits(got_sep), bits(want_sep))
    assert float(got_acc[3, 5]) == 0.0  # c entered the chain with the products and was cut
    assert float(got_sep[3, 5]) == 0.125


def test_nan_outputs_get_the_device_pattern():
    a = torch.zeros(2, 16, dtype=F16)
    a[0, 0] = float("nan")
    b = torch.ones(16, 2, dtype=F16)
    with E.emulating("hopper-fp16"):
        got = a @ b
    assert bits(got)[0, 0] == 0x7FFF and bits(got)[0, 1] == 0x7FFF
    assert float(got[1, 0]) == 0.0


def test_leaving_the_context_restores_torch_and_exceptions_unwind():
    q, k = crafted_qk()
    a, b = q[1, 2], k[1, 2].T
    plain = a @ b
    with E.emulating("hopper-fp16"):
        assert float((a @ b)[3, 5]) == TIE16
    assert float((a @ b)[3, 5]) == float(plain[3, 5]) != TIE16
    with pytest.raises(RuntimeError, match="boom"):
        with E.emulating("hopper-fp16"):
            raise RuntimeError("boom")
    assert float((a @ b)[3, 5]) == float(plain[3, 5])
    torch.mm(torch.ones(2, 3), torch.ones(3, 2))  # fp32: would be refused inside the context


def test_nesting_innermost_decides_and_passes_through_to_the_outer():
    q, k = crafted_qk()
    a, b = q[1, 2], k[1, 2].T
    with E.emulating("hopper-fp16") as outer:
        with E.emulating("hopper-bf16", strict=False) as inner:
            got = a @ b  # fp16: not the inner's dtype; the outer context emulates it
        assert float(got[3, 5]) == TIE16
        with E.emulating("hopper-fp16") as inner2:
            a @ b
    assert inner.passed_through == {"Tensor.matmul": 1} and not inner.emulated
    assert outer.emulated == {"Tensor.matmul": 1} and inner2.emulated == {"Tensor.matmul": 1}


def test_unsupported_dtype_device_and_ops_are_refused_with_a_reason():
    x32 = torch.ones(2, 16)
    with E.emulating("hopper-fp16"):
        with pytest.raises(TypeError, match=r"torch\.mm on torch\.float32 tensors is not "
                                            r"emulated: hopper-fp16 takes torch\.float16"):
            torch.mm(x32, x32.T)
        with pytest.raises(TypeError, match="1-D operand"):
            torch.matmul(x32.half(), torch.ones(16, dtype=F16))
        with pytest.raises(ValueError, match="alpha=2"):
            torch.addmm(torch.zeros(2, 2, dtype=F16), x32.half(), x32.half().T, alpha=2)
        with pytest.raises(TypeError, match="scaled_dot_product_attention is not emulated"):
            torch.nn.functional.scaled_dot_product_attention(*(x32.half()[None],) * 3)
        with pytest.raises(RuntimeError):  # torch's own shape check
            torch.mm(x32.half(), x32.half())
        # through @ the reason survives (a TypeError there would become "unsupported operand")
        from fpscope.emulate.torch_mode import OperatorNotEmulatedError

        with pytest.raises(OperatorNotEmulatedError,
                           match=r"Tensor\.matmul on torch\.float32 tensors is not emulated"):
            x32 @ x32.T
        with pytest.raises(OperatorNotEmulatedError, match="1-D operand"):
            x32.half() @ torch.ones(16, dtype=F16)
    with E.emulating("hopper-fp16", strict=False) as mode:
        r = torch.mm(x32, x32.T)
        torch.einsum("ij,kj->ik", x32.half(), x32.half())
    assert float(r[0, 0]) == 16.0
    assert mode.passed_through == {"torch.mm": 1, "torch.einsum": 1} and not mode.emulated


def test_cuda_tensors_are_refused():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    a = torch.ones(2, 16, dtype=F16, device="cuda")
    with E.emulating("hopper-fp16"), pytest.raises(TypeError, match="cuda"):
        a @ a.T


def test_profile_arguments(tmp_path):
    path = tmp_path / "p.json"
    path.write_text(PRESETS["hopper-fp16"].to_json())
    q, k = crafted_qk()
    a, b = q[1, 2], k[1, 2].T
    for prof in (PRESETS["hopper-fp16"], str(path)):
        with E.emulating(prof) as mode:
            assert float((a @ b)[3, 5]) == TIE16
        assert mode.profile == PRESETS["hopper-fp16"]
    with pytest.raises(ValueError, match="unknown profile"):
        E.emulating("hopper-fp17")
    with pytest.raises(ValueError, match="bias mode"):
        E.emulating("hopper-fp16", bias="fused")


def test_readme_example_runs_as_written(capsys):
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    start = text.index("### Run a PyTorch model with a GPU's GEMM arithmetic\n")
    end = text.index("\n### ", start + 1)
    (code,) = re.findall(r"```python\n(.*?)```", text[start:end], flags=re.S)
    exec(compile(code, "README.md", "exec"), {"__name__": "__readme__"})
    printed = capsys.readouterr().out.strip()
    assert "# " + printed in code  # the output the README shows
