"""One registry type behind the four extension points (tasks, architectures, geometry probes, training recipes): the
same rules register, list, look up, replace and remove an entry in each, and the same errors refuse one."""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any

import pytest

from windtunnel import models, tasks
from windtunnel.geometry import registry as geometry_registry
from windtunnel.geometry.registry import BUILTIN, Probe, get_probe, probes, register_probe, unregister_probe
from windtunnel.registry import Registry
from windtunnel.training.recipes import RECIPES, Recipe, get_recipe


def _factory(**params: Any) -> dict[str, Any]:
    return params


# registry, what it holds (None: factories), an entry it takes, one it refuses and that refusal's TypeError
EXTENSION_POINTS = {
    "task": (tasks.registry._REGISTRY, None, _factory, 3, "register: factory must be callable"),
    "arch": (models.registry._REGISTRY, None, _factory, 3, "register: factory must be callable"),
    "probe": (
        geometry_registry._PROBES,
        Probe,
        Probe("wt_entry", compute=lambda ctx: {}),
        {"name": "wt_entry"},
        "register_probe: expected a Probe (got dict)",
    ),
    "recipe": (
        RECIPES,
        Recipe,
        Recipe(name="wt_entry"),
        {"name": "wt_entry"},
        "register: expected a Recipe (got dict)",
    ),
}


@pytest.fixture(params=list(EXTENSION_POINTS))
def point(request, monkeypatch):
    """(kind, registry, holds, entry, refused, refusal), the registry's entries restored after the test."""
    kind = request.param
    reg, holds, entry, refused, refusal = EXTENSION_POINTS[kind]
    monkeypatch.setattr(reg, "_entries", dict(reg._entries))
    return kind, reg, holds, entry, refused, refusal


def test_the_four_extension_points_are_one_registry_type():
    for kind, (reg, holds, *_) in EXTENSION_POINTS.items():
        assert type(reg) is Registry and reg.kind == kind and reg.holds is holds


def test_registering_listing_and_removing_follow_one_set_of_rules(point):
    kind, reg, _, entry, _, _ = point
    before = reg.names()
    assert "wt_entry" not in reg and reg.peek("wt_entry") is None
    reg.register("wt_entry", entry)
    assert reg.names() == [*before, "wt_entry"] and "wt_entry" in reg
    assert reg.get("wt_entry") is entry and reg.peek("wt_entry") is entry and reg.imported()["wt_entry"] is entry
    with pytest.raises(ValueError, match=rf"{kind} 'wt_entry' already exists") as err:
        reg.register("wt_entry", entry)
    assert "overwrite=True" in str(err.value)  # the argument that replaces it
    reg.register(before[0], entry, overwrite=True)  # a replaced entry keeps its place
    assert reg.names() == [*before, "wt_entry"] and reg.get(before[0]) is entry
    reg.unregister("wt_entry")
    reg.unregister("wt_entry")  # absent: no error
    assert "wt_entry" not in reg and reg.names() == before


def test_an_unknown_name_names_the_kind_the_closest_name_and_every_name(point):
    kind, reg, _, entry, _, _ = point
    reg.register("wt_entry", entry)
    with pytest.raises(ValueError) as err:
        reg.get("wt_entyr")
    message = str(err.value)
    assert message.startswith(f"{kind}: unknown {kind} 'wt_entyr' (did you mean 'wt_entry'?); choose one of ")
    assert message.endswith(", ".join(reg.names()))
    with pytest.raises(ValueError, match=rf"^{kind}: unknown {kind} 'zzzzzzzz'; choose one of "):
        reg.get("zzzzzzzz")


def test_an_entry_of_the_wrong_kind_or_name_is_refused(point):
    kind, reg, _, entry, refused, refusal = point
    before = reg.names()
    with pytest.raises(TypeError, match=f"^{re.escape(refusal)}$"):
        reg.register("wt_entry", refused)
    with pytest.raises(ValueError, match=rf"'' is not a {kind} name"):
        reg.register("", entry)
    assert reg.names() == before


def test_a_value_registry_holds_its_objects_and_a_factory_registry_its_factories():
    values = Registry("thing", holds=Recipe)
    with pytest.raises(TypeError, match=r"^register: expected a Recipe \(got function\)$"):
        values.register("f", _factory)  # a callable is no Recipe
    factories: Registry[Any] = Registry("thing")
    with pytest.raises(TypeError, match="^register: factory must be callable$"):
        factories.register("r", Recipe(name="r"))
    reserved = Registry("thing", holds=Recipe, reserved={"step"}, name_rule="a key taken", caller="add_thing")
    with pytest.raises(ValueError, match=r"^add_thing: 'step' ") as err:
        reserved.register("step", Recipe(name="step"))
    assert "thing name" in str(err.value) and "(a key taken)" in str(err.value)  # the kind and its name_rule


def test_probes_through_their_own_functions(monkeypatch):
    monkeypatch.setattr(geometry_registry._PROBES, "_entries", dict(geometry_registry._PROBES._entries))
    probe = Probe("wt_norms", compute=lambda ctx: {})
    assert register_probe(probe) is probe and get_probe("wt_norms") is probe and probes()[-1] is probe
    with pytest.raises(ValueError, match=r"^register_probe: ") as err:
        register_probe(Probe("wt_norms", compute=lambda ctx: {}))
    assert "'wt_norms' already exists" in str(err.value) and "overwrite=True" in str(err.value)
    with pytest.raises(ValueError, match=r"^register_probe: 'figures' ") as err:
        register_probe(Probe("figures", compute=lambda ctx: {}))
    assert "not a probe name" in str(err.value)
    with pytest.raises(TypeError, match=r"^register_probe: expected a Probe \(got str\)$"):
        register_probe("wt_norms")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^probe: .*'kyes'") as err:
        get_probe("kyes")
    assert "'keys'" in str(err.value)  # the suggestion
    assert all(p.name in str(err.value) for p in probes())  # the names it may be
    unregister_probe("wt_norms")
    assert "wt_norms" not in [p.name for p in probes()]


def test_a_built_in_probe_is_imported_when_it_is_looked_up():
    code = (
        "import sys\n"
        "from windtunnel.geometry import registry as r\n"
        f"mods = {list(BUILTIN)!r}\n"
        "print([m for m in mods if m in sys.modules])\n"
        "r.get_probe('lens')\n"
        "print([m for m in mods if m in sys.modules])\n"
        "print([p.name for p in r.probes()] == r._PROBES.names())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == ["[]", "['windtunnel.geometry.builtin.lens']", "True"]


def test_recipes_through_get_recipe(monkeypatch):
    monkeypatch.setattr(RECIPES, "_entries", dict(RECIPES._entries))
    mine = Recipe(name="wt_mine", overrides={"train.schedule": "wsd"})
    RECIPES.register("wt_mine", mine)
    assert get_recipe("wt_mine") is mine and RECIPES.values()[-1] is mine
    with pytest.raises(ValueError) as err:
        get_recipe("wt_mien")
    message = str(err.value)
    assert message.startswith("recipe: 'wt_mien' ") and "'wt_mine'" in message  # the bad name, the suggestion
    assert f"({', '.join(RECIPES.names())})" in message and "YAML/JSON file" in message  # what it may be
    RECIPES.unregister("wt_mine")
    with pytest.raises(ValueError, match=r"\(baseline, wsd, muon, soft, soft-muon, "):
        get_recipe("wt_mine")
