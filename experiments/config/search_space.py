"""The search space of an Optuna search, and the configuration each Optuna trial samples from it.

A config with ``search: {method: optuna, ...}`` (see :class:`experiments.config.schema.SearchConfig`)
is a search space instead of a grid: every list stays a set of categorical choices and an
axis or hyperparameter may be a range (:class:`experiments.config.schema.Range`). The space
is the configurations the search's track chooses among (the tracks nest,
:func:`experiments.config.tracks.candidates`): a generalized search proposes only configurations
that do not know who is listening, a personalized search any configuration
(:func:`search_space`). :mod:`experiments.studies.search` runs the study; the config validator
checks here that the space is not empty.

>>> import optuna
>>> from experiments.config import from_dict
>>> cfg = from_dict({"search": {"method": "optuna", "track": "generalized"}, "feature_set": ["listener"],
...                  "models": [{"name": "ridge", "alpha": {"low": 0.1, "high": 10, "log": True}}]})
>>> space = search_space(cfg)
>>> [m.label for m in space.models], space.models[0].axes["personalization"]
(['ridge'], ['global'])
>>> trial = sample_trial(space, cfg, optuna.trial.FixedTrial({"ridge.alpha": 2.0, "window.lengths_s": "2,8",
...     "window.delay_s": 0.0, "postprocess.smooth_s": 0.0, "postprocess.rescale": "train"}))
>>> trial.model, trial.hyperparams, trial.lengths_s, trial.track
('ridge', {'alpha': 2.0}, (2.0, 8.0), 'generalized')
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .grid import Trial, format_value
from .models import BASELINE
from .options import IDENTITY_PERSONALIZATIONS, IDENTITY_RESCALES, KFOLD_PROTOCOLS, TRACKS
from .schema import ExperimentConfig, ModelGrid, Range


class SearchSpaceError(ValueError):
    """A config whose search space is empty or unusable; ``key`` is the config key to fix."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


# --------------------------------------------------------------------------- the space
#: a search axis or hyperparameter: its list of choices, or a range (numeric ones only)
Choices = list[Any] | Range


def listed(choices: Choices, key: str) -> list[Any]:
    """The choices of ``key`` where they must be a list: the categorical axes (the validator
    allows ranges on numeric axes and hyperparameters only), or an axis checked to be a list.

    Raises:
        SearchSpaceError: ``choices`` is a range.
    """
    if isinstance(choices, Range):
        raise SearchSpaceError(key, f"{key} is a range here, but it takes a list of values")
    return choices


@dataclass
class ModelSpace:
    """One ``models`` entry in a search: its choices per axis (lists or ranges), after its
    ``only`` and the track restriction of ``personalization``."""

    label: (
        str  # the model's choice in the ``model`` parameter: its name, or ``name#i`` when repeated
    )
    index: int  # its place in ``models``
    spec: ModelGrid
    axes: dict[str, Choices]

    def choices(self, axis: str) -> list[Any]:
        """The list of choices of a categorical ``axis`` (see :func:`listed`)."""
        return listed(self.axes[axis], axis)


@dataclass
class SearchSpace:
    """What a search samples: a model entry, then each axis and hyperparameter of it."""

    track: str
    models: list[ModelSpace]
    full: dict[str, Choices]  # the global axes, before any narrowing

    def grid(self) -> dict[str, list[Any]]:
        """Every Optuna parameter a trial may suggest -> its (encoded) choices, for Optuna's
        ``GridSampler``; raises :class:`SearchSpaceError` when a parameter is a range."""
        out: dict[str, list[Any]] = {}

        def add(name: str, choices: Any, key: str) -> None:
            if isinstance(choices, Range):
                raise SearchSpaceError(
                    "search.sampler",
                    f"grid walks lists of values, but {key} is a range "
                    "(use sampler tpe or random, or list its values)",
                )
            if len(choices) > 1:
                out[name] = [_encode(c) for c in choices]

        add("model", [m.label for m in self.models], "models")
        for m in self.models:
            for axis in (
                "feature_set",
                "window.lengths_s",
                "window.delay_s",
                "window.align",
                "personalization",
                "postprocess.smooth_s",
            ):
                add(self.name(axis, m.axes[axis]), m.axes[axis], axis)
            for hp, values in m.spec.params.items():
                add(f"{m.label}.{hp}", values, f"models[{m.index}].{hp}")
            for pers in m.choices("personalization"):
                rescales = self.rescales(m, pers)
                add(self.name("postprocess.rescale", rescales), rescales, "postprocess.rescale")
            # a list: add() refused a range above
            if any(s != 0 for s in m.choices("postprocess.smooth_s")):
                add(
                    self.name("postprocess.smooth_method", m.axes["postprocess.smooth_method"]),
                    m.axes["postprocess.smooth_method"],
                    "postprocess.smooth_method",
                )
        return out

    def name(self, axis: str, choices: Choices) -> str:
        """The Optuna parameter of ``axis`` with these choices: the axis itself when they are
        the config's, else the axis with its choices (``personalization[per_listener]``), so a
        parameter name always means one distribution, as Optuna requires."""
        if isinstance(choices, Range) or choices == self.full[axis]:
            return axis
        return f"{axis}[{'|'.join(format_value(c) for c in choices)}]"

    def rescales(self, m: ModelSpace, personalization: str) -> list[str]:
        """The rescaling choices a configuration with ``personalization`` may take on the track:
        every one on the personalized track, those without the listener's identity on the
        generalized track."""
        rescales = m.choices("postprocess.rescale")
        if self.track == "generalized":
            return [r for r in rescales if r not in IDENTITY_RESCALES]
        return rescales


def _global_axes(cfg: ExperimentConfig) -> dict[str, Choices]:
    lengths = cfg.window.lengths_s
    return {
        "feature_set": list(cfg.feature_set),
        "window.lengths_s": lengths if isinstance(lengths, Range) else [tuple(x) for x in lengths],
        "window.delay_s": cfg.window.delay_s
        if isinstance(cfg.window.delay_s, Range)
        else list(cfg.window.delay_s),
        "window.align": list(cfg.window.align),
        "personalization": list(cfg.personalization),
        "postprocess.rescale": list(cfg.postprocess.rescale),
        "postprocess.smooth_s": cfg.postprocess.smooth_s
        if isinstance(cfg.postprocess.smooth_s, Range)
        else list(cfg.postprocess.smooth_s),
        "postprocess.smooth_method": list(cfg.postprocess.smooth_method),
    }


def search_space(cfg: ExperimentConfig) -> SearchSpace:
    """The search space of ``cfg`` for its ``search.track``.

    A model's ``only`` narrows an axis as in the grid (:func:`experiments.config.grid.model_axes`):
    it keeps the listed values of a list, and the listed values inside a range (which then
    become that model's choices). Then the track: a generalized search keeps the
    personalizations and rescalings that do not use the listener's identity; a personalized
    search keeps every configuration (the tracks nest: a model that does not know who is
    listening may be submitted to the personalized track too). A model left without a choice
    on the track drops out of the search.

    Raises:
        SearchSpaceError: no model has a configuration on the track.
    """
    track = cfg.search.track
    full = _global_axes(cfg)
    labels = [m.name for m in cfg.models]
    models: list[ModelSpace] = []
    dropped: list[str] = []
    for i, spec in enumerate(cfg.models):
        label = spec.name if labels.count(spec.name) == 1 else f"{spec.name}#{i}"
        axes = dict(full)
        for axis, wanted in spec.only.items():
            wanted = [tuple(x) if isinstance(x, list) else x for x in wanted]
            current = axes[axis]
            if isinstance(current, Range):
                kept = [float(v) for v in wanted if current.contains(v)]
            else:
                kept = [v for v in current if v in wanted]
            if kept:
                axes[axis] = kept
        m = ModelSpace(label, i, spec, axes)
        personalizations = m.choices("personalization")
        if track == "generalized":
            pers = [p for p in personalizations if p not in IDENTITY_PERSONALIZATIONS]
        else:
            pers = list(personalizations)
        axes["personalization"] = pers
        if not pers or not any(SearchSpace(track, [], full).rescales(m, p) for p in pers):
            dropped.append(label)
            continue
        models.append(m)
    if not models:
        ident = ", ".join(IDENTITY_PERSONALIZATIONS + IDENTITY_RESCALES)
        what = (
            f"every configuration uses the listener's identity ({ident})"
            if track == "generalized"
            else f"no configuration uses the listener's identity (add one of {ident})"
        )
        other = TRACKS[1 - TRACKS.index(track)]
        raise SearchSpaceError(
            "search.track",
            f"nothing to search on the {track} track: {what} in personalization "
            f"{list(cfg.personalization)} x postprocess.rescale {list(cfg.postprocess.rescale)} "
            f"(models {', '.join(dropped)}); change them or use track {other}",
        )
    space = SearchSpace(track, models, full)
    if cfg.search.sampler == "grid":
        space.grid()  # raises on a range
    return space


def _encode(v: Any) -> Any:
    """A choice as an Optuna categorical value (None, bool, int, float or str)."""
    return v if v is None or isinstance(v, bool | int | float | str) else format_value(v)


def _pick(ot: Any, name: str, choices: Choices, as_float: bool = False) -> Any:
    """Suggest one value of ``choices`` (a list, or a range) from the Optuna trial ``ot``."""
    if isinstance(choices, Range):
        if choices.int:
            v = ot.suggest_int(
                name,
                int(choices.low),
                int(choices.high),
                step=int(choices.step or 1),
                log=choices.log,
            )
        else:
            v = ot.suggest_float(
                name, choices.low, choices.high, log=choices.log, step=choices.step
            )
        return float(v) if as_float else v
    if len(choices) == 1:
        return choices[0]
    encoded = [_encode(c) for c in choices]
    return choices[encoded.index(ot.suggest_categorical(name, encoded))]


def sample_trial(space: SearchSpace, cfg: ExperimentConfig, ot: Any) -> Trial:
    """The configuration an Optuna trial ``ot`` (``optuna.trial.Trial`` or ``FixedTrial``)
    samples from ``space``: the model entry, then every axis and hyperparameter of it."""
    m = (
        space.models[0]
        if len(space.models) == 1
        else next(
            x
            for x in space.models
            if x.label == ot.suggest_categorical("model", [x.label for x in space.models])
        )
    )
    a = m.axes
    fs = _pick(ot, space.name("feature_set", a["feature_set"]), a["feature_set"])
    lengths = _pick(
        ot,
        space.name("window.lengths_s", a["window.lengths_s"]),
        a["window.lengths_s"],
        as_float=True,
    )
    delay = _pick(
        ot, space.name("window.delay_s", a["window.delay_s"]), a["window.delay_s"], as_float=True
    )
    align = _pick(ot, space.name("window.align", a["window.align"]), a["window.align"])
    hp = tuple(
        (n, tuple(v) if isinstance(v, list) else v)
        for n, v in (
            (n, _pick(ot, f"{m.label}.{n}", values)) for n, values in m.spec.params.items()
        )
    )
    pers = _pick(ot, space.name("personalization", a["personalization"]), a["personalization"])
    rescales = space.rescales(m, pers)
    rescale = _pick(ot, space.name("postprocess.rescale", rescales), rescales)
    smooth = _pick(
        ot,
        space.name("postprocess.smooth_s", a["postprocess.smooth_s"]),
        a["postprocess.smooth_s"],
        as_float=True,
    )
    methods = m.choices("postprocess.smooth_method")
    method = (
        methods[0]
        if smooth == 0
        else _pick(ot, space.name("postprocess.smooth_method", methods), methods)
    )
    return _trial(
        cfg,
        fs,
        lengths if isinstance(lengths, tuple) else (lengths,),
        delay,
        align,
        m.spec.name,
        hp,
        pers,
        smooth,
        method,
        rescale,
    )


def _trial(
    cfg: ExperimentConfig, fs, lengths, delay, align, model, hp, pers, smooth, method, rescale
) -> Trial:
    return Trial(
        feature_set=fs,
        channels=tuple(cfg.feature_sets[fs]),
        lengths_s=tuple(float(x) for x in lengths),
        delay_s=float(delay),
        align=align,
        stats=tuple(cfg.window.stats),
        hop_s=cfg.window.train_hop_s,
        model=model,
        model_params=hp,
        personalization=pers,
        smooth_s=float(smooth),
        smooth_method=method,
        rescale=rescale,
        target=cfg.target,
        protocol=cfg.protocol,
        seed=cfg.seed,
        splits=tuple((k, tuple(int(s) for s in v)) for k, v in cfg.splits.items()),
        folds=cfg.folds if cfg.protocol in KFOLD_PROTOCOLS else 0,
        metric=cfg.metric,
        ccc_averaging=cfg.ccc_averaging,
        fit_on=cfg.postprocess.fit_on,
    )


def baseline_trial(space: SearchSpace, cfg: ExperimentConfig) -> Trial:
    """The baseline (:data:`~experiments.config.models.BASELINE`) logged before the first trial
    (not a trial of the study): the first value of every window list (the low end of a range),
    global, no smoothing, no rescaling, as the grid's baseline."""

    def first(axis: str) -> Any:
        v = space.full[axis]
        return v.low if isinstance(v, Range) else v[0]

    lengths = first("window.lengths_s")
    return _trial(
        cfg,
        first("feature_set"),
        lengths if isinstance(lengths, tuple) else (lengths,),
        first("window.delay_s"),
        first("window.align"),
        BASELINE,
        (),
        "global",
        0.0,
        first("postprocess.smooth_method"),
        "none",
    )
