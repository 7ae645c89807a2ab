"""The configurations of a config: :class:`Trial` (one child run each) and the grid's expansion
(:func:`expand`: every list an axis, a model's ``only`` narrowing them for that model).

>>> trials = expand(ExperimentConfig(feature_set=["listener"], models=[ModelGrid("ridge", {"alpha": [1.0]})]))
>>> len(trials), trials[0].params()["window.lengths_s"], trials[0].track
(48, '4', 'generalized')
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, NamedTuple, TypeVar

import yaml

from featurestore.errors import ConfigError
from featurestore.storage.store import LABEL_FPS

from .metrics import DEFAULT_METRIC, get_metric
from .models import model_spec
from .options import CAUSAL_SMOOTH_METHODS, KFOLD_PROTOCOLS
from .schema import ONLY_AXES, ExperimentConfig, ModelGrid, Range, config_hash, has_ranges
from .tracks import track_of

#: params derived from the others and from the store (:meth:`Trial.params`), left out of
#: :meth:`Trial.hash`: a configuration's hash does not depend on which store it is counted on
DERIVED_PARAMS = ("causal", "lookahead_s", "features.lookahead_s")


def lookahead_frames(
    lengths_s: tuple[float, ...],
    delay_s: float,
    align: str,
    smooth_s: float = 0.0,
    smooth_method: str = "",
    fps: float = LABEL_FPS,
) -> float:
    """How many label frames after frame t the prediction at t reads through its windows and its
    smoothing, less the delay (``inf`` for the zero-phase Butterworth; docs/config.md, Future frames)."""
    d = int(round(float(delay_s) * fps))
    ahead = max(
        (max(1, int(round(float(L) * fps))) // 2 if align == "centred" else 0) for L in lengths_s
    )
    if smooth_s and smooth_method not in CAUSAL_SMOOTH_METHODS:
        if smooth_method == "butterworth":
            return math.inf
        ahead += int(round(float(smooth_s) * fps)) // 2
    return float(ahead - d)


class WindowKey(NamedTuple):
    """What determines the windowed features of a trial: the first six fields of a :class:`Trial`."""

    feature_set: str  # a name of the config's feature_sets
    channels: tuple[str, ...]  # its role/channel keys
    lengths_s: tuple[float, ...]  # one multi-scale set of window lengths (seconds)
    delay_s: float  # label delay (seconds): features at t predict the label at t + delay
    align: str  # centred on the frame, or causal (ending at it)
    stats: tuple[str, ...]  # per-window statistics (experiments.config.options.STATS)


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
    """One configuration of the grid: everything needed to train, post-process and score once
    (the window fields are :class:`WindowKey`'s; ``hop_s``: the training rows' hop)."""

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
    #: a grid configuration fitted without each listener for nested selection
    unseen_nested: bool = False
    #: folds of the k-fold protocols (0 for the others)
    folds: int = 0
    #: the metric scored and chosen by, and how a split's values of it are averaged
    metric: str = DEFAULT_METRIC
    averaging: str = "sessions"
    #: the labels trained and scored on (:func:`gold_standard_text`)
    gold_standard: str = "stored"
    #: name the target in :meth:`label` (a sweep of several targets); not a param, not hashed
    named_target: bool = False
    #: seconds after a label frame that its channels read of the source (set by
    #: :func:`experiments.data.lookahead.with_channel_lookahead`; None: not counted), not hashed
    channel_lookahead_s: float | None = None

    @property
    def track(self) -> str:
        """``personalized`` when anything in it uses who is listening, else ``generalized``."""
        return track_of(self.personalization, self.rescale)

    @property
    def window_lookahead_s(self) -> float:
        """Seconds of label frames after t the prediction at t reads (:func:`lookahead_frames`)."""
        if model_spec(self.model).inputs == "position":  # it reads the session's length
            return math.inf
        return (
            lookahead_frames(
                self.lengths_s, self.delay_s, self.align, self.smooth_s, self.smooth_method
            )
            / LABEL_FPS
        )

    @property
    def lookahead_s(self) -> float:
        """Seconds of the source after t the prediction at t reads (windows, smoothing and the
        channels' own reads); ``inf`` while the channels' are not counted."""
        if self.channel_lookahead_s is None:
            return math.inf
        return round(self.window_lookahead_s + self.channel_lookahead_s, 6)

    @property
    def causal(self) -> bool:
        """Whether the prediction at t reads nothing of the source after t (it could run live)."""
        return self.lookahead_s <= 0

    @property
    def hyperparams(self) -> dict[str, Any]:
        """Model hyperparameters (lists restored from tuples)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self.model_params}

    def params(self) -> dict[str, str]:
        """Flat dotted params for MLflow (all values as text, see :func:`format_value`)."""
        unseen = self.unseen_listener and self.track == "generalized"
        return {
            "features.set": self.feature_set,
            "features.channels": ",".join(self.channels),
            "window.lengths_s": format_value(self.lengths_s),
            "window.delay_s": format_value(self.delay_s),
            "window.align": self.align,
            "window.stats": ",".join(self.stats),
            "window.train_hop_s": format_value(self.hop_s),
            "model.name": self.model,
            **{f"model.{k}": format_value(v) for k, v in self.model_params},
            "personalization": self.personalization,
            "postprocess.smooth_s": format_value(self.smooth_s),
            "postprocess.smooth_method": self.smooth_method,
            "postprocess.rescale": self.rescale,
            "postprocess.fit_on": self.fit_on,
            "track": self.track,
            "causal": format_value(self.causal),
            "lookahead_s": format_value(self.lookahead_s),
            "features.lookahead_s": format_value(self.channel_lookahead_s),
            # "nested": fitted without each listener for nested selection (under loso, more
            # fits than a chosen configuration's unseen-listener run: a run of one is not
            # reused for the other)
            "unseen_listener": "nested" if unseen and self.unseen_nested else format_value(unseen),
            "target": self.target,
            "protocol": self.protocol,
            "seed": format_value(self.seed),
            "splits": ";".join(f"{k}={format_value(v)}" for k, v in self.splits) or "shard",
            "folds": format_value(self.folds),
            "metric": self.metric,
            # the param of the config's ``averaging`` is named after the metric (``ccc_averaging``):
            # the hash of every configuration scored by CCC stays what it was before the key's rename
            get_metric(self.metric).column("averaging"): self.averaging,
            "gold_standard": self.gold_standard,
        }

    def hash(self) -> str:
        """Stable short hash of :meth:`params` (identifies a finished configuration on resume)."""
        return config_hash({k: v for k, v in self.params().items() if k not in DERIVED_PARAMS})

    def window_key(self) -> WindowKey:
        """The part of the trial that determines its windowed features."""
        return WindowKey(*(getattr(self, f) for f in WindowKey._fields))

    def fit_key(self) -> Trial:
        """The part of the trial that determines its fitted models (all but the post-processing
        and the unseen-listener marks): configurations that differ only there share their fits."""
        return replace(
            self,
            smooth_s=0.0,
            smooth_method="",
            rescale="",
            unseen_listener=False,
            unseen_nested=False,
        )

    def label(self) -> str:
        """Short human-readable name, e.g. ``both per_listener ridge w2s d0s sm2s (alpha=10)``."""
        hp = ",".join(f"{k}={format_value(v)}" for k, v in self.model_params)
        return " ".join(
            part
            for part in (
                self.feature_set,
                self.personalization,
                self.model,
                f"w{format_value(self.lengths_s)}s",
                f"d{format_value(self.delay_s)}s",
                f"sm{format_value(self.smooth_s)}s",
                f"rescale={self.rescale}" if self.rescale not in ("", "none") else "",
                f"({hp})" if hp else "",
                f"target={self.target}" if self.named_target else "",
            )
            if part
        )


def gold_standard_text(gs: Any) -> str:
    """A config's ``gold_standard`` as a trial param, e.g. ``stored`` or ``mean,align_lags,max_lag_s=5``.

    >>> from experiments.config.gold_standard import GoldStandard
    >>> gold_standard_text(GoldStandard()), gold_standard_text(GoldStandard("ewe", True, 3.0))
    ('stored', 'ewe,align_lags,max_lag_s=3')
    """
    parts = [gs.method]
    if gs.align_lags:
        parts += ["align_lags", f"max_lag_s={format_value(gs.max_lag_s)}"]
    return ",".join(parts)


def _param_value(text: str) -> Any:
    """A hyperparameter's MLflow text back as a value (a number, bool or None; else the text)."""
    if text == "None":
        return None
    value = yaml.safe_load(text)
    return value if isinstance(value, int | float | bool) else text


def trial_from_params(params: Mapping[str, str]) -> Trial:
    """The :class:`Trial` whose :meth:`Trial.params` are ``params`` (a child run's MLflow params);
    raises KeyError naming a missing param."""
    try:

        def floats(key: str) -> tuple[float, ...]:
            return tuple(float(v) for v in params[key].split(","))

        splits = tuple(
            (name, tuple(int(s) for s in stories.split(",") if s))
            for name, _, stories in (p.partition("=") for p in params["splits"].split(";") if p)
            if params["splits"] != "shard"  # each shard's own split
        )
        return Trial(
            feature_set=params["features.set"],
            channels=tuple(params["features.channels"].split(",")),
            lengths_s=floats("window.lengths_s"),
            delay_s=float(params["window.delay_s"]),
            align=params["window.align"],
            stats=tuple(params["window.stats"].split(",")),
            hop_s=float(params["window.train_hop_s"]),
            model=params["model.name"],
            model_params=tuple(
                (k.removeprefix("model."), _param_value(v))
                for k, v in params.items()
                if k.startswith("model.") and k != "model.name"
            ),
            personalization=params["personalization"],
            smooth_s=float(params["postprocess.smooth_s"]),
            smooth_method=params["postprocess.smooth_method"],
            rescale=params["postprocess.rescale"],
            target=params["target"],
            protocol=params["protocol"],
            seed=int(params["seed"]),
            splits=splits,
            fit_on=params["postprocess.fit_on"],
            unseen_listener=params["unseen_listener"] in ("true", "nested"),
            unseen_nested=params["unseen_listener"] == "nested",
            folds=int(params["folds"]),
            metric=params["metric"],
            averaging=params[get_metric(params["metric"]).column("averaging")],
            gold_standard=params["gold_standard"],
            channel_lookahead_s=None
            if params["features.lookahead_s"] == "None"
            else float(params["features.lookahead_s"]),
        )
    except KeyError as e:
        raise KeyError(f"run params lack {e.args[0]!r}: not a configuration's child run") from None


T = TypeVar("T")

#: a grid's axes: dotted config key -> its list of values (a grid has no ranges)
GridAxes = dict[str, list[Any]]
#: the axes that make a window key, in the order a grid is expanded
WINDOW_AXES = ("feature_set", "window.lengths_s", "window.delay_s", "window.align")


def listed(cfg: ExperimentConfig, key: str, axis: list[T] | Range) -> list[T]:
    """The values of a grid axis ``key``; a range is refused (ConfigError)."""
    if isinstance(axis, Range):
        raise ConfigError(
            f"{cfg.source}: {key} is a range ({{low, high}}), which an Optuna search samples; "
            "a grid lists its values"
        )
    return axis


def config_axes(cfg: ExperimentConfig) -> dict[str, list[Any] | Range]:
    """Each axis a configuration takes one value of (besides its model): the config's list
    (window lengths as tuples), or a search's :class:`~.schema.Range`."""
    w, p = cfg.window, cfg.postprocess
    lengths = w.lengths_s if isinstance(w.lengths_s, Range) else [tuple(x) for x in w.lengths_s]
    axes = [cfg.feature_set, lengths, w.delay_s, w.align, cfg.personalization, p.smooth_s]
    axes += [p.smooth_method, p.rescale]
    return {k: v if isinstance(v, Range) else list(v) for k, v in zip(ONLY_AXES, axes, strict=True)}


def _axis_values(cfg: ExperimentConfig) -> GridAxes:
    return {k: listed(cfg, k, v) for k, v in config_axes(cfg).items()}


def make_trial(
    cfg: ExperimentConfig, axes: dict[str, Any], model: str, hyperparams: dict[str, Any]
) -> Trial:
    """The configuration of ``cfg`` with one value of each axis (``axes``), ``model`` and its ``hyperparams``."""
    return Trial(
        feature_set=axes["feature_set"],
        channels=tuple(cfg.feature_sets[axes["feature_set"]]),
        lengths_s=tuple(float(x) for x in axes["window.lengths_s"]),
        delay_s=float(axes["window.delay_s"]),
        align=axes["window.align"],
        stats=tuple(cfg.window.stats),
        hop_s=cfg.window.train_hop_s,
        model=model,
        model_params=tuple(
            (k, tuple(v) if isinstance(v, list) else v) for k, v in hyperparams.items()
        ),
        personalization=axes["personalization"],
        smooth_s=float(axes["postprocess.smooth_s"]),
        smooth_method=axes["postprocess.smooth_method"],
        rescale=axes["postprocess.rescale"],
        target=cfg.target,
        protocol=cfg.protocol,
        seed=cfg.seed,
        splits=tuple((k, tuple(int(s) for s in v)) for k, v in cfg.splits.items()),
        fit_on=cfg.postprocess.fit_on,
        folds=cfg.folds if cfg.protocol in KFOLD_PROTOCOLS else 0,
        metric=cfg.metric,
        averaging=cfg.averaging,
        gold_standard=gold_standard_text(cfg.gold_standard),
    )


def model_axes(cfg: ExperimentConfig, spec: ModelGrid) -> GridAxes:
    """The grid axes for one model: the global values, narrowed by the model's ``only``."""
    return narrowed(_axis_values(cfg), spec)


def narrowed(axes: dict[str, Any], spec: ModelGrid) -> dict[str, Any]:
    """``axes`` narrowed to the values the model's ``only`` lists (inside a range too); where it
    lists none of them (e.g. after ``--set window.delay_s=[3]`` on ``only: {window.delay_s: [2]}``)
    the model follows the whole axis instead of dropping out."""
    axes = dict(axes)
    for axis, wanted in spec.only.items():
        wanted = [tuple(x) if isinstance(x, list) else x for x in wanted]
        current = axes[axis]
        if isinstance(current, Range):
            kept = [float(v) for v in wanted if current.contains(v)]
        else:
            kept = [v for v in current if v in wanted]
        if kept:
            axes[axis] = kept
    return axes


def expand(cfg: ExperimentConfig) -> list[Trial]:
    """Every configuration of the grid, grouped by window key (features computed once per key);
    with ``smooth_s`` 0 only the first smoothing method; duplicates dropped; with several targets
    the grid once per target. A config with ranges (a search space) is refused (ConfigError)."""
    if has_ranges(cfg):
        raise ConfigError(
            f"{cfg.source}: the config has ranges ({{low, high}}), which an Optuna search samples; "
            "a grid lists values. Run it with experiments.studies.search.run_search (experiments sweep does)"
        )
    out: dict[str, Trial] = {}  # hash -> the first configuration of it
    for i, spec in enumerate(cfg.models):
        axes = model_axes(cfg, spec)
        grids = {n: listed(cfg, f"models[{i}].{n}", v) for n, v in spec.params.items()}
        first_method = axes["postprocess.smooth_method"][0]
        for values in itertools.product(*grids.values()):
            for point in itertools.product(*axes.values()):
                at = dict(zip(axes, point, strict=True))
                smooth_s, method = at["postprocess.smooth_s"], at["postprocess.smooth_method"]
                if smooth_s == 0 and method != first_method:
                    continue  # nothing to smooth: the first method only
                trial = make_trial(cfg, at, spec.name, dict(zip(grids, values, strict=True)))
                out.setdefault(trial.hash(), trial)
    # grouped by window key, in the grid's order (stable: each model's configurations in order)
    keys = itertools.product(*(_axis_values(cfg)[a] for a in WINDOW_AXES))
    order = {key: n for n, key in enumerate(keys)}
    trials = sorted(
        out.values(), key=lambda t: order[t.feature_set, t.lengths_s, t.delay_s, t.align]
    )
    if len(cfg.all_targets()) > 1:  # the grid once per target, each trial named with its target
        trials = [
            replace(t, target=x, named_target=True) for x in cfg.all_targets() for t in trials
        ]
    return trials


#: the configurations a grid may have unless the user raises it (``--max-configurations``)
MAX_CONFIGURATIONS = 10_000


def grid_size(cfg: ExperimentConfig) -> tuple[int, dict[str, int]]:
    """(configurations, axis -> its number of values) of ``cfg``'s grid, counted without
    expanding it: :func:`expand`'s length unless two model entries repeat a configuration."""
    total, sizes = 0, {k: len(listed(cfg, k, v)) for k, v in config_axes(cfg).items()}
    for i, spec in enumerate(cfg.models):
        axes = model_axes(cfg, spec)
        n = math.prod(len(v) for k, v in axes.items() if not k.startswith("postprocess.smooth"))
        smooth_s = axes["postprocess.smooth_s"]
        zero = smooth_s.count(0)
        n *= zero + (len(smooth_s) - zero) * len(axes["postprocess.smooth_method"])
        for name, values in spec.params.items():
            sizes[f"models[{i}].{name}"] = len(listed(cfg, f"models[{i}].{name}", values))
            n *= sizes[f"models[{i}].{name}"]
        total += n
    sizes["models"], sizes["target"] = len(cfg.models), len(cfg.all_targets())
    return total * sizes["target"], sizes
