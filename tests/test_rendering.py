"""Rendering: every framework × database and every extra service through the real `docker compose config`,
pinned by snapshots (UPDATE_SNAPSHOTS=1 rewrites them), plus the rules the spec and the issue set."""

from __future__ import annotations

import itertools
import os
import re
from pathlib import Path

import pytest
import yaml

from orchestrator.common.checkout_paths import write_new
from orchestrator.common.host_env import HostEnv
from orchestrator.common.labels import DEPLOYMENT_LABEL
from orchestrator.plugin_api.preview_config import ConfigError
from orchestrator.rendering.checkout_config import load_checkout_config
from orchestrator.rendering.compose_file import (
    INJECTED_DOCKERFILE,
    PendingStartup,
    main_process,
    make_context,
    render_deployment,
    with_startup,
    write_rendered,
)
from orchestrator.rendering.plugin_host import PluginHost
from orchestrator.runtime.compose_cli import Compose
from tests.support.compose import compose_config
from tests.support.repos import config_for, make_repo, snapshot_tree

SNAPSHOTS = Path(__file__).parent / "snapshots"
FRAMEWORKS = ["nestjs", "go", "laravel", "rust", "python"]
DATABASES = ["postgres", "mysql", "mongodb"]
SERVICES = ["redis", "memcached", "rabbitmq", "mailpit", "minio"]
KEY = b"snapshot-key"


def render(host: PluginHost, repo: Path, pr: int = 7, overrides: dict[str, str] | None = None):  # noqa: ANN201
    context = make_context("Acme", "Shop.Api", pr, 8007, 9007, KEY, overrides, build_cache=True)  # as the service
    normalize = Compose(60, HostEnv.for_state_dir(repo)).normalized  # the real `docker compose config`
    return render_deployment(host, repo, load_checkout_config(host, repo), context, normalize)


def check_snapshot(name: str, text: str) -> None:
    """Only UPDATE_SNAPSHOTS=1 writes a snapshot: a missing one fails, so a test never passes by writing into the
    checkout what it was to compare with."""
    path = SNAPSHOTS / name
    if os.environ.get("UPDATE_SNAPSHOTS") == "1":
        path.write_text(text)
    assert path.exists(), f"snapshot {name} is missing; rerun with UPDATE_SNAPSHOTS=1 and commit it"
    assert text == path.read_text(), f"{name} changed; rerun with UPDATE_SNAPSHOTS=1 if intended"


@pytest.mark.parametrize(("framework", "database"), list(itertools.product(FRAMEWORKS, DATABASES)))
def test_framework_and_database_render_valid_compose(host: PluginHost, tmp_path: Path,
                                                      framework: str, database: str) -> None:
    repo = make_repo(tmp_path / "r", config_for(framework, database))
    rendered = render(host, repo)
    before = snapshot_tree(repo)
    assert snapshot_tree(repo) == before  # rendering wrote nothing
    check_snapshot(f"{framework}-{database}.compose.yml", rendered.compose_text())
    # Laravel's Dockerfile installs the database's PDO driver, so it differs per database.
    dockerfile = f"laravel-{database}.Dockerfile" if framework == "laravel" else f"{framework}.Dockerfile"
    check_snapshot(dockerfile, rendered.files[INJECTED_DOCKERFILE])
    write_rendered(repo, rendered)
    config = yaml.safe_load(compose_config(repo, rendered.compose_file))
    app, db = config["services"]["app"], config["services"]["db"]
    assert config["name"] == "acme-shop-api-7"
    assert app["container_name"] == "acme-shop-api-pr-7-app"
    assert db["container_name"] == "acme-shop-api-pr-7-db"
    assert app["ports"][0]["host_ip"] == "127.0.0.1" and app["ports"][0]["published"] == "8007"
    assert db["ports"][0]["host_ip"] == "127.0.0.1" and db["ports"][0]["published"] == "9007"
    assert db["ports"][0]["target"] == {"postgres": 5432, "mysql": 3306, "mongodb": 27017}[database]
    assert app["depends_on"]["db"]["condition"] == "service_healthy"
    assert "healthcheck" in db
    scheme = {"postgres": "postgresql", "mysql": "mysql", "mongodb": "mongodb"}[database]
    port = db["ports"][0]["target"]
    assert re.match(rf"^{scheme}://preview:[0-9a-f]{{24}}@db:{port}/pr_7(\?authSource=admin)?$",
                    app["environment"]["DATABASE_URL"])
    for service in config["services"].values():
        assert service["labels"][DEPLOYMENT_LABEL] == "acme-shop-api-7"
        resources = service["deploy"]["resources"]
        assert resources["limits"] == {"cpus": 0.5, "memory": "536870912", "pids": 1024}
        assert resources["reservations"] == {"cpus": 0.25, "memory": "268435456"}
        # bounds no service can lift (docs/security.md): logs kept to 3 x 10 MB, no raw sockets
        assert service["logging"] == {"driver": "json-file", "options": {"max-size": "10m", "max-file": "3"}}
        assert service["cap_drop"] == ["NET_RAW"]
    assert config["networks"]["default"]["labels"][DEPLOYMENT_LABEL] == "acme-shop-api-7"
    assert config["volumes"]["db-data"]["labels"][DEPLOYMENT_LABEL] == "acme-shop-api-7"


@pytest.mark.parametrize("service", SERVICES)
def test_extra_services_render_and_wire_the_app(host: PluginHost, tmp_path: Path, service: str) -> None:
    repo = make_repo(tmp_path / "r", config_for("go", extra_services=[service]))
    rendered = render(host, repo)
    check_snapshot(f"go-postgres+{service}.compose.yml", rendered.compose_text())
    write_rendered(repo, rendered)
    config = yaml.safe_load(compose_config(repo, rendered.compose_file))
    assert config["services"][service]["container_name"] == f"acme-shop-api-pr-7-{service}"
    assert "ports" not in config["services"][service]
    assert service in config["services"]["app"]["depends_on"]
    expected = host.provided.services[service].app_variables
    assert set(expected) <= set(config["services"]["app"]["environment"])


def test_redis_url_points_at_the_redis_service(host: PluginHost, tmp_path: Path) -> None:
    rendered = render(host, make_repo(tmp_path / "r", config_for("go", extra_services=["redis"])))
    assert rendered.compose["services"]["app"]["environment"]["REDIS_URL"] == "redis://redis:6379/0"


def test_env_env_file_port_variable_and_startup_commands(host: PluginHost, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", config_for(
        "python", app_port_env="APP_PORT", env=["HOME_DIR=$HOME", "DATABASE_URL=override"],
        env_file=".env.preview", startup_commands=["python3 migrate.py", "echo '$ready'"],
    ), files={".env.preview": "FROM_FILE=1\n"})
    rendered = render(host, repo)
    write_rendered(repo, rendered)
    app = yaml.safe_load(compose_config(repo, rendered.compose_file))["services"]["app"]
    env = app["environment"]
    assert env["APP_PORT"] == "8000"
    # `config` prints a literal `$` as `$$`; an interpolated $HOME would show the work directory.
    assert env["HOME_DIR"] == "$$HOME"
    assert env["DATABASE_URL"] == "override"  # the repository's env wins over wiring
    assert env["FROM_FILE"] == "1"
    # the startup commands in order, then the injected Dockerfile's main process, exec'd as given ("$@")
    assert app["entrypoint"] == ["/bin/sh", "-c", "set -e\npython3 migrate.py\necho '$$ready'\nexec \"$$@\"",
                                 "preview-startup"]
    assert app["command"] == ["/bin/sh", "-c", "exec python3 app.py"]


def test_image_overrides_reach_services_and_dockerfiles(host: PluginHost, tmp_path: Path) -> None:
    overrides = {"postgres:16": "local/postgres:test", "golang:1.22-bookworm": "local/go:test"}
    rendered = render(host, make_repo(tmp_path / "r", config_for("go")), overrides=overrides)
    assert rendered.compose["services"]["db"]["image"] == "local/postgres:test"
    assert "FROM local/go:test AS build" in rendered.files[INJECTED_DOCKERFILE]


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_dockerfiles_run_as_non_root_and_use_the_entrypoint(host: PluginHost, tmp_path: Path,
                                                           framework: str) -> None:
    config = config_for(framework, app_entrypoint="./start --flag \"quoted\"")
    text = render(host, make_repo(tmp_path / "r", config)).files[INJECTED_DOCKERFILE]
    [user] = [line for line in text.splitlines() if line.startswith("USER ")]
    assert user in ("USER 10001:10001", "USER app", "USER node", "USER www-data")  # never root
    cmd = [line for line in text.splitlines() if line.startswith("CMD")][-1]
    if framework == "laravel":
        assert "php artisan serve" in cmd and "${PORT}" in cmd and "./start" not in cmd  # entrypoint unused
    else:
        assert cmd == 'CMD ["/bin/sh", "-c", "exec ./start --flag \\"quoted\\""]'
    if framework != "python":  # multi-stage: the runtime stage starts from an image, not from a build stage
        froms = [line.split() for line in text.splitlines() if line.startswith("FROM ")]
        stages = {words[3] for words in froms if len(words) == 4 and words[2] == "AS"}
        assert len(froms) >= 2 and len(froms[-1]) == 2 and froms[-1][1] not in stages, froms


def test_repository_dockerfile_and_dockerfile_path_are_used(host: PluginHost, tmp_path: Path) -> None:
    own = make_repo(tmp_path / "own", config_for("go"), files={"Dockerfile": "FROM scratch\n"})
    rendered = render(host, own)
    assert INJECTED_DOCKERFILE not in rendered.files
    # the build reads the service's copy of the bytes judged (never a path compose or BuildKit could resolve
    # otherwise than the check did), beside the checkout
    assert rendered.compose["services"]["app"]["build"]["dockerfile"] == str(tmp_path / "own.build" / "app.Dockerfile")
    assert rendered.build_files == {"app.Dockerfile": "FROM scratch\n"}
    custom = make_repo(tmp_path / "custom", config_for("go", dockerfile="ops/Preview.Dockerfile"),
                       files={"ops/Preview.Dockerfile": "FROM scratch\n# custom\n"})
    rendered = render(host, custom)
    assert INJECTED_DOCKERFILE not in rendered.files
    assert rendered.compose["services"]["app"]["build"]["dockerfile"] == str(tmp_path / "custom.build"
                                                                              / "app.Dockerfile")
    assert rendered.build_files == {"app.Dockerfile": "FROM scratch\n# custom\n"}


REPO_COMPOSE = """
services:
  app:
    build: .
    ports: ["0.0.0.0:80:3000"]
    environment:
      - EXISTING=1
  db:
    image: postgres:16
    ports: ["5432:5432"]
  worker:
    build: .
    volumes: ["./data:/data:ro", "cache:/cache"]
volumes:
  cache: {}
"""


def test_repository_compose_gets_ports_env_and_labels(host: PluginHost, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", config_for("nestjs", env=["ADDED=2"], startup_commands=["npm run migrate"]),
                     files={"compose.preview.yaml": REPO_COMPOSE, "Dockerfile": "FROM node:20\n"})
    rendered = render(host, repo)
    assert rendered.repository_owned and rendered.compose_file == "compose.preview.generated.yml"
    write_rendered(repo, rendered)
    assert (repo / "compose.preview.yml").exists() and not (repo / "compose.preview.yaml").exists()
    services = yaml.safe_load(compose_config(repo, rendered.compose_file))["services"]
    assert [(p["host_ip"], p["published"], p["target"]) for p in services["app"]["ports"]] == [
        ("127.0.0.1", "8007", 3000)]
    assert [(p["host_ip"], p["published"], p["target"]) for p in services["db"]["ports"]] == [
        ("127.0.0.1", "9007", 5432)]
    assert services["app"]["environment"] == {"EXISTING": "1", "ADDED": "2", "PORT": "3000"}
    # the repository's image decides the main process: known once it is built
    built = rendered.compose["services"]["app"]["image"]  # the keyed name of the image built for it
    assert built.startswith("po-build/") and built.endswith("-app") and "acme-shop-api-7" not in built
    assert rendered.pending_startup == PendingStartup(["npm run migrate"], image=built)
    started = with_startup(rendered, ["npm run migrate"], ["node", "dist/main.js", "$PORT"])
    write_new(repo, started.compose_file, started.compose_text())
    app = yaml.safe_load(compose_config(repo, started.compose_file))["services"]["app"]
    assert app["entrypoint"] == ["/bin/sh", "-c", "set -e\nnpm run migrate\nexec \"$$@\"", "preview-startup"]
    assert app["command"] == ["node", "dist/main.js", "$$PORT"]
    assert services["worker"]["labels"][DEPLOYMENT_LABEL] == "acme-shop-api-7"
    assert services["worker"]["deploy"]["resources"]["limits"]["memory"] == "536870912"


@pytest.mark.parametrize(
    ("compose", "message"),
    [
        ("services:\n  app:\n    image: x\n    privileged: true\n", "service app: privileged is not allowed"),
        ("services:\n  app:\n    image: x\n    network_mode: host\n", "service app: network_mode host"),
        ("services:\n  app:\n    image: x\n    pid: host\n", "service app: pid: host is not allowed"),
        ("services:\n  app:\n    image: x\n    pid: ${P:-host}\n", "service app: pid: host is not allowed"),
        ("services:\n  app:\n    image: x\n    ipc: \"${I:-host}\"\n", "service app: ipc: host is not allowed"),
        ("services:\n  app:\n    image: x\n    volumes: ['${R:-/}:/host']\n",
         "service app: volumes: bind mount of / is not allowed"),
        ("services:\n  app:\n    image: x\n    volumes: ['./src:/src']\n",
         "service app: volumes: bind mount of src must be read-only"),
        ("services:\n  app:\n    build: {context: ., network: '${N:-host}'}\n",
         "service app: build network host is not allowed"),
        ("services:\n  app:\n    build: {context: ., ssh: [default]}\n", "service app: build ssh is not allowed"),
        ("services:\n  app:\n    build: {context: ., privileged: true}\n",
         "service app: build privileged is not allowed"),
        ("services:\n  app:\n    build: https://github.com/acme/app.git\n",
         "service app: build context must be a directory of the repository"),
        ("services:\n  app:\n    build: '${C:-..}'\n", "service app: build context must be a directory of the"),
        ("services:\n  app:\n    build: .\n    image: postgres:16\n", "service app: image beside build"),
        ("services:\n  app:\n    image: x\n    scale: 4\n", "service app: scale 4 is not allowed"),
        ("services:\n  app:\n    image: x\n    deploy: {replicas: 3}\n",
         "service app: deploy replicas 3 is not allowed"),
        ("services:\n  app:\n    image: x\nnetworks:\n  default:\n    name: acme-shop-api-8_default\n",
         "networks default: name acme-shop-api-8_default is not allowed"),
        ("services:\n  app:\n    image: x\n    volumes: ['data:/d']\nvolumes:\n  data:\n"
         "    name: acme-shop-api-8_db-data\n",
         "volumes data: name acme-shop-api-8_db-data is not allowed"),
        ("services:\n  app:\n    image: x\n    env_file: ['${E:-/etc/hostname}']\n",
         "service app: env_file must be a literal path"),
        ("services:\n  app:\n    image: x\n    label_file: ./labels\n", "service app: label_file is not allowed"),
        ("services:\n  app:\n    image: x\n    provider: {type: model}\n", "service app: provider is not allowed"),
        ("services:\n  app:\n    image: x\n    use_api_socket: true\n",
         "service app: use_api_socket is not allowed"),
        ("services:\n  app:\n    image: x\n    cpus: 8\n", "service app: cpus is not allowed"),
        ("services:\n  app:\n    image: x\n    post_start: [{command: id, privileged: true}]\n",
         "service app: a privileged post_start or pre_stop hook is not allowed"),
        ("services:\n  app:\n    image: x\n    secrets: [s]\nsecrets:\n  s: {file: /etc/shadow}\n",
         "secrets s: file is not allowed outside the repository"),
        ("services:\n  app:\n    image: x\n    unknown_option: 1\n",
         "service app: unknown_option is not allowed (not one of the options a preview may use)"),
        ("services:\n  app:\n    image: x\n    ipc: host\n", "service app: ipc: host is not allowed"),
        ("services:\n  app:\n    image: x\n    cap_add: [SYS_ADMIN]\n", "service app: cap_add is not allowed"),
        ("services:\n  app:\n    image: x\n    devices: ['/dev/sda:/dev/sda']\n", "service app: devices"),
        ("services:\n  app:\n    image: x\n    volumes: ['/var/run/docker.sock:/var/run/docker.sock']\n",
         "service app: volumes: the Docker socket is not allowed"),
        ("services:\n  app:\n    image: x\n    volumes: ['../../:/host']\n", "service app: volumes: bind mount of"),
        ("services:\n  app:\n    image: x\n    volumes: ['/etc:/etc']\n", "service app: volumes: bind mount of /etc"),
        ("services:\n  app:\n    image: x\n    volumes: [{type: bind, source: /, target: /h}]\n",
         "service app: volumes: bind mount of / is not allowed"),
        ("services:\n  app:\n    build: ../..\n", "service app: build context must be a directory of the"),
        ("services:\n  app:\n    image: x\n  side:\n    image: y\n    ports: ['6379:6379']\n",
         "service side: ports is not allowed"),
        ("services:\n  app:\n    image: x\nnetworks:\n  default:\n    external: true\n",
         "networks default: external is not allowed"),
        ("services:\n  app:\n    image: x\n    volumes: ['vol:/d']\nvolumes:\n  vol:\n"
         "    driver_opts: {type: none, device: /, o: bind}\n",
         "volumes vol: driver_opts is not allowed"),
        ("services:\n  app:\n    image: x\n    volumes: ['pgdata:/d']\nvolumes:\n  pgdata:\n"
         "    labels: {dev.preview-orchestrator.layered-on: po-data-x}\n",
         "volumes pgdata: labels: dev.preview-orchestrator.layered-on is not allowed"),
        ("services:\n  app:\n    image: x\n    labels: ['Dev.Preview-Orchestrator.owner=abc']\n",
         "service app: labels: Dev.Preview-Orchestrator.owner is not allowed"),
        ("services:\n  app:\n    build: {context: ., labels: {dev.preview-orchestrator.deployment: other-1}}\n",
         "service app: build labels: dev.preview-orchestrator.deployment is not allowed"),
        ("services:\n  app:\n    image: x\n    deploy: {labels: {dev.preview-orchestrator.node: w1}}\n",
         "service app: deploy labels: dev.preview-orchestrator.node is not allowed"),
        ("include: [../other.yml]\nservices:\n  app:\n    image: x\n", "top-level include is not allowed"),
        ("services:\n  web:\n    image: x\n", "a service named app is required"),
    ],
)
def test_repository_compose_that_could_take_over_the_host_is_refused(
    host: PluginHost, tmp_path: Path, compose: str, message: str
) -> None:
    repo = make_repo(tmp_path / "r", config_for("go"), files={"compose.preview.yml": compose})
    before = snapshot_tree(repo)
    with pytest.raises(ConfigError) as caught:
        render(host, repo)
    assert any(message in problem for problem in caught.value.problems), caught.value.problems
    assert snapshot_tree(repo) == before


def test_both_compose_names_is_an_error(host: PluginHost, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", config_for("go"), files={
        "compose.preview.yml": "services: {}\n", "compose.preview.yaml": "services: {}\n"})
    with pytest.raises(ConfigError, match="both exist"):
        render(host, repo)


def test_database_password_is_stable_per_deployment_and_differs_between_them() -> None:
    first = make_context("a", "b", 1, 8001, 9001, KEY).db_password
    assert first == make_context("a", "b", 1, 8555, 9555, KEY).db_password
    assert first != make_context("a", "b", 2, 8001, 9001, KEY).db_password
    assert first != make_context("a", "b", 1, 8001, 9001, b"other key").db_password


@pytest.mark.parametrize(("compose_entrypoint", "compose_command", "expected"), [
    (None, None, ["docker-entrypoint.sh", "node", "server.js"]),  # the image's ENTRYPOINT and CMD
    (None, ["npm", "start"], ["docker-entrypoint.sh", "npm", "start"]),  # a compose command replaces CMD
    (["tini", "--"], None, ["tini", "--"]),  # a compose entrypoint drops the image's CMD, as Docker does
    (["tini", "--"], ["node", "a.js"], ["tini", "--", "node", "a.js"]),
])
def test_the_main_process_after_startup_commands_follows_dockers_rules(compose_entrypoint, compose_command,  # noqa: ANN001
                                                                        expected) -> None:
    pending = PendingStartup(["true"], image="x", entrypoint=compose_entrypoint, command=compose_command)
    assert main_process(pending, ["docker-entrypoint.sh"], ["node", "server.js"]) == expected


def test_a_checkouts_own_file_of_the_normalized_outputs_name_goes_beside_a_generated_compose_file(
        host: PluginHost, tmp_path: Path) -> None:
    """Cleanup, wake and reset-db read the compose file back, the normalized output's name first: a repository
    must not be able to ship a file of that name for them to take for what the service ran."""
    repo = make_repo(tmp_path / "r", config_for("go"),
                     files={"compose.preview.generated.yml": "volumes:\n  db:\n    name: another-previews-data\n"})
    rendered = render(host, repo)
    assert not rendered.repository_owned and rendered.compose_file == "compose.preview.yml"
    written = write_rendered(repo, rendered)
    assert written == repo / "compose.preview.yml" and not (repo / "compose.preview.generated.yml").exists()


def test_a_lowercase_dockerfile_is_judged_as_buildkit_reads_it(host: PluginHost, tmp_path: Path) -> None:
    """Without a `Dockerfile`, BuildKit builds `dockerfile`: that file is the one checked and keyed."""
    repo = make_repo(tmp_path / "r", config_for("nestjs"), files={
        "compose.preview.yml": "services:\n  app:\n    build: .\n",
        "dockerfile": "FROM node:20\nRUN --mount=type=cache,target=/root/.npm npm ci\n"})
    rendered = render(host, repo)
    keyed = rendered.compose["services"]["app"]["build"]["dockerfile"]
    assert keyed.endswith(".build/app.Dockerfile") and "id=po-cache-" in rendered.build_files["app.Dockerfile"]
    (repo / "dockerfile").write_text("FROM 3f2a\n")  # an image by its id: refused, read from the fallback too
    with pytest.raises(ConfigError, match="may not name an image by its id"):
        render(host, repo)


def test_build_args_cannot_choose_buildkit_s_frontend(host: PluginHost, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", config_for("nestjs"), files={
        "compose.preview.yml": "services:\n  app:\n    build:\n      context: .\n      args:\n"
                               "        BUILDKIT_SYNTAX: attacker/frontend\n",
        "Dockerfile": "FROM node:20\n"})
    with pytest.raises(ConfigError, match="build args BUILDKIT_\\* are not allowed"):
        render(host, repo)


def test_every_label_the_service_reads_is_one_a_repository_compose_file_may_not_set() -> None:
    """The policy refuses SERVICE_LABEL_PREFIX: each label constant the service defines must start with it."""
    import re

    from orchestrator.common.labels import SERVICE_LABEL_PREFIX

    root = Path(__file__).resolve().parents[1] / "orchestrator"
    defined = {name: value for path in root.rglob("*.py")
               for name, value in re.findall(r'^([A-Z_]+_LABEL) = "([^"]+)"', path.read_text(), re.MULTILINE)}
    own = {name: value for name, value in defined.items() if not value.startswith("com.docker.")}
    assert {"DEPLOYMENT_LABEL", "OWNER_LABEL", "LAYER_LABEL", "SEED_LABEL", "NODE_LABEL"} <= set(own), own
    assert all(value.startswith(SERVICE_LABEL_PREFIX) for value in own.values()), own
