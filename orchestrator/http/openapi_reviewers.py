"""The operations of the OpenAPI description that reviewers' browsers meet: a protected preview's access (its
token link, its cookie) and the wake of a sleeping preview, asked by nginx."""

from __future__ import annotations

from typing import Any

from orchestrator.http.openapi_parts import body, deployment_parameter, error


def reviewer_operations() -> dict[str, Any]:
    return {
        "/api/preview-access/{deploymentId}": {
            "get": {
                "operationId": "checkPreviewAccess",
                "summary": "PREVIEW_PROTECTION=token: whether a request may open the preview (nginx auth_request)",
                "description": "Asked by nginx for every request to a preview protected by tokens: 204 when the "
                               "request carries the preview's `preview_access` cookie with a valid, unexpired token "
                               "of this deployment.",
                "parameters": [deployment_parameter(),
                               {"name": "preview_access", "in": "cookie", "required": False,
                                "schema": {"type": "string"}, "description": "Set by the comment's link"}],
                "responses": {
                    "204": {"description": "Access granted"},
                    "400": error("Invalid deployment id"),
                    "401": error("No valid access cookie for this preview"),
                    "404": error("Previews are not protected by tokens (PREVIEW_PROTECTION)"),
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
                    deployment_parameter(),
                    {"name": "X-Preview-Token", "in": "header", "required": False, "schema": {"type": "string"},
                     "description": "The `preview_token` of the comment's link"},
                    {"name": "X-Original-URI", "in": "header", "required": False, "schema": {"type": "string"},
                     "description": "The reviewer's request URI (where to redirect, without the token)"},
                ],
                "responses": {
                    "302": {"description": "Cookie set; redirect to the preview's address without the token",
                            "headers": {"Location": {"schema": {"type": "string"}},
                                        "Set-Cookie": {"schema": {"type": "string"}}}},
                    "400": error("Invalid deployment id"),
                    "401": {"description": "The token is invalid, expired or of another preview",
                            "content": body("text/html")},
                    "404": error("Previews are not protected by tokens (PREVIEW_PROTECTION)"),
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
                    deployment_parameter(),
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
                    "400": error("Invalid deployment id"),
                    "403": error("Only a preview's route may wake it (no or a wrong X-Preview-Wake-Key)"),
                    "404": error("No such preview"),
                    "502": {"description": "The preview failed (to wake, or before)", "content": body("text/plain")},
                    "503": {"description": "Still waking up, or being updated: an HTML page that reloads itself "
                                           "(browsers) or text, with Retry-After",
                            "headers": {"Retry-After": {"schema": {"type": "integer"}}},
                            "content": {"text/html": {"schema": {"type": "string"}},
                                        "text/plain": {"schema": {"type": "string"}}}},
                },
            }
        },
    }
