"""`preview-config.yml`: the spec's fields and messages, checked before any value reaches a file or command."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from orchestrator.common.checkout_paths import inside
from orchestrator.common.safe_yaml import YamlRejected, load_untrusted_yaml
from orchestrator.plugin_api.preview_links import LinkConfig

CONFIG_FILE = "preview-config.yml"
MISSING_MESSAGE = "preview-config.yml is required at repository root but was not found"
VARIABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")  # tab allowed, newlines and NUL are not
MAX_LIST = 50
MAX_TEXT = 4096
# An operator's snapshot: a file name under SNAPSHOTS_DIR/{projectSlug}/, never a path.
HEALTH_PATH = re.compile(r"^/[\x21-\x7e]{0,2047}$")  # a path probed over HTTP: no spaces, no control characters
SNAPSHOT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class ConfigError(Exception):
    """preview-config.yml is missing or invalid; `problems` lists every message."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class KnownNames:
    """What the loaded plugins provide; the only valid framework, database and service names."""

    frameworks: frozenset[str]
    databases: frozenset[str]
    services: frozenset[str]
    detected: str | None = None
    extra: dict[str, str] = field(default_factory=dict)


def _single_line(value: str) -> str:
    if _CONTROL.search(value):
        raise ValueError("must be one line without control characters")
    return value


def _relative_path(value: str) -> str:
    _single_line(value)
    path = PurePosixPath(value)
    if not value or path.is_absolute() or ".." in path.parts or "\\" in value:
        raise ValueError("must be a relative path inside the repository")
    return value


def _checked_commands(value: list[str]) -> list[str]:
    for command in value:
        if "\x00" in command or len(command) > MAX_TEXT or not command.strip():
            raise ValueError("each command must be non-empty text without NUL")
    return value


class SeedConfig(BaseModel):
    """`seed`: the data every preview's database starts from — a dump in the repository (`file`) or one the
    operator keeps (`snapshot`), and `commands` run once against it before it is frozen (docs/plugins.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    file: str | None = Field(default=None, max_length=1024)
    snapshot: str | None = Field(default=None, max_length=128)
    commands: list[str] = Field(default_factory=list, max_length=MAX_LIST)

    @field_validator("file")
    @classmethod
    def _file(cls, value: str | None) -> str | None:
        return None if value is None else _relative_path(value)

    @field_validator("snapshot")
    @classmethod
    def _snapshot(cls, value: str | None) -> str | None:
        if value is not None and (not SNAPSHOT_NAME.match(value) or ".." in value):
            raise ValueError("must be a file name (letters, digits, . _ -), not a path")
        return value

    @field_validator("commands")
    @classmethod
    def _commands(cls, value: list[str]) -> list[str]:
        return _checked_commands(value)

    @model_validator(mode="after")
    def _one_source(self) -> SeedConfig:
        if (self.file is None) == (self.snapshot is None):
            raise ValueError("needs exactly one of `file` (a dump in the repository) and `snapshot`")
        return self

    @property
    def source(self) -> str:
        """`file:` or `snapshot:` and the name, as comments and listings show it."""
        return f"file {self.file}" if self.file is not None else f"snapshot {self.snapshot}"


class PreviewConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    framework: str
    database: str
    health_check_path: str = Field(max_length=2048)
    app_port: int = Field(ge=1, le=65535)
    app_port_env: str
    app_entrypoint: str = Field(min_length=1, max_length=MAX_TEXT)
    build_commands: list[str] = Field(default_factory=list, max_length=MAX_LIST)
    extra_services: list[str] = Field(default_factory=list, max_length=MAX_LIST)
    env: list[str] = Field(default_factory=list, max_length=200)
    env_file: str | None = Field(default=None, max_length=1024)
    startup_commands: list[str] = Field(default_factory=list, max_length=MAX_LIST)
    dockerfile: str | None = Field(default=None, max_length=1024)
    seed: SeedConfig | None = None
    links: list[LinkConfig] = Field(default_factory=list, max_length=10)

    @field_validator("framework")
    @classmethod
    def _framework(cls, value: str, info: ValidationInfo) -> str:
        known = _known(info)
        if known and value not in known.frameworks:
            raise ValueError(f"must be one of {', '.join(sorted(known.frameworks))}")
        return value

    @field_validator("database")
    @classmethod
    def _database(cls, value: str, info: ValidationInfo) -> str:
        known = _known(info)
        if known and value not in known.databases:
            raise ValueError(f"must be one of {', '.join(sorted(known.databases))}")
        return value

    @field_validator("extra_services")
    @classmethod
    def _services(cls, value: list[str], info: ValidationInfo) -> list[str]:
        known = _known(info)
        for name in value:
            if known and name in known.databases:
                raise ValueError(f"{name} is a database; choose it with `database`, not as an extra service")
            if known and name not in known.services:
                raise ValueError(f"unknown service {name[:40]!r}; known: {', '.join(sorted(known.services))}")
        if len(set(value)) != len(value):
            raise ValueError("lists a service twice")
        return value

    @field_validator("health_check_path")
    @classmethod
    def _health_path(cls, value: str) -> str:
        if not HEALTH_PATH.fullmatch(value):
            raise ValueError("must start with / and contain no spaces")
        return value

    @field_validator("app_port_env")
    @classmethod
    def _port_env(cls, value: str) -> str:
        if not VARIABLE_NAME.match(value):
            raise ValueError("must be a variable name (letters, digits, _)")
        return value

    @field_validator("app_entrypoint")
    @classmethod
    def _entrypoint(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        return _single_line(value)

    @field_validator("build_commands", "startup_commands")
    @classmethod
    def _commands(cls, value: list[str]) -> list[str]:
        return _checked_commands(value)

    @field_validator("env")
    @classmethod
    def _env(cls, value: list[str]) -> list[str]:
        for entry in value:
            name, sep, rest = entry.partition("=")
            if not sep or not VARIABLE_NAME.match(name):
                raise ValueError("entries must be NAME=value with NAME a variable name")
            _single_line(rest)
        return value

    @field_validator("links")
    @classmethod
    def _links(cls, value: list[LinkConfig]) -> list[LinkConfig]:
        if len({link.name for link in value}) != len(value):
            raise ValueError("two links share one `as`")
        return value

    @field_validator("env_file", "dockerfile")
    @classmethod
    def _paths(cls, value: str | None) -> str | None:
        return None if value is None else _relative_path(value)

    @property
    def env_map(self) -> dict[str, str]:
        return dict(entry.split("=", 1) for entry in self.env)


def _known(info: ValidationInfo) -> KnownNames | None:
    context = info.context or {}
    known = context.get("known")
    return known if isinstance(known, KnownNames) else None


def parse_preview_config(document: Any, known: KnownNames) -> PreviewConfig:
    """Validate an already-parsed document, reporting every problem with the spec's wording."""
    if not isinstance(document, dict):
        raise ConfigError([f"{CONFIG_FILE} must be a mapping of fields"])
    try:
        return PreviewConfig.model_validate(document, context={"known": known})
    except ValidationError as exc:
        raise ConfigError(_problems(exc, known)) from None


def _problems(exc: ValidationError, known: KnownNames) -> list[str]:
    problems: list[str] = []
    for error in exc.errors(include_input=False, include_url=False):
        loc = error["loc"]
        # `seed.file`, not `seed`: the nested section's field (list indexes are left out)
        name = ".".join(str(part) for part in loc if isinstance(part, str)) if loc else CONFIG_FILE
        if error["type"] == "missing":
            message = f"{name} is required"
            if name == "framework" and known.detected:
                message += f" (detected: {known.detected}; add `framework: {known.detected}`)"
        elif error["type"] == "extra_forbidden":
            message = f"{name[:60]} is not a known field"
        else:
            reason = error["msg"].removeprefix("Value error, ")
            message = f"{name} is not valid ({reason})"
        if message not in problems:
            problems.append(message)
    return problems


def read_config_file(repo_dir: Path) -> Any:
    """The parsed YAML of `repo_dir/preview-config.yml`, refusing links that leave the repository."""
    path = repo_dir / CONFIG_FILE
    if not path.is_file():
        raise ConfigError([MISSING_MESSAGE])
    ensure_inside(repo_dir, path, CONFIG_FILE)
    try:
        return load_untrusted_yaml(path.read_bytes(), CONFIG_FILE)
    except YamlRejected as exc:
        raise ConfigError([str(exc)]) from None


def ensure_inside(repo_dir: Path, path: Path, label: str) -> None:
    """Refuse a path that resolves (through symlinks) outside the repository."""
    if not inside(repo_dir, path):
        raise ConfigError([f"{label} is not valid (points outside the repository)"])


def load_preview_config(repo_dir: Path, known: KnownNames) -> PreviewConfig:
    config = parse_preview_config(read_config_file(repo_dir), known)
    problems = []
    seed_file = config.seed.file if config.seed is not None else None
    for label, value in (("env_file", config.env_file), ("dockerfile", config.dockerfile), ("seed.file", seed_file)):
        if value is None:
            continue
        target = repo_dir / value
        try:
            ensure_inside(repo_dir, target, label)
        except ConfigError as exc:
            problems.extend(exc.problems)
            continue
        if not target.is_file():
            problems.append(f"{label} is not valid ({value} does not exist in the repository)")
    if problems:
        raise ConfigError(problems)
    return config
