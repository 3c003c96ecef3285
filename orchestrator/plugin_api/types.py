"""The data plugins receive and return. Pydantic models, so a plugin's answer is checked at the boundary."""

from __future__ import annotations

import hmac
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from orchestrator.common.keyed import keyed
from orchestrator.common.naming import CODEHOST, preview_name, repository_identity

NAME_PATTERN = re.compile(r"^[a-z][a-z0-9-]{0,30}$")
CACHE_ID_PREFIX = "po-cache-"  # comments mask every `po-cache-<hex>` (flows/context.py)
_CACHE_TARGET = re.compile(r"^/[A-Za-z0-9._/-]{1,200}$")


class _Spec(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    description: str = ""

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not NAME_PATTERN.match(value):
            raise ValueError("must be lower case letters, digits and hyphens, starting with a letter")
        return value


class FrameworkSpec(_Spec):
    default_port: int = Field(ge=1, le=65535, description="Port the app listens on inside the container")
    default_entrypoint: str = Field(description="A starting app_entrypoint for `preview-orchestrator init`")
    toolchain_image: str = Field(
        default="debian:bookworm-slim",
        description="Image whose tools build_commands run with (BUILD_COMMANDS_MODE=container); IMAGE_OVERRIDES apply",
    )


class DatabaseSpec(_Spec):
    port: int = Field(ge=1, le=65535)
    scheme: str


class ServiceSpec(_Spec):
    app_variables: list[str] = Field(default_factory=list, description="Variables the app gets")


class Detection(BaseModel):
    framework: str
    rank: int = Field(description="Lower wins when several plugins recognise a checkout")
    reason: str = ""


# The service's local namespace of built images: a repository's compose file or Dockerfile may not name it.
BUILT_IMAGES = "po-build"

# A base preview's installed dependencies, kept for its repository's pull requests (RenderContext.base_dependencies):
# the stage of this name in the base preview's injected Dockerfile, when that stage carries this label (what it
# installed from, as the template's plugin identifies it), is tagged after the base preview's build.
DEPENDENCIES_STAGE = "dependencies"
DEPENDENCIES_LABEL = "dev.preview-orchestrator.dependencies"


class BaseDependencies(BaseModel):
    """The `dependencies` stage of the repository's base preview (BASE_PREVIEWS), built from its default branch and
    kept as an image in BUILT_IMAGES, which no repository's file may name."""

    model_config = ConfigDict(frozen=True)

    image: str
    installed: str = Field(description="Its DEPENDENCIES_LABEL: what the base preview installed from")


class RenderContext(BaseModel):
    """Everything about one deployment that templates may use."""

    model_config = ConfigDict(frozen=True)

    owner: str
    repo: str
    project_slug: str
    pr_number: int
    deployment_id: str
    repository: str = Field(default="", description="host/owner/name in lower case: tells repositories apart that "
                                                    "share a slug; empty: a pull request of the code host")
    app_host_port: int
    db_host_port: int
    db_password: str = Field(description="Stable per deployment, never shared between pull requests")
    image_overrides: dict[str, str] = Field(default_factory=dict)
    secret_key: SecretStr | None = Field(default=None, exclude=True, repr=False,
                                         description="The service's key; None renders placeholders")
    build_cache: bool = Field(default=False, description="BuildKit cache mounts may be rendered "
                                                         "(BUILD_CACHE_MOUNTS); off, templates build without")
    base_dependencies: BaseDependencies | None = Field(
        default=None, description="A pull request's: its repository's base preview's installed dependencies, for a "
                                  "template to install on top of when its own manifests differ; None: build without")

    @model_validator(mode="after")
    def _identity(self) -> RenderContext:
        # A context made without one (by code written before it existed) names the code host's repository.
        if not self.repository:
            object.__setattr__(self, "repository", repository_identity(CODEHOST, self.owner, self.repo))
        return self

    @property
    def database_name(self) -> str:
        return f"pr_{self.pr_number}"

    def container_name(self, service: str) -> str:
        return f"{preview_name(self.project_slug, self.pr_number)}-{service}"

    def built_image(self, service: str) -> str:
        """The name of the image built for `service`: BUILT_IMAGES/{keyed digest}-{service}. The digest is an HMAC
        of the repository, the deployment id and the service under the service's key, so no other preview's
        compose file or Dockerfile can name it (compose's own name, `{deployment id}-{service}`, is public). A
        placeholder when rendering without the key."""
        if self.secret_key is None:
            return f"{BUILT_IMAGES}/keyed-{service.lower()}"
        digest = self._keyed(f"{self.repository}#{self.deployment_id}:image:{service}").hexdigest()[:32]
        return f"{BUILT_IMAGES}/{digest}-{service.lower()}"

    def kept_dependencies(self) -> str:
        """The name the repository's base preview's DEPENDENCIES_STAGE is kept under (`kept_dependencies_image`)."""
        if self.secret_key is None:
            return f"{BUILT_IMAGES}/keyed-{DEPENDENCIES_STAGE}"
        return kept_dependencies_image(self.secret_key.get_secret_value().encode("latin-1"), self.repository)

    def image(self, name: str) -> str:
        """`name` after IMAGE_OVERRIDES; every image a built-in template names goes through here."""
        return self.image_overrides.get(name, name)

    def derived_secret(self, purpose: str, length: int = 32) -> bytes:
        """`length` bytes for `purpose` (an app's session key, …): the same for every update of this deployment,
        different for every other one, and derived from the service's key, never stored. Placeholder bytes
        when rendering without the key (`preview-orchestrator render`)."""
        if self.secret_key is None:
            return b"<secret>".ljust(length, b"-")[:length]
        return self._keyed(f"{self.repository}#{self.deployment_id}:{purpose}").digest()[:length]

    def _keyed(self, message: str) -> hmac.HMAC:
        assert self.secret_key is not None
        return keyed(self.secret_key.get_secret_value().encode("latin-1"), message)

    def cache_mount(self, name: str, target: str) -> str:
        """`--mount=type=cache,...` plus a space, for a RUN line of a template
        (`RUN {{ cache_mount("go-build", "/root/.cache/go-build") }}go build ...`): a BuildKit cache at `target`
        that outlives the image, shared by every preview of this repository and by no other repository. Its id
        is derived from the service's key, so no Dockerfile of another repository can name it, and comments mask
        it. "" when builds may use the classic builder (BUILD_CACHE_MOUNTS=false) or when rendering without the
        key: the template must build either way.

        Only for a step that runs no code of the repository (a compiler, not install scripts, setup.py or
        build.rs): what one pull request's code wrote into the cache, the next pull request's build would use.
        The id is part of the step's cache key, so a per-pull-request cache would also cost the layer that
        previews of a repository share today."""
        if not self.build_cache or self.secret_key is None:
            return ""
        if not NAME_PATTERN.fullmatch(name) or not _CACHE_TARGET.fullmatch(target):
            raise ValueError(f"cache mount {name!r} at {target!r}: a lower-case name and an absolute path")
        # the repository's identity: two repositories can share a slug (`a/b.c`, `a/b-c`), or an owner's name
        # (a code host's `local` and `preview-orchestrator up`'s)
        digest = self._keyed(f"{self.repository}:cache:{name}").hexdigest()[:32]
        return f"--mount=type=cache,id={CACHE_ID_PREFIX}{digest},target={target} "


    def repository_cache_id(self, name: str) -> str:
        """The id a cache mount of the repository's own Dockerfile gets (rendering/dockerfile_cache.py): `name`
        (its id, or its target) keyed by the repository, as `cache_mount`'s are."""
        if self.secret_key is None:
            return f"{CACHE_ID_PREFIX}keyed"
        return CACHE_ID_PREFIX + self._keyed(f"{self.repository}:dockerfile-cache:{name}").hexdigest()[:32]


class AppService(BaseModel):
    service: dict[str, Any] = Field(description="Compose service mapping (build, working_dir, ...)")
    command: list[str] = Field(description="The main process, run after startup_commands")


def database_app_env(scheme: str, connection: str, port: int, user: str, password: str, database: str,
                     query: str = "") -> dict[str, str]:
    """The variables every database plugin gives the app: DATABASE_URL in the spec's shape
    (`<scheme>://<user>:<password>@db:<port>/<database>`) and Laravel's DB_* names."""
    return {
        "DATABASE_URL": f"{scheme}://{user}:{password}@db:{port}/{database}{query}",
        "DB_CONNECTION": connection, "DB_HOST": "db", "DB_PORT": str(port),
        "DB_DATABASE": database, "DB_USERNAME": user, "DB_PASSWORD": password,
    }


SEED_MOUNT = "/po-seed"  # where DatabaseSeed.command finds the seed (read only)


SEED_INPUT = "/po-seed-input"  # where SeedRestore.formats find the dump (read only)


class SeedRestore(BaseModel):
    """How a repository's data (preview-config.yml `seed`) is restored into a seed, once per image, dump and
    commands: in the seed's container (the image with DatabaseSeed.environment, no network), once `ready`
    succeeds, `formats[suffix]` runs with the dump's path under SEED_INPUT appended, for the longest suffix the
    dump's name ends with; then each of the repository's `commands` runs in `sh -c` with DATABASE_URL=`url`
    (the seed's own data, on 127.0.0.1). Their lines with ERROR, FATAL or error are what a failure shows."""

    model_config = ConfigDict(frozen=True)

    formats: dict[str, list[str]] = Field(min_length=1, description="Dump name suffix -> command")
    url: str = Field(description="DATABASE_URL of the seed's data inside its own container")
    # Run last, before the seed is frozen (PostgreSQL: VACUUM (FREEZE, ANALYZE): a copy then never rewrites a page
    # to set hint bits on its first read — a layered copy would store the whole file apart — and has statistics).
    finish: list[str] = Field(default_factory=list)

    @field_validator("formats")
    @classmethod
    def _formats(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        for suffix, argv in value.items():
            if not re.match(r"^(?:\.[a-z0-9]{1,10}){1,3}$", suffix) or not argv:
                raise ValueError(f"{suffix[:20]!r}: a suffix like .sql or .sql.gz, and a command")
        return value

    def command_for(self, name: str) -> tuple[str, list[str]] | None:
        """The suffix and command for a dump named `name`; None when no format takes it."""
        matching = [suffix for suffix in self.formats if name.lower().endswith(suffix)]
        if not matching:
            return None
        suffix = max(matching, key=len)
        return suffix, self.formats[suffix]


class DataSeed(BaseModel):
    """A repository's seed as the flows hand it to a runtime: the dump on this host (`path`, in the checkout or the
    operator's SNAPSHOTS_DIR, checked to be a regular file there) and the commands run once against it."""

    model_config = ConfigDict(frozen=True)

    repository: str = Field(description="The repository's identity: a seed is never shared between repositories")
    source: str = Field(description="What the comment and listings call it: `file seeds/demo.sql`")
    name: str = Field(description="The dump's file name as configured: its suffix says its format")
    path: str
    commands: list[str] = Field(default_factory=list)


class DatabaseSeed(BaseModel):
    """How a new preview's database skips its first start (initdb and the like): once per image, the service
    runs the image with `environment` until `ready` succeeds, then stops it — a clean data directory, the
    *seed*, made from nothing a pull request wrote. A new preview's volume then starts as a copy of it:
    `command` runs in the image as root, with the seed read only at SEED_MOUNT, the new volume at `path`, no
    network, and `script` on its standard input (never in an argument: it holds the password). It copies the
    seed and makes it this preview's (its user's password, its `pr_<N>` database); it must exit non-zero when
    it could not. Any failure and the preview starts the database the usual way."""

    model_config = ConfigDict(frozen=True)

    volume: str = Field(description="The named volume of `service` that holds the data")
    path: str = Field(pattern=r"^/[A-Za-z0-9._/-]{1,200}$", description="Where the image keeps its data")
    environment: dict[str, str] = Field(description="The seed's own first start; must not name a preview")
    ready: list[str] = Field(min_length=1, description="Run in the seed's container; exit 0 once it is ready")
    command: list[str] = Field(min_length=1)
    script: SecretStr = Field(description="Standard input of `command`")
    restore: SeedRestore | None = Field(default=None, description="None: repositories cannot declare a `seed`")
    # A copy of a repository's seed may be an overlay on it instead of a copy of its files: `command` then finds
    # SEED_MOUNT empty and `path` already holding the seed, and only what it writes is stored apart. A file opened
    # for writing is copied into the layer first (PostgreSQL's tables on their first query, the files MySQL's RENAME
    # TABLE moves): the compose runtime makes spare layers ahead that hold every file already (SEED_SPARES).
    layered: bool = False


class DatabaseWiring(BaseModel):
    service: dict[str, Any]
    volumes: dict[str, dict[str, Any]] = Field(default_factory=dict)
    app_env: dict[str, str]
    seed: DatabaseSeed | None = Field(default=None, description="None: every preview initialises its own")


class ServiceWiring(BaseModel):
    services: dict[str, dict[str, Any]]
    volumes: dict[str, dict[str, Any]] = Field(default_factory=dict)
    app_env: dict[str, str] = Field(default_factory=dict)


def kept_dependencies_image(secret_key: bytes, repository: str) -> str:
    """The name a repository's base preview's DEPENDENCIES_STAGE is kept under: keyed by the repository alone (its
    pull requests look for it, and the dashboard lists it), so no other repository's preview can name it."""
    digest = keyed(secret_key, f"{repository}:base:{DEPENDENCIES_STAGE}").hexdigest()[:32]
    return f"{BUILT_IMAGES}/{digest}-{DEPENDENCIES_STAGE}"
