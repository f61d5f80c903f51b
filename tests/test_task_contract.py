"""The wind-tunnel contract is declared on `Task`: the toolkit calls every hook directly, never probing a tunnel for it
outside tasks/; a tunnel that only has the protocol's `name`, `spec` and `sample` is read through `tasks.as_task`."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest
import torch
from torch.distributions import Categorical

from windtunnel import budget, tasks
from windtunnel.evaluation import evaluate, marks
from windtunnel.evaluation.metric_specs import headline_metric
from windtunnel.models.base import SequenceModel
from windtunnel.tasks import Batch, Task, TaskSpec, TunnelAdapter, WindTunnel, as_task
from windtunnel.tasks import registry as task_registry
from windtunnel.tasks.base import OPTIONAL

SRC = Path(__file__).resolve().parents[1] / "src" / "windtunnel"


def _members(cls: type) -> set[str]:
    """The public attributes of `cls`: those it or a base defines, and those only annotated (`params`, `spec`)."""
    names = set(dir(cls))
    for base in cls.__mro__:
        names.update(inspect.get_annotations(base))
    return {n for n in names if not n.startswith("_")}


TASK_MEMBERS = _members(Task) | _members(WindTunnel) | set(OPTIONAL)
# A name a model carries too (`spec`) is a task's only where the object probed is visibly one.
SHARED = TASK_MEMBERS & _members(SequenceModel)
TASK_LIKE = re.compile(r"task|tunnel|built", re.IGNORECASE)


def _probes() -> list[str]:
    """Every getattr/hasattr outside tasks/ that asks an object for a member of the task contract by name."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if (SRC / "tasks") in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
                continue
            if node.func.id not in ("getattr", "hasattr") or len(node.args) < 2:
                continue
            key = node.args[1]
            if not (isinstance(key, ast.Constant) and key.value in TASK_MEMBERS):
                continue
            if key.value not in SHARED or TASK_LIKE.search(ast.unparse(node.args[0])):
                found.append(f"{path.relative_to(SRC.parent)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_contract_covers_the_optional_hooks():
    assert {"posterior_for", "approximations", "sample_bytes", "observation_slots", "mark_thresholds"} <= TASK_MEMBERS
    assert SHARED == {"spec"}


def test_no_task_member_is_probed_outside_tasks():
    assert _probes() == []


class Minimal:
    """A tunnel that only has the protocol's three members: no Task, no hooks, no parameters."""

    name = "wt_minimal"

    @property
    def spec(self) -> TaskSpec:
        return TaskSpec("wt_minimal", "tokens", "classes", seq_len=3, vocab_size=2, n_classes=2)

    def sample(self, batch_size, seed=None, generator=None, device=None):
        g = torch.Generator().manual_seed(0 if seed is None else int(seed))
        answers = torch.randint(0, 2, (batch_size, 3), generator=g)
        inputs = torch.zeros_like(answers)  # the answers are never in the inputs: every posterior is a fair coin
        post = Categorical(probs=torch.full((batch_size, 3, 2), 0.5))
        return Batch(inputs, torch.ones_like(inputs, dtype=torch.bool), answers, post)


class WithHooks(Minimal):
    """A protocol tunnel with some hooks of its own, which the adapter must give back."""

    mark_thresholds = {"exact_bits": 0.05}
    headline_metric = "accuracy"

    def posterior_for(self, inputs):
        return Categorical(probs=torch.full((*inputs.shape, 2), 0.5))

    def sample_bytes(self, batch_size):
        return 123 * batch_size


def test_a_protocol_tunnel_gets_the_defaults_through_the_adapter():
    tunnel = Minimal()
    assert isinstance(tunnel, WindTunnel) and not isinstance(tunnel, Task)
    task = as_task(tunnel)
    assert isinstance(task, TunnelAdapter) and task.tunnel is tunnel and as_task(task) is task
    assert (task.name, task.spec, repr(task)) == ("wt_minimal", tunnel.spec, repr(tunnel))
    batch = task.sample(4, seed=1)
    assert torch.equal(batch.targets, tunnel.sample(4, seed=1).targets)
    x = batch.inputs
    assert task.approximations(batch) == {} and task.controls(batch) == {} and task.auxiliary_targets(batch) == {}
    assert task.approximation_depths() == {} and task.approximation_positions() == {} and task.references() == []
    assert task.attention_evidence(x, batch.target_mask) == {}
    assert task.value_positions(x) is None and task.observation_slots(x) is None
    assert task.sample_bytes(4) is None and task.prior_predictive(batch) is None and task.transport_demand is None
    assert (task.headline_metric, task.default_loss, task.length_param, task.capacity) == (
        "entropy_mae_bits",
        "ce",
        None,
        None,
    )
    assert task.mark_thresholds == {} and task.auxiliary_targets_offered == {} and task.params.model_dump() == {}
    assert task.describe(batch, 0) == ["0", "0", "0"]
    assert [m for m in OPTIONAL if task.offers(m)] == ["name"]
    with pytest.raises(NotImplementedError, match="wt_minimal"):
        task.posterior_for(x)
    with pytest.raises(ValueError, match="not an optional member"):
        task.offers("bogus")


def test_a_protocol_tunnels_own_hooks_are_used():
    task = as_task(WithHooks())
    assert task.offers("posterior_for") and task.offers("sample_bytes") and not task.offers("approximations")
    assert task.sample_bytes(2) == 246 and task.posterior_for(torch.zeros(2, 3)).probs.shape == (2, 3, 2)
    assert marks.thresholds(WithHooks()).exact_bits == 0.05 and headline_metric(WithHooks()) == "accuracy"


def test_a_registered_protocol_tunnel_runs_through_evaluation_and_the_bounds(monkeypatch):
    monkeypatch.setattr(task_registry._REGISTRY, "_entries", dict(task_registry._REGISTRY._entries))
    tasks.register("wt_minimal", Minimal)
    task = tasks.make("wt_minimal")
    assert isinstance(task, TunnelAdapter)
    out = evaluate.score_predictor(task, lambda b: b.posterior, n=8, n_boot=10)
    assert out["task_params"] == {} and "approximations" not in out and out["verdict"]["level"] == "exact"
    assert evaluate.control_predictors(task) == {}
    assert budget.sampled_bytes(task, 4) == budget.batch_bytes(task.spec, 4)


BUILT_IN = {  # small settings of each built-in tunnel, and the optional members it gives itself
    ("bijection", ()): {"posterior_for", "attention_evidence", "value_positions"},
    ("hmm", (("K", 4),)): {
        "posterior_for",
        "approximations",
        "approximation_depths",
        "approximation_positions",
        "transport_demand",
        "observation_slots",
        "auxiliary_targets",
    },
    ("recall", (("N", 4),)): {"posterior_for", "references"},
    ("regression", (("n", 4),)): {"posterior_for", "sample_bytes"},
}
ALWAYS = {"name", "params", "controls", "describe"}


@pytest.mark.parametrize(("key", "own"), BUILT_IN.items(), ids=[k[0] for k in BUILT_IN])
def test_the_built_in_tunnels_offer_what_they_implement(key, own):
    name, params = key
    task = tasks.make(name, **dict(params))
    assert as_task(task) is task and not isinstance(task, TunnelAdapter)
    assert {m for m in OPTIONAL if task.offers(m)} == own | ALWAYS
    batch = task.sample(2, seed=0)
    x = batch.inputs
    assert (task.approximations(batch) != {}) == ("approximations" in own)
    assert (task.observation_slots(x) is not None) == ("observation_slots" in own)
    assert (task.value_positions(x) is not None) == ("value_positions" in own)
    assert (task.sample_bytes(2) is not None) == ("sample_bytes" in own)
    assert (task.transport_demand is not None) == ("transport_demand" in own)
    assert task.prior_predictive(batch) is None and marks.thresholds(task) == marks.Thresholds()
    if "approximation_depths" in own:  # the HMM's windows stop below its transport demand
        assert task.transport_demand is not None
        assert max(task.approximation_depths().values()) == task.transport_demand.window - 1
    else:
        assert task.approximation_depths() == {} and task.approximation_positions() == {}
