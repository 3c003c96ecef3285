"""Locally built stand-in images (scripts/prepare-test-host) and the IMAGE_OVERRIDES that select them."""

from __future__ import annotations

import shutil
import subprocess

STANDIN_OVERRIDES: dict[str, str] = {
    "golang:1.22-bookworm": "po-standin/go:test",
    "debian:bookworm-slim": "po-standin/base:test",
    "node:20-bookworm-slim": "po-standin/node:test",
    "composer:2": "po-standin/php:test",
    "php:8.3-cli": "po-standin/php:test",
    "rust:1-bookworm": "po-standin/rust:test",
    "python:3.12-slim": "po-standin/python:test",
    "postgres:16": "po-standin/postgres:test",
    "mysql:8.4": "po-standin/mariadb:test",
    "mongo:7": "po-standin/mongo:test",
    "redis:7": "po-standin/redis:test",
    "memcached:1.6": "po-standin/memcached:test",
}


def overrides_setting() -> str:
    return ",".join(f"{source}={target}" for source, target in STANDIN_OVERRIDES.items())


def require_engine() -> None:
    """Fail (not skip) when the engine is missing: scripts/test prepares it, so absence is a defect."""
    if shutil.which("docker") is None:
        raise RuntimeError("docker is not installed; run scripts/prepare-test-host")
    result = subprocess.run(["docker", "image", "inspect", "po-standin/base:test"], capture_output=True,
                            timeout=30)
    if result.returncode != 0:
        raise RuntimeError("the Docker engine or the stand-in images are missing; run scripts/prepare-test-host")
