"""Hugging Face `transformers` models as windtunnel architectures, and `from_hf` for a causal LM you already have.

    hf-gpt2      GPT-2: learned positions, Conv1D c_attn, fused [q | k | v] by columns     (models/hf/gpt2.py)
    hf-gpt-neox  GPT-NeoX / Pythia: fused query_key_value laid out per head (H, 3, dh)     (models/hf/gpt_neox.py)
    hf-llama     Llama: separate q/k/v, grouped-query attention through n_kv_heads        (models/hf/llama.py)
    hf-phi       Phi: separate q/k/v, partial rotary, parallel attention and MLP           (models/hf/phi.py)

Each is registered (`models.names()`, `models.registry.HF`), built from its HF config with random weights (nothing
is downloaded), with the task's input embedding and head, and trains on every tunnel (`windtunnel train --arch
hf-llama`). Each family's `Adapter` says where its layers, norms and q/k/v live; the one forward pass
(`core.HFStack`) reads the weights through it, always with the causal mask, and puts the standard hook points on it
(docs/hooks.md). Needs the `hf` extra (`pip install 'windtunnel[hf]'`); importing this package does not import
transformers.
"""

from windtunnel.models.hf.core import Adapter, HFArchitecture, HFSize, HFStack, Slice
from windtunnel.models.hf.wrap import HFCausalLM, HFModelSize, families, from_hf

__all__ = [
    "Adapter",
    "HFArchitecture",
    "HFCausalLM",
    "HFModelSize",
    "HFSize",
    "HFStack",
    "Slice",
    "families",
    "from_hf",
]
