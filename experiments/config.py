"""Experiment config: typed dataclasses, YAML loading with overrides, validation, grid expansion.

A config file (see ``experiments/configs/*.yaml`` and DESIGN.md "Experiment config") describes
a grid: every list is an axis, and every combination is one configuration (a :class:`Trial`,
one nested MLflow child run). Missing keys take the defaults of the dataclasses below, so a
config only needs to say what differs.

Overrides use dotted keys and YAML values, as on the command line (``--set``)::

    cfg = load_config("experiments/configs/default.yaml", overrides=["window.delay_s=[2]"])

A model entry may narrow the grid for itself with ``only`` (dotted trial axes -> the values of
the global grid to keep for that model), which keeps expensive models off the full cross
product; see :func:`model_axes`::

    models:
      - {name: ridge, alpha: [1, 100]}
      - {name: svr, C: [1], only: {window.lengths_s: [[2, 8]], personalization: [global]}}

With ``search: {method: optuna, ...}`` (see :class:`SearchConfig` and :mod:`experiments.search`)
a model hyperparameter or a numeric window/postprocess axis may also be a :class:`Range`
(``{low: 0.01, high: 10, log: true}``, ``{low: 1, high: 8, int: true}``); lists stay
categorical choices. A range without ``search.method: optuna`` is an error.

Errors are :class:`ConfigError`; each names the file (or the ``--set`` option) and the key
path (``window.align``), and suggests the nearest valid key or value.
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import itertools
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from .options import (
    ALIGNS,
    FIT_ON,
    PERSONALIZATIONS,
    PROTOCOLS,
    RESCALES,
    ROLES,
    SMOOTH_METHODS,
    SPLIT_NAMES,
    STATS,
    TRACKS,
)
from .tracks import track_of

#: the packaged configs (default.yaml, ablation.yaml, smoke.yaml)
CONFIG_DIR = Path(__file__).resolve().parent / "configs"
DEFAULT_CONFIG = CONFIG_DIR / "default.yaml"


#: trial axes a model entry may narrow with ``only`` (dotted key -> attribute of the config)
ONLY_AXES = (
    "feature_set",
    "window.lengths_s",
    "window.delay_s",
    "window.align",
    "personalization",
    "postprocess.smooth_s",
    "postprocess.smooth_method",
    "postprocess.rescale",
)


class ConfigError(ValueError):
    """A bad experiment config: the message names the file or ``--set`` option and the key path."""


# --------------------------------------------------------------------------- dataclasses
def _default_feature_sets() -> dict[str, list[str]]:
    return {
        "speaker": ["speaker/face_geom", "speaker/egemaps"],
        "listener": ["listener/face_geom", "listener/egemaps"],
        "both": ["speaker/face_geom", "speaker/egemaps", "listener/face_geom", "listener/egemaps"],
    }


#: keys of a range mapping (:class:`Range`)
RANGE_KEYS = ("low", "high", "log", "int", "step")
#: search methods: ``grid`` (every combination, :func:`experiments.sweep.run_sweep`) or ``optuna``
SEARCH_METHODS = ("grid", "optuna")
#: Optuna samplers a search may name (``grid``: Optuna's GridSampler over lists only)
SEARCH_SAMPLERS = ("tpe", "random", "grid")


@dataclass(frozen=True)
class Range:
    """A range an Optuna search samples from (see :mod:`experiments.search`), in the axis' units
    (seconds for window and smoothing axes). ``int``: integers; ``log``: sampled uniformly in
    log space; ``step``: a grid of ``low + k * step``."""

    low: float
    high: float
    log: bool = False
    int: bool = False
    step: float | None = None

    def to_dict(self) -> dict:
        d: dict[str, Any] = {"low": self.low, "high": self.high}
        if self.log:
            d["log"] = True
        if self.int:
            d["int"] = True
        if self.step is not None:
            d["step"] = self.step
        return d

    def contains(self, x: Any) -> bool:
        """Whether the number ``x`` lies in [low, high]."""
        return _is_number(x) and self.low <= x <= self.high


def _values(v: Any) -> Any:
    """An axis as YAML: a list of values, or a range's mapping."""
    return v.to_dict() if isinstance(v, Range) else list(v)


def has_ranges(cfg: ExperimentConfig) -> bool:
    """Whether any axis or hyperparameter of ``cfg`` is a :class:`Range` (a search space, not a grid)."""
    axes = [cfg.window.lengths_s, cfg.window.delay_s, cfg.postprocess.smooth_s]
    axes += [v for m in cfg.models for v in m.params.values()]
    return any(isinstance(a, Range) for a in axes)


@dataclass
class SearchConfig:
    """How the configurations are chosen: ``grid`` (all of them) or an ``optuna`` search.

    An Optuna search runs ``n_trials`` configurations in all (a re-run continues the same study
    up to that number), each sampled by ``sampler`` (seeded with ``seed``) to maximise the
    validation (or LOSO) CCC of ``track``; ``startup_trials`` random trials come before TPE
    models the results. ``storage`` is the Optuna storage URL (default: ``optuna.db`` beside a
    SQLite tracking database; needed for any other tracking URI).
    """

    method: str = "grid"
    n_trials: int = 20
    sampler: str = "tpe"
    seed: int = 0
    track: str = "generalized"
    startup_trials: int = 10
    storage: str | None = None

    def to_dict(self) -> dict:
        return {"method": self.method, "n_trials": self.n_trials, "sampler": self.sampler, "seed": self.seed,
                "track": self.track, "startup_trials": self.startup_trials, "storage": self.storage}


@dataclass
class WindowConfig:
    """Windowing grid: each ``lengths_s`` entry is one multi-scale set of window lengths (s).

    In an Optuna search ``lengths_s`` and ``delay_s`` may be a :class:`Range` (seconds); a
    ``lengths_s`` range samples one window length (a single-scale set)."""

    lengths_s: list[list[float]] | Range = field(default_factory=lambda: [[4.0], [2.0, 8.0]])
    delay_s: list[float] | Range = field(default_factory=lambda: [0.0, 2.0])
    align: list[str] = field(default_factory=lambda: ["centred"])
    stats: list[str] = field(default_factory=lambda: ["mean", "std", "slope"])
    #: training rows are taken every ``train_hop_s`` seconds; predictions cover every frame
    train_hop_s: float = 0.2


@dataclass
class ModelSpec:
    """One ``models`` entry: a model name, a grid per hyperparameter, optional narrowed axes."""

    name: str
    #: hyperparameter -> its grid (a list), or a :class:`Range` for an Optuna search
    params: dict[str, list[Any] | Range] = field(default_factory=dict)
    only: dict[str, list[Any]] = field(default_factory=dict)

    def to_dict(self) -> dict:
        d: dict[str, Any] = {"name": self.name, **{k: _values(v) for k, v in self.params.items()}}
        if self.only:
            d["only"] = {k: list(v) for k, v in self.only.items()}
        return d


def _default_models() -> list[ModelSpec]:
    return [
        ModelSpec("ridge", {"alpha": [1.0, 10.0]}),
        ModelSpec("linear_svr", {"C": [0.01, 0.1]}),
        ModelSpec("xgboost", {"n_estimators": [300], "max_depth": [3], "learning_rate": [0.05]}),
    ]


@dataclass
class PostprocessConfig:
    """Prediction smoothing (window in seconds, 0 = none; a :class:`Range` in an Optuna search)
    and rescaling to training statistics."""

    smooth_s: list[float] | Range = field(default_factory=lambda: [0.0, 4.0])
    smooth_method: list[str] = field(default_factory=lambda: ["moving_average"])
    rescale: list[str] = field(default_factory=lambda: ["none", "train"])
    #: what rescaling and per-listener calibration are fitted on (one of ``FIT_ON``)
    fit_on: str = "out_of_fold"


@dataclass
class TrackingConfig:
    """MLflow tracking: ``uri`` ``mlruns`` means the SQLite store inside ``mlruns/``."""

    uri: str = "mlruns"
    experiment: str = "omg-default"


@dataclass
class ExperimentConfig:
    """A resolved, validated experiment config (see DESIGN.md "Experiment config")."""

    target: str = "valence_self"
    splits: dict[str, list[int]] = field(
        default_factory=lambda: {"train": [2, 4, 5, 8], "val": [1], "test": [3, 6, 7]}
    )
    protocol: str = "val"
    feature_sets: dict[str, list[str]] = field(default_factory=_default_feature_sets)
    #: names of the feature sets to sweep (default: all of ``feature_sets``)
    feature_set: list[str] = field(default_factory=list)
    window: WindowConfig = field(default_factory=WindowConfig)
    models: list[ModelSpec] = field(default_factory=_default_models)
    personalization: list[str] = field(default_factory=lambda: ["global", "per_listener", "global_calibrated"])
    postprocess: PostprocessConfig = field(default_factory=PostprocessConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    seed: int = 0
    #: score each feature set's chosen generalized-track configuration on listeners left out of
    #: training too (one more child run per feature set, see :func:`experiments.sweep.run_sweep`)
    unseen_listener: bool = True
    #: parallel configurations; None lets the sweep decide
    jobs: int | None = None
    #: grid (default) or an Optuna search over the same axes (see :class:`SearchConfig`)
    search: SearchConfig = field(default_factory=SearchConfig)
    #: where the config came from (file path or ``<dict>``); not part of ``to_dict``
    source: str = field(default="<defaults>", compare=False)

    def __post_init__(self) -> None:
        if not self.feature_set:
            self.feature_set = list(self.feature_sets)

    def to_dict(self) -> dict:
        """The resolved config as plain YAML/JSON-dumpable types (every default filled in).

        ``search`` is included only for an Optuna search, so a grid config's hash is what it
        was before searches existed."""
        d = {
            "target": self.target,
            "splits": {k: list(v) for k, v in self.splits.items()},
            "protocol": self.protocol,
            "feature_sets": {k: list(v) for k, v in self.feature_sets.items()},
            "feature_set": list(self.feature_set),
            "window": {
                "lengths_s": _values(self.window.lengths_s) if isinstance(self.window.lengths_s, Range)
                else [list(x) for x in self.window.lengths_s],
                "delay_s": _values(self.window.delay_s),
                "align": list(self.window.align),
                "stats": list(self.window.stats),
                "train_hop_s": self.window.train_hop_s,
            },
            "models": [m.to_dict() for m in self.models],
            "personalization": list(self.personalization),
            "postprocess": {
                "smooth_s": _values(self.postprocess.smooth_s),
                "smooth_method": list(self.postprocess.smooth_method),
                "rescale": list(self.postprocess.rescale),
                "fit_on": self.postprocess.fit_on,
            },
            "tracking": {"uri": self.tracking.uri, "experiment": self.tracking.experiment},
            "seed": self.seed,
            "unseen_listener": self.unseen_listener,
            "jobs": self.jobs,
        }
        if self.search.method != "grid":
            d["search"] = self.search.to_dict()
        return d

    def to_yaml(self) -> str:
        """The resolved config as YAML text (what ``--print-config`` shows)."""
        return yaml.safe_dump(self.to_dict(), sort_keys=False, default_flow_style=None)

    def hash(self) -> str:
        """Short stable hash of the resolved config."""
        return config_hash(self.to_dict())


def config_hash(d: Mapping | Sequence | Any, length: int = 12) -> str:
    """Stable short hex hash of a JSON-able value (key order does not matter)."""
    blob = json.dumps(d, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:length]


# --------------------------------------------------------------------------- trials
class WindowKey(NamedTuple):
    """What determines the windowed features of a trial (compute once, share across models)."""

    feature_set: str
    channels: tuple[str, ...]
    lengths_s: tuple[float, ...]
    delay_s: float
    align: str
    stats: tuple[str, ...]


def format_value(v: Any) -> str:
    """A param value as MLflow text: ``2.0`` -> ``"2"``, ``[2, 8]`` -> ``"2,8"``, None -> ``"None"``."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and math.isfinite(v) and v == int(v):
        return str(int(v))
    if isinstance(v, list | tuple):
        return ",".join(format_value(x) for x in v)
    return str(v)


@dataclass(frozen=True)
class Trial:
    """One configuration of the grid: everything needed to train, post-process and score once."""

    feature_set: str
    channels: tuple[str, ...]
    lengths_s: tuple[float, ...]
    delay_s: float
    align: str
    stats: tuple[str, ...]
    hop_s: float
    model: str
    model_params: tuple[tuple[str, Any], ...]
    personalization: str
    smooth_s: float
    smooth_method: str
    rescale: str
    target: str = "valence_self"
    protocol: str = "val"
    seed: int = 0
    splits: tuple[tuple[str, tuple[int, ...]], ...] = ()
    fit_on: str = "out_of_fold"
    #: also score this configuration on listeners left out of training (generalized track only)
    unseen_listener: bool = False

    @property
    def track(self) -> str:
        """``personalized`` when anything in this configuration uses who is listening, else ``generalized``."""
        return track_of(self.personalization, self.rescale)

    @property
    def hyperparams(self) -> dict[str, Any]:
        """Model hyperparameters of this trial (lists restored from tuples)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self.model_params}

    def params(self) -> dict[str, str]:
        """Flat dotted params for MLflow (all values as text, see :func:`format_value`)."""
        p = {
            "features.set": self.feature_set,
            "features.channels": ",".join(self.channels),
            "window.lengths_s": format_value(self.lengths_s),
            "window.delay_s": format_value(self.delay_s),
            "window.align": self.align,
            "window.stats": ",".join(self.stats),
            "window.train_hop_s": format_value(self.hop_s),
            "model.name": self.model,
        }
        p.update({f"model.{k}": format_value(v) for k, v in self.model_params})
        p.update(
            {
                "personalization": self.personalization,
                "postprocess.smooth_s": format_value(self.smooth_s),
                "postprocess.smooth_method": self.smooth_method,
                "postprocess.rescale": self.rescale,
                "postprocess.fit_on": self.fit_on,
                "track": self.track,
                "unseen_listener": format_value(self.unseen_listener and self.track == "generalized"),
                "target": self.target,
                "protocol": self.protocol,
                "seed": format_value(self.seed),
                "splits": ";".join(f"{k}={format_value(v)}" for k, v in self.splits),
            }
        )
        return p

    def hash(self) -> str:
        """Stable short hash of :meth:`params` (identifies a finished configuration on resume)."""
        return config_hash(self.params())

    def window_key(self) -> WindowKey:
        """The part of the trial that determines its windowed features."""
        return WindowKey(self.feature_set, self.channels, self.lengths_s, self.delay_s, self.align, self.stats)

    def fit_key(self) -> Trial:
        """The part of the trial that determines its fitted models: every field but the
        post-processing (smoothing, rescaling), so configurations that differ only there share
        one set of fits (see :func:`experiments.evaluate.evaluate_trials`)."""
        return replace(self, smooth_s=0.0, smooth_method="", rescale="")

    def label(self) -> str:
        """Short human-readable name, e.g. for a run name."""
        hp = ",".join(f"{k}={format_value(v)}" for k, v in self.model_params)
        return (
            f"{self.model}{'(' + hp + ')' if hp else ''} {self.feature_set} "
            f"w{format_value(self.lengths_s)}s d{format_value(self.delay_s)}s {self.personalization} "
            f"smooth{format_value(self.smooth_s)}s rescale={self.rescale}"
        )


def _axis_values(cfg: ExperimentConfig) -> dict[str, list[Any]]:
    return {
        "feature_set": list(cfg.feature_set),
        "window.lengths_s": [tuple(x) for x in cfg.window.lengths_s],
        "window.delay_s": list(cfg.window.delay_s),
        "window.align": list(cfg.window.align),
        "personalization": list(cfg.personalization),
        "postprocess.smooth_s": list(cfg.postprocess.smooth_s),
        "postprocess.smooth_method": list(cfg.postprocess.smooth_method),
        "postprocess.rescale": list(cfg.postprocess.rescale),
    }


def model_axes(cfg: ExperimentConfig, spec: ModelSpec) -> dict[str, list[Any]]:
    """The grid axes for one model: the global values, narrowed by the model's ``only``.

    ``only`` keeps the grid values it lists; when it lists none of them (e.g. after
    ``--set window.delay_s=[3]`` on a config whose model says ``only: {window.delay_s: [2]}``)
    the model follows the whole grid on that axis instead of dropping out of the sweep.
    """
    axes = _axis_values(cfg)
    for axis, wanted in spec.only.items():
        wanted = [tuple(x) if isinstance(x, list) else x for x in wanted]
        kept = [v for v in axes[axis] if v in wanted]
        if kept:
            axes[axis] = kept
    return axes


def expand(cfg: ExperimentConfig) -> list[Trial]:
    """Every configuration of the grid, grouped by window key (features computed once per key).

    A model's ``only`` narrows the axes for that model (see :func:`model_axes`). With
    ``smooth_s`` 0 there is nothing to smooth, so only the first smoothing method is kept for
    it. Duplicates (same params) are dropped, keeping the first.

    Raises:
        ConfigError: ``cfg`` has ranges (an Optuna search space: see :mod:`experiments.search`).
    """
    if has_ranges(cfg):
        raise ConfigError(f"{cfg.source}: the config has ranges ({{low, high}}), which an Optuna search samples; "
                          "a grid lists values. Run it with experiments.search.run_search (experiments sweep does)")
    glob = _axis_values(cfg)
    per_model = [model_axes(cfg, spec) for spec in cfg.models]
    splits = tuple((k, tuple(int(s) for s in v)) for k, v in cfg.splits.items())
    stats = tuple(cfg.window.stats)
    out: list[Trial] = []
    seen: set[str] = set()
    window_axes = ("feature_set", "window.lengths_s", "window.delay_s", "window.align")
    for key in itertools.product(*(glob[a] for a in window_axes)):
        fs, lengths, delay, align = key
        for spec, axes in zip(cfg.models, per_model, strict=True):
            if any(v not in axes[a] for a, v in zip(window_axes, key, strict=True)):
                continue
            names = list(spec.params)
            methods = axes["postprocess.smooth_method"]
            for values in itertools.product(*(spec.params[n] for n in names)):
                hp = tuple((n, tuple(v) if isinstance(v, list) else v) for n, v in zip(names, values, strict=True))
                for pers, smooth, method, rescale in itertools.product(
                    axes["personalization"], axes["postprocess.smooth_s"], methods, axes["postprocess.rescale"]
                ):
                    if smooth == 0 and method != methods[0]:
                        continue
                    trial = Trial(
                        feature_set=fs,
                        channels=tuple(cfg.feature_sets[fs]),
                        lengths_s=tuple(lengths),
                        delay_s=delay,
                        align=align,
                        stats=stats,
                        hop_s=cfg.window.train_hop_s,
                        model=spec.name,
                        model_params=hp,
                        personalization=pers,
                        smooth_s=smooth,
                        smooth_method=method,
                        rescale=rescale,
                        target=cfg.target,
                        protocol=cfg.protocol,
                        seed=cfg.seed,
                        splits=splits,
                        fit_on=cfg.postprocess.fit_on,
                    )
                    h = trial.hash()
                    if h not in seen:
                        seen.add(h)
                        out.append(trial)
    return out


# --------------------------------------------------------------------------- loading
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


def load_config(path: str | Path | None = None, overrides: Iterable[str] = ()) -> ExperimentConfig:
    """Read, override and validate an experiment config.

    Args:
        path: a YAML file, a packaged config name (``default``, ``ablation``, ``smoke``), or
            None for ``experiments/configs/default.yaml``.
        overrides: ``KEY=VALUE`` strings with dotted keys and YAML values, applied in order
            (``"window.delay_s=[2]"``, ``"models.0.alpha=[1, 10]"``, ``"window.align=causal"``).

    Raises:
        ConfigError: unreadable or malformed file, unknown key, bad value; the message names
            the file (and line for YAML syntax errors) or ``--set`` option and the key path.
    """
    from featurestore.config import read_yaml_file

    p = resolve_config_path(path)
    raw = read_yaml_file(p, ConfigError)
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{p}: expected a mapping of settings at the top level, got {type(raw).__name__}")
    return from_dict(raw, source=str(p), overrides=overrides)


def parse_override(text: str) -> tuple[list[str], Any]:
    """``"window.delay_s=[2]"`` -> (``["window", "delay_s"]``, ``[2]``); the value is YAML."""
    if "=" not in text:
        raise ConfigError(f"--set {text}: expected KEY=VALUE with a dotted KEY, e.g. window.delay_s=[2]")
    key, value = text.split("=", 1)
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(f"--set {text}: empty key; expected KEY=VALUE with a dotted KEY, e.g. window.delay_s=[2]")
    try:
        parsed = yaml.safe_load(value) if value.strip() else None
    except yaml.YAMLError as e:
        raise ConfigError(f"--set {text}: the value is not valid YAML ({getattr(e, 'problem', e)})") from e
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
            raise ConfigError(f"--set {text}: {'.'.join(keys[:i])} is a single value, it has no key {k!r}")


def from_dict(raw: Mapping, source: str = "<dict>", overrides: Iterable[str] = ()) -> ExperimentConfig:
    """Validate a config mapping (as read from YAML), after applying ``overrides``."""
    raw = copy.deepcopy(dict(raw))
    origins: dict[str, str] = {}
    for text in overrides:
        keys, value = parse_override(text)
        apply_override(raw, keys, value, text)
        origins[".".join(keys)] = f"--set {text}"
    return _Validator(source, origins).config(raw)


# --------------------------------------------------------------------------- validation
def _suggest(word: Any, valid: Iterable[Any]) -> str:
    valid = [str(v) for v in valid]
    close = difflib.get_close_matches(str(word), valid, n=1, cutoff=0.5)
    return f"; did you mean {close[0]!r}?" if close else f"; valid: {', '.join(valid)}"


def _is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


class _Validator:
    def __init__(self, source: str, origins: Mapping[str, str]) -> None:
        self.source = source
        self.origins = dict(origins)
        self.search_method = "grid"  # set by :meth:`config` before any axis is read

    def fail(self, key: str, msg: str) -> ConfigError:
        where = self.source
        dotted = re.sub(r"\[(\d+)\]", r".\1", key)  # models[0].alpha -> models.0.alpha, as --set writes it
        for k, origin in self.origins.items():
            if dotted == k or dotted.startswith(k + ".") or k.startswith(dotted + "."):
                where = f"{origin} (on {self.source})"
                break
        return ConfigError(f"{where}: {key}: {msg}")

    # ---- helpers
    def mapping(self, key: str, value: Any, allowed: Sequence[str] | None = None) -> dict:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.fail(key, f"expected a mapping, got {type(value).__name__} {value!r}")
        if allowed is not None:
            for k in value:
                if k not in allowed:
                    raise self.fail(f"{key}.{k}" if key else str(k), f"unknown key{_suggest(k, allowed)}")
        return value

    def as_list(self, key: str, value: Any) -> list:
        if isinstance(value, list | tuple):
            if not value:
                raise self.fail(key, "empty list; give at least one value")
            return list(value)
        if isinstance(value, dict):
            raise self.fail(key, f"expected a value or a list of values, got a mapping {value!r}")
        return [value]

    def enum_list(self, key: str, value: Any, valid: Sequence[str]) -> list[str]:
        out = []
        for v in self.as_list(key, value):
            if v not in valid:
                raise self.fail(key, f"{v!r} is not one of {', '.join(valid)}{_suggest(v, valid)}")
            if v not in out:
                out.append(v)
        return out

    def number(self, key: str, v: Any, minimum: float | None = None, strict: bool = False) -> float:
        if not _is_number(v):
            raise self.fail(key, f"expected a number, got {v!r}")
        if minimum is not None and (v < minimum or (strict and v == minimum)):
            raise self.fail(key, f"{v!r} must be {'>' if strict else '>='} {minimum:g}")
        return float(v)

    def number_list(self, key: str, value: Any, minimum: float, strict: bool = False) -> list[float]:
        out: list[float] = []
        for v in self.as_list(key, value):
            x = self.number(key, v, minimum, strict)
            if x not in out:
                out.append(x)
        return out

    def range(self, key: str, value: dict, minimum: float | None = None, strict: bool = False) -> Range:
        """A range mapping ``{low, high[, log][, int][, step]}`` (only in an Optuna search)."""
        if self.search_method != "optuna":
            raise self.fail(key, f"a range {value!r} is sampled by an Optuna search, but search.method is "
                            f"{self.search_method!r}; add `search: {{method: optuna, n_trials: 50, track: generalized}}` "
                            "or list the values of a grid, e.g. [0.01, 0.1, 1]")
        for k in value:
            if k not in RANGE_KEYS:
                raise self.fail(f"{key}.{k}", f"unknown key of a range{_suggest(k, RANGE_KEYS)}")
        for k in ("low", "high"):
            if k not in value:
                raise self.fail(key, f"a range needs low and high, e.g. {{low: 0.01, high: 10, log: true}}; {k} is missing")
        low = self.number(f"{key}.low", value["low"], minimum, strict)
        high = self.number(f"{key}.high", value["high"], minimum, strict)
        if not low < high:
            raise self.fail(key, f"low {value['low']!r} must be below high {value['high']!r}")
        flags = {}
        for k in ("log", "int"):
            flags[k] = value.get(k, False)
            if not isinstance(flags[k], bool):
                raise self.fail(f"{key}.{k}", f"expected true or false, got {flags[k]!r}")
        step = value.get("step")
        if step is not None:
            step = self.number(f"{key}.step", step, 0.0, strict=True)
            if flags["log"]:
                raise self.fail(key, "a range takes log or step, not both (Optuna samples a log range continuously)")
        if flags["log"] and low <= 0:
            raise self.fail(f"{key}.low", f"a log range needs low > 0, got {value['low']!r}")
        if flags["int"]:
            for k, v in (("low", value["low"]), ("high", value["high"]), ("step", step)):
                if v is not None and float(v) != int(v):
                    raise self.fail(f"{key}.{k}", f"an integer range (int: true) needs integers, got {v!r}")
            return Range(int(low), int(high), log=flags["log"], int=True, step=None if step is None else int(step))
        return Range(low, high, log=flags["log"], step=step)

    def number_axis(self, key: str, value: Any, minimum: float, strict: bool = False) -> list[float] | Range:
        """A numeric grid axis (list of numbers), or a range in an Optuna search."""
        if isinstance(value, dict):
            return self.range(key, value, minimum, strict)
        return self.number_list(key, value, minimum, strict)

    def lengths(self, key: str, value: Any) -> list[list[float]]:
        items = self.as_list(key, value)
        if all(_is_number(x) for x in items) and len(items) > 1:
            as_sets = ", ".join(f"[{format_value(x)}]" for x in items)
            raise self.fail(
                key,
                f"{items!r} is ambiguous: each entry is one multi-scale set of window lengths; "
                f"write [{as_sets}] for separate windows or [{items!r}] for one multi-scale set",
            )
        out: list[list[float]] = []
        for i, entry in enumerate(items):
            ls = self.number_list(f"{key}[{i}]", entry, 0.0, strict=True)
            ls = sorted(ls)
            if ls not in out:
                out.append(ls)
        return out

    # ---- sections
    def config(self, raw: dict) -> ExperimentConfig:
        top = [
            "target", "splits", "protocol", "feature_sets", "feature_set", "window", "models",
            "personalization", "postprocess", "tracking", "seed", "jobs", "unseen_listener", "search",
        ]
        self.mapping("", raw, top)
        d = ExperimentConfig()
        cfg = ExperimentConfig(source=self.source)
        cfg.search = self.search(raw.get("search"))
        self.search_method = cfg.search.method

        target = raw.get("target", d.target)
        if not isinstance(target, str) or not target:
            raise self.fail("target", f"expected a label target name such as valence_self, got {target!r}")
        cfg.target = target

        if isinstance(raw.get("protocol"), list):
            raise self.fail("protocol", "expected one protocol (val or loso), not a list")
        cfg.protocol = self.enum_list("protocol", raw.get("protocol", d.protocol), PROTOCOLS)[0]
        cfg.splits = self.splits(raw.get("splits", d.splits), cfg.protocol)
        cfg.feature_sets = self.feature_sets(raw.get("feature_sets", d.feature_sets))
        cfg.feature_set = self.feature_set(raw.get("feature_set", "all"), cfg.feature_sets)
        cfg.window = self.window(raw.get("window", {}))
        cfg.personalization = self.enum_list(
            "personalization", raw.get("personalization", d.personalization), PERSONALIZATIONS
        )
        cfg.postprocess = self.postprocess(raw.get("postprocess", {}))
        cfg.tracking = self.tracking(raw.get("tracking", {}))
        seed = raw.get("seed", d.seed)
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise self.fail("seed", f"expected an integer, got {seed!r}")
        cfg.seed = seed
        unseen = raw.get("unseen_listener", d.unseen_listener)
        if not isinstance(unseen, bool):
            raise self.fail("unseen_listener", f"expected true or false, got {unseen!r}")
        cfg.unseen_listener = unseen
        jobs = raw.get("jobs", None)
        if jobs is not None and (not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1):
            raise self.fail("jobs", f"expected a positive integer or null, got {jobs!r}")
        cfg.jobs = jobs
        cfg.models = self.models(raw["models"] if "models" in raw else [m.to_dict() for m in d.models], cfg)
        if cfg.search.method == "optuna":
            # lazy: the search module loads the sweep's modelling stack
            from .search import SearchSpaceError, search_space

            try:
                search_space(cfg)
            except SearchSpaceError as e:
                raise self.fail(e.key, str(e)) from None
        return cfg

    def search(self, value: Any) -> SearchConfig:
        value = self.mapping("search", value, list(SearchConfig().to_dict()))
        d = SearchConfig()
        out = SearchConfig()
        for k in ("method", "sampler", "track"):
            v = value.get(k, getattr(d, k))
            if isinstance(v, list):
                raise self.fail(f"search.{k}", f"expected one value, not a list {v!r}")
            valid = {"method": SEARCH_METHODS, "sampler": SEARCH_SAMPLERS, "track": TRACKS}[k]
            setattr(out, k, self.enum_list(f"search.{k}", v, valid)[0])
        for k, minimum in (("n_trials", 1), ("seed", 0), ("startup_trials", 0)):
            v = value.get(k, getattr(d, k))
            if not isinstance(v, int) or isinstance(v, bool) or v < minimum:
                raise self.fail(f"search.{k}", f"expected an integer >= {minimum}, got {v!r}")
            setattr(out, k, v)
        storage = value.get("storage")
        if storage is not None and (not isinstance(storage, str) or not storage):
            raise self.fail("search.storage", f"expected an Optuna storage URL such as sqlite:///mlruns/optuna.db, got {storage!r}")
        out.storage = storage
        return out  # with method grid the other keys are kept unused: --set search.method=grid runs the lists as a grid

    def splits(self, value: Any, protocol: str) -> dict[str, list[int]]:
        value = self.mapping("splits", value, SPLIT_NAMES)
        out: dict[str, list[int]] = {}
        owner: dict[int, str] = {}
        for name in SPLIT_NAMES:
            if name not in value or value[name] is None:
                continue
            stories = value[name] if isinstance(value[name], list) else [value[name]]
            out[name] = []
            for s in stories:
                if not isinstance(s, int) or isinstance(s, bool) or s < 1:
                    raise self.fail(f"splits.{name}", f"expected story numbers (integers >= 1), got {s!r}")
                if s in owner and owner[s] != name:
                    raise self.fail(f"splits.{name}", f"story {s} is also in splits.{owner[s]}; a story belongs to one split")
                owner[s] = name
                if s not in out[name]:
                    out[name].append(s)
        if not out.get("train"):
            raise self.fail("splits.train", "no training stories; list them, e.g. train: [2, 4, 5, 8]")
        if protocol == "val" and not out.get("val"):
            raise self.fail("splits.val", "protocol val needs validation stories, e.g. val: [1] (or use protocol: loso)")
        return out

    def feature_sets(self, value: Any) -> dict[str, list[str]]:
        value = self.mapping("feature_sets", value)
        if not value:
            raise self.fail("feature_sets", "no feature sets; define at least one name -> [role/channel, ...]")
        out: dict[str, list[str]] = {}
        for name, keys in value.items():
            key = f"feature_sets.{name}"
            chans: list[str] = []
            for ch in self.as_list(key, keys):
                parts = str(ch).split("/")
                if len(parts) != 2 or not parts[1]:
                    raise self.fail(key, f"{ch!r} is not ROLE/CHANNEL, e.g. listener/egemaps")
                if parts[0] not in ROLES:
                    raise self.fail(key, f"{ch!r}: role {parts[0]!r} is not one of {', '.join(ROLES)}{_suggest(parts[0], ROLES)}")
                if ch not in chans:
                    chans.append(str(ch))
            out[str(name)] = chans
        return out

    def feature_set(self, value: Any, sets: dict[str, list[str]]) -> list[str]:
        if value == "all" or value is None:
            return list(sets)
        names = []
        for v in self.as_list("feature_set", value):
            if v not in sets:
                raise self.fail("feature_set", f"{v!r} is not defined in feature_sets ({', '.join(sets)}){_suggest(v, sets)}")
            if v not in names:
                names.append(v)
        return names

    def window(self, value: Any) -> WindowConfig:
        allowed = ["lengths_s", "delay_s", "align", "stats", "train_hop_s"]
        value = self.mapping("window", value, allowed)
        d = WindowConfig()
        w = WindowConfig()
        lengths = value.get("lengths_s", d.lengths_s)
        if isinstance(lengths, dict):
            w.lengths_s = self.range("window.lengths_s", lengths, 0.0, strict=True)
        else:
            w.lengths_s = self.lengths("window.lengths_s", lengths)
        w.delay_s = self.number_axis("window.delay_s", value.get("delay_s", d.delay_s), 0.0)
        w.align = self.enum_list("window.align", value.get("align", d.align), ALIGNS)
        w.stats = self.enum_list("window.stats", value.get("stats", d.stats), STATS)
        hop = value.get("train_hop_s", d.train_hop_s)
        w.train_hop_s = self.number("window.train_hop_s", hop, 0.0, strict=True)
        return w

    def postprocess(self, value: Any) -> PostprocessConfig:
        value = self.mapping("postprocess", value, ["smooth_s", "smooth_method", "rescale", "fit_on"])
        d = PostprocessConfig()
        fit_on = value.get("fit_on", d.fit_on)
        if isinstance(fit_on, list):
            raise self.fail("postprocess.fit_on", f"expected one of {', '.join(FIT_ON)}, not a list")
        return PostprocessConfig(
            fit_on=self.enum_list("postprocess.fit_on", fit_on, FIT_ON)[0],
            smooth_s=self.number_axis("postprocess.smooth_s", value.get("smooth_s", d.smooth_s), 0.0),
            smooth_method=self.enum_list(
                "postprocess.smooth_method", value.get("smooth_method", d.smooth_method), SMOOTH_METHODS
            ),
            rescale=self.enum_list("postprocess.rescale", value.get("rescale", d.rescale), RESCALES),
        )

    def tracking(self, value: Any) -> TrackingConfig:
        value = self.mapping("tracking", value, ["uri", "experiment"])
        d = TrackingConfig()
        t = TrackingConfig(uri=value.get("uri", d.uri), experiment=value.get("experiment", d.experiment))
        for k in ("uri", "experiment"):
            if not isinstance(getattr(t, k), str) or not getattr(t, k):
                raise self.fail(f"tracking.{k}", f"expected a non-empty string, got {getattr(t, k)!r}")
        return t

    def models(self, value: Any, cfg: ExperimentConfig) -> list[ModelSpec]:
        from .models import MODEL_PARAMS  # lazy: the estimator factory imports scikit-learn

        if not isinstance(value, list) or not value:
            raise self.fail("models", "expected a list of {name: MODEL, HYPERPARAMETER: [values]} entries")
        out: list[ModelSpec] = []
        for i, entry in enumerate(value):
            key = f"models[{i}]"
            if isinstance(entry, str):
                entry = {"name": entry}
            if not isinstance(entry, dict) or "name" not in entry:
                raise self.fail(key, f"expected a mapping with a name, e.g. {{name: ridge, alpha: [1, 10]}}, got {entry!r}")
            name = entry["name"]
            if name not in MODEL_PARAMS:
                raise self.fail(f"{key}.name", f"unknown model {name!r}{_suggest(name, sorted(MODEL_PARAMS))}")
            spec = ModelSpec(str(name))
            allowed = list(MODEL_PARAMS[name])
            for hp, grid in entry.items():
                if hp in ("name", "only"):
                    continue
                if hp not in allowed:
                    hint = _suggest(hp, allowed + ["only"]) if allowed else "; this model has no hyperparameters"
                    raise self.fail(f"{key}.{hp}", f"unknown hyperparameter of {name}{hint}")
                if isinstance(grid, dict):
                    spec.params[hp] = self.range(f"{key}.{hp}", grid)
                else:
                    spec.params[hp] = self.as_list(f"{key}.{hp}", grid)
            spec.only = self.only(f"{key}.only", entry.get("only"), cfg)
            out.append(spec)
        return out

    def only(self, key: str, value: Any, cfg: ExperimentConfig) -> dict[str, list[Any]]:
        flat: dict[str, Any] = {}

        def walk(prefix: str, node: Any) -> None:
            if isinstance(node, dict) and prefix not in ONLY_AXES:
                for k, v in node.items():
                    walk(f"{prefix}.{k}" if prefix else str(k), v)
            else:
                flat[prefix] = node

        walk("", self.mapping(key, value))
        enums = {
            "feature_set": list(cfg.feature_sets),
            "window.align": ALIGNS,
            "personalization": PERSONALIZATIONS,
            "postprocess.smooth_method": SMOOTH_METHODS,
            "postprocess.rescale": RESCALES,
        }
        out: dict[str, list[Any]] = {}
        for axis, vals in flat.items():
            k = f"{key}.{axis}"
            if axis not in ONLY_AXES:
                raise self.fail(k, f"not a grid axis a model can narrow{_suggest(axis, ONLY_AXES)}")
            if axis == "window.lengths_s":
                out[axis] = self.lengths(k, vals)
            elif axis in ("window.delay_s", "postprocess.smooth_s"):
                out[axis] = self.number_list(k, vals, 0.0)
            else:
                out[axis] = self.enum_list(k, vals, enums[axis])
        return out
