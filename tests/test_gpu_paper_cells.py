"""benchmarks/gpu_paper_cells.py on the CPU: the processes it starts with and without --stack, and a stacked cell
stopped by the deadline end to end (training, SIGTERM, evaluation, probes, report, the JSON record)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import windtunnel
from windtunnel.runs import checkpoints

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_paper_cells.py"
TINY = ["model.n_layers=1", "model.d_model=16", "model.n_heads=2", "model.d_ff=32", "eval.n=32", "eval.overrides=[]"]


def _script():
    spec = importlib.util.spec_from_file_location("gpu_paper_cells", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Planned(Exception):
    """Raised in place of training: the waves the script would run."""


def _waves(monkeypatch, tmp_path, *flags: str) -> list[dict[str, list[str]]]:
    """The waves of processes `main` would start with `flags` (nothing is trained)."""
    module = _script()

    def run_waves(waves, logs, limit_s, grace_s=60.0):
        raise _Planned(waves)

    monkeypatch.setattr(module, "run_waves", run_waves)
    monkeypatch.setattr(sys, "argv", ["gpu_paper_cells.py", "--out", str(tmp_path / "out"), *flags])
    with pytest.raises(_Planned) as planned:
        module.main()
    return planned.value.args[0]


def test_stack_starts_one_process_per_cell_into_the_runs_directories(monkeypatch, tmp_path):
    wave = ["--wave", "hmm,hmm-sticky/transformer/3", "--wave", "hmm/mamba/2"]
    solo = _waves(monkeypatch, tmp_path, *wave)
    assert [sorted(w) for w in solo] == [
        sorted(f"{t}-transformer-s{s}" for t in ("hmm", "hmm-sticky") for s in range(3)),
        ["hmm-mamba-s0", "hmm-mamba-s1"],
    ]
    runs, configs = tmp_path / "out" / "runs", tmp_path / "out" / "configs"
    assert solo[1]["hmm-mamba-s1"][-6:] == [
        "train", "--config", str(configs / "hmm-mamba-s1.json"), "--out", str(runs / "hmm-mamba-s1"), "--no-progress",
    ]  # fmt: skip
    stacked = _waves(monkeypatch, tmp_path, *wave, "--stack")
    assert [sorted(w) for w in stacked] == [
        ["hmm-sticky-transformer-stacked", "hmm-transformer-stacked"],
        ["hmm-mamba-stacked"],
    ]
    cmd = stacked[1]["hmm-mamba-stacked"]
    assert cmd[1:3] == [str(SCRIPT), "train-stacked"]
    assert cmd[3:] == [str(p) for s in (0, 1) for p in (configs / f"hmm-mamba-s{s}.json", runs / f"hmm-mamba-s{s}")]
    seeds = [json.loads((configs / f"hmm-mamba-s{s}.json").read_text())["seed"] for s in (0, 1)]
    assert seeds == [0, 1]


def test_compile_takes_a_mode_and_goes_with_stack(monkeypatch, tmp_path, capsys):
    """--compile alone is torch's default mode, --compile MODE that mode (reduce-overhead: CUDA graphs), in every
    run's config, stacked or not; a mode torch.compile does not have is refused."""
    configs = tmp_path / "out" / "configs"
    for flags, setting in ((["--compile"], True), (["--compile", "reduce-overhead"], "reduce-overhead")):
        waves = _waves(monkeypatch, tmp_path, "--wave", "hmm/transformer/2", "--stack", *flags)
        assert list(waves[0]) == ["hmm-transformer-stacked"]
        assert {
            json.loads((configs / f"hmm-transformer-s{s}.json").read_text())["train"]["compile"] for s in (0, 1)
        } == {setting}
    with pytest.raises(SystemExit):
        _waves(monkeypatch, tmp_path, "--compile", "fastest")
    assert "invalid choice: 'fastest'" in capsys.readouterr().err


@pytest.mark.slow  # about a minute: a 15 s deadline, then evaluation, probes and the report in processes of their own
def test_a_stacked_cell_stopped_by_the_deadline_is_evaluated_probed_and_recorded(tmp_path):
    """Two seeds stacked in one process, SIGTERM at the deadline: both checkpoint the same step, then every later
    phase runs on their run directories as on runs trained one by one."""
    out = tmp_path / "out"
    sets = [a for kv in [*TINY, "train.steps=100000"] for a in ("--set", kv)]
    args = ["--out", str(out), "--wave", "hmm/transformer/2", "--stack", "--device", "cpu"]
    args += ["--train-seconds", "15", "--probe-seconds", "3", *sets]
    src = str(Path(windtunnel.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    record = json.loads((out / "gpu_paper_cells.json").read_text())
    assert record["stack"] is True
    names = ["hmm-transformer-s0", "hmm-transformer-s1"]
    assert sorted(record["runs"]) == names
    log = (out / "logs" / "train" / "hmm-transformer-stacked.log").read_text()
    assert "stacked: 2 seeds" in log and "interrupted: SIGTERM" in log
    steps = set()
    for name in names:
        run = record["runs"][name]
        assert run["stacked"] == 2 and run["steps_budget"] == 100000
        assert run["train"]["rc"] == 143 and run["train"]["stopped"] is True, log
        assert run["finished"] is False and run["steps_reached"] == checkpoints.latest_step(out / "runs" / name)
        assert run["eval"]["rc"] == 0 and (out / "runs" / name / "eval.json").is_file()
        assert "probe" in run
        steps.add(run["steps_reached"])
    assert len(steps) == 1 and steps.pop() > 0  # every seed checkpointed the step the signal stopped
    assert (out / "report.md").is_file()
