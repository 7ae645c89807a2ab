"""The search space of an Optuna search (lists of choices, or ranges) on its
track, and the configuration each Optuna trial samples from it (docs/config.md, Optuna search)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import ExperimentsError
from .grid import WINDOW_AXES, Trial, config_axes, format_value, make_trial, narrowed
from .models import BASELINE
from .options import IDENTITY_PERSONALIZATIONS, IDENTITY_RESCALES, TRACKS
from .schema import ExperimentConfig, ModelGrid, Range


class SearchSpaceError(ExperimentsError, ValueError):
    """A config whose search space is empty or unusable; ``key`` is the config key to fix."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


#: a search axis or hyperparameter: its list of choices, or a range (numeric ones only)
Choices = list[Any] | Range


def listed(choices: Choices, key: str) -> list[Any]:
    """The choices of ``key`` where they must be a list (SearchSpaceError for a range)."""
    if isinstance(choices, Range):
        raise SearchSpaceError(key, f"{key} is a range here, but it takes a list of values")
    return choices


@dataclass
class ModelSpace:
    """One ``models`` entry in a search: its choices per axis, after its ``only`` and the track."""

    #: the model's choice in the ``model`` parameter: its name, or ``name#i`` when repeated
    label: str
    index: int  # its place in ``models``
    spec: ModelGrid
    axes: dict[str, Choices]

    def choices(self, axis: str) -> list[Any]:
        return listed(self.axes[axis], axis)


@dataclass
class SearchSpace:
    """What a search samples: a model entry, then each axis and hyperparameter of it."""

    track: str
    models: list[ModelSpace]
    full: dict[str, Choices]  # the global axes, before any narrowing

    def grid(self) -> dict[str, list[Any]]:
        """Every Optuna parameter a trial may suggest -> its (encoded) choices, for Optuna's
        ``GridSampler`` (SearchSpaceError for a range)."""
        out: dict[str, list[Any]] = {}

        def add(key: str, choices: Any, name: str | None = None) -> None:
            if isinstance(choices, Range):
                raise SearchSpaceError(
                    "search.sampler",
                    f"grid walks lists of values, but {key} is a range "
                    "(use sampler tpe or random, or list its values)",
                )
            if len(choices) > 1:
                out[name or self.name(key, choices)] = [_encode(c) for c in choices]

        add("models", [m.label for m in self.models], "model")
        for m in self.models:
            for axis in (*WINDOW_AXES, "personalization", "postprocess.smooth_s"):
                add(axis, m.axes[axis])
            for hp, values in m.spec.params.items():
                add(f"models[{m.index}].{hp}", values, f"{m.label}.{hp}")
            for pers in m.choices("personalization"):
                add("postprocess.rescale", self.rescales(m, pers))
            # a list: add() refused a range above
            if any(s != 0 for s in m.choices("postprocess.smooth_s")):
                add("postprocess.smooth_method", m.axes["postprocess.smooth_method"])
        return out

    def name(self, axis: str, choices: Choices) -> str:
        """The Optuna parameter of ``axis`` with these choices: the axis itself when they are
        the config's, else the axis with its choices (``personalization[per_listener]``), so a
        parameter name always means one distribution, as Optuna requires."""
        if isinstance(choices, Range) or choices == self.full[axis]:
            return axis
        return f"{axis}[{'|'.join(format_value(c) for c in choices)}]"

    def rescales(self, m: ModelSpace, personalization: str) -> list[str]:
        """The rescaling choices a configuration with ``personalization`` may take on the track."""
        rescales = m.choices("postprocess.rescale")
        if self.track == "generalized":
            return [r for r in rescales if r not in IDENTITY_RESCALES]
        return rescales


def search_space(cfg: ExperimentConfig) -> SearchSpace:
    """The search space of ``cfg`` for its ``search.track``: each model's axes narrowed by its
    ``only``, then to the options the track may use; a model left without a choice drops out
    (SearchSpaceError when none is left)."""
    track = cfg.search.track
    full = config_axes(cfg)
    labels = [m.name for m in cfg.models]
    models: list[ModelSpace] = []
    dropped: list[str] = []
    for i, spec in enumerate(cfg.models):
        label = spec.name if labels.count(spec.name) == 1 else f"{spec.name}#{i}"
        m = ModelSpace(label, i, spec, narrowed(full, spec))
        pers = m.choices("personalization")
        if track == "generalized":
            pers = [p for p in pers if p not in IDENTITY_PERSONALIZATIONS]
        m.axes["personalization"] = pers = list(pers)
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
    return v if v is None or isinstance(v, bool | int | float | str) else format_value(v)


def _pick(ot: Any, name: str, choices: Choices, as_float: bool = False) -> Any:
    """One value of ``choices`` suggested by the Optuna trial ``ot``."""
    if isinstance(choices, Range):
        if choices.int:
            low, high, step = int(choices.low), int(choices.high), int(choices.step or 1)
            v = ot.suggest_int(name, low, high, step=step, log=choices.log)
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
    """The configuration an Optuna trial ``ot`` (or ``FixedTrial``) samples from ``space``: the
    model entry, then every axis and hyperparameter of it, always in the same order."""
    labels = [x.label for x in space.models]
    label = labels[0] if len(labels) == 1 else ot.suggest_categorical("model", labels)
    m = space.models[labels.index(label)]

    def pick(axis: str, choices: Choices | None = None, as_float: bool = False) -> Any:
        choices = m.axes[axis] if choices is None else choices
        return _pick(ot, space.name(axis, choices), choices, as_float)

    at = {"feature_set": pick("feature_set")}
    lengths = pick("window.lengths_s", as_float=True)
    at["window.lengths_s"] = lengths if isinstance(lengths, tuple) else (lengths,)
    at["window.delay_s"] = pick("window.delay_s", as_float=True)
    at["window.align"] = pick("window.align")
    hp = {n: _pick(ot, f"{m.label}.{n}", values) for n, values in m.spec.params.items()}
    at["personalization"] = pick("personalization")
    rescales = space.rescales(m, at["personalization"])
    at["postprocess.rescale"] = pick("postprocess.rescale", rescales)
    at["postprocess.smooth_s"] = smooth = pick("postprocess.smooth_s", as_float=True)
    methods = m.choices("postprocess.smooth_method")
    at["postprocess.smooth_method"] = (
        methods[0] if smooth == 0 else pick("postprocess.smooth_method", methods)
    )
    return make_trial(cfg, at, m.spec.name, hp)


def baseline_trial(space: SearchSpace, cfg: ExperimentConfig) -> Trial:
    """The baseline logged before the first trial (not a trial of the study): the first value of
    every window list (the low end of a range), global, no smoothing, no rescaling."""

    def first(axis: str) -> Any:
        v = space.full[axis]
        return v.low if isinstance(v, Range) else v[0]

    axes = {axis: first(axis) for axis in space.full}
    lengths = axes["window.lengths_s"]
    axes["window.lengths_s"] = lengths if isinstance(lengths, tuple) else (lengths,)
    axes |= {
        "personalization": "global",
        "postprocess.smooth_s": 0.0,
        "postprocess.rescale": "none",
    }
    return make_trial(cfg, axes, BASELINE, {})
