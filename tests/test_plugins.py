"""Plugins: a user's own task and architecture -- tests/plugins/windtunnel_demo_plugin, a Beta-Bernoulli
coin and a GRU -- by name on every command, brought in by `--import MODULE` and by the entry points of an installed
distribution (a dist-info directory on sys.path, as pip leaves one); the imports recorded in config.json and needed
again (--import or --trust-code) to load the run; a missing module's one-line error; configs without imports as
before (text, hash, identity)."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest
from pydantic import create_model
from typer.testing import CliRunner

from windtunnel import models, plugins, tasks
from windtunnel.cli import app
from windtunnel.config import RunConfig, _Strict, config_to_json, run_identity, validate
from windtunnel.errors import UntrustedCodeError
from windtunnel.models.presets import preset
from windtunnel.report.figures import USER_COLORS, arch_color
from windtunnel.resolve import resolve_config
from windtunnel.store import manifest

runner = CliRunner()

PLUGIN = "windtunnel_demo_plugin"
PLUGINS_DIR = Path(__file__).parent / "plugins"
# Smoke-sized runs: a few steps, tiny batches, a short coin, on the CPU.
TINY = ["--preset", "smoke", "--no-progress", "--steps", "4"] + [
    a for kv in ("task.n=6", "train.batch_size=8", "eval.n=16", "train.device=cpu") for a in ("--set", kv)
]
BIJECTION = ["--preset", "smoke", "--no-progress", "--steps", "2"] + [
    a for kv in ("task.V=5", "task.L=4", "train.batch_size=4", "eval.n=8", "train.device=cpu") for a in ("--set", kv)
]
ENTRY_POINTS = f"""[windtunnel.tasks]
coin = {PLUGIN}:Coin
broken = {PLUGIN}:Missing

[windtunnel.models]
gru = {PLUGIN}:GRU
"""


def _forget() -> None:
    """As a fresh process: the plugin module not imported, its names not registered, no entry point seen."""
    tasks.registry.unregister("coin")
    models.registry.unregister("gru")
    for name in [m for m in sys.modules if m == PLUGIN or m.startswith(PLUGIN + ".")]:
        del sys.modules[name]
    plugins.reset()


@pytest.fixture
def plugin_path(monkeypatch):
    """The plugin package importable (on sys.path, as if installed), not yet imported; forgotten again after."""
    _forget()
    monkeypatch.syspath_prepend(str(PLUGINS_DIR))
    yield PLUGIN
    _forget()


@pytest.fixture
def installed(plugin_path, tmp_path, monkeypatch):
    """An installed distribution declaring the plugin's entry points (and one broken one): its dist-info on
    sys.path."""
    site = tmp_path / "site"
    info = site / f"{PLUGIN}-0.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {PLUGIN}\nVersion: 0.0\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    monkeypatch.syspath_prepend(str(site))
    plugins.reset()
    return site


def _ok(r):
    assert r.exit_code == 0, r.output
    return r


def _one_line_error(r, *fragments: str) -> str:
    assert r.exit_code == 2, r.output
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.output
    assert "Traceback" not in r.output
    for f in fragments:
        assert f in lines[0], lines[0]
    return lines[0]


def _train(out: Path, *extra: str):
    return runner.invoke(app, ["train", "--task", "coin", "--arch", "gru", "--out", str(out), *TINY, *extra])


# --- --import: train, eval, probe, resume -----------------------------------------------------------------


def test_import_trains_evaluates_and_probes_the_plugin_and_records_it(plugin_path, tmp_path):
    run = tmp_path / "coin-gru"
    r = _train(run)  # without --import the names are unknown
    assert r.exit_code == 2 and "unknown task 'coin'" in r.output
    _ok(_train(run, "--import", PLUGIN))
    cfg = json.loads((run / "config.json").read_text())
    assert cfg["imports"] == [PLUGIN] and cfg["task"]["name"] == "coin" and cfg["model"]["arch"] == "gru"
    assert cfg["model"]["size"]["n_layers"] == 2 and cfg["model"]["size"]["d_model"] == 32  # the generic smoke size
    r = _ok(runner.invoke(app, ["eval", str(run), "--n", "8", "--json"]))  # imported already in this process
    assert json.loads(r.stdout)["default"]["n"] == 8
    r = _ok(runner.invoke(app, ["probe", str(run), "--n", "8", "--no-figures"]))
    assert "gru on coin" in r.output and (run / "geometry.json").exists()
    r = _ok(runner.invoke(app, ["train", "--resume", str(run), "--steps", "6", "--no-progress"]))
    assert validate(json.loads((run / "config.json").read_text())).train.steps == 6

    _forget()  # a new process: the run's config names the module; loading it imports only when the user says so
    line = _one_line_error(runner.invoke(app, ["eval", str(run), "--n", "8"]), f"--import {PLUGIN}", "--trust-code")
    assert repr(PLUGIN) in line and "runs its code" in line
    _one_line_error(runner.invoke(app, ["probe", str(run), "--n", "8", "--no-figures"]), f"--import {PLUGIN}")
    _one_line_error(runner.invoke(app, ["train", "--resume", str(run), "--steps", "8"]), f"--import {PLUGIN}")
    _ok(runner.invoke(app, ["eval", str(run), "--n", "8", "--import", PLUGIN]))
    _forget()
    _ok(runner.invoke(app, ["eval", str(run), "--n", "8", "--trust-code"]))  # installed (on sys.path): trusted
    _forget()
    _ok(runner.invoke(app, ["train", "--resume", str(run), "--steps", "8", "--no-progress", "--import", PLUGIN]))


def test_trust_code_never_imports_a_recorded_module_from_the_current_directory(tmp_path, monkeypatch):
    module = "wt_local_plugin_mod"
    (tmp_path / f"{module}.py").write_text(
        (PLUGINS_DIR / PLUGIN / "__init__.py").read_text().replace('"coin"', '"coin-local"').replace('"gru"', '"gl"')
    )
    monkeypatch.chdir(tmp_path)
    try:
        r = runner.invoke(
            app, ["train", "--task", "coin-local", "--arch", "gl", "--out", "r", *TINY, "--import", module]
        )
        _ok(r)  # an explicit --import finds a module of the current directory
        del sys.modules[module]
        tasks.registry.unregister("coin-local"), models.registry.unregister("gl")
        line = _one_line_error(runner.invoke(app, ["eval", "r", "--trust-code"]), "installed package", "--import")
        assert module in line
    finally:
        sys.modules.pop(module, None)
        tasks.registry.unregister("coin-local"), models.registry.unregister("gl")


@pytest.mark.parametrize(
    "command",
    [
        ["train", "--task", "bijection", "--out", "OUT", "--no-progress"],
        ["eval", "OUT"],
        ["probe", "OUT"],
        ["report", "OUT", "--out", "REPORT"],
        ["sweep", "BASE", "--grid", "seed=0,1", "--out", "OUT"],
        ["reproduce", "--tier", "smoke", "--out", "OUT"],
        ["time-to-bayes", "--cell", "task=hmm,arch=gru,steps=2", "--out", "OUT"],
        ["tasks"],
    ],
)
def test_a_missing_module_is_one_line_naming_it(tmp_path, command):
    args = [str(tmp_path / "x") if a in ("OUT", "REPORT", "BASE") else a for a in command]
    r = runner.invoke(app, [*args, "--import", "no_such_windtunnel_plugin"])
    _one_line_error(r, "--import no_such_windtunnel_plugin: no module named 'no_such_windtunnel_plugin'")
    assert not (tmp_path / "x").exists()  # refused before anything was made


def test_a_module_that_fails_or_a_bad_name_is_one_line(tmp_path, monkeypatch):
    (tmp_path / "wt_failing_plugin.py").write_text("raise RuntimeError('bad plugin')\n")
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["tasks", "--import", "wt_failing_plugin"])
    _one_line_error(r, "--import wt_failing_plugin: importing it raised RuntimeError: bad plugin")
    sys.modules.pop("wt_failing_plugin", None)
    _one_line_error(runner.invoke(app, ["tasks", "--import", "my_plugin.py"]), "--import my_plugin.py", "module name")


def test_a_config_file_s_imports_need_the_flag_too(plugin_path, tmp_path):
    (tmp_path / "c.yaml").write_text(f"imports: [{PLUGIN}]\ntask: {{name: coin, params: {{n: 6}}}}\n")
    args = ["train", "--config", str(tmp_path / "c.yaml"), "--out", str(tmp_path / "r"), "--arch", "gru", *TINY]
    _one_line_error(runner.invoke(app, args), f"--import {PLUGIN}")
    _ok(runner.invoke(app, [*args, "--trust-code"]))
    assert json.loads((tmp_path / "r" / "config.json").read_text())["imports"] == [PLUGIN]


# --- entry points -------------------------------------------------------------------------------------------


def test_entry_points_of_an_installed_package_work_by_name_without_import(installed, tmp_path):
    with pytest.warns(plugins.PluginWarning, match=r"entry point windtunnel.tasks 'broken' .*ignored"):
        r = _ok(runner.invoke(app, ["tasks"]))  # listing loads them all; the broken one is a warning, not a crash
    assert any(line.startswith("coin ") for line in r.stdout.splitlines())
    assert "gru" in models.names() and plugins.provider(plugins.MODELS_GROUP, "gru") is None

    _forget()
    plugins.reset()
    assert PLUGIN not in sys.modules
    run = tmp_path / "ep"
    _ok(_train(run))  # looked up by name: the entry point is loaded then
    assert "imports" not in json.loads((run / "config.json").read_text())  # found by name again: nothing to record
    _forget()
    _ok(runner.invoke(app, ["eval", str(run), "--n", "8"]))
    _ok(
        runner.invoke(app, ["train", "--task", "bijection", "--arch", "lstm", "--out", str(tmp_path / "b"), *BIJECTION])
    )


def test_a_broken_entry_point_is_a_warning_naming_it(installed):
    with pytest.warns(plugins.PluginWarning, match=r"entry point windtunnel.tasks 'broken' .*Missing.*ignored"):
        assert plugins.load_entry_points(plugins.TASKS_GROUP, "broken") == []
    assert "broken" not in tasks.names() and "coin" in tasks.names()
    with pytest.raises(ValueError, match="unknown task 'broken'"):
        tasks.make("broken")


# --- everywhere by name: presets, sweep, report, time-to-bayes ----------------------------------------------


def test_presets_give_a_user_architecture_the_generic_sizes(plugin_path):
    importlib_module = __import__(PLUGIN)
    assert preset("coin", "gru", "smoke").as_config() == {"n_layers": 2, "d_model": 32}
    assert preset("hmm", "gru", "quick").as_config() == {"n_layers": 4, "d_model": 128}
    with pytest.raises(ValueError, match="unknown architecture 'nope'"):
        preset("coin", "nope", "smoke")
    with pytest.raises(ValueError, match="--import MODULE"):
        preset("coin", "not_imported_pkg.models:GRU", "smoke")
    assert preset("coin", f"{PLUGIN}:GRU", "smoke").as_config() == {"n_layers": 2, "d_model": 32}  # imported: read

    class Tiny(importlib_module.GRU):
        class Size(models.ModelSize):
            width: int = 4

    models.register("tiny-user", Tiny)
    try:
        with pytest.raises(ValueError, match="declares neither n_layers nor d_model"):
            preset("coin", "tiny-user", "smoke")
    finally:
        models.registry.unregister("tiny-user")


def test_sweep_of_a_plugin_from_the_cli_and_its_command_line_re_runs(plugin_path, tmp_path):
    base = {
        "task": {"name": "coin", "params": {"n": 6}},
        "model": {"arch": "gru", "preset": "smoke"},
        "train": {"steps": 4, "batch_size": 8, "device": "cpu", "eval_every": 4},
        "eval": {"n": 16},
    }
    (tmp_path / "base.json").write_text(json.dumps(base))
    out = tmp_path / "sweep"
    args = ["sweep", str(tmp_path / "base.json"), "--grid", "train.lr=1e-3,3e-3", "--out", str(out), "--no-progress"]
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and "unknown task 'coin'" in r.output
    _ok(runner.invoke(app, [*args, "--threads", "1", "--import", PLUGIN]))
    table = json.loads((out / "sweep.json").read_text())
    assert len(table["rows"]) == 2 and table["command"].count(f"--import {PLUGIN}") == 1
    for row in table["rows"]:
        assert json.loads((out / "runs" / row["run"] / "config.json").read_text())["imports"] == [PLUGIN]
    command = shlex.split(table["command"])
    assert command[:2] == ["windtunnel", "sweep"]
    r = _ok(runner.invoke(app, [*command[1:], "--no-progress"]))
    assert "(0 to train)" in r.output


def test_a_python_sweep_of_registered_names_writes_a_command_that_re_runs(plugin_path, tmp_path):
    from windtunnel.executors import ExecutorOptions
    from windtunnel.sweep import SWEEP_BASE, sweep

    __import__(PLUGIN)  # registered from Python: the sweep finds the module that registered the names
    base = {
        "task": {"name": "coin", "params": {"n": 6}},
        "model": {"arch": "gru", "preset": "smoke"},
        "train": {"steps": 4, "batch_size": 8, "device": "cpu", "eval_every": 4},
        "eval": {"n": 16},
    }
    out = tmp_path / "py-sweep"
    table = sweep(base, {"seed": [0, 1]}, out, ExecutorOptions(threads=1))
    assert json.loads((out / "runs" / "seed=0" / "config.json").read_text())["imports"] == [PLUGIN]
    assert json.loads((out / SWEEP_BASE).read_text()) == base
    command = shlex.split(table["command"])
    assert command[2] == str(out / SWEEP_BASE) and f"--import {PLUGIN}" in table["command"]
    r = _ok(runner.invoke(app, [*command[1:], "--no-progress"]))
    assert "(0 to train)" in r.output
    assert "Command: `windtunnel sweep" in (out / "sweep.md").read_text()


def test_an_import_string_sweep_says_how_to_run_it_by_name(plugin_path, tmp_path):
    __import__(PLUGIN)
    (tmp_path / "b.yaml").write_text(f"model: {{arch: '{PLUGIN}:GRU', size: {{d_model: 8, n_layers: 1}}}}\n")
    r = runner.invoke(app, ["sweep", str(tmp_path / "b.yaml"), "--grid", "seed=0,1", "--out", str(tmp_path / "s")])
    _one_line_error(r, "architectures by name", f"--import {PLUGIN}")


def test_report_of_plugin_runs_has_its_column_row_and_colour(plugin_path, tmp_path):
    runs = tmp_path / "runs"
    _ok(_train(runs / "coin-gru", "--import", PLUGIN))
    _ok(_train(runs / "coin-lstm", "--arch", "lstm"))  # the last --arch wins
    out = tmp_path / "report"
    _ok(runner.invoke(app, ["report", str(runs), "--out", str(out), "--import", PLUGIN]))
    text = (out / "report.md").read_text()
    assert "| Coin entropy error (bits) |" in text
    assert any(line.startswith("| gru ") for line in text.splitlines())
    assert any(line.startswith("| lstm ") for line in text.splitlines())
    assert (out / "figures" / "training_curves.png").exists()
    assert arch_color("gru") in USER_COLORS and arch_color("gru") == arch_color("gru")
    assert not set(USER_COLORS) & {models.info(a).color for a in models.built_ins()}
    assert arch_color("lstm") == models.info("lstm").color == "C2"
    assert len({arch_color(a) for a in ("gru", "my-ssm", "rwkv", "hyena", "xlstm")}) >= 3  # spread over the palette


def test_time_to_bayes_cell_of_a_plugin_architecture(plugin_path, tmp_path):
    out = tmp_path / "ttb"
    cell = "task=hmm,arch=gru,tier=smoke,steps=2,batch_size=4,eval_every=2,eval_size=8,set.eval.n=8"
    r = _ok(
        runner.invoke(app, ["time-to-bayes", "--cell", cell, "--out", str(out), "--no-progress", "--import", PLUGIN])
    )
    assert "results:" in r.output
    (run,) = (out / "runs").iterdir()
    cfg = json.loads((run / "config.json").read_text())
    assert cfg["imports"] == [PLUGIN] and cfg["model"]["arch"] == "gru"


# --- the config field ---------------------------------------------------------------------------------------


def test_a_config_without_imports_is_as_before_in_text_hash_and_identity(tmp_path):
    fields = {k: (f.annotation, f) for k, f in RunConfig.model_fields.items() if k != "imports"}
    Before = create_model("Before", __base__=_Strict, **fields)  # RunConfig as it was before the field
    for raw in [{}, {"task": {"name": "hmm"}, "model": {"arch": "lstm", "preset": "smoke"}, "seed": 3}]:
        cfg = resolve_config(raw)
        text = config_to_json(cfg)
        assert "imports" not in text and set(json.loads(text)) == {"task", "model", "train", "eval", "seed"}
        before = Before.model_validate(json.loads(text))
        assert text == json.dumps(before.model_dump(mode="json"), indent=2, sort_keys=True) + "\n"
        assert manifest.config_hash(cfg) == manifest.config_hash(validate({**json.loads(text), "imports": []}))
        assert "imports" not in run_identity(cfg)
    r = _ok(
        runner.invoke(app, ["train", "--task", "bijection", "--arch", "lstm", "--out", str(tmp_path / "r"), *BIJECTION])
    )
    assert "imports" not in (tmp_path / "r" / "config.json").read_text() and r.exit_code == 0


def test_the_imports_field_is_checked_deduplicated_and_part_of_the_identity(plugin_path):
    __import__(PLUGIN)
    cfg = validate({"imports": [PLUGIN, PLUGIN]})
    assert cfg.imports == [PLUGIN] and json.loads(config_to_json(cfg))["imports"] == [PLUGIN]
    with pytest.raises(ValueError, match=r"imports\[0\]: must be a module name"):
        validate({"imports": ["my plugin.py"]})
    assert manifest.config_hash(cfg) != manifest.config_hash(validate({}))
    with pytest.raises(UntrustedCodeError, match="--import not_imported_windtunnel_module"):
        resolve_config({"imports": ["not_imported_windtunnel_module"]})


def test_a_run_trained_from_python_is_resumed_and_evaluated_from_the_cli(plugin_path, tmp_path):
    from windtunnel.training.train import train

    __import__(PLUGIN)  # registered in Python: the config records no imports
    cfg = {
        "task": {"name": "coin", "params": {"n": 6}},
        "model": {"arch": "gru", "preset": "smoke"},
        "train": {"steps": 2, "batch_size": 8, "device": "cpu"},
        "eval": {"n": 16},
    }
    train(cfg, tmp_path / "r", progress=False)
    _forget()
    _ok(runner.invoke(app, ["eval", str(tmp_path / "r"), "--n", "8", "--import", PLUGIN]))
    _ok(runner.invoke(app, ["train", "--resume", str(tmp_path / "r"), "--steps", "4", "--no-progress"]))
    assert "imports" not in (tmp_path / "r" / "config.json").read_text()  # --import on resume only imports


def test_a_sweep_of_names_the_running_script_registered_says_its_command_cannot_find_them(plugin_path):
    from windtunnel.sweep import _command_note

    module = __import__(PLUGIN)

    class Script(module.GRU):
        pass

    Script.__module__ = "__main__"
    models.register("script-gru", Script)
    try:
        assert "__main__" in (_command_note({"model": {"arch": "script-gru"}}) or "")
        assert _command_note({"model": {"arch": "gru"}}) is None
    finally:
        models.registry.unregister("script-gru")
