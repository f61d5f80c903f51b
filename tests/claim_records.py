"""Run records for the tests of the report's claims: a record whose evaluations, validation curve and geometry are
given (`run`), a geometry.json of layer-0 key statistics (`keys_geometry`), and each claim's finding (`verdicts`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from windtunnel.report import claims, tables
from windtunnel.report.build import geometry_across_seeds
from windtunnel.report.collect import RunRecord

HMM_WINDOWS = {"context-blind": 0, "last 1 obs": 1, "last 2 obs": 2, "last 3 obs": 3}  # every window of the HMM


def iv(v: float) -> dict[str, float]:
    return {"mean": v, "lo": v, "hi": v}


def scores(task: str, value: float, kl: float | None) -> dict[str, Any]:
    """One evaluation setting: the headline at `value`, KL(exact ‖ model) at `kl` (default: the headline's number, or
    0.001 under an accuracy headline); on the HMM the model beats every window filter when it is within 0.01 bits."""
    metric = tables.headline_metric(task)
    metrics = {metric: iv(value), "kl_bits": iv(kl if kl is not None else value if metric != "accuracy" else 0.001)}
    if metric == "accuracy":
        metrics["entropy_mae_bits"] = iv(0.001)
    out: dict[str, Any] = {"metrics": metrics}
    if task.startswith("hmm"):
        gain = 0.01 if value <= 0.01 else -0.1
        out["approximations"] = {
            n: {"depth": d, "gain_bits": {"mean": gain, "lo": gain - 1e-4, "hi": gain + 1e-4}}
            for n, d in HMM_WINDOWS.items()
        }
    return out


def run(
    task: str,
    arch: str,
    seed: int,
    value: float,
    curve: tuple[float, ...] = (),
    kl: float | None = None,
    long: float | None = None,
    geometry: dict[str, Any] | None = None,
) -> RunRecord:
    """A run record: its default evaluation, its validation curve (`curve`, one value per periodic evaluation), an
    HMM evaluation at K = 50 (`long`) and its geometry."""
    evals = {"default": {**scores(task, value, kl), "task_params": {"K": 20} if task == "hmm" else {}}}
    if long is not None:
        evals["K=50"] = {**scores(task, long, None), "task_params": {"K": 50}}
    metric = tables.headline_metric(task)
    history = [{"step": 10 * (i + 1), "split": "eval", "train_s": float(i), metric: v} for i, v in enumerate(curve)]
    return RunRecord(
        path=Path(f"{task}-{arch}-s{seed}"),
        task=task,
        arch=arch,
        seed=seed,
        config={
            "task": {"name": task, "params": {}},
            "model": {"arch": arch},
            "train": {"steps": 100, "batch_size": 8},
            "seed": seed,
        },
        evals=evals,
        history=history,
        geometry=geometry,
    )


def verdicts(records: list[RunRecord]) -> dict[str, dict[str, str]]:
    """Each claim's finding, its evidence without the scope that ends it (`cells`; the scope is its own key too)."""
    _, _, data = tables.primitives_table(records)
    found = claims.judge_claims(records, data, geometry_across_seeds(records)[1])
    return {c["claim"]: {**c, "cells": c["evidence"].split(" · scope: ")[0]} for c in found}


def keys_geometry(trained: float, drop: float) -> dict[str, Any]:
    """A geometry.json with layer-0 key statistics on the key tokens and an attention-entropy drop."""
    keys = {"mean_abs_cos_per_layer": [trained], "init_mean_abs_cos_per_layer": [0.16], "gaussian_baseline": 0.14}
    return {"keys": {"by_token_set": {"key_tokens": keys}}, "attention": {"drop_first_to_last_pct": drop}}
