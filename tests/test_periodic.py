"""The loop the TTL, the runtime watch and sleep share: a failing check is logged and tried again; stop ends it."""

from __future__ import annotations

import asyncio
import logging

import pytest

from orchestrator.events.periodic import Periodic


class Flaky(Periodic):
    name = "flaky check"

    def __init__(self, interval: float, check_at_start: bool) -> None:
        super().__init__(interval)
        self.check_at_start = check_at_start
        self.calls = 0

    async def check(self) -> None:
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("the engine is away")


@pytest.mark.parametrize("check_at_start", [True, False])
async def test_a_failing_check_is_logged_and_tried_again_until_stopped(
        check_at_start: bool, caplog: pytest.LogCaptureFixture) -> None:
    loop = Flaky(0.05, check_at_start)
    with caplog.at_level(logging.ERROR, logger="orchestrator.events.periodic"):
        loop.start()
        await asyncio.sleep(0.01)
        assert loop.calls == (1 if check_at_start else 0)  # the TTL looks at once; the others wait first
        for _ in range(400):  # the failure did not end the loop: two more calls come (on a busy machine, late)
            if loop.calls >= 3:
                break
            await asyncio.sleep(0.05)
        await loop.stop()
    calls = loop.calls
    assert calls >= 3
    assert "flaky check failed; trying again later" in caplog.text and "the engine is away" in caplog.text
    await asyncio.sleep(0.1)
    assert loop.calls == calls  # stopped
