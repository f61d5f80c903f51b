"""Evaluation against the exact posterior: every position of a batch in one forward pass, metrics in bits.

`evaluate(run)` scores a run's model on the test stream (`seeds.test_seed`: the same sequences for every run,
disjoint from training and from the validation stream that training-time evaluation reads) for the training
setting and each `eval.overrides` setting (e.g. {"K": 50} for length generalisation), and merges the results into
run_dir/eval.json.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.distributions import Distribution

from windtunnel import checkpoints, metrics, rundir, runs
from windtunnel.config import RunConfig, check_override, eval_name, eval_settings, resolve_config
from windtunnel.models import baselines
from windtunnel.precision import autocast
from windtunnel.seeds import stream_seed
from windtunnel.tasks.base import Batch


def _predictions(
    model: nn.Module,
    task: Any,
    seed: int,
    n: int,
    batch_size: int,
    device: torch.device | str,
    dtype: str,
    stream: str,
) -> Iterator[tuple[Batch, Distribution]]:
    """(batch, predictive) for n held-out sequences of `task` (chunk i sampled with seeds.stream_seed(stream, seed,
    i)), one forward pass per chunk."""
    for i, start in enumerate(range(0, n, batch_size)):
        batch = task.sample(min(batch_size, n - start), seed=stream_seed(stream, seed, i), device=device)
        with autocast(device, dtype):
            pred = baselines.predict(model, task.spec, batch)
        yield batch, pred


class ApproximationScores:
    """Which approximate posterior does the model compute? For a task with `approximations(batch)` (the HMM's
    window filters), accumulated over batches: per approximation, mean KL(approximation || model) in bits over
    scored positions (the model is closest to the approximation with the smallest), and the approximation's own
    entropy error and KL(exact || approximation)."""

    def __init__(self) -> None:
        self.sums: dict[str, list[float]] = {}
        self.count = 0

    def add(self, task: Any, batch: Batch, pred: Distribution) -> None:
        mask = batch.target_mask.bool()
        self.count += int(mask.sum())
        for name, approx in task.approximations(batch).items():
            acc = self.sums.setdefault(name, [0.0, 0.0, 0.0])
            acc[0] += float(metrics.kl_divergence_bits(approx, pred)[mask].double().sum())
            err = metrics.entropy_bits(approx) - metrics.entropy_bits(batch.posterior)
            acc[1] += float(err[mask].abs().double().sum())
            acc[2] += float(metrics.kl_divergence_bits(batch.posterior, approx)[mask].double().sum())

    def result(self) -> dict[str, dict[str, float]]:
        n = max(self.count, 1)
        return {
            name: {"kl_from_model_bits": a / n, "entropy_mae_bits": e / n, "kl_bits": k / n}
            for name, (a, e, k) in self.sums.items()
        }


@torch.inference_mode()
def score(
    model: nn.Module,
    task: Any,
    seed: int,
    n: int,
    batch_size: int,
    device: torch.device | str,
    dtype: str = "float32",
    approximations: ApproximationScores | None = None,
    stream: str = "test",
) -> metrics.ScoreTable:
    """ScoreTable of `model` on n held-out sequences of `task` from `stream` ("test": the reported numbers;
    "validation": training-time evaluation and tuning); the same forward passes also feed `approximations`."""
    tables = []
    for batch, pred in _predictions(model, task, seed, n, batch_size, device, dtype, stream):
        tables.append(metrics.score_table(pred, batch))
        if approximations is not None:
            approximations.add(task, batch, pred)
    return metrics.ScoreTable.cat(tables)


def evaluate_model(
    model: nn.Module,
    task: Any,
    cfg: RunConfig,
    n: int | None = None,
    batch_size: int | None = None,
    device: torch.device | str | None = None,
    n_boot: int = 1000,
    approximations: bool = True,
    stream: str = "test",
) -> dict[str, Any]:
    """One evaluation setting on `stream`: {"task_params", "n", "stream", "metrics", "per_position",
    "metrics_point"}, plus "approximations" (`ApproximationScores`) for a task that defines them, unless
    approximations=False."""
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
        approx = ApproximationScores() if approximations and hasattr(task, "approximations") else None
        table = score(model, task, cfg.seed, n, bs, dev, cfg.eval.dtype, approximations=approx, stream=stream)
    finally:
        model.train(was_training)
    summary = metrics.summarize(table, n_boot=n_boot, seed=cfg.seed)
    params = task.params.model_dump(mode="json") if hasattr(task, "params") else {}
    out = {
        "task_params": params,
        "n": n,
        "stream": stream,
        "metrics": summary["metrics"],
        "per_position": summary["per_position"],
        "metrics_point": {k: (v["mean"] if v else None) for k, v in summary["metrics"].items()},
    }
    if approx is not None:
        out["approximations"] = approx.result()
    return out


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
    trust_code: bool = False,
) -> dict[str, Any]:
    """Evaluate a run (or a config's freshly built predictor) on each evaluation setting.

    overrides: task-parameter settings to evaluate (None: the training setting plus config eval.overrides).
    Returns {name: {"task_params", "n", "step", "metrics": {m: {"mean", "lo", "hi"}}, "per_position": {...}}};
    for a run directory the results are merged into eval.json (write=False to skip). trust_code: allow an
    import-string architecture (see `runs.load_run`).
    """
    run: runs.Run | None = None
    if isinstance(run_or_config, (runs.Run, str, Path)):
        if isinstance(run_or_config, runs.Run):
            run = run_or_config
        else:
            run = runs.load_run(run_or_config, trust_code=trust_code)
        cfg, task = run.config, run.task
        step = checkpoints.latest_step(run.path)
        model = model if model is not None else run.model
    else:
        cfg = resolve_config(run_or_config)
        task = runs.build_task(cfg)
        step = None
        model = model if model is not None else runs.build_model(cfg, task.spec, task, trust_code=trust_code).eval()
    if device is not None:
        model = model.to(device)
    settings = eval_settings(cfg) if overrides is None else [dict(o) for o in overrides]
    results: dict[str, Any] = {}
    for o in settings:
        t = task if not o else check_override(cfg, o)  # a setting may change lengths, not the model's shape
        r = evaluate_model(model, t, cfg, n=n, batch_size=batch_size, device=device, n_boot=n_boot)
        r.pop("metrics_point")
        results[eval_name(o)] = {"step": step, "arch": cfg.model.arch, **r}
    if run is not None and write:
        rundir.merge_eval(run.path, results)
    return results
