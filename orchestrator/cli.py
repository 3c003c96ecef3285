"""The `preview-orchestrator` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from orchestrator import __version__
from orchestrator.settings import Settings, SettingsError, load_settings


def _settings_or_exit() -> Settings:
    try:
        return load_settings()
    except SettingsError as exc:
        for line in exc.lines:
            print(f"preview-orchestrator: configuration error: {line}", file=sys.stderr)
        raise SystemExit(2) from None


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from orchestrator.app import create_app
    from orchestrator.inbox import InboxError
    from orchestrator.logs import configure_logging

    settings = _settings_or_exit()
    configure_logging(settings.log_level, settings.secret_values())
    try:
        app = create_app(settings)
    except (InboxError, ImportError, ValueError) as exc:
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="preview-orchestrator", description=__doc__)
    parser.add_argument("--version", action="version", version=f"preview-orchestrator {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    serve = commands.add_parser("serve", help="run the HTTP service (settings from the environment and .env)")
    serve.add_argument("--host", help="bind address (default: ORCHESTRATOR_HOST)")
    serve.add_argument("--port", type=int, help="port (default: ORCHESTRATOR_PORT)")
    serve.set_defaults(run=_serve)
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
