"""What every Hugging Face family shares: the layout adapter's interface, the one forward pass that reads a family's
weights through its adapter (with the causal mask, always), and the registered architectures' base class
(`models.hf.wrap.from_hf` wraps a causal LM a user already has on the same forward pass).

The forward pass is windtunnel's, not the HF model's: each layer is computed here from the HF modules' own weights
(norms, projections, rotary table, MLP), so every standard hook point (`embed`, `blocks.{l}.resid_pre`,
`attn.q|k|v|pattern|z|out`, `resid_mid`, `mlp.out`, `resid_post`, `final`) is a real point of the computation that
a hook can read or replace. Attention always masks the future: there is no call without the causal mask.
Whether the adapter reads the weights as the family lays them out is tested against the HF model's own forward
(tests/test_hf.py), and `from_hf` checks it once more on the model it wraps.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch
import torch.nn.functional as F
from pydantic import Field, model_validator
from torch import nn

from windtunnel.models.base import ModelSize, SequenceModel, size_int
from windtunnel.models.common import INIT_STD, InputEmbedding, OutputHead, init_weights
from windtunnel.models.hooks import HookedModel, LayerHook
from windtunnel.tasks.base import TaskSpec

INSTALL = "pip install 'windtunnel[hf]'"
Rope = tuple[torch.Tensor, torch.Tensor]  # (cos, sin), each (1,T,rotary dims), from the family's own rotary table


def transformers() -> Any:
    """The `transformers` package; a ValueError saying how to install it where it is missing."""
    try:
        return importlib.import_module("transformers")
    except ImportError:
        raise ValueError(f"model.arch: the Hugging Face architectures need transformers ({INSTALL})") from None


@dataclass(frozen=True)
class Slice:
    """Where q, k or v lives in a family's weights: output features `index` (head-major: heads x d_head) of `weight`
    along its axis `dim` (0: an nn.Linear's (out, in); 1: a Conv1D's (in, out)), with `bias` at the same features.
    `start`: where the features are one contiguous run (index = start, start + 1, ...), read as a view, not a copy;
    None where they are interleaved (GPT-NeoX). Calling it projects (B,T,d) inputs to (B,heads,T,d_head)."""

    weight: nn.Parameter
    bias: nn.Parameter | None
    dim: int
    index: torch.Tensor  # (heads * d_head,) long
    heads: int
    start: int | None = None

    def _take(self, t: torch.Tensor, dim: int) -> torch.Tensor:
        if self.start is None:
            return t.index_select(dim, self.index)
        return t.narrow(dim, self.start, self.index.numel())

    def matrix(self) -> torch.Tensor:
        """The projection as an nn.Linear weight, (heads * d_head, d_in)."""
        w = self._take(self.weight, self.dim)
        return w if self.dim == 0 else w.t()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        bias = None if self.bias is None else self._take(self.bias, 0)
        y = F.linear(x, self.matrix(), bias)  # (B,T,heads*dh)
        return y.unflatten(-1, (self.heads, -1)).transpose(1, 2)  # (B,heads,T,dh)


class Adapter:
    """One family's layout: where its layers, norms, q/k/v, output projection, MLP and positions are, read from the
    HF base model (`GPT2Model`, `GPTNeoXModel`, ...) it is built on. A subclass per family (models/hf/*.py)."""

    family: ClassVar[str]  # the architecture's name, e.g. "hf-gpt2"
    model_types: ClassVar[tuple[str, ...]]  # the `config.model_type`s it reads
    parallel: bool = False  # attention and MLP both read the layer's input (GPT-NeoX by default, Phi)

    def __init__(self, base: nn.Module) -> None:
        self.base: Any = base  # an HF base model: its submodules are read by name (untyped here)
        self.config: Any = base.config
        self.check()

    # -------------------------------------------------------------- per family

    def check(self) -> None:
        """ValueError for a config option this adapter does not compute (checked before anything runs)."""

    @property
    def n_layers(self) -> int:
        return int(self.config.num_hidden_layers)

    @property
    def n_heads(self) -> int:
        return int(self.config.num_attention_heads)

    @property
    def n_kv_heads(self) -> int:
        return self.n_heads

    @property
    def d_model(self) -> int:
        return int(self.config.hidden_size)

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    def layers(self) -> Any:
        raise NotImplementedError

    def final_norm(self) -> nn.Module:
        raise NotImplementedError

    def projections(self, l: int) -> dict[str, Slice]:
        """q, k and v of layer l: where each lives in the weights (`Slice`). The layout this adapter is about."""
        raise NotImplementedError

    def out_proj(self, l: int) -> nn.Module:
        raise NotImplementedError

    def norms(self, l: int) -> tuple[nn.Module, nn.Module | None]:
        """The norm before attention and the one before the MLP (None: the MLP reads the attention's input)."""
        raise NotImplementedError

    def mlp(self, l: int) -> nn.Module:
        raise NotImplementedError

    def scaling(self, l: int) -> float:
        """The factor on q . k (the HF attention module's own `scaling`)."""
        return float(self.attention(l).scaling)

    def attention(self, l: int) -> Any:
        raise NotImplementedError

    def qk_norm(self, l: int, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Norms on the heads' queries and keys before rotary, where the family has them (Phi's qk_layernorm)."""
        return q, k

    def positions(self, x: torch.Tensor) -> tuple[torch.Tensor, Rope | None]:
        """The embedded inputs with absolute positions added (GPT-2), and the rotary (cos, sin) (the others)."""
        position_ids = torch.arange(x.shape[1], device=x.device)[None]  # (1,T)
        cos, sin = self.base.rotary_emb(x, position_ids=position_ids)  # (1,T,r) each
        return x, (cos, sin)

    def muon_layout(self) -> dict[str, Any]:
        """{parameter name under the base model: its Muon layout} where it is not what the module's kind says
        (`optim.muon_layout`); names only the fused matrices."""
        return {}

    # -------------------------------------------------------------- shared

    def head_index(self, start: int, stride: int, heads: int, device: torch.device) -> torch.Tensor:
        """Feature indices of `heads` heads of d_head features, head h at start + h * stride (head-major)."""
        dh = self.d_head
        offsets = torch.arange(heads, device=device)[:, None] * stride + torch.arange(dh, device=device)[None, :]
        return (start + offsets).reshape(-1)


def rotate(x: torch.Tensor, rope: Rope) -> torch.Tensor:
    """Rotary embedding (rotate-half form, the HF families') of the first `cos.shape[-1]` features of each (B,H,T,dh)
    head; the rest pass unchanged (partial rotary: GPT-NeoX's rotary_pct, Phi's partial_rotary_factor)."""
    cos, sin = (t.unsqueeze(1).to(x.dtype) for t in rope)  # (1,1,T,r)
    r = cos.shape[-1]
    x_rot, x_pass = x[..., :r], x[..., r:]
    half = r // 2
    rotated = torch.cat([-x_rot[..., half:], x_rot[..., :half]], dim=-1)
    return torch.cat([x_rot * cos + rotated * sin, x_pass], dim=-1)


class HFStack(HookedModel, SequenceModel):
    """The forward pass through an `Adapter`: embed -> positions -> n_layers x layer -> final norm -> head, with the
    standard hook points. Subclasses give `embed_inputs` (inputs -> (B,T,d)) and `readout` ((B,T,d) after the final
    norm -> outputs: the head)."""

    adapter: Adapter
    attention_mode: str = "auto"
    layer_hooks = ("attn.q", "attn.k", "attn.v", "attn.pattern", "attn.z", "attn.out", "resid_mid", "mlp.out")
    resid_parts = ("attn.out", "mlp.out")

    def _adopt(self, adapter: Adapter) -> None:
        self.adapter = adapter
        self.n_layers, self.n_heads = adapter.n_layers, adapter.n_heads
        self.n_kv_heads, self.d_model, self.d_head = adapter.n_kv_heads, adapter.d_model, adapter.d_head

    def embed_inputs(self, inputs: torch.Tensor) -> torch.Tensor:  # pragma: no cover - interface
        raise NotImplementedError

    def readout(self, h: torch.Tensor) -> torch.Tensor:  # pragma: no cover - interface
        raise NotImplementedError

    @property
    def norm(self) -> nn.Module:
        """The family's final norm (what `final` is the output of)."""
        return self.adapter.final_norm()

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        h, rope = self.adapter.positions(self.embed_inputs(inputs))
        h = self.hook("embed", h)  # (B,T,d)
        explicit = self.attention_mode == "explicit" or (self.attention_mode == "auto" and h.device.type != "cuda")
        for l in range(self.n_layers):
            h = self.hook(f"blocks.{l}.resid_pre", h)
            h = self.hook(f"blocks.{l}.resid_post", self._layer(l, h, rope, explicit, self.layer_hook(l)))
        return self.readout(self.hook("final", self.norm(h)))

    def _layer(self, l: int, h: torch.Tensor, rope: Rope | None, explicit: bool, hook: LayerHook) -> torch.Tensor:
        a = self.adapter
        before_attn, before_mlp = a.norms(l)
        x = before_attn(h)
        mid = hook("resid_mid", h + hook("attn.out", self._attention(l, x, rope, explicit, hook)))  # (B,T,d)
        if a.parallel:  # the MLP reads the layer's input; resid_mid is the stream with attention's part added
            mlp_in = x if before_mlp is None else before_mlp(h)
        else:
            assert before_mlp is not None  # a sequential layer has a norm before its MLP
            mlp_in = before_mlp(mid)
        return mid + hook("mlp.out", a.mlp(l)(mlp_in))

    def _attention(self, l: int, x: torch.Tensor, rope: Rope | None, explicit: bool, hook: LayerHook) -> torch.Tensor:
        a = self.adapter
        B, T, _ = x.shape
        p = a.projections(l)
        q, k = a.qk_norm(l, p["q"](x), p["k"](x))  # (B,H,T,dh), (B,Hkv,T,dh)
        v = p["v"](x)  # (B,Hkv,T,dh)
        if rope is not None:
            q, k = rotate(q, rope), rotate(k, rope)
        q, k, v = hook("attn.q", q), hook("attn.k", k), hook("attn.v", v)
        groups = self.n_heads // self.n_kv_heads  # query heads per key/value head (GQA): head h reads h // groups
        k_h, v_h = (k, v) if groups == 1 else (k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1))
        scale = a.scaling(l)
        if explicit or self.wants(f"blocks.{l}.attn.pattern"):
            scores = (q @ k_h.transpose(-2, -1)) * scale  # (B,H,T,T)
            causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            scores = scores.masked_fill(~causal, float("-inf"))
            pattern = scores.softmax(dim=-1, dtype=torch.float32).to(q.dtype)  # HF's softmax in float32
            z = hook("attn.pattern", pattern) @ v_h  # (B,H,T,dh)
        else:
            z = F.scaled_dot_product_attention(q, k_h, v_h, is_causal=True, scale=scale)  # (B,H,T,dh)
        z = hook("attn.z", z)
        # contiguous: at head dim 1 the reshape is a strided view, which GPT-2's Conv1D (x.view) cannot read
        return a.out_proj(l)(z.transpose(1, 2).reshape(B, T, -1).contiguous())  # (B,T,d)

    def state_size(self, T: int) -> int:
        """KV cache: keys and values of every layer's key/value heads for T tokens."""
        return 2 * self.n_layers * int(T) * self.n_kv_heads * self.d_head


# ---------------------------------------------------------------------------------------------- architectures


class HFSize(ModelSize):
    """Size of a Hugging Face architecture, mapped onto its HF config (`HFArchitecture.hf_config`): `n_layers`,
    `d_model` (hidden_size), `n_heads`, `d_ff` (the MLP's inner width; None: 4 d_model), `max_len` (the positions:
    the task's sequence length unless given), `eps` (the norms' epsilon), `init_std` (HF's initializer_range: its own
    init of every HF module; N(0, init_std) on the task's input embedding and head, as the built-in transformer's
    "normal" init), `tie` (the head's K logits are the answer tokens' embedding rows where the task allows, as the
    built-in transformer's), `attention` ("auto": fused on CUDA, explicit on the CPU; "explicit"; "fused")."""

    n_layers: int = size_int(6)
    n_heads: int = size_int(6)
    d_model: int = size_int(192)
    d_ff: int | None = Field(default=None, ge=1, strict=True)
    eps: float = Field(default=1e-5, gt=0)
    init_std: float = Field(default=INIT_STD, gt=0)
    tie: bool = True
    attention: Literal["auto", "fused", "explicit"] = "auto"

    def rotary_dims(self) -> int | None:
        """Rotary features per head (None: no rotary)."""
        return None

    def position_limit(self) -> bool:
        return self.rotary_dims() is None  # rotary reads any length; GPT-2's position table holds max_len

    @model_validator(mode="after")
    def _heads_fit(self) -> HFSize:
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model: must be divisible by n_heads={self.n_heads} (got {self.d_model})")
        r = self.rotary_dims()
        if r is not None and (r < 2 or r % 2):
            raise ValueError(
                f"rotary: {r} rotary features per head (head dim {self.d_model // self.n_heads}); they must be an even "
                "number >= 2: change d_model, n_heads or the rotary fraction"
            )
        return self


class HFArchitecture(HFStack):
    """A registered Hugging Face architecture (`hf-gpt2`, ...): the task's input embedding (token or Linear, as every
    built-in), the HF family's base model built from a config with random weights, and the task's head (K logits
    tied to the answer tokens' embedding rows where the task allows, as the built-in transformer's). The HF base
    model's own token table is dropped (the task's embedding replaces it); its layers, norms and positions are used
    as the family defines them, read through the family's `Adapter`."""

    Size: ClassVar[type[HFSize]] = HFSize
    size: HFSize
    adapter_class: ClassVar[type[Adapter]]
    base_class: ClassVar[str]  # the HF base model's class name in transformers
    token_table: ClassVar[str]  # the attribute of the base model's token embedding, dropped
    row, cost = 80, 1.0  # models.info: after the built-ins in every table; cost as the transformer's

    def __init__(self, spec: TaskSpec, size: HFSize | Mapping[str, Any] | None = None, **fields: Any) -> None:
        super().__init__()
        self.spec = spec
        self.size = self.Size.of(size, fields)
        s = self.size
        lib = transformers()
        self.max_len = spec.seq_len if s.max_len is None else s.max_len
        self.attention_mode = s.attention
        self.embed = InputEmbedding(spec, s.d_model, self.max_len, pos="none", limit=s.position_limit())
        config = self.hf_config(lib, s, self.max_len)
        config._attn_implementation = "eager"  # the HF model's own forward (tests) then computes what ours does
        self.hf = getattr(lib, self.base_class)(config)
        setattr(self.hf, self.token_table, None)  # the task's embedding replaces it
        self._adopt(self.adapter_class(self.hf))
        self.head = OutputHead(spec, s.d_model, tie=s.tie, embedding=self.embed)
        for module in (self.embed, self.head):
            module.apply(lambda m: init_weights(m, s.init_std))

    @classmethod
    def hf_config(cls, lib: Any, size: Any, max_len: int) -> Any:  # pragma: no cover - interface
        """The HF config of `size` (random weights are drawn from it; nothing is downloaded)."""
        raise NotImplementedError

    def embed_inputs(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.embed(inputs)

    def readout(self, h: torch.Tensor) -> torch.Tensor:
        return self.head(h)

    def muon_layout(self) -> dict[str, Any]:
        """The fused matrices' Muon layouts (`optim.muon_blocks`), named under this model."""
        return {f"hf.{name}": layout for name, layout in self.adapter.muon_layout().items()}
