"""`preview-orchestrator doctor`, and the same checks at start-up: one line per requirement, ✓ or ✗ with the fix.

Hard requirements (the Docker engine, compose v2, git, the proxy's program, writable state and work directories)
stop the service when they fail; the others are warnings: a preview can still be made, but something will go
wrong or be slow.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from orchestrator.adapters.nginx_site import (
    NAMES_BUCKET_SIZE,
    SERVERS_DIR,
    dump_command,
    includes_routes,
    includes_servers,
    names_bucket_size,
)
from orchestrator.cli.address_pools import SUGGESTED, capacity, configured_pools, local_dockerd_args, read_daemon_json
from orchestrator.cli.doctor_bases import base_previews
from orchestrator.common.commands import CommandFailed, run
from orchestrator.common.host_env import HostEnv
from orchestrator.common.labels import DEPLOYMENT_LABEL
from orchestrator.observability.metrics import Metrics
from orchestrator.plugin_api.checks import Check, run_all_safely, run_safely
from orchestrator.rendering.plugin_host import PluginError, PluginHost, build_plugin_host
from orchestrator.runtime.compose_program import compose_program
from orchestrator.settings import DEFAULT_CODEHOST, Settings, SettingsError
from orchestrator.state.ports import APP_POOL, DB_POOL, held_ports, host_port_free
from orchestrator.state.store import DeploymentStore, StoreError

LOW_DISK_BYTES = 5 * 1024**3


def run_checks(settings: Settings, env: HostEnv, loaded: PluginHost | None = None) -> list[Check]:
    """Every check, in a fixed order; the slow ones (commands, the code host) run in parallel. `loaded`: the
    plugins `serve` loaded (doctor alone loads them here)."""
    probes: list[Callable[[], Check]] = [
        lambda: _docker_engine(env), lambda: _compose(env), lambda: _buildkit(env), lambda: _git(env),
        lambda: _proxy_program(settings), lambda: _proxy_test(settings, env), lambda: _routes_included(settings, env),
        lambda: _writable("state directory", settings.state_dir, "DEPLOYMENTS_DB"),
        lambda: _writable("work directory", settings.deployments_dir, "DEPLOYMENTS_DIR"),
        lambda: _free_ports(settings), lambda: _networks(settings, env), lambda: _disk(settings),
        lambda: _allowed_repos(settings), lambda: _origins(settings),
        *([lambda: base_previews(settings)] if settings.base_previews else []),
    ]
    try:
        plugins: PluginHost | PluginError = loaded or build_plugin_host(
            disabled=settings.preview_orchestrator_disable_plugins)
    except PluginError as exc:
        plugins = exc
    except Exception as exc:  # noqa: BLE001 - plugins that break are doctor's lines, never its crash
        plugins = PluginError(f"the plugins could not be loaded ({type(exc).__name__}: {exc})")
    with ThreadPoolExecutor(max_workers=len(probes) + 2) as pool:
        hosts = pool.submit(_codehost_checks, settings, plugins)  # each code host's own lines (API, token)
        own = pool.submit(_runtime_checks, settings, plugins)  # the runtime's own lines (a swarm's nodes, registry)
        return [*pool.map(run_safely, probes), *hosts.result(), *own.result()]


def _codehost_checks(settings: Settings, plugins: PluginHost | PluginError) -> list[Check]:
    """The lines of every code host that is on (GitHub always: its secret is required)."""
    try:
        if isinstance(plugins, PluginError):
            raise plugins
        hosts = plugins.codehosts(settings, Metrics())
    except PluginError as exc:
        return [Check("the code hosts", False, str(exc), "disable the plugin that fails")]
    except SettingsError as exc:  # a code host's own settings (GITEA_*, GITLAB_*)
        return [Check("the code hosts' settings", False, "; ".join(exc.lines), "set them (docs/codehosts.md)",
                      hard=True)]
    try:
        lines = [check for host in hosts for check in run_all_safely(host.checks, f"the code host {host.name}")]
    finally:
        hosts.close()
    allowed = _allowed_hosts(settings, hosts.names())
    return [*lines, allowed] if allowed is not None else lines


def _allowed_hosts(settings: Settings, on: list[str]) -> Check | None:
    """ALLOWED_REPOS entries of a code host that is off (or misspelt) allow nothing: say so. None without
    entries of another host than GitHub."""
    named = settings.allowed_codehosts - {DEFAULT_CODEHOST}
    if not named:
        return None
    name = "ALLOWED_REPOS names code hosts that are on"
    off = sorted(named - set(on))
    if off:
        return Check(name, False, f"{', '.join(off)}: no such code host is on ({', '.join(on)} are)",
                     "set that host's webhook secret (docs/codehosts.md), or fix the prefix")
    return Check(name, True, ", ".join(sorted(named)))


def _runtime_checks(settings: Settings, plugins: PluginHost | PluginError) -> list[Check]:
    name = f"the runtime (RUNTIME={settings.runtime})"
    try:
        if isinstance(plugins, PluginError):
            raise plugins
        runtime = plugins.runtime(settings.runtime, settings)
        return runtime.checks()
    except PluginError as exc:
        return [Check(name, False, str(exc), "set RUNTIME to one `preview-orchestrator plugins` lists", hard=True)]
    except SettingsError as exc:  # the runtime's own settings (SWARM_*)
        return [Check(f"{name}'s settings", False, "; ".join(exc.lines), "set them (docs/configuration.md)",
                      hard=True)]
    except Exception as exc:  # noqa: BLE001 - a runtime whose checks break is reported, never a crash of doctor
        return [Check(name, False, f"its checks could not run ({type(exc).__name__}: {exc})")]


def report(checks: list[Check]) -> str:
    return "\n".join(check.line() for check in checks) + "\n"


def hard_failures(checks: list[Check]) -> list[Check]:
    return [check for check in checks if check.hard and not check.ok]


def _command(argv: list[str], env: dict[str, str], timeout: float = 20) -> tuple[bool, str]:
    try:
        return True, run(argv, cwd=None, env=env, timeout=timeout, log=None).strip()
    except CommandFailed as exc:
        return False, (exc.tail(2) or str(exc)).strip()


def _docker_engine(env: HostEnv) -> Check:
    ok, output = _command(["docker", "version", "--format", "{{.Server.Version}} (API {{.Server.APIVersion}})"],
                          env.docker())
    fix = ("start the engine (as root: scripts/prepare-host), or point DOCKER_HOST / DOCKER_CONTEXT at it"
           if shutil.which("docker") else "install it: scripts/prepare-host (Debian's docker.io)")
    return Check("Docker engine reachable", ok, output.splitlines()[-1] if output else "", fix, hard=True)


# compose 2.6.0 to 2.39.2 copied every variable of a checkout's `.env` into its own environment (another engine,
# builder or BuildKit source policy of a pull request's choosing: host_env.CLIENT_DEFAULTS sets those known); 3 and
# later build with buildx bake whatever COMPOSE_BAKE says
COMPOSE_VERSIONS = ((2, 39, 3), (3, 0, 0))


def _compose(env: HostEnv) -> Check:
    ok, output = _command([*compose_program(env.docker()), "version", "--short"], env.docker())  # as runtimes do
    version = tuple(int(part) for part in re.findall(r"\d+", output)[:3])
    low, high = COMPOSE_VERSIONS
    return Check("docker compose v2 (2.39.3 or later)", ok and low <= version < high, output,
                 "install compose v2.39.3 or a later 2.x: scripts/prepare-host, or Docker's manual install into "
                 "~/.docker/cli-plugins", hard=True)


def _buildkit(env: HostEnv) -> Check:
    """Compose v2 builds through the engine's BuildKit by itself (without the buildx plugin it falls back from
    Bake to its own BuildKit client), and the service never passes DOCKER_BUILDKIT=0; what matters is that
    the engine has BuildKit (API 1.39, Docker 18.09)."""
    name = "builds use the engine's BuildKit (docker compose build)"
    ok, output = _command(["docker", "version", "--format", "{{.Server.APIVersion}}"], env.docker())
    try:
        major, minor = (int(part) for part in output.strip().split(".")[:2])
    except ValueError:
        return Check(name, False, output.strip() or "no answer from the engine", "start the Docker engine")
    if (major, minor) < (1, 39):
        return Check(name, False, f"engine API {output.strip()}: the classic builder (slower rebuilds)",
                     "upgrade the Docker engine to 18.09 or newer")
    has_buildx, _ = _command(["docker", "buildx", "version"], env.docker())
    return Check(name, True, f"engine API {output.strip()}" + ("" if has_buildx else
                 "; docker buildx not installed: compose uses its own BuildKit client, nothing to do"))


def _git(env: HostEnv) -> Check:
    ok, output = _command(["git", "--version"], env.git())
    return Check("git", ok, output, "apt-get install git", hard=True)


def _proxy_program(settings: Settings) -> Check:
    program = shlex.split(settings.proxy_reload_command)[0]
    found = shutil.which(program)
    return Check(f"{program} installed (PROXY_RELOAD_COMMAND)", bool(found), found or "not found",
                 "apt-get install nginx-light (scripts/prepare-host)" if program == "nginx" else
                 "install it or change PROXY_RELOAD_COMMAND", hard=True)


def _proxy_test(settings: Settings, env: HostEnv) -> Check:
    ok, output = _command(shlex.split(settings.proxy_test_command), env.tools())
    return Check(f"{settings.proxy_test_command} passes", ok, "" if ok else output,
                 "fix the nginx configuration it names")


def _routes_included(settings: Settings, env: HostEnv) -> Check:
    """Path routing: a server includes the location files. Host routing: the http level includes the servers
    (PROXY_CONFIG_DIR/servers/*.conf; inside a server block nginx -t would refuse them)."""
    host = settings.preview_routing == "host"
    name = (f"nginx includes {settings.proxy_config_dir}/{SERVERS_DIR}/*.conf at http level (PREVIEW_ROUTING=host)"
            if host else f"a server includes {settings.proxy_config_dir}/*.conf")
    dump = dump_command(settings.proxy_test_command)
    if dump is None:
        return Check(name, True, "cannot tell (PROXY_TEST_COMMAND is not nginx -t)")
    ok, output = _command(dump, env.tools())
    if not ok:
        return Check(name, False, "nginx -T failed", "fix the nginx configuration first")
    if host:
        found = includes_servers(output, settings.proxy_config_dir)
        if not found:
            return Check(name, False, "previews would reach nginx's default server",
                         f"run preview-orchestrator setup-nginx, or add `include {settings.proxy_config_dir}/"
                         f"{SERVERS_DIR}/*.conf;` outside any server block (e.g. in conf.d/) (docs/routing.md)")
        bucket = names_bucket_size(output)
        return Check(name, (bucket or 0) >= NAMES_BUCKET_SIZE,
                     f"server_names_hash_bucket_size {bucket or 'unset (64)'}: long preview host names make "
                     "nginx -t fail" if (bucket or 0) < NAMES_BUCKET_SIZE else "",
                     f"set `server_names_hash_bucket_size {NAMES_BUCKET_SIZE};` once at http level")
    found = includes_routes(output, settings.proxy_config_dir)
    return Check(name, found, "" if found else "previews would answer 404",
                 "run preview-orchestrator setup-nginx, or add the include to your server block (docs/operations.md)")


def _writable(label: str, directory: Path, variable: str) -> Check:
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".doctor-"):
            pass
    except OSError as exc:
        return Check(f"{label} writable", False, f"{directory}: {exc.strerror}",
                     f"make {directory} writable by the service, or set {variable}", hard=True)
    return Check(f"{label} writable", True, str(directory))


def _free_ports(settings: Settings) -> Check:
    try:
        held = DeploymentStore(settings.deployments_db).read().portAllocations.values()
    except StoreError as exc:
        return Check("free ports in both pools", False, str(exc), "repair the tracking store")
    taken = held_ports(held)
    app = sum(1 for port in APP_POOL if port not in taken and host_port_free(port))
    db = sum(1 for port in DB_POOL if port not in taken and host_port_free(port))
    return Check("free ports in both pools", app > 0 and db > 0, f"{app} app ports, {db} db ports",
                 "close previews, or free ports 8000-9999")


def _networks(settings: Settings, env: HostEnv) -> Check:
    """Each preview's network takes a subnet from the engine's address pools (orchestrator/cli/address_pools.py)."""
    name = "address pools hold MAX_CONCURRENT_PREVIEWS networks"
    if env.docker().get("DOCKER_HOST", "unix://").split("://")[0] not in ("unix", ""):
        return Check(name, True, "cannot tell for a remote engine (DOCKER_HOST)")
    # The engine has no "label!=" filter: the bridge networks' labels, those of previews left out here.
    ok, output = _command(["docker", "network", "ls", "--filter", "driver=bridge", "--format", "{{.ID}} {{.Labels}}"],
                          env.docker())
    if not ok:
        return Check(name, False, f"networks not listed: {output.strip()}", "start the Docker engine")
    others = max(sum(f"{DEPLOYMENT_LABEL}=" not in labels for labels in output.splitlines()) - 1, 0)  # docker0
    pools, source = configured_pools(read_daemon_json(), local_dockerd_args())
    room = capacity(pools) - 1 - others
    return Check(name, room >= settings.max_concurrent_previews,
                 f"{room} networks for MAX_CONCURRENT_PREVIEWS={settings.max_concurrent_previews} ({source}"
                 f"{f', {others} other networks' if others else ''})",
                 f"add {SUGGESTED} to /etc/docker/daemon.json and restart the engine (docs/scaling.md), or lower "
                 "MAX_CONCURRENT_PREVIEWS")


def _disk(settings: Settings) -> Check:
    directory = settings.deployments_dir if settings.deployments_dir.exists() else Path("/")
    usage = shutil.disk_usage(directory)
    gib = usage.free / 1024**3
    return Check("free disk space", usage.free >= LOW_DISK_BYTES, f"{gib:.1f} GiB free under {directory}",
                 "free space (docker system prune) or move DEPLOYMENTS_DIR")


def _origins(settings: Settings) -> Check:
    """Under path routing every preview is on one origin: a preview's own JavaScript can fetch another preview's
    pages with the reviewer's cookie or credentials (docs/security.md, "Between previews"). Said at every start."""
    name = "previews on origins of their own"
    if settings.preview_routing == "host":
        return Check(name, True, f"host routing: each preview is its own host under {settings.preview_domain}")
    if settings.preview_protection == "none":
        return Check(name, True, "path routing, no protection: previews share one origin, and nothing to steal")
    return Check(name, False, f"path routing shares one origin between all previews: with PREVIEW_PROTECTION="
                 f"{settings.preview_protection}, one preview's JavaScript can open the others with the reviewer's "
                 "access", "set PREVIEW_ROUTING=host with PREVIEW_DOMAIN (docs/routing.md)")


def _allowed_repos(settings: Settings) -> Check:
    if settings.allowed_repos:
        return Check("ALLOWED_REPOS set", True, ", ".join(settings.allowed_repos))
    return Check("ALLOWED_REPOS set", False, "empty: every pull_request webhook is refused with 403",
                 "set ALLOWED_REPOS=owner/repo in the environment or .env")


def running_as_root() -> bool:
    return os.geteuid() == 0
