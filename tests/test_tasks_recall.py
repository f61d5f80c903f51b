"""Associative recall: layout, answers against the stored pairs, spec, errors."""

from __future__ import annotations

import math

import pytest
import torch

from windtunnel import tasks
from windtunnel.evaluation import metrics
from windtunnel.models.baselines import Oracle, Uniform
from windtunnel.tasks.recall import ANS, FILLER, KEY_OFFSET, QUERY, SEP, STORE


def test_default_spec():
    spec = tasks.make("recall").spec
    assert (spec.seq_len, spec.vocab_size, spec.n_classes, spec.answer_token_offset) == (329, 522, 256, 266)
    want = 2 * (math.lgamma(257) - math.lgamma(257 - 64)) / math.log(10)
    assert spec.log10_hypotheses == pytest.approx(want)


@pytest.mark.parametrize("score_at", ["slot", "key"])
@pytest.mark.parametrize("params", [dict(), dict(N=5, key_vocab=7, value_vocab=9, n_filler=3, M=5)])
def test_answers_are_the_stored_values(params, score_at):
    task = tasks.make("recall", **params, score_at=score_at)
    p = task.params
    b = task.sample(8, seed=1)
    voff = KEY_OFFSET + p.key_vocab
    key_at = 0 if score_at == "key" else -1  # offset from a scored position to its queried key
    assert b.inputs.shape == (8, task.spec.seq_len)
    for i in range(8):
        x = b.inputs[i].tolist()
        store = {x[4 * j + 1]: x[4 * j + 3] - voff for j in range(p.N)}  # key token -> value class
        assert [x[4 * j] for j in range(p.N)] == [STORE] * p.N and [x[4 * j + 2] for j in range(p.N)] == [SEP] * p.N
        assert len(store) == p.N and len(set(store.values())) == p.N  # distinct keys and values
        assert x[4 * p.N : 4 * p.N + p.n_filler] == [FILLER] * p.n_filler
        slots = b.target_mask[i].nonzero().flatten().tolist()
        # no filler after the last query's answer slot, which ends the sequence
        assert len(slots) == p.M and slots[-1] == len(x) - 2 - key_at
        asked = []
        for pos in slots:  # QUERY k ANS, scored at ANS ("slot") or at k ("key")
            k = pos + key_at
            assert x[k - 1] == QUERY and x[k + 1] == ANS
            value = store[x[k]]
            asked.append(x[k])
            assert int(b.targets[i, pos]) == value
            assert b.posterior.probs[i, pos, value].item() == pytest.approx(1.0)
        assert len(set(asked)) == p.M  # distinct queried keys
        assert [k + KEY_OFFSET for k in b.latent["queries"][i].tolist()] == asked
        gaps = [slots[m + 1] - slots[m] - 3 for m in range(p.M - 1)]
        assert gaps == [p.n_filler // 2] * (p.M - 1)


def test_default_scores_at_the_answer_slot():
    """The authors' convention: the target sits on the ANS token after the queried key."""
    task = tasks.make("recall", N=5, key_vocab=7, value_vocab=9, n_filler=3, M=4)
    assert task.params.score_at == "slot"
    b = task.sample(16, seed=3)
    assert bool((b.inputs[b.target_mask] == ANS).all())
    assert int(b.target_mask.sum()) == 16 * 4


@pytest.mark.parametrize(
    "params",
    [
        dict(),
        dict(N=5, key_vocab=7, value_vocab=9, n_filler=3, M=5),
        dict(N=3, key_vocab=3, value_vocab=3, n_filler=0, M=3),
    ],
)
def test_slot_and_key_differ_only_by_one_position(params):
    """Same seed: identical inputs, targets and posterior; the mask moves exactly one position right."""
    slot = tasks.make("recall", **params, score_at="slot").sample(6, seed=7)
    key = tasks.make("recall", **params, score_at="key").sample(6, seed=7)
    assert torch.equal(slot.inputs, key.inputs)
    assert not bool(key.target_mask[:, -1].any()) and not bool(slot.target_mask[:, 0].any())
    assert torch.equal(slot.target_mask[:, 1:], key.target_mask[:, :-1])
    assert torch.equal(slot.targets[slot.target_mask], key.targets[key.target_mask])
    assert torch.equal(slot.posterior.probs[slot.target_mask], key.posterior.probs[key.target_mask])
    assert bool((slot.inputs[slot.target_mask] == ANS).all())
    assert bool((key.inputs[key.target_mask] >= KEY_OFFSET).all())
    assert bool((key.inputs[:, 1:][key.target_mask[:, :-1]] == ANS).all())  # each scored key is followed by ANS
    for name in ("keys", "values", "queries"):
        assert torch.equal(slot.latent[name], key.latent[name])


@pytest.mark.parametrize("score_at", ["slot", "key"])
def test_oracle_perfect_uniform_chance(score_at):
    """At either scored position the oracle recalls every answer and the uniform baseline scores chance."""
    task = tasks.make("recall", N=8, key_vocab=16, value_vocab=16, n_filler=4, M=3, score_at=score_at)
    b = task.sample(1024, seed=11)
    assert metrics.accuracy(Oracle(task.spec).predict(b), b) == pytest.approx(1.0)
    assert metrics.bayes_accuracy(b) == pytest.approx(1.0)
    assert metrics.entropy_mae_bits(Oracle(task.spec).predict(b), b) == pytest.approx(0.0, abs=1e-6)
    assert metrics.accuracy(Uniform(task.spec, task=task).predict(b), b) == pytest.approx(1 / 16, abs=0.015)


@pytest.mark.parametrize(
    ("params", "match"),
    [
        (dict(N=0), r"recall\.N: .*greater than or equal to 1"),
        (dict(N=300), r"recall\.N: must be <= key_vocab=256"),
        (dict(N=10, key_vocab=20, value_vocab=5), r"recall\.N: must be <= value_vocab=5"),
        (dict(M=0), r"recall\.M: .*greater than or equal to 1"),
        (dict(N=2, M=3), r"recall\.M: must be <= N=2"),
        (dict(n_filler=-1), r"recall\.n_filler: .*greater than or equal to 0"),
        (dict(score_at="value"), r"recall\.score_at: "),
    ],
)
def test_bad_params(params, match):
    with pytest.raises(ValueError, match=match):
        tasks.make("recall", **params)
