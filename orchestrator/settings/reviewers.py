"""What reviewers meet (docs/routing.md, docs/security.md): how previews are routed and protected, the URL a
comment gives, and the checks that refuse at start-up every combination of these settings that cannot work."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal, Self

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings

from orchestrator.common.naming import DNS_LABEL_MAX, preview_host_label, preview_segment, route_host_label
from orchestrator.settings.source import ENV_SOURCE


class ReviewerSettings(BaseSettings):
    """The routing and protection variables; part of `Settings`."""

    model_config = ENV_SOURCE

    preview_base_url: str | None = None
    # `preview-orchestrator setup-nginx`: the port of the site it installs when no server includes
    # PROXY_CONFIG_DIR yet; with host routing, the port of the previews' URLs too.
    proxy_listen_port: int = Field(default=80, ge=1, le=65535)
    # `path`: {PREVIEW_BASE_URL}/{slug}/pr-{N}/ (the spec's route); `host`: {slug}-pr-{N}.{PREVIEW_DOMAIN}, one
    # nginx server per preview (wildcard DNS).
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

    @model_validator(mode="after")
    def _routing_and_protection(self) -> Self:
        # A setting that silently did nothing would leave previews open: every combination that cannot work is
        # refused at start-up, naming the variables (never their values).
        problems = routing_problems(self)
        if problems:
            raise ValueError("\n".join(problems))
        return self

    def preview_url(self, slug: str, pr: int, route: str | None = None) -> str:
        """The URL in comments and records: `{PREVIEW_BASE_URL}/{projectSlug}/pr-{N}/` (path routing), or
        `http(s)://{slug}-pr-{N}.{PREVIEW_DOMAIN}[:port]/` (host routing; https with PREVIEW_TLS_CERT). `route`: a
        routed service's (`…/pr-{N}/{route}/`, or the host `{route}--{label}`)."""
        if self.preview_routing == "host":
            tls = self.preview_tls_cert is not None
            port, default = (self.preview_tls_port, 443) if tls else (self.proxy_listen_port, 80)
            shown = "" if port == default else f":{port}"
            return f"{'https' if tls else 'http'}://{self.preview_host(slug, pr, route)}{shown}/"
        under = f"{slug}/{preview_segment(pr)}/{route + '/' if route else ''}"
        return f"{self.preview_base_url or 'http://localhost'}/{under}"

    def preview_host(self, slug: str, pr: int, route: str | None = None) -> str:
        """Host routing: the preview's own host name, `{label}.{PREVIEW_DOMAIN}` (preview_host_label), or a routed
        service's (route_host_label)."""
        label = route_host_label(route, slug, pr) if route else preview_host_label(slug, pr)
        return f"{label}.{self.preview_domain or 'localhost'}"


MAX_HOST_NAME = 238  # what server_names_hash_bucket_size 256 holds (setup-nginx's site sets it)
# Characters a path may have where it is written into nginx's configuration unquoted.
_NGINX_PATH = re.compile(r"^/[A-Za-z0-9._/@+-]+$")
_USER = re.compile(r"^[A-Za-z0-9._@-]{1,64}$")


def protection_users(value: str) -> list[tuple[str, str]]:
    """PREVIEW_PROTECTION_USERS, `user:password,user2:password2`, as pairs; ValueError names the entry by its
    position, never its text."""
    pairs: list[tuple[str, str]] = []
    for position, entry in enumerate((part.strip() for part in value.split(",")), start=1):
        user, sep, password = entry.partition(":")
        if not sep or not _USER.match(user) or not password or any(c in password for c in "\r\n\0"):
            raise ValueError(f"PREVIEW_PROTECTION_USERS is not valid: entry {position} is not user:password "
                             "(user of letters, digits and ._@-; a password without line breaks)")
        pairs.append((user, password))
    if len({user for user, _ in pairs}) != len(pairs):
        raise ValueError("PREVIEW_PROTECTION_USERS is not valid: a user is listed twice")
    return pairs


def routing_problems(settings: ReviewerSettings) -> list[str]:
    """One sentence per combination of PREVIEW_ROUTING, PREVIEW_TLS_* and PREVIEW_PROTECTION* that cannot work."""
    problems: list[str] = []
    if settings.preview_routing == "host" and not settings.preview_domain:
        problems.append("PREVIEW_DOMAIN is required when PREVIEW_ROUTING=host (previews are served at "
                        "{slug}-pr-{N}.{PREVIEW_DOMAIN}; a wildcard DNS record must point there)")
    elif settings.preview_domain and len(settings.preview_domain) > MAX_HOST_NAME - DNS_LABEL_MAX - 1:
        problems.append(f"PREVIEW_DOMAIN is too long: at most {MAX_HOST_NAME - DNS_LABEL_MAX - 1} characters (a "
                        f"preview's label takes up to {DNS_LABEL_MAX + 1} more, and nginx's server names hash "
                        f"holds names up to {MAX_HOST_NAME})")
    cert, key = settings.preview_tls_cert, settings.preview_tls_key
    if (cert is None) != (key is None):
        problems.append("PREVIEW_TLS_CERT and PREVIEW_TLS_KEY go together: set both or neither")
    if cert is not None and settings.preview_routing != "host":
        problems.append("PREVIEW_TLS_CERT is for PREVIEW_ROUTING=host (with path routing, TLS is the site's: "
                        "configure it in the nginx server that includes PROXY_CONFIG_DIR)")
    for name, path in (("PREVIEW_TLS_CERT", cert), ("PREVIEW_TLS_KEY", key),
                       ("PREVIEW_PROTECTION_USERS_FILE", settings.preview_protection_users_file)):
        if path is None:
            continue
        if not _NGINX_PATH.match(str(path)):
            problems.append(f"{name} must be an absolute path of letters, digits and ._/@+- (it is written into "
                            "nginx's configuration)")
        elif not path.is_file():
            problems.append(f"{name} names no file")
    users = settings.preview_protection_users.get_secret_value().strip()
    users_file = settings.preview_protection_users_file
    if settings.preview_protection == "basic":
        if bool(users) == (users_file is not None):
            problems.append("PREVIEW_PROTECTION=basic needs exactly one of PREVIEW_PROTECTION_USERS "
                            "(user:password,...) and PREVIEW_PROTECTION_USERS_FILE (an htpasswd file)")
        elif users:
            try:
                protection_users(users)
            except ValueError as exc:
                problems.append(str(exc))
    elif users or users_file is not None:
        problems.append("PREVIEW_PROTECTION_USERS and PREVIEW_PROTECTION_USERS_FILE are for "
                        "PREVIEW_PROTECTION=basic; set it, or remove them (they would protect nothing)")
    return problems
