"""Black-box matrix operations for arithmetic probing: ``D = op(A, B, C)``.

A :class:`MatrixTarget` is what the arithmetic probes (:mod:`fpscope.probes.driver`) and the
closed-loop validation (:mod:`fpscope.probes.validate`) talk to. It knows nothing about probing:

* ``target(A, B, C)``: A float64 (M, K), B float64 (K, N), C float64 (M, N); A and B hold values
  exactly representable in ``in_format`` (tf32: fp32 values, which the op itself reduces to tf32),
  C values of ``out_format``. Returns D float64 (M, N), the exact widening of the op's output.
* ``k``: the K the op takes (a matrix-unit instruction: its k), or None when any K >= 1 works
  (a GEMM); ``max_rows``: the largest M per call (None: any).
* Block-scaled ops (MX / NVFP4 instructions; ``scale_block_size`` set): ``target(A, B, C,
  scale_a, scale_b)`` with scale_a float64 (M, K / s) and scale_b float64 (K / s, N), s =
  ``scale_block_size``: scale_a[m, j] scales ``A[m, j*s:(j+1)*s]``, scale_b[j, n] scales
  ``B[j*s:(j+1)*s, n]`` (:func:`fpscope.emulate.matmul`'s layout). Values of ``scale_format``
  (e8m0: powers of two 2^-127 .. 2^127; ue4m3: 0 and the non-negative e4m3 values; NaN allowed)
  where the target's interface fixes it, any float64 where it does not (``scale_format``
  None: a callable that takes float scales; the scales family then finds the format). A
  scale left out is 1 (unit scales): every probe family that knows nothing of scales calls
  ``target(A, B, C)`` and sees the op's node arithmetic at unit scales. A target without block
  scales refuses them.

Adapters:

* :class:`SimulatedTarget`: a :class:`~fpscope.profile.Profile` run by the vectorised engine
  (:func:`fpscope.emulate.vectorized.matmul`, one instruction of ``k`` products per output; a
  block-scaled profile takes the scales too); NaN outputs carry the profile's ``nan_bits`` in
  the top significand bits of the float64 NaN, so that narrowing to the output format gives
  those bits.
* :class:`SimGemmTarget` (``simgemm:PRESET[,field=value...]``): a whole GEMM of any K run by
  :func:`fpscope.emulate.matmul` on the preset's instruction with library-level fields
  (``split_k``, ``split_k_order``, ``split_k_format``, ``promotion_interval``;
  :mod:`fpscope.emulate.library`); a K that does not fill whole slices is padded with zero
  products at the end, as a kernel fills its last k-tiles with zeros.
* :class:`CallableTarget`: any Python callable ``f(A, B, C) -> D`` (numpy float64 arrays in and
  an array-like out); block-scaled: ``f(A, B, C, scale_a, scale_b) -> D``.
* :class:`TorchMatmulTarget`: ``torch.matmul(A, B) + C`` (torch imported lazily; CPU, or CUDA
  with ``device="cuda"``). Operands are converted exactly: float64 -> storage dtype with
  :func:`fpscope.formats.to_storage` (fp16 and bf16 through float32 storage; never a float64 ->
  fp16/bf16 cast, which rounds twice, NUMERICS.md "Conversions in common libraries"), then
  ``torch.from_numpy``; the result is widened to float64 exactly.

Errors: every failure of the op (an exception, a wrong shape, a value that is not in
``out_format``) and every bad call (operand or scale shapes, a scale that is not a value of the
target's scale format, scales given to a target without block scales) raises
:class:`ProbeError` with a one-line reason.
"""

from __future__ import annotations

import math

import numpy as np

from ..formats import FP32, Format, encode, is_representable, to_storage
from ..profile import Profile, resolve_format

__all__ = [
    "CallableTarget",
    "MatrixTarget",
    "ProbeError",
    "SimGemmTarget",
    "SimulatedTarget",
    "TorchMatmulTarget",
    "evaluate_rows",
    "hex_in",
    "hex_out",
    "hex_scale",
    "make_matrix_target",
    "nan_bits_of",
]


class ProbeError(RuntimeError):
    """The op under test failed or answered something unusable; the message is one line."""


def _one_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


class MatrixTarget:
    """A black-box ``D = op(A, B, C)``, or ``op(A, B, C, scale_a, scale_b)`` when block-scaled.

    Attributes:
        name: a name for reports ("sim:hopper-fp16", "torch.matmul", "pkg.mod:func").
        in_format, out_format: format names of A (and B) and of C/D
            (:func:`fpscope.profile.resolve_format`); ``fin``, ``fout`` the formats.
        b_format: the format name of B where it differs from A's (mixed-input instructions such
            as e4m3 x e5m2), else None; ``fb`` is B's format either way.
        k: the K every call must have, or None (any K).
        max_rows: the largest M per call, or None.
        scale_block_size: elements of K that share one block scale (MX: 32, NVFP4: 16), or
            None: the op takes no scales.
        scale_format: the scale format name ("e8m0", "ue4m3") where the target's interface
            fixes it (scales are checked against it before the op sees them), else None;
            ``fscale`` the format or None.
        calls: calls of the op so far.
    """

    name = "matrix"

    def __init__(self, name: str, in_format: str, out_format: str, k: int | None = None,
                 max_rows: int | None = None, b_format: str | None = None,
                 scale_format: str | None = None, scale_block_size: int | None = None):
        from ..profile import SCALE_FORMATS

        self.name = name
        try:
            self.fin = resolve_format(in_format)
            self.fout = resolve_format(out_format)
            self.fb = resolve_format(b_format) if b_format is not None else self.fin
            self.fscale = resolve_format(scale_format) if scale_format is not None else None
        except ValueError as exc:
            raise ProbeError(str(exc)) from None
        self.in_format = self.fin.name
        self.out_format = self.fout.name
        self.b_format = self.fb.name if self.fb.name != self.fin.name else None
        self.k = k
        self.max_rows = max_rows
        sbs = scale_block_size
        if sbs is not None and (not isinstance(sbs, int) or isinstance(sbs, bool) or sbs < 1
                                or (k is not None and k % sbs)):
            raise ProbeError(f"{name}: scale_block_size must be a positive integer"
                             f"{f' dividing k = {k}' if k is not None else ''}, not {sbs!r}")
        if self.fscale is not None:
            if self.fscale.name not in SCALE_FORMATS:
                raise ProbeError(f"{name}: scale_format must be one of {', '.join(SCALE_FORMATS)}"
                                 f", not {scale_format!r}")
            if sbs is None:
                raise ProbeError(f"{name}: a scale_format needs scale_block_size")
        self.scale_format = None if self.fscale is None else self.fscale.name
        self.scale_block_size = sbs
        self.calls = 0

    @property
    def scaled(self) -> bool:
        """True for a block-scaled op (it takes scale_a and scale_b)."""
        return self.scale_block_size is not None

    def _call(self, A: np.ndarray, B: np.ndarray, C: np.ndarray, *scales: np.ndarray):
        raise NotImplementedError

    def __call__(self, A, B, C, scale_a=None, scale_b=None) -> np.ndarray:
        """D (M, N) float64 for A (M, K), B (K, N), C (M, N) float64; a block-scaled target
        also takes scale_a (M, K / s) and scale_b (K / s, N) float64 (default: all 1).

        Raises:
            ProbeError: bad shapes, scales given to a target without block scales or not values
                of its ``scale_format``, the op raised, or it returned the wrong shape / a value
                that is not in ``out_format``.
        """
        A = np.asarray(A, dtype=np.float64)
        B = np.asarray(B, dtype=np.float64)
        C = np.asarray(C, dtype=np.float64)
        if A.ndim != 2 or B.ndim != 2 or A.shape[1] != B.shape[0] or C.shape != (A.shape[0], B.shape[1]):
            raise ProbeError(f"{self.name}: bad operand shapes A {A.shape}, B {B.shape}, C {C.shape}")
        if self.k is not None and A.shape[1] != self.k:
            raise ProbeError(f"{self.name} takes K = {self.k}, got {A.shape[1]}")
        scales = self._scales(A.shape[0], A.shape[1], B.shape[1], scale_a, scale_b)
        self.calls += 1
        try:
            D = self._call(A, B, C, *scales)
        except ProbeError:
            raise
        except Exception as exc:  # noqa: BLE001 - a black box may raise anything
            raise ProbeError(f"{self.name} raised {_one_line(exc)}") from None
        try:
            D = np.asarray(D, dtype=np.float64)
        except Exception as exc:  # noqa: BLE001 - a black box may raise anything
            raise ProbeError(f"{self.name} returned something that is not an array of numbers: "
                             f"{_one_line(exc)}") from None
        if D.shape != C.shape:
            raise ProbeError(f"{self.name} returned shape {D.shape}, expected {C.shape}")
        ok = is_representable(D, self.fout) | np.isnan(D)
        if not ok.all():
            bad = D[~ok].flat[0]
            raise ProbeError(f"{self.name} returned {bad!r}, which is not a value of its output "
                             f"format {self.out_format}")
        return D

    def _scales(self, M: int, K: int, N: int, scale_a, scale_b) -> tuple:
        """() for a target without block scales; else the checked (scale_a, scale_b), unit
        scales where left out."""
        if not self.scaled:
            if scale_a is not None or scale_b is not None:
                raise ProbeError(f"{self.name} takes no block scales")
            return ()
        s = self.scale_block_size
        if K % s:
            raise ProbeError(f"{self.name}: K = {K} is not a multiple of its scale block size {s}")
        out = []
        for what, x, shape in (("scale_a", scale_a, (M, K // s)), ("scale_b", scale_b, (K // s, N))):
            x = np.ones(shape) if x is None else np.asarray(x, dtype=np.float64)
            if x.shape != shape:
                raise ProbeError(f"{self.name}: {what} must have shape {shape} (one scale per {s} "
                                 f"elements of K), got {x.shape}")
            if self.fscale is not None:
                ok = is_representable(x, self.fscale)
                if not ok.all():
                    idx = ", ".join(str(int(i)) for i in np.argwhere(~ok)[0])
                    raise ProbeError(f"{self.name}: {what}[{idx}] = {float(x[~ok].flat[0])!r} is "
                                     f"not a value of its scale format {self.scale_format}")
            out.append(x)
        return tuple(out)

    def describe(self) -> dict:
        d = {"name": self.name, "in_format": self.in_format, "out_format": self.out_format,
             "k": self.k}
        if self.b_format is not None:
            d["b_format"] = self.b_format
        if self.scaled:
            d["scale_format"] = self.scale_format
            d["scale_block_size"] = self.scale_block_size
        return d


def refuse_block_scales(profile: Profile, name: str) -> None:
    """Raise ProbeError for a block-scaled profile (``profile.scale_format``) where only one
    instruction per output is modelled with scales: a GEMM of any K (``simgemm:``) or a chain
    profile of the library level. Probe the instruction (``sim:PRESET``) instead."""
    if profile.scale_format is not None:
        raise ProbeError(f"{name}: {profile.name} is block-scaled ({profile.scale_format} "
                         f"scales per {profile.scale_block_size} elements of K); the probes "
                         f"take block-scaled instructions one call per instruction: use "
                         f"sim:{profile.name} or mmasim:{profile.name}")


class SimulatedTarget(MatrixTarget):
    """A profile run by :func:`fpscope.emulate.vectorized.matmul`: one instruction per output.

    Args:
        profile: the node arithmetic; K of every call is ``profile.k``. A block-scaled profile
            gives a block-scaled target (``scale_format``, ``scale_block_size`` of the
            profile; the scales go to the engine as ``scale_a``, ``scale_b``).
        name: default ``"sim:" + profile.name``.
    """

    def __init__(self, profile: Profile, name: str | None = None):
        super().__init__(name or f"sim:{profile.name}", profile.in_format, profile.out_format,
                         k=profile.k, b_format=profile.b_format,
                         scale_format=profile.scale_format,
                         scale_block_size=profile.scale_block_size)
        self.profile = profile
        m = self.fout.p - 1
        payload = profile.nan_bits & ((1 << m) - 1)
        sign = (profile.nan_bits >> (self.fout.bits - 1)) & 1
        word = (sign << 63) | (0x7FF << 52) | (payload << (52 - m))
        self._nan = np.array([word], dtype=np.uint64).view(np.float64)[0]

    def _call(self, A, B, C, SA=None, SB=None):
        from ..emulate.vectorized import matmul

        D = matmul(A, B, C, profile=self.profile, scale_a=SA, scale_b=SB)
        return np.where(np.isnan(D), self._nan, D)


#: The options of ``simgemm:PRESET,...``: the Profile's library-level fields.
GEMM_OPTIONS = ("split_k", "split_k_order", "split_k_format", "promotion_interval")


def parse_gemm_options(spec: str, text: str) -> dict:
    """``"split_k=4,split_k_order=pairwise"`` -> {"split_k": 4, "split_k_order": "pairwise"}.

    Values: ``split_k`` a positive integer; ``split_k_order`` serial or pairwise;
    ``split_k_format`` a format name or none; ``promotion_interval`` a positive integer or none.

    Raises:
        ProbeError: an unknown key, a repeated key, a malformed or bad value (one line).
    """
    from ..profile import SPLIT_K_ORDERS

    out: dict = {}
    for item in filter(None, (x.strip() for x in text.split(","))):
        key, eq, val = (x.strip() for x in item.partition("="))
        if not eq or not val:
            raise ProbeError(f"{spec}: option {item!r} is not key=value")
        if key not in GEMM_OPTIONS:
            import difflib

            close = difflib.get_close_matches(key, GEMM_OPTIONS, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ProbeError(f"{spec}: unknown option {key!r}; {hint}known: "
                             f"{', '.join(GEMM_OPTIONS)}")
        if key in out:
            raise ProbeError(f"{spec}: option {key} given twice")
        none = val.lower() in ("none", "null")
        if key in ("split_k", "promotion_interval"):
            if none and key == "promotion_interval":
                out[key] = None
                continue
            try:
                n = int(val)
            except ValueError:
                n = 0
            if n < 1 or str(n) != val.lstrip("+"):
                raise ProbeError(f"{spec}: {key} must be a positive integer"
                                 f"{' or none' if key == 'promotion_interval' else ''}, "
                                 f"not {val!r}")
            out[key] = n
        elif key == "split_k_order":
            if val not in SPLIT_K_ORDERS:
                raise ProbeError(f"{spec}: split_k_order must be one of "
                                 f"{', '.join(SPLIT_K_ORDERS)}, not {val!r}")
            out[key] = val
        else:
            if none:
                out[key] = None
                continue
            try:
                out[key] = resolve_format(val).name
            except ValueError as exc:
                raise ProbeError(f"{spec}: split_k_format: {exc}") from None
    return out


class SimGemmTarget(MatrixTarget):
    """A whole GEMM of any K: :func:`fpscope.emulate.matmul` with the profile's library-level
    fields (split-K, promotion interval; :mod:`fpscope.emulate.library`).

    K is padded with zero products at the end up to a multiple of ``split_k * profile.k`` (a
    kernel fills its last k-tiles with zeros), so every K >= 1 works.

    Args:
        profile: instruction arithmetic plus library fields.
        name: default ``"simgemm:" + profile.name`` plus the library fields that differ from
            one plain chain.

    Raises:
        ProbeError: a block-scaled profile (:func:`refuse_block_scales`).
    """

    def __init__(self, profile: Profile, name: str | None = None):
        refuse_block_scales(profile, name or f"simgemm:{profile.name}")
        if name is None:
            from ..emulate.library import _PLAIN

            opts = [f"{f}={getattr(profile, f)}" for f in GEMM_OPTIONS
                    if getattr(profile, f) != _PLAIN[f]]
            name = ",".join([f"simgemm:{profile.name}", *opts])
        super().__init__(name, profile.in_format, profile.out_format, k=None,
                         b_format=profile.b_format)
        self.profile = profile
        self._sim = SimulatedTarget(profile, name=name)

    def _call(self, A, B, C):
        from ..emulate import matmul

        K = A.shape[1]
        unit = self.profile.split_k * self.profile.k
        if K % unit:
            extra = unit - K % unit
            A = np.concatenate([A, np.zeros((A.shape[0], extra))], axis=1)
            B = np.concatenate([B, np.zeros((extra, B.shape[1]))], axis=0)
        D = matmul(A, B, C, profile=self.profile, engine="numpy", dtype="float64")
        return np.where(np.isnan(D), self._sim._nan, D)

    def describe(self) -> dict:
        d = super().describe()
        d["library"] = {f: getattr(self.profile, f) for f in GEMM_OPTIONS}
        return d


class CallableTarget(MatrixTarget):
    """Any Python callable ``fn(A, B, C) -> D`` (A (M, K), B (K, N), C (M, N) float64 numpy), or
    ``fn(A, B, C, scale_a, scale_b) -> D`` with ``scale_block_size`` (scale_a (M, K / s),
    scale_b (K / s, N) float64).

    Args:
        fn: the callable; it must return an (M, N) array-like of values of ``out_format``.
        in_format, out_format: format names (in_format: A's, and B's unless ``b_format``).
        name: a name for reports.
        k: the K it requires, or None (any).
        b_format: B's format where it differs from A's (e.g. an e4m3 x e5m2 scaled matmul).
        scale_block_size: elements of K per block scale (a block-scaled op), or None.
        scale_format: "e8m0" or "ue4m3" to check every scale against before ``fn`` sees it,
            or None: ``fn`` gets any float64 scale (and may refuse it by raising).
    """

    def __init__(self, fn, in_format: str, out_format: str = "fp32", name: str | None = None,
                 k: int | None = None, b_format: str | None = None,
                 scale_block_size: int | None = None, scale_format: str | None = None):
        if not callable(fn):
            raise ProbeError(f"{name or fn!r} is not callable")
        super().__init__(name or getattr(fn, "__name__", "callable"), in_format, out_format, k=k,
                         b_format=b_format, scale_format=scale_format,
                         scale_block_size=scale_block_size)
        self.fn = fn

    def _call(self, A, B, C, *scales):
        return self.fn(A.copy(), B.copy(), C.copy(), *(s.copy() for s in scales))


class NumpyMatmulTarget(MatrixTarget):
    """``np.matmul(A, B) + C`` in float32 or float64 (the CPU BLAS GEMM, then a separate add:
    a "c added last" arithmetic).

    Raises:
        ProbeError: a format other than fp32 / fp64.
    """

    def __init__(self, in_format: str = "fp32"):
        fin = resolve_format(in_format)
        if fin.name not in ("fp32", "fp64"):
            raise ProbeError(f"numpy.matmul: --in-format must be fp32 or fp64, not {in_format!r}")
        super().__init__("numpy.matmul", fin.name, fin.name, k=None)
        self.dtype = np.float32 if fin.name == "fp32" else np.float64

    def _call(self, A, B, C):
        a, b, c = (np.ascontiguousarray(x, dtype=self.dtype) for x in (A, B, C))
        return (np.matmul(a, b) + c).astype(np.float64)


_TORCH_NAMES = {"fp64": "float64", "fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


class TorchMatmulTarget(MatrixTarget):
    """``torch.matmul(A, B) + C`` in the torch dtype of ``in_format`` (fp64, fp32, fp16, bf16).

    The op's output dtype is the input dtype (torch.matmul), so ``out_format == in_format``; C is
    added by torch in that dtype (a separate rounding: a "c added last" arithmetic).

    Args:
        in_format: fp64, fp32, fp16 or bf16.
        device: "cpu" (default) or "cuda".

    Raises:
        ProbeError: torch missing, an unsupported format, CUDA asked for but absent.
    """

    def __init__(self, in_format: str = "fp32", device: str = "cpu"):
        try:
            import torch
        except ImportError:
            raise ProbeError("torch is not installed; pip install fpscope[torch]") from None
        except Exception as exc:  # noqa: BLE001 - a black box may raise anything
            raise ProbeError(f"torch failed to import: {_one_line(exc)}") from None
        fin = resolve_format(in_format)
        if fin.name not in _TORCH_NAMES:
            raise ProbeError(f"torch.matmul: --in-format must be one of {', '.join(_TORCH_NAMES)}, "
                             f"not {in_format!r}")
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise ProbeError(f"torch.matmul: device {device!r} asked for but CUDA is not available")
        if device != "cpu" and not device.startswith("cuda"):
            raise ProbeError(f"torch.matmul: unknown device {device!r}; use 'cpu' or 'cuda'")
        super().__init__(f"torch.matmul[{device}]", fin.name, fin.name, k=None)
        self.torch = torch
        self.device = device
        self.dtype = getattr(torch, _TORCH_NAMES[fin.name])

    def _tensor(self, x: np.ndarray):
        torch = self.torch
        if self.in_format == "bf16":
            # exact: values are bf16, hence fp32; fp32 -> bf16 of a representable value is exact
            to_storage(x, self.fin)  # refuses values that are not representable
            t = torch.from_numpy(to_storage(x, FP32)).to(torch.bfloat16)
        elif self.in_format == "fp16":
            to_storage(x, self.fin)
            t = torch.from_numpy(to_storage(x, FP32)).to(torch.float16)
        else:
            t = torch.from_numpy(np.ascontiguousarray(to_storage(x, self.fin)))
        return t.to(self.device)

    def _call(self, A, B, C):
        torch = self.torch
        with torch.no_grad():
            D = torch.matmul(self._tensor(A), self._tensor(B)) + self._tensor(C)
        return D.to(device="cpu", dtype=torch.float64).numpy()


def make_matrix_target(spec: str, in_format: str | None = None, out_format: str | None = None,
                       k: int | None = None, b_format: str | None = None,
                       scale_block_size: int | None = None,
                       scale_format: str | None = None) -> MatrixTarget:
    """A target from a name: ``sim:PRESET`` (one instruction of the preset run by the
    emulator; block-scaled presets take scales), ``simgemm:PRESET[,field=value...]`` (a GEMM of
    any K with library-level fields, :class:`SimGemmTarget`), ``mmasim:PRESET`` (mmasim's model
    of the preset's instruction; block-scaled presets take scales), ``numpy.matmul`` (the CPU
    BLAS, fp32 or fp64), ``torch.matmul`` (``torch.matmul:cuda`` for the GPU; plain
    ``torch.matmul`` uses CUDA when available), or ``package.module:function``. ``b_format``:
    B's format where it differs from A's (a callable's; for the others it must be what the
    target takes). ``scale_block_size``, ``scale_format``: a block-scaled callable's
    (``fn(A, B, C, scale_a, scale_b)``; :class:`CallableTarget`); for the others they must be
    what the target takes.

    Raises:
        ProbeError: unknown preset, bad format, import failure, a format or scale block size
            that does not match.
    """
    t = _make_target(spec, in_format, out_format, k, b_format, scale_block_size, scale_format)
    if b_format is not None:
        try:
            name = resolve_format(b_format).name
        except ValueError as exc:
            raise ProbeError(str(exc)) from None
        if name != t.fb.name:
            raise ProbeError(f"{spec} takes B in {t.fb.name}, not {b_format}")
    if scale_block_size is not None and scale_block_size != t.scale_block_size:
        raise ProbeError(f"{spec} takes " + (f"a block scale per {t.scale_block_size} elements "
                                              f"of K" if t.scaled else "no block scales") +
                         f", not one per {scale_block_size}")
    if scale_format is not None:
        try:
            name = resolve_format(scale_format).name
        except ValueError as exc:
            raise ProbeError(str(exc)) from None
        if name != t.scale_format:
            raise ProbeError(f"{spec} takes " + (f"{t.scale_format} scales" if t.scaled
                                                  else "no block scales") +
                             f", not {scale_format}")
    return t


def _make_target(spec: str, in_format, out_format, k, b_format, scale_block_size,
                 scale_format) -> MatrixTarget:
    if spec.startswith(("sim:", "simgemm:")):
        from ..profile import PRESETS

        gemm = spec.startswith("simgemm:")
        name, _, opts = spec.partition(":")[2].partition(",")
        if opts and not gemm:
            raise ProbeError(f"{spec}: options after the preset need simgemm:{name},...; "
                             f"sim:PRESET is one instruction of fixed K")
        if name not in PRESETS:
            import difflib

            close = difflib.get_close_matches(name, list(PRESETS), n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ProbeError(f"unknown preset {name!r}; {hint}'fpscope profiles' lists them")
        prof = PRESETS[name]
        for what, given, have in (("--in-format", in_format, prof.in_format),
                                  ("--out-format", out_format, prof.out_format)):
            if given is not None and resolve_format(given).name != resolve_format(have).name:
                raise ProbeError(f"{spec} has {what} {have}, not {given}")
        if not gemm:
            return SimulatedTarget(prof)
        fields = parse_gemm_options(spec, opts)
        try:
            prof = prof.replace(**fields)
        except ValueError as exc:
            raise ProbeError(f"{spec}: {exc}") from None
        return SimGemmTarget(prof, name=spec)
    if spec.startswith("mmasim:"):
        from .mmasim_target import MmasimTarget

        t = MmasimTarget(spec[7:])
        for what, given, have in (("--in-format", in_format, t.in_format),
                                  ("--out-format", out_format, t.out_format)):
            if given is not None and resolve_format(given).name != have:
                raise ProbeError(f"{spec} has {what} {have}, not {given}")
        return t
    if spec == "numpy.matmul":
        return NumpyMatmulTarget(in_format or "fp32")
    if spec in ("torch.matmul", "torch.matmul:cpu", "torch.matmul:cuda"):
        device = spec.partition(":")[2]
        if not device:
            try:
                import torch

                device = "cuda" if torch.cuda.is_available() else "cpu"
            except Exception:  # noqa: BLE001 - a broken torch install: use the CPU
                device = "cpu"
        t = TorchMatmulTarget(in_format or "fp32", device=device)
        if out_format is not None and resolve_format(out_format).name != t.out_format:
            raise ProbeError(f"torch.matmul returns {t.out_format}, not {out_format}")
        return t
    if ":" in spec:
        from ..targets.base import TargetError
        from ..targets.callable import load_function

        try:
            fn = load_function(spec)
        except TargetError as exc:
            raise ProbeError(str(exc)) from None
        if in_format is None:
            raise ProbeError(f"{spec}: give --in-format")
        return CallableTarget(fn, in_format, out_format or "fp32", name=spec, k=k,
                              b_format=b_format, scale_block_size=scale_block_size,
                              scale_format=scale_format)
    import difflib

    close = difflib.get_close_matches(spec, ["numpy.matmul", "torch.matmul"], n=1)
    raise ProbeError(f"unknown target {spec!r}: " + (f"did you mean {close[0]!r}? " if close
                                                     else "")
                     + "use sim:PRESET, simgemm:PRESET, mmasim:PRESET, numpy.matmul, "
                     "torch.matmul or package.module:function")


# -- helpers used by the probes --------------------------------------------------------------


def evaluate_rows(target: MatrixTarget, a, b, c, budget: int = 4096, sa=None,
                  sb=None) -> np.ndarray:
    """d_r = op on one dot product per row: a, b float64 (R, K), c (R,) -> d (R,).

    Rows are grouped by their b (and its scales); up to 64 distinct b vectors become the
    columns of one call (B (K, G), A the rows of those groups, C with each row's c in its own
    column; the other outputs of the call are not used), as long as rows x columns stays within
    ``budget``. A lane-independent op (checked by the determinism family) gives each row's d
    unchanged. ``sa``, ``sb`` (R, K / s) float64: each row's block scales of a and of b (a
    block-scaled target only; None: the target's unit scales).

    Raises:
        ProbeError: as ``target(...)``.
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    c = np.asarray(c, dtype=np.float64)
    scaled = sa is not None
    if scaled:
        sa = np.asarray(sa, dtype=np.float64)
        sb = np.asarray(sb, dtype=np.float64)
    R = a.shape[0]
    d = np.empty(R)
    keys: dict = {}
    braw = np.ascontiguousarray(b).view(np.uint64)
    sraw = np.ascontiguousarray(sb).view(np.uint64) if scaled else None
    for r in range(R):
        key = braw[r].tobytes() + (sraw[r].tobytes() if scaled else b"")
        keys.setdefault(key, []).append(r)
    groups = list(keys.values())
    cap = target.max_rows or R or 1
    batch: list = []
    nrows = 0

    def flush(batch):
        idx = np.concatenate([np.asarray(g) for g in batch])
        col = np.concatenate([np.full(len(g), j) for j, g in enumerate(batch)])
        B = np.stack([b[g[0]] for g in batch], axis=1)
        SB = np.stack([sb[g[0]] for g in batch], axis=1) if scaled else None
        for s in range(0, len(idx), cap):
            part, pc = idx[s:s + cap], col[s:s + cap]
            C = np.zeros((len(part), len(batch)))
            C[np.arange(len(part)), pc] = c[part]
            D = (target(a[part], B, C, scale_a=sa[part], scale_b=SB) if scaled
                 else target(a[part], B, C))
            d[part] = D[np.arange(len(part)), pc]

    for g in groups:
        if batch and (len(batch) >= 64 or (nrows + len(g)) * (len(batch) + 1) > budget):
            flush(batch)
            batch, nrows = [], 0
        batch.append(g)
        nrows += len(g)
    if batch:
        flush(batch)
    return d


def _hex(bits, width: int) -> str:
    return f"0x{int(bits):0{width}X}"


def hex_of(x, fmt: Format) -> list[str]:
    """Bit patterns of float64 values in ``fmt`` as hex strings (tf32: its fp32 container;
    a value not representable in ``fmt``: its float64 pattern, prefixed "f64:")."""
    fmt = FP32 if fmt.name == "tf32" else fmt
    x = np.atleast_1d(np.asarray(x, dtype=np.float64))
    width = max(1, math.ceil(fmt.bits / 4))
    ok = is_representable(x, fmt) | np.isnan(x)
    out = []
    for v, good in zip(x, ok):
        if good:
            out.append(_hex(encode(np.array([v]), fmt)[0], width))
        else:
            out.append("f64:" + _hex(np.array([v]).view(np.uint64)[0], 16))
    return out


def hex_in(x, target: MatrixTarget, operand: str = "a") -> list[str]:
    """Input bit patterns of operand "a" (A's format) or "b" (B's format)."""
    return hex_of(x, target.fb if operand == "b" else target.fin)


def hex_scale(x, target: MatrixTarget) -> list[str]:
    """Block-scale bit patterns in the target's scale format (its float64 patterns, prefixed
    "f64:", where the target's interface fixes no scale format)."""
    if target.fscale is not None:
        return hex_of(x, target.fscale)
    x = np.atleast_1d(np.asarray(x, dtype=np.float64))
    return ["f64:" + _hex(v, 16) for v in x.view(np.uint64)]


def hex_out(x, target: MatrixTarget) -> list[str]:
    """Output bit patterns; NaNs keep the payload they carry (:func:`nan_bits_of`)."""
    x = np.atleast_1d(np.asarray(x, dtype=np.float64))
    out = hex_of(x, target.fout)
    width = max(1, math.ceil(target.fout.bits / 4))
    for i, v in enumerate(x):
        if np.isnan(v):
            out[i] = _hex(nan_bits_of(v, target.fout), width)
    return out


def nan_bits_of(x: float, fmt: Format) -> int:
    """The ``fmt`` bit pattern of a float64 NaN narrowed as hardware narrows it: sign, all-ones
    exponent, the top ``p - 1`` bits of the float64 significand (numpy's float64 -> float32
    narrowing does this)."""
    w = int(np.array([x], dtype=np.float64).view(np.uint64)[0])
    m = fmt.p - 1
    sign = w >> 63
    payload = (w & ((1 << 52) - 1)) >> (52 - m)
    exp_bits = fmt.bits - 1 - m
    return (sign << (fmt.bits - 1)) | (((1 << exp_bits) - 1) << m) | payload
