"""`windtunnel report` on corrupt or hostile run directories: inert Markdown, a sane memorisation verdict, and a
one-line CheckpointError naming the file and field for every value that is not what the report computes with."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from report_runs import METRIC, write_run
from windtunnel.errors import CheckpointError
from windtunnel.report import build_report, tables
from windtunnel.report.collect import RunRecord
from windtunnel.report.document import Document, Table, md_escape

HOSTILE_ARCH = "<img src=x onerror=alert(1)>|x\n| injected | row |"


def unescaped_pipes(line: str) -> int:
    """Cell delimiters of a GFM table row (a backslash-escaped pipe is cell content)."""
    return sum(tok == "|" for tok in re.findall(r"\\.|\|", line))


def assert_tables_intact(md: str) -> None:
    """Every table row has exactly as many cell delimiters as its header."""
    lines = md.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("|") and i + 1 < len(lines) and lines[i + 1].startswith("|---"):
            width = unescaped_pipes(line)
            for row in lines[i + 1 :]:
                if not row.startswith("|"):
                    break
                assert unescaped_pipes(row) == line.count("|") == row.count("|") == width, (line, row)


def test_md_escape_leaves_no_html_and_no_cell_break():
    text = "a<b>&c|d\\|e\r\nf"
    assert md_escape(text) == "a&lt;b&gt;&amp;c|d\\\\|e  f"
    cell = md_escape(text, cell=True)
    assert "|" not in cell and "<" not in cell and "\n" not in cell and "\r" not in cell
    md = Document("t", [Table(["A", "B"], [[text, "x"]])]).markdown(Path("."))
    assert_tables_intact(md)


def test_hostile_names_cannot_inject_html_or_break_tables(tmp_path):
    """A run directory named like a script tag and an arch string carrying an <img> tag, a `|` and a newline."""
    runs_dir = tmp_path / "runs"
    write_run(runs_dir, "<script>alert(1)<\\script>", arch=HOSTILE_ARCH)
    two_evals = {
        "default": {"task_params": {}, "metrics": {"entropy_mae_bits": METRIC}},
        "<b>long</b>|x": {"task_params": {}, "metrics": {"entropy_mae_bits": METRIC}},
    }
    write_run(
        runs_dir, "two-evals", arch="<script>alert(2)</script>", task="<script>alert(3)</script>", evals=two_evals
    )
    curves = {"model_entropy_bits": [1.0, 0.5], "bayes_entropy_bits": [1.0, 0.4]}
    write_run(
        runs_dir,
        "mathtext",
        arch="$\\notacommand{$",
        evals={"default": {"metrics": {"entropy_mae_bits": METRIC}, "per_position": curves}},
    )
    results = build_report([runs_dir], tmp_path / "report")
    assert len(results["runs"]) == 3
    md = (tmp_path / "report" / "report.md").read_text()
    for raw in ("<script", "<img", "<b>", "</script"):
        assert raw not in md
    assert "&lt;script&gt;alert(1)&lt;\\\\script&gt;" in md  # shown, escaped
    assert "&lt;img src=x onerror=alert(1)&gt;&#124;x &#124; injected &#124; row &#124;" in md
    assert "| injected |" not in md
    assert_tables_intact(md)
    html = (tmp_path / "report" / "report.html").read_text()
    assert "<script" not in html and "<img src=x" not in html
    assert (tmp_path / "report" / "figures" / "calibration_bijection.png").is_file()  # `$` is not mathtext
    figures = {p.name for p in (tmp_path / "report" / "figures").iterdir()}  # a task name is no file path
    assert "length_generalisation__script_alert_3___script_.png" in figures
    assert all(p.parent == tmp_path / "report" / "figures" for p in (tmp_path / "report").rglob("*.png"))


def test_memorisation_verdict_both_sides_of_the_hypothesis_count():
    assert tables.memorisation_verdict(6.0, 1000) == "seen fraction 10^-3.0"
    assert tables.memorisation_verdict(3.5, 10_000) == "memorisation possible"
    assert tables.memorisation_verdict(3.0, 1000) == "memorisation possible"  # saw as many as there are
    assert tables.memorisation_verdict(3.0, 0) == "no training"

    def rec(task: str, params: dict, steps: int, batch: int) -> RunRecord:
        return RunRecord(
            path=Path(task),
            task=task,
            arch="transformer",
            seed=0,
            evals={},
            config={"task": {"name": task, "params": params}, "train": {"steps": steps, "batch_size": batch}},
        )

    rows = tables.memorisation_table(  # the count is the task's own, at the parameters each run trained with
        [
            rec("bijection", {"V": 4, "L": 4}, 2000, 4),  # 4! = 24 permutations
            rec("bijection", {}, 10, 10),  # 20! ~ 10^18.4
            rec("regression", {}, 10, 10),
        ]
    )
    verdicts = {row[0]: row[3] for row in rows}
    assert verdicts == {  # labelled by the parameters that differ, defaults filled in
        "bijection (L=4, V=4)": "memorisation possible",
        "bijection (L=19, V=20)": "seen fraction 10^-16.4",
        "regression": "cannot be memorised",
    }
    assert not any("--" in row[3] for row in rows)


def _evals_with(metric: Any = METRIC, **default: Any) -> dict[str, Any]:
    return {"default": {"task_params": {}, "metrics": {"entropy_mae_bits": metric}, **default}}


CORRUPT_EVALS = {  # id -> (eval.json contents, field the error names)
    "mean-string": (_evals_with({"mean": "x", "lo": 0.0, "hi": 0.1}), "default.metrics.entropy_mae_bits.mean"),
    "mean-null": (_evals_with({"mean": None, "lo": 0.0, "hi": 0.1}), "default.metrics.entropy_mae_bits.mean"),
    "mean-list": (_evals_with({"mean": [0.1], "lo": 0.0, "hi": 0.1}), "default.metrics.entropy_mae_bits.mean"),
    "mean-nan": (_evals_with({"mean": math.nan, "lo": 0.0, "hi": 0.1}), "default.metrics.entropy_mae_bits.mean"),
    "hi-inf": (_evals_with({"mean": 0.1, "lo": 0.0, "hi": math.inf}), "default.metrics.entropy_mae_bits.hi"),
    "mean-bool": (_evals_with({"mean": True, "lo": 0.0, "hi": 0.1}), "default.metrics.entropy_mae_bits.mean"),
    "lo-missing": (_evals_with({"mean": 0.1, "hi": 0.1}), "default.metrics.entropy_mae_bits.lo"),
    "metric-list": (_evals_with([0.1, 0.0, 0.2]), "default.metrics.entropy_mae_bits"),
    "metrics-list": ({"default": {"metrics": [1]}}, "default.metrics"),
    "eval-string": ({"default": "x"}, "default"),
    "curve-strings": (
        _evals_with(per_position={"model_entropy_bits": ["a"]}),
        "default.per_position.model_entropy_bits",
    ),
    "approximation-kl": (
        _evals_with(approximations={"last 1 obs": {"kl_from_model_bits": "x", "entropy_mae_bits": 0.1}}),
        "default.approximations.last 1 obs.kl_from_model_bits",
    ),
    "task-param-N": (_evals_with(task_params={"N": "x"}), "default.task_params.N"),
    "task-param-N-zero": (_evals_with(task_params={"N": 0}), "default.task_params.N"),
}


@pytest.mark.parametrize("case", list(CORRUPT_EVALS))
def test_corrupt_eval_values_are_a_checkpoint_error_naming_file_and_field(tmp_path, case):
    evals, field = CORRUPT_EVALS[case]
    run = write_run(tmp_path, "run", evals=evals)
    with pytest.raises(CheckpointError) as err:
        build_report([run], tmp_path / "report")
    msg = str(err.value)
    assert msg.startswith(f"{run / 'eval.json'}: {field}: expected ") and "\n" not in msg
    assert not (tmp_path / "report" / "report.md").exists()


GOOD_CONFIG = {"task": {"name": "bijection", "params": {}}, "model": {"arch": "lstm"}, "train": {"steps": 1}}
CORRUPT_CONFIGS = {
    "no-task": ({"model": {"arch": "lstm"}}, "task"),
    "task-name-number": ({**GOOD_CONFIG, "task": {"name": 3}}, "task.name"),
    "arch-object": ({**GOOD_CONFIG, "model": {"arch": {"x": 1}}}, "model.arch"),
    "steps-string": ({**GOOD_CONFIG, "train": {"steps": "x"}}, "train.steps"),
    "batch-negative": ({**GOOD_CONFIG, "train": {"batch_size": -4}}, "train.batch_size"),
    "seed-float": ({**GOOD_CONFIG, "seed": 0.5}, "seed"),
    "params-list": ({**GOOD_CONFIG, "task": {"name": "recall", "params": [1]}}, "task.params"),
    "N-zero": ({**GOOD_CONFIG, "task": {"name": "recall", "params": {"N": 0}}}, "task.params.N"),
    "score_at-list": ({**GOOD_CONFIG, "task": {"name": "recall", "params": {"score_at": []}}}, "task.params.score_at"),
}


@pytest.mark.parametrize("case", list(CORRUPT_CONFIGS))
def test_corrupt_config_is_a_checkpoint_error_naming_file_and_field(tmp_path, case):
    config, field = CORRUPT_CONFIGS[case]
    run = write_run(tmp_path, "run", config=config)
    with pytest.raises(CheckpointError, match=re.escape(f"{run / 'config.json'}: {field}: expected ")):
        build_report([run], tmp_path / "report")


CORRUPT_METRICS = {  # id -> (metrics.jsonl lines, what the error names after the file)
    "record-list": (['{"step": 1, "elapsed_s": 1.0}', "[1, 2]"], "line 2"),
    "record-string": (['"x"'], "line 1"),
    "record-number": (["3"], "line 1"),
    "step-string": (['{"step": "x", "split": "eval", "entropy_mae_bits": 0.1}'], "line 1"),
    "step-missing": (['{"split": "eval", "entropy_mae_bits": 0.1}'], "line 1"),
    "metric-string": (
        ['{"step": 5, "split": "eval", "entropy_mae_bits": "x", "train_s": 1.0}'],
        "record 1.entropy_mae_bits: expected ",
    ),
    "elapsed-nan": (['{"step": 5, "loss": 1.0}', '{"step": 5, "elapsed_s": NaN}'], "record 2.elapsed_s: expected "),
}


@pytest.mark.parametrize("case", list(CORRUPT_METRICS))
def test_corrupt_metrics_records_are_a_checkpoint_error_naming_file_and_record(tmp_path, case):
    """Records that are not objects or lack a step are refused by rundir.read_metrics; fields the report computes with
    by the report."""
    lines, where = CORRUPT_METRICS[case]
    run = write_run(tmp_path, "run", metrics_lines=lines)
    with pytest.raises(CheckpointError, match=re.escape(f"{run / 'metrics.jsonl'}: {where}")):
        build_report([run], tmp_path / "report")


@pytest.mark.parametrize("name", ["config.json", "eval.json", "geometry.json"])
def test_a_run_file_that_is_not_a_json_object_is_a_checkpoint_error(tmp_path, name):
    run = write_run(tmp_path, "run")
    (run / name).write_text("[1, 2]")
    with pytest.raises(CheckpointError, match=re.escape(f"{run / name}") + ".*expected a JSON object"):
        build_report([run], tmp_path / "report")


def test_legitimate_gaps_still_build(tmp_path):
    """Null metrics (accuracy is undefined for real answers), NaN in per-position curves (positions with no data),
    null metric values in training-time evaluations and garbled geometry numbers are not errors."""
    evals = _evals_with(
        per_position={"model_entropy_bits": [1.0, math.nan], "bayes_entropy_bits": [1.0, 0.5], "accuracy": None}
    )
    evals["default"]["metrics"]["accuracy"] = None
    lines = [
        '{"step": 5, "loss": 1.0, "train_s": 0.5, "elapsed_s": 0.6}',
        '{"step": 5, "split": "eval", "entropy_mae_bits": 0.2, "accuracy": null, "train_s": 0.5}',
        '{"step": 10, "split": "eval", "entropy_mae_bits": 0.04, "accuracy": null, "train_s": 1.0}',
    ]
    run = write_run(tmp_path, "run", evals=evals, metrics_lines=lines)
    (run / "geometry.json").write_text(
        json.dumps(
            {
                "keys": {
                    "gaussian_baseline": "x",
                    "authors_signed_mean_cos_per_layer": [0.1],
                    "authors_gaussian_baseline": {"mean": "?"},
                },
                "lens": {"kl_bits_per_layer": ["a", 0.5]},
            }
        )
    )
    results = build_report([run], tmp_path / "report")
    assert results["runs"][0]["wall_s"] == 0.6
    md = (tmp_path / "report" / "report.md").read_text()
    assert "0.100 / — / — ± —" in md and "— → 0.500" in md
