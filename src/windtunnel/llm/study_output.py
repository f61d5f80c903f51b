"""The `llm-geometry` out folder: its files (llm_geometry.json, .md, figures/), which of them overwrite may delete,
and the tables and figures written into it."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from windtunnel.llm import geometry as geo
from windtunnel.llm.prompt_sources import _prompts_module
from windtunnel.report.document import Document, Figure, Heading, Paragraph, Table
from windtunnel.store.rundir import (
    LOCK_FILE,
    OWNER_FILE,
    atomic_write,
    check_writable,
    contents,
    read_json_object,
    write_json,
)
from windtunnel.text import number

Progress = Callable[[str], None]
KIND = "windtunnel.llm_geometry"  # marks llm_geometry.json as this command's (what overwrite may replace)
JSON_NAME, MD_NAME, FIGURES = "llm_geometry.json", "llm_geometry.md", "figures"
FIGURE_NAMES = ("value_pc1.png", "attention_entropy.png", "key_orthogonality.png")
_TEMP = re.compile(r"\.(.+)\.\w+\.tmp")  # rundir.atomic_write's .NAME.XXXXXXXX.tmp


# --------------------------------------------------------------------------------------------- out folder


def _ours(rel: str, name: str) -> bool:
    """Whether a regular file `name` in folder `rel` of the out folder is one this command writes (or a temp file of
    one of its writes)."""
    if rel == "":
        temp = _TEMP.fullmatch(name)
        return (temp.group(1) if temp else name) in (JSON_NAME, MD_NAME)
    return rel == FIGURES and (name in FIGURE_NAMES or name.replace(".tmp.png", ".png") in FIGURE_NAMES)


def _entries(out: Path) -> list[tuple[Path, bool]]:
    """Every entry of `out` (its lock left out), a folder after what it holds, with whether this command wrote it.
    A symbolic link never is."""
    found: list[tuple[Path, bool]] = []
    for p in sorted(out.iterdir()):
        if p.name in (LOCK_FILE, OWNER_FILE):
            continue
        if p.is_symlink():
            found.append((p, False))
        elif p.is_dir() and p.name == FIGURES:
            found.extend(
                (q, not q.is_symlink() and q.is_file() and _ours(FIGURES, q.name)) for q in sorted(p.iterdir())
            )
            found.append((p, True))
        else:
            found.append((p, p.is_file() and _ours("", p.name)))
    return found


def refuse_existing(out: Path, overwrite: bool) -> None:
    """Before any work: an existing non-empty `out` needs `overwrite`, and overwrite only ever replaces this
    command's own files (each entry named by the layout; llm_geometry.json, if there, this command's)."""
    if not out.exists():
        return
    if not out.is_dir():
        raise ValueError(f"--out: {str(out)!r} is a file, not a directory")
    if not contents(out):
        return
    if not overwrite:
        raise FileExistsError(
            f"--out: {str(out)!r} already exists and is not empty; pass overwrite=True (--overwrite) to replace the "
            "files llm-geometry wrote there"
        )
    stray = next((p for p, ours in _entries(out) if not ours), None)
    if stray is not None:
        raise ValueError(
            f"--overwrite: {str(out)!r} holds {str(stray.relative_to(out))!r}, which llm-geometry did not write; "
            "refusing to delete anything"
        )
    if (out / JSON_NAME).exists():
        try:
            kind = read_json_object(out / JSON_NAME).get("kind")
        except Exception as err:  # noqa: BLE001 - unreadable: not provably ours
            kind = f"unreadable ({err})"
        if kind != KIND:
            raise ValueError(
                f"--overwrite: {str(out / JSON_NAME)!r} is not one llm-geometry wrote (kind {kind!r}); refusing to "
                "delete anything"
            )


def clear(out: Path) -> None:
    """Delete this command's files in `out`, after `refuse_existing(out, overwrite=True)`."""
    refuse_existing(out, overwrite=True)
    if not out.is_dir():
        return
    for p, _ in _entries(out):
        if p.is_dir():
            p.rmdir()
        else:
            p.unlink()


# --------------------------------------------------------------------------------------------- writing


def write(out: Path, result: dict[str, Any], overwrite: bool, say: Progress) -> None:
    """Figures, tables, then llm_geometry.json (last: its presence means the folder is complete), under the folder's
    lock; an earlier llm-geometry's files are deleted first where `overwrite` (`clear`)."""
    from windtunnel.store.lock import DirLock

    say(f"writing {out}")
    check_writable(out, "--out")
    refuse_existing(out, overwrite)  # again: the folder may have changed while the model ran
    with DirLock(out, "output directory"):
        if overwrite:
            clear(out)
        write_figures(out / FIGURES, result)
        atomic_write(out / MD_NAME, markdown(result, out))
        write_json(out / JSON_NAME, result, sort_keys=False)


def _f(x: Any, spec: str = ".4g") -> str:
    if x is None or (isinstance(x, float) and not np.isfinite(x)):
        return "—"
    return number(float(x), spec)


def _ci(est: Any, ci: Sequence[float] | None) -> str:
    return f"{_f(est)} [{_f(ci[0])}, {_f(ci[1])}]" if ci else _f(est)


def report(result: dict[str, Any], figures: Path) -> Document:
    """llm_geometry.md as a document: the model and its prompts, then one section per statistic beside its nulls (with
    its figure under `figures`), the exact-posterior scores, and how to read them."""
    doc = Document(f"llm-geometry: {result['model_dir']}")
    for section in (_summary, _value_pca, _attention_entropy, _key_orthogonality, _scores, _reading):
        doc.blocks += section(result, figures)
    return doc


def markdown(result: dict[str, Any], out: Path) -> str:
    """llm_geometry.md of the out folder `out` (`report`; figure links relative to it)."""
    return report(result, out / FIGURES).markdown(out)


def _summary(result: dict[str, Any], figures: Path) -> list[Any]:
    c, src = result["config"], result["prompts"]
    where = f"built-in, seed {src['seed']}" if src["source"] == "builtin" else src["source"]
    tokens = result["geometry"]["prompt_tokens"]
    return [
        Paragraph(
            f"{c['family']} ({c['model_type']}): {c['n_layers']} layers, {c['n_heads']} heads ({c['n_kv_heads']} "
            f"key/value), d_model {c['d_model']}, d_head {c['d_head']}, {c['n_params']:,} parameters, {c['dtype']}. "
            f"{result['n']} prompts ({where}; {tokens['min']}–{tokens['max']} tokens). Null: {result['null_model']}. "
            "Intervals: bootstrap 95% over prompts; Δ = model − random-init, paired (same draws)."
        )
    ]


def _value_pca(result: dict[str, Any], figures: Path) -> list[Any]:
    g = result["geometry"]
    k = g.get("null_draws", 1)
    rows = []
    for layer, e in enumerate(g["value_pca"]["layers"]):
        m, z, d = e["model"], e["null_model"], e["diff"]
        rows.append([
            str(layer), _ci(m["pc1"], m["pc1_ci"]), _ci(z["pc1"], z["pc1_ci"]), _drawn(e), _ci(d["pc1"], d["pc1_ci"]),
            _f(m["pc12"]), _f(z["pc12"]), _f(m["participation_ratio"]), _f(z["participation_ratio"]),
        ])  # fmt: skip
    header = ["layer", "PC1 model", "PC1 random-init", f"PC1, {k} random-init draws", "Δ PC1", "PC1+2 model",
              "PC1+2 random", "PR model", "PR random"]  # fmt: skip
    return [
        Heading("Value PCA at the last token"),
        Paragraph(result["definitions"]["value_pca"] + f" ({g['value_pca']['d']} features)."),
        Table(header, rows),
        Figure(figures / FIGURE_NAMES[0], "value PCA at the last token: PC1 and participation ratio by layer"),
    ]


def _attention_entropy(result: dict[str, Any], figures: Path) -> list[Any]:
    g = result["geometry"]
    a, k = g["attention_entropy"], g.get("null_draws", 1)
    drop = a["drop_first_to_last_pct"]
    rows = [
        [str(layer), _ci(e["model"]["mean"], e["model"]["mean_ci"]),
         _ci(e["null_model"]["mean"], e["null_model"]["mean_ci"]), _drawn(e),
         _ci(e["diff"]["mean"], e["diff"]["mean_ci"]), " ".join(_f(h, ".3g") for h in e["model"].get("per_head", []))]
        for layer, e in enumerate(a["layers"])
    ]  # fmt: skip
    return [
        Heading("Attention entropy at the last query (bits)"),
        Paragraph(
            a["definition"] + f". Uniform attention: {_f(a['uniform_bits'])} bits. First → last layer: "
            f"{_f(drop['model'], '.3g')}% lower (model), {_f(drop['null_model'], '.3g')}% (random-init)."
        ),
        Table(
            ["layer", "model (mean over heads)", "random-init", f"{k} random-init draws", "Δ", "model per head"], rows
        ),
        Figure(figures / FIGURE_NAMES[1], "attention entropy at the last query by layer, model against random-init"),
    ]


def _key_orthogonality(result: dict[str, Any], figures: Path) -> list[Any]:
    g = result["geometry"]
    k = g.get("null_draws", 1)
    header = ["layer", "model", "random-init", f"{k} random-init draws", "random vectors", "Δ random-init",
              "Δ random vectors", "model / random vectors"]  # fmt: skip
    blocks: list[Any] = [Heading("Key orthogonality (mean |cos|)")]
    for name in geo.KEY_DEFINITIONS:
        stat = g["key_orthogonality"][name]
        blocks += [Heading(f"`{name}`", level=3), Paragraph(stat["definition"] + ".")]
        if "not_applicable" in stat:
            blocks.append(Paragraph(f"Not applicable: {stat['not_applicable']}."))
            continue
        rows = [
            [str(layer), _ci(e["model"]["mean"], e["model"].get("mean_ci")),
             _ci(e["null_model"]["mean"], e["null_model"].get("mean_ci")), _drawn(e), _f(stat["null_analytic"]),
             _ci(e["diff"]["mean"], e["diff"].get("mean_ci")), _f(e["diff_vs_analytic"]),
             _f(e.get("ratio_to_analytic"), ".3g")]
            for layer, e in enumerate(stat["layers"])
        ]  # fmt: skip
        blocks += [
            Paragraph(f"E|cos| of random isotropic vectors in d = {stat['d']}: {_f(stat['null_analytic'])}."),
            Table(header, rows),
        ]
    blocks.append(Figure(figures / FIGURE_NAMES[2], "mean |cos| between keys by layer, model against random-init"))
    return blocks


def _scores(result: dict[str, Any], figures: Path) -> list[Any]:
    scores = result["scores"]
    blocks: list[Any] = [Heading("Exact-posterior prompts")]
    if "skipped" in scores or "not_available" in scores:
        return [*blocks, Paragraph(f"Not scored: {scores.get('skipped') or scores.get('not_available')}.")]
    left = scores.get("left_out")
    if left:
        counts = ", ".join(f"{f} {n}" for f, n in left["families"].items())
        blocks.append(
            Paragraph(
                f"Left out, {left['n']} prompts whose choices are not single tokens of this tokenizer ({counts}): "
                + left["why"]
                + "."
            )
        )
    seeds = result.get("null_seeds") or [result["null_seed"]]
    drawn = scores.get("null_models") or [scores["null_model"]]
    shown = [("Model", scores["model"])] + [
        (f"Random-init model, seed {s}", one) for s, one in zip(seeds, drawn, strict=False)
    ]
    mod = _prompts_module()
    for title, table in shown:
        blocks.append(Heading(title, level=3))
        blocks.append(mod.score_table(table) if mod is not None else Paragraph(json.dumps(table)))
    return blocks


def _reading(result: dict[str, Any], figures: Path) -> list[Any]:
    return [
        Heading("Reading it"),
        Paragraph(
            "Each number is a description of this model on these prompts, beside the same number of a model that "
            "learned nothing. A difference from the random-init model says training changed that statistic; it does "
            "not by itself say the model computes a posterior (docs/llm.md). The paired intervals are over prompts "
            "against one draw; the draws' range is how far random inits differ, and a model above or below every one "
            "of k draws has a rank p-value of 1/(k + 1) at best (0.25 with 3 draws): more draws (--nulls) before "
            "reading it as training's doing."
        ),
    ]


def _drawn(entry: dict[str, Any]) -> str:
    """The null draws' range of an entry and where the model stands against it ("—" with one draw)."""
    if "null_range" not in entry:
        return "—"
    lo, hi = entry["null_range"]
    where = {"above every draw": "model above", "below every draw": "model below"}.get(entry["model_vs_nulls"], "")
    return f"{_f(lo)}–{_f(hi)}" + (f" ({where}, p {_f(entry['null_rank_p'], '.2g')})" if where else "")


def write_figures(folder: Path, result: dict[str, Any]) -> None:
    """The three figures (module docstring), each layer on the x axis, model against random-init model."""
    from matplotlib.ticker import MaxNLocator

    from windtunnel.plotting import save, subplots

    g = result["geometry"]
    L = g["shape"]["n_layers"]
    layers = np.arange(L)

    def band(ax: Any, entries: list[dict[str, Any]], key: str, ci_key: str | None, label: str, **kw: Any) -> None:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        y = np.array([e[key] if e[key] is not None else np.nan for e in entries], dtype=float)
        ax.plot(layers, y, marker="o", label=label, **kw)
        if ci_key and all(ci_key in e for e in entries):
            ci = np.array([e[ci_key] for e in entries], dtype=float)
            ax.fill_between(layers, ci[:, 0], ci[:, 1], alpha=0.2, color=ax.lines[-1].get_color())

    v = g["value_pca"]["layers"]
    fig, axes = subplots(1, 2, figsize=(10, 3.6), squeeze=False, gridspec_kw={"wspace": 0.3})
    ax = axes[0, 0]
    band(ax, [e["model"] for e in v], "pc1", "pc1_ci", "model PC1")
    band(ax, [e["null_model"] for e in v], "pc1", "pc1_ci", "random-init PC1", linestyle="--")
    ax.set(xlabel="layer", ylabel="explained variance ratio", title="value PCA at the last token: PC1", ylim=(0, None))
    ax.legend(fontsize=8)
    ax = axes[0, 1]
    band(ax, [e["model"] for e in v], "participation_ratio", "participation_ratio_ci", "model")
    band(ax, [e["null_model"] for e in v], "participation_ratio", "participation_ratio_ci", "random-init", ls="--")
    ax.set(xlabel="layer", ylabel="participation ratio", title="value PCA: participation ratio")
    ax.legend(fontsize=8)
    save(fig, folder / FIGURE_NAMES[0], bbox_inches="tight")

    a = g["attention_entropy"]
    fig, axes = subplots(1, 1, figsize=(5.5, 3.6), squeeze=False)
    ax = axes[0, 0]
    band(ax, [e["model"] for e in a["layers"]], "mean", "mean_ci", "model")
    band(ax, [e["null_model"] for e in a["layers"]], "mean", "mean_ci", "random-init", linestyle="--")
    ax.axhline(a["uniform_bits"], color="grey", linewidth=0.8, linestyle=":", label="uniform attention")
    ax.set(xlabel="layer", ylabel="bits", title="attention entropy at the last query (mean over heads)", ylim=(0, None))
    ax.legend(fontsize=8)
    save(fig, folder / FIGURE_NAMES[1], bbox_inches="tight")

    k = g["key_orthogonality"]
    n_keys = len(geo.KEY_DEFINITIONS)
    fig, axes = subplots(1, n_keys, figsize=(4.6 * n_keys, 3.6), squeeze=False, gridspec_kw={"wspace": 0.35})
    for ax, name in zip(axes[0], geo.KEY_DEFINITIONS, strict=True):
        stat = k[name]
        ax.set(xlabel="layer", ylabel="mean |cos|", title=name)
        if "not_applicable" in stat:
            ax.text(0.5, 0.5, "not applicable:\none key/value head", ha="center", va="center", transform=ax.transAxes)
            continue
        band(ax, [e["model"] for e in stat["layers"]], "mean", "mean_ci", "model")
        band(ax, [e["null_model"] for e in stat["layers"]], "mean", "mean_ci", "random-init", linestyle="--")
        ax.axhline(stat["null_analytic"], color="grey", linewidth=0.8, linestyle=":", label=f"random, d={stat['d']}")
        ax.set_ylim(0, None)
        ax.legend(fontsize=8)
    save(fig, folder / FIGURE_NAMES[2], bbox_inches="tight")
