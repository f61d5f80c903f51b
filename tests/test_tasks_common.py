"""Properties every built-in wind tunnel must have: shapes, calibration identity, normalisation, determinism."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.distributions import Categorical, Normal

from windtunnel import tasks
from windtunnel.evaluation.metrics import entropy_bits
from windtunnel.tasks import registry

LATENT = {
    "bijection": {"perm", "keys"},
    "hmm": {"transition", "emission", "states", "observations"},
    "hmm-sticky": {"transition", "emission", "states", "observations"},
    "recall": {"keys", "values", "queries"},
    "regression": {"w", "xs", "ys"},
}

# small parameter sets per task for property tests
SMALL = {
    "bijection": st.fixed_dictionaries(
        {"V": st.integers(2, 7), "format": st.sampled_from(["sep-vocab", "paired"]), "with_replacement": st.booleans()}
    ).flatmap(
        lambda d: st.fixed_dictionaries(
            {
                **{k: st.just(v) for k, v in d.items()},
                "L": st.integers(1, d["V"] if not d["with_replacement"] else 2 * d["V"]),
            }
        )
    ),
    "hmm": st.fixed_dictionaries(
        {
            "S": st.integers(2, 6),
            "O": st.integers(2, 6),
            "K": st.integers(1, 8),
            "emission_clarity": st.floats(0.0, 1.0),
        }
    ),
    "hmm-sticky": st.fixed_dictionaries(
        {
            "S": st.integers(2, 6),
            "O": st.integers(2, 6),
            "K": st.integers(1, 8),
            "stickiness": st.floats(0.0, 1.0) | st.tuples(st.floats(0.0, 0.5), st.floats(0.5, 1.0)),
            "min_prob": st.sampled_from([0.01, 0.02, 0.05]),
        }
    ),
    "recall": st.integers(1, 6).flatmap(
        lambda n: st.fixed_dictionaries(
            {
                "N": st.just(n),
                "key_vocab": st.integers(n, 12),
                "value_vocab": st.integers(n, 12),
                "n_filler": st.integers(0, 4),
                "M": st.integers(1, n),
            }
        )
    ),
    "regression": st.fixed_dictionaries(
        {"d": st.integers(1, 4), "n": st.integers(1, 8), "tau": st.floats(0.2, 3.0), "sigma": st.floats(0.1, 2.0)}
    ),
}


def test_builtins_registered():
    assert tasks.names()[:5] == ["bijection", "hmm", "hmm-sticky", "recall", "regression"]


@pytest.mark.parametrize("name", list(LATENT))
def test_batch_shapes_and_dtypes(name):
    task = tasks.make(name)
    spec = task.spec
    b = task.sample(3, seed=0)
    B, T = 3, spec.seq_len
    if spec.input_kind == "tokens":
        assert b.inputs.shape == (B, T) and b.inputs.dtype == torch.long
        assert int(b.inputs.min()) >= 0 and int(b.inputs.max()) < spec.vocab_size
    else:
        assert b.inputs.shape == (B, T, spec.input_dim) and b.inputs.dtype == torch.float32
    assert b.target_mask.shape == (B, T) and b.target_mask.dtype == torch.bool
    assert b.targets.shape == (B, T)
    assert b.posterior.batch_shape == (B, T)
    if spec.answer_kind == "classes":
        assert b.targets.dtype == torch.long and isinstance(b.posterior, Categorical)
        assert b.posterior.probs.shape == (B, T, spec.n_classes) and b.posterior.probs.dtype == torch.float32
        assert int(b.targets.min()) >= 0 and int(b.targets.max()) < spec.n_classes
        assert int(b.targets[~b.target_mask].abs().sum()) == 0
    else:
        assert b.targets.dtype == torch.float32 and isinstance(b.posterior, Normal)
    assert set(b.latent) >= LATENT[name]
    assert bool(b.target_mask.any(1).all())
    assert len(task.describe(b, 1)) == T


@pytest.mark.parametrize(
    ("name", "n"), [("bijection", 2000), ("hmm", 2000), ("hmm-sticky", 2000), ("recall", 100), ("regression", 2000)]
)
def test_calibration_identity(name, n):
    """For an exact posterior, E[-log p(truth)] = E[entropy]: compare per-sequence means within 4 SE."""
    b = tasks.make(name).sample(n, seed=123)
    m = b.target_mask.double()
    nll = -b.posterior.log_prob(b.targets).double()  # (B,T)
    H = b.posterior.entropy().double()  # (B,T)
    gap = ((nll - H) * m).sum(1) / m.sum(1)  # (B,) per-sequence
    se = gap.std().item() / math.sqrt(n)
    assert abs(gap.mean().item()) <= 4 * se + 1e-5


@pytest.mark.parametrize("name", list(LATENT))
@settings(max_examples=12, deadline=None)
@given(data=st.data(), seed=st.integers(0, 2**31 - 1))
def test_posterior_properties(name, data, seed):
    task = tasks.make(name, **data.draw(SMALL[name]))
    b = task.sample(4, seed=seed)
    H = entropy_bits(b.posterior)
    assert bool(torch.isfinite(H).all())
    if isinstance(b.posterior, Categorical):
        probs = b.posterior.probs.double()
        torch.testing.assert_close(probs.sum(-1), torch.ones(b.target_mask.shape, dtype=torch.float64))
        assert bool((probs >= 0).all())
        assert float(H.min()) >= -1e-4 and float(H.max()) <= math.log2(task.spec.n_classes) + 1e-4
        p_true = probs.gather(-1, b.targets[..., None])[..., 0][b.target_mask]
        assert bool((p_true > 0).all())  # the truth is always in the support
    else:
        assert bool((b.posterior.scale > 0).all())
        sigma = task.params.sigma
        assert bool((b.posterior.scale[b.target_mask] >= sigma * (1 - 1e-5)).all())  # never below the noise
    # determinism
    again = task.sample(4, seed=seed)
    assert torch.equal(b.inputs, again.inputs) and torch.equal(b.targets, again.targets)
    g = torch.Generator().manual_seed(seed)
    assert torch.equal(task.sample(4, generator=g).inputs, b.inputs)


@pytest.mark.parametrize("name", list(LATENT))
def test_different_seeds_differ(name):
    task = tasks.make(name)
    assert not torch.equal(task.sample(4, seed=0).inputs, task.sample(4, seed=1).inputs)


@settings(max_examples=20, deadline=None)
@given(V=st.integers(2, 8), seed=st.integers(0, 10**6), data=st.data())
def test_bijection_support(V, seed, data):
    """Zero mass on already revealed values at an unseen key; entropy log2(V - t) without replacement."""
    L = data.draw(st.integers(1, V))
    b = tasks.make("bijection", V=V, L=L).sample(3, seed=seed)
    probs = b.posterior.probs[:, 0::2]  # (B,L,V)
    values = b.latent["perm"].gather(1, b.latent["keys"])
    for t in range(L):
        assert float(probs[:, t].gather(1, values[:, :t]).abs().sum()) == 0.0
        assert float((entropy_bits(b.posterior)[:, 2 * t] - math.log2(V - t)).abs().max()) < 1e-4


def test_sampling_on_a_given_device_and_batch_errors():
    b = tasks.make("hmm", K=3).sample(2, seed=0, device="cpu")
    assert b.device.type == "cpu"
    with pytest.raises(ValueError, match=r"bijection\.batch_size"):
        tasks.make("bijection").sample(0, seed=0)


def test_register_a_users_tunnel(monkeypatch):
    """The docs example: a user's own tunnel runs through the same contract."""
    from pydantic import Field

    from windtunnel.tasks import Batch, Task, TaskParams, TaskSpec

    monkeypatch.setattr(registry._REGISTRY, "_entries", dict(registry._REGISTRY._entries))

    class CoinParams(TaskParams):
        n: int = Field(8, ge=1)

    class Coin(Task):
        name, Params = "coin", CoinParams

        @property
        def spec(self):
            return TaskSpec("coin", "tokens", "classes", seq_len=self.params.n, vocab_size=2, n_classes=2)

        def _sample(self, B, g, device):
            x = torch.randint(0, 2, (B, self.params.n), generator=g, device=device)
            post = Categorical(probs=torch.full((B, self.params.n, 2), 0.5, device=device))
            return Batch(x, torch.ones_like(x, dtype=torch.bool), x, post)

    tasks.register("coin", Coin)
    assert "coin" in tasks.names()
    assert tasks.make("coin", n=4).sample(2, seed=0).inputs.shape == (2, 4)
    with pytest.raises(ValueError, match=r"coin\.n"):
        tasks.make("coin", n=0)
