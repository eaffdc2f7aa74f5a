"""Fit a profile to recorded (a, b, c, d) vectors of an unknown device: ``fpscope fit``.

Input: one recorded set, each sample one instruction ``d = fdpa(a, b, c)`` over K products:

* a folder in the hw-vectors layout (``<GPU>/<format>/``: ``a_<GPU>_<format>.txt``, ``b_...``,
  ``c_<GPU>_fp32.txt``, ``d_<GPU>_<out>.txt``; shared/data/hw-vectors/README.md), read with
  :func:`fpscope.emulate.load_hw_set` and the README's rules for c (:func:`hw_c_values`);
* an ``.npz`` file with arrays ``a`` (n, K) and ``b`` (n, K) (float values of the input format;
  tf32: fp32 values), ``c`` (n,) (values of the output format), ``d`` (n,) (output bit
  patterns, unsigned integers), and 0-d string arrays ``in_format`` and ``out_format``
  (fp16, bf16, tf32, fp8_e4m3fn, fp8_e5m2, fp6_e2m3, fp6_e3m2, fp4_e2m1 / fp32, fp16), plus an
  optional ``b_format`` where b's format differs from a's (a mixed-input instruction such as
  e4m3 x e5m2), and for a block-scaled instruction (MX / NVFP4) a 0-d string array
  ``scale_format`` (e8m0 or ue4m3) with ``scale_a`` and ``scale_b`` (n, K / s) (the scales of
  a's and b's blocks of s elements, float values of the scale format; s = K / their width).

Search (every candidate is run by the vectorised engine on the samples, outputs compared bit for
bit, NaNs equal): the presets with the same formats; a grid over block size L (divisors of K),
kept bits F, alignment, step rounding and where c enters, scored on the first samples; then
coordinate descent over single parameters (L, F, alignment, e_zero, step and output rounding,
c entry, flushes, tf32 operand conversion) on all samples. The result lists, for the best
profile, every single-parameter change that still reproduces all samples (the candidates the
data cannot separate) and, for each rejected neighbour, the first sample that rules it out.
"""

from __future__ import annotations

import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .formats import encode
from .profile import PRESETS, ZERO_SUM_SIGNS, Profile, resolve_format

__all__ = ["FitError", "FitResult", "Recording", "fit", "load_recording", "unmatched"]

_FOLDER_FORMATS = {"fp16": "fp16", "bf16": "bf16", "tf32": "tf32", "E4M3": "fp8_e4m3fn",
                   "E5M2": "fp8_e5m2"}
_IN_FORMATS = ("fp16", "bf16", "tf32", "fp8_e4m3fn", "fp8_e5m2", "fp6_e2m3", "fp6_e3m2",
               "fp4_e2m1")
_SCALE_FORMATS = ("e8m0", "ue4m3")
_STEPS = {"fp32": [(("fp32", "RZ"), None), (("fp32", "RNE"), None), (("e8m13", "RZ"), None)],
          "fp16": [(("fp16", "RNE"), None), (("fp16", "RZ"), None),
                   (("fp32", "RZ"), ("fp16", "RNE")), (("e8m13", "RZ"), ("fp16", "RNE"))]}
_E_ZERO = {"fp32": -133, "fp16": -21}  # Hopper's (mmasim); searched below
_E_ZERO_SEARCH = [None, *range(-160, -9)]  # the e_zero values searched


class FitError(ValueError):
    """The recording cannot be read or is inconsistent."""


@dataclass
class Recording:
    """Recorded samples: a, b (n, K) float64 inputs; c (n,) float64; d (n,) output bits.

    ``scale_format``, ``scale_block_size``: samples of a block-scaled op (MX / NVFP4);
    candidates are then scored as block-scaled profiles with these fields, so that the
    "grouped" node (whose alignment exponent is the scale's) can be told from a fused one.
    None: an op without block scales. ``scale_a``, ``scale_b``: (n, K / scale_block_size)
    float64, the scales of each sample's blocks of a and b; None: every scale 1.
    """

    a: np.ndarray
    b: np.ndarray
    c: np.ndarray
    d: np.ndarray
    in_format: str
    out_format: str
    source: str
    b_format: str | None = None  # b's format where it differs from a's
    scale_format: str | None = None
    scale_block_size: int | None = None
    scale_a: np.ndarray | None = None
    scale_b: np.ndarray | None = None

    def scaled(self, p: Profile) -> Profile:
        """``p`` with the recording's block-scale fields (unchanged for an op without them).

        Raises:
            ValueError: ``p`` cannot take them (e.g. a grouped node whose group size does not
                divide the scale block size, or a node kind block scales are not modelled for).
        """
        if self.scale_block_size is None:
            return p
        return p.replace(scale_format=self.scale_format, scale_block_size=self.scale_block_size)

    @property
    def K(self) -> int:
        return self.a.shape[1]


def load_recording(path, out: str | None = None) -> Recording:
    """Read a hw-vectors folder or an .npz file (module docstring).

    Args:
        path: the folder (``.../H100/fp16``) or the .npz file.
        out: the output to read from a folder with both: "fp32" (default) or "fp16".

    Raises:
        FitError: missing files, unknown formats, inconsistent shapes.
    """
    from .emulate import hw_c_values, load_hw_set

    path = Path(path)
    if path.is_dir():
        gpu, folder = path.parent.name, path.name
        if folder not in _FOLDER_FORMATS:
            inside = sorted(d.name for d in path.iterdir() if d.is_dir() and d.name in
                            _FOLDER_FORMATS)
            hint = (f"; it holds the format folders {', '.join(inside)}: give one, e.g. "
                    f"{path / inside[0]}" if inside else "")
            raise FitError(f"{path}: folder {folder!r} is not one of "
                           f"{', '.join(_FOLDER_FORMATS)}{hint}")
        outs = [o for o in ("fp32", "fp16") if (path / f"d_{gpu}_{o}.txt").is_file()]
        if not outs:
            raise FitError(f"{path}: no d_{gpu}_fp32.txt or d_{gpu}_fp16.txt (hw-vectors layout)")
        out = out or outs[0]
        if out not in outs:
            raise FitError(f"{path} has no {out} output (has {', '.join(outs)})")
        try:
            a, b, c, d = load_hw_set(path.parent.parent, gpu, folder, out)
        except (OSError, ValueError) as exc:
            raise FitError(f"cannot read {path}: {exc}") from None
        return Recording(a, b, hw_c_values(gpu, folder, out, c), d.astype(np.uint64),
                         _FOLDER_FORMATS[folder], out, str(path))
    if not path.exists():
        raise FitError(f"{path} does not exist (expected a hw-vectors folder or an .npz file)")
    if path.suffix != ".npz" or not path.is_file():
        raise FitError(f"{path}: not a hw-vectors folder or an .npz file")
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in ("a", "b", "c", "d", "in_format", "out_format")}
            for k in ("b_format", "scale_format", "scale_a", "scale_b"):
                if k in z.files:
                    arrays[k] = z[k]
    except KeyError as exc:
        raise FitError(f"{path}: missing array {exc}") from None
    except (OSError, ValueError, EOFError, NotImplementedError, zipfile.BadZipFile,
            zlib.error) as exc:
        # a truncated or damaged archive (BadZipFile, EOFError, zlib.error are not OSErrors)
        raise FitError(f"cannot read {path} (a damaged or truncated .npz archive?): "
                       f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    fin, fout = str(arrays["in_format"]), str(arrays["out_format"])
    fb = str(arrays["b_format"]) if "b_format" in arrays else None
    if fin not in _IN_FORMATS or fout not in ("fp32", "fp16") or (
            fb is not None and fb not in _IN_FORMATS):
        raise FitError(f"{path}: formats {fin}{'' if fb is None else ' x ' + fb} -> {fout} "
                       f"not supported")
    fb = None if fb == fin else fb
    a, b = (np.asarray(arrays[k], dtype=np.float64) for k in ("a", "b"))
    c = np.asarray(arrays["c"], dtype=np.float64)
    d = np.asarray(arrays["d"])
    if d.dtype.kind not in "ui":
        raise FitError(f"{path}: d must hold output bit patterns (unsigned integers)")
    if a.ndim != 2 or a.shape != b.shape or c.shape != (len(a),) or d.shape != (len(a),):
        raise FitError(f"{path}: shapes a {a.shape}, b {b.shape}, c {c.shape}, d {d.shape} do "
                       f"not fit (n, K), (n, K), (n,), (n,)")
    _check_values(path, a, b, c, fin, fb, fout)
    rec = Recording(a, b, c, d.astype(np.uint64), fin, fout, str(path), fb)
    _read_scales(rec, arrays, path)
    return rec


def _check_values(path, a, b, c, fin: str, fb: str | None, fout: str) -> None:
    """a, b, c must hold values of their formats (a tf32 instruction's operands: fp32 values;
    NaN and Inf allowed where the format has them): a value that is not is named in one
    FitError (a bit pattern stored as a number, for instance), rather than spoiling every
    candidate's score.

    Raises:
        FitError: the first value that is not in its format.
    """
    from .formats import is_representable

    def fmt(name):
        return resolve_format("fp32" if name == "tf32" else name)

    for what, x, f in (("a", a, fmt(fin)), ("b", b, fmt(fb or fin)), ("c", c, fmt(fout))):
        ok = is_representable(x, f)
        if not ok.all():
            idx = tuple(int(i) for i in np.argwhere(~ok)[0])
            raise FitError(f"{path}: {what}[{', '.join(map(str, idx))}] = {float(x[idx])!r} is "
                           f"not a value of {f.name} ({what} holds values, not bit patterns; "
                           f"only d holds bit patterns)")


def _read_scales(rec: Recording, arrays: dict, path) -> None:
    """Set rec's block-scale fields from an .npz's optional ``scale_format``, ``scale_a`` and
    ``scale_b`` (all three or none).

    Raises:
        FitError: only some of them, an unknown scale format, shapes that do not fit
            (n, K / s) with s dividing K, or a scale that is not a value of the scale format.
    """
    from .formats import is_representable

    given = [k for k in ("scale_format", "scale_a", "scale_b") if k in arrays]
    if not given:
        return
    if len(given) < 3:
        raise FitError(f"{path}: a block-scaled recording needs scale_format, scale_a and "
                       f"scale_b (has {', '.join(given)})")
    fs = str(arrays["scale_format"])
    if fs not in _SCALE_FORMATS:
        raise FitError(f"{path}: scale_format {fs!r} is not one of {', '.join(_SCALE_FORMATS)}")
    sa, sb = (np.asarray(arrays[k], dtype=np.float64) for k in ("scale_a", "scale_b"))
    n, K = rec.a.shape
    if (sa.ndim != 2 or sa.shape != sb.shape or sa.shape[0] != n or sa.shape[1] == 0
            or K % sa.shape[1]):
        raise FitError(f"{path}: scale_a {sa.shape} and scale_b {sb.shape} must both be "
                       f"(n, K / s) with s dividing K = {K} (n = {n})")
    fmt = resolve_format(fs)
    for what, sv in (("scale_a", sa), ("scale_b", sb)):
        ok = is_representable(sv, fmt) | np.isnan(sv)
        if not ok.all():
            i, j = (int(x) for x in np.argwhere(~ok)[0])
            raise FitError(f"{path}: {what}[{i}, {j}] = {sv[i, j]!r} is not a value of {fs}")
    rec.scale_format, rec.scale_block_size = fs, K // sa.shape[1]
    rec.scale_a, rec.scale_b = sa, sb


@dataclass
class FitResult:
    """The best profile, its match count, and what the data leaves open."""

    profile: Profile
    matched: int
    total: int
    consistent: dict = field(default_factory=dict)
    separating: dict = field(default_factory=dict)
    evaluated: int = 0

    @property
    def exact(self) -> bool:
        return self.matched == self.total

    def to_dict(self) -> dict:
        return {"profile": self.profile.to_dict(), "matched": self.matched, "total": self.total,
                "exact": self.exact, "consistent": self.consistent,
                "separating_samples": self.separating, "candidates_evaluated": self.evaluated}

    def to_text(self) -> str:
        p = self.profile
        lines = [f"best profile: L={p.block_size} x {p.stages} (k={p.k}), F={p.frac_bits}, "
                 f"alignment {p.alignment}, e_zero {p.e_zero}, step {'-'.join(p.step_rounding)}"
                 + (f", output {'-'.join(p.output_rounding)}" if p.output_rounding else "")
                 + (f", c {p.c_entry}" if p.c_entry != "first" else "")
                 + node_text(p),
                 f"reproduces {self.matched}/{self.total} samples bit for bit"
                 + ("" if self.exact else "  (NOT exact)")]
        for name, values in self.consistent.items():
            if len(values) > 1:
                bound = " (the whole searched range)" if name == "e_zero" and \
                    len(values) > 150 else ""
                lines.append(f"  {name}: every value in {_ranges(values)}{bound} fits all "
                             f"samples (not separated by this data)")
        for name, seps in self.separating.items():
            items = list(seps.items())
            shown = ", ".join(f"{v} (sample {i})" for v, i in items[:6])
            more = f" and {len(items) - 6} more" if len(items) > 6 else ""
            lines.append(f"  {name} ruled out: {shown}{more}")
        return "\n".join(lines)


def _ranges(values) -> str:
    """Values as text, runs of consecutive integers as ``lo..hi``."""
    ints = sorted(v for v in values if isinstance(v, int) and not isinstance(v, bool))
    parts = [str(v) for v in values if not (isinstance(v, int) and not isinstance(v, bool))]
    i = 0
    while i < len(ints):
        j = i
        while j + 1 < len(ints) and ints[j + 1] == ints[j] + 1:
            j += 1
        parts.append(f"{ints[i]}..{ints[j]}" if j - i >= 2 else
                     ", ".join(str(v) for v in ints[i:j + 1]))
        i = j + 1
    return ", ".join(parts)


class _Scorer:
    """Runs candidate profiles on (a subset of) the samples."""

    def __init__(self, rec: Recording):
        self.rec = rec
        self.fout = resolve_format(rec.out_format)
        self.d = rec.d.astype(np.int64)
        self.nan = np.isnan(self._values(self.d))
        self.count = 0

    def _values(self, bits):
        dt = {"fp32": (np.uint32, np.float32), "fp16": (np.uint16, np.float16)}[self.rec.out_format]
        return bits.astype(dt[0]).view(dt[1]).astype(np.float64)

    def bad(self, p: Profile, rows=slice(None)) -> np.ndarray:
        """Indices (into ``rows``) of samples the profile does not reproduce."""
        from .emulate.vectorized import fdpa_batch

        self.count += 1
        r = self.rec
        try:
            if p.scale_format is None:
                scales = ()
            elif r.scale_a is not None:
                scales = (r.scale_a[rows], r.scale_b[rows])
            else:  # samples taken at unit scales
                scales = (np.ones((len(r.a[rows]), p.k // p.scale_block_size)),) * 2
            got = fdpa_batch(r.a[rows], r.b[rows], r.c[rows], p, *scales)
        except ValueError:
            return np.arange(len(r.a[rows]))
        nan = np.isnan(got)
        with np.errstate(all="ignore"):
            bits = encode(np.where(nan, 0.0, got), self.fout).astype(np.int64)
        ok = np.where(nan, self.nan[rows], (bits == self.d[rows]) & ~self.nan[rows])
        return np.flatnonzero(~ok)


def node_text(p: Profile) -> str:
    """The node of a fitted profile (a preset seed) other than the fused one: AMD CDNA2 /
    CDNA3, the grouped node of block-scaled NVFP4 / MXFP4; "" for the fused node."""
    if p.node == "grouped":
        return (f", node grouped (exact sums of {p.group_size} products, each aligned at its "
                f"scales' exponent)")
    if p.node == "pairwise":
        return f", node pairwise (F not read; zeros read as {p.input_zero_sign})"
    if p.node == "two-stage":
        return (f", node two-stage (F2={p.frac_bits2}, {p.alignment2}, "
                f"{p.product_groups} product group(s), c drop {p.c_drop_bits}, "
                f"product overflow {p.product_overflow})")
    return ""


def _divisors(K: int) -> list[int]:
    return [L for L in (1, 2, 4, 8, 16, 32, 64) if K % L == 0 and L <= K]


def _start(rec: Recording) -> Profile:
    kw = {"operand_conversion": "truncate"} if rec.in_format == "tf32" else {}
    L = max(_divisors(rec.K))
    return rec.scaled(Profile(
        name="fit", arch="unknown", in_format=rec.in_format, b_format=rec.b_format,
        out_format=rec.out_format, block_size=L, k=rec.K, frac_bits=24,
        e_zero=_E_ZERO[rec.out_format], nan_bits=0x7FFF if rec.out_format == "fp16" else 0x7FFFFFFF,
        **kw))


def _neighbours(p: Profile, rec: Recording) -> dict:
    """parameter name -> list of (label, profile) single-parameter changes."""
    out: dict = {}

    def add(name, label, **kw):
        try:
            q = p.replace(**kw)
        except ValueError:
            return
        if q != p:
            out.setdefault(name, []).append((label, q))

    for L in _divisors(rec.K):
        add("block_size", L, block_size=L)
    for F in range(3, 31):
        if F + 2 + np.log2(p.block_size + 1) <= 53:
            add("frac_bits", F, frac_bits=F)
    for al in ("truncate", "floor", "nearest"):
        add("alignment", al, alignment=al)
    for ez in _E_ZERO_SEARCH:
        add("e_zero", ez, e_zero=ez)
    for step, outr in _STEPS[rec.out_format]:
        add("rounding", f"{'-'.join(step)}" + (f" then {'-'.join(outr)}" if outr else ""),
            step_rounding=step, output_rounding=outr)
    for ce in ("first", "last"):
        add("c_entry", ce, c_entry=ce)
    for fl in (False, True):
        add("flush_inputs", fl, flush_inputs=fl)
        add("flush_outputs", fl, flush_outputs=fl)
        add("neg_zero_to_pos", fl, neg_zero_to_pos=fl)
    if not p.neg_zero_to_pos:  # read only where -0 results are kept
        for zs in ZERO_SUM_SIGNS:
            add("zero_sum_sign", zs, zero_sum_sign=zs)
    if rec.in_format == "tf32":
        for oc in ("truncate", "RNA"):
            add("operand_conversion", oc, operand_conversion=oc)
    return out


def fit(rec: Recording, grid_samples: int = 256, progress=None,
        use_presets: bool = True) -> FitResult:
    """Search the profile space for profiles that reproduce ``rec`` (module docstring).

    Args:
        rec: the recording.
        grid_samples: samples used to score the coarse grid.
        progress: optional callback(done, total) for the grid.
        use_presets: also start from the presets with the recording's formats (False: the
            grid and the descent alone, as for a device no preset describes).

    Returns:
        FitResult (``exact`` when every sample is reproduced).
    """
    sc = _Scorer(rec)
    head = slice(0, min(grid_samples, len(rec.a)))
    seeds = []
    for q in PRESETS.values() if use_presets else ():
        if (q.in_format == rec.in_format and q.out_format == rec.out_format
                and q.b_format == rec.b_format):
            L = min(q.block_size, rec.K)
            k_order = q.k_order if q.k == rec.K else None
            try:
                seeds.append(rec.scaled(q.replace(name="fit", status="experimental", evidence="",
                                                  block_size=L, k=rec.K, k_order=k_order)))
            except ValueError:
                continue
    best, best_bad = None, None
    for q in seeds:  # a preset that already fits everything ends the search
        if len(sc.bad(q)) == 0:
            best, best_bad = q, 0
            break
    if best is None:
        base = _start(rec)
        grid = [base.replace(block_size=L, frac_bits=F, alignment=al, step_rounding=st,
                             output_rounding=outr, c_entry=ce)
                for L in _divisors(rec.K) for F in range(8, 29)
                for al in ("truncate", "floor", "nearest") for st, outr in _STEPS[rec.out_format]
                for ce in ("first", "last") if F + 2 + np.log2(L + 1) <= 53]
        cands = seeds + grid
        scored = []
        for i, q in enumerate(cands):
            scored.append((len(sc.bad(q, head)), i, q))
            if progress:
                progress(i + 1, len(cands))
        scored.sort(key=lambda t: (t[0], t[1]))
        for _, _, q in scored[:4]:
            q, nbad = _descend(q, rec, sc)
            if best is None or nbad < best_bad:
                best, best_bad = q, nbad
            if nbad == 0:
                break
    res = FitResult(best, len(rec.a) - best_bad, len(rec.a))
    for name, opts in _neighbours(best, rec).items():
        ok, seps = [], {}
        if name == "e_zero" and best_bad == 0 and best.e_zero is not None:
            opts = _e_zero_edges(best, opts, sc)
        for label, q in opts:
            bad = sc.bad(q, head)
            if len(bad) == 0:
                bad = sc.bad(q)
            if len(bad) == best_bad and best_bad == 0:
                ok.append(label)
            elif len(bad):
                seps[str(label)] = int(bad[0])
        cur = _label(best, name)
        res.consistent[name] = [cur, *ok] if best_bad == 0 else [cur]
        if seps:
            res.separating[name] = seps
    res.evaluated = sc.count
    return res


def unmatched(rec: Recording, profile: Profile) -> np.ndarray:
    """Indices of the samples of ``rec`` that ``profile`` does not reproduce bit for bit (a
    block-scaled recording: at unit scales, with the recording's scale fields)."""
    return _Scorer(rec).bad(rec.scaled(profile))


def _e_zero_edges(best: Profile, opts, sc: _Scorer):
    """The e_zero options worth running on all samples: None, and the two ends of the interval
    of values around ``best.e_zero`` that reproduce everything, found by bisection (a zero
    term's exponent only matters above the other terms', so the consistent values form an
    interval), with the values just outside it."""
    by = {label: q for label, q in opts}
    fits = {best.e_zero: True}

    def ok(v):
        if v not in fits:
            fits[v] = len(sc.bad(by[v])) == 0
        return fits[v]

    lo_end, hi_end = _E_ZERO_SEARCH[1], _E_ZERO_SEARCH[-1]
    lo, hi = lo_end, best.e_zero  # smallest fitting value in [lo, hi]
    if ok(lo):
        hi = lo
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    first = hi
    lo, hi = best.e_zero, hi_end  # largest fitting value in [lo, hi]
    if ok(hi):
        lo = hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    last = lo
    keep = [None] + [v for v in range(first, last + 1)] + [first - 1, last + 1]
    return [(v, by[v]) for v in keep if v in by]


def _label(p: Profile, name: str):
    if name == "rounding":
        return "-".join(p.step_rounding) + (f" then {'-'.join(p.output_rounding)}"
                                            if p.output_rounding else "")
    return getattr(p, name)


def _descend(p: Profile, rec: Recording, sc: _Scorer, rounds: int = 4):
    """Coordinate descent on all samples: take any single change that reproduces more."""
    nbad = len(sc.bad(p))
    for _ in range(rounds):
        improved = False
        for opts in _neighbours(p, rec).values():
            for _, q in opts:
                if nbad == 0:
                    return p, 0
                n = len(sc.bad(q))
                if n < nbad:
                    p, nbad, improved = q, n, True
        if not improved:
            break
    return p, nbad
