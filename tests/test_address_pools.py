"""doctor's address-pool check: how many preview networks the engine's configuration leaves room for."""

from __future__ import annotations

import json

from orchestrator.cli.address_pools import DOCKER_DEFAULT_POOLS, capacity, configured_pools


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

