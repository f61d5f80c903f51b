"""Adversarial controls (`Task.controls`): predictors that match the exact entropy without inferring must be far from
the exact posterior in KL, so no mark that needs both entropy error and KL small can go to them."""

from __future__ import annotations

import pytest
import torch
from torch.distributions import Categorical, Normal

from windtunnel import tasks
from windtunnel.evaluation.metrics import entropy_bits, kl_divergence_bits
from windtunnel.tasks import Batch, Task, TaskSpec

SMALL = {
    "bijection": dict(V=6, L=5),
    "hmm": dict(S=3, O=3, K=6),
    "recall": dict(N=4, key_vocab=8, value_vocab=8, n_filler=2, M=3),
    "regression": dict(d=2, n=6),
}
GENERIC_CLASS = ("another sequence's posterior", "renamed classes", "entropy only")
CONTROLS = {
    "bijection": (*GENERIC_CLASS, "context-blind support", "keys for values"),
    "hmm": (*GENERIC_CLASS, "sorted posterior", "another HMM's filter"),
    "recall": (*GENERIC_CLASS, "confident wrong value", "last stored value"),
    "regression": ("another sequence's posterior", "blind mean", "negated mean", "mispaired answers"),
}
# controls that claim the exact entropy at every scored position: max |H(control) - H(exact)| in bits
ENTROPY_CLAIMS = {
    "bijection": {name: 1e-6 for name in CONTROLS["bijection"]},  # every sequence has entropy log2(V - t) at t
    "hmm": {"renamed classes": 1e-6, "entropy only": 1e-6, "sorted posterior": 1e-6},
    "recall": {name: 1e-6 for name in CONTROLS["recall"]},  # all point masses
    "regression": {"blind mean": 1e-6, "negated mean": 1e-6, "mispaired answers": 1e-6},
}
GENERIC_CLAIMS = {"renamed classes": 1e-6, "entropy only": 1e-6}
B = 64


def sampled(name: str, batch_size: int = B, **params: object) -> tuple[Task, Batch]:
    task = tasks.make(name, **{**SMALL.get(name, {}), **params})
    return task, task.sample(batch_size, seed=5)


@pytest.mark.parametrize("name", tasks.names())
def test_controls_match_entropy_and_are_far_in_kl(name):
    task, b = sampled(name)
    mask = b.target_mask
    controls = task.controls(b)
    if name in CONTROLS:
        assert tuple(controls) == CONTROLS[name]
    assert controls and task.controls_note
    h_exact = entropy_bits(b.posterior)  # (B,T)
    claims = ENTROPY_CLAIMS.get(name, GENERIC_CLAIMS)
    for cname, dist in controls.items():
        assert dist.batch_shape == mask.shape, cname
        assert type(dist) is type(b.posterior), cname
        assert bool(torch.isfinite(entropy_bits(dist)).all()), cname  # valid at unscored positions too
        if isinstance(dist, Categorical):
            torch.testing.assert_close(dist.probs.sum(-1), torch.ones(mask.shape))
        else:
            assert bool((dist.scale > 0).all()), cname
        assert bool(torch.isfinite(dist.log_prob(b.targets)[mask]).all()), cname
        kl = kl_divergence_bits(b.posterior, dist)[mask]
        assert bool(torch.isfinite(kl).all()), cname
        assert float(kl.mean()) > 0.25, (cname, float(kl.mean()))
        if cname in claims:
            err = (entropy_bits(dist) - h_exact).abs()[mask]
            assert float(err.max()) < claims[cname], (cname, float(err.max()))


@pytest.mark.parametrize("name", tasks.names())
def test_another_sequence_is_never_the_identity(name):
    """B == 1: each scored position gets the exact posterior of the next scored position of the same sequence."""
    task, b = sampled(name, batch_size=1)
    dist = task.controls(b)["another sequence's posterior"]
    idx = b.target_mask[0].nonzero().flatten()
    params = (lambda d: d.probs) if isinstance(b.posterior, Categorical) else (lambda d: d.loc)
    got, exact = params(dist)[0, idx], params(b.posterior)[0, idx]
    assert not torch.allclose(got, exact)
    torch.testing.assert_close(got, exact.roll(-1, 0), atol=1e-6, rtol=0)  # up to the 1e-12 floor, float32 rounding
    # B > 1: the previous sequence's exact posterior at the same position
    _, b = sampled(name, batch_size=3)
    got, exact = params(task.controls(b)["another sequence's posterior"]), params(b.posterior)
    torch.testing.assert_close(got[b.target_mask], exact.roll(1, 0)[b.target_mask], atol=1e-6, rtol=0)


def test_bijection_blind_support_ignores_the_values():
    """Without replacement every sequence gets the same control: it depends on the position alone."""
    task, b = sampled("bijection")
    probs = task.controls(b)["context-blind support"].probs  # (B,T,V)
    assert torch.equal(probs, probs[:1].expand_as(probs))
    V, L, mask = task.params.V, task.params.L, b.target_mask
    support = (probs[mask] > 1e-6).sum(-1)
    assert torch.equal(support, (b.posterior.probs[mask] > 0).sum(-1))
    assert support.tolist()[:L] == list(range(V, V - L, -1))


def test_regression_controls_never_read_their_own_ys():
    task, b = sampled("regression")
    before = task.controls(b)
    b.latent["ys"][0] += 10.0  # sequence 0's answers (the control of sequence 0 must not move)
    after = task.controls(b)
    for cname in ("blind mean", "mispaired answers"):
        torch.testing.assert_close(after[cname].loc[0], before[cname].loc[0])
    assert not torch.allclose(after["mispaired answers"].loc[1], before["mispaired answers"].loc[1])
    assert float(before["blind mean"].loc.abs().max()) == 0.0


class Dice(Task):
    """A user's tunnel with no controls of its own: a random categorical posterior over K faces per position."""

    name = "dice"

    def __init__(self, K: int = 4) -> None:
        super().__init__()
        self.K = K

    @property
    def spec(self) -> TaskSpec:
        return TaskSpec("dice", "tokens", "classes", seq_len=5, vocab_size=2, n_classes=self.K)

    def _sample(self, batch_size, g, device):
        probs = torch.rand(batch_size, 5, self.K, generator=g, device=device) ** 3
        probs = probs / probs.sum(-1, keepdim=True)  # a posterior sums to 1 (`tasks.check_given_probs`)
        x = torch.zeros(batch_size, 5, dtype=torch.long, device=device)
        return Batch(x, torch.ones_like(x, dtype=torch.bool), x, Categorical(probs=probs))


def test_generic_controls_for_a_users_tunnel():
    b = Dice().sample(16, seed=0)
    controls = Dice().controls(b)
    assert tuple(controls) == GENERIC_CLASS
    h = entropy_bits(b.posterior)
    for cname, tol in GENERIC_CLAIMS.items():
        assert float((entropy_bits(controls[cname]) - h).abs().max()) < tol
    assert Dice(K=1).controls(Dice(K=1).sample(2, seed=0)) == {}  # one class: nothing can be wrong
    normal = Batch(b.inputs, b.target_mask, b.inputs.float(), Normal(torch.randn(16, 5), torch.rand(16, 5) + 0.5))
    assert list(Task.controls(Dice(), normal)) == ["another sequence's posterior"]
