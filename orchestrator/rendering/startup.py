"""startup_commands in front of the app's main process: the compose entrypoint that runs them, and the main
process of an image the repository built itself (read from its ENTRYPOINT and CMD once it is built)."""

from __future__ import annotations

from orchestrator.rendering.compose_document import PendingStartup, RenderedDeployment, dump_compose, escape


def main_process(pending: PendingStartup, image_entrypoint: list[str] | None,
                 image_cmd: list[str] | None) -> list[str]:
    """What `docker run` of the app would run: Docker's rule, where a compose `entrypoint` also drops the
    image's CMD."""
    if pending.entrypoint is not None:
        return [*pending.entrypoint, *(pending.command or [])]
    return [*(image_entrypoint or []), *(pending.command if pending.command is not None else image_cmd or [])]


def with_startup(rendered: RenderedDeployment, commands: list[str], main: list[str]) -> RenderedDeployment:
    """The app service runs `commands`, then `main`; the compose file is planned again."""
    compose = {**rendered.compose, "services": dict(rendered.compose["services"])}
    compose["services"]["app"] = {**compose["services"]["app"], **escape(startup_service(commands, main))}
    files = {**rendered.files, rendered.compose_file: dump_compose(compose)}
    return RenderedDeployment(rendered.compose_file, compose, files, rendered.rename, rendered.repository_owned)


def startup_service(commands: list[str], main: list[str]) -> dict[str, list[str]]:
    """The app's entrypoint and command when startup_commands are set: the commands run in order (`set -e`: the
    first failure stops the container), then the main process, given as arguments, is exec'd unchanged."""
    return {"entrypoint": ["/bin/sh", "-c", "\n".join(["set -e", *commands, 'exec "$@"']), "preview-startup"],
            "command": list(main)}


