"""The fits of one fit group, as independent parts that can run apart and be put together.

A group of configurations that share a :meth:`~experiments.config.grid.Trial.fit_key` needs, on
one training set, several model fits (:func:`fit_parts` lists them):

* ``main``: the model on every training session; predicts the evaluated sessions (and the
  training sessions in sample, when the post-processing is fitted in sample);
* ``fold`` (one per training story): the model on the other training stories; predicts the
  held-out story, the out-of-fold predictions that rescaling (or calibration) is fitted on;
* ``unseen`` (one per evaluated listener, generalized track): a global model on the other
  listeners' sessions; predicts that listener's evaluated sessions;
* ``unseen_fold`` (per evaluated listener and training story): the same without that story,
  for the held-out listener's own out-of-fold rescaling.

Each part depends only on the windowed features, never on another part, so
:func:`fit_part` can run them in any order and in different processes (the local executor
spreads a slow model's parts over its workers); :func:`combine_parts` puts their
predictions together into the :class:`Fitted` that post-processing reads. :func:`fit_group`
does both in this process. The result does not depend on where or in which order the parts
ran: each is the same fit on the same rows.

A ``ridge`` group (personalizations ``global`` and ``per_listener``, and the global fits of
``global_calibrated`` and of unseen listeners) is not refitted part by part:
:func:`closed_form_parts` computes each training session's sums once
(:mod:`experiments.models.ridge_stats`) and makes every fit of the group a sum of them and
one solve, with the pipeline's imputation, standardisation and intercept folded in exactly
(the tests compare every ridge configuration of their store with the pipeline: CCC within
1e-8). Other models and options fall back to the pipeline.

The steps after a sweep reuse exact fits through
:class:`~experiments.evaluation.fit_cache.FitCache`.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

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


def _layout(trial: Trial) -> tuple[bool, bool]:
    """(whether the model reads each frame's position in its session, whether it reads a
    column-major float64 matrix) from its spec's ``inputs``: a tree reads one feature per node
    for every row, sequential in that layout (a full-size hist_gb configuration took 40 % less
    CPU); the others get row-major float32. The same predictions either way."""
    inputs = model_spec(trial.model).inputs
    return inputs == "position", inputs == "columns"


def _inputs(s: WindowedSession, position: bool) -> np.ndarray:
    """A session's model inputs: its windowed features, or (``position``) the one column of
    each frame's position in the session."""
    return session_position(len(s.y))[:, None] if position else s.F


def design(
    sessions: Sequence[WindowedSession],
    hop: int = 1,
    position: bool = False,
    column_major: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Stack [listener id | features] rows (every ``hop``-th frame) and labels; ``position``:
    [listener id | position in the session] instead (see :func:`_inputs`). One preallocated
    array (never per-session pieces plus their concatenation): row-major float32, or
    (``column_major``) column-major float64, which a tree's first step reads as it is."""
    y = np.concatenate([s.y[::hop] for s in sessions])
    keep = np.isfinite(y)
    p = _inputs(sessions[0], position).shape[1] if sessions else 0
    dtype = np.float64 if column_major else np.float32
    X = np.empty((int(keep.sum()), 1 + p), dtype=dtype, order="F" if column_major else "C")
    row = start = 0
    for s in sessions:
        k = keep[start : start + len(s.y[::hop])]
        start += len(k)
        n = int(k.sum())
        X[row : row + n, 0] = s.listener
        X[row : row + n, 1:] = _inputs(s, position)[::hop][k]
        row += n
    return X, y[keep]


def _predict(
    model, s: WindowedSession, column_major: bool = False, position: bool = False
) -> np.ndarray:
    F = _inputs(s, position)
    dtype = np.float64 if column_major else np.float32
    X = np.empty((len(F), 1 + F.shape[1]), dtype=dtype, order="F" if column_major else "C")
    X[:, 0] = s.listener
    X[:, 1:] = F
    return np.asarray(model.predict(X), dtype=np.float64)


def _fit(
    trial: Trial,
    train: Sequence[WindowedSession],
    personalization: str,
    predicted: Sequence[WindowedSession],
):
    """Fit ``trial``'s model with ``personalization`` on ``train``, to predict the sessions
    ``predicted``; returns (model, label mean, rows).

    A per-listener model fits its global fallback only when one of ``predicted``'s listeners
    lacks a model of their own (too few training rows): otherwise that fit, as costly as a
    global model's, would never be used.
    """
    hop = max(1, int(round(trial.hop_s * train[0].fps)))
    X, y = design(train, hop, *_layout(trial))
    if len(y) == 0:
        raise ValueError("no training rows with a finite label")
    model = make_personalizer(
        personalization, make_model(trial.model, trial.hyperparams, seed=trial.seed)
    )
    if personalization == "per_listener":
        ids, counts = np.unique(X[:, 0], return_counts=True)
        rows = dict(zip(ids.tolist(), counts.tolist(), strict=True))
        model.set_params(
            fallback=any(rows.get(float(s.listener), 0) < model.min_samples for s in predicted)
        )
    model.fit(X, y)
    return model, float(np.mean(y)), len(y)


def _predict_filled(trial: Trial, fitted, s: WindowedSession) -> np.ndarray:
    model, y_mean, _ = fitted
    position, column_major = _layout(trial)
    p = _predict(model, s, column_major, position)
    return np.where(np.isfinite(p), p, y_mean)


@dataclass(frozen=True)
class FitPart:
    """One model fit of a fit group (see the module docstring); hashable, picklable."""

    kind: str  # "main", "fold", "unseen" or "unseen_fold"
    story: int | None = None  # fold, unseen_fold: the held-out training story
    listener: int | None = None  # unseen, unseen_fold: the held-out listener


@dataclass
class PartResult:
    """What one part predicted (session -> per-frame predictions) and what it cost.

    ``in_sample``: training sessions predicted by the part's own model (``main`` and
    ``unseen`` when the post-processing is fitted in sample); ``warnings``: those raised
    while fitting, as text."""

    predictions: dict[str, np.ndarray]
    in_sample: dict[str, np.ndarray] = field(default_factory=dict)
    n_rows: int = 0
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)


def _ids(sessions: Sequence[WindowedSession]) -> tuple[str, ...]:
    return tuple(s.session for s in sessions)


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
    """A model fitted by :func:`_fit` (``fitted``) that predicts a session: ``predict`` one of
    the windowed features (remembered per session in ``memo`` when a cache made the model, its
    warnings raised again at each use), ``raw`` any (e.g. one whose features were permuted)."""

    trial: Trial
    fitted: tuple
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
    """Predictions of one fit group on one training set, before post-processing.

    ``evaluated``: the evaluated sessions; ``fit_on``: the training sessions, out of fold (or
    in sample), for fitting the post-processing; ``unseen``: evaluated sessions predicted by
    models that never saw their listener; ``unseen_fit_on``: per held-out listener, the other
    listeners' training sessions predicted (out of fold, or in sample) by models that never saw
    the held-out listener either, for fitting that listener's post-processing.
    ``global_calibrated``'s per-listener maps are not applied here: they are fitted on
    ``fit_on`` smoothed as each configuration smooths (``experiments.evaluation.evaluate``).
    """

    evaluated: dict[str, np.ndarray]
    fit_on: dict[str, np.ndarray]
    unseen: dict[str, np.ndarray]
    n_rows: int
    notes: list[str]
    unseen_fit_on: dict[int, dict[str, np.ndarray]] = field(default_factory=dict)
    #: per held-out listener, every evaluated session predicted by the models without them
    #: (the other listeners' validation sessions choose that listener's configuration)
    unseen_all: dict[int, dict[str, np.ndarray]] = field(default_factory=dict)
    #: the warnings raised while fitting the parts
    warnings: list[str] = field(default_factory=list)


def _base(trial: Trial) -> tuple[str, bool]:
    """(the personalization the models are fitted with, whether calibration follows)."""
    calibrated = trial.personalization == "global_calibrated"
    return ("global" if calibrated else trial.personalization), calibrated


def _out_of_fold(trial: Trial, train: Sequence[WindowedSession]) -> bool:
    return trial.fit_on == "out_of_fold" and len({s.story for s in train}) >= 2


def _others(train: Sequence[WindowedSession], listener: int | None) -> list[WindowedSession]:
    return [s for s in train if s.listener != listener]


def fit_parts(
    trial: Trial,
    train: Sequence[WindowedSession],
    evaluate: Sequence[WindowedSession],
    need_post_fit: bool,
    need_unseen: bool,
) -> list[FitPart]:
    """Every fit the group of ``trial`` needs on ``train``, the costliest kinds first."""
    base, calibrated = _base(trial)
    parts = [FitPart("main")]
    if (need_post_fit or calibrated) and _out_of_fold(trial, train):
        parts += [FitPart("fold", story=st) for st in sorted({s.story for s in train})]
    if need_unseen and base == "global" and not calibrated:
        for listener in sorted({s.listener for s in evaluate}):
            others = _others(train, listener)
            if not others:
                continue  # combine_parts notes it
            parts.append(FitPart("unseen", listener=listener))
            if need_post_fit and _out_of_fold(trial, others):
                parts += [
                    FitPart("unseen_fold", listener=listener, story=st)
                    for st in sorted({s.story for s in others})
                ]
    return parts


def _part_sets(
    trial: Trial,
    part: FitPart,
    train: Sequence[WindowedSession],
    evaluate: Sequence[WindowedSession],
    need_post_fit: bool,
) -> tuple[list[WindowedSession], str, list[WindowedSession], list[WindowedSession]]:
    """What ``part`` fits and predicts: (fitted on, personalization, predicted, predicted in sample)."""
    base, calibrated = _base(trial)
    in_sample: list[WindowedSession] = []
    if part.kind == "main":
        fit_on, predicted = list(train), list(evaluate)
        personalization = base
        if (need_post_fit or calibrated) and not _out_of_fold(trial, train):
            in_sample = list(train)
    elif part.kind == "fold":
        fit_on = [s for s in train if s.story != part.story]
        predicted, personalization = [s for s in train if s.story == part.story], base
    elif part.kind == "unseen":
        # every evaluated session: the held-out listener's are scored, the others' choose
        # the held-out listener's configuration without them (nested selection)
        fit_on, personalization = _others(train, part.listener), "global"
        predicted = list(evaluate)
        if need_post_fit and not _out_of_fold(trial, fit_on):
            in_sample = list(fit_on)
    elif part.kind == "unseen_fold":
        others = _others(train, part.listener)
        fit_on, personalization = [s for s in others if s.story != part.story], "global"
        predicted = [s for s in others if s.story == part.story]
    else:
        raise ValueError(f"unknown fit part {part.kind!r}: main, fold, unseen or unseen_fold")
    return fit_on, personalization, predicted, in_sample


def fit_part(
    trial: Trial,
    part: FitPart,
    train: Sequence[WindowedSession],
    evaluate: Sequence[WindowedSession],
    need_post_fit: bool,
    cache: FitScope | None = None,
) -> PartResult:
    """Fit and predict one part (see the module docstring): from sufficient statistics where
    :func:`closed_form_parts` has a closed form, else with the model's pipeline. ``cache``:
    a fit made before on the same inputs is reused
    (:class:`~experiments.evaluation.fit_cache.FitCache`)."""
    closed = (
        closed_form_parts(trial, [part], train, evaluate, need_post_fit)
        if cache is None
        else cache.closed_form(trial, [part], train, evaluate, need_post_fit)
    )
    if part in closed:
        return closed[part]
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit_on, personalization, predicted, in_sample = _part_sets(
            trial, part, train, evaluate, need_post_fit
        )
        shown = [*predicted, *in_sample]
        model = (
            _Model(trial, _fit(trial, fit_on, personalization, shown))
            if cache is None
            else cache.model(trial, fit_on, personalization, shown)
        )
        result = PartResult(
            {s.session: model.predict(s) for s in predicted},
            {s.session: model.predict(s) for s in in_sample},
            n_rows=model.fitted[2],
        )
        del model
    result.warnings = sorted({f"{type(c.message).__name__}: {c.message}" for c in caught})
    result.seconds = time.perf_counter() - t0
    return result


def _group_stats(
    trial: Trial, train: Sequence[WindowedSession], shown: Sequence[WindowedSession]
) -> SufficientStats | None:
    """The sufficient statistics of ``train``'s training rows (every hop-th frame with a
    finite label), with a fill value for each column holding NaN in ``shown`` (every session
    a part of the group may predict, whichever parts are fitted, so that a part fitted alone
    gives the same numbers); ``None`` if a feature is infinite (the pipeline raises the error)."""
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


def _own_models(
    stats: SufficientStats, fit_on: Sequence[WindowedSession]
) -> dict[int, list[WindowedSession]]:
    """The listeners of ``fit_on`` that get a model of their own under ``per_listener`` (at
    least ``PerListenerRegressor``'s ``min_samples`` training rows): listener -> sessions."""
    min_samples = PerListenerRegressor(estimator=None).min_samples
    own: dict[int, list[WindowedSession]] = {}
    for s in fit_on:
        own.setdefault(s.listener, []).append(s)
    return {
        listener: sessions
        for listener, sessions in own.items()
        if stats.n_rows([s.session for s in sessions]) >= min_samples
    }


#: personalizations whose ridge fits :func:`closed_form_parts` makes from sufficient statistics
CLOSED_FORM_PERSONALIZATIONS = ("global", "per_listener")


def closed_form_parts(
    trial: Trial,
    parts: Sequence[FitPart],
    train: Sequence[WindowedSession],
    evaluate: Sequence[WindowedSession],
    need_post_fit: bool,
) -> dict[FitPart, PartResult]:
    """The ``parts`` of a ridge fit group that have a closed form, fitted from the training
    sessions' sufficient statistics (:class:`~experiments.models.ridge_stats.SufficientStats`):
    each session's sums computed once, each fit a sum of them and one solve, the same
    predictions as the pipeline's (:func:`fit_part`) up to rounding.

    The parts left out (returned dict without them) are fitted by the pipeline: every part of
    a model other than ``ridge``, of a personalization other than
    :data:`CLOSED_FORM_PERSONALIZATIONS` (``listener_onehot``), with ``alpha <= 0``, without
    training rows, or when a feature is infinite (the pipeline then raises its own error).
    ``seconds`` of each part is an equal share of the time of all of them. Each fit predicts
    on its own (one matrix-vector product per session), so a part gives the same numbers
    whether it is fitted alone or with the others.
    """
    t0 = time.perf_counter()
    spec = model_spec(trial.model)
    alpha = spec.closed_form(spec.resolve(trial.hyperparams)) if spec.closed_form else None
    if alpha is None or not parts:
        return {}
    sets = {p: _part_sets(trial, p, train, evaluate, need_post_fit) for p in parts}
    sets = {p: v for p, v in sets.items() if v[1] in CLOSED_FORM_PERSONALIZATIONS}
    if not sets:
        return {}
    stats = _group_stats(trial, train, [*train, *evaluate])
    if stats is None:
        return {}
    fits: dict[frozenset[str], LinearFit] = {}

    def fit(sessions: Sequence[WindowedSession]) -> LinearFit:
        key = frozenset(s.session for s in sessions)
        if key not in fits:
            fits[key] = stats.fit(sorted(key), alpha)
        return fits[key]

    # per predicted session: (part, in sample) -> the fit that predicts it
    uses: dict[str, dict[tuple[FitPart, bool], LinearFit]] = {}
    shown: dict[str, WindowedSession] = {}
    n_rows = {p: stats.n_rows([s.session for s in v[0]]) for p, v in sets.items()}
    for part, (fit_on, personalization, predicted, in_sample) in sets.items():
        if n_rows[part] == 0:
            continue  # the pipeline raises its error
        own = _own_models(stats, fit_on) if personalization == "per_listener" else {}
        for flag, sessions in ((False, predicted), (True, in_sample)):
            for s in sessions:
                shown[s.session] = s
                uses.setdefault(s.session, {})[part, flag] = fit(own.get(s.listener, fit_on))
    predictions: dict[tuple[FitPart, str, bool], np.ndarray] = {}
    for sid, by_part in uses.items():
        columns = stats.predict(shown[sid].F, list(by_part.values()))
        for (part, flag), column in zip(by_part, columns.T, strict=True):
            predictions[part, sid, flag] = column
    done = [p for p in sets if n_rows[p] > 0]
    share = (time.perf_counter() - t0) / max(1, len(done))
    out = {}
    for part in done:
        _, _, predicted, in_sample = sets[part]
        out[part] = PartResult(
            {s.session: predictions[part, s.session, False] for s in predicted},
            {s.session: predictions[part, s.session, True] for s in in_sample},
            n_rows=n_rows[part],
            seconds=share,
        )
    return out


def fit_main(
    trial: Trial,
    train: Sequence[WindowedSession],
    evaluate: Sequence[WindowedSession],
    need_post_fit: bool,
    cache: FitScope | None = None,
) -> tuple[Callable[[WindowedSession], np.ndarray], PartResult]:
    """The ``main`` part fitted here with its model kept: (a function that predicts one session
    from its features, per frame, NaN filled with the training label mean; the part's result,
    as :func:`fit_part` gives it). For predictions on changed features (permutation importance,
    :mod:`experiments.evaluation.importance`) from the very model the run's predictions came from.
    ``cache``: the model made before on the same inputs is reused
    (:class:`~experiments.evaluation.fit_cache.FitCache`); the functions of configurations
    that share the model are then equal (``==``)."""
    t0 = time.perf_counter()
    base, calibrated = _base(trial)
    in_sample = (
        list(train) if (need_post_fit or calibrated) and not _out_of_fold(trial, train) else []
    )
    shown = [*evaluate, *in_sample]
    model = (
        _Model(trial, _fit(trial, train, base, shown))
        if cache is None
        else cache.model(trial, train, base, shown)
    )
    result = PartResult(
        {s.session: model.predict(s) for s in evaluate},
        {s.session: model.predict(s) for s in in_sample},
        n_rows=model.fitted[2],
    )
    result.seconds = time.perf_counter() - t0
    return model.raw, result


def combine_parts(
    trial: Trial,
    done: Mapping[FitPart, PartResult],
    train: Sequence[WindowedSession],
    evaluate: Sequence[WindowedSession],
    need_post_fit: bool,
    need_unseen: bool,
) -> Fitted:
    """The group's :class:`Fitted` from its parts' results (every part of :func:`fit_parts`)."""
    parts = fit_parts(trial, train, evaluate, need_post_fit, need_unseen)
    missing = [p for p in parts if p not in done]
    if missing:
        raise ValueError(f"fit parts missing for {trial.label()}: {missing}")

    def predictions(kind: str, listener: int | None = None) -> dict[str, np.ndarray]:
        """The predictions of every part of ``kind`` (of ``listener``), in the order of ``parts``."""
        out: dict[str, np.ndarray] = {}
        for p in parts:
            if p.kind == kind and p.listener == listener:
                out.update(done[p].predictions)
        return out

    notes: list[str] = []
    base, calibrated = _base(trial)
    main = done[FitPart("main")]
    evaluated = dict(main.predictions)

    fit_on: dict[str, np.ndarray] = {}
    if need_post_fit or calibrated:
        if _out_of_fold(trial, train):
            fit_on = predictions("fold")
        else:
            if trial.fit_on == "out_of_fold":
                notes.append(
                    f"one training story ({sorted({s.story for s in train})}): post-processing fitted in sample"
                )
            fit_on = dict(main.in_sample)
    unseen: dict[str, np.ndarray] = {}
    unseen_fit_on: dict[int, dict[str, np.ndarray]] = {}
    unseen_all: dict[int, dict[str, np.ndarray]] = {}
    if need_unseen and base == "global" and not calibrated:
        for listener in sorted({s.listener for s in evaluate}):
            others = _others(train, listener)
            if not others:
                notes.append(
                    f"listener {listener}: no other listener to train on, no unseen-listener score"
                )
                continue
            part = done[FitPart("unseen", listener=listener)]
            unseen_all[listener] = dict(part.predictions)
            unseen.update(
                {s.session: part.predictions[s.session] for s in evaluate if s.listener == listener}
            )
            if need_post_fit:  # the held-out listener's rescaling must not see them either
                if _out_of_fold(trial, others):
                    unseen_fit_on[listener] = predictions("unseen_fold", listener)
                else:
                    unseen_fit_on[listener] = dict(part.in_sample)
    return Fitted(
        evaluated,
        fit_on,
        unseen,
        main.n_rows,
        notes,
        unseen_fit_on,
        unseen_all,
        warnings=sorted({w for p in parts for w in done[p].warnings}),
    )


def fit_group(
    trial: Trial,
    train: Sequence[WindowedSession],
    evaluate: Sequence[WindowedSession],
    need_post_fit: bool,
    need_unseen: bool,
    done: Mapping[FitPart, PartResult] | None = None,
    cache: FitScope | None = None,
) -> Fitted:
    """Every fit a group of configurations (same :meth:`Trial.fit_key`) needs on one training
    set: the parts in ``done`` as given (fitted elsewhere), the others fitted here, or taken
    from ``cache`` when made before on the same inputs
    (:class:`~experiments.evaluation.fit_cache.FitCache`)."""
    done = dict(done or {})
    todo = [
        p for p in fit_parts(trial, train, evaluate, need_post_fit, need_unseen) if p not in done
    ]
    done.update(
        closed_form_parts(trial, todo, train, evaluate, need_post_fit)
        if cache is None
        else cache.closed_form(trial, todo, train, evaluate, need_post_fit)
    )
    for part in todo:
        if part not in done:
            done[part] = fit_part(trial, part, train, evaluate, need_post_fit, cache)
    return combine_parts(trial, done, train, evaluate, need_post_fit, need_unseen)
