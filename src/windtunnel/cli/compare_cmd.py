"""`windtunnel compare`: runs or cells side by side, with paired differences (a thin shell over
`windtunnel.report.compare`)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from windtunnel.cli.common import (
    fail,
    guarded,
    import_modules,
    import_option,
    loading,
    out_option,
    parse_kv,
    threads_option,
    trust_code_option,
    use_threads,
)
from windtunnel.cli.root import app

if TYPE_CHECKING:
    from windtunnel.report.compare import Input

# The CLI's names of `report.compare.select`'s parameters, for the one-line error that names the argument at fault.
ARGUMENTS = {"paths": "RUN_OR_REPORT", "cells": "--cell"}


@app.command("compare")
@guarded
def compare_command(
    paths: list[Path] = typer.Argument(
        ..., metavar="RUN_OR_REPORT...", help="two or more run directories, or directories of runs"
    ),
    cell: list[str] | None = typer.Option(
        None,
        "--cell",
        metavar="K=V,K=V",
        help="keep only these cells, e.g. --cell task=hmm,arch=transformer (repeatable)",
    ),
    n: int | None = typer.Option(
        None, "--n", help="test sequences re-scored for paired differences (default: eval.json's n)"
    ),
    paired: bool = typer.Option(
        True, "--paired/--no-paired", help="re-score the checkpoints for paired differences (--no-paired: files only)"
    ),
    markdown: bool = typer.Option(False, "--markdown", help="Markdown instead of plain text"),
    out: Path | None = out_option(None, "write the comparison to FILE instead of stdout"),
    plot: Path | None = typer.Option(
        None, "--plot", help="draw every input's validation curve of the headline metric into FILE.png"
    ),
    trust_code: bool = trust_code_option(),
    imports: list[str] | None = import_option(),
    threads: int | None = threads_option(per_run=False),
) -> None:
    """Runs or cells side by side, with paired differences.

    For each of two or more inputs: its verdict, metrics with intervals, its difference from the first (paired over
    the same test sequences where it can be, and whether it is measurable), the config keys that differ, and
    optionally the validation curves on one axes. A directory of runs (a reproduce, sweep or report --out, or a
    folder of runs) gives one input per configuration, its seeds pooled as the report pools them; --cell keeps some
    of them by task, arch, seed or a dotted config key such as train.lr (run directories named directly are always
    kept)."""
    with loading():
        from windtunnel.report.compare import CompareInputError, compare, select, to_markdown, to_text
        from windtunnel.store.rundir import atomic_write, check_output_file

    if n is not None and n < 1:
        fail(f"--n: must be >= 1 (got {n})")
    cells = [parse_kv(spec.split(","), "--cell") for spec in cell or []]
    if plot is not None and plot.suffix.lower() != ".png":
        fail(f"--plot: must name a .png file (got {str(plot)!r})")
    for option, path in (("--out", out), ("--plot", plot)):
        if path is not None:  # before any work: nothing is re-scored for a result that may not be written there
            check_output_file(path, option)
    if out is not None and plot is not None and out.resolve() == plot.resolve():
        fail(f"--out and --plot: both name {str(out)!r}; the comparison would replace its own figure")
    if plot is not None and os.path.lexists(temp := plot.with_name(plot.stem + ".tmp.png")):  # `plotting.save`'s
        fail(f"--plot: {str(temp)!r} is there, and the figure is written through that name first; plot elsewhere")
    import_modules(imports)
    use_threads(threads)
    try:
        _refuse_the_same_runs(select(paths, cells))
        found = compare(paths, cells, n=n, paired=paired, trust_code=trust_code, plot=plot)
    except CompareInputError as err:
        fail(f"{ARGUMENTS[err.argument]}: {err}")
    text = to_markdown(found, out.parent if out is not None else Path.cwd()) if markdown else to_text(found)
    if out is None:
        typer.echo(text, nl=False)
    else:
        atomic_write(out, text)
        typer.echo(f"wrote {out}")
    if plot is not None:
        typer.echo(f"plot: {found.plot}" if found.plot is not None else "plot: no input has a validation curve")


def _refuse_the_same_runs(inputs: Sequence[Input]) -> None:
    """Two inputs that are the same runs (one directory named twice, `A` and `./A`, or a run and the cell of a
    directory holding only it) would be compared with themselves: "not measurable, 0.000" says nothing. Refused."""
    from windtunnel.report.compare import CompareInputError

    seen: dict[frozenset[Path], str] = {}
    for inp in inputs:
        key = frozenset(r.path.resolve() for r in inp.runs)
        if key in seen:
            what = f"the same run, {str(next(iter(key)))!r}" if len(key) == 1 else "the same runs"
            raise CompareInputError(
                "paths", f"{seen[key]!r} and {inp.label!r} name {what}; compare needs different runs or cells"
            )
        seen[key] = inp.label
