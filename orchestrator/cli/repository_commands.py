"""The commands that read a repository directory: plugins, validate, render, init."""

from __future__ import annotations

import argparse
import sys

from orchestrator.cli.exits import plugin_host_or_exit, settings_or_exit
from orchestrator.common.text_table import format_table


def plugins(args: argparse.Namespace) -> int:
    import json

    _, host = plugin_host_or_exit()
    listing = host.describe()
    if args.json:
        print(json.dumps({"plugins": listing}, indent=2))
        return 0
    rows = [("NAME", "BUILT-IN", "DISTRIBUTION", "VERSION", "PROVIDES", "HOOKS")]
    for entry in listing:
        provided = (entry["frameworks"] + entry["databases"] + entry["services"] + entry["runtimes"]
                    + entry["codehosts"])
        provides = ", ".join(provided) or "-"
        rows.append((entry["name"], "yes" if entry["builtin"] else "no", entry["distribution"] or "-",
                     entry["version"] or "-", provides, ", ".join(entry["hooks"])))
    sys.stdout.write(format_table(rows))
    return 0


def validate(args: argparse.Namespace) -> int:
    from orchestrator.plugin_api.preview_config import ConfigError
    from orchestrator.rendering.checkout_config import load_checkout_config

    _, host = plugin_host_or_exit()
    try:
        config = load_checkout_config(host, args.dir)
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"{args.dir}: {problem}", file=sys.stderr)
        return 1
    print(f"{args.dir}: preview-config.yml is valid (framework {config.framework}, database {config.database})")
    return 0


def render(args: argparse.Namespace) -> int:
    from orchestrator.common.host_env import HostEnv
    from orchestrator.plugin_api.preview_config import ConfigError
    from orchestrator.rendering.checkout_config import load_checkout_config
    from orchestrator.rendering.compose_file import make_context, render_deployment
    from orchestrator.runtime.compose_cli import Compose

    settings, host = plugin_host_or_exit()
    key, scope, repository = (secrets_of(args.owner, args.repo, args.pr) if args.show_secrets
                              else (None, "repository", None))
    try:
        context = make_context(args.owner, args.repo, args.pr, args.app_port, args.db_port, key,
                               settings.image_overrides, settings.build_cache_mounts, repository=repository,
                               secrets_scope=scope)
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


def secrets_of(owner: str, repo: str, pr: int) -> tuple[bytes, str, str | None]:
    """For `render --show-secrets` (run where the service runs): the service's database password key, and what the
    preview's record says its secrets are keyed by — its `secretsScope` (one deployed before secrets were keyed by
    repository keeps its volume's password) and its repository identity (its code host's: GitHub, Gitea,
    GitLab) — else what a new GitHub preview gets."""
    from orchestrator.common.naming import deployment_id, project_slug
    from orchestrator.state.store import DeploymentStore, StoreError

    settings = settings_or_exit()
    try:
        key = settings.db_password_key_path.read_bytes()
    except OSError as exc:
        print(f"preview-orchestrator: cannot read {settings.db_password_key_path} ({exc.strerror}); it is "
              "created at the first deploy, and readable by root only", file=sys.stderr)
        raise SystemExit(1) from None
    try:
        record = DeploymentStore(settings.deployments_db).read().deployments.get(
            deployment_id(project_slug(owner, repo), pr))
    except (StoreError, OSError, ValueError):
        record = None
    if record is None or (record.repoOwner.lower(), record.repoName.lower()) != (owner.lower(), repo.lower()):
        return key, "repository", None
    return key, record.secretsScope, record.repository


def init(args: argparse.Namespace) -> int:
    from orchestrator.rendering.checkout_config import write_starter_config

    _, host = plugin_host_or_exit()
    try:
        path = write_starter_config(host, args.dir)
    except FileExistsError as exc:
        print(f"preview-orchestrator: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {path}")
    return 0
