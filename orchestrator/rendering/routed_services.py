"""Services of a repository's compose file routed besides `app`: `x-preview: {route: NAME, port: N,
health_check_path: /…}` on the service. Read from the file as written (compose's JSON leaves extensions out) and
checked strictly, so no interpolation can change them: literal values only, each in its narrow form. Once the
service has given them host ports (`flows/records.route_ports`), `apply_routes` publishes them on 127.0.0.1 and
tells every service where the routes are."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from orchestrator.common.naming import ROUTE_NAME
from orchestrator.plugin_api.preview_config import HEALTH_PATH
from orchestrator.rendering.compose_document import RenderedDeployment, dump_compose, environment_dict, escape

EXTENSION = "x-preview"
MAX_ROUTES = 4  # besides the app: a frontend, an API, an admin, docs
KEYS = {"route", "port", "health_check_path"}
RESERVED = {"app"}  # the main route's name and service
UNROUTABLE = {"app", "db"}  # the main route's service, and the database (its host port is the preview's db port)
# A service routed by name reaches `docker compose logs`: compose's own pattern, never a leading `-`.
SERVICE_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$")


@dataclass(frozen=True)
class RoutedService:
    """A routed service as its compose file declares it."""

    service: str
    route: str
    port: int  # where the service listens in its container
    health_check_path: str = "/"

    @property
    def variable(self) -> str:
        """The suffix of its variables: PREVIEW_URL_{variable}, PREVIEW_INTERNAL_URL_{variable}."""
        return self.route.upper()


def declared_routes(raw: dict[str, Any], file_name: str) -> tuple[list[RoutedService], list[str]]:
    """The routed services of the raw document, and the problems of each declaration that is not right."""
    services = raw.get("services") if isinstance(raw.get("services"), dict) else {}
    routes: list[RoutedService] = []
    problems: list[str] = []
    for service, options in services.items():
        if not isinstance(options, dict) or EXTENSION not in options:
            continue
        shown = f"{file_name}: service {str(service)[:60]}: {EXTENSION}"
        declared = options[EXTENSION]
        if not isinstance(service, str) or not SERVICE_NAME.fullmatch(service):  # YAML 1.1's `on:` is True here
            problems.append(f"{shown}: a routed service's name must be letters, digits, ., _ and -, starting with a "
                            "letter or digit (quote it)")
            continue
        if service == "app":
            problems.append(f"{shown}: app is the main route (its port and health path are preview-config.yml's)")
            continue
        if service in UNROUTABLE:
            problems.append(f"{shown}: {service} cannot be routed (its host port is the preview's database port)")
            continue
        if not isinstance(declared, dict) or set(map(str, declared)) - KEYS or "route" not in declared \
                or "port" not in declared:
            problems.append(f"{shown} must be a mapping of route, port and (optionally) health_check_path")
            continue
        route, port, path = declared["route"], declared["port"], declared.get("health_check_path", "/")
        if not isinstance(route, str) or not ROUTE_NAME.fullmatch(route) or route in RESERVED:
            problems.append(f"{shown}: route must be 1-16 lower-case letters and digits, starting with a letter, "
                            "and not app")
        elif isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            problems.append(f"{shown}: port must be a number from 1 to 65535 (the port the service listens on)")
        elif not isinstance(path, str) or not HEALTH_PATH.fullmatch(path):
            problems.append(f"{shown}: health_check_path must start with / and contain no spaces")
        elif any(known.route == route for known in routes):
            problems.append(f"{shown}: route {route} is declared twice")
        else:
            routes.append(RoutedService(str(service), route, port, path))
    if len(routes) > MAX_ROUTES:
        problems.append(f"{file_name}: at most {MAX_ROUTES} services may be routed besides app "
                        f"({len(routes)} declare {EXTENSION})")
    return routes, problems


def unroutable(routes: list[RoutedService], compose: dict[str, Any], file_name: str) -> list[str]:
    """Routes compose could not publish as declared, in the file as compose reads it: a service a profile left
    out, or one on another's network namespace or none (`network_mode`: Docker publishes no port there)."""
    services = compose.get("services") or {}
    problems = []
    for route in routes:
        service = services.get(route.service)
        if not isinstance(service, dict):
            problems.append(f"{file_name}: service {route.service}: routed ({EXTENSION}) but not run by compose")
        elif service.get("network_mode"):
            problems.append(f"{file_name}: service {route.service}: routed ({EXTENSION}) services use the "
                            "preview's network (no network_mode)")
    return problems


def apply_routes(rendered: RenderedDeployment, ports: dict[str, int], main_url: str, urls: dict[str, str],
                 more: dict[str, str] | None = None) -> None:
    """Publish each routed service on its host port (127.0.0.1 only, as the app's), and give every service
    PREVIEW_URL (the preview's URL: every preview's services get it), PREVIEW_URL_{NAME} (what a browser opens) and
    PREVIEW_INTERNAL_URL_{NAME} (the service on the preview's own network: what another service's server side
    calls, without leaving the preview); `more`: other variables every service gets (the links' URLs)."""
    services = rendered.compose["services"]
    variables = {"PREVIEW_URL": main_url, **(more or {})}
    for route in rendered.routes:
        variables[f"PREVIEW_URL_{route.variable}"] = urls[route.route]
        variables[f"PREVIEW_INTERNAL_URL_{route.variable}"] = f"http://{route.service}:{route.port}"
        routed = services[route.service]
        routed["ports"] = [f"127.0.0.1:{ports[route.route]}:{route.port}"]
        routed.setdefault("init", True)  # stopped at once, as the app (compose_document.apply_common says why)
    for service in services.values():
        service["environment"] = {**environment_dict(service.get("environment")), **escape(variables)}
    rendered.files[rendered.compose_file] = dump_compose(rendered.compose)
