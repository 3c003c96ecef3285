"""The registry every node pulls from (SWARM_REGISTRY), through its HTTP API (Docker Registry v2): which
repositories and tags a deployment has there, and deleting them.

Repositories are `{namespace}{deployment}/{service}`: the deployment is a whole path component, so one
deployment's tags are never mistaken for another's (`acme-api-3` against `acme-api-3-x-5`). Images a preview
does not build (a database's `image:`) are copied once into `{namespace}mirror/{name}:{image id}`, shared by every
preview and kept, as a pulled image stays on a single host after `docker compose down --rmi local`. A tag is deleted
by its manifest digest (`DELETE /v2/REPO/manifests/DIGEST`, which needs `storage.delete.enabled` in the
registry's configuration); the registry frees the space on its next `garbage-collect`, and keeps listing the
empty repository in its catalogue.
"""

from __future__ import annotations

import httpx

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
    def __init__(self, address: str, scheme: str, timeout: float = 20) -> None:
        host, _, namespace = address.partition("/")
        self.address = address  # what image references start with: host[:port][/namespace]
        self.namespace = f"{namespace.strip('/')}/" if namespace.strip("/") else ""
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
            response = httpx.get(f"{self._base}/", timeout=5)
        except httpx.HTTPError as exc:
            return f"{type(exc).__name__}: {exc}"
        return "" if response.status_code in (200, 401) else f"HTTP {response.status_code}"

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
            head = httpx.head(f"{self._base}/{repository}/manifests/{tag}", headers={"Accept": MANIFEST_TYPES},
                              timeout=self._timeout)
            if head.status_code == 404:
                return
            digest = head.headers.get("Docker-Content-Digest")
            if head.status_code != 200 or not digest:
                raise RegistryError(f"{repository}:{tag}: manifest not found (HTTP {head.status_code})")
            response = httpx.delete(f"{self._base}/{repository}/manifests/{digest}", timeout=self._timeout)
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
            response = httpx.get(url, timeout=self._timeout)
        except httpx.HTTPError as exc:
            raise RegistryError(f"{url}: {type(exc).__name__}") from None
        if response.status_code != 200:
            raise RegistryError(f"{url}: HTTP {response.status_code}")
        return response
