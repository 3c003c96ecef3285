"""preview-config.yml: the spec's fields and messages, and hostile input rejected with nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.plugin_api.preview_config import MISSING_MESSAGE, ConfigError
from orchestrator.rendering.checkout_config import load_checkout_config
from orchestrator.rendering.plugin_host import PluginHost
from tests.support.repos import config_for, make_repo, snapshot_tree


def problems(host: PluginHost, repo: Path) -> list[str]:
    before = snapshot_tree(repo)
    with pytest.raises(ConfigError) as caught:
        load_checkout_config(host, repo)
    assert snapshot_tree(repo) == before  # nothing written, nothing changed
    return caught.value.problems


def test_valid_config_with_every_field(host: PluginHost, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", config_for(
        "go", "mysql", build_commands=["make assets"], extra_services=["redis", "mailpit"],
        env=["FEATURE_X=1", "QUOTED=a b=c"], env_file=".env.preview", startup_commands=["./migrate"],
        dockerfile="docker/Dockerfile",
    ), files={".env.preview": "A=1\n", "docker/Dockerfile": "FROM scratch\n"})
    config = load_checkout_config(host, repo)
    assert config.framework == "go" and config.database == "mysql"
    assert config.env_map == {"FEATURE_X": "1", "QUOTED": "a b=c"}
    assert config.extra_services == ["redis", "mailpit"]


def test_missing_file_has_the_spec_message(host: PluginHost, tmp_path: Path) -> None:
    assert problems(host, make_repo(tmp_path / "r")) == [MISSING_MESSAGE]


def test_every_problem_is_reported_together(host: PluginHost, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", config_for(database=None, health_check_path="health", app_port=0))
    found = problems(host, repo)
    assert "database is required" in found
    assert any(p.startswith("health_check_path is not valid") for p in found)
    assert any(p.startswith("app_port is not valid") for p in found)


def test_missing_framework_names_the_detected_one(host: PluginHost, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", config_for(framework=None), files={"go.mod": "module x\n"})
    assert problems(host, repo) == ["framework is required (detected: go; add `framework: go`)"]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"framework": "cobol"}, "framework is not valid"),
        ({"database": "oracle"}, "database is not valid"),
        ({"extra_services": ["postgres"]}, "extra_services is not valid (postgres is a database"),
        ({"extra_services": ["kafka"]}, "extra_services is not valid (unknown service 'kafka'"),
        ({"health_check_path": "/a b"}, "health_check_path is not valid"),
        ({"app_port": "3000"}, "app_port is not valid"),
        ({"app_port": True}, "app_port is not valid"),
        ({"app_port": 70000}, "app_port is not valid"),
        ({"app_port_env": "PORT; rm -rf /"}, "app_port_env is not valid"),
        ({"app_entrypoint": "node main.js\nRUN curl evil"}, "app_entrypoint is not valid"),
        ({"app_entrypoint": "a\x00b"}, "app_entrypoint is not valid"),
        ({"env": ["1BAD=x"]}, "env is not valid"),
        ({"env": ["GOOD=line\nFROM evil"]}, "env is not valid"),
        ({"env": ["NOEQUALS"]}, "env is not valid"),
        ({"env_file": "../../etc/passwd"}, "env_file is not valid"),
        ({"env_file": "/etc/passwd"}, "env_file is not valid"),
        ({"dockerfile": "../Dockerfile"}, "dockerfile is not valid"),
        ({"dockerfile": "missing/Dockerfile"}, "dockerfile is not valid (missing/Dockerfile does not exist"),
        ({"build_commands": "make"}, "build_commands is not valid"),
        ({"startup_commands": [""]}, "startup_commands is not valid"),
        ({"extra_services": [{"name": "redis"}]}, "extra_services is not valid"),
        ({"surprise": {"nested": [1, 2]}}, "surprise is not a known field"),
    ],
)
def test_invalid_values_are_named(host: PluginHost, tmp_path: Path, fields: dict, message: str) -> None:
    repo = make_repo(tmp_path / "r", config_for(**fields))
    found = problems(host, repo)
    assert any(p.startswith(message) for p in found), found


def test_paths_that_escape_through_symlinks_are_refused(host: PluginHost, tmp_path: Path) -> None:
    outside = tmp_path / "secret.env"
    outside.write_text("TOKEN=host-secret\n")
    repo = make_repo(tmp_path / "r", config_for(env_file="linked.env"))
    (repo / "linked.env").symlink_to(outside)
    assert problems(host, repo) == ["env_file is not valid (points outside the repository)"]


def test_config_file_symlinked_outside_is_refused(host: PluginHost, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere.yml"
    outside.write_text("framework: go\n")
    repo = make_repo(tmp_path / "r")
    (repo / "preview-config.yml").symlink_to(outside)
    assert problems(host, repo) == ["preview-config.yml is not valid (points outside the repository)"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: &a [x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
         "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: [*d,*d,*d,*d,*d,*d,*d,*d,*d]\n",
         "preview-config.yml expands to too many values"),
        ("framework: go\n" + "# padding\n" * 7000, "preview-config.yml is larger than 64 KB"),
        ("framework: [unclosed\n", "preview-config.yml is not valid YAML at line"),
        ("!!python/object/apply:os.system ['touch /tmp/pwned']\n", "preview-config.yml is not valid YAML"),
        ("- a list\n", "preview-config.yml must be a mapping of fields"),
        (b"framework: \xff\xfe\n", "preview-config.yml is not UTF-8 text"),
    ],
)
def test_hostile_yaml_is_rejected(host: PluginHost, tmp_path: Path, text: str, message: str) -> None:
    repo = make_repo(tmp_path / "r", text)
    found = problems(host, repo)
    assert found[0].startswith(message), found
    assert not Path("/tmp/pwned").exists()
