"""The files a report writes into its --out (report.md, report.html, results.json, figures/), and what it may
replace there: only what a report wrote before (`check_out`), so a folder of one's own is never overwritten without
--overwrite. Read here, below the report, so a driver that rebuilds its report needs nothing of the report's."""

from __future__ import annotations

import os
from pathlib import Path

from windtunnel.errors import CheckpointError
from windtunnel.store import rundir
from windtunnel.store.records.drivers import ManifestRecord

REPORT_FILES = ("report.md", "report.html", "results.json")  # what `report.build_report` writes, with figures/
FIGURES = "figures"
RESULTS_KEYS = (
    "claims",
    "table1",
    "runs",
    "meta",
)  # what every results.json of a report holds (`report.build._results`)
REPRODUCE = "reproduce"  # the manifest kind of a reproduce's --out, which rebuilds its report there every time


def is_report_results(path: Path) -> bool:
    """Whether `path` is a results.json a report wrote: a JSON object with every key of `RESULTS_KEYS`."""
    try:
        data = rundir.read_json_object(path)
    except CheckpointError:
        return False
    return all(k in data for k in RESULTS_KEYS)


def written_by_report(out: Path) -> bool:
    """Whether `out` holds a report's own results.json, or is a reproduce's --out (its manifest.json says so)."""
    if is_report_results(out / "results.json"):
        return True
    try:
        found = ManifestRecord.find(out)
    except (CheckpointError, ValueError):
        return False
    return found is not None and found.kind == REPRODUCE


def check_out(out: Path, overwrite: bool = False, option: str = "--out") -> None:
    """Before anything is read: `out` a folder a report may write into (`rundir.check_output_dir`), each report file
    there a regular file (`rundir.check_output_file`), figures/ a real folder, and -- unless `overwrite` -- a
    report.md, report.html, results.json or non-empty figures/ there replaced only where a report wrote them."""
    rundir.check_output_dir(out, option)
    if not out.is_dir():
        return
    present = [out / name for name in REPORT_FILES if os.path.lexists(out / name)]
    for p in present:
        rundir.check_output_file(p, option)
    figures = out / FIGURES
    if os.path.lexists(figures):
        if figures.is_symlink() or not figures.is_dir():
            kind = rundir.kind_of(os.lstat(figures).st_mode)
            raise ValueError(f"{option}: {str(figures)!r} is {kind}; a report writes figures into a folder of its own")
        if any(figures.iterdir()):
            present.append(figures)
    if present and not overwrite and not written_by_report(out):
        raise FileExistsError(
            f"{option}: {str(present[0])!r} is not a report's (no results.json a report wrote beside it); pass "
            "--overwrite to replace it, or use another --out"
        )
