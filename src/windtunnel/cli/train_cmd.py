"""`windtunnel train` and `windtunnel eval`: thin shells over `windtunnel.train.train` and `evaluate.evaluate`."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from windtunnel.cli.common import (
    cli_device,
    device_option,
    fail,
    guarded,
    import_modules,
    import_option,
    loading,
    out_option,
    parse_kv,
    progress_option,
    threads_option,
    trust_code_option,
    use_threads,
)
from windtunnel.cli.root import app
from windtunnel.text import number

if TYPE_CHECKING:
    from windtunnel.config import RunConfig


# The table's metric columns: (eval.json key, column title, what it is). The two entropy errors differ in when the
# absolute value is taken (per sequence and position, or of the mean curves), so they are named and explained apart.
COLUMNS = (
    (
        "entropy_mae_bits",
        "entropy error, per position",
        "|H_model - H_exact| averaged over every sequence and scored position",
    ),
    (
        "entropy_mae_curve_bits",
        "entropy error, mean curve",
        "|mean H_model - mean H_exact| (means over sequences) averaged over positions: the paper's calibration "
        "figure, where errors of opposite sign cancel",
    ),
    ("kl_bits", "KL(exact ‖ model)", "per scored position"),
    ("accuracy", "accuracy", "argmax of the model = the realised answer, as a fraction"),
)


def _bits(x: float, small: bool = True) -> str:
    """Four decimals; with `small`, two significant digits below 0.001 (a distance of 2e-08 bits is not 0.0000)."""
    return f"{x:.1e}" if small and 0 < abs(x) < 1e-3 else number(x, ".4f")


def _interval(v: dict[str, Any] | None, small: bool = False) -> str:
    """`mean [lo, hi]` (`_bits`), "n/a" for a metric that does not apply (accuracy of a real answer)."""
    return "n/a" if v is None else f"{_bits(v['mean'], small)} [{_bits(v['lo'], small)}, {_bits(v['hi'], small)}]"


def _verdict_line(r: dict[str, Any]) -> str | None:
    v = r.get("verdict") or {}
    if not v.get("level"):
        return None
    return f"verdict: {v.get('mark', '')} {v['level']}" + (f" ({'; '.join(v['reasons'])})" if v.get("reasons") else "")


def _closest_line(r: dict[str, Any]) -> str | None:
    """Which posterior the model computes, for a task with approximate posteriors (the HMM's window filters): the
    closest one and its distance KL(candidate ‖ model), and how much further the runner-up is (95% CI)."""
    from windtunnel.marks import EXACT

    closest = r.get("closest")
    if not closest:
        return None
    name = str(closest["name"])
    approx = r.get("approximations") or {}
    dist = (
        (r["metrics"].get("kl_bits") or {}).get("mean")
        if name == EXACT
        else approx.get(name, {}).get("kl_from_model_bits")
    )
    details = f"KL({name} ‖ model) {'n/a' if dist is None else _bits(dist)} bits"
    others = {c: m for c, m in (closest.get("margins") or {}).items() if c != name and m}
    if others:
        nxt = min(others, key=lambda c: others[c]["mean"])
        details += f"; next: {nxt}, {_interval(others[nxt], small=True)} bits further"
    text = (r.get("verdict") or {}).get("closest_text") or name
    if text.startswith("none"):  # "none: no better than context-blind": say it, then which one is nearest anyway
        return f"KL-nearest reference: {text} (nearest: {name}, {details})"
    return f"KL-nearest reference: {text}, {details}"


def print_table(results: dict[str, Any]) -> None:
    """Human-readable table: one row per evaluation setting, mean [95% CI] per metric, each setting's verdict and
    KL-nearest reference below its row (not a memory claim: the belief horizon is), and what each column is."""
    header = ["setting", "n", *(title for _, title, _ in COLUMNS)]
    rows = [
        [name, str(r["n"]), *(_interval(r["metrics"].get(key)) for key, _, _ in COLUMNS)] for name, r in results.items()
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        padded = (c.rjust(w) if i == 1 else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True)))
        return "  ".join(padded).rstrip()

    typer.echo(line(header))
    for row, r in zip(rows, results.values(), strict=True):
        typer.echo(line(row))
        for extra in (_verdict_line(r), _closest_line(r)):
            if extra:
                typer.echo(f"  {extra}")
    typer.echo("columns: mean [95% CI] over the test sequences, in bits; eval.json key and definition:")
    width = max(len(title) for _, title, _ in COLUMNS)
    for key, title, what in COLUMNS:
        typer.echo(f"  {title:<{width}}  {key}: {what}")


@app.command("train")
@guarded
def train_command(
    run: Path | None = typer.Argument(
        None, metavar="RUN", show_default=False, help="with --resume: the run directory to continue"
    ),
    out: Path | None = out_option(None, "run directory to create (with --resume: to continue)"),
    task: str | None = typer.Option(None, "--task", help="task name (see `windtunnel tasks`)"),
    arch: str | None = typer.Option(None, "--arch", help="architecture, or 'oracle' / 'uniform'"),
    preset: str | None = typer.Option(None, "--preset", help="size preset: smoke, quick or paper"),
    config: Path | None = typer.Option(None, "--config", "-c", help="YAML/JSON RunConfig file"),
    set_: list[str] | None = typer.Option(
        None, "--set", metavar="K=V", help="dotted override k=v, e.g. train.lr=1e-3 or task.V=10"
    ),
    seed: int | None = typer.Option(None, "--seed", help="run seed"),
    steps: int | None = typer.Option(None, "--steps", help="training steps"),
    resume: bool = typer.Option(
        False, "--resume", help="continue RUN (or --out) from its latest checkpoint, with its own config"
    ),
    overwrite: bool = typer.Option(False, "--overwrite", help="replace an existing run directory (wandb/ included)"),
    progress: bool = progress_option(),
    trust_code: bool = trust_code_option(),
    logger: list[str] | None = typer.Option(
        None, "--logger", metavar="NAME", help="also log to tensorboard or wandb (repeatable; sets train.loggers)"
    ),
    imports: list[str] | None = import_option(),
    threads: int | None = threads_option(per_run=False),
) -> None:
    """Train a model on a wind tunnel into a run directory.

    A baseline (--arch oracle or uniform) is evaluated, not trained. The imports of --import are recorded in the
    run's config, so eval, probe and --resume find them again. `windtunnel train --resume RUN` continues RUN with its
    own config (`--out RUN --resume` too); --steps, --set etc. change the keys that may change on resume. Ctrl-C
    (SIGINT) or SIGTERM writes a checkpoint at the current step and says how to resume. Details: docs/training.md."""
    with loading():
        from windtunnel.config import build_config
        from windtunnel.errors import TrainingInterrupted
        from windtunnel.models import is_baseline
        from windtunnel.plugins import unique
        from windtunnel.resume import resume_config
        from windtunnel.rundir import CONFIG, WANDB
        from windtunnel.train import train

    imported = import_modules(imports)  # before the config is read: its task and arch may be the module's
    use_threads(threads)

    flags: dict[str, Any] = {"task.name": task, "model.arch": arch, "model.preset": preset, "seed": seed}
    flags.update({"train.steps": steps, "train.loggers": logger or None})
    overrides = {k: v for k, v in flags.items() if v is not None}
    overrides.update(parse_kv(set_, "--set"))
    target = _run_dir(run, out, resume)
    stored = resume and (target / CONFIG).is_file()  # a run to continue: its config.json is the base
    cfg = resume_config(target, overrides) if stored and config is None else build_config(config, overrides)
    default_size = not stored and cfg.model.preset is None and not cfg.model.size and not is_baseline(cfg.model.arch)

    # --overwrite deletes wandb's own folder of the run too (`rundir.clear`): said once it is gone, never silently
    wandb = target / WANDB
    wandb_cleared = overwrite and not resume and wandb.is_dir() and not wandb.is_symlink()

    def start(line: str) -> None:  # train() calls it once everything is checked, just before the first step
        if wandb_cleared:
            typer.echo(f"overwrite: deleted {str(wandb)!r} (wandb's files of the run) with the run's own", err=True)
        if default_size:
            typer.echo(f"warning: {_default_size_warning(cfg)}", err=True)
        typer.echo(line)

    if imported and not stored:  # recorded in a new run's config, after any the config file lists (a resumed run
        # keeps its own: --import only imports, so a run trained from Python resumes here as it is)
        cfg = cfg.model_copy(update={"imports": unique([*cfg.imports, *imported])})
    try:
        results = train(
            cfg,
            target,
            resume=resume,
            overwrite=overwrite,
            progress=progress,
            trust_code=trust_code,
            handle_signals=True,
            echo=start,
        )
    except TrainingInterrupted as err:  # the message ends with the resume command: the run's modules go with it
        again = [f" --import {shlex.quote(m)}" for m in cfg.imports] + ([" --trust-code"] if trust_code else [])
        typer.echo(f"interrupted: {err}{''.join(again)}", err=True)
        raise typer.Exit(err.exit_code) from None
    typer.echo(f"run: {target}")
    print_table(results)


def _run_dir(run: Path | None, out: Path | None, resume: bool) -> Path:
    """The run directory of `windtunnel train`: --out, or RUN (an existing run, for --resume)."""
    from windtunnel.rundir import check_run_dir

    if run is None:
        if out is None:
            fail("--out: missing: the run directory to create (or `--resume RUN` to continue a run)")
        return out
    if not resume:
        fail(f"RUN {str(run)!r}: a run directory argument is for --resume (continue it); to start a run, use --out")
    if out is not None and out.resolve() != run.resolve():
        fail(f"--out {str(out)!r} and RUN {str(run)!r}: two run directories; --resume continues one")
    return check_run_dir(run, "--resume")


def _default_size_warning(cfg: RunConfig) -> str:
    """What a config without preset or size trains (its architecture's built-in defaults), and what to pass."""
    from windtunnel.train import size_text

    dims = size_text(cfg)
    return (
        f"no --preset and no model size: this trains the {cfg.model.arch} architecture's built-in default size"
        f"{f' ({dims})' if dims else ''} for {cfg.train.steps:,} step{'' if cfg.train.steps == 1 else 's'}, not a size "
        "fitted to the task; pass "
        "--preset quick (smoke: a check that it runs; paper: the paper's sizes) or set model.size"
    )


@app.command("eval")
@guarded
def eval_command(
    run_dir: Path = typer.Argument(..., metavar="RUN_DIR", help="run directory"),
    set_: list[str] | None = typer.Option(
        None, "--set", metavar="K=V", help="task override for this evaluation, e.g. task.K=50"
    ),
    n: int | None = typer.Option(None, "--n", help="held-out sequences (default: the run's eval.n)"),
    batch_size: int | None = typer.Option(None, "--batch-size", help="sequences per forward pass"),
    checkpoint: int | None = typer.Option(None, "--checkpoint", help="step to evaluate (default: the latest)"),
    dtype: str | None = typer.Option(None, "--dtype", help="float32 or bf16 (default: the run's eval.dtype)"),
    as_json: bool = typer.Option(False, "--json", help="print the results as JSON (where they were written: stderr)"),
    trust_code: bool = trust_code_option(),
    imports: list[str] | None = import_option(),
    device: str | None = device_option(None, "auto, cpu or cuda (default: where the run trained, cuda read as auto)"),
    threads: int | None = threads_option(per_run=False),
) -> None:
    """Evaluate a run against the exact posterior.

    At the run's own settings the results are merged into RUN_DIR/eval.json (its recorded evaluation); with any other
    (--n, --batch-size, --checkpoint, --dtype, a --set the run's config does not evaluate) they go to
    RUN_DIR/evals/NAME.json, NAME the settings that differ ("K=50,eval.n=300"), and eval.json is left as it was. A run
    whose config records imports needs each of them as --import (or --trust-code)."""
    with loading():
        from windtunnel.budget import check_evaluation
        from windtunnel.evaluate import evaluate
        from windtunnel.resolve import check_override
        from windtunnel.rundir import check_writable, eval_file
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
    import_modules(imports)
    use_threads(threads)
    run = load_run(run_dir, trust_code=trust_code)
    # where the run trained, as reproduce evaluates it (cuda read as auto: a GPU run evaluated on a CPU machine)
    dev = cli_device(device or ("cpu" if run.config.train.device == "cpu" else "auto"))
    check_writable(run.path, "run_dir")  # eval.json is written there: fail now, not after the work
    check_evaluation(run.config, n, batch_size)  # memory for --n sequences (or the stored eval.n), before the work
    if override:
        check_override(run.config, override)
    results = evaluate(
        run,
        n=n,
        overrides=[override] if override else None,
        batch_size=batch_size,
        step=checkpoint,
        dtype=dtype,
        device=dev,
    )
    record: dict[str, Any] = next(iter(results.values())).get("run") or {}  # what the run is, for every setting
    if record.get("status", "finished") != "finished":
        typer.echo(f"warning: {run.path}: {'; '.join(record['notes'])}", err=True)
    if as_json:
        typer.echo(json.dumps(results, indent=2))
    else:
        print_table(results)
    for extra in dict.fromkeys(r.get("extra") for r in results.values()):
        where = eval_file(run.path, extra)
        said = (
            "the run's recorded evaluation, at its own settings"
            if extra is None
            else f"settings that differ from the run's ({extra}); eval.json, its recorded evaluation, is left as it was"
        )
        typer.echo(f"wrote {where}: {said}", err=as_json)
