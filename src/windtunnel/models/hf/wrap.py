"""`from_hf(model)`: a Hugging Face causal LM a user already has (GPT-2, GPT-NeoX/Pythia, Llama, Phi), on windtunnel's
forward pass with its hook points, the weights used in place; checked against the model's own logits first."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from windtunnel.models.hf.core import Adapter, HFStack
from windtunnel.models.hf.gpt2 import GPT2Adapter
from windtunnel.models.hf.gpt_neox import GPTNeoXAdapter
from windtunnel.models.hf.llama import LlamaAdapter
from windtunnel.models.hf.phi import PhiAdapter
from windtunnel.tasks.base import TaskSpec


class HFCausalLM(HFStack):
    """A Hugging Face causal LM a user already has, with windtunnel's hook points (`from_hf`): token ids (B,T) ->
    next-token logits (B,T,vocab). The HF model is `self.model`, its weights used in place (not copied)."""

    def __init__(self, model: nn.Module, adapter: Adapter, seq_len: int) -> None:
        super().__init__()
        self.model = model
        self._adopt(adapter)
        lm: Any = model  # a transformers PreTrainedModel
        embed, head = lm.get_input_embeddings(), lm.get_output_embeddings()
        if embed is None or head is None:
            raise ValueError(f"from_hf: {type(model).__name__} has no LM head; give the causal LM (...ForCausalLM)")
        self._embed, self._lm_head = (embed,), (head,)  # the model's own modules, held without registering twice
        vocab = int(embed.num_embeddings)
        self.spec = TaskSpec(
            name=adapter.family, input_kind="tokens", answer_kind="classes", seq_len=seq_len, vocab_size=vocab,
            n_classes=int(head.out_features),
        )  # fmt: skip

    def embed_inputs(self, inputs: torch.Tensor) -> torch.Tensor:
        if inputs.dim() != 2 or inputs.dtype.is_floating_point:
            raise ValueError(f"inputs: expected (B,T) token ids (got {tuple(inputs.shape)} {inputs.dtype})")
        return self._embed[0](inputs)

    @property
    def head(self) -> nn.Module:
        """The model's LM head."""
        return self._lm_head[0]

    def readout(self, h: torch.Tensor) -> torch.Tensor:
        return self._lm_head[0](h)

    def muon_layout(self) -> dict[str, Any]:
        """The fused matrices' Muon layouts under this wrapper, and the LM head on AdamW (a head, not hidden)."""
        prefix = next(name for name, m in self.named_modules() if m is self.adapter.base)
        out: dict[str, Any] = {f"{prefix}.{name}": layout for name, layout in self.adapter.muon_layout().items()}
        ids = {id(p): name for name, p in self.named_parameters()}
        for p in self._lm_head[0].parameters():
            if id(p) in ids:
                out[ids[id(p)]] = None
        return out


def families() -> dict[str, type[Adapter]]:
    """The adapters by HF `model_type`."""
    adapters: list[type[Adapter]] = [GPT2Adapter, GPTNeoXAdapter, LlamaAdapter, PhiAdapter]
    return {t: a for a in adapters for t in a.model_types}


def from_hf(model: nn.Module, *, seq_len: int | None = None, check: bool = True) -> HFCausalLM:
    """Wrap a Hugging Face causal LM (GPT-2, GPT-NeoX/Pythia, Llama, Phi) with windtunnel's hook points: the result
    maps (B,T) token ids to (B,T,vocab) logits through the family's layout adapter, always causally masked, and has
    `run_with_cache`, `hooks`, `ablate` and the rest (docs/hooks.md). The weights are the model's own, not copied.

    seq_len: the length its `spec` says (what `check_causal` tests; default: max positions, at most 64).
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
    base = getattr(model, "base_model", None)
    if base is None or base is model:
        raise ValueError(f"from_hf: give the causal LM (e.g. {type(model).__name__}ForCausalLM), not its base model")
    positions = int(getattr(config, "max_position_embeddings", 64) or 64)
    wrapped = HFCausalLM(model, adapters[model_type](base), seq_len or min(positions, 64))
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
        ours = wrapped(ids.to(param.device)).float()
        theirs = model(input_ids=ids.to(param.device), use_cache=False).logits.float()
    finally:
        model.train(was)
    tol = (1e-4 if param.dtype in (torch.float32, torch.float64) else 3e-2) * max(1.0, float(theirs.abs().max()))
    diff = float((ours - theirs).abs().max())
    if not math.isfinite(diff) or diff > tol:
        raise ValueError(
            f"from_hf: windtunnel's forward of this {type(model).__name__} differs from its own by {diff:.3g} "
            f"(tolerance {tol:.3g}); its config uses something the {wrapped.adapter.family} adapter does not compute"
        )
