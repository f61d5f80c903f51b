"""A report a reader can find their way through: a table of contents listing every section, an at-a-glance grid whose
links land on anchors of the same document (report.md and report.html), definitions folded away behind one sentence,
window columns in numeric order, interval ends beyond a metric's range labelled, a forest plot per tunnel, and
figures as files beside report.html (loaded lazily), not embedded."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from report_runs import write_run
from windtunnel.report import build_report, tables
from windtunnel.report.collect import RunRecord
from windtunnel.report.document import Cell, Contents, Details, Document, Heading, Paragraph, Table
from windtunnel.report.formatting import BEYOND_RANGE, interval_text

PNG = b"\x89PNG\r\n\x1a\n"


def _bits(mean: float, lo: float, hi: float) -> dict[str, float]:
    return {"mean": mean, "lo": lo, "hi": hi}


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    """A report of fabricated runs: two architectures and the uniform predictor on bijection and recall, the
    transformer's bijection cell of two seeds far apart (its Student-t interval reaches below 0 bits), Mamba's recall
    cell of two seeds far apart (its interval reaches past 100%)."""
    root = tmp_path_factory.mktemp("nav")
    runs = root / "runs"

    def run(name: str, arch: str, task: str, seed: int, metrics: dict) -> None:
        config = {
            "task": {"name": task, "params": {}},
            "model": {"arch": arch},
            "seed": seed,
            "train": {"steps": 10, "batch_size": 4},
        }
        write_run(runs, name, config=config, evals={"default": {"task_params": {}, "n": 10, "metrics": metrics}})

    for seed, v in enumerate([0.001, 0.05]):
        run(f"bijection-transformer-s{seed}", "transformer", "bijection", seed, {"entropy_mae_bits": _bits(v, v, v)})
    run("bijection-mamba", "mamba", "bijection", 0, {"entropy_mae_bits": _bits(0.2, 0.19, 0.21)})
    run("bijection-uniform", "uniform", "bijection", 0, {"entropy_mae_bits": _bits(0.6, 0.6, 0.6)})
    for seed, acc in enumerate([0.3, 1.0]):
        run(
            f"recall-mamba-s{seed}",
            "mamba",
            "recall",
            seed,
            {"accuracy": _bits(acc, acc, acc), "entropy_mae_bits": _bits(0.001, 0.001, 0.001)},
        )
    run("recall-uniform", "uniform", "recall", 0, {"accuracy": _bits(0.03, 0.02, 0.04)})
    out = root / "report"
    build_report([runs], out)
    return out


def _md_links(md: str) -> list[str]:
    return re.findall(r"\]\(#([^)]+)\)", md)


def _md_anchors(md: str) -> set[str]:
    return set(re.findall(r'<a id="([^"]+)"></a>', md))


def test_the_grid_links_resolve_to_anchors_of_the_same_document(report):
    md = (report / "report.md").read_text()
    html = (report / "report.html").read_text()
    grid = md.split("## At a glance: architecture × tunnel")[1].split("\n## ")[0]
    links = _md_links(grid)
    assert "cell-bijection-transformer" in links and "cell-recall-mamba" in links
    assert len(links) == 5  # one per cell: transformer and Mamba on bijection, Mamba on recall, uniform on both
    assert set(links) <= _md_anchors(md), set(links) - _md_anchors(md)
    # the same links in report.html, each to an id that exists there
    ids = set(re.findall(r"\bid='([^']+)'", html))
    hrefs = re.findall(r"href='#([^']+)'", html)
    assert set(links) <= set(hrefs) and set(hrefs) <= ids, set(hrefs) - ids
    # each grid cell: its mark coloured by its level, one number, a link
    assert "<td class='cell fail'><a href='#cell-bijection-mamba'>" in html
    assert "[✓ 100.0%]" not in grid and "[✗ 65.0%](#cell-recall-mamba)" in grid  # the mean over seeds, its mark


def test_the_contents_list_every_section(report):
    md = (report / "report.md").read_text()
    headings = re.findall(r"^(#{2,3}) (.+)$", md, re.M)
    contents = md.split("\n\n")[1]  # after the title, the table of contents
    entries = re.findall(r"^( *)- \[(.+)\]\(#([^)]+)\)$", contents, re.M)
    assert [(len(h) - 2, text) for h, text in headings] == [(len(indent) // 2, text) for indent, text, _ in entries]
    assert {a for _, _, a in entries} <= _md_anchors(md)
    for section in ("Verdicts at a glance", "At a glance: architecture × tunnel", "Each cell against the thresholds"):
        assert any(text == section for _, text, _ in entries), section
    html = (report / "report.html").read_text()
    toc = html.split("<nav class='toc'>")[1].split("</nav>")[0]
    for _, _, anchor in entries:
        assert f"<a href='#{anchor}'>" in toc and f" id='{anchor}'>" in html, anchor


def test_table1_definitions_are_folded_behind_one_sentence(report):
    md = (report / "report.md").read_text()
    table1 = md.split("## Table 1")[1].split("\n## ")[0]
    summary = re.search(r"<details><summary>(.+?)</summary>", table1)
    assert summary and summary.group(1).count(". ") == 0  # one sentence in view
    folded = table1.split("</summary>")[1].split("</details>")[0]
    assert "Entropy error = " in folded  # the definitions, folded
    assert table1.index("</details>") < table1.index("| Architecture |")
    html = (report / "report.html").read_text()
    assert re.search(r"<details><summary>.+?</summary>\n<p>Entropy error = mean over test sequences", html)


def test_interval_ends_beyond_the_range_are_labelled_not_clipped(report):
    assert interval_text(_bits(0.788, 0.32, 1.256), "accuracy") == f"78.8% [32.0%, 125.6%{BEYOND_RANGE}]"
    assert interval_text(_bits(0.83, -1.061, 2.724), "kl_bits") == f"0.830 [-1.061{BEYOND_RANGE}, 2.724]"
    assert interval_text(_bits(0.5, 0.0, 1.0), "accuracy") == "50.0% [0.0%, 100.0%]"  # the ends themselves: in
    assert interval_text(_bits(-0.1, -0.2, 0.1), "nll_bits") == "-0.100 [-0.200, 0.100]"  # no range: no label
    md = (report / "report.md").read_text()
    details = md.split("### Recall")[1].split("\n## ")[0]
    row = next(line for line in details.splitlines() if "cell-recall-mamba" in line)
    assert re.search(rf"65\.0% \[-?\d+\.\d%{BEYOND_RANGE}, \d+\.\d%{BEYOND_RANGE}\]", row), row
    assert f"{BEYOND_RANGE} beyond the metric's range" in details  # the footnote under the table


def test_a_forest_plot_per_tunnel_is_written_and_shown(report):
    md = (report / "report.md").read_text()
    html = (report / "report.html").read_text()
    for task in ("bijection", "recall"):
        png = report / "figures" / f"forest_{task}.png"
        assert png.read_bytes().startswith(PNG), png
        assert f"](figures/forest_{task}.png)" in md
        assert f"<img src='figures/forest_{task}.png' loading='lazy'" in html


def test_report_html_refers_to_its_figures_as_files(report):
    html = (report / "report.html").read_text()
    assert "data:image/png;base64," not in html
    for src in re.findall(r"<img src='([^']+)'", html):
        assert (report / src).is_file(), src
    # a figure outside the report's folder (nothing to refer to beside the page) is embedded
    doc = Document("t")
    outside = report.parent / "outside.png"
    outside.write_bytes(PNG)
    from windtunnel.report.document import Figure

    doc.add(Figure(outside, "c"))
    assert "data:image/png;base64," in doc.html(report)


def test_window_columns_in_numeric_order():
    names = ["last 10 obs", "context-blind", "last 2 obs", "last 11 obs", "last 1 obs", "last 3 obs"]
    ordered = sorted(names, key=tables.approximation_order)
    assert ordered == ["context-blind", "last 1 obs", "last 2 obs", "last 3 obs", "last 10 obs", "last 11 obs"]

    def approx(w: int) -> dict:
        return {"gain_bits": _bits(0.01 * w, 0.0, 0.02 * w), "entropy_mae_bits": 0.1 / w, "kl_bits": 0.05 / w}

    windows = {"context-blind": approx(1), **{f"last {w} obs": approx(w) for w in (1, 10, 11, 12, 2, 3)}}
    record = RunRecord(
        path=Path("hmm-sticky-transformer"),
        task="hmm-sticky",
        arch="transformer",
        seed=0,
        evals={"default": {"metrics": {"entropy_mae_bits": _bits(0.1, 0.1, 0.1)}, "approximations": windows}},
        config={"task": {"name": "hmm-sticky", "params": {}}, "train": {"steps": 10, "batch_size": 4}},
    )
    ((task, header, rows),) = tables.approximations_tables([record])
    assert task == "hmm-sticky"
    assert header[4:] == [
        f"gain over '{n}'" for n in ["context-blind", *(f"last {w} obs" for w in (1, 2, 3, 10, 11, 12))]
    ]
    assert rows[-1][4:] == [f"{0.1 / w:.4f} / {0.05 / w:.4f}" for w in (1, 1, 2, 3, 10, 11, 12)]  # columns follow


def test_document_anchors_are_unique_and_slugged():
    doc = Document("t")
    doc.add(Contents())
    doc.add(Heading("Results"))
    doc.add(Heading("Results"))
    doc.add(Heading("<script>x</script>", 3, anchor="tunnel-<b>"))
    doc.add(Details("one sentence.", [Paragraph("folded"), Heading("Inside", 3)]))
    doc.add(Table(["a"], [[Cell("go", href="#results-2")], [Cell("here", anchor="cell-x")]]))
    anchors = [a for _, a in doc.headings()]
    assert anchors == ["results", "results-2", "tunnel-b", "inside"]
    assert doc.anchors() == {*anchors, "cell-x"}
    md = doc.markdown(Path("."))
    assert "- [Results](#results)\n- [Results](#results-2)\n  - [&lt;script&gt;x&lt;/script&gt;](#tunnel-b)" in md
    assert "<details><summary>one sentence.</summary>" in md and "  - [Inside](#inside)" in md
    assert "| [go](#results-2) |" in md and '| <a id="cell-x"></a>here |' in md
    assert set(_md_links(md)) <= _md_anchors(md)
    html = doc.html()
    assert "<script>" not in html and "<td id='cell-x'>here</td>" in html


def test_results_json_unchanged_by_the_layout(report):
    results = json.loads((report / "results.json").read_text())
    assert set(results["table1"]) == {"transformer", "mamba", "uniform"}
