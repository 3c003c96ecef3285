"""The swarm registry's access, against Debian's real docker-registry on 127.0.0.1: doctor's line says whether a
preview's code could use the registry (no authentication, no credentials set, wrong ones), the registry API is
asked with the service's credentials, and the service's own Docker client configuration holds them and nothing
of the operator's credential stores. The swarm itself is in test_swarm.py."""

from __future__ import annotations

import base64
import json
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.runtime.swarm.doctor import _registry_access
from orchestrator.runtime.swarm.registry import Registry, RegistryError, client_config
from tests.support.live import free_port
from tests.support.registry import start_registry, stop_registry

pytestmark = pytest.mark.swarm
CREDENTIALS = ("po-service", "registry-pass-57")


@pytest.fixture
def open_registry(tmp_path: Path) -> Iterator[str]:
    address = f"127.0.0.1:{free_port()}"
    process = start_registry(tmp_path / "open", address, None)
    yield address
    stop_registry(process)


@pytest.fixture
def closed_registry(tmp_path: Path) -> Iterator[str]:
    address = f"127.0.0.1:{free_port()}"
    process = start_registry(tmp_path / "closed", address, CREDENTIALS)
    yield address
    stop_registry(process)


def test_a_registry_anyone_can_use_is_named_by_doctor(open_registry: str) -> None:
    check = _registry_access(Registry(open_registry, "http", credentials=CREDENTIALS))
    assert not check.ok
    assert check.detail == ("a request without credentials gets HTTP 200: any preview's code can list, pull, "
                            "replace and delete every preview's images")
    assert "htpasswd" in check.fix


def test_a_registry_with_htpasswd_needs_the_services_credentials(closed_registry: str) -> None:
    assert _registry_access(Registry(closed_registry, "http", credentials=CREDENTIALS)).ok
    unset = _registry_access(Registry(closed_registry, "http"))
    assert not unset.ok and "SWARM_REGISTRY_USER is not set" in unset.detail
    wrong = _registry_access(Registry(closed_registry, "http", credentials=(CREDENTIALS[0], "guessed")))
    assert not wrong.ok and wrong.detail == "SWARM_REGISTRY_USER's credentials get HTTP 401"


def test_the_registry_api_is_asked_with_the_credentials(closed_registry: str) -> None:
    assert Registry(closed_registry, "http", credentials=CREDENTIALS).tags() == {}
    with pytest.raises(RegistryError, match="HTTP 401"):
        Registry(closed_registry, "http").tags()


def test_the_services_docker_client_configuration_holds_the_credentials_only(tmp_path: Path) -> None:
    operator = tmp_path / "operator"
    (operator / "contexts").mkdir(parents=True)
    (operator / "cli-plugins").mkdir()
    (operator / "config.json").write_text(json.dumps({"currentContext": "cluster", "credsStore": "desktop",
                                                      "auths": {"docker.io": {"auth": "b3BlcmF0b3I6cw=="}}}))
    parent = tmp_path / "state" / "swarm-docker-config"
    directory = client_config(parent, "10.1.0.1:5000", CREDENTIALS,
                              {"HOME": "/nonexistent", "DOCKER_CONFIG": str(operator)})
    written = directory / "config.json"
    assert stat.S_IMODE(parent.stat().st_mode) == 0o700 and stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert stat.S_IMODE(written.stat().st_mode) == 0o600
    assert sorted(path.name for path in directory.iterdir()) == ["cli-plugins", "config.json", "contexts"]
    config = json.loads(written.read_text())
    assert config == {"currentContext": "cluster", "auths": {"10.1.0.1:5000": {
        "auth": base64.b64encode(b"po-service:registry-pass-57").decode()}}}  # no credsStore, no other auths
    assert (directory / "contexts").resolve() == operator / "contexts"
    assert (directory / "cli-plugins").resolve() == operator / "cli-plugins"
    # the same settings from another process (doctor): the same directory, the same content
    assert client_config(parent, "10.1.0.1:5000", CREDENTIALS, {"DOCKER_CONFIG": str(operator)}) == directory
    assert json.loads(written.read_text()) == config
    # other settings (a doctor run against another registry, a changed password) never touch the service's
    other = client_config(parent, "10.1.0.1:5000", ("po-service", "changed"), {"HOME": str(tmp_path / "nobody")})
    assert other != directory and json.loads(written.read_text()) == config
    assert json.loads((other / "config.json").read_text()) == {"auths": {"10.1.0.1:5000": {
        "auth": base64.b64encode(b"po-service:changed").decode()}}}
    assert not (other / "contexts").exists() and not (other / "contexts").is_symlink()
