"""A restart: a preview that runs a commit already deployed again at that commit, with new values (a linked
preview moved: links.py) or a new database (`/preview reset-db`: commands.py). The commit is checked out again from
what the checkout holds, not fetched, and the images are not built when the runtime still has every image the
freshly rendered compose file names; every other step runs as in an update (build_commands too: what they make
lives in the checkout, which a compose file may read), so the services start from a freshly rendered compose file.
Anything missing makes that step an ordinary update's, which is always correct. A restart keeps the images of the
last build: a setting that changes how images are built (IMAGE_OVERRIDES, a plugin's template) applies from the
next push."""

from __future__ import annotations

from pathlib import Path

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
    fetched); False, with the reason in the deployment log, when it does not hold it."""
    if not event.branch or not event.commit_sha or not c.git.has_checkout(target.work_dir, target.git_dir):
        target.log.note("restart: no checkout of the last deploy; cloned again")
        return False
    try:
        c.git.checkout(event.clone_url or "", event.branch, event.commit_sha, target.work_dir, target.git_dir,
                       target.log, control, local=event.local, codehost=event.codehost, fetch=False)
    except CommandFailed:
        target.log.note("restart: the checkout does not hold the commit; fetched again")
        return False
    target.log.note(f"restart at {event.commit_sha}: checked out again, not fetched")
    return True


def images_kept(c: FlowContext, event: PullRequestEvent, target: Target, compose_file: Path) -> bool:
    """Whether the runtime still has every image the freshly rendered compose file names (as the last build left
    them): then nothing is built."""
    if c.runtime.has_images(event.deployment_id, compose_file):
        target.log.note("restart: the images of the last build kept, nothing built")
        return True
    target.log.note("restart: the images of the last build are gone; built again")
    return False
