"""The fits of one fit group, as independent parts that can run apart and be put together.

Configurations that share a :meth:`~experiments.config.grid.Trial.fit_key` need, on one training
set, the fits :func:`fit_parts` lists: ``main`` (every training session), ``fold`` (each
training story left out: the out-of-fold predictions post-processing is fitted on), ``unseen``
(each evaluated listener left out, generalized track) and ``unseen_fold`` (both). Each depends
only on the windowed features, so :func:`fit_part` runs them in any order and process and
:func:`combine_parts` puts their predictions together: the same numbers wherever they ran. A
model whose spec has a closed form (ridge) makes every part of the group from per-session
sums (:func:`closed_form_parts`, :mod:`experiments.models.ridge_stats`); the steps after a sweep
reuse exact fits through :class:`~experiments.evaluation.fit_cache.FitCache`.
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
from ..models.factory import make_model
from ..models.personalization import PerListenerRegressor, make_personalizer
from ..models.position_prior import session_position
from ..models.ridge_stats import LinearFit, SufficientStats
from ..windowing.windowed import WindowedSession

if TYPE_CHECKING:  # fit_cache imports this module
    from .fit_cache import FitScope

#: the shrinkage (rows) of the per-listener maps of ``global_calibrated``
CALIBRATION_SHRINKAGE = 100.0
#: personalizations whose fits :func:`closed_form_parts` makes from sufficient statistics
CLOSED_FORM_PERSONALIZATIONS = ("global", "per_listener")

Sessions = Sequence[WindowedSession]


def _layout(trial: Trial) -> tuple[bool, bool]:
    """(reads each frame's position in its session, reads a column-major float64 matrix), from
    the spec's ``inputs``; a tree reads one feature per node for every row, sequential in that
    layout (a full-size hist_gb configuration took 40 % less CPU). The same predictions either way."""
    inputs = model_spec(trial.model).inputs
    return inputs == "position", inputs == "columns"


def _inputs(s: WindowedSession, position: bool) -> np.ndarray:
    """A session's model inputs: its windowed features, or (``position``) each frame's position."""
    return session_position(len(s.y))[:, None] if position else s.F


def _matrix(rows: int, columns: int, column_major: bool) -> np.ndarray:
    """An empty design matrix: column-major float64, or row-major float32."""
    if column_major:
        return np.empty((rows, columns), dtype=np.float64, order="F")
    return np.empty((rows, columns), dtype=np.float32)


def design(
    sessions: Sessions, hop: int = 1, position: bool = False, column_major: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """[listener id | inputs] rows of every ``hop``-th frame with a finite label, and the labels:
    one preallocated array, row-major float32 or (``column_major``) column-major float64."""
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
    """A model fitted by :func:`_fit`, its training labels' mean (what a NaN prediction is
    filled with) and its training rows."""

    model: Any
    y_mean: float
    n_rows: int


def _fit(trial: Trial, train: Sessions, personalization: str, predicted: Sessions) -> FitResult:
    """``trial``'s model with ``personalization`` fitted on ``train``.
    A per-listener model fits its global fallback only when a listener of ``predicted`` has too
    few rows for a model of their own (else that costly fit would never be used)."""
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
        model.set_params(fallback=lacking)
    model.fit(X, y)
    return FitResult(model, float(np.mean(y)), len(y))


def _predict_filled(trial: Trial, fitted: FitResult, s: WindowedSession) -> np.ndarray:
    """A session's predictions by a fitted model (:func:`_fit`), NaN as the training label mean."""
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
    """What one part predicted (session -> per-frame predictions; ``in_sample``: training sessions
    predicted by its own model), its training rows, seconds and warnings (as text)."""

    predictions: dict[str, np.ndarray]
    in_sample: dict[str, np.ndarray] = field(default_factory=dict)
    n_rows: int = 0
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)


def _ids(sessions: Sessions) -> tuple[str, ...]:
    return tuple(s.session for s in sessions)


@contextlib.contextmanager
def recording(on: bool = True) -> Iterator[list[warnings.WarningMessage]]:
    """The warnings raised in the body, recorded (not shown) in the list it yields; with ``on``
    False they are raised as usual and the list stays empty."""
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
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = make()
    return out, list(caught)


def _replay(caught: Sequence[warnings.WarningMessage]) -> None:
    """Raise recorded warnings again, as they were raised: a reused fit warns as a refit would."""
    for c in caught:
        warnings.warn_explicit(c.message, c.category, c.filename, c.lineno)


@dataclass
class _Model:
    """A model fitted by :func:`_fit`: ``raw`` predicts any session (features permuted, say);
    ``predict`` a windowed one, remembered in ``memo`` when a cache made it (its warnings raised
    again at each use)."""

    trial: Trial
    fitted: FitResult
    memo: dict[str, tuple[np.ndarray, list[warnings.WarningMessage]]] | None = None

    def raw(self, s: WindowedSession) -> np.ndarray:
        """``s``'s predictions, per frame."""
        return _predict_filled(self.trial, self.fitted, s)

    def predict(self, s: WindowedSession) -> np.ndarray:
        """``s``'s predictions, a new array each time."""
        if self.memo is None:
            return self.raw(s)
        if s.session not in self.memo:
            self.memo[s.session] = _recorded(lambda: self.raw(s))
        pred, caught = self.memo[s.session]
        _replay(caught)
        return pred.copy()


@dataclass
class Fitted:
    """Predictions of one fit group on one training set, before post-processing.

    ``evaluated``: the evaluated sessions'; ``fit_on``: the training sessions' (out of fold, or in
    sample), which the post-processing is fitted on; ``unseen``: each evaluated session's by the
    models without its listener; ``unseen_fit_on``: per held-out listener, the other listeners'
    training sessions by models without them either; ``unseen_all``: per held-out listener,
    every evaluated session's by those models (the others' choose that listener's configuration).
    """

    evaluated: dict[str, np.ndarray]
    fit_on: dict[str, np.ndarray]
    unseen: dict[str, np.ndarray]
    n_rows: int
    notes: list[str]
    unseen_fit_on: dict[int, dict[str, np.ndarray]] = field(default_factory=dict)
    unseen_all: dict[int, dict[str, np.ndarray]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def _base(trial: Trial) -> tuple[str, bool]:
    """(the personalization the models are fitted with, whether calibration follows)."""
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
    """What ``part`` fits and predicts: (fitted on, personalization, predicted, predicted in sample)."""
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
    """The pipeline of ``sets`` (:func:`_part_sets`; or the cache's, made on the same inputs)
    and what it predicted; with ``record``, the warnings raised are the result's, as text."""
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
    """Fit and predict one part: from sufficient statistics where :func:`closed_form_parts` has
    a closed form, else with the model's pipeline; ``cache``: fits made before on the same
    inputs are reused (:class:`~experiments.evaluation.fit_cache.FitCache`)."""
    closed = (
        closed_form_parts(trial, [part], train, evaluate, need_post_fit)
        if cache is None
        else cache.closed_form(trial, [part], train, evaluate, need_post_fit)
    )
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
    """The ``main`` part fitted here with its model kept: (a function that predicts a session
    from its features, NaN filled with the training label mean; the part's result), for
    predictions on changed features (:mod:`experiments.evaluation.importance`) by the very model
    the run's came from; with ``cache``, configurations sharing the model get equal functions."""
    sets = _part_sets(trial, FitPart("main"), train, evaluate, need_post_fit)
    model, result = _pipeline_part(trial, sets, cache, record=False)
    return model.raw, result


def _group_stats(trial: Trial, train: Sessions, shown: Sessions) -> SufficientStats | None:
    """The sufficient statistics of ``train``'s training rows (every hop-th frame with a finite
    label), with a fill value for each column holding NaN in ``shown`` (every session a part may
    predict, so that a part fitted alone gives the same numbers); None if a feature is infinite
    (the pipeline raises the error)."""
    hop = max(1, int(round(trial.hop_s * train[0].fps)))
    rows = {}
    for s in train:
        y = s.y[::hop]
        keep = np.isfinite(y)
        # a view of the features when every label is finite: no copy of the training rows
        rows[s.session] = (s.F[::hop], y) if keep.all() else (s.F[::hop][keep], y[keep])
    extra_nan = np.zeros(train[0].F.shape[1], bool)
    for s in shown:
        extra_nan |= np.isnan(s.F).any(axis=0)
    try:
        return SufficientStats(rows, extra_nan)
    except ValueError:
        return None


def _own_models(stats: SufficientStats, fit_on: Sessions) -> dict[int, list[WindowedSession]]:
    """The listeners of ``fit_on`` with a model of their own under ``per_listener`` (at least
    ``PerListenerRegressor``'s ``min_samples`` training rows): listener -> sessions."""
    min_samples = PerListenerRegressor(estimator=None).min_samples
    own: dict[int, list[WindowedSession]] = {}
    for s in fit_on:
        own.setdefault(s.listener, []).append(s)
    return {k: v for k, v in own.items() if stats.n_rows(_ids(v)) >= min_samples}


def closed_form_parts(
    trial: Trial, parts: Sequence[FitPart], train: Sessions, evaluate: Sessions, need_post_fit: bool
) -> dict[FitPart, PartResult]:
    """The ``parts`` with a closed form, each fit a sum of the training sessions' sufficient
    statistics and one solve: the pipeline's predictions up to rounding (the tests: CCC within
    1e-8). Left out (fitted by the pipeline): a model whose spec has no ``closed_form`` (or
    gives none for its hyperparameters), a personalization other than
    :data:`CLOSED_FORM_PERSONALIZATIONS`, a part without training rows, an infinite feature.
    Each part's ``seconds`` is an equal share; a part's numbers do not depend on the others asked."""
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
    """(part, session, in sample) -> its predictions: each distinct union of sessions fitted
    once, each session predicted by all the fits that predict it in one pass."""
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


def combine_parts(
    trial: Trial,
    done: Mapping[FitPart, PartResult],
    train: Sessions,
    evaluate: Sessions,
    need_post_fit: bool,
    need_unseen: bool,
) -> Fitted:
    """The group's :class:`Fitted` from its parts' results (every part of :func:`fit_parts`).

    Raises:
        ValueError: a part is missing.
    """
    parts = fit_parts(trial, train, evaluate, need_post_fit, need_unseen)
    missing = [p for p in parts if p not in done]
    if missing:
        raise ValueError(f"fit parts missing for {trial.label()}: {missing}")

    def predictions(kind: str, listener: int | None = None) -> dict[str, np.ndarray]:
        """The predictions of every part of ``kind`` (of ``listener``), in the order of ``parts``."""
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
    """The unseen-listener predictions of :class:`Fitted`, per evaluated listener, from the
    ``unseen`` and ``unseen_fold`` parts (a listener without another to train on noted)."""
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
    """Every fit a group of configurations (same :meth:`Trial.fit_key`) needs on one training
    set: the parts in ``done`` as given (fitted elsewhere), the others fitted here, or taken from
    ``cache`` when made before on the same inputs."""
    done = dict(done or {})
    todo = [
        p for p in fit_parts(trial, train, evaluate, need_post_fit, need_unseen) if p not in done
    ]
    done.update(
        closed_form_parts(trial, todo, train, evaluate, need_post_fit)
        if cache is None
        else cache.closed_form(trial, todo, train, evaluate, need_post_fit)
    )
    for part in todo:  # those without a closed form: the model's pipeline
        if part not in done:
            sets = _part_sets(trial, part, train, evaluate, need_post_fit)
            done[part] = _pipeline_part(trial, sets, cache)[1]
    return combine_parts(trial, done, train, evaluate, need_post_fit, need_unseen)
