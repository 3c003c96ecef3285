"""The service's OpenAPI 3.0.3 description: its schemas generated from the pydantic models (converted to 3.0
here), its operations written in openapi_paths.py."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from orchestrator.codehosts.github_payload import WebhookPayload
from orchestrator.http.openapi_paths import operations
from orchestrator.state import http_bodies as models

API_VERSION = "0.1.0"
_REF = "#/components/schemas/{model}"


def _to_openapi30(node: Any) -> Any:
    """JSON Schema 2020-12 (pydantic) → OpenAPI 3.0 schema objects: `null` unions, `const`, examples."""
    if isinstance(node, list):
        return [_to_openapi30(item) for item in node]
    if not isinstance(node, dict):
        return node
    node = {key: _to_openapi30(value) for key, value in node.items()}
    for union in ("anyOf", "oneOf"):
        options = node.get(union)
        if options and any(option == {"type": "null"} for option in options):
            rest = [option for option in options if option != {"type": "null"}]
            node.pop(union)
            if len(rest) == 1 and "$ref" not in rest[0]:
                node.update(rest[0])
            elif len(rest) == 1:
                node["allOf"] = rest
            else:
                node[union] = rest
            node["nullable"] = True
    if "const" in node:
        node["enum"] = [node.pop("const")]
    if "examples" in node:
        examples = node.pop("examples")
        if isinstance(examples, list) and examples:
            node["example"] = examples[0]
    if "$ref" in node and len(node) > 1:
        # 3.0 ignores siblings of $ref; keep the description by wrapping.
        node = {"allOf": [{"$ref": node.pop("$ref")}], **node}
    return node


def _schemas(*roots: type[BaseModel]) -> dict[str, Any]:
    components: dict[str, Any] = {}
    for model in roots:
        schema = model.model_json_schema(ref_template=_REF, mode="serialization")
        for name, definition in schema.pop("$defs", {}).items():
            components[name] = _to_openapi30(definition)
        components[schema.get("title", model.__name__)] = _to_openapi30(schema)
    return components


def build_openapi(server_url: str | None) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "openapi": "3.0.3",
        "info": {
            "title": "Preview Orchestrator",
            "version": API_VERSION,
            "description": "One isolated preview environment per pull request. Only the webhook is "
            "authenticated (HMAC signature); the other endpoints rely on the service being internal.",
        },
        "paths": operations(),
        "components": {
            "schemas": _schemas(
                models.Health,
                models.StatusOk,
                models.CleanupResult,
                models.ErrorBody,
                models.DeploymentList,
                models.LocalPreviewRequest,
                models.LocalPreviewAccepted,
                WebhookPayload,
                models.PluginList,
                models.DeliveryList,
                models.ReplayAccepted,
            )
        },
    }
    if server_url:
        doc["servers"] = [{"url": server_url}]
    return doc
