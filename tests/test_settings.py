from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.settings import SettingsError, load_settings

SECRET_VALUE = "very-secret-value-123"


def _load(**overrides: object):
    return load_settings(_env_file=None, **overrides)


def test_defaults_match_the_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("CLEANUP_TTL_DAYS", "MAX_CONCURRENT_PREVIEWS", "ORCHESTRATOR_PORT", "LOG_LEVEL",
                 "DEPLOYMENTS_DIR", "DEPLOYMENTS_DB", "ORCHESTRATOR_HOST", "WEBHOOK_PROCESSING",
                 "MAX_CONCURRENT_BUILDS", "CODEHOST_API_URL", "PREVIEW_BASE_URL", "ORCHESTRATOR_PUBLIC_URL"):
        monkeypatch.delenv(name, raising=False)
    settings = _load(codehost_webhook_secret="s")
    assert settings.cleanup_ttl_days == 7
    assert settings.max_concurrent_previews == 10
    assert settings.orchestrator_port == 3000
    assert settings.orchestrator_host == "127.0.0.1"
    assert settings.deployments_dir == Path("/opt/preview-deployments")
    assert settings.deployments_db == Path("/opt/preview-deployer/deployments.json")
    assert settings.inbox_path == Path("/opt/preview-deployer/inbox.sqlite3")
    assert settings.codehost_api_url == "https://api.github.com"
    assert settings.webhook_processing == "queue"
    assert settings.max_concurrent_builds == 2
    assert settings.log_level == "info"
    assert settings.api_server_url is None


def test_values_come_from_environment_and_dotenv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text("CODEHOST_WEBHOOK_SECRET=from-dotenv\nCLEANUP_TTL_DAYS=3\nLOG_LEVEL=WARN\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CLEANUP_TTL_DAYS", "5")  # the environment wins over .env
    monkeypatch.setenv("ALLOWED_REPOS", " Codertocat/Hello-World , acme/api.v2 ")
    settings = load_settings()
    assert settings.codehost_webhook_secret.get_secret_value() == "from-dotenv"
    assert settings.cleanup_ttl_days == 5
    assert settings.log_level == "warn"
    assert settings.allowed_repos == ("Codertocat/Hello-World", "acme/api.v2")
    assert settings.allowed_repos_folded == frozenset({"codertocat/hello-world", "acme/api.v2"})


@pytest.mark.parametrize(
    ("public", "base", "expected"),
    [
        ("https://po.example.test/", "https://previews.example.test", "https://po.example.test"),
        (None, "https://previews.example.test", "https://previews.example.test"),
        (None, None, None),
    ],
)
def test_public_url_falls_back_to_preview_base_url(public, base, expected) -> None:
    settings = _load(codehost_webhook_secret="s", orchestrator_public_url=public, preview_base_url=base)
    assert settings.api_server_url == expected


@pytest.mark.parametrize(
    ("overrides", "variable"),
    [
        ({"cleanup_ttl_days": "seven"}, "CLEANUP_TTL_DAYS is not valid"),
        ({"log_level": "verbose"}, "LOG_LEVEL is not valid"),
        ({"allowed_repos": "acme"}, "ALLOWED_REPOS is not valid: entry 'acme' is not of the form owner/repo"),
        ({"allowed_repos": "acme/api,a/b/c"}, "ALLOWED_REPOS is not valid"),
        ({"orchestrator_port": "70000"}, "ORCHESTRATOR_PORT is not valid"),
        ({"webhook_processing": "later"}, "WEBHOOK_PROCESSING is not valid"),
        ({"max_concurrent_builds": "0"}, "MAX_CONCURRENT_BUILDS is not valid"),
        ({"preview_base_url": "ftp://x"}, "PREVIEW_BASE_URL is not valid"),
    ],
)
def test_malformed_values_name_the_variable(overrides: dict[str, str], variable: str) -> None:
    with pytest.raises(SettingsError) as caught:
        _load(codehost_webhook_secret=SECRET_VALUE, **overrides)
    assert len(caught.value.lines) == 1
    assert caught.value.lines[0].startswith(variable)
    assert SECRET_VALUE not in str(caught.value)


def test_missing_or_empty_secret_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CODEHOST_WEBHOOK_SECRET", raising=False)
    with pytest.raises(SettingsError, match="CODEHOST_WEBHOOK_SECRET is required but not set"):
        _load()
    with pytest.raises(SettingsError, match="CODEHOST_WEBHOOK_SECRET is not valid: must not be empty"):
        _load(codehost_webhook_secret="  ")


def test_serve_stops_with_one_line_per_bad_variable(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "CODEHOST_TOKEN": SECRET_VALUE, "CLEANUP_TTL_DAYS": "x",
           "HOME": str(tmp_path), "DEPLOYMENTS_DB": str(tmp_path / "state" / "deployments.json"),
           "LOG_LEVEL": "loud"}
    result = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "serve"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert sorted(lines) == [
        "preview-orchestrator: configuration error: CLEANUP_TTL_DAYS is not valid: "
        "Input should be a valid integer, unable to parse string as an integer",
        "preview-orchestrator: configuration error: LOG_LEVEL is not valid: "
        "Input should be 'debug', 'info', 'warn' or 'error'",
    ]  # the missing webhook secret is not among them: it is generated once the rest is right
    assert not (tmp_path / "state").exists()  # and nothing was generated meanwhile
    assert SECRET_VALUE not in result.stderr + result.stdout


def test_version_flag() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "--version"], capture_output=True, text=True, timeout=60
    )
    assert result.stdout.strip() == "preview-orchestrator 0.1.0"



def test_the_event_handler_as_the_old_layout_spelled_it_is_the_default() -> None:
    for old in ("orchestrator.engine:DeployEngine", "orchestrator.flows:DeployEngine"):
        assert _load(codehost_webhook_secret=SECRET_VALUE, event_handler=old).event_handler == \
            "orchestrator.flows:build_engine"
    assert _load(codehost_webhook_secret=SECRET_VALUE, event_handler="mine:Handler").event_handler == "mine:Handler"
