"""report/build.py stays a sequence of sections: `build_report` short, one small function per section of the report,
each called from it, and the report's long prose in report/prose.py rather than inline."""

from __future__ import annotations

import ast
import inspect
from string import Template

from windtunnel.report import build, prose

# The sections of report.md, in the order build_report writes them.
SECTIONS = [
    "_verdicts_section",
    "_glance_section",
    "_table1_section",
    "_table1_notes",
    "_reference_levels",
    "_tunnels_section",
    "_figures_section",
    "_length_generalisation_section",
    "_capacity_sections",
    "_filters_section",
    "_controls_section",
    "_time_to_bayes_section",
    "_geometry_section",
    "_geometry_across_seeds_section",
    "_memorisation_section",
    "_what_was_run_section",
    "_deviations_section",
]


def _functions() -> dict[str, ast.FunctionDef]:
    tree = ast.parse(inspect.getsource(build))
    return {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}


def _length(node: ast.FunctionDef) -> int:
    assert node.end_lineno is not None
    return node.end_lineno - node.lineno + 1


def test_build_report_is_a_short_sequence_of_sections() -> None:
    functions = _functions()
    body = functions["build_report"]
    assert _length(body) < 60, f"build_report is {_length(body)} lines: move what grew into a section function"
    called = [node.func.id for node in ast.walk(body) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)]
    for name in SECTIONS:
        assert name in functions, f"section function {name} is missing from report/build.py"
        assert name in called, f"build_report does not call {name}"
    order = [name for name in called if name in SECTIONS]
    assert order == SECTIONS, "build_report calls the sections out of the report's order"


def test_section_functions_are_small() -> None:
    functions = _functions()
    for name in SECTIONS:
        assert _length(functions[name]) <= 40, f"{name} is {_length(functions[name])} lines"


def test_no_long_prose_inline() -> None:
    """No string literal in build.py but a docstring (adjacent literals joined) is a paragraph: prose goes in
    report/prose.py."""
    tree = ast.parse(inspect.getsource(build))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    long = [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
        and len(node.value) > 200
    ]
    assert not long, long


def test_prose_templates_fill() -> None:
    """Every template in report/prose.py names only the fields its section fills."""
    fields = {
        "TABLE1": {"rule"},
        "MARKED_RUNS_LEAD": {"mark"},
        "CAPACITY_TITLE": {"task", "metric", "what"},
        "CAPACITY": {"metric", "what", "param"},
        "BEYOND_RANGE": {"mark"},
        "FOREST_CAPTION": {"task"},
        "APPROXIMATIONS_CAPTION": {"task"},
    }
    templates = {k: v for k, v in vars(prose).items() if isinstance(v, Template)}
    assert set(templates) == set(fields)
    for name, template in templates.items():
        assert template.substitute(dict.fromkeys(fields[name], "x"))
