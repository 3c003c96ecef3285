"""GitHub Apps instead of a personal token: the fake GitHub serves the installation lookup and the token exchange,
checks the app's JSON Web Token (RS256 by the app's key, its id, at most ten minutes) and accepts only the
installation tokens it issued and that have not expired. The service's API calls and private clones use them;
they are refreshed before they expire."""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from orchestrator.adapters.git import Git
from orchestrator.codehosts.github import GitHub, api_client
from orchestrator.codehosts.github_app import REFRESH_MARGIN, AppTokens
from orchestrator.common.commands import CommandFailed, DeploymentLog
from orchestrator.common.host_env import HostEnv
from orchestrator.observability.metrics import Metrics
from orchestrator.plugin_api.codehost import CodeHostError
from orchestrator.rendering.plugin_host import CodeHosts, build_plugin_host
from orchestrator.settings import SettingsError
from tests.conftest import SettingsFactory
from tests.support.fake_codehost import FakeCodeHost

APP_ID = 424242


def key_pair() -> tuple[bytes, bytes]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                           serialization.PublicFormat.SubjectPublicKeyInfo)
    return private, public


@pytest.fixture(scope="module")
def keys() -> tuple[bytes, bytes]:
    return key_pair()


@pytest.fixture
def fake(keys: tuple[bytes, bytes]) -> Iterator[FakeCodeHost]:
    server = FakeCodeHost(app_id=APP_ID, app_public_key=keys[1], installations={"acme/api": 7}).start()
    yield server
    server.stop()


def app_host(fake: FakeCodeHost, private: bytes, clock: list[float] | None = None) -> GitHub:
    api = api_client(fake.url, "", retry_base=0.01, sleep=lambda _: None, metrics=Metrics())
    tokens = AppTokens(APP_ID, private, api, clock=(lambda: clock[0]) if clock else time.time)
    return GitHub(api, fake.url, "", "webhook-secret", tokens)


def paths(fake: FakeCodeHost) -> list[str]:
    return [f"{call.method} {call.path.split('?')[0]}" for call in fake.calls]


def test_the_app_s_installation_token_answers_and_is_kept(fake: FakeCodeHost, keys: tuple[bytes, bytes],
                                                          make_settings: SettingsFactory, tmp_path: Path) -> None:
    key_file = tmp_path / "app.pem"
    key_file.write_bytes(keys[0])
    key_file.chmod(0o600)
    settings = make_settings(github_app_id=APP_ID, github_app_private_key_file=key_file, codehost_api_url=fake.url,
                             codehost_token="a-personal-token-never-used")
    host = build_plugin_host(load_entry_points=False).codehosts(settings, Metrics()).get("github")
    assert isinstance(host, GitHub) and host.app is not None
    first = host.upsert_comment("acme", "api", 3, None, "building")
    host.upsert_comment("acme", "api", 3, first, "ready")
    assert paths(fake) == ["GET /repos/acme/api/installation", "POST /app/installations/7/access_tokens",
                           "POST /repos/acme/api/issues/3/comments", f"PATCH /repos/acme/api/issues/comments/{first}"]
    issued = next(iter(fake.issued))
    assert [call.headers["Authorization"] for call in fake.calls[2:]] == [f"Bearer {issued}"] * 2
    assert all("a-personal-token" not in str(call.headers) for call in fake.calls)
    [line] = host.checks()
    assert line.ok and line.detail == "preview-app; installed on 1 account(s)"


def test_the_token_is_refreshed_before_it_expires(fake: FakeCodeHost, keys: tuple[bytes, bytes]) -> None:
    fake.token_lifetime = REFRESH_MARGIN + 30  # tokens that live a little longer than the margin
    now = [time.time()]
    host = app_host(fake, keys[0], now)
    host.upsert_comment("acme", "api", 3, None, "one")
    now[0] += 20  # the token has 10 s left before the margin: kept
    host.upsert_comment("acme", "api", 3, None, "two")
    assert len(fake.issued) == 1
    now[0] += 15  # within the margin: a new one, before GitHub would refuse the old
    host.upsert_comment("acme", "api", 3, None, "three")
    assert len(fake.issued) == 2
    assert paths(fake).count("GET /repos/acme/api/installation") == 1  # the installation is kept too


def test_installation_tokens_are_masked_as_they_come_and_go(fake: FakeCodeHost, keys: tuple[bytes, bytes]) -> None:
    """The tokens are fetched and renewed while the service runs: what logs mask is asked for each time."""
    fake.token_lifetime = REFRESH_MARGIN + 30
    now = [time.time()]
    host = app_host(fake, keys[0], now)
    hosts = CodeHosts([host])
    assert host.secrets() == ["webhook-secret"]  # no token held yet
    host.upsert_comment("acme", "api", 3, None, "one")
    first = next(iter(fake.issued))
    assert first in host.secrets() and first in hosts.masked([])
    now[0] += 35  # within the margin: renewed
    host.upsert_comment("acme", "api", 3, None, "two")
    second = next(token for token in fake.issued if token != first)
    assert second in hosts.masked([])
    assert first in hosts.masked([])  # replaced, yet GitHub accepts it until it expires: still masked
    now[0] += REFRESH_MARGIN + 60  # the first one has expired
    assert first not in hosts.masked([])


def test_another_key_or_a_repository_without_the_app_is_refused(fake: FakeCodeHost,
                                                                 keys: tuple[bytes, bytes]) -> None:
    stranger = app_host(fake, key_pair()[0])
    with pytest.raises(CodeHostError, match="401"):
        stranger.upsert_comment("acme", "api", 3, None, "x")
    with pytest.raises(CodeHostError, match="not installed on acme/other"):
        app_host(fake, keys[0]).upsert_comment("acme", "other", 1, None, "x")
    assert fake.comments_on("acme", "api", 3) == [] and fake.issued == {}


def test_a_private_clone_uses_the_installation_token(fake: FakeCodeHost, keys: tuple[bytes, bytes],
                                                     tmp_path: Path) -> None:
    host = app_host(fake, keys[0])
    git = Git(CodeHosts([host]).clone_authorization, ("http",), 60, HostEnv.for_state_dir(tmp_path))
    with pytest.raises(CommandFailed):  # the fake serves no repository: what matters is what git sent
        git.clone(f"{fake.url}/acme/api.git", "main", "a" * 40, tmp_path / "work", tmp_path / "work.git",
                  DeploymentLog(tmp_path / "log"), codehost="github")
    token = next(iter(fake.issued))
    refs = [call for call in fake.calls if call.path.startswith("/acme/api.git/info/refs")]
    assert refs and refs[0].headers["Authorization"] == "Basic " + base64.b64encode(
        f"x-access-token:{token}".encode()).decode()
    assert token not in (tmp_path / "log").read_text()


def test_app_settings_come_together_and_the_key_must_be_readable(make_settings: SettingsFactory,
                                                                 tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="GITHUB_APP_ID and GITHUB_APP_PRIVATE_KEY_FILE are set together"):
        make_settings(github_app_id=APP_ID)
    with pytest.raises(SettingsError, match="is not a file this service can read"):
        make_settings(github_app_id=APP_ID, github_app_private_key_file=tmp_path / "missing.pem")


def test_a_delivery_names_its_installation(fake: FakeCodeHost, keys: tuple[bytes, bytes]) -> None:
    """A GitHub App's delivery carries `installation.id` (the body is signed): its token is asked for that
    installation, without looking it up by repository."""
    import json

    from orchestrator.plugin_api.codehost import Delivery, PullRequestChange
    from tests.support.payloads import pr_payload, webhook_headers

    fake.installations["acme/web"] = 9  # the app is installed there; the delivery says so first
    host = app_host(fake, keys[0])
    data = json.loads(pr_payload("opened", number=4, repository="acme/web"))
    data["installation"] = {"id": 9, "node_id": "MDIzOkludGVncmF0aW9uSW5zdGFsbGF0aW9uOQ=="}
    body = json.dumps(data).encode()
    headers = {key.lower(): value for key, value in webhook_headers(body, secret="webhook-secret").items()}
    parsed = host.parse(Delivery(headers, body))
    assert isinstance(parsed, PullRequestChange) and (parsed.owner, parsed.name) == ("acme", "web")
    host.upsert_comment("acme", "web", 4, None, "building")
    assert paths(fake) == ["POST /app/installations/9/access_tokens", "POST /repos/acme/web/issues/4/comments"]
