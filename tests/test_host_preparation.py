"""What scripts/prepare-host leaves on the host (scripts/test runs it before the suite)."""

from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path

import pytest

pytestmark = pytest.mark.docker

PLUGIN = Path("/usr/local/lib/docker/cli-plugins/docker-compose")


def test_the_host_wide_compose_plugin_is_roots_own_file_not_a_link_into_a_checkout() -> None:
    """Linked into a checkout's .venv, whoever can write the checkout would choose what root runs, and deleting
    the .venv would break compose for the whole host."""
    assert not PLUGIN.is_symlink()
    info = PLUGIN.stat()
    assert stat.S_ISREG(info.st_mode) and info.st_uid == 0 and not info.st_mode & 0o022
    assert os.access(PLUGIN, os.X_OK)


def test_the_build_user_exists_and_is_unprivileged() -> None:
    account = pwd.getpwnam("po-build")
    assert account.pw_uid != 0 and account.pw_shell.endswith("nologin")
