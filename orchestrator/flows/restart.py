"""A restart: a preview that runs a commit already deployed again at that commit, with new values (a linked
preview moved: links.py) or a new database (`/preview reset-db`: commands.py). The commit is not fetched and nothing is
built when the checkout still holds the commit and the runtime still has the images of its last build; every other
step runs as in an update, so the services start from a freshly rendered compose file. Anything missing makes it
an ordinary update, which is always correct."""

from __future__ import annotations

from orchestrator.common.commands import CommandFailed
from orchestrator.common.flow_control import FlowControl
from orchestrator.flows.context import FlowContext, Target
from orchestrator.state.records import DeploymentRecord, PullRequestEvent


def restarts(event: PullRequestEvent, existing: DeploymentRecord | None) -> bool:
    """Whether the preview already runs the event's commit (running, or asleep), as its last deploy built it."""
    return existing is not None and existing.status in ("running", "sleeping") and \
        event.commit_sha is not None and existing.commitSha == event.commit_sha


def checked_out_again(c: FlowContext, event: PullRequestEvent, target: Target, control: FlowControl) -> bool:
    """The commit checked out again from what the checkout holds (the last render's leftovers removed, nothing
    fetched), when the runtime still has the images; False, with the reason in the deployment log, otherwise."""
    compose_file = target.compose_file()  # the last render's: `git clean` below removes it
    if not event.branch or not event.commit_sha or compose_file is None or \
            not c.git.has_checkout(target.work_dir, target.git_dir):
        target.log.note("restart: no checkout of the last deploy; fetched and built again")
        return False
    if not c.runtime.has_images(event.deployment_id, compose_file):
        target.log.note("restart: the images of the last build are gone; built again")
        return False
    try:
        c.git.checkout(event.clone_url or "", event.branch, event.commit_sha, target.work_dir, target.git_dir,
                       target.log, control, local=event.local, codehost=event.codehost, fetch=False)
    except CommandFailed:
        target.log.note("restart: the checkout does not hold the commit; fetched and built again")
        return False
    target.log.note(f"restart at {event.commit_sha}: checked out again, not fetched; the images of the last build "
                   "kept")
    return True
