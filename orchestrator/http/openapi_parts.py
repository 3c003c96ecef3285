"""The pieces every operation of the OpenAPI description is made of (openapi_paths.py, openapi_reviewers.py)."""

from __future__ import annotations

from typing import Any

from orchestrator.common.naming import DEPLOYMENT_ID_PATTERN


def json(ref: str) -> dict[str, Any]:
    return {"application/json": {"schema": {"$ref": f"#/components/schemas/{ref}"}}}


def error(description: str) -> dict[str, Any]:
    return {"description": description, "content": json("Error")}


def body(media: str, schema_type: str = "string") -> dict[str, Any]:
    return {media: {"schema": {"type": schema_type}}}


def document_get(operation_id: str, summary: str, description: str, media: str,
                  schema_type: str = "string") -> dict[str, Any]:
    """A GET that always answers 200 with one document (this description, a page, the metrics)."""
    return {"get": {"operationId": operation_id, "summary": summary,
                    "responses": {"200": {"description": description, "content": body(media, schema_type)}}}}


def deployment_parameter() -> dict[str, Any]:
    return {"name": "deploymentId", "in": "path", "required": True,
            "schema": {"type": "string", "pattern": DEPLOYMENT_ID_PATTERN.pattern},
            "description": "{projectSlug}-{prNumber}, or {projectSlug}-base (BASE_PREVIEWS); anything "
                           "else is answered 400"}
