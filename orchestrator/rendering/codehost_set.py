"""The code hosts that are on (built by PluginHost.codehosts at start-up)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from orchestrator.plugin_api.codehost import CodeHost


class CodeHosts:
    """The code hosts that are on, by name; what the webhook routes, the flows' reports and git's clone
    credentials are looked up in."""

    def __init__(self, hosts: Iterable[CodeHost]) -> None:
        self._hosts = {host.name: host for host in hosts}

    def __iter__(self) -> Iterator[CodeHost]:
        return iter(self._hosts.values())

    def get(self, name: str) -> CodeHost | None:
        return self._hosts.get(name)

    def names(self) -> list[str]:
        return list(self._hosts)

    def clone_authorization(self, codehost: str, clone_url: str) -> str | None:
        """The pull request's code host's credentials for `clone_url` (it gives them only for its own URLs); no
        other host is asked, so one host's token never goes to a URL another host's pull request names."""
        host = self.get(codehost)
        return host.clone_authorization(clone_url) if host is not None else None

    def masked(self, others: Iterable[str]) -> list[str]:
        """What logs and deployment logs mask: `others` (the settings' secrets) and every host's, once each."""
        return list(dict.fromkeys([*others, *(value for host in self for value in host.secrets())]))

    def close(self) -> None:
        for host in self:
            host.close()
