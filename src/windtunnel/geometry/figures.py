"""Figures of the probes (PNG, windtunnel.plotting): one function per figure; `write_figures` draws those of every
registered probe that applied (`Probe.figures`, geometry/registry.py)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
from torch import nn

from windtunnel.geometry.clusters import map_labels
from windtunnel.geometry.data import ProbeData
from windtunnel.geometry.keys import key_cosines
from windtunnel.geometry.manifold import point_positions, scored_points, value_vectors
from windtunnel.geometry.registry import ProbeContext, probes
from windtunnel.geometry.stats import MIN_WITHIN_POINTS, pca, varying_groups, within_group_correlations
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


def _offdiag_mean(m: np.ndarray) -> float:
    """Mean of the off-diagonal entries of a square matrix."""
    n = m.shape[0]
    return float((m.sum() - np.trace(m)) / (n * (n - 1))) if n > 1 else float("nan")


def key_layer0_vs_init(model: nn.Module, init_model: nn.Module | None, path: Path) -> Path:
    """Layer 0's |cosine| matrix between the probe tokens' keys (`keys.probe_tokens`; mean of |cos| over heads),
    trained beside the same model at init when `init_model` is given; each panel titled with its mean off-diagonal
    |cos| (the key probe's `mean_abs_cos_per_layer[0]`)."""
    mats = [("trained", np.abs(key_cosines(model)[0]).mean(0))]  # (n,n)
    if init_model is not None:
        mats.append(("init", np.abs(key_cosines(init_model)[0]).mean(0)))
    fig, axes = subplots(1, len(mats), figsize=(3.2 * len(mats) + 0.8, 3.0), squeeze=False)
    for ax, (name, m) in zip(axes[0], mats, strict=True):
        im = ax.imshow(m, vmin=0, vmax=1, cmap="viridis")
        ax.set_title(f"layer 0, {name}: mean |cos| {_offdiag_mean(m):.3f}", fontsize=8)
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


def _centred_within(a: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """(n,) or (n,k) `a` minus the mean of its group's rows."""
    _, inv = np.unique(groups, return_inverse=True)
    count = np.bincount(inv).astype(np.float64)
    flat = a.reshape(a.shape[0], -1)
    means = np.stack([np.bincount(inv, weights=flat[:, j]) / count for j in range(flat.shape[1])], 1)  # (G,k)
    return (flat - means[inv]).reshape(a.shape)


def manifold_representation(data: ProbeData) -> tuple[Any, str]:
    """The representation the value-manifold figure draws: the last layer's attention value vectors where the model
    has attention (the paper's value manifold), else the final-layer representation; and its name."""
    v = value_vectors(data)
    return (data.final, "final representation") if v is None else (v, "last layer's value vectors")


def manifold_within_position(data: ProbeData, path: Path, max_points: int = 3000) -> Path:
    """The value manifold at the scored positions, two panels: PC1-PC2 coloured by the exact posterior entropy
    (pooled over positions), and the same PC scores and entropies each centred on its position's mean, at the
    positions where the entropy varies (`stats.varying_groups`): the part position cannot fake, whose PC1 correlation
    is the manifold probe's `within_position` one. Where the entropy is a function of position alone the second panel
    says so."""
    rep, name = manifold_representation(data)
    x, h_t, idx = scored_points(data, rep, max_points)
    h = h_t.double().cpu().numpy()
    pos = point_positions(data.mask, idx).cpu().numpy()
    ratios, scores = pca(x)
    pcs = scores[:, :2] if scores.shape[1] > 1 else np.concatenate([scores[:, :1], 0 * scores[:, :1]], 1)
    fig, (pooled, within) = subplots(1, 2, figsize=(9.5, 3.8))
    sc = pooled.scatter(pcs[:, 0], pcs[:, 1], c=h, s=5, cmap="viridis")
    fig.colorbar(sc, ax=pooled, label="posterior entropy (bits)")
    pooled.set_xlabel(f"PC1 ({ratios[0]:.0%})")
    pooled.set_ylabel(f"PC2 ({ratios[1] if ratios.size > 1 else 0:.0%})")
    pooled.set_title(f"{name}: pooled over positions", fontsize=8)
    keep = varying_groups(h, pos)
    if int(keep.sum()) < MIN_WITHIN_POINTS:
        within.text(
            0.5,
            0.5,
            "not measurable: the posterior entropy\ndoes not vary within a position"
            + ("" if not keep.any() else f"\n(only {int(keep.sum())} points where it does)"),
            ha="center",
            va="center",
            fontsize=8,
            transform=within.transAxes,
        )
        within.set_xticks([])
        within.set_yticks([])
    else:
        c_pcs, c_h = _centred_within(pcs[keep], pos[keep]), _centred_within(h[keep], pos[keep])
        lim = float(np.abs(c_h).max()) or 1.0
        sc = within.scatter(c_pcs[:, 0], c_pcs[:, 1], c=c_h, s=5, cmap="coolwarm", vmin=-lim, vmax=lim)
        fig.colorbar(sc, ax=within, label="entropy − its position's mean (bits)")
        rho = within_group_correlations(pcs[keep, 0], h[keep], pos[keep])["spearman"]
        within.set_xlabel("PC1 − its position's mean")
        within.set_ylabel("PC2 − its position's mean")
        within.set_title(f"within position: Spearman(PC1, H) = {rho:.2f}", fontsize=8)
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


def memory_lines(result: Any) -> dict[str, Any] | None:
    """What `memory_profile` draws from a memory probe's result (geometry.json's "memory"), checked: {"lags": [int],
    name: [(mean, lo, hi) or None per lag]} for "exact", "model" and "init" where present; None where the result is
    not applicable or not of that shape (a garbled geometry.json draws nothing rather than raising)."""
    if not _ok(result) or not isinstance(result.get("lags"), list) or not result["lags"]:
        return None
    lags = result["lags"]
    if not all(isinstance(j, int) and not isinstance(j, bool) for j in lags):
        return None
    ci = result.get("ci") if isinstance(result.get("ci"), dict) else {}

    def num(v: Any) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

    out: dict[str, Any] = {"lags": lags}
    for name in ("exact", "model", "init"):
        means, bands = result.get(name), ci.get(name)
        if not isinstance(means, list) or len(means) != len(lags):
            continue
        if not isinstance(bands, list) or len(bands) != len(lags):
            bands = [None] * len(lags)
        pts = []
        for m, b in zip(means, bands, strict=True):
            lo_hi = b if isinstance(b, list) and len(b) == 2 and all(num(v) for v in b) else [m, m]
            pts.append((m, *lo_hi) if num(m) and all(num(v) for v in lo_hi) else None)
        if any(p is not None for p in pts):
            out[name] = pts
    return out if "model" in out or "exact" in out else None


# Floor of the memory profile's log axis (bits): a move of exactly 0 is drawn there.
MEMORY_FLOOR_BITS = 1e-9


def memory_profile(result: dict[str, Any], path: Path, color: str = "tab:blue") -> Path | None:
    """The memory probe's profile: per lag j, how far the belief moves (KL, bits; log axis) when the observation j
    steps back alone is resampled, for the model (`color`) and the same model at init (grey) beside the exact filter
    (black, dashed), each with its bootstrap interval over sequences; None where `memory_lines` finds nothing."""
    lines = memory_lines(result)
    if lines is None:
        return None
    fig, ax = subplots(figsize=(4.8, 3.4))
    styles = {
        "exact": {"color": "k", "ls": "--", "label": "exact filter"},
        "model": {"color": color, "ls": "-", "label": "model"},
        "init": {"color": "tab:gray", "ls": ":", "label": "model at init"},
    }
    for name, style in styles.items():
        pts = [(j, p) for j, p in zip(lines["lags"], lines.get(name, []), strict=False) if p is not None]
        if not pts:
            continue
        xs = [j for j, _ in pts]
        mean, lo, hi = (np.maximum([p[i] for _, p in pts], MEMORY_FLOOR_BITS) for i in range(3))
        ax.plot(xs, mean, marker="o", ms=3, **style)
        ax.fill_between(xs, lo, hi, color=style["color"], alpha=0.15, lw=0)
    ax.set_yscale("log")
    ax.set_xticks(lines["lags"])
    ax.set_xlabel("lag j (observation resampled j steps back)")
    ax.set_ylabel("belief move, KL (bits)")
    ax.legend(fontsize=7)
    return _save(fig, path)


SEED_STYLES = ("-", "--", ":", "-.")  # one line style per seed, in seed order


def memory_seeds(results: list[tuple[int, Any]], path: Path, color: str = "tab:blue") -> Path | None:
    """The memory profile of every probed seed of a cell, overlaid, each labelled: left, per lag j, how far each
    seed's belief moves (KL, bits; log axis) beside the exact filter's (black, dashed; the lowest seed's edits);
    right, each seed's move as a share of the exact filter's, beside the same share for the filters of the last w
    observations (grey: "last w obs" moves as much as the exact filter below lag w and not at all from lag w on, so a
    share of 1 at lag 1 is what reading 2 observations gives, not exactness). results: (seed, memory result) in seed
    order; None where no seed has a profile (`memory_lines`)."""
    drawn = [(seed, r, lines) for seed, r in results if (lines := memory_lines(r)) is not None]
    if not drawn:
        return None
    fig, (move_ax, ratio_ax) = subplots(1, 2, figsize=(9.6, 3.4))
    first = drawn[0][2]
    exact = [(j, p[0]) for j, p in zip(first["lags"], first.get("exact", []), strict=False) if p is not None]
    if exact:
        xs, ys = zip(*exact, strict=True)
        move_ax.plot(xs, np.maximum(ys, MEMORY_FLOOR_BITS), "k--", marker="o", ms=3, label="exact filter")
    for n, (seed, r, lines) in enumerate(drawn):
        style = {"color": color, "ls": SEED_STYLES[n % len(SEED_STYLES)], "marker": "o", "ms": 3}
        pts = [(j, p[0]) for j, p in zip(lines["lags"], lines.get("model", []), strict=False) if p is not None]
        if pts:
            xs, ys = zip(*pts, strict=True)
            move_ax.plot(xs, np.maximum(ys, MEMORY_FLOOR_BITS), label=f"model, seed {seed}", **style)
        ratio = [(j, v) for j, v in zip(lines["lags"], r.get("model_ratio") or [], strict=False) if _finite(v)]
        if ratio:
            xs, ys = zip(*ratio, strict=True)
            ratio_ax.plot(xs, ys, label=f"model, seed {seed}", **style)
    windows = sorted((int(k.split()[1]), k) for k in drawn[0][1] if k.startswith("last ") and k.endswith(" obs_ratio"))
    for n, (w, key) in enumerate(windows):
        pts = [(j, v) for j, v in zip(first["lags"], drawn[0][1][key], strict=False) if _finite(v)]
        if pts:
            xs, ys = zip(*pts, strict=True)
            grey = str(0.35 + 0.5 * n / max(len(windows) - 1, 1))
            ratio_ax.plot(xs, ys, color=grey, lw=0.8, label=f"last {w} obs" if n < 3 or n == len(windows) - 1 else None)
    ratio_ax.axhline(1.0, color="k", ls="--", lw=0.6)
    move_ax.set_yscale("log")
    for ax in (move_ax, ratio_ax):
        ax.set_xticks(first["lags"])
        ax.set_xlabel("lag j (observation resampled j steps back)")
        ax.legend(fontsize=6)
    move_ax.set_ylabel("belief move, KL (bits)")
    ratio_ax.set_ylabel("move / exact filter's move")
    return _save(fig, path)


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def write_figures(
    results: dict[str, Any],
    model: nn.Module,
    data: ProbeData,
    fig_dir: str | Path,
    init_model: nn.Module | None = None,
) -> list[str]:
    """Draw every figure (`Probe.figures`) of every registered probe that applied; returns the written paths.
    `init_model`: the same architecture at init, drawn beside the trained model's layer-0 keys."""
    d = Path(fig_dir)
    d.mkdir(parents=True, exist_ok=True)
    context = ProbeContext(model, data=data, init_model=init_model)
    return [
        str(p)
        for probe in probes()
        for figure in probe.figures
        if _ok(results.get(probe.name))
        and (p := figure.draw(context, results[probe.name], d / figure.filename)) is not None
    ]


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
