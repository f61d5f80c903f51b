"""Opening a run directory for training: a new run, an overwrite, or a resume from its latest checkpoint.

A resume continues with the run's own config; only the keys in `RESUMABLE_KEYS` may differ, and one that changes
the learning rates before the checkpoint is a warning recorded in resumes.json. File names and reads: `rundir`.
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path
from typing import Any

from windtunnel import checkpoints, manifest, rundir
from windtunnel.config import RunConfig, apply_overrides, run_identity, validate
from windtunnel.errors import CheckpointError
from windtunnel.lock import DirLock
from windtunnel.optim import lr_at

# The keys a resume may change (`train(..., resume=True)`, `windtunnel train --resume RUN --set ...`), each with why
# it is safe: none changes a weight of the steps up to the checkpoint, nor what the steps after it train, so the
# resumed run is the run its new config trains from scratch -- train.steps only where the learning rates up to the
# checkpoint stay the same (`_schedule_note`). Any other key is a different run, refused key by key.
RESUMABLE_KEYS: dict[str, str] = {
    "train.steps": "how long to train; a schedule that depends on it (cosine, wsd's cooldown) is warned about",
    "train.log_every": "which steps write a training line to metrics.jsonl; every step's loss is computed anyway",
    "train.eval_every": "when the validation runs: eval mode, its own data stream, nothing drawn from the training RNG",
    "train.eval_size": "how many validation sequences: the same reasons",
    "train.checkpoint_every": "which steps are saved: saving reads the state and changes none of it",
    "train.checkpoint_schedule": "the same, for the checkpoints that are never pruned",
    "train.keep_checkpoints": "how many periodic checkpoints stay on disk",
    "train.loggers": "trackers fed the metrics lines (config.run_identity leaves them out of every comparison)",
    "eval.n": "the final evaluation only, which a resumed run computes anew",
    "eval.batch_size": "the forward batch of the evaluations, not of training",
}
RESUMES = "resumes.json"  # a run's resumes that changed keys: {"resumes": [{"step", "changed", "note"}, ...]}


def resume_config(run_dir: str | Path, overrides: dict[str, Any] | None = None) -> RunConfig:
    """The config that continues `run_dir`: its own config.json with dotted `overrides` on top (`--steps`, `--set`),
    for `train(..., resume=True)`, which refuses any changed key not in `RESUMABLE_KEYS`."""
    run_dir = rundir.check_run_dir(run_dir, "resume")
    return validate(apply_overrides(rundir.read_config(run_dir).model_dump(mode="json"), overrides))


def _schedule_note(old: RunConfig, new: RunConfig, start: int) -> str | None:
    """None where the learning rates of steps 1..`start` are the same under both configs (a changed train.steps
    leaves the run the one the new config trains from scratch: a constant schedule, warmup, wsd before its
    cooldown); else the sentence that says how the resumed run differs from that one."""
    first = next((s for s in range(1, start + 1) if lr_at(s, old) != lr_at(s, new)), None)
    if first is None:
        return None
    a, b, kind = old.train.steps, new.train.steps, new.train.schedule
    then = f", and step {start + 1} goes on at the {b}-step schedule's {lr_at(start + 1, new):.3g}" if start < b else ""
    return (
        f"train.steps {a} → {b} changes the {kind} learning-rate schedule before the checkpoint: steps {first}-{start} "
        f"were trained at the {a}-step schedule's rates (step {start}: {lr_at(start, old):.3g}){then}; this is not "
        f"the run a fresh train.steps={b} trains (a constant schedule, or wsd before its cooldown, extends exactly)"
    )


def _check_resumable(run_dir: Path, cfg: RunConfig) -> tuple[int, list[str], str | None]:
    """The step a resume of `run_dir` with `cfg` continues from, the keys it changes (`path: old → new`, all in
    RESUMABLE_KEYS) and the schedule note (`_schedule_note`); any other changed key is refused, each one named with
    its stored and its new value."""
    if not (run_dir / rundir.CONFIG).is_file():
        raise ValueError(f"resume: {str(run_dir)!r} is not a run directory (no config.json)")
    stored = rundir.read_config(run_dir)
    changes = manifest.config_changes(run_identity(stored), run_identity(cfg))
    refused = [manifest.change_line(*c) for c in changes if c[0] not in RESUMABLE_KEYS]
    if refused:
        raise ValueError(
            f"resume: {len(refused)} key{'s' if len(refused) > 1 else ''} differ from the run's own config "
            f"({str(run_dir / rundir.CONFIG)!r}): {'; '.join(refused)}. only {', '.join(RESUMABLE_KEYS)} may "
            "change on resume: drop the other changes to continue this run (`windtunnel train --resume RUN` alone "
            "uses its own config), or train the new config as a new run (another --out, or --overwrite)"
        )
    changed = rundir.version_diff(run_dir)
    if changed:
        raise ValueError(
            f"resume: {str(run_dir)!r} was trained by other code ({'; '.join(changed)}); a resumed run would mix "
            "two versions' numbers: train it anew (--overwrite) or resume it with the code that made it"
        )
    step = checkpoints.resume_step(run_dir) or 0
    if step > cfg.train.steps:
        raise ValueError(f"train.steps: the run already has a checkpoint at step {step} > {cfg.train.steps}")
    note = _schedule_note(stored, cfg, step) if stored.train.steps != cfg.train.steps else None
    return step, [manifest.change_line(*c) for c in changes], note


def _record_resume(run_dir: Path, step: int, changed: list[str], note: str | None) -> None:
    """Append a resume that changed keys to the run's resumes.json (its config.json holds only the new values)."""
    path = run_dir / RESUMES
    history = rundir.read_json_object(path).get("resumes", []) if path.exists() else []
    if not isinstance(history, list):
        raise CheckpointError(f"{path}: resumes must be a list (got {type(history).__name__})")
    history = [*history, {"step": step, "changed": changed, "note": note}]
    rundir.write_json(path, {"resumes": history})


def _reopen(run_dir: Path, cfg: RunConfig, resume: bool, overwrite: bool) -> tuple[int, list[str]]:
    """Clear or reopen a run directory whose lock this process holds; returns the step to resume from and the keys
    the resume changed (recorded in resumes.json; a changed learning-rate schedule is also a RuntimeWarning)."""
    rundir.refuse_existing(run_dir, resume, overwrite)  # again, under the lock: another writer may have filled it
    rundir.clean_temp_files(run_dir)
    exists = (run_dir / rundir.CONFIG).exists() or bool(rundir.contents(run_dir))
    if exists and resume:
        step, changed, note = _check_resumable(run_dir, cfg)
        if changed:
            _record_resume(run_dir, step, changed, note)
            for stale in (rundir.DONE, rundir.EVAL, rundir.GEOMETRY):  # they describe the run before the change
                (run_dir / stale).unlink(missing_ok=True)
        if note:
            warnings.warn(f"resume: {note}; recorded in {str(run_dir / RESUMES)!r}", RuntimeWarning, stacklevel=4)
        rundir.truncate_metrics(run_dir, step)
        rundir.write_config(run_dir, cfg)
        return step, changed
    if exists:
        rundir.clear(run_dir)  # overwrite (checked by refuse_existing before the lock was taken)
    (run_dir / rundir.FIGURES).mkdir(exist_ok=True)
    rundir.write_versions(run_dir)
    rundir.write_config(run_dir, cfg)
    return 0, []


def open_run_dir(run_dir: Path, cfg: RunConfig, resume: bool, overwrite: bool) -> tuple[DirLock, int, list[str]]:
    """Take `run_dir`'s lock and make it ready for `cfg` to train in: new, cleared (`overwrite`) or reopened
    (`resume`); returns the held lock, the step training starts from and the keys a resume changed. A refused call
    releases the lock and removes whatever directories it created."""
    rundir.refuse_existing(run_dir, resume, overwrite)
    created = rundir.first_missing(run_dir)  # what this call creates, removed again if it is refused
    lock = DirLock(run_dir)
    try:
        lock.acquire()
        start, changed = _reopen(run_dir, cfg, resume, overwrite)
    except BaseException:
        if lock.is_locked:
            lock.release()
        if created is not None:  # a refused command leaves nothing behind
            shutil.rmtree(created, ignore_errors=True)
        raise
    return lock, start, changed
