"""Evaluation against the exact posterior: metrics in bits (`metrics`, `metric_specs`), the verdict marks (`marks`,
`crossings`, `seed_pool`) and the evaluation of a model or run directory (`evaluate`)."""
