"""The import graph of src/windtunnel, every import included (those inside functions too; `if TYPE_CHECKING:` blocks
are left out: they never run): no cycle between modules, and every import points down the documented layer order
(`LAYERS`, the README's "Imports point down" line)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "windtunnel"

# Lowest first. A module may import its own layer and the layers below it. Units are top-level modules and packages
# of windtunnel (a package counts as one unit: its own modules import each other freely, but not in a cycle).
LAYERS: list[set[str]] = [
    {"errors", "text", "tiers", "registry", "plugins", "seeds", "machine", "devices", "plotting", "malloc"},
    {"config"},  # the schema: a leaf over errors, plugins and tiers (no task, no model, no torch)
    {"store"},  # run directories on disk: file names, typed records, manifest, locks (no torch, no marks, no resolve)
    {"tasks"},
    {"models"},
    {"resolve", "budget"},
    {"runs"},  # a run's model and task built from its config, its checkpoints, opening it to train or resume
    {"evaluation"},  # metrics, marks and the evaluation against the exact posterior
    {"progress"},
    {"training"},  # the loop, optimisers, recipes, curricula, trackers
    {"geometry", "suites", "report"},
    {"executors"},
    {"reproduce", "sweep", "time_to_bayes", "hf", "llm"},
    {"cli"},
]


def _unit(module: str) -> str:
    return module.split(".")[1] if "." in module else module


def _modules() -> dict[str, Path]:
    out = {}
    for path in SRC.rglob("*.py"):
        parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _type_checking_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def _imports(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The windtunnel modules `module` imports (the longest existing module name of each)."""
    tree = ast.parse(path.read_text())
    skip = _type_checking_lines(tree)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([node.module] if node.module else [])])
            names = [f"{base}.{a.name}" for a in node.names]  # a submodule, or a name of `base` (found below)
        for name in names:
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name.startswith("windtunnel.") and name != module:
                found.add(name)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {m: _imports(m, p, modules) for m, p in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == node:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on.add(child)
                work.append((child, iter(sorted(graph.get(child, ())))))
            elif child in on:
                low[node] = min(low[node], index[child])
    return out


def _layer(unit: str) -> int:
    for i, layer in enumerate(LAYERS):
        if unit in layer:
            return i
    raise AssertionError(f"windtunnel.{unit} is in no layer of tests/test_layers.py: LAYERS (add it where it belongs)")


def test_every_unit_has_a_layer():
    for module in _modules():
        if module != "windtunnel":
            _layer(_unit(module))


def test_no_module_cycle():
    graph = _graph()
    assert _cycles(graph) == []


def test_no_cycle_between_units():
    units: dict[str, set[str]] = {}
    for module, targets in _graph().items():
        for t in targets:
            if _unit(module) != _unit(t) and module != "windtunnel":
                units.setdefault(_unit(module), set()).add(_unit(t))
    assert _cycles(units) == []


def test_imports_point_down_the_layers():
    upward: dict[tuple[str, str], list[str]] = {}
    for module, targets in _graph().items():
        if module == "windtunnel":
            continue  # the package's __init__ only re-exports
        for t in targets:
            a, b = _unit(module), _unit(t)
            if a != b and _layer(b) > _layer(a):
                upward.setdefault((a, b), []).append(f"{module} -> {t}")
    assert not upward, f"imports against the layer order: {upward}"


def test_the_checker_finds_a_cycle_and_an_upward_import():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
    assert _layer("cli") > _layer("training") > _layer("models") > _layer("tasks")


def test_readme_states_the_layer_order():
    """The README's "Imports point down" line is this order, top layer first."""
    readme = (SRC.parents[1] / "README.md").read_text()
    line = next(ln for ln in readme.splitlines() if ln.startswith("Imports point down"))
    order = line.split("`")[-2]
    stated = [set(group.split("/")) for group in order.split(" → ")]
    assert stated == LAYERS[::-1]


def test_the_config_schema_is_a_leaf_that_loads_no_torch():
    """`windtunnel.config` (the schema every command validates first) imports neither torch nor any model or task
    module; a check that needs the architectures (a baseline takes no size) lives in resolve_config."""
    import subprocess
    import sys

    code = (
        "import sys, windtunnel.config; "
        "bad = [m for m in sys.modules if m == 'torch' or m.startswith(('windtunnel.models', 'windtunnel.tasks'))]; "
        "print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"
    from windtunnel.resolve import resolve_config

    with pytest.raises(ValueError, match=r"^model\.size: .*'oracle' baseline.*no size parameters"):
        resolve_config({"model": {"arch": "oracle", "size": {"n_layers": 2}}})


def test_the_backward_edges_stay_gone():
    """The four imports once found against the flow: the schema reaching the models, storage reaching resolve,
    the executors reading their own done.json through the report, and the drivers taking names and constants from
    the report. What remains from a driver into the report is building output (and reproduce's read of a run's row and
    of a cell's pooled mark, which must be Table 1's own)."""
    modules = _modules()
    edges = {m: _imports(m, p, modules) for m, p in modules.items()}

    def reach(prefix: str, target: str) -> set[str]:
        return {f"{m} -> {t}" for m, ts in edges.items() if _unit(m) == prefix for t in ts if _unit(t) == target}

    assert not reach("config", "models") and not reach("store", "resolve") and not reach("executors", "report")
    drivers = reach("sweep", "report") | reach("time_to_bayes", "report") | reach("reproduce", "report")
    assert drivers == {
        "windtunnel.sweep -> windtunnel.report.sweep_table",  # write_table: the sweep's own table
        "windtunnel.time_to_bayes.results -> windtunnel.report.time_to_bayes",  # markdown, plot
        "windtunnel.reproduce -> windtunnel.report",  # build_report
        "windtunnel.reproduce -> windtunnel.report.collect",  # read_run: a run's row, for seed top-ups
        "windtunnel.reproduce -> windtunnel.report.table_cells",  # cell_value: a cell's pooled mark, for seed top-ups
    }


def test_the_store_loads_no_torch_no_marks_no_resolve():
    """Every module of `windtunnel.store` (run directories on disk) imports without torch, the models, the tasks,
    the marks or config resolution: storage never reaches up into what it stores."""
    import subprocess
    import sys

    store = sorted(m for m in _modules() if _unit(m) == "store")
    assert "windtunnel.store.manifest" in store and "windtunnel.store.records.run_dir" in store
    code = (
        f"import sys, importlib; [importlib.import_module(m) for m in {store!r}]; "
        "bad = [m for m in sys.modules if m == 'torch' or m.startswith(('windtunnel.models', 'windtunnel.tasks', "
        "'windtunnel.evaluation', 'windtunnel.resolve'))]; print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"


MAX_LINES = 600


def test_no_source_file_is_over_600_lines():
    """Files are cut along their seams before they outgrow one sitting's reading."""
    long = {str(p.relative_to(SRC)): n for p in SRC.rglob("*.py") if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"over {MAX_LINES} lines: {long}"
