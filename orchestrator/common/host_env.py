"""The environments the service's child processes get: enough to work, none of the service's secrets.

- docker and compose keep the operator's Docker client configuration (HOME or DOCKER_CONFIG: the per-user
  compose plugin, `docker login` credentials, contexts; DOCKER_HOST, DOCKER_CONTEXT, TLS settings);
- git gets no user or system configuration at all (GIT_CONFIG_GLOBAL=/dev/null, GIT_CONFIG_NOSYSTEM);
- build commands get PATH, HOME (the checkout) and the locale.

Every child also carries a marker naming this service's state directory, so that after a crash the next
start finds and stops what the previous run left running (adapters/leftovers.py).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

DOCKER_CLIENT_VARIABLES = ("DOCKER_CONFIG", "DOCKER_HOST", "DOCKER_CONTEXT", "DOCKER_TLS", "DOCKER_TLS_VERIFY",
                           "DOCKER_CERT_PATH", "DOCKER_API_VERSION")
# Read by docker, compose and buildx beside the client configuration, and always set for them, to these values
# whatever the service's own environment says (the client variables above: the operator's value, else empty, which is
# "unset" to each client). compose 2.6.0 to 2.39.2 copied every variable of a
# checkout's `.env` into its own environment where one was unset, before it made its Docker client: another engine,
# builder, API version, env file or BuildKit source policy of the pull request's choosing (doctor wants 2.39.3 or
# later, which copies only COMPOSE_*; the compose runtime sets COMPOSE_PROJECT_NAME). COMPOSE_BAKE=false: compose's
# own builder, not buildx bake, which evaluates `%{ }` templates in what compose hands it (dockerfile_inline, args).
# DOCKER_DEFAULT_PLATFORM empty: builds for the engine's own platform, with which the Dockerfile policy judges
# TARGETARCH and the like (rendering/dockerfile_policy.py NATIVE_PLATFORM).
CLIENT_DEFAULTS = {"DOCKER_DEFAULT_PLATFORM": "", "DOCKER_BUILDKIT": "1",
                   "BUILDX_BUILDER": "", "BUILDX_CONFIG": "", "EXPERIMENTAL_BUILDKIT_SOURCE_POLICY": "",
                   "COMPOSE_ENV_FILES": "", "COMPOSE_BAKE": "false"}
CHILD_MARKER = "PREVIEW_ORCHESTRATOR_CHILD_OF"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class HostEnv:
    marker: str
    inherited: Mapping[str, str] = field(default_factory=dict)  # the service's own environment

    @classmethod
    def for_state_dir(cls, state_dir: Path, inherited: Mapping[str, str] | None = None) -> HostEnv:
        digest = hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:16]
        return cls(marker=digest, inherited=dict(os.environ if inherited is None else inherited))

    def _base(self, home: str) -> dict[str, str]:
        return {"PATH": self.inherited.get("PATH") or DEFAULT_PATH, "HOME": home, "LANG": "C.UTF-8",
                CHILD_MARKER: self.marker}

    def docker(self) -> dict[str, str]:
        env = self._base(self.inherited.get("HOME") or "/root")
        env.update({name: self.inherited.get(name) or "" for name in DOCKER_CLIENT_VARIABLES})
        env.update(CLIENT_DEFAULTS)
        return env

    def git(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        env = self._base("/nonexistent")
        env.update({"GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0"})
        env.update(extra or {})
        return env

    def commands(self, home: Path) -> dict[str, str]:
        return self._base(str(home))

    def tools(self) -> dict[str, str]:
        """The operator's own programs (the proxy's test and reload commands)."""
        return self._base(self.inherited.get("HOME") or "/root")
