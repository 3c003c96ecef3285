"""The repository stands alone: a clone with nothing beside it (no ../shared, no other checkout) runs the
unit part of the suite and passes; the fixtures it needs are in tests/fixtures."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.payloads import REPO_ROOT

pytestmark = pytest.mark.clone


def test_a_clone_with_nothing_beside_it_passes_the_unit_tests(tmp_path: Path) -> None:
    alone = tmp_path / "empty" / "preview-orchestrator"
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(REPO_ROOT), str(alone)], check=True,
                   timeout=120, capture_output=True)
    assert sorted(p.name for p in alone.parent.iterdir()) == ["preview-orchestrator"]
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PYTHONPATH": str(alone),
           "PYTHONDONTWRITEBYTECODE": "1"}
    where = subprocess.run([sys.executable, "-c", "import orchestrator, tests.support.payloads as p; "
                            "print(orchestrator.__file__); print(p.FIXTURES)"], cwd=alone, env=env,
                           capture_output=True, text=True, timeout=60, check=True).stdout.split()
    assert all(Path(path).is_relative_to(alone) for path in where), where  # the clone's code and fixtures
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x",
                             "-m", "not docker and not live and not swarm and not clone"], cwd=alone, env=env,
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert " passed" in result.stdout and " failed" not in result.stdout
