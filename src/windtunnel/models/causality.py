"""The leak alarm: `check_causal(model, spec)` refuses a model whose output at a position depends on later inputs.

Every wind tunnel scores the prediction at position t against the exact posterior given inputs 0..t. A model that
reads input t+1 (a mixer without its causal mask, an index off by one) can beat that posterior -- a GPT-2 stack run
without its mask reached 96% bijection accuracy where the exact posterior allows 13.8% -- and its numbers mean
nothing. Architectures are classes anyone can register (plugins), so causality is checked, not assumed: every model
is checked before it trains or is evaluated (`runs.build_model`, `runs.Run.load_checkpoint`, `evaluate.evaluate`).

How: one random base sequence and, for each cut c, a copy whose inputs c..T-1 are all changed (every token replaced
by another, every real vector redrawn). A causal model's outputs at positions 0..c-1 are the base's; any that moves
sees the future. The copies go through the model in one batch with the base (a couple of forward passes at most),
in eval mode, without gradients, with a private generator: the global RNG and the model's mode are left as found.

Every cut 1..T-1 is tried when the batch stays within `max_tokens` (bijection's 37 and regression's 47 positions at
their default sizes); otherwise evenly spaced cuts, always including the first and the last (the HMM's 93 positions
get 43 cuts, recall's 329 get 11): a mixer that reads the future everywhere, or a model that leaks only at its last
position, is caught either way; a leak confined to one middle position of a long sequence can fall between two cuts
(raise `max_tokens` to try every cut).

What is compared is the predictive distribution (`models.base.predictive`: normalised log-probabilities, or a
Gaussian's mean and log-scale), so a shift of all logits by the same amount is not a leak. A position moves when
its change exceeds ATOL + RTOL x its largest raw output: a causal model's prefix outputs are the base's, or differ by
float rounding where a kernel treats rows of a batch differently (at most ~3e-7 measured on the built-ins, float32 on
the CPU, ~2 ulp); the tolerance is 1e-6 + 1e-5 x the output scale, the smallest leak of a leaky smoke transformer at
init ~2e-4.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.distributions import Categorical, Normal

from windtunnel.models.base import predictive
from windtunnel.tasks.base import TaskSpec

MAX_TOKENS = 4096  # positions per check (rows x T): every cut of a sequence up to 64 long, 11 of recall's 328
# A position moved when it moved more than ATOL + RTOL x its largest raw output (float32 rounding: ~1e-7 of it).
RTOL, ATOL = 1e-5, 1e-6


class CausalityError(ValueError):
    """A model's output at some position depends on a later input: it sees the future (bad input: exit 2)."""


@dataclass(frozen=True)
class Leak:
    """The first position whose output moved when only later inputs changed.

    position: the earliest output position that moved; cut: the latest cut that moved it (inputs `cut`.. changed: it
    reads that far ahead); change: the largest change there (log-probability or Gaussian parameter); cuts: how many
    cuts were tried, of `positions - 1` possible.
    """

    position: int
    cut: int
    change: float
    cuts: int
    positions: int


def _cuts(T: int, max_rows: int) -> torch.Tensor:
    """The cut positions to try: every 1..T-1 if they fit in `max_rows`, else `max_rows` evenly spaced ones from 1 to
    T-1 (both ends included)."""
    if T - 1 <= max_rows:
        return torch.arange(1, T)
    return torch.linspace(1, T - 1, max(max_rows, 2)).round().long().unique()


def _inputs(spec: TaskSpec, cuts: torch.Tensor, T: int, seed: int, dtype: torch.dtype) -> torch.Tensor | None:
    """(1 + n_cuts, T) token ids or (1 + n_cuts, T, D) vectors: row 0 the base, row 1 + i the base with every input
    from cuts[i] on changed. None where no input can change (a vocabulary of one token)."""
    g = torch.Generator().manual_seed(seed)
    after = torch.arange(T)[None, :] >= cuts[:, None]  # (n_cuts,T) the changed positions of each copy
    if spec.input_kind == "tokens":
        V = int(spec.vocab_size or 0)
        if V < 2:
            return None
        base = torch.randint(0, V, (1, T), generator=g)  # (1,T)
        other = (base + torch.randint(1, V, (1, T), generator=g)) % V  # (1,T) a different token at every position
        copies = torch.where(after, other, base)  # (n_cuts,T)
        return torch.cat([base, copies])  # (rows,T)
    D = int(spec.input_dim or 0)
    base = torch.randn(1, T, D, generator=g, dtype=torch.float64)  # (1,T,D)
    other = torch.randn(1, T, D, generator=g, dtype=torch.float64)  # (1,T,D)
    copies = torch.where(after[..., None], other, base)  # (n_cuts,T,D)
    return torch.cat([base, copies]).to(dtype)


def _params(spec: TaskSpec, out: torch.Tensor) -> torch.Tensor:
    """(B,T,P) the parameters of the predictive distribution: K normalised log-probabilities, or (mean, log-scale)."""
    dist = predictive(spec, out)
    if isinstance(dist, Categorical):
        return dist.logits  # (B,T,K) log-softmax of the model's logits
    assert isinstance(dist, Normal)  # predictive: class answers or a Gaussian
    return torch.stack([dist.loc, dist.scale.log()], dim=-1)  # (B,T,2)


def _moved(copy: torch.Tensor, base: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """How far each (n,T) output of the copies moved from the (1,T) base's, past the tolerance and in all, both
    (n,T) maxima over the P parameters. scale: (n,T) the largest raw output at each position, what float rounding of
    a normalisation is relative to. Equal values (an infinite log-probability included) and NaN in both have not
    moved; NaN in one of them has, infinitely."""
    same = (copy == base) | (copy.isnan() & base.isnan())  # (n,T,P)
    delta = torch.where(same, 0.0, (copy - base).abs().nan_to_num(nan=float("inf")))  # (n,T,P)
    limit = ATOL + RTOL * scale.nan_to_num(nan=0.0, posinf=0.0)  # (n,T)
    return (delta.amax(-1) - limit).clamp_min(0), delta.amax(-1)


def find_leak(
    model: nn.Module, spec: TaskSpec, *, seed: int = 0, max_tokens: int = MAX_TOKENS, length: int | None = None
) -> Leak | None:
    """The first position of `model` that sees the future, or None when no output moved (module docstring: how).

    length: the sequence length to test (None: the task's, capped at the model's `size.max_len` if it has one).
    """
    T = int(length or spec.seq_len)
    max_len = getattr(getattr(model, "size", None), "max_len", None)
    if length is None and isinstance(max_len, int):
        T = min(T, max_len)
    if T < 2:
        return None
    cuts = _cuts(T, max(max_tokens // T - 1, 2))
    param = next((p for p in model.parameters() if p.is_floating_point()), None)
    device = param.device if param is not None else torch.device("cpu")
    x = _inputs(spec, cuts, T, seed, param.dtype if param is not None else torch.float32)
    if x is None:
        return None
    per_pass = max(max_tokens // T, 2)  # rows per forward pass, the base among them
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            moved = []
            for start in range(1, x.shape[0], per_pass - 1):
                rows = torch.cat([x[:1], x[start : start + per_pass - 1]]).to(device)  # (1+n,T[,D]) base first
                out = model(rows)
                if not (isinstance(out, torch.Tensor) and out.dim() == 3 and tuple(out.shape[:2]) == rows.shape[:2]):
                    got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
                    raise ValueError(f"model: forward must return (B,T,{spec.output_dim}) outputs (got {got})")
                p = _params(spec, out).float().cpu()  # (1+n,T,P)
                size = out.detach().float().abs().amax(-1).cpu()  # (1+n,T)
                moved.append(_moved(p[1:], p[:1], torch.maximum(size[1:], size[:1])))
    finally:
        model.train(was_training)
    excess = torch.cat([m[0] for m in moved])  # (n_cuts,T) how far each output moved past its tolerance
    change = torch.cat([m[1] for m in moved])  # (n_cuts,T)
    before = torch.arange(T)[None, :] < cuts[:, None]  # (n_cuts,T) the outputs each copy must leave alone
    leaked = (excess > 0) & before
    if not leaked.any():
        return None
    position = int(leaked.any(0).nonzero()[0])
    row = int(leaked[:, position].nonzero()[-1])  # the latest cut that moves it: the farthest input it reads
    return Leak(position, int(cuts[row]), float(change[row, position]), len(cuts), T)


def check_causal(
    model: nn.Module, spec: TaskSpec, *, name: str | None = None, seed: int = 0, max_tokens: int = MAX_TOKENS
) -> nn.Module:
    """`model`, unchanged, if no output of it depends on a later input (`find_leak`); else CausalityError, one line
    naming the first position that sees the future. A baseline (`predict(batch)`, no forward pass) is causal by
    construction and passes. name: what the message calls the model (default: its class name); seed, max_tokens:
    `find_leak`'s.
    Returns the model, so a call site can check what it builds in one expression."""
    if getattr(model, "baseline", False):
        return model
    leak = find_leak(model, spec, seed=seed, max_tokens=max_tokens)
    if leak is None:
        return model
    label = name or f"model {type(model).__name__!r}"
    tried = "every cut" if leak.cuts == leak.positions - 1 else f"{leak.cuts} cuts"
    raise CausalityError(
        f"{label} is not causal: its output at position {leak.position} changes when only the inputs from position "
        f"{leak.cut} on change (by {leak.change:.3g}; {leak.positions} positions, {tried}); a model that sees the "
        "future can beat the exact posterior, so it is neither trained nor scored"
    )
