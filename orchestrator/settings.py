"""Service settings: read from the environment and from `.env` in the working directory."""

from __future__ import annotations

import re
import secrets
import shlex
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, ValidationError, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from orchestrator.common.secret_files import read_or_create

REPO_PATTERN = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}$")

IMAGE_PATTERN = re.compile(r"^[a-z0-9][a-z0-9._/:@-]{0,254}$")

# Variables whose values must never be echoed, even in an error about themselves.
SECRET_VARIABLES = frozenset({"CODEHOST_TOKEN", "CODEHOST_WEBHOOK_SECRET"})


class SettingsError(Exception):
    """Start-up configuration is invalid; `lines` has one human sentence per bad variable."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = lines


class PluginSettings(BaseSettings):
    """The settings plugins and rendering need; the CLI's render/validate/plugins use only these."""

    model_config = SettingsConfigDict(
        env_file=".env", env_file_encoding="utf-8", extra="ignore", case_sensitive=False
    )

    # `from=to,from=to`: swap images of built-in templates (a registry mirror, or local stand-ins).
    image_overrides: Annotated[dict[str, str], NoDecode] = Field(default_factory=dict)
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


class Settings(PluginSettings):
    """Every variable of the spec's table plus the service's own; field name = variable name, lower case."""

    codehost_token: SecretStr = SecretStr("")
    codehost_webhook_secret: SecretStr
    allowed_repos: Annotated[tuple[str, ...], NoDecode] = ()
    preview_base_url: str | None = None
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
    webhook_processing: Literal["queue", "sync"] = "queue"
    max_concurrent_builds: int = Field(default=2, ge=1, le=64)
    # Import path `module:callable` returning the event handler (tests and embedders swap it).
    event_handler: str = "orchestrator.flows:DeployEngine"
    # Pull requests whose head repository is not the base repository run code from outside the team.
    allow_fork_prs: bool = False
    health_check_interval_seconds: float = Field(default=5.0, gt=0, le=600)
    health_check_timeout_seconds: float = Field(default=60.0, gt=0, le=3600)
    proxy_test_command: str = "nginx -t"
    proxy_reload_command: str = "nginx -s reload"
    # `preview-orchestrator setup-nginx`: the site it installs when no server includes PROXY_CONFIG_DIR yet.
    proxy_listen_port: int = Field(default=80, ge=1, le=65535)
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
    # What reviewers meet (docs/routing.md, docs/security.md). `path`: {PREVIEW_BASE_URL}/{slug}/pr-{N}/ (the
    # spec's route); `host`: {slug}-pr-{N}.{PREVIEW_DOMAIN}, one nginx server per preview (wildcard DNS).
    preview_routing: Literal["path", "host"] = "path"
    preview_domain: str | None = Field(default=None, max_length=200,
                                       pattern=r"^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
    # A wildcard certificate for *.{PREVIEW_DOMAIN} (host routing): HTTPS on PREVIEW_TLS_PORT, HTTP redirected.
    preview_tls_cert: Path | None = None
    preview_tls_key: Path | None = None
    preview_tls_port: int = Field(default=443, ge=1, le=65535)
    # Who may open a preview: `none` (the spec), `basic` (HTTP basic authentication, PREVIEW_PROTECTION_USERS
    # `user:password,...` or an htpasswd file PREVIEW_PROTECTION_USERS_FILE), `token` (a signed, expiring link in
    # the pull-request comment sets a cookie for that preview only). Recommended: basic or token.
    preview_protection: Literal["none", "basic", "token"] = "none"
    preview_protection_users: SecretStr = SecretStr("")
    preview_protection_users_file: Path | None = None
    preview_token_ttl_hours: float = Field(default=168.0, gt=0, le=24 * 365)
    # Which pull requests get a preview. Drafts: skipped unless PREVIEW_DRAFTS=true (`ready_for_review` deploys);
    # `converted_to_draft` removes the preview, or keeps it with PREVIEW_DRAFT_CONVERTED=keep.
    preview_drafts: bool = False
    preview_draft_converted: Literal["remove", "keep"] = "remove"
    # Only pull requests carrying this label get a preview (`labeled` deploys, `unlabeled` removes); empty: all.
    preview_label: str = Field(default="", max_length=50)
    # Where previews are built and run: a runtime a plugin provides (`po_runtimes`); `compose` is built in.
    runtime: str = Field(default="compose", pattern=r"^[a-z][a-z0-9-]{0,30}$")
    # RUNTIME=swarm (docs/scaling.md): the registry every node pulls from (`host[:port][/namespace]`), the scheme
    # of its HTTP API (tag deletion), and the Docker engines of the nodes (`hostname=docker-host,...`): only a
    # node's own engine removes its volumes and the images it pulled.
    swarm_registry: str = Field(default="", validate_default=True, max_length=200,
                                pattern=r"^([a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]{1,5})?(/[a-z0-9._-]+)*)?$")
    swarm_registry_scheme: Literal["https", "http"] = "https"
    swarm_node_engines: Annotated[dict[str, str], NoDecode] = Field(default_factory=dict)
    codehost_retry_base_seconds: float = Field(default=1.0, ge=0, le=60)
    # Report each deploy through the code host's Deployments API too (the "View deployment" button).
    codehost_deployments: bool = True
    ttl_check_interval_seconds: float = Field(default=3600.0, gt=0)
    # How often running previews are checked with the runtime for a loss it can see (a swarm node that left).
    runtime_watch_interval_seconds: float = Field(default=30.0, gt=0)

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

    @field_validator("swarm_registry")
    @classmethod
    def _registry_for_swarm(cls, value: str, info: ValidationInfo) -> str:
        if info.data.get("runtime") == "swarm" and not value:
            raise ValueError("must be set when RUNTIME=swarm (host:port of a registry every node can pull from)")
        return value

    @field_validator("swarm_node_engines", mode="before")
    @classmethod
    def _engines(cls, value: Any) -> dict[str, str]:
        if isinstance(value, dict):
            return value
        engines: dict[str, str] = {}
        for pair in str(value or "").split(","):
            node, sep, host = pair.strip().partition("=")
            if not pair.strip():
                continue
            if not sep or not re.match(r"^[A-Za-z0-9][A-Za-z0-9.-]{0,62}$", node) or not re.match(
                    r"^(unix|tcp|ssh)://\S+$", host):
                raise ValueError(f"entry {pair.strip()[:80]!r} is not of the form hostname=unix://|tcp://|ssh://...")
            engines[node] = host
        return engines

    @field_validator("proxy_test_command", "proxy_reload_command")
    @classmethod
    def _command(cls, value: str) -> str:
        if not shlex.split(value):
            raise ValueError("must name a program")
        return value

    @field_validator("allowed_repos", mode="before")
    @classmethod
    def _split_repos(cls, value: Any) -> tuple[str, ...]:
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",") if part.strip()]
        repos = tuple(value)
        for repo in repos:
            if not REPO_PATTERN.match(repo):
                raise ValueError(f"entry {repo!r} is not of the form owner/repo")
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

    @field_validator("preview_routing", "preview_protection")
    @classmethod
    def _built_yet(cls, value: str) -> str:
        # Accepted only once it works: a setting that silently did nothing would leave previews open.
        if value in ("host", "basic", "token"):
            raise ValueError(f"{value!r} is not available in this release (docs/routing.md)")
        return value

    @field_validator("preview_base_url", "orchestrator_public_url", "codehost_api_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value in (None, ""):
            return None
        if not re.match(r"^https?://[^\s/]+", value):
            raise ValueError("must be an http:// or https:// URL")
        return value.rstrip("/")

    # Derived values -----------------------------------------------------------------------

    @property
    def state_dir(self) -> Path:
        """The directory of the tracking store: the inbox and the service's own keys live there too."""
        return self.deployments_db.parent

    @property
    def db_password_key_path(self) -> Path:
        return self.state_dir / "db-password.key"

    @property
    def inbox_path(self) -> Path:
        """The inbox lives beside the tracking store unless INBOX_DB says otherwise."""
        return self.inbox_db or self.deployments_db.with_name("inbox.sqlite3")

    def preview_url(self, slug: str, pr: int) -> str:
        """`{PREVIEW_BASE_URL}/{projectSlug}/pr-{N}/`, the URL in comments and records."""
        return f"{self.preview_base_url or 'http://localhost'}/{slug}/pr-{pr}/"

    @property
    def api_server_url(self) -> str | None:
        """`servers[].url` of the API description: public URL, then preview base URL, else none."""
        return self.orchestrator_public_url or self.preview_base_url

    @property
    def allowed_repos_folded(self) -> frozenset[str]:
        return frozenset(repo.lower() for repo in self.allowed_repos)

    def secret_values(self) -> list[str]:
        return [
            s.get_secret_value()
            for s in (self.codehost_token, self.codehost_webhook_secret)
            if s.get_secret_value()
        ]


def load_settings(**overrides: Any) -> Settings:
    """Build settings, turning pydantic's report into one line per variable without echoing values."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise SettingsError(_describe(exc)) from None


WEBHOOK_SECRET_MISSING = "CODEHOST_WEBHOOK_SECRET is required but not set"  # noqa: S105 - a message


def load_service_settings() -> tuple[Settings, Path | None]:
    """Settings for `serve`, `doctor` and `setup-nginx`. Without CODEHOST_WEBHOOK_SECRET, a strong one is
    generated on the first start and kept in the state directory (`webhook-secret`, 0600); later starts reuse
    it. Returns the settings and that file when it is the secret's source. Other bad variables are reported
    first, and then nothing is generated."""
    try:
        return load_settings(), None
    except SettingsError as exc:
        others = [line for line in exc.lines if line != WEBHOOK_SECRET_MISSING]
        if others:  # reported alone: the secret is made once the rest is right
            raise SettingsError(others) from None
    # Only the state directory is wanted here; the real secret comes from the file.
    path = load_settings(codehost_webhook_secret="unused").state_dir / "webhook-secret"  # noqa: S106
    secret = read_or_create(path, lambda: secrets.token_hex(32).encode()).decode().strip()
    return load_settings(codehost_webhook_secret=secret), path


def load_plugin_settings(**overrides: Any) -> PluginSettings:
    try:
        return PluginSettings(**overrides)
    except ValidationError as exc:
        raise SettingsError(_describe(exc)) from None


def _describe(exc: ValidationError) -> list[str]:
    lines: list[str] = []
    for error in exc.errors(include_input=False, include_url=False):
        variable = str(error["loc"][0]).upper() if error["loc"] else "SETTINGS"
        if error["type"] == "missing":
            lines.append(f"{variable} is required but not set")
            continue
        message = error["msg"].removeprefix("Value error, ")
        lines.append(f"{variable} is not valid: {message}")
    return lines
