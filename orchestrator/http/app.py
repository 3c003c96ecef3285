"""The Falcon ASGI application: builds every dependency once and hands it to the resources."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import falcon.asgi
import swagger_ui_bundle

from orchestrator.events.base_previews import LookScheduler
from orchestrator.events.cleanup_retry import CleanupRetryScheduler
from orchestrator.events.codehost_reconcile import CodeHostReconcile
from orchestrator.events.delivery_log import DeliveryLog
from orchestrator.events.dispatcher import Dispatcher
from orchestrator.events.inbox import Inbox
from orchestrator.events.periodic import Periodic
from orchestrator.events.sleep import SleepScheduler
from orchestrator.events.ttl import TtlScheduler
from orchestrator.events.watch import RuntimeWatch
from orchestrator.flows.handler import EventHandler, load_handler
from orchestrator.http.openapi import build_openapi
from orchestrator.http.resources import errors
from orchestrator.http.resources.dashboard import DashboardResource
from orchestrator.http.resources.deliveries import DeliveryListResource, DeliveryReplayResource
from orchestrator.http.resources.deployment_logs import DeploymentLogResource
from orchestrator.http.resources.docs import DOCS_STATIC_ROUTE, ApiDocsInitResource, ApiDocsResource, OpenApiResource
from orchestrator.http.resources.health import HealthResource
from orchestrator.http.resources.metrics import MetricsResource
from orchestrator.http.resources.plugins import PluginListResource
from orchestrator.http.resources.preview_access import PreviewAccess, PreviewAccessResource, PreviewTokenResource
from orchestrator.http.resources.preview_wake import PreviewWakeResource
from orchestrator.http.resources.previews import PreviewListResource, PreviewResource
from orchestrator.http.resources.webhook import WebhookResource
from orchestrator.observability.metrics import Metrics
from orchestrator.rendering.plugin_host import PluginHost, build_plugin_host
from orchestrator.settings import Settings, load_settings
from orchestrator.state.store import DeploymentStore

log = logging.getLogger("orchestrator")


class Lifespan:
    """Start-up: reconcile, start the dispatcher, the TTL scheduler, the runtime watch, the cleanup retry, the
    registry's garbage collection, (BASE_PREVIEWS) the base previews' look and (PREVIEW_IDLE_MINUTES) the sleep
    check; shutdown: stop them (ASGI lifespan)."""

    def __init__(self, dispatcher: Dispatcher, inbox: Inbox, handler: EventHandler, settings: Settings,
                 schedulers: list[Periodic] | None = None) -> None:
        self._schedulers = schedulers or []  # started last, stopped first (the code host reconcile)
        self._dispatcher = dispatcher
        self._inbox = inbox
        self._handler = handler
        self._settings = settings
        self._ttl: TtlScheduler | None = None
        self._watch: RuntimeWatch | None = None
        self._sleep: SleepScheduler | None = None
        self._retry: CleanupRetryScheduler | None = None
        self._gc: RuntimeWatch | None = None

    async def process_startup(self, scope: dict[str, Any], event: dict[str, Any]) -> None:
        startup = getattr(self._handler, "startup", None)
        if startup is not None:
            try:
                await asyncio.to_thread(startup, self._inbox.open_deployments())
            except Exception:
                log.exception("start-up reconciliation failed; the service starts anyway")
        await self._dispatcher.start()
        expired = getattr(self._handler, "expired", None)
        if expired is not None:
            self._ttl = TtlScheduler(expired, self._inbox, self._dispatcher,
                                     self._settings.ttl_check_interval_seconds)
            self._ttl.start()
        watch = getattr(self._handler, "watch", None)
        if watch is not None:  # running previews a runtime reports lost (a swarm node that left)
            self._watch = RuntimeWatch(watch, self._settings.runtime_watch_interval_seconds)
            self._watch.start()
        unfinished = getattr(self._handler, "unfinished_cleanups", None)
        if unfinished is not None:  # cleanups that left something behind (a swarm node down) are tried again
            self._retry = CleanupRetryScheduler(unfinished, self._inbox, self._dispatcher,
                                                self._settings.cleanup_retry_interval_seconds)
            self._retry.start()
        collect = getattr(self._handler, "collect_garbage", None)
        interval = float(getattr(self._handler, "garbage_interval_seconds", 0.0))
        if collect is not None and interval > 0:  # the runtime's storage (the swarm's registry, the seeds)
            # Looked at every 10 minutes at most; run once the last run is an interval old (runtime/swarm/gc.py `due`)
            self._gc = RuntimeWatch(collect, min(interval, 600.0), "runtime garbage collection")
            self._gc.start()
        every = self._settings.reconcile_interval_minutes * 60
        for name, look in (("base previews", "base_previews"), ("linked previews", "relinks")):
            due = getattr(self._handler, look, None)  # (base previews: also to remove those no longer named)
            if due is not None:
                self._schedulers.append(LookScheduler(name, due, self._inbox, self._dispatcher, every))
        idle = getattr(self._handler, "idle", None)
        if idle is not None and self._settings.idle_seconds > 0:  # previews no request reached for a while
            self._sleep = SleepScheduler(idle, self._inbox, self._dispatcher,
                                         self._settings.sleep_check_interval_seconds)
            self._sleep.start()
        for scheduler in self._schedulers:
            scheduler.start()

    async def process_shutdown(self, scope: dict[str, Any], event: dict[str, Any]) -> None:
        for scheduler in self._schedulers:
            await scheduler.stop()
        if self._ttl:
            await self._ttl.stop()
        if self._watch:
            await self._watch.stop()
        if self._sleep:
            await self._sleep.stop()
        if self._retry:
            await self._retry.stop()
        if self._gc:
            await self._gc.stop()
        await self._dispatcher.stop()


def create_app(
    settings: Settings | None = None,
    handler: EventHandler | None = None,
    plugins: PluginHost | None = None,
) -> falcon.asgi.App:
    # The composition root: every dependency is built here, once, and handed on (the CLI's `serve` comes here too).
    settings = settings or load_settings()
    plugins = plugins or build_plugin_host(disabled=settings.preview_orchestrator_disable_plugins)
    metrics = Metrics()
    store = DeploymentStore(settings.deployments_db)  # one object: the handler and the API share its cache
    codehosts = plugins.codehosts(settings, metrics)  # the ones that are on: their webhooks, reports and clones
    handler = handler or load_handler(settings, plugins, metrics, store, codehosts)
    inbox = Inbox(settings.inbox_path)
    deliveries = DeliveryLog(settings.inbox_path.parent / "deliveries.sqlite3", settings.delivery_log_days)
    dispatcher = Dispatcher(inbox, handler, settings.max_concurrent_builds, settings.flow_timeout_seconds)
    metrics.watch_state(lambda: store.count_by_status(), inbox.depth)

    schedulers: list[Periodic] = []
    if settings.reconcile_interval_minutes > 0:
        schedulers.append(CodeHostReconcile(codehosts, settings, store, inbox, dispatcher, metrics))

    app = falcon.asgi.App(middleware=[Lifespan(dispatcher, inbox, handler, settings, schedulers)])
    errors.install(app)
    app.add_route("/health", HealthResource())
    dashboard = DashboardResource(store, deliveries, getattr(handler, "pools", None) or list, settings.seed_cache_gb)
    app.add_route("/", dashboard)
    app.add_route("/dashboard", dashboard)
    app.add_route("/openapi.json", OpenApiResource(build_openapi(settings.api_server_url)))
    app.add_route("/api-docs", ApiDocsResource())
    app.add_route(f"{DOCS_STATIC_ROUTE}/api-docs-init.js", ApiDocsInitResource())
    app.add_static_route(DOCS_STATIC_ROUTE, swagger_ui_bundle.swagger_ui_path)
    for host in codehosts:  # POST /webhook/{name}; GitHub also at the spec's /webhook/codehost
        webhook = WebhookResource(host, settings, inbox, dispatcher, metrics, store, deliveries)
        for path in (host.name, *host.aliases):
            app.add_route(f"/webhook/{path}", webhook)
    app.add_route("/metrics", MetricsResource(metrics))
    app.add_route("/api/plugins", PluginListResource(plugins))
    app.add_route("/api/deliveries", DeliveryListResource(deliveries))
    app.add_route("/api/deliveries/{entry_id}/replay",
                  DeliveryReplayResource(deliveries, settings, store, inbox, dispatcher))
    app.add_route("/api/previews", PreviewListResource(store, inbox, dispatcher, settings))
    # `path` so that ids with encoded slashes, or none at all, reach the 400 check instead of a 404.
    # what the flows mask (the runtime's secrets too); a handler that says nothing of them: the settings' and hosts'
    secrets = getattr(handler, "secrets", None) or (lambda: codehosts.masked(settings.secret_values()))
    logs = DeploymentLogResource(store, inbox, settings.deployments_dir, secrets)
    app.add_route("/api/previews/{deployment_id:path}", PreviewResource(store, inbox, dispatcher, logs))
    # PREVIEW_PROTECTION=token: nginx asks these about a reviewer's cookie and the comment's link.
    access = PreviewAccess(settings, store)
    app.add_route("/api/preview-access/{deployment_id}", PreviewAccessResource(access))
    app.add_route("/api/preview-access/{deployment_id}/token", PreviewTokenResource(access))
    # Sleep (PREVIEW_IDLE_MINUTES): a route's wake location asks this when its sleeping app did not answer.
    app.add_route("/api/preview-wake/{deployment_id}", PreviewWakeResource(settings, store, inbox, dispatcher))
    return app
