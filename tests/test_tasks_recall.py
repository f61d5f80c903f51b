"""Associative recall: layout, answers against the stored pairs, spec, errors."""

from __future__ import annotations

import math

import pytest
import torch

from windtunnel import tasks
from windtunnel.tasks.recall import ANS, FILLER, KEY_OFFSET, QUERY, SEP, STORE


def test_default_spec():
    spec = tasks.make("recall").spec
    assert (spec.seq_len, spec.vocab_size, spec.n_classes, spec.answer_token_offset) == (329, 522, 256, 266)
    want = 2 * (math.lgamma(257) - math.lgamma(257 - 64)) / math.log(10)
    assert spec.log10_hypotheses == pytest.approx(want)


@pytest.mark.parametrize("params", [dict(), dict(N=5, key_vocab=7, value_vocab=9, n_filler=3, M=5)])
def test_answers_are_the_stored_values(params):
    task = tasks.make("recall", **params)
    p = task.params
    b = task.sample(8, seed=1)
    voff = KEY_OFFSET + p.key_vocab
    assert b.inputs.shape == (8, task.spec.seq_len)
    for i in range(8):
        x = b.inputs[i].tolist()
        store = {x[4 * j + 1]: x[4 * j + 3] - voff for j in range(p.N)}  # key token -> value class
        assert [x[4 * j] for j in range(p.N)] == [STORE] * p.N and [x[4 * j + 2] for j in range(p.N)] == [SEP] * p.N
        assert len(store) == p.N and len(set(store.values())) == p.N  # distinct keys and values
        assert x[4 * p.N : 4 * p.N + p.n_filler] == [FILLER] * p.n_filler
        slots = b.target_mask[i].nonzero().flatten().tolist()
        assert len(slots) == p.M and slots[-1] == len(x) - 2  # no filler after the last query's answer slot
        asked = []
        for pos in slots:  # scored at the queried key: QUERY k(scored) ANS
            assert x[pos - 1] == QUERY and x[pos + 1] == ANS
            value = store[x[pos]]
            asked.append(x[pos])
            assert int(b.targets[i, pos]) == value
            assert b.posterior.probs[i, pos, value].item() == pytest.approx(1.0)
        assert len(set(asked)) == p.M  # distinct queried keys
        assert [k + KEY_OFFSET for k in b.latent["queries"][i].tolist()] == asked
        gaps = [slots[m + 1] - slots[m] - 3 for m in range(p.M - 1)]
        assert gaps == [p.n_filler // 2] * (p.M - 1)


def test_latent_binds_keys_to_values():
    b = tasks.make("recall", N=6, key_vocab=10, value_vocab=8, n_filler=2, M=2).sample(4, seed=0)
    keys, values = b.latent["keys"], b.latent["values"]
    assert torch.equal(b.inputs[:, 1:24:4], keys + KEY_OFFSET)
    assert torch.equal(b.inputs[:, 3:24:4], values + KEY_OFFSET + 10)


@pytest.mark.parametrize(
    ("params", "match"),
    [
        (dict(N=0), r"recall\.N: .*greater than or equal to 1"),
        (dict(N=300), r"recall\.N: must be <= key_vocab=256"),
        (dict(N=10, key_vocab=20, value_vocab=5), r"recall\.N: must be <= value_vocab=5"),
        (dict(M=0), r"recall\.M: .*greater than or equal to 1"),
        (dict(N=2, M=3), r"recall\.M: must be <= N=2"),
        (dict(n_filler=-1), r"recall\.n_filler: .*greater than or equal to 0"),
    ],
)
def test_bad_params(params, match):
    with pytest.raises(ValueError, match=match):
        tasks.make("recall", **params)
