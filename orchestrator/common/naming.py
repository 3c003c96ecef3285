"""Names derived from untrusted repository data, validated before they reach paths, configs or commands."""

from __future__ import annotations

import hashlib
import re

# A segment of an owner: GitHub's owners are alphanumerics and hyphens; Gitea's and GitLab's add `.` and `_`, and
# GitLab's owner is a group path (`group/subgroup`, MAX_OWNER_SEGMENTS deep). Repositories add `.` and `_`.
OWNER_SEGMENT = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,99})$")
MAX_OWNER_SEGMENTS = 20
REPO_NAME_PATTERN = re.compile(r"^[A-Za-z0-9._-]{1,100}$")
MAX_SLUG = 140  # GitHub's longest owner-repo; compose names and host labels are derived from it
SHA_PATTERN = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")
# A deployment id is a lowercase slug, a hyphen and a pull-request number without leading zeros, or `base` for the
# standing preview of the default branch (BASE_PREVIEWS): a pull request's id ends in a digit, a base's never.
DEPLOYMENT_ID_PATTERN = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,160})-(?:[1-9][0-9]{0,9}|base)$")
# The number a base preview carries where a pull request's goes (records, events, port allocation): no pull
# request has it, and every name made from it says `base` (preview_segment).
BASE = 0
MAX_BRANCH_LENGTH = 255
_BRANCH_FORBIDDEN = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]")


def project_slug(owner: str, repo: str) -> str:
    """`owner-repo` in lower case, with `.`, `_` and a group path's `/` turned into `-` (`group/sub` and `app`:
    `group-sub-app`).

    Compose project names and container names must be lower case, and the slug lands in URL paths,
    file names and nginx config, so it is kept to `[a-z0-9-]`.
    """
    segments = owner.split("/")
    if (len(segments) > MAX_OWNER_SEGMENTS or not all(OWNER_SEGMENT.match(segment) for segment in segments)
            or not REPO_NAME_PATTERN.match(repo)):
        raise ValueError(f"repository {owner[:200]}/{repo[:100]} has a name the service cannot use")
    slug = "-".join([*segments, repo]).lower().replace(".", "-").replace("_", "-")
    slug = re.sub(r"-{2,}", "-", slug).strip("-")
    if not slug or len(slug) > MAX_SLUG:
        raise ValueError(f"repository {owner[:200]}/{repo[:100]} has a name longer than the service can use")
    return slug


# The code host of every pull request until code hosts are plugins; with `local` (`preview-orchestrator up`), the
# first part of a repository's identity.
CODEHOST = "github"


# ALLOWED_REPOS', BASE_PREVIEWS' and preview-config.yml links' form for another code host: `host:owner/repo`
HOST_PREFIX = re.compile(r"^([a-z][a-z0-9-]{0,30}):")


def repository_entry(entry: str) -> tuple[str, str]:
    """An `owner/repo` or `host:owner/repo` entry as (code host, `owner/repo` lower case); GitHub's without a
    prefix (the spec's form)."""
    match = HOST_PREFIX.match(entry)
    return (match[1], entry[match.end():].lower()) if match else (CODEHOST, entry.lower())


def repository_identity(host: str, owner: str, repo: str) -> str:
    """`{host}/{owner}/{repo}` in lower case: what tells two repositories apart where their slugs do not
    (`acme/web-app` and `acme-web/app` share `acme-web-app`). Everything keyed by a preview's identity (mirrors,
    build caches, tokens, wake keys) is keyed by this and the pull request, never by the slug alone."""
    return f"{host}/{owner}/{repo}".lower()


def preview_subject(repository: str, deployment_id: str) -> str:
    """One preview of one repository: what its tokens and wake key are signed for."""
    return f"{repository}#{deployment_id}"


def mirror_name(slug: str, repository: str) -> str:
    """The git mirror of a repository: its slug for the operator's eye, and a digest of its identity so that
    two repositories sharing a slug never share a mirror."""
    return f"{slug}-{hashlib.sha256(repository.encode()).hexdigest()[:12]}"


def deployment_id(slug: str, pr_number: int) -> str:
    return f"{slug}-{'base' if pr_number == BASE else pr_number}"


def preview_segment(pr: int) -> str:
    """What a preview is called under its repository: `pr-{N}`, or `base` (paths, files, host labels, routes)."""
    return "base" if pr == BASE else f"pr-{pr}"


def preview_name(slug: str, pr: int) -> str:
    """`{slug}-pr-{N}` or `{slug}-base`: the preview's files in PROXY_CONFIG_DIR, its containers' names."""
    return f"{slug}-{preview_segment(pr)}"


def parse_deployment_id(value: str) -> tuple[str, int]:
    """A valid deployment id's slug and number (BASE for `{slug}-base`); ValueError for anything else."""
    if not is_valid_deployment_id(value):
        raise ValueError(f"{value[:200]!r} is not a deployment id")
    slug, _, last = value.rpartition("-")
    return slug, BASE if last == "base" else int(last)


def is_valid_deployment_id(value: str) -> bool:
    return bool(DEPLOYMENT_ID_PATTERN.match(value))


def branch_problem(ref: str) -> str | None:
    """Why `ref` is not a branch name git would accept (git check-ref-format rules), or None."""
    if not ref:
        return "is empty"
    if len(ref.encode("utf-8")) > MAX_BRANCH_LENGTH:
        return f"is longer than {MAX_BRANCH_LENGTH} bytes"
    if _BRANCH_FORBIDDEN.search(ref):
        return "contains a space, a control character or one of ~^:?*[\\"
    if ref.startswith(("-", "/", ".")) or ref.endswith(("/", ".", ".lock")):
        return "starts or ends with a character git does not allow there"
    if ".." in ref or "@{" in ref or "//" in ref or "/." in ref or ref == "@":
        return "contains a sequence git does not allow (.., @{, //, /.)"
    return None


DNS_LABEL_MAX = 63
_SLUG = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")  # project_slug's output: never `--`, never an edge hyphen


def preview_host_label(slug: str, pr: int, room: int = DNS_LABEL_MAX) -> str:
    """The DNS label of a preview under host routing: `{slug}-pr-{N}` (or `{slug}-base`) when it fits 63 characters
    (`room`); else the slug's start, `--`, 16 hex digits of the slug's SHA-256, `-pr-{N}` (`-base`). A slug never
    holds `--`, so a shortened label cannot equal a full one, and two different slugs differ in the hash (2^64
    values); a pull request's label ends in a digit, a base's never."""
    if not _SLUG.match(slug) or pr < BASE:
        raise ValueError(f"{slug!r} / {pr} cannot make a host name")
    label = preview_name(slug, pr)
    if len(label) <= room:
        return label
    tail = f"--{hashlib.sha256(slug.encode()).hexdigest()[:16]}-{preview_segment(pr)}"
    return slug[: room - len(tail)].rstrip("-") + tail


# A routed service's name (compose `x-preview: {route: NAME}`): in its path, its host label, its variable's name.
# No hyphen: `{NAME}--{label}` then splits at its first `--` into one name and one preview's label, so a routed
# service's host never equals another preview's or another route's (a shortened label's start is 30 characters or more).
ROUTE_NAME = re.compile(r"^[a-z][a-z0-9]{0,15}$")


def route_host_label(route: str, slug: str, pr: int) -> str:
    """The DNS label of a preview's routed service: `{route}--{preview_host_label}`, that label shortened to fit."""
    if not ROUTE_NAME.fullmatch(route):
        raise ValueError(f"{route!r} cannot name a route")
    return f"{route}--{preview_host_label(slug, pr, DNS_LABEL_MAX - len(route) - 2)}"
