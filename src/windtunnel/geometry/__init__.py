"""Geometric diagnostics of trained models: key frame, attention sharpening, value manifold, state clusters,
logit lens, ablations and frame-precision dynamics (see docs/geometry.md).

    >>> from windtunnel.geometry.run import probe_run
    >>> result = probe_run("runs/bijection-transformer")   # writes geometry.json + figures/
"""
