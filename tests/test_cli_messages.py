"""What the CLI says ("say what is happening"): eval's named columns and closest posterior, discrete
colours for discrete states, no `-0.000`, probe's "not reached", "does not exist" for a missing path, `--version`,
and "did you mean" for a mistyped key, task or architecture."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

import windtunnel
from windtunnel import models, tasks
from windtunnel.cli import app
from windtunnel.cli.probe_cmd import _summary
from windtunnel.geometry import figures
from windtunnel.geometry.data import collect
from windtunnel.text import did_you_mean, number

runner = CliRunner()
NEGATIVE_ZERO = re.compile(r"-0\.0+(?![0-9])|-0(?![.0-9e])")


def _one_error(result, code: int = 2) -> str:
    assert result.exit_code == code, result.output
    lines = [ln for ln in result.output.splitlines() if ln.startswith("error:")]  # (train may warn first)
    assert len(lines) == 1 and "Traceback" not in result.output and "internal error" not in result.output, result.output
    return lines[0]


@pytest.fixture(scope="module")
def hmm_runs(tmp_path_factory):
    """The oracle and the uniform baseline on the HMM (no training): {"oracle": run_dir, "uniform": run_dir}."""
    tmp = tmp_path_factory.mktemp("hmm")
    out = {}
    for arch in ("oracle", "uniform"):
        out[arch] = tmp / arch
        args = ["train", "--task", "hmm", "--arch", arch, "--out", str(out[arch]), "--no-progress"]
        r = runner.invoke(app, [*args, "--set", "eval.n=16"])
        assert r.exit_code == 0, r.output
    return out


# --- eval: every column named, the closest posterior shown ------------------------------------------------------


def test_eval_names_both_entropy_columns_and_says_what_each_is(hmm_runs):
    r = runner.invoke(app, ["eval", str(hmm_runs["uniform"]), "--n", "16"])
    assert r.exit_code == 0, r.output
    header = r.output.splitlines()[0]
    assert "entropy error, per position" in header and "entropy error, mean curve" in header
    assert "KL(exact ‖ model)" in header and "accuracy" in header
    assert "entropy_mae_bits" not in header  # a title, not a bare key ...
    # ... and below the table, each title with its eval.json key and its definition
    assert re.search(r"entropy error, per position\s+entropy_mae_bits: \|H_model - H_exact\|", r.output)
    assert re.search(r"entropy error, mean curve\s+entropy_mae_curve_bits: \|mean H_model - mean H_exact\|", r.output)


def test_eval_shows_the_closest_posterior_and_by_how_much(hmm_runs):
    r = runner.invoke(app, ["eval", str(hmm_runs["oracle"]), "--n", "16"])
    assert r.exit_code == 0, r.output
    line = next(ln for ln in r.output.splitlines() if "KL-nearest reference" in ln)
    assert re.search(r"KL-nearest reference: exact, KL\(exact ‖ model\) 0\.0000 bits; next: last \d+ obs, ", line)
    assert "bits further" in line
    # the uniform predictor is no better than the context-blind reference: said, with the nearest one anyway
    r = runner.invoke(app, ["eval", str(hmm_runs["uniform"]), "--n", "16"])
    line = next(ln for ln in r.output.splitlines() if "KL-nearest reference" in ln)
    assert line.strip().startswith("KL-nearest reference: none: no better than context-blind (nearest: ")
    assert "KL(context-blind ‖ model)" in line or "KL(exact ‖ model)" in line
    got = json.loads(runner.invoke(app, ["eval", str(hmm_runs["uniform"]), "--n", "16", "--json"]).stdout)
    assert got["default"]["closest"]["name"] in line


# --- the state-cluster figure: one colour per state and a legend, no colour bar ---------------------------------


def test_state_cluster_figure_has_a_legend_of_discrete_states(monkeypatch, tmp_path):
    task = tasks.make("hmm")
    torch.manual_seed(0)
    data = collect(models.make("mamba", task.spec, n_layers=1, d_model=8), task, n=8)
    drawn = {}
    monkeypatch.setattr(figures, "_save", lambda fig, path: drawn.setdefault("fig", fig) and path)
    figures.cluster_scatter(data, tmp_path / "state_clusters.png")
    fig = drawn["fig"]
    assert len(fig.axes) == 1  # a colour bar would be a second axes
    legend = fig.axes[0].get_legend()
    assert legend is not None and legend.get_title().get_text() == "MAP state"
    labels = [t.get_text() for t in legend.get_texts()]
    states = np.unique(data.batch.posterior.probs.argmax(-1)[data.mask].cpu().numpy())
    assert labels == [str(int(s)) for s in states]
    colours = {tuple(c.get_facecolor()[0]) for c in fig.axes[0].collections}
    assert len(colours) == len(labels)  # distinct colours
    assert len(figures.state_colours(25)) == len({tuple(c) for c in figures.state_colours(25)}) == 25


def test_training_curves_are_a_panel_per_configuration_in_its_architectures_colour(monkeypatch, tmp_path):
    """Two configurations (an lr sweep) and two seeds of each of two architectures: a panel per configuration (never
    one legend entry pooling them), its seeds labelled, every line in its architecture's colour."""
    from windtunnel.report import figures as report_figures
    from windtunnel.report.collect import RunRecord

    def record(arch: str, seed: int, lr: float) -> RunRecord:
        curve = [{"split": "eval", "step": s, "entropy_mae_bits": 1.0 / s} for s in (1, 2, 4)]
        cfg = {"task": {"name": "hmm"}, "model": {"arch": arch}, "train": {"lr": lr}, "seed": seed}
        return RunRecord(tmp_path / f"{arch}-{lr}-{seed}", "hmm", arch, seed, cfg, {}, curve)

    runs = [record(a, s, lr) for a in ("gru", "lstm") for lr in (1e-3, 3e-3) for s in (0, 1)]
    drawn = {}
    monkeypatch.setattr(report_figures, "_save", lambda fig, path: drawn.setdefault("fig", fig) and path)
    report_figures.training_curves_figure(runs, tmp_path)
    panels = [ax for ax in drawn["fig"].axes if ax.get_visible()]
    assert sorted(ax.get_title() for ax in panels) == [
        f"hmm · {a} (train.lr={lr})" for a in ("gru", "lstm") for lr in ("0.001", "0.003")
    ]
    for ax in panels:
        handles, labels = ax.get_legend_handles_labels()
        assert labels == ["seed 0", "seed 1"]
        arch = ax.get_title().split(" · ")[1].split(" ")[0]
        assert {h.get_color() for h in handles} == {report_figures.arch_color(arch)}


# --- no -0.000 ---------------------------------------------------------------------------------------------------


def test_a_number_that_rounds_to_zero_has_no_sign():
    assert number(-0.0) == "0.000" and number(-1e-9) == "0.000" and number(-0.0004, ".3f") == "0.000"
    assert number(-0.2) == "-0.200" and number(-1e-9, ".4g") == "-1e-09" and number(-0.0, ".4g") == "0"
    assert number(-0.0, "+.4g") == "+0" and number(float("nan")) == "nan" and number(-0.0, ".1e") == "0.0e+00"


def test_tasks_show_prints_no_negative_zero():
    r = runner.invoke(app, ["tasks", "show", "recall"])  # recall's posterior is certain: H = -0.0 before rounding
    assert r.exit_code == 0, r.output
    assert "H=0.000" in r.output and not NEGATIVE_ZERO.search(r.output), r.output


def test_shared_table_formatters_print_no_negative_zero():
    from windtunnel.progress import format_val
    from windtunnel.report.formatting import fmt

    assert fmt(-0.0, "entropy_mae_bits") == "0.000" and fmt(-0.0, "accuracy") == "0.0%"
    assert format_val(-0.0, "kl_bits") == "0.0000" and format_val(-0.0, "accuracy") == "0.0%"


# --- probe: never "at step None" ---------------------------------------------------------------------------------


def _probed(**dynamics) -> dict:
    """A probe result with only the frame-precision dynamics applied."""
    skipped = {p: {"not_applicable": "not probed"} for p in ("keys", "attention", "manifold", "clusters", "lens")}
    return {
        "arch": "transformer",
        "task": "hmm",
        "step": 8,
        "entropy_error_bits": 0.25,
        **skipped,
        "dynamics": dynamics,
    }


def _dynamics_line(result: dict) -> str:
    (line,) = [ln for ln in _summary({**result, "ablation": {"not_applicable": "not probed"}}) if "dynamics" in ln]
    return line


def test_probe_summary_says_not_reached_instead_of_step_none():
    rows = [{"step": 2}, {"step": 4}, {"step": 8}]
    line = _dynamics_line(_probed(checkpoints=rows, frame_step_90=None, precision_step_2x=4))
    assert "None" not in line
    assert "frame 90% not reached" in line and "(step 8)" in line and "error within 2x at step 4" in line
    line = _dynamics_line(_probed(checkpoints=rows, frame_step_90=2, precision_step_2x=None))
    assert "frame 90% at step 2" in line and "error within 2x not reached" in line and "(step 8)" in line
    no_attention = _probed(checkpoints=rows, precision_step_2x=8, frame={"not_applicable": "no attention weights"})
    line = _dynamics_line(no_attention)
    assert "frame n/a" in line and "no attention weights" in line and "error within 2x at step 8" in line


# --- a missing path: "does not exist", exit 2, one line ---------------------------------------------------------


@pytest.mark.parametrize("command", ["eval", "probe", "report"])
def test_a_missing_path_does_not_exist(command, tmp_path):
    missing = tmp_path / "nope"
    line = _one_error(runner.invoke(app, [command, str(missing)]))
    assert "does not exist" in line and "nope" in line and "not a run directory" not in line


@pytest.mark.parametrize("command", ["eval", "probe"])
def test_a_folder_without_config_is_not_a_run_directory(command, tmp_path):
    (tmp_path / "empty").mkdir()
    line = _one_error(runner.invoke(app, [command, str(tmp_path / "empty")]))
    assert "is not a run directory (no config.json)" in line
    (tmp_path / "afile").write_text("x")
    assert "is a file" in _one_error(runner.invoke(app, [command, str(tmp_path / "afile")]))


# --- --version ---------------------------------------------------------------------------------------------------


def test_version():
    r = runner.invoke(app, ["--version"])
    assert r.exit_code == 0, r.output
    assert r.output.strip() == f"windtunnel {windtunnel.__version__} (torch {torch.__version__})"


# --- did you mean ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--set", "model.sise.d_model=32"], "model.sise: Extra inputs are not permitted (did you mean 'size'?)"),
        (["--set", "train.lrr=0.01"], "train.lrr: Extra inputs are not permitted (got 0.01; did you mean 'lr'?)"),
        (["--set", "model.d_modle=32"], "model.size.d_modle: Extra inputs are not permitted (got 32; did you mean "),
        (["--set", "task.VV=5"], "bijection.VV: Extra inputs are not permitted (got 5; did you mean 'V'?)"),
        (["--task", "bijektion"], "task: unknown task 'bijektion' (did you mean 'bijection'?); choose one of"),
        (["--arch", "transfomer"], "arch: unknown architecture 'transfomer' (did you mean 'transformer'?)"),
        (["--arch", "orcale"], "(did you mean 'oracle'?)"),
    ],
)
def test_did_you_mean(tmp_path, args, words):
    r = runner.invoke(app, ["train", "--out", str(tmp_path / "r"), "--no-progress", "--preset", "smoke", *args])
    line = _one_error(r)
    assert words in line, line


def test_did_you_mean_for_a_yaml_key(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("trian:\n  lr: 1.0e-3\nmodel:\n  arch: transformer\n  prest: smoke\n")
    line = _one_error(runner.invoke(app, ["train", "--config", str(config), "--out", str(tmp_path / "r")]))
    assert re.search(r"\btrian: [^;]*'train'", line)  # the key, then its suggestion before the next key's
    assert "model.prest: " in line and "got 'smoke'" in line and "'preset'" in line


def test_no_suggestion_when_nothing_is_close(tmp_path):
    line = _one_error(runner.invoke(app, ["train", "--out", str(tmp_path / "r"), "--task", "zzzz"]))
    assert "did you mean" not in line and "unknown task 'zzzz'; choose one of" in line
    assert did_you_mean("zzzz", ["bijection", "hmm"]) == "" and did_you_mean(3, ["a"]) == ""


def test_did_you_mean_in_reproduce_only_filter():
    from windtunnel.suites.paper import _check_only

    with pytest.raises(ValueError, match="'transfomer' ") as err:
        _check_only({"arch": "transfomer"})
    assert "'transformer'" in str(err.value)  # the suggestion
