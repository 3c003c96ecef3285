"""The registry every node pulls from (SWARM_REGISTRY), through its HTTP API (Docker Registry v2): which
repositories and tags a deployment has there, and deleting them.

Repositories are `{namespace}{deployment}/{service}`: the deployment is a whole path component, so one
deployment's tags are never mistaken for another's (`acme-api-3` against `acme-api-3-x-5`). Images a preview
does not build (a database's `image:`) are copied once into `{namespace}mirror/{name}:{image id}`, shared by every
preview and kept, as a pulled image stays on a single host after `docker compose down --rmi local`. A tag is deleted
by its manifest digest (`DELETE /v2/REPO/manifests/DIGEST`, which needs `storage.delete.enabled` in the
registry's configuration); the registry frees the space on its next `garbage-collect`, and keeps listing the
empty repository in its catalogue.

With credentials (SWARM_REGISTRY_USER/PASSWORD, the registry's htpasswd) every request carries them, and the
service's Docker client gets a configuration of its own that holds them (`client_config`): `docker push` and
`docker stack deploy --with-registry-auth` use it, so the nodes pull with them. Nothing else has them: a preview's
containers reach the registry's address but can neither list, pull, push nor delete there.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import httpx

from orchestrator.plugin_api import shared_tls_context

MIRROR = "mirror"  # never a deployment id: those end with the pull request's number
MANIFEST_TYPES = ", ".join((
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.oci.image.index.v1+json",
))


class RegistryError(Exception):
    pass


class Registry:
    def __init__(self, address: str, scheme: str, timeout: float = 20,
                 credentials: tuple[str, str] | None = None) -> None:
        host, _, namespace = address.partition("/")
        self.address = address  # what image references start with: host[:port][/namespace]
        self.host = host
        self.namespace = f"{namespace.strip('/')}/" if namespace.strip("/") else ""
        self.credentials = credentials
        self._base = f"{scheme}://{host}/v2"
        self._timeout = timeout

    def reference(self, deployment_id: str, service: str, tag: str) -> str:
        return f"{self.address}/{deployment_id}/{service}:{tag}"

    def mirror_reference(self, image: str, tag: str) -> str:
        """Where an image the preview does not build is copied: `postgres:16` -> `{registry}/mirror/postgres`."""
        name = image.split("@", 1)[0]
        head, _, last = name.rpartition("/")
        name = f"{head}/{last.split(':', 1)[0]}" if head else last.split(":", 1)[0]
        return f"{self.address}/{MIRROR}/{name.replace(':', '-').lower()}:{tag}"

    def repository_prefix(self, deployment_id: str) -> str:
        """How the references of one deployment start, on an engine (`docker images`)."""
        return f"{self.address}/{deployment_id}/"

    def ping(self) -> str:
        """'' when the registry answers the v2 API, else why not."""
        try:
            response = _request("GET", f"{self._base}/", timeout=5)
        except httpx.HTTPError as exc:
            return f"{type(exc).__name__}: {exc}"
        return "" if response.status_code in (200, 401) else f"HTTP {response.status_code}"

    def access(self) -> tuple[int, int | None]:
        """The status of a catalogue listing without credentials, and with the service's (None without any)."""
        url = f"{self._base}/_catalog?n=1"
        anonymous = _request("GET", url, timeout=5).status_code
        if self.credentials is None:
            return anonymous, None
        return anonymous, _request("GET", url, auth=self.credentials, timeout=5).status_code

    def tags(self, deployment_id: str | None = None) -> dict[str, list[str]]:
        """Repository -> its tags, of one deployment or of every deployment (tagless repositories left out)."""
        found: dict[str, list[str]] = {}
        for repository in self._catalog():
            rest = repository.removeprefix(self.namespace)
            if not repository.startswith(self.namespace) or rest.count("/") != 1 or rest.startswith(f"{MIRROR}/"):
                continue
            if deployment_id is not None and rest.split("/", 1)[0] != deployment_id:
                continue
            tags = self._get(f"{self._base}/{repository}/tags/list").json().get("tags") or []
            if tags:
                found[repository] = sorted(tags)
        return found

    @staticmethod
    def owner(repository: str, namespace: str) -> str:
        return repository.removeprefix(namespace).split("/", 1)[0]

    def delete(self, repository: str, tag: str) -> None:
        try:
            head = _request("HEAD", f"{self._base}/{repository}/manifests/{tag}", headers={"Accept": MANIFEST_TYPES},
                            auth=self.credentials, timeout=self._timeout)
            if head.status_code == 404:
                return
            digest = head.headers.get("Docker-Content-Digest")
            if head.status_code != 200 or not digest:
                raise RegistryError(f"{repository}:{tag}: manifest not found (HTTP {head.status_code})")
            response = _request("DELETE", f"{self._base}/{repository}/manifests/{digest}", auth=self.credentials,
                                timeout=self._timeout)
        except httpx.HTTPError as exc:
            raise RegistryError(f"{repository}:{tag}: {type(exc).__name__}") from None
        if response.status_code == 405:
            raise RegistryError(f"{repository}:{tag}: the registry refuses deletion (storage.delete.enabled)")
        if response.status_code not in (200, 202, 404):
            raise RegistryError(f"{repository}:{tag}: HTTP {response.status_code}")

    def _catalog(self) -> list[str]:
        repositories: list[str] = []
        url: str | None = f"{self._base}/_catalog?n=1000"
        while url:
            response = self._get(url)
            repositories += response.json().get("repositories") or []
            link = response.headers.get("Link", "")  # `</v2/_catalog?last=X&n=1000>; rel="next"`
            url = f"{self._base.removesuffix('/v2')}{link[1:link.index('>')]}" if link.startswith("<") else None
        return repositories

    def _get(self, url: str) -> httpx.Response:
        try:
            response = _request("GET", url, auth=self.credentials, timeout=self._timeout)
        except httpx.HTTPError as exc:
            raise RegistryError(f"{url}: {type(exc).__name__}") from None
        if response.status_code != 200:
            raise RegistryError(f"{url}: HTTP {response.status_code}")
        return response


# The operator's Docker client configuration the service's own one keeps: plugins and contexts (by link), and
# the context in use. Credential stores are left out: they would be asked for the registry instead of `auths`.
KEPT_DIRECTORIES = ("cli-plugins", "contexts")


def client_config(parent: Path, registry_host: str, credentials: tuple[str, str],
                  operator_env: dict[str, str]) -> Path:
    """A Docker client configuration directory holding the registry's credentials (mode 0700, its config.json
    0600), under `parent` in a directory of its own per registry and credentials: the service and a `doctor`
    run with other settings never overwrite each other's, and a changed password gets a new one. Returns the
    directory, for DOCKER_CONFIG."""
    operator = Path(operator_env.get("DOCKER_CONFIG") or Path(operator_env.get("HOME") or "/root") / ".docker")
    digest = hashlib.sha256("\0".join((registry_host, *credentials)).encode()).hexdigest()[:16]
    parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    parent.chmod(0o700)
    directory = parent / digest
    directory.mkdir(mode=0o700, exist_ok=True)
    config: dict[str, object] = {}
    try:
        current = json.loads((operator / "config.json").read_text(encoding="utf-8")).get("currentContext")
        if isinstance(current, str) and current:
            config["currentContext"] = current
    except (OSError, ValueError, AttributeError):
        pass
    token = base64.b64encode(":".join(credentials).encode()).decode()
    config["auths"] = {registry_host: {"auth": token}}
    staged = directory / f"config.json.{os.getpid()}"  # the same content from any process: the last rename wins
    descriptor = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        json.dump(config, handle)
    staged.replace(directory / "config.json")
    for name in KEPT_DIRECTORIES:
        link, target = directory / name, operator / name
        if link.is_symlink():
            link.unlink()
        if target.is_dir() and not link.exists():
            link.symlink_to(target)
    return directory


_LOOPBACK = frozenset({"localhost", "127.0.0.1", "[::1]", "::1"})


def same_registry(named: str, registry: str) -> bool:
    """Whether an image's registry part names SWARM_REGISTRY's host however spelt: case, an omitted default port
    (443), the loopback's names."""
    return _registry_key(named) == _registry_key(registry)


def _registry_key(address: str) -> tuple[str, str]:
    address = address.lower()
    if address.startswith("["):  # [::1]:5000
        inner, _, rest = address.partition("]")
        host, port = f"{inner}]", rest.removeprefix(":")
    elif address.count(":") == 1:
        host, port = address.split(":")
    else:
        host, port = address, ""
    return ("loopback" if host in _LOOPBACK else host, port or "443")


def _request(method: str, url: str, **kwargs: Any) -> httpx.Response:
    """One call with the shared TLS context (a registry may be https)."""
    return httpx.request(method, url, verify=shared_tls_context(), **kwargs)
