"""The `gitea` code host (Gitea and Forgejo) without Docker: deliveries as Gitea and Forgejo send them, through the
real HTTP app to the flows' handler; its API against the fake; what is refused and why. End to end (real Docker,
nginx, git) in test_gitea_e2e.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from falcon import testing

from orchestrator.codehosts.gitea import Gitea
from orchestrator.events.webhook import Ignored
from orchestrator.http.app import create_app
from orchestrator.observability.metrics import Metrics
from orchestrator.plugin_api.codehost import ApiClient, CodeHostError
from orchestrator.rendering.plugin_host import PluginError, build_plugin_host
from tests.conftest import OwnEnv, SettingsFactory
from tests.support.fake_codehost import FakeCodeHost
from tests.support.handlers import RecordingHandler
from tests.support.payloads import (
    FIXTURE_REPO,
    GITEA_REPO,
    GITEA_SECRET,
    SECRET,
    gitea_headers,
    gitea_payload,
    pr_payload,
    webhook_headers,
)

SHA = "7" * 40


@pytest.fixture
def gitea_client(make_settings: SettingsFactory, own_env: OwnEnv, handler: RecordingHandler) -> testing.TestClient:
    own_env(GITEA_WEBHOOK_SECRET=GITEA_SECRET, GITEA_URL="http://127.0.0.1:9")
    settings = make_settings(allowed_repos=f"{FIXTURE_REPO},gitea:{GITEA_REPO}", webhook_processing="sync")
    return testing.TestClient(create_app(settings, handler))


def send(client: testing.TestClient, body: bytes, **headers: Any) -> testing.Result:
    return client.simulate_post("/webhook/gitea", body=body, headers=gitea_headers(body, **headers))


def started(handler: RecordingHandler) -> list[tuple[str, str, str]]:
    return [(entry["action"], entry["deploymentId"], entry.get("codehost", "")) for entry in handler.entries("start")]


def test_each_gitea_action_is_acted_on_as_the_service_s_own(gitea_client: testing.TestClient,
                                                           handler: RecordingHandler) -> None:
    assert send(gitea_client, gitea_payload("opened", sha=SHA)).status_code == 200
    assert send(gitea_client, gitea_payload("synchronized", sha="8" * 40), event_type="pull_request_sync"
                ).status_code == 200
    assert send(gitea_client, gitea_payload("closed", merged=True)).status_code == 200
    assert send(gitea_client, gitea_payload("reopened", sha=SHA)).status_code == 200
    assert send(gitea_client, gitea_payload("closed", merged=False)).status_code == 200
    assert [(action, deployment) for action, deployment, _ in started(handler)] == [
        ("opened", "gitea-webhooks-2"), ("synchronize", "gitea-webhooks-2"), ("closed", "gitea-webhooks-2"),
        ("reopened", "gitea-webhooks-2"), ("closed", "gitea-webhooks-2")]
    first = handler.entries("start")[0]
    assert (first["codehost"], first["repository"], first["branch"], first["sha"]) == (
        "gitea", "gitea/gitea/webhooks", "feature/x", SHA)
    assert first["clone"] == "http://localhost:3000/gitea/webhooks.git"


def test_a_forgejo_delivery_works_like_gitea_s(gitea_client: testing.TestClient, handler: RecordingHandler) -> None:
    body = gitea_payload("opened", sha=SHA, number=5)
    assert send(gitea_client, body, forgejo=True).status_code == 200
    # Forgejo's own signature is enough: a proxy that keeps only X-Forgejo-* headers still gets through
    headers = {name: value for name, value in gitea_headers(body, forgejo=True).items()
               if not name.startswith(("X-Gitea", "X-Gogs", "X-GitHub", "X-Hub"))}
    other = gitea_payload("synchronized", sha="9" * 40, number=5)
    headers_other = {**headers, "X-Forgejo-Signature": gitea_headers(other)["X-Gitea-Signature"],
                     "X-Forgejo-Delivery": "forgejo-2"}
    assert gitea_client.simulate_post("/webhook/gitea", body=other, headers=headers_other).status_code == 200
    assert [(action, deployment) for action, deployment, _ in started(handler)] == [
        ("opened", "gitea-webhooks-5"), ("synchronize", "gitea-webhooks-5")]


@pytest.mark.parametrize("signature", [None, "", "0" * 64, "sha256=" + "0" * 64, "signed-with-another-secret"])
def test_a_wrong_or_missing_signature_is_401_and_records_nothing(gitea_client: testing.TestClient,
                                                                handler: RecordingHandler,
                                                                signature: str | None) -> None:
    body = gitea_payload("opened", sha=SHA)
    headers = gitea_headers(body, secret="another-secret") if signature == "signed-with-another-secret" \
        else gitea_headers(body)
    if signature != "signed-with-another-secret":
        headers.pop("X-Gitea-Signature")
        if signature is not None:
            headers["X-Gitea-Signature"] = signature
    result = gitea_client.simulate_post("/webhook/gitea", body=body, headers=headers)
    assert result.status_code == 401 and result.json["error"] == "Invalid signature"
    assert handler.entries("start") == [] and handler.store.read().deployments == {}


def test_a_repository_not_allowed_is_403_and_an_allowed_name_of_another_host_does_not_count(
        make_settings: SettingsFactory, own_env: OwnEnv, handler: RecordingHandler) -> None:
    # gitea/webhooks allowed on GitHub only: not on Gitea
    own_env(GITEA_WEBHOOK_SECRET=GITEA_SECRET, GITEA_URL="http://127.0.0.1:9")
    settings = make_settings(allowed_repos=GITEA_REPO)
    client = testing.TestClient(create_app(settings, handler))
    result = send(client, gitea_payload("opened", sha=SHA))
    assert result.status_code == 403 and result.json["error"] == "Repository not in allowed list"
    assert handler.entries("start") == []


def test_a_gitea_delivery_to_github_s_path_is_not_taken_for_github_s(gitea_client: testing.TestClient,
                                                                     handler: RecordingHandler) -> None:
    # Gitea signs GitHub's header too: with one secret for both hosts the signature alone would pass
    body = gitea_payload("opened", sha=SHA)
    for path in ("/webhook/codehost", "/webhook/github"):
        result = gitea_client.simulate_post(path, body=body, headers=gitea_headers(body, secret=SECRET))
        assert result.status_code == 400, path
        assert "not GitHub's (send it to /webhook/gitea)" in result.json["error"]
    assert handler.entries("start") == []
    github = pr_payload("opened", sha=SHA)
    assert gitea_client.simulate_post("/webhook/github", body=github,
                                      headers=webhook_headers(github)).status_code == 200


def test_gitea_is_off_until_its_secret_is_set(client: testing.TestClient) -> None:
    body = gitea_payload("opened", sha=SHA)
    assert client.simulate_post("/webhook/gitea", body=body, headers=gitea_headers(body)).status_code == 404


@pytest.mark.parametrize(("body", "event_type", "gate", "expected"), [
    # WIP title: a draft; the title losing its prefix is ready for review, gaining it a conversion to draft
    (gitea_payload("opened", sha=SHA, title="WIP: feature"), "pull_request", {}, []),
    (gitea_payload("opened", sha=SHA, title="[wip] feature"), "pull_request", {}, []),
    (gitea_payload("opened", sha=SHA, draft=True), "pull_request", {}, []),
    (gitea_payload("edited", sha=SHA, title="feature", title_before="WIP: feature"), "pull_request", {},
     ["opened"]),
    (gitea_payload("edited", sha=SHA, title="WIP: feature", title_before="feature"), "pull_request", {},
     ["closed"]),
    (gitea_payload("edited", sha=SHA, title="better name", title_before="feature"), "pull_request", {}, []),
    # labels: Gitea does not say which label changed; the current ones decide
    (gitea_payload("label_updated", sha=SHA, labels=["preview"]), "pull_request_label", {"preview_label": "preview"},
     ["opened"]),
    (gitea_payload("label_updated", sha=SHA, labels=["bug"]), "pull_request_label", {"preview_label": "preview"},
     ["closed"]),
    (gitea_payload("label_cleared", sha=SHA, labels=[]), "pull_request_label", {"preview_label": "preview"},
     ["closed"]),
    (gitea_payload("label_updated", sha=SHA, labels=["preview"]), "pull_request_label", {}, []),
    (gitea_payload("opened", sha=SHA, labels=["bug"]), "pull_request", {"preview_label": "preview"}, []),
    # other actions are acknowledged and ignored
    (gitea_payload("assigned", sha=SHA), "pull_request_assign", {}, []),
], ids=lambda value: value.decode()[:0] if isinstance(value, bytes) else None)
def test_drafts_and_labels_gate_gitea_as_github(make_settings: SettingsFactory, own_env: OwnEnv,
                                                handler: RecordingHandler, body: bytes, event_type: str,
                                                gate: dict[str, str], expected: list[str]) -> None:
    own_env(GITEA_WEBHOOK_SECRET=GITEA_SECRET, GITEA_URL="http://127.0.0.1:9")
    settings = make_settings(allowed_repos=f"gitea:{GITEA_REPO}", webhook_processing="sync", **gate)
    client = testing.TestClient(create_app(settings, handler))
    result = send(client, body, event_type=event_type)
    assert result.status_code == 200, result.text
    assert [action for action, _, _ in started(handler)] == expected


def test_other_gitea_events_are_ignored_and_bad_bodies_refused(gitea_client: testing.TestClient,
                                                               handler: RecordingHandler) -> None:
    # a push is read (base previews follow it): one of a repository without a base preview changes nothing, one
    # that is not what Gitea sends is refused
    push = json.dumps({"ref": "refs/heads/main", "after": SHA, "repository": {
        "full_name": "gitea/webhooks", "clone_url": "https://git.test/gitea/webhooks.git", "default_branch": "main"}}
    ).encode()
    headers = {**gitea_headers(push), "X-Gitea-Event": "push"}
    assert gitea_client.simulate_post("/webhook/gitea", body=push, headers=headers).status_code == 200
    broken_push = json.dumps({"ref": "refs/heads/main"}).encode()
    headers = {**gitea_headers(broken_push), "X-Gitea-Event": "push"}
    assert gitea_client.simulate_post("/webhook/gitea", body=broken_push, headers=headers).status_code == 400
    broken = json.dumps({"action": "opened", "pull_request": {"number": "two"}}).encode()
    refused = send(gitea_client, broken)
    assert refused.status_code == 400 and refused.json["error"].startswith("Invalid payload: ")
    bad_branch = gitea_payload("opened", sha=SHA, ref="-x/../y")
    assert send(gitea_client, bad_branch).status_code == 400
    assert handler.entries("start") == []


@pytest.fixture
def fake_gitea() -> Iterator[FakeCodeHost]:
    fake = FakeCodeHost(prefix="/api/v1").start()
    yield fake
    fake.stop()


def gitea_host(fake: FakeCodeHost, token: str = "gitea-token-3") -> Gitea:  # noqa: S107 - a test token
    api = ApiClient(f"{fake.url}/api/v1", {"Authorization": f"token {token}"} if token else {}, retry_base=0.01,
                    sleep=lambda _: None, metrics=Metrics())
    return Gitea(api, fake.url, token, GITEA_SECRET)


def test_the_api_comments_once_edits_in_place_and_reports_commit_statuses(fake_gitea: FakeCodeHost) -> None:
    host = gitea_host(fake_gitea)
    first = host.upsert_comment("gitea", "webhooks", 2, None, "building")
    assert host.upsert_comment("gitea", "webhooks", 2, first, "ready") == first
    assert host.find_marked_comment("gitea", "webhooks", 2, "ready") == first
    assert host.start_deployment("gitea", "webhooks", SHA, "preview/x", "d") is None  # statuses, not deployments
    host.set_status("gitea", "webhooks", SHA, None, "in_progress", "Building the preview")
    host.set_status("gitea", "webhooks", SHA, None, "success", "Running", url="http://previews.test/x/")
    host.set_status("gitea", "webhooks", SHA, None, "inactive", "Preview removed")  # Gitea has no such state
    assert [(s["state"], s.get("target_url"), s["context"]) for s in fake_gitea.statuses_of("gitea", "webhooks", SHA)
            ] == [("pending", None, "preview-orchestrator"), ("success", "http://previews.test/x/",
                                                            "preview-orchestrator")]
    assert fake_gitea.comments_on("gitea", "webhooks", 2)[0]["body"] == "ready"
    assert {call.headers["Authorization"] for call in fake_gitea.calls} == {"token gitea-token-3"}
    assert all(call.path.startswith("/api/v1/") for call in fake_gitea.calls)
    fake_gitea.fail_next(1, 502)
    host.upsert_comment("gitea", "webhooks", 2, first, "retried")  # ApiClient's retries
    assert fake_gitea.comments_on("gitea", "webhooks", 2)[0]["body"] == "retried"


def test_doctor_lines_of_gitea(fake_gitea: FakeCodeHost, make_settings: SettingsFactory, own_env: OwnEnv) -> None:
    [line] = gitea_host(fake_gitea).checks()
    assert line.ok and line.detail == "version 1.24.0; token of preview-bot"
    [tokenless] = gitea_host(fake_gitea, token="").checks()
    assert not tokenless.ok and "no GITEA_TOKEN" in tokenless.detail
    own_env(GITEA_WEBHOOK_SECRET=GITEA_SECRET, GITEA_URL=fake_gitea.url)
    settings = make_settings()
    hosts = build_plugin_host(load_entry_points=False).codehosts(settings, Metrics())
    assert [host.name for host in hosts] == ["github", "gitea"]
    assert GITEA_SECRET in hosts.masked([])


def test_gitea_settings_are_checked(make_settings: SettingsFactory, own_env: OwnEnv) -> None:
    from orchestrator.settings import SettingsError

    # GITEA_* are the gitea code host's own settings: read when it is built (start-up, doctor)
    own_env(GITEA_WEBHOOK_SECRET=GITEA_SECRET)
    with pytest.raises(SettingsError, match="GITEA_URL is required when GITEA_WEBHOOK_SECRET is set"):
        build_plugin_host(load_entry_points=False).codehosts(make_settings(), Metrics())
    own_env(GITEA_URL="ftp://gitea.example")
    with pytest.raises(SettingsError, match="GITEA_URL is not valid: must be an http:// or https:// URL"):
        build_plugin_host(load_entry_points=False).codehosts(make_settings(), Metrics())
    from orchestrator.cli.doctor import _codehost_checks  # doctor says so, as a line that stops the service

    [line] = _codehost_checks(make_settings(), build_plugin_host(load_entry_points=False))
    assert line.hard and not line.ok and "GITEA_URL is not valid" in line.detail
    assert not hasattr(make_settings(), "gitea_url")  # the core settings know nothing of them
    with pytest.raises(SettingsError, match="ALLOWED_REPOS is not valid"):
        make_settings(allowed_repos="gitea:not-a-repo")
    settings = make_settings(allowed_repos=f"Acme/API,gitea:{GITEA_REPO},gitea:Team/App")
    assert settings.allowed_for("github") == frozenset({"acme/api"})
    assert settings.allowed_for("gitea") == frozenset({"gitea/webhooks", "team/app"})


def test_setup_nginx_exposes_the_webhook_of_each_host_that_is_on(make_settings: SettingsFactory,
                                                                  own_env: OwnEnv) -> None:
    from orchestrator.adapters.nginx_site import site_text
    from orchestrator.cli.service_commands import webhook_paths

    assert webhook_paths(make_settings()) == ["/webhook/github", "/webhook/codehost"]
    own_env(GITEA_WEBHOOK_SECRET=GITEA_SECRET, GITEA_URL="http://127.0.0.1:9")
    on = make_settings()
    assert webhook_paths(on) == ["/webhook/github", "/webhook/codehost", "/webhook/gitea"]
    assert "location = /webhook/gitea {" in site_text(on, webhook_paths(on))


def test_the_record_the_api_and_the_dashboard_name_the_host(gitea_client: testing.TestClient) -> None:
    assert send(gitea_client, gitea_payload("opened", sha=SHA, number=4)).status_code == 200
    [record] = gitea_client.simulate_get("/api/previews").json["deployments"]
    assert (record["deploymentId"], record["codehost"], record["source"]) == ("gitea-webhooks-4", "gitea", "codehost")
    assert '<td class="repo">gitea:gitea/webhooks</td>' in gitea_client.simulate_get("/dashboard").text


def test_a_closed_pull_request_is_never_deployed_again(make_settings: SettingsFactory, own_env: OwnEnv,
                                                      handler: RecordingHandler) -> None:
    own_env(GITEA_WEBHOOK_SECRET=GITEA_SECRET, GITEA_URL="http://127.0.0.1:9")
    settings = make_settings(allowed_repos=f"{FIXTURE_REPO},gitea:{GITEA_REPO}", webhook_processing="sync",
                             preview_label="preview")
    client = testing.TestClient(create_app(settings, handler))

    def closed(body: bytes) -> bytes:  # the same delivery of a pull request that was closed (or merged) before
        data = json.loads(body)
        data["pull_request"]["state"] = "closed"
        return json.dumps(data).encode()

    # its author drops the WIP prefix, or a label is added, after a maintainer closed it: nothing runs
    ready = gitea_payload("edited", sha=SHA, title="feature", title_before="WIP: feature", labels=["preview"])
    assert send(client, closed(ready)).status_code == 200
    labelled = gitea_payload("label_updated", sha=SHA, labels=["preview"])
    assert send(client, closed(labelled), event_type="pull_request_label").status_code == 200
    github = json.loads(pr_payload("labeled", sha=SHA))
    github["label"] = {"name": "preview"}
    github["pull_request"]["labels"] = [{"name": "preview"}]
    github["pull_request"]["state"] = "closed"
    body = json.dumps(github).encode()
    assert client.simulate_post("/webhook/codehost", body=body, headers=webhook_headers(body)).status_code == 200
    assert handler.entries("start") == []
    # the same deliveries of an open pull request do deploy
    assert send(client, ready).status_code == 200
    assert [entry["action"] for entry in handler.entries("start")] == ["opened"]


def test_an_agit_pull_request_counts_as_a_fork_s() -> None:
    from orchestrator.events.webhook import parse_delivery
    from orchestrator.plugin_api.codehost import Delivery

    data = json.loads(gitea_payload("opened", sha=SHA))
    data["pull_request"]["head"]["ref"] = "refs/pull/2/head"  # pushed to refs/for/main, no fork
    data["pull_request"]["head"]["label"] = ""
    body = json.dumps(data).encode()
    host = Gitea(ApiClient("http://127.0.0.1:9/api/v1", {}, metrics=Metrics()), "http://127.0.0.1:9", "", GITEA_SECRET)
    event = parse_delivery(host, Delivery({k.lower(): v for k, v in gitea_headers(body).items()}, body),
                           frozenset({GITEA_REPO}))
    assert not isinstance(event, Ignored) and event.from_fork  # gated by ALLOW_FORK_PRS
    assert event.delivery_id.startswith("gitea:")  # delivery ids are kept apart per host


def test_one_secret_per_code_host_and_one_preview_per_id_across_hosts(make_settings: SettingsFactory,
                                                                      own_env: OwnEnv,
                                                                      handler: RecordingHandler) -> None:
    own_env(GITEA_WEBHOOK_SECRET=SECRET, GITEA_URL="http://127.0.0.1:9")
    with pytest.raises(PluginError, match="code hosts 'github' and 'gitea' have the same webhook secret"):
        create_app(make_settings(), handler)
    # gitea/webhooks on GitHub and on Gitea share gitea-webhooks-2: the first one holds it, the other gets 409
    own_env(GITEA_WEBHOOK_SECRET=GITEA_SECRET)
    settings = make_settings(allowed_repos=f"{GITEA_REPO},gitea:{GITEA_REPO}", webhook_processing="sync")
    client = testing.TestClient(create_app(settings, handler))
    github = pr_payload("opened", sha=SHA, repository=GITEA_REPO)
    assert client.simulate_post("/webhook/github", body=github, headers=webhook_headers(github)).status_code == 200
    assert handler.store.read().deployments["gitea-webhooks-2"].codehost == "github"
    taken = send(client, gitea_payload("synchronized", sha="9" * 40), event_type="pull_request_sync")
    assert taken.status_code == 409 and "cannot use it" in taken.json["error"]
    assert handler.store.read().deployments["gitea-webhooks-2"].codehost == "github"


def test_webhook_paths_of_code_hosts_never_collide(make_settings: SettingsFactory) -> None:
    from orchestrator.plugin_api import CodeHost, CodeHostSpec, hookimpl
    from orchestrator.rendering.plugin_host import PluginError

    class Squatter(CodeHost):
        name = "squatter"
        aliases = ("codehost",)  # GitHub's spec path

    class Plugin:
        @hookimpl
        def po_codehosts(self) -> list[CodeHostSpec]:
            return [CodeHostSpec(name="squatter")]

        @hookimpl
        def po_codehost(self, name: str) -> CodeHost | None:
            return Squatter() if name == "squatter" else None

    host = build_plugin_host(load_entry_points=False, extra_plugins=[("squatter", Plugin())])
    with pytest.raises(PluginError, match="'github' and 'squatter' both want /webhook/codehost"):
        host.codehosts(make_settings(), Metrics())


def test_doctor_names_allowed_repositories_of_hosts_that_are_off(make_settings: SettingsFactory) -> None:
    from orchestrator.cli.doctor import _allowed_hosts

    settings = make_settings(allowed_repos=f"{FIXTURE_REPO},gitae:{GITEA_REPO}")
    check = _allowed_hosts(settings, ["github"])
    assert check is not None and not check.ok and check.detail == "gitae: no such code host is on (github are)"
    assert _allowed_hosts(make_settings(), ["github"]) is None  # GitHub only: no line
    on = _allowed_hosts(make_settings(allowed_repos=f"gitea:{GITEA_REPO}"), ["github", "gitea"])
    assert on is not None and on.ok


def test_the_service_s_own_events_of_a_gitea_preview_report_to_gitea(fake_gitea: FakeCodeHost,
                                                                      make_settings: SettingsFactory,
                                                                      tmp_path: Path) -> None:
    """Sleep, wake, the TTL and start-up make their events from the record: they reach the record's host."""
    from orchestrator.flows.reporting import Reporter
    from orchestrator.rendering.plugin_host import CodeHosts
    from orchestrator.state.records import event_for_record
    from orchestrator.state.store import DeploymentStore
    from tests.support.records import sample_record, track

    settings = make_settings()
    record = sample_record(2, "gitea", "webhooks", codehost="gitea")
    track(settings.deployments_db, record)
    event = event_for_record(record, "sleep", "sleep-1")
    assert (event.codehost, event.repository) == ("gitea", "gitea/gitea/webhooks")
    github = FakeCodeHost().start()
    try:
        hosts = CodeHosts([gitea_host(fake_gitea), *build_plugin_host(load_entry_points=False).codehosts(
            make_settings(codehost_api_url=github.url), Metrics())])
        reporter = Reporter(hosts, DeploymentStore(settings.deployments_db), settings)
        reporter.comment(event, None, "The preview is asleep")
        assert [c["body"] for c in fake_gitea.comments_on("gitea", "webhooks", 2)] == ["The preview is asleep"]
        assert github.calls == []  # nothing went to GitHub
    finally:
        github.stop()


def test_only_writers_may_run_commands_on_gitea(fake_gitea: FakeCodeHost) -> None:
    """The gate of /preview commands: a collaborator's permission, owner/admin/write only; a token that may not read
    permissions is an error the flow reports, never a yes."""
    fake_gitea.permissions.update({"alice": "write", "olga": "owner", "rita": "read"})
    host = gitea_host(fake_gitea)
    assert host.can_write("gitea", "webhooks", "alice", None) and host.can_write("gitea", "webhooks", "olga", None)
    assert not host.can_write("gitea", "webhooks", "rita", None)
    assert not host.can_write("gitea", "webhooks", "mallory", None)  # no collaborator: 404
    assert "/api/v1/repos/gitea/webhooks/collaborators/mallory/permission" in [c.path for c in fake_gitea.calls]
    fake_gitea.fail_next(1, 403)
    with pytest.raises(CodeHostError, match="may not read collaborators' permissions"):
        host.can_write("gitea", "webhooks", "alice", None)
