"""The model protocol every architecture follows, the residual skeleton they share, and how an output becomes a
predictive distribution.

    out = model(inputs)                                  # (B,T,K) logits, or (B,T,2) Gaussian (mean, log-variance)
    out, cache = model.run_with_cache(inputs, names=[...])   # named activations (models/hooks.py, docs/hooks.md)

Every built-in architecture is a `ResidualModel`: embed -> n_layers x `layer(l, h)` -> final norm -> head, with the
embedding and the head built, and the hook points embed, blocks.{l}.resid_pre, blocks.{l}.resid_post and final
placed, here once; an architecture file holds only its layers (`build_layers`: the mixer, and `layer`: how it joins
the residual stream), their own hook points, its init and what else differs (the embedding's positions, the MLP's
prefix embedding).

Every architecture declares its size as a pydantic `ModelSize` subclass, `Arch.Size`: the one place its size
parameters, their defaults and their allowed ranges are written. A config's `model.size` is validated against it
when the config is resolved, and the model is built as `Arch(spec, size)` (or `Arch(spec, **fields)`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar

import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from torch import nn
from torch.distributions import Categorical, Distribution, Normal

from windtunnel.errors import UserCodeError, error_message
from windtunnel.models.common import Init, InputEmbedding, OutputHead, initialise
from windtunnel.models.hooks import HookedModel
from windtunnel.tasks.base import TaskSpec

# Bounds on a Gaussian head's log-variance: keeps NLL finite early in training.
LOGVAR_MIN, LOGVAR_MAX = -12.0, 8.0


def size_int(default: int, lo: int = 1) -> Any:
    """A size field holding an integer >= `lo` (strict: 2.0 or True is not an integer here)."""
    return Field(default=default, ge=lo, strict=True)


S = TypeVar("S", bound="ModelSize")


class ModelSize(BaseModel):
    """Typed size of an architecture (subclass it per architecture): unknown fields, wrong types, values out of range
    and non-finite numbers are errors naming the field. `max_len` (positions to allocate) is every model's, and so
    is `reserved_positions`: how many of the last of them are reserved for longer evaluations (`PositionTable`).

    An architecture with a learned table of positions says so in `learned_positions` (and passes
    `reserved_positions` to its table: `InputEmbedding(..., reserved=...)`); one that can read any length says so in
    `position_limit`."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)

    # Fields whose default (None) depends on other fields: a validator sets the concrete value without marking the
    # field given, so merging sizes (`of`) re-derives it, and a run's stored config (`as_config(resolved=True)`)
    # records it, so what a run trained with never rests on a default that may change.
    resolved_fields: ClassVar[tuple[str, ...]] = ()

    max_len: int | None = Field(default=None, ge=1)  # None: the task's sequence length
    reserved_positions: int = Field(default=0, ge=0, strict=True)  # rows of the learned table no training reads

    def learned_positions(self) -> bool:
        """Whether this model reads a learned table of `max_len` absolute positions whose rows past the training
        length `resolve_config` may reserve (`reserved_positions`). False unless an architecture says otherwise (the
        MLPs hold weights per position too, but are capacity-matched at the training length: they reserve none)."""
        return False

    def position_limit(self) -> bool:
        """Whether inputs longer than `max_len` are refused. True unless an architecture says otherwise: one
        without a learned table or other weights per position reads any length."""
        return True

    @model_validator(mode="after")
    def _reserved_fit(self) -> ModelSize:
        if self.reserved_positions and not self.learned_positions():
            raise ValueError("reserved_positions: this model has no learned position table to reserve rows in")
        if self.max_len is not None and self.reserved_positions >= self.max_len:
            raise ValueError(f"reserved_positions: must be < max_len = {self.max_len} (got {self.reserved_positions})")
        return self

    @classmethod
    def of(
        cls: type[S],
        size: ModelSize | Mapping[str, Any] | None = None,
        overrides: Mapping[str, Any] | None = None,
        where: str = "",
    ) -> S:
        """`size` (an object or a mapping of fields) with `overrides` on top, validated; ValueError names each bad
        field after `where` (`model.size.d_model: Input should be greater than or equal to 1 (got 0)`)."""
        base = size.model_dump(exclude_unset=True) if isinstance(size, ModelSize) else dict(size or {})
        try:
            return cls.model_validate({**base, **(overrides or {})})
        except ValidationError as err:
            raise ValueError(error_message(err, cls.__name__, where, model=cls)) from None

    def as_config(self, resolved: bool = False) -> dict[str, Any]:
        """The fields that were given (the config form of a size: defaults stay implicit), JSON-ready; with
        `resolved=True` also the `resolved_fields` at their concrete values (what `resolve_config` stores)."""
        out = self.model_dump(mode="json", exclude_unset=True)
        if resolved:
            out.update(self.model_dump(mode="json", include=set(self.resolved_fields)))
        return out


class InitSize(ModelSize):
    """A `ModelSize` with `init`, how the built-in architectures initialise their weights:

    "normal"  N(0, std) on every Linear/Embedding weight, zero biases, GPT-2's scaled residual projections where the
              architecture has them (`common.initialise`): step-1 losses near log K;
    "torch"   every module keeps PyTorch's own default init, as the authors' code does (Embedding N(0,1), Linear
              kaiming-uniform weight and uniform bias, LSTM U(+-1/sqrt(d))): the authors' G3 bijection transformer
              starts at a loss of 125.5 (official-code.md section 6.1).
    None (the default) is the architecture's own default, `default_init()`, filled in by the validator.
    Parameters a block defines itself (Mamba's A_log, D, dt_proj) keep their block's init in both modes.
    """

    resolved_fields: ClassVar[tuple[str, ...]] = ("init",)

    init: Init | None = None

    def default_init(self) -> Init:
        """The init of an architecture whose config does not name one (override per architecture)."""
        return "normal"

    @model_validator(mode="after")
    def _resolve_init(self) -> InitSize:
        if self.init is None:
            self.__dict__["init"] = self.default_init()  # frozen model: set the derived value directly
            self.model_fields_set.discard("init")  # derived, not given: `of` re-derives it after overrides
        return self


class SequenceModel(nn.Module):
    """Base class of all architectures: a causal map from (B,T[,D]) inputs to per-position outputs.

    An architecture is registered (`models.register`) as a class with a `Size` (a `ModelSize` subclass) and a
    constructor `Arch(spec, size=None, **fields)`. Its ClassVars below are what the suites and the report read of it
    (`models.info`); these are the defaults a user's own architecture gets (docs/models.md, "Metadata").
    """

    Size: ClassVar[type[ModelSize]]
    row: ClassVar[int] = 100  # sort key of its report rows: the built-ins are 10..70, so a user's own comes after
    follows: ClassVar[str | None] = None  # a control's: the architecture whose size, budget and recipe it takes
    context_blind: ClassVar[bool] = False  # cannot (the oracle: need not) read the context: no failure-floor check
    baseline: ClassVar[bool] = False  # never trained: predicts whole batches (`models.baselines`)
    # Relative training cost per step, token and parameter (transformer 1.0): orders a suite's runs longest first
    # and weights its ETA. How the built-ins' were measured: docs/results/arch-cost.md.
    cost: ClassVar[float] = 1.0
    color: ClassVar[str | None] = None  # its matplotlib colour in every figure (None: one picked from its name)
    # A control's: the depths `presets` tries, in order, when it matches the control's width to the parameter count of
    # the architecture it follows, as multiples of that architecture's depth (rounded away from it, at least 1).
    depth_factors: ClassVar[tuple[float, ...]] = (1.0,)
    spec: TaskSpec

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:  # pragma: no cover - interface
        raise NotImplementedError

    def n_params(self) -> int:
        """Trainable parameter count (tied weights counted once)."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    def state_size(self, T: int) -> int:
        """Numbers kept per sequence at inference after T tokens (KV cache, recurrent state, ...)."""
        raise NotImplementedError


class ResidualModel(HookedModel, SequenceModel):
    """embed -> n_layers x layer(l, h) -> final norm -> head, with the shared hook points around every layer.

    The constructor builds the whole model, in the order its parameters draw from the RNG and sit in the state_dict:
    it validates the size against `Size` (`self.size`), then builds `embed` (`make_embedding`), the architecture's
    layers and final `norm` (`build_layers`) and the `head` (before the layers where `head_before_layers` says so),
    then initialises the weights (`initialise_weights`). An architecture writes `build_layers` and `layer`, and
    overrides the rest only where it differs.

    The skeleton reads its width from the size's `d_model` (every `ResidualModel`'s Size declares it), and the head's
    `tie` and `logit_scale` from the size where it declares them (default: tied where the task allows, no scale).
    """

    embed: nn.Module
    norm: nn.Module
    head: OutputHead
    n_layers: int
    # Whether the head is built before the layers rather than after them: the order of the random draws where the
    # weights keep the init PyTorch draws at construction (init="torch"); the state_dict lists the head last either way.
    head_before_layers: ClassVar[bool] = False

    def __init__(self, spec: TaskSpec, size: ModelSize | Mapping[str, Any] | None = None, **fields: Any) -> None:
        super().__init__()
        self.spec = spec
        self.size = self.Size.of(size, fields)
        d_model = getattr(self.size, "d_model", None)
        if not isinstance(d_model, int):
            raise UserCodeError(f"{type(self).__name__}.Size: a ResidualModel's size declares its width, d_model")
        self.d_model = d_model
        self.max_len = spec.seq_len if self.size.max_len is None else self.size.max_len
        self.embed = self.make_embedding()  # (B,T[,D]) -> (B,T,d)
        head = self._make_head() if self.head_before_layers else None
        self.build_layers()
        self.head = head if head is not None else self._make_head()  # registered last: the state_dict's order
        self.initialise_weights()

    def _make_head(self) -> OutputHead:
        """The head, (B,T,d) -> (B,T,K) or (B,T,2): tied to the embedding's answer-token rows where the task, the
        size's `tie` and the embedding (an `InputEmbedding` of width d_model) allow, scaled where `logit_scale` says."""
        return OutputHead(
            self.spec,
            self.d_model,
            tie=getattr(self.size, "tie", True),
            embedding=self.embed if isinstance(self.embed, InputEmbedding) else None,
            logit_scale=getattr(self.size, "logit_scale", False),
        )

    def embedding_positions(self) -> str:
        """The positions the input embedding adds: "learned" (a `PositionTable`) where the size says the model has a
        learned table (`Size.learned_positions()`), else "none"."""
        return "learned" if self.size.learned_positions() else "none"

    def make_embedding(self) -> nn.Module:
        """The input embedding, (B,T[,D]) -> (B,T,d_model): an `InputEmbedding` of `max_len` positions with the
        `embedding_positions()`, its learned table reserving the size's `reserved_positions` rows."""
        pos = self.embedding_positions()
        return InputEmbedding(self.spec, self.d_model, self.max_len, pos=pos, reserved=self.size.reserved_positions)

    def build_layers(self) -> None:  # pragma: no cover - interface
        """Build what lies between the embedding and the head: the `n_layers` layers `layer(l, h)` runs (set
        `self.n_layers`) and the final norm, `self.norm`."""
        raise NotImplementedError

    def initialise_weights(self) -> None:
        """Initialise the built model: by the size's `init` where it is an `InitSize` (`common.initialise`), else
        PyTorch's defaults stay. Override for an architecture's own init (residual scaling, a block's own parts)."""
        if isinstance(self.size, InitSize):
            initialise(self, self.size.init)

    def layer(self, l: int, h: torch.Tensor) -> torch.Tensor:  # pragma: no cover - interface
        """Layer l on the (B,T,d) residual stream: the stream it leaves (for most layers h + mixer(norm(h)))."""
        raise NotImplementedError

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.forward_from(0, self.hook("embed", self.embed(inputs)))  # (B,T,K) or (B,T,2)

    def forward_from(self, first: int, h: torch.Tensor) -> torch.Tensor:
        """The pass from layer `first`'s input `h` (B,T,d), the `blocks.{first}.resid_pre` stream, to the head's
        output: what `forward` computes after layer first-1, so an ablation of layer `first` or later can start from
        a cached stream instead of recomputing the layers before it (geometry/ablation.py)."""
        for l in range(first, self.n_layers):
            h = self.hook(f"blocks.{l}.resid_pre", h)
            h = self.hook(f"blocks.{l}.resid_post", self.layer(l, h))  # (B,T,d)
        return self.head(self.hook("final", self.norm(h)))  # (B,T,K) or (B,T,2)


def check_output(model: nn.Module, spec: TaskSpec, inputs: torch.Tensor, out: Any, where: str) -> torch.Tensor:
    """`out`, what `model` returned for `inputs`, if it is a tensor of shape (B,T,K) (K: `spec.output_dim`, the
    classes or a Gaussian's 2), else a `UserCodeError` naming the model's class, `where` (`training step 3`), the
    shape it must have and what it returned: a plugin's forward that drops a position fails there, in one line,
    not inside a loss or a metric."""
    want = (*inputs.shape[:2], spec.output_dim)
    if isinstance(out, torch.Tensor) and tuple(out.shape) == want:
        return out
    got = tuple(out.shape) if isinstance(out, torch.Tensor) else f"a {type(out).__name__}"
    cls = type(model)
    raise UserCodeError(
        f"model {cls.__module__}.{cls.__qualname__}, at {where}: forward must return outputs of shape {want} for "
        f"inputs of shape {tuple(inputs.shape)}; it returned {got}"
    )


def predictive(spec: TaskSpec, out: torch.Tensor) -> Distribution:
    """Turn a model's head output into the predictive distribution with batch shape (B,T)."""
    if spec.answer_kind == "classes":
        return Categorical(logits=out.float(), validate_args=False)
    mean, logvar = out.float().unbind(-1)
    scale = torch.exp(0.5 * logvar.clamp(LOGVAR_MIN, LOGVAR_MAX))
    return Normal(mean, scale, validate_args=False)
