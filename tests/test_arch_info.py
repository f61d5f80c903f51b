"""Architecture metadata on the class, read through `models.info`: the built-ins' values (what the hand-kept lists
held), a user's own class read back and sorted into the report by its row, defaults for an unknown name, and the
lazy registry: importing windtunnel.models imports no architecture."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest
from pydantic import Field

from report_runs import record
from windtunnel import models
from windtunnel.models import ArchInfo, ModelSize, ResidualModel, SequenceModel
from windtunnel.models.baselines import BASELINES
from windtunnel.models.presets import archs
from windtunnel.registry import Registry
from windtunnel.report import table_cells, tables
from windtunnel.report.figures import USER_COLORS, arch_color
from windtunnel.suites.paper import ARCHS

# What the hand-kept lists held before the metadata moved onto the classes.
ROWS = ["transformer", "mamba", "lstm", "mlp", "mlp-pointwise", "oracle", "uniform"]
COLORS = {"transformer": "C0", "mamba": "C1", "lstm": "C2", "mlp": "C3", "mlp-pointwise": "C4", "uniform": "C7"}
COSTS = {"transformer": 1.0, "mamba": 3.4, "lstm": 0.55, "mlp": 0.6, "mlp-pointwise": 0.55}
ARCH_MODULES = [f"windtunnel.models.{m}" for m in ("transformer", "mamba", "lstm", "mlp", "baselines", "scans")]


def test_the_built_ins_declare_what_the_lists_held():
    assert models.built_ins() == ROWS
    assert models.names()[:7] == ["oracle", "uniform", "lstm", "mamba", "mlp", "mlp-pointwise", "transformer"]
    assert ARCHS == tuple(ROWS[:5]) and archs() == ROWS[:5] and BASELINES == ("oracle", "uniform")
    assert models.built_ins(baseline=True) == ["oracle", "uniform"]
    infos = {a: models.info(a) for a in ROWS}
    assert sorted(ROWS, key=table_cells.arch_row) == ROWS
    assert {a: i.color for a, i in infos.items()} == {**COLORS, "oracle": "k"}
    assert {a: arch_color(a) for a in ROWS} == {**COLORS, "oracle": "k"}
    assert {a: i.cost for a, i in infos.items() if not i.baseline} == COSTS
    assert {a for a, i in infos.items() if i.context_blind} == {"mlp-pointwise", "oracle", "uniform"}
    assert {a for a, i in infos.items() if i.baseline} == {"oracle", "uniform"}
    follows = {a: i.follows for a, i in infos.items() if i.follows}
    assert follows == {"mlp": "transformer", "mlp-pointwise": "transformer"}


class Ranked(ResidualModel):
    """A user's architecture that declares every piece of metadata."""

    class Size(ModelSize):
        d_model: int = Field(default=8, ge=1)

    row, color, cost = 15, "#123456", 2.5
    follows = "transformer"
    context_blind = True


def test_a_users_class_is_read_back_and_sorted_into_the_report_by_its_row():
    models.register("ranked-test", Ranked)
    try:
        got = models.info("ranked-test")
        assert got == ArchInfo("ranked-test", 15, "transformer", True, False, 2.5, "#123456")
        assert arch_color("ranked-test") == "#123456"
        names = ["uniform", "zz-gone", "mamba", "ranked-test", "aa-gone", "transformer"]
        _, rows, _ = tables.primitives_table([record("bijection", a, 0, 0.5) for a in names])
        assert [r[0] for r in rows] == ["transformer", "ranked-test", "mamba", "uniform", "aa-gone", "zz-gone"]
    finally:
        models.registry.unregister("ranked-test")


def test_an_unknown_name_gets_the_defaults_and_imports_nothing():
    defaults = ArchInfo("gone", 100, None, False, False, 1.0, None)
    assert models.info("gone") == defaults
    assert models.info("no_such_pkg.models:GRU") == dataclasses.replace(defaults, name="no_such_pkg.models:GRU")
    assert "no_such_pkg" not in sys.modules
    assert table_cells.arch_row("gone") > max(models.info(a).row for a in ROWS)  # after the built-ins, as before
    assert arch_color("gone") in USER_COLORS
    for key in ("row", "follows", "context_blind", "baseline", "cost", "color", "depth_factors"):  # the base class's
        assert getattr(defaults, key) == getattr(SequenceModel, key)


BAD = [("row", "first"), ("row", True), ("cost", 0), ("color", 3), ("baseline", 1)]
BAD += [("depth_factors", 1.5), ("depth_factors", ()), ("depth_factors", (1.5, 0)), ("depth_factors", (True,))]


@pytest.mark.parametrize(("key", "value"), BAD)
def test_metadata_of_the_wrong_type_is_a_value_error_naming_it(key, value):
    bad = type("Bad", (Ranked,), {key: value})
    models.register("bad-test", bad)
    try:
        with pytest.raises(ValueError, match=rf"bad-test\.{key}: must be"):
            models.info("bad-test")
    finally:
        models.registry.unregister("bad-test")


def test_importing_models_imports_no_architecture():
    code = (
        "import sys, windtunnel.models as m\n"
        f"mods = {ARCH_MODULES!r}\n"
        "m.names(); m.check('mamba')\n"
        "print([k for k in mods if k in sys.modules])\n"
        "m.info('lstm')\n"
        "print([k for k in mods if k in sys.modules])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == ["[]", "['windtunnel.models.lstm']"]


def test_a_lazy_entry_is_listed_without_importing_and_imported_when_looked_up():
    reg = Registry("thing")
    reg.register_lazy("fmt", "windtunnel.text:did_you_mean")
    assert "fmt" in reg and reg.names() == ["fmt"] and reg.imported() == {}
    from windtunnel.text import did_you_mean

    assert reg.get("fmt") is did_you_mean and reg.peek("fmt") is did_you_mean
    with pytest.raises(ValueError, match="already exists"):
        reg.register_lazy("fmt", "windtunnel.text:did_you_mean")
