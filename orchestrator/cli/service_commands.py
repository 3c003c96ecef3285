"""The commands that run or check the service on this host: serve, doctor, setup-nginx."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from orchestrator import __version__
from orchestrator.cli.exits import service_settings_or_exit
from orchestrator.plugin_api.codehost import CodeHost
from orchestrator.rendering.plugin_host import PluginHost
from orchestrator.settings import DEFAULT_CODEHOST, Settings, SettingsError


def serve(args: argparse.Namespace) -> int:
    import uvicorn

    from orchestrator.events.inbox import InboxError
    from orchestrator.http.app import create_app
    from orchestrator.observability.logs import configure_logging
    from orchestrator.rendering.plugin_host import PluginError, build_plugin_host

    settings, secret_file = service_settings_or_exit()
    configure_logging(settings.log_level, settings.secret_values())
    try:  # loaded once: start-up's checks, the app and the lines printed below share it
        plugins = build_plugin_host(disabled=settings.preview_orchestrator_disable_plugins)
    except PluginError as exc:
        print(f"preview-orchestrator: cannot start: {exc}", file=sys.stderr)
        return 2
    if not checks_pass(settings, plugins):
        return 2
    try:
        app = create_app(settings, plugins=plugins)
    except (InboxError, PluginError, SettingsError, ImportError, ValueError) as exc:
        print(f"preview-orchestrator: cannot start: {exc}", file=sys.stderr)
        return 2
    host, port = args.host or settings.orchestrator_host, args.port or settings.orchestrator_port
    print(next_steps(settings, secret_file, f"http://{host}:{port}", plugins), flush=True)
    uvicorn.run(app, host=host, port=port, log_config=None, lifespan="on", server_header=False)
    return 0


def checks_pass(settings: Settings, plugins: PluginHost | None = None) -> bool:
    """Start-up runs doctor's checks: hard failures stop it (with doctor's lines), soft ones are warnings."""
    import logging

    from orchestrator.cli import doctor
    from orchestrator.common.host_env import HostEnv

    checks = doctor.run_checks(settings, HostEnv.for_state_dir(settings.state_dir), plugins)
    failed = doctor.hard_failures(checks)
    for check in failed:
        print(f"preview-orchestrator: {check.line()}", file=sys.stderr)
    for check in checks:
        if not check.ok and not check.hard:
            logging.getLogger("orchestrator.cli.doctor").warning("%s", check.line())
    return not failed


def next_steps(settings: Settings, secret_file: Path | None, service_url: str,
               plugins: PluginHost | None = None) -> str:
    """What a user does next, in a few lines (the secret itself is never printed)."""
    base = settings.preview_base_url or "http://localhost"
    secret = (f"kept in {secret_file} (show it: sudo cat {secret_file})" if secret_file
              else "from CODEHOST_WEBHOOK_SECRET")
    repos = ", ".join(settings.allowed_repos) or "none yet: set ALLOWED_REPOS=owner/repo (environment or .env)"
    return "\n".join([
        f"preview-orchestrator {__version__} is serving on {service_url} (dashboard, API, /metrics)",
        f"  webhook secret: {secret}",
        *registrations(settings, base, plugins),
        f"  allowed repositories: {repos}",
        "  a preview without a code host: preview-orchestrator up DIR   (checks: preview-orchestrator doctor)",
    ])


def doctor(args: argparse.Namespace) -> int:
    from orchestrator.cli import doctor
    from orchestrator.common.host_env import HostEnv

    settings, _ = service_settings_or_exit()
    checks = doctor.run_checks(settings, HostEnv.for_state_dir(settings.state_dir))
    sys.stdout.write(doctor.report(checks))
    return 1 if doctor.hard_failures(checks) else 0


def seeds(args: argparse.Namespace) -> int:
    """The repositories' database seeds this host keeps (preview-config.yml `seed`), most recently used first."""
    import json
    from datetime import UTC, datetime

    from orchestrator.common.text_table import format_table, printable
    from orchestrator.runtime.seed_catalogue import kept_seeds

    settings, _ = service_settings_or_exit()
    found = kept_seeds(settings.state_dir)
    if args.json:
        print(json.dumps([{"key": k.seed.key, "repository": k.seed.repository, "source": k.seed.source,
                           "image": k.seed.image, "sizeBytes": k.seed.size_bytes, "restoreSeconds": k.seed.seconds,
                           "spares": k.spares, "madeAt": datetime.fromtimestamp(k.seed.made_at, UTC).isoformat(),
                           "lastUsedAt": datetime.fromtimestamp(k.seed.used_at, UTC).isoformat()} for k in found]))
        return 0

    def when(stamp: float) -> str:
        return datetime.fromtimestamp(stamp, UTC).strftime("%Y-%m-%d %H:%M")

    rows = [["SEED", "SIZE", "SPARES", "RESTORED IN", "LAST USED", "REPOSITORY", "SOURCE"]]
    rows += [[k.seed.key, f"{k.seed.size_bytes / 2**20:.0f} MB", str(k.spares), f"{k.seed.seconds:.1f} s",
              when(k.seed.used_at), printable(k.seed.repository), printable(k.seed.source)] for k in found]
    total = sum(k.seed.size_bytes + k.spare_bytes for k in found)
    sys.stdout.write(format_table(rows) if found else "no database seeds\n")
    print(f"{total / 2**30:.2f} GB of SEED_CACHE_GB {settings.seed_cache_gb:g} GB")
    return 0


def setup_nginx(args: argparse.Namespace) -> int:
    from orchestrator.adapters.nginx_site import ensure_site
    from orchestrator.common.host_env import HostEnv

    settings, _ = service_settings_or_exit()
    result = ensure_site(settings, HostEnv.for_state_dir(settings.state_dir), webhook_paths(settings))
    print(result.message, file=sys.stdout if result.ok else sys.stderr)
    return 0 if result.ok else 1


def webhook_paths(settings: Settings) -> list[str]:
    """`/webhook/{name}` (and its aliases) of every code host that is on: what nginx exposes, and only that."""
    return [f"/webhook/{path}" for host in _codehosts(settings) for path in (host.name, *host.aliases)]


def registrations(settings: Settings, base: str, plugins: PluginHost | None = None) -> list[str]:
    """What to register on each code host that is on (its plugin says, `CodeHost.registration`); GitHub's at the
    spec's path."""
    lines = []
    for host in _codehosts(settings, plugins):
        github = host.name == DEFAULT_CODEHOST
        url = f"{base}/webhook/{'codehost' if github else host.name}"
        lines.append(f"  {'code host' if github else host.name}: {host.registration.format(url=url)}")
    return lines


def _codehosts(settings: Settings, plugins: PluginHost | None = None) -> list[CodeHost]:
    from orchestrator.observability.metrics import Metrics
    from orchestrator.rendering.plugin_host import build_plugin_host

    if plugins is None:
        plugins = build_plugin_host(disabled=settings.preview_orchestrator_disable_plugins)
    hosts = plugins.codehosts(settings, Metrics())
    hosts.close()  # only their names and texts are read
    return list(hosts)
