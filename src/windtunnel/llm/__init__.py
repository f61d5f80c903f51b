"""Local causal LMs (Hugging Face) on prompts whose posterior is known exactly (`windtunnel.llm.prompts`).

`windtunnel.llm.geometry`: the paper's geometric signatures (value PCA, attention entropy, key orthogonality) of a
`from_hf`-wrapped model, each beside a random-init model of the same config; `windtunnel.llm.study.llm_geometry`
(`windtunnel llm-geometry`): all of it on a model directory on disk, written to a folder (docs/llm.md). Importing
this package imports none of them.
"""
