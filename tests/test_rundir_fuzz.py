"""Fuzz: damage one file of a run directory (truncate, flip a bit, delete, insert garbage), then run eval, probe,
report or --resume. Every outcome is exit 0 with a correct result, or exit 1/2 with one line: never a traceback,
never an "internal error", and never a wrong number computed from damaged weights."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from cli_args import TINY
from windtunnel.cli import app

runner = CliRunner()
TRAIN = ["train", "--task", "bijection", "--arch", "transformer", *TINY]
TRAIN += ["--set", "train.eval_every=1", "--set", "train.checkpoint_every=1"]
FILES = [
    "config.json",
    "metrics.jsonl",
    "eval.json",
    "checkpoints/latest.json",
    "checkpoints/step_00000002.safetensors",
    "checkpoints/step_00000002.state.json",
    "checkpoints/step_00000002.state.safetensors",
    "checkpoints/step_00000001.safetensors",
]
WEIGHTS = {
    "checkpoints/latest.json",
    "checkpoints/step_00000002.safetensors",
    "checkpoints/step_00000002.state.json",
}  # what `eval` computes its numbers from


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> tuple[Path, dict]:
    """A 2-step run with a checkpoint per step, and its evaluation."""
    run = tmp_path_factory.mktemp("fuzz") / "run"
    r = runner.invoke(app, [*TRAIN, "--steps", "2", "--out", str(run)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["eval", str(run), "--json"])
    assert r.exit_code == 0, r.output
    return run, json.loads(r.stdout)  # stderr: where it was written


def _damage(path: Path, how: str, data: st.DataObject) -> None:
    raw = path.read_bytes()
    if how == "delete":
        path.unlink()
    elif how == "truncate":
        path.write_bytes(raw[: data.draw(st.integers(0, max(0, len(raw) - 1)), label="keep")])
    elif how == "bitflip":
        bit = data.draw(st.integers(0, len(raw) * 8 - 1), label="bit")
        b = bytearray(raw)
        b[bit // 8] ^= 1 << (bit % 8)
        path.write_bytes(bytes(b))
    else:  # garbage inserted at a random place
        at = data.draw(st.integers(0, len(raw)), label="at")
        junk = data.draw(st.binary(min_size=1, max_size=32), label="junk")
        path.write_bytes(raw[:at] + junk + raw[at:])


@settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    file=st.sampled_from(FILES),
    how=st.sampled_from(["truncate", "bitflip", "delete", "garbage"]),
    command=st.sampled_from(["eval", "probe", "report", "resume"]),
    data=st.data(),
)
def test_damaged_run_directory_never_gives_a_traceback(pristine, tmp_path_factory, file, how, command, data):
    source, expected = pristine
    run = tmp_path_factory.mktemp("case") / "run"
    shutil.copytree(source, run)
    _damage(run / file, how, data)
    args = {
        "eval": ["eval", str(run), "--json"],
        "probe": ["probe", str(run), "--n", "4", "--no-figures"],
        "report": ["report", str(run), "--out", str(run.parent / "report")],
        "resume": [*TRAIN, "--steps", "3", "--out", str(run), "--resume"],
    }[command]
    r = runner.invoke(app, args)
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert r.exit_code in (0, 1, 2), r.output
    assert "Traceback" not in r.output and "internal error" not in r.output, r.output
    if r.exit_code != 0:
        errors = [ln for ln in r.output.splitlines() if ln.startswith("error: ")]
        assert len(errors) == 1 and r.output.strip().splitlines()[-1] == errors[0], r.output
    elif command == "eval" and file in WEIGHTS:  # damaged weights either fail or were not used: same numbers
        got = json.loads(r.stdout[r.stdout.index("{") :])
        assert got["default"]["metrics"] == expected["default"]["metrics"]
