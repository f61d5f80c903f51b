"""`windtunnel train` and `windtunnel eval`: thin shells over `windtunnel.train.train` and `evaluate.evaluate`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from windtunnel.cli import app
from windtunnel.cli.common import fail, guarded, parse_kv
from windtunnel.config import build_config

TRUST_HELP = (
    "allow model.arch to be an import string (package.module:Class): importing it runs its code, so only "
    "for configs you trust; the module must be installed"
)


def _row(name: str, r: dict[str, Any]) -> str:
    m = r["metrics"]

    def cell(key: str) -> str:
        v = m.get(key)
        return "n/a" if v is None else f"{v['mean']:.4f} [{v['lo']:.4f}, {v['hi']:.4f}]"

    v = r.get("verdict") or {}
    why = f"  {v.get('mark', '')} {v.get('level', '')}" + (f" ({'; '.join(v['reasons'])})" if v.get("reasons") else "")
    closest = f"  closest: {v['closest_text']}" if v.get("closest_text") else ""
    return (
        f"{name:<14} {r['n']:>6}  {cell('entropy_mae_bits'):<26} {cell('entropy_mae_curve_bits'):<26} "
        f"{cell('kl_bits'):<26} {cell('accuracy')}{why}{closest}"
    )


def print_table(results: dict[str, Any]) -> None:
    """Human-readable table: one row per evaluation setting, mean [95% CI] per metric."""
    typer.echo(
        f"{'setting':<14} {'n':>6}  {'entropy_mae_bits':<26} {'entropy_mae_curve_bits':<26} {'kl_bits':<26} accuracy"
        "  verdict (windtunnel.marks)"
    )
    for name, r in results.items():
        typer.echo(_row(name, r))


@app.command("train")
@guarded
def train_command(
    out: Path = typer.Option(..., "--out", "-o", help="run directory to create"),
    task: str | None = typer.Option(None, "--task", help="task name (see `windtunnel tasks`)"),
    arch: str | None = typer.Option(None, "--arch", help="architecture, or 'oracle' / 'uniform'"),
    preset: str | None = typer.Option(None, "--preset", help="size preset: smoke, quick or paper"),
    config: Path | None = typer.Option(None, "--config", "-c", help="YAML/JSON RunConfig file"),
    set_: list[str] | None = typer.Option(None, "--set", help="dotted override k=v, e.g. train.lr=1e-3 or task.V=10"),
    seed: int | None = typer.Option(None, "--seed", help="run seed"),
    steps: int | None = typer.Option(None, "--steps", help="training steps"),
    resume: bool = typer.Option(False, "--resume", help="continue from the run's latest checkpoint"),
    overwrite: bool = typer.Option(False, "--overwrite", help="replace an existing run directory"),
    no_progress: bool = typer.Option(False, "--no-progress", help="no progress bar"),
    trust_code: bool = typer.Option(False, "--trust-code", help=TRUST_HELP),
    logger: list[str] | None = typer.Option(
        None, "--logger", help="log to tensorboard or wandb too (repeatable; sets train.loggers)"
    ),
) -> None:
    """Train a model on a wind tunnel (or evaluate the oracle/uniform baseline) into a run directory."""
    from windtunnel.train import train

    flags: dict[str, Any] = {"task.name": task, "model.arch": arch, "model.preset": preset, "seed": seed}
    flags.update({"train.steps": steps, "train.loggers": logger or None})
    overrides = {k: v for k, v in flags.items() if v is not None}
    overrides.update(parse_kv(set_, "--set"))
    cfg = build_config(config, overrides)
    results = train(cfg, out, resume=resume, overwrite=overwrite, progress=not no_progress, trust_code=trust_code)
    typer.echo(f"run: {out}")
    print_table(results)


@app.command("eval")
@guarded
def eval_command(
    run_dir: Path = typer.Argument(..., help="run directory"),
    set_: list[str] | None = typer.Option(None, "--set", help="task override for this evaluation, e.g. task.K=50"),
    n: int | None = typer.Option(None, "--n", help="number of held-out sequences (default: the run's eval.n)"),
    batch_size: int | None = typer.Option(None, "--batch-size", help="sequences per forward pass"),
    as_json: bool = typer.Option(False, "--json", help="print the results as JSON"),
    trust_code: bool = typer.Option(False, "--trust-code", help=TRUST_HELP),
) -> None:
    """Evaluate a run against the exact posterior; results are merged into RUN_DIR/eval.json."""
    from windtunnel.config import check_override
    from windtunnel.evaluate import evaluate
    from windtunnel.rundir import check_writable
    from windtunnel.runs import load_run

    if n is not None and n < 1:
        fail(f"--n: must be >= 1 (got {n})")
    if batch_size is not None and batch_size < 1:
        fail(f"--batch-size: must be >= 1 (got {batch_size})")
    kv = parse_kv(set_, "--set")
    override: dict[str, Any] = {}
    for key, value in kv.items():
        if not key.startswith("task.") or key.count(".") != 1 or key == "task.name":
            fail(f"--set {key}: eval only takes task parameters (task.NAME=value, not task.name)")
        override[key.split(".", 1)[1]] = value
    run = load_run(run_dir, trust_code=trust_code)
    check_writable(run.path, "run_dir")  # eval.json is written there: fail now, not after the work
    if override:
        check_override(run.config, override)
    results = evaluate(run, n=n, overrides=[override] if override else None, batch_size=batch_size)
    if as_json:
        typer.echo(json.dumps(results, indent=2))
    else:
        print_table(results)
