"""Every hook spec has a test of its own, named `test_hook_<spec>` (as datasette does), that calls it through a
plugin host (tests/test_hooks.py): a new hook cannot land untested. The specs are read from the hookspecs module's
markers, not counted by hand, and the tests from the test modules' function definitions, not from any mention."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from orchestrator.plugin_api import hookspecs


def hook_specs() -> list[str]:
    marker = f"{hookspecs.PROJECT}_spec"
    return sorted(name for name, function in inspect.getmembers(hookspecs, inspect.isfunction)
                  if hasattr(function, marker))


def defined_functions() -> set[str]:
    names: set[str] = set()
    for path in Path(__file__).parent.glob("test_*.py"):
        tree = ast.parse(path.read_text())
        names |= {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)}
    return names


def test_every_hookspec_has_a_test_of_its_own() -> None:
    specs = hook_specs()
    assert "po_frameworks" in specs and "po_runtime" in specs  # the markers are read, not nothing
    untested = [name for name in specs if f"test_hook_{name}" not in defined_functions()]
    assert untested == [], f"hook specs without a test_hook_<spec>: {untested}"
