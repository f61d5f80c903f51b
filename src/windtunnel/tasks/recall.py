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

from windtunnel.tasks._util import log10_falling, random_perm, scatter_control, scatter_posterior, scatter_targets
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
        mask = torch.zeros_like(inputs, dtype=torch.bool)
        first = 4 * N + F + (2 if p.score_at == "slot" else 1)  # the first ANS slot, or the queried key before it
        mask[:, first + torch.arange(M, device=device) * (3 + gap)] = True
        probs = torch.nn.functional.one_hot(answers.reshape(-1), p.value_vocab).to(torch.float64)  # (B*M,K)
        return Batch(
            inputs=inputs,
            target_mask=mask,
            targets=scatter_targets(answers.reshape(-1), mask),
            posterior=scatter_posterior(probs, mask, (B, inputs.shape[1], p.value_vocab)),
            latent={"keys": keys, "values": values, "queries": queries},
        )

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
