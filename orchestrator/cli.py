"""The `preview-orchestrator` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from orchestrator import __version__
from orchestrator.settings import Settings, SettingsError, load_settings
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

    settings = _settings_or_exit()
    configure_logging(settings.log_level, settings.secret_values())
    try:
        app = create_app(settings)
    except (InboxError, PluginError, ImportError, ValueError) as exc:
        print(f"preview-orchestrator: cannot start: {exc}", file=sys.stderr)
        return 2
    uvicorn.run(
        app,
        host=args.host or settings.orchestrator_host,
        port=args.port or settings.orchestrator_port,
        log_config=None,
        lifespan="on",
        server_header=False,
    )
    return 0


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
    if args.command != "list" and not is_valid_deployment_id(args.id):
        # Checked here too, so that an id like `../plugins` never becomes another URL.
        print(f"preview-orchestrator: invalid deployment id {args.id!r} (expected {{projectSlug}}-{{prNumber}}, "
              "e.g. acme-api-42)", file=sys.stderr)
        return 1
    try:
        if args.command == "list":
            return service_client.list_previews(url, args.json)
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
    for command in (listing, logs, remove):
        command.add_argument("--url", help=url_help)
        command.set_defaults(run=_client)
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
