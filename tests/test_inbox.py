"""The durable inbox and the dispatcher that drains it."""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from orchestrator.common.flow_control import FlowControl
from orchestrator.events.dispatcher import Dispatcher
from orchestrator.events.inbox import Inbox, InboxError
from orchestrator.state.records import DeploymentTaken, PullRequestEvent


def event(delivery: str, action: str = "opened", pr: int = 1, sha: str = "a" * 40) -> PullRequestEvent:
    return PullRequestEvent(
        delivery_id=delivery, action=action, deployment_id=f"acme-api-{pr}", project_slug="acme-api",
        repo_owner="acme", repo_name="api", pr_number=pr, branch="feature", commit_sha=sha,
        received_at=datetime.now(UTC),
    )


@pytest.fixture
def inbox(tmp_path: Path) -> Inbox:
    return Inbox(tmp_path / "inbox.sqlite3")


def drain(inbox: Inbox) -> list[str]:
    order = []
    while claimed := inbox.claim_next([]):
        order.append(claimed.event.delivery_id)
        inbox.finish(claimed.seq, None)
    return order


def test_duplicate_delivery_is_reported_and_not_stored(inbox: Inbox) -> None:
    first = inbox.accept(event("d1"))
    again = inbox.accept(event("d1"))
    assert not first.duplicate and again.duplicate and again.seq == first.seq
    assert drain(inbox) == ["d1"]
    assert inbox.accept(event("d1")).duplicate  # remembered after processing too


def test_events_survive_reopening(tmp_path: Path) -> None:
    path = tmp_path / "inbox.sqlite3"
    Inbox(path).accept(event("d1"))
    assert drain(Inbox(path)) == ["d1"]


def test_open_work_of_another_repository_with_the_same_id_is_never_touched(inbox: Inbox) -> None:
    mine = inbox.accept(event("mine", "synchronize"))
    twin = event("twin", "closed").model_copy(update={"repo_name": "API_"})  # same deployment id, other repo
    with pytest.raises(DeploymentTaken) as taken:
        inbox.accept(twin)
    assert (taken.value.owner, taken.value.name) == ("acme", "api")
    assert inbox.outcome(mine.seq) is None  # still pending: not cancelled by the other repository's `closed`
    assert drain(inbox) == ["mine"]
    assert not inbox.accept(twin).duplicate  # nothing open any more: the id is free


def test_newer_synchronize_supersedes_queued_one(inbox: Inbox) -> None:
    inbox.accept(event("open", "opened"))
    old = inbox.accept(event("sync-1", "synchronize", sha="b" * 40))
    inbox.accept(event("sync-2", "synchronize", sha="c" * 40))
    inbox.accept(event("other-pr", "synchronize", pr=2))
    assert inbox.outcome(old.seq).status == "superseded"
    assert drain(inbox) == ["open", "sync-2", "other-pr"]


def test_closed_cancels_queued_work_for_that_pull_request(inbox: Inbox) -> None:
    opened = inbox.accept(event("open", "opened"))
    inbox.accept(event("sync", "synchronize"))
    inbox.accept(event("other", "opened", pr=2))
    inbox.accept(event("close", "closed"))
    assert inbox.outcome(opened.seq).status == "cancelled"
    assert drain(inbox) == ["other", "close"]


def test_running_event_is_not_cancelled_and_its_deployment_is_skipped_while_busy(inbox: Inbox) -> None:
    inbox.accept(event("open", "opened"))
    running = inbox.claim_next([])
    inbox.accept(event("sync", "synchronize"))
    inbox.accept(event("other", "opened", pr=2))
    nxt = inbox.claim_next([running.event.deployment_id])
    assert nxt.event.delivery_id == "other"
    assert inbox.claim_next(["acme-api-1", "acme-api-2"]) is None


def test_interrupted_events_are_requeued(tmp_path: Path) -> None:
    path = tmp_path / "inbox.sqlite3"
    first = Inbox(path)
    first.accept(event("d1"))
    assert first.claim_next([]) is not None  # then the process dies
    restarted = Inbox(path)
    assert restarted.requeue_interrupted() == 1
    assert drain(restarted) == ["d1"]


def test_prune_keeps_recent_and_open_events(inbox: Inbox) -> None:
    inbox.accept(event("old"))
    drain(inbox)
    inbox.accept(event("open"))
    assert inbox.prune(now=datetime.now(UTC)) == 0
    assert inbox.prune(now=datetime.now(UTC) + timedelta(days=8)) == 1
    assert inbox.depth() == 1


def test_unwritable_location_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(InboxError, match="cannot be opened"):
        Inbox(blocker / "inbox.sqlite3")


class GatedHandler:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.active: dict[str, int] = {}
        self.max_total = 0
        self.max_per_deployment = 0
        self.seen: list[str] = []

    def handle(self, ev: PullRequestEvent, control: object = None) -> None:
        with self.lock:
            self.active[ev.deployment_id] = self.active.get(ev.deployment_id, 0) + 1
            self.max_total = max(self.max_total, sum(self.active.values()))
            self.max_per_deployment = max(self.max_per_deployment, self.active[ev.deployment_id])
        threading.Event().wait(0.05)
        with self.lock:
            self.active[ev.deployment_id] -= 1
            self.seen.append(ev.delivery_id)


@pytest.mark.parametrize("limit", [1, 3])
async def test_dispatcher_bounds_parallel_flows_and_serialises_each_deployment(inbox: Inbox,
                                                                               limit: int) -> None:
    handler = GatedHandler()
    deliveries = []
    for pr in range(1, 7):
        for n, action in enumerate(("opened", "synchronize")):
            deliveries.append(f"{pr}-{n}")
            inbox.accept(event(f"{pr}-{n}", action, pr=pr))
    dispatcher = Dispatcher(inbox, handler, max_concurrent=limit)
    await dispatcher.start()
    for _ in range(500):
        if inbox.depth() == 0:
            break
        await asyncio.sleep(0.02)
    await dispatcher.stop()
    assert sorted(handler.seen) == sorted(deliveries)
    assert handler.max_total == limit
    assert handler.max_per_deployment == 1
    for pr in range(1, 7):  # in order within one pull request
        assert handler.seen.index(f"{pr}-0") < handler.seen.index(f"{pr}-1")


async def test_a_crashing_handler_marks_the_event_failed_and_goes_on(inbox: Inbox) -> None:
    class Crashing:
        def handle(self, ev: PullRequestEvent, control: object = None) -> None:
            if ev.delivery_id == "boom":
                raise RuntimeError("bug")

    boom = inbox.accept(event("boom"))
    fine = inbox.accept(event("fine", pr=2))
    dispatcher = Dispatcher(inbox, Crashing(), max_concurrent=1)
    await dispatcher.start()
    outcome = await asyncio.wait_for(dispatcher.wait_for(fine.seq), 10)
    await dispatcher.stop()
    assert outcome.status == "done"
    assert inbox.outcome(boom.seq).status == "failed"
    assert inbox.outcome(boom.seq).error == "Internal error while processing the event"


async def test_a_wake_that_settles_answers_its_waiters_before_it_ends(inbox: Inbox) -> None:
    """A wake settles once the record says running: the request waiting for it is answered while the flow still
    reports (a comment on a slow code host); a waiter that comes after the settle is answered too. Any other flow
    that calls settle (a plugin's runtime, given the deploy's FlowControl) is waited for to its end."""
    reporting = threading.Event()

    class Settling:
        def handle(self, ev: PullRequestEvent, control: FlowControl) -> None:
            control.settle()
            reporting.wait(20)  # the comment, on a slow code host

    wake = inbox.accept(event("wake-1", action="wake"))
    deploy = inbox.accept(event("deploy-2", pr=2))
    dispatcher = Dispatcher(inbox, Settling(), max_concurrent=1)
    await dispatcher.start()
    try:
        first = await asyncio.wait_for(dispatcher.wait_for(wake.seq), 10)
        assert first.status == "done" and inbox.outcome(wake.seq) is None  # answered; the flow still runs
        late = await asyncio.wait_for(dispatcher.wait_for(wake.seq), 10)  # came after the settle
        assert late.status == "done" and inbox.outcome(wake.seq) is None
        with pytest.raises(TimeoutError):  # the deploy settled too, and still runs: not answered
            await asyncio.wait_for(dispatcher.wait_for(deploy.seq), 1)
    finally:
        reporting.set()
        await dispatcher.stop()
    assert inbox.outcome(wake.seq).status == "done" and inbox.outcome(deploy.seq).status == "done"


class SlowBuilds:
    """Deploys that run until cancelled (or 20 s); cleanups that return at once."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.finished: list[tuple[str, str]] = []

    def handle(self, ev: PullRequestEvent, control: FlowControl) -> None:
        if ev.action != "closed":
            control.wait(20)
        with self.lock:
            self.finished.append((ev.delivery_id, "cancelled" if control.cancelled else "done"))


async def test_cleanups_never_wait_for_slow_builds_and_cancel_their_own_deploy(inbox: Inbox) -> None:
    handler = SlowBuilds()
    dispatcher = Dispatcher(inbox, handler, max_concurrent=2)
    await dispatcher.start()
    try:
        for pr in (1, 2):
            inbox.accept(event(f"build-{pr}", pr=pr))
        dispatcher.notify()
        await asyncio.sleep(0.3)
        other = inbox.accept(event("close-3", "closed", pr=3))  # both build slots are taken
        dispatcher.notify()
        assert (await asyncio.wait_for(dispatcher.wait_for(other.seq), 5)).status == "done"
        closing = inbox.accept(event("close-1", "closed", pr=1))
        assert dispatcher.cancel("acme-api-1", "the pull request was closed")
        dispatcher.notify()
        assert (await asyncio.wait_for(dispatcher.wait_for(closing.seq), 5)).status == "done"
        assert ("build-1", "cancelled") in handler.finished
        assert ("build-2", "cancelled") not in handler.finished and ("build-2", "done") not in handler.finished
        assert not dispatcher.cancel("acme-api-9", "nothing runs")
    finally:
        dispatcher.cancel("acme-api-2", "the test ends")
        await dispatcher.stop()
