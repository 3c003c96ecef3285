"""Which pull requests get a preview: drafts and the opt-in label (PREVIEW_DRAFTS, PREVIEW_DRAFT_CONVERTED,
PREVIEW_LABEL), the same for every code host (a plugin reports a change's draft flag and labels). `ready_for_review`
and `labeled` become a deploy (`opened`: a preview that exists is updated) and `converted_to_draft`/`unlabeled` a
cleanup (`closed`); an action that is not acted on says why."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.plugin_api.deliveries import PullRequestChange
from orchestrator.settings import Settings

DEPLOY, CLEANUP = "opened", "closed"


@dataclass(frozen=True)
class Gate:
    drafts: bool = False  # PREVIEW_DRAFTS
    keep_converted: bool = False  # PREVIEW_DRAFT_CONVERTED=keep
    label: str = ""  # PREVIEW_LABEL; empty: every pull request

    @classmethod
    def of(cls, settings: Settings) -> Gate:
        return cls(settings.preview_drafts, settings.preview_draft_converted == "keep", settings.preview_label)

    def decide(self, change: PullRequestChange) -> tuple[str | None, str]:
        """The action the flows see (None: not acted on) and why, for the log line."""
        action, draft, event_label = change.action, change.draft, change.changed_label
        labelled = bool(self.label) and self.label.lower() in change.labels
        ours = bool(self.label) and isinstance(event_label, str) and event_label.lower() == self.label.lower()
        labelled = labelled or (action == "labeled" and ours)  # the label just added counts, listed or not
        if action == CLEANUP:
            return CLEANUP, "closed"
        if action == "converted_to_draft":
            if self.drafts:
                return None, "converted to draft: drafts get previews (PREVIEW_DRAFTS=true)"
            if self.keep_converted:
                return None, "converted to draft: the preview is kept (PREVIEW_DRAFT_CONVERTED=keep)"
            return CLEANUP, "converted to draft: its preview is removed (PREVIEW_DRAFTS=false)"
        if action == "labels_changed":  # the host does not say which label changed: the current ones decide
            if not self.label:
                return None, "labels changed: labels are not used (PREVIEW_LABEL is empty)"
            if not labelled:
                return CLEANUP, f"labels changed: {self.label!r} is not on the pull request, its preview is removed"
            if draft and not self.drafts:
                return None, "labels changed on a draft pull request: PREVIEW_DRAFTS is false"
            return DEPLOY, f"labels changed: {self.label!r} is on the pull request, deployed"
        if action == "unlabeled":
            if not ours:
                return None, f"unlabeled {event_label!r}: not PREVIEW_LABEL" if self.label else \
                    "unlabeled: labels are not used (PREVIEW_LABEL is empty)"
            return CLEANUP, f"label {self.label!r} removed: its preview is removed"
        if action == "labeled" and not ours:
            return None, f"labeled {event_label!r}: not PREVIEW_LABEL" if self.label else \
                "labeled: labels are not used (PREVIEW_LABEL is empty)"
        if draft and not self.drafts:
            return None, f"{action} of a draft pull request: PREVIEW_DRAFTS is false"
        if self.label and not labelled:
            return None, f"{action}: label {self.label!r} is not on the pull request (PREVIEW_LABEL)"
        if action in ("labeled", "ready_for_review"):
            return DEPLOY, f"{action}: deployed"
        return action, action
