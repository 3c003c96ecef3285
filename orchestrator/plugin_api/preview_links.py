"""`links` of preview-config.yml: another repository's preview that this one's services call (docs/routing.md,
"Linked previews")."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator

# ALLOWED_REPOS' form: `owner/repo`, or `host:owner/repo` (GitLab's group path: several segments)
LINKED_REPO = re.compile(r"(?:[a-z][a-z0-9-]{0,30}:)?[A-Za-z0-9][A-Za-z0-9._-]{0,99}"
                         r"(?:/[A-Za-z0-9._-]*[A-Za-z0-9_-][A-Za-z0-9._-]*){1,20}")
LINK_NAME = re.compile(r"[A-Z][A-Z0-9_]{0,31}")  # PREVIEW_LINK_{AS}_URL


class LinkConfig(BaseModel):
    """`links`: another repository's preview this one's services call (`as`: the variable's name part); it resolves
    to that repository's preview of the same head branch, else its base preview (docs/routing.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, populate_by_name=True)

    repo: str = Field(max_length=300)
    name: str = Field(alias="as", max_length=32)

    @field_validator("repo")
    @classmethod
    def _repo(cls, value: str) -> str:
        if not LINKED_REPO.fullmatch(value):
            raise ValueError("must be owner/repo, or host:owner/repo for another code host (ALLOWED_REPOS' form)")
        return value

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not LINK_NAME.fullmatch(value):
            raise ValueError("`as` must be upper-case letters, digits and _, starting with a letter (PREVIEW_LINK_"
                             "{AS}_URL)")
        return value
