"""GET /api/previews/{deploymentId}/logs[?follow=true]: the deployment's log as text, optionally live.

The log holds every command of every deploy of the pull request (git, build commands, compose, health
probes, nginx), appended as the commands print. Secrets the service knows are masked on the way out; lines
are sent whole so that a secret never straddles two chunks unmasked.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import falcon
from falcon.asgi import Request, Response

from orchestrator.common.deployment_log import deployment_log_path
from orchestrator.events.inbox import Inbox
from orchestrator.flows.context import mask_keyed_names
from orchestrator.state.records import DeploymentRecord
from orchestrator.state.store import DeploymentStore

FOLLOW_POLL_SECONDS = 0.5
READ_CHUNK = 1 << 16
TEXT = "text/plain; charset=utf-8"


class DeploymentLogResource:
    def __init__(self, store: DeploymentStore, inbox: Inbox, deployments_dir: Path,
                 secrets: Callable[[], list[str]]) -> None:
        self._store = store
        self._inbox = inbox
        self._root = deployments_dir
        self._secrets = secrets  # asked for each chunk: a code host's tokens may be renewed (a GitHub App's)

    async def on_get(self, req: Request, resp: Response, deployment_id: str) -> None:
        follow = req.get_param_as_bool("follow", default=False)
        record = (await asyncio.to_thread(self._store.read)).deployments.get(deployment_id)
        if record is None:
            raise falcon.HTTPNotFound(description="Deployment not found")
        path = deployment_log_path(self._root, record.projectSlug, record.prNumber)
        resp.content_type = TEXT
        resp.set_header("Cache-Control", "no-store")
        if not follow:
            resp.data = self._mask(await asyncio.to_thread(_read_all, path))
            return
        resp.set_header("X-Accel-Buffering", "no")  # an nginx in front must pass the stream through
        resp.stream = self._follow(path, deployment_id)

    async def _follow(self, path: Path, deployment_id: str) -> AsyncIterator[bytes]:
        """Everything so far, then new lines as they are written, until no flow for it runs or is queued."""
        offset, pending = 0, b""
        while True:
            finished = await asyncio.to_thread(self._finished, deployment_id)
            chunk, offset = await asyncio.to_thread(_read_from, path, offset)
            pending += chunk
            whole, _, pending = pending.rpartition(b"\n")
            if whole:
                yield self._mask(whole + b"\n")
            if finished:  # read once more after the flow ended, so its last lines are in
                if pending:
                    yield self._mask(pending)
                return
            await asyncio.sleep(FOLLOW_POLL_SECONDS)

    def _finished(self, deployment_id: str) -> bool:
        record: DeploymentRecord | None = self._store.read().deployments.get(deployment_id)
        if record is None:
            return True  # cleaned up: the log is gone with it
        return record.status != "building" and deployment_id not in self._inbox.open_deployments()

    def _mask(self, data: bytes) -> bytes:
        text = data.decode("utf-8", "replace")
        for secret in self._secrets():
            if secret:
                text = text.replace(secret, "***")
        # A build's output names the repository's cache ids and built images (flows/context.py)
        return mask_keyed_names(text).encode()


def _read_all(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return b""


def _read_from(path: Path, offset: int) -> tuple[bytes, int]:
    try:
        with path.open("rb") as handle:
            if handle.seek(0, 2) < offset:
                offset = 0  # the file was replaced (cleanup then a new deploy): start again
            handle.seek(offset)
            data = handle.read(READ_CHUNK * 16)
    except FileNotFoundError:
        return b"", 0
    return data, offset + len(data)

