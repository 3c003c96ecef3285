"""Jinja2 templates shipped inside plugin packages, read with importlib.resources (zip-safe)."""

from __future__ import annotations

import json
from typing import Any

import importlib_resources
import jinja2

_ENV = jinja2.Environment(  # noqa: S701 - renders Dockerfiles, not HTML
    undefined=jinja2.StrictUndefined,
    keep_trailing_newline=True,
    trim_blocks=True,
    lstrip_blocks=True,
)
_ENV.filters["json"] = lambda value: json.dumps(value)


def render_template(package: str, name: str, **variables: Any) -> str:
    """Render `templates/<name>` of `package` (e.g. `frameworks.go`) with StrictUndefined."""
    source = (importlib_resources.files(package) / "templates" / name).read_text(encoding="utf-8")
    return _ENV.from_string(source).render(**variables)
