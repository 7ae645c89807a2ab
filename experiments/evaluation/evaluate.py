"""One configuration, start to finish: windowed features -> fit -> predict -> post-process -> CCC.

Protocols:

* ``val``: fit on the training stories, predict every frame of the validation and test
  stories; both are scored (selection uses validation only).
* ``loso``: leave one story out over train + val: for each of those stories, fit on the
  others and predict it (scored as split ``loso``); test is predicted by a model fitted on
  all train + val stories.
* ``lopo``, ``kfold_person``, ``kfold_group``: the same with other folds over train + val
  (leave one person out; ``folds`` folds of whole persons or whole groups, see
  :func:`experiments.data.folds.cv_folds`), scored as split ``cv``.
* **unseen listeners** (generalized-track configurations, ``unseen_listener`` on): for each
  listener, a model fitted on the *other* listeners' training sessions predicts that
  listener's test sessions (split ``test_unseen``): how well the model predicts a person it
  has never seen. The same models predict the other listeners' validation sessions (under
  ``loso``, with ``unseen_listener: {selection: nested}``: each LOSO fold also fitted without
  each listener, predicting the other listeners' held-out story), whose scores
  ``<val|loso>_without_listener_<L>.ccc_generalized`` choose L's configuration without L
  (:func:`nested_selection_metrics`). No ``val_unseen`` split: L's validation stories are
  among the labels that choose a configuration for every other listener, and a score of L on
  them would be read as a held-out number it is not.

Post-processing that is fitted (rescaling, and the per-listener maps of
``global_calibrated``) is fitted on **out-of-fold** predictions of the training stories:
each training story predicted by a model fitted on the other training stories (leave one
training story out), smoothed like the predictions it will transform. In-sample predictions
of a flexible model are optimistic (too close to the labels, too wide), which skews the
rescaling; ``postprocess.fit_on: in_sample`` keeps the old behaviour to show the difference.

Configurations that differ only in post-processing (smoothing, rescaling) share their fits:
:func:`evaluate_trials` fits once per :meth:`~experiments.config.grid.Trial.fit_key` and
post-processes for each.

Test stories never reach ``fit``, the rescaler, or any choice made from data.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from ..config.grid import Trial
from ..config.options import CV_PROTOCOLS, selection_split
from ..data.folds import cv_folds
from ..models.personalization import apply_listener_calibration
from ..models.postprocess import Rescaler, fit_smoothed_calibration, rescaler_for, smooth
from ..windowing.windowed import Windowed, WindowedSession, window_sessions
from .fit_cache import FitCache
from .fitting import (
    CALIBRATION_SHRINKAGE,
    FitPart,
    Fitted,
    PartResult,
    fit_group,
    fit_part,
    fit_parts,
)
from .scores import nested_selection_metrics, score_metrics, session_scores

#: re-exported: the sweep, the agreement study and the tests take them from here
__all__ = [
    "CALIBRATION_SHRINKAGE",
    "TrialResult",
    "Windowed",
    "WindowedSession",
    "evaluate_part",
    "evaluate_trial",
    "evaluate_trials",
    "group_fit_parts",
    "member_predictions",
    "postprocessed",
    "score_metrics",
    "session_scores",
    "split_sessions",
    "window_sessions",
]


@dataclass
class TrialResult:
    trial: Trial
    metrics: dict[str, float]
    scores: (
        pd.DataFrame
    )  # session, listener, story, split, ccc (a test session twice: test and test_unseen)
    predictions: dict[str, np.ndarray] = field(
        default_factory=dict
    )  # session -> per-frame prediction
    truth: dict[str, np.ndarray] = field(default_factory=dict)
    #: test session -> prediction of a model fitted without that session's listener (generalized track)
    unseen_predictions: dict[str, np.ndarray] = field(default_factory=dict)
    fit_seconds: float = 0.0
    n_train_rows: int = 0
    warnings: list[str] = field(default_factory=list)
    #: figures drawn where the configuration was evaluated (a worker process): PNG bytes by file
    #: name under the run's ``plots/`` (see ``experiments.evaluation.plots.trial_figures``); empty if not drawn
    figures: dict[str, bytes] = field(default_factory=dict)


def _calibrate(
    trial: Trial,
    fitted: Fitted,
    train: Sequence[WindowedSession],
    evaluate: Sequence[WindowedSession],
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """``global_calibrated``: each listener's map fitted on the training stories' out-of-fold
    predictions smoothed as ``trial`` smooths, applied to the evaluated and the training
    predictions (unsmoothed; smoothing commutes with the map): (evaluated, fit_on)."""
    maps = fit_smoothed_calibration(
        np.concatenate([s.y for s in train]),
        np.concatenate([fitted.fit_on[s.session] for s in train]),
        np.concatenate([np.full(len(s.y), s.listener, float) for s in train]),
        np.concatenate([np.full(len(s.y), s.session) for s in train]),
        train[0].fps,
        trial.smooth_s,
        trial.smooth_method or "moving_average",
        CALIBRATION_SHRINKAGE,
    )

    def apply(sessions, predictions):
        return {
            s.session: apply_listener_calibration(
                maps, np.full(len(s.y), s.listener), predictions[s.session]
            )
            for s in sessions
        }

    return apply(evaluate, fitted.evaluated), apply(train, fitted.fit_on)


def _postprocess(
    trial: Trial,
    fitted: Fitted,
    train: Sequence[WindowedSession],
    evaluate: Sequence[WindowedSession],
):
    """``trial``'s smoothing and rescaling of the group's predictions: (predictions, unseen predictions)."""

    def post(s: WindowedSession, p: np.ndarray) -> np.ndarray:
        return smooth(p, s.fps, trial.smooth_s, trial.smooth_method) if trial.smooth_s else p

    evaluated, fit_on = fitted.evaluated, fitted.fit_on
    if trial.personalization == "global_calibrated":
        evaluated, fit_on = _calibrate(trial, fitted, train, evaluate)
    preds = {s.session: post(s, evaluated[s.session]) for s in evaluate}
    with_unseen = trial.track == "generalized" and trial.unseen_listener
    # per held-out listener: every evaluated session predicted by the models without them
    nested = {
        listener: {s.session: post(s, raw[s.session]) for s in evaluate if s.session in raw}
        for listener, raw in (fitted.unseen_all.items() if with_unseen else ())
    }
    if trial.rescale == "none":
        return preds, _held_out(nested, evaluate), nested

    def fitted_rescaler(
        sessions: Sequence[WindowedSession], predictions: dict[str, np.ndarray]
    ) -> tuple[Rescaler, bool]:
        rescaler, per_listener = rescaler_for(trial.rescale)
        y = np.concatenate([s.y for s in sessions])
        p = np.concatenate([post(s, predictions[s.session]) for s in sessions])
        groups = (
            np.concatenate([np.full(len(s.y), s.listener) for s in sessions])
            if per_listener
            else None
        )
        ok = np.isfinite(y)
        return rescaler.fit(
            y[ok], p[ok], groups=None if groups is None else groups[ok]
        ), per_listener

    rescaler, per_listener = fitted_rescaler(train, fit_on)
    preds = {
        sid: rescaler.transform(p, group=by.listener if per_listener else None)
        for (sid, p), by in zip(preds.items(), evaluate, strict=True)
    }
    # an unseen listener's rescaling: fitted on the other listeners, predicted by models without them
    for listener, raw in nested.items():
        others = [t for t in train if t.listener != listener]
        held_rescaler = fitted_rescaler(others, fitted.unseen_fit_on[listener])[0]
        nested[listener] = {sid: held_rescaler.transform(p) for sid, p in raw.items()}
    return preds, _held_out(nested, evaluate), nested


def postprocessed(
    trial: Trial,
    fitted: Fitted,
    train: Sequence[WindowedSession],
    evaluate: Sequence[WindowedSession],
) -> dict[str, np.ndarray]:
    """``trial``'s calibration, smoothing and rescaling of ``fitted.evaluated`` (the sessions
    ``evaluate``), fitted on ``fitted.fit_on`` (the sessions ``train``), by session: the
    predictions the run scores. The same function of its inputs whatever ``fitted.evaluated``
    holds, so permuted features' predictions are post-processed as the run's were."""
    return _postprocess(trial, fitted, train, evaluate)[0]


def _held_out(
    nested: dict[int, dict[str, np.ndarray]], evaluate: Sequence[WindowedSession]
) -> dict[str, np.ndarray]:
    """Each evaluated session's prediction by the models fitted without its listener."""
    return {
        s.session: nested[s.listener][s.session]
        for s in evaluate
        if s.listener in nested and s.session in nested[s.listener]
    }


@dataclass
class MemberPredictions:
    """One configuration's post-processed predictions, for a late fusion
    (:mod:`experiments.evaluation.fusion`): ``evaluated``, the validation and test sessions'
    (what the configuration's run scores); ``train``, the training sessions' **out of fold**
    (each training story predicted by the models fitted on the other training stories, then
    smoothed, calibrated and rescaled as the configuration does, the rescaling fitted on the
    training labels only); ``split_of``: session -> ``train``, ``val`` or ``test``."""

    evaluated: dict[str, np.ndarray]
    train: dict[str, np.ndarray]
    split_of: dict[str, str]
    notes: list[str] = field(default_factory=list)


def member_predictions(
    trial: Trial, w: Windowed, cache: FitCache | None = None
) -> MemberPredictions:
    """``trial``'s predictions of every session of ``w`` (protocol ``val``): see
    :class:`MemberPredictions`. The evaluated ones are those its run logged (the same fits);
    the training ones out of fold even when the configuration fits its post-processing in sample
    (``postprocess.fit_on: in_sample``: its leave-one-story-out fits are then made here too).
    ``cache``: fits made before on the same inputs are reused (e.g. the other track's choice of
    the same fit group; :class:`~experiments.evaluation.fit_cache.FitCache`), the same numbers.

    Raises:
        ValueError: protocol ``loso``, no training or evaluated sessions, or a single training
            story (no out-of-fold predictions).
    """
    if trial.protocol != "val":
        raise ValueError("out-of-fold member predictions are made under protocol val only")
    trial = replace(trial, unseen_listener=False, unseen_nested=False)
    parts, _, _ = _group_sets([trial], w)
    train, evaluate = parts["train"], parts["val"] + parts["test"]
    if len({s.story for s in train}) < 2:
        raise ValueError(
            f"one training story ({train[0].story}): no out-of-fold predictions to fit a blend on"
        )
    scope = None if cache is None else cache.on(w.names)
    fitted = fit_group(trial, train, evaluate, need_post_fit=True, need_unseen=False, cache=scope)
    evaluated = _postprocess(trial, fitted, train, evaluate)[0]
    oof_trial = replace(trial, fit_on="out_of_fold")
    if trial.fit_on != "out_of_fold":
        fitted = fit_group(
            oof_trial, train, evaluate, need_post_fit=True, need_unseen=False, cache=scope
        )
    # the out-of-fold predictions post-processed as if they were the evaluated ones
    as_evaluated = replace(fitted, evaluated=fitted.fit_on, unseen_all={})
    on_train = _postprocess(oof_trial, as_evaluated, train, train)[0]
    split_of = {s.session: name for name in ("train", "val", "test") for s in parts[name]}
    return MemberPredictions(evaluated, on_train, split_of, [*fitted.notes, *fitted.warnings])


def split_sessions(
    w: Windowed, splits: dict[str, tuple[int, ...]]
) -> dict[str, list[WindowedSession]]:
    """``w``'s sessions by split (``train``, ``val``, ``test``), each session's split looked up from its story."""
    by_story = {int(st): name for name, stories in splits.items() for st in stories}
    out: dict[str, list[WindowedSession]] = {"train": [], "val": [], "test": []}
    for s in w.sessions:
        name = by_story.get(s.story, s.split)
        if name in out:
            out[name].append(s)
    return out


def evaluate_trial(trial: Trial, w: Windowed) -> TrialResult:
    """Fit, predict, post-process and score one configuration under its protocol.

    Warnings raised while fitting (e.g. a solver that did not converge) are collected in
    ``TrialResult.warnings`` instead of flooding the console; the sweep logs them as a tag.
    """
    return evaluate_trials([trial], w)[0]


def evaluate_trials(
    trials: Sequence[Trial], w: Windowed, done: dict[FitPart, PartResult] | None = None
) -> list[TrialResult]:
    """Evaluate configurations that share one :meth:`~experiments.config.grid.Trial.fit_key`, fitting once.

    Each result is what :func:`evaluate_trial` gives for that configuration alone; only the
    fits are shared. ``fit_seconds`` of each result is the group's time divided among them.
    ``done``: fit parts already fitted elsewhere (:func:`group_fit_parts`,
    :func:`evaluate_part`; protocol ``val`` only); the same results as without them.

    Raises:
        ValueError: the configurations do not share a fit key, or there is nothing to fit or
            score, or ``done`` is given for the ``loso`` protocol.
    """
    trials = list(trials)
    if not trials:
        return []
    _check_group(trials)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = _evaluate_group(trials, w, dict(done or {}))
    messages = sorted({f"{type(c.message).__name__}: {c.message}" for c in caught})
    for r in results:
        r.warnings = sorted({*messages, *r.warnings})
    return results


def _check_group(trials: Sequence[Trial]) -> None:
    keys = {t.fit_key() for t in trials}
    if len(keys) != 1:
        raise ValueError(
            f"evaluate_trials takes configurations with one fit key; got {len(keys)} different ones"
        )


def _refuse_loso(trial: Trial) -> None:
    if trial.protocol in CV_PROTOCOLS:
        raise ValueError(
            f"fit parts are made apart under protocol val only; {trial.protocol} groups are fitted whole"
        )


def _group_sets(
    trials: Sequence[Trial], w: Windowed
) -> tuple[dict[str, list[WindowedSession]], bool, bool]:
    """(sessions by split, need_post_fit, need_unseen) of a fit group."""
    first = trials[0]
    parts = split_sessions(w, dict(first.splits))
    if not parts["train"]:
        raise ValueError(
            f"no training sessions (stories {dict(first.splits).get('train')}) in the store"
        )
    if first.protocol not in CV_PROTOCOLS and not parts["val"] + parts["test"]:
        raise ValueError("no validation or test sessions to score")
    need_post_fit = any(t.rescale != "none" for t in trials)
    need_unseen = any(t.track == "generalized" and t.unseen_listener for t in trials)
    return parts, need_post_fit, need_unseen


def _nested_loso(trials: Sequence[Trial]) -> bool:
    """Whether each LOSO fold is also fitted without each listener: nested selection of the
    unseen-listener configuration under protocol ``loso`` (generalized configurations only)."""
    return any(
        t.protocol == "loso" and t.track == "generalized" and t.unseen_listener and t.unseen_nested
        for t in trials
    )


def group_fit_parts(trials: Sequence[Trial], w: Windowed) -> list[FitPart]:
    """The fits (:class:`~experiments.evaluation.fitting.FitPart`) of a fit group under protocol ``val``,
    which :func:`evaluate_part` can make apart (in other processes) and :func:`evaluate_trials`
    then uses; ``[]`` under ``loso`` (several training sets: the group is fitted as a whole)."""
    trials = list(trials)
    _check_group(trials)
    if trials[0].protocol in CV_PROTOCOLS:
        return []
    sets, need_post_fit, need_unseen = _group_sets(trials, w)
    return fit_parts(
        trials[0], sets["train"], sets["val"] + sets["test"], need_post_fit, need_unseen
    )


def evaluate_part(trials: Sequence[Trial], w: Windowed, part: FitPart) -> PartResult:
    """Fit and predict one part of a fit group (protocol ``val``), see :func:`group_fit_parts`."""
    trials = list(trials)
    _check_group(trials)
    _refuse_loso(trials[0])
    sets, need_post_fit, _ = _group_sets(trials, w)
    return fit_part(trials[0], part, sets["train"], sets["val"] + sets["test"], need_post_fit)


def _evaluate_group(
    trials: list[Trial], w: Windowed, done: dict[FitPart, PartResult]
) -> list[TrialResult]:
    t0 = time.perf_counter()
    first = trials[0]
    parts, need_post_fit, need_unseen = _group_sets(trials, w)
    if done:
        _refuse_loso(first)
    preds: list[dict[str, np.ndarray]] = [{} for _ in trials]
    unseen: list[dict[str, np.ndarray]] = [{} for _ in trials]
    nested: list[dict[int, dict[str, np.ndarray]]] = [{} for _ in trials]
    split_of: dict[str, str] = {}
    notes: list[str] = []
    n_rows = 0

    def run(
        train: list[WindowedSession],
        evaluate: list[WindowedSession],
        split: dict[str, str],
        with_unseen: bool,
    ) -> None:
        nonlocal n_rows
        fitted = fit_group(first, train, evaluate, need_post_fit, need_unseen and with_unseen, done)
        notes.extend([*fitted.notes, *fitted.warnings])
        n_rows = max(n_rows, fitted.n_rows)
        for i, t in enumerate(trials):
            p, u, by_held_out = _postprocess(t, fitted, train, evaluate)
            preds[i].update(p)
            # a listener's held-out score on test only (no val_unseen: see the module docstring)
            unseen[i].update({sid: pred for sid, pred in u.items() if split[sid] == "test"})
            for listener, held in by_held_out.items():
                nested[i].setdefault(listener, {}).update(held)
        split_of.update(split)

    if first.protocol in CV_PROTOCOLS:
        pool = parts["train"] + parts["val"]
        scored_as = selection_split(first.protocol)
        for held in cv_folds(pool, first.protocol, first.folds):
            out = {s.session for s in held}
            rest = [s for s in pool if s.session not in out]
            if rest:
                # nested (LOSO): the fold fitted without each listener too, to score the others' story
                run(
                    rest,
                    held,
                    {s.session: scored_as for s in held},
                    with_unseen=_nested_loso(trials),
                )
        if parts["test"]:
            run(pool, parts["test"], {s.session: "test" for s in parts["test"]}, with_unseen=True)
    else:
        evaluate = parts["val"] + parts["test"]
        run(
            parts["train"],
            evaluate,
            {s.session: name for name in ("val", "test") for s in parts[name]},
            with_unseen=True,
        )

    by_session = {s.session: s for s in w.sessions}
    # the parts fitted elsewhere count too: the group's fitting time wherever it was spent
    seconds = (time.perf_counter() - t0 + sum(r.seconds for r in done.values())) / len(trials)
    results = []
    for t, p, u, n in zip(trials, preds, unseen, nested, strict=True):
        scores = session_scores(
            (
                (by_session[sid], split_of[sid] + suffix, pred)
                for suffix, source in (("", p), ("_unseen", u))
                for sid, pred in source.items()
            ),
            t.metric,
        )
        truth = {sid: by_session[sid].y for sid in p}
        metrics = score_metrics(
            scores,
            predictions=p,
            truth=truth,
            seed=t.seed,
            unseen_predictions=u,
            fps={sid: by_session[sid].fps for sid in p},
            averaging=t.ccc_averaging,
            metric=t.metric,
        )
        metrics.update(nested_selection_metrics(n, by_session, split_of, first.protocol, t.metric))
        results.append(
            TrialResult(
                t,
                metrics,
                scores,
                p,
                truth,
                u,
                fit_seconds=seconds,
                n_train_rows=n_rows,
                warnings=sorted(set(notes)),
            )
        )
    return results
