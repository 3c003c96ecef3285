"""The shape of the code (issue 29): no module of the service over ~300 lines — one that grows past it holds more
than one idea — and no import circle between its modules.

The modules still over the limit are listed with their size today and may not grow: split one, then lower or
remove its line (a test below fails while the list says more than is true)."""

from __future__ import annotations

from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("orchestrator", "frameworks", "databases", "plugins")
LIMIT = 300
# To split, largest first; each may shrink, none may grow.
OVER = {
    "orchestrator/runtime/swarm/stack.py": 303,
}


def sizes() -> dict[str, int]:
    return {str(path.relative_to(ROOT)): len(path.read_text(encoding="utf-8").splitlines())
            for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))}


def test_no_module_grows_past_its_limit() -> None:
    grown = {name: lines for name, lines in sizes().items() if lines > OVER.get(name, LIMIT)}
    assert grown == {}, f"over {LIMIT} lines (or past the size listed in OVER): split them"


def test_the_list_of_modules_over_the_limit_is_current() -> None:
    known = sizes()
    stale = {name: (allowed, known.get(name)) for name, allowed in OVER.items()
             if known.get(name) is None or known[name] <= LIMIT or known[name] < allowed}
    assert stale == {}, "lower (or remove) these lines of OVER to the module's size today"


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_circle(package: str) -> None:
    graph = grimp.build_graph(package, include_external_packages=False)
    circles = []
    for importer in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            if imported.startswith(f"{importer}.") or importer.startswith(f"{imported}."):
                continue  # a package and its own modules (an __init__ that names its parts)
            back = graph.find_shortest_chain(importer=imported, imported=importer)
            if back is not None and not any(step.startswith(f"{importer}.") for step in back):
                circles.append(" -> ".join((importer, *back)))
    assert circles == []
