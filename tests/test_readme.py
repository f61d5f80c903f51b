"""Every Python block of the README runs, in order, in one namespace (the docs cannot rot)."""

import re
from pathlib import Path

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
        assert tuple(namespace["pred"].batch_shape) == (8, tasks.make("regression").spec.seq_len)
        # the hook example: a cache without autograd, and attention mass that means something (a share of each row)
        assert not namespace["parts"].requires_grad and not namespace["at_keys"].requires_grad
        at_keys = namespace["at_keys"]
        assert at_keys.shape[1] == namespace["model"].n_heads and bool(((at_keys >= 0) & (at_keys <= 1)).all())
        assert 0.3 < float(at_keys.mean()) < 0.6  # the README's "about 0.435" of uniform attention over the prefix
    finally:  # the examples register a task and a model; leave the registries as they were
        tasks.registry.unregister("coin")
        models.registry.unregister("running-mean")
