"""The allow-list of a pull request's own compose file (compose_policy.py applies it): the options a preview may
use — freely, or within limits its checks enforce — and, for the ones it may never use, why, in the words a
refusal gives the author."""

from __future__ import annotations

DOCKER_SOCKET_HINTS = ("docker.sock", "/var/run/docker", "/run/docker")

TOP_LEVEL = frozenset({"name", "services", "networks", "volumes", "configs", "secrets", "version"})

# Options a service may use freely: they act inside the preview's own containers and network.
FREE_OPTIONS = frozenset({
    "annotations", "attach", "cap_drop", "command", "depends_on", "develop", "dns", "dns_opt", "dns_search",
    "domainname", "entrypoint", "environment", "expose", "extra_hosts", "healthcheck", "hostname", "init",
    "labels", "links", "mac_address", "platform", "profiles", "pull_policy", "pull_refresh_after",
    "read_only", "restart", "shm_size", "stdin_open", "stop_grace_period", "stop_signal", "tmpfs", "tty",
    "user", "working_dir",
})
# Options a service may use within limits, each checked below on the normalised form.
CHECKED_OPTIONS = frozenset({
    "build", "image", "volumes", "networks", "ports", "container_name", "deploy", "scale", "logging", "ipc",
    "pid", "network_mode", "security_opt", "configs", "secrets", "env_file", "post_start", "pre_stop",
    "pids_limit", "ulimits",
})
SERVICE_OPTIONS = FREE_OPTIONS | CHECKED_OPTIONS

# Why the options a preview may never use are refused (others get a generic reason).
REFUSED_BECAUSE = {
    "privileged": "gives the container full access to the host",
    "cap_add": "adds kernel capabilities",
    "devices": "exposes host devices",
    "device_cgroup_rules": "exposes host devices",
    "gpus": "exposes host devices",
    "volumes_from": "mounts another container's volumes",
    "cgroup": "shares the host's cgroup namespace",
    "cgroup_parent": "moves the container out of its own cgroup",
    "sysctls": "changes kernel parameters",
    "extends": "reads another file",
    "label_file": "reads another file",
    "external_links": "links to containers outside the preview",
    "group_add": "adds host groups",
    "uts": "shares the host's uts namespace",
    "userns_mode": "changes the user namespace",
    "runtime": "selects another container runtime",
    "isolation": "selects another isolation technology",
    "storage_opt": "changes host storage options",
    "oom_kill_disable": "exempts the container from the memory limit",
    "oom_score_adj": "changes how the host kernel kills processes",
    "credential_spec": "reads host credentials",
    "provider": "runs a program on the host",
    "use_api_socket": "hands the Docker API to the container",
    "models": "runs models on the host",
}
LIMITS = ("cpus", "cpu_count", "cpu_percent", "cpu_period", "cpu_quota", "cpu_rt_period", "cpu_rt_runtime",
           "cpu_shares", "cpuset", "mem_limit", "mem_reservation", "mem_swappiness", "memswap_limit",
           "blkio_config")
REFUSED_BECAUSE.update({name: "the service sets every container's limits (0.5 CPU, 512M)" for name in LIMITS})

# The ulimits a service may set, each up to a ceiling (soft and hard): the others reach past the container's own
# limits — rtprio and rttime a real-time thread that escapes the CPU quota, nice a priority above other previews,
# memlock memory the kernel cannot reclaim.
ALLOWED_ULIMITS = {"nofile": 1_048_576, "nproc": 65_535, "core": 0, "stack": 64 * 1024 * 1024}

BUILD_OPTIONS = frozenset({"context", "dockerfile", "dockerfile_inline", "args", "target", "labels", "no_cache",
                           "pull", "extra_hosts", "shm_size", "network", "platforms"})
BUILD_REFUSED_BECAUSE = {
    "ssh": "lends the host's SSH agent or keys to the build",
    "secrets": "reads host secrets into the build",
    "privileged": "runs the build with full access to the host",
    "entitlements": "grants the build extra privileges",
    "additional_contexts": "reads directories outside the build context",
    "cache_from": "reads a cache from the host or a registry",
    "cache_to": "writes a cache to the host or a registry",
    "tags": "tags the built image with other names (replacing them for every preview)",
    "isolation": "selects another isolation technology",
    "ulimits": "changes the build's limits",
    "provenance": "attaches attestations",
    "sbom": "attaches attestations",
}
DEPLOY_OPTIONS = frozenset({"resources", "restart_policy", "replicas", "labels", "placement", "mode",
                            "update_config", "rollback_config"})
NETWORK_OPTIONS = frozenset({"name", "driver", "ipam", "labels", "internal", "attachable", "enable_ipv4",
                             "enable_ipv6"})
VOLUME_OPTIONS = frozenset({"name", "driver", "labels"})
FILE_OBJECT_OPTIONS = frozenset({"name", "file", "content", "labels"})  # configs and secrets


def why_refused(option: str, level: str = "service") -> str:
    if level == "top-level" and option == "include":
        return "reads other files"
    return REFUSED_BECAUSE.get(option, "not one of the options a preview may use")


def why_refused_top(kind: str, option: str) -> str:
    return {
        "external": "shared with the host or other previews",
        "driver_opts": "can bind host paths",
        "environment": "reads host variables",
        "template_driver": "runs a template driver",
    }.get(option, "not needed by a preview")
