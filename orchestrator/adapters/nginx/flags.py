"""A route's flag: a file nginx's workers look at on every request, so that a route loaded closed while its app
built opens at once, without a reload. Usable only where the workers (an unprivileged user) can look into
PROXY_CONFIG_DIR; else routes carry no check and are written open, with a reload."""

from __future__ import annotations

import logging
import re
import stat
from pathlib import Path

from orchestrator.common.naming import preview_name

_logger = logging.getLogger("orchestrator.adapters.nginx")

OPEN_DIR = "open"  # PROXY_CONFIG_DIR/open/{slug}-pr-{N}: the route's flag; no `include` matches it
UNSEEN_MARK = ".workers-cannot-look"  # in OPEN_DIR: nginx's workers were found not to see the flags
_PLAIN_PATH = re.compile(r"/[A-Za-z0-9._/-]*")


class RouteFlags:
    """The flags of the routes in `config_dir` (a base of Proxy)."""

    config_dir: Path
    _flags: bool | None  # whether routes carry their flag's check (flags_usable), once decided

    def flag_path(self, slug: str, pr: int) -> Path:
        """The route's flag: while it exists the route is open (nginx looks at it on every request)."""
        return self.config_dir.resolve() / OPEN_DIR / preview_name(slug, pr)  # the path nginx's workers go through

    def flags_usable(self) -> bool:
        """Whether routes can open by their flag: nginx's workers (an unprivileged user) must be able to look at
        it, so every directory down to OPEN_DIR lets others through (as /etc/nginx does). Decided once per
        process (and its path must be plain: it stands in every route); else routes carry no check and are
        written when they open, with a reload."""
        if self._flags is None:
            directory = self.config_dir / OPEN_DIR
            try:
                directory.mkdir(parents=True, exist_ok=True)
                directory.chmod(0o755)
                real = directory.resolve()  # a link's target's directories are what the workers go through
                self._flags = (_PLAIN_PATH.fullmatch(str(real)) is not None  # written unquoted into every route
                               and not (directory / UNSEEN_MARK).exists()
                               and all(part.stat().st_mode & stat.S_IXOTH for part in (real, *real.parents)))
            except OSError:
                self._flags = False
            if not self._flags:
                _logger.info("routes carry no flag: nginx's workers cannot look into %s (every directory above it "
                             "must let others through, and its path be plain); each is written when it opens, with "
                             "a reload", directory)
        return self._flags

    def stop_using_flags(self) -> None:
        """nginx's workers turned out not to see the flags (FlagUnseen): routes carry no check from now on, after a
        restart too (UNSEEN_MARK; remove it once nginx's workers can look into PROXY_CONFIG_DIR)."""
        self._flags = False
        try:
            (self.config_dir / OPEN_DIR / UNSEEN_MARK).touch()
        except OSError as exc:
            _logger.warning("%s not written: %s", UNSEEN_MARK, exc)

    def open(self, slug: str, pr: int) -> None:
        """Open the preview's route at once, without a reload (nginx's workers look at the flag); a route that
        checks no flag ignores it."""
        flag = self.flag_path(slug, pr)
        flag.parent.mkdir(parents=True, exist_ok=True)
        flag.touch(mode=0o644)
