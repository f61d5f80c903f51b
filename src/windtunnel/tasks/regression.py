"""Bayesian linear-regression wind tunnel (continuous inference): predict y for a new x from earlier pairs.

Each sequence draws weights w ~ N(0, tau^2 I_d), inputs x_i ~ N(0, I_d) and y_i = w.x_i + eps,
eps ~ N(0, sigma^2). Tokens are real vectors of width d+2: an x-token [x, 0, 0] and a y-token [0.., y, 1]
(with `pair_tokens`, [x, y, 1]: the revealed pair in one token); the sequence is x1, y1, ..., xn (T = 2n-1).
At each x-token the exact posterior predictive, given the pairs before it, is Gaussian:
    Sigma = (X^T X / sigma^2 + I / tau^2)^-1,  mu = Sigma X^T y / sigma^2,  y ~ N(x.mu, sigma^2 + x^T Sigma x).
The hypothesis space is continuous (log10_hypotheses = inf). Defaults d=4, n=24, tau=1, sigma=0.5 move the
mean predictive differential entropy from 2.93 bits (prior) to 1.18 bits at the last x (noise floor 1.05).
"""

from __future__ import annotations

import math

import torch
from pydantic import Field
from torch.distributions import Distribution, Normal

from windtunnel.tasks._util import first_invalid, other_sequence, scatter_normal, scatter_targets
from windtunnel.tasks.base import Batch, Task, TaskParams, TaskSpec
from windtunnel.tasks.registry import register
from windtunnel.text import number


class RegressionParams(TaskParams):
    """Input dimension d, n (x, y) pairs, prior scale tau of w, noise scale sigma of y."""

    d: int = Field(4, ge=1, description="input dimension")
    n: int = Field(24, ge=1, description="x points per sequence (n-1 revealed pairs before the last)")
    tau: float = Field(1.0, gt=0, description="prior standard deviation of each weight")
    sigma: float = Field(0.5, gt=0, description="observation noise standard deviation")
    pair_tokens: bool = Field(False, description="y-tokens also carry their x: [x, y, 1] instead of [0.., y, 1]")


def regression_predictive(
    xs: torch.Tensor, ys: torch.Tensor, tau: float, sigma: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Posterior predictive mean and variance of y_i given pairs 1..i-1, for every i, in float64.

    xs: (B,n,d), ys: (B,n). Prefix sufficient statistics by cumulative sums, one batched Cholesky solve.
    Returns (mean, var), each (B,n).
    """
    xs, ys = xs.double(), ys.double()
    B, n, d = xs.shape
    outer = xs[..., :, None] * xs[..., None, :]  # (B,n,d,d)
    xy = xs * ys[..., None]  # (B,n,d)
    zero = torch.zeros_like
    xtx = torch.cat([zero(outer[:, :1]), outer.cumsum(1)[:, :-1]], 1)  # (B,n,d,d) pairs strictly before i
    xty = torch.cat([zero(xy[:, :1]), xy.cumsum(1)[:, :-1]], 1)  # (B,n,d)
    eye = torch.eye(d, dtype=torch.float64, device=xs.device)
    prec = xtx / sigma**2 + eye / tau**2  # (B,n,d,d) posterior precision
    chol = torch.linalg.cholesky(prec)  # (B,n,d,d)
    mu = torch.cholesky_solve((xty / sigma**2)[..., None], chol)[..., 0]  # (B,n,d) posterior mean of w
    z = torch.linalg.solve_triangular(chol, xs[..., None], upper=False)[..., 0]  # (B,n,d): x^T Sigma x = |z|^2
    mean = (xs * mu).sum(-1)  # (B,n)
    var = sigma**2 + (z * z).sum(-1)  # (B,n)
    return mean, var


class Regression(Task[RegressionParams]):
    """Bayesian linear regression: the predictive for y at each new x given the earlier (x, y) pairs."""

    name = "regression"
    Params = RegressionParams
    description = "continuous inference: Gaussian posterior predictive of a random linear map"
    primitive = "continuous inference"
    title = "Regression"
    length_param = "n"
    controls_note = Task.controls_note + (
        " Regression (each with the exact predictive variance, which depends on the x's alone): 'blind mean' (mean "
        "0, the prior mean: reads no y); 'negated mean' (the exact mean reflected about the prior mean); 'mispaired "
        "answers' (the exact update from this sequence's x's and the previous sequence's y's; for a batch of one, "
        "its own y's shifted by one pair)."
    )

    @property
    def spec(self) -> TaskSpec:
        p = self.params
        return TaskSpec(
            name=self.name,
            input_kind="real",
            answer_kind="real",
            seq_len=2 * p.n - 1,
            input_dim=p.d + 2,
            log10_hypotheses=math.inf,
        )

    def _sample(self, batch_size: int, g: torch.Generator, device: torch.device) -> Batch:
        p = self.params
        B, d, n = batch_size, p.d, p.n
        xs = torch.randn(B, n, d, generator=g, device=device)  # (B,n,d)
        w = p.tau * torch.randn(B, d, generator=g, device=device)  # (B,d)
        eps = p.sigma * torch.randn(B, n, generator=g, device=device)  # (B,n)
        ys = (xs.double() * w.double()[:, None]).sum(-1).float() + eps  # (B,n)
        inputs = torch.zeros(B, 2 * n - 1, d + 2, device=device)  # (B,T,D)
        inputs[:, 0::2, :d] = xs
        inputs[:, 1::2, d] = ys[:, :-1]
        inputs[:, 1::2, d + 1] = 1.0
        if p.pair_tokens:  # each revealed pair in one token: no previous-token lookup needed to pair x with y
            inputs[:, 1::2, :d] = xs[:, :-1]
        mask = self._scored(inputs)
        return Batch(
            inputs=inputs,
            target_mask=mask,
            targets=scatter_targets(ys.reshape(-1), mask),
            posterior=self._posterior(xs, ys, mask),
            latent={"w": w, "xs": xs, "ys": ys},
        )

    def sample_bytes(self, batch_size: int) -> int:
        """Bytes `sample(batch_size)` holds at its peak, at the least: the exact predictive's prefix statistics, the
        outer products x x^T of every x (B,n,d,d) and their running sums, in float64 (`regression_predictive`);
        what a memory bound counts before sampling (`budget.sampled_bytes`)."""
        p = self.params
        return 2 * int(batch_size) * p.n * p.d * p.d * 8

    def _scored(self, inputs: torch.Tensor) -> torch.Tensor:
        """(B,T) bool: the x positions."""
        mask = torch.zeros(inputs.shape[:2], dtype=torch.bool, device=inputs.device)
        mask[:, 0::2] = True
        return mask

    def _posterior(self, xs: torch.Tensor, ys: torch.Tensor, mask: torch.Tensor) -> Normal:
        """The exact predictive at every x (`regression_predictive` of xs (B,n,d), ys (B,n)), scattered on `mask`."""
        mean, var = regression_predictive(xs, ys, self.params.tau, self.params.sigma)  # (B,n)
        return scatter_normal(mean.reshape(-1), var.sqrt().reshape(-1), mask)

    def posterior_for(self, inputs: torch.Tensor) -> Normal:
        """The exact predictive of any valid input `inputs` (B,T,D) (e.g. with a y or an x edited), batch shape (B,T)
        like `batch.posterior` (equal to it on sampled inputs). A ValueError naming the first sequence whose tokens
        are not x-tokens [x, 0, 0] and y-tokens [0.., y, 1] ([x, y, 1] with `pair_tokens`, x that of the x before)."""
        p = self.params
        d, T = p.d, self.spec.seq_len
        if inputs.dim() != 3 or tuple(inputs.shape[1:]) != (T, d + 2) or not inputs.is_floating_point():
            raise ValueError(f"inputs: expected real vectors of shape (B, {T}, {d + 2}) (got {tuple(inputs.shape)})")
        xs = inputs[:, 0::2, :d]  # (B,n,d)
        y_tok = inputs[:, 1::2]  # (B,n-1,D)
        x_of_y = xs[:, :-1] if p.pair_tokens else torch.zeros_like(y_tok[..., :d])  # (B,n-1,d) what a y-token carries
        first_invalid(
            [
                (~torch.isfinite(inputs).flatten(1).all(1), "a value that is not finite"),
                ((inputs[:, 0::2, d:] != 0).flatten(1).any(1), "an x-token whose last two entries are not 0"),
                ((y_tok[..., d + 1] != 1).any(1), "a y-token whose flag is not 1"),
                ((y_tok[..., :d] != x_of_y).flatten(1).any(1), "a y-token whose x part is not the x before it"),
            ]
        )
        ys = torch.cat([y_tok[..., d], y_tok.new_zeros(y_tok.shape[0], 1)], 1)  # (B,n): the last y is never read
        return self._posterior(xs, ys, self._scored(inputs))

    def controls(self, batch: Batch) -> dict[str, Distribution]:
        """Another sequence's posterior plus three with the exact predictive variance (a function of the x's alone)
        and a wrong mean: differential-entropy error 0 at every position (`controls_note`)."""
        p, post, mask = self.params, batch.posterior, batch.target_mask
        assert isinstance(post, Normal)
        xs, ys = batch.latent["xs"], batch.latent["ys"]  # (B,n,d), (B,n)
        mean, var = regression_predictive(xs, other_sequence(ys, torch.ones_like(ys, dtype=torch.bool)), p.tau, p.sigma)
        return {
            **super().controls(batch),
            "blind mean": Normal(torch.zeros_like(post.loc), post.scale, validate_args=False),
            "negated mean": Normal(-post.loc, post.scale, validate_args=False),
            "mispaired answers": scatter_normal(mean.reshape(-1), var.sqrt().reshape(-1), mask),
        }

    def describe(self, batch: Batch, index: int = 0) -> list[str]:
        """x-tokens as `x=[0.12, -0.50, ...]`, y-tokens as `y=0.23` (pair tokens: `(x=[...], y=0.23)`)."""
        d = self.params.d
        out = []
        for i, v in enumerate(batch.inputs[index].tolist()):
            x = "x=[" + ", ".join(number(a, ".2f") for a in v[:d]) + "]"
            if i % 2 == 0:
                out.append(x)
            else:
                y = number(v[d], ".2f")
                out.append(f"({x}, y={y})" if self.params.pair_tokens else f"y={y}")
        return out


register("regression", Regression)
