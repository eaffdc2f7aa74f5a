"""``fpscope reveal`` (with ``--sweep`` and ``--runs``) and ``fpscope verify``: parse, call the
API, print.
"""

from __future__ import annotations

import json
import sys

from rich.markup import escape

from .cli import (
    UsageError, _check_new_files, _console, _emit, _is_collective, _make_target, _parse_env,
    _parse_shape, _progress,
)


_SWEEPABLE = ("offset", "rows", "n", "threads", "layout", "index", "dtype", "world_size")


def _parse_sweep(text: str):
    name, sep, vals = text.partition("=")
    name = name.strip()
    is_env = name.startswith("env:") and _parse_env([name[4:] + "=x"]) is not None
    if not sep or (name not in _SWEEPABLE and not is_env):
        raise UsageError(f"--sweep {text!r}: expected NAME=VALUES with NAME one of "
                         f"{', '.join(_SWEEPABLE)} or env:VARIABLE")
    if name in ("layout", "dtype") or is_env:
        values = [v.strip() for v in vals.split(",") if v.strip()]
    else:
        try:
            if ":" in vals:
                parts = [int(p) for p in vals.split(":")]
                if len(parts) == 3 and parts[2] == 0:
                    raise UsageError(f"--sweep {text!r}: the step must not be 0")
                values = list(range(*parts))
            else:
                values = [int(v) for v in vals.split(",") if v.strip()]
        except (ValueError, TypeError):
            raise UsageError(f"--sweep {text!r}: values must be integers (a,b,c or start:stop:step)") from None
    if not values:
        raise UsageError(f"--sweep {text!r}: no values")
    return name, values


def cmd_sweep(args) -> int:
    import copy

    from rich.console import Console

    from .summary import summarize
    from .sweep import sweep
    from .targets.base import TargetError

    name, values = _parse_sweep(args.sweep)
    if args.format in ("svg", "png", "dot"):
        raise UsageError(f"--sweep writes a table or JSON, not --format {args.format}")
    _check_new_files(args.force, args.record, args.output)

    def build(v):
        a = copy.copy(args)
        if name == "rows":
            shape = _parse_shape(args.shape) or (args.n or 256,) * 3
            if len(shape) != 3:
                raise UsageError("--sweep rows=... needs a matmul shape MxKxN (or --n)")
            a.shape, a.n = f"{v}x{shape[1]}x{shape[2]}", None
        elif name.startswith("env:"):
            a.env = list(args.env or []) + [f"{name[4:]}={v}"]
        else:
            setattr(a, name, v)
        try:
            return _make_target(a)
        except UsageError as exc:  # a bad value gets an error row; the sweep goes on
            raise TargetError(str(exc)) from None

    res = sweep(name, values, build, seed=args.seed, replay_samples=args.samples)
    from .record import dumps, new_record, write_record

    rec = new_record("sweep", target={"name": args.target}, sweep=res.to_json(),
                     summaries={k: summarize(t, spec=res.specs.get(k))
                                for k, t in res.trees.items()})
    if args.record:
        write_record(rec, args.record, overwrite=args.force)
    # exit as a single reveal would for its worst value: 2 bad input, 1 a failed check
    failures = {row.get("failure") for row in res.rows if row["error"]}
    code = 2 if "input" in failures else 1 if failures else 0
    if args.format == "json":
        _emit(dumps(rec), args)
        return code
    if args.output:
        with open(args.output, "w", encoding="utf-8") as fh:
            _sweep_text(Console(file=fh, width=120), res, name, args.target)
    else:
        _sweep_text(_console(), res, name, args.target)
    return code


def _sweep_text(console, res, name: str, target: str) -> None:
    from rich.table import Table

    from .summary import summarize
    from .sweep import classes_text

    table = Table(title=f"{escape(target)}: tree and node arithmetic per {name}")
    table.add_column(name)
    table.add_column("tree")
    table.add_column("arithmetic")
    table.add_column("note")
    for row in res.rows:
        tree = row["tree_id"] or "-"
        if row.get("classes"):  # outputs use several trees: all of them, in position order
            tree = classes_text(row)
        table.add_row(str(row["value"]), tree, row.get("arithmetic_id") or "-",
                      escape(row["error"] or ""))
    console.print(table)
    for tid, tree in res.trees.items():
        console.print(f"[bold]{tid}[/bold]: {escape(summarize(tree, spec=res.specs.get(tid)))}",
                      highlight=False)
    for aid, arith in res.arithmetics.items():
        console.print(f"[bold]{aid}[/bold]: {escape(arith.describe())}", highlight=False)
    failed = sum(1 for row in res.rows if row["error"])
    if res.changes:
        for ch in res.change_details:
            what = []
            if ch["tree"]:
                what.append(f"tree {ch['tree']}")
            if ch.get("classes"):
                p = ch["classes"]
                what.append(f"{p['name']}: {p['a']} -> {p['b']}")
            if ch["arithmetic"]:
                p = ch["arithmetic"]
                what.append(f"arithmetic: {p['name']} {p['a']} -> {p['b']}")
            console.print(f"changes between {ch['from']} -> {ch['to']}: {escape('; '.join(what))}",
                          highlight=False)
    elif failed == len(res.rows):
        console.print(f"no value of {name} was revealed", highlight=False)
    elif failed:
        console.print(f"the tree and the node arithmetic do not change with {name} among the "
                      f"{len(res.rows) - failed} values revealed ({failed} failed)",
                      highlight=False)
    else:
        console.print(f"the tree and the node arithmetic do not change with {name}",
                      highlight=False)


def _candidates(args):
    """--candidate / --no-candidates as reveal's ``candidates``: "auto", None or a list of
    (path, SumTree)."""
    if args.no_candidates and args.candidate:
        raise UsageError("--candidate and --no-candidates exclude each other")
    if args.no_candidates:
        return None
    if not args.candidate:
        return "auto"
    for flag, given in (("--sweep", args.sweep), ("--runs", args.runs is not None),
                        ("--algorithm basic", args.algorithm != "fprev")):
        if given:
            raise UsageError(f"--candidate applies to one reveal with FPRev, not to {flag}")
    from .record import json_loads
    from .tree import SumTree, TreeError

    trees = []
    for path in args.candidate:
        try:
            with open(path, encoding="utf-8") as f:
                obj = json_loads(f.read())
            trees.append((path, SumTree.from_json(
                obj["tree"] if isinstance(obj, dict) and "tree" in obj else obj)))
        except OSError as exc:
            raise UsageError(f"--candidate {path}: {exc.strerror or exc}") from None
        except (ValueError, TypeError, KeyError, TreeError) as exc:
            raise UsageError(f"--candidate {path}: not a reveal record or tree JSON "
                             f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"
                             ) from None
    return trees


def cmd_reveal(args) -> int:
    if args.samples < 0:
        raise UsageError(f"--samples must be 0 or more, got {args.samples}")
    candidates = _candidates(args)  # refuses --candidate beside --sweep, --runs, basic
    if args.sweep:
        if args.runs:
            raise UsageError("--runs and --sweep do not combine; sweep first, then repeat a "
                             "value with --runs")
        return cmd_sweep(args)
    if args.runs is not None:
        return cmd_runs(args)

    from . import api
    from .reveal import RevealError
    from .record import dumps, write_record

    _check_new_files(args.force, args.record, args.output)
    if args.format in ("svg", "png") and not args.output:
        raise UsageError(f"--format {args.format} needs -o FILE")
    if args.format in ("svg", "png"):
        from .render import _check_dot

        _check_dot()  # before the probes, not after them
    target = _make_target(args)
    if isinstance(candidates, list):
        from .reveal.candidates import of_tree

        for path, tree in candidates:
            if tree.n != target.n:
                target.close()
                raise UsageError(f"--candidate {path}: its tree has {tree.n} leaves, the op "
                                 f"{target.n}")
        candidates = [of_tree(tree, f"the tree of {path}") for path, tree in candidates]
    try:
        cb, finish = _progress(args.quiet, target.n)
        try:
            keep = bool(args.record or args.format == "json")  # a record leaves the process
            found = api.reveal(target, algorithm=args.algorithm, seed=args.seed, progress=cb,
                               samples=args.samples, check=False, accuracy=keep,
                               environment=keep, candidates=candidates)
        except RevealError as exc:
            if exc.kind != "nondeterministic" or not _is_collective(args.target):
                raise
            raise RevealError(exc.kind, f"{exc}; the collective's order changed between calls "
                              f"of one run (--runs N counts the outcomes of N runs with fresh "
                              f"ranks)") from None
        finally:
            finish()
    finally:
        target.close()
    res, record, failure = found.result, found.record, found.failure
    if args.record:
        write_record(record, args.record, overwrite=args.force)
    fmt = args.format
    if fmt == "json":
        _emit(dumps(record), args)
    elif fmt in ("svg", "png", "dot"):
        from .render import render, to_dot

        if args.output:
            render(res.tree, args.output, fmt, overwrite=args.force)
            print(f"{fmt} picture of the tree written to {args.output}", file=sys.stderr)
        elif fmt == "dot":
            sys.stdout.write(to_dot(res.tree))
        else:
            raise UsageError(f"--format {fmt} needs -o FILE")
    else:
        _print_text(record, res.tree, args)
    if failure is not None:
        raise failure
    return 0


def cmd_runs(args) -> int:
    """``fpscope reveal COLLECTIVE --runs N``: the distribution of outcomes over N reveals."""
    from .collectives.runs import reveal_runs
    from .record import dumps, new_record, write_record

    if args.runs < 1:
        raise UsageError(f"--runs must be 1 or more, got {args.runs}")
    if not _is_collective(args.target):
        raise UsageError("--runs applies to collectives (torch.distributed.*, mpi4py.MPI.Comm.*): "
                         "other targets run in this process, where a repeat finds the same order")
    if args.format not in ("text", "json"):
        raise UsageError(f"--runs writes a table or JSON, not --format {args.format}")
    _check_new_files(args.force, args.record, args.output)
    first = _make_target(args)  # bad options fail here, before N runs
    spec = first.spec()
    pending = [first]

    def build():
        return pending.pop() if pending else _make_target(args)

    def progress(i):
        if not args.quiet and sys.stderr.isatty():
            print(f"run {i + 1} of {args.runs} ...", file=sys.stderr)

    try:
        res = reveal_runs(build, args.runs, seed=args.seed, replay_samples=args.samples,
                          progress=progress)
    finally:
        for t in pending:
            t.close()
    rec = new_record("runs", target=spec, runs=res)
    if args.record:
        write_record(rec, args.record, overwrite=args.force)
    if args.format == "json":
        _emit(dumps(rec), args)
    else:
        lines = [f"{args.target}: {res['runs']} runs with newly started ranks"]
        for k, o in enumerate(res["outcomes"]):
            trees = (f"{len(o['classes'])} trees by element" if o["classes"] else "one tree")
            lines.append(f"  outcome {k + 1}: {o['count']} of {res['runs']} runs ({trees}); "
                         f"element 0: {o['summary']}")
        for f in res["failed"]:
            lines.append(f"  not revealed: {f['count']} of {res['runs']} runs: {f['error']}")
        lines.append("the same outcome every run" if res["deterministic"] else
                     "the outcome varies between runs" if len(res["outcomes"]) > 1 else
                     "some runs could not be revealed")
        text = "\n".join(lines) + "\n"
        if args.output:
            with open(args.output, "w", encoding="utf-8") as fh:
                fh.write(text)
        else:
            sys.stdout.write(text)
    return 0 if res["deterministic"] else 1


def _print_text(record: dict, tree, args) -> None:
    from rich.console import Console

    from .reveal_text import write_reveal_text

    if args.output:
        with open(args.output, "w", encoding="utf-8") as fh:
            write_reveal_text(Console(file=fh, width=120), record, tree, args.record)
    else:
        write_reveal_text(_console(), record, tree, args.record)


def cmd_verify(args) -> int:
    from . import api
    from .gate import GateError

    if args.samples < 1:
        raise UsageError(f"--samples must be at least 1, got {args.samples}")
    try:
        rep = api.verify(args.record, samples=args.samples, seed=args.seed,
                         env=_parse_env(args.env))
    except GateError as exc:
        raise UsageError(str(exc)) from None
    if args.format == "json":
        sys.stdout.write(json.dumps(rep, indent=2) + "\n")
    else:
        leaves = f"ranks={rep['n']}" if rep.get("rank_identity") else f"n={rep['n']}"
        print(f"{rep['target']} {leaves}: {rep['matched']}/{rep['samples']} outputs "
              f"bit-exact ({rep['accumulator']} accumulator)")
        if rep["arithmetic"] is not None:
            print(f"  arithmetic: {rep['arithmetic']}")
            if not rep["products_compared"]:
                print("  note: the record has no product entries (an fpscope.record/1 record): "
                      "inputs were x * 1, so how products enter (rounded or FMA) was not "
                      "compared; reveal again to record it")
        for kind, d in rep["by_distribution"].items():
            print(f"  {kind:8s} {d['matched']}/{d['samples']}")
        if rep.get("rank_identity"):
            print(f"  ranks: {rep['rank_identity']}")
        fm = rep.get("first_mismatch")
        if not rep["bit_exact"] and fm:
            print(f"  first mismatch ({fm['distribution']}): expected {fm['expected']}, got {fm['got']}")
    return 0 if rep["bit_exact"] else 1
