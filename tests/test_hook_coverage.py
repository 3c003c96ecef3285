"""Every hook spec has a test that names it (as datasette does): a new hook cannot land untested."""

from __future__ import annotations

import inspect
from pathlib import Path

from orchestrator.plugin_api import hookspecs


def test_every_hookspec_is_exercised_by_a_test() -> None:
    specs = [name for name, _ in inspect.getmembers(hookspecs, inspect.isfunction) if name.startswith("po_")]
    assert len(specs) == 10
    here = Path(__file__)
    sources = "\n".join(p.read_text() for p in here.parent.glob("test_*.py") if p != here)
    untested = [name for name in specs if name not in sources]
    assert untested == [], f"hook specs without a test: {untested}"
