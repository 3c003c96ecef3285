"""GET / and /dashboard: every preview on one page, rendered with Jinja2, no external assets.

The page refreshes its previews from `GET /api/previews` (see the template's script) and shows, as of its load,
the newest deliveries of the delivery log and what is kept warm for each repository (the runtime's `pools`: the
compose runtime's database seeds and their spare layers; and the base previews' installed dependencies).
Autoescaping is on: the branch names and error messages shown come from pull requests.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime

import jinja2
from falcon.asgi import Request, Response
from importlib_resources import files

from orchestrator.common.humanize import age
from orchestrator.events.delivery_log import DeliveryLog
from orchestrator.plugin_api import WarmPool
from orchestrator.state.store import DeploymentStore

RECENT_DELIVERIES = 20
log = logging.getLogger(__name__)


def _template() -> jinja2.Template:
    source = files("orchestrator.http").joinpath("templates/dashboard.html.j2").read_text(encoding="utf-8")
    environment = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    environment.filters["age"] = age
    return environment.from_string(source)


class DashboardResource:
    def __init__(self, store: DeploymentStore, deliveries: DeliveryLog,
                 pools: Callable[[], list[WarmPool]] = list, pool_bound_gb: float = 0.0) -> None:
        self._store = store
        self._deliveries = deliveries
        self._pools = pools
        self._pool_bound_gb = pool_bound_gb  # SEED_CACHE_GB: what seeds and spares may take together
        self._template = _template()

    def _listed_pools(self) -> list[tuple[WarmPool, datetime | None]] | None:
        """Each pool with when it was last used; None when the runtime could not say (the page shows the rest)."""
        try:
            return [(pool, None if pool.used_at is None else datetime.fromtimestamp(pool.used_at, UTC))
                    for pool in self._pools()]
        except Exception:  # a runtime plugin's own code, or a file it reads: never the whole page
            log.exception("the runtime's pools could not be listed for the dashboard")
            return None

    async def on_get(self, req: Request, resp: Response) -> None:
        data = await asyncio.to_thread(self._store.read)
        deliveries = await asyncio.to_thread(self._deliveries.list, limit=RECENT_DELIVERIES)
        pools = await asyncio.to_thread(self._listed_pools)
        previews = sorted(data.deployments.values(), key=lambda r: (r.repoOwner + r.repoName, r.prNumber))
        now = datetime.now(UTC)
        resp.content_type = "text/html; charset=utf-8"
        resp.set_header("Cache-Control", "no-store")
        # The page runs only its own inline script and talks only to this service (the empty favicon is inline too).
        resp.set_header("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; "
                        "style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:")
        resp.text = self._template.render(previews=previews, now=now.strftime("%H:%M:%S UTC"), now_dt=now,
                                          deliveries=deliveries, bound_gb=self._pool_bound_gb,
                                          pools=pools,
                                          pooled_gb=sum(pool.size_bytes for pool, _ in pools or []
                                                        if pool.bound == "SEED_CACHE_GB") / 2**30)
