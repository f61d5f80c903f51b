"""All single-checkpoint probes over one model and one task, in one call: `probe_model(model, task)`.

Each entry of the result is either the probe's numbers or {"not_applicable": "<reason>"}; a probe that fails
on an unexpected model is reported as {"error": "<message>"} rather than sinking the other probes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

from windtunnel.geometry.ablation import ablations
from windtunnel.geometry.attention import sharpening
from windtunnel.geometry.clusters import state_clusters
from windtunnel.geometry.data import ProbeData, collect, heldout_batch
from windtunnel.geometry.keys import key_orthogonality
from windtunnel.geometry.lens import logit_lens
from windtunnel.geometry.manifold import value_manifold
from windtunnel.geometry.memory import memory

PROBES = ("keys", "attention", "manifold", "clusters", "lens", "ablation", "memory")


def _safe(fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    try:
        return fn()
    except (RuntimeError, ValueError, KeyError, AttributeError, TypeError, IndexError) as err:
        return {"error": f"{type(err).__name__}: {err}"}


def probe_model(
    model: nn.Module,
    task: Any,
    n: int = 256,
    init_model: nn.Module | None = None,
    seed: int = 0,
    n_ablation: int | None = None,
    probes: tuple[str, ...] = PROBES,
) -> tuple[dict[str, Any], ProbeData]:
    """Run the single-checkpoint probes on `n` held-out sequences; returns (results, the probe data).

    `init_model`: the same architecture at initialisation (the baseline of the key, manifold, attention-evidence and
    memory probes; the manifold, attention and memory ones read it on the same held-out sequences); `n_ablation`:
    sequences for the ablation sweep (default `n`, its own held-out seed).
    """
    unknown = set(probes) - set(PROBES)
    if unknown:
        raise ValueError(f"probes: unknown {sorted(unknown)}; choose from {', '.join(PROBES)}")
    model.eval()
    data = collect(model, task, n=n)
    wants_init = {"attention", "manifold"} & set(probes)
    init_data = collect(init_model, task, n=n) if init_model is not None and wants_init else None
    runners: dict[str, Callable[[], dict[str, Any]]] = {
        "keys": lambda: key_orthogonality(model, init_model, seed=seed),
        "attention": lambda: sharpening(data, task, init_data),
        "manifold": lambda: value_manifold(data, seed=seed, task=task, init_data=init_data),
        "clusters": lambda: state_clusters(data, seed=seed),
        "lens": lambda: logit_lens(model, data),
        "ablation": lambda: ablations(model, heldout_batch(task, n_ablation or n, offset=2, device=data.batch.device)),
        "memory": lambda: memory(model, task, data.batch, init_model, seed=seed),
    }
    results: dict[str, Any] = {
        "n_sequences": int(n),
        "entropy_error_bits": data.entropy_error,
        "heldout_seed": "seeds.test_seed(2**29 + 0) (probes), + 1 (frame-precision), + 2 (ablations)",
    }
    for p in probes:
        results[p] = _safe(runners[p])
    return results, data
