"""Probes as objects: every built-in probe registered once, and a probe registered by a user's module
(imported as `--import` does) reaches geometry.json, the run's figures, `windtunnel probe`'s output and the report
(its Geometry column, its rows across seeds and its figure) without a line of the package changed."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest
from typer.testing import CliRunner

from tiny_runs import train_checkpointed
from windtunnel import plugins
from windtunnel.cli import app
from windtunnel.geometry import registry
from windtunnel.geometry.registry import BUILTIN, Column, Probe, ProbeContext, probes, register_probe

MODULE = "wt_probe_plugin"
SIZE = {"n_layers": 1, "n_heads": 2, "d_model": 16}
BUILTINS = ("keys", "attention", "manifold", "clusters", "lens", "ablation", "dynamics", "memory")

PLUGIN = textwrap.dedent(
    '''
    """A user's probe, one file: the mean norm of the final representation at the scored positions."""

    import math

    from windtunnel.geometry.registry import Column, Probe, ReportFigure, RunFigure, register_probe
    from windtunnel.geometry.seeds import POSITIVE
    from windtunnel.plotting import save, subplots


    def _norm(data):
        return float(data.final.norm(dim=-1)[data.mask].mean())


    def compute(ctx):
        out = {"final_norm": _norm(ctx.data), "sqrt_d": math.sqrt(ctx.data.final.shape[-1])}
        if ctx.init_data is not None:
            out["init_final_norm"] = _norm(ctx.init_data)
        return out


    def draw(result, path):
        fig, ax = subplots(figsize=(3, 2))
        ax.bar(["trained", "sqrt(d)"], [result["final_norm"], result["sqrt_d"]])
        return save(fig, path)


    PROBE = register_probe(
        Probe(
            "norms",
            compute=compute,
            init_data=True,
            columns=(Column("final norm (plugin)", ("norms", "final_norm")),),
            seed_quantities=(
                (
                    "final norm (plugin)",
                    ("norms", "final_norm"),
                    ("norms", "init_final_norm"),
                    ("sqrt(d)", ("norms", "sqrt_d")),
                    POSITIVE,
                ),
            ),
            figures=(RunFigure("final_norm.png", lambda ctx, result, path: draw(result, path)),),
            report_figures=(
                ReportFigure(
                    "final_norm",
                    "final_norm.png",
                    "Final norm (plugin probe)",
                    "The mean norm of the final representation beside sqrt(d).",
                    lambda g: "final norm beside sqrt(d)",
                    draw=draw,
                ),
            ),
            terminal=lambda p: f"final norm {p['final_norm']:.4g} (sqrt(d) {p['sqrt_d']:.4g})",
        )
    )
    '''
)


def _forget() -> None:
    registry.unregister_probe("norms")
    sys.modules.pop(MODULE, None)


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """The plugin module in the current directory, imported as `--import wt_probe_plugin` does; forgotten after."""
    _forget()
    folder = tmp_path / "plugin"
    folder.mkdir()
    (folder / f"{MODULE}.py").write_text(PLUGIN)
    monkeypatch.chdir(folder)
    plugins.import_plugins([MODULE])
    yield MODULE
    _forget()


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A tiny trained HMM transformer (8 steps, checkpoints at 2, 4 and 8)."""
    return train_checkpointed(tmp_path_factory.mktemp("probe-registry") / "run", "hmm", {}, "transformer", SIZE)


def test_every_built_in_probe_is_registered_once_in_order():
    names = [p.name for p in probes()]
    assert names[: len(BUILTINS)] == list(BUILTINS)
    assert len(names) == len(set(names))
    assert len(BUILTIN) == len(BUILTINS)  # one file per built-in probe
    with pytest.raises(ValueError, match="already exists"):
        register_probe(Probe("keys", compute=lambda ctx: {}))
    for reserved in ("figures", "step", ""):
        with pytest.raises(ValueError, match="not a probe name"):
            register_probe(Probe(reserved, compute=lambda ctx: {}))


def test_a_probe_that_does_not_apply_or_fails_is_said_so():
    ctx = ProbeContext(model=None)
    skip = Probe("x", compute=lambda c: {"v": 1.0}, applies=lambda c: "never here")
    assert registry.run_probe(skip, ctx) == {"not_applicable": "never here"}
    broken = Probe("x", compute=lambda c: {}["missing"])
    assert registry.run_probe(broken, ctx) == {"error": "KeyError: 'missing'"}
    assert Column("c", ("x", "v")).text({"x": {"v": 0.5}}) == "0.500"
    assert Column("c", ("x", "v")).text({}) == "—"


def test_a_plugin_probe_reaches_geometry_json_the_cli_and_the_report(plugin, tiny_run, tmp_path):
    out = tmp_path / "probed"
    res = CliRunner().invoke(app, ["probe", str(tiny_run), "--n", "16", "--out", str(out), "--import", plugin])
    assert res.exit_code == 0, res.output
    assert "  norms: final norm " in res.output
    g = json.loads((out / "geometry.json").read_text())
    assert g["norms"]["final_norm"] > 0 and g["norms"]["sqrt_d"] == pytest.approx(4.0)
    assert "init_final_norm" in g["norms"]
    assert all(name in g for name in BUILTINS)  # the built-ins still run beside it
    assert g["figures"][-1] == "figures/final_norm.png"  # after the built-ins' figures, relative to geometry.json

    # the report of that probed run: the probe's column in the Geometry table, its rows across seeds, its figure
    from windtunnel.geometry.run import probe_run

    probe_run(tiny_run, out=tiny_run, n=16)  # geometry.json in the run itself, as reproduce leaves it
    report = tmp_path / "report"
    res = CliRunner().invoke(app, ["report", str(tiny_run), "--out", str(report), "--import", plugin])
    assert res.exit_code == 0, res.output
    md = (report / "report.md").read_text()
    header = next(line for line in md.splitlines() if line.startswith("| Task | Architecture | L0 key"))
    assert header.rstrip(" |").endswith("final norm (plugin)")
    row = next(line for line in md.splitlines() if line.startswith("| hmm") and "final norm (plugin)" in line)
    assert "sqrt(d): 4.000" in row
    assert "Final norm (plugin probe)" in md and any((report / "figures").glob("final_norm_*.png"))
    results = json.loads((report / "results.json").read_text())
    assert "final norm (plugin)" in results["geometry_across_seeds"][0]


def test_without_the_plugin_the_report_has_no_such_column(tiny_run, tmp_path):
    _forget()
    from windtunnel.geometry.registry import columns

    assert "final norm (plugin)" not in [c.header for c in columns()]
    assert [c.header for c in columns()][0] == "L0 key mean abs cos (ours)"
