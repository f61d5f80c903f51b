"""Figures of the probes (PNG, windtunnel.plotting): one function per figure, `write_figures` draws all that apply."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
from torch import nn

from windtunnel.geometry.clusters import map_labels
from windtunnel.geometry.data import ProbeData
from windtunnel.geometry.keys import key_cosines
from windtunnel.geometry.manifold import scored_points
from windtunnel.geometry.stats import pca
from windtunnel.plotting import save, subplots


def _ok(result: Any) -> bool:
    return isinstance(result, dict) and "not_applicable" not in result and "error" not in result


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    return save(fig, path)


def key_heatmaps(model: nn.Module, path: Path) -> Path:
    """|cosine| between the probe tokens' keys per layer (mean of |cos| over heads)."""
    cos = np.abs(key_cosines(model)).mean(1)  # (L,n,n)
    L = cos.shape[0]
    fig, axes = subplots(1, L, figsize=(2.6 * L, 2.6), squeeze=False)
    for l, ax in enumerate(axes[0]):
        im = ax.imshow(cos[l], vmin=0, vmax=1, cmap="viridis")
        ax.set_title(f"layer {l}")
        ax.set_xticks([])
        ax.set_yticks([])
    fig.colorbar(im, ax=axes[0].tolist(), shrink=0.8, label="|cos| (mean over heads)")
    return save(fig, path)


def attention_entropy(result: dict[str, Any], path: Path) -> Path:
    """Attention entropy by layer: each head as a dot, the head mean as a line, the uniform bound dashed."""
    fig, ax = subplots(figsize=(4.5, 3.2))
    for l, heads in enumerate(result["entropy_bits_per_head"]):
        ax.scatter([l] * len(heads), heads, s=12, color="tab:gray", alpha=0.6)
    ax.plot(result["entropy_bits_per_layer"], "o-", label="mean over heads")
    ax.axhline(result["uniform_bound_bits"], ls="--", color="k", lw=0.8, label="uniform attention")
    ax.set_xlabel("layer")
    ax.set_ylabel("attention entropy (bits)")
    ax.set_title(f"drop first->last: {result['drop_first_to_last_pct']:.0f}%")
    ax.legend(fontsize=7)
    return _save(fig, path)


def manifold_scatter(data: ProbeData, path: Path, max_points: int = 3000) -> Path:
    """PC1-PC2 of the final-layer representation at scored positions, coloured by posterior entropy."""
    x, h, _ = scored_points(data, data.final, max_points)
    ratios, scores = pca(x)
    fig, ax = subplots(figsize=(4.5, 3.8))
    sc = ax.scatter(
        scores[:, 0], scores[:, 1] if scores.shape[1] > 1 else 0 * scores[:, 0], c=h.cpu().numpy(), s=5, cmap="viridis"
    )
    fig.colorbar(sc, ax=ax, label="posterior entropy (bits)")
    ax.set_xlabel(f"PC1 ({ratios[0]:.0%})")
    ax.set_ylabel(f"PC2 ({ratios[1] if ratios.size > 1 else 0:.0%})")
    return _save(fig, path)


def state_colours(n: int) -> list[Any]:
    """`n` distinct colours for discrete states: tab10 up to 10, tab20 up to 20, then evenly spaced hues."""
    from matplotlib import colormaps

    if n <= 10:
        return [colormaps["tab10"](i) for i in range(n)]
    if n <= 20:
        return [colormaps["tab20"](i) for i in range(n)]
    return [colormaps["hsv"](i / n) for i in range(n)]


def cluster_scatter(data: ProbeData, path: Path, max_points: int = 3000) -> Path:
    """PC1-PC2 of the final-layer representation coloured by the posterior's MAP state: one discrete colour per
    state and a legend naming them (states are categories, not a scale)."""
    labels = map_labels(data)
    assert labels is not None  # drawn only where state_clusters applied: a class posterior
    lab, _ = labels
    x, _, idx = scored_points(data, data.final, max_points)
    y = lab[data.mask][idx.to(lab.device)].cpu().numpy()
    _, scores = pca(x)
    pc2 = scores[:, 1] if scores.shape[1] > 1 else 0 * scores[:, 0]
    fig, ax = subplots(figsize=(5.2, 3.8))
    states = np.unique(y)
    for state, colour in zip(states, state_colours(len(states)), strict=True):
        at = y == state
        ax.scatter(scores[at, 0], pc2[at], s=5, color=colour, label=f"{int(state)}")
    ax.legend(
        title="MAP state",
        fontsize=7,
        title_fontsize=7,
        markerscale=2,
        ncol=max(1, math.ceil(len(states) / 10)),
        loc="center left",
        bbox_to_anchor=(1.0, 0.5),
    )
    ax.set_xlabel("PC1")
    ax.set_ylabel("PC2")
    return _save(fig, path)


def lens_kl(result: dict[str, Any], path: Path) -> Path:
    """KL(posterior || logit lens) in bits per layer, log scale."""
    fig, ax = subplots(figsize=(4.5, 3.2))
    kl = np.maximum(np.asarray(result["kl_bits_per_layer"]), 1e-6)
    ax.semilogy(range(len(kl)), kl, "o-")
    ax.set_xticks(range(len(kl)), ["emb"] + [str(i) for i in range(len(kl) - 1)])
    ax.set_xlabel("residual stream after layer")
    ax.set_ylabel("KL (bits)")
    return _save(fig, path)


def ablation_bars(result: dict[str, Any], path: Path) -> Path:
    """Entropy-error increase per ablated layer part, and per layer-0 head when there are heads."""
    heads = result.get("heads")
    has_heads = isinstance(heads, list)
    fig, axes = subplots(1, 2 if has_heads else 1, figsize=(8 if has_heads else 4.5, 3.2), squeeze=False)
    ax = axes[0][0]
    parts = result["layers"]
    width = 0.8 / len(parts)
    for i, (part, deltas) in enumerate(parts.items()):
        ax.bar(np.arange(len(deltas)) + i * width, deltas, width, label=part)
    n_layers = len(next(iter(parts.values())))
    ax.set_xticks(np.arange(n_layers) + width * (len(parts) - 1) / 2, [str(l) for l in range(n_layers)])
    ax.set_xlabel("ablated layer")
    ax.set_ylabel("entropy error change (bits)")
    ax.legend(fontsize=7)
    if isinstance(heads, list):  # has_heads
        ax = axes[0][1]
        ax.bar(range(len(heads[0])), heads[0], color="tab:red")
        ax.set_xticks(range(len(heads[0])))
        ax.set_xlabel("layer-0 head")
        ax.set_ylabel("entropy error change (bits)")
    return _save(fig, path)


def frame_precision_curves(result: dict[str, Any], path: Path) -> Path:
    """Frame similarity to the final checkpoint and entropy error against training step."""
    rows = result["checkpoints"]
    steps = [r["step"] for r in rows]
    fig, ax = subplots(figsize=(5, 3.4))
    ax.semilogy(steps, [max(r["entropy_error_bits"], 1e-6) for r in rows], "o-", color="tab:red")
    ax.set_xlabel("step")
    ax.set_ylabel("entropy error (bits)", color="tab:red")
    if "frame_cosine" in rows[0]:
        ax2 = ax.twinx()
        ax2.plot(steps, [r["frame_cosine"] for r in rows], "s-", color="tab:blue")
        ax2.set_ylabel("layer-0 attention cosine to final", color="tab:blue")
        ax2.set_ylim(0, 1.05)
    return _save(fig, path)


def write_figures(results: dict[str, Any], model: nn.Module, data: ProbeData, fig_dir: str | Path) -> list[str]:
    """Draw every figure whose probe applied; returns the written paths."""
    d = Path(fig_dir)
    d.mkdir(parents=True, exist_ok=True)
    todo = [
        ("keys", lambda: key_heatmaps(model, d / "key_cosines.png")),
        ("attention", lambda: attention_entropy(results["attention"], d / "attention_entropy.png")),
        ("manifold", lambda: manifold_scatter(data, d / "value_manifold.png")),
        ("clusters", lambda: cluster_scatter(data, d / "state_clusters.png")),
        ("lens", lambda: lens_kl(results["lens"], d / "lens_kl.png")),
        ("ablation", lambda: ablation_bars(results["ablation"], d / "ablation.png")),
        ("dynamics", lambda: frame_precision_curves(results["dynamics"], d / "frame_precision.png")),
    ]
    return [str(draw()) for key, draw in todo if _ok(results.get(key))]


def arms_across_seeds(rows: list[tuple[str, dict[str, dict[str, Any]], Any]], path: Path) -> Path:
    """One panel per quantity: each arm's trained mean with its across-seed interval (`geometry.seeds.seed_summary`)
    and its own init (hollow), the quantity's baseline dashed. rows: (quantity, {arm: across_seeds row}, baseline)."""
    n = len(rows)
    cols = min(4, max(n, 1))
    grid = (n + cols - 1) // cols
    fig, axes = subplots(grid, cols, figsize=(3.4 * cols, 2.6 * grid), squeeze=False)
    for ax, (name, arms, baseline) in zip(axes.flat, rows, strict=False):
        for i, (arm, row) in enumerate(arms.items()):
            for part, dx, face in (("trained", 0.0, f"C{i}"), ("init", 0.25, "none")):
                s = row.get(part)
                if s is None or "not_measurable" in s:  # no number to draw
                    continue
                lo_hi = s["interval"]
                err = [[s["mean"] - lo_hi[0]], [lo_hi[1] - s["mean"]]] if lo_hi else None
                label = f"{arm} {part}"
                ax.errorbar([i + dx], [s["mean"]], yerr=err, fmt="o", color=f"C{i}", mfc=face, capsize=3, label=label)
                ax.scatter([i + dx] * len(s["values"]), s["values"], s=8, color=f"C{i}", alpha=0.5)
        if baseline is not None and "not_measurable" not in baseline:
            ax.axhline(baseline["mean"], ls="--", color="k", lw=0.8)
        ax.set_xticks(range(len(arms)), list(arms))
        ax.set_title(name, fontsize=7)
    for ax in list(axes.flat)[n:]:
        ax.set_visible(False)
    axes.flat[0].legend(fontsize=6)
    return _save(fig, path)


def frame_precision_by_arm(runs: list[tuple[str, int, dict[str, Any]]], path: Path) -> Path:
    """Entropy error and layer-0 frame cosine to the final checkpoint against step, one colour per arm and one line
    style per seed. runs: (label, colour index, the run's `dynamics` result)."""
    from matplotlib.ticker import NullFormatter

    fig, (err_ax, frame_ax) = subplots(1, 2, figsize=(9, 3.4))
    seen: dict[int, int] = {}
    for label, colour, result in runs:
        rows = result["checkpoints"]
        steps = [r["step"] for r in rows]
        nth = seen[colour] = seen.get(colour, -1) + 1  # this arm's nth seed
        style = {"color": f"C{colour}", "ls": ("-", "--", ":", "-.")[nth % 4], "ms": 3}
        err_ax.loglog(steps, [max(r["entropy_error_bits"], 1e-6) for r in rows], marker="o", **style)
        if "frame_cosine" in rows[0]:
            frame_ax.semilogx(steps, [r["frame_cosine"] for r in rows], marker="o", label=label, **style)
    for ax in (err_ax, frame_ax):
        ax.xaxis.set_minor_formatter(NullFormatter())
    err_ax.set_xlabel("step")
    err_ax.set_ylabel("entropy error (bits)")
    frame_ax.set_xlabel("step")
    frame_ax.set_ylabel("layer-0 attention cosine to final")
    frame_ax.set_ylim(0, 1.05)
    frame_ax.legend(fontsize=6)
    return _save(fig, path)
