"""The experiment config's schema: typed dataclasses with their defaults, and the config hash (see
docs/design.md#experiment-config; every list is an axis of the grid, :mod:`.grid`).

>>> cfg = ExperimentConfig()
>>> cfg.feature_set, cfg.window.align, len(cfg.hash())
(['speaker', 'listener', 'both'], ['centred'], 12)
>>> Range(0.01, 10, log=True).to_dict(), Range(1, 8).contains(9)
({'low': 0.01, 'high': 10, 'log': True}, False)
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import yaml

from featurestore.sources.manifest import SPLITS  # the official split: defined there only

from .fusion import FusionConfig
from .gold_standard import GoldStandard
from .metrics import DEFAULT_METRIC
from .options import KFOLD_PROTOCOLS

#: trial axes a model entry may narrow with ``only`` (dotted key -> attribute of the config)
ONLY_AXES = tuple(
    "feature_set window.lengths_s window.delay_s window.align personalization "
    "postprocess.smooth_s postprocess.smooth_method postprocess.rescale".split()
)


def _default_feature_sets() -> dict[str, list[str]]:
    return {
        "speaker": ["speaker/face_geom", "speaker/egemaps"],
        "listener": ["listener/face_geom", "listener/egemaps"],
        "both": ["speaker/face_geom", "speaker/egemaps", "listener/face_geom", "listener/egemaps"],
    }


#: the top-level keys of a config file, in the order ``--print-config`` writes them
TOP_KEYS = tuple(
    "target splits protocol folds metric averaging gold_standard feature_sets feature_set window "
    "models personalization postprocess tracking seed unseen_listener jobs backend search fusion "
    "importance".split()
)
#: keys of a range mapping (:class:`Range`)
RANGE_KEYS = ("low", "high", "log", "int", "step")
#: search methods: ``grid`` (every combination, :func:`experiments.studies.sweep.run_sweep`) or ``optuna``
SEARCH_METHODS = ("grid", "optuna")
#: Optuna samplers a search may name (``grid``: Optuna's GridSampler over lists only)
SEARCH_SAMPLERS = ("tpe", "random", "grid")


@dataclass(frozen=True)
class Range:
    """A range an Optuna search samples from, in the axis' units (``int``: integers; ``log``:
    uniform in log space; ``step``: a grid of ``low + k * step``)."""

    low: float
    high: float
    log: bool = False
    int: bool = False
    step: float | None = None

    def to_dict(self) -> dict:
        """``low`` and ``high``, and ``log``, ``int`` and ``step`` when set."""
        d = asdict(self)
        return {k: v for k, v in d.items() if k in ("low", "high") or v not in (False, None)}

    def contains(self, x: Any) -> bool:
        return is_number(x) and self.low <= x <= self.high


def is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _values(v: Any) -> Any:
    return v.to_dict() if isinstance(v, Range) else list(v)


def has_ranges(cfg: ExperimentConfig) -> bool:
    """Whether any axis or hyperparameter of ``cfg`` is a :class:`Range` (a search space, not a grid)."""
    axes = [cfg.window.lengths_s, cfg.window.delay_s, cfg.postprocess.smooth_s]
    axes += [v for m in cfg.models for v in m.params.values()]
    return any(isinstance(a, Range) for a in axes)


@dataclass
class SearchConfig:
    """How the configurations are chosen: ``grid`` (all of them) or an ``optuna`` search
    (docs/config.md, Optuna search)."""

    method: str = "grid"
    n_trials: int = 20
    sampler: str = "tpe"
    seed: int = 0
    track: str = "generalized"
    startup_trials: int = 10
    storage: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class WindowConfig:
    """Windowing grid: each ``lengths_s`` entry is one multi-scale set of window lengths (s); in
    an Optuna search ``lengths_s`` (one length) and ``delay_s`` may be a :class:`Range`."""

    lengths_s: list[list[float]] | Range = field(default_factory=lambda: [[4.0], [2.0, 8.0]])
    delay_s: list[float] | Range = field(default_factory=lambda: [0.0, 2.0])
    align: list[str] = field(default_factory=lambda: ["centred"])
    stats: list[str] = field(default_factory=lambda: ["mean", "std", "slope"])
    #: training rows are taken every ``train_hop_s`` seconds; predictions cover every frame
    train_hop_s: float = 0.2


@dataclass
class ModelGrid:
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


def _default_models() -> list[ModelGrid]:
    return [
        ModelGrid("ridge", {"alpha": [1.0, 10.0]}),
        ModelGrid("linear_svr", {"C": [0.01, 0.1]}),
        ModelGrid("xgboost", {"n_estimators": [300], "max_depth": [3], "learning_rate": [0.05]}),
    ]


@dataclass
class PostprocessConfig:
    """Prediction smoothing (seconds, 0 = none; or a :class:`Range`) and rescaling."""

    smooth_s: list[float] | Range = field(default_factory=lambda: [0.0, 4.0])
    smooth_method: list[str] = field(default_factory=lambda: ["moving_average"])
    rescale: list[str] = field(default_factory=lambda: ["none", "train"])
    #: what rescaling and per-listener calibration are fitted on (one of ``FIT_ON``)
    fit_on: str = "out_of_fold"


@dataclass
class ImportanceConfig:
    """Permutation importance of each track's chosen configuration in ``experiments ablate``:
    ``repeats`` random lags per session of the feature groups of ``levels``, scored on ``split``."""

    repeats: int = 5
    levels: list[str] = field(default_factory=lambda: ["channel", "column"])
    split: str = "test"

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class TrackingConfig:
    """MLflow tracking: ``uri``, ``experiment`` and ``artifacts`` (docs/config.md)."""

    uri: str = "mlruns"
    experiment: str = "omg-default"
    artifacts: str | None = None


@dataclass
class ExperimentConfig:
    """A resolved, validated experiment config (its keys are a contract: docs/design.md#experiment-config)."""

    #: the label target predicted; with several the first of ``targets``
    target: str = "valence_self"
    #: every target swept (empty: just ``target``)
    targets: list[str] = field(default_factory=list)
    splits: dict[str, list[int]] = field(
        default_factory=lambda: {name: list(stories) for name, stories in SPLITS.items()}
    )
    protocol: str = "val"
    folds: int = 5
    feature_sets: dict[str, list[str]] = field(default_factory=_default_feature_sets)
    #: names of the feature sets to sweep (default: all)
    feature_set: list[str] = field(default_factory=list)
    window: WindowConfig = field(default_factory=WindowConfig)
    models: list[ModelGrid] = field(default_factory=_default_models)
    personalization: list[str] = field(
        default_factory=lambda: ["global", "per_listener", "global_calibrated"]
    )
    postprocess: PostprocessConfig = field(default_factory=PostprocessConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    metric: str = DEFAULT_METRIC
    averaging: str = "sessions"  # unless the config says, the metric's own
    gold_standard: GoldStandard = field(default_factory=GoldStandard)
    seed: int = 0
    #: score the generalized track on listeners left out of training too
    unseen_listener: bool = True
    #: how the unseen-listener configuration is chosen, and for ``fixed`` which one
    unseen_selection: str = "nested"
    unseen_configuration: str = ""
    jobs: int | None = None  # None lets the sweep decide
    backend: str = "processes"
    search: SearchConfig = field(default_factory=SearchConfig)
    fusion: FusionConfig = field(default_factory=FusionConfig)
    importance: ImportanceConfig | None = None
    #: where the config came from (file path or ``<dict>``); not part of ``to_dict``
    source: str = field(default="<defaults>", compare=False)

    def __post_init__(self) -> None:
        if not self.feature_set:
            self.feature_set = list(self.feature_sets)

    def all_targets(self) -> list[str]:
        """The label targets swept."""
        return list(self.targets) or [self.target]

    def for_target(self, target: str) -> ExperimentConfig:
        """This config with ``target`` as its only target (one target's part of a sweep)."""
        return replace(self, target=target, targets=[])

    def to_dict(self) -> dict:
        """The resolved config as plain YAML/JSON-dumpable types (every default filled in;
        ``folds`` only under the k-fold protocols it applies to)."""
        return {
            "target": self.target if len(self.all_targets()) == 1 else self.all_targets(),
            "splits": {k: list(v) for k, v in self.splits.items()} if self.splits else "shard",
            "protocol": self.protocol,
            **({"folds": self.folds} if self.protocol in KFOLD_PROTOCOLS else {}),
            "metric": self.metric,
            "averaging": self.averaging,
            "gold_standard": self.gold_standard.to_dict(),
            "feature_sets": {k: list(v) for k, v in self.feature_sets.items()},
            "feature_set": list(self.feature_set),
            "window": {
                **asdict(self.window),
                "lengths_s": _values(lengths)
                if isinstance(lengths := self.window.lengths_s, Range)
                else [list(x) for x in lengths],
                "delay_s": _values(self.window.delay_s),
            },
            "models": [m.to_dict() for m in self.models],
            "personalization": list(self.personalization),
            "postprocess": {
                **asdict(self.postprocess),
                "smooth_s": _values(self.postprocess.smooth_s),
            },
            "tracking": {k: v for k, v in asdict(self.tracking).items() if k != "artifacts" or v},
            "seed": self.seed,
            # the selection spelt out whenever the protocol is on: `true` alone would not say it
            "unseen_listener": {
                "selection": self.unseen_selection,
                "configuration": self.unseen_configuration,
            }
            if self.unseen_listener
            else False,
            "jobs": self.jobs,
            "backend": self.backend,
            "search": self.search.to_dict(),
            "fusion": self.fusion.to_dict(),
            "importance": None if self.importance is None else self.importance.to_dict(),
        }

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
