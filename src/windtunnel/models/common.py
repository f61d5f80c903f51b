"""Pieces every architecture shares: input embedding, output head, feed-forward block, init, sizing.

The embedding and head are chosen from the task's `TaskSpec`, so every architecture runs on every wind tunnel:
token inputs get an `nn.Embedding`, real inputs a `Linear`; K-class answers get K logits (tied to the answer
tokens' embedding rows when the spec says the answers are input tokens), real answers get (mean, log-variance).
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal, get_args

import torch
import torch.nn.functional as F
from torch import nn

from windtunnel.tasks.base import TaskSpec

INIT_STD = 0.02  # GPT-2 style init: step-1 losses are ~log K, not the ~125 of PyTorch-default embeddings
POSITIONS = ("learned", "none")
Init = Literal["normal", "torch"]  # `base.InitSize.init`
INITS: tuple[str, ...] = get_args(Init)


def check_int(name: str, value: Any, lo: int, hi: int | None = None) -> int:
    """Validate an integer size parameter; ValueError names the parameter and the allowed range."""
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= lo and (hi is None or value <= hi)
    if not ok:
        rng = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        raise ValueError(f"{name}: must be an integer {rng} (got {value!r})")
    return int(value)


def check_choice(name: str, value: Any, choices: Iterable[str]) -> str:
    """Validate a string option; ValueError lists the allowed values."""
    choices = tuple(choices)
    if value not in choices:
        raise ValueError(f"{name}: must be one of {', '.join(map(repr, choices))} (got {value!r})")
    return str(value)


def init_weights(module: nn.Module, std: float = INIT_STD) -> None:
    """N(0, std) for Linear and Embedding weights, zero biases (apply with `model.apply(init_weights)`); a
    `PositionTable` draws its reserved rows from its private generator."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, mean=0.0, std=std)
        bias = getattr(module, "bias", None)  # Embedding has none
        if bias is not None:
            nn.init.zeros_(bias)
    if isinstance(module, PositionTable):
        module.init_reserved(std)


def initialise(model: nn.Module, init: str | None, std: float = INIT_STD, residual_layers: int | None = None) -> None:
    """Initialise a freshly built model by `model.size.init` (`base.InitSize`): "normal" applies `init_weights`
    (and, given `residual_layers`, `scale_residual_projections`); "torch" leaves PyTorch's default init in place."""
    if check_choice("init", init, INITS) == "torch":
        return
    model.apply(functools.partial(init_weights, std=std))
    if residual_layers is not None:
        scale_residual_projections(model, residual_layers, base_std=std)


def no_weight_decay(p: nn.Parameter) -> nn.Parameter:
    """Mark `p` as never weight-decayed (the state-spaces Mamba convention, `p._no_weight_decay`; optim.py honours
    it under AdamW and keeps it out of Muon). Returns `p`. The mark is a tensor attribute: it survives `.to()`,
    loading weights and pickling, but not `copy.deepcopy` (Parameter's deepcopy drops attributes)."""
    p._no_weight_decay = True  # type: ignore[attr-defined]  # a plain attribute on the tensor, as in mamba_ssm
    return p


def decays(p: torch.Tensor) -> bool:
    """False for a parameter marked by `no_weight_decay`."""
    return not getattr(p, "_no_weight_decay", False)


def scale_residual_projections(
    model: nn.Module, n_layers: int, suffix: str = "out_proj", base_std: float = INIT_STD
) -> None:
    """GPT-2's scaled init: residual output projections get std base_std/sqrt(2 L) so the stream stays O(1)."""
    std = base_std / math.sqrt(2 * max(n_layers, 1))
    for name, p in model.named_parameters():
        if name.endswith(f"{suffix}.weight"):
            nn.init.normal_(p, mean=0.0, std=std)


@torch.no_grad()
def zero_residual_projections(model: nn.Module, suffix: str = "out_proj") -> None:
    """Zero the weights (and biases) of the projections that write into the residual stream, so each block starts as
    the identity (ReZero, modded-nanogpt): their gradients are not zero, so they grow from there. Draws nothing."""
    for name, p in model.named_parameters():
        if name.endswith((f"{suffix}.weight", f"{suffix}.bias")):
            p.zero_()


@dataclass(frozen=True)
class Split:
    """How Muon (`optim.BlockMuon`) splits a hidden matrix that stacks separate maps other than as consecutive rows:
    along axis `dim` (0: rows, an nn.Linear's (out, in); 1: columns, a Conv1D's (in, out)) the matrix is `repeat`
    times the consecutive pieces `sizes`, and block j gathers piece j of every repeat. GPT-2's Conv1D c_attn (d, 3d)
    is [q | k | v] by columns: Split((d, d, d), dim=1); GPT-NeoX's query_key_value (3d, d) is laid out per head, rows
    (H, 3, D): Split((D, D, D), repeat=H). Row block sizes (a tuple) are Split(sizes)."""

    sizes: tuple[int, ...]
    dim: int = 0
    repeat: int = 1

    def block_sizes(self) -> tuple[int, ...]:
        """Each block's extent along `dim` (what `describe` lists)."""
        return tuple(s * self.repeat for s in self.sizes)

    def fits(self, p: torch.Tensor) -> bool:
        return (
            p.ndim == 2
            and self.dim in (0, 1)
            and self.repeat >= 1
            and min(self.sizes, default=0) >= 1
            and self.repeat * sum(self.sizes) == p.shape[self.dim]
        )

    def views(self, t: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The blocks of `t` as views of it, each with the repeats on their own axis (`dim`, then the piece)."""
        return t.unflatten(self.dim, (self.repeat, sum(self.sizes))).split(self.sizes, dim=self.dim + 1)


class PositionTable(nn.Embedding):
    """A learned absolute position embedding of `max_len` rows whose last `reserved` rows are positions reserved for
    evaluating longer sequences than the run trains on (`resolve.resolve_config` reserves them by default).

    The trained rows are this `nn.Embedding` itself, `weight` (max_len - reserved, d): what the same model without
    reserved rows has, drawn from the global RNG exactly as it draws them, under PyTorch's init (N(0, 1), at
    construction) and `init_weights` alike. The reserved rows are a buffer, `reserved_weight` (reserved, d): in the
    state_dict and moved with the model, but no parameter, so no optimiser, weight decay, gradient norm or parameter
    count sees them; they are drawn from a private generator seeded from a hash of the global RNG's state, which
    they leave as it is. So every weight, and every later random number and step of a run (the next module's
    init, dropout, the optimiser), is bitwise what the same model without reserved rows draws and computes
    (tests/test_positions.py). What a reserved row holds is that random init: a position past the training length
    was never trained. A table without reserved rows is a plain nn.Embedding, state_dict included.
    """

    def __init__(self, max_len: int, embedding_dim: int, reserved: int = 0) -> None:
        reserved = check_int("reserved positions", reserved, 0, max_len - 1)
        super().__init__(max_len - reserved, embedding_dim)
        self.reserved_weight: torch.Tensor | None
        self.register_buffer("reserved_weight", torch.empty(reserved, embedding_dim) if reserved else None)
        self.init_reserved(1.0)  # nn.Embedding's N(0, 1)

    @property
    def max_len(self) -> int:
        """Positions the table holds: trained and reserved."""
        return self.num_embeddings + (0 if self.reserved_weight is None else self.reserved_weight.shape[0])

    def reset_parameters(self) -> None:
        """nn.Embedding's own init, N(0, 1), of every row (the reserved ones from the private generator)."""
        super().reset_parameters()
        if getattr(self, "reserved_weight", None) is not None:  # None while nn.Embedding.__init__ runs
            self.init_reserved(1.0)

    @torch.no_grad()
    def init_reserved(self, std: float) -> None:
        """N(0, std) on the reserved rows, from the private generator (the global RNG is not advanced)."""
        w = self.reserved_weight
        if w is None or w.is_meta:
            return
        g = torch.Generator(device="cpu").manual_seed(_private_seed((self.max_len, self.embedding_dim), len(w)))
        w.copy_(nn.init.normal_(torch.empty(w.shape, dtype=w.dtype, device="cpu"), mean=0.0, std=std, generator=g))

    def rows(self, T: int, device: torch.device) -> torch.Tensor:
        """The embeddings of positions 0..T-1, (T, d): the trained rows as `self(arange)` reads them, then, past
        them, the reserved ones."""
        n = self.num_embeddings
        if T <= n or self.reserved_weight is None:
            return self(torch.arange(T, device=device))
        return torch.cat([self(torch.arange(n, device=device)), self.reserved_weight[: T - n]])


def _private_seed(shape: tuple[int, ...], drawn: int) -> int:
    """A seed that is a function of the global CPU RNG's current state (so of the run's seed and of everything drawn
    before) and of the table's shape, read without advancing that RNG."""
    h = hashlib.blake2b(torch.get_rng_state().numpy().tobytes(), digest_size=8, person=b"wt-reserved-pos")
    h.update(repr((tuple(shape), drawn)).encode())
    return int.from_bytes(h.digest(), "little") >> 1  # < 2^63


class InputEmbedding(nn.Module):
    """Token embedding (token inputs) or Linear (real inputs), plus an optional learned absolute position embedding
    (a `PositionTable` of `max_len` rows, the last `reserved` of them reserved for longer evaluations).

    `(B,T)` long ids or `(B,T,D)` floats -> `(B,T,d_model)`. `limit`: whether inputs longer than `max_len` are a
    ValueError; None (default): only with a learned table, the one part of the embedding that has a row per position
    (an architecture with weights of its own per position passes True).
    """

    def __init__(
        self,
        spec: TaskSpec,
        d_model: int,
        max_len: int | None = None,
        pos: str = "learned",
        reserved: int = 0,
        limit: bool | None = None,
    ) -> None:
        super().__init__()
        self.spec = spec
        self.max_len = check_int("max_len", spec.seq_len if max_len is None else max_len, 1)
        self.pos_kind = check_choice("pos", pos, POSITIONS)
        if reserved and pos != "learned":
            raise ValueError(f"reserved positions: only a learned position table has rows to reserve (pos={pos!r})")
        self.limit = self.max_len if (pos == "learned" if limit is None else limit) else None
        self.tok: nn.Embedding | nn.Linear
        if spec.input_kind == "tokens":
            assert spec.vocab_size is not None  # TaskSpec: token inputs have a vocab_size
            self.tok = nn.Embedding(int(spec.vocab_size), d_model)
        else:
            assert spec.input_dim is not None  # TaskSpec: real inputs have an input_dim
            self.tok = nn.Linear(int(spec.input_dim), d_model)
        self.pos = PositionTable(self.max_len, d_model, reserved) if pos == "learned" else None

    @property
    def token_weight(self) -> torch.Tensor | None:
        """The (V,d) token embedding matrix, or None for real inputs."""
        return self.tok.weight if isinstance(self.tok, nn.Embedding) else None

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        check_inputs(self.spec, inputs, self.limit)
        if self.spec.input_kind == "tokens":
            x = self.tok(inputs)  # (B,T,d)
        else:
            # The residual stream starts in the parameters' dtype for real inputs too: under bf16 autocast this tiny
            # Linear would otherwise hand a bf16 stream to every norm of a model without positions (Mamba), where
            # rms_norm falls back to its unfused path (bf16 input, float32 weight).
            with torch.autocast(inputs.device.type, enabled=False):
                x = self.tok(inputs.to(self.tok.weight.dtype))  # (B,T,d)
        if self.pos is not None:
            x = x + self.pos.rows(inputs.shape[1], inputs.device)  # (T,d) broadcast
        return x


def check_inputs(spec: TaskSpec, inputs: torch.Tensor, max_len: int | None) -> None:
    """ValueError for inputs of the wrong shape/type/length (longer than `max_len`, None: any length), before they
    reach an opaque kernel error."""
    want = 2 if spec.input_kind == "tokens" else 3
    if inputs.dim() != want:
        shape = "(B,T) token ids" if want == 2 else f"(B,T,{spec.input_dim}) real vectors"
        raise ValueError(f"inputs: expected {shape} for task {spec.name!r} (got shape {tuple(inputs.shape)})")
    if spec.input_kind == "tokens" and inputs.dtype.is_floating_point:
        raise ValueError(f"inputs: token ids must be an integer tensor (got {inputs.dtype})")
    if spec.input_kind == "real" and inputs.shape[-1] != spec.input_dim:
        raise ValueError(f"inputs: last dim must be input_dim={spec.input_dim} (got {inputs.shape[-1]})")
    if inputs.shape[1] < 1:
        raise ValueError(f"inputs: sequence length must be >= 1 (got {inputs.shape[1]})")
    if max_len is not None and inputs.shape[1] > max_len:
        raise ValueError(
            f"inputs: sequence length must be in [1, max_len={max_len}] (got {inputs.shape[1]}); "
            "build the model with a larger max_len"
        )


class OutputHead(nn.Module):
    """(B,T,d) -> K logits, or (mean, log-variance) for a real answer.

    With `tie=True` and `spec.answer_token_offset` set, the logits are dot products with the embedding rows of
    the answer tokens `offset .. offset+K-1` (no extra weights); otherwise a Linear with bias.

    `logit_scale=True` multiplies the K logits by exp(s), s a learned scalar starting at 0 (class answers only; a
    real answer's (mean, log-variance) has no logits to scale). Why: after the final norm the logit range is
    bounded by |h| |E_v|, which grows slowly from the small init, so a model cannot push the answers the posterior
    rules out far enough down: the quick bijection transformer kept 0.4% of its mass on revealed values (an entropy
    error of 0.040 bits against 0.001 on the possible values alone) with a logit gap of 5 nats after 3,000 steps. One
    scalar in log space moves that bound multiplicatively (docs/results/time-to-bayes.md).
    """

    def __init__(
        self,
        spec: TaskSpec,
        d_model: int,
        tie: bool = True,
        embedding: InputEmbedding | None = None,
        logit_scale: bool = False,
    ) -> None:
        super().__init__()
        self.spec = spec
        self.log_scale = nn.Parameter(torch.zeros(())) if logit_scale and spec.answer_kind == "classes" else None
        tied = (
            tie
            and spec.answer_kind == "classes"
            and spec.answer_token_offset is not None
            and embedding is not None
            and embedding.token_weight is not None
            and embedding.token_weight.shape[1] == d_model
        )
        if tied:
            # answers are the input tokens offset.. of a token task with class answers (TaskSpec)
            assert spec.answer_token_offset is not None and spec.n_classes is not None and spec.vocab_size is not None
            lo, k = int(spec.answer_token_offset), int(spec.n_classes)
            if lo + k > int(spec.vocab_size):
                raise ValueError(f"answer_token_offset: {lo}+n_classes {k} exceeds vocab_size {spec.vocab_size}")
            self.answer_rows = (lo, lo + k)
        # Held in a tuple, not as a submodule: the shared weight appears once in state_dict (safetensors-safe).
        self._tied_to: tuple[InputEmbedding, ...] = (embedding,) if tied and embedding is not None else ()
        self.proj = None if tied else nn.Linear(d_model, spec.output_dim)

    @property
    def tied(self) -> bool:
        return bool(self._tied_to)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Always float32, also under bf16 autocast: bf16 logits (8-bit mantissa, spacing 0.016-0.03 at |logit| 2-8)
        # quantise the predicted posterior and its gradient. Measured on the quick HMM transformer (1,000 steps):
        # 0.135 bits with a bf16 head, 0.100 with this float32 one, 0.105 all-float32 (docs/training.md).
        with torch.autocast(x.device.type, enabled=False):
            x = x.to(torch.promote_types(x.dtype, torch.float32))  # float64 models stay float64
            if self._tied_to:
                lo, hi = self.answer_rows
                weight = self._tied_to[0].token_weight
                assert weight is not None  # tied only to a token embedding
                out = x @ weight[lo:hi].t()  # (B,T,K)
            else:
                assert self.proj is not None  # untied heads have their own projection
                out = self.proj(x)  # (B,T,K) or (B,T,2)
            return out if self.log_scale is None else out * self.log_scale.exp()

    def vocab_logits(self, x: torch.Tensor) -> torch.Tensor:
        """A tied head's logits over every token of the vocabulary, (B,T,vocab_size): x @ E.T (times exp(log_scale)
        where the head has one), in float32 as `forward`; columns `answer_rows` are the answer logits `forward`
        returns. What `train.loss: ce_vocab` trains on (the authors' 2V-way bijection loss); ValueError for an untied
        head, which has no logit per token."""
        if not self._tied_to:
            raise ValueError("vocab_logits: an untied head has no logit per token (only a tied head does)")
        with torch.autocast(x.device.type, enabled=False):
            x = x.to(torch.promote_types(x.dtype, torch.float32))
            weight = self._tied_to[0].token_weight
            assert weight is not None  # tied only to a token embedding
            out = x @ weight.t()  # (B,T,vocab_size)
            return out if self.log_scale is None else out * self.log_scale.exp()


def tied_head(model: nn.Module) -> OutputHead | None:
    """The model's one tied `OutputHead` (`model.head`, else the only OutputHead among its modules), or None where it
    has none, or more than one OutputHead."""
    head = getattr(model, "head", None)
    if not isinstance(head, OutputHead):
        heads = [m for m in model.modules() if isinstance(m, OutputHead)]
        head = heads[0] if len(heads) == 1 else None
    return head if head is not None and head.tied else None


class FeedForward(nn.Module):
    """Pre-norm position-wise MLP delta: Linear(d->hidden) -> GELU -> Linear(hidden->d); the caller adds it."""

    def __init__(self, d_model: int, hidden: int, norm: str = "rms", eps: float = 1e-5) -> None:
        super().__init__()
        self.norm = make_norm(norm, d_model, eps)
        self.fc1 = nn.Linear(d_model, hidden)
        self.out_proj = nn.Linear(hidden, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out_proj(F.gelu(self.fc1(self.norm(x))))  # (B,T,d)


def make_norm(kind: str, d: int, eps: float = 1e-5) -> nn.Module:
    """'rms' -> RMSNorm, 'layer' -> LayerNorm."""
    check_choice("norm", kind, ("rms", "layer"))
    return nn.RMSNorm(d, eps=eps) if kind == "rms" else nn.LayerNorm(d, eps=eps)


# ---------------------------------------------------------------------------------------------- sizing


def count_params(factory: Callable[..., nn.Module], spec: TaskSpec, size: Any = None, **fields: Any) -> int:
    """Parameter count of `factory(spec, size, **fields)`, built on the meta device (no memory, no init cost)."""
    with torch.device("meta"):
        model = factory(spec, size, **fields)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def match_params(
    factory: Callable[..., nn.Module],
    spec: TaskSpec,
    target: int,
    width_key: str,
    depths: Iterable[int],
    depth_key: str = "n_layers",
    tol: float = 0.01,
    width_range: tuple[int, int] = (4, 8192),
    **fixed: Any,
) -> dict[str, Any]:
    """Solve for (depth, width) so that `factory(spec, **size)` has `target` parameters within `tol`.

    Tries each depth in the order given; for each, binary-searches the width (the count grows with width)
    and returns the first size within tolerance. ValueError if none fits.
    """
    best: tuple[float, dict[str, Any]] | None = None
    for depth in depths:

        def count(w: int, depth: int = depth) -> int:
            return count_params(factory, spec, **{**fixed, depth_key: depth, width_key: w})

        lo, hi = width_range
        if count(lo) > target:  # even the narrowest is too big at this depth
            continue
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if count(mid) <= target:
                lo = mid
            else:
                hi = mid
        for w in (lo, hi):
            err = abs(count(w) - target) / target
            size = {**fixed, depth_key: depth, width_key: w}
            if best is None or err < best[0]:
                best = (err, size)
        if best is not None and best[0] <= tol:
            return best[1]
    got = "nothing" if best is None else f"best {best[0]:.2%} off with {best[1]}"
    raise ValueError(f"target params: cannot match {target} within {tol:.0%} ({got})")
