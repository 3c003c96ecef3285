"""The service's variables: `Settings` (the spec's table and the service's own) and `PluginSettings` (what
rendering needs). Routing and protection are `reviewers.ReviewerSettings`, one of `Settings`' bases."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode

from orchestrator.common.naming import CODEHOST, HOST_PREFIX, repository_entry
from orchestrator.common.urls import http_url
from orchestrator.settings.reviewers import ReviewerSettings
from orchestrator.settings.source import ENV_SOURCE

REPO_PATTERN = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}$")
# An ALLOWED_REPOS entry of another code host than GitHub: `{host}:owner/repo` (the host's plugin name), whose
# owners may hold `.` and `_` and, on GitLab, be a group path (`gitlab:group/subgroup/project`).
HOSTED_REPO_PATTERN = re.compile(r"^(?:[A-Za-z0-9][A-Za-z0-9._-]{0,99}/){1,20}[A-Za-z0-9._-]{1,100}$")
DEFAULT_CODEHOST = CODEHOST  # of the entries without a `host:` prefix

IMAGE_PATTERN = re.compile(r"^[a-z0-9][a-z0-9._/:@-]{0,254}$")

MAX_IDLE_MINUTES = 7 * 24 * 60  # PREVIEW_IDLE_MINUTES: a week


class PluginSettings(BaseSettings):
    """The settings plugins and rendering need; the CLI's render/validate/plugins use only these."""

    model_config = ENV_SOURCE

    # `from=to,from=to`: swap images of built-in templates (a registry mirror, or local stand-ins).
    image_overrides: Annotated[dict[str, str], NoDecode] = Field(default_factory=dict)
    # Default Dockerfiles may keep a compiler's cache in a BuildKit cache mount shared by a repository's previews
    # (docs/benchmarks.md). Off: they build on the classic builder too (an engine older than 18.09).
    build_cache_mounts: bool = True
    preview_orchestrator_disable_plugins: Annotated[tuple[str, ...], NoDecode] = ()

    @field_validator("image_overrides", mode="before")
    @classmethod
    def _overrides(cls, value: Any) -> dict[str, str]:
        if isinstance(value, dict):
            return value
        overrides: dict[str, str] = {}
        for pair in str(value or "").split(","):
            if not pair.strip():
                continue
            source, sep, target = pair.strip().partition("=")
            if not sep or not IMAGE_PATTERN.match(source) or not IMAGE_PATTERN.match(target):
                raise ValueError(f"entry {pair.strip()!r} is not of the form image=image")
            overrides[source] = target
        return overrides

    @field_validator("preview_orchestrator_disable_plugins", mode="before")
    @classmethod
    def _names(cls, value: Any) -> tuple[str, ...]:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return tuple(value or ())


class Settings(ReviewerSettings, PluginSettings):
    """Every variable of the spec's table plus the service's own; field name = variable name, lower case."""

    model_config = ENV_SOURCE

    codehost_token: SecretStr = SecretStr("")
    codehost_webhook_secret: SecretStr
    allowed_repos: Annotated[tuple[str, ...], NoDecode] = ()
    # repositories (ALLOWED_REPOS' form, each allowed) with a standing preview of their default branch
    base_previews: Annotated[tuple[str, ...], NoDecode] = ()
    cleanup_ttl_days: int = Field(default=7, ge=0)
    max_concurrent_previews: int = Field(default=10, ge=1)
    orchestrator_port: int = Field(default=3000, ge=1, le=65535)
    orchestrator_host: str = "127.0.0.1"
    node_env: Literal["production", "development", "test"] = "production"
    deployments_dir: Path = Path("/opt/preview-deployments")
    proxy_config_dir: Path = Path("/etc/nginx/preview-locations")
    deployments_db: Path = Path("/opt/preview-deployer/deployments.json")
    inbox_db: Path | None = None
    log_level: Literal["debug", "info", "warn", "error"] = "info"
    orchestrator_public_url: str | None = None
    codehost_api_url: str = "https://api.github.com"
    # A GitHub App instead of CODEHOST_TOKEN (docs/codehosts.md): its id and the PEM private key GitHub gave it.
    github_app_id: int | None = Field(default=None, ge=1)
    github_app_private_key_file: Path | None = None
    # Gitea/Forgejo's GITEA_* and GitLab's GITLAB_* are read by their code hosts (codehosts/gitea.py, gitlab.py).
    webhook_processing: Literal["queue", "sync"] = "queue"
    max_concurrent_builds: int = Field(default=2, ge=1, le=64)
    # Import path `module:callable` returning the event handler (tests and embedders swap it).
    event_handler: str = "orchestrator.flows:build_engine"
    # Pull requests whose head repository is not the base repository run code from outside the team.
    allow_fork_prs: bool = False
    health_check_interval_seconds: float = Field(default=5.0, gt=0, le=600)
    health_check_timeout_seconds: float = Field(default=60.0, gt=0, le=3600)
    proxy_test_command: str = "nginx -t"
    proxy_reload_command: str = "nginx -s reload"
    # `preview-orchestrator setup-nginx`: the site it installs when no server includes PROXY_CONFIG_DIR yet.
    proxy_site_file: Path = Path("/etc/nginx/sites-enabled/preview-orchestrator.conf")
    # `preview-orchestrator up`: deploy a local directory through POST /api/previews (anyone who can reach the
    # API can then make the service read a directory; switch it off on a host shared with untrusted users).
    local_previews: bool = True
    # Clone URLs must use one of these git transports (`file` is for local mirrors and tests).
    allowed_clone_protocols: Annotated[tuple[str, ...], NoDecode] = ("https",)
    git_timeout_seconds: float = Field(default=300.0, gt=0)
    build_command_timeout_seconds: float = Field(default=600.0, gt=0)
    # Where build_commands run: a throw-away container (default), the host as an unprivileged user, or nowhere.
    build_commands_mode: Literal["container", "host", "off"] = "container"
    build_commands_user: str = Field(default="po-build", pattern=r"^[a-z_][a-z0-9_-]{0,31}$")
    # The most one deploy, update or cleanup may take, all steps together; then it fails (and stops its commands).
    flow_timeout_seconds: float = Field(default=3600.0, gt=0)
    compose_timeout_seconds: float = Field(default=1800.0, gt=0)
    # A new preview's database starts from a copy of a data directory initialised once per image (a database
    # plugin's DatabaseSeed) instead of initialising itself; the `compose` runtime (docs/benchmarks.md).
    database_seeds: bool = True
    # A repository's `seed` (preview-config.yml): the operator's snapshots live under SNAPSHOTS_DIR/{projectSlug}/
    # (default: `snapshots` beside the tracking store); the restored seeds kept on the engine are bounded by
    # SEED_CACHE_GB, the least recently used removed first (docs/configuration.md).
    snapshots_dir: Path | None = None
    seed_cache_gb: float = Field(default=20.0, gt=0)
    # Spare layers kept per layered seed (the built-in PostgreSQL and MySQL), made ahead so that a new preview or
    # reset-db finds the seed's files copied already (runtime/seed_spares.py); they count against SEED_CACHE_GB.
    seed_spares: int = Field(default=1, ge=0, le=4)
    # Which pull requests get a preview. Drafts: skipped unless PREVIEW_DRAFTS=true (`ready_for_review` deploys);
    # `converted_to_draft` removes the preview, or keeps it with PREVIEW_DRAFT_CONVERTED=keep.
    preview_drafts: bool = False
    preview_draft_converted: Literal["remove", "keep"] = "remove"
    # Only pull requests carrying this label get a preview (`labeled` deploys, `unlabeled` removes); empty: all.
    preview_label: str = Field(default="", max_length=50)
    # Where previews are built and run: a runtime a plugin provides (`po_runtimes`); `compose` is built in.
    runtime: str = Field(default="compose", pattern=r"^[a-z][a-z0-9-]{0,30}$")
    # RUNTIME=swarm reads its own SWARM_* settings (orchestrator/runtime/swarm/settings.py).
    codehost_retry_base_seconds: float = Field(default=1.0, ge=0, le=60)
    # Report each deploy through the code host's Deployments API too (the "View deployment" button).
    codehost_deployments: bool = True
    ttl_check_interval_seconds: float = Field(default=3600.0, gt=0)
    # Level-triggered against the code host: at start-up and this often the open pull requests of every allowed
    # repository are compared with the previews, and what no webhook said is corrected (0: off).
    reconcile_interval_minutes: float = Field(default=10.0, ge=0, le=1440)
    # How long the delivery log (GET /api/deliveries) keeps each webhook received, with the event to replay.
    delivery_log_days: float = Field(default=14.0, gt=0, le=365)
    # A cleanup that left something behind (a swarm node down) keeps its record and is tried again this often.
    cleanup_retry_interval_seconds: float = Field(default=300.0, gt=0)
    # How often running previews are checked with the runtime for a loss it can see (a swarm node that left).
    runtime_watch_interval_seconds: float = Field(default=30.0, gt=0)
    # Sleep (docs/routing.md): a running preview no request reached through nginx for this many minutes has its
    # containers stopped (data, ports and route kept); the next request wakes it. 0: previews never sleep (the
    # spec's behaviour). At most a week: longer is what CLEANUP_TTL_DAYS is for.
    preview_idle_minutes: int = Field(default=0, ge=0, le=MAX_IDLE_MINUTES)
    # The same in seconds, winning over PREVIEW_IDLE_MINUTES: for tests and benchmarks, not for operators.
    preview_idle_seconds: float | None = Field(default=None, gt=0, le=MAX_IDLE_MINUTES * 60)
    # How often running previews are looked at for idleness.
    sleep_check_interval_seconds: float = Field(default=60.0, gt=0, le=3600)

    @field_validator("allowed_clone_protocols", mode="before")
    @classmethod
    def _protocols(cls, value: Any) -> tuple[str, ...]:
        if isinstance(value, str):
            value = [part.strip().lower() for part in value.split(",") if part.strip()]
        protocols = tuple(value)
        for protocol in protocols:
            if protocol not in ("https", "http", "ssh", "git", "file"):
                raise ValueError(f"{protocol!r} is not one of https, http, ssh, git, file")
        return protocols

    @field_validator("event_handler")
    @classmethod
    def _handler(cls, value: str) -> str:
        """The default as earlier versions spelled it, which an operator may have written down, is the default."""
        old = ("orchestrator.engine:DeployEngine", "orchestrator.flows:DeployEngine")
        return "orchestrator.flows:build_engine" if value in old else value

    @field_validator("proxy_test_command", "proxy_reload_command")
    @classmethod
    def _command(cls, value: str) -> str:
        if not shlex.split(value):
            raise ValueError("must name a program")
        return value

    @field_validator("allowed_repos", "base_previews", mode="before")
    @classmethod
    def _split_repos(cls, value: Any) -> tuple[str, ...]:
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",") if part.strip()]
        repos = tuple(value)
        for repo in repos:
            prefixed = HOST_PREFIX.match(repo)
            if not (HOSTED_REPO_PATTERN.match(repo[prefixed.end():]) if prefixed else REPO_PATTERN.match(repo)):
                raise ValueError(f"entry {repo!r} is not of the form owner/repo (or host:owner/repo)")
        return repos

    @field_validator("log_level", "node_env", "webhook_processing", "build_commands_mode", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("codehost_webhook_secret")
    @classmethod
    def _secret_not_empty(cls, value: SecretStr) -> SecretStr:
        if not value.get_secret_value().strip():
            raise ValueError("must not be empty")
        return value

    @model_validator(mode="after")
    def _bases_allowed(self) -> Settings:
        if outside := sorted(set(_entries(self.base_previews)) - set(_entries(self.allowed_repos))):
            raise ValueError(f"BASE_PREVIEWS names {', '.join(f'{h}:{r}' for h, r in outside)}, not in ALLOWED_REPOS")
        return self

    @model_validator(mode="after")
    def _github_app(self) -> Settings:
        if (self.github_app_id is None) != (self.github_app_private_key_file is None):
            raise ValueError("GITHUB_APP_ID and GITHUB_APP_PRIVATE_KEY_FILE are set together, or neither")
        key = self.github_app_private_key_file
        if key is not None and (not key.is_file() or not os.access(key, os.R_OK)):
            raise ValueError(f"GITHUB_APP_PRIVATE_KEY_FILE {key} is not a file this service can read")
        return self

    @field_validator("preview_base_url", "orchestrator_public_url", "codehost_api_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        return http_url(value)

    # Derived values -----------------------------------------------------------------------

    @property
    def state_dir(self) -> Path:
        """The directory of the tracking store: the inbox and the service's own keys live there too."""
        return self.deployments_db.parent

    @property
    def snapshots_path(self) -> Path:
        """Where the operator keeps snapshots a repository's `seed` may name (one directory per project slug)."""
        return self.snapshots_dir or self.state_dir / "snapshots"

    @property
    def db_password_key_path(self) -> Path:
        return self.state_dir / "db-password.key"

    @property
    def inbox_path(self) -> Path:
        """The inbox lives beside the tracking store unless INBOX_DB says otherwise."""
        return self.inbox_db or self.deployments_db.with_name("inbox.sqlite3")

    @property
    def idle_seconds(self) -> float:
        """After how long without a request a preview sleeps; 0: never (PREVIEW_IDLE_SECONDS, else _MINUTES)."""
        if self.preview_idle_seconds is not None:
            return self.preview_idle_seconds
        return self.preview_idle_minutes * 60.0

    @property
    def preview_wake_key_path(self) -> Path:
        """The key of the wake locations' header (wake_key): only nginx's own wake request may wake a preview."""
        return self.state_dir / "preview-wake.key"

    @property
    def preview_token_key_path(self) -> Path:
        """PREVIEW_PROTECTION=token: the key that signs the links of the pull-request comments (0600)."""
        return self.state_dir / "preview-token.key"

    @property
    def api_server_url(self) -> str | None:
        """`servers[].url` of the API description: public URL, then preview base URL, else none."""
        return self.orchestrator_public_url or self.preview_base_url

    @property
    def allowed_repos_folded(self) -> frozenset[str]:
        """GitHub's allowed repositories (the entries without a host prefix), lower case."""
        return self.allowed_for(DEFAULT_CODEHOST)

    def allowed_for(self, codehost: str) -> frozenset[str]:
        """The allowed repositories of one code host, `owner/repo` lower case: `{codehost}:owner/repo` entries,
        and for GitHub the entries without a prefix (the spec's form)."""
        return frozenset(repo for host, repo in _entries(self.allowed_repos) if host == codehost)

    def base_for(self, codehost: str) -> frozenset[str]:
        """BASE_PREVIEWS of one code host, as `allowed_for` gives ALLOWED_REPOS."""
        return frozenset(repo for host, repo in _entries(self.base_previews) if host == codehost)

    @property
    def allowed_codehosts(self) -> frozenset[str]:
        """The code hosts ALLOWED_REPOS names (GitHub for the entries without a prefix)."""
        return frozenset(host for host, _ in _entries(self.allowed_repos))

    def secret_values(self) -> list[str]:
        return [
            s.get_secret_value()
            for s in (self.codehost_token, self.codehost_webhook_secret)
            if s.get_secret_value()
        ]


def _entries(repositories: tuple[str, ...]) -> list[tuple[str, str]]:
    """Each ALLOWED_REPOS (BASE_PREVIEWS) entry as (code host, `owner/repo` lower case)."""
    return [repository_entry(entry) for entry in repositories]
