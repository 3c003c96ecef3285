"""`preview-orchestrator setup-nginx`: one nginx site with the public webhook location and the preview routes,
installed only when no server of the host's nginx includes PROXY_CONFIG_DIR yet. The site also includes, at http
level, PROXY_CONFIG_DIR/servers/*.conf: the server of each preview under host routing (PREVIEW_ROUTING=host).

An operator's configuration is never overwritten: a site file that exists and is not ours (it lacks our first
line) is left alone, and then, as when nginx refuses our site, the exact lines to add are printed instead.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from orchestrator.common.checkout_paths import write_new
from orchestrator.common.commands import CommandFailed, run
from orchestrator.common.host_env import HostEnv
from orchestrator.settings import Settings

OURS = "# Written by preview-orchestrator setup-nginx."
SERVERS_DIR = "servers"  # PROXY_CONFIG_DIR/servers/: one server per preview under host routing (adapters/nginx/)
NAMES_BUCKET_SIZE = 256  # server_names_hash_bucket_size: host names up to 238 characters (MAX_HOST_NAME)


def dump_command(test_command: str) -> list[str] | None:
    """`nginx -T` with the same -c/-p as PROXY_TEST_COMMAND's `nginx -t`; None when that is not nginx -t."""
    argv = shlex.split(test_command)
    if not argv or Path(argv[0]).name != "nginx" or "-t" not in argv:
        return None
    return ["-T" if arg == "-t" else arg for arg in argv if arg != "-q"]


_INCLUDE = re.compile(r"""(?:^|[;{}])\s*include\s+(["']?)([^;\s"']+)\1\s*;""")


def includes_routes(dump: str, proxy_dir: Path) -> bool:
    """Whether `nginx -T` output has an `include` of the route files (statements split on `;`, `{`, `}`;
    comments dropped)."""
    return _includes(dump, {f"{proxy_dir}/*.conf", f"{proxy_dir}/*"})


def includes_servers(dump: str, proxy_dir: Path) -> bool:
    """Whether `nginx -T` output has an `include` of the per-preview servers of host routing
    (PROXY_CONFIG_DIR/servers/*.conf; it must stand at http level, where nginx -t accepts a server)."""
    return _includes(dump, {f"{proxy_dir}/{SERVERS_DIR}/*.conf", f"{proxy_dir}/{SERVERS_DIR}/*"})


def _includes(dump: str, wanted: set[str]) -> bool:
    text = "\n".join(line.split("#", 1)[0] for line in dump.splitlines())
    return any(match[2] in wanted for match in _INCLUDE.finditer(text))


def servers_include(settings: Settings) -> str:
    """The http-level line host routing needs (in a site file, outside any server block)."""
    return f"include {settings.proxy_config_dir}/{SERVERS_DIR}/*.conf;\n"


_BUCKET = re.compile(r"(?:^|[;{}])\s*server_names_hash_bucket_size\s+(\d+)\s*;")


def names_bucket_size(dump: str) -> int | None:
    """`server_names_hash_bucket_size` of `nginx -T` output; None when unset (nginx's default is a CPU cache
    line, 64 bytes: host names longer than about 46 characters then make nginx -t fail)."""
    text = "\n".join(line.split("#", 1)[0] for line in dump.splitlines())
    found = _BUCKET.search(text)
    return int(found[1]) if found else None


@dataclass(frozen=True)
class SiteResult:
    changed: bool
    message: str
    ok: bool = True


def server_block(settings: Settings, webhook_paths: Sequence[str]) -> str:
    """The lines a server block needs: the webhook locations of the code hosts that are on (the only public part
    of the service) and the include of the per-preview locations."""
    service = settings.orchestrator_host if settings.orchestrator_host not in ("0.0.0.0", "::") else "127.0.0.1"  # noqa: S104
    webhooks = "".join(
        f"    location = {path} {{\n"
        f"        proxy_pass http://{service}:{settings.orchestrator_port};\n"
        "        proxy_set_header Host $host;\n"
        "        proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;\n"
        "        proxy_set_header X-Forwarded-Proto $scheme;\n"
        "        client_max_body_size 25m;\n"
        "    }\n" for path in webhook_paths)
    return (
        "    # The code hosts' webhooks, and nothing else of the service, are public.\n"
        f"{webhooks}"
        "    # One file per preview, written and removed by the service.\n"
        f"    include {settings.proxy_config_dir}/*.conf;\n"
    )


def site_text(settings: Settings, webhook_paths: Sequence[str], bucket: bool = True) -> str:
    """`bucket`: also set server_names_hash_bucket_size (http level, once per nginx: only when no file sets it),
    so that the long host names of host routing fit (up to NAMES_BUCKET_SIZE - 18 characters)."""
    names = ["localhost", "127.0.0.1"]
    host = urlsplit(settings.preview_base_url or "").hostname
    if host and host not in names:
        names.insert(0, host)
    return (f"{OURS} Remove this line before editing by hand.\n"
            "server {\n"
            f"    listen {settings.proxy_listen_port};\n"
            f"    server_name {' '.join(names)};\n"
            f"{server_block(settings, webhook_paths)}"
            "    # Nothing else is served here.\n"
            "    location / {\n        return 404;\n    }\n"
            "}\n"
            "# Host routing (PREVIEW_ROUTING=host): one server per preview, written and removed by the service.\n"
            f"{servers_include(settings)}"
            + (f"server_names_hash_bucket_size {NAMES_BUCKET_SIZE};\n" if bucket else ""))


def ensure_site(settings: Settings, env: HostEnv, webhook_paths: Sequence[str]) -> SiteResult:
    """`webhook_paths`: `/webhook/{name}` of each code host that is on (GitHub's also `/webhook/codehost`)."""
    dump = dump_command(settings.proxy_test_command)
    if dump is None:
        return SiteResult(False, "PROXY_TEST_COMMAND is not `nginx -t`: configure your proxy by hand "
                                 "(docs/operations.md)")
    try:
        current = run(dump, cwd=None, env=env.tools(), timeout=60, log=None)
    except CommandFailed as exc:
        return SiteResult(False, f"nginx -t fails, so nothing was changed; fix it first:\n{exc.tail(5)}", ok=False)
    if includes_routes(current, settings.proxy_config_dir):
        if settings.preview_routing == "host" and not includes_servers(current, settings.proxy_config_dir):
            return SiteResult(False, f"nginx includes {settings.proxy_config_dir} but not its servers, which "
                              "PREVIEW_ROUTING=host needs; add this line at http level (outside any server "
                              f"block, e.g. in conf.d/), then run `nginx -t && nginx -s reload`:\n\n"
                              f"{servers_include(settings)}", ok=False)
        return SiteResult(False, f"nginx already includes {settings.proxy_config_dir}; nothing to do")
    site = settings.proxy_site_file
    previous = site.read_text(encoding="utf-8") if site.is_file() else None
    if site.is_symlink() or (previous is not None and not previous.startswith(OURS)):
        return SiteResult(False, _by_hand(settings, f"{site} exists and is not ours", webhook_paths), ok=False)
    (settings.proxy_config_dir / SERVERS_DIR).mkdir(parents=True, exist_ok=True)
    site.parent.mkdir(parents=True, exist_ok=True)
    write_new(site.parent, site.name, site_text(settings, webhook_paths, bucket=names_bucket_size(current) is None))
    try:
        run(shlex.split(settings.proxy_test_command), cwd=None, env=env.tools(), timeout=60, log=None)
    except CommandFailed as exc:
        _restore(site, previous)
        why = f"nginx refused the site ({exc.tail(3).strip()})"
        return SiteResult(False, _by_hand(settings, why, webhook_paths), ok=False)
    how = _reload_or_start(settings, env)
    return SiteResult(True, f"installed the nginx site {site} (port {settings.proxy_listen_port}); nginx {how}")


def _reload_or_start(settings: Settings, env: HostEnv) -> str:
    try:
        run(shlex.split(settings.proxy_reload_command), cwd=None, env=env.tools(), timeout=60, log=None)
        return "reloaded"
    except CommandFailed:
        # Not running (a fresh machine without an init system): start it with the test command's options.
        start = [arg for arg in shlex.split(settings.proxy_test_command) if arg not in ("-t", "-q")]
        run(start, cwd=None, env=env.tools(), timeout=60, log=None, daemon=True)
        return "started"


def _restore(site: Path, previous: str | None) -> None:
    if previous is None:
        site.unlink(missing_ok=True)
    else:
        write_new(site.parent, site.name, previous)


def _by_hand(settings: Settings, why: str, webhook_paths: Sequence[str]) -> str:
    return (f"{why}; nothing was changed. Add these lines to the server block that serves "
            f"{settings.preview_base_url or 'your preview host'}, then run `nginx -t && nginx -s reload`:\n\n"
            f"{server_block(settings, webhook_paths)}\nand, for PREVIEW_ROUTING=host, this one at http level "
            f"(outside any server block):\n\n{servers_include(settings)}")
