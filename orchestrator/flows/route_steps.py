"""The route steps of a deploy: the preview's nginx route loaded (closed) while the app builds, opened once the app
is healthy, and `running` only once nginx's workers serve it; a new preview that did not come up leaves none."""

from __future__ import annotations

from concurrent.futures import Future

from orchestrator.adapters.nginx import FlagUnseen, ProxyError
from orchestrator.common.flow_control import FlowControl
from orchestrator.flows.context import FlowContext, StepFailed, Target
from orchestrator.flows.links import Links
from orchestrator.flows.records import route_ports, routes_of, set_fields
from orchestrator.plugin_api.preview_config import PreviewConfig
from orchestrator.plugin_api.runtime import RuntimeFailure
from orchestrator.rendering.compose_document import RenderedDeployment
from orchestrator.rendering.routed_services import RoutedService, apply_routes
from orchestrator.state.ports import PortAllocationError
from orchestrator.state.records import DeploymentRecord, PreviewRoute, PullRequestEvent


class RouteSteps:
    def __init__(self, context: FlowContext) -> None:
        self.c = context

    def give_ports(self, event: PullRequestEvent, rendered: RenderedDeployment, config: PreviewConfig) -> None:
        """The services routed besides the app (routed_services.py): a host port each (kept across updates), the
        preview's URLs and its links' (links.py) in every service's environment, and the record's `routes` and
        `links`."""
        links = Links(self.c).resolve(config.links, event.branch, event.repository)
        routes: list[RoutedService] = rendered.routes
        if routes and not self.c.runtime.routes_services:
            raise StepFailed(f"The {self.c.runtime.name} runtime cannot route services besides app (x-preview of "
                             f"{', '.join(route.service for route in routes)})")
        try:
            ports = route_ports(self.c.store, event.deployment_id, [route.route for route in routes],
                                self.c.ports_in_use)
        except PortAllocationError as exc:
            raise StepFailed(str(exc)) from None
        settings = self.c.settings
        urls = {route.route: settings.preview_url(event.project_slug, event.pr_number, route.route) for route in routes}
        apply_routes(rendered, ports, settings.preview_url(event.project_slug, event.pr_number), urls,
                     {f"PREVIEW_LINK_{link.name}_URL": link.url for link in links if link.url})
        given = [PreviewRoute(name=route.route, service=route.service, port=ports[route.route],
                              healthCheckPath=route.health_check_path, url=urls[route.route]) for route in routes]
        record = self.c.store.read().deployments.get(event.deployment_id)
        if record is not None and (given != record.routes or links != record.links):  # most: none, and none now
            set_fields(self.c.store, event.deployment_id, routes=given, links=links)

    def prepare(self, event: PullRequestEvent, target: Target, address: tuple[str, int],
                      route_served: bool, control: FlowControl) -> bool:
        """The route written and loaded while the app builds — a new preview's closed (404, as if it did not exist)
        until `open` opens it once the app is healthy, and seen loaded here, so that nginx's reload and its old
        workers are off the way to `running`. True when this deploy loaded it (`open` opens it; a failure
        removes it); False when it could not: the route step writes it then, and fails with nginx's own reason."""
        host, port = address
        if not route_served and not self.c.proxy.flags_usable():
            return False  # it could not be loaded closed (the log of the service says why once)
        try:
            self.c.proxy.install(target.slug, target.pr, event.deployment_id, port, target.log,
                                 served=route_served, host=host, closed=not route_served, subject=event.subject,
                                 routes=self._routes(event))
        except Exception as exc:  # noqa: BLE001 - the route step writes it and says why it fails
            target.log.note(f"route not loaded while building ({exc}); written after the health check")
            return False
        if not route_served:  # (a served route stays as it was: probing a sleeping one would wake it)
            try:
                self.c.proxy.wait_served(target.slug, target.pr, event.deployment_id, None, control, closed=True)
            except Exception as exc:  # noqa: BLE001 - cancelled, or not seen: the route step's check waits then
                target.log.note(f"route loaded while building, not seen yet: {exc}")
        return True

    def remove_prepared(self, target: Target, prepared: Future[bool]) -> None:
        """A new preview that did not come up leaves no route (as when routes were written only after health)."""
        try:
            if prepared.result():
                self.c.proxy.remove(target.slug, target.pr, target.log)
        except Exception as exc:  # noqa: BLE001 - the deploy's own failure is what is reported
            target.log.note(f"route of the failed deploy not removed: {exc}")

    def open(self, event: PullRequestEvent, target: Target, record: DeploymentRecord, route_served: bool,
              control: FlowControl, prepared: Future[bool] | None = None) -> None:
        """Open the route loaded while the app built (no reload), else write it now; `running` and the ready
        comment only once nginx's workers serve it."""
        proxy = self.c.proxy
        if prepared is not None and prepared.result():
            try:
                proxy.open(target.slug, target.pr)
            except OSError as exc:
                raise StepFailed("Nginx reload failed", f"the route's flag could not be written: {exc}") from None
        else:
            self.install(event, target, record, route_served)
        try:
            self.wait_served(event, target, control)
        except FlagUnseen as exc:  # no route carries its flag from now on: this one is written open and reloaded
            target.log.note(f"{exc}: the route is written without it")
            proxy.stop_using_flags()
            self.install(event, target, record, route_served=False)
            self.wait_served(event, target, control)

    def install(self, event: PullRequestEvent, target: Target, record: DeploymentRecord,
                      route_served: bool) -> None:
        try:
            host, port = self.c.runtime.app_address(event.deployment_id, record.exposedAppPort)
            self.c.proxy.install(target.slug, target.pr, event.deployment_id, port, target.log,
                                 served=route_served, host=host, subject=event.subject, routes=self._routes(event))
        except RuntimeFailure as exc:
            raise StepFailed(exc.message, exc.detail) from None
        except (ProxyError, OSError) as exc:
            raise StepFailed("Nginx reload failed", str(exc)) from None

    def wait_served(self, event: PullRequestEvent, target: Target, control: FlowControl) -> None:
        """nginx serves the route (and each routed service's), else StepFailed; FlagUnseen is left to `open`, which
        writes it again."""
        try:
            self.c.proxy.wait_served(target.slug, target.pr, event.deployment_id, target.log, control)
            self.c.proxy.wait_routes_served(target.slug, target.pr, event.deployment_id, self._routes(event),
                                            target.log, control)
        except FlagUnseen:
            raise
        except ProxyError as exc:
            raise StepFailed("Nginx route not served", str(exc)) from None

    def _routes(self, event: PullRequestEvent) -> list[tuple[str, int]]:
        return [(route.name, route.port) for route in routes_of(self.c.store, event.deployment_id)]
