"""Layer 1, the configuration: a YAML file (or a dict) -> a checked, typed config -> the grid; and
the registries a config names (models, metrics).
"""

from .loading import (
    CONFIG_DIR,
    DEFAULT_CONFIG,
    ConfigError,
    ExperimentConfig,
    Range,
    config_hash,
    expand,
    from_dict,
    load_config,
    resolve_config_path,
)

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
