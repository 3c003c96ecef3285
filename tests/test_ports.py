"""Port allocation: disjoint pools, lowest free port, taken and busy ports skipped, out of range."""

from __future__ import annotations

import socket

import pytest

from orchestrator.state.ports import OUT_OF_RANGE, PortAllocationError, allocate, host_port_free
from orchestrator.state.records import PortAllocation


def test_lowest_free_ports_of_each_pool() -> None:
    assert allocate(1, [], set(), is_free=lambda p: True) == PortAllocation(exposedAppPort=8000, exposedDbPort=9000)


def test_taken_and_published_ports_are_skipped() -> None:
    taken = [PortAllocation(exposedAppPort=8000, exposedDbPort=9000)]
    result = allocate(5, taken, {8001, 9001, 9002}, is_free=lambda p: True)
    assert result == PortAllocation(exposedAppPort=8002, exposedDbPort=9003)


def test_a_port_bound_on_the_host_is_skipped() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        assert not host_port_free(port)
    assert host_port_free(port)


def test_a_really_busy_pool_port_is_skipped() -> None:
    first = allocate(1, [], set())
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", first.exposedAppPort))
        holder.listen()
        second = allocate(1, [], set())
    assert second.exposedAppPort > first.exposedAppPort


def test_pull_request_numbers_above_56000_are_out_of_range() -> None:
    assert allocate(56_000, [], set(), is_free=lambda p: True).exposedAppPort == 8000
    with pytest.raises(PortAllocationError, match=OUT_OF_RANGE):
        allocate(56_001, [], set(), is_free=lambda p: True)


def test_an_exhausted_pool_is_out_of_range() -> None:
    with pytest.raises(PortAllocationError, match=OUT_OF_RANGE):
        allocate(1, [], set(range(8000, 9000)), is_free=lambda p: True)
