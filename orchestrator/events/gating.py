"""Which pull requests get a preview: drafts and the opt-in label (PREVIEW_DRAFTS, PREVIEW_DRAFT_CONVERTED,
PREVIEW_LABEL). GitHub's `ready_for_review`/`labeled` become a deploy (`opened`: a preview that exists is updated)
and `converted_to_draft`/`unlabeled` a cleanup (`closed`); an action that is not acted on says why."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

DEPLOY, CLEANUP = "opened", "closed"


@dataclass(frozen=True)
class Gate:
    drafts: bool = False  # PREVIEW_DRAFTS
    keep_converted: bool = False  # PREVIEW_DRAFT_CONVERTED=keep
    label: str = ""  # PREVIEW_LABEL; empty: every pull request

    def decide(self, action: str, document: dict[str, Any]) -> tuple[str | None, str]:
        """The action the flows see (None: not acted on) and why, for the log line."""
        pr = document.get("pull_request") if isinstance(document.get("pull_request"), dict) else {}
        draft = pr.get("draft") is True
        labelled = self._labelled(pr)
        event_label = (document.get("label") or {}).get("name") if isinstance(document.get("label"), dict) else None
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

    def _labelled(self, pr: dict[str, Any]) -> bool:
        labels = pr.get("labels") if isinstance(pr.get("labels"), list) else []
        names = {str(item.get("name", "")).lower() for item in labels if isinstance(item, dict)}
        return self.label.lower() in names
