"""The service's OpenAPI 3.0.3 description, with schemas generated from the pydantic models."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from orchestrator.codehosts.github_payload import WebhookPayload
from orchestrator.common.naming import DEPLOYMENT_ID_PATTERN
from orchestrator.events.webhook import MAX_BODY_BYTES
from orchestrator.state import records as models

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


def _json(ref: str) -> dict[str, Any]:
    return {"application/json": {"schema": {"$ref": f"#/components/schemas/{ref}"}}}


def _error(description: str) -> dict[str, Any]:
    return {"description": description, "content": _json("Error")}


def build_openapi(server_url: str | None) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "openapi": "3.0.3",
        "info": {
            "title": "Preview Orchestrator",
            "version": API_VERSION,
            "description": "One isolated preview environment per pull request. Only the webhook is "
            "authenticated (HMAC signature); the other endpoints rely on the service being internal.",
        },
        "paths": _paths(),
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


def _body(media: str, schema_type: str = "string") -> dict[str, Any]:
    return {media: {"schema": {"type": schema_type}}}


def _document_get(operation_id: str, summary: str, description: str, media: str,
                  schema_type: str = "string") -> dict[str, Any]:
    """A GET that always answers 200 with one document (this description, a page, the metrics)."""
    return {"get": {"operationId": operation_id, "summary": summary,
                    "responses": {"200": {"description": description, "content": _body(media, schema_type)}}}}


def _paths() -> dict[str, Any]:
    return {
        "/health": {
            "get": {
                "operationId": "getHealth",
                "summary": "Liveness check",
                "responses": {"200": {"description": "The service is up", "content": _json("Health")}},
            }
        },
        "/openapi.json": _document_get("getOpenApi", "This description", "OpenAPI 3.0.3 document",
                                       "application/json", "object"),
        "/api-docs": _document_get("getApiDocs", "Interactive API page (Swagger UI, served offline)", "HTML page",
                                   "text/html"),
        "/webhook/codehost": {
            "post": {
                "operationId": "receiveWebhook",
                "summary": "Receive a code host pull_request event",
                "description": (
                    "The signature is checked over the raw body before anything is parsed. `ping`, other "
                    "events and other actions are acknowledged and ignored. In `queue` mode the event is "
                    "stored durably and processed in the background; in `sync` mode the answer waits for "
                    f"the flow. Bodies over {MAX_BODY_BYTES} bytes are refused."
                ),
                "parameters": [
                    {
                        "name": "X-Hub-Signature-256",
                        "in": "header",
                        "required": True,
                        "schema": {"type": "string", "pattern": "^sha256=[0-9a-f]{64}$"},
                        "description": "sha256= followed by the hex HMAC-SHA256 of the raw body",
                    },
                    {
                        "name": "X-GitHub-Event",
                        "in": "header",
                        "required": False,
                        "schema": {"type": "string"},
                        "description": "pull_request is processed; ping and others are acknowledged",
                    },
                    {
                        "name": "X-GitHub-Delivery",
                        "in": "header",
                        "required": False,
                        "schema": {"type": "string", "maxLength": 100},
                        "description": "Unique delivery id; a repeated id is acknowledged, processed once",
                    },
                ],
                "requestBody": {"required": True, "content": _json("GitHubWebhookPayload")},
                "responses": {
                    "200": {"description": "Accepted and processed, or queued", "content": _json("StatusOk")},
                    "400": _error("Signed body that is not JSON or breaks the payload schema"),
                    "401": _error("Invalid signature"),
                    "403": _error("Repository not in allowed list"),
                    "409": _error("The deployment id belongs to another repository whose name gives the same slug"),
                    "413": _error("Body larger than 25 MB"),
                    "415": _error("Content-Type is not application/json"),
                    "500": _error("Processing failed (sync mode), or the inbox cannot be written"),
                },
            }
        },
        "/api/deliveries": {
            "get": {
                "operationId": "listDeliveries",
                "summary": "The delivery log: every webhook received, the newest first (DELIVERY_LOG_DAYS)",
                "parameters": [
                    {"name": "repository", "in": "query", "required": False, "schema": {"type": "string"},
                     "description": "owner/name, case-insensitive"},
                    {"name": "pr", "in": "query", "required": False, "schema": {"type": "integer", "minimum": 1}},
                    {"name": "codehost", "in": "query", "required": False, "schema": {"type": "string"}},
                    {"name": "limit", "in": "query", "required": False,
                     "schema": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100}},
                ],
                "responses": {"200": {"description": "Deliveries", "content": _json("DeliveryList")},
                              "400": _error("A filter that is not valid")},
            }
        },
        "/api/deliveries/{id}/replay": {
            "post": {
                "operationId": "replayDelivery",
                "summary": "Process an accepted delivery's event again (a new event, through the inbox)",
                "parameters": [{"name": "id", "in": "path", "required": True, "schema": {"type": "integer"},
                                "description": "The delivery's number in the log"}],
                "requestBody": {"required": True, "content": {"application/json": {"schema": {"type": "object"}}}},
                "responses": {
                    "202": {"description": "Queued", "content": _json("ReplayAccepted")},
                    "400": _error("Invalid delivery id"),
                    "403": _error("Repository not in allowed list (any more)"),
                    "404": _error("Not in the log (never, or older than DELIVERY_LOG_DAYS)"),
                    "409": _error("Not an accepted delivery, or the deployment id belongs to another repository"),
                    "415": _error("Not a JSON body"),
                },
            }
        },
        "/api/previews/{deploymentId}/reset-db": {
            "post": {
                "operationId": "resetPreviewDatabase",
                "summary": "The preview's database back to its initial state, the app restarted (as /preview reset-db)",
                "parameters": [_deployment_parameter()],
                "requestBody": {"required": True, "content": {"application/json": {"schema": {"type": "object"}}}},
                "responses": {
                    "200": {"description": "Reset, and the preview running again", "content": _json("CleanupResult")},
                    "400": _error("Invalid deployment id"),
                    "404": _error("Deployment not found"),
                    "409": _error("Not reset: the runtime cannot, the preview has no db service, or its update failed"),
                    "415": _error("Not a JSON body"),
                },
            }
        },
        "/api/plugins": {
            "get": {
                "operationId": "listPlugins",
                "summary": "Loaded plugins and what they provide (debug listing)",
                "responses": {"200": {"description": "Plugins", "content": _json("PluginList")}},
            }
        },
        "/api/previews": {
            "get": {
                "operationId": "listPreviews",
                "summary": "All tracked deployments",
                "responses": {
                    "200": {"description": "Tracked deployments", "content": _json("DeploymentList")},
                    "500": _error("The tracking store cannot be read"),
                },
            },
            "post": {
                "operationId": "deployLocalPreview",
                "summary": "Deploy a git repository of the service's host (`preview-orchestrator up`)",
                "description": "The same flow as a pull request's `opened`, with `source: local`: no comment and "
                               "no deployment status. Switched off with LOCAL_PREVIEWS=false.",
                "requestBody": {"required": True, "content": _json("LocalPreviewRequest")},
                "responses": {
                    "202": {"description": "Accepted; the deploy runs in the background",
                            "content": _json("LocalPreviewAccepted")},
                    "400": _error("Not a git repository, or a field is not valid"),
                    "403": _error("Local previews are switched off (LOCAL_PREVIEWS=false)"),
                    "409": _error("Preview limit reached, or the id belongs to another repository"),
                },
            },
        },
        "/api/previews/{deploymentId}": {
            "delete": {
                "operationId": "deletePreview",
                "summary": "Clean up one deployment now",
                "parameters": [
                    {
                        "name": "deploymentId",
                        "in": "path",
                        "required": True,
                        "schema": {"type": "string", "pattern": DEPLOYMENT_ID_PATTERN.pattern},
                        "description": "{projectSlug}-{prNumber}; anything else is answered 400",
                    }
                ],
                "responses": {
                    "200": {"description": "Cleaned up", "content": _json("CleanupResult")},
                    "400": _error("Invalid deployment id"),
                    "404": _error("Deployment not found"),
                    "500": _error("Cleanup failed in the container runtime, the proxy or the tracker"),
                },
            }
        },
        "/api/previews/{deploymentId}/logs": {
            "get": {
                "operationId": "getPreviewLog",
                "summary": "The deployment's log (git, build commands, compose, health probes) as text",
                "parameters": [
                    {
                        "name": "deploymentId",
                        "in": "path",
                        "required": True,
                        "schema": {"type": "string", "pattern": DEPLOYMENT_ID_PATTERN.pattern},
                    },
                    {
                        "name": "follow",
                        "in": "query",
                        "required": False,
                        "schema": {"type": "boolean", "default": False},
                        "description": "Keep the response open and stream new lines until no flow for the "
                                       "deployment runs or waits",
                    },
                ],
                "responses": {
                    "200": {"description": "Log text, secrets masked", "content": _body("text/plain")},
                    "400": _error("Invalid deployment id or follow value"),
                    "404": _error("Deployment not found"),
                },
            }
        },
        "/api/preview-access/{deploymentId}": {
            "get": {
                "operationId": "checkPreviewAccess",
                "summary": "PREVIEW_PROTECTION=token: whether a request may open the preview (nginx auth_request)",
                "description": "Asked by nginx for every request to a preview protected by tokens: 204 when the "
                               "request carries the preview's `preview_access` cookie with a valid, unexpired token "
                               "of this deployment.",
                "parameters": [_deployment_parameter(),
                               {"name": "preview_access", "in": "cookie", "required": False,
                                "schema": {"type": "string"}, "description": "Set by the comment's link"}],
                "responses": {
                    "204": {"description": "Access granted"},
                    "400": _error("Invalid deployment id"),
                    "401": _error("No valid access cookie for this preview"),
                    "404": _error("Previews are not protected by tokens (PREVIEW_PROTECTION)"),
                },
            }
        },
        "/api/preview-access/{deploymentId}/token": {
            "get": {
                "operationId": "openPreviewLink",
                "summary": "PREVIEW_PROTECTION=token: the first visit through the comment's link (through nginx)",
                "description": "nginx passes the link's token in a header (no URL holds it). A valid token sets "
                               "the preview's cookie (scoped to the preview) and redirects to the address without "
                               "the token.",
                "parameters": [
                    _deployment_parameter(),
                    {"name": "X-Preview-Token", "in": "header", "required": False, "schema": {"type": "string"},
                     "description": "The `preview_token` of the comment's link"},
                    {"name": "X-Original-URI", "in": "header", "required": False, "schema": {"type": "string"},
                     "description": "The reviewer's request URI (where to redirect, without the token)"},
                ],
                "responses": {
                    "302": {"description": "Cookie set; redirect to the preview's address without the token",
                            "headers": {"Location": {"schema": {"type": "string"}},
                                        "Set-Cookie": {"schema": {"type": "string"}}}},
                    "400": _error("Invalid deployment id"),
                    "401": {"description": "The token is invalid, expired or of another preview",
                            "content": _body("text/html")},
                    "404": _error("Previews are not protected by tokens (PREVIEW_PROTECTION)"),
                },
            }
        },
        "/api/preview-wake/{deploymentId}": {
            "get": {
                "operationId": "wakePreview",
                "summary": "Sleep (PREVIEW_IDLE_MINUTES): a sleeping preview's route asks this when its app did not "
                           "answer (nginx's wake location, never a client)",
                "description": "Wakes the preview (one wake per sleep, shared by concurrent requests, serialised "
                               "with pushes and close), waits for its health path, then hands the request back to "
                               "the app through the route (`X-Accel-Redirect`; 307 for methods other than GET and "
                               "HEAD). A browser (Accept: text/html) waits at most 1.5 s and then gets a page that "
                               "reloads itself; other clients wait up to 60 s and then get 503 with Retry-After.",
                "parameters": [
                    _deployment_parameter(),
                    {"name": "X-Preview-Wake-Key", "in": "header", "required": True, "schema": {"type": "string"},
                     "description": "The route's key: HMAC-SHA256 of the deployment id with the service's wake key"},
                    {"name": "X-Original-URI", "in": "header", "required": False, "schema": {"type": "string"},
                     "description": "The reviewer's request URI"},
                    {"name": "X-Original-Method", "in": "header", "required": False,
                     "schema": {"type": "string"}, "description": "The reviewer's request method"},
                ],
                "responses": {
                    "200": {"description": "Awake: nginx serves the request from the app (X-Accel-Redirect)",
                            "headers": {"X-Accel-Redirect": {"schema": {"type": "string"}}}},
                    "307": {"description": "Awake: repeat the request (a method nginx cannot replay)",
                            "headers": {"Location": {"schema": {"type": "string"}}}},
                    "400": _error("Invalid deployment id"),
                    "403": _error("Only a preview's route may wake it (no or a wrong X-Preview-Wake-Key)"),
                    "404": _error("No such preview"),
                    "502": {"description": "The preview failed (to wake, or before)", "content": _body("text/plain")},
                    "503": {"description": "Still waking up, or being updated: an HTML page that reloads itself "
                                           "(browsers) or text, with Retry-After",
                            "headers": {"Retry-After": {"schema": {"type": "integer"}}},
                            "content": {"text/html": {"schema": {"type": "string"}},
                                        "text/plain": {"schema": {"type": "string"}}}},
                },
            }
        },
        "/metrics": _document_get("getMetrics", "Prometheus metrics (text format, or OpenMetrics when asked for)",
                                  "Metrics", "text/plain"),
        "/dashboard": _document_get("getDashboard", "Every preview on one self-refreshing HTML page (also at /)",
                                    "HTML page", "text/html"),
    }


def _deployment_parameter() -> dict[str, Any]:
    return {"name": "deploymentId", "in": "path", "required": True,
            "schema": {"type": "string", "pattern": DEPLOYMENT_ID_PATTERN.pattern},
            "description": "{projectSlug}-{prNumber}; anything else is answered 400"}
