"""A three-node Docker Swarm on this machine, for end-to-end tests of the `swarm` runtime, and the registry its
nodes pull from.

Each node is a `dockerd` of its own in a network namespace of its own (veth to a bridge in the root namespace),
with its own hostname (a persistent UTS namespace), data root, exec root, socket, containerd namespaces, cgroup
parent and address pools, and an empty daemon configuration: the machine's own engine is never touched, and
the swarm is never initialised on it. Debian's `docker-registry` runs as a plain process on the bridge address,
with htpasswd authentication (`registry_credentials`).
Everything is made under a random id and removed by `stop()`, also after a failed start.

The recipe is the one measured in the design notes ("A three-node Docker Swarm on one machine works here").
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import secrets
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.support import web
from tests.support.registry import start_registry, stop_registry

NODES = ("manager", "worker1", "worker2")
REGISTRY_PORT = 5000
RUN = Path("/run")


class SwarmUnavailable(Exception):
    """A tool the swarm tests need is not installed: they fail with this, which names the script that installs
    it (a machine that cannot make namespaces at all skips them instead: namespaces_refused)."""


def _run(*argv: str, timeout: float = 60, check: bool = True, stdin: int | None = None) -> str:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=stdin)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {result.returncode}: {(result.stderr or result.stdout)[-2000:]}")
    return result.stdout


def namespaces_refused() -> str | None:
    """Why network namespaces cannot be made on this kind of machine (not root, or the kernel refuses them), or
    None (tried for real, then removed). A tool that is missing is not a reason to skip: SwarmUnavailable names
    it and the script that installs it."""
    if os.geteuid() != 0:
        return "the swarm test makes network namespaces and daemons: it needs root"
    missing = [tool for tool in ("ip", "nsenter", "unshare", "iptables", "dockerd", "docker-registry", "htpasswd")
               if shutil.which(tool) is None]
    if missing:
        raise SwarmUnavailable(f"{', '.join(missing)} not installed: run scripts/prepare-test-host")
    probe = f"po-probe-{secrets.token_hex(3)}"
    result = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        return f"the kernel refuses network namespaces: {result.stderr.strip()}"
    subprocess.run(["ip", "netns", "delete", probe], capture_output=True, timeout=30)
    return None


@dataclass
class Node:
    name: str  # also its hostname, as the swarm shows it
    index: int
    address: str  # on the test's bridge: what the tests and nginx reach
    netns: str
    socket: Path
    data: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def host(self) -> str:
        """DOCKER_HOST of this node's engine."""
        return f"unix://{self.socket}"

    def docker(self, *args: str, timeout: float = 120, check: bool = True) -> str:
        return _run("docker", "-H", self.host, *args, timeout=timeout, check=check)


@dataclass
class SwarmCluster:
    root: Path  # daemon data and logs (a test's temporary directory)
    ident: str = field(default_factory=lambda: secrets.token_hex(3))
    nodes: list[Node] = field(default_factory=list)
    registry_process: subprocess.Popen[bytes] | None = None
    _undo: list[tuple[str, ...]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.run_dir = RUN / f"po-swarm-{self.ident}"  # short: unix socket paths are limited to 108 bytes
        self.bridge = f"posw{self.ident}"
        self.subnet = _free_subnet()
        base = self.subnet.network_address
        self.gateway = str(base + 1)
        self.registry = f"{self.gateway}:{REGISTRY_PORT}"
        self.registry_credentials = ("po-service", secrets.token_urlsafe(18))
        octets = str(base).split(".")
        self._prefix = f"{octets[0]}.{octets[1]}"
        for index, name in enumerate(NODES):
            self.nodes.append(Node(name, index, str(base + 11 + index), f"po-swarm-{self.ident}-{name}",
                                   self.run_dir / f"{name}.sock", self.root / name))

    @property
    def registry_config(self) -> Path:
        return self.root / "registry" / "config.yml"

    def registry_bytes(self) -> int:
        """What the registry's storage holds on disk (its files' sizes)."""
        return sum(path.stat().st_size for path in (self.root / "registry" / "data").rglob("*") if path.is_file())

    @property
    def manager(self) -> Node:
        return self.nodes[0]

    @property
    def workers(self) -> list[Node]:
        return self.nodes[1:]

    def node(self, name: str) -> Node:
        return next(node for node in self.nodes if node.name == name)

    # Bring-up ---------------------------------------------------------------------------------------------

    def start(self) -> SwarmCluster:
        try:
            self.run_dir.mkdir(mode=0o700)
            self._network()
            self._registry()
            for node in self.nodes:
                self._daemon(node)
            for node in self.nodes:
                self._wait_daemon(node)
            self._join()
        except BaseException:
            self.stop()
            raise
        return self

    def _do(self, argv: tuple[str, ...], undo: tuple[str, ...] | None) -> None:
        _run(*argv)
        if undo is not None:
            self._undo.append(undo)

    def _network(self) -> None:
        self._do(("ip", "link", "add", self.bridge, "type", "bridge"), ("ip", "link", "delete", self.bridge))
        self._do(("ip", "addr", "add", f"{self.gateway}/{self.subnet.prefixlen}", "dev", self.bridge), None)
        self._do(("ip", "link", "set", self.bridge, "up"), None)
        # The root engine sets FORWARD to DROP and bridge netfilter is on: nodes on the bridge need this to talk.
        rule = ("FORWARD", "-i", self.bridge, "-o", self.bridge, "-j", "ACCEPT")
        self._do(("iptables", "-I", *rule[:1], "1", *rule[1:]), ("iptables", "-D", *rule))
        for node in self.nodes:
            outside = f"{self.bridge}{node.index}"
            self._do(("ip", "netns", "add", node.netns), ("ip", "netns", "delete", node.netns))
            self._do(("ip", "link", "add", outside, "type", "veth", "peer", "name", "eth0", "netns", node.netns),
                     ("ip", "link", "delete", outside))
            self._do(("ip", "link", "set", outside, "master", self.bridge, "up"), None)
            inside = ("ip", "netns", "exec", node.netns)
            self._do((*inside, "ip", "addr", "add", f"{node.address}/{self.subnet.prefixlen}", "dev", "eth0"), None)
            self._do((*inside, "ip", "link", "set", "eth0", "up"), None)
            self._do((*inside, "ip", "link", "set", "lo", "up"), None)
            self._do((*inside, "ip", "route", "add", "default", "via", self.gateway), None)

    def _registry(self) -> None:
        self.registry_process = start_registry(self.root / "registry", self.registry, self.registry_credentials)

    def _daemon(self, node: Node) -> None:
        node.data.mkdir(parents=True)
        (node.data / "daemon.json").write_text("{}\n")
        uts = self.run_dir / f"{node.name}.uts"
        uts.touch()
        # A persistent UTS namespace with the node's hostname: without it every node is called the same.
        self._do(("unshare", f"--uts={uts}", "hostname", node.name), ("umount", str(uts)))
        self._spawn(node)

    def _spawn(self, node: Node) -> None:
        exec_root = self.run_dir / node.name
        ns = f"{node.name}-{self.ident}"
        argv = [
            "nsenter", f"--net=/run/netns/{node.netns}", f"--uts={self.run_dir / f'{node.name}.uts'}", "--",
            str(self._dockerd()), "--config-file", str(node.data / "daemon.json"), "-H", node.host,
            "--data-root", str(node.data / "data"), "--exec-root", str(exec_root),
            "--pidfile", str(self.run_dir / f"{node.name}.pid"),
            "--containerd-namespace", ns, "--containerd-plugins-namespace", f"{ns}-plugins",
            "--cgroup-parent", f"po-swarm-{self.ident}-{node.name}",
            "--bip", f"{self._prefix}.{100 + node.index}.1/24",
            "--default-address-pool", f"base={self._prefix}.{104 + node.index * 4}.0/22,size=24",
            "--insecure-registry", self.registry, "--log-level", "warn",
        ]
        log = (node.data / "dockerd.log").open("ab")
        node.process = subprocess.Popen(argv, stdout=log, stderr=log, start_new_session=True)

    def _dockerd(self) -> Path:
        """dockerd under another name: a test elsewhere on this machine that stops the machine's engine with
        `pkill -x dockerd` must not stop the swarm's nodes (the process name comes from this link's name)."""
        link = self.run_dir / "swarm-dockerd"
        if not link.is_symlink():
            link.symlink_to(shutil.which("dockerd") or "/usr/sbin/dockerd")
        return link

    def restart_node(self, node: Node) -> None:
        """Start a stopped node's daemon again, with its data: it rejoins the swarm by itself."""
        self._spawn(node)
        self._wait_daemon(node)
        _wait(lambda: node.name in self.ready_nodes(), 90, f"{node.name} Ready again")

    def _wait_daemon(self, node: Node) -> None:
        def up() -> bool:
            if node.process is not None and node.process.poll() is not None:
                log = (node.data / "dockerd.log").read_text()[-3000:]
                raise RuntimeError(f"dockerd of {node.name} exited:\n{log}")
            return node.docker("version", "--format", "{{.Server.Version}}", timeout=10, check=False).strip() != ""

        _wait(up, 60, f"dockerd of {node.name}")

    def _join(self) -> None:
        pool = f"{self._prefix}.128.0/17"
        self.manager.docker("swarm", "init", "--advertise-addr", self.manager.address,
                            "--default-addr-pool", pool, "--default-addr-pool-mask-length", "24")
        token = self.manager.docker("swarm", "join-token", "--quiet", "worker").strip()
        for node in self.workers:
            node.docker("swarm", "join", "--token", token, "--advertise-addr", node.address,
                        f"{self.manager.address}:2377")
        _wait(lambda: len(self.ready_nodes()) == len(self.nodes), 60, "every node Ready")

    def ready_nodes(self) -> list[str]:
        out = self.manager.docker("node", "ls", "--format", "{{json .}}", timeout=20, check=False)
        rows = [json.loads(line) for line in out.splitlines() if line.strip()]
        return [row["Hostname"] for row in rows if row.get("Status") == "Ready"]

    def load_images(self, *images: str) -> None:
        """Copy images of the machine's engine into the manager's (the base images its builds start from)."""
        with subprocess.Popen(["docker", "save", *images], stdout=subprocess.PIPE) as save:
            assert save.stdout is not None
            _run("docker", "-H", self.manager.host, "load", "--quiet", stdin=save.stdout.fileno(), timeout=600)
            save.stdout.close()
            if save.wait(600) != 0:
                raise RuntimeError(f"docker save {' '.join(images)} failed")

    # Inspection -------------------------------------------------------------------------------------------

    def registry_tags(self) -> dict[str, list[str]]:
        """repository -> tags, of every repository the registry still lists (tags may be empty)."""
        found: dict[str, list[str]] = {}
        auth = self.registry_credentials
        repositories = web.get(f"http://{self.registry}/v2/_catalog?n=1000", auth=auth,
                               timeout=10).json()["repositories"]
        for repository in repositories or []:
            tags = web.get(f"http://{self.registry}/v2/{repository}/tags/list", auth=auth,
                           timeout=10).json().get("tags")
            found[repository] = sorted(tags or [])
        return found

    def labelled(self, label: str) -> dict[str, list[str]]:
        """What carries `label` on every node: `node kind` -> names (services and stacks: the manager's view)."""
        found: dict[str, list[str]] = {}
        for node in self.nodes:
            for kind, argv in (("container", ["ps", "-a"]), ("volume", ["volume", "ls"]),
                               ("network", ["network", "ls"])):
                names = node.docker(*argv, "--filter", f"label={label}", "--format", "{{.ID}}", timeout=30,
                                    check=False).split()
                if names:
                    found[f"{node.name} {kind}"] = names
        services = self.manager.docker("service", "ls", "--filter", f"label={label}", "--format", "{{.Name}}",
                                       check=False).split()
        if services:
            found["services"] = services
        return found

    # Tear-down --------------------------------------------------------------------------------------------

    def stop_node(self, node: Node) -> None:
        """Stop a node's daemon (SIGTERM), as when a machine leaves: its containers stop with it."""
        if node.process is not None and node.process.poll() is None:
            node.process.terminate()
            try:
                node.process.wait(60)
            except subprocess.TimeoutExpired:
                node.process.kill()
                node.process.wait(30)

    def stop(self) -> None:
        for node in reversed(self.nodes):
            if node.process is not None and node.process.poll() is None:
                # Containers first: a daemon that stops leaves them to its containerd otherwise.
                ids = node.docker("ps", "-aq", timeout=30, check=False).split()
                if ids:
                    node.docker("rm", "--force", *ids, timeout=120, check=False)
            self.stop_node(node)
        if self.registry_process is not None:
            stop_registry(self.registry_process)
        for node in self.nodes:  # containerd's shims, if the daemon could not stop them
            _kill_cgroup(f"po-swarm-{self.ident}-{node.name}")
        for argv in reversed(self._undo):
            subprocess.run(argv, capture_output=True, timeout=60)
        self._undo.clear()
        for node in self.nodes:
            # Mounts a daemon made under its roots (overlay layers, netns files) go before the files do.
            _unmount_under(node.data)
            _unmount_under(self.run_dir / node.name)
        shutil.rmtree(self.run_dir, ignore_errors=True)
        for node in self.nodes:
            shutil.rmtree(node.data, ignore_errors=True)


def _free_subnet() -> ipaddress.IPv4Network:
    """A 10.N.0.0/16 no route of this machine touches (the test uses parts of it for every address it needs)."""
    used = [ipaddress.ip_network(word, strict=False) for line in _run("ip", "-4", "route").splitlines()
            for word in line.split()[:1] if word[0].isdigit()]
    for _ in range(200):
        candidate = ipaddress.ip_network(f"10.{secrets.randbelow(150) + 100}.0.0/16")
        if not any(candidate.overlaps(net) for net in used):
            return ipaddress.ip_network(f"{candidate.network_address}/24")
    raise RuntimeError("no free 10.N.0.0/16 for the test's swarm")


def _wait(condition, timeout: float, what: str) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise RuntimeError(f"{what} not ready within {timeout}s")


def _kill_cgroup(name: str) -> None:
    for cgroup in Path("/sys/fs/cgroup").glob(f"*/{name}"):
        for child in sorted(cgroup.rglob("*"), key=lambda p: len(p.parts), reverse=True) + [cgroup]:
            with contextlib.suppress(OSError):
                for pid in (child / "cgroup.procs").read_text().split():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(pid), 9)
        for child in sorted(cgroup.rglob("*"), key=lambda p: len(p.parts), reverse=True) + [cgroup]:
            if child.is_dir():
                with contextlib.suppress(OSError):
                    child.rmdir()


def _unmount_under(path: Path) -> None:
    prefix = str(path.resolve()) + "/"
    mounts = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
    for mount in sorted((m for m in mounts if m.startswith(prefix)), key=len, reverse=True):
        subprocess.run(["umount", "-l", mount], capture_output=True, timeout=30)
