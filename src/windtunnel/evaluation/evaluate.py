"""Evaluation against the exact posterior: every position of a batch in one forward pass, metrics in bits.

`evaluate(run)` scores a run's model on the test stream (`seeds.test_seed`: the same sequences for every run,
disjoint from training and from the validation stream that training-time evaluation reads) for the training
setting and each `eval.overrides` setting (e.g. {"K": 50} for length generalisation), and merges the results into
run_dir/eval.json, each entry with the record of what the run is (`resume.run_record`: finished, unfinished, ...).
eval.json holds only the run's recorded evaluation, at the run's own settings: an evaluation at any other (another
n, batch size, dtype, checkpoint or task setting: `extra_name`) goes to evals/NAME.json (`rundir.eval_file`).
Held-out sequences are drawn in fixed blocks (`DRAW_BLOCK`), so the forward batch size changes no sequence.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.distributions import Categorical, Distribution, Normal

from windtunnel import models, runs, tasks
from windtunnel.config import RunConfig
from windtunnel.devices import autocast, model_device
from windtunnel.errors import NonFiniteOutputs
from windtunnel.evaluation import marks, metrics
from windtunnel.models import baselines
from windtunnel.models.base import check_output, predictive
from windtunnel.resolve import check_override, eval_name, eval_settings, resolve_config
from windtunnel.runs import checkpoints, resume
from windtunnel.seeds import DRAW_BLOCK, stream_seed
from windtunnel.store.records.run_dir import EvalFile
from windtunnel.tasks.base import Batch, check_posterior

Predict = Callable[[Batch], Distribution]


class ModelPredictor:
    """A model (or baseline) as a predictor (`Predict`: one forward pass per batch), under the evaluation dtype;
    `many` predicts several batches with forward passes of at most `batch_size` sequences each. A sequence's
    prediction depends on no other sequence, so the forward batch size changes nothing but float rounding."""

    def __init__(self, model: nn.Module, spec: Any, device: torch.device | str, dtype: str = "float32") -> None:
        self.model, self.spec, self.device, self.dtype = model, spec, device, dtype

    def __call__(self, batch: Batch) -> Distribution:
        with autocast(self.device, self.dtype):
            return baselines.predict(self.model, self.spec, batch)

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        """The model's outputs for inputs `x`, their shape checked (a plugin's of the wrong shape named here)."""
        return check_output(self.model, self.spec, x, self.model(x), "evaluation")

    def many(self, batches: list[Batch], batch_size: int) -> list[Distribution]:
        if models.is_baseline(self.model):  # a baseline predicts whole batches (`predict`), never split
            return [self(b) for b in batches]
        inputs = torch.cat([b.inputs for b in batches]) if len(batches) > 1 else batches[0].inputs
        with autocast(self.device, self.dtype):
            out = torch.cat([self._forward(x) for x in inputs.split(batch_size)])  # (B,T,K)
            return [predictive(self.spec, o) for o in out.split([b.batch_size for b in batches])]


def _blocks(task: Any, seed: int, n: int, device: torch.device | str, stream: str) -> Iterator[Batch]:
    """The n held-out sequences of `task` on `stream`, as blocks of DRAW_BLOCK (block i sampled with
    seeds.stream_seed(stream, seed, i))."""
    for i, start in enumerate(range(0, n, DRAW_BLOCK)):
        yield task.sample(min(DRAW_BLOCK, n - start), seed=stream_seed(stream, seed, i), device=device)


def _predictions(
    predict: Predict, task: Any, seed: int, n: int, batch_size: int, device: torch.device | str, stream: str
) -> Iterator[tuple[Batch, Distribution]]:
    """(block, predictive) for every block of `_blocks`: a `ModelPredictor` forwards at most `batch_size` sequences
    at a time (the blocks of a pass joined where batch_size is larger than a block); any other predictor is called
    once per block."""
    blocks = _blocks(task, seed, n, device, stream)
    if not isinstance(predict, ModelPredictor):
        for batch in blocks:
            yield batch, predict(batch)
        return
    while group := list(itertools.islice(blocks, -(-batch_size // DRAW_BLOCK))):
        yield from zip(group, predict.many(group, batch_size), strict=True)


class ApproximationScores:
    """Which approximate posterior does the predictor compute? For a task with `approximations(batch)` (the HMM's
    context-blind reference and window filters), accumulated per sequence over batches: per approximation, KL(
    approximation ‖ model) (the predictor is closest to the smallest), the approximation's own entropy error and
    KL(exact ‖ approximation), and the predictor's gain over it, KL(exact ‖ approximation) − KL(exact ‖ model), with
    paired bootstrap intervals over sequences (`metrics.ratio_intervals`); and for an approximation with `positions`
    (where it is outside the exact level: `approximation_positions`), the gain at each of those scored positions
    ("positions", "gain_by_position": the means) and the interval of the position whose lower end is lowest
    ("gain_worst": {"position", "mean", "lo", "hi"}), what the belief horizon reads (`marks.belief_horizon`)."""

    def __init__(
        self, depths: dict[str, int] | None = None, positions: dict[str, tuple[int, ...]] | None = None
    ) -> None:
        self.depths = dict(depths or {})
        self.positions = {name: tuple(int(k) for k in p) for name, p in (positions or {}).items()}
        self.parts: dict[str, list[torch.Tensor]] = {}  # name -> (B,3) per-sequence sums, one tensor per batch
        self.by_position: dict[str, list[torch.Tensor]] = {}  # name -> (B,P) gain at each of its positions
        self.exact: list[torch.Tensor] = []  # (B,) per-sequence sums of KL(exact ‖ model)
        self.counts: list[torch.Tensor] = []  # (B,) scored positions per sequence

    def add(self, task: Any, batch: Batch, pred: Distribution) -> None:
        mask = batch.target_mask.bool()  # (B,T)

        def per_seq(x: torch.Tensor) -> torch.Tensor:  # (B,T) -> (B,) sum over scored positions
            return torch.where(mask, x.double(), torch.zeros((), dtype=torch.float64, device=x.device)).sum(1).cpu()

        self.counts.append(mask.sum(1).double().cpu())
        kl_model = metrics.kl_divergence_bits(batch.posterior, pred)  # (B,T)
        self.exact.append(per_seq(kl_model))
        h_exact = metrics.entropy_bits(batch.posterior)
        for name, approx in task.approximations(batch).items():
            kl_approx = metrics.kl_divergence_bits(batch.posterior, approx)  # (B,T)
            cols = [
                per_seq(metrics.kl_divergence_bits(approx, pred)),
                per_seq((metrics.entropy_bits(approx) - h_exact).abs()),
                per_seq(kl_approx),
            ]
            self.parts.setdefault(name, []).append(torch.stack(cols, 1))  # (B,3)
            where = self.positions.get(name)
            if where:
                table = metrics.to_table(kl_approx - kl_model, mask).cpu()  # (B,S) by scored-position index
                table = torch.nn.functional.pad(table, (0, max(0, max(where) + 1 - table.shape[1])), value=math.nan)
                self.by_position.setdefault(name, []).append(table[:, list(where)])  # (B,P), NaN where unscored

    def result(self, n_boot: int = 1000, seed: int = 0) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
        """({name: {"depth", "kl_from_model_bits", "entropy_mae_bits", "kl_bits", "gain_bits"[, "positions",
        "gain_by_position", "gain_worst"]}}, closest)."""
        counts, exact = torch.cat(self.counts), torch.cat(self.exact)  # (N,)
        n = float(counts.sum().clamp_min(1.0))
        parts = {name: torch.cat(p) for name, p in self.parts.items()}  # name -> (N,3)
        gains = metrics.ratio_intervals(
            torch.stack([p[:, 2] - exact for p in parts.values()], 1), counts, n_boot, seed
        )  # KL(exact ‖ approx) - KL(exact ‖ model), paired by sequence
        out = {
            name: {
                "depth": self.depths.get(name),
                "kl_from_model_bits": float(p[:, 0].sum()) / n,
                "entropy_mae_bits": float(p[:, 1].sum()) / n,
                "kl_bits": float(p[:, 2].sum()) / n,
                "gain_bits": gain,
            }
            for (name, p), gain in zip(parts.items(), gains, strict=True)
        }
        if self.by_position:
            tables = {name: torch.cat(t) for name, t in self.by_position.items()}  # name -> (N,P)
            joined = torch.cat(list(tables.values()), 1)  # (N, sum P): one bootstrap, the same draws for every column
            scored = ~joined.isnan()
            ivs = iter(metrics.ratio_intervals(joined.nan_to_num(0.0), scored.double(), n_boot, seed))
            for name, t in tables.items():
                per = [next(ivs) for _ in range(t.shape[1])]
                out[name].update(position_gains(self.positions[name], per))
        kl = {marks.EXACT: exact, **{name: p[:, 0] for name, p in parts.items()}}  # KL(candidate ‖ model) sums
        means = {c: float(v.sum()) / n for c, v in kl.items()}
        best = min(means, key=means.__getitem__)
        diffs = metrics.ratio_intervals(torch.stack([v - kl[best] for v in kl.values()], 1), counts, n_boot, seed)
        return out, {"name": best, "margins": dict(zip(kl, diffs, strict=True))}


def position_gains(positions: tuple[int, ...], intervals: list[dict[str, float]]) -> dict[str, Any]:
    """{"positions", "gain_by_position" (the means), "gain_worst"}: an approximation's gains at its positions, the
    worst being the interval with the lowest lower end (with its "position")."""
    worst = min(range(len(intervals)), key=lambda j: intervals[j]["lo"]) if intervals else None
    return {
        "positions": list(positions),
        "gain_by_position": [iv["mean"] for iv in intervals],
        "gain_worst": None if worst is None else {"position": positions[worst], **intervals[worst]},
    }


def bayes_gap(table: metrics.ScoreTable, n_boot: int = 1000, seed: int = 0) -> dict[str, Any] | None:
    """How much better than the exact posterior a predictor does on the realised answers, paired by answer: per scored
    position, NLL(model) − NLL(exact) in bits ("nll_bits"; its expectation is KL(exact ‖ model) >= 0 for any predictor
    that reads only the input) and argmax accuracy of the model minus the exact posterior's ("accuracy", None for real
    answers), each with a paired bootstrap interval over sequences at `marks.INVALID_LEVEL` (a description), and the
    evidence that decides ⚠ (`marks.sees_the_answer`): "evidence_bits" {"nll", "accuracy"}, log2 of an e-value over
    the sequences (`metrics.evidence_bits`). For the NLL a sequence's e-value is the mean over its scored positions of
    the likelihood ratio q(answer) / p(answer) = 2^-(NLL(model) − NLL(exact)): for a predictor that reads only the
    input its expectation is the model's total probability on the answers the exact posterior allows, at most 1,
    whatever its tails; for the accuracy it is 1 + the sequence's mean accuracy difference (expectation at most 1: no
    predictor of the input beats the exact argmax on average). None without a bootstrap (n_boot = 0): no predictor is
    called invalid on point estimates."""
    if n_boot <= 0 or table.bayes_nll_bits is None:
        return None
    cols = [table.nll_bits - table.bayes_nll_bits]  # (N,S) each
    if table.correct is not None and table.bayes_correct is not None:
        cols.append(table.correct - table.bayes_correct)
    scored = ~table.nll_bits.isnan()  # (N,S)
    counts = scored.sum(1)  # (N,)
    sums = torch.stack([torch.where(scored, c, torch.zeros_like(c)).sum(1) for c in cols], 1)  # (N,M)
    ivs = metrics.ratio_intervals(sums, counts, n_boot, seed, level=marks.INVALID_LEVEL)
    keep = counts > 0
    log_ratio = torch.where(scored, -cols[0].double() * metrics.LN2, torch.full_like(cols[0].double(), -math.inf))
    log_e = (log_ratio.logsumexp(1) - counts.double().clamp_min(1).log())[keep]  # (N,) log mean likelihood ratio
    evidence = {"nll": metrics.evidence_bits(log_e), "accuracy": None}
    if len(cols) > 1:
        mean_diff = (sums[:, 1] / counts.clamp_min(1)).double()[keep]  # (N,) in [-1, 1]
        evidence["accuracy"] = metrics.evidence_bits(mean_diff.clamp_min(-1.0).log1p())
    return {
        "level": marks.INVALID_LEVEL,
        "nll_bits": ivs[0],
        "accuracy": ivs[1] if len(ivs) > 1 else None,
        "evidence_bits": evidence,
    }


def check_finite_prediction(pred: Distribution, batch: Batch, where: str) -> None:
    """`NonFiniteOutputs` where the predictive distribution `pred` holds NaN or inf at a scored position of `batch`
    (probabilities of a Categorical; mean or scale of a Normal), naming the first and `where` ("test block 0"): the
    metrics would read such a position as unscored, or as a number, and report a finite score for no prediction."""
    if isinstance(pred, Categorical):
        bad, value = ~torch.isfinite(pred.probs).all(-1), pred.probs.sum(-1)  # (B,T)
    elif isinstance(pred, Normal):
        bad, value = ~(torch.isfinite(pred.loc) & torch.isfinite(pred.scale)), pred.loc + pred.scale  # (B,T)
    else:
        return
    bad = bad & batch.target_mask.bool()
    if bool(bad.any()):
        i, t = (int(x) for x in bad.nonzero()[0])
        kind = "NaN" if bool(value[i, t].isnan()) else "inf"
        raise NonFiniteOutputs(
            f"the model's outputs are not finite ({kind} at position {t} of sequence {i} of {where}); the model "
            "cannot be evaluated"
        )


@torch.inference_mode()
def score(
    predict: Predict,
    task: Any,
    seed: int,
    n: int,
    batch_size: int,
    device: torch.device | str,
    approximations: ApproximationScores | None = None,
    stream: str = "test",
) -> metrics.ScoreTable:
    """ScoreTable of `predict` on n held-out sequences of `task` from `stream` ("test": the reported numbers;
    "validation": training-time evaluation and tuning), `batch_size` sequences per forward pass of a
    `ModelPredictor` (the sequences do not depend on it: `_blocks`); the same predictions also feed
    `approximations`."""
    task = tasks.as_task(task)
    tables: list[metrics.ScoreTable] = []
    for i, (batch, pred) in enumerate(_predictions(predict, task, seed, n, batch_size, device, stream)):
        check_posterior(task.name, batch, f"{stream} block {i}")  # every batch, before anything is scored against it
        check_finite_prediction(pred, batch, f"{stream} block {i}")
        tables.append(metrics.score_table(pred, batch))
        if approximations is not None:
            approximations.add(task, batch, pred)
    return metrics.ScoreTable.cat(tables)


def score_predictor(
    task: Any,
    predict: Predict,
    n: int = 1000,
    seed: int = 0,
    *,
    batch_size: int = 250,
    device: torch.device | str = "cpu",
    n_boot: int = 1000,
    stream: str = "test",
    approximations: bool = True,
) -> dict[str, Any]:
    """Score any predictor -- a function Batch -> Distribution with batch shape (B,T) -- exactly as eval.json scores a
    model: {"task_params", "n", "stream", "metrics", "per_position", "metrics_point"}, plus for a task with
    `approximations` its "approximations" and "closest", with a bootstrap its "bayes_gap" against the exact posterior
    (`bayes_gap`), and the "verdict" (`marks.verdict`). The test stream is the
    same for every seed; `seed` picks the validation blocks and the bootstrap draws. `batch_size`: sequences per
    forward pass of a `ModelPredictor`; a plain function gets one block (`DRAW_BLOCK` sequences) per call."""
    if int(n) < 1:
        raise ValueError(f"n: must be >= 1 (got {n})")
    if int(batch_size) < 1:
        raise ValueError(f"batch_size: must be >= 1 (got {batch_size})")
    task = tasks.as_task(task)
    approx = (
        ApproximationScores(task.approximation_depths(), task.approximation_positions())
        if approximations and task.offers("approximations")
        else None
    )
    table = score(predict, task, seed, int(n), int(batch_size), device, approximations=approx, stream=stream)
    summary = metrics.summarize(table, n_boot=n_boot, seed=seed)
    out: dict[str, Any] = {
        "task_params": task.params.model_dump(mode="json"),  # {} for a tunnel without parameters
        "n": int(n),
        "stream": stream,
        "metrics": summary["metrics"],
        "per_position": summary["per_position"],
        "metrics_point": {k: (v["mean"] if v else None) for k, v in summary["metrics"].items()},
    }
    if approx is not None:
        out["approximations"], out["closest"] = approx.result(n_boot=n_boot, seed=seed)
    gap = bayes_gap(table, n_boot=n_boot, seed=seed)
    if gap is not None:
        out["bayes_gap"] = gap
    out["verdict"] = marks.verdict(task, out).to_dict()
    return out


def control_predictors(task: Any) -> dict[str, Predict]:
    """Predictors that must never be marked: the task's adversarial `controls` (they match the posterior's entropy
    without the inference) and, as predictors of their own, its `approximations` (a window filter is at most ◐)."""
    task = tasks.as_task(task)
    out: dict[str, Predict] = {}
    for kind, method in (("controls", task.controls), ("approximations", task.approximations)):
        if not task.offers(kind):
            continue
        for name in method(task.sample(2, seed=0)):  # the names a batch gets; each prediction re-derives them
            out[f"{kind[:-1]}: {name}"] = _pick(method, name)
    return out


def _pick(method: Callable[[Batch], Mapping[str, Distribution]], name: str) -> Predict:
    """The predictor that returns entry `name` of `method(batch)`."""
    return lambda batch: method(batch)[name]


def score_controls(task: Any, n: int = 1000, seed: int = 0, **kwargs: Any) -> dict[str, dict[str, Any]]:
    """`score_predictor` of every predictor of `control_predictors(task)`, by name ("control: renamed classes",
    "approximation: last 2 obs")."""
    return {
        name: score_predictor(task, predict, n, seed, **kwargs) for name, predict in control_predictors(task).items()
    }


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
    dtype: str | None = None,
) -> dict[str, Any]:
    """One evaluation setting of a model on `stream` (`score_predictor` with the run's seed and eval settings; n,
    batch_size and dtype, where given, instead of the config's)."""
    n = int(cfg.eval.n if n is None else n)
    bs = int(cfg.eval.batch_size if batch_size is None else batch_size)
    dev = device or model_device(model)
    was_training = model.training
    model.eval()
    try:
        return score_predictor(
            task,
            ModelPredictor(model, task.spec, dev, cfg.eval.dtype if dtype is None else dtype),
            n,
            cfg.seed,
            batch_size=bs,
            device=dev,
            n_boot=n_boot,
            stream=stream,
            approximations=approximations,
        )
    finally:
        model.train(was_training)


# The bootstrap draws of a run's recorded evaluation (`evaluate`'s default, what train's final evaluation uses).
RECORDED_N_BOOT = 1000
DTYPES = ("float32", "bf16")  # config.EvalConfig.dtype's values


def extra_name(
    cfg: RunConfig,
    override: dict[str, Any],
    *,
    n: int,
    batch_size: int,
    dtype: str,
    step: int | None,
    final_step: int | None,
    n_boot: int = RECORDED_N_BOOT,
) -> str | None:
    """The name of an evaluation of a run whose settings differ from the run's own: its task setting where that is
    not one of the run's (`eval_settings`; spelled as `eval_name` spells it), then each other setting that differs --
    eval.n, eval.batch_size, eval.dtype, the checkpoint (when not `final_step`, the run's latest) and the bootstrap
    draws n_boot -- sorted: "K=50,eval.n=300", "eval.n=100", "checkpoint=4". None for the run's own settings.
    The eval settings keep their config prefix: a task may have a parameter n (regression does)."""
    parts = {} if override in eval_settings(cfg) else dict(override)
    own = {
        "eval.n": (n, cfg.eval.n),
        "eval.batch_size": (batch_size, cfg.eval.batch_size),
        "eval.dtype": (dtype, cfg.eval.dtype),
        "checkpoint": (step, final_step),
        "n_boot": (n_boot, RECORDED_N_BOOT),
    }
    parts.update({key: asked for key, (asked, recorded) in own.items() if asked != recorded})
    return eval_name(parts) if parts else None


def _holds_checkpoint(run: runs.Run, step: int | None, model: nn.Module) -> bool:
    """Whether `model` holds exactly the weights of `run`'s checkpoint `step` (what `train` hands over after its last
    step), so its evaluation may be the run's recorded one."""
    if step is None:
        return False
    stored = run.load_checkpoint(step, check=False).state_dict()
    mine = model.state_dict()
    return stored.keys() == mine.keys() and all(torch.equal(v, mine[k].detach().cpu()) for k, v in stored.items())


def evaluate(
    run_or_config: runs.Run | str | Path | RunConfig | dict,
    n: int | None = None,
    overrides: list[dict[str, Any]] | None = None,
    batch_size: int | None = None,
    *,
    device: torch.device | str | None = None,
    model: nn.Module | None = None,
    n_boot: int = RECORDED_N_BOOT,
    write: bool = True,
    trust_code: bool = False,
    step: int | None = None,
    dtype: str | None = None,
) -> dict[str, Any]:
    """Evaluate a run (or a config's freshly built predictor) on each evaluation setting.

    overrides: task-parameter settings to evaluate (None: the training setting plus config eval.overrides); n,
    batch_size, dtype: instead of the config's eval.n, eval.batch_size, eval.dtype; step: a run's checkpoint to
    evaluate (None: its latest).
    Returns {name: {"task_params", "n", "batch_size", "step", "metrics": {m: {"mean", "lo", "hi"}}, "per_position":
    {...}}}; for a run directory each entry also has "run", what its weights are (`resume.run_record`: an unfinished
    or extended run says so), and the results are written (write=False to skip) by `EvalFile.merge`: an entry at
    the run's own settings into eval.json (it reproduces the recorded evaluation), one at any other settings marked
    "extra" with its name (`extra_name`) into evals/NAME.json, leaving eval.json as it was. `model` with a run: the
    predictor to score instead of the run's checkpoint (train passes the model it has just trained); written only if
    it holds that checkpoint's weights. trust_code: allow an import-string architecture (see `runs.load_run`).
    """
    if dtype is not None and dtype not in DTYPES:
        raise ValueError(f"dtype: must be one of {', '.join(DTYPES)} (got {dtype!r})")
    run: runs.Run | None = None
    final: int | None = None
    if isinstance(run_or_config, (runs.Run, str, Path)):
        if isinstance(run_or_config, runs.Run):
            run = run_or_config
        else:
            run = runs.load_run(run_or_config, trust_code=trust_code)
        cfg, task = run.config, run.task
        final = checkpoints.latest_step(run.path)
        if step is not None and step not in run.checkpoints():
            raise ValueError(
                f"step: {step} is not a checkpoint of {str(run.path)!r}; choose one of {run.checkpoints()}"
            )
        step = final if step is None else int(step)
        if model is None:  # loaded models are checked
            model = run.model if step is None or step == final else run.load_checkpoint(step)
        else:
            models.check_causal(model, task.spec)
            if write and not _holds_checkpoint(run, step, model):
                raise ValueError(
                    f"model: its weights are not those of {str(run.path)!r} at step {step}, so its numbers are not "
                    "the run's; evaluate it with write=False, or make it a run of its own (windtunnel.save_run)"
                )
    else:
        if step is not None:
            raise ValueError("step: a checkpoint is a run directory's; evaluate a run to choose one")
        cfg = resolve_config(run_or_config)
        task = runs.build_task(cfg)
        model = (
            runs.build_model(cfg, task.spec, task, trust_code=trust_code).eval()  # checked as it is built
            if model is None
            else models.check_causal(model, task.spec)
        )
    if device is not None:
        model = model.to(device)
    settings = eval_settings(cfg) if overrides is None else [dict(o) for o in overrides]
    record = {} if run is None else {"run": resume.run_record(run.path, step, trains=not models.is_baseline(model))}
    count = int(cfg.eval.n if n is None else n)
    forward = int(cfg.eval.batch_size if batch_size is None else batch_size)
    precision = cfg.eval.dtype if dtype is None else dtype
    results: dict[str, Any] = {}
    for o in settings:
        t = task if not o else check_override(cfg, o)  # a setting may change lengths, not the model's shape
        try:
            r = evaluate_model(
                model, t, cfg, n=count, batch_size=forward, device=device, n_boot=n_boot, dtype=precision
            )
        except NonFiniteOutputs as err:
            where = f"{run.path}: checkpoint of step {step}" if run is not None else f"model.arch {cfg.model.arch!r}"
            raise NonFiniteOutputs(f"{where} ({eval_name(o)}): {err}") from None
        r.pop("metrics_point")
        results[eval_name(o)] = {"step": step, "arch": cfg.model.arch, "batch_size": forward, **r, **record}
        if run is not None:
            extra = extra_name(
                cfg, o, n=count, batch_size=forward, dtype=precision, step=step, final_step=final, n_boot=n_boot
            )
            if extra is not None:
                results[eval_name(o)]["extra"] = extra
    if run is not None and write:
        EvalFile.merge(run.path, results)
    return results
