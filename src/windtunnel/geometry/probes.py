"""All single-checkpoint probes over one model and one task, in one call: `probe_model(model, task)`.

The probes are those of the registry (geometry/registry.py: the built-ins, then any a module registered), less those
that read a run's history (`Probe.history`: `probe_run` runs them). Each entry of the result is either the probe's
numbers or {"not_applicable": "<reason>"}; a probe that fails on an unexpected model is reported as
{"error": "<message>"} rather than sinking the other probes. A model whose outputs are not the task's answers (a
Hugging Face LM's whole vocabulary) is refused before any probe runs (`data.check_fits`).
"""

from __future__ import annotations

from typing import Any

from torch import nn

from windtunnel import tasks
from windtunnel.geometry.data import ProbeData, collect
from windtunnel.geometry.registry import ProbeContext, get_probe, run_probe
from windtunnel.geometry.registry import probes as registered

# Where the probes' entropy error comes from: its own held-out sequences, never eval.json's, so the two differ by
# sampling (on the same sequences the probes' model pass is the evaluation's, to float tolerance).
SAMPLE_NOTE = (
    "mean |H(model) - H(posterior)| in bits over the scored positions of the probes' own {n} held-out sequences "
    "(heldout_seed), not eval.json's test sequences: it differs from eval.json's entropy_mae_bits by sampling"
)


def single_checkpoint_probes() -> tuple[str, ...]:
    """The names `probe_model` runs by default: every registered probe that reads one checkpoint."""
    return tuple(p.name for p in registered() if not p.history)


def probe_model(
    model: nn.Module,
    task: Any,
    n: int = 256,
    init_model: nn.Module | None = None,
    seed: int = 0,
    n_ablation: int | None = None,
    probes: tuple[str, ...] | None = None,
) -> tuple[dict[str, Any], ProbeData]:
    """Run the single-checkpoint probes (`probes`; default: every registered one) on `n` held-out sequences; returns
    (results, the probe data).

    `init_model`: the same architecture at initialisation (the baseline of the key, manifold, attention-evidence and
    memory probes; the manifold, attention and memory ones read it on the same held-out sequences); `n_ablation`:
    sequences for the ablation sweep (default `n`, its own held-out seed).
    """
    available = single_checkpoint_probes()
    chosen = available if probes is None else tuple(probes)
    unknown = set(chosen) - set(available)
    if unknown:
        raise ValueError(f"probes: unknown {sorted(unknown)}; choose from {', '.join(available)}")
    model.eval()
    task = tasks.as_task(task)  # any wind tunnel: the probes call its hooks directly
    data = collect(model, task, n=n)
    wants_init = any(get_probe(p).init_data for p in chosen)
    init_data = collect(init_model, task, n=n) if init_model is not None and wants_init else None
    context = ProbeContext(
        model, task, data, init_model=init_model, init_data=init_data, seed=seed, n=n, n_ablation=n_ablation
    )
    results: dict[str, Any] = {
        "n_sequences": int(n),
        "entropy_error_bits": data.entropy_error,
        "entropy_error_sample": SAMPLE_NOTE.format(n=int(n)),
        "heldout_seed": "seeds.test_seed(2**29 + 0) (probes), + 1 (frame-precision), + 2 (ablations)",
    }
    for p in chosen:
        results[p] = run_probe(get_probe(p), context)
    return results, data
