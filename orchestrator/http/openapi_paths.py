"""The operations of the service's OpenAPI description (openapi.py), path by path: what each endpoint takes and
answers, its errors referring to the `Error` schema."""

from __future__ import annotations

from typing import Any

from orchestrator.events.webhook import MAX_BODY_BYTES
from orchestrator.http.openapi_parts import body, deployment_parameter, document_get, error, json
from orchestrator.http.openapi_reviewers import reviewer_operations


def operations() -> dict[str, Any]:
    """Every path of the service and its operations, in the order the description lists them."""
    return {
        "/health": {
            "get": {
                "operationId": "getHealth",
                "summary": "Liveness check",
                "responses": {"200": {"description": "The service is up", "content": json("Health")}},
            }
        },
        "/openapi.json": document_get("getOpenApi", "This description", "OpenAPI 3.0.3 document",
                                       "application/json", "object"),
        "/api-docs": document_get("getApiDocs", "Interactive API page (Swagger UI, served offline)", "HTML page",
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
                "requestBody": {"required": True, "content": json("GitHubWebhookPayload")},
                "responses": {
                    "200": {"description": "Accepted and processed, or queued", "content": json("StatusOk")},
                    "400": error("Signed body that is not JSON or breaks the payload schema"),
                    "401": error("Invalid signature"),
                    "403": error("Repository not in allowed list"),
                    "409": error("The deployment id belongs to another repository whose name gives the same slug"),
                    "413": error("Body larger than 25 MB"),
                    "415": error("Content-Type is not application/json"),
                    "500": error("Processing failed (sync mode), or the inbox cannot be written"),
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
                "responses": {"200": {"description": "Deliveries", "content": json("DeliveryList")},
                              "400": error("A filter that is not valid")},
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
                    "202": {"description": "Queued", "content": json("ReplayAccepted")},
                    "400": error("Invalid delivery id"),
                    "403": error("Repository not in allowed list (any more)"),
                    "404": error("Not in the log (never, or older than DELIVERY_LOG_DAYS)"),
                    "409": error("Not an accepted delivery, or the deployment id belongs to another repository"),
                    "415": error("Not a JSON body"),
                },
            }
        },
        "/api/previews/{deploymentId}/reset-db": {
            "post": {
                "operationId": "resetPreviewDatabase",
                "summary": "The preview's database back to its initial state, the app restarted (as /preview reset-db)",
                "parameters": [deployment_parameter()],
                "requestBody": {"required": True, "content": {"application/json": {"schema": {"type": "object"}}}},
                "responses": {
                    "200": {"description": "Reset, and the preview running again", "content": json("CleanupResult")},
                    "400": error("Invalid deployment id"),
                    "404": error("Deployment not found"),
                    "409": error("Not reset: the runtime cannot, the preview has no db service, or its update failed"),
                    "415": error("Not a JSON body"),
                },
            }
        },
        "/api/plugins": {
            "get": {
                "operationId": "listPlugins",
                "summary": "Loaded plugins and what they provide (debug listing)",
                "responses": {"200": {"description": "Plugins", "content": json("PluginList")}},
            }
        },
        "/api/previews": {
            "get": {
                "operationId": "listPreviews",
                "summary": "All tracked deployments",
                "responses": {
                    "200": {"description": "Tracked deployments", "content": json("DeploymentList")},
                    "500": error("The tracking store cannot be read"),
                },
            },
            "post": {
                "operationId": "deployLocalPreview",
                "summary": "Deploy a git repository of the service's host (`preview-orchestrator up`)",
                "description": "The same flow as a pull request's `opened`, with `source: local`: no comment and "
                               "no deployment status. Switched off with LOCAL_PREVIEWS=false.",
                "requestBody": {"required": True, "content": json("LocalPreviewRequest")},
                "responses": {
                    "202": {"description": "Accepted; the deploy runs in the background",
                            "content": json("LocalPreviewAccepted")},
                    "400": error("Not a git repository, or a field is not valid"),
                    "403": error("Local previews are switched off (LOCAL_PREVIEWS=false)"),
                    "409": error("Preview limit reached, or the id belongs to another repository"),
                },
            },
        },
        "/api/previews/{deploymentId}": {
            "delete": {
                "operationId": "deletePreview",
                "summary": "Clean up one deployment now",
                "parameters": [deployment_parameter()],
                "responses": {
                    "200": {"description": "Cleaned up", "content": json("CleanupResult")},
                    "400": error("Invalid deployment id"),
                    "404": error("Deployment not found"),
                    "500": error("Cleanup failed in the container runtime, the proxy or the tracker"),
                },
            }
        },
        "/api/previews/{deploymentId}/logs": {
            "get": {
                "operationId": "getPreviewLog",
                "summary": "The deployment's log (git, build commands, compose, health probes) as text",
                "parameters": [
                    deployment_parameter(),
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
                    "200": {"description": "Log text, secrets masked", "content": body("text/plain")},
                    "400": error("Invalid deployment id or follow value"),
                    "404": error("Deployment not found"),
                },
            }
        },
        **reviewer_operations(),
        "/metrics": document_get("getMetrics", "Prometheus metrics (text format, or OpenMetrics when asked for)",
                                  "Metrics", "text/plain"),
        "/dashboard": document_get("getDashboard", "Every preview on one self-refreshing HTML page (also at /)",
                                    "HTML page", "text/html"),
    }

