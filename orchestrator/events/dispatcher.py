"""Drains the inbox: at most MAX_CONCURRENT_BUILDS deploys and updates at once, one flow at a time per
deployment id. Cleanups have a lane of their own, so slow builds never hold back a `closed` pull request, and
so do the short flows of sleep (a request waits for a wake); a `closed` event or DELETE cancels a running deploy
or wake of the same preview."""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass
from functools import partial

from orchestrator.common.flow_control import FlowControl
from orchestrator.events.inbox import Claimed, Inbox, Outcome
from orchestrator.flows.handler import EventHandler, FlowError

log = logging.getLogger("orchestrator.events.dispatcher")

PRUNE_EVERY_SECONDS = 3600.0
# How long shutdown waits for running flows; the rest are re-run after the next start.
SHUTDOWN_GRACE_SECONDS = 10.0
CLEANUP_LANE = 4  # cleanups (and sleeps and wakes) that may run beside the builds
CLEANUP = ("closed",)
SIDE_LANE = ("closed", "sleep", "wake")  # short flows: never behind the builds
# Flows whose waiters are answered once the flow settles (FlowControl.settle), before it reports: a request waiting
# for a wake. Any other flow's waiters (a webhook in sync mode, reset-db) get its end, whatever a plugin calls.
SETTLING = ("wake",)


@dataclass
class Running:
    task: asyncio.Task[None]
    action: str
    control: FlowControl


class Dispatcher:
    def __init__(self, inbox: Inbox, handler: EventHandler, max_concurrent: int,
                 flow_timeout: float = 3600.0) -> None:
        self.inbox = inbox
        self.handler = handler
        self.max_concurrent = max_concurrent
        self.flow_timeout = flow_timeout
        self._running: dict[str, Running] = {}
        self._waiters: dict[int, list[asyncio.Future[Outcome]]] = {}
        self._settled: set[int] = set()  # events whose flow settled (FlowControl.settle) and still runs
        self._wake = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        self._stopping = False
        # Flows get threads of their own: in the loop's default pool, minutes-long builds would leave no
        # thread for the webhook's inbox write, and acknowledgements would wait for builds.
        self._flows = ThreadPoolExecutor(max_workers=max_concurrent + CLEANUP_LANE, thread_name_prefix="flow")

    async def start(self) -> None:
        self._stopping = False
        self._wake = asyncio.Event()
        requeued = await asyncio.to_thread(self.inbox.requeue_interrupted)
        if requeued:
            log.warning("re-running %d event(s) interrupted by the last shutdown", requeued)
        await asyncio.to_thread(self.inbox.prune)
        self._loop_task = asyncio.create_task(self._run(), name="dispatcher")

    def notify(self) -> None:
        """An event was accepted: look for work."""
        self._wake.set()

    def cancel(self, deployment_id: str, reason: str) -> bool:
        """Stop a running deploy or update of `deployment_id` (its cleanup was just accepted); True if one ran."""
        running = self._running.get(deployment_id)
        if running is None or running.action in CLEANUP:
            return False
        running.control.cancel(reason)
        return True

    async def wait_for(self, seq: int) -> Outcome:
        """Wait until event `seq` has finished (sync mode), or until its flow settled (FlowControl.settle)."""
        future: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(seq, []).append(future)
        # It may have settled, finished (or been superseded) before we registered.
        if seq in self._settled:
            self._settle(seq)
        self._resolve_finished()
        return await future

    async def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        if self._loop_task:
            await self._loop_task
        if self._running:
            log.info("waiting up to %.0fs for %d running flow(s)", SHUTDOWN_GRACE_SECONDS, len(self._running))
            _, pending = await asyncio.wait([r.task for r in self._running.values()],
                                            timeout=SHUTDOWN_GRACE_SECONDS)
            if pending:
                log.warning("%d flow(s) still running at shutdown; they re-run after restart", len(pending))
        for futures in self._waiters.values():
            for future in futures:
                if not future.done():
                    future.set_result(Outcome(status="failed", error="Service is shutting down"))

    async def _run(self) -> None:
        last_prune = asyncio.get_running_loop().time()
        while not self._stopping:
            self._wake.clear()
            await self._start_runnable()
            self._resolve_finished()
            now = asyncio.get_running_loop().time()
            if now - last_prune > PRUNE_EVERY_SECONDS:
                last_prune = now
                await asyncio.to_thread(self.inbox.prune)
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=5.0)
            except TimeoutError:
                pass

    async def _start_runnable(self) -> None:
        while not self._stopping:
            side = sum(1 for r in self._running.values() if r.action in SIDE_LANE)
            builds = len(self._running) - side
            if builds < self.max_concurrent:
                actions = None  # anything
            elif side < CLEANUP_LANE:
                actions = SIDE_LANE
            else:
                return
            claimed = await asyncio.to_thread(self.inbox.claim_next, list(self._running), actions)
            if claimed is None:
                return
            deployment = claimed.event.deployment_id
            settles = claimed.event.action in SETTLING
            control = FlowControl(self.flow_timeout, on_settled=partial(
                self._settled_in, asyncio.get_running_loop(), claimed.seq) if settles else None)
            task = asyncio.create_task(self._process(claimed, control), name=deployment)
            self._running[deployment] = Running(task, claimed.event.action, control)

    async def _process(self, claimed: Claimed, control: FlowControl) -> None:
        event = claimed.event
        extra = {"deploymentId": event.deployment_id}
        log.info("processing %s (delivery %s)", event.action, event.delivery_id, extra=extra)
        error: str | None = None
        try:
            await asyncio.get_running_loop().run_in_executor(self._flows, self.handler.handle, event, control)
        except FlowError as exc:
            error = str(exc) or "Deployment failed"
            log.error("%s failed: %s", event.action, error, extra=extra)
        except Exception:
            error = "Internal error while processing the event"
            log.exception("%s crashed", event.action, extra=extra)
        try:
            await asyncio.to_thread(self.inbox.finish, claimed.seq, error)
        except Exception:
            # Left `running`: re-run after the next start rather than lost.
            log.exception("could not record the end of event %s", claimed.seq, extra=extra)
        finally:
            self._running.pop(event.deployment_id, None)
            self._settled.discard(claimed.seq)
            self._wake.set()

    def _settled_in(self, loop: asyncio.AbstractEventLoop, seq: int) -> None:
        """From the flow's thread: `_settle` in the loop's, unless the loop is gone (a flow that outlived the
        shutdown's grace: nobody waits any more)."""
        with suppress(RuntimeError):
            loop.call_soon_threadsafe(self._settle, seq)

    def _settle(self, seq: int) -> None:
        """The flow of `seq` settled while it runs on: its waiters get `done` now (in the loop's thread)."""
        self._settled.add(seq)
        for future in self._waiters.pop(seq, []):
            if not future.done():
                future.set_result(Outcome("done", None))

    def _resolve_finished(self) -> None:
        for seq in list(self._waiters):
            outcome = self.inbox.outcome(seq)
            if outcome is None:
                continue
            for future in self._waiters.pop(seq):
                if not future.done():
                    future.set_result(outcome)
