"""The shape of the code (issue 29): no module of the service over 300 lines — one that grows past it holds more
than one idea: split it — and no import circle between its modules."""

from __future__ import annotations

from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("orchestrator", "frameworks", "databases", "plugins")
LIMIT = 300


def sizes() -> dict[str, int]:
    return {str(path.relative_to(ROOT)): len(path.read_text(encoding="utf-8").splitlines())
            for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))}


def test_no_module_is_over_the_limit() -> None:
    over = {name: lines for name, lines in sizes().items() if lines > LIMIT}
    assert over == {}, f"over {LIMIT} lines: split them"
    assert len(sizes()) > 100  # the packages were found


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
