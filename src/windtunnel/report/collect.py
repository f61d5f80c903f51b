"""Read run directories into flat records the report can tabulate (only files, never a live model).

Run directories may be corrupt or hostile, so `read_run` checks every value the report reads before it builds a
record: a value of the wrong kind is a `errors.CheckpointError` naming the file and the field (exit code 1), never a
traceback later and never a silently wrong number in a table. The files are read as their typed records
(`records.run_dir`, which check each field's kind and upgrade older forms, and metrics.jsonl's fields the report
reads: `read_history`); the report adds what it computes with: finite means and the task parameters it reads.

The report's numbers are the run's recorded evaluation, eval.json, only: an evaluation at other settings
(evals/NAME.json, `evaluate.extra_name`) is never read, and the eval settings a record's config carries are those
that made its numbers (`_as_evaluated`), so every label says the n behind the number.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from windtunnel.runs import checkpoints
from windtunnel.store import manifest, rundir
from windtunnel.store.records.run_dir import MISSING, ConfigFile, EvalFile, Geometry, checked

# the run directory's readers, where the report's callers found them (`records.run_dir`)
from windtunnel.store.records.run_dir import read_done as read_done
from windtunnel.store.records.run_dir import read_history as read_history
from windtunnel.store.records.run_dir import read_test_metrics as read_test_metrics
from windtunnel.store.records.run_dir import validation_evals as validation_evals


@dataclass(frozen=True)
class RunState:
    """What the weights behind one evaluation of a run are (eval.json's "run" record, `resume.run_record`, checked
    against config.json): `status` one of resume.STATUSES, the steps its config trains and those trained, the
    sequences seen in training, the notes that say why, and the step a finished run stopped early at
    (`train.early_stop`; None where it did not)."""

    status: str
    steps: int
    steps_trained: int
    sequences_seen: int
    notes: tuple[str, ...] = ()
    stopped_early: int | None = None

    @property
    def marked(self) -> bool:
        """Whether the report marks it (anything but a finished run)."""
        return self.status != "finished"

    @property
    def variant(self) -> str:
        """The words that label the cells of a run that is not its config's run ("unfinished at step 51 of 120",
        "extended by a resume", "config.json edited since it trained"); empty for any other."""
        if self.status == "unfinished":
            return f"unfinished at step {self.steps_trained:,} of {self.steps:,}"
        if self.status == "extended":
            return "extended by a resume"
        if self.status == "edited":
            return f"{rundir.CONFIG} edited since it trained"
        if self.status == "exported":
            return "exported: trained outside windtunnel"
        return ""


@dataclass
class RunRecord:
    """What the report needs from one run directory: its records' JSON (`records.run_dir`), as the tables read it."""

    path: Path
    task: str
    arch: str
    seed: int
    config: dict[str, Any]  # config.json, its eval.n and eval.batch_size those of eval.json's default (`_as_evaluated`)
    evals: dict[str, Any]  # eval.json: name -> {"task_params", "n", "metrics", "per_position"}
    history: list[dict[str, Any]] = field(default_factory=list)  # metrics.jsonl lines
    geometry: dict[str, Any] | None = None
    # checkpoints/latest.json's step (0: none), read only for a run without a default evaluation; None: not known
    checkpoint_step: int | None = None
    # eval.json entries an older `windtunnel eval --n` merged there at another n (`EvalFile.set_apart`): in no table
    other_evals: dict[str, Any] = field(default_factory=dict)

    @property
    def params(self) -> dict[str, Any]:
        """The task parameters the run was trained with (config.json task.params)."""
        return self.config.get("task", {}).get("params", {})

    @property
    def default(self) -> dict[str, Any]:
        return self.evals.get("default", {})

    def metric(self, name: str, eval_name: str = "default") -> dict[str, float] | None:
        """`{"mean", "lo", "hi"}` of an aggregate metric, or None where the run has no such number."""
        m = self.evals.get(eval_name, {}).get("metrics", {}).get(name)
        return m if isinstance(m, dict) and m.get("mean") is not None else None

    @property
    def steps(self) -> int:
        return int(self.config.get("train", {}).get("steps", 0) or 0)

    @property
    def batch_size(self) -> int:
        return int(self.config.get("train", {}).get("batch_size", 0) or 0)

    def state(self, setting: str = "default") -> RunState:
        """What the weights behind evaluation `setting` are: its eval.json record (`resume.run_record`); an entry
        evaluated at a checkpoint before the config's last step is unfinished whatever it says (an eval.json written
        before the record existed, or a config.json edited since), unless its record says it stopped early there
        (`train.early_stop`). Without that evaluation: the latest checkpoint."""
        ev = self.evals.get(setting)
        found = ev.get("step") if ev is not None else self.checkpoint_step
        step: int | None = found if _is_int(found) else None  # None: a baseline, or not known
        rec = (ev or {}).get("run") or {}
        trained: int = rec.get("steps_trained", self.steps if step is None else step)
        seen: int = rec.get("sequences_seen", trained * self.batch_size)
        status, notes = rec.get("status", "finished"), tuple(rec.get("notes", ()))
        early = (rec.get("stopped_early") or {}).get("step")
        stopped = early if step is not None and early == step and status != "unfinished" else None
        if step is not None and step < self.steps and status != "unfinished" and stopped is None:
            status = "unfinished"
            at = f"step {step:,} of the {self.steps:,} its config trains ({seen:,} sequences seen)"
            notes = (f"unfinished: evaluated at {at}", *notes)
        elif step is not None and step > self.steps and status in ("finished", "resumed"):  # no resume shortens a run
            status = "edited"
            notes = (f"edited: evaluated at step {step:,}, but its {rundir.CONFIG} trains {self.steps:,}", *notes)
        return RunState(status, self.steps, trained, seen, notes, stopped)

    @property
    def wall_s(self) -> float | None:
        """Training wall time from the last logged line (None for untrained baselines)."""
        times = [h["elapsed_s"] for h in self.history if isinstance(h.get("elapsed_s"), (int, float))]
        return max(times) if times else None

    @property
    def validation(self) -> list[dict[str, Any]]:
        """The periodic (validation-stream) evaluations of metrics.jsonl (`validation_evals`)."""
        return validation_evals(self.history)

    def curve(self, metric: str) -> list[tuple[int, float]]:
        """(step, metric) from the periodic (validation-stream) evaluations in metrics.jsonl."""
        pts = []
        for h in self.history:
            v = h.get(metric)
            if h.get("split") == "eval" and isinstance(v, (int, float)):
                pts.append((int(h["step"]), float(v)))
        return pts


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


# Task parameters the report computes with (chance = 1 / N; the capacity table's axis; recall's scoring position).
TASK_PARAMS = {"N": "positive", "score_at": "text"}


def _required(d: dict[str, Any], key: str, kind: str, path: Path, where: str) -> Any:
    return checked(d.get(key, MISSING), kind, path, where)


def _optional(d: dict[str, Any], key: str, kind: str, path: Path, where: str) -> None:
    """Check d[key] as `kind` unless it is absent or null."""
    if d.get(key) is not None:
        checked(d[key], kind, path, where)


def _check_params(params: Any, path: Path, where: str) -> None:
    for key, kind in TASK_PARAMS.items():
        _optional(checked(params, "object", path, where), key, kind, path, f"{where}.{key}")


def _check_evals(evals: EvalFile, path: Path) -> None:
    """What the report computes with beyond the record's kinds (`records.run_dir.EvalEntry`): finite means and
    intervals, each approximation's two numbers, and the task parameters it reads."""
    for name, ev in evals.entries.items():
        for m, ci in ev.metrics.items():
            for k in ("mean", "lo", "hi") if ci is not None else ():
                checked(getattr(ci, k), "number", path, f"{name}.metrics.{m}.{k}")
        for a, v in ev.approximations.items():
            for k in ("kl_from_model_bits", "entropy_mae_bits"):
                _required(v, k, "number", path, f"{name}.approximations.{a}.{k}")
        _check_params(ev.task_params, path, f"{name}.task_params")


def read_run(path: str | Path) -> RunRecord:
    """One run directory -> RunRecord, every value the report reads checked (CheckpointError naming the file
    and field otherwise); a directory without config.json is an error naming it."""
    p = Path(path)
    if not ConfigFile.path(p).exists():
        raise ValueError(f"report: {p} is not a run directory (no config.json)")
    stored = ConfigFile.stored(p)  # older forms upgraded: cells compare sizes
    _check_params(stored.task.params, ConfigFile.path(p), "task.params")
    recorded = EvalFile.read_or_empty(p)
    _check_evals(recorded, EvalFile.path(p))
    evals, other = recorded.to_json(), recorded.set_apart()
    geometry = Geometry.find(p)
    return RunRecord(
        path=p,
        task=stored.task.name,
        arch=stored.model.arch,
        seed=stored.seed or 0,
        config=_as_evaluated(stored.to_json(), evals.get("default", {})),
        evals={k: v for k, v in evals.items() if k not in other},
        history=read_history(p),
        geometry=None if geometry is None else geometry.to_json(),
        checkpoint_step=None if "default" in evals else checkpoints.latest_step(p) or 0,
        other_evals={k: v for k, v in evals.items() if k in other},
    )


def finished_levels(runs_dir: str | Path, names: list[str]) -> dict[str, str]:
    """The verdict level of each finished, evaluated run among `names` under `runs_dir`, by name (a run without a
    recorded verdict, a baseline's or an unfinished one, is left out): what a driver asks before adding seeds."""
    levels: dict[str, str] = {}
    for name in names:
        path = Path(runs_dir) / name
        if not EvalFile.path(path).is_file():
            continue
        rec = read_run(path)
        level = rec.default.get("verdict", {}).get("level")
        if level is not None and rec.state().status != "unfinished":
            levels[name] = level
    return levels


def _as_evaluated(config: dict[str, Any], default: dict[str, Any]) -> dict[str, Any]:
    """`config` with the eval.n and eval.batch_size of the evaluation that made the run's numbers (eval.json's
    default entry, where it records them), so a label read from the config (`table_cells.config_key`) says the n behind
    each number, even for an eval.json rewritten at other settings before those were kept apart."""
    made = {key: default[key] for key in ("n", "batch_size") if key in default}
    return {**config, "eval": {**config.get("eval", {}), **made}} if made else config


def find_runs(paths: list[str | Path]) -> list[RunRecord]:
    """Run directories named directly; a driver's --out (it has a manifest.json): the runs its manifest lists, never
    whatever else lies under it; any other directory: the run directories found below it (e.g. a suite's runs/)."""
    found: list[RunRecord] = []
    for raw in paths:
        p = Path(raw)
        if not p.exists():
            raise ValueError(f"report: {p} does not exist")
        if (p / "config.json").exists():
            found.append(read_run(p))
            continue
        if (p / manifest.MANIFEST).exists():
            listed = manifest.run_dirs(p)
            if not listed:
                raise ValueError(f"report: {p / manifest.MANIFEST} lists no runs")
            found.extend(read_run(d) for d in listed)
            continue
        subs = sorted(d for d in p.rglob("config.json") if d.parent != p)
        if not subs:
            raise ValueError(f"report: no run directories (with config.json) under {p}")
        found.extend(read_run(d.parent) for d in subs)
    return found
