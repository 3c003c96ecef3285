"""Whether nginx serves a route: asked on 127.0.0.1 as a reviewer would, until the route's own answer comes."""

from __future__ import annotations

import base64
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from orchestrator.adapters.nginx.errors import FlagUnseen, ProxyError
from orchestrator.common.commands import DeploymentLog
from orchestrator.common.flow_control import FlowControl

SERVED_HEADER = "X-Preview-Deployment"
CLOSED_HEADER = "X-Preview-Closed"  # route.CLOSED_LINES' answer
SERVED_TIMEOUT = 15.0
SERVED_STREAK = 2  # answers from the route in a row, each on a new connection
# nginx lets its old workers take connections for 0.1 s after it started the new ones (measured): after a reload,
# answers from the route must go on this long after the first one.
SERVED_SETTLE = 0.2
REFUSED_GRACE = 3.0


@dataclass(frozen=True)
class Probe:
    """Where and how to ask nginx for a preview: URL, Host header, TLS server name, the protection (a basic one
    gets made-up credentials), whether this process reloaded the route and has not seen it served since, and its
    flag (`flag_open`: the route checks it and it exists, so a closed answer means nginx's workers cannot see it)."""

    url: str
    host: str
    sni: str | None
    protection: str
    reloaded: bool
    flag: Path
    flag_open: Callable[[], bool]


def wait_served(probe: Probe, deployment_id: str, log: DeploymentLog | None, control: FlowControl,
                timeout: float = SERVED_TIMEOUT, closed: bool = False) -> None:
    """Until nginx (on 127.0.0.1, PROXY_LISTEN_PORT — or PREVIEW_TLS_PORT —, with the preview's path or
    host name) answers from this route — told by SERVED_HEADER — and not from a worker that predates the
    reload. Any status of the app will do; behind protection, nginx's own 401 (the probe has no
    credentials), which also shows that the protection works (a users file nginx's workers cannot read
    gives 500; a service nginx cannot reach, too). Nothing listening there at all: the check cannot be made,
    which the log says; the deploy goes on. `closed`: the route was loaded closed, and its closed answer
    (CLOSED_HEADER) is what is waited for."""
    url, host, sni = probe.url, probe.host, probe.sni
    protected = probe.protection != "none"
    headers = {"Host": host}
    if probe.protection == "basic":
        # Without credentials nginx answers 401 without opening the users file; with made-up ones it reads
        # the file (a 500 when its workers cannot) and still answers 401.
        made_up = base64.b64encode(f"preview-orchestrator-probe:{secrets.token_hex(16)}".encode()).decode()
        headers["Authorization"] = f"Basic {made_up}"
    started, last, streak, refused, unseen = time.monotonic(), "no answer", 0, None, 0
    # After a reload an old worker may still take a connection for a moment: served means SERVED_STREAK
    # answers from the route in a row, each on a new connection, and — after a reload this process has not
    # seen served yet — the last one SERVED_SETTLE after the first answer from the route. Until then, pauses
    # of 0.01 s growing to 0.5 s: nginx's new workers answer 0.03-0.1 s after the reload command returns; a
    # probe costs ~2 ms.
    pause = 0.01
    first_seen: float | None = None
    # One client, no connection kept: each probe opens a new one (a client per probe cost ~10 ms each).
    with httpx.Client(verify=False, timeout=5.0, follow_redirects=False, trust_env=False,  # noqa: S501 - only whether nginx answers
                      limits=httpx.Limits(max_keepalive_connections=0)) as client:
        while True:
            control.check()
            try:
                response = client.get(url, headers=headers, extensions={"sni_hostname": sni} if sni else None)
                refused = None
                answered_closed = response.headers.get(CLOSED_HEADER) == deployment_id
                from_route = answered_closed if closed else response.headers.get(SERVED_HEADER) == deployment_id
                if answered_closed and not closed and probe.flag_open():
                    unseen += 1  # loaded and opened, yet closed: nginx's workers cannot look at the flag
                    if unseen >= SERVED_STREAK:
                        raise FlagUnseen(f"nginx's workers cannot look at {probe.flag} (see nginx's error "
                                         "log)")
                else:
                    unseen = 0
                if from_route and (closed or not protected or response.status_code == 401):
                    streak += 1
                    first_seen = first_seen or time.monotonic()
                    settled = not probe.reloaded or time.monotonic() >= first_seen + SERVED_SETTLE
                    if streak >= SERVED_STREAK and settled:
                        if log:
                            log.note(f"nginx serves the route ({response.status_code}, after "
                                     f"{time.monotonic() - started:.2f}s)")
                        return
                elif from_route:
                    streak, last = 0, (f"{response.status_code} where the protection should answer 401 (a users "
                                       "file nginx's workers cannot read, or a service nginx cannot reach: see "
                                       "nginx's error log)")
                else:
                    streak, last = 0, f"{response.status_code} without the preview's {SERVED_HEADER}"
            except httpx.ConnectError as exc:
                if "SSL" in str(exc) or "ssl" in type(exc.__context__).__module__:
                    streak, last = 0, f"TLS handshake failed ({exc})"
                else:
                    # A port the reload adds (PREVIEW_TLS_PORT's first server) is bound a moment after the reload
                    # command returns: refused for REFUSED_GRACE seconds in a row means nothing listens there.
                    refused = refused or time.monotonic()
                    streak, last = 0, "connection refused"
                    if time.monotonic() - refused >= min(REFUSED_GRACE, timeout):
                        if log:
                            log.note(f"nothing listens on {url} (PROXY_LISTEN_PORT, PREVIEW_TLS_PORT): the route "
                                     "could not be checked")
                        return
            except httpx.HTTPError as exc:
                streak, last = 0, type(exc).__name__
            if time.monotonic() - started >= timeout:
                raise ProxyError(f"Nginx route not served after {timeout:.0f}s: {url} (Host {host}) "
                                 f"answered {last}")
            if streak:  # confirming: the next answers at once
                control.wait(0.01)
            else:
                control.wait(pause)
                pause = min(pause * 1.25, 0.5)
