"""doctor's address-pool check: how many preview networks the engine's configuration leaves room for."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest

from orchestrator.cli.address_pools import DOCKER_DEFAULT_POOLS, capacity, configured_pools
from orchestrator.cli.doctor import _networks
from orchestrator.common.host_env import HostEnv
from tests.conftest import SettingsFactory
from tests.support.standins import require_engine


def test_docker_defaults_hold_about_thirty_networks_and_the_suggested_pool_thousands() -> None:
    assert capacity(DOCKER_DEFAULT_POOLS) == 31  # docker0 takes one of them: 30, as measured on this engine
    assert capacity([("172.16.0.0/12", 24)]) == 4096


def test_pools_are_read_from_daemon_json_first_then_from_dockerd_arguments() -> None:
    daemon = json.dumps({"default-address-pools": [{"base": "10.200.0.0/16", "size": 24},
                                                   {"base": "10.201.0.0/16", "size": 26}]})
    assert configured_pools(daemon, ["--default-address-pool", "base=172.16.0.0/12,size=24"]) == (
        [("10.200.0.0/16", 24), ("10.201.0.0/16", 26)], "daemon.json")
    for args in (["--default-address-pool", "base=172.16.0.0/12,size=24"],
                 ["--debug", "--default-address-pool=base=172.16.0.0/12,size=24"]):
        assert configured_pools('{"debug": true}', args) == ([("172.16.0.0/12", 24)], "dockerd's command line")
    for broken in (None, "", "not json", '{"default-address-pools": [{"size": 24}]}', "[]"):
        assert configured_pools(broken, []) == (list(DOCKER_DEFAULT_POOLS), "Docker's defaults")



@pytest.mark.docker
def test_doctor_counts_the_networks_other_work_holds(make_settings: SettingsFactory, tmp_path: Path) -> None:
    """A bridge network that is not a preview's takes room from the pools; a preview's does not count twice."""
    require_engine()
    settings, env = make_settings(), HostEnv.for_state_dir(tmp_path)
    room = int(_networks(settings, env).detail.split()[0])
    name = f"po-pool-test-{uuid.uuid4().hex[:8]}"
    subprocess.run(["docker", "network", "create", name], check=True, capture_output=True, timeout=60)
    try:
        assert int(_networks(settings, env).detail.split()[0]) == room - 1
    finally:
        subprocess.run(["docker", "network", "rm", name], capture_output=True, timeout=60)
