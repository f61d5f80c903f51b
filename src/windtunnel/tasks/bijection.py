"""Bijection wind tunnel (belief accumulation): infer a fresh random permutation from revealed key->value pairs.

Each sequence draws a uniform permutation `perm` of V values and shows L keys with their values. At every key
the model predicts the key's value. The exact posterior is a point mass on perm[k] if key k was already
revealed, else uniform over the values not yet revealed (without replacement: entropy log2(V - t) at the
t-th key, 0-indexed). A fresh permutation per sequence (V! ~ 2.4e18 for V=20) rules out memorisation.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from pydantic import Field, model_validator
from torch.distributions import Categorical, Distribution

from windtunnel.tasks._util import (
    first_invalid,
    random_perm,
    scatter_control,
    scatter_posterior,
    scatter_targets,
    token_inputs,
)
from windtunnel.tasks.base import Batch, Task, TaskParams, TaskSpec
from windtunnel.tasks.registry import register

BijectionFormat = Literal["sep-vocab", "paired"]


class BijectionParams(TaskParams):
    """V values and keys, L revealed pairs; token format; whether keys may repeat."""

    V: int = Field(20, ge=2, description="number of keys = number of values")
    L: int = Field(19, ge=1, description="number of key-value pairs in a sequence")
    format: BijectionFormat = Field("sep-vocab", description="'sep-vocab' (2V vocab, no query) or 'paired'")
    with_replacement: bool = Field(False, description="keys drawn i.i.d. (may repeat) instead of distinct")

    @model_validator(mode="after")
    def _keys_fit(self) -> BijectionParams:
        if not self.with_replacement and self.L > self.V:
            raise ValueError(f"L: must be <= V={self.V} without replacement (got {self.L})")
        return self


def bijection_posterior(
    keys: torch.Tensor, values: torch.Tensor, query: torch.Tensor, n_before: torch.Tensor, V: int
) -> torch.Tensor:
    """Exact posterior over perm[query] given the first n_before pairs, float64.

    keys, values: (B,L) revealed pairs in order; query: (B,P) keys asked; n_before: (P,) number of pairs
    revealed before each query. Returns (B,P,V): point mass on the value if the query key was revealed,
    else uniform over the values not revealed yet.
    """
    B, L = keys.shape
    onehot = torch.nn.functional.one_hot(values, V).to(torch.float64)  # (B,L,V)
    cum = torch.cat([torch.zeros_like(onehot[:, :1]), onehot.cumsum(1)], dim=1)  # (B,L+1,V)
    revealed = cum[:, n_before] > 0  # (B,P,V)
    before = torch.arange(L, device=keys.device)[None, :] < n_before[:, None]  # (P,L)
    hit = (keys[:, None, :] == query[:, :, None]) & before[None]  # (B,P,L)
    seen = hit.any(-1)  # (B,P)
    free = (~revealed).to(torch.float64)  # (B,P,V)
    uniform = free / free.sum(-1, keepdim=True)  # (B,P,V)
    # value of a seen key: the value at its first occurrence (all occurrences agree: it is a bijection)
    first = hit.to(torch.int64).argmax(-1)  # (B,P)
    point = torch.nn.functional.one_hot(values.gather(1, first), V).to(torch.float64)  # (B,P,V)
    return torch.where(seen[..., None], point, uniform)


def query_layout(keys: torch.Tensor, query: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The keys asked at scored positions, (B,P), and the pairs revealed before each, (P,): every context key
    after t pairs, then the paired format's final `query` (B,) after all L."""
    n_before = torch.arange(keys.shape[1], device=keys.device)  # (L,): key t follows t revealed pairs
    if query is None:
        return keys, n_before
    return torch.cat([keys, query[:, None]], dim=1), torch.cat([n_before, n_before.new_tensor([keys.shape[1]])])


def evidence_positions(inputs: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Evidence positions for each scored row of a bijection sequence (keys at even, values at odd positions).

    Returns (seen (B,T) bool, evidence (B,T,T) bool). A row whose queried key was revealed earlier ("seen")
    has as evidence that earlier key position and its value position; any other row has as evidence every
    revealed value position before it (the values that eliminate hypotheses).
    """
    B, T = inputs.shape
    pos = torch.arange(T, device=inputs.device)
    before = pos[None, :] < pos[:, None]  # (T,T) key position j strictly before row p
    is_key = (pos % 2 == 0)[None, :] & before  # (T,T)
    match = (inputs[:, None, :] == inputs[:, :, None]) & is_key[None] & mask[:, :, None]  # (B,T,T)
    seen = match.any(-1)  # (B,T)
    match_val = torch.zeros_like(match)
    match_val[..., 1:] = match[..., :-1]  # the value right after a matching key
    values_before = ((pos % 2 == 1)[None, :] & before)[None].expand(B, T, T)  # (B,T,T)
    evidence = torch.where(seen[..., None], match | (match_val & before[None]), values_before)
    return seen & mask, evidence


def value_positions(inputs: torch.Tensor, V: int, L: int, offset: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The revealed-value positions of bijection sequences (odd positions before 2L) and the entropy the authors'
    geometric_analysis.py attaches to each: log2(V - #distinct values revealed strictly before it), 0 when none is
    left. inputs (B,T) tokens, value tokens `offset`..`offset`+V-1. Returns (mask (B,T) bool, bits (B,T) float64).
    """
    B, T = inputs.shape
    pos = torch.arange(T, device=inputs.device)
    is_value = (pos % 2 == 1) & (pos < 2 * L)  # (T,) the paired format's query sits at 2L
    ids = (inputs - offset).clamp(0, V - 1)  # (B,T) value ids (garbage off the value positions, masked below)
    onehot = torch.nn.functional.one_hot(ids, V) * is_value[None, :, None]  # (B,T,V)
    before = (onehot.cumsum(1) - onehot) > 0  # (B,T,V) value v revealed strictly before t
    left = (V - before.sum(-1)).clamp_min(1).to(torch.float64)  # (B,T)
    return is_value[None].expand(B, T), left.log2()


class Bijection(Task[BijectionParams]):
    """Bijection elimination: predict each key's value under a fresh uniform permutation per sequence."""

    name = "bijection"
    Params = BijectionParams
    description = "belief accumulation: infer a random permutation from revealed pairs"
    primitive = "belief accumulation"
    title = "Bijection"
    length_param = None  # L <= V without replacement: V, the vocabulary, fixes the longest sequence (paper §4.3)
    controls_note = Task.controls_note + (
        " Bijection: 'context-blind support' (uniform over the fixed values 0..m-1, m the number still possible, "
        "a point mass on value 0 at a revealed key: never reads which values were revealed); 'keys for values' "
        "(eliminates the revealed keys instead of the revealed values and answers a revealed key with its own id: "
        "never reads a value token). Both have entropy error 0."
    )

    def attention_evidence(
        self, inputs: torch.Tensor, mask: torch.Tensor
    ) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """Rows and the earlier positions they should attend to (the attention probe, tasks.base.Task):
        a queried key revealed before -> that key and its value ("seen_key_match"); any other scored row but the
        first -> every revealed value ("unseen_value"). Token inputs of the paired layout only."""
        if inputs.dim() != 2:
            return {}
        seen, evidence = evidence_positions(inputs, mask)
        unseen = mask & ~seen
        unseen[:, 0] = False  # nothing revealed before the first key
        return {"seen_key_match": (seen, evidence), "unseen_value": (unseen, evidence)}

    def value_positions(self, inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Positions of the revealed values and the authors' entropy there (`value_positions`): the manifold probe's
        second position set, the one the authors' geometric_analysis.py used. Token inputs only."""
        p = self.params
        return value_positions(inputs, p.V, p.L, int(self.spec.answer_token_offset or 0))

    @property
    def spec(self) -> TaskSpec:
        p = self.params
        sep = p.format == "sep-vocab"
        return TaskSpec(
            name=self.name,
            input_kind="tokens",
            answer_kind="classes",
            seq_len=2 * p.L - 1 if sep else 2 * p.L + 1,
            vocab_size=2 * p.V if sep else p.V,
            n_classes=p.V,
            answer_token_offset=p.V if sep else 0,
            log10_hypotheses=math.lgamma(p.V + 1) / math.log(10.0),
        )

    def _sample(self, batch_size: int, g: torch.Generator, device: torch.device) -> Batch:
        p = self.params
        B, V, L = batch_size, p.V, p.L
        T = self.spec.seq_len
        perm = random_perm(B, V, g, device)  # (B,V)
        if p.with_replacement:
            keys = torch.randint(0, V, (B, L), generator=g, device=device)  # (B,L)
        else:
            keys = random_perm(B, V, g, device)[:, :L]  # (B,L)
        values = perm.gather(1, keys)  # (B,L)
        query = None
        inputs = torch.zeros(B, T, dtype=torch.long, device=device)  # (B,T)
        latent = {"perm": perm, "keys": keys}
        if p.format == "sep-vocab":
            inputs[:, 0::2] = keys
            inputs[:, 1::2] = values[:, : L - 1] + V
        else:
            inputs[:, 0 : 2 * L : 2] = keys
            inputs[:, 1 : 2 * L : 2] = values
            pick = torch.randint(0, L, (B, 1), generator=g, device=device)  # (B,1) a context position
            query = keys.gather(1, pick)[:, 0]  # (B,)
            inputs[:, 2 * L] = query
            latent["query"] = query
        mask = self._scored(inputs)
        truth = perm.gather(1, query_layout(keys, query)[0])  # (B,P)
        return Batch(
            inputs=inputs,
            target_mask=mask,
            targets=scatter_targets(truth.reshape(-1), mask),
            posterior=self._posterior(keys, values, query, mask),
            latent=latent,
        )

    def _scored(self, inputs: torch.Tensor) -> torch.Tensor:
        """(B,T) bool: the key positions (and the final query in the paired format)."""
        mask = torch.zeros(inputs.shape[:2], dtype=torch.bool, device=inputs.device)
        mask[:, 0::2] = True
        return mask

    def _posterior(
        self, keys: torch.Tensor, values: torch.Tensor, query: torch.Tensor | None, mask: torch.Tensor
    ) -> Categorical:
        """The exact posterior at every scored position (`bijection_posterior`) of keys (B,L) and values (B,L) in
        order, with the paired format's final query (B,), scattered on `mask` (B,T)."""
        V = self.params.V
        query_keys, n_before = query_layout(keys, query)  # (B,P), (P,)
        probs = bijection_posterior(keys, values, query_keys, n_before, V)  # (B,P,V)
        return scatter_posterior(probs.reshape(-1, V), mask, (*mask.shape, V))

    def posterior_for(self, inputs: torch.Tensor) -> Categorical:
        """The exact posterior of any valid input `inputs` (B,T) (e.g. with a revealed value or a key edited), batch
        shape (B,T) like `batch.posterior` (equal to it on sampled inputs). A ValueError naming the first sequence
        whose tokens are out of range or whose revealed pairs no permutation has (a key with two values, a value
        with two keys)."""
        p = self.params
        V, L = p.V, p.L
        x = token_inputs(inputs, self.spec.seq_len)  # (B,T)
        sep = p.format == "sep-vocab"
        keys = x[:, 0 : 2 * L : 2]  # (B,L)
        shown = x[:, 1 : 2 * L : 2] - (V if sep else 0)  # (B,L-1) sep-vocab (the last value is never shown), else (B,L)
        query = None if sep else x[:, 2 * L]  # (B,)
        asked = keys if query is None else torch.cat([keys, query[:, None]], 1)  # (B,P)
        same_key = keys[:, : shown.shape[1], None] == keys[:, None, : shown.shape[1]]  # (B,n,n) over revealed pairs
        same_value = shown[:, :, None] == shown[:, None, :]  # (B,n,n)
        first_invalid(
            [
                (((asked < 0) | (asked >= V)).any(1), f"a key outside 0..{V - 1}"),
                (((shown < 0) | (shown >= V)).any(1), f"a value outside 0..{V - 1}"),
                ((same_key != same_value).flatten(1).any(1), "revealed pairs that no permutation has"),
            ]
        )
        values = torch.cat([shown, shown.new_zeros(shown.shape[0], L - shown.shape[1])], 1)  # (B,L): unread padding
        return self._posterior(keys, values, query, self._scored(x))

    def controls(self, batch: Batch) -> dict[str, Distribution]:
        """The generic controls plus two that know how many values are still possible (V minus the distinct keys
        revealed: the keys alone tell it) but not which: entropy error 0 at every position (`controls_note`)."""
        mask, V = batch.target_mask, self.params.V
        assert isinstance(batch.posterior, Categorical)
        exact = batch.posterior.probs[mask]  # (N,V)
        m = (exact > 0).sum(-1, keepdim=True)  # (N,1) values still possible; 1 at a revealed key
        blind = (torch.arange(V, device=mask.device) < m).double() / m  # (N,V) uniform over values 0..m-1
        keys = batch.latent["keys"]  # (B,L)
        query_keys, n_before = query_layout(keys, batch.latent.get("query"))  # (B,P), (P,)
        as_values = bijection_posterior(keys, keys, query_keys, n_before, V)  # (B,P,V) the keys read as values
        return {
            **super().controls(batch),
            "context-blind support": scatter_control(blind, mask),
            "keys for values": scatter_control(as_values.reshape(-1, V), mask),
        }

    def describe(self, batch: Batch, index: int = 0) -> list[str]:
        """Keys as `k3`, values as `v7`, the paired format's query as `?k3`."""
        p = self.params
        toks = batch.inputs[index].tolist()
        if p.format == "sep-vocab":
            return [f"k{t}" if i % 2 == 0 else f"v{t - p.V}" for i, t in enumerate(toks)]
        out = [f"k{t}" if i % 2 == 0 else f"v{t}" for i, t in enumerate(toks)]
        out[-1] = f"?k{toks[-1]}"
        return out


register("bijection", Bijection)
