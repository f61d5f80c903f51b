"""One notion of "baseline": the `baseline` an architecture's class declares, asked in one way everywhere,
`models.is_baseline` (a name, a class or a built model). A user's own baseline, registered from Python, is then a
baseline at every stage: not trained, not probed, no size, evaluated like any run."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.distributions import Distribution

from windtunnel import models, tasks
from windtunnel.config import build_config
from windtunnel.executors.driver import config_cost
from windtunnel.models import baselines
from windtunnel.models.baselines import BASELINES, BaselineSize
from windtunnel.reproduce import suite_jobs
from windtunnel.resolve import resolve_config
from windtunnel.suites import SuiteRun
from windtunnel.suites.paper import ARCHS, seeds_for
from windtunnel.tasks.base import Batch
from windtunnel.training.train import start_line, train

SRC = Path(__file__).resolve().parents[1] / "src" / "windtunnel"


class Posterior(nn.Module):
    """A user's own baseline, not derived from the built-ins: it returns the batch's exact posterior."""

    Size = BaselineSize
    baseline = context_blind = True

    def __init__(self, spec, size=None, task=None, **fields):
        super().__init__()
        self.spec, self.task, self.size = spec, task, self.Size.of(size, fields)

    def predict(self, batch: Batch) -> Distribution:
        return batch.posterior


@pytest.fixture
def user_baseline():
    models.register("user-posterior", Posterior)
    try:
        yield "user-posterior"
    finally:
        models.registry.unregister("user-posterior")


def test_one_function_answers_for_names_classes_and_models(user_baseline):
    spec = tasks.make("bijection").spec
    for arch in (*BASELINES, user_baseline):
        assert models.is_baseline(arch) and models.info(arch).baseline
        factory = models.resolve(arch)
        assert models.is_baseline(factory) and models.is_baseline(factory(spec))
    for arch in ARCHS:
        assert not models.is_baseline(arch) and not models.is_baseline(models.resolve(arch))
    assert not models.is_baseline(models.make("transformer", spec, n_layers=1, d_model=8, n_heads=1))
    assert not models.is_baseline("no-such-arch")  # an unknown name: SequenceModel's default, like models.info
    assert baselines.is_baseline is models.is_baseline  # the old public name is the same function


def test_a_baseline_of_the_wrong_type_is_an_error_naming_it():
    class Vague(Posterior):
        baseline = "yes"

    models.register("vague-test", Vague)
    try:
        with pytest.raises(ValueError, match=r"^vague-test\.baseline: must be bool \(got 'yes'\)$"):
            models.is_baseline("vague-test")
        with pytest.raises(ValueError, match=r"^Vague\.baseline: must be bool"):
            models.is_baseline(Vague)
    finally:
        models.registry.unregister("vague-test")


def _other_ways(tree: ast.AST) -> list[int]:
    """Lines that ask "is it a baseline?" other than through `models.is_baseline`: any use or import of `BASELINES`
    (the built-in names), `models.baselines.is_baseline` and `info(arch).baseline` read directly."""
    lines = []
    for n in ast.walk(tree):
        name = n.id if isinstance(n, ast.Name) else n.attr if isinstance(n, ast.Attribute) else None
        owner = ast.unparse(n.value) if isinstance(n, ast.Attribute) else ""
        read = isinstance(n, ast.Attribute) and name == "baseline"  # info(arch).baseline
        old = name == "is_baseline" and owner.endswith("baselines")  # models.baselines.is_baseline
        if name == "BASELINES" or read or old:
            lines.append(n.lineno)
        elif isinstance(n, ast.ImportFrom) and (n.module or "").endswith("models.baselines"):
            lines += [n.lineno for a in n.names if a.name in ("BASELINES", "is_baseline")]
    return lines


def test_no_module_outside_models_asks_the_question_another_way():
    """Outside models/, no module uses `BASELINES` (the built-in names: a user's own baseline is not in it),
    `models.baselines.is_baseline` or `info(arch).baseline`: each asks `models.is_baseline`."""
    found = {}
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC)
        if rel.parts[0] != "models" and (lines := _other_ways(ast.parse(path.read_text()))):
            found[str(rel)] = sorted(set(lines))
    assert not found, f"ask models.is_baseline(arch) instead: {found}"


def test_the_scan_finds_what_it_forbids():
    for code in (
        "from windtunnel.models.baselines import BASELINES",
        "x in BASELINES",
        "import windtunnel.models.baselines as b\nb.BASELINES",
        "from windtunnel.models.baselines import is_baseline",
        "baselines.is_baseline(model)",
        "models.info(arch).baseline",
    ):
        assert _other_ways(ast.parse(code)), code
    assert not _other_ways(ast.parse("from windtunnel import models\nmodels.is_baseline(arch)"))


def test_a_users_baseline_is_treated_as_one_at_every_stage(user_baseline, tmp_path):
    arch = user_baseline
    with pytest.raises(ValueError, match=rf"^model\.size: .*'{arch}' baseline") as err:
        resolve_config({"model": {"arch": arch, "size": {"n_layers": 2}}})
    assert "no size parameters" in str(err.value)
    cfg = {"model": {"arch": arch}, "train": {"steps": 100}}
    assert config_cost(cfg) == 0.0  # the driver: nothing to train
    assert [j.probe for j in suite_jobs([SuiteRun("u", cfg)], tmp_path, probe=True)] == [False]  # not probed
    assert seeds_for(arch, "quick", seeds=5) == 1  # one seed, like the built-in baselines
    config = build_config(overrides={"model.arch": arch, "eval.n": 64})
    assert config.train.steps > 0  # it asks for training steps, and gets none
    resolved = resolve_config(config)
    assert resolved.model.size == {} and resolved.model.preset is None
    spec = tasks.make(resolved.task.name, **resolved.task.params).spec
    assert "baseline, not trained" in start_line(resolved, models.make(arch, spec), torch.device("cpu"))
    result = train(config, tmp_path / "run", progress=False)  # evaluated like any run
    assert result["default"]["metrics"]["entropy_mae_bits"]["mean"] == 0.0
    assert not (tmp_path / "run" / "checkpoints").exists() and (tmp_path / "run" / "eval.json").exists()
