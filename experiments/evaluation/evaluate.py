"""One configuration, start to finish: windowed features -> fit -> predict -> post-process -> scores,
under its protocol (docs/config.md, Protocols and folds; unseen listeners: docs/results.md).
Post-processing is fitted on the training stories' out-of-fold predictions, smoothed as they
will be; test stories never reach a fit or a choice. Configurations that differ only in
post-processing share their fits (:func:`evaluate_trials`).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from featurestore.parallel.base import TaskError
from featurestore.parallel.memory import release_free_memory

from ..config.grid import Trial, WindowKey
from ..config.options import CV_PROTOCOLS, selection_split
from ..data.dataset import DatasetError, load_sessions
from ..data.folds import cv_folds
from ..data.gold_standard import GoldStandard
from ..data.session_table import SessionTable
from ..models.personalization import apply_listener_calibration
from ..models.postprocess import Rescaler, fit_smoothed_calibration, rescaler_for, smooth
from ..windowing.windowed import Windowed, WindowedSession, window_sessions
from .fit_cache import FitCache
from .fitting import (
    CALIBRATION_SHRINKAGE,
    FitPart,
    Fitted,
    PartResult,
    as_text,
    fit_group,
    fit_part,
    fit_parts,
    recording,
)
from .plots import with_figures
from .scores import constant_marks, nested_selection_metrics, score_metrics, session_scores

#: the sweep, the studies and the tests take these from here too
__all__ = [
    "CALIBRATION_SHRINKAGE",
    "Task",
    "TaskData",
    "TrialResult",
    "Windowed",
    "WindowedSession",
    "evaluate_part",
    "evaluate_trial",
    "evaluate_trials",
    "fit_groups",
    "plan_tasks",
    "group_fit_parts",
    "member_predictions",
    "postprocessed",
    "run_task",
    "score_metrics",
    "session_scores",
    "split_sessions",
    "window_groups",
    "window_sessions",
]

Sessions = Sequence[WindowedSession]
Predictions = dict[str, np.ndarray]


@dataclass
class TrialResult:
    """One configuration's evaluation: metrics, per-session scores (a test session also as
    ``test_unseen``), per-frame predictions, labels and unseen-listener predictions by session,
    fitting time (s) and rows, warnings, and figures (PNG bytes by file name under ``plots/``)."""

    trial: Trial
    metrics: dict[str, float]
    scores: pd.DataFrame
    predictions: Predictions = field(default_factory=dict)
    truth: Predictions = field(default_factory=dict)
    unseen_predictions: Predictions = field(default_factory=dict)
    fit_seconds: float = 0.0
    n_train_rows: int = 0
    warnings: list[str] = field(default_factory=list)
    figures: dict[str, bytes] = field(default_factory=dict)


@dataclass
class PostProcess:
    """A configuration's post-processing as fitted on one training set: ``global_calibrated``'s
    per-listener ``maps``, then smoothing, then the ``rescaler`` (per listener or not)."""

    smooth_s: float
    smooth_method: str
    maps: dict[int | float, tuple[float, float]] | None = None
    rescaler: Rescaler | None = None
    per_listener: bool = False

    def calibrate(self, raw: np.ndarray, listener: int) -> np.ndarray:
        """``raw`` through the listener's calibration map (unchanged without maps)."""
        if self.maps is None:
            return raw
        return apply_listener_calibration(self.maps, np.full(len(raw), listener), raw)

    def smooth(self, p: np.ndarray, fps: float) -> np.ndarray:
        return smooth(p, fps, self.smooth_s, self.smooth_method) if self.smooth_s else p

    def rescale(self, p: np.ndarray, listener: int) -> np.ndarray:
        if self.rescaler is None:
            return p
        return self.rescaler.transform(p, group=listener if self.per_listener else None)

    def apply(self, raw: np.ndarray, listener: int, fps: float) -> np.ndarray:
        """One session's raw predictions calibrated, smoothed and rescaled."""
        return self.rescale(self.smooth(self.calibrate(raw, listener), fps), listener)


def _calibration_maps(
    trial: Trial, fitted: Fitted, train: Sessions
) -> dict[int | float, tuple[float, float]]:
    """``global_calibrated``'s per-listener maps, fitted on smoothed out-of-fold predictions."""
    return fit_smoothed_calibration(
        np.concatenate([s.y for s in train]),
        np.concatenate([fitted.fit_on[s.session] for s in train]),
        np.concatenate([np.full(len(s.y), s.listener, float) for s in train]),
        np.concatenate([np.full(len(s.y), s.session) for s in train]),
        train[0].fps,
        trial.smooth_s,
        trial.smooth_method or "moving_average",
        CALIBRATION_SHRINKAGE,
    )


def _smooth(t: Trial, s: WindowedSession, p: np.ndarray) -> np.ndarray:
    return smooth(p, s.fps, t.smooth_s, t.smooth_method) if t.smooth_s else p


def _rescaler(t: Trial, sessions: Sessions, predictions: Predictions) -> tuple[Rescaler, bool]:
    """(rescaler fitted on ``sessions``' labels and smoothed ``predictions``, per listener)."""
    rescaler, per_listener = rescaler_for(t.rescale)
    y = np.concatenate([s.y for s in sessions])
    p = np.concatenate([_smooth(t, s, predictions[s.session]) for s in sessions])
    ok = np.isfinite(y)
    groups = np.concatenate([np.full(len(s.y), s.listener) for s in sessions])[ok]
    return rescaler.fit(y[ok], p[ok], groups=groups if per_listener else None), per_listener


def fit_postprocess(trial: Trial, fitted: Fitted, train: Sessions) -> PostProcess:
    """``trial``'s :class:`PostProcess` fitted on ``fitted.fit_on`` (the training sessions'
    out-of-fold predictions, or in sample) and the training labels."""
    post = PostProcess(trial.smooth_s, trial.smooth_method)
    fit_on = fitted.fit_on
    if trial.personalization == "global_calibrated":
        post.maps = _calibration_maps(trial, fitted, train)
        fit_on = {s.session: post.calibrate(fit_on[s.session], s.listener) for s in train}
    if trial.rescale != "none":
        post.rescaler, post.per_listener = _rescaler(trial, train, fit_on)
    return post


def _postprocess(
    trial: Trial, fitted: Fitted, train: Sessions, evaluate: Sessions
) -> tuple[Predictions, Predictions, dict[int, Predictions]]:
    """(evaluated, held out: by the models without its listener, per held-out listener every
    evaluated session's), calibrated, smoothed and rescaled as ``trial`` says."""
    post = fit_postprocess(trial, fitted, train)
    preds = {
        s.session: post.apply(fitted.evaluated[s.session], s.listener, s.fps) for s in evaluate
    }
    with_unseen = trial.track == "generalized" and trial.unseen_listener
    nested = {
        listener: {
            s.session: _smooth(trial, s, raw[s.session]) for s in evaluate if s.session in raw
        }
        for listener, raw in (fitted.unseen_all.items() if with_unseen else ())
    }
    if trial.rescale != "none":
        # a held-out listener's rescaling: fitted on the others, predicted by models without them
        for listener, raw in nested.items():
            others = [t for t in train if t.listener != listener]
            held = _rescaler(trial, others, fitted.unseen_fit_on[listener])[0]
            nested[listener] = {sid: held.transform(p) for sid, p in raw.items()}
    held_out = {
        s.session: nested[s.listener][s.session]
        for s in evaluate
        if s.listener in nested and s.session in nested[s.listener]
    }
    return preds, held_out, nested


def postprocessed(trial: Trial, fitted: Fitted, train: Sessions, evaluate: Sessions) -> Predictions:
    """``trial``'s post-processing of ``fitted.evaluated``, fitted on ``fitted.fit_on``: the
    predictions the run scores (permuted features' predictions are post-processed alike)."""
    return _postprocess(trial, fitted, train, evaluate)[0]


@dataclass
class MemberPredictions:
    """One late fusion member's post-processed predictions: ``evaluated`` (validation, test, as
    scored), ``train`` (out of fold, post-processing fitted on training labels), ``split_of``."""

    evaluated: Predictions
    train: Predictions
    split_of: dict[str, str]
    notes: list[str] = field(default_factory=list)


def member_predictions(
    trial: Trial, w: Windowed, cache: FitCache | None = None
) -> MemberPredictions:
    """``trial``'s predictions of every session of ``w`` (protocol ``val``; training ones out of
    fold even with in-sample post-processing), fits of ``cache`` reused.

    Raises:
        ValueError: another protocol, no training or evaluated sessions, one training story.
    """
    if trial.protocol != "val":
        raise ValueError("out-of-fold member predictions are made under protocol val only")
    trial = replace(trial, unseen_listener=False, unseen_nested=False)
    parts, _, _ = _group_sets([trial], w)
    train, evaluate = parts["train"], parts["val"] + parts["test"]
    if len({s.story for s in train}) < 2:
        story = train[0].story
        raise ValueError(
            f"one training story ({story}): no out-of-fold predictions to fit a blend on"
        )
    scope = None if cache is None else cache.on(w.names)
    fitted = fit_group(trial, train, evaluate, True, False, cache=scope)
    evaluated = _postprocess(trial, fitted, train, evaluate)[0]
    oof_trial = replace(trial, fit_on="out_of_fold")
    if trial.fit_on != "out_of_fold":
        fitted = fit_group(oof_trial, train, evaluate, True, False, cache=scope)
    # the out-of-fold predictions post-processed as if they were the evaluated ones
    as_evaluated = replace(fitted, evaluated=fitted.fit_on, unseen_all={})
    on_train = _postprocess(oof_trial, as_evaluated, train, train)[0]
    split_of = {s.session: name for name in ("train", "val", "test") for s in parts[name]}
    return MemberPredictions(evaluated, on_train, split_of, [*fitted.notes, *fitted.warnings])


def split_sessions(
    w: Windowed, splits: dict[str, tuple[int, ...]]
) -> dict[str, list[WindowedSession]]:
    """``w``'s sessions by split (``train``, ``val``, ``test``), from their stories (else their own)."""
    by_story = {int(st): name for name, stories in splits.items() for st in stories}
    out: dict[str, list[WindowedSession]] = {"train": [], "val": [], "test": []}
    for s in w.sessions:
        out.get(by_story.get(s.story, s.split), []).append(s)
    return out


def evaluate_trial(trial: Trial, w: Windowed) -> TrialResult:
    """Fit, predict, post-process and score one configuration (warnings in ``.warnings``)."""
    return evaluate_trials([trial], w)[0]


def evaluate_trials(
    trials: Sequence[Trial], w: Windowed, done: Mapping[FitPart, PartResult] | None = None
) -> list[TrialResult]:
    """:func:`evaluate_trial` of configurations sharing one fit key, fitted once per training
    set (``fit_seconds``: the group's share); ``done``: parts fitted elsewhere (protocol ``val``).

    Raises:
        ValueError: different fit keys, nothing to fit or score, or ``done`` under a cross-validation.
    """
    trials, done = list(trials), dict(done or {})
    if not trials:
        return []
    _check_group(trials)
    t0 = time.perf_counter()
    first, n = trials[0], len(trials)
    with recording() as caught:
        parts, need_post_fit, need_unseen = _group_sets(trials, w)
        if done:
            _refuse_cv(first)
        group = _Group(
            trials, [{} for _ in range(n)], [{} for _ in range(n)], [{} for _ in range(n)]
        )
        for train, evaluate, split, unseen in _training_sets(trials, parts):
            fitted = fit_group(first, train, evaluate, need_post_fit, need_unseen and unseen, done)
            group.add(fitted, train, evaluate, split)
        # the parts fitted elsewhere count too: the group's fitting time wherever it was spent
        seconds = (time.perf_counter() - t0 + sum(r.seconds for r in done.values())) / n
        results = [_result(group, i, w, seconds) for i in range(n)]
    for r in results:
        r.warnings = sorted({*as_text(caught), *r.warnings})
    return results


def _check_group(trials: Sequence[Trial]) -> None:
    keys = {t.fit_key() for t in trials}
    if len(keys) != 1:
        raise ValueError(
            f"evaluate_trials takes configurations with one fit key; got {len(keys)} different ones"
        )


def _refuse_cv(trial: Trial) -> None:
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


def group_fit_parts(trials: Sequence[Trial], w: Windowed) -> list[FitPart]:
    """The fits :func:`evaluate_part` makes apart under protocol ``val`` (``[]`` otherwise)."""
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
    _refuse_cv(trials[0])
    sets, need_post_fit, _ = _group_sets(trials, w)
    return fit_part(trials[0], part, sets["train"], sets["val"] + sets["test"], need_post_fit)


@dataclass
class _Group:
    """What a fit group's configurations predicted, gathered over its training sets."""

    trials: list[Trial]
    preds: list[Predictions]
    unseen: list[Predictions]
    nested: list[dict[int, Predictions]]
    split_of: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    n_rows: int = 0

    def add(
        self, fitted: Fitted, train: Sessions, evaluate: Sessions, split: dict[str, str]
    ) -> None:
        """Post-process ``fitted`` per configuration; held-out predictions kept on test only
        (a listener's validation labels choose the others' configurations)."""
        self.notes.extend([*fitted.notes, *fitted.warnings])
        self.n_rows = max(self.n_rows, fitted.n_rows)
        for i, t in enumerate(self.trials):
            p, u, by_held_out = _postprocess(t, fitted, train, evaluate)
            self.preds[i].update(p)
            self.unseen[i].update({sid: pred for sid, pred in u.items() if split[sid] == "test"})
            for listener, held in by_held_out.items():
                self.nested[i].setdefault(listener, {}).update(held)
        self.split_of.update(split)


def _training_sets(
    trials: Sequence[Trial], parts: dict[str, list[WindowedSession]]
) -> list[tuple[list[WindowedSession], list[WindowedSession], dict[str, str], bool]]:
    """(fitted on, evaluated, session -> split, with unseen-listener fits) per training set."""
    first = trials[0]
    if first.protocol not in CV_PROTOCOLS:
        evaluate = parts["val"] + parts["test"]
        split = {s.session: k for k in ("val", "test") for s in parts[k]}
        return [(parts["train"], evaluate, split, True)]
    pool, scored_as = parts["train"] + parts["val"], selection_split(first.protocol)
    # nested (LOSO): each fold fitted without each listener too, to score the others' story
    nested = any(
        t.protocol == "loso" and t.track == "generalized" and t.unseen_listener and t.unseen_nested
        for t in trials
    )
    sets = []
    for held in cv_folds(pool, first.protocol, first.folds):
        out = {s.session for s in held}
        if rest := [s for s in pool if s.session not in out]:
            sets.append((rest, held, {s.session: scored_as for s in held}, nested))
    if parts["test"]:
        sets.append((pool, parts["test"], {s.session: "test" for s in parts["test"]}, True))
    return sets


def _result(group: _Group, i: int, w: Windowed, seconds: float) -> TrialResult:
    t, p, u = group.trials[i], group.preds[i], group.unseen[i]
    by_session = {s.session: s for s in w.sessions}
    predicted = (
        (by_session[sid], group.split_of[sid] + suffix, pred)
        for suffix, source in (("", p), ("_unseen", u))
        for sid, pred in source.items()
    )
    scores = session_scores(predicted, t.metric)
    truth = {sid: by_session[sid].y for sid in p}
    fps = {sid: by_session[sid].fps for sid in p}
    metrics = score_metrics(scores, p, truth, t.seed, u, fps, t.averaging, t.metric)
    metrics.update(constant_marks(p, group.split_of))
    protocol = group.trials[0].protocol
    metrics.update(
        nested_selection_metrics(group.nested[i], by_session, group.split_of, protocol, t.metric)
    )
    return TrialResult(
        t, metrics, scores, p, truth, u, seconds, group.n_rows, sorted(set(group.notes))
    )


# --------------------------------------------------------------------------- a sweep's tasks
@dataclass(frozen=True)
class TaskData:
    """What a sweep's tasks load: the store (absolute for a remote backend), what its frame
    tables are loaded with, the ``sessions`` (None: all) and the store's ``fingerprint``."""

    store: str
    channels: tuple[str, ...]
    target: str
    splits: tuple[tuple[str, tuple[int, ...]], ...]
    gold_standard: GoldStandard
    sessions: tuple[str, ...] | None = None
    fingerprint: str = ""


@dataclass(frozen=True)
class Task:
    """A sweep's task: a fit group on ``data``, figures drawn where it runs; ``done``: parts fitted by others."""

    trials: tuple[Trial, ...]
    data: TaskData | None
    figures: bool = False
    done: tuple[tuple[FitPart, PartResult], ...] = ()

    @property
    def key(self) -> WindowKey:
        return self.trials[0].window_key()


def window_groups(trials: Sequence[Trial]) -> dict[WindowKey, list[Trial]]:
    """``trials`` by window key (first appearance order)."""
    return _grouped(trials, Trial.window_key)


def fit_groups(trials: Sequence[Trial]) -> list[tuple[Trial, ...]]:
    """``trials`` by :meth:`Trial.fit_key` (first appearance order), each group one task."""
    return [tuple(g) for g in _grouped(trials, Trial.fit_key).values()]


def _grouped(trials: Sequence[Trial], key: Callable[[Trial], Any]) -> dict[Any, list[Trial]]:
    groups: dict[Any, list[Trial]] = {}
    for t in trials:
        groups.setdefault(key(t), []).append(t)
    return groups


def plan_tasks(trials: Sequence[Trial], data: TaskData, figures: bool) -> list[Task]:
    """A task per fit group of ``trials``, by window key."""
    return [
        Task(group, data, figures)
        for key_trials in window_groups(trials).values()
        for group in fit_groups(key_trials)
    ]


#: windowed feature sets a process keeps (least recently used dropped first)
WINDOW_CACHE_SIZE = 2
# per process: the frame tables of one sweep's data, and the last window keys' features
_LOCK = threading.Lock()
_TABLES: dict[TaskData | None, list[SessionTable]] = {}
_WINDOWED: OrderedDict[tuple[TaskData | None, WindowKey], Windowed] = OrderedDict()


def tables(data: TaskData | None) -> list[SessionTable]:
    """``data``'s frame tables in this process, loaded on first use (DatasetError if not there)."""
    with _LOCK:
        if data not in _TABLES:
            if data is None:
                raise DatasetError("a task without data found no windowed features shared with it")
            _TABLES.clear()
            _TABLES[data] = load_sessions(
                data.store,
                list(data.channels),
                target=data.target,
                splits={k: list(v) for k, v in data.splits},
                sessions=None if data.sessions is None else list(data.sessions),
                gold_standard=data.gold_standard,
            )
        return _TABLES[data]


def share(data: TaskData | None, key: WindowKey, w: Windowed) -> None:
    """Hold ``w`` as ``data``'s features for ``key`` in this process (forked workers inherit it)."""
    with _LOCK:
        _WINDOWED[data, key] = w
        while len(_WINDOWED) > WINDOW_CACHE_SIZE:
            _WINDOWED.popitem(last=False)


def forget(tables: bool = True) -> int:
    """Drop the windowed features (and frame tables) this process holds; how many were dropped."""
    with _LOCK:
        n = len(_WINDOWED) + len(_TABLES) * tables
        _WINDOWED.clear()
        if tables:
            _TABLES.clear()
    return n


def windowed(task: Task) -> Windowed:
    """The task's windowed features: shared with this process, else windowed here (kept)."""
    held = _WINDOWED.get((task.data, task.key))
    if held is None:
        held = window_sessions(tables(task.data), task.key)
        share(task.data, task.key, held)
    _WINDOWED.move_to_end((task.data, task.key))
    return held


def run_task(task: Task) -> list[TrialResult]:
    """Load, window, fit and score one task wherever it runs (figures when ``task.figures``).

    Raises:
        DatasetError: a problem of the store (it stops the sweep).
        TaskError: the windowing failed (it fails the task's configurations only).
    """
    try:
        w = windowed(task)
    except DatasetError:
        raise
    except Exception as e:
        raise TaskError(f"windowing failed: {type(e).__name__}: {e}") from e
    try:
        results = evaluate_trials(task.trials, w, dict(task.done))
        return [with_figures(r) for r in results] if task.figures else results
    finally:
        release_free_memory()  # an idle worker does not keep the fit's memory
