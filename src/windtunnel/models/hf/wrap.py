"""`from_hf(model, task)`: a Hugging Face causal LM a user already has (GPT-2, GPT-NeoX/Pythia, Llama, Phi), on
windtunnel's forward pass with its hook points, the weights used in place; checked against the model's own logits
first. On a task it answers with the answer tokens' logits and is the registered architecture `hf-causal-lm`, whose
size (`HFModelSize`: the HF config) rebuilds it, so `save_run`, eval, probe and report read it as any run."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any, ClassVar

import torch
from pydantic import model_validator
from torch import nn

from windtunnel.models.base import ModelSize
from windtunnel.models.hf.core import Adapter, HFStack, transformers
from windtunnel.models.hf.gpt2 import GPT2Adapter
from windtunnel.models.hf.gpt_neox import GPTNeoXAdapter
from windtunnel.models.hf.llama import LlamaAdapter
from windtunnel.models.hf.phi import PhiAdapter
from windtunnel.tasks.base import TaskSpec, WindTunnel


class HFModelSize(ModelSize):
    """Size of a Hugging Face causal LM of one's own (`hf-causal-lm`, what `from_hf` wraps): `hf_config`, its HF
    config as JSON (the fields that differ from the family's defaults, and `model_type`), from which a run rebuilds
    the model with random weights before loading its checkpoint (nothing is downloaded); `answers`, the token id whose
    logit is each answer class's (None: every token's, the LM's own vocabulary); `max_len`, GPT-2's n_positions (the
    rotary families read any length)."""

    hf_config: dict[str, Any]
    answers: list[int] | None = None

    @property
    def model_type(self) -> str:
        return str(self.hf_config.get("model_type"))

    @property
    def n_layers(self) -> int | None:
        """The layer count the config says (what `budget.check_depth` bounds)."""
        layers = self.hf_config.get("num_hidden_layers", self.hf_config.get("n_layer"))
        return layers if isinstance(layers, int) else None

    def position_limit(self) -> bool:
        return self.model_type == "gpt2"  # a learned table of n_positions; rotary reads any length

    @model_validator(mode="after")
    def _known_family(self) -> HFModelSize:
        adapters = families()
        if self.model_type not in adapters:
            raise ValueError(
                f"hf_config: model_type {self.hf_config.get('model_type')!r} has no adapter; windtunnel reads "
                f"{', '.join(sorted(adapters))}"
            )
        if self.answers is not None and (not self.answers or min(self.answers) < 0):
            raise ValueError(f"answers: expected one token id >= 0 per answer class (got {self.answers})")
        return self


class HFCausalLM(HFStack):
    """A Hugging Face causal LM of one's own on windtunnel's forward pass with its hook points (`from_hf`): token ids
    (B,T) -> logits (B,T,K) of the `answers` tokens on a wind tunnel, or (B,T,vocab) as an LM. The HF model is
    `self.model`, its weights used in place (not copied); built from a size alone (a run's config), it is the model
    its `hf_config` builds, with random weights."""

    Size: ClassVar[type[HFModelSize]] = HFModelSize
    size: HFModelSize
    row, cost = 84, 1.0  # models.info: after the hf-* architectures; cost as the transformer's
    answers: torch.Tensor | None  # (K,) long token ids, or None: the whole vocabulary

    def __init__(
        self,
        spec: TaskSpec,
        size: HFModelSize | Mapping[str, Any] | None = None,
        *,
        model: nn.Module | None = None,
        **fields: Any,
    ) -> None:
        super().__init__()
        self.size = self.Size.of(size, fields)
        self.model = build_hf(self.size.hf_config) if model is None else model
        self._adopt(families()[self.size.model_type](_base_of(self.model)))
        lm: Any = self.model  # a transformers PreTrainedModel
        embed, head = lm.get_input_embeddings(), lm.get_output_embeddings()
        if embed is None or head is None:
            raise ValueError(
                f"from_hf: {type(self.model).__name__} has no LM head; give the causal LM (...ForCausalLM)"
            )
        self._embed, self._lm_head = (embed,), (head,)  # the model's own modules, held without registering twice
        self.max_len = spec.seq_len if self.size.max_len is None else self.size.max_len
        answers = self.size.answers
        _check_fits(spec, answers, int(embed.num_embeddings), int(head.out_features))
        self.spec = spec
        index = None if answers is None else torch.tensor(answers, device=head.weight.device)
        self.register_buffer("answers", index, persistent=False)  # not a weight: the checkpoint is the HF model's
        self._answer_head = (AnswerHead(head, self),)
        self.train(self.model.training)  # the model's own mode: restoring the wrapper's mode then restores the model's

    def embed_inputs(self, inputs: torch.Tensor) -> torch.Tensor:
        if inputs.dim() != 2 or inputs.dtype.is_floating_point:
            raise ValueError(f"inputs: expected (B,T) token ids (got {tuple(inputs.shape)} {inputs.dtype})")
        return self._embed[0](inputs)

    @property
    def lm_head(self) -> nn.Module:
        """The model's own LM head: (B,T,d) -> (B,T,vocab)."""
        return self._lm_head[0]

    @property
    def head(self) -> nn.Module:
        """What the outputs are read with: the LM head, then the answer tokens' logits (B,T,K) where there are
        answers (the logit lens applies it to every layer's residual stream)."""
        return self._answer_head[0]

    def readout(self, h: torch.Tensor) -> torch.Tensor:
        return self.head(h)

    def muon_layout(self) -> dict[str, Any]:
        """The fused matrices' Muon layouts under this wrapper, and the LM head on AdamW (a head, not hidden)."""
        prefix = next(name for name, m in self.named_modules() if m is self.adapter.base)
        out: dict[str, Any] = {f"{prefix}.{name}": layout for name, layout in self.adapter.muon_layout().items()}
        ids = {id(p): name for name, p in self.named_parameters()}
        for p in self._lm_head[0].parameters():
            if id(p) in ids:
                out[ids[id(p)]] = None
        return out


class AnswerHead(nn.Module):
    """An LM head read at the answer tokens: (B,T,d) -> (B,T,K) logits of `owner.answers` (all (B,T,vocab) where it
    has none). Held outside the module tree, so the weights are registered once, in the HF model."""

    def __init__(self, lm_head: nn.Module, owner: HFCausalLM) -> None:
        super().__init__()
        self._parts = (lm_head, owner)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        lm_head, owner = self._parts
        logits = lm_head(h)  # (B,T,vocab)
        return logits if owner.answers is None else logits.index_select(-1, owner.answers)  # (B,T,K)


def _base_of(model: nn.Module) -> nn.Module:
    """The HF base model under a causal LM; ValueError for a base model given in its place."""
    base = getattr(model, "base_model", None)
    if base is None or base is model:
        raise ValueError(f"from_hf: give the causal LM (e.g. {type(model).__name__}ForCausalLM), not its base model")
    return base


def _check_fits(spec: TaskSpec, answers: list[int] | None, vocab: int, logits: int) -> None:
    """ValueError unless a model of `vocab` input tokens and `logits` output logits reads `spec`'s inputs and gives
    its answers at `answers`."""
    if spec.input_kind != "tokens" or spec.answer_kind != "classes":
        raise ValueError(
            f"from_hf: a causal LM reads token ids and answers with token logits; task {spec.name!r} has "
            f"{spec.input_kind} inputs and {spec.answer_kind} answers"
        )
    if (spec.vocab_size or 0) > vocab:
        raise ValueError(f"from_hf: task {spec.name!r} has {spec.vocab_size} input tokens, the model's table {vocab}")
    k = logits if answers is None else len(answers)
    if k != spec.n_classes:
        raise ValueError(f"from_hf: {k} answer logits for task {spec.name!r}'s {spec.n_classes} classes")
    if answers is not None and max(answers) >= logits:
        raise ValueError(f"answers: token {max(answers)} is past the model's {logits} logits")


def build_hf(hf_config: Mapping[str, Any]) -> nn.Module:
    """The causal LM an `HFModelSize.hf_config` describes, with random weights (a run loads its checkpoint next)."""
    lib = transformers()
    fields = dict(hf_config)
    dtype = fields.pop("dtype", None)
    config = lib.AutoConfig.for_model(fields.pop("model_type"), **fields)
    model = lib.AutoModelForCausalLM.from_config(config)
    if isinstance(dtype, str) and isinstance(getattr(torch, dtype, None), torch.dtype):
        model = model.to(getattr(torch, dtype))
    return model


def config_of(model: nn.Module) -> dict[str, Any]:
    """The HF config of `model` as JSON: the fields that differ from its family's defaults, without the version of
    transformers that wrote it, and the weights' dtype where it is not float32 (`build_hf` reads it back)."""
    config: Any = getattr(model, "config", None)
    data: dict[str, Any] = json.loads(config.to_json_string(use_diff=True))
    data.pop("transformers_version", None)
    data.pop("dtype", None)
    data.pop("torch_dtype", None)
    param = next(model.parameters(), None)
    if param is not None and param.dtype != torch.float32:
        data["dtype"] = str(param.dtype).removeprefix("torch.")
    return data


def families() -> dict[str, type[Adapter]]:
    """The adapters by HF `model_type`."""
    adapters: list[type[Adapter]] = [GPT2Adapter, GPTNeoXAdapter, LlamaAdapter, PhiAdapter]
    return {t: a for a in adapters for t in a.model_types}


def from_hf(
    model: nn.Module,
    task: Any = None,
    *,
    answers: list[int] | None = None,
    seq_len: int | None = None,
    check: bool = True,
) -> HFCausalLM:
    """Wrap a Hugging Face causal LM (GPT-2, GPT-NeoX/Pythia, Llama, Phi) with windtunnel's hook points: the result
    maps (B,T) token ids to logits through the family's layout adapter, always causally masked, and has
    `run_with_cache`, `hooks`, `ablate` and the rest (docs/hooks.md). The weights are the model's own, not copied.

    task: a wind tunnel (a task, or its `TaskSpec`) to put the model on: its `spec` is then the task's and its outputs
    the (B,T,K) logits of the answer tokens, what `evaluate_model`, `probe_model` and `save_run` read (registered as
    `hf-causal-lm`). None: an LM, (B,T,vocab) logits. answers: the token id of each answer class (default: the
    task's, `answer_token_offset` .. + K - 1; a task whose answers are not input tokens needs them).
    seq_len: the length an LM's `spec` says (what `check_causal` tests; default: max positions, at most 64).
    check: compare the wrapper's logits with the model's own forward on a few random tokens first, and refuse the
    model where they differ (a config variant the adapter does not compute): a ValueError saying by how much.
    """
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    adapters = families()
    if model_type not in adapters:
        raise ValueError(
            f"from_hf: no adapter for model_type {model_type!r}; windtunnel reads {', '.join(sorted(adapters))}"
        )
    _base_of(model)
    positions = int(getattr(config, "max_position_embeddings", 64) or 64)
    lm: Any = model  # a transformers PreTrainedModel
    embed, head = lm.get_input_embeddings(), lm.get_output_embeddings()
    if embed is None or head is None:
        raise ValueError(f"from_hf: {type(model).__name__} has no LM head; give the causal LM (...ForCausalLM)")
    if task is None:
        spec = TaskSpec(
            name=adapters[model_type].family, input_kind="tokens", answer_kind="classes",
            seq_len=seq_len or min(positions, 64), vocab_size=int(embed.num_embeddings),
            n_classes=int(head.out_features),
        )  # fmt: skip
        if answers is not None:
            raise ValueError("from_hf: answers are read on a task: give the task too (from_hf(model, task, ...))")
    else:
        spec = task.spec if isinstance(task, WindTunnel) else task
        if not isinstance(spec, TaskSpec):
            raise ValueError(f"from_hf: task: expected a task or a TaskSpec (got {type(task).__name__})")
        if answers is None:
            if spec.answer_token_offset is None or spec.n_classes is None:
                raise ValueError(
                    f"from_hf: task {spec.name!r}'s answers are not input tokens: give answers=[token id of each of "
                    f"its {spec.n_classes} classes]"
                )
            answers = list(range(int(spec.answer_token_offset), int(spec.answer_token_offset) + int(spec.n_classes)))
    limit = int(getattr(config, "n_positions", 0) or 0) if model_type == "gpt2" else 0
    size = HFModelSize(hf_config=config_of(model), answers=answers, max_len=limit or None)
    wrapped = HFCausalLM(spec, size, model=model)
    if check:
        _check_same(wrapped, model)
    return wrapped


@torch.no_grad()
def _check_same(wrapped: HFCausalLM, model: nn.Module) -> None:
    """ValueError where the wrapper's logits are not the model's own on 8 random tokens (eval mode, no gradients)."""
    param = next(model.parameters())
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, wrapped.spec.vocab_size or 1, (2, min(8, wrapped.spec.seq_len)), generator=g)
    was = model.training
    model.eval()
    try:
        ours = wrapped(ids.to(param.device)).float()  # (B,T,K)
        theirs = model(input_ids=ids.to(param.device), use_cache=False).logits.float()  # (B,T,vocab)
    finally:
        model.train(was)
    if wrapped.answers is not None:
        theirs = theirs.index_select(-1, wrapped.answers)  # (B,T,K): the answer tokens' logits
    tol = (1e-4 if param.dtype in (torch.float32, torch.float64) else 3e-2) * max(1.0, float(theirs.abs().max()))
    diff = float((ours - theirs).abs().max())
    if not math.isfinite(diff) or diff > tol:
        raise ValueError(
            f"from_hf: windtunnel's forward of this {type(model).__name__} differs from its own by {diff:.3g} "
            f"(tolerance {tol:.3g}); its config uses something the {wrapped.adapter.family} adapter does not compute"
        )
