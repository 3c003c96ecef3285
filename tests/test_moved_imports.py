"""0.1's import paths keep working for one release, with a DeprecationWarning that names the new place."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from orchestrator._moved import MOVED


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_path_is_the_new_module_and_warns(old: str) -> None:
    code = (
        "import importlib, warnings\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        f"    old = importlib.import_module({old!r})\n"
        f"new = importlib.import_module({MOVED[old]!r})\n"
        "assert old is new, (old, new)\n"
        "print('|'.join(str(w.message) for w in caught if w.category is DeprecationWarning))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert f"{old} moved to {MOVED[old]}" in result.stdout


def test_a_plugin_written_for_0_1_still_loads(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    plugin = tmp_path / "old_plugin.py"
    plugin.write_text(
        "from orchestrator.hookspecs import hookimpl\n"
        "from orchestrator.plugin_types import FrameworkSpec\n\n"
        "@hookimpl\n"
        "def po_frameworks():\n"
        "    return [FrameworkSpec(name='deno', default_port=8000, default_entrypoint='deno run main.ts')]\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    from orchestrator.rendering.plugin_host import build_plugin_host

    with pytest.warns(DeprecationWarning, match="orchestrator.hookspecs moved"):
        module = importlib.import_module("old_plugin")
    host = build_plugin_host(load_entry_points=False, extra_plugins=[("old", module)])
    assert "deno" in host.provided.frameworks


def test_the_0_1_event_handler_setting_still_builds_the_engine(make_settings) -> None:  # noqa: ANN001
    from orchestrator.flows.engine import DeployEngine
    from orchestrator.flows.handler import load_handler
    from orchestrator.observability.metrics import Metrics
    from orchestrator.rendering.plugin_host import build_plugin_host

    settings = make_settings(event_handler="orchestrator.engine:DeployEngine")
    with pytest.warns(DeprecationWarning, match="orchestrator.engine moved to orchestrator.flows.engine"):
        handler = load_handler(settings, build_plugin_host(load_entry_points=False), Metrics())
    assert isinstance(handler, DeployEngine)


def test_the_0_1_rendering_names_are_still_importable() -> None:
    from orchestrator.rendering import make_context, render_deployment, write_rendered
    from orchestrator.rendering.compose_file import make_context as new

    assert make_context is new and callable(render_deployment) and callable(write_rendered)
