"""`windtunnel tasks`: list the wind tunnels, and `tasks show NAME` prints one sampled sequence with its posterior."""

from __future__ import annotations

import math
from typing import Any

import typer

from windtunnel.cli.common import guarded, import_modules, import_option, loading, parse_kv
from windtunnel.cli.root import App, app
from windtunnel.text import number

tasks_app = App(
    help="List the wind tunnels, or show one sampled sequence.",
    invoke_without_command=True,
    no_args_is_help=False,
)
app.add_typer(tasks_app, name="tasks")


def _fmt_params(params: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in params.items())


@tasks_app.callback()
@guarded
def list_tasks(ctx: typer.Context, imports: list[str] | None = import_option()) -> None:
    """List every registered task with its default parameters, length, answer classes and hypothesis count."""
    import_modules(imports)
    if ctx.invoked_subcommand is not None:
        return
    with loading():
        from windtunnel import tasks

    for name in tasks.names():
        task = tasks.make(name)
        spec = task.spec
        answers = f"{spec.n_classes} classes" if spec.answer_kind == "classes" else "real (Gaussian)"
        hyp = "continuous" if math.isinf(spec.log10_hypotheses) else f"10^{spec.log10_hypotheses:.1f}"
        params = _fmt_params(task.params.model_dump())  # "" for a tunnel without parameters
        typer.echo(f"{name:<12} T={spec.seq_len:<4} answers={answers:<16} hypotheses={hyp:<10} {params}")


@tasks_app.command("show")
@guarded
def show(
    name: str = typer.Argument(..., metavar="NAME", help="task name (see `windtunnel tasks`)"),
    param: list[str] | None = typer.Option(
        None, "--param", "-p", metavar="K=V", help="task parameter k=v (repeatable)"
    ),
    seed: int = typer.Option(0, "--seed", help="sampling seed"),
    imports: list[str] | None = import_option(),
) -> None:
    """Print one sampled sequence with its exact posterior.

    Each token, and at scored positions the posterior entropy and the truth."""
    with loading():
        from windtunnel import tasks
        from windtunnel.evaluation.metrics import entropy_bits

    import_modules(imports)
    task = tasks.make(name, **parse_kv(param, "--param"))
    batch = task.sample(1, seed=seed)
    spec = task.spec
    tokens = task.describe(batch, 0)
    post: Any = batch.posterior  # a Normal for real answers, else a Categorical (`check_posterior`)
    H = entropy_bits(post)[0]  # (T,)
    mask = batch.target_mask[0]
    unit = "bits (differential)" if spec.answer_kind == "real" else "bits"
    typer.echo(f"{name}: {task!r}  T={spec.seq_len}  seed={seed}  entropy in {unit}")
    width = max(len(tok) for tok in tokens)
    for t, tok in enumerate(tokens):
        line = f"{t:>4}  {tok:<{width}}"
        if bool(mask[t]):
            truth = batch.targets[0, t].item()
            if spec.answer_kind == "real":
                loc, scale = post.loc[0, t].item(), post.scale[0, t].item()
                pred = f"N({number(loc, '.2f')}, {number(scale, '.2f')}^2)"
                line += f"    H={number(H[t].item())}  pred={pred}  truth={number(truth, '.2f')}"
            else:
                p_true = post.probs[0, t, int(truth)].item()
                line += f"    H={number(H[t].item())}  truth={int(truth)}  p(truth)={number(p_true)}"
        typer.echo(line)
    typer.echo(f"mean posterior entropy at scored positions: {number(H[mask].mean().item(), '.4f')} {unit}")
