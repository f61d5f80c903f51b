"""Memory probe: how far a predictor's belief at t moves when the observation o_{t-j} alone is resampled, beside how
far the exact filter's moves under the same edit (`task.posterior_for`), for lags j = 1..J.

Which window filter a model is KL-nearest to is a description, not a memory claim: a model can sit nearest "last 1
obs" while carrying nothing forward, or carry evidence no window filter describes. This probe measures memory
directly. A predictor that reads nothing before the current observation moves 0 at every lag >= 1; the exact filter
moves by what the tunnel needs carried (more on a sticky chain, where the state persists).

The edit: for each sequence, E observations o_i (i drawn without replacement from 0..K-1-J, so every lag is read
for every edit) are each resampled to another symbol, uniform among the others (`task.observation_slots`); one edit
moves the belief at every later observation, so lag j is read at o_{i+j} (the first scored position at or after it).
The move is KL(belief on the original ‖ belief on the edited prompt) in bits, averaged over a sequence's edits, then
over sequences, with paired bootstrap intervals over sequences (`stats.bootstrap_ratios`).

A ratio of 1 to the exact filter's move is not exactness: on an HMM the filter of the last w observations
("last w obs", `window_predictors`) moves as much as the exact filter at every lag below w and not at all from lag w
on, so at lag 1 "last 2 obs" scores about 1 too. The probe measures the window filters under the same edits and
reports, per lag j, the ratio of the shortest window that reads o_{t-j} ("last j+1 obs": `reach_ratio`), beside the
model's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.distributions import Categorical, Distribution

from windtunnel.geometry.data import model_spec, not_applicable
from windtunnel.geometry.stats import bootstrap_ratios, probs_kl_bits
from windtunnel.models.base import predictive
from windtunnel.tasks.base import Batch

MAX_LAG = 8  # lags 1..MAX_LAG, capped at K - 1
EDITS = 4  # edited observations per sequence, each read at every lag
MAX_SEQUENCES = 256  # sequences probed (the first of the probe batch)
CHUNK = 256  # prompts per forward pass
N_BOOT, LEVEL = 1000, 0.95

Predict = Callable[[torch.Tensor], Distribution]  # prompts (N,T) -> a predictive with batch shape (N,T)

DEFINITION = (
    "per lag j: mean over sequences (and E edits each) of KL(belief at o_{i+j} on the original prompt ‖ on the prompt "
    "with o_i alone resampled to another symbol) in bits; 'exact' = the exact posterior (task.posterior_for) under "
    "the same edits; '<name>_ratio' = its mean / the exact mean; 'last w obs' = the filter of the last w observations "
    "under the same edits (HMMs); 'reach_ratio' at lag j = the ratio of 'last j+1 obs', the shortest window that reads "
    "the edited observation; ci: paired bootstrap intervals over sequences"
)


@dataclass(frozen=True)
class Edits:
    """E copies of each of B prompts, each with one observation resampled, and where each lag's belief is read."""

    inputs: torch.Tensor  # (B*E,T) edited prompts, prompt-major (copy e of prompt b at row b*E + e)
    reads: torch.Tensor  # (B,E,J) scored position where lag j = 1..J of copy e is read


def make_edits(task: Any, inputs: torch.Tensor, mask: torch.Tensor, max_lag: int, edits: int, seed: int) -> Edits | str:
    """The resampled copies of prompts `inputs` (B,T) scored at `mask` (B,T) (drawn on the CPU from `seed`, so every
    device reads the same), or the reason the task has none."""
    slots = task.observation_slots(inputs)
    if slots is None:
        return (
            "the task names no observation positions (task.observation_slots); resampling a bijection's revealed value "
            "or a stored pair of recall changes which answers are possible (an infinite KL), not a memory"
        )
    mask = mask.bool()
    positions, symbols = slots  # (B,K) long, (n,) long
    B, K = positions.shape
    J, n_sym = min(int(max_lag), K - 1), symbols.numel()
    if J < 1 or n_sym < 2:
        return f"needs at least two observations and two symbols (got {K} and {n_sym})"
    E = min(int(edits), K - J)
    g = torch.Generator().manual_seed(int(seed))
    dev = inputs.device
    which = torch.rand(B, K - J, generator=g).argsort(1)[:, :E].to(dev)  # (B,E) edited observation i in 0..K-J-1
    shift = torch.randint(1, n_sym, (B, E), generator=g).to(dev)  # (B,E) 1..n-1: never the same symbol
    pos = positions.gather(1, which)  # (B,E) input position of o_i
    current = (inputs.gather(1, pos)[..., None] == symbols).long().argmax(-1)  # (B,E) index of o_i among symbols
    edited = inputs[:, None, :].repeat(1, E, 1)  # (B,E,T)
    edited.scatter_(2, pos[..., None], symbols[(current + shift) % n_sym][..., None])
    T = inputs.shape[1]
    arange = torch.arange(T, device=dev)
    next_scored = torch.where(mask, arange, T).flip(1).cummin(1).values.flip(1)  # (B,T) first scored position >= t
    later = which[..., None] + torch.arange(1, J + 1, device=dev)  # (B,E,J) observation index i + j
    reads = next_scored.gather(1, positions.gather(1, later.flatten(1))).view(B, E, J)  # (B,E,J)
    if bool((reads >= T).any()):
        raise ValueError("memory: an observation with no scored position at or after it")
    return Edits(inputs=edited.flatten(0, 1), reads=reads)


def _beliefs(predict: Predict, inputs: torch.Tensor, reads: torch.Tensor) -> torch.Tensor:
    """(N,R,K) float64 log-probabilities of `predict` on prompts `inputs` (N,T) at positions `reads` (N,R)."""
    out = []
    with torch.no_grad():
        for a in range(0, inputs.shape[0], CHUNK):
            dist = predict(inputs[a : a + CHUNK])
            if not isinstance(dist, Categorical):
                raise TypeError(f"memory: needs class answers (a Categorical), got {type(dist).__name__}")
            r = reads[a : a + CHUNK]  # (c,R)
            logp = dist.logits.double().log_softmax(-1)  # (c,T,K)
            out.append(logp.gather(1, r[..., None].expand(-1, -1, logp.shape[-1])))  # (c,R,K)
    return torch.cat(out)


def moves(predict: Predict, inputs: torch.Tensor, edits: Edits) -> torch.Tensor:
    """(B,J) bits: per prompt of `inputs` (B,T) and lag, KL(belief on the original ‖ on the edited prompt), mean over
    its edits."""
    B, E, J = edits.reads.shape
    before = _beliefs(predict, inputs, edits.reads.flatten(1)).view(B, E, J, -1)  # (B,E,J,K)
    after = _beliefs(predict, edits.inputs, edits.reads.flatten(0, 1)).view(B, E, J, -1)  # (B,E,J,K)
    return probs_kl_bits(before.exp(), after).clamp_min(0.0).mean(1)  # (B,J); a KL's float rounding can dip below 0


def _floats(x: torch.Tensor) -> list[Any]:
    """A tensor as a (nested) list of floats, None where nan (JSON has no nan)."""
    return [None if v != v else float(v) for v in x.tolist()] if x.dim() == 1 else [_floats(r) for r in x]


def memory_probe(
    task: Any,
    inputs: torch.Tensor,
    mask: torch.Tensor,
    predictors: Mapping[str, Predict],
    max_lag: int = MAX_LAG,
    edits: int = EDITS,
    seed: int = 0,
    n_boot: int = N_BOOT,
) -> dict[str, Any]:
    """Per lag, on prompts `inputs` (B,T) scored at `mask` (B,T): each predictor's mean move, the exact posterior's
    ("exact") and their ratio ("<name>_ratio"), with paired bootstrap intervals over sequences ("ci"); not applicable
    where the task has no observations to resample. `predictors`: name -> prompts (N,T) -> predictive (N,T), e.g.
    {"model": ..., "init": ...}."""
    if not task.offers("posterior_for"):
        return not_applicable("the task has no exact posterior of an edited input (task.posterior_for)")
    made = make_edits(task, inputs, mask, max_lag, edits, seed)
    if isinstance(made, str):
        return not_applicable(made)
    B, E, J = made.reads.shape
    exact = moves(task.posterior_for, inputs, made)  # (B,J)
    got = {name: moves(p, inputs, made) for name, p in predictors.items()}  # name -> (B,J)
    names = ["exact", *got, *(f"{name}_ratio" for name in got)]
    num = torch.stack([exact, *got.values(), *got.values()])  # (C,B,J)
    den = torch.stack([torch.ones_like(exact)] * (1 + len(got)) + [exact] * len(got))  # (C,B,J)
    est, ci = bootstrap_ratios(
        num.permute(1, 0, 2).flatten(1), den.permute(1, 0, 2).flatten(1), n_boot, seed, LEVEL
    )  # (C*J,), (C*J,2)
    out: dict[str, Any] = {"lags": list(range(1, J + 1))}
    out.update({name: _floats(est.view(-1, J)[c]) for c, name in enumerate(names)})
    out["ci"] = {name: _floats(ci.view(-1, J, 2)[c]) for c, name in enumerate(names)}
    out.update(
        {"n_sequences": B, "edits_per_sequence": E, "n_boot": int(n_boot), "level": LEVEL, "definition": DEFINITION}
    )
    return out


def window_predictors(task: Any, max_window: int) -> dict[str, Predict]:
    """ "last w obs" for w = 1..`max_window` (at most the task's K): the best filter of the last w observations of
    any prompt (`tasks.hmm.window_filters` through the matrices the prompt states), its belief at every observation;
    {} where the task is not an HMM."""
    from windtunnel.tasks.hmm import HMM, window_filters

    if not isinstance(task, HMM):
        return {}

    def window(w: int) -> Predict:
        def predict(inputs: torch.Tensor) -> Distribution:
            t_cents, e_cents, obs = task.parse(inputs)  # (B,S,S), (B,S,O), (B,K)
            log_T, log_E = (c.double().div(100.0).log() for c in (t_cents, e_cents))
            post = window_filters(log_T, log_E, obs, [w])[w]  # (B,K,S)
            positions, _ = task.observation_slots(inputs)  # (B,K): where the belief after o_k is read
            B, T, S = inputs.shape[0], inputs.shape[1], post.shape[-1]
            logits = torch.zeros(B, T, S, dtype=torch.float64, device=inputs.device)
            logits.scatter_(1, positions[..., None].expand(-1, -1, S), post.log())
            return Categorical(logits=logits, validate_args=False)

        return predict

    return {f"last {w} obs": window(w) for w in range(1, min(int(max_window), task.params.K) + 1)}


def reach_ratios(result: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    """Per lag j of a `memory_probe` result, the ratio of "last j+1 obs" (the shortest window that reads the edited
    observation) and its interval; None where the probe did not measure that window."""
    ratios, cis = [], []
    for i, j in enumerate(result.get("lags") or []):
        name = f"last {j + 1} obs_ratio"
        values, ci = result.get(name), (result.get("ci") or {}).get(name)
        ratios.append(values[i] if isinstance(values, list) and i < len(values) else None)
        cis.append(ci[i] if isinstance(ci, list) and i < len(ci) else None)
    return ratios, cis


def model_predictor(model: nn.Module) -> Predict:
    """A model as a `Predict`: its predictive on prompts (N,T)."""
    return lambda x: predictive(model_spec(model), model(x))


def memory(
    model: nn.Module, task: Any, batch: Batch, init_model: nn.Module | None = None, seed: int = 0
) -> dict[str, Any]:
    """`memory_probe` of `model` (and `init_model` beside it, and on an HMM the window filters "last 1 obs" ..
    "last J+1 obs", `window_predictors`) on the first MAX_SEQUENCES sequences of `batch`, with each lag's
    `reach_ratio`."""
    model.eval()
    preds = {"model": model_predictor(model)}
    if init_model is not None:
        preds["init"] = model_predictor(init_model.eval())
    preds.update(window_predictors(task, MAX_LAG + 1))
    out = memory_probe(task, batch.inputs[:MAX_SEQUENCES], batch.target_mask[:MAX_SEQUENCES], preds, seed=seed)
    if "lags" in out:
        out["reach_ratio"], out["ci"]["reach_ratio"] = reach_ratios(out)
    return out
