"""The fits of one fit group, as independent parts that can run apart and be put together.

On one training set a fit group needs the parts :func:`fit_parts` lists: ``main`` (every
training session), ``fold`` (each training story left out: out-of-fold predictions for
post-processing), ``unseen`` (each evaluated listener left out) and ``unseen_fold`` (both).
:func:`fit_part` runs them in any order and process, :func:`combine_parts` joins them: the same
numbers wherever they ran. A closed-form model (ridge) makes every part from per-session sums
(:func:`closed_form_parts`).
"""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from ..config.grid import Trial
from ..config.models import model_spec
from ..models.factory import MedianImputer, make_model
from ..models.personalization import PerListenerRegressor, make_personalizer
from ..models.position_prior import session_position
from ..models.ridge_stats import LinearFit, SufficientStats, linear_predict
from ..windowing.windowed import WindowedSession

if TYPE_CHECKING:  # fit_cache imports this module
    from .fit_cache import FitScope

#: the shrinkage (rows) of the per-listener maps of ``global_calibrated``
CALIBRATION_SHRINKAGE = 100.0
#: personalizations whose fits :func:`closed_form_parts` makes from sufficient statistics
CLOSED_FORM_PERSONALIZATIONS = ("global", "per_listener")

Sessions = Sequence[WindowedSession]


def _layout(trial: Trial) -> tuple[bool, bool]:
    """(reads each frame's position, reads a column-major float64 matrix) from the spec's
    ``inputs``; a tree reads one feature per node for every row, sequential in that layout
    (a full-size hist_gb configuration took 40 % less CPU), the same predictions."""
    inputs = model_spec(trial.model).inputs
    return inputs == "position", inputs == "columns"


def _inputs(s: WindowedSession, position: bool) -> np.ndarray:
    return session_position(len(s.y))[:, None] if position else s.F


def _matrix(rows: int, columns: int, column_major: bool) -> np.ndarray:
    if column_major:
        return np.empty((rows, columns), dtype=np.float64, order="F")
    return np.empty((rows, columns), dtype=np.float32)


def design(
    sessions: Sessions, hop: int = 1, position: bool = False, column_major: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """[listener id | inputs] rows of every ``hop``-th frame with a finite label, and the labels."""
    y = np.concatenate([s.y[::hop] for s in sessions])
    keep = np.isfinite(y)
    p = _inputs(sessions[0], position).shape[1] if sessions else 0
    X = _matrix(int(keep.sum()), 1 + p, column_major)
    row = start = 0
    for s in sessions:
        k = keep[start : start + len(s.y[::hop])]
        start += len(k)
        n = int(k.sum())
        X[row : row + n, 0] = s.listener
        X[row : row + n, 1:] = _inputs(s, position)[::hop][k]
        row += n
    return X, y[keep]


class FitResult(NamedTuple):
    """A fitted model, its training labels' mean (fills NaN predictions) and training rows."""

    model: Any
    y_mean: float
    n_rows: int


def _fit(
    trial: Trial, train: Sessions, personalization: str, predicted: Sessions, fallback: bool = False
) -> FitResult:
    """``trial``'s model fitted on ``train``; a per-listener model fits its global fallback when
    ``fallback`` or a listener of ``predicted`` has too few rows for their own (else it is never used)."""
    hop = max(1, int(round(trial.hop_s * train[0].fps)))
    X, y = design(train, hop, *_layout(trial))
    if len(y) == 0:
        raise ValueError("no training rows with a finite label")
    estimator = make_model(trial.model, trial.hyperparams, seed=trial.seed)
    model = make_personalizer(personalization, estimator)
    if personalization == "per_listener":
        ids, counts = np.unique(X[:, 0], return_counts=True)
        rows = dict(zip(ids.tolist(), counts.tolist(), strict=True))
        lacking = any(rows.get(float(s.listener), 0) < model.min_samples for s in predicted)
        model.set_params(fallback=fallback or lacking)
    model.fit(X, y)
    return FitResult(model, float(np.mean(y)), len(y))


def _predict_filled(trial: Trial, fitted: FitResult, s: WindowedSession) -> np.ndarray:
    """A session's predictions, NaN as the training label mean."""
    model, y_mean, _ = fitted
    position, column_major = _layout(trial)
    F = _inputs(s, position)
    X = _matrix(len(F), 1 + F.shape[1], column_major)
    X[:, 0], X[:, 1:] = s.listener, F
    p = np.asarray(model.predict(X), dtype=np.float64)
    return np.where(np.isfinite(p), p, y_mean)


@dataclass(frozen=True)
class FitPart:
    """One model fit of a fit group (see the module docstring); hashable, picklable."""

    kind: str  # "main", "fold", "unseen" or "unseen_fold"
    story: int | None = None  # fold, unseen_fold: the held-out training story
    listener: int | None = None  # unseen, unseen_fold: the held-out listener


@dataclass
class PartResult:
    """One part's predictions by session (``in_sample``: of its training sessions), rows, seconds, warnings."""

    predictions: dict[str, np.ndarray]
    in_sample: dict[str, np.ndarray] = field(default_factory=dict)
    n_rows: int = 0
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)


def _ids(sessions: Sessions) -> tuple[str, ...]:
    return tuple(s.session for s in sessions)


@contextlib.contextmanager
def recording(on: bool = True) -> Iterator[list[warnings.WarningMessage]]:
    """The body's warnings recorded (not shown) in the list it yields; with ``on`` False, shown."""
    if not on:
        yield []
        return
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught


def as_text(caught: Sequence[warnings.WarningMessage]) -> set[str]:
    """Recorded warnings as ``"Category: message"``."""
    return {f"{type(c.message).__name__}: {c.message}" for c in caught}


def _recorded(make: Callable[[], Any]) -> tuple[Any, list[warnings.WarningMessage]]:
    """``make()`` and the warnings it raised (recorded, not shown)."""
    with recording() as caught:
        out = make()
    return out, list(caught)


def _replay(caught: Sequence[warnings.WarningMessage]) -> None:
    """Raise recorded warnings again: a reused fit warns as a refit would."""
    for c in caught:
        warnings.warn_explicit(c.message, c.category, c.filename, c.lineno)


@dataclass
class _Model:
    """A fitted model: ``raw`` predicts any session; ``predict`` a windowed one, remembered in
    ``memo`` when a cache made it (its warnings raised again at each use)."""

    trial: Trial
    fitted: FitResult
    memo: dict[str, tuple[np.ndarray, list[warnings.WarningMessage]]] | None = None

    def raw(self, s: WindowedSession) -> np.ndarray:
        return _predict_filled(self.trial, self.fitted, s)

    def predict(self, s: WindowedSession) -> np.ndarray:
        if self.memo is None:
            return self.raw(s)
        if s.session not in self.memo:
            self.memo[s.session] = _recorded(lambda: self.raw(s))
        pred, caught = self.memo[s.session]
        _replay(caught)
        return pred.copy()


@dataclass
class Fitted:
    """One fit group's predictions on one training set, before post-processing: ``evaluated``;
    ``fit_on`` (training sessions', out of fold or in sample); ``unseen`` (by the models without
    the session's listener); per held-out listener, ``unseen_fit_on`` (the others' training
    sessions) and ``unseen_all`` (every evaluated session) by the models without them."""

    evaluated: dict[str, np.ndarray]
    fit_on: dict[str, np.ndarray]
    unseen: dict[str, np.ndarray]
    n_rows: int
    notes: list[str]
    unseen_fit_on: dict[int, dict[str, np.ndarray]] = field(default_factory=dict)
    unseen_all: dict[int, dict[str, np.ndarray]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def _base(trial: Trial) -> tuple[str, bool]:
    """(the personalization fitted, whether calibration follows)."""
    calibrated = trial.personalization == "global_calibrated"
    return ("global" if calibrated else trial.personalization), calibrated


def _out_of_fold(trial: Trial, train: Sessions) -> bool:
    return trial.fit_on == "out_of_fold" and len({s.story for s in train}) >= 2


def _others(train: Sessions, listener: int | None) -> list[WindowedSession]:
    return [s for s in train if s.listener != listener]


def _stories(sessions: Sessions) -> list[int]:
    return sorted({s.story for s in sessions})


def fit_parts(
    trial: Trial, train: Sessions, evaluate: Sessions, need_post_fit: bool, need_unseen: bool
) -> list[FitPart]:
    """Every fit the group of ``trial`` needs on ``train``, the costliest kinds first."""
    base, calibrated = _base(trial)
    parts = [FitPart("main")]
    if (need_post_fit or calibrated) and _out_of_fold(trial, train):
        parts += [FitPart("fold", story=st) for st in _stories(train)]
    if not need_unseen or base != "global" or calibrated:
        return parts
    for listener in sorted({s.listener for s in evaluate}):
        others = _others(train, listener)
        if not others:
            continue  # combine_parts notes it
        parts.append(FitPart("unseen", listener=listener))
        if need_post_fit and _out_of_fold(trial, others):
            parts += [FitPart("unseen_fold", st, listener) for st in _stories(others)]
    return parts


def _part_sets(
    trial: Trial, part: FitPart, train: Sessions, evaluate: Sessions, need_post_fit: bool
) -> tuple[list[WindowedSession], str, list[WindowedSession], list[WindowedSession]]:
    """(fitted on, personalization, predicted, predicted in sample) of ``part``."""
    base, calibrated = _base(trial)
    if part.kind in ("unseen", "unseen_fold"):
        base, train = "global", _others(train, part.listener)
    if part.kind in ("fold", "unseen_fold"):
        held = [s for s in train if s.story == part.story]
        return [s for s in train if s.story != part.story], base, held, []
    if part.kind not in ("main", "unseen"):
        raise ValueError(f"unknown fit part {part.kind!r}: main, fold, unseen or unseen_fold")
    # unseen: every evaluated session, the held-out listener's scored, the others' choosing
    # that listener's configuration without them (nested selection)
    in_sample = need_post_fit or (calibrated and part.kind == "main")
    return (
        list(train),
        base,
        list(evaluate),
        list(train) if in_sample and not _out_of_fold(trial, train) else [],
    )


def _pipeline_part(
    trial: Trial,
    sets: tuple[Sessions, str, Sessions, Sessions],
    cache: FitScope | None,
    record: bool = True,
) -> tuple[_Model, PartResult]:
    """The pipeline of ``sets`` (or the cache's) and its result; ``record``: warnings kept as text."""
    t0 = time.perf_counter()
    fit_on, personalization, predicted, in_sample = sets
    shown = [*predicted, *in_sample]
    with recording(record) as caught:
        model = (
            _Model(trial, _fit(trial, fit_on, personalization, shown))
            if cache is None
            else cache.model(trial, fit_on, personalization, shown)
        )
        result = PartResult(
            {s.session: model.predict(s) for s in predicted},
            {s.session: model.predict(s) for s in in_sample},
            n_rows=model.fitted.n_rows,
        )
    result.warnings = sorted(as_text(caught))
    result.seconds = time.perf_counter() - t0
    return model, result


def fit_part(
    trial: Trial,
    part: FitPart,
    train: Sessions,
    evaluate: Sessions,
    need_post_fit: bool,
    cache: FitScope | None = None,
) -> PartResult:
    """Fit and predict one part, in closed form where there is one; fits of ``cache`` reused."""
    closed_form = closed_form_parts if cache is None else cache.closed_form
    closed = closed_form(trial, [part], train, evaluate, need_post_fit)
    if part in closed:
        return closed[part]
    return _pipeline_part(trial, _part_sets(trial, part, train, evaluate, need_post_fit), cache)[1]


def fit_main(
    trial: Trial,
    train: Sessions,
    evaluate: Sessions,
    need_post_fit: bool,
    cache: FitScope | None = None,
) -> tuple[Callable[[WindowedSession], np.ndarray], PartResult]:
    """(the ``main`` part's model as a function of a session, the part's result): predictions of
    changed features by the run's own model; with ``cache``, a shared model's functions are equal."""
    sets = _part_sets(trial, FitPart("main"), train, evaluate, need_post_fit)
    model, result = _pipeline_part(trial, sets, cache, record=False)
    return model.raw, result


def _group_stats(trial: Trial, train: Sessions, shown: Sessions) -> SufficientStats | None:
    """Sufficient statistics of ``train``'s rows, with a fill value for each column holding NaN
    in ``shown`` (so a part fitted alone gives the same numbers); None if a feature is infinite."""
    hop = max(1, int(round(trial.hop_s * train[0].fps)))
    rows = {}
    for s in train:
        y = s.y[::hop]
        keep = np.isfinite(y)
        # a view of the features when every label is finite: no copy of the training rows
        rows[s.session] = (s.F[::hop], y) if keep.all() else (s.F[::hop][keep], y[keep])
    extra_nan = np.logical_or.reduce([np.isnan(s.F).any(axis=0) for s in shown])
    try:
        return SufficientStats(rows, extra_nan)
    except ValueError:
        return None


def _own_models(stats: SufficientStats, fit_on: Sessions) -> dict[int, list[WindowedSession]]:
    """listener -> sessions of the listeners of ``fit_on`` with a ``per_listener`` model of their own."""
    min_samples = PerListenerRegressor(estimator=None).min_samples
    own: dict[int, list[WindowedSession]] = {}
    for s in fit_on:
        own.setdefault(s.listener, []).append(s)
    return {k: v for k, v in own.items() if stats.n_rows(_ids(v)) >= min_samples}


def closed_form_parts(
    trial: Trial, parts: Sequence[FitPart], train: Sessions, evaluate: Sessions, need_post_fit: bool
) -> dict[FitPart, PartResult]:
    """The ``parts`` with a closed form, each a sum of sufficient statistics and one solve (the
    pipeline's predictions up to rounding). Left to the pipeline: no ``closed_form`` in the spec,
    another personalization than :data:`CLOSED_FORM_PERSONALIZATIONS`, no training rows, an
    infinite feature. ``seconds``: an equal share."""
    t0 = time.perf_counter()
    spec = model_spec(trial.model)
    alpha = spec.closed_form(spec.resolve(trial.hyperparams)) if spec.closed_form else None
    sets = {p: _part_sets(trial, p, train, evaluate, need_post_fit) for p in parts}
    sets = {p: v for p, v in sets.items() if v[1] in CLOSED_FORM_PERSONALIZATIONS}
    stats = _group_stats(trial, train, [*train, *evaluate]) if alpha is not None and sets else None
    if stats is None or alpha is None:
        return {}
    done = {
        p: v for p, v in sets.items() if stats.n_rows(_ids(v[0])) > 0
    }  # else: the pipeline's error
    predictions = _closed_form_predictions(stats, alpha, done)
    share = (time.perf_counter() - t0) / max(1, len(done))
    return {
        p: PartResult(
            {s.session: predictions[p, s.session, False] for s in predicted},
            {s.session: predictions[p, s.session, True] for s in in_sample},
            n_rows=stats.n_rows(_ids(fit_on)),
            seconds=share,
        )
        for p, (fit_on, _, predicted, in_sample) in done.items()
    }


def _closed_form_predictions(
    stats: SufficientStats, alpha: float, sets: Mapping[FitPart, tuple]
) -> dict[tuple[FitPart, str, bool], np.ndarray]:
    """(part, session, in sample) -> predictions; each union of sessions fitted once."""
    fits: dict[frozenset[str], LinearFit] = {}
    uses: dict[str, dict[tuple[FitPart, bool], LinearFit]] = {}
    shown: dict[str, WindowedSession] = {}
    for part, (fit_on, personalization, predicted, in_sample) in sets.items():
        own = _own_models(stats, fit_on) if personalization == "per_listener" else {}
        for flag, sessions in ((False, predicted), (True, in_sample)):
            for s in sessions:
                key = frozenset(_ids(own.get(s.listener, fit_on)))
                if key not in fits:
                    fits[key] = stats.fit(sorted(key), alpha)
                shown[s.session] = s
                uses.setdefault(s.session, {})[part, flag] = fits[key]
    out = {}
    for sid, by_part in uses.items():
        columns = stats.predict(shown[sid].F, list(by_part.values()))
        for (part, flag), column in zip(by_part, columns.T, strict=True):
            out[part, sid, flag] = column
    return out


@dataclass
class LinearModel:
    """A closed-form ridge model: each listener's ``own`` fit (``per_listener``), the ``overall``
    one for the others; ``fills``: per fit, every column's training median, for a session with NaN
    in a column outside ``nan_columns`` (where no session of the fit's sweep had one)."""

    shift: np.ndarray
    nan_columns: np.ndarray
    overall: LinearFit
    own: dict[int, LinearFit] = field(default_factory=dict)
    fills: dict[int, np.ndarray] = field(default_factory=dict)  # -1: the overall fit's

    def raw(self, s: WindowedSession) -> np.ndarray:
        """The session's predictions by its listener's fit (the sweep's numbers on its sessions)."""
        key = s.listener if s.listener in self.own else -1
        F, outside = s.F, np.ones(s.F.shape[1], bool)
        outside[self.nan_columns] = False
        nan = np.isnan(F) & outside
        if nan.any():
            F = np.where(nan, self.fills[key].astype(F.dtype), F)
        return linear_predict(F, self.shift, self.nan_columns, [self.own.get(key, self.overall)])[
            :, 0
        ]


def _linear_model(
    trial: Trial, train: Sessions, evaluate: Sessions, personalization: str
) -> LinearModel | None:
    """``trial``'s closed-form model on ``train`` as :func:`closed_form_parts` fits its ``main``
    part (None without a closed form, as there)."""
    spec = model_spec(trial.model)
    alpha = spec.closed_form(spec.resolve(trial.hyperparams)) if spec.closed_form else None
    if alpha is None or personalization not in CLOSED_FORM_PERSONALIZATIONS:
        return None
    stats = _group_stats(trial, train, [*train, *evaluate])
    if stats is None or stats.n_rows(_ids(train)) == 0:
        return None
    hop = max(1, int(round(trial.hop_s * train[0].fps)))

    def fit(sessions: Sessions) -> tuple[LinearFit, np.ndarray]:
        rows = design(sessions, hop)[0][:, 1:]
        return stats.fit(sorted(_ids(sessions)), alpha), MedianImputer().fit(rows).statistics_

    overall, fill = fit(train)
    model = LinearModel(stats.shift, stats.nan_columns, overall, fills={-1: fill})
    if personalization == "per_listener":
        for listener, sessions in _own_models(stats, train).items():
            model.own[listener], model.fills[listener] = fit(sessions)
    return model


def final_model(
    trial: Trial, train: Sessions, evaluate: Sessions, need_post_fit: bool
) -> tuple[LinearModel | _Model, PartResult]:
    """``trial``'s ``main`` model on ``train`` as the sweep fits it (closed form where it has
    one; a per-listener model with its global fallback, for listeners it never saw), and the
    ``main`` part's result: the sweep's predictions of ``evaluate`` (and in sample)."""
    fit_on, personalization, predicted, in_sample = _part_sets(
        trial, FitPart("main"), train, evaluate, need_post_fit
    )
    t0 = time.perf_counter()
    with recording() as caught:
        model = _linear_model(trial, fit_on, evaluate, personalization) or _Model(
            trial, _fit(trial, fit_on, personalization, [], fallback=True)
        )
        result = PartResult(
            {s.session: model.raw(s) for s in predicted},
            {s.session: model.raw(s) for s in in_sample},
            n_rows=model.overall.n_rows if isinstance(model, LinearModel) else model.fitted.n_rows,
        )
    result.warnings = sorted(as_text(caught))
    result.seconds = time.perf_counter() - t0
    return model, result


def combine_parts(
    trial: Trial,
    done: Mapping[FitPart, PartResult],
    train: Sessions,
    evaluate: Sessions,
    need_post_fit: bool,
    need_unseen: bool,
) -> Fitted:
    """The group's :class:`Fitted` from every part of :func:`fit_parts` (ValueError if one is missing)."""
    parts = fit_parts(trial, train, evaluate, need_post_fit, need_unseen)
    missing = [p for p in parts if p not in done]
    if missing:
        raise ValueError(f"fit parts missing for {trial.label()}: {missing}")

    def predictions(kind: str, listener: int | None = None) -> dict[str, np.ndarray]:
        return {
            k: v
            for p in parts
            if (p.kind, p.listener) == (kind, listener)
            for k, v in done[p].predictions.items()
        }

    base, calibrated = _base(trial)
    main, notes = done[FitPart("main")], []
    fit_on: dict[str, np.ndarray] = {}
    if need_post_fit or calibrated:
        if _out_of_fold(trial, train):
            fit_on = predictions("fold")
        else:
            if trial.fit_on == "out_of_fold":
                notes.append(
                    f"one training story ({_stories(train)}): post-processing fitted in sample"
                )
            fit_on = dict(main.in_sample)
    fitted = Fitted(dict(main.predictions), fit_on, {}, main.n_rows, notes)
    if need_unseen and base == "global" and not calibrated:
        _combine_unseen(trial, fitted, done, predictions, train, evaluate, need_post_fit)
    fitted.warnings = sorted({w for p in parts for w in done[p].warnings})
    return fitted


def _combine_unseen(
    trial: Trial,
    fitted: Fitted,
    done: Mapping[FitPart, PartResult],
    predictions: Callable[[str, int | None], dict[str, np.ndarray]],
    train: Sessions,
    evaluate: Sessions,
    need_post_fit: bool,
) -> None:
    """:class:`Fitted`'s unseen-listener predictions from the ``unseen`` and ``unseen_fold`` parts."""
    for listener in sorted({s.listener for s in evaluate}):
        others = _others(train, listener)
        if not others:
            fitted.notes.append(
                f"listener {listener}: no other listener to train on, no unseen-listener score"
            )
            continue
        part = done[FitPart("unseen", listener=listener)]
        fitted.unseen_all[listener] = dict(part.predictions)
        own = [s for s in evaluate if s.listener == listener]
        fitted.unseen.update({s.session: part.predictions[s.session] for s in own})
        if need_post_fit:  # the held-out listener's rescaling must not see them either
            oof = _out_of_fold(trial, others)
            fitted.unseen_fit_on[listener] = (
                predictions("unseen_fold", listener) if oof else dict(part.in_sample)
            )


def fit_group(
    trial: Trial,
    train: Sessions,
    evaluate: Sessions,
    need_post_fit: bool,
    need_unseen: bool,
    done: Mapping[FitPart, PartResult] | None = None,
    cache: FitScope | None = None,
) -> Fitted:
    """Every fit a fit group needs on one training set: ``done`` as given, the others fitted here
    (or from ``cache``)."""
    done = dict(done or {})
    todo = [
        p for p in fit_parts(trial, train, evaluate, need_post_fit, need_unseen) if p not in done
    ]
    closed_form = closed_form_parts if cache is None else cache.closed_form
    done.update(closed_form(trial, todo, train, evaluate, need_post_fit))
    for part in todo:  # those without a closed form: the model's pipeline
        if part not in done:
            sets = _part_sets(trial, part, train, evaluate, need_post_fit)
            done[part] = _pipeline_part(trial, sets, cache)[1]
    return combine_parts(trial, done, train, evaluate, need_post_fit, need_unseen)
