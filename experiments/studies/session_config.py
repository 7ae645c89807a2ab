"""A whole-session study's config (:class:`SessionLevelConfig`, :func:`load_session_config`); its
keys: docs/config.md, "Whole-session ratings"."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from featurestore.errors import ConfigError
from featurestore.extraction.config import read_yaml_file
from featurestore.overrides import apply_override, parse_override

from ..config.checker import Checker
from ..config.metrics import DEFAULT_METRIC, metric_specs
from ..config.models import model_specs

#: summary statistic -> function of (rows, columns) float array, ignoring NaN, per column
STATS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "mean": lambda x: np.nanmean(x, axis=0),
    "std": lambda x: np.nanstd(x, axis=0),
    "median": lambda x: np.nanpercentile(x, 50, axis=0),
    "p10": lambda x: np.nanpercentile(x, 10, axis=0),
    "p90": lambda x: np.nanpercentile(x, 90, axis=0),
    "min": lambda x: np.nanmin(x, axis=0),
    "max": lambda x: np.nanmax(x, axis=0),
}
PROTOCOLS = ("lopo", "kfold_person")
#: the grid of a config without ``models`` (each list of values an axis)
DEFAULT_MODELS: list[dict[str, Any]] = [
    {"name": "dummy"},
    {"name": "ridge", "alpha": [1.0, 10.0, 100.0, 1000.0]},
    {"name": "svr", "C": [0.1, 1.0, 10.0]},
    {"name": "random_forest", "n_estimators": [200], "max_depth": [3]},
]


@dataclass
class SessionLevelConfig:
    """A whole-session study's settings (docs/config.md, "Whole-session ratings")."""

    target: str = ""
    channels: list[str] | str = "all"
    stats: list[str] = field(default_factory=lambda: ["mean", "std", "p10", "p90"])
    protocol: str = "lopo"
    folds: int = 5
    models: list[dict[str, Any]] = field(default_factory=lambda: copy.deepcopy(DEFAULT_MODELS))
    metric: str = DEFAULT_METRIC
    experiment: str = "session_level"
    tracking_uri: str = "mlruns"
    seed: int = 0
    nested: bool = True

    def to_dict(self) -> dict[str, Any]:
        """Key -> value, as the YAML file writes them."""
        return asdict(self)


KEYS = [f.name for f in fields(SessionLevelConfig)]


def _text(v: Any) -> bool:
    return isinstance(v, str) and v != ""


class _Checker(Checker):
    """The session config's keys, checked by the experiment config's value checks."""

    def study(self, raw: dict) -> SessionLevelConfig:
        """Every key checked, every problem raised at once."""
        cfg, raw = SessionLevelConfig(), {"target": "", **self.mapping("", raw, KEYS)}
        stats = ", ".join(STATS)
        text = "expected a non-empty string, got {v!r}"
        # key -> (the problem, ``{v!r}`` the value; what a good value is)
        expected: dict[str, tuple[str, Callable[[Any], bool]]] = {
            "target": ("missing; name the whole-session rating, e.g. target: empathy", _text),
            "channels": (
                "expected `all` or a list of role/channel keys, got {v!r}",
                lambda v: (
                    v == "all" or isinstance(v, list) and all(_text(c) and "/" in c for c in v)
                ),
            ),
            "stats": (
                f"expected a list of {stats}, got {{v!r}}",
                lambda v: isinstance(v, list) and bool(v) and all(s in STATS for s in map(str, v)),
            ),
            "protocol": (
                f"{{v!r}}: a session-level study holds persons out: {' or '.join(PROTOCOLS)}",
                lambda v: v in PROTOCOLS,
            ),
            "experiment": (text, _text),
            "tracking_uri": (text, _text),
            "nested": ("expected true or false, got {v!r}", lambda v: isinstance(v, bool)),
        }
        checks: dict[str, Callable[[Any], Any]] = {
            k: self.expect(k, what, ok) for k, (what, ok) in expected.items()
        }
        checks["folds"] = lambda v: self.integer("folds", v, 2)
        checks["seed"] = lambda v: self.integer("seed", v)
        checks["models"] = self.models
        checks["metric"] = lambda v: self.one("metric", v, metric_specs())
        for key, value in raw.items():
            setattr(cfg, key, self.attempt(key, partial(checks[key], value), getattr(cfg, key)))
        self.raise_errors()
        return cfg

    def expect(self, key: str, what: str, ok: Callable[[Any], bool]) -> Callable[[Any], Any]:
        """The check of ``key``: its value when ``ok``, else the problem ``what`` (``{v!r}``: the value)."""

        def check(value: Any) -> Any:
            if not ok(value):
                raise self.fail(key, what.format(v=value))
            return value

        return check

    def models(self, value: Any) -> list[dict[str, Any]]:
        """``models``: ``{name: MODEL, HYPERPARAMETER: [values]}`` entries, each value in its domain."""
        if not isinstance(value, list) or not value:
            raise self.fail(
                "models", "expected a list of models, e.g. [{name: ridge, alpha: [1, 10]}]"
            )
        specs = model_specs()
        names = [n for n, s in specs.items() if s.inputs != "position"]  # those that read features
        for i, entry in enumerate(value):
            name = entry.get("name") if isinstance(entry, dict) else None
            if name not in names:
                raise self.fail(
                    f"models.{i}",
                    f"expected {{name: one of {', '.join(names)}, ...}}, got {entry!r}",
                )
            params = specs[name].params
            for k, values in [(k, v) for k, v in entry.items() if k != "name"]:
                where = f"models.{i}.{k}"
                if k not in params:
                    known = ", ".join(params) or "none"
                    raise self.fail(where, f"not a parameter of {name} (known: {known})")
                if not isinstance(values, list) or not values:
                    raise self.fail(where, f"expected a list of values (the grid), got {values!r}")
                for v in [v for v in values if not params[k].domain.admits(v)]:
                    raise self.fail(where, f"expected {params[k].domain.text()}, got {v!r}")
        return value


def load_session_config(
    source: str | Path | Mapping[str, Any], overrides: Sequence[str] = ()
) -> SessionLevelConfig:
    """A :class:`SessionLevelConfig` from a YAML file (or a mapping) and ``--set KEY=VALUE``
    ``overrides``; ConfigError names every problem at once, each with its file (or ``--set``) and key."""
    if isinstance(source, Mapping):
        where, raw = "session config", copy.deepcopy(dict(source))
    else:
        where, raw = str(source), read_yaml_file(Path(source), ConfigError) or {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping of keys ({', '.join(KEYS)})")
    origins = {}
    for text in overrides:
        keys, value = parse_override(text, "protocol=kfold_person")
        apply_override(raw, keys, value, text)
        origins[".".join(keys)] = f"--set {text}"
    return _Checker(where, origins, {}).study(raw)
