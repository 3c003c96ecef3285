"""Loading YAML that a pull request wrote (safe tags only, a size cap, a bound on alias expansion), and writing the
compose files the service runs."""

from __future__ import annotations

from typing import Any

import yaml

MAX_YAML_BYTES = 64 * 1024
MAX_EXPANDED_NODES = 20_000


class YamlRejected(Exception):
    pass


def load_untrusted_yaml(raw: bytes, name: str, max_bytes: int = MAX_YAML_BYTES) -> Any:
    """Parse `raw`; refuse files over `max_bytes` and documents whose aliases expand past a small bound.

    Composing first keeps aliases as shared nodes, so the expanded size is counted without building it
    (a "billion laughs" file is rejected in microseconds).
    """
    if len(raw) > max_bytes:
        raise YamlRejected(f"{name} is larger than {max_bytes // 1024} KB")
    try:
        text = raw.decode("utf-8")
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        if node is not None and _expanded_size(node, {}) > MAX_EXPANDED_NODES:
            raise YamlRejected(f"{name} expands to too many values (YAML aliases)")
    except UnicodeDecodeError:
        raise YamlRejected(f"{name} is not UTF-8 text") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise YamlRejected(f"{name} is not valid YAML{where}") from None
    except RecursionError:
        raise YamlRejected(f"{name} is nested too deeply") from None
    if node is None:
        return None
    try:
        return yaml.load(text, Loader=yaml.SafeLoader)  # noqa: S506 - SafeLoader
    except yaml.YAMLError:
        raise YamlRejected(f"{name} is not valid YAML") from None
    except RecursionError:
        raise YamlRejected(f"{name} is nested too deeply") from None


def _expanded_size(node: yaml.Node, memo: dict[int, int]) -> int:
    key = id(node)
    if key in memo:
        return memo[key]
    memo[key] = MAX_EXPANDED_NODES + 1  # a cycle counts as too big
    size = 1
    if isinstance(node, yaml.SequenceNode):
        for child in node.value:
            size += _expanded_size(child, memo)
            if size > MAX_EXPANDED_NODES:
                break
    elif isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            size += _expanded_size(key_node, memo) + _expanded_size(value_node, memo)
            if size > MAX_EXPANDED_NODES:
                break
    memo[key] = size
    return size


def dump_compose(compose: dict[str, Any]) -> str:
    """A compose (or stack) document as the service writes it: keys in order, block style, no wrapped lines."""
    return yaml.safe_dump(compose, sort_keys=False, default_flow_style=False, width=4096)
