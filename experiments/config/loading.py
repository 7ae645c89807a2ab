"""Reading an experiment config: a YAML file (or a packaged name) plus ``--set`` overrides
(``models.0.alpha=[1, 10]``), validated into the typed config::

    from experiments.config import load_config, expand
    trials = expand(load_config("default", overrides=["window.delay_s=[2]"]))
"""

from __future__ import annotations

import copy
import os
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path

import yaml

from featurestore.errors import ConfigError
from featurestore.extraction.config import read_yaml_file
from featurestore.overrides import apply_override, parse_override
from featurestore.yaml_loader import compose_yaml

from .grid import MAX_CONFIGURATIONS, expand
from .options import ConfigWarning
from .reference import defaults_note
from .schema import ExperimentConfig, Range, config_hash
from .store_check import StoreNames, store_names
from .validation import validate

__all__ = [
    "CONFIG_DIR",
    "DEFAULT_CONFIG",
    "ConfigError",
    "ExperimentConfig",
    "Range",
    "config_hash",
    "expand",
    "from_dict",
    "load_config",
    "resolve_config_path",
]

#: the packaged configs (default.yaml, ablation.yaml, smoke.yaml, search.yaml)
CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"
DEFAULT_CONFIG = CONFIG_DIR / "default.yaml"


def resolve_config_path(path: str | Path | None) -> Path:
    """A config path; a bare name such as ``smoke`` means the packaged ``configs/smoke.yaml``."""
    if path is None:
        return DEFAULT_CONFIG
    p = Path(path)
    if p.exists():
        return p
    packaged = CONFIG_DIR / (p.name if p.suffix in (".yaml", ".yml") else f"{p.name}.yaml")
    if p.parent == Path(".") and packaged.exists():
        return packaged
    names = sorted(x.stem for x in CONFIG_DIR.glob("*.yaml"))
    raise ConfigError(
        f"config file {p} does not exist; pass a YAML file or one of the packaged configs: {', '.join(names)}"
    )


def load_config(
    path: str | Path | None = None,
    overrides: Iterable[str] = (),
    store: str | os.PathLike | StoreNames | None = None,
    max_configurations: int = MAX_CONFIGURATIONS,
) -> ExperimentConfig:
    """Read, override and validate an experiment config: ``path`` a YAML file, a packaged config's
    name, or None (``default``); ``overrides`` ``KEY=VALUE`` strings applied in order; ``store`` a
    feature store (or its names) whose sessions must hold the target, the swept channels and the
    splits' stories; ``max_configurations`` the largest grid (or Optuna search) accepted.

    Raises ConfigError with every problem of the file at once; warns (ConfigWarning) when the
    file leaves ``models`` or ``feature_set`` to the defaults.
    """
    p = resolve_config_path(path)
    raw = read_yaml_file(p, ConfigError)
    if raw is None or raw == {}:
        raise ConfigError(
            f"{p}: the config is empty (no settings), which would sweep every built-in default; "
            f"copy a packaged config, e.g. {CONFIG_DIR / 'smoke.yaml'} (5 configurations: "
            "--config smoke) or default.yaml (--config default), and edit it (docs/config.md)"
        )
    if not isinstance(raw, dict):
        raise ConfigError(
            f"{p}: expected a mapping of settings at the top level, got {type(raw).__name__}"
        )
    overrides = list(overrides)
    cfg = from_dict(
        raw,
        source=str(p),
        overrides=overrides,
        lines=key_lines(p.read_text(encoding="utf-8")),
        store=store,
        max_configurations=max_configurations,
    )
    given = set(raw) | {text.split("=", 1)[0].split(".")[0].strip() for text in overrides}
    if note := defaults_note(given, cfg):
        warnings.warn(note, ConfigWarning, stacklevel=2)
    return cfg


def from_dict(
    raw: Mapping,
    source: str = "<dict>",
    overrides: Iterable[str] = (),
    lines: Mapping[str, int] | None = None,
    store: str | os.PathLike | StoreNames | None = None,
    max_configurations: int = MAX_CONFIGURATIONS,
) -> ExperimentConfig:
    """Validate a config mapping (as read from YAML), after applying ``overrides``; ``lines``
    (:func:`key_lines`) lets errors name the line of each key; the rest as :func:`load_config`."""
    data = copy.deepcopy(dict(raw))
    origins: dict[str, str] = {}
    for text in overrides:
        keys, value = parse_override(text)
        apply_override(data, keys, value, text)
        origins[".".join(keys)] = f"--set {text}"
    names = store if store is None or isinstance(store, StoreNames) else store_names(store)
    return validate(data, source, origins, lines, names, max_configurations)


def key_lines(text: str) -> dict[str, int]:
    r"""Dotted key path -> line (1-based) of a YAML document's keys and list items.

    >>> key_lines("target: valence_self\nwindow:\n  align: causal\nmodels:\n  - {name: ridge}\n")
    {'target': 1, 'window': 2, 'window.align': 3, 'models': 4, 'models.0': 5, 'models.0.name': 5}
    """
    out: dict[str, int] = {}

    def walk(node: yaml.Node, path: str) -> None:
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                key = f"{path}.{k.value}" if path else str(k.value)
                out.setdefault(key, k.start_mark.line + 1)
                walk(v, key)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                out.setdefault(f"{path}.{i}", item.start_mark.line + 1)
                walk(item, f"{path}.{i}")

    try:
        root = compose_yaml(text)
    except yaml.YAMLError:  # the file's reader reports it, with its line
        return out
    if root is not None:
        walk(root, "")
    return out
