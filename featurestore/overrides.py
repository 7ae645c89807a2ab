"""``--set KEY=VALUE`` overrides, shared by both packages' configs.

>>> parse_override("window.delay_s=[2]")
(['window', 'delay_s'], [2])
>>> raw = {"models": [{"name": "ridge"}]}
>>> apply_override(raw, ["models", "0", "alpha"], [1, 10], "models.0.alpha=[1, 10]")
>>> raw
{'models': [{'name': 'ridge', 'alpha': [1, 10]}]}
"""

from __future__ import annotations

from typing import Any

import yaml

from .errors import ConfigError
from .yaml_loader import load_yaml


def parse_override(text: str, example: str = "window.delay_s=[2]") -> tuple[list[str], Any]:
    """``"window.delay_s=[2]"`` -> (``["window", "delay_s"]``, ``[2]``); the value is YAML;
    ``example``: the KEY=VALUE the error messages show."""
    if "=" not in text:
        raise ConfigError(f"--set {text}: expected KEY=VALUE with a dotted KEY, e.g. {example}")
    key, value = text.split("=", 1)
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(
            f"--set {text}: empty key; expected KEY=VALUE with a dotted KEY, e.g. {example}"
        )
    try:
        parsed = load_yaml(value) if value.strip() else None
    except yaml.YAMLError as e:
        raise ConfigError(
            f"--set {text}: the value is not valid YAML ({getattr(e, 'problem', e)})"
        ) from e
    return key.split("."), parsed


def apply_override(raw: dict, keys: list[str], value: Any, text: str = "") -> None:
    """Set ``raw[k1][k2]... = value`` in place; integer keys index lists (``models.0.alpha``)."""
    node: Any = raw
    for i, k in enumerate(keys):
        last = i == len(keys) - 1
        if isinstance(node, list):
            if not k.lstrip("-").isdigit() or not -len(node) <= int(k) < len(node):
                raise ConfigError(
                    f"--set {text}: {'.'.join(keys[: i + 1])}: index {k!r} is not in a list of {len(node)} entries"
                )
            if last:
                node[int(k)] = value
            else:
                node = node[int(k)]
        elif isinstance(node, dict):
            if last:
                node[k] = value
            else:
                if not isinstance(node.get(k), dict | list):
                    node[k] = {}
                node = node[k]
        else:
            raise ConfigError(
                f"--set {text}: {'.'.join(keys[:i])} is a single value, it has no key {k!r}"
            )
