"""Associative-recall wind tunnel (random-access binding): store N key-value pairs, then answer queries.

Each episode binds N distinct keys to N distinct values, `(STORE k SEP v) x N`, then a filler gap, then M
queries `QUERY k ANS` for distinct stored keys. The exact posterior is a point mass on the bound value (perfect
recall is exact inference here), so accuracy is the metric; it is the same point mass at either scored position.

Where the answer is scored (`score_at`): by default ("slot") at the answer slot `ANS` one position after the
queried key, as the authors' generator attaches the target. With "key" it is scored at the queried key `k`
itself, predicting the value that belongs in the slot after it -- the next-token convention of the bijection's
keys. Same inputs, targets and posterior; only the mask moves one position. "key" is kept because it is the
easier problem, measured: scoring at ANS adds a positional copy (ANS must first fetch the key one token back)
that has nothing to do with binding, and it delays learning: a 2-layer transformer on N=4 pairs was still at
chance among the stored values after 3,000 steps when scored at ANS, and perfect by step 500 when scored at the
key (same data, same model).
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field, model_validator
from torch.distributions import Distribution

from windtunnel.tasks._util import (
    first_invalid,
    log10_falling,
    random_perm,
    scatter_control,
    scatter_posterior,
    scatter_targets,
    token_inputs,
)
from windtunnel.tasks.base import Batch, Reference, Task, TaskParams, TaskSpec
from windtunnel.tasks.registry import register

PAD, STORE, FILLER, QUERY, SEP, ANS = 0, 1, 2, 3, 4, 5  # ids 6..9 reserved
KEY_OFFSET = 10
TOKEN_NAMES = {PAD: "PAD", STORE: "STORE", FILLER: "FILLER", QUERY: "QUERY", SEP: "SEP", ANS: "ANS"}
ScoreAt = Literal["key", "slot"]


class RecallParams(TaskParams):
    """N stored pairs from key/value vocabularies, n_filler gap tokens, M queries; where the answer is scored."""

    N: int = Field(64, ge=1, description="stored key-value pairs")
    key_vocab: int = Field(256, ge=1, description="distinct key tokens")
    value_vocab: int = Field(256, ge=1, description="distinct value tokens (the answer classes)")
    n_filler: int = Field(32, ge=0, description="filler tokens after storage (half of it between queries)")
    M: int = Field(3, ge=1, description="queries per episode")
    score_at: ScoreAt = Field("slot", description="'slot' (the ANS token after the key; the authors') or 'key'")

    @model_validator(mode="after")
    def _fits(self) -> RecallParams:
        if self.N > self.key_vocab:
            raise ValueError(f"N: must be <= key_vocab={self.key_vocab} (distinct keys; got {self.N})")
        if self.N > self.value_vocab:
            raise ValueError(f"N: must be <= value_vocab={self.value_vocab} (distinct values; got {self.N})")
        if self.M > self.N:
            raise ValueError(f"M: must be <= N={self.N} (distinct stored keys; got {self.M})")
        return self


class Recall(Task[RecallParams]):
    """Associative recall: retrieve the value bound to a queried key after a gap."""

    name = "recall"
    Params = RecallParams
    description = "random-access binding: recall the value stored with a key"
    primitive = "random-access binding"
    title = "Recall"
    headline_metric = "accuracy"
    length_param = "N"
    capacity = ("N", "stored pairs")
    controls_note = Task.controls_note + (
        " Recall (N >= 2): 'confident wrong value' (a point mass on the value stored in the pair after the queried "
        "one: an off-by-one binding); 'last stored value' (a point mass on the most recent value whatever is asked: "
        "recency, right only when the last pair is queried). Entropy 0, as the exact point mass."
    )

    def references(self) -> list[Reference]:
        """Where the answer is scored, and chance among the N stored values: the floor of a model that has learnt
        at least that the answer is one of them."""
        p = self.params
        where = {
            "key": "the queried key (the authors score the answer slot after it)",
            "slot": "the answer slot after the queried key, as the authors do",
        }
        return [
            Reference(f"scored at {where[p.score_at]}"),
            Reference(
                f"chance among the {p.N} stored values",
                1 / p.N,
                floor=True,
                note="a model below it has not even learnt that the answer is a stored value",
            ),
        ]

    @property
    def value_offset(self) -> int:
        return KEY_OFFSET + self.params.key_vocab

    @property
    def spec(self) -> TaskSpec:
        p = self.params
        F, gap = p.n_filler, p.n_filler // 2
        return TaskSpec(
            name=self.name,
            input_kind="tokens",
            answer_kind="classes",
            seq_len=4 * p.N + F + 3 * p.M + (p.M - 1) * gap,
            vocab_size=self.value_offset + p.value_vocab,
            n_classes=p.value_vocab,
            answer_token_offset=self.value_offset,
            log10_hypotheses=log10_falling(p.key_vocab, p.N) + log10_falling(p.value_vocab, p.N),
        )

    def _sample(self, batch_size: int, g: torch.Generator, device: torch.device) -> Batch:
        p = self.params
        B, N, M, F, gap = batch_size, p.N, p.M, p.n_filler, p.n_filler // 2
        keys = random_perm(B, p.key_vocab, g, device)[:, :N]  # (B,N)
        values = random_perm(B, p.value_vocab, g, device)[:, :N]  # (B,N)
        picked = random_perm(B, N, g, device)[:, :M]  # (B,M) indices of the queried pairs
        queries, answers = keys.gather(1, picked), values.gather(1, picked)  # (B,M)

        def const(v: int, *shape: int) -> torch.Tensor:
            return torch.full((B, *shape), v, dtype=torch.long, device=device)

        store = torch.stack([const(STORE, N), keys + KEY_OFFSET, const(SEP, N), values + self.value_offset], 2)
        ask = torch.cat(
            [const(QUERY, M, 1), queries[..., None] + KEY_OFFSET, const(ANS, M, 1), const(FILLER, M, gap)], dim=2
        )  # (B,M,3+gap)
        ask = ask.reshape(B, -1)[:, : M * (3 + gap) - gap]  # no filler after the last query
        inputs = torch.cat([store.reshape(B, 4 * N), const(FILLER, F), ask], dim=1)  # (B,T)
        mask = self._scored(inputs)
        return Batch(
            inputs=inputs,
            target_mask=mask,
            targets=scatter_targets(answers.reshape(-1), mask),
            posterior=self._posterior(answers, mask),
            latent={"keys": keys, "values": values, "queries": queries},
        )

    def _query_starts(self, device: torch.device) -> torch.Tensor:
        """(M,) the position of each query's QUERY token."""
        p = self.params
        return 4 * p.N + p.n_filler + torch.arange(p.M, device=device) * (3 + p.n_filler // 2)

    def _scored(self, inputs: torch.Tensor) -> torch.Tensor:
        """(B,T) bool: each query's answer slot, or its key one position before (`score_at`)."""
        mask = torch.zeros(inputs.shape[:2], dtype=torch.bool, device=inputs.device)
        mask[:, self._query_starts(inputs.device) + (2 if self.params.score_at == "slot" else 1)] = True
        return mask

    def _posterior(self, answers: torch.Tensor, mask: torch.Tensor) -> Distribution:
        """A point mass on each query's bound value, answers (B,M), scattered on `mask` (B,T)."""
        K = self.params.value_vocab
        probs = torch.nn.functional.one_hot(answers.reshape(-1), K).to(torch.float64)  # (B*M,K)
        return scatter_posterior(probs, mask, (*mask.shape, K))

    def posterior_for(self, inputs: torch.Tensor) -> Distribution:
        """The exact posterior of any valid input `inputs` (B,T) (e.g. a stored value or the queried key edited): a
        point mass on the value stored with each queried key, batch shape (B,T) like `batch.posterior` (equal to it on
        sampled inputs). A ValueError naming the first sequence that is off the layout, stores a key twice, or asks
        for a key it did not store."""
        p = self.params
        N = p.N
        x = token_inputs(inputs, self.spec.seq_len)  # (B,T)
        store = x[:, : 4 * N].reshape(-1, N, 4)  # (B,N,4): STORE k SEP v
        keys, values = store[..., 1] - KEY_OFFSET, store[..., 3] - self.value_offset  # (B,N)
        starts = self._query_starts(x.device)  # (M,)
        asked = x[:, starts + 1] - KEY_OFFSET  # (B,M)
        hit = keys[:, None, :] == asked[:, :, None]  # (B,M,N)
        gaps = torch.ones(x.shape[1], dtype=torch.bool, device=x.device)  # (T,) the filler positions
        gaps[: 4 * N] = False
        gaps[(starts[:, None] + torch.arange(3, device=x.device)).flatten()] = False  # QUERY k ANS of each query
        layout = (store[..., 0] != STORE) | (store[..., 2] != SEP)  # (B,N)
        first_invalid(
            [
                (layout.any(1) | (x[:, starts] != QUERY).any(1), "STORE / SEP / QUERY markers out of place"),
                ((x[:, starts + 2] != ANS).any(1) | (x[:, gaps] != FILLER).any(1), "ANS / FILLER out of place"),
                (((keys < 0) | (keys >= p.key_vocab)).any(1), f"a stored key outside 0..{p.key_vocab - 1}"),
                (((values < 0) | (values >= p.value_vocab)).any(1), f"a stored value outside 0..{p.value_vocab - 1}"),
                ((keys[:, :, None] == keys[:, None, :]).sum((1, 2)) > N, "a key stored twice"),
                (~hit.any(-1).all(-1), "a query for a key that is not stored"),
            ]
        )
        answers = values.gather(1, hit.long().argmax(-1))  # (B,M)
        return self._posterior(answers, self._scored(x))

    def controls(self, batch: Batch) -> dict[str, Distribution]:
        """The generic controls plus confident retrievals of the wrong stored value: entropy 0 like the exact
        point mass, wrong at (nearly) every query (`controls_note`). None beyond the generic ones for N = 1."""
        out = super().controls(batch)
        N, K, mask = self.params.N, self.params.value_vocab, batch.target_mask
        if N < 2:
            return out
        keys, values, queries = (batch.latent[k] for k in ("keys", "values", "queries"))  # (B,N), (B,N), (B,M)
        slot = (keys[:, None, :] == queries[:, :, None]).to(torch.long).argmax(-1)  # (B,M) the queried pair
        neighbour = values.gather(1, (slot + 1) % N)  # (B,M) the value of the next stored pair
        last = values[:, -1:].expand_as(neighbour)  # (B,M)
        for name, v in (("confident wrong value", neighbour), ("last stored value", last)):
            out[name] = scatter_control(torch.nn.functional.one_hot(v.reshape(-1), K).double(), mask)  # (B*M,K) point
        return out

    def describe(self, batch: Batch, index: int = 0) -> list[str]:
        """Markers `STORE` `SEP` `FILLER` `QUERY` `ANS`, keys `k12`, values `v7`."""
        out = []
        for t in batch.inputs[index].tolist():
            if t < KEY_OFFSET:
                out.append(TOKEN_NAMES.get(t, f"<{t}>"))
            elif t < self.value_offset:
                out.append(f"k{t - KEY_OFFSET}")
            else:
                out.append(f"v{t - self.value_offset}")
        return out


register("recall", Recall)
