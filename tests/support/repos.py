"""Small checkouts written into a temporary directory for config and rendering tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

FRAMEWORK_PORTS = {"nestjs": 3000, "go": 8080, "laravel": 8000, "rust": 8080, "python": 8000}
ENTRYPOINTS = {
    "nestjs": "node dist/main.js",
    "go": "/app/server",
    "laravel": "php artisan serve",
    "rust": "/app/server",
    "python": "python3 app.py",
}


def config_for(framework: str = "go", database: str = "postgres", **fields: Any) -> dict[str, Any]:
    document: dict[str, Any] = {
        "framework": framework,
        "database": database,
        "health_check_path": "/health",
        "app_port": FRAMEWORK_PORTS.get(framework, 8000),
        "app_port_env": "PORT",
        "app_entrypoint": ENTRYPOINTS.get(framework, "./run"),
    }
    document.update(fields)
    return {k: v for k, v in document.items() if v is not None}


def make_repo(
    root: Path, config: dict[str, Any] | str | bytes | None = None, files: dict[str, str] | None = None
) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    if isinstance(config, bytes):
        (root / "preview-config.yml").write_bytes(config)
    elif config is not None:
        text = config if isinstance(config, str) else yaml.safe_dump(config, sort_keys=False)
        (root / "preview-config.yml").write_text(text)
    for name, content in (files or {}).items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    return root


def snapshot_tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
