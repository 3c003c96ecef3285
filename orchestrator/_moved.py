"""Import paths of 0.1 that moved in 0.2 keep working for one release, with a DeprecationWarning.

A finder on sys.meta_path answers the old names with the module at its new place (the same module object, so
`hookimpl` markers and classes are identical); it is installed when `orchestrator` is imported.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from types import ModuleType

REMOVED_IN = "0.3"
MOVED = {
    # What a third-party plugin could import in 0.1: all of it is now one import, orchestrator.plugin_api.
    "orchestrator.hookspecs": "orchestrator.plugin_api.hookspecs",
    "orchestrator.plugin_types": "orchestrator.plugin_api.types",
    "orchestrator.preview_config": "orchestrator.plugin_api.preview_config",
    "orchestrator.project_files": "orchestrator.plugin_api.project_files",
    "orchestrator.templating": "orchestrator.plugin_api.templating",
    "orchestrator.plugin_host": "orchestrator.rendering.plugin_host",
    # EVENT_HANDLER=orchestrator.engine:DeployEngine, the 0.1 default an operator may have written down.
    "orchestrator.engine": "orchestrator.flows.engine",
    "orchestrator.handler": "orchestrator.flows.handler",
}


class MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: object = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        new = MOVED[spec.name]
        warnings.warn(f"{spec.name} moved to {new}" + (" (plugin authors: import orchestrator.plugin_api)"
                      if new.startswith("orchestrator.plugin_api") else "")
                      + f"; the old path is removed in {REMOVED_IN}", DeprecationWarning, stacklevel=2)
        return importlib.import_module(new)

    def exec_module(self, module: ModuleType) -> None:
        return None  # already executed at its new place


def install() -> None:
    if not any(isinstance(finder, MovedModules) for finder in sys.meta_path):
        sys.meta_path.append(MovedModules())
