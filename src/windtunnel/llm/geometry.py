"""The paper's geometric signatures on a pretrained causal LM, each beside its null.

Every statistic is read from a Hugging Face causal LM wrapped by `windtunnel.hf.from_hf`, through its hook points
(`blocks.{l}.attn.v|k|pattern`) only, except `wk_columns`, which is a statistic of the key weights by definition
and reads them through the family's layout adapter (`lm.adapter.projections(l)["k"].matrix()`: GPT-NeoX's per-head
fused rows, GPT-2's Conv1D columns and GQA's key heads as the model itself computes them). Prompts are token-id lists
of any lengths, right-padded in batches: attention is causal, so the padding after a prompt's last token never
reaches it, and every statistic reads only positions 0..len-1 of each prompt.

Per layer (`DEFINITIONS`, one line each):

    value_pca          PCA of the last token's values, heads concatenated, standardised: PC1, PC1+PC2, participation
    attention_entropy  entropy (bits) of each head's attention row at the last query, per prompt, then averaged
    wk_columns         mean |cos| between the d_head key directions of each key head's W_K, in R^d_model
    heads_at_token     mean |cos| between the key heads' keys at the last token, per prompt, then averaged
    tokens_at_layer    mean |cos| between the keys of a prompt's positions, per key head, per prompt, then averaged

and, beside each, the same statistic of a random-init model of the same config (`random_init_like`) on the same
prompts, and E|cos| of independent isotropic vectors of the same dimension (`expected_abs_cosine_random`, about
sqrt(2/(pi d))) for the cosines. Intervals are bootstrap 95% intervals over prompts; the model and its null are
resampled with the same draws, so the difference has its own (paired) interval.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from windtunnel.geometry.stats import (
    bootstrap_ratios,
    expected_abs_cosine_random,
    participation_ratio,
    pca,
    probs_entropy_bits,
)

Progress = Callable[[str], None]
N_BOOT = 200  # bootstrap draws of the value PCA (an SVD each); the means take 1000 (they are cheap)
LEVEL = 0.95

DEFINITIONS = {
    "value_pca": (
        "hook blocks.{l}.attn.v at each prompt's last token, every key/value head concatenated (n_kv_heads x d_head "
        "features), each feature standardised over the prompts (z-score; a constant feature is left at 0); the "
        "explained-variance ratio of PC1 and of PC1+PC2 and the participation ratio (sum l)^2 / sum l^2 of the spectrum"
    ),
    "attention_entropy": (
        "hook blocks.{l}.attn.pattern, the row of the last query of each prompt: its Shannon entropy in bits per head "
        "and prompt, THEN the mean over prompts (never the entropy of a mean pattern); the layer's value is the mean "
        "over heads; `uniform_bits` is the mean of log2(prompt length), uniform attention's"
    ),
    "wk_columns": (
        "the key projection W_K^(h) (d_model x d_head, k = x W_K) of each key head, read through the layout adapter: "
        "mean |cos| over the d_head (d_head - 1) ordered off-diagonal pairs of its d_head columns, each a vector in "
        "R^d_model (the head's rows of the adapter's nn.Linear-form k matrix); per head, then the mean over key heads"
    ),
    "heads_at_token": (
        "hook blocks.{l}.attn.k (after rotary and any q/k norm) at each prompt's last token: mean |cos| over the "
        "off-diagonal pairs of the n_kv_heads key vectors (each in R^d_head), per prompt, then the mean over prompts; "
        "not applicable with one key head"
    ),
    "tokens_at_layer": (
        "hook blocks.{l}.attn.k (after rotary and any q/k norm) at every position 0..len-1 of a prompt: mean |cos| "
        "over the off-diagonal pairs of positions, per key head and prompt, then the mean over prompts (prompts of "
        "one token left out); the layer's value is the mean over key heads"
    ),
}
KEY_DEFINITIONS = ("wk_columns", "heads_at_token", "tokens_at_layer")


# --------------------------------------------------------------------------------------------- reading


@dataclass
class Readout:
    """What one model's hook points gave on the prompts, per layer, one row per prompt (in the prompts' order):
    `values` (N, n_kv_heads * d_head), `entropy` (N, n_heads) bits, `heads_at_token` (N,) (nan: one key head),
    `tokens_at_layer` (N, n_kv_heads) (nan: a prompt of one token), `lengths` (N,)."""

    values: list[np.ndarray]
    entropy: list[np.ndarray]
    heads_at_token: list[np.ndarray]
    tokens_at_layer: list[np.ndarray]
    lengths: np.ndarray


def _mean_abs_offdiag(v: torch.Tensor) -> torch.Tensor:
    """(..., n, d) -> (...): mean |cos| over the n (n - 1) ordered off-diagonal pairs of the n rows (nan for n < 2).
    A zero row has cosine 0 with everything."""
    v = v.double()
    n = v.shape[-2]
    if n < 2:
        return torch.full(v.shape[:-2], float("nan"), dtype=torch.float64)
    u = v / v.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    c = (u @ u.transpose(-2, -1)).abs()
    off = c.sum((-2, -1)) - c.diagonal(dim1=-2, dim2=-1).sum(-1)
    return off / (n * (n - 1))


@torch.no_grad()
def read(
    lm: Any, prompts: Sequence[Sequence[int]], batch_size: int = 16, pad_id: int = 0, progress: Progress | None = None,
    what: str = "model",
) -> Readout:  # fmt: skip
    """Run the token-id `prompts` through `lm` (a `from_hf` wrapper) in right-padded batches (shortest first), in eval
    mode without gradients, and read, through hooks on `blocks.{l}.attn.v|k|pattern`, each prompt's per-layer
    statistics (`Readout`)."""
    if not prompts or any(len(p) < 1 for p in prompts):
        raise ValueError("prompts: need at least one prompt, each of at least one token")
    L, N = int(lm.n_layers), len(prompts)
    lengths = np.array([len(p) for p in prompts])
    order = np.argsort(lengths, kind="stable")
    device = next(lm.parameters()).device
    parts: dict[str, list[list[torch.Tensor]]] = {k: [[] for _ in range(L)] for k in ("v", "e", "h", "t")}
    state: dict[str, torch.Tensor] = {}

    def at_last(x: torch.Tensor) -> torch.Tensor:  # (B,heads,T,...) -> (B,heads,...) at each prompt's last token
        rows = torch.arange(x.shape[0], device=x.device)
        return x.transpose(1, 2)[rows, state["last"].to(x.device)]

    def on_v(x: torch.Tensor, hook: Any) -> None:
        parts["v"][hook.layer()].append(at_last(x).flatten(1).double().cpu())

    def on_pattern(x: torch.Tensor, hook: Any) -> None:  # rows past a prompt's last token are 0 (causal mask)
        parts["e"][hook.layer()].append(probs_entropy_bits(at_last(x)).cpu())

    def on_k(x: torch.Tensor, hook: Any) -> None:
        parts["h"][hook.layer()].append(_mean_abs_offdiag(at_last(x)).cpu())
        lens = state["last"] + 1
        parts["t"][hook.layer()].append(
            torch.stack([_mean_abs_offdiag(x[b, :, : int(n)]).cpu() for b, n in enumerate(lens)])
        )

    fns: dict[str, Any] = {}
    for l in range(L):
        fns.update({f"blocks.{l}.attn.v": on_v, f"blocks.{l}.attn.pattern": on_pattern, f"blocks.{l}.attn.k": on_k})
    n_batches = (N + batch_size - 1) // batch_size
    said = time.monotonic()
    was = lm.training
    lm.eval()  # no dropout (GPT-2's MLP has some), whatever mode the caller left it in; restored below
    with lm.hooks(fns), contextlib.ExitStack() as restore:
        restore.callback(lm.train, was)
        for i in range(n_batches):
            idx = order[i * batch_size : (i + 1) * batch_size]
            T = int(lengths[idx].max())
            ids = torch.full((len(idx), T), int(pad_id), dtype=torch.long)
            for row, j in enumerate(idx):
                ids[row, : lengths[j]] = torch.as_tensor(list(prompts[j]), dtype=torch.long)
            state["last"] = torch.as_tensor(lengths[idx] - 1, dtype=torch.long)
            lm(ids.to(device))
            if progress is not None and (time.monotonic() - said > 5 or i + 1 == n_batches):
                progress(f"{what}: {min((i + 1) * batch_size, N)}/{N} prompts read")
                said = time.monotonic()
    back = np.argsort(order, kind="stable")  # rows were in length order: put them back in the prompts' order

    def stacked(key: str) -> list[np.ndarray]:
        return [torch.cat(parts[key][l]).numpy()[back] for l in range(L)]

    return Readout(stacked("v"), stacked("e"), stacked("h"), stacked("t"), lengths)


@torch.no_grad()
def wk_columns(lm: Any) -> np.ndarray:
    """(n_layers, n_kv_heads): per layer and key head, mean |cos| between the d_head columns of W_K^(h) (each in
    R^d_model), read through the adapter (`DEFINITIONS["wk_columns"]`)."""
    a = lm.adapter
    out = []
    for l in range(a.n_layers):
        w = a.projections(l)["k"].matrix()  # (n_kv_heads * d_head, d_model), nn.Linear form: head-major rows
        out.append(_mean_abs_offdiag(w.reshape(a.n_kv_heads, a.d_head, -1).cpu()).numpy())
    return np.stack(out)


def random_init_like(model: nn.Module, seed: int = 0) -> nn.Module:
    """A causal LM of `model`'s config with random weights (transformers' own init, `from_config`), drawn under a
    fixed seed without touching the caller's random state, in `model`'s dtype and on its device, in eval mode."""
    from windtunnel.models.hf.core import transformers

    lib = transformers()
    param = next(model.parameters())
    devices = [param.device.index] if param.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(int(seed))
        null = lib.AutoModelForCausalLM.from_config(model.config, dtype=param.dtype)
    return null.to(param.device).eval()


# --------------------------------------------------------------------------------------------- statistics


def _mean_ci(x: np.ndarray, n_boot: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per column of `x` (N,M) (nan: left out): the mean over rows, its bootstrap interval over rows (M,2), and the
    rows counted (M,)."""
    ok = ~np.isnan(x)
    num, den = torch.from_numpy(np.where(ok, x, 0.0)), torch.from_numpy(ok.astype(np.float64))
    est, ci = bootstrap_ratios(num, den, n_boot=n_boot, seed=seed, level=LEVEL)
    return est.numpy(), ci.numpy(), ok.sum(0)


def _spectrum(x: np.ndarray) -> np.ndarray:
    """The PCA variances (eigenvalues, descending) of the rows of `x` (n,d), by the smaller of its two Gram matrices."""
    x = x - x.mean(0, keepdims=True)
    g = x @ x.T if x.shape[0] <= x.shape[1] else x.T @ x
    return np.clip(np.linalg.eigvalsh(g)[::-1], 0.0, None)


def standardise(x: np.ndarray) -> np.ndarray:
    """Each column of `x` (n,d) as a z-score over the rows (population std); a constant column becomes 0."""
    x = np.asarray(x, dtype=np.float64)
    sd = x.std(0)
    return (x - x.mean(0)) / np.where(sd > 0, sd, 1.0)


def _pca_summary(ratios: np.ndarray) -> np.ndarray:
    """(pc1, pc12, participation ratio) of a spectrum of explained-variance ratios."""
    return np.array([ratios[0], ratios[:2].sum(), participation_ratio(ratios)])


PCA_KEYS = ("pc1", "pc12", "participation_ratio")


def _one_blas_thread() -> Any:
    """A context with numpy's BLAS on one thread: the bootstrap's many small eigendecompositions run several times
    faster than with threads that contend for busy cores."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(1, user_api="blas")


def _pca_draws(x: np.ndarray, draws: np.ndarray) -> np.ndarray:
    """(R,3): `_pca_summary` of the standardised rows of `x` resampled by each row of `draws` (R,N)."""
    out = np.empty((draws.shape[0], 3))
    with _one_blas_thread():
        for r, idx in enumerate(draws):
            lam = _spectrum(standardise(x[idx]))
            out[r] = _pca_summary(lam / lam.sum()) if lam.sum() > 0 else np.nan
    return out


def _value_pca(x: np.ndarray, draws: np.ndarray) -> tuple[dict[str, Any], np.ndarray]:
    """`value_pca` of `x` with the bootstrap resamples `draws` (R,N); also (1 + R, 3): the estimate, then each draw."""
    ratios, _ = pca(standardise(x))
    est, boots = _pca_summary(ratios), _pca_draws(x, draws)
    out: dict[str, Any] = {"n": int(x.shape[0]), "d": int(x.shape[1])}
    for i, key in enumerate(PCA_KEYS):
        out[key] = float(est[i])
        out[f"{key}_ci"] = _interval(boots[:, i], est[i])
    return out, np.concatenate([est[None], boots])


def _rows(x: Any) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64)
    if a.ndim != 2 or a.shape[0] < 3:
        raise ValueError(f"x: expected an (n,d) array with n >= 3 (got shape {a.shape})")
    return a


def _draws(n: int, n_boot: int, seed: int) -> np.ndarray:
    return np.random.default_rng(int(seed)).integers(0, n, (int(n_boot), n))


def value_pca(x: Any, n_boot: int = N_BOOT, seed: int = 0) -> dict[str, Any]:
    """PCA of the rows of `x` (n,d), each column standardised first (`standardise`): `pc1` (PC1's explained-variance
    ratio), `pc12` (PC1+PC2's) and `participation_ratio`, each with a bootstrap 95% interval over rows (`<key>_ci`)."""
    a = _rows(x)
    return _value_pca(a, _draws(a.shape[0], n_boot, seed))[0]


def paired_value_pca(x: Any, null: Any, n_boot: int = N_BOOT, seed: int = 0) -> dict[str, Any]:
    """`value_pca` of `x` ("model") and of `null` ("null_model"; the same rows of a null model), resampled with the
    same draws, and the paired difference x - null with its interval ("diff")."""
    a, b = _rows(x), _rows(null)
    if a.shape[0] != b.shape[0]:
        raise ValueError(f"x, null: need the same rows (got {a.shape[0]} and {b.shape[0]})")
    draws = _draws(a.shape[0], n_boot, seed)
    (ours, ours_all), (theirs, theirs_all) = _value_pca(a, draws), _value_pca(b, draws)
    diff = ours_all - theirs_all
    out: dict[str, Any] = {k: float(diff[0, i]) for i, k in enumerate(PCA_KEYS)}
    out.update({f"{k}_ci": _interval(diff[1:, i], diff[0, i]) for i, k in enumerate(PCA_KEYS)})
    return {"model": ours, "null_model": theirs, "diff": out}


def _interval(boots: np.ndarray, est: float) -> list[float]:
    """The central LEVEL interval of bootstrap draws (the estimate twice where there are none)."""
    boots = boots[~np.isnan(boots)]
    if boots.size == 0:
        return [float(est), float(est)]
    alpha = (1 - LEVEL) / 2
    lo, hi = np.quantile(boots, [alpha, 1 - alpha])
    return [float(lo), float(hi)]


def _per_prompt(model: np.ndarray, null: np.ndarray, n_boot: int, seed: int) -> dict[str, Any]:
    """A per-prompt statistic (N,M) of the model and its null: per column and for the mean over columns, each one's
    mean over prompts with its interval, and the paired difference with its own."""
    out: dict[str, Any] = {}
    for name, m in (("model", model), ("null_model", null), ("diff", model - null)):
        cols = np.concatenate([m, m.mean(1, keepdims=True)], 1) if m.shape[1] > 1 else m  # (N, M+1) or (N, 1)
        est, ci, n = _mean_ci(cols, n_boot, seed)
        entry: dict[str, Any] = {"mean": float(est[-1]), "mean_ci": ci[-1].tolist(), "n": int(n[-1])}
        if m.shape[1] > 1:
            entry.update(per_head=est[:-1].tolist(), per_head_ci=ci[:-1].tolist())
        out[name] = entry
    return out


def drop_pct(first: float, last: float) -> float | None:
    """How much lower `last` is than `first`, in % of `first` (None where `first` is 0)."""
    return 100.0 * (first - last) / first if first else None


def geometry(
    lm: Any, null_lm: Any, prompts: Sequence[Sequence[int]], *, seed: int = 0, batch_size: int = 16,
    n_boot: int = N_BOOT, pad_id: int = 0, progress: Progress | None = None, more_nulls: Sequence[Any] = (),
) -> dict[str, Any]:  # fmt: skip
    """Every statistic of `DEFINITIONS`, per layer, of `lm` and of `null_lm` (a `from_hf` wrapper of
    `random_init_like`), read on the same token-id `prompts`, with the paired differences and, for the cosines,
    E|cos| of random isotropic vectors of their dimension. Bootstrap draws are seeded by `seed`. `more_nulls`: further
    random-init draws of the same config; each entry then also holds every draw's value, their range, the model's
    place against it and its ratio to their mean (`_with_draws`)."""
    if len(prompts) < 3:
        raise ValueError(f"prompts: need at least 3 (got {len(prompts)})")
    ours = read(lm, prompts, batch_size, pad_id, progress, "model")
    nulls = [null_lm, *more_nulls]
    pairs = []
    for i, null in enumerate(nulls):
        what = "random-init model" + (f" {i + 1} of {len(nulls)}" if len(nulls) > 1 else "")
        theirs = read(null, prompts, batch_size, pad_id, progress, what)
        (progress or (lambda _: None))(f"statistics against the {what}: value PCA, attention entropy, keys")
        pairs.append(_paired(lm, null, ours, theirs, seed, n_boot))
    return _with_draws(pairs[0], pairs) if len(pairs) > 1 else pairs[0]


def _paired(lm: Any, null_lm: Any, ours: Any, theirs: Any, seed: int, n_boot: int) -> dict[str, Any]:
    """The statistics of `geometry` from the model's and one null's readings (`read`)."""
    a = lm.adapter
    L, H, Hkv, dh, d = a.n_layers, a.n_heads, a.n_kv_heads, a.d_head, a.d_model

    values = [paired_value_pca(ours.values[l], theirs.values[l], n_boot, seed) for l in range(L)]
    entropy = [_per_prompt(ours.entropy[l], theirs.entropy[l], 1000, seed) for l in range(L)]
    lens = ours.lengths
    uniform = float(np.log2(lens).mean())
    layer_means = {k: [e[k]["mean"] for e in entropy] for k in ("model", "null_model")}

    w_ours, w_null = wk_columns(lm), wk_columns(null_lm)
    keys: dict[str, Any] = {
        "wk_columns": {
            "d": d,
            "null_analytic": expected_abs_cosine_random(d),
            "layers": [
                {
                    "model": {"per_head": w_ours[l].tolist(), "mean": float(w_ours[l].mean())},
                    "null_model": {"per_head": w_null[l].tolist(), "mean": float(w_null[l].mean())},
                    "diff": {"mean": float(w_ours[l].mean() - w_null[l].mean())},
                }
                for l in range(L)
            ],
        },
        "tokens_at_layer": {
            "d": dh,
            "null_analytic": expected_abs_cosine_random(dh),
            "layers": [_per_prompt(ours.tokens_at_layer[l], theirs.tokens_at_layer[l], 1000, seed) for l in range(L)],
        },
    }
    if Hkv >= 2:
        keys["heads_at_token"] = {
            "d": dh,
            "null_analytic": expected_abs_cosine_random(dh),
            "layers": [
                _per_prompt(ours.heads_at_token[l][:, None], theirs.heads_at_token[l][:, None], 1000, seed)
                for l in range(L)
            ],
        }
    else:
        keys["heads_at_token"] = {"not_applicable": "the model has one key/value head: no pair of heads to compare"}
    for name in KEY_DEFINITIONS:
        stat = keys[name]
        stat["definition"] = DEFINITIONS[name]
        for layer in stat.get("layers", []):
            layer["diff_vs_analytic"] = layer["model"]["mean"] - stat["null_analytic"]
            layer["ratio_to_analytic"] = layer["model"]["mean"] / stat["null_analytic"]
            layer["null_model_diff_vs_analytic"] = layer["null_model"]["mean"] - stat["null_analytic"]

    return {
        "shape": {"n_layers": L, "n_heads": H, "n_kv_heads": Hkv, "d_head": dh, "d_model": d},
        "n_prompts": int(lens.size),
        "prompt_tokens": {"min": int(lens.min()), "mean": float(lens.mean()), "max": int(lens.max())},
        "value_pca": {"definition": DEFINITIONS["value_pca"], "d": Hkv * dh, "layers": values},
        "attention_entropy": {
            "definition": DEFINITIONS["attention_entropy"],
            "uniform_bits": uniform,
            "layers": entropy,
            "drop_first_to_last_pct": {k: drop_pct(v[0], v[-1]) for k, v in layer_means.items()},
        },
        "key_orthogonality": keys,
    }


HEADLINE = ("mean", "pc1")  # the number of an entry's part that its draws are compared on


def _headline(part: dict[str, Any]) -> float:
    return float(next(part[k] for k in HEADLINE if k in part))


def _entries(tree: Any, path: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    """Every (path, entry) of a `geometry` result whose entry compares the model with a null ("model", "null_model")."""
    if isinstance(tree, dict):
        if "model" in tree and "null_model" in tree and isinstance(tree["model"], dict):
            return [(path, tree)]
        return [e for k, v in tree.items() for e in _entries(v, (*path, k))]
    if isinstance(tree, list):
        return [e for i, v in enumerate(tree) for e in _entries(v, (*path, i))]
    return []


def _with_draws(first: dict[str, Any], pairs: list[dict[str, Any]]) -> dict[str, Any]:
    """`first` (the model against the first null) with, in each entry, the headline number (mean, or PC1 for the value
    PCA) of every null draw (`null_draws`), their range, where the model stands against them (`model_vs_nulls`:
    "above every draw", "below every draw" or "within the draws") with its one-sided rank p-value (`null_rank_p`: a
    model that is one more random draw is beyond all k with probability 1/(k + 1), so 3 draws never give below 0.25),
    the model's ratio to their mean, and each draw's paired difference with its interval (`diff_draws`)."""
    each = [dict(_entries(p)) for p in pairs]
    for path, entry in _entries(first):
        parts = [e[path] for e in each]
        draws = [_headline(p["null_model"]) for p in parts]
        model = _headline(entry["model"])
        lo, hi = min(draws), max(draws)
        entry["null_draws"] = draws
        entry["null_range"] = [lo, hi]
        entry["model_vs_nulls"] = (
            "above every draw" if model > hi else "below every draw" if model < lo else "within the draws"
        )
        mean = float(np.mean(draws))
        entry["ratio_to_nulls"] = model / mean if mean else None
        # a Monte Carlo p-value: an exchangeable draw is this far out with probability (1 + beyond) / (k + 1)
        beyond = min(sum(x >= model for x in draws), sum(x <= model for x in draws))
        entry["null_rank_p"] = (1 + beyond) / (len(draws) + 1)
        key = next(k for k in HEADLINE if k in entry["diff"])
        entry["diff_draws"] = [{"diff": float(p["diff"][key]), "ci": p["diff"].get(f"{key}_ci")} for p in parts]
    first["null_draws"] = len(pairs)
    return first
