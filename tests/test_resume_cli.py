"""Resume that a person would expect: `windtunnel train --resume RUN` continues with the run's own
config; a changed key that may not change is named with its old and new value; SIGINT/SIGTERM write a checkpoint at
the current step and say how to resume, and the resumed run ends equal to an uninterrupted one. And what `train`
says: the start line (parameters, config), progress lines on a non-terminal, the warning without a preset."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from cli_args import TINY, train_args
from interrupts import SignalAt, signal_cfg
from windtunnel import runs
from windtunnel.cli import app
from windtunnel.errors import TrainingInterrupted
from windtunnel.progress import StepLines
from windtunnel.runs import checkpoints
from windtunnel.runs.resume import RESUMABLE_KEYS, RESUMES, resume_config
from windtunnel.store import rundir
from windtunnel.store.rundir import LOCK_FILE, OWNER_FILE
from windtunnel.training.train import train

runner = CliRunner()
SRC = str(Path(__file__).resolve().parents[1] / "src")


def _ok(r) -> str:
    assert r.exit_code == 0, r.output
    return r.output


def _weights(run: Path) -> dict[str, torch.Tensor]:
    return runs.load_run(run).model.state_dict()


def _same_weights(a: Path, b: Path) -> bool:
    wa, wb = _weights(a), _weights(b)
    return wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def _files(run: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in run.iterdir() if p.is_file() and p.name not in (LOCK_FILE, OWNER_FILE)}


def _key_lines(run: Path, after: int = 0) -> list[tuple]:
    """metrics.jsonl (from step `after` + 1) less its timings: what two runs of the same config agree on."""
    timing = {"time_s", "tokens_per_s", "train_s", "elapsed_s"}
    return [
        tuple(sorted((k, v) for k, v in r.items() if k not in timing))
        for r in rundir.read_metrics(run)
        if r["step"] > after
    ]


# --- resume by run path, with changed keys --------------------------------------------------------------------


def test_resume_by_run_path_with_more_steps_is_the_longer_run(tmp_path):
    run, fresh = tmp_path / "run", tmp_path / "fresh"
    out = _ok(runner.invoke(app, train_args(run)))  # 2 steps
    assert "train: bijection (V=5, L=4" in out and "parameters" in out and "2 steps × batch 4" in out
    assert "transformer (smoke: n_layers=2" in out and "lr 0.0003 cosine" in out and "cpu" in out

    # no task, arch, preset or --set: the run's own config, with only --steps changed
    out = _ok(runner.invoke(app, ["train", "--resume", str(run), "--steps", "4", "--no-progress"]))
    assert "resuming at step 2" in out and "changed: train.steps: 2 → 4" in out
    assert "warning" not in out  # warmup (100 steps) covers every step: the schedule up to step 2 is unchanged
    assert json.loads((run / "config.json").read_text())["train"]["steps"] == 4
    assert json.loads((run / RESUMES).read_text())["resumes"] == [
        {"step": 2, "changed": ["train.steps: 2 → 4"], "note": None}
    ]
    assert checkpoints.list_checkpoints(run) == [2, 4]

    _ok(runner.invoke(app, train_args(fresh, "--steps", "4")))
    assert _same_weights(run, fresh)  # exactly the run a fresh --steps 4 trains
    assert _key_lines(run, after=2) == _key_lines(fresh, after=2)  # (the 2-step run logged its last step too)
    ev = json.loads((run / "eval.json").read_text())["default"]["metrics"]
    assert ev == json.loads((fresh / "eval.json").read_text())["default"]["metrics"]


def test_the_old_form_out_and_resume_flag_still_works(tmp_path):
    run = tmp_path / "run"
    _ok(runner.invoke(app, train_args(run)))
    out = _ok(runner.invoke(app, ["train", "--out", str(run), "--resume", "--steps", "3", *TINY]))
    assert "resuming at step 2" in out and json.loads((run / "config.json").read_text())["train"]["steps"] == 3
    _ok(runner.invoke(app, ["train", str(run), "--out", str(run), "--resume"]))  # both, naming one directory


def _lstm_args(out: Path, *extra: str) -> list[str]:
    """A smoke LSTM with dropout, which draws from the global RNG every step."""
    return [
        "train",
        "--task",
        "bijection",
        "--arch",
        "lstm",
        "--out",
        str(out),
        *TINY,
        "--set",
        "model.dropout=0.1",
    ] + [*extra]


def test_cadence_and_evaluation_keys_may_change_and_change_no_weight(tmp_path):
    run, fresh = tmp_path / "run", tmp_path / "fresh"
    _ok(runner.invoke(app, _lstm_args(run, "--steps", "2", "--set", "train.eval_every=1")))
    changes = ["train.log_every=2", "train.eval_every=3", "train.eval_size=4", "train.checkpoint_every=1"]
    changes += ["eval.n=6", "eval.batch_size=3", "train.keep_checkpoints=2", "train.checkpoint_schedule=[3]"]
    args = ["train", "--resume", str(run), "--steps", "4", "--no-progress"]
    out = _ok(runner.invoke(app, [*args, *(a for kv in changes for a in ("--set", kv))]))
    for key in ("train.log_every", "train.eval_every", "train.eval_size", "eval.n", "train.checkpoint_schedule"):
        assert key in out and key in RESUMABLE_KEYS
    _ok(runner.invoke(app, _lstm_args(fresh, "--steps", "4", "--set", "train.eval_every=1")))
    assert _same_weights(run, fresh)
    assert json.loads((run / "eval.json").read_text())["default"]["n"] == 6


def test_refused_keys_are_named_one_by_one_with_old_and_new_values(tmp_path):
    run = tmp_path / "run"
    _ok(runner.invoke(app, train_args(run)))
    before = _files(run)
    r = runner.invoke(
        app,
        ["train", "--resume", str(run), "--steps", "4", "--set", "model.d_model=64", "--set", "train.lr=0.01"]
        + ["--seed", "3", "--set", "task.L=3", "--no-progress"],
    )
    assert r.exit_code == 2, r.output
    line = r.output.strip()
    assert line.startswith("error: resume: ") and "\n" not in line
    for change in ("model.size.d_model: 32 → 64", "train.lr: 0.0003 → 0.01", "seed: 0 → 3", "task.params.L: 4 → 3"):
        assert change in line
    assert "train.steps" not in line.split("only")[0]  # allowed: not among the refused keys
    assert "['task'" not in line and "only train.steps, train.log_every" in line
    assert _files(run) == before  # a refused resume changes nothing


def test_extending_a_decaying_schedule_warns_that_it_is_another_run_and_records_it(tmp_path):
    run = tmp_path / "run"
    _ok(runner.invoke(app, train_args(run, "--steps", "4", "--set", "train.warmup_steps=1")))
    with pytest.warns(RuntimeWarning, match=r"train\.steps 4 → 8 .*cosine") as w:
        _ok(runner.invoke(app, ["train", "--resume", str(run), "--steps", "8", "--no-progress"]))
    text = str(w[0].message)
    assert "steps 2-4" in text and "4-step schedule" in text and "fresh" in text
    (entry,) = json.loads((run / RESUMES).read_text())["resumes"]
    assert entry["step"] == 4 and entry["changed"] == ["train.steps: 4 → 8"] and "cosine" in entry["note"]


def test_a_constant_schedule_extends_exactly(tmp_path):
    run, fresh = tmp_path / "run", tmp_path / "fresh"
    const = ["--set", "train.schedule=constant", "--set", "train.warmup_steps=1"]
    _ok(runner.invoke(app, train_args(run, "--steps", "3", *const)))
    _ok(runner.invoke(app, ["train", "--resume", str(run), "--steps", "5", "--no-progress"]))
    assert json.loads((run / RESUMES).read_text())["resumes"][0]["note"] is None
    _ok(runner.invoke(app, train_args(fresh, "--steps", "5", *const)))
    assert _same_weights(run, fresh)


def test_resume_config_is_the_stored_one_with_the_overrides(tmp_path):
    run = tmp_path / "run"
    _ok(runner.invoke(app, train_args(run)))
    cfg = resume_config(run, {"train.steps": 9})
    assert cfg.train.steps == 9 and cfg.model.preset == "smoke" and cfg.task.params["V"] == 5
    with pytest.raises(FileNotFoundError, match="does not exist"):
        resume_config(tmp_path / "nope")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["train", "RUNDIR", "--steps", "3"], "is for --resume"),
        (["train", "--resume", "MISSING"], "does not exist"),
        (["train", "--resume", "RUNDIR", "--out", "OTHER"], "two run directories"),
        (["train", "--task", "bijection"], "--out: missing"),
    ],
)
def test_run_argument_errors_are_one_line(tmp_path, args, message):
    run = tmp_path / "run"
    _ok(runner.invoke(app, train_args(run)))
    names = {"RUNDIR": str(run), "MISSING": str(tmp_path / "missing"), "OTHER": str(tmp_path / "other")}
    r = runner.invoke(app, [names.get(a, a) for a in args])
    assert r.exit_code == 2 and message in r.output and r.output.startswith("error: "), r.output
    assert not (tmp_path / "missing").exists() and not (tmp_path / "other").exists()


# --- SIGINT / SIGTERM -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_checkpoints_the_current_step_restores_the_handlers_and_resumes_exactly(tmp_path, sig):
    cfg = signal_cfg()
    seen: list[int] = []

    def mine(signum: int, frame: object) -> None:  # the caller's handler
        seen.append(signum)

    previous = signal.signal(sig, mine)
    try:
        with pytest.raises(TrainingInterrupted) as info:
            train(cfg, tmp_path / "cut", progress=False, handle_signals=True, callbacks=[SignalAt(3, sig)])
        assert signal.getsignal(sig) is mine  # restored
        os.kill(os.getpid(), sig)
        assert seen == [sig]
    finally:
        signal.signal(sig, previous)
    err = info.value
    assert isinstance(err, KeyboardInterrupt) and err.step == 3 and err.saved and err.exit_code == 128 + sig
    assert "step 3" in str(err) and f"{tmp_path / 'cut'}/checkpoints" in str(err)
    assert f"windtunnel train --resume {tmp_path / 'cut'}" in str(err)
    assert checkpoints.list_checkpoints(tmp_path / "cut") == [3] and not (tmp_path / "cut" / "eval.json").exists()

    resumed = train(cfg, tmp_path / "cut", resume=True, progress=False)
    fresh = train(cfg, tmp_path / "fresh", progress=False)
    assert resumed["default"]["metrics"] == fresh["default"]["metrics"]
    assert _same_weights(tmp_path / "cut", tmp_path / "fresh")
    assert _key_lines(tmp_path / "cut") == _key_lines(tmp_path / "fresh")


@pytest.mark.filterwarnings("ignore:resume. train.steps:RuntimeWarning")
def test_an_extended_finished_run_is_not_done_until_it_finishes_again(tmp_path):
    """done.json, eval.json and geometry.json describe the run before the change: gone at once, so a run cut off
    mid-extension never shows the shorter run's evaluation under the longer run's config."""
    run = tmp_path / "run"
    train(signal_cfg(**{"train.steps": 4}), run, progress=False)
    (run / "done.json").write_text("{}")
    (run / "geometry.json").write_text("{}")
    with pytest.raises(TrainingInterrupted):
        train(signal_cfg(), run, resume=True, progress=False, handle_signals=True, callbacks=[SignalAt(6)])
    assert json.loads((run / "config.json").read_text())["train"]["steps"] == 8
    assert not any((run / f).exists() for f in ("done.json", "eval.json", "geometry.json"))
    assert train(signal_cfg(), run, resume=True, progress=False) and (run / "eval.json").exists()


def test_a_second_signal_stops_at_once_and_without_handle_signals_nothing_changes(tmp_path):
    with pytest.raises(TrainingInterrupted) as info:
        train(signal_cfg(), tmp_path / "r", progress=False, handle_signals=True, callbacks=[SignalAt(3, times=2)])
    assert not info.value.saved and info.value.step is None and "before any checkpoint" in str(info.value)
    assert checkpoints.list_checkpoints(tmp_path / "r") == []
    # without handle_signals the caller's handler acts: here Python's own Ctrl-C (set, as an earlier test or library
    # in this process, Ray's driver for one, may have replaced it), and no checkpoint
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt) as plain:
            train(signal_cfg(), tmp_path / "p", progress=False, callbacks=[SignalAt(3)])
    finally:
        signal.signal(signal.SIGINT, previous)
    assert not isinstance(plain.value, TrainingInterrupted) and checkpoints.list_checkpoints(tmp_path / "p") == []


def test_a_signal_during_the_final_evaluation_stops_at_once_the_last_checkpoint_written(tmp_path, monkeypatch):
    import windtunnel.training.train as tr

    real = tr.evaluate

    def interrupted(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)
        return real(*args, **kwargs)

    monkeypatch.setattr(tr, "evaluate", interrupted)
    with pytest.raises(TrainingInterrupted) as info:
        train(signal_cfg(), tmp_path / "r", progress=False, handle_signals=True)
    assert info.value.saved and info.value.step == 8 and not (tmp_path / "r" / "eval.json").exists()
    monkeypatch.setattr(tr, "evaluate", real)
    assert checkpoints.latest_step(tmp_path / "r") == 8
    train(signal_cfg(), tmp_path / "r", resume=True, progress=False)  # nothing left but the evaluation
    assert (tmp_path / "r" / "eval.json").exists()


CLI = "from windtunnel.cli import main; main()"
# An LSTM with dropout draws from the global RNG every step: a resume is exact only if that state is restored.
SIGNAL_ARGS = ["--task", "bijection", "--arch", "lstm", "--preset", "smoke", "--no-progress"] + [
    a
    for kv in (
        "model.dropout=0.1",
        "task.V=5",
        "task.L=4",
        "train.batch_size=8",
        "train.log_every=1",
        "train.eval_every=25",
        "train.eval_size=8",
        "train.checkpoint_every=0",
        "train.checkpoint_schedule=[20]",
        "train.warmup_steps=10",
        "eval.n=16",
        "train.device=cpu",
    )
    for a in ("--set", kv)
]
STEPS = 120  # the signal is sent at step 30, 90 steps before the end


def _interrupt(run: Path, sig: int) -> tuple[subprocess.CompletedProcess, int]:
    """`windtunnel train` of SIGNAL_ARGS into `run` in a subprocess, sent `sig` once metrics.jsonl is past the
    first checkpoint (step 20); returns the finished process and the step its checkpoint is of."""
    env = {**os.environ, "PYTHONPATH": SRC, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-c", CLI, "train", "--out", str(run), "--steps", str(STEPS), *SIGNAL_ARGS]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 180
    try:
        while time.time() < deadline:
            lines = rundir.read_metrics(run) if (run / "metrics.jsonl").exists() else []
            if lines and lines[-1]["step"] >= 30:
                break
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.01)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err), checkpoints.latest_step(run) or 0


def test_sigint_then_resume_run_ends_equal_to_an_uninterrupted_run(tmp_path):
    cut, fresh = tmp_path / "cut", tmp_path / "fresh"
    done, step = _interrupt(cut, signal.SIGINT)
    assert done.returncode == 130, done.stderr
    assert 30 <= step < STEPS and step != 20  # a checkpoint of the step it stopped at, not a scheduled one
    assert checkpoints.list_checkpoints(cut) == [20, step] and not (cut / "eval.json").exists()
    (line,) = [s for s in done.stderr.splitlines() if s.strip()]
    assert line.startswith("interrupted: SIGINT: ") and f"step {step} " in line and f"{cut}/checkpoints" in line
    assert line.endswith(f": windtunnel train --resume {cut}")  # the command to go on with, last
    assert max(r["step"] for r in rundir.read_metrics(cut)) == step  # every line up to it, none after

    out = _ok(runner.invoke(app, ["train", "--resume", str(cut)]))
    assert f"resuming at step {step}" in out and "changed" not in out
    _ok(runner.invoke(app, ["train", "--out", str(fresh), "--steps", str(STEPS), *SIGNAL_ARGS]))
    assert _same_weights(cut, fresh)
    assert _key_lines(cut) == _key_lines(fresh)
    a, b = (json.loads((d / "eval.json").read_text())["default"] for d in (cut, fresh))
    assert a["metrics"] == b["metrics"] and a["per_position"] == b["per_position"]


def test_sigterm_checkpoints_exits_143_and_the_run_resumes(tmp_path):
    run = tmp_path / "run"
    done, step = _interrupt(run, signal.SIGTERM)
    assert done.returncode == 143, done.stderr
    assert "interrupted: SIGTERM: " in done.stderr and f"step {step} " in done.stderr and step >= 30
    with pytest.warns(RuntimeWarning, match="not the run a fresh"):  # a shorter cosine schedule: said
        out = _ok(runner.invoke(app, ["train", "--resume", str(run), "--steps", str(step + 1)]))
    assert f"resuming at step {step}" in out and (run / "eval.json").exists()
    assert checkpoints.latest_step(run) == step + 1


# --- what train says --------------------------------------------------------------------------------------------


def test_progress_lines_when_stderr_is_not_a_terminal(tmp_path):
    args = [a for a in train_args(tmp_path / "r", "--steps", "20") if a != "--no-progress"]
    r = runner.invoke(app, args)
    _ok(r)
    lines = [s for s in r.stderr.splitlines() if s.startswith("progress: train step")]
    assert len(lines) == 10 and lines[0].startswith("progress: train step 2/20 (10%) · loss ")
    assert lines[-1].startswith("progress: train step 20/20 (100%)") and "ETA" in lines[-1]
    quiet = runner.invoke(app, train_args(tmp_path / "q", "--steps", "20"))
    assert "progress:" not in _ok(quiet)


def test_step_lines_every_tenth_at_the_end_and_every_interval():
    buf = io.StringIO()
    p = StepLines(100, initial=40, stream=buf, interval=3600)
    for step in range(41, 101):
        p.update(step, loss=1.0, val=0.5 if step > 60 else None)
    lines = buf.getvalue().splitlines()
    assert [int(s.split()[3].split("/")[0]) for s in lines] == [50, 60, 70, 80, 90, 100]
    assert "val" not in lines[1] and "val 0.5000" in lines[2]
    slow = io.StringIO()
    q = StepLines(10**6, stream=slow, interval=0.0)
    q.update(1, loss=2.0)
    q.update(2, loss=2.0)
    assert len(slow.getvalue().splitlines()) == 2  # a long run still says something every `interval`


def test_a_warning_without_preset_or_size_names_the_default_size(tmp_path):
    args = ["train", "--task", "bijection", "--out", str(tmp_path / "r"), "--steps", "1", "--no-progress"]
    args += [
        a
        for kv in ("task.V=5", "task.L=4", "train.batch_size=2", "eval.n=4", "train.device=cpu")
        for a in ("--set", kv)
    ]
    r = runner.invoke(app, args)
    _ok(r)
    (warning,) = [s for s in r.stderr.splitlines() if s.startswith("warning: ")]
    assert "--preset" in warning and "model size" in warning and "transformer" in warning and "default" in warning
    assert (
        "(n_layers=6, n_heads=6, d_model=192)" in warning and "for 1 step," in warning and "--preset quick" in warning
    )
    assert "M parameters" in r.stdout  # the start line says how big that is
    for quiet in (train_args(tmp_path / "p"), ["train", "--resume", str(tmp_path / "r"), "--no-progress"]):
        assert "warning: no --preset" not in _ok(runner.invoke(app, quiet))
