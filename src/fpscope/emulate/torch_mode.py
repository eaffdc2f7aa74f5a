"""Run PyTorch code with a device's GEMM arithmetic: :func:`emulating`.

``with fpscope.emulate.emulating("hopper-fp16"): y = model(x)`` routes every matrix product of
CPU tensors that the code below sees (``torch.matmul`` / ``@``, ``mm``, ``bmm``, ``addmm``,
``baddbmm``, ``torch.nn.functional.linear`` and so ``nn.Linear``, their Tensor methods, and
the in-place ``addmm_`` / ``baddbmm_``) through :func:`fpscope.emulate.matmul` with the
profile's instruction chain and library level, so a model's forward pass runs on a CPU with a
GPU's GEMM arithmetic (Hawkeye's verifiable-ML use: an auditor re-executes a forward pass
once, with the arithmetic of the device that produced it).

What is emulated, per routed call:

* the GEMM: each output element is the profile's chain of instructions over K from +0
  (``emulate.matmul(A, B, profile=..., pad=True)``: a K that is not a multiple of
  ``profile.k`` takes zero products at its end, as the zero-filled last K tile of a GEMM
  kernel does), with the profile's library-level fields (split-K, promotion interval);
* the epilogue that adds C (``addmm`` / ``baddbmm`` input with beta = 1, ``linear``'s bias),
  chosen by ``bias=``:

  - ``"epilogue"`` (default): ``t = acc + C`` as one IEEE addition in the profile's output
    format, rounded to nearest-even, then ``t`` rounded to nearest-even to the tensor's dtype
    (fp32 -> fp16 / bf16: the double rounding cuBLAS's epilogue does, NUMERICS.md section 2).
    Source: cuBLAS computes ``D = alpha * op(A) op(B) + beta * C`` with the product
    accumulated first and C applied in the epilogue in the compute / scale type (cuBLAS
    documentation, ``cublasGemmEx``; CUTLASS ``epilogue::thread::LinearCombination``:
    ``alpha * accumulator + beta * source``); torch's CUDA ``addmm`` (and ``linear`` of a 2-D
    or contiguous input with a 1-D bias, which calls it) feeds the bias either through
    cuBLASLt's ``CUBLASLT_EPILOGUE_BIAS`` or as C with beta = 1 (``aten/src/ATen/native/cuda/
    Blas.cpp``), both after the accumulation. Not checked against a GPU recording yet.
  - ``"accumulator"``: C is the chain's initial accumulator ``d_{-1}`` (the ``C`` argument of
    :func:`fpscope.emulate.matmul`; C must then be values of the profile's output format), as
    one ``mma`` instruction chain fed C as its c operand computes it.
  - ``"separate"``: the GEMM result rounded to the tensor's dtype, then C added by torch's own
    elementwise add (torch's ``linear`` does this for a non-contiguous input of 3 or more
    dimensions).

  Only ``alpha = 1`` and ``beta`` in {0, 1} are modelled (beta = 0 ignores C, NaN included,
  as torch documents); other values are refused.
* the output: the dtype torch returns (fp16 in, fp16 out), every value rounded from the
  profile's output format to it exactly, to nearest-even, overflow to Inf (the emulator's
  values never pass through a library float64 -> fp16 / bf16 cast). NaN outputs get the
  profile's ``nan_bits`` where the tensor's dtype is the profile's output format, else the
  positive NaN with every fraction bit set (0x7FFF for fp16 and bf16, 0x7FFFFFFF for fp32:
  NVIDIA's canonical NaN, which cvt and the fp32 epilogue give, PTX ISA; not checked for AMD
  presets).

The operands a profile takes: fp16 tensors for a profile whose operands are fp16, bf16 for
bf16, fp32 tensors for a tf32 profile (read as fp32 words and reduced per
``profile.operand_conversion``); CPU tensors of one dtype, each operand at least 2-D.

What is not emulated: everything else runs with torch's CPU arithmetic: bias additions outside
a GEMM, activations, softmax, layernorm and other reductions, elementwise kernels, and fused
kernels a GPU runs differently (fused attention, ``scaled_dot_product_attention``, convolutions,
matrix-vector products, einsum). With ``strict=True`` (default) a call the context cannot
emulate raises: a routed op on tensors of a dtype the profile does not take, on a non-CPU
device, with a 1-D operand (a matrix-vector product), with ``alpha`` / ``beta`` not modelled,
and the GEMM-like ops listed in ``NOT_EMULATED`` on floating-point tensors, so a forward pass
either runs every GEMM with the device's arithmetic or stops at the one it cannot. With
``strict=False`` those calls run with torch's own arithmetic (or an enclosing context's) and
are counted in ``mode.passed_through``. Calls on "meta" tensors always pass through (shapes
only).

Results carry no autograd graph (forward only); the innermost of nested contexts handles a
call. torch is imported when a context is made, not before.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

__all__ = ["BIAS_MODES", "NOT_EMULATED", "OperatorNotEmulatedError", "emulating"]

#: How C (addmm / baddbmm input, linear bias) is added; see the module docstring.
BIAS_MODES = ("epilogue", "accumulator", "separate")

#: GEMM-like torch functions (names under ``torch``) that are not emulated: strict contexts refuse
#: them on floating-point tensors, others let torch compute them.
NOT_EMULATED = (
    "mv", "Tensor.mv", "dot", "Tensor.dot", "vdot", "Tensor.vdot", "inner", "Tensor.inner",
    "addmv", "Tensor.addmv", "addbmm", "Tensor.addbmm", "Tensor.addmv_", "Tensor.addbmm_",
    "einsum", "tensordot", "chain_matmul", "linalg.multi_dot", "linalg.vecdot", "cdist",
    "nn.functional.bilinear", "nn.functional.scaled_dot_product_attention",
    "nn.functional.multi_head_attention_forward", "nn.functional.conv1d",
    "nn.functional.conv2d", "nn.functional.conv3d", "nn.functional.conv_transpose1d",
    "nn.functional.conv_transpose2d", "nn.functional.conv_transpose3d",
)

# routed functions: attribute path under torch -> (name in messages, kind)
_ROUTED = (
    ("matmul", "torch.matmul", "matmul"), ("Tensor.matmul", "Tensor.matmul", "matmul"),
    ("Tensor.__matmul__", "Tensor.matmul", "matmul"),  # torch reports ``a @ b`` as Tensor.matmul
    ("Tensor.__rmatmul__", "Tensor.__rmatmul__", "rmatmul"),
    ("linalg.matmul", "torch.linalg.matmul", "matmul"),
    ("mm", "torch.mm", "mm"), ("Tensor.mm", "Tensor.mm", "mm"),
    ("bmm", "torch.bmm", "bmm"), ("Tensor.bmm", "Tensor.bmm", "bmm"),
    ("addmm", "torch.addmm", "addmm"), ("Tensor.addmm", "Tensor.addmm", "addmm"),
    ("Tensor.addmm_", "Tensor.addmm_", "addmm_"),
    ("baddbmm", "torch.baddbmm", "baddbmm"), ("Tensor.baddbmm", "Tensor.baddbmm", "baddbmm"),
    ("Tensor.baddbmm_", "Tensor.baddbmm_", "baddbmm_"),
    ("nn.functional.linear", "torch.nn.functional.linear", "linear"),
)

# argument names of each kind (positional order), and its keyword-only names
_PARAMS = {
    "matmul": (("input", "other"), ("out",)),
    "rmatmul": (("input", "other"), ()),
    "mm": (("input", "mat2"), ("out",)),
    "bmm": (("input", "mat2"), ("out",)),
    "addmm": (("input", "mat1", "mat2"), ("beta", "alpha", "out")),
    "addmm_": (("input", "mat1", "mat2"), ("beta", "alpha")),
    "baddbmm": (("input", "batch1", "batch2"), ("beta", "alpha", "out")),
    "baddbmm_": (("input", "batch1", "batch2"), ("beta", "alpha")),
    "linear": (("input", "weight", "bias"), ()),
}

_TABLES = None


def _resolve(torch, path: str):
    obj = torch
    for part in path.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def _tables(torch):
    """({function: (name, kind)} routed, {function: name} not emulated), built once."""
    global _TABLES
    if _TABLES is None:
        routed = {}
        for path, name, kind in _ROUTED:
            f = _resolve(torch, path)
            if f is not None:
                routed[f] = (name, kind)
        refused = {}
        for path in NOT_EMULATED:
            f = _resolve(torch, path)
            if f is not None and f not in routed:
                refused[f] = ("torch." + path).replace("torch.Tensor.", "Tensor.")
        _TABLES = (routed, refused)
    return _TABLES


def emulating(profile, *, strict: bool = True, bias: str = "epilogue", engine: str = "auto"):
    """A context manager that runs torch's matrix products on CPU tensors with ``profile``'s
    GEMM arithmetic (module docstring: what is emulated and what is not).

    Usage::

        with fpscope.emulate.emulating("hopper-fp16") as mode:
            y = model(x)          # fp16 CPU tensors; every nn.Linear / matmul emulated
        mode.emulated             # Counter: op name -> calls emulated

    Args:
        profile: a preset name ("hopper-fp16", "hopper-bf16", "hopper-tf32", ...; ``fpscope
            profiles`` lists them), a :class:`fpscope.profile.Profile`, or a path to a profile
            JSON file.
        strict: True: a call the context cannot emulate raises (TypeError for a dtype, device,
            1-D operand, argument or op that is not emulated; :class:`OperatorNotEmulatedError`,
            a RuntimeError, for the same through ``@`` and ``Tensor.matmul``; ValueError for alpha /
            beta values not modelled). False: such calls run with torch's own arithmetic and are
            counted in ``mode.passed_through``.
        bias: how addmm / baddbmm's input and linear's bias are added: "epilogue" (default),
            "accumulator" or "separate" (module docstring, with sources).
        engine: passed to :func:`fpscope.emulate.matmul` ("auto", "numba", "numpy").

    Returns:
        a ``torch.overrides.TorchFunctionMode``; entering it returns itself. Attributes:
        ``profile`` (the Profile), ``strict``, ``bias``, ``engine``, ``emulated`` and
        ``passed_through`` (Counters of calls by op name).

    Raises:
        ValueError: an unknown preset, bias mode or engine. ImportError: torch is not installed.
        TypeError: ``profile`` of another type.
    """
    from . import ENGINES

    from ..profile import load_profile

    prof = load_profile(profile)  # ValueError / TypeError with one line
    if bias not in BIAS_MODES:
        raise ValueError(f"unknown bias mode {bias!r}; known: {', '.join(BIAS_MODES)}")
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; known: {', '.join(ENGINES)}")
    return _mode_class()(prof, bool(strict), bias, engine)  # imports torch (ImportError)


_MODE_CLASS = None


def _mode_class():
    """The TorchFunctionMode subclass, defined on first use (torch is an optional extra)."""
    global _MODE_CLASS
    if _MODE_CLASS is None:
        from torch.overrides import TorchFunctionMode

        class EmulationMode(TorchFunctionMode):
            """Routes torch's GEMMs on CPU tensors through :func:`fpscope.emulate.matmul`
            (made by :func:`fpscope.emulate.emulating`)."""

            def __init__(self, profile, strict, bias, engine):
                super().__init__()
                self.profile = profile
                self.strict = strict
                self.bias = bias
                self.engine = engine
                self.emulated = Counter()
                self.passed_through = Counter()

            def __repr__(self):
                return (f"emulating({self.profile.name!r}, strict={self.strict}, "
                        f"bias={self.bias!r})")

            def __torch_function__(self, func, types, args=(), kwargs=None):
                return _dispatch(self, func, args, kwargs or {})

        _MODE_CLASS = EmulationMode
    return _MODE_CLASS


class _NotEmulated(Exception):
    """Internal: why a call cannot be emulated (exception type to raise, message)."""

    def __init__(self, exc_type, message):
        super().__init__(message)
        self.exc_type = exc_type


def _tensors(obj):
    import torch

    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            yield from _tensors(o)
    elif isinstance(obj, dict):
        for o in obj.values():
            yield from _tensors(o)


def _dispatch(mode, func, args, kwargs):
    import torch

    routed, refused = _tables(torch)
    tensors = list(_tensors((args, kwargs)))
    if any(t.device.type == "meta" for t in tensors):
        return func(*args, **kwargs)
    if func in routed:
        name, kind = routed[func]
        try:
            call = _bind(kind, args, kwargs)
            # torch's own checks (shapes, dtypes, broadcasting) and result shape, on meta tensors
            meta = func(*_to_meta(args), **_to_meta(kwargs))
            _check(mode, name, kind, call)
        except _NotEmulated as why:
            return _pass(mode, name, func, args, kwargs, why)
        result = _run(mode, kind, call, meta)
        mode.emulated[name] += 1
        return result
    if func in refused and any(t.is_floating_point() for t in tensors):
        return _pass(mode, refused[func], func, args, kwargs,
                     _NotEmulated(TypeError, "is not emulated (a GEMM-like kernel a GPU runs its "
                                             "own way)"))
    return func(*args, **kwargs)


class OperatorNotEmulatedError(RuntimeError):
    """What ``a @ b`` (and ``a.matmul(b)``, which torch hands to a mode as the same call)
    raises under a strict :func:`emulating` context where ``torch.matmul(a, b)`` raises
    TypeError: torch turns a TypeError raised inside ``@`` into NotImplemented, and Python then
    reports only "unsupported operand type(s) for @", without the reason."""


def _pass(mode, name, func, args, kwargs, why):
    if mode.strict:
        import torch

        exc_type = why.exc_type
        if exc_type is TypeError and func in (torch.Tensor.matmul, torch.Tensor.__matmul__,
                                              torch.Tensor.__rmatmul__):
            exc_type = OperatorNotEmulatedError  # a TypeError would be lost (class docstring)
        raise exc_type(f"{mode!r}: {name} {why} (pass strict=False to run such calls with "
                       f"torch's own arithmetic)")
    mode.passed_through[name] += 1
    return func(*args, **kwargs)


def _to_meta(obj):
    import torch

    if isinstance(obj, torch.Tensor):
        return torch.empty_strided(obj.size(), obj.stride(), dtype=obj.dtype, device="meta")
    if isinstance(obj, tuple):
        return tuple(_to_meta(o) for o in obj)
    if isinstance(obj, list):
        return [_to_meta(o) for o in obj]
    if isinstance(obj, dict):
        return {k: _to_meta(v) for k, v in obj.items()}
    return obj


def _bind(kind, args, kwargs):
    """{argument name: value} of a routed call; unknown arguments are not emulated."""
    pos, kw_only = _PARAMS[kind]
    if len(args) > len(pos):
        raise _NotEmulated(TypeError, f"with {len(args)} positional arguments is not emulated")
    call = dict(zip(pos, args))
    for k, v in kwargs.items():
        if k in call or (k not in pos and k not in kw_only):
            raise _NotEmulated(TypeError, f"with argument {k}= is not emulated")
        call[k] = v
    if kind == "rmatmul":  # other @ self
        call = {"input": call.get("other"), "other": call.get("input")}
    return call


def _accepted(profile):
    """The torch dtype name the profile's operands come in, or None."""
    fa, fb = profile.operand_formats
    if fa != fb:
        return None
    return {"fp16": "float16", "bf16": "bfloat16", "tf32": "float32"}.get(fa)


def _check(mode, name, kind, call):
    """Raise _NotEmulated unless the call is one this module emulates."""
    import torch

    ops = [call.get(k) for k in _PARAMS[kind][0]]
    gemm = ops[:2] if kind in ("matmul", "rmatmul", "mm", "bmm", "linear") else ops[1:3]
    extra = [t for t in (ops[2] if kind == "linear" else None,
                         ops[0] if kind.startswith(("addmm", "baddbmm")) else None,
                         call.get("out")) if t is not None]
    for t in gemm + extra:
        if not isinstance(t, torch.Tensor):
            raise _NotEmulated(TypeError, f"with a {type(t).__name__} operand is not emulated")
    for t in gemm + extra:
        if t.device.type != "cpu":
            raise _NotEmulated(TypeError, f"on {t.device} tensors is not emulated (fpscope "
                                          f"emulates on CPU tensors)")
    want = _accepted(mode.profile)
    dtypes = sorted({str(t.dtype) for t in gemm + extra})
    if want is None or dtypes != [f"torch.{want}"]:
        fmts = "/".join(mode.profile.operand_formats)
        takes = (f"torch.{want} tensors" if want else
                 f"operands in {fmts}, which no torch dtype holds")
        raise _NotEmulated(TypeError, f"on {', '.join(dtypes)} tensors is not emulated: "
                                      f"{mode.profile.name} takes {takes}")
    if any(t.dim() < 2 for t in gemm):
        raise _NotEmulated(TypeError, "with a 1-D operand (a matrix-vector product, not a GEMM "
                                      "on a GPU) is not emulated")
    alpha, beta = call.get("alpha", 1), call.get("beta", 1)
    if not (_is(alpha, 1) and (_is(beta, 1) or _is(beta, 0))):
        raise _NotEmulated(ValueError, f"with alpha={alpha!r}, beta={beta!r} is not emulated "
                                       f"(alpha = 1 and beta in {{0, 1}} are modelled)")


def _is(x, v) -> bool:
    try:
        return complex(x) == v
    except (TypeError, ValueError):
        return False


# -- the arithmetic ---------------------------------------------------------------------------


def _format(dtype):
    import torch

    from ..formats import BF16, FP16, FP32

    return {torch.float16: FP16, torch.bfloat16: BF16, torch.float32: FP32}[dtype]


def _to_numpy(t):
    """The values of an fp16 / bf16 / fp32 CPU tensor as a numpy array, exactly (fp16 and fp32
    keep their dtype, so a tf32 profile reads fp32 words; bf16 decoded to float64)."""
    import torch

    from ..formats import BF16, decode

    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        return decode(t.view(torch.int16).numpy().view(np.uint16), BF16)
    return t.numpy()


def _from_values(values, dtype, nan_word):
    """A CPU tensor of ``dtype`` holding float64 ``values`` (exactly representable in it),
    NaNs as ``nan_word``."""
    import torch

    from ..formats import encode

    fmt = _format(dtype)
    bits = encode(values, fmt)
    nan = np.isnan(values)
    if nan.any():
        bits = np.where(nan, bits.dtype.type(nan_word), bits)
    signed = {2: np.int16, 4: np.int32}[bits.dtype.itemsize]
    return torch.from_numpy(np.ascontiguousarray(bits).view(signed)).view(dtype)


def _nan_word(profile, dtype):
    """NaN bits of the output (module docstring)."""
    from ..profile import resolve_format

    fmt = _format(dtype)
    if fmt.name == resolve_format(profile.out_format).name and profile.nan_bits is not None:
        return profile.nan_bits
    return {"fp32": 0x7FFFFFFF, "fp16": 0x7FFF, "bf16": 0x7FFF}[fmt.name]


def _as_f64(x) -> np.ndarray:
    """An emulator result (float64, float32, float16 or ml_dtypes array) as float64, exactly."""
    x = np.asarray(x)
    return x if x.dtype == np.float64 else x.astype(np.float64)


def _gemm(mode, a, b, c, out_fmt):
    """Values (float64, of ``out_fmt``) of one 2-D GEMM: a (M, K), b (K, N), c None or (M, N)
    float64 (already beta-scaled, broadcast); bias mode "separate" passes c None."""
    from ..formats import round_to_format, sum_round_to_odd
    from ..profile import resolve_format
    from . import matmul

    prof = mode.profile
    fout = resolve_format(prof.out_format)
    M, K = a.shape
    N = b.shape[1]
    acc_c = c if (c is not None and mode.bias == "accumulator") else None
    if K == 0 or M == 0 or N == 0:
        acc = np.zeros((M, N)) if acc_c is None else np.array(acc_c, dtype=np.float64)
    else:
        acc = _as_f64(matmul(a, b, acc_c, profile=prof, pad=True, engine=mode.engine))
    if c is not None and mode.bias == "epilogue":
        with np.errstate(invalid="ignore", over="ignore"):
            acc = round_to_format(sum_round_to_odd(acc, c), fout, "RNE", overflow="inf")
    return round_to_format(acc, out_fmt, "RNE", overflow="inf")


def _batched(mode, A, B, C, out_fmt):
    """Values of ``A @ B (+ C)``: A (..., M, K), B (..., K, N) numpy arrays with torch's
    (numpy's) batch broadcasting, C None or float64 broadcast to the result's shape."""
    batch = np.broadcast_shapes(A.shape[:-2], B.shape[:-2])
    M, K, N = A.shape[-2], A.shape[-1], B.shape[-1]
    if B.ndim == 2:  # one GEMM of all rows: every row of D depends only on its row of A (and C)
        a = A.reshape(-1, K)
        c = None if C is None else C.reshape(-1, N)
        return _gemm(mode, a, B, c, out_fmt).reshape(*batch, M, N)
    A = np.broadcast_to(A, (*batch, M, K))
    B = np.broadcast_to(B, (*batch, K, N))
    D = np.empty((*batch, M, N))
    for i in np.ndindex(*batch):
        D[i] = _gemm(mode, A[i], B[i], None if C is None else C[i], out_fmt)
    return D


def _run(mode, kind, call, meta):
    import torch

    dtype, shape = meta.dtype, tuple(meta.shape)
    if kind == "linear":
        x, w, bias_t = call["input"], call["weight"], call.get("bias")
        A, B = _to_numpy(x), _to_numpy(w).T
        c_t = bias_t
    elif kind in ("matmul", "rmatmul", "mm", "bmm"):
        A = _to_numpy(call["input"])
        B = _to_numpy(call.get("other", call.get("mat2")))
        c_t = None
    else:  # addmm, baddbmm and their in-place forms
        m1 = call.get("mat1", call.get("batch1"))
        m2 = call.get("mat2", call.get("batch2"))
        A, B = _to_numpy(m1), _to_numpy(m2)
        c_t = None if _is(call.get("beta", 1), 0) else call["input"]
    out_fmt = _format(dtype)
    C = None
    if c_t is not None and mode.bias != "separate":
        C = np.broadcast_to(_to_numpy(c_t).astype(np.float64), shape)
    D = _batched(mode, A, B, C, out_fmt).reshape(shape)
    result = _from_values(D, dtype, _nan_word(mode.profile, dtype))
    if c_t is not None and mode.bias == "separate":
        result = result + c_t.detach()  # torch's own elementwise add (this mode is off here)
    if kind.endswith("_"):
        target = call["input"]
        with torch.no_grad():
            target.copy_(result)
        return target
    out = call.get("out")
    if out is not None:
        with torch.no_grad():
            if tuple(out.shape) != shape:
                out.resize_(shape)
            out.copy_(result)
        return out
    return result
