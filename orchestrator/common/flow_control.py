"""The overall deadline of one flow, and its cancellation (a `closed` event or a DELETE for the same preview).

Every command and wait of a flow checks its FlowControl: a command is killed (with its whole process group)
when the flow is cancelled or out of time, and waits between health probes end at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class FlowAborted(Exception):
    """The flow was cancelled or ran past its deadline; the message says which."""

    def __init__(self, message: str, cancelled: bool) -> None:
        super().__init__(message)
        self.message = message
        self.cancelled = cancelled


class FlowControl:
    def __init__(self, timeout: float, clock: Callable[[], float] = time.monotonic,
                 on_settled: Callable[[], None] | None = None) -> None:
        self._clock = clock
        self._timeout = timeout
        self._deadline = clock() + timeout
        self._event = threading.Event()
        self._reason: str | None = None
        self._on_settled = on_settled

    def settle(self) -> None:
        """The record says what the flow came to do; what is left is reporting it (a comment on the code host).
        Whoever waits for the flow's event (a request waiting for a wake) is answered now, not after the code
        host's API has been called. Only a wake's waiters are (the dispatcher's SETTLING); elsewhere it does
        nothing."""
        if self._on_settled is not None:
            self._on_settled()

    def cancel(self, reason: str) -> None:
        if self._reason is None:
            self._reason = reason
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def remaining(self) -> float:
        return self._deadline - self._clock()

    def aborted(self) -> FlowAborted | None:
        """Why the flow must stop now, or None."""
        if self._event.is_set():
            return FlowAborted(f"Cancelled: {self._reason}", cancelled=True)
        if self.remaining() <= 0:
            return FlowAborted(f"Deployment took longer than {self._timeout:.0f} s (FLOW_TIMEOUT_SECONDS)",
                               cancelled=False)
        return None

    def check(self) -> None:
        if (abort := self.aborted()) is not None:
            raise abort

    def wait(self, seconds: float) -> None:
        """Sleep up to `seconds`, waking at once on cancellation; never past the deadline."""
        self._event.wait(max(0.0, min(seconds, self.remaining())))


def unlimited() -> FlowControl:
    """For work outside a flow (start-up reconciliation, the CLI): never cancelled, no deadline to speak of."""
    return FlowControl(timeout=10 * 365 * 24 * 3600.0)
