"""Every Python block of the README runs, in order, in one namespace (the docs cannot rot)."""

import re
from pathlib import Path

import torch

from windtunnel import models, tasks

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_python_blocks_run():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert len(blocks) >= 3
    namespace: dict = {}
    try:
        for block in blocks:
            exec(compile(block, str(README), "exec"), namespace)  # noqa: S102 - our own documentation
        assert "coin" in tasks.names() and "running-mean" in models.names()
        # the user's own tunnel earns the marks the README claims: the LSTM ✓ (it infers), the 50/50 baseline ✗,
        # and nothing is ⚠ (the answer is not in the input)
        coin = {arch: namespace["results"]["table1"][arch]["coin"] for arch in ("lstm", "uniform")}
        assert coin["lstm"]["verdict"]["mark"] == "✓" and coin["lstm"]["mean"] < 0.005
        assert coin["uniform"]["verdict"]["mark"] == "✗" and 0.15 < coin["uniform"]["mean"] < 0.22
        b = tasks.make("coin").sample(4096, seed=1)  # at the last flip: Laplace's rule on the 15 flips shown before it
        heads = (b.inputs == 1).sum(1)
        assert torch.allclose(b.posterior.probs[:, -1, 1], (heads + 1) / 17) and b.inputs[:, 0].eq(2).all()
        assert tuple(namespace["pred"].batch_shape) == (8, tasks.make("regression").spec.seq_len)
        # the hook example: a cache without autograd, and attention mass that means something (a share of each row)
        assert not namespace["parts"].requires_grad and not namespace["at_keys"].requires_grad
        at_keys = namespace["at_keys"]
        assert at_keys.shape[1] == namespace["model"].n_heads and bool(((at_keys >= 0) & (at_keys <= 1)).all())
        assert 0.3 < float(at_keys.mean()) < 0.6  # the README's "about 0.435" of uniform attention over the prefix
    finally:  # the examples register a task and a model; leave the registries as they were
        tasks.registry.unregister("coin")
        models.registry.unregister("running-mean")
