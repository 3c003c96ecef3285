"""One JSON object per log line, level from LOG_LEVEL, secrets masked wherever they appear."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import TextIO

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING, "error": logging.ERROR}
MASK = "***"


class JsonFormatter(logging.Formatter):
    def __init__(self, secrets: list[str]) -> None:
        super().__init__()
        # Longest first so a secret that contains another is masked whole.
        self._secrets = sorted((s for s in secrets if len(s) >= 4), key=len, reverse=True)

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": "warn" if record.levelno == logging.WARNING else record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        deployment = getattr(record, "deploymentId", None)
        if deployment:
            entry["deploymentId"] = deployment
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return self._mask(json.dumps(entry, ensure_ascii=False, default=str))

    def _mask(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, MASK)
            # Also as it appears inside a JSON string, with escapes.
            text = text.replace(json.dumps(secret)[1:-1], MASK)
        return text


def configure_logging(level: str, secrets: list[str], stream: TextIO | None = None) -> None:
    """Route the root logger (and uvicorn's) to one JSON handler."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter(secrets))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(LEVELS[level])
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers[:] = []
        logger.propagate = True
    # Libraries whose debug lines say nothing an operator needs.
    for name in ("filelock", "asyncio", "httpx", "httpcore"):
        logging.getLogger(name).setLevel(max(LEVELS[level], logging.INFO))
