"""Hugging Face models in windtunnel: `from_hf(model)` wraps a causal LM you already have (GPT-2, GPT-NeoX/Pythia,
Llama, Phi) with windtunnel's hook points; the architectures `hf-gpt2`, `hf-gpt-neox`, `hf-llama` and `hf-phi` train
on every tunnel (docs/models.md, "Hugging Face architectures"). Needs `pip install 'windtunnel[hf]'`.

    from transformers import AutoModelForCausalLM
    from windtunnel.hf import from_hf

    lm = from_hf(AutoModelForCausalLM.from_pretrained("path/on/disk"))    # nothing is downloaded by windtunnel
    logits, cache = lm.run_with_cache(ids, names_filter=lambda n: n.endswith("attn.v"))
"""

from windtunnel.models.hf import Adapter, HFArchitecture, HFCausalLM, HFSize, Slice, families, from_hf

__all__ = ["Adapter", "HFArchitecture", "HFCausalLM", "HFSize", "Slice", "families", "from_hf"]
