"""The `preview-orchestrator` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from orchestrator import __version__
from orchestrator.settings import Settings, SettingsError, load_service_settings, load_settings
from orchestrator.text_table import format_table


def _exit_on_settings_error(exc: SettingsError) -> NoReturn:
    for line in exc.lines:
        print(f"preview-orchestrator: configuration error: {line}", file=sys.stderr)
    raise SystemExit(2) from None


def _settings_or_exit() -> Settings:
    try:
        return load_settings()
    except SettingsError as exc:
        _exit_on_settings_error(exc)


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from orchestrator.app import create_app
    from orchestrator.inbox import InboxError
    from orchestrator.logs import configure_logging
    from orchestrator.plugin_host import PluginError

    settings, secret_file = _service_settings_or_exit()
    configure_logging(settings.log_level, settings.secret_values())
    if not _checks_pass(settings):
        return 2
    try:
        app = create_app(settings)
    except (InboxError, PluginError, ImportError, ValueError) as exc:
        print(f"preview-orchestrator: cannot start: {exc}", file=sys.stderr)
        return 2
    host, port = args.host or settings.orchestrator_host, args.port or settings.orchestrator_port
    print(next_steps(settings, secret_file, f"http://{host}:{port}"), flush=True)
    uvicorn.run(app, host=host, port=port, log_config=None, lifespan="on", server_header=False)
    return 0


def _service_settings_or_exit():  # noqa: ANN202
    try:
        return load_service_settings()
    except SettingsError as exc:
        _exit_on_settings_error(exc)


def _checks_pass(settings: Settings) -> bool:
    """Start-up runs doctor's checks: hard failures stop it (with doctor's lines), soft ones are warnings."""
    import logging

    from orchestrator import doctor
    from orchestrator.host_env import HostEnv

    checks = doctor.run_checks(settings, HostEnv.for_state_dir(settings.state_dir))
    failed = doctor.hard_failures(checks)
    for check in failed:
        print(f"preview-orchestrator: {check.line()}", file=sys.stderr)
    for check in checks:
        if not check.ok and not check.hard:
            logging.getLogger("orchestrator.doctor").warning("%s", check.line())
    return not failed


def next_steps(settings: Settings, secret_file: Path | None, service_url: str) -> str:
    """What a user does next, in a few lines (the secret itself is never printed)."""
    base = settings.preview_base_url or "http://localhost"
    secret = (f"kept in {secret_file} (show it: sudo cat {secret_file})" if secret_file
              else "from CODEHOST_WEBHOOK_SECRET")
    repos = ", ".join(settings.allowed_repos) or "none yet: set ALLOWED_REPOS=owner/repo (environment or .env)"
    return "\n".join([
        f"preview-orchestrator {__version__} is serving on {service_url} (dashboard, API, /metrics)",
        f"  webhook secret: {secret}",
        f"  code host: add a webhook with URL {base}/webhook/codehost, content type application/json, that "
        "secret, and the \"Pull requests\" event",
        f"  allowed repositories: {repos}",
        "  a preview without a code host: preview-orchestrator up DIR   (checks: preview-orchestrator doctor)",
    ])


def _doctor(args: argparse.Namespace) -> int:
    from orchestrator import doctor
    from orchestrator.host_env import HostEnv

    settings, _ = _service_settings_or_exit()
    checks = doctor.run_checks(settings, HostEnv.for_state_dir(settings.state_dir))
    sys.stdout.write(doctor.report(checks))
    return 1 if doctor.hard_failures(checks) else 0


def _setup_nginx(args: argparse.Namespace) -> int:
    from orchestrator.host_env import HostEnv
    from orchestrator.nginx_site import ensure_site

    settings, _ = _service_settings_or_exit()
    result = ensure_site(settings, HostEnv.for_state_dir(settings.state_dir))
    print(result.message, file=sys.stdout if result.ok else sys.stderr)
    return 0 if result.ok else 1


def _plugin_host():  # noqa: ANN202
    from orchestrator.plugin_host import PluginError, build_plugin_host
    from orchestrator.settings import load_plugin_settings

    try:
        settings = load_plugin_settings()
        return settings, build_plugin_host(disabled=settings.preview_orchestrator_disable_plugins)
    except SettingsError as exc:
        _exit_on_settings_error(exc)
    except PluginError as exc:
        print(f"preview-orchestrator: plugin error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def _plugins(args: argparse.Namespace) -> int:
    import json

    _, host = _plugin_host()
    listing = host.describe()
    if args.json:
        print(json.dumps({"plugins": listing}, indent=2))
        return 0
    rows = [("NAME", "BUILT-IN", "DISTRIBUTION", "VERSION", "PROVIDES", "HOOKS")]
    for entry in listing:
        provides = ", ".join(entry["frameworks"] + entry["databases"] + entry["services"]) or "-"
        rows.append((entry["name"], "yes" if entry["builtin"] else "no", entry["distribution"] or "-",
                     entry["version"] or "-", provides, ", ".join(entry["hooks"])))
    sys.stdout.write(format_table(rows))
    return 0


def _validate(args: argparse.Namespace) -> int:
    from orchestrator.checkout import load_checkout_config
    from orchestrator.preview_config import ConfigError

    _, host = _plugin_host()
    try:
        config = load_checkout_config(host, args.dir)
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"{args.dir}: {problem}", file=sys.stderr)
        return 1
    print(f"{args.dir}: preview-config.yml is valid (framework {config.framework}, database {config.database})")
    return 0


def _render(args: argparse.Namespace) -> int:
    from orchestrator.checkout import load_checkout_config
    from orchestrator.docker_compose import Compose
    from orchestrator.host_env import HostEnv
    from orchestrator.preview_config import ConfigError
    from orchestrator.rendering import make_context, render_deployment

    settings, host = _plugin_host()
    key = _password_key() if args.show_secrets else None
    try:
        context = make_context(args.owner, args.repo, args.pr, args.app_port, args.db_port, key,
                               settings.image_overrides)
        config = load_checkout_config(host, args.dir)
        compose = Compose(60, HostEnv.for_state_dir(args.dir))
        rendered = render_deployment(host, args.dir.resolve(), config, context, compose.normalized)
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"{args.dir}: {problem}", file=sys.stderr)
        return 1
    except ValueError as exc:
        print(f"preview-orchestrator: {exc}", file=sys.stderr)
        return 1
    if args.dockerfile:
        dockerfiles = [text for name, text in rendered.files.items() if name.startswith("Dockerfile")]
        if not dockerfiles:
            print("the repository's own Dockerfile is used; nothing is injected", file=sys.stderr)
            return 0
        sys.stdout.write(dockerfiles[0])
        return 0
    sys.stdout.write(f"# {rendered.compose_file}\n" + rendered.compose_text())
    return 0


def _password_key() -> bytes:
    """The service's database password key, for `render --show-secrets` (run where the service runs)."""
    settings = _settings_or_exit()
    try:
        return settings.db_password_key_path.read_bytes()
    except OSError as exc:
        print(f"preview-orchestrator: cannot read {settings.db_password_key_path} ({exc.strerror}); it is "
              "created at the first deploy, and readable by root only", file=sys.stderr)
        raise SystemExit(1) from None


def _init(args: argparse.Namespace) -> int:
    from orchestrator.checkout import write_starter_config

    _, host = _plugin_host()
    try:
        path = write_starter_config(host, args.dir)
    except FileExistsError as exc:
        print(f"preview-orchestrator: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {path}")
    return 0


def _client(args: argparse.Namespace) -> int:
    from orchestrator import service_client
    from orchestrator.naming import is_valid_deployment_id

    url = service_client.service_url(args.url)
    if args.command not in ("list", "up") and not is_valid_deployment_id(args.id):
        # Checked here too, so that an id like `../plugins` never becomes another URL.
        print(f"preview-orchestrator: invalid deployment id {args.id!r} (expected {{projectSlug}}-{{prNumber}}, "
              "e.g. acme-api-42)", file=sys.stderr)
        return 1
    try:
        if args.command == "list":
            return service_client.list_previews(url, args.json)
        if args.command == "up":
            return service_client.up(url, args.dir, args.name, args.pr, args.follow)
        if args.command == "logs":
            return service_client.show_logs(url, args.id, args.follow)
        return service_client.cleanup(url, args.id)
    except service_client.ServiceUnreachable as exc:
        print(f"preview-orchestrator: {exc}", file=sys.stderr)
        return service_client.EXIT_UNREACHABLE
    except KeyboardInterrupt:
        return 130


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="preview-orchestrator", description=__doc__)
    parser.add_argument("--version", action="version", version=f"preview-orchestrator {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    serve = commands.add_parser("serve", help="run the HTTP service (settings from the environment and .env)")
    serve.add_argument("--host", help="bind address (default: ORCHESTRATOR_HOST)")
    serve.add_argument("--port", type=int, help="port (default: ORCHESTRATOR_PORT)")
    serve.set_defaults(run=_serve)

    plugins = commands.add_parser("plugins", help="list loaded plugins and what they provide")
    plugins.add_argument("--json", action="store_true", help="machine-readable output")
    plugins.set_defaults(run=_plugins)

    validate = commands.add_parser("validate", help="check DIR/preview-config.yml")
    validate.add_argument("dir", type=Path, metavar="DIR")
    validate.set_defaults(run=_validate)

    render = commands.add_parser("render", help="print the compose file a deploy of DIR would run")
    render.add_argument("dir", type=Path, metavar="DIR")
    render.add_argument("--owner", required=True)
    render.add_argument("--repo", required=True)
    render.add_argument("--pr", type=int, required=True)
    render.add_argument("--app-port", type=int, default=8000, help="host port for the app (default 8000)")
    render.add_argument("--db-port", type=int, default=9000, help="host port for the db (default 9000)")
    render.add_argument("--dockerfile", action="store_true", help="print the injected Dockerfile instead")
    render.add_argument("--show-secrets", action="store_true",
                        help="the real database password (reads the service's key; default: a placeholder)")
    render.set_defaults(run=_render)

    init = commands.add_parser("init", help="write a starting DIR/preview-config.yml (default: .)")
    init.add_argument("dir", type=Path, metavar="DIR", nargs="?", default=Path("."))
    init.set_defaults(run=_init)

    url_help = "the running service (default: PREVIEW_ORCHESTRATOR_URL, else http://127.0.0.1:$ORCHESTRATOR_PORT)"
    listing = commands.add_parser("list", help="list the previews of the running service")
    listing.add_argument("--json", action="store_true", help="the API's JSON instead of a table")
    logs = commands.add_parser("logs", help="print a preview's deployment log")
    logs.add_argument("id", metavar="ID", help="deployment id, e.g. acme-api-42")
    logs.add_argument("--follow", "-f", action="store_true", help="keep printing while a build runs")
    remove = commands.add_parser("cleanup", help="remove a preview now (as if its pull request closed)")
    remove.add_argument("id", metavar="ID", help="deployment id, e.g. acme-api-42")
    down = commands.add_parser("down", help="remove a preview (the same as cleanup), e.g. one made by up")
    down.add_argument("id", metavar="ID", help="deployment id, e.g. local-hello-1")
    up = commands.add_parser("up", help="deploy DIR as it is now, through the running service, without a code "
                             "host (same flow, record, ports, route and limits; no comment)")
    up.add_argument("dir", type=Path, metavar="DIR")
    up.add_argument("--name", help="the preview's name: local-NAME-N (default: the directory's name)")
    up.add_argument("--pr", type=int, default=1, help="the number N in its id and URL (default 1)")
    up.add_argument("--follow", "-f", action="store_true", help="print the build live")
    for command in (listing, logs, remove, down, up):
        command.add_argument("--url", help=url_help)
        command.set_defaults(run=_client)

    doctor = commands.add_parser("doctor", help="check this host: one line per requirement, the fix for each ✗")
    doctor.set_defaults(run=_doctor)
    nginx = commands.add_parser("setup-nginx", help="install an nginx site with the webhook location and the "
                                "preview routes, unless a server already includes PROXY_CONFIG_DIR")
    nginx.set_defaults(run=_setup_nginx)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "run", None):
        parser.print_help()
        return 2
    result: int = args.run(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
