"""`windtunnel train` and `windtunnel eval`: thin shells over `training.train.train` and
`evaluation.evaluate.evaluate`."""

from __future__ import annotations

import errno
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
    read_only_run,
    threads_option,
    trust_code_option,
    use_threads,
    writable_dir,
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
    from windtunnel.evaluation.marks import EXACT

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
    stack_seeds: str | None = typer.Option(
        None,
        "--stack-seeds",
        metavar="S,S,...",
        help="train these seeds as one stacked model, into OUT/s<seed> each",
    ),
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
    (SIGINT) or SIGTERM writes a checkpoint at the current step and says how to resume (stacked seeds too).
    --stack-seeds 0,1,2 trains those seeds as one stacked model into OUT/s0, OUT/s1, OUT/s2 (with --resume, continues
    them). Details: docs/training.md."""
    with loading():
        from windtunnel.config import build_config
        from windtunnel.errors import TrainingInterrupted
        from windtunnel.models import is_baseline
        from windtunnel.plugins import unique
        from windtunnel.runs.resume import resume_config
        from windtunnel.store.rundir import CONFIG, WANDB
        from windtunnel.training.train import train

    imported = import_modules(imports)  # before the config is read: its task and arch may be the module's
    use_threads(threads)

    flags: dict[str, Any] = {"task.name": task, "model.arch": arch, "model.preset": preset, "seed": seed}
    flags.update({"train.steps": steps, "train.loggers": logger or None})
    overrides = {k: v for k, v in flags.items() if v is not None}
    overrides.update(parse_kv(set_, "--set"))
    if stack_seeds is not None:
        _train_stack(stack_seeds, run, out, config, overrides, resume, overwrite, progress, trust_code, imported)
        return
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


def _stack_seeds(text: str) -> list[int]:
    """The seeds of --stack-seeds ("0,1,2"): integers >= 0, each once; exit 2 naming the option otherwise."""
    parts = [p.strip() for p in text.split(",")]
    if not all(p.isdigit() for p in parts):
        fail(f"--stack-seeds {text!r}: expected seeds (integers >= 0) separated by commas, e.g. 0,1,2")
    seeds = [int(p) for p in parts]
    if len(set(seeds)) != len(seeds):
        fail(f"--stack-seeds {text!r}: each seed once")
    return seeds


def _train_stack(
    text: str,
    run: Path | None,
    out: Path | None,
    config: Path | None,
    overrides: dict[str, Any],
    resume: bool,
    overwrite: bool,
    progress: bool,
    trust_code: bool,
    imported: list[str],
) -> None:
    """`windtunnel train --stack-seeds`: the config at each seed trained stacked (`training.stacked`) into
    OUT/s<seed> (RUN/s<seed>: each such run continued, --resume); every run's table, and exit 1 where any failed."""
    from windtunnel.config import build_config
    from windtunnel.plugins import unique
    from windtunnel.runs.resume import resume_config
    from windtunnel.store.rundir import check_run_dir
    from windtunnel.training.stacked import StackInterrupted, train_stacked

    seeds = _stack_seeds(text)
    if run is not None and not resume:
        fail(f"RUN {str(run)!r}: a directory argument is for --resume (continue its stacked runs); to start, use --out")
    parent = run if run is not None else out
    if parent is None:
        fail("--out: missing: the directory that holds the stacked runs (OUT/s<seed> each)")
    for flag, given in (("--seed", "seed" in overrides), ("--overwrite", overwrite), ("--trust-code", trust_code)):
        if given:
            fail(f"--stack-seeds: not with {flag} (train such runs one by one)")
    dirs = [parent / f"s{s}" for s in seeds]
    cfgs = []
    for s, d in zip(seeds, dirs, strict=True):
        if resume:
            check_run_dir(d, "--resume")
        cfg = (
            resume_config(d, overrides) if resume and config is None else build_config(config, {**overrides, "seed": s})
        )
        if imported and not resume:  # recorded in each new run's config, as a solo run records them
            cfg = cfg.model_copy(update={"imports": unique([*cfg.imports, *imported])})
        cfgs.append(cfg)
    try:
        results = train_stacked(cfgs, dirs, resume=resume, progress=progress, handle_signals=True, echo=typer.echo)
    except StackInterrupted as err:
        again = f"windtunnel train --resume {shlex.quote(str(parent))} --stack-seeds {','.join(map(str, seeds))}"
        again += "".join(f" --import {shlex.quote(m)}" for m in cfgs[0].imports)
        typer.echo(f"interrupted: {err}; continue with: {again}", err=True)
        raise typer.Exit(err.exit_code) from None
    failed = False
    for d, result in zip(dirs, results, strict=True):
        if isinstance(result, BaseException):
            typer.echo(f"error: run {d}: {result}", err=True)
            failed = True
        else:
            typer.echo(f"run: {d}")
            print_table(result)
    if failed:
        raise typer.Exit(1)


def _run_dir(run: Path | None, out: Path | None, resume: bool) -> Path:
    """The run directory of `windtunnel train`: --out, or RUN (an existing run, for --resume)."""
    from windtunnel.store.rundir import check_run_dir

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
    from windtunnel.training.train import size_text

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
    out: Path | None = out_option(None, "write the results (JSON) to FILE, not into RUN_DIR (then only read)"),
    trust_code: bool = trust_code_option(),
    imports: list[str] | None = import_option(),
    device: str | None = device_option(None, "auto, cpu or cuda (default: where the run trained, cuda read as auto)"),
    threads: int | None = threads_option(per_run=False),
) -> None:
    """Evaluate a run against the exact posterior.

    At the run's own settings the results are merged into RUN_DIR/eval.json (its recorded evaluation); with any other
    (--n, --batch-size, --checkpoint, --dtype, a --set the run's config does not evaluate) they go to
    RUN_DIR/evals/NAME.json, NAME the settings that differ ("K=50,eval.n=300"), and eval.json is left as it was. With
    --out FILE they go to FILE alone and RUN_DIR is only read (a run on read-only storage). A run whose config records
    imports needs each of them as --import (or --trust-code)."""
    with loading():
        from windtunnel.budget import check_evaluation
        from windtunnel.evaluation.evaluate import evaluate
        from windtunnel.resolve import check_override
        from windtunnel.runs import load_run
        from windtunnel.store.records.run_dir import EvalFile
        from windtunnel.store.rundir import check_output_file, eval_file, write_json

    if n is not None and n < 1:
        fail(f"--n: must be >= 1 (got {n})")
    if batch_size is not None and batch_size < 1:
        fail(f"--batch-size: must be >= 1 (got {batch_size})")
    override = _eval_override(parse_kv(set_, "--set"))
    if out is not None:
        check_output_file(out, "--out")
    import_modules(imports)
    use_threads(threads)
    run = load_run(run_dir, trust_code=trust_code)
    # where the run trained, as reproduce evaluates it (cuda read as auto: a GPU run evaluated on a CPU machine)
    dev = cli_device(device or ("cpu" if run.config.train.device == "cpu" else "auto"))
    writes = "eval writes its results"
    if out is None and not writable_dir(run.path):  # eval.json is written there: fail now, not after the work
        fail(read_only_run(run.path, writes, "--out FILE"))
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
        write=False,  # written below: to --out, or into the run
    )
    if out is not None:
        write_json(out, results, sort_keys=False)
    else:
        try:
            EvalFile.merge(run.path, results)
        except OSError as err:  # a read-only mount os.access did not tell
            if err.errno != errno.EROFS:
                raise
            fail(read_only_run(run.path, writes, "--out FILE"))
    record: dict[str, Any] = next(iter(results.values())).get("run") or {}  # what the run is, for every setting
    if record.get("status", "finished") != "finished":
        typer.echo(f"warning: {run.path}: {'; '.join(record['notes'])}", err=True)
    if as_json:
        typer.echo(json.dumps(results, indent=2))
    else:
        print_table(results)
    if out is not None:
        typer.echo(f"wrote {out}: the evaluation of {run.path}, which is left as it was", err=as_json)
        return
    for extra in dict.fromkeys(r.get("extra") for r in results.values()):
        where = eval_file(run.path, extra)
        said = (
            "the run's recorded evaluation, at its own settings"
            if extra is None
            else f"settings that differ from the run's ({extra}); eval.json, its recorded evaluation, is left as it was"
        )
        typer.echo(f"wrote {where}: {said}", err=as_json)


# What a user may try to --set on eval that is no task parameter: the eval option that sets it instead.
_EVAL_OPTIONS = {
    "eval.n": "--n",
    "eval.batch_size": "--batch-size",
    "eval.dtype": "--dtype",
    "train.device": "--device",
    "imports": "--import",
}
_TASK_PARAM = "task.NAME=value, e.g. task.K=50"


def _eval_override(kv: dict[str, Any]) -> dict[str, Any]:
    """`windtunnel eval --set`'s task parameters ({NAME: value}) from its dotted keys: task.NAME, or task.params.NAME
    as train's --set takes it; any other key is a one-line error that says what sets it, if anything does."""
    override: dict[str, Any] = {}
    for key, value in kv.items():
        parts = key.split(".")
        name = (
            parts[1]
            if len(parts) == 2 and parts[0] == "task" and parts[1] not in ("", "name", "params")
            else parts[2]
            if len(parts) == 3 and parts[:2] == ["task", "params"] and parts[2]
            else None
        )
        if name is None:
            fail(f"--set {key}: {_not_a_task_parameter(key, value)}")
        if name in override:
            fail(f"--set {key}: the task parameter {name} is given twice (as task.{name} and task.params.{name})")
        override[name] = value
    return override


def _not_a_task_parameter(key: str, value: Any) -> str:
    """Why `key` (given `value`) is no setting of eval's --set (which takes task parameters only), and what to use
    instead."""
    head = key.split(".")[0]
    if key in _EVAL_OPTIONS:
        option = _EVAL_OPTIONS[key]
        given = f"{option} {shlex.quote(str(value))}"
        return f"eval sets this with {option} ({given}); --set takes task parameters ({_TASK_PARAM})"
    if key == "task.name":
        return f"eval scores the run on the task it trained on; --set changes that task's parameters ({_TASK_PARAM})"
    if head == "task":
        return "a task parameter is set as task.NAME=value or task.params.NAME=value (e.g. task.K=50)"
    if head == "eval":
        return (
            "a plain `windtunnel eval RUN_DIR` evaluates the run's own eval settings; another setting is --n, "
            f"--batch-size, --dtype, or a task parameter ({_TASK_PARAM})"
        )
    if head == "seed":
        return (
            "eval takes no seed: its test sequences are the same for every run, and the run's own seed (config.json) "
            "draws the bootstrap; a model trained with another seed is another run (train it with --set seed=N)"
        )
    if head == "model":
        return (
            f"eval scores the run's own model as trained (--checkpoint picks a step); --set takes task parameters "
            f"({_TASK_PARAM})"
        )
    if head == "train":
        return (
            "a training setting: eval scores the run as it trained (train another run to change it); --set takes "
            f"task parameters ({_TASK_PARAM})"
        )
    return f"not a setting eval takes; eval's --set takes task parameters ({_TASK_PARAM})"
