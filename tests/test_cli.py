"""`preview-orchestrator plugins | validate | render | init` as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from orchestrator.rendering.compose_file import make_context
from tests.support.records import sample_record, track
from tests.support.repos import config_for, make_repo, snapshot_tree


def cli(*args: str, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *args], capture_output=True, text=True, timeout=60, cwd=cwd,
        env={"PATH": os.environ["PATH"], "HOME": str(cwd or "/tmp"), **env},
    )


def test_plugins_json_lists_builtins_and_entry_points() -> None:
    result = cli("plugins", "--json")
    assert result.returncode == 0, result.stderr
    listing = {entry["name"]: entry for entry in json.loads(result.stdout)["plugins"]}
    assert listing["databases.mysql"]["databases"] == ["mysql"]
    assert listing["deno"]["builtin"] is False  # the example distribution, installed by scripts/test
    assert listing["deno"]["distribution"] == "po-example-deno" and listing["deno"]["version"] == "1.2.0"


def test_plugins_table_and_disabling(tmp_path: Path) -> None:
    table = cli("plugins", cwd=tmp_path, PREVIEW_ORCHESTRATOR_DISABLE_PLUGINS="plugins.minio").stdout
    assert table.splitlines()[0].split() == ["NAME", "BUILT-IN", "DISTRIBUTION", "VERSION", "PROVIDES", "HOOKS"]
    assert "frameworks.rust" in table and "plugins.minio" not in table
    runtime = next(line for line in table.splitlines() if line.startswith("orchestrator.runtime.swarm "))
    assert runtime.split()[4] == "swarm"  # what a runtime plugin provides is shown, as for the other kinds


def test_validate_reports_problems_and_exit_codes(tmp_path: Path) -> None:
    good = make_repo(tmp_path / "good", config_for("rust", "mongodb"))
    result = cli("validate", str(good))
    assert result.returncode == 0 and "valid (framework rust, database mongodb)" in result.stdout
    bad = make_repo(tmp_path / "bad", config_for(framework=None, app_port_env="1X"), files={"go.mod": "m"})
    result = cli("validate", str(bad))
    assert result.returncode == 1
    assert f"{bad}: framework is required (detected: go; add `framework: go`)" in result.stderr
    assert f"{bad}: app_port_env is not valid" in result.stderr


def test_render_prints_compose_and_writes_nothing(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", config_for("go", "mysql"))
    before = snapshot_tree(repo)
    result = cli("render", str(repo), "--owner", "Acme", "--repo", "api", "--pr", "4", cwd=tmp_path,
                 CODEHOST_WEBHOOK_SECRET="s", IMAGE_OVERRIDES="mysql:8.4=mirror.local/mysql:8.4")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("# compose.preview.yml\n")
    compose = yaml.safe_load(result.stdout)
    assert compose["services"]["db"]["image"] == "mirror.local/mysql:8.4"
    assert compose["services"]["app"]["container_name"] == "acme-api-pr-4-app"
    assert snapshot_tree(repo) == before
    dockerfile = cli("render", str(repo), "--owner", "Acme", "--repo", "api", "--pr", "4", "--dockerfile")
    assert dockerfile.stdout.startswith("# Injected by Preview Orchestrator (framework: go)")


def test_render_shows_a_placeholder_for_the_password_unless_asked(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", config_for("go", "postgres"))
    state = tmp_path / "state"
    env = {"CODEHOST_WEBHOOK_SECRET": "s", "DEPLOYMENTS_DB": str(state / "deployments.json")}
    shown = cli("render", str(repo), "--owner", "Acme", "--repo", "api", "--pr", "4", **env)
    db = yaml.safe_load(shown.stdout)["services"]["db"]
    assert db["environment"]["POSTGRES_PASSWORD"] == "<db-password>"
    refused = cli("render", str(repo), "--owner", "Acme", "--repo", "api", "--pr", "4", "--show-secrets", **env)
    assert refused.returncode == 1 and "created at the first deploy" in refused.stderr
    state.mkdir()
    (state / "db-password.key").write_bytes(b"k" * 64)
    real = cli("render", str(repo), "--owner", "Acme", "--repo", "api", "--pr", "4", "--show-secrets", **env)
    expected = make_context("Acme", "api", 4, 8000, 9000, b"k" * 64).db_password
    assert yaml.safe_load(real.stdout)["services"]["db"]["environment"]["POSTGRES_PASSWORD"] == expected
    # a preview deployed before secrets were keyed by repository keeps its volume's password: render shows that
    track(state / "deployments.json", sample_record(4, "Acme", "api", secretsScope="deployment"))
    kept = cli("render", str(repo), "--owner", "Acme", "--repo", "api", "--pr", "4", "--show-secrets", **env)
    shown_old = yaml.safe_load(kept.stdout)["services"]["db"]["environment"]["POSTGRES_PASSWORD"]
    assert shown_old == make_context("Acme", "api", 4, 8000, 9000, b"k" * 64, secrets_scope="deployment").db_password
    assert shown_old != expected
    # a Gitea preview's password is keyed by its own host's identity
    track(state / "deployments.json", sample_record(4, "Acme", "api", codehost="gitea", secretsScope="repository"))
    gitea = cli("render", str(repo), "--owner", "Acme", "--repo", "api", "--pr", "4", "--show-secrets", **env)
    shown_gitea = yaml.safe_load(gitea.stdout)["services"]["db"]["environment"]["POSTGRES_PASSWORD"]
    assert shown_gitea == make_context("Acme", "api", 4, 8000, 9000, b"k" * 64,
                                       repository="gitea/acme/api").db_password != expected


def test_render_of_an_invalid_checkout_exits_non_zero(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", config_for("go"), files={"compose.preview.yml": (
        "services:\n  app:\n    image: x\n    privileged: true\n")})
    result = cli("render", str(repo), "--owner", "a", "--repo", "b", "--pr", "1")
    assert result.returncode == 1
    assert "compose.preview.yml: service app: privileged is not allowed" in result.stderr
    assert result.stdout == ""


def test_init_writes_a_valid_config_and_never_overwrites(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", files={"composer.json": '{"require": {"laravel/framework": "^11"}}'})
    result = cli("init", str(repo))
    assert result.returncode == 0, result.stderr
    written = yaml.safe_load((repo / "preview-config.yml").read_text())
    assert written["framework"] == "laravel" and written["app_port"] == 8000
    assert cli("validate", str(repo)).returncode == 0
    again = cli("init", str(repo))
    assert again.returncode == 1 and "already exists" in again.stderr


def test_the_commands_find_the_service_where_it_listens(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ORCHESTRATOR_PORT (or PREVIEW_ORCHESTRATOR_URL) read as the service reads it: the environment, then `.env`
    in the working directory; --url wins."""
    from orchestrator.cli.service_client import service_url

    monkeypatch.chdir(tmp_path)
    for name in ("ORCHESTRATOR_PORT", "PREVIEW_ORCHESTRATOR_URL"):
        monkeypatch.delenv(name, raising=False)
    assert service_url(None) == "http://127.0.0.1:3000"
    (tmp_path / ".env").write_text("ORCHESTRATOR_PORT=4321\nCODEHOST_WEBHOOK_SECRET=x\n")
    assert service_url(None) == "http://127.0.0.1:4321"  # where `serve` listens with that .env
    monkeypatch.setenv("ORCHESTRATOR_PORT", "4400")
    assert service_url(None) == "http://127.0.0.1:4400"
    (tmp_path / ".env").write_text("PREVIEW_ORCHESTRATOR_URL=http://previews.internal:3000/\n")
    assert service_url(None) == "http://previews.internal:3000"
    assert service_url("http://elsewhere:1/") == "http://elsewhere:1"
