"""How a runtime's step fails: the command's (or compose's) own reason under the step's message."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from orchestrator.plugin_api import CommandFailed, ConfigError, RuntimeFailure


@contextmanager
def failure(message: str, kind: type[RuntimeFailure] = RuntimeFailure) -> Iterator[None]:
    """A failed command (its last lines), a compose file compose cannot read (its problems) or a missing program
    becomes the runtime's RuntimeFailure (or `kind`) with `message`."""
    try:
        yield
    except CommandFailed as exc:
        raise kind(message, exc.tail()) from None
    except ConfigError as exc:
        raise kind(message, "; ".join(exc.problems)) from None
    except OSError as exc:  # docker missing, or not executable
        raise kind(message, str(exc)) from None
