"""The steps of a deploy that concern the preview's data: the repository's `seed` as the runtime will restore it
(the dump in the checkout, or the operator's snapshot of this project), and the migration files the pull request
changes (said in the comment; looked for beside the build)."""

from __future__ import annotations

from pathlib import Path

from orchestrator.common.checkout_paths import inside
from orchestrator.common.commands import CommandFailed
from orchestrator.common.flow_control import FlowControl
from orchestrator.common.naming import CODEHOST, branch_problem
from orchestrator.common.path_glob import matching
from orchestrator.common.text_table import printable
from orchestrator.flows.context import FlowContext, StepFailed, Target
from orchestrator.plugin_api.preview_config import PreviewConfig
from orchestrator.plugin_api.types import DataSeed
from orchestrator.rendering.compose_file import RenderedDeployment
from orchestrator.state.records import PullRequestEvent


class DataSteps:
    def __init__(self, context: FlowContext) -> None:
        self.c = context

    def migrations(self, event: PullRequestEvent, target: Target, config: PreviewConfig,
                   control: FlowControl) -> list[str]:
        """The files where the framework keeps migrations (po_migrations) that the pull request changes since its
        base branch; none when it has no base or git cannot tell (the log says why). Beside the build."""
        patterns = self.c.plugins.migrations(config.framework)
        if not patterns or not event.base_ref or branch_problem(event.base_ref) or not event.clone_url:
            return []
        # A fork's `origin` is the fork: its base branch is the fork's, the author's to move.
        if known_fork(event):
            target.log.note("migrations not looked for: the pull request comes from a fork")
            return []
        try:
            changed = self.c.git.changed_since(event.clone_url, event.base_ref, target.work_dir, target.git_dir,
                                               target.log, control, local=event.local, codehost=event.codehost)
        except (CommandFailed, OSError) as exc:
            target.log.note(f"migrations not looked for: the changes since {event.base_ref} are unknown ({exc})")
            return []
        found = matching(changed, patterns)
        if found:
            target.log.note(f"{len(found)} migration file(s) changed since {event.base_ref}: "
                            f"{printable(', '.join(found[:10]))}")
        return found

    def seed(self, event: PullRequestEvent, target: Target, config: PreviewConfig,
                  rendered: RenderedDeployment) -> DataSeed | None:
        """The repository's `seed` as the runtime restores it: the dump in the checkout (a regular file, no link)
        or the operator's snapshot of this project; StepFailed when the preview cannot have it."""
        if config.seed is None:
            return None
        if rendered.seed is None or rendered.seed.restore is None:
            where = " of a repository compose file" if rendered.repository_owned else ""
            raise StepFailed(f"seed is not valid (the {config.database} database{where} cannot be seeded)")
        if config.seed.file is not None:
            path = target.work_dir / config.seed.file
            if path.is_symlink() or not inside(target.work_dir, path) or not path.is_file():
                raise StepFailed(f"seed.file is not valid ({config.seed.file} is not a file in the repository)")
            name = path.name
        else:
            refused = snapshot_refusal(event)
            if refused:
                raise StepFailed(refused)
            name = str(config.seed.snapshot)
            path = snapshot_path(self.c.settings.snapshots_path, target.slug, event, name)
        return DataSeed(repository=event.repository, source=config.seed.source, name=name, path=str(path),
                        commands=list(config.seed.commands))


def snapshot_path(snapshots: Path, slug: str, event: PullRequestEvent, name: str) -> Path:
    """The operator's snapshot `name` for the repository of `event`: in SNAPSHOTS_DIR/{projectSlug}/, whose
    `.repository` file must name the repository (`owner/name`, or `host/owner/name`) — two repositories can share
    a slug (`acme/web-app`, `acme/web.app`), and only the one the operator meant may read its data."""
    folder = snapshots / slug
    try:
        named = {line.strip().lower() for line in (folder / ".repository").read_text().splitlines() if line.strip()}
    except OSError:
        raise StepFailed(f"seed.snapshot is not valid (the operator's folder SNAPSHOTS_DIR/{slug}/ does not name "
                         "this repository in its .repository file)") from None
    # `owner/name` names a repository of the default code host; another host's is named `host/owner/name`
    accepted = {event.repository} | ({f"{event.repo_owner}/{event.repo_name}".lower()}
                                     if event.repository.startswith(f"{CODEHOST}/") else set())
    if not named & accepted:
        raise StepFailed(f"seed.snapshot is not valid (SNAPSHOTS_DIR/{slug}/ belongs to another repository)")
    path = (folder / name).resolve()  # the operator's own links are followed
    if not path.is_file():
        raise StepFailed(f"seed.snapshot is not valid (the operator keeps no snapshot {name} for this repository "
                         f"in SNAPSHOTS_DIR/{slug}/)")
    return path


def snapshot_refusal(event: PullRequestEvent) -> str | None:
    """Why the pull request of `event` may not have the operator's snapshots, or None. A fork's author is not the
    repository's: the operator's data is not theirs to read. A pull request whose head is unknown (an event made
    from a record older than its `headRepository`, or from one whose last event named none) might be one."""
    if known_fork(event):
        return "seed.snapshot is not valid (a pull request from a fork cannot use the operator's snapshots)"
    if not event.local and not event.head_repo_full_name:
        return ("seed.snapshot is not valid (the pull request's head repository is not known yet: the operator's "
                "snapshots wait for its next push)")
    return None


def known_fork(event: PullRequestEvent) -> bool:
    """The event names a head repository other than the base: a delivery's, an approval's, the reconcile's, or the
    record's (`headRepository`) for an event the service makes from it (reset-db, redeploy). An event from a
    record older than that field names none."""
    return bool(event.head_repo_full_name) and not event.local and event.from_fork
