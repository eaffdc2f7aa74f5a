"""``fpscope matrix`` (locally or on a Dask cluster), ``fpscope fleet`` and ``fpscope targets``."""

from __future__ import annotations

import sys

from rich.markup import escape

from .cli import UsageError, _console


def _matrix_progress(quiet: bool):
    """A rich progress bar over the cells on stderr (a terminal only); (callback, finish)."""
    if quiet or not sys.stderr.isatty():
        return None, lambda: None
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    state = {"prog": None, "task": None}

    def cb(done, total, label):
        if state["prog"] is None:
            state["prog"] = Progress(TextColumn("matrix"), BarColumn(), MofNCompleteColumn(),
                                     TimeElapsedColumn(), TextColumn("{task.description}"),
                                     console=Console(stderr=True), transient=True)
            state["task"] = state["prog"].add_task(label, total=total)
            state["prog"].start()
        state["prog"].update(state["task"], completed=done, description=escape(label))

    def finish():
        if state["prog"] is not None:
            state["prog"].stop()

    return cb, finish


def _matrix_dask(args, wanted) -> int:
    """``fpscope matrix --dask``: one line per finished cell on stderr, a summary on stdout."""
    from pathlib import Path

    from .fleet.run import run_fleet

    def progress(worker, done, total, text):
        if not args.quiet:
            print(f"{worker} [{done}/{total}] {text}", file=sys.stderr, flush=True)

    from .fleet.compare import FleetError

    try:
        runs = run_fleet(args.dask, args.output, args.suite, force=args.force, seed=args.seed,
                         replay_samples=args.samples, libraries=wanted, timeout=args.timeout,
                         progress=progress)
    except FleetError as exc:
        raise UsageError(str(exc)) from None
    failed = 0
    for run in runs.values():
        cells = run.result.cells
        bad = [c for c in cells if c.status == "failed"]
        failed += len(bad)
        print(f"{run.name} ({run.address}): {len(cells)} cells, {run.kept} kept, {run.ran} run, "
              f"{len(bad)} failed" + (f"; {run.left}" if run.left else ""))
        for c in bad:
            print(f"  failed #{c.index} {c.cell.target} {c.cell.size_text}: {c.error}")
    print(f"fleet: {Path(args.output) / 'fleet.json'}, {Path(args.output) / 'fleet.html'}")
    return 1 if failed else 0


def cmd_matrix(args) -> int:
    from .matrix import (
        MatrixError,
        agreement_rows,
        columns,
        run_matrix,
        suite_cells,
    )
    from .matrix_collectives import available
    from .matrix_resume import check_resume
    from .record import dumps
    from .report import write_report
    from .report_collectives import text_lines

    if args.samples < 0:
        raise UsageError(f"--samples must be 0 or more, got {args.samples}")
    if args.timeout is not None and not args.timeout > 0:
        raise UsageError(f"--timeout must be a positive number of seconds, got {args.timeout}")
    wanted = None
    if args.libraries is not None:
        wanted = [x.strip() for x in args.libraries.split(",") if x.strip()]
        if not wanted:
            raise UsageError("--libraries: name at least one of numpy, torch, jax, gloo, mpi")
    try:
        if args.dask:
            return _matrix_dask(args, wanted)
        check_resume(args.output, args.suite, args.force)  # before the slow imports and reveals
        libs, notes = available(wanted)
        cells = suite_cells(args.suite, libs)
        cb, finish = _matrix_progress(args.quiet)
        try:
            res = run_matrix(cells, args.output, suite=args.suite, force=args.force,
                             seed=args.seed, replay_samples=args.samples, notes=notes,
                             libraries=libs, progress=cb, isolate=args.isolate,
                             timeout=args.timeout)
        finally:
            finish()
        index = write_report(res, args.output)
    except MatrixError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"cannot write the report to {args.output}: {exc.strerror or exc}") from None
    if args.format == "json":
        sys.stdout.write(dumps(res.to_record()))
    else:
        from rich.table import Table

        console = _console()
        cols = columns(res)
        table = Table(title=f"{args.suite} suite: tree per library (same letter = same order)")
        for name in ("op", "dtype", "size", "layout"):
            table.add_column(name)
        for lib, t in cols:
            table.add_column(lib if t is None else f"{lib} {t}t", justify="center")
        table.add_column("verdict")
        for row in agreement_rows(res):
            ids = [(row["cells"][k].tree_id or row["cells"][k].status) if k in row["cells"]
                   else "." for k in cols]
            table.add_row(row["op"], row["dtype"], row["size"], row["layout"], *ids,
                          row["verdict"])
        if table.rows:  # not when the suite ran collectives alone
            console.print(table)
        for line in text_lines(res):
            console.print(f"collective {escape(line)}", highlight=False, soft_wrap=True)
        for note in res.notes:
            console.print(f"[yellow]note:[/yellow] {escape(note)}", highlight=False)
        for c in res.failed:
            console.print(f"[red]failed[/red] #{c.index} {escape(c.cell.target)} "
                          f"{escape(c.cell.size_text)}: {escape(c.error or '')}", highlight=False)
        ok = sum(c.status == "ok" for c in res.cells)
        skipped = sum(c.status == "skipped" for c in res.cells)
        changed = sum(not c["same"] for c in res.comparisons if c["dimension"] != "n")
        console.print(f"{len(res.cells)} cells ({ok} ok, {len(res.failed)} failed, {skipped} "
                      f"skipped), {len(res.trees)} distinct trees, {changed} neighbouring pairs "
                      f"with different trees, {res.seconds:.1f} s", highlight=False)
        console.print(f"report: {escape(str(index))}", highlight=False)
    return 1 if res.failed else 0


def cmd_fleet(args) -> int:
    from .fleet import compare_folders, fleet_text, worker_folders, write_fleet
    from .record import json_loads, json_text

    folders = worker_folders(args.dirs)
    if args.output:
        path = write_fleet(folders, args.output, force=args.force)
        fleet = json_loads(path.read_text(encoding="utf-8"))
    else:
        fleet = compare_folders(folders)
    if args.format == "json":
        sys.stdout.write(json_text(fleet, indent=2) + "\n")
    else:
        print(fleet_text(fleet))
        if args.output:
            print(f"report: {path.with_name('fleet.html')}")
    return 0


def cmd_targets(args) -> int:
    from .targets import list_targets

    for name in list_targets():
        hint = {"numpy.einsum": "[SUBSCRIPTS]   e.g. numpy.einsum[ij,jk->ik]; default i,i->",
                "emulate.matmul": "[PRESET]    a GEMM on the matrix-unit emulator, e.g. "
                                  "emulate.matmul[hopper-fp16] (fpscope profiles)"}
        print(name + hint.get(name, ""))
    print("package.module:function        any callable: 1-D array -> scalar (imported from the current folder)")
    print("path/to/file.py:function       the same, from a file")
    return 0
