"""Linked previews (preview-config.yml `links`; docs/routing.md, "Linked previews"): a link resolves to the linked
repository's preview of the same head branch, else its base preview, else nothing; the app gets
PREVIEW_LINK_{AS}_URL; a preview whose links resolve elsewhere later is deployed again at its own commit; a link to a
repository the service does not allow fails the deploy with a clear message."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.common.naming import BASE
from orchestrator.flows import comments
from orchestrator.flows.context import StepFailed
from orchestrator.flows.links import Links
from orchestrator.plugin_api.preview_config import ConfigError, parse_preview_config
from orchestrator.plugin_api.preview_links import LinkConfig
from orchestrator.rendering.plugin_host import PluginHost
from orchestrator.state.records import PreviewLink
from tests.conftest import SettingsFactory
from tests.support import web
from tests.support.engines import engine_for
from tests.support.git_repos import PullRequestRepo, make_pr_repo
from tests.support.live import wait_until
from tests.support.payloads import pr_payload, webhook_headers
from tests.support.records import sample_record, track
from tests.support.repos import config_for
from tests.support.stack import SLUG, Stack, start_stack, stop_stack
from tests.test_base_previews import base_repo

API = LinkConfig(repo="acme/api", name="API")
DOCS = Path(__file__).resolve().parents[1] / "docs" / "plugins.md"


def config_with(links: list[dict[str, Any]], host: PluginHost) -> Any:
    return parse_preview_config({**config_for("python"), "links": links}, host.known_names())


def test_links_are_checked_like_the_rest_of_the_file(host: PluginHost) -> None:
    config = config_with([{"repo": "acme/api", "as": "API"}, {"repo": "gitlab:group/sub/api", "as": "GL_API"}], host)
    assert [(link.repo, link.name) for link in config.links] == [("acme/api", "API"), ("gitlab:group/sub/api",
                                                                                         "GL_API")]
    with pytest.raises(ConfigError) as refused:
        config_with([{"repo": "acme/api", "as": "api"}, {"repo": "../etc", "as": "X"},
                     {"repo": "acme/api", "as": "A", "branch": "main"}], host)
    assert refused.value.problems == [
        "links.as is not valid (`as` must be upper-case letters, digits and _, starting with a letter "
        "(PREVIEW_LINK_{AS}_URL))",
        "links.repo is not valid (must be owner/repo, or host:owner/repo for another code host (ALLOWED_REPOS' "
        "form))",
        "links.branch is not a known field"]
    with pytest.raises(ConfigError, match="two links share one `as`"):
        config_with([{"repo": "acme/api", "as": "API"}, {"repo": "acme/web", "as": "API"}], host)


def test_a_link_resolves_to_the_same_branch_then_the_base_then_nothing(make_settings: SettingsFactory,
                                                                       tmp_path: Path) -> None:
    engine = engine_for(make_settings(allowed_repos="acme/web,acme/api"))
    links = Links(engine.context)
    base = sample_record(BASE, "acme", "api", branch="main")
    same = sample_record(7, "acme", "api", branch="feature/x")
    other = sample_record(8, "acme", "api", branch="feature/y", status="failed")
    track(tmp_path / "state" / "deployments.json", base, same, other)
    [to_same] = links.resolve([API], "feature/x", "github/acme/web")
    assert (to_same.deploymentId, to_same.url) == ("acme-api-7", same.url)
    [to_base] = links.resolve([API], "feature/y", "github/acme/web")  # PR 8 failed: not served
    assert (to_base.deploymentId, to_base.url) == ("acme-api-base", base.url)
    [none] = links.resolve([LinkConfig(repo="acme/web", name="SELF")], "feature/x", "github/acme/web")
    assert (none.deploymentId, none.url) == (None, None)  # never its own repository
    with pytest.raises(StepFailed, match=r"links: evil/api not in ALLOWED_REPOS: a preview links only to "
                                         r"repositories this service allows"):
        links.resolve([API, LinkConfig(repo="evil/api", name="EVIL")], "feature/x", "github/acme/web")


def test_a_link_names_a_repository_of_another_code_host_and_resolves_only_there(make_settings: SettingsFactory,
                                                                               tmp_path: Path) -> None:
    """A GitHub frontend linking the API on Gitea (`gitea:acme/api`): the Gitea repository's previews, never the
    GitHub repository of the same name; allowed only where ALLOWED_REPOS names it on that host."""
    engine = engine_for(make_settings(allowed_repos="acme/web,acme/api,gitea:acme/api"))
    links = Links(engine.context)
    on_github = sample_record(7, "acme", "api", branch="feature/x")
    on_gitea = sample_record(9, "acme", "api", branch="feature/x", codehost="gitea", deploymentId="acme-api-9",
                             url="http://x/gitea-api/pr-9/")
    track(tmp_path / "state" / "deployments.json", on_github, on_gitea)
    [gitea] = links.resolve([LinkConfig(repo="gitea:acme/api", name="API")], "feature/x", "github/acme/web")
    assert (gitea.deploymentId, gitea.url, gitea.repo) == ("acme-api-9", on_gitea.url, "gitea:acme/api")
    [github] = links.resolve([API], "feature/x", "github/acme/web")
    assert github.deploymentId == "acme-api-7"
    with pytest.raises(StepFailed, match=r"links: gitlab:acme/api not in ALLOWED_REPOS"):
        links.resolve([LinkConfig(repo="gitlab:acme/api", name="API")], "feature/x", "github/acme/web")


def test_a_preview_whose_link_resolves_elsewhere_now_is_restarted_at_its_commit(
        make_settings: SettingsFactory, tmp_path: Path) -> None:
    engine = engine_for(make_settings(allowed_repos="acme/web,acme/api"))
    base = sample_record(BASE, "acme", "api", branch="main")
    web = sample_record(3, "acme", "web", branch="feature/x", links=[
        PreviewLink(name="API", repo="acme/api", deploymentId=base.deploymentId, url=base.url)])
    track(tmp_path / "state" / "deployments.json", base, web)
    assert engine.relinks() == []  # as it resolved
    track(tmp_path / "state" / "deployments.json", sample_record(7, "acme", "api", branch="feature/x"))
    [(event, said)] = engine.relinks()
    assert (event.action, event.deployment_id, event.commit_sha, event.trigger) == ("synchronize", "acme-web-3",
                                                                                    web.commitSha, "relink")
    assert "API → acme-api-7" in said


def test_the_ready_comment_says_where_each_link_resolved() -> None:
    text = comments.ready("http://x/a/pr-1/", "a" * 40, 3.0, links=[
        PreviewLink(name="API", repo="acme/api", deploymentId="acme-api-7", url="http://x/acme-api/pr-7/"),
        PreviewLink(name="AUTH", repo="acme/auth", deploymentId="acme-auth-base", url="http://x/acme-auth/base/"),
        PreviewLink(name="PAY", repo="acme/pay", deploymentId=None, url=None)])
    assert "- `API` → acme/api: preview `acme-api-7` (http://x/acme-api/pr-7/)" in text
    assert "- `AUTH` → acme/auth: its base preview (http://x/acme-auth/base/)" in text
    assert "- `PAY` → acme/pay: no preview runs; deployed without it" in text


# End to end: two repositories, real git, Docker and nginx ---------------------------------------------------------


def documented_frontend() -> str:
    """The frontend's preview-config.yml of docs/plugins.md, "A frontend and its API in two repositories"."""
    section = DOCS.read_text().split("### A frontend and its API in two repositories", 1)[1]
    return section.split("```yaml\n", 1)[1].split("```", 1)[0]


def test_the_documented_frontend_links_the_api_as_the_tests_deploy_it(host: PluginHost) -> None:
    config = parse_preview_config(yaml.safe_load(documented_frontend()), host.known_names())
    assert [(link.repo, link.name) for link in config.links] == [("acme/api", "API")]


def api_pull(stack: Stack, action: str, pr: int, repo: PullRequestRepo, sha: str) -> None:
    body = pr_payload(action, number=pr, sha=sha, clone_url=repo.clone_url, ref=repo.branch, repository="acme/api")
    answer = web.post(f"{stack.service.url}/webhook/codehost", content=body, headers=webhook_headers(body),
                      timeout=10)
    assert answer.status_code == 200, answer.text


def linked_url(stack: Stack, pr: int) -> str:
    return stack.page(pr, "env/PREVIEW_LINK_API_URL").text


@pytest.mark.docker
@pytest.mark.live
def test_a_frontend_preview_follows_its_api_from_the_base_preview_to_the_same_branch_and_back(tmp_path: Path) -> None:
    api_base = base_repo(tmp_path / "api", "main")
    stack = start_stack(tmp_path / "stack", ALLOWED_REPOS="Codertocat/Hello-World,acme/api", BASE_PREVIEWS="acme/api",
                        RECONCILE_INTERVAL_MINUTES="0.02")
    stack.codehost.repositories[("acme", "api")] = {"clone_url": api_base.clone_url}
    try:
        wait_until(lambda: stack.records().get("acme-api-base", {}).get("status") == "running", timeout=300,
                   message="the API's base preview")
        base_url = f"{stack.nginx.url}/acme-api/base/"
        web = make_pr_repo(tmp_path / "web", "python", "feature/checkout",
                           files={"preview-config.yml": documented_frontend()})  # docs/plugins.md's, as written
        stack.send("opened", 5, web, web.sha_a)
        record = stack.wait_for(5, "running", web.sha_a)
        assert [link["deploymentId"] for link in record["links"]] == ["acme-api-base"]
        assert linked_url(stack, 5) == base_url
        stack.wait_comment(5, "- `API` → acme/api: its base preview")
        # the API's pull request of the same branch opens: the frontend follows within a look, without a rebuild
        api_pr = make_pr_repo(tmp_path / "api-pr", "python", "feature/checkout", config=config_for("python"))
        api_pull(stack, "opened", 7, api_pr, api_pr.sha_a)
        wait_until(lambda: linked_url(stack, 5) == f"{stack.nginx.url}/acme-api/pr-7/", timeout=300,
                   message="the frontend linked to the API's pull request")
        assert stack.records()[f"{SLUG}-5"]["commitSha"] == web.sha_a
        stack.wait_comment(5, "- `API` → acme/api: preview `acme-api-7`", comments.TRIGGERS["relink"])
        # restarted: its images kept (the engine still had them), the commit not fetched, nothing built
        log = stack.logs(5)
        assert f"restart at {web.sha_a}: checked out again, not fetched" in log
        assert "restart: the images of the last build kept, nothing built" in log
        restart = log.rsplit("restart at", 1)[1]
        compose_runs = [line for line in restart.splitlines() if "docker-compose --project-name" in line]
        assert compose_runs and not [line for line in compose_runs if " build" in line]
        # it closes: back to the base preview
        api_pull(stack, "closed", 7, api_pr, api_pr.sha_a)
        wait_until(lambda: linked_url(stack, 5) == base_url, timeout=300, message="back to the base preview")
        stack.close(5, web, web.sha_a)
    finally:
        stop_stack(stack)


@pytest.mark.docker
@pytest.mark.live
def test_a_link_to_a_repository_not_allowed_fails_the_deploy_and_says_why(tmp_path: Path) -> None:
    stack = start_stack(tmp_path)
    try:
        web = make_pr_repo(tmp_path / "web", "python", "feature/evil",
                           config=config_for("python", links=[{"repo": "evil/api", "as": "API"}]))
        stack.send("opened", 6, web, web.sha_a)
        record = stack.wait_for(6, "failed")
        assert record["error"] == ("links: evil/api not in ALLOWED_REPOS: a preview links only to repositories this "
                                   "service allows")
        stack.wait_comment(6, "evil/api not in ALLOWED_REPOS")
        stack.close(6, web, web.sha_a)
    finally:
        stop_stack(stack)
