"""Code host plugins for tests that parse deliveries without a service: GitHub's (the spec's) with the test
secret, its API pointed at nothing."""

from __future__ import annotations

from collections.abc import Callable

from orchestrator.codehosts.gitea import Gitea
from orchestrator.codehosts.github import GitHub, api_client
from orchestrator.events.gating import Gate
from orchestrator.events.webhook import parse_delivery
from orchestrator.observability.metrics import Metrics
from orchestrator.plugin_api.codehost import ApiClient, CodeHost
from orchestrator.plugin_api.deliveries import Delivery, Ignored
from orchestrator.rendering.plugin_host import CodeHosts
from orchestrator.state.records import PullRequestEvent
from tests.support.payloads import SECRET

NOWHERE = "http://127.0.0.1:9"


def github(secret: str = SECRET) -> GitHub:
    return GitHub(api_client(NOWHERE, "", metrics=Metrics()), NOWHERE, "", secret)


def parse_github(body: bytes, event: str | None, delivery: str | None, allowed: frozenset[str],
                 gate: Gate = Gate()) -> PullRequestEvent | Ignored:  # noqa: B008 - frozen
    """What the service makes of a verified GitHub delivery (`event`: X-GitHub-Event, `delivery`:
    X-GitHub-Delivery; None: the header is not sent)."""
    headers = {name: value for name, value in (("x-github-event", event), ("x-github-delivery", delivery))
               if value is not None}
    return parse_delivery(github(), Delivery(headers, body), allowed, gate)


def clone_credentials(token: str, api_url: str, gitea_url: str | None = None,
                      gitea_token: str = "") -> Callable[[str, str], str | None]:
    """What git asks for a clone URL's credentials, as the service wires it: the code hosts that are on."""
    hosts: list[CodeHost] = [GitHub(api_client(api_url, token, metrics=Metrics()), api_url, token, SECRET)]
    if gitea_url is not None:
        hosts.append(Gitea(ApiClient(f"{gitea_url}/api/v1", {}, metrics=Metrics()), gitea_url, gitea_token, SECRET))
    return CodeHosts(hosts).clone_authorization
