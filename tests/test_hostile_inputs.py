"""Hostile inputs (second pass): a plugin task whose posterior is not a distribution, a checkpoint of NaN
weights, trackers that would hang or half-make a run, Ctrl-C while the CLI starts, a plugin that calls sys.exit on
import, a YAML alias bomb, and a curriculum stage longer than the run. Each is one line naming what is wrong, with
the documented exit code, and nothing made or deleted."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.distributions import Categorical
from typer.testing import CliRunner

from cli_args import train_args
from windtunnel import plugins, runs, seeds, tasks
from windtunnel.cli import app
from windtunnel.config import MAX_FILE_BYTES, MAX_NODES, read_file
from windtunnel.evaluation.evaluate import score_predictor
from windtunnel.runs import checkpoints
from windtunnel.seeds import DRAW_BLOCK
from windtunnel.store import rundir
from windtunnel.suites.paper import suite
from windtunnel.training import tracking
from windtunnel.training.recipes import get_recipe

runner = CliRunner()


def _one_error(r, *fragments: str, code: int) -> str:
    """The one `error:` line of a refused command, which must contain each fragment; no traceback."""
    assert r.exit_code == code, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.output
    assert "Traceback" not in r.output and "internal error" not in r.output
    for f in fragments:
        assert f in lines[0], lines[0]
    return lines[0]


# --- a plugin task's posterior is checked where it enters -----------------------------------------------------

BROKEN_TASK = '''
import torch
from torch.distributions import Categorical, Normal

from windtunnel import tasks
from windtunnel.tasks import Batch, Task, TaskParams, TaskSpec


class BrokenParams(TaskParams):
    n: int = 6
    fault: str = "none"


class Broken(Task[BrokenParams]):
    """A fair coin whose posterior is broken at position 3 as `fault` says: in every sequence, or for "late" in every
    sequence of the fourth batch it samples and after, or for "rare" in the sequences whose flips 3 to 11 are heads (1
    in 512)."""

    name, Params = "wt_broken", BrokenParams

    def __init__(self, **params):
        super().__init__(**params)
        self.batches = 0

    @property
    def spec(self):
        real = self.params.fault == "scale"
        return TaskSpec(
            "wt_broken", "tokens", "real" if real else "classes", seq_len=self.params.n, vocab_size=3,
            n_classes=None if real else 2,
        )

    def _sample(self, batch_size, g, device):
        n, fault = self.params.n, self.params.fault
        flips = (torch.rand(batch_size, n, generator=g, device=device) < 0.5).long()
        inputs = torch.cat([torch.full_like(flips[:, :1], 2), flips[:, :-1]], dim=1)
        mask = torch.ones(batch_size, n, dtype=torch.bool, device=device)
        if fault == "scale":
            scale = torch.ones(batch_size, n, device=device)
            scale[:, 3] = 0.0
            return Batch(inputs, mask, flips.float(), Normal(torch.zeros_like(scale), scale, validate_args=False))
        probs = torch.full((batch_size, n, 2), 0.5, device=device)
        self.batches += 1
        if fault == "negative" or (fault == "late" and self.batches >= 4):
            probs[:, 3] = torch.tensor([1.5, -0.5])
        if fault == "rare":
            probs[flips[:, 2:11].all(1), 3] = torch.tensor([1.5, -0.5])
        if fault == "given":  # torch normalises what it is given: the sum it was given is checked
            probs[:, 3] = torch.tensor([1.0, 0.5])
        if fault == "nan":
            probs[:, 3, 0] = float("nan")
        post = Categorical(probs=probs, validate_args=False)
        if fault == "sum":  # torch normalises what it is given; a plugin can still store another
            post.probs = torch.cat([probs[:, :3], probs[:, 3:4] * 1.5, probs[:, 4:]], dim=1)
        return Batch(inputs, mask, flips, post)


tasks.register("wt_broken", Broken)
'''

FAULTS = {
    "sum": "must sum to 1 within 1e-04 (its sum: 1.5)",
    "given": "must sum to 1 within 1e-04 (its sum: 1.5); torch's Categorical normalises the probabilities it is given",
    "negative": "must hold no negative probability (its least: -0.5)",
    "nan": "must hold finite probabilities (no NaN or inf)",
    "scale": "must have a positive, finite scale (its scale: 0)",
}


# A two-step smoke run of a task without parameters of its own, on the CPU.
PLAIN = ["--preset", "smoke", "--no-progress", "--steps", "2"] + [
    a for kv in ("train.batch_size=4", "eval.n=8", "train.device=cpu") for a in ("--set", kv)
]


@pytest.fixture
def broken_task(tmp_path, monkeypatch):
    """The module `wt_broken_task` in the current directory (for `--import`); forgotten again after."""
    (tmp_path / "wt_broken_task.py").write_text(BROKEN_TASK)
    monkeypatch.chdir(tmp_path)
    yield "wt_broken_task"
    tasks.registry.unregister("wt_broken")
    sys.modules.pop("wt_broken_task", None)


@pytest.mark.parametrize("fault", list(FAULTS))
@pytest.mark.parametrize("arch", ["oracle", "transformer"])
def test_a_plugin_posterior_that_is_no_distribution_is_refused_before_training(broken_task, tmp_path, fault, arch):
    out = tmp_path / "run"
    args = ["train", "--import", broken_task, "--task", "wt_broken", "--arch", arch, "--out", str(out), *PLAIN]
    r = runner.invoke(app, [*args, "--set", f"task.fault={fault}"])
    _one_error(r, "task 'wt_broken': its posterior at position 3 of sequence 0", FAULTS[fault], code=2)
    assert not out.exists()  # refused before the run directory was made
    r = runner.invoke(app, args)  # the same task with its posterior intact trains
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("fault", list(FAULTS))
def test_evaluation_checks_the_posterior_of_its_first_batch(broken_task, fault):
    plugins.import_plugins([broken_task])
    task = tasks.make("wt_broken", fault=fault)
    where = "" if fault == "given" else " in test block 0"  # `given` is refused as it is sampled
    with pytest.raises(ValueError, match="^task 'wt_broken': ") as err:
        score_predictor(task, lambda batch: batch.posterior, n=8, n_boot=10)
    assert where in str(err.value) and "position 3 of sequence 0" in str(err.value)
    assert score_predictor(tasks.make("wt_broken"), lambda b: b.posterior, n=8, n_boot=10)["metrics_point"][
        "entropy_mae_bits"
    ] == pytest.approx(0.0)


def test_every_batch_trained_on_is_checked_not_only_the_first(broken_task, tmp_path):
    """A posterior that breaks only from the fourth batch sampled passes the check before training (the first
    batch) and is refused at the step that trains on it (the third: the check before training sampled one)."""
    out = tmp_path / "run"
    args = ["train", "--import", broken_task, "--task", "wt_broken", "--arch", "transformer", "--out", str(out)]
    r = runner.invoke(app, [*args, *PLAIN, "--steps", "5", "--set", "task.fault=late"])
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    (line,) = [ln for ln in r.output.splitlines() if ln.startswith("error: ")]  # after the line saying what trains
    assert "task 'wt_broken': " in line and "step 3" in line and "position 3" in line
    assert FAULTS["negative"] in line
    assert checkpoints.latest_step(out) is None  # nothing was trained on it


def test_every_batch_scored_is_checked_so_a_posterior_broken_in_one_sequence_of_512_is_named(broken_task):
    """1 sequence in 512 with a negative probability: none in the first block of the test stream, so a check of the
    first block alone scored the oracle 0 and a uniform predictor a garbage KL; every block is checked now."""
    plugins.import_plugins([broken_task])
    task = tasks.make("wt_broken", fault="rare", n=12)
    first = task.sample(DRAW_BLOCK, seed=seeds.stream_seed("test", 0, 0))
    assert not bool(first.inputs[:, 3:12].eq(1).all(1).any())  # the first block is sound: the old check passed
    named = r"its posterior in test block [1-9]\d* at position 3 of sequence \d+ must hold no negative probability"
    for predict in (lambda b: b.posterior, lambda b: Categorical(logits=torch.zeros(*b.target_mask.shape, 2))):
        with pytest.raises(ValueError, match=named):
            score_predictor(task, predict, n=2000, n_boot=10)


def test_a_posterior_given_to_torch_unnormalised_is_refused_where_it_is_sampled(broken_task):
    """`Categorical(probs=p)` keeps p / p.sum(): the sum a plugin computed is noted as it builds its posterior, and
    the note is taken only while a task samples (torch's constructor is its own again afterwards, on every thread)."""
    plugins.import_plugins([broken_task])
    init = torch.distributions.Categorical.__init__
    with pytest.raises(ValueError, match=re.escape(f"its posterior at position 3 of sequence 0 {FAULTS['given']}")):
        tasks.make("wt_broken", fault="given").sample(4, seed=0)
    assert torch.distributions.Categorical.__init__ is init
    assert torch.distributions.Categorical(probs=torch.tensor([1.0, 0.5])).probs.sum() == pytest.approx(1.0)
    built = tasks.make("wt_broken").sample(4, seed=0)  # a sound one samples as before
    tasks.check_posterior("wt_broken", built)


def test_a_posterior_of_the_wrong_shape_or_kind_is_named():
    batch = tasks.make("bijection", V=5, L=4).sample(3, seed=0)
    batch.posterior = torch.distributions.Categorical(probs=batch.posterior.probs[:, :-1])
    with pytest.raises(ValueError, match=r"^task 'b': .*batch shape \(3, \d+\)"):
        tasks.check_posterior("b", batch)
    batch.posterior = torch.distributions.Uniform(torch.zeros(3, batch.seq_len), 1.0)
    with pytest.raises(ValueError, match=r"^task 'b': .*Uniform.*Categorical"):
        tasks.check_posterior("b", batch)


def test_every_built_in_task_passes_the_posterior_check():
    configs = {json.dumps(e.config["task"], sort_keys=True) for e in suite("smoke")}
    checked = set()
    for text in sorted(configs):
        task_cfg = json.loads(text)
        name = task_cfg.get("name", "bijection")
        task = tasks.make(name, **task_cfg.get("params", {}))
        for seed in range(3):
            tasks.check_posterior(name, task.sample(32, seed=seed))
        checked.add(name)
    for name in tasks.names():  # and at the paper's settings
        tasks.check_posterior(name, tasks.make(name).sample(8, seed=0))
    assert checked >= {"bijection", "hmm", "recall", "regression"}


# --- NaN weights are refused where they are loaded ------------------------------------------------------------


def test_nan_weights_written_with_their_checksums_are_refused_naming_the_weight(tmp_path):
    out = tmp_path / "run"
    assert runner.invoke(app, train_args(out)).exit_code == 0
    model = runs.load_run(out).model
    name, weight = next(iter(model.state_dict().items()))
    with torch.no_grad():
        weight.view(-1)[0] = float("nan")
    step = checkpoints.latest_step(out)
    checkpoints.save_checkpoint(out, step, model)  # consistent with its checksums
    line = _one_error(runner.invoke(app, ["eval", str(out)]), str(out), f"weight {name!r} holds NaN", code=1)
    assert f"checkpoint of step {step}" in line


def test_finite_weights_whose_outputs_are_not_finite_are_named_not_scored(tmp_path):
    """Weights of 3e38, finite and written with their checksums, overflow to NaN outputs: eval names the run, the
    checkpoint and the first position, exit 1, and writes nothing; before, eval.json had a finite entropy error."""
    out = tmp_path / "run"
    assert runner.invoke(app, train_args(out)).exit_code == 0
    model = runs.load_run(out).model
    with torch.no_grad():
        for weight in model.parameters():
            weight.fill_(3e38)
    step = checkpoints.latest_step(out)
    checkpoints.save_checkpoint(out, step, model)
    before = (out / rundir.EVAL).read_bytes()
    for args in (["eval", str(out)], ["eval", str(out), "--n", "16"]):
        line = _one_error(runner.invoke(app, args), f"{out}: checkpoint of step {step}", code=1)
        assert "not finite" in line and "NaN at position" in line
    assert (out / rundir.EVAL).read_bytes() == before and not (out / rundir.EVALS).exists()


# --- trackers never hang or half-make a run -------------------------------------------------------------------


def _wandb_env(tmp_path: Path, mode: str) -> dict[str, str]:
    """wandb in `mode` with every file it reads or writes in tmp_path: no key, no netrc, no settings of this machine."""
    home = tmp_path / "wandb-home"
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_") and k != "NETRC"}
    return {
        **env,
        "WANDB_MODE": mode,
        "WANDB_SILENT": "true",
        "WANDB_DIR": str(home / "dir"),
        "WANDB_CONFIG_DIR": str(home / "config"),
        "WANDB_CACHE_DIR": str(home / "cache"),
        "WANDB_DATA_DIR": str(home / "data"),
        "NETRC": str(home / "netrc"),
    }


@pytest.fixture
def wandb_env(tmp_path, monkeypatch):
    """Set `mode` (and the hermetic rest of `_wandb_env`) in this process, wandb's settings read afresh."""
    wandb = pytest.importorskip("wandb")

    def use(mode: str) -> None:
        for k in [k for k in os.environ if k.startswith("WANDB_") or k == "NETRC"]:
            monkeypatch.delenv(k)
        for k, v in _wandb_env(tmp_path, mode).items():
            if k.startswith("WANDB_") or k == "NETRC":
                monkeypatch.setenv(k, v)
        wandb.teardown()  # the settings another test's environment left

    yield use
    wandb.teardown()


def _finished_run(tmp_path: Path) -> Path:
    out = tmp_path / "run"
    assert runner.invoke(app, train_args(out)).exit_code == 0
    assert (out / rundir.EVAL).is_file()
    return out


def test_a_fifo_as_the_wandb_run_id_never_hangs_a_resume_nor_deletes_eval_json(tmp_path):
    pytest.importorskip("wandb")
    out = _finished_run(tmp_path)
    (out / tracking.WANDB_DIR).mkdir()
    fifo = out / tracking.WANDB_DIR / "windtunnel-run-id"
    os.mkfifo(fifo)
    cmd = [sys.executable, "-c", "from windtunnel.cli import main; main()"]
    args = ["train", "--resume", str(out), "--logger", "wandb", "--steps", "4", "--no-progress"]
    done = subprocess.run(
        [*cmd, *args], env=_wandb_env(tmp_path, "offline"), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 1, done.stderr
    (line,) = done.stderr.strip().splitlines()  # one line, nothing else on stderr
    assert line.startswith(f"error: {fifo}") and "not a regular file" in line
    assert (out / rundir.EVAL).is_file()  # refused before the run directory was touched


def test_a_stored_wandb_id_that_wandb_would_refuse_is_named_before_anything_is_deleted(tmp_path, wandb_env):
    wandb_env("offline")
    out = _finished_run(tmp_path)
    (out / tracking.WANDB_DIR).mkdir()
    (out / tracking.WANDB_DIR / "windtunnel-run-id").write_text("abc/def\n")
    r = runner.invoke(app, ["train", "--resume", str(out), "--logger", "wandb", "--steps", "4", "--no-progress"])
    line = _one_error(r, "windtunnel-run-id: holds a string of 7 characters, not a wandb run id", code=1)
    assert "abc" not in line  # what the file holds is never echoed
    assert (out / rundir.EVAL).is_file()


def test_wandb_online_without_an_api_key_is_refused_before_the_run_directory_exists(tmp_path, wandb_env):
    wandb_env("online")
    out = tmp_path / "run"
    r = runner.invoke(app, train_args(out, "--logger", "wandb"))
    _one_error(r, "train.loggers: wandb logs online here", "no API key", "WANDB_MODE=offline", code=2)
    assert not out.exists()
    done = _finished_run(tmp_path / "b")  # nor does a resume delete anything of the run
    r = runner.invoke(app, ["train", "--resume", str(done), "--logger", "wandb", "--steps", "4", "--no-progress"])
    _one_error(r, "no API key", code=2)
    assert (done / rundir.EVAL).is_file()


def test_a_wandb_project_that_wandb_refuses_is_one_line_before_the_run_directory_exists(
    tmp_path, wandb_env, monkeypatch
):
    wandb_env("offline")
    monkeypatch.setenv("WANDB_PROJECT", "my/project")
    out = tmp_path / "run"
    r = runner.invoke(app, train_args(out, "--logger", "wandb"))
    _one_error(r, "train.loggers: wandb:", "'my/project'", code=2)
    assert not out.exists()


# --- Ctrl-C while the command line starts ---------------------------------------------------------------------


def test_ctrl_c_while_the_cli_imports_torch_exits_130_without_a_traceback(tmp_path):
    script = Path(sys.executable).parent / "windtunnel"
    if not script.is_file():
        pytest.skip("the windtunnel console script is not installed beside this Python")
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}  # each import's line on stderr as it completes
    proc = subprocess.Popen(
        [str(script), "tasks"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        # as from a shell: SIGINT at its default (a test earlier in the session may leave it ignored in this process,
        # and an ignored SIGINT is inherited and, rightly, kept ignored by the command)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    seen = []
    assert proc.stderr is not None
    for line in proc.stderr:
        seen.append(line)
        if line.rstrip().endswith("torch.version"):  # torch is being imported: seconds to go
            proc.send_signal(signal.SIGINT)
            break
    out, err = proc.communicate(timeout=120)
    rest = [ln for ln in err.splitlines() if not ln.startswith("import time:")]
    assert any("torch.version" in ln for ln in seen), "torch was never imported"
    assert proc.returncode == 130, (proc.returncode, rest)
    assert rest == [] and out == ""  # quiet: no traceback, no partial listing


# --- a plugin that exits on import ------------------------------------------------------------------------------


def test_a_plugin_calling_sys_exit_on_import_is_one_line_naming_it(tmp_path, monkeypatch):
    (tmp_path / "wt_exiting_plugin.py").write_text("import sys\nsys.exit(0)\n")
    monkeypatch.chdir(tmp_path)
    try:
        r = runner.invoke(app, ["tasks", "--import", "wt_exiting_plugin"])
        _one_error(r, "--import wt_exiting_plugin: importing it called sys.exit(0)", code=2)
        site = tmp_path / "site"  # installed: what --trust-code and import-string architectures import
        site.mkdir()
        (site / "wt_exiting_installed.py").write_text("import sys\nsys.exit(3)\n")
        monkeypatch.syspath_prepend(str(site))
        with pytest.raises(plugins.PluginError, match="^imports: wt_exiting_installed: ") as err:
            plugins.require(["wt_exiting_installed"], trust_code=True, where="imports")
        assert "sys.exit(3)" in str(err.value)
    finally:
        sys.modules.pop("wt_exiting_plugin", None)
        sys.modules.pop("wt_exiting_installed", None)


# --- YAML bombs and huge files ----------------------------------------------------------------------------------

BOMB = "".join(
    f"{k}: &{k} [{', '.join([f'*{p}'] * 9) if p else ', '.join(['lol'] * 9)}]\n"
    for p, k in zip(["", "a", "b", "c", "d", "e", "f"], ["a", "b", "c", "d", "e", "f", "g"], strict=True)
)


def test_a_yaml_alias_bomb_is_refused_in_one_short_line_naming_the_file(tmp_path):
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(BOMB)  # 9^7 = 4.8 million values from 300 bytes
    with pytest.raises(ValueError, match=f"more than {MAX_NODES} values") as err:
        get_recipe(bomb)
    assert str(bomb) in str(err.value) and "alias" in str(err.value) and len(str(err.value)) < 500
    line = _one_error(runner.invoke(app, ["train", "--config", str(bomb), "--out", str(tmp_path / "r")]), code=2)
    assert str(bomb) in line and len(line) < 500
    (tmp_path / "self.yaml").write_text("a: &a [*a, *a]\n")  # an alias inside itself: endlessly deep
    with pytest.raises(ValueError, match=r"self\.yaml' .*more than 64 levels"):
        read_file(tmp_path / "self.yaml")


def test_a_huge_or_deeply_nested_file_is_refused_naming_it(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_text("a: '" + "x" * MAX_FILE_BYTES + "'\n")
    with pytest.raises(ValueError, match=f"'{big}' is larger than {MAX_FILE_BYTES} bytes"):
        read_file(big)
    deep = tmp_path / "deep.json"
    deep.write_text('{"a": ' + "[" * 5000 + "]" * 5000 + "}")
    with pytest.raises(ValueError, match=f"'{deep}' is nested more than"):
        read_file(deep)


def test_a_validation_error_never_prints_a_huge_value(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("overrides: {train.lr: 1}\nnot_a_field: [" + ", ".join(["12345"] * 50_000) + "]\n")
    with pytest.raises(ValueError, match=r"not_a_field: .*\(got \[12345, ") as err:
        get_recipe(recipe)
    assert len(str(err.value)) < 500


# --- a curriculum stage longer than the run --------------------------------------------------------------------


def test_a_curriculum_stage_longer_than_the_run_is_refused_naming_both_numbers(tmp_path):
    out = tmp_path / "run"
    sets = ("task.K=6", "train.batch_size=4", "train.curriculum=[{until: 500, params: {K: 3}}]")
    args = ["train", "--task", "hmm", "--arch", "transformer", "--out", str(out), "--preset", "smoke"]
    r = runner.invoke(app, [*args, "--steps", "200", *(a for kv in sets for a in ("--set", kv))])
    _one_error(r, "train.curriculum[0].until: 500 is not below train.steps (200)", code=2)
    assert not out.exists()
