"""The report's figures: one configuration each (Table 1's cells), the seed named; the probes' figures (layer-0 keys
beside init, attention entropy, value manifold, frame-precision dissociation, Mamba state clusters, memory profile)
present with their captions where the probe data exist and absent, without a crash, where they do not; the
Time-to-Bayes table by configuration."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from report_runs import METRIC, write_run
from tiny_runs import train_checkpointed
from windtunnel.report import build_report, tables
from windtunnel.report import figures as report_figures
from windtunnel.report.collect import find_runs

PNG = b"\x89PNG\r\n\x1a\n"
KINDS = [k.kind for k in report_figures.probe_figure_kinds()]
TITLES = {k.kind: k.title for k in report_figures.probe_figure_kinds()}


def geometry(names: list[str]) -> dict[str, Any]:
    """A geometry.json whose every probe applied (only the fields the figures read), listing the PNGs `names`."""
    return {
        "keys": {"token_set": "value_tokens", "mean_abs_cos_per_layer": [0.2]},
        "attention": {"entropy_bits_per_layer": [2.0, 1.0], "drop_first_to_last_pct": 50.0},
        "manifold": {"values": {"pc1_var": 0.5}, "final": {"pc1_var": 0.4}},
        "dynamics": {"checkpoints": [{"step": 2, "entropy_error_bits": 0.5}, {"step": 4, "entropy_error_bits": 0.1}]},
        "clusters": {"ari": 0.5},
        "memory": {
            "lags": [1, 2, 3],
            "exact": [0.1, 0.01, 0.001],
            "model": [0.09, 0.02, 0.0],
            "init": [1e-6, 1e-6, 1e-6],
            "ci": {"exact": [[0.09, 0.11], [0.009, 0.011], [0.0009, 0.0011]]},
        },
        "figures": [f"figures/{n}" for n in names],
    }


def fabricated(root: Path, name: str, lr: float, seed: int, arch: str = "transformer", task: str = "bijection") -> Path:
    """A run of `arch` on `task` at learning rate `lr` and `seed` with a validation curve, per-position curves and a
    probed geometry.json whose PNGs each hold the run's name (so a copy tells which run it came from)."""
    config = {
        "task": {"name": task, "params": {}},
        "model": {"arch": arch},
        "seed": seed,
        "train": {"steps": 30, "batch_size": 4, "lr": lr},
    }
    evals = {
        "default": {
            "task_params": {},
            "n": 10,
            "metrics": {"entropy_mae_bits": METRIC},
            "per_position": {"model_entropy_bits": [2.0, 1.5, 1.0], "bayes_entropy_bits": [2.0, 1.4, 0.9]},
        }
    }
    errs = (0.3, 0.08 if lr > 1.5e-3 else 0.2, 0.04 if lr > 1.5e-3 else 0.15)
    lines = [
        json.dumps({"step": s, "split": "eval", "entropy_mae_bits": e, "train_s": float(s)})
        for s, e in zip((10, 20, 30), errs, strict=True)
    ]
    d = write_run(root, name, config=config, evals=evals, metrics_lines=lines)
    sources = [k.source for k in report_figures.probe_figure_kinds()]
    (d / "figures").mkdir()
    for src in sources:
        (d / "figures" / src).write_bytes(PNG + name.encode())
    (d / "geometry.json").write_text(json.dumps(geometry(sources)))
    return d


def section(md: str, title: str) -> str:
    """The text of report.md's sub-section `title` (up to the next heading)."""
    m = re.search(rf"^### {re.escape(title)}\n(.*?)(?=^#)", md, re.S | re.M)
    return m.group(1) if m else ""


# --- (a) two configurations of one task: never pooled --------------------------------------------------------------


@pytest.fixture(scope="module")
def two_configs(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("two-configs")
    runs = root / "runs"
    for seed in (0, 1):
        fabricated(runs, f"lr1-s{seed}", 1e-3, seed)
    for seed in (0, 1, 2):
        fabricated(runs, f"lr2-s{seed}", 2e-3, seed)
    out = root / "report"
    build_report([runs], out)
    return runs, out


def test_time_to_bayes_has_a_row_per_configuration_with_its_own_seed_count(two_configs):
    runs, _ = two_configs
    header, rows = tables.time_to_bayes_table(find_runs([runs]))
    got = {row[1]: row[2] for row in rows}
    assert got == {"transformer (train.lr=0.001)": "2", "transformer (train.lr=0.002)": "3"}
    cell = header.index(next(h for h in header if "0.1" in h))
    lr2 = next(row for row in rows if row[1].endswith("0.002)"))
    assert "3/3" in lr2[cell] or lr2[cell].startswith("10")  # every lr=2e-3 seed reached 0.1 bits at step 20


def test_time_to_bayes_in_the_report_pools_no_configurations(two_configs):
    _, out = two_configs
    md = (out / "report.md").read_text()
    ttb = md.split("## Time to Bayes", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in ttb.splitlines() if line.startswith("| bijection |")]
    assert len(rows) == 2 and not any("| transformer | 5 |" in r for r in rows)
    assert any("transformer (train.lr=0.001) | 2 |" in r for r in rows)
    assert any("transformer (train.lr=0.002) | 3 |" in r for r in rows)


def test_each_configuration_gets_its_own_probe_figures_from_its_lowest_seed(two_configs):
    runs, out = two_configs
    md = (out / "report.md").read_text()
    for kind in KINDS:
        if kind == "state_clusters":  # drawn for Mamba only
            assert not list((out / "figures").glob(f"{kind}_*")) and f"### {TITLES[kind]}" not in md
            continue
        files = sorted((out / "figures").glob(f"{kind}_bijection_transformer_*.png"))
        assert len(files) == 2, kind  # one per configuration, named by a hash of it
        text = section(md, TITLES[kind])
        captions = [line for line in text.splitlines() if line.startswith("*bijection · transformer")]
        assert len(captions) == 2, (kind, text)
        by_label = {
            "0.001": ("lr1-s0", "seed 0 (of seeds 0, 1 probed)"),
            "0.002": ("lr2-s0", "seed 0 (of seeds 0, 1, 2 probed)"),
        }
        if kind == "memory_profile":  # every probed seed of the configuration overlaid, drawn from its numbers
            by_label = {"0.001": ("", "seeds 0, 1 overlaid"), "0.002": ("", "seeds 0, 1, 2 overlaid")}
        for lr, (run, seed) in by_label.items():
            caption = next(c for c in captions if f"(train.lr={lr})" in c)
            assert seed in caption, caption
            link = next(line for line in text.splitlines() if line.startswith("![") and f"(train.lr={lr})" in line)
            png = out / link.rsplit("](", 1)[1].rstrip(")")
            if run:
                assert png.read_bytes() == PNG + run.encode()  # the configuration's own lowest seed, no other run's
            else:
                assert png.read_bytes().startswith(PNG) and b"lr" not in png.read_bytes()[:16]


def test_figure_names_are_stable_per_configuration(two_configs, tmp_path):
    runs, out = two_configs
    again = tmp_path / "again"
    build_report([runs / "lr2-s1", runs / "lr2-s2", runs / "lr1-s1"], again)  # other seeds of the same two configs
    first = sorted(p.name for p in (out / "figures").glob("attention_entropy_*"))
    assert sorted(p.name for p in (again / "figures").glob("attention_entropy_*")) == first
    md = (again / "report.md").read_text()
    assert "seed 1 (of seeds 1, 2 probed)" in md  # the lowest seed there, named


def test_training_curves_are_one_panel_per_configuration_with_each_seed_labelled(two_configs, monkeypatch, tmp_path):
    runs, _ = two_configs
    drawn: dict[str, Any] = {}
    monkeypatch.setattr(report_figures, "_save", lambda fig, path: drawn.setdefault("fig", fig) and path)
    report_figures.training_curves_figure(find_runs([runs]), tmp_path)
    panels = {ax.get_title(): ax for ax in drawn["fig"].axes if ax.get_visible()}
    assert sorted(panels) == ["bijection · transformer (train.lr=0.001)", "bijection · transformer (train.lr=0.002)"]
    labels = {t: ax.get_legend_handles_labels()[1] for t, ax in panels.items()}
    assert labels["bijection · transformer (train.lr=0.001)"] == ["seed 0", "seed 1"]
    assert labels["bijection · transformer (train.lr=0.002)"] == ["seed 0", "seed 1", "seed 2"]


def test_calibration_draws_one_line_per_configuration_naming_its_seed(two_configs, monkeypatch, tmp_path):
    runs, _ = two_configs
    drawn: dict[str, Any] = {}
    monkeypatch.setattr(report_figures, "_save", lambda fig, path: drawn.setdefault("fig", fig) and path)
    report_figures.calibration_figures(find_runs([runs]), "bijection", tmp_path)
    labels = drawn["fig"].axes[0].get_legend_handles_labels()[1]
    assert labels == ["exact Bayes", "transformer (train.lr=0.001), seed 0", "transformer (train.lr=0.002), seed 0"]


def test_a_run_evaluated_once_is_a_visible_point_and_recall_plots_accuracy(tmp_path, monkeypatch):
    """A line of one point without a marker draws nothing: a cell whose runs were evaluated once (a paper-tier run
    stopped before its second eval_every) was an empty panel. And recall's panel is its headline, accuracy."""
    once = write_run(
        tmp_path / "runs",
        "once",
        metrics_lines=[json.dumps({"step": 5000, "split": "eval", "entropy_mae_bits": 0.01, "train_s": 9.0})],
    )
    recall_cfg = {"task": {"name": "recall", "params": {}}, "model": {"arch": "transformer"}, "seed": 0}
    recall_cfg["train"] = {"steps": 10, "batch_size": 4}
    lines = [
        json.dumps({"step": s, "split": "eval", "entropy_mae_bits": 3.0 - s / 10, "accuracy": a, "train_s": float(s)})
        for s, a in ((5, 0.3), (10, 0.9))
    ]
    write_run(tmp_path / "runs", "recall", config=recall_cfg, metrics_lines=lines)
    drawn: dict[str, Any] = {}
    monkeypatch.setattr(report_figures, "_save", lambda fig, path: drawn.setdefault("fig", fig) and path)
    report_figures.training_curves_figure(find_runs([tmp_path / "runs"]), tmp_path)
    panels = {ax.get_title(): ax for ax in drawn["fig"].axes if ax.get_visible()}
    (line,) = panels["bijection · transformer"].get_lines()
    assert list(line.get_xdata()) == [5000] and line.get_marker() not in (None, "None", "", " ")
    assert once.is_dir()
    recall = panels["recall · transformer"]
    assert list(recall.get_lines()[0].get_ydata()) == [0.3, 0.9] and recall.get_ylabel() == "accuracy"


# --- (b) every kind with its caption where the probe ran; none, without a crash, where it did not -------------------


@pytest.fixture(scope="module")
def probed(tmp_path_factory) -> Path:
    """An HMM transformer and an HMM Mamba, trained 8 steps with checkpoints at 2, 4 and 8, and probed."""
    from windtunnel.geometry.run import probe_run

    runs = tmp_path_factory.mktemp("probed") / "runs"
    params = {"K": 6, "S": 3, "O": 3}
    for arch, size in (
        ("transformer", {"d_model": 16, "n_layers": 2, "n_heads": 2, "d_ff": 32}),
        ("mamba", {"d_model": 16, "n_layers": 2}),
    ):
        run = train_checkpointed(runs / f"hmm-{arch}", "hmm", params, arch, size)
        probe_run(run, n=16)
    return runs


def test_every_probe_figure_is_in_the_report_with_its_caption(probed, tmp_path):
    out = tmp_path / "report"
    build_report([probed], out)
    md = (out / "report.md").read_text()
    html = (out / "report.html").read_text()
    expected = {
        "key_cosines_layer0": ["transformer"],
        "attention_entropy": ["transformer"],
        "value_manifold": ["transformer", "mamba"],
        "frame_precision": ["transformer", "mamba"],
        "state_clusters": ["mamba"],
        "memory_profile": ["transformer", "mamba"],
    }
    kinds = {k.kind: k for k in report_figures.probe_figure_kinds()}
    for kind, archs in expected.items():
        text = section(md, kinds[kind].title)
        assert text, kind
        for arch in archs:
            png = out / "figures" / f"{kind}_hmm_{arch}.png"
            assert png.read_bytes().startswith(PNG), png
            assert f"![hmm · {arch}, seed 0: " in text and f"](figures/{png.name})" in text, (kind, text)
            assert f"*hmm · {arch}, seed 0: " in text  # the one-line caption: cell, seed, what it shows
        assert kinds[kind].title in html
    assert "trained (left) and at init (right)" in section(md, kinds["key_cosines_layer0"].title)
    assert "within position" in section(md, kinds["value_manifold"].title)


def test_a_moved_run_folder_keeps_its_probe_figures(probed, tmp_path):
    """Figure paths relative to geometry.json; one stored absolute, from before the move, still finds its PNG."""
    first, moved = tmp_path / "first", tmp_path / "elsewhere" / "runs"
    shutil.copytree(probed, first)
    moved.parent.mkdir()
    first.rename(moved)
    for run in moved.iterdir():
        listed = json.loads((run / "geometry.json").read_text())["figures"]
        assert listed and not any(Path(p).is_absolute() for p in listed)
        assert all((run / p).is_file() for p in listed)  # resolved against geometry.json's folder
    older = json.loads((moved / "hmm-mamba" / "geometry.json").read_text())  # absolute paths to where it was
    older["figures"] = [str(first / "hmm-mamba" / p) for p in older["figures"]]
    (moved / "hmm-mamba" / "geometry.json").write_text(json.dumps(older))
    out = tmp_path / "report"
    build_report([moved], out)
    copied = [
        (out / "figures" / f"{k.kind}_hmm_{arch}.png", moved / f"hmm-{arch}" / "figures" / k.source)
        for k in report_figures.probe_figure_kinds()
        for arch in ("transformer", "mamba")
        if k.draw_seeds is None
        and (k.archs is None or arch in k.archs)
        and (moved / f"hmm-{arch}" / "figures" / k.source).is_file()
    ]
    assert len(copied) >= 4 and all(dest.read_bytes() == src.read_bytes() for dest, src in copied)


def test_without_probe_data_there_is_no_probe_figure_and_no_crash(two_configs, tmp_path):
    runs, _ = two_configs
    bare = tmp_path / "bare"
    for d in runs.iterdir():  # the same runs without geometry.json or figures/
        write_run(bare, d.name, config=json.loads((d / "config.json").read_text()))
    out = tmp_path / "report"
    build_report([bare], out)
    md = (out / "report.md").read_text()
    for kind in report_figures.probe_figure_kinds():
        assert f"### {kind.title}" not in md
        assert not list((out / "figures").glob(f"{kind.kind}_*"))


def test_garbled_or_foreign_probe_files_draw_nothing(tmp_path):
    runs = tmp_path / "runs"
    d = fabricated(runs, "run", 1e-3, 0)
    (d / "figures" / "attention_entropy.png").write_bytes(b"not a png")
    (d / "figures" / "key_cosines_layer0.png").unlink()
    (tmp_path / "elsewhere.png").write_bytes(PNG + b"elsewhere")
    (d / "figures" / "key_cosines_layer0.png").symlink_to(tmp_path / "elsewhere.png")
    g = geometry([k.source for k in report_figures.probe_figure_kinds() if k.kind != "value_manifold"])  # not its PNG
    g["dynamics"] = {"not_applicable": "needs at least two checkpoints"}
    g["memory"] = {"lags": "garbled"}
    (d / "figures" / "memory_profile.png").unlink()
    (d / "geometry.json").write_text(json.dumps(g))
    out = tmp_path / "report"
    build_report([runs], out)
    names = {p.name.split("_bijection")[0] for p in (out / "figures").glob("*_bijection_transformer*.png")}
    assert names == set()  # none: not a PNG, a link, not listed, not applicable, garbled numbers
    md = (out / "report.md").read_text()
    assert not any(f"### {k.title}" in md for k in report_figures.probe_figure_kinds())


def test_a_run_probed_before_the_memory_png_gets_its_profile_drawn_from_the_numbers(tmp_path):
    runs = tmp_path / "runs"
    d = fabricated(runs, "run", 1e-3, 0, task="hmm")
    (d / "figures" / "memory_profile.png").unlink()
    g = json.loads((d / "geometry.json").read_text())
    g["figures"] = [f for f in g["figures"] if not f.endswith("memory_profile.png")]
    (d / "geometry.json").write_text(json.dumps(g))
    out = tmp_path / "report"
    build_report([runs], out)
    png = out / "figures" / "memory_profile_hmm_transformer.png"
    assert png.read_bytes().startswith(PNG) and png.read_bytes() != PNG + b"run"
    md = (out / "report.md").read_text()
    assert "*hmm · transformer, seed 0: " in md and "belief move" in md  # the figure's caption: its run, its plot
