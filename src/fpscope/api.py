"""The Python API: fpscope's commands as functions, at the package top (``import fpscope``).

======================  =======================================================================
``reveal(target, ...)``  the summation tree and node arithmetic of an op: a :class:`Revelation`
``verify(record, ...)``  replay a record against the live op: a report dict
``probe(target, ...)``   the arithmetic of a matrix-unit instruction: a ProbeReport
``fit(recording, ...)``  a profile fitted to recorded GPU outputs: a FitResult
``diff(a, b, ...)``      compare two records, trees or profiles: a DiffResult
``gate(baseline, ...)``  regression gate of a record against the live op: a GateResult
``load_record(path)``    a validated record dict
``load_profile(x)``      a Profile from a preset name, a Profile or a JSON path
======================  =======================================================================

A target is a name (``"numpy.sum"``, ``"torch.matmul"``, ``"mypkg.kernels:my_sum"``), any Python
callable (a function, lambda or bound method), or a Target already built by
:func:`fpscope.targets.make_target`. The CLI (:mod:`fpscope.cli`) parses arguments and prints
what these return.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = ["Revelation", "diff", "fit", "gate", "load_record", "probe", "reveal", "verify"]

#: targets whose n is K of a matrix product (default n 256 rather than 1024)
MATRIX_TARGETS = frozenset({
    "numpy.matmul", "numpy.vecmat", "numpy.matvec", "numpy.einsum", "torch.mm", "torch.mv",
    "torch.matmul", "jax.numpy.matmul", "emulate.matmul",
})


def default_n(target) -> int:
    """n when neither n nor shape is given: 256 for matrix ops (an n x n x n product), 4096
    elements per rank for collectives, else 1024."""
    name = target.strip() if isinstance(target, str) else ""
    for short, full in (("np.", "numpy."), ("jnp.", "jax.numpy.")):
        if name.startswith(short):
            name = full + name[len(short):]
    if name.startswith(("torch.distributed.", "dist.", "mpi4py.", "MPI.")):
        from .collectives.target import DEFAULT_ELEMENTS

        return DEFAULT_ELEMENTS
    return 256 if name.split("[")[0] in MATRIX_TARGETS else 1024


@dataclass
class Revelation:
    """What :func:`reveal` found, with the record ``fpscope reveal --record`` writes.

    Attributes:
        record: the reveal record (dict; schema ``fpscope.record/2``, DESIGN.md).
        tree: the :class:`fpscope.tree.SumTree` (of output (0, 0) where outputs differ).
        result: the :class:`fpscope.reveal.RevealResult` (mask, stats, accumulator, classes).
        failure: the :class:`fpscope.reveal.RevealError` of a replay that did not match bit
            for bit (only with ``reveal(..., check=False)``), else None.
        target: the Python function object that was revealed, kept for :meth:`verify` (no
            name can rebuild it); None for named targets.
    """

    record: dict
    tree: object
    result: object
    failure: object = None
    target: object = field(default=None, repr=False)

    @property
    def summary(self) -> str:
        """One paragraph in words: the tree's shape (fpscope.summary)."""
        return self.record["summary"]

    @property
    def arithmetic(self):
        """The node arithmetic (:class:`fpscope.arithmetic.Arithmetic`: a format per node, the
        entry of each product, the output format), or None where it was not measured."""
        return self.result.arithmetic

    @property
    def classes(self) -> list | None:
        """Matrix ops whose outputs use several trees: a list of ``(tree, positions,
        arithmetic)``, positions a boolean (M, N) array; class 0 holds output (0, 0). None
        when every output uses :attr:`tree`."""
        if not self.result.classes:
            return None
        return [(c["tree"], c["mask"], c["arithmetic"]) for c in self.result.classes]

    @property
    def bit_exact(self) -> bool | None:
        """Whether the replay check matched the op bit for bit (None: skipped, samples=0)."""
        rep = self.result.replay
        return None if not rep else bool(rep["bit_exact"])

    def replay(self, x=None, *, a=None, b=None, position=None) -> np.ndarray:
        """The op's outputs as the revealed tree and node arithmetic compute them.

        Args:
            x: plain sums: (n,) or (S, n) summands (values of the input format).
            a, b: ops with products (dot, matmul, ...): (n,) or (S, n) factors; output s is
                the reduction of a[s, i] * b[s, i] over i (the K-vector of one output).
            position: matrix ops with output classes: the output (i, j) whose class to use
                (default (0, 0)).

        Returns:
            float64 array (S,) (or a 0-d array for 1-D inputs) of values of the output format.

        Raises:
            ValueError: inputs that do not fit the op (wrong length; x for an op with products
                or a, b for a plain sum), or a position outside the classes' grid.
        """
        from .replay import replay_arithmetic

        tree, arith = self.tree, self.arithmetic
        if position is not None:
            if not self.result.classes:
                raise ValueError("this op has one tree for every output; position is not needed")
            i, j = position
            for c in self.result.classes:
                m = c["mask"]
                if 0 <= i < m.shape[0] and 0 <= j < m.shape[1] and m[i, j]:
                    tree, arith = c["tree"], c["arithmetic"]
                    break
            else:
                raise ValueError(f"position {tuple(position)} is outside the {m.shape} outputs")
        if arith is None:
            raise ValueError("no node arithmetic was measured, so the tree cannot be replayed")
        products = arith.products is not None
        if products != (x is None):
            raise ValueError("this op multiplies: give factors a and b" if products
                             else "this op adds summands: give x")
        arrays = [np.asarray(v, dtype=np.float64) for v in ((a, b) if products else (x,))]
        one = arrays[0].ndim == 1
        arrays = [v[None, :] if v.ndim == 1 else v for v in arrays]
        for v in arrays:
            if v.ndim != 2 or v.shape[1] != tree.n or v.shape != arrays[0].shape:
                raise ValueError(f"inputs must be (n,) or (S, n) with n = {tree.n}; got "
                                 f"{' and '.join(str(u.shape) for u in arrays)}")
        out = (replay_arithmetic(tree, arith, A=arrays[0], B=arrays[1]) if products
               else replay_arithmetic(tree, arith, X=arrays[0]))
        return out.reshape(()) if one else out

    def verify(self, target=None, *, samples: int = 200, seed: int = 0, env=None) -> dict:
        """:func:`verify` of this record (a Python function target is re-run as it is)."""
        return verify(self.record, target=target if target is not None else self.target,
                      samples=samples, seed=seed, env=env)

    def save(self, path, overwrite: bool = False) -> Path:
        """Write the record as JSON (atomically). Raises fpscope.record.RecordError for a path that
        exists (unless ``overwrite``), is a folder, or whose folder is missing."""
        from .record import write_record

        return write_record(self.record, path, overwrite=overwrite)

    def text(self, width: int = 120) -> str:
        """The report ``fpscope reveal`` prints, as plain text."""
        from .reveal_text import reveal_text

        return reveal_text(self.record, self.tree, width=width)

    def to_dot(self) -> str:
        """The tree as Graphviz DOT source."""
        from .render import to_dot

        return to_dot(self.tree)

    def render(self, path, fmt: str | None = None, overwrite: bool = False) -> Path:
        """Draw the tree to ``path`` (fmt "svg", "png" or "dot"; default from the suffix;
        svg/png need Graphviz's ``dot`` program)."""
        from .render import render

        fmt = fmt or Path(path).suffix.lstrip(".").lower()
        render(self.tree, path, fmt, overwrite=overwrite)
        return Path(path)

    def __str__(self) -> str:
        return self.text()


def reveal(target, *, n: int | None = None, shape=None, dtype: str | None = None,
           layout: str = "C", offset: int = 0, threads: int | None = None,
           axis: int | None = None, index: int | None = None, output=None,
           device: str | None = None, env: dict | None = None, batched: bool | None = None,
           world_size: int | None = None, backend: str | None = None,
           algorithm: str = "fprev", seed: int = 0, samples: int = 32, accuracy: bool = False,
           check: bool = True, environment: bool = True, progress=None,
           candidates="auto") -> Revelation:
    """Reveal the summation tree and node arithmetic of ``target`` (``fpscope reveal``).

    Args:
        target: a target name (:func:`fpscope.targets.list_targets`, ``"module:function"``,
            ``"path/file.py:function"``), a Python callable taking a 1-D numpy array of n
            values and returning their reduction (or, with ``batched=True``, a (B, n) array
            returning B reductions), or a built :class:`~fpscope.targets.base.Target` (used as
            it is and not closed).
        n, shape, dtype, layout, offset, threads, axis, index, output, device, env, batched,
        world_size, backend:
            the probe conditions, as :func:`fpscope.targets.make_target` takes them. Without n
            and shape: n = 256 for matrix ops, 4096 elements for collectives, 1024 otherwise
            (a Python callable needs n). Collectives (``"torch.distributed.all_reduce"``,
            ``"mpi4py.MPI.Comm.Allreduce"``, ...): n elements per rank, ``world_size`` ranks
            (the leaves), ``output`` one element, ``env`` for the rank processes.
        algorithm: "fprev" or "basic".
        seed: seed of the pivot and sampling choices.
        samples: random inputs per distribution for the replay check (0 skips it).
        accuracy: also measure the error against the exact sum (the record's "accuracy").
        check: raise when the replay does not match bit for bit; with False the result is
            returned with :attr:`Revelation.failure` set.
        environment: capture the machine and library environment into the record
            (:func:`fpscope.environment.capture_environment`, about 0.1-0.3 s); False leaves
            ``record["environment"]`` as ``{"captured": False}`` (the CLI's text output).
        progress: optional ``callback(probes_done, n)``.
        candidates: trees to prove with n - 1 probes before FPRev runs
            (:mod:`fpscope.reveal.candidates`; ops probed one row per probe, algorithm
            "fprev"): "auto" (the built-in families from n = 64: numpy's pairwise sum,
            sequential, recursive halving), a SumTree or a list of them (a record's:
            ``SumTree.from_json(load_record(path)["tree"])``; then the built-in ones; [] is
            "auto"), or None (FPRev only). The tree found is the same either way;
            ``record["probe"]["checks"]["candidate"]`` names a proven one, and
            ``["candidates_rejected"]`` says why a given tree was not used (the first node
            that disagrees, or why none could be tried). ValueError: a tree of another n, a
            multi-way tree, candidates with algorithm "basic".

    Returns:
        :class:`Revelation`.

    Raises:
        fpscope.targets.TargetError: a bad target or condition, or the op failed.
        fpscope.reveal.RevealError: a check failed (nondeterminism, not a tree, a replay that
            did not match with ``check=True``; ``exc.result`` holds the tree where one was found).
        fpscope.masks.MaskError: n too large for the formats.
    """
    from .environment import capture_environment
    from .record import reveal_record
    from .reveal import RevealError
    from .reveal import reveal as _reveal
    from .targets import Target, make_target

    own = not isinstance(target, Target)
    if own:
        if n is None and shape is None and isinstance(target, str):
            n = default_n(target)
        t = make_target(target, n=n, shape=shape, dtype=dtype, layout=layout, offset=offset,
                        threads=threads, axis=axis, index=index, output=output, device=device,
                        env=env, batched=batched,
                        **({"world_size": world_size} if world_size is not None else {}),
                        **({"backend": backend} if backend is not None else {}))
    else:
        t = target
    failure = None
    try:
        try:
            res = _reveal(t, algorithm=algorithm, seed=seed, progress=progress,
                          replay_samples=samples, candidates=candidates)
        except RevealError as exc:
            if exc.result is None or check:
                raise
            res, failure = exc.result, exc
        record = reveal_record(t, res, seed,
                               capture_environment() if environment else {"captured": False})
        if accuracy:
            from .accuracy import record_accuracy

            record["accuracy"] = (record_accuracy(t) if samples > 0
                                  else {"skipped": "--samples 0"})
    finally:
        if own:
            t.close()
    keep = target if own and record["target"].get("in_process") else None
    return Revelation(record=record, tree=res.tree, result=res, failure=failure, target=keep)


def _record_of(record, where: str = "record") -> tuple[dict, str]:
    """(validated record dict, label) of a path, a dict or a Revelation."""
    from .record import load_record, validate_record

    if isinstance(record, Revelation):
        return record.record, "revelation"
    if isinstance(record, dict):
        return validate_record(record, where), where
    return load_record(record), str(record)


def verify(record, *, target=None, samples: int = 200, seed: int = 0, env=None) -> dict:
    """Replay a reveal record against the live op, every output class against its own tree
    (``fpscope verify``).

    Args:
        record: a record path, a record dict or a :class:`Revelation`.
        target: the live op, replacing the record's (a name, a Python callable, or a Target,
            which is not closed); needed for a record of a Python function object.
        samples: random inputs per distribution (>= 1).
        seed: seed of the inputs.
        env: environment variables for the live op (a child process); default the record's.

    Returns:
        The report dict: "bit_exact", "matched", "samples", "accumulator", "by_distribution",
        "first_mismatch" (fpscope.verify.verify).

    Raises:
        ValueError: samples < 1; not a reveal record; a record of a Python function without
            ``target``; a tree whose leaf count is not the target's.
        fpscope.record.RecordError: an unreadable or malformed record.
        fpscope.targets.TargetError: the target cannot be rebuilt or the op failed.
    """
    from .gate import target_from_record
    from .record import arithmetic_of_record, classes_of_record
    from .targets import Target
    from .tree import SumTree
    from .verify import merge_reports
    from .verify import verify as _verify

    if samples < 1:
        raise ValueError(f"samples must be at least 1, got {samples}")
    rec, where = _record_of(record)
    if rec.get("kind", "reveal") != "reveal":
        raise ValueError(f"{where} is a {rec.get('kind')!r} record; verify reads reveal records")
    if target is None and rec["target"].get("in_process"):
        raise ValueError(f"{where}: the record is of a Python function object "
                         f"({rec['target'].get('name')}), which no name can rebuild; pass it "
                         f"again as target=")
    own = not isinstance(target, Target)
    t = (target if not own else
         target_from_record(rec, where, name=target, **({"env": env} if env is not None else {})))
    try:
        tree = SumTree.from_json(rec["tree"])
        if tree.n != t.n:
            raise ValueError(f"{where}: the tree has {tree.n} leaves but the target has {t.n}")
        arith = arithmetic_of_record(rec, tree.n_nodes)
        checks = (rec.get("probe") or {}).get("checks") or {}
        shared = not str(checks.get("shared_k_order_outputs", "")).startswith("no:")
        classes = classes_of_record(rec)
        if classes:
            rep = merge_reports([_verify(t, ct, t.in_format, samples=samples, seed=seed,
                                         arithmetic=a, positions=m) for ct, m, a in classes])
        else:
            rep = _verify(t, tree, t.in_format, samples=samples, seed=seed,
                          first_output_only=not shared, arithmetic=arith)
        own_checks = t.checks() if hasattr(t, "checks") else {}
        if str(own_checks.get("rank_identity", "")).startswith("no:"):
            rep["bit_exact"] = False  # every rank's bits are compared, not rank 0's alone
        rep.update(own_checks)
        rep["target"] = t.name
        rep["n"] = tree.n
        rep["arithmetic"] = None if arith is None else arith.describe()
        rep["products_compared"] = not (arith is not None and arith.products is None
                                        and t.has_products)
    finally:
        if own:
            t.close()
    return rep


def probe(target, in_format: str | None = None, out_format: str | None = None, **options):
    """The arithmetic of a matrix-unit instruction or GEMM (``fpscope probe``):
    :func:`fpscope.probes.driver.probe` (target: a name such as ``"sim:hopper-fp16"`` or
    ``"torch.matmul"``, a MatrixTarget, or a Python callable ``(A, B, C) -> D``; options k,
    cases, seed, library_k, chain, b_format). Returns a ProbeReport (``.profile``,
    ``.validation``, ``.to_dict()``); raises fpscope.probes.ProbeError."""
    from .probes.driver import probe as _probe

    return _probe(target, in_format, out_format, **options)


def fit(recording, *, out: str | None = None, **options):
    """A profile fitted to recorded outputs (``fpscope fit``).

    Args:
        recording: a hw-vectors folder or .npz file (:func:`fpscope.fit.load_recording`), or a
            loaded :class:`fpscope.fit.Recording`.
        out: the output format, for recordings that do not name it.
        options: :func:`fpscope.fit.fit`'s (grid_samples, progress, ...).

    Returns:
        :class:`fpscope.fit.FitResult` (``.profile``, ``.matched``, ...).

    Raises:
        fpscope.fit.FitError: an unreadable or inconsistent recording.
    """
    from .fit import Recording, load_recording
    from .fit import fit as _fit

    rec = recording if isinstance(recording, Recording) else load_recording(recording, out=out)
    return _fit(rec, **options)


def _side(x, label: str):
    """A diff operand from a path / preset name (str or Path), a record dict, a Revelation,
    a Profile or a SumTree."""
    from .diff import Side, load_side, side_from_record
    from .profile import Profile
    from .tree import SumTree

    if isinstance(x, (str, Path)):
        return load_side(str(x))
    if isinstance(x, Profile):
        return Side(x.name or label, profile=x)
    if isinstance(x, SumTree):
        return Side(label, tree=x)
    rec, where = _record_of(x, label)
    return side_from_record(rec, label if where in ("record", "revelation") else where)


def diff(a, b, *, cases: int = 4096, seed: int = 0):
    """Compare two trees with their node arithmetic, or two profiles (``fpscope diff``).

    Args:
        a, b: each a record or profile path, a preset name, a record dict, a
            :class:`Revelation`, a :class:`fpscope.profile.Profile` or a
            :class:`fpscope.tree.SumTree`.
        cases, seed: random cases for a profile witness.

    Returns:
        :class:`fpscope.diff.DiffResult`: ``.same`` is True only when the tree, every node
        format, every product entry, the output format and every output class agree;
        ``.verdict``, ``.witness`` (inputs on which they differ), ``.text()``.

    Raises:
        fpscope.diff.DiffError: an operand cannot be read, or a tree is compared with a profile.
    """
    from .diff import DiffError, diff_profiles, diff_trees

    sa, sb = _side(a, "A"), _side(b, "B")
    if sa.kind != sb.kind:
        raise DiffError(f"cannot compare a {sa.kind} ({sa.label}) with a {sb.kind} ({sb.label})")
    if sa.kind == "profile":
        return diff_profiles(sa.profile, sb.profile, cases, seed)
    return diff_trees(sa, sb, seed)


def gate(baseline, *, target=None, policy: str = "bitwise", units: float = 4.0,
         samples: int | None = None, record=None, force: bool = False, env=None):
    """Judge the live op against a baseline record (``fpscope gate``): bitwise (tree, node
    arithmetic and live bits), tolerant (within ``units`` of u * sum|terms|) or record.

    Args:
        baseline: a record path, a record dict or a :class:`Revelation`.
        target: the live op replacing the record's (a name or a Python callable; needed for a
            record of a Python function object).
        policy, units, samples, record, force, env: as :func:`fpscope.gate.gate`.

    Returns:
        :class:`fpscope.gate.GateResult` (``.passed``, ``.reason``, ``.diff``, ``.text()``).

    Raises:
        fpscope.gate.GateError: a bad baseline or option.
        fpscope.reveal.RevealError, fpscope.targets.TargetError: as :func:`fpscope.gate.gate`.
    """
    from .gate import DEFAULT_SAMPLES, GateError
    from .gate import gate as _gate

    if isinstance(baseline, Revelation):
        target = baseline.target if target is None else target
        baseline = baseline.record
    if isinstance(baseline, dict) and target is None and baseline["target"].get("in_process"):
        raise GateError("the baseline is a record of a Python function object, which no name "
                        "can rebuild; pass it again as target=")
    return _gate(baseline, target=target, policy=policy, units=units,
                 samples=DEFAULT_SAMPLES if samples is None else samples, record=record,
                 force=force, env=env)


def load_record(path) -> dict:
    """A record file (reveal, probe, ...) read and validated: :func:`fpscope.record.load_record`
    (raises fpscope.record.RecordError with one line)."""
    from .record import load_record as _load

    return _load(path)
