"""Evaluation against the exact posterior: every position of a batch in one forward pass, metrics in bits.

`evaluate(run)` scores a run's model on a fixed held-out set (seeds from `runs.eval_seed`, disjoint from
training) for the training setting and each `eval.overrides` setting (e.g. {"K": 50} for length
generalisation), and merges the results into run_dir/eval.json.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from windtunnel import metrics, runs, tasks
from windtunnel.config import RunConfig, eval_name, eval_settings, resolve_config
from windtunnel.precision import autocast


def _setting_task(cfg: RunConfig, base_params: dict[str, Any], override: dict[str, Any]) -> Any:
    try:
        return tasks.make(cfg.task.name, **{**base_params, **override})
    except ValueError as err:
        raise ValueError(f"eval override {override}: {err}") from None


@torch.inference_mode()
def score(
    model: nn.Module, task: Any, seed: int, n: int, batch_size: int, device: torch.device | str,
    dtype: str = "float32",
) -> metrics.ScoreTable:
    """ScoreTable of `model` on n held-out sequences of `task` (chunk i sampled with eval_seed(seed, i))."""
    spec = task.spec
    tables = []
    for i, start in enumerate(range(0, n, batch_size)):
        b = min(batch_size, n - start)
        batch = task.sample(b, seed=runs.eval_seed(seed, i), device=device)
        with autocast(device, dtype):
            pred = runs.predict(model, spec, batch)
        tables.append(metrics.score_table(pred, batch))
    return metrics.ScoreTable.cat(tables)


def evaluate_model(
    model: nn.Module, task: Any, cfg: RunConfig, n: int | None = None, batch_size: int | None = None,
    device: torch.device | str | None = None, n_boot: int = 1000,
) -> dict[str, Any]:
    """One evaluation setting: {"task_params", "n", "metrics", "per_position", "metrics_point"}."""
    n = int(cfg.eval.n if n is None else n)
    bs = int(cfg.eval.batch_size if batch_size is None else batch_size)
    if n < 1:
        raise ValueError(f"n: must be >= 1 (got {n})")
    if bs < 1:
        raise ValueError(f"batch_size: must be >= 1 (got {bs})")
    dev = device or _model_device(model)
    was_training = model.training
    model.eval()
    try:
        table = score(model, task, cfg.seed, n, bs, dev, cfg.eval.dtype)
    finally:
        model.train(was_training)
    summary = metrics.summarize(table, n_boot=n_boot, seed=cfg.seed)
    params = task.params.model_dump(mode="json") if hasattr(task, "params") else {}
    return {
        "task_params": params,
        "n": n,
        "metrics": summary["metrics"],
        "per_position": summary["per_position"],
        "metrics_point": {k: (v["mean"] if v else None) for k, v in summary["metrics"].items()},
    }


def _model_device(model: nn.Module) -> torch.device:
    p = next(iter(model.parameters()), None)
    return p.device if p is not None else torch.device("cpu")


def evaluate(
    run_or_config: runs.Run | str | Path | RunConfig | dict,
    n: int | None = None,
    overrides: list[dict[str, Any]] | None = None,
    batch_size: int | None = None,
    *,
    device: torch.device | str | None = None,
    model: nn.Module | None = None,
    n_boot: int = 1000,
    write: bool = True,
) -> dict[str, Any]:
    """Evaluate a run (or a config's freshly built predictor) on each evaluation setting.

    overrides: task-parameter settings to evaluate (None: the training setting plus config eval.overrides).
    Returns {name: {"task_params", "n", "step", "metrics": {m: {"mean", "lo", "hi"}}, "per_position": {...}}};
    for a run directory the results are merged into eval.json (write=False to skip).
    """
    run: runs.Run | None = None
    if isinstance(run_or_config, runs.Run):
        run = run_or_config
    elif isinstance(run_or_config, (str, Path)):
        run = runs.load_run(run_or_config)
    if run is not None:
        cfg, task = run.config, run.task
        step = runs.latest_step(run.path)
        model = model if model is not None else run.model
    else:
        cfg = resolve_config(run_or_config)
        task = runs.build_task(cfg)
        step = None
        model = model if model is not None else runs.build_model(cfg, task.spec, task).eval()
    if device is not None:
        model = model.to(device)
    settings = eval_settings(cfg) if overrides is None else [dict(o) for o in overrides]
    base = task.params.model_dump(mode="json") if hasattr(task, "params") else dict(cfg.task.params)
    results: dict[str, Any] = {}
    for o in settings:
        t = task if not o else _setting_task(cfg, base, o)
        r = evaluate_model(model, t, cfg, n=n, batch_size=batch_size, device=device, n_boot=n_boot)
        r.pop("metrics_point")
        results[eval_name(o)] = {"step": step, "arch": cfg.model.arch, **r}
    if run is not None and write:
        runs.merge_eval(run.path, results)
    return results
