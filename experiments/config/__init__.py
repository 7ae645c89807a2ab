"""Layer 1, the configuration: a YAML file (or a dict) -> a checked, typed config -> the grid.

Modules: :mod:`~.options` (every allowed name: models, strategies, statistics, tracks),
:mod:`~.choices` (checking a name against them), :mod:`~.schema` (the typed config and its
errors), :mod:`~.validation` (file/line/nearest-name checks), :mod:`~.protocols` (protocol, folds
and splits checked), :mod:`~.grid` (the expanded
configurations, :class:`~.grid.Trial`), :mod:`~.tracks` (which track a configuration
competes in), :mod:`~.fusion` (late fusion's section), :mod:`~.search_space` (Optuna's
ranges), :mod:`~.loading` (files, overrides).

The names below were the public names of the former module ``experiments.config``.
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
