"""`build_commands` from preview-config.yml: the spec's one shell use, run where they cannot reach the host.

BUILD_COMMANDS_MODE chooses where (docs/security.md says what each protects):
- `container` (default): each command in a throw-away container of the framework's toolchain image, with only
  the checkout mounted, on Docker's default bridge (package registries reachable; the service, which listens
  on 127.0.0.1, is not), no capabilities to gain, the spec's limits, removed when it ends or times out;
- `host`: on the host as the unprivileged user BUILD_COMMANDS_USER (default `po-build`), which owns the
  checkout only while the commands run and cannot read the service's state, secrets or other previews; one
  preview's commands at a time, and every process of that user is killed when they end (a daemon one started,
  `setsid` out of its session, would otherwise change the checkout after it is handed back and checked);
- `off`: a preview-config.yml with build_commands fails with a message saying so.
Every command runs in its own session; a timeout or a cancelled flow kills the whole process group (and
removes the container).
"""

from __future__ import annotations

import os
import pwd
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from orchestrator.common.commands import CommandFailed, DeploymentLog, run
from orchestrator.common.flow_control import FlowControl
from orchestrator.common.host_env import HostEnv
from orchestrator.common.labels import DEPLOYMENT_LABEL, OWNER_LABEL, ROLE_LABEL

BuildCommandsMode = Literal["container", "host", "off"]
BUILD_ROLE = "build-commands"
WORKSPACE = "/workspace"


class BuildCommandError(Exception):
    """A build command failed or cannot run here; `detail` is the log tail for the comment."""

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail


class BuildCommands:
    def __init__(self, mode: BuildCommandsMode, timeout: float, env: HostEnv, user: str,
                 resolve_image: Callable[[str], str]) -> None:
        self._mode = mode
        self._timeout = timeout
        self._env = env
        self._user = user
        self._resolve_image = resolve_image
        self._host = threading.Lock()  # BUILD_COMMANDS_MODE=host: one preview's commands at a time (_on_host)

    def run_all(self, commands: list[str], work_dir: Path, deployment_id: str, toolchain_image: str,
                log: DeploymentLog, control: FlowControl) -> None:
        if not commands:
            return
        if self._mode == "off":
            raise BuildCommandError("build_commands are switched off on this host (BUILD_COMMANDS_MODE=off); "
                                    "build in the Dockerfile instead")
        if self._mode == "host":
            self._on_host(commands, work_dir, log, control)
        else:
            image = self._resolve_image(toolchain_image)
            for index, command in enumerate(commands):
                self._in_container(command, index, image, work_dir, deployment_id, log, control)

    # container -----------------------------------------------------------------------------------

    def _in_container(self, command: str, index: int, image: str, work_dir: Path, deployment_id: str,
                      log: DeploymentLog, control: FlowControl) -> None:
        name = f"po-build-{deployment_id}-{index}"
        argv = [
            "docker", "run", "--rm", "--name", name, "--init",
            "--label", f"{DEPLOYMENT_LABEL}={deployment_id}", "--label", f"{ROLE_LABEL}={BUILD_ROLE}",
            "--label", f"{OWNER_LABEL}={self._env.marker}",
            "--cpus", "1", "--memory", "1g", "--pids-limit", "1024",
            "--security-opt", "no-new-privileges", "--cap-drop", "NET_RAW", "--cap-drop", "MKNOD",
            "--volume", f"{work_dir}:{WORKSPACE}", "--workdir", WORKSPACE,
            # HOME outside the checkout: tools' caches must not end up in the Docker build context.
            "--env", "HOME=/tmp", "--entrypoint", "/bin/sh", image, "-c", command,
        ]
        self._remove(name)  # left over by a run the service did not see end
        try:
            run(argv, cwd=None, env=self._env.docker(), timeout=self._timeout, log=log, control=control,
                shown=["sh", "-c", command, f"(in {image})"])
        except CommandFailed as exc:
            raise BuildCommandError(f"Build command failed: {command[:200]}", exc.tail()) from None
        finally:
            self._remove(name)  # killing the docker client does not stop the container

    def _remove(self, name: str) -> None:
        try:
            run(["docker", "rm", "--force", name], cwd=None, env=self._env.docker(), timeout=60, log=None)
        except CommandFailed:
            pass  # not there

    # host ------------------------------------------------------------------------------------------

    def _on_host(self, commands: list[str], work_dir: Path, log: DeploymentLog, control: FlowControl) -> None:
        try:
            account = pwd.getpwnam(self._user)
        except KeyError:
            raise BuildCommandError(f"BUILD_COMMANDS_MODE=host needs the user {self._user} "
                                    "(scripts/prepare-host creates po-build)") from None
        if account.pw_uid == 0:
            raise BuildCommandError(f"BUILD_COMMANDS_USER {self._user} is root; choose an unprivileged user")
        identity = (account.pw_uid, account.pw_gid)
        while not self._host.acquire(timeout=1):  # the user's processes all end with one preview's commands
            control.check()
        try:
            self._end_processes(identity, work_dir)  # none of the user's may reach this checkout once it is theirs
            _chown_tree(work_dir, identity, from_uid=0)
            try:
                for command in commands:
                    try:
                        run(["sh", "-c", command], cwd=work_dir, env=self._env.commands(work_dir),
                            timeout=self._timeout, log=log, control=control, user=identity)
                    except CommandFailed as exc:
                        raise BuildCommandError(f"Build command failed: {command[:200]}", exc.tail()) from None
                    except PermissionError:
                        raise BuildCommandError(f"BUILD_COMMANDS_MODE=host: user {self._user} cannot enter "
                                                f"{work_dir}") from None
            finally:
                self._end_processes(identity, work_dir)
                _chown_tree(work_dir, (0, 0), from_uid=account.pw_uid)
        finally:
            self._host.release()

    def _end_processes(self, identity: tuple[int, int], work_dir: Path) -> None:
        """Every process of the build user killed, before a checkout is handed to it and before it is handed back:
        a command's session is killed with it, but one may have started a daemon in a session of its own. kill(-1)
        from the user itself reaches all of them at once (the kernel lets none fork past it)."""
        try:
            run(["kill", "-KILL", "-1"], cwd=Path("/"), env=self._env.commands(work_dir), timeout=30,
                log=None, user=identity)
        except CommandFailed:
            pass  # procps kill exits 1 for -1 whether or not it found one


def _chown_tree(root: Path, owner: tuple[int, int], from_uid: int) -> None:
    """Hand the files of `root` owned by `from_uid` to `owner`, never following a link; a file with other
    hard links stays as it is (it may be a file elsewhere that the build user linked in)."""
    paths = [str(root), *(os.path.join(directory, name) for directory, dirnames, filenames in os.walk(root)
                          for name in [*dirnames, *filenames])]
    for path in paths:
        info = os.lstat(path)
        if info.st_uid == from_uid and (stat.S_ISDIR(info.st_mode) or info.st_nlink == 1):
            os.lchown(path, *owner)
