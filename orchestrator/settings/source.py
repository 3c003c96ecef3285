"""Where every settings class reads its values: the environment, then `.env` in the working directory."""

from __future__ import annotations

from pydantic_settings import SettingsConfigDict

# Each class of settings names it (pydantic merges a class's bases' configurations, the last base winning, so a
# class of several bases would otherwise take a base's defaults: no `.env`, unknown variables refused).
ENV_SOURCE = SettingsConfigDict(env_file=".env", env_file_encoding="utf-8", extra="ignore", case_sensitive=False)
