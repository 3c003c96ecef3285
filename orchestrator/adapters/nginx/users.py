"""PREVIEW_PROTECTION_USERS as the htpasswd file nginx reads beside the routes (basic protection)."""

from __future__ import annotations

import grp
import os
import pwd
import re
import subprocess
from pathlib import Path

from orchestrator.adapters.nginx.errors import ProxyError
from orchestrator.adapters.nginx.route import Routing
from orchestrator.adapters.nginx_site import dump_command
from orchestrator.common.commands import CommandFailed, run
from orchestrator.common.host_env import HostEnv
from orchestrator.settings import protection_users

USERS_FILE = ".preview-users.htpasswd"  # PREVIEW_PROTECTION_USERS, hashed; a dot file no `include` matches
# `user name [group];` of nginx's main context (statements split on `;`, `{`, `}`): who its workers are.
_USER_DIRECTIVE = re.compile(r"(?:^|[;{}])\s*user\s+([^\s;]+)(?:\s+([^\s;]+))?\s*;")


class UsersFile:
    """The users file in `config_dir`; its hashes are made once per process."""

    def __init__(self, config_dir: Path, env: HostEnv, test_command: str) -> None:
        self._config_dir = config_dir
        self._env = env
        self._test_command = test_command
        self._text: str | None = None

    def write(self, routing: Routing) -> None:
        """PREVIEW_PROTECTION_USERS as an htpasswd file nginx reads: SHA-512 crypt (`$6$`, `openssl passwd -6`,
        the password on stdin, never in argv), beside the routes (nginx's workers open it on every request; the
        state directory is private to the service), mode 0640, owned by root and the group of nginx's workers.
        Written when its content changes; the hashes are made once per process."""
        users = routing.users.get_secret_value().strip()
        if routing.protection != "basic" or routing.users_file is not None or not users:
            return
        if self._text is None:
            self._text = "".join(f"{user}:{_sha512_crypt(password, self._env)}\n"
                                 for user, password in protection_users(users))
        path = self._config_dir / USERS_FILE
        gid = self._worker_gid()
        try:
            status = path.lstat()
            if path.read_text() == self._text and (gid is None or status.st_gid == gid):
                return
        except OSError:
            pass
        self._config_dir.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{USERS_FILE}.tmp")
        tmp.unlink(missing_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w") as handle:
            if gid is not None:
                os.fchown(handle.fileno(), os.geteuid(), gid)
                os.fchmod(handle.fileno(), 0o640)
            handle.write(self._text)
            handle.flush()
            os.fsync(handle.fileno())
        tmp.replace(path)

    def _worker_gid(self) -> int | None:
        """The group of nginx's workers: `user` of `nginx -T` (its group, else the group named like the user),
        else nginx's built-in default (nobody, group nogroup). None when the service is not root (then nginx,
        reloaded by the service, runs as the service's user too) or the group cannot be told."""
        if os.geteuid() != 0:
            return None
        user, group = "nobody", None
        dump = dump_command(self._test_command)
        if dump is not None:
            try:
                text = run(dump, cwd=None, env=self._env.tools(), timeout=60, log=None)
            except CommandFailed:
                text = ""
            found = _USER_DIRECTIVE.search("\n".join(line.split("#", 1)[0] for line in text.splitlines()))
            if found:
                user, group = found[1], found[2] or found[1]
        for name in ([group] if group else ["nogroup", "nobody"]):
            try:
                return grp.getgrnam(name).gr_gid
            except KeyError:
                continue
        try:
            return pwd.getpwnam(user).pw_gid
        except KeyError:
            return None


def _sha512_crypt(password: str, env: HostEnv) -> str:
    """`openssl passwd -6`: SHA-512 crypt with a random salt, which nginx checks through the C library's crypt()
    (every Debian host has both). The password goes on stdin; only the hash comes back."""
    try:
        result = subprocess.run(["openssl", "passwd", "-6", "-stdin"], input=password + "\n", capture_output=True,
                                text=True, timeout=30, env=env.tools(), check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ProxyError(f"openssl passwd -6 could not run: {type(exc).__name__}") from None
    hashed = result.stdout.strip()
    if result.returncode != 0 or not hashed.startswith("$6$") or "\n" in hashed:
        raise ProxyError(f"openssl passwd -6 failed: {result.stderr.strip()[-200:]}")
    return hashed
