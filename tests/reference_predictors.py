"""Reference predictors the marks are refereed with: the exact posterior mixed with a little uniform (`mixture`, at
each tunnel's epsilon in TUNNELS), the best predictor of the last w observations (`best_window`), one that reads the
answer (`reads_the_answer`), and the HMM filtering posterior by a sum over every hidden path (`path_sum_posterior`)."""

from __future__ import annotations

import itertools

import numpy as np
import torch
from torch.distributions import Categorical, Distribution, Normal

from windtunnel.suites.paper import TASK_PARAMS
from windtunnel.tasks._util import scatter_posterior
from windtunnel.tasks.hmm import _log_matrices, window_filter

# (task, params, epsilon of the mixture with uniform that puts its entropy error near 1e-3 bits)
TUNNELS = [
    ("bijection", {}, 1e-4),
    ("hmm", {}, 1e-3),
    ("hmm-sticky", {}, 3e-4),
    ("recall", TASK_PARAMS["quick"]["recall"], 1e-4),
    ("regression", {}, 1e-4),
]


def mixture(eps: float):
    """The exact posterior mixed with epsilon of uniform (a Normal: moment-matched with N(0, 1), the value an
    unscored position holds): it infers exactly and is a little unsure."""

    def predict(batch) -> Distribution:
        p = batch.posterior
        if isinstance(p, Categorical):
            return Categorical(probs=(1 - eps) * p.probs.double() + eps / p.probs.shape[-1], validate_args=False)
        mean = (1 - eps) * p.loc.double()
        var = (1 - eps) * (p.scale.double() ** 2 + p.loc.double() ** 2) + eps - mean**2
        return Normal(mean, var.sqrt(), validate_args=False)

    return predict


def best_window(w: int):
    """The best predictor of the last w observations, computed by the reference loop (`window_filter`), not by the
    task's own `approximations`."""

    def predict(batch) -> Distribution:
        log_T, log_E = _log_matrices(batch)
        post = window_filter(log_T, log_E, batch.latent["observations"], w)  # (B,K,S)
        return scatter_posterior(post.reshape(-1, post.shape[-1]), batch.target_mask, (*batch.target_mask.shape, 5))

    return predict


def reads_the_answer(batch) -> Distribution:
    """A non-causal predictor: 90% on the realised answer (batch.targets), or a narrow Normal around it."""
    p = batch.posterior
    if isinstance(p, Categorical):
        K = p.probs.shape[-1]
        hot = torch.nn.functional.one_hot(batch.targets.long(), K).double()  # (B,T,K)
        return Categorical(probs=0.9 * hot + 0.1 / K, validate_args=False)
    return Normal(batch.targets.double(), torch.full(p.batch_shape, 0.1, dtype=torch.float64), validate_args=False)


def path_sum_posterior(T: np.ndarray, E: np.ndarray, obs: list[int]) -> np.ndarray:
    """p(s_t | o_1..t) for each t by summing the joint over every hidden path (uniform initial state)."""
    S, K = T.shape[0], len(obs)
    out = np.zeros((K, S))
    for t in range(K):
        for path in itertools.product(range(S), repeat=t + 1):
            w = 1.0 / S * E[path[0], obs[0]]
            for k in range(1, t + 1):
                w *= T[path[k - 1], path[k]] * E[path[k], obs[k]]
            out[t, path[-1]] += w
        out[t] /= out[t].sum()
    return out
