"""The `preview-orchestrator` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from orchestrator import __version__
from orchestrator.cli import repository_commands, service_commands


def _client(args: argparse.Namespace) -> int:
    from orchestrator.cli import service_client
    from orchestrator.common.naming import is_valid_deployment_id

    url = service_client.service_url(args.url)
    if args.command not in ("list", "up", "deliveries", "replay") and not is_valid_deployment_id(args.id):
        # Checked here too, so that an id like `../plugins` never becomes another URL.
        print(f"preview-orchestrator: invalid deployment id {args.id!r} (expected {{projectSlug}}-{{prNumber}} or "
              "{projectSlug}-base, e.g. acme-api-42)", file=sys.stderr)
        return 1
    try:
        if args.command == "list":
            return service_client.list_previews(url, args.json)
        if args.command == "deliveries":
            return service_client.list_deliveries(url, args.repository, args.pr, args.limit, args.json)
        if args.command == "replay":
            return service_client.replay(url, args.entry)
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
    serve.set_defaults(run=service_commands.serve)

    plugins = commands.add_parser("plugins", help="list loaded plugins and what they provide")
    plugins.add_argument("--json", action="store_true", help="machine-readable output")
    plugins.set_defaults(run=repository_commands.plugins)

    validate = commands.add_parser("validate", help="check DIR/preview-config.yml")
    validate.add_argument("dir", type=Path, metavar="DIR")
    validate.set_defaults(run=repository_commands.validate)

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
    render.set_defaults(run=repository_commands.render)

    init = commands.add_parser("init", help="write a starting DIR/preview-config.yml (default: .)")
    init.add_argument("dir", type=Path, metavar="DIR", nargs="?", default=Path("."))
    init.set_defaults(run=repository_commands.init)

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
    deliveries = commands.add_parser("deliveries", help="the webhooks the service received, the newest first: "
                                     "accepted, ignored (and why) or refused")
    deliveries.add_argument("--repository", help="only this repository's (owner/name)")
    deliveries.add_argument("--pr", type=int, help="only this pull request's (with --repository)")
    deliveries.add_argument("--limit", type=int, default=50, help="at most this many (default 50, at most 1000)")
    deliveries.add_argument("--json", action="store_true", help="the API's JSON instead of a table")
    replay = commands.add_parser("replay", help="process an accepted delivery's event again (N from `deliveries`)")
    replay.add_argument("entry", type=int, metavar="N", help="the delivery's number in the log")
    for command in (listing, logs, remove, down, up, deliveries, replay):
        command.add_argument("--url", help=url_help)
        command.set_defaults(run=_client)

    seeds = commands.add_parser("seeds", help="the repositories' database seeds this host keeps (preview-config.yml "
                                "`seed`), most recently used first, and their share of SEED_CACHE_GB")
    seeds.add_argument("--json", action="store_true", help="one JSON array instead of a table")
    seeds.set_defaults(run=service_commands.seeds)
    doctor = commands.add_parser("doctor", help="check this host: one line per requirement, the fix for each ✗")
    doctor.set_defaults(run=service_commands.doctor)
    nginx = commands.add_parser("setup-nginx", help="install an nginx site with the webhook location and the "
                                "preview routes, unless a server already includes PROXY_CONFIG_DIR")
    nginx.set_defaults(run=service_commands.setup_nginx)
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

