"""Time-to-Bayes: how long until a model is Bayes-exact? Wall-clock training seconds and steps to each precision mark.

A cell is (task, architecture, recipe, budget); each seed of a cell is one training run with frequent cheap
evaluation on the validation stream (never the test stream). From its `metrics.jsonl` the benchmark reads the first
evaluation at which the headline metric reaches each mark:

    entropy error  0.1, 0.05, 0.02, 0.01 bits     (recall: accuracy 90%, 99%, 100%)
    HMM, also      "exact filter": the model's belief horizon covers every window filter (`marks.crossings`)

Times are *training* seconds (`train_s`: optimiser steps only, no evaluation or checkpoints), with the machine,
threads and dtype recorded. Results: `time_to_bayes.json`, `time_to_bayes.md` and a log-log plot of error against
training seconds per cell (`time_to_bayes.png`). Run with `windtunnel time-to-bayes` or
`benchmarks/bench_time_to_bayes.py`.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from windtunnel import rundir
from windtunnel.executors import Job, make_executor, placement, threads_per_run, write_storage_token
from windtunnel.executors.driver import execute
from windtunnel.marks import EXACT_FILTER, PRECISION_MARKS, crossings, format_mark, mark_header, summarize_marks
from windtunnel.recipes import get_recipe
from windtunnel.report.tables import headline_metric


class Cell(BaseModel):
    """One benchmark cell: the tier's task size and model preset, trained with `recipe` for `steps` at `batch_size`
    and `lr`, evaluated every `eval_every` steps on `eval_size` validation sequences; `seeds` runs."""

    model_config = ConfigDict(extra="forbid")
    task: str
    arch: str
    recipe: str = "baseline"
    tier: str = "quick"
    steps: int = Field(ge=1)
    batch_size: int = Field(default=64, ge=1)
    lr: float = Field(default=1e-3, gt=0, allow_inf_nan=False)
    warmup_steps: int | None = Field(default=None, ge=0)  # None: 5% of the steps, as the quick tier
    eval_every: int = Field(default=100, ge=1)
    eval_size: int = Field(default=256, ge=1)
    seeds: int = Field(default=1, ge=1)
    set: dict[str, Any] = Field(default_factory=dict)  # extra dotted overrides (model.size.*, train.*, task.params.*)

    @property
    def recipe_name(self) -> str:
        """The recipe's name: a registered name as given, a recipe file by its stem (no path in run names)."""
        return Path(self.recipe).stem if Path(self.recipe).suffix in (".yaml", ".yml", ".json") else self.recipe

    @property
    def label(self) -> str:
        extra = "".join(f",{k.split('.')[-1]}={v}" for k, v in sorted(self.set.items()))
        return f"{self.task}/{self.arch}/{self.recipe_name} ({self.steps}x{self.batch_size}, lr {self.lr:g}{extra})"

    @property
    def slug(self) -> str:
        extra = "".join(f"-{k.split('.')[-1]}{v}" for k, v in sorted(self.set.items()))
        return f"{self.task}-{self.arch}-{self.recipe_name}-{self.steps}x{self.batch_size}-lr{self.lr:g}{extra}"


def cell_config(cell: Cell, seed: int) -> dict[str, Any]:
    """The run config of one seed of a cell: the tier's config of (task, arch) with the cell's budget and recipe."""
    from windtunnel.config import apply_overrides
    from windtunnel.suites.paper import run_config

    cfg = run_config(cell.task, cell.arch, cell.tier, seed)
    warmup = cell.warmup_steps if cell.warmup_steps is not None else max(1, cell.steps // 20)
    cfg = apply_overrides(
        cfg,
        {
            "train.steps": cell.steps,
            "train.batch_size": cell.batch_size,
            "train.lr": cell.lr,
            "train.warmup_steps": warmup,
            "train.eval_every": cell.eval_every,
            "train.eval_size": cell.eval_size,
            "train.checkpoint_every": max(cell.eval_every, cell.steps // 10),
            "train.checkpoint_schedule": None,
            "train.keep_checkpoints": 1,
            "train.log_every": min(50, cell.eval_every),
        },
    )
    cfg = get_recipe(cell.recipe).apply(cfg)
    return apply_overrides(cfg, cell.set)


def seed_job(cell: Cell, seed: int, out: Path, threads: int, storage: tuple[str, str] | None = None) -> Job:
    """The job that trains one seed of a cell into `out/runs/<slug>-s<seed>` (no probes)."""
    return Job(f"{cell.slug}-s{seed}", cell_config(cell, seed), str(out / "runs"), threads=threads, storage=storage)


def read_seed(job: Job, cell: Cell, seed: int) -> dict[str, Any]:
    """One trained seed of a cell: its validation curve, the marks it crossed, and its final test numbers."""
    run_dir = job.run_dir
    final = rundir.read_json(run_dir / "eval.json")["default"]["metrics"]  # the test stream, written by train()
    lines = rundir.read_metrics(run_dir)
    evals = [r for r in lines if r.get("split") == "eval"]
    steps = [r for r in lines if "loss" in r]
    metric = headline_metric(cell.task)
    keep = ("step", "train_s", "entropy_mae_bits", "kl_bits", "accuracy", "impossible_mass", "closest", "horizon")
    return {
        "seed": seed,
        "run_dir": f"runs/{run_dir.name}",  # relative to the benchmark's --out: results stay valid when moved
        "metric": metric,
        "curve": [{k: e[k] for k in keep if k in e} for e in evals],
        "crossings": crossings(evals, metric),
        "train_s": steps[-1]["train_s"] if steps else None,
        "tokens_per_s": statistics.median(r["tokens_per_s"] for r in steps[1:]) if len(steps) > 1 else None,
        "final_validation": {k: evals[-1].get(k) for k in keep if k in evals[-1]} if evals else None,
        "test": {k: (v["mean"] if v else None) for k, v in final.items()},
        "dtype": job.config["train"].get("dtype", "float32"),
        "threads": job.threads,
    }


def summarize_cell(cell: Cell, seeds: list[dict[str, Any]]) -> dict[str, Any]:
    """A cell's seeds: their marks (`summarize_marks`) and final test value (mean, min, max)."""
    metric = seeds[0]["metric"]
    test = [s["test"][metric] for s in seeds if s["test"].get(metric) is not None]
    return {
        "cell": cell.model_dump(),
        "label": cell.label,
        "metric": metric,
        "marks": summarize_marks([s["crossings"] for s in seeds]),
        "test": {"mean": statistics.fmean(test), "min": min(test), "max": max(test)} if test else None,
        "recipe": get_recipe(cell.recipe).model_dump(mode="json"),
        "seeds": seeds,
    }


def run(
    cells: list[Cell],
    out: str | Path,
    jobs: int = 1,
    echo: Any = print,
    threads: int | None = None,
    *,
    executor: str = "local",
    ray_address: str | None = None,
    max_retries: int | None = None,
    progress: bool = False,
) -> dict[str, Any]:
    """Run every seed of every cell on `executor` (locally `jobs` in parallel, each with `threads` CPU threads;
    default: the cores split between the jobs locally, 1 on Ray); write JSON, Markdown and the plot into `out`;
    returns the results dict. A seed already trained (its eval.json exists) is read back, not trained again."""
    from windtunnel.config import resolve_config
    from windtunnel.reproduce import machine_description

    runner = make_executor(executor, jobs=jobs, ray_address=ray_address, max_retries=max_retries)
    for c in cells:  # fail on a bad recipe or config before any training or any directory is made
        resolve_config(cell_config(c, 0))
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    threads = threads_per_run(executor, jobs, threads)
    storage = write_storage_token(out)
    work = [(c, s, seed_job(c, s, out, threads, storage)) for c in cells for s in range(c.seeds)]
    echo(
        f"time-to-Bayes: {len(cells)} cell(s), {len(work)} run(s), {placement(runner, jobs)} x {threads} thread(s) "
        f"-> {out}"
    )
    t0 = time.time()
    todo = [job for _, _, job in work if not (job.run_dir / "eval.json").exists()]
    execute(todo, runner, echo, progress=progress)
    results = [summarize_cell(c, [read_seed(job, cc, s) for cc, s, job in work if cc is c]) for c in cells]
    data = {
        "machine": {**machine_description(), "threads_per_run": threads, "jobs": jobs, "executor": runner.name},
        "wall_s": round(time.time() - t0, 1),
        "cells": results,
    }
    echo(_write(data, out))
    return data


def _write(data: dict[str, Any], out: Path) -> str:
    """time_to_bayes.json, .md and .png into `out`; returns the Markdown."""
    text = markdown(data)
    rundir.write_json(out / "time_to_bayes.json", data)
    rundir.atomic_write(out / "time_to_bayes.md", text)
    plot(data, out / "time_to_bayes.png")
    return text


def merge(sources: list[str | Path], out: str | Path) -> dict[str, Any]:
    """Combine earlier results (directories holding time_to_bayes.json, or the JSON files) into one table and plot
    in `out`; each cell keeps its own machine line. Returns the merged results dict."""
    cells, machines, wall = [], [], 0.0
    for src in sources:
        p = Path(src)
        p = p / "time_to_bayes.json" if p.is_dir() else p
        if not p.is_file():
            raise ValueError(f"merge: no time_to_bayes.json at {str(src)!r}")
        data = rundir.read_json(p)
        cells += data["cells"]
        machines.append(data["machine"])
        wall += float(data.get("wall_s", 0.0))
    if not cells:
        raise ValueError("merge: nothing to merge")
    first = machines[0]
    if any(m.get("machine") != first.get("machine") for m in machines):
        raise ValueError("merge: results come from different machines; their seconds do not compare")
    data = {
        "machine": {
            **first,
            "jobs": max(m.get("jobs", 1) for m in machines),
            "threads_per_run": first.get("threads_per_run"),
        },
        "wall_s": round(wall, 1),
        "cells": cells,
        "merged_from": [str(s) for s in sources],
    }
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    _write(data, out)
    return data


def markdown(data: dict[str, Any]) -> str:
    """One table per headline metric: training seconds [seed range] @ median step to each mark, and the final test
    value (mean, min–max over seeds)."""
    lines = [
        f"Machine: {data['machine']['machine']}; torch {data['machine']['torch']}; "
        f"{data['machine']['threads_per_run']} thread(s) per run, {data['machine']['jobs']} run(s) at once.",
        "",
    ]
    for metric in dict.fromkeys(c["metric"] for c in data["cells"]):
        cells = [c for c in data["cells"] if c["metric"] == metric]
        present = {m for c in cells for m in c["marks"]}  # in PRECISION_MARKS order (JSON files store keys sorted)
        marks = [m for m in (*(f"{v:g}" for v in PRECISION_MARKS[metric]), EXACT_FILTER) if m in present]
        head = [mark_header(m, metric) for m in marks]
        lines += [
            f"**{metric}** (seconds of training to first reach each mark, median [range] @ step, seeds)",
            "",
            "| cell | seeds | dtype | " + " | ".join(head) + " | final (test) |",
            "|---|---|---|" + "---|" * len(marks) + "---|",
        ]
        for c in cells:
            t = c["test"]
            final = (
                "—"
                if t is None
                else (f"{t['mean']:.4f}" + ("" if len(c["seeds"]) == 1 else f" ({t['min']:.4f}–{t['max']:.4f})"))
            )
            hits = [(format_mark(c["marks"][m]) if m in c["marks"] else "n/a") for m in marks]
            lines.append(
                f"| {c['label']} | {len(c['seeds'])} | {c['seeds'][0]['dtype']} | " + " | ".join(hits) + f" | {final} |"
            )
        lines.append("")
    return "\n".join(lines)


def plot(data: dict[str, Any], path: str | Path) -> None:
    """Log-log plot of the headline error (1 - accuracy for recall) against training seconds, one panel per task,
    one colour per cell, one line per seed; the marks as dotted lines."""
    from windtunnel.plotting import save, subplots

    tasks = list(dict.fromkeys(c["cell"]["task"] for c in data["cells"]))
    fig, axes = subplots(1, len(tasks), figsize=(5.5 * len(tasks), 4.2), squeeze=False)
    for ax, task in zip(axes[0], tasks, strict=True):
        cells = [c for c in data["cells"] if c["cell"]["task"] == task]
        metric = cells[0]["metric"]
        for i, c in enumerate(cells):
            for j, s in enumerate(c["seeds"]):
                pts = [
                    (e["train_s"], (1 - e[metric]) if metric == "accuracy" else e[metric])
                    for e in s["curve"]
                    if e.get(metric) is not None and e["train_s"] > 0
                ]
                pts = [(x, max(y, 1e-4)) for x, y in pts]
                if pts:
                    ax.plot(
                        *zip(*pts, strict=True), color=f"C{i}", lw=1.2, alpha=0.9, label=c["label"] if j == 0 else None
                    )
        for mark in PRECISION_MARKS[metric]:
            y = (1 - mark) if metric == "accuracy" else mark
            if y > 0:
                ax.axhline(y, color="grey", ls=":", lw=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("training seconds")
        ax.set_ylabel("1 - accuracy" if metric == "accuracy" else f"{metric} (validation)")
        ax.set_title(task)
        ax.legend(fontsize=6)
    fig.tight_layout()
    save(fig, path, dpi=120)


def parse_cell(text: str) -> Cell:
    """`task=bijection,arch=transformer,recipe=wsd,steps=3000` (plus batch_size, lr, seeds, ...; `set.KEY=V` for
    extra overrides) -> Cell; ValueError names a bad field."""
    import yaml
    from pydantic import ValidationError

    from windtunnel.config import error_message

    fields: dict[str, Any] = {"set": {}}
    for item in filter(None, (s.strip() for s in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--cell: expected key=value, got {item!r}")
        parsed = yaml.safe_load(value)
        if key.startswith("set."):
            fields["set"][key[4:]] = parsed
        else:
            fields[key] = parsed
    try:
        return Cell.model_validate(fields)
    except ValidationError as err:
        raise ValueError(f"--cell {text!r}: {error_message(err)}") from None
