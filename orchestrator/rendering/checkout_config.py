"""Reading a checkout: preview-config.yml against the loaded plugins, and the starting file for `init`."""

from __future__ import annotations

from pathlib import Path

import yaml

from orchestrator.plugin_api.preview_config import CONFIG_FILE, PreviewConfig, load_preview_config
from orchestrator.rendering.plugin_host import PluginHost


def load_checkout_config(host: PluginHost, repo_dir: Path) -> PreviewConfig:
    """Validate `repo_dir/preview-config.yml`; a missing `framework` names the detected one."""
    detected = host.detect_framework(repo_dir).framework
    return load_preview_config(repo_dir, host.known_names(detected=detected))


def starter_config(host: PluginHost, repo_dir: Path) -> str:
    """A preview-config.yml for `init`, from the detected framework's defaults."""
    detection = host.detect_framework(repo_dir)
    framework = host.provided.frameworks[detection.framework]
    database = "postgres" if "postgres" in host.provided.databases else sorted(host.provided.databases)[0]
    document = {
        "framework": framework.name,
        "database": database,
        "health_check_path": "/",
        "app_port": framework.default_port,
        "app_port_env": "PORT",
        "app_entrypoint": framework.default_entrypoint,
    }
    header = (
        f"# Written by `preview-orchestrator init` ({detection.reason}).\n"
        f"# Optional fields: build_commands, extra_services ({', '.join(sorted(host.provided.services))}),\n"
        "# env, env_file, startup_commands, dockerfile. See the README.\n"
    )
    return header + yaml.safe_dump(document, sort_keys=False)


def write_starter_config(host: PluginHost, repo_dir: Path) -> Path:
    target = repo_dir / CONFIG_FILE
    if target.exists() or target.is_symlink():
        raise FileExistsError(f"{target} already exists; not overwritten")
    text = starter_config(host, repo_dir)
    with target.open("x", encoding="utf-8") as handle:
        handle.write(text)
    return target
