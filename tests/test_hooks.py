"""Each hook called the way the host calls it (keyword arguments, None for names a plugin does not own), in a test
named `test_hook_<spec>`: test_hook_coverage.py holds every hook spec to one."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.observability.metrics import Metrics
from orchestrator.plugin_api import hookimpl
from orchestrator.plugin_api.codehost import CodeHost
from orchestrator.plugin_api.preview_config import PreviewConfig
from orchestrator.plugin_api.project_files import ProjectFiles
from orchestrator.plugin_api.runtime import Runtime
from orchestrator.plugin_api.types import DatabaseWiring, ServiceWiring
from orchestrator.rendering.compose_file import make_context
from orchestrator.rendering.plugin_host import PluginHost
from tests.conftest import OwnEnv, SettingsFactory
from tests.support.repos import config_for

CONTEXT = make_context("acme", "api", 5, 8005, 9005, b"k")


def test_hook_po_frameworks(host: PluginHost) -> None:
    frameworks = [spec.name for answer in host.hook.po_frameworks() for spec in answer]
    assert sorted(frameworks) == ["go", "laravel", "nestjs", "python", "rust"]


def test_hook_po_databases(host: PluginHost) -> None:
    databases = [spec.name for answer in host.hook.po_databases() for spec in answer]
    assert sorted(databases) == ["mongodb", "mysql", "postgres"]


def test_hook_po_services(host: PluginHost) -> None:
    services = [spec.name for answer in host.hook.po_services() for spec in answer]
    assert sorted(services) == ["mailpit", "memcached", "minio", "rabbitmq", "redis"]


def test_hook_po_runtimes(host: PluginHost) -> None:
    runtimes = [spec.name for answer in host.hook.po_runtimes() for spec in answer]
    assert sorted(runtimes) == ["compose", "swarm"]


def test_hook_po_runtime(host: PluginHost, make_settings: SettingsFactory) -> None:
    settings = make_settings()
    runtime = host.hook.po_runtime(name="compose", settings=settings)
    assert isinstance(runtime, Runtime) and runtime.name == "compose"
    assert host.hook.po_runtime(name="kubernetes", settings=settings) is None


def test_hook_po_codehosts(host: PluginHost) -> None:
    codehosts = [spec.name for answer in host.hook.po_codehosts() for spec in answer]
    assert sorted(codehosts) == ["gitea", "github", "gitlab"]


def test_hook_po_codehost(host: PluginHost, make_settings: SettingsFactory, own_env: OwnEnv) -> None:
    metrics = Metrics()
    github = host.hook.po_codehost(name="github", settings=make_settings(), metrics=metrics)
    assert isinstance(github, CodeHost) and github.name == "github"
    # Gitea is off until its secret is set; a name no plugin serves is nobody's
    assert host.hook.po_codehost(name="gitea", settings=make_settings(), metrics=metrics) is None
    own_env(GITEA_WEBHOOK_SECRET="s", GITEA_URL="http://127.0.0.1:9")
    on = make_settings()
    gitea = host.hook.po_codehost(name="gitea", settings=on, metrics=metrics)
    assert isinstance(gitea, CodeHost) and gitea.name == "gitea"
    assert host.hook.po_codehost(name="bitbucket", settings=on, metrics=metrics) is None
    assert [codehost.name for codehost in host.codehosts(on, metrics)] == ["github", "gitea"]


def test_hook_po_detect_framework(host: PluginHost, tmp_path: Path) -> None:
    (tmp_path / "go.mod").write_text("module x\n")
    (tmp_path / "nest-cli.json").write_text("{}")
    called = host.hook.po_detect_framework(repo_dir=tmp_path, project=ProjectFiles(tmp_path))
    answers = sorted((a.rank, a.framework) for a in called if a)
    assert answers == [(10, "nestjs"), (20, "go")]


def test_hook_po_dockerfile(host: PluginHost, tmp_path: Path) -> None:
    config = PreviewConfig.model_validate(config_for("rust"))
    project = ProjectFiles(tmp_path)
    assert host.hook.po_dockerfile(framework="rust", config=config, context=CONTEXT,
                                   project=project).startswith("# Injected")
    assert host.hook.po_dockerfile(framework="unknown", config=config, context=CONTEXT, project=project) is None


def test_hook_po_app_service(host: PluginHost, tmp_path: Path) -> None:
    config = PreviewConfig.model_validate(config_for("rust"))
    project = ProjectFiles(tmp_path)
    app = host.hook.po_app_service(framework="rust", config=config, context=CONTEXT, project=project)
    assert app.command == ["/bin/sh", "-c", "exec /app/server"]
    assert host.hook.po_app_service(framework="unknown", config=config, context=CONTEXT, project=project) is None


def test_hook_po_database(host: PluginHost) -> None:
    for name, scheme, port in (("postgres", "postgresql", 5432), ("mysql", "mysql", 3306),
                               ("mongodb", "mongodb", 27017)):
        wiring = DatabaseWiring.model_validate(host.hook.po_database(database=name, context=CONTEXT))
        assert wiring.app_env["DATABASE_URL"].startswith(f"{scheme}://preview:{CONTEXT.db_password}@db:{port}/pr_5")
        assert "healthcheck" in wiring.service
        assert "pr_5" in str(wiring.service["environment"])
    assert host.hook.po_database(database="oracle", context=CONTEXT) is None


def test_hook_po_extra_service(host: PluginHost) -> None:
    for name in ("redis", "memcached", "rabbitmq", "mailpit", "minio"):
        wiring = ServiceWiring.model_validate(host.hook.po_extra_service(service=name, context=CONTEXT))
        assert name in wiring.services
        assert wiring.app_env
    assert host.hook.po_extra_service(service="kafka", context=CONTEXT) is None


def test_hook_po_migrations(host: PluginHost) -> None:
    assert host.hook.po_migrations(framework="laravel") == ["database/migrations/**"]
    assert host.hook.po_migrations(framework="unknown") is None
    assert host.migrations("unknown") == []  # a framework that names none: nothing is looked for

    class Absolute:
        @hookimpl
        def po_migrations(self, framework: str) -> list[str] | None:
            return ["/etc/**"] if framework == "laravel" else None

    from orchestrator.rendering.plugin_host import PluginError, build_plugin_host

    with pytest.raises(PluginError, match="not relative path patterns"):
        build_plugin_host(load_entry_points=False, extra_plugins=[("absolute", Absolute())]).migrations("laravel")
