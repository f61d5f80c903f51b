"""Opening a run directory for training: a new run, an overwrite, or a resume from its latest checkpoint; and the
record of what a run's weights are (`run_record`: finished, unfinished, extended, resumed, edited or exported: a
model trained outside windtunnel, `runs.save_run`, which no resume continues).

A resume continues with the run's own config; only the keys in `RESUMABLE_KEYS` may differ from the config the run
trained with (trained.json, written whenever training starts, so an edit of config.json by hand meets the same rule
as `--set`), and one that changes the learning rates before the checkpoint is a warning recorded in resumes.json.
File names: `rundir`; the files themselves: `records.run_dir`.
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path
from typing import Any

from windtunnel.config import RunConfig, apply_overrides, lr_at, run_identity, validate
from windtunnel.errors import CheckpointError
from windtunnel.runs import checkpoints
from windtunnel.store import manifest, rundir
from windtunnel.store.lock import DirLock
from windtunnel.store.records.run_dir import (
    STATUSES,
    ConfigFile,
    Done,
    EvalFile,
    Exported,
    Geometry,
    Resume,
    Resumes,
    Trained,
    Versions,
    version_diff,
)

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
# A run's resumes that changed keys (`records.run_dir.Resumes`); named in the run-directory layout.
RESUMES = rundir.RESUMES
# The config the run's checkpoints were trained with (`records.run_dir.Trained`): written when training starts (a new
# run, or an accepted resume), compared with config.json on every resume and evaluation.
TRAINED = rundir.TRAINED  # "trained.json", named in the run-directory layout
# What a run's weights are (`run_record`), most serious first: `STATUSES`, imported from records.run_dir (eval.json's
# vocabulary).


def resume_config(run_dir: str | Path, overrides: dict[str, Any] | None = None) -> RunConfig:
    """The config that continues `run_dir`: its own config.json with dotted `overrides` on top (`--steps`, `--set`),
    for `train(..., resume=True)`, which refuses any changed key not in `RESUMABLE_KEYS`."""
    run_dir = rundir.check_run_dir(run_dir, "resume")
    return validate(apply_overrides(ConfigFile.read(run_dir).model_dump(mode="json"), overrides))


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


def write_trained(
    run_dir: Path, cfg: RunConfig, optimizer: dict[str, Any] | None = None, exported: dict[str, Any] | None = None
) -> None:
    """Record `cfg` as the config `run_dir`'s training continues with (trained.json, atomically), and `optimizer`,
    which parameters each optimiser trains (`optim.describe`; None for a model that is not trained); `exported`, for
    a model trained outside windtunnel (`runs.save_run`): {"by", "model", "steps"}, read back by `read_exported`."""
    Trained(config=cfg, optimizer=optimizer, exported=None if exported is None else Exported(**exported)).write(run_dir)


def read_exported(run_dir: Path) -> Exported | None:
    """trained.json's record of a model trained outside windtunnel and exported into `run_dir` (`runs.save_run`),
    or None for a run windtunnel trained; a damaged record is a CheckpointError naming it."""
    trained = Trained.find(run_dir)
    return None if trained is None else trained.exported


def read_trained(run_dir: Path) -> RunConfig | None:
    """The config `run_dir` trained with (trained.json), or None for a run made before it was recorded; a damaged
    record is a CheckpointError naming it."""
    trained = Trained.find(run_dir)
    return None if trained is None else trained.config


def _changes(old: RunConfig, new: RunConfig) -> list[tuple[str, Any, Any]]:
    return manifest.config_changes(run_identity(old), run_identity(new))


def _edited(run_dir: Path, trained: RunConfig) -> set[str]:
    """The keys whose value `run_dir`'s config.json has changed since it trained with `trained` (edited by hand)."""
    return {path for path, _, _ in _changes(trained, ConfigFile.read(run_dir))}


def _check_resumable(run_dir: Path, cfg: RunConfig) -> tuple[int, list[str], str | None]:
    """The step a resume of `run_dir` with `cfg` continues from, the keys it changes (`path: old → new`, all in
    RESUMABLE_KEYS) against the config the run trained with, and the schedule note (`_schedule_note`); any other
    changed key -- given with --set, or edited into config.json by hand -- is refused, each one named with the value
    it trained with and its new value."""
    if not (run_dir / rundir.CONFIG).is_file():
        raise ValueError(f"resume: {str(run_dir)!r} is not a run directory (no config.json)")
    if read_exported(run_dir) is not None:
        raise ValueError(
            f"resume: {str(run_dir)!r} holds a model trained outside windtunnel (windtunnel.save_run), with no "
            "optimiser state or training history to continue; train a new run (another --out) instead"
        )
    stored = read_trained(run_dir)
    if stored is None:
        raise CheckpointError(
            f"resume: {str(run_dir / TRAINED)!r} is missing: it records the config the run's checkpoints were trained "
            f"with (and whether it was trained outside windtunnel), so without it an edit of {rundir.CONFIG} cannot be "
            "told from the run's own settings; train the config anew (--overwrite, or another --out)"
        )
    edited = _edited(run_dir, stored)
    changes = _changes(stored, cfg)
    refused = [
        manifest.change_line(*c) + (f" (edited in {rundir.CONFIG})" if c[0] in edited else "")
        for c in changes
        if c[0] not in RESUMABLE_KEYS
    ]
    if refused:
        undo = f"put back the values edited in {rundir.CONFIG} and " if any(c[0] in edited for c in changes) else ""
        raise ValueError(
            f"resume: {len(refused)} {'keys differ' if len(refused) > 1 else 'key differs'} from the config the run "
            f"trained with ({str(run_dir / TRAINED)!r}): {'; '.join(refused)}. only {', '.join(RESUMABLE_KEYS)} may "
            f"change on resume: {undo}drop the other changes to continue this run (`windtunnel train --resume RUN` "
            "alone uses its own config), or train the new config as a new run (another --out, or --overwrite)"
        )
    changed = version_diff(run_dir)
    if changed:
        raise ValueError(
            f"resume: {str(run_dir)!r} was trained by other code ({'; '.join(changed)}); a resumed run would mix "
            "two versions' numbers: train it anew (--overwrite) or resume it with the code that made it"
        )
    step = checkpoints.resume_step(run_dir) or 0
    if step > cfg.train.steps:
        raise ValueError(f"train.steps: the run already has a checkpoint at step {step} > {cfg.train.steps}")
    if stored.train.steps != cfg.train.steps and step and early_stop(run_dir, step) is not None:
        raise ValueError(
            f"train.steps: {str(run_dir)!r} stopped early at step {step:,} (train.early_stop: its validation was ✓ "
            f"{stored.train.early_stop} evaluations in a row), and a resume trains such a run no further, so "
            f"train.steps {stored.train.steps:,} → {cfg.train.steps:,} would change its record and not its weights; "
            "train the longer run as a new run (another --out, or --overwrite)"
        )
    note = _schedule_note(stored, cfg, step) if stored.train.steps != cfg.train.steps else None
    return step, [manifest.change_line(*c) for c in changes], note


def _reopen(
    run_dir: Path,
    cfg: RunConfig,
    resume: bool,
    overwrite: bool,
    optimizer: dict[str, Any] | None,
    exported: dict[str, Any] | None = None,
) -> tuple[int, list[str]]:
    """Clear or reopen a run directory whose lock this process holds; returns the step to resume from and the keys
    the resume changed (recorded in resumes.json; a changed learning-rate schedule is also a RuntimeWarning)."""
    rundir.refuse_existing(run_dir, resume, overwrite)  # again, under the lock: another writer may have filled it
    rundir.clean_temp_files(run_dir)
    exists = (run_dir / rundir.CONFIG).exists() or bool(rundir.contents(run_dir))
    if exists and resume:
        step, changed, note = _check_resumable(run_dir, cfg)
        if changed:
            Resumes.record(run_dir, Resume(step=step, changed=changed, note=note))
            for stale in (Done, EvalFile, Geometry):  # they describe the run before the change
                stale.remove(run_dir)
        if note:
            warnings.warn(f"resume: {note}; recorded in {str(run_dir / RESUMES)!r}", RuntimeWarning, stacklevel=4)
        rundir.truncate_metrics(run_dir, step)
        ConfigFile.write(run_dir, cfg)
        write_trained(run_dir, cfg, optimizer)
        return step, changed
    if exists:
        rundir.clear(run_dir)  # overwrite (checked by refuse_existing before the lock was taken)
    rundir.folder(run_dir, rundir.FIGURES).mkdir(exist_ok=True)
    Versions.current().write(run_dir)
    ConfigFile.write(run_dir, cfg)
    write_trained(run_dir, cfg, optimizer, exported)
    return 0, []


def open_run_dir(
    run_dir: Path,
    cfg: RunConfig,
    resume: bool,
    overwrite: bool,
    optimizer: dict[str, Any] | None = None,
    exported: dict[str, Any] | None = None,
) -> tuple[DirLock, int, list[str]]:
    """Take `run_dir`'s lock and make it ready for `cfg` to train in: new, cleared (`overwrite`) or reopened
    (`resume`); returns the held lock, the step training starts from and the keys a resume changed; trained.json
    records `optimizer` and, for a model exported into a new run, `exported` (`write_trained`). A refused call
    releases the lock and removes whatever directories it created."""
    rundir.refuse_existing(run_dir, resume, overwrite)
    created = rundir.first_missing(run_dir)  # what this call creates, removed again if it is refused
    lock = DirLock(run_dir)
    try:
        lock.acquire()
        start, changed = _reopen(run_dir, cfg, resume, overwrite, optimizer, exported)
    except BaseException:
        if lock.is_locked:
            lock.release()
        if created is not None:  # a refused command leaves nothing behind
            shutil.rmtree(created, ignore_errors=True)
        raise
    return lock, start, changed


# The metrics.jsonl "event" of a run that stopped early (`train.early_stop`), at the step of its last checkpoint:
# {"step", "event": "early_stop", "evaluations": n, "train_s"}.
EARLY_STOP = "early_stop"


def early_stop(run_dir: str | Path, step: int) -> dict[str, Any] | None:
    """The early stop of `run_dir` at checkpoint `step` (its metrics.jsonl record, `EARLY_STOP`), or None where it
    did not stop early there."""
    return next((r for r in rundir.read_metrics(run_dir) if r.get("event") == EARLY_STOP and r["step"] == step), None)


def run_record(run_dir: str | Path, step: int | None, trains: bool = True) -> dict[str, Any]:
    """What the weights of `run_dir` at checkpoint `step` are, for every entry of its eval.json: {"status" (one of
    STATUSES: the most serious that applies), "steps" (what its config.json trains), "steps_trained",
    "sequences_seen", "notes" (each status that applies, in words)}, and for a run that stopped early at `step`
    (`train.early_stop`: finished, not unfinished) "stopped_early": {"step", "evaluations"} with a note saying so.
    `trains` False for a baseline, which trains nothing (finished at 0 steps)."""
    run_dir = Path(run_dir)
    cfg = ConfigFile.read(run_dir)
    trained = read_trained(run_dir) or cfg
    steps, batch = (cfg.train.steps, cfg.train.batch_size) if trains else (0, cfg.train.batch_size)
    done = int(step or 0) if trains else 0
    found: dict[str, list[str]] = {}
    stopped = early_stop(run_dir, done) if 0 < done < steps else None
    if done < steps and stopped is None:
        found["unfinished"] = [
            f"unfinished: stopped at step {done:,} of {steps:,} ({done * batch:,} of {steps * batch:,} sequences "
            "seen), not the run its config trains"
        ]
    edits = [manifest.change_line(*c) for c in _changes(trained, cfg) if not c[0].startswith("eval.")]
    if edits:
        found["edited"] = [
            f"edited: {rundir.CONFIG} differs from the config it trained with ({TRAINED}): " + "; ".join(edits)
        ]
    exported = read_exported(run_dir)
    if exported is not None:
        found["exported"] = [_exported_note(exported)]
    for e in Resumes.history(run_dir):
        kind = "extended" if e.note else "resumed"
        what = f"{kind}: resumed at step {e.step:,} with {'; '.join(e.changed)}"
        found.setdefault(kind, []).append(f"{what}: {e.note}" if e.note else what)
    status = next((s for s in STATUSES if s in found), "finished")
    notes = [note for s in STATUSES if s in found for note in found[s]]
    out = {"status": status, "steps": steps, "steps_trained": done, "sequences_seen": done * batch, "notes": notes}
    if stopped is not None:
        n = stopped.get("evaluations")
        out["stopped_early"] = {"step": done, "evaluations": n}
        notes.append(
            f"stopped early: validation ✓ at {n} consecutive evaluations (train.early_stop), at step {done:,} of "
            f"{steps:,} ({done * batch:,} sequences seen); the learning-rate schedule was cut there"
        )
    return out


def _exported_note(exported: Exported) -> str:
    """The record's note of a model trained outside windtunnel (`read_exported`)."""
    steps, unknown = exported.steps, list(exported.unknown or [])
    batch = (
        "sequences seen not known: train.batch_size was not given"
        if "train.batch_size" in unknown
        else "sequences seen counted at the config's train.batch_size"
    )
    how = (
        f"{steps:,} steps by its own account ({batch})"
        if steps is not None
        else "the steps it trained and the sequences it saw are not known (recorded as 0)"
    )
    note = f"exported: trained outside windtunnel ({exported.model or 'a model'}, by windtunnel.save_run); {how}"
    if unknown:
        note += f"; not known (config.json holds windtunnel's defaults there): {', '.join(unknown)}"
    return note
