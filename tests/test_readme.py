"""Every Python block of the README runs, in order, in one namespace (the docs cannot rot)."""

import re
import shlex
from pathlib import Path

from typer.testing import CliRunner

from windtunnel import models, tasks
from windtunnel.cli import app

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


def _readme_command(prefix: str) -> list[str]:
    """The README's command line starting with `prefix` (its comment dropped), as arguments after `windtunnel`."""
    blocks = re.findall(r"```bash\n(.*?)```", README.read_text(), flags=re.S)
    lines = [line.split("  #")[0] for block in blocks for line in block.splitlines()]
    found = [line for line in lines if line.startswith(prefix)]
    assert len(found) == 1, f"the README has {len(found)} lines starting {prefix!r}"
    args = shlex.split(found[0])
    assert args[0] == "windtunnel"
    return args[1:]


def test_readme_train_then_eval_at_2_5x_the_length(tmp_path, monkeypatch):
    """The README's pair as written: train the HMM transformer (K = 20), then evaluate it at K = 50. Only the preset
    and budget shrink (`--preset smoke --steps 2` for `--preset quick`); the eval command is the README's."""
    train_args = _readme_command("windtunnel train --task hmm --arch transformer --preset quick --out runs/hmm-tf")
    eval_args = _readme_command("windtunnel eval runs/hmm-tf --set task.K=50")
    i = train_args.index("--preset")
    train_args[i : i + 2] = ["--preset", "smoke", "--steps", "2"]
    monkeypatch.chdir(tmp_path)  # runs/hmm-tf as the README writes it, under a temporary directory
    runner = CliRunner()
    trained = runner.invoke(app, [*train_args, "--no-progress"])
    assert trained.exit_code == 0, trained.output
    evaluated = runner.invoke(app, eval_args)
    assert evaluated.exit_code == 0, evaluated.output
    assert "K=50" in evaluated.output
