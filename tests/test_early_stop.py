"""Early stop (`train.early_stop`) and time to verdict: a run stops at its n-th consecutive ✓ validation verdict and is
a finished run; Table 1's cells and results.json say when each cell's validation first reached ◐ and ✓."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import create_model

from tiny_runs import smoke_config
from windtunnel import tasks
from windtunnel.config import TrainConfig, _Strict, config_to_json, run_identity, validate
from windtunnel.errors import CheckpointError
from windtunnel.evaluation import evaluate, marks
from windtunnel.report import build_report
from windtunnel.report.collect import RunRecord, read_run
from windtunnel.report.time_to_verdict import (
    cell_time_to_verdict,
    run_time_to_verdict,
    time_to_verdict_text,
    untimed_note,
)
from windtunnel.reproduce import reproduce
from windtunnel.runs import checkpoints
from windtunnel.runs.resume import run_record
from windtunnel.store import manifest, rundir
from windtunnel.training import steps as training_steps
from windtunnel.training import train as tr

# 12 steps, a validation evaluation every 2 (steps 2, 4, ..., 12), a checkpoint every 4
TINY = {
    "task.name": "bijection",
    "task.V": 6,
    "task.L": 5,
    "model.arch": "transformer",
    "train.steps": 12,
    "train.eval_every": 2,
    "train.checkpoint_every": 4,
    "train.schedule": "constant",
}


def _verdicts(monkeypatch, run_dir: Path, levels: dict[int, str]) -> list[int]:
    """Make the loop's periodic evaluation in `run_dir` return the verdict `levels[step]` (deterministic by step,
    whatever the model: the step is that of the training line just logged, train.log_every = 1); returns the list
    of steps it was called at."""
    seen: list[int] = []

    def fake(model, task, cfg, *args, **kwargs):
        step = rundir.read_metrics(run_dir)[-1]["step"]
        seen.append(step)
        return {"metrics_point": {"entropy_mae_bits": 0.5, "kl_bits": 0.5}, "verdict": {"level": levels[step]}}

    monkeypatch.setattr(training_steps, "evaluate_model", fake)  # the periodic evaluation, `steps.RunSteps`
    return seen


def _train(run_dir: Path, resume: bool = False, **extra):
    return tr.train(smoke_config(**{**TINY, **extra}), run_dir, resume=resume, progress=False)


def _events(run_dir: Path) -> list[dict]:
    return [r for r in rundir.read_metrics(run_dir) if r.get("event")]


def test_stops_at_the_nth_consecutive_exact_verdict_and_a_resume_trains_no_further(tmp_path, monkeypatch):
    levels = {2: "fail", 4: "exact", 6: "exact", 8: "exact", 10: "exact", 12: "exact"}
    run = tmp_path / "r"
    _verdicts(monkeypatch, run, levels)
    result = _train(run, **{"train.early_stop": 3})
    records = rundir.read_metrics(run)
    assert max(r["step"] for r in records) == 8  # the third ✓ in a row: step 8 of 12
    assert [r["verdict"] for r in records if r.get("split") == "eval"] == ["fail", "exact", "exact", "exact"]
    (event,) = _events(run)
    assert event["event"] == "early_stop" and event["step"] == 8 and event["evaluations"] == 3
    assert event["train_s"] == max(r["train_s"] for r in records if "loss" in r)
    # the final checkpoint and the final (test-stream) evaluation, as at the last step
    assert checkpoints.latest_step(run) == 8 and checkpoints.list_checkpoints(run) == [4, 8]
    default = result["default"]
    assert default["step"] == 8 and default["stream"] == "test" and default["metrics"]["kl_bits"]["hi"] > 0
    rec = default["run"]
    assert rec["status"] == "finished" and rec["steps_trained"] == 8 and rec["steps"] == 12
    assert rec["stopped_early"] == {"step": 8, "evaluations": 3} and "stopped early" in rec["notes"][0]
    assert json.loads((run / "eval.json").read_text())["default"]["run"] == rec
    state = read_run(run).state()
    assert state.status == "finished" and not state.marked and state.stopped_early == 8
    # a resume of a run that stopped early trains no further: nothing logged, no checkpoint, evaluated again at 8
    before = (run / "metrics.jsonl").read_text()
    called = _verdicts(monkeypatch, run, levels)
    again = _train(run, resume=True, **{"train.early_stop": 3})
    assert called == [] and (run / "metrics.jsonl").read_text() == before
    assert checkpoints.latest_step(run) == 8 and again["default"]["step"] == 8
    assert again["default"]["run"]["status"] == "finished"


def test_a_run_that_stopped_early_is_not_extended_by_a_resume_that_trains_nothing(tmp_path, monkeypatch):
    """A resume trains a run that stopped early no further, so a longer train.steps would only have recorded it
    "extended" (its schedule changed before the checkpoint) with nothing trained: it is refused, naming the early stop,
    and the run and its record are as they were."""
    levels = {2: "fail", 4: "exact", 6: "exact", 8: "exact", 10: "exact", 12: "exact"}
    run = tmp_path / "r"
    _verdicts(monkeypatch, run, levels)
    _train(run, **{"train.early_stop": 3, "train.schedule": "cosine"})
    before = {p.name: p.read_bytes() for p in run.rglob("*") if p.is_file() and not p.name.startswith(".")}
    with pytest.raises(ValueError, match=r"^train\.steps: ") as err:
        _train(run, resume=True, **{"train.early_stop": 3, "train.schedule": "cosine", "train.steps": 400})
    message = str(err.value)
    assert "stopped early at step 8" in message and "train.early_stop" in message  # why it is refused
    assert "12 → 400" in message and "record" in message  # the change asked for, and what it would touch
    assert {p.name: p.read_bytes() for p in run.rglob("*") if p.is_file() and not p.name.startswith(".")} == before
    assert run_record(run, 8)["status"] == "finished"


@pytest.mark.parametrize(
    ("eval_every", "why"), [(0, "0 (only the final evaluation)"), (12, "12, not below"), (50, "50, not below")]
)
def test_an_early_stop_that_could_never_stop_the_run_is_refused_naming_the_fields(eval_every, why):
    with pytest.raises(ValueError, match=r"^train\.early_stop: ") as err:
        validate({"train": {"steps": 12, "eval_every": eval_every, "early_stop": 3}})
    message = str(err.value)
    assert f"train.eval_every is {why}" in message and "never stop" in message
    assert "train.eval_every between 1 and 11" in message  # the allowed range
    assert validate({"train": {"steps": 12, "eval_every": 11, "early_stop": 3}}).train.early_stop == 3
    assert validate({"train": {"steps": 12, "eval_every": eval_every}}).train.early_stop is None  # off: any cadence


def test_exact_verdicts_that_are_not_consecutive_do_not_stop(tmp_path, monkeypatch):
    levels = {2: "exact", 4: "exact", 6: "approximate", 8: "exact", 10: "exact", 12: "invalid"}
    _verdicts(monkeypatch, tmp_path / "r", levels)
    result = _train(tmp_path / "r", **{"train.early_stop": 3})
    assert checkpoints.latest_step(tmp_path / "r") == 12 and not _events(tmp_path / "r")
    assert result["default"]["run"]["status"] == "finished" and "stopped_early" not in result["default"]["run"]


@pytest.mark.parametrize("off", [None, 0])
def test_early_stop_off_never_stops(tmp_path, monkeypatch, off):
    _verdicts(monkeypatch, tmp_path / "r", dict.fromkeys(range(2, 13, 2), "exact"))
    extra = {} if off is None else {"train.early_stop": off}
    _train(tmp_path / "r", **extra)
    assert checkpoints.latest_step(tmp_path / "r") == 12 and not _events(tmp_path / "r")


def test_the_streak_is_read_back_on_resume(tmp_path, monkeypatch):
    """A run interrupted in the middle of its streak (here: trained to step 6, then extended to 12 on a constant
    schedule) stops where the uninterrupted run stops."""
    levels = {2: "fail", 4: "exact", 6: "exact", 8: "exact", 10: "exact", 12: "exact"}
    _verdicts(monkeypatch, tmp_path / "whole", levels)
    _train(tmp_path / "whole", **{"train.early_stop": 3})
    _verdicts(monkeypatch, tmp_path / "cut", levels)
    _train(tmp_path / "cut", **{"train.early_stop": 3, "train.steps": 6})
    _train(tmp_path / "cut", resume=True, **{"train.early_stop": 3})
    assert checkpoints.latest_step(tmp_path / "cut") == checkpoints.latest_step(tmp_path / "whole") == 8
    assert [e["step"] for e in _events(tmp_path / "cut")] == [8]


def test_the_field_changes_no_stored_config_text_or_hash():
    class Omitting(_Strict):
        _OMIT_EMPTY = ("loggers",)

    later = ("early_stop", "aux_target", "aux_weight", "ema_decay")  # this field and those added after it
    fields = {k: (f.annotation, f) for k, f in TrainConfig.model_fields.items() if k not in later}
    Before = create_model("Before", __base__=Omitting, **fields)  # TrainConfig as it was before the field
    for raw in [{}, {"task": {"name": "hmm"}, "model": {"arch": "lstm"}, "train": {"early_stop": 0}, "seed": 3}]:
        cfg = validate(raw)
        text = config_to_json(cfg)
        assert "early_stop" not in text and "early_stop" not in run_identity(cfg)["train"]
        stored = json.loads(text)
        assert json.dumps(Before.model_validate(stored["train"]).model_dump(mode="json"), sort_keys=True) == (
            json.dumps(stored["train"], sort_keys=True)
        )
        bare = {k: v for k, v in raw.items() if k != "train"}  # the config dict without the field
        assert manifest.config_hash(cfg) == manifest.config_hash(validate(bare))
    on = validate({"train": {"early_stop": 3}})
    assert json.loads(config_to_json(on))["train"]["early_stop"] == 3
    assert manifest.config_hash(on) != manifest.config_hash(validate({}))
    with pytest.raises(ValueError, match="train.early_stop"):
        validate({"train": {"early_stop": -1}})


def test_the_validation_line_adds_the_verdict_and_keeps_its_point_fields():
    """Periodic evaluation now has bootstrap intervals (its verdict at their conservative end); every other field of
    its metrics.jsonl line is what the point evaluation logged."""
    task = tasks.make("hmm", K=6)
    predict = evaluate.control_predictors(task)["approximation: last 1 obs"]
    point = evaluate.score_predictor(task, predict, n=64, seed=0, n_boot=0, stream="validation")
    boot = evaluate.score_predictor(task, predict, n=64, seed=0, n_boot=200, stream="validation")
    old = {**point["metrics_point"], "closest": point["verdict"]["closest"]}
    old["horizon"], old["horizon_max"] = point["verdict"]["horizon"], point["verdict"]["horizon_max"]
    line = tr.validation_line(boot)
    assert line.pop("verdict") == boot["verdict"]["level"] == marks.verdict(task, boot).level
    assert line == old


def _record(tmp_path: Path, name: str, seed: int, history: list[dict], steps: int = 1000) -> RunRecord:
    return RunRecord(
        path=tmp_path / name,
        task="bijection",
        arch="transformer",
        seed=seed,
        config={"train": {"steps": steps, "batch_size": 8}},
        evals={"default": {"step": steps, "metrics": {}}},
        history=history,
    )


def _evals(levels: dict[int, str]) -> list[dict]:
    out = []
    for step, level in levels.items():
        out.append({"step": step, "loss": 1.0, "train_s": step / 10, "elapsed_s": step / 5})
        out.append({"step": step, "split": "eval", "entropy_mae_bits": 0.1, "verdict": level, "train_s": step / 10})
    return out


def test_time_to_verdict_from_a_hand_written_metrics_jsonl(tmp_path):
    a = _record(tmp_path, "a", 0, _evals({200: "fail", 400: "approximate", 600: "fail", 800: "exact", 1000: "exact"}))
    b = _record(tmp_path, "b", 1, _evals({200: "approximate", 400: "exact", 600: "exact"}), steps=600)
    never = _record(tmp_path, "c", 2, _evals({500: "fail", 1000: "invalid"}))
    blind = _record(tmp_path, "d", 3, [{"step": 1000, "loss": 1.0, "train_s": 50.0}])  # eval_every = 0
    assert run_time_to_verdict(a) == {
        "seed": 0,
        "run": "a",
        "steps": 1000,
        "evaluations": 5,
        "unjudged": 0,
        "approx": {"step": 400, "train_s": 40.0},
        "exact": {"step": 800, "train_s": 80.0},
        "stopped_early": None,
    }
    cell = cell_time_to_verdict([b, a, never])
    assert [s["seed"] for s in cell["seeds"]] == [0, 1, 2] and cell["curves"] == 3 and cell["steps"] == 1000
    assert cell["approx"] == {"reached": 2, "of": 3, "median_s": 30.0, "min_s": 20.0, "max_s": 40.0, "median_step": 300}
    assert cell["exact"]["reached"] == 2 and cell["exact"]["median_step"] == 600 and cell["exact"]["median_s"] == 60
    assert cell["text"] == "◐ at 300 steps (30 s), 2/3 seeds; ✓ at 600 steps (60 s), 2/3 seeds"
    alone = cell_time_to_verdict([never])
    assert alone["approx"] == {"reached": 0, "of": 1} and alone["text"] == "neither ◐ nor ✓ within 1,000 steps"
    one = cell_time_to_verdict([a])
    assert one["text"] == "◐ at 400 steps (40 s); ✓ at 800 steps (80 s)"
    same = cell_time_to_verdict([_record(tmp_path, "e", 0, _evals({100: "fail", 300: "exact"}))])
    assert same["text"] == "✓ at 300 steps (30 s)"  # ◐ first where ✓ first: said once
    approx_only = cell_time_to_verdict([_record(tmp_path, "f", 0, _evals({100: "approximate"}), steps=3000)])
    assert approx_only["text"] == "◐ at 100 steps (10 s); ✓ not within 3,000 steps"
    none = cell_time_to_verdict([blind])
    assert none["curves"] == 0 and none["approx"] is None and none["text"] == "no validation curve"
    mixed = cell_time_to_verdict([a, blind])
    assert mixed["approx"]["of"] == 1 and mixed["text"].endswith("; 1 of 2 seeds without a validation curve")
    assert time_to_verdict_text({**none, "seeds": [{**none["seeds"][0], "steps": 0}]}) == "not trained"
    old = [{**e, "verdict": None} if "verdict" in e else e for e in _evals({200: "exact"})]  # logged before verdicts
    older = cell_time_to_verdict(
        [_record(tmp_path, "g", 0, [{k: v for k, v in e.items() if v is not None} for e in old])]
    )
    assert older["curves"] == 0 and older["text"].startswith("validation curve without verdicts")
    # a cell without a time to verdict leaves it out; one note under Table 1 counts such cells and says why
    data = {"t": {"hmm": {"time_to_verdict": older}, "bijection": {"time_to_verdict": cell}}, "b": {"hmm": {}}}
    note = untimed_note(data)
    assert "Time to verdict" in note and "1 trained cell" in note and older["text"] in note and "(1 cell)" in note
    assert untimed_note({"t": {"bijection": {"time_to_verdict": cell}}}) == ""


def test_a_garbled_verdict_in_metrics_jsonl_names_the_field(tmp_path):
    run = tmp_path / "r"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"task": {"name": "bijection"}, "model": {"arch": "transformer"}}))
    (run / "metrics.jsonl").write_text(json.dumps({"step": 2, "split": "eval", "verdict": "great"}) + "\n")
    with pytest.raises(CheckpointError, match=r"record 1\.verdict: ") as err:
        read_run(run)
    assert "verdict level" in str(err.value) and "approximate" in str(err.value)  # the levels it may be


def test_a_stopped_run_in_the_report(tmp_path, monkeypatch):
    run = tmp_path / "r"
    _verdicts(monkeypatch, run, dict.fromkeys(range(2, 13, 2), "exact"))
    _train(run, **{"train.early_stop": 2, "eval.n": 16})
    assert run_record(run, 4)["stopped_early"] == {"step": 4, "evaluations": 2}
    assert "stopped_early" not in run_record(run, 2)  # the record is of the step it stopped at
    results = build_report([run], tmp_path / "report")
    cell = results["table1"]["transformer"]["bijection"]
    assert cell["time_to_verdict"]["text"] == "✓ at 2 steps (" + cell["time_to_verdict"]["text"].split("(")[1]
    assert cell["time_to_verdict"]["seeds"][0]["stopped_early"] == 4 and cell["statuses"] == []
    (entry,) = results["runs"]
    assert entry["status"] == "finished" and entry["stopped_early"] == 4 and entry["steps_trained"] == 4
    md = (tmp_path / "report" / "report.md").read_text()
    assert "| finished (stopped early at step 4) | 4 of 12 |" in md and "· ✓ at 2 steps (" in md


def test_time_to_verdict_is_in_a_smoke_report(tmp_path):
    out = tmp_path / "smoke"
    reproduce("smoke", out, only={"task": "bijection", "arch": "transformer,oracle"}, probe=False)
    table = json.loads((out / "results.json").read_text())["table1"]
    ttv = table["transformer"]["bijection"]["time_to_verdict"]
    assert set(ttv) == {"approx", "exact", "steps", "curves", "seeds", "text"} and ttv["curves"] == 1
    (seed,) = ttv["seeds"]
    assert set(seed) == {"seed", "run", "steps", "evaluations", "unjudged", "approx", "exact", "stopped_early"}
    assert seed["evaluations"] >= 1 and seed["steps"] == ttv["steps"] > 0
    assert table["oracle"]["bijection"]["time_to_verdict"]["text"] == "not trained"
    md = (out / "report.md").read_text()
    row = next(line for line in md[md.index("## Table 1") :].splitlines() if line.startswith("| transformer |"))
    assert f"· {ttv['text']} |" in row
    # every periodic evaluation logged its verdict
    history = rundir.read_metrics(out / "runs" / "bijection-transformer")
    assert all(r["verdict"] in marks.LEVELS for r in history if r.get("split") == "eval")
