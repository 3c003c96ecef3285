"""The per-pull-request nginx route: its text (route.py, pure), its files and reloads (proxy.py), its flag
(flags.py) and activity file (activity.py), the wait until nginx serves it (served.py), the users file of basic
protection (users.py).

Path routing (PREVIEW_ROUTING=path): a `location /{slug}/pr-{N}/` file in PROXY_CONFIG_DIR, included inside the
site's server. Host routing (`host`): a `server` of its own per preview, `{slug}-pr-{N}.{PREVIEW_DOMAIN}`, in
PROXY_CONFIG_DIR/servers/, included at http level (a server cannot stand inside another). Either carries the
preview's protection (PREVIEW_PROTECTION): HTTP basic authentication, or nginx's auth_request asking the service
about the cookie a signed link of the pull-request comment set (http/resources/preview_access.py).

With sleep (PREVIEW_IDLE_MINUTES), a route also logs the requests that reach its app to an activity file
(PROXY_CONFIG_DIR/activity/: its time is the preview's last request), and hands a request the sleeping app cannot
answer to the service's wake endpoint (http/resources/preview_wake.py), which wakes the app and gives the request
back to it.

A route opens with its flag file (PROXY_CONFIG_DIR/open/{slug}-pr-{N}): without it, the route answers 404 as if it
did not exist. A new preview's route is written and loaded while the app builds, closed, and opened once the app is
healthy — by creating the flag, which nginx looks at on every request: no reload on the way to `running`.
"""

from orchestrator.adapters.nginx.activity import ACTIVITY_DIR
from orchestrator.adapters.nginx.errors import FlagUnseen, ProxyError
from orchestrator.adapters.nginx.flags import OPEN_DIR
from orchestrator.adapters.nginx.proxy import Proxy
from orchestrator.adapters.nginx.route import APP_HEADER_RULE, Routing
from orchestrator.adapters.nginx.users import USERS_FILE

__all__ = ["ACTIVITY_DIR", "APP_HEADER_RULE", "OPEN_DIR", "USERS_FILE", "FlagUnseen", "Proxy", "ProxyError", "Routing"]
