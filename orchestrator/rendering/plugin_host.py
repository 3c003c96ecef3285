"""The one factory for the plugin manager, and the catalogue of what the loaded plugins provide."""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pluggy

from orchestrator.observability.metrics import Metrics
from orchestrator.plugin_api import hookspecs
from orchestrator.plugin_api.codehost import CodeHost, CodeHostSpec
from orchestrator.plugin_api.preview_config import ConfigError, KnownNames, PreviewConfig
from orchestrator.plugin_api.project_files import ProjectFiles
from orchestrator.plugin_api.runtime import Runtime, RuntimeSpec, unimplemented
from orchestrator.plugin_api.types import (
    AppService,
    DatabaseSpec,
    DatabaseWiring,
    Detection,
    FrameworkSpec,
    RenderContext,
    ServiceSpec,
    ServiceWiring,
)
from orchestrator.rendering.codehost_set import CodeHosts

ENTRY_POINT_GROUP = "preview_orchestrator"
DISTRIBUTION = "preview-orchestrator"
DEFAULT_FRAMEWORK = "nestjs"  # the spec: when nothing matches, nestjs is assumed
CODEHOST_PATH = re.compile(r"^[a-z][a-z0-9-]{0,30}$")  # a code host's webhook path: its name or an alias

DEFAULT_PLUGINS: tuple[str, ...] = (
    "frameworks.nestjs",
    "frameworks.go",
    "frameworks.laravel",
    "frameworks.rust",
    "frameworks.python",
    "databases.postgres",
    "databases.mysql",
    "databases.mongodb",
    "plugins.redis",
    "plugins.memcached",
    "plugins.rabbitmq",
    "plugins.mailpit",
    "plugins.minio",
    "orchestrator.runtime.compose",
    "orchestrator.runtime.swarm",
    "orchestrator.codehosts.github",
    "orchestrator.codehosts.gitea",
    "orchestrator.codehosts.gitlab",
)


class PluginError(Exception):
    """Plugins cannot be loaded together; the message names the plugins involved."""


@dataclass
class Provided:
    frameworks: dict[str, FrameworkSpec] = field(default_factory=dict)
    databases: dict[str, DatabaseSpec] = field(default_factory=dict)
    services: dict[str, ServiceSpec] = field(default_factory=dict)
    runtimes: dict[str, RuntimeSpec] = field(default_factory=dict)
    codehosts: dict[str, CodeHostSpec] = field(default_factory=dict)
    # name -> plugin names providing it, for the listing and for conflicts
    owners: dict[tuple[str, str], list[str]] = field(default_factory=dict)


class PluginHost:
    """A built plugin manager plus what it provides. Build it with `build_plugin_host`."""

    def __init__(self, manager: pluggy.PluginManager, builtin_names: frozenset[str]) -> None:
        self.manager = manager
        self.hook = manager.hook
        self.builtin_names = builtin_names
        self.provided = self._collect()

    def known_names(self, detected: str | None = None) -> KnownNames:
        return KnownNames(
            frameworks=frozenset(self.provided.frameworks),
            databases=frozenset(self.provided.databases),
            services=frozenset(self.provided.services),
            detected=detected,
        )

    def detect_framework(self, repo_dir: Path) -> Detection:
        answers = [Detection.model_validate(a) for a in
                   self.hook.po_detect_framework(repo_dir=repo_dir, project=ProjectFiles(repo_dir)) if a]
        answers = [a for a in answers if a.framework in self.provided.frameworks]
        if not answers:
            return Detection(framework=DEFAULT_FRAMEWORK, rank=1000, reason="nothing matched; the default")
        return min(answers, key=lambda a: a.rank)

    def migrations(self, framework: str) -> list[str]:
        """The glob patterns of the framework's migration files (po_migrations); none when it names none."""
        answer = self.hook.po_migrations(framework=framework)
        if answer is None:
            return []
        if not isinstance(answer, list) or not all(isinstance(p, str) and p and not p.startswith("/") for p in answer):
            raise PluginError(f"po_migrations for {framework!r} answered {answer!r:.80}, not relative path patterns")
        return answer

    # One typed method per rendering hook: the answer is validated here, once, and a missing one is the
    # ConfigError every caller would raise.

    def dockerfile(self, framework: str, config: PreviewConfig, context: RenderContext,
                   project: ProjectFiles) -> str | None:
        """The framework's default Dockerfile (None: it has none; the repository must bring one)."""
        text = self.hook.po_dockerfile(framework=framework, config=config, context=context, project=project)
        if text is not None and not isinstance(text, str):
            raise PluginError(f"po_dockerfile for {framework!r} answered {type(text).__name__}, not text")
        return text

    def app_service(self, framework: str, config: PreviewConfig, context: RenderContext,
                    project: ProjectFiles) -> AppService:
        answer = self.hook.po_app_service(framework=framework, config=config, context=context, project=project)
        if answer is None:
            raise ConfigError([f"framework {framework} has no app service; a plugin is missing"])
        return AppService.model_validate(answer)

    def database(self, name: str, context: RenderContext) -> DatabaseWiring:
        answer = self.hook.po_database(database=name, context=context)
        if answer is None:
            raise ConfigError([f"database {name} has no service; a plugin is missing"])
        return DatabaseWiring.model_validate(answer)

    def extra_service(self, name: str, context: RenderContext) -> ServiceWiring:
        answer = self.hook.po_extra_service(service=name, context=context)
        if answer is None:
            raise ConfigError([f"extra service {name} has no template; a plugin is missing"])
        return ServiceWiring.model_validate(answer)

    def runtime(self, name: str, settings: Any) -> Runtime:
        """The runtime called `name` (RUNTIME), built by the plugin that provides it."""
        if name not in self.provided.runtimes:
            available = ", ".join(sorted(self.provided.runtimes)) or "none"
            raise PluginError(f"RUNTIME {name!r} is not provided by any plugin (available: {available})")
        runtime = self.hook.po_runtime(name=name, settings=settings)
        if runtime is None or not isinstance(runtime, Runtime):
            raise PluginError(f"the plugin providing runtime {name!r} did not build one (a subclass of "
                              "orchestrator.plugin_api.Runtime)")
        if missing := unimplemented(runtime):
            raise PluginError(f"runtime {name!r} does not implement {', '.join(missing)} (docs/plugins.md)")
        return runtime

    def codehosts(self, settings: Any, metrics: Metrics) -> CodeHosts:
        """Every code host that is on, each built by the plugin that provides it; two webhook paths of one name
        (a name or an alias: `/webhook/{path}`) stop start-up naming both hosts."""
        hosts: list[CodeHost] = []
        paths: dict[str, str] = {}
        for name in self.provided.codehosts:
            host = self.hook.po_codehost(name=name, settings=settings, metrics=metrics)
            if host is None:
                continue  # off: its secret is not set
            if not isinstance(host, CodeHost) or host.name != name:
                raise PluginError(f"the plugin providing code host {name!r} did not build one")
            for path in (host.name, *host.aliases):
                if not CODEHOST_PATH.match(path):
                    raise PluginError(f"code host {name!r}: webhook path {path[:40]!r} is not a name")
                if path in paths:
                    raise PluginError(f"code hosts {paths[path]!r} and {name!r} both want /webhook/{path}")
                paths[path] = name
            hosts.append(host)
        signed: dict[str, str] = {}
        for host in hosts:  # one secret per code host: a delivery one host signed must not pass at another's path
            if (secret := host.webhook_secret()) is not None:
                if secret in signed:
                    raise PluginError(f"code hosts {signed[secret]!r} and {host.name!r} have the same webhook secret: "
                                      "each code host needs a secret of its own")
                signed[secret] = host.name
        return CodeHosts(hosts)

    def describe(self) -> list[dict[str, Any]]:
        """The debug listing: one entry per plugin."""
        dist_of = {id(plugin): dist for plugin, dist in self.manager.list_plugin_distinfo()}
        listing = []
        for name, plugin in sorted(self.manager.list_name_plugin(), key=lambda item: item[0]):
            if plugin is None:
                continue
            dist = dist_of.get(id(plugin))
            builtin = name in self.builtin_names
            hooks = sorted(
                caller.name
                for caller in self.manager.get_hookcallers(plugin) or []
                if caller.name.startswith("po_")
            )
            listing.append(
                {
                    "name": name,
                    "distribution": DISTRIBUTION if builtin else (dist.project_name if dist else None),
                    "version": _builtin_version() if builtin else (dist.version if dist else None),
                    "builtin": builtin,
                    "hooks": hooks,
                    "frameworks": self._owned("framework", name),
                    "databases": self._owned("database", name),
                    "services": self._owned("service", name),
                    "runtimes": self._owned("runtime", name),
                    "codehosts": self._owned("codehost", name),
                }
            )
        return listing

    def _owned(self, kind: str, plugin_name: str) -> list[str]:
        return sorted(n for (k, n), owners in self.provided.owners.items() if k == kind and plugin_name in owners)

    def _collect(self) -> Provided:
        """What each plugin provides, asked through pluggy's own implementations of the listing hooks (so a
        hook implemented under another name with `specname=` counts), in registration order."""
        provided = Provided()
        order = [name for name, plugin in self.manager.list_name_plugin() if plugin is not None]
        for kind, hook, model, target in (
            ("framework", "po_frameworks", FrameworkSpec, provided.frameworks),
            ("database", "po_databases", DatabaseSpec, provided.databases),
            ("service", "po_services", ServiceSpec, provided.services),
            ("runtime", "po_runtimes", RuntimeSpec, provided.runtimes),
            ("codehost", "po_codehosts", CodeHostSpec, provided.codehosts),
        ):
            implementations = sorted(getattr(self.hook, hook).get_hookimpls(),
                                     key=lambda impl: order.index(impl.plugin_name))
            for implementation in implementations:
                name = implementation.plugin_name
                for raw in implementation.function() or []:
                    spec = model.model_validate(raw)
                    owners = provided.owners.setdefault((kind, spec.name), [])
                    owners.append(name)
                    self._check_conflict(kind, spec.name, owners)
                    # A third-party answer overrides the built-in one (built-ins answer trylast).
                    if name not in self.builtin_names or spec.name not in target:
                        target[spec.name] = spec  # type: ignore[assignment]
        # A database listed in extra_services must be an error, not a second service: keep kinds apart.
        clash = set(provided.databases) & set(provided.services)
        if clash:
            raise PluginError(f"{', '.join(sorted(clash))} provided both as a database and as a service")
        return provided

    def _check_conflict(self, kind: str, name: str, owners: list[str]) -> None:
        """Two providers of a name are an error, unless exactly one is a built-in being overridden."""
        builtins = [owner for owner in owners if owner in self.builtin_names]
        if len(owners) > 2 or (len(owners) == 2 and len(builtins) != 1):
            raise PluginError(
                f"{kind} {name!r} is provided by both {owners[0]!r} and {owners[1]!r}; "
                "disable one with PREVIEW_ORCHESTRATOR_DISABLE_PLUGINS"
            )


def build_plugin_host(
    disabled: Iterable[str] = (),
    load_entry_points: bool = True,
    extra_plugins: Iterable[tuple[str, object]] = (),
) -> PluginHost:
    """Built-ins (DEFAULT_PLUGINS), then entry points of `preview_orchestrator`, then check_pending()."""
    manager = pluggy.PluginManager(hookspecs.PROJECT)
    manager.add_hookspecs(hookspecs)
    blocked = {name.strip() for name in disabled if name.strip()}
    for name in blocked:
        manager.set_blocked(name)
    builtin: set[str] = set()
    for module_name in DEFAULT_PLUGINS:
        if module_name in blocked:
            continue
        module: ModuleType = importlib.import_module(module_name)
        manager.register(module, name=module_name)
        builtin.add(module_name)
    if load_entry_points:
        try:
            manager.load_setuptools_entrypoints(ENTRY_POINT_GROUP)
        except Exception as exc:  # noqa: BLE001 - a broken third-party plugin must name itself
            raise PluginError(f"a {ENTRY_POINT_GROUP} entry point failed to load: {exc}") from exc
    for name, plugin in extra_plugins:
        manager.register(plugin, name=name)
    try:
        manager.check_pending()
    except pluggy.PluginValidationError as exc:
        raise PluginError(f"plugin {exc.plugin!r} implements an unknown hook: {exc}") from exc
    return PluginHost(manager, frozenset(builtin))


def _builtin_version() -> str:
    from orchestrator import __version__

    return __version__
