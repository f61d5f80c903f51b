"""Copy what a `windtunnel reproduce` run made into docs/results/<tier>/: the report, its data and figures, each
probed run's geometry.json (plus the geometry figures of the transformer and Mamba cells), and every run's records
without its checkpoints (runs/NAME/: config, evaluations, training log, geometry, and the probe figures of each cell's
lowest probed seed), so that `windtunnel report docs/results/<tier> --out DIR` (which reads the published
reproduce.json for the run metadata) rebuilds the report with a newer report. Run directories do not survive a
working day; the published copy does.

    python benchmarks/publish_tier.py runs/standard docs/results/standard
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path

TOP = ("report.md", "report.html", "results.json", "reproduce.json", "manifest.json")
# What a run's report reads (report/collect.py), without the weights: checkpoints and figures stay behind.
RECORDS = ("config.json", "eval.json", "trained.json", "done.json", "versions.json", "resumes.json", "metrics.jsonl")
RECORD_DIRS = ("evals",)
FIGURE_ARCHS = ("transformer", "mamba")  # the cells the paper makes geometric claims about
SEED = re.compile(r"-s(\d+)$")  # a run name's seed suffix: runs that differ only in it are one cell


def tier_figures(run_name: str) -> str | None:
    """The cell name under which a reproduce run's probe figures are published (seed 0 of `FIGURE_ARCHS`), or None."""
    cell = run_name.removesuffix("-s0")
    return cell if cell.endswith(tuple(f"-{arch}" for arch in FIGURE_ARCHS)) else None


def publish(
    src: Path, dest: Path, top: tuple[str, ...] = TOP, figures_for: Callable[[str], str | None] = tier_figures
) -> list[Path]:
    """Copy the `top` files, figures/ and geometry of `src` (a driver's --out with a report.md) into `dest`
    (replaced, where `check_dest` allows): every run's records with its cell's probe figures (`probe_pngs`), every
    geometry.json, and the probe figures of the runs `figures_for` names (prefixed by it) in geometry/."""
    if not (src / "report.md").is_file():
        raise SystemExit(f"{src}: no report.md (is it a finished `windtunnel reproduce --out`?)")
    check_dest(src, dest, top)
    if dest.exists():
        shutil.rmtree(dest)
    (dest / "geometry").mkdir(parents=True)
    written = []
    for name in top:
        if (src / name).is_file():
            written.append(Path(shutil.copy2(src / name, dest / name)))
    if (src / "figures").is_dir():
        shutil.copytree(src / "figures", dest / "figures")
        written.append(dest / "figures")
    runs = sorted((src / "runs").iterdir())
    for run in runs:
        written += publish_records(run, dest / "runs" / run.name)
    for run, png in probe_pngs(runs):
        (dest / "runs" / run.name / "figures").mkdir(exist_ok=True)
        written.append(Path(shutil.copy2(png, dest / "runs" / run.name / "figures" / png.name)))
    for run in runs:
        geometry = run / "geometry.json"
        if not geometry.is_file():
            continue
        written.append(Path(shutil.copy2(geometry, dest / "geometry" / f"{run.name}-geometry.json")))
        cell = figures_for(run.name)
        if cell is not None:
            for png in sorted((run / "figures").glob("*.png")):
                written.append(Path(shutil.copy2(png, dest / "geometry" / f"{cell}-{png.name}")))
    return written


def probe_pngs(runs: list[Path]) -> list[tuple[Path, Path]]:
    """Each probe figure a cell's runs drew (a PNG named in a geometry.json's "figures", a regular file in the run's
    figures/), from the lowest seed of the cell that has it, as (run, PNG): what the report reads of a probed run."""
    by_cell: dict[str, list[tuple[int, Path]]] = {}
    for run in runs:
        m = SEED.search(run.name)
        by_cell.setdefault(SEED.sub("", run.name), []).append((int(m.group(1)) if m else 0, run))
    out = []
    for seeds in by_cell.values():
        taken: set[str] = set()
        for _, run in sorted(seeds):
            for name in sorted(listed_figures(run) - taken):
                png = run / "figures" / name
                if not (run / "figures").is_symlink() and not png.is_symlink() and png.is_file():
                    out.append((run, png))
                    taken.add(name)
    return out


def listed_figures(run: Path) -> set[str]:
    """The PNG file names a run's geometry.json lists under "figures" (only the name counts), or none."""
    try:
        listed = json.loads((run / "geometry.json").read_text()).get("figures")
    except (OSError, ValueError, AttributeError):
        return set()
    if not isinstance(listed, list):
        return set()
    names = {Path(p).name for p in listed if isinstance(p, str)}
    return {n for n in names if n.endswith(".png") and n not in ("", ".", "..")}


def check_dest(src: Path, dest: Path, top: tuple[str, ...] = TOP) -> None:
    """Refuse (SystemExit naming it) a `dest` that `publish` must not delete and replace: one that overlaps `src`, a
    link or a file, or an existing folder that is not a published copy (its report.md, and nothing but what `publish`
    writes: `top`, figures/, geometry/, runs/)."""
    a, b = src.resolve(), dest.resolve()
    if a == b or a in b.parents or b in a.parents:
        raise SystemExit(f"{dest}: overlaps the source {src}; publish into a folder of its own")
    if dest.is_symlink() or (dest.exists() and not dest.is_dir()):
        raise SystemExit(f"{dest}: not a folder (a link or a file); refusing to replace it")
    if not dest.exists():
        return
    ours = {*top, "figures", "geometry", "runs"}
    stray = next((p.name for p in sorted(dest.iterdir()) if p.name not in ours), None)
    if stray is not None:
        raise SystemExit(f"{dest}: holds {stray!r}, which publish does not write; refusing to delete it")
    if not (dest / "report.md").is_file():
        raise SystemExit(f"{dest}: no report.md, so not a folder publish wrote; refusing to delete it")


def publish_records(run: Path, dest: Path) -> list[Path]:
    """A run directory's records (`RECORDS`, `RECORD_DIRS` and geometry.json) into `dest`, its weights left out."""
    dest.mkdir(parents=True)
    written = [Path(shutil.copy2(run / n, dest / n)) for n in (*RECORDS, "geometry.json") if (run / n).is_file()]
    for d in RECORD_DIRS:
        if (run / d).is_dir():
            written.append(Path(shutil.copytree(run / d, dest / d)))
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("src", type=Path, help="a `windtunnel reproduce --out` directory")
    parser.add_argument("dest", type=Path, help="where to publish, e.g. docs/results/standard")
    args = parser.parse_args()
    written = publish(args.src, args.dest)
    print(f"{len(written)} files/folders -> {args.dest}")


if __name__ == "__main__":
    main()
