"""One configuration, start to finish: windowed features -> fit -> predict -> post-process -> CCC.

Protocols:

* ``val``: fit on the training stories, predict every frame of the validation and test
  stories; both are scored (selection uses validation only).
* ``loso``: leave one story out over train + val: for each of those stories, fit on the
  others and predict it (scored as split ``loso``); test is predicted by a model fitted on
  all train + val stories.
* **unseen listeners** (generalized-track configurations, ``unseen_listener`` on): for each
  listener, a model fitted on the *other* listeners' training sessions predicts that
  listener's evaluated sessions (splits ``val_unseen`` / ``test_unseen``, ``loso`` ->
  ``test_unseen`` only): how well the model predicts a person it has never seen.

Post-processing that is fitted (rescaling, and the per-listener maps of
``global_calibrated``) is fitted on **out-of-fold** predictions of the training stories:
each training story predicted by a model fitted on the other training stories (leave one
training story out), smoothed like the predictions it will transform. In-sample predictions
of a flexible model are optimistic (too close to the labels, too wide), which skews the
rescaling; ``postprocess.fit_on: in_sample`` keeps the old behaviour to show the difference.

Configurations that differ only in post-processing (smoothing, rescaling) share their fits:
:func:`evaluate_trials` fits once per :meth:`~experiments.grid.Trial.fit_key` and
post-processes for each.

Test stories never reach ``fit``, the rescaler, or any choice made from data.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .grid import Trial, WindowKey
from .metrics import ccc, ccc_protocols
from .models import make_model
from .personalization import apply_listener_calibration, fit_listener_calibration, make_personalizer
from .postprocess import rescaler_for, smooth
from .session_table import SessionTable
from .uncertainty import bootstrap_protocols, chance_level
from .windowing import window_stats

#: the shrinkage (rows) of the per-listener maps of ``global_calibrated``
CALIBRATION_SHRINKAGE = 100.0


@dataclass
class WindowedSession:
    """A session's windowed features for one :class:`WindowKey`."""

    session: str
    listener: int
    story: int
    split: str
    F: np.ndarray  # (n_frames, p) float32
    y: np.ndarray  # (n_frames,) float32
    fps: float


@dataclass
class Windowed:
    key: WindowKey
    sessions: list[WindowedSession]
    names: list[str]


def window_sessions(tables: Sequence[SessionTable], key: WindowKey) -> Windowed:
    """Windowed features of the channels in ``key`` for every session.

    ``valid_frac`` is computed once per channel (the windowed fraction of valid frames),
    the other statistics per column. Both are written into one float32 matrix per session.
    """
    out: list[WindowedSession] = []
    names: list[str] = []
    stats = [s for s in key.stats if s != "valid_frac"]
    for t in tables:
        missing = [c for c in key.channels if c not in t.channels]
        if missing:
            raise KeyError(f"{t.session}: feature set {key.feature_set!r} needs {missing}, loaded: {t.channels}")
        ch_idx = [t.channels.index(c) for c in key.channels]
        cols = np.flatnonzero(np.isin(t.column_channel, ch_idx))
        n_stats = len(cols) * len(stats) * len(key.lengths_s)
        n_frac = len(ch_idx) * len(key.lengths_s) if "valid_frac" in key.stats else 0
        F = np.empty((t.n_frames, n_stats + n_frac), dtype=np.float32)
        part_names: list[str] = []
        window = {"fps": t.fps, "lengths_s": key.lengths_s, "delay_s": key.delay_s, "align": key.align}
        if stats:
            X = t.X if len(cols) == t.X.shape[1] else t.X[:, cols]  # all columns: no copy
            _, nm = window_stats(X, t.valid[:, t.column_channel[cols]], stats=stats,
                                 columns=[t.columns[i] for i in cols], out=F[:, :n_stats], **window)  # fmt: skip
            part_names += nm
        if n_frac:
            _, nm = window_stats(np.where(t.valid[:, ch_idx], 1.0, np.nan), None, stats=["valid_frac"],
                                 columns=list(key.channels), out=F[:, n_stats:], **window)  # fmt: skip
            part_names += nm
        if not names:
            names = part_names
        out.append(WindowedSession(t.session, t.listener, t.story, t.split, F, np.asarray(t.y, np.float32), t.fps))
    return Windowed(key, out, names)


@dataclass
class TrialResult:
    trial: Trial
    metrics: dict[str, float]
    scores: pd.DataFrame  # session, listener, story, split, ccc (a session twice: its split and <split>_unseen)
    predictions: dict[str, np.ndarray] = field(default_factory=dict)  # session -> per-frame prediction
    truth: dict[str, np.ndarray] = field(default_factory=dict)
    #: session -> prediction of a model fitted without that session's listener (generalized track)
    unseen_predictions: dict[str, np.ndarray] = field(default_factory=dict)
    fit_seconds: float = 0.0
    n_train_rows: int = 0
    warnings: list[str] = field(default_factory=list)
    #: figures drawn where the configuration was evaluated (a worker process): PNG bytes by file
    #: name under the run's ``plots/`` (see ``experiments.plots.trial_figures``); empty if not drawn
    figures: dict[str, bytes] = field(default_factory=dict)


def _design(sessions: Sequence[WindowedSession], hop: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Stack [listener id | features] rows (every ``hop``-th frame) and labels.

    Written into one preallocated array: the training matrix exists once, never as
    per-session pieces plus their concatenation.
    """
    y = np.concatenate([s.y[::hop] for s in sessions])
    keep = np.isfinite(y)
    p = sessions[0].F.shape[1] if sessions else 0
    X = np.empty((int(keep.sum()), 1 + p), dtype=np.float32)
    row = start = 0
    for s in sessions:
        k = keep[start : start + len(s.y[::hop])]
        start += len(k)
        n = int(k.sum())
        X[row : row + n, 0] = s.listener
        X[row : row + n, 1:] = s.F[::hop][k]
        row += n
    return X, y[keep]


#: models that predict faster from a column-major float64 matrix: a tree reads one feature
#: per node for every row, which is sequential in that layout (a hist_gb configuration of the
#: full-size ablation took 40 % less CPU, same predictions); the others get row-major float32
COLUMN_MAJOR_MODELS = ("hist_gb",)


def _predict(model, s: WindowedSession, column_major: bool = False) -> np.ndarray:
    if column_major:
        X = np.empty((len(s.F), 1 + s.F.shape[1]), dtype=np.float64, order="F")
    else:
        X = np.empty((len(s.F), 1 + s.F.shape[1]), dtype=np.float32)
    X[:, 0] = s.listener
    X[:, 1:] = s.F
    return np.asarray(model.predict(X), dtype=np.float64)


@dataclass
class _Fitted:
    """Predictions of one fit group on one training set, before post-processing.

    ``evaluated``: the evaluated sessions; ``fit_on``: the training sessions, out of fold (or
    in sample), for fitting the post-processing; ``unseen``: evaluated sessions predicted by
    models that never saw their listener; ``unseen_fit_on``: per held-out listener, the other
    listeners' training sessions predicted (out of fold, or in sample) by models that never saw
    the held-out listener either, for fitting that listener's post-processing.
    """

    evaluated: dict[str, np.ndarray]
    fit_on: dict[str, np.ndarray]
    unseen: dict[str, np.ndarray]
    n_rows: int
    notes: list[str]
    unseen_fit_on: dict[int, dict[str, np.ndarray]] = field(default_factory=dict)


def _fit(trial: Trial, train: Sequence[WindowedSession], personalization: str):
    """Fit ``trial``'s model with ``personalization`` on ``train``; returns (model, label mean, rows)."""
    hop = max(1, int(round(trial.hop_s * train[0].fps)))
    X, y = _design(train, hop)
    if len(y) == 0:
        raise ValueError("no training rows with a finite label")
    model = make_personalizer(personalization, make_model(trial.model, trial.hyperparams, seed=trial.seed))
    model.fit(X, y)
    return model, float(np.mean(y)), len(y)


def _predict_filled(trial: Trial, fitted, s: WindowedSession) -> np.ndarray:
    model, y_mean, _ = fitted
    p = _predict(model, s, trial.model in COLUMN_MAJOR_MODELS)
    return np.where(np.isfinite(p), p, y_mean)


def _fit_group(
    trial: Trial, train: Sequence[WindowedSession], evaluate: Sequence[WindowedSession], need_post_fit: bool, need_unseen: bool
) -> _Fitted:
    """Every fit a group of configurations (same :meth:`Trial.fit_key`) needs on one training set."""
    notes: list[str] = []
    calibrated = trial.personalization == "global_calibrated"
    base = "global" if calibrated else trial.personalization
    main = _fit(trial, train, base)
    evaluated = {s.session: _predict_filled(trial, main, s) for s in evaluate}

    fit_on: dict[str, np.ndarray] = {}
    if need_post_fit or calibrated:
        fit_on = _fit_on_predictions(trial, train, base, main, notes)
    if calibrated:
        listeners = np.concatenate([np.full(len(s.y), s.listener, float) for s in train])
        pred = np.concatenate([fit_on[s.session] for s in train])
        y = np.concatenate([s.y for s in train])
        ok = np.isfinite(y)
        maps = fit_listener_calibration(listeners[ok], pred[ok], y[ok], CALIBRATION_SHRINKAGE)
        evaluated = {s.session: apply_listener_calibration(maps, np.full(len(s.y), s.listener), evaluated[s.session]) for s in evaluate}
        fit_on = {s.session: apply_listener_calibration(maps, np.full(len(s.y), s.listener), fit_on[s.session]) for s in train}
    n_rows = main[2]
    del main

    unseen: dict[str, np.ndarray] = {}
    unseen_fit_on: dict[int, dict[str, np.ndarray]] = {}
    if need_unseen and base == "global" and not calibrated:
        for listener in sorted({s.listener for s in evaluate}):
            others = [s for s in train if s.listener != listener]
            if not others:
                notes.append(f"listener {listener}: no other listener to train on, no unseen-listener score")
                continue
            fold = _fit(trial, others, "global")
            unseen.update({s.session: _predict_filled(trial, fold, s) for s in evaluate if s.listener == listener})
            if need_post_fit:  # the held-out listener's rescaling must not see them either
                unseen_fit_on[listener] = _fit_on_predictions(trial, others, "global", fold, [])
            del fold
    return _Fitted(evaluated, fit_on, unseen, n_rows, notes, unseen_fit_on)


def _fit_on_predictions(trial: Trial, train: Sequence[WindowedSession], personalization: str, fitted, notes: list[str]) -> dict[str, np.ndarray]:
    """Predictions of the training sessions to fit post-processing on: out of fold (each training
    story predicted by a model fitted on the other training stories) or, with ``fit_on:
    in_sample`` or a single training story, by ``fitted`` (the model fitted on all of them)."""
    stories = sorted({s.story for s in train})
    if trial.fit_on == "out_of_fold" and len(stories) >= 2:
        out: dict[str, np.ndarray] = {}
        for story in stories:
            fold = _fit(trial, [s for s in train if s.story != story], personalization)
            out.update({s.session: _predict_filled(trial, fold, s) for s in train if s.story == story})
            del fold
        return out
    if trial.fit_on == "out_of_fold":
        notes.append(f"one training story ({stories}): post-processing fitted in sample")
    return {s.session: _predict_filled(trial, fitted, s) for s in train}


def _postprocess(trial: Trial, fitted: _Fitted, train: Sequence[WindowedSession], evaluate: Sequence[WindowedSession]):
    """``trial``'s smoothing and rescaling of the group's predictions: (predictions, unseen predictions)."""

    def post(s: WindowedSession, p: np.ndarray) -> np.ndarray:
        return smooth(p, s.fps, trial.smooth_s, trial.smooth_method) if trial.smooth_s else p

    preds = {s.session: post(s, fitted.evaluated[s.session]) for s in evaluate}
    unseen = {s.session: post(s, fitted.unseen[s.session]) for s in evaluate if s.session in fitted.unseen} \
        if trial.track == "generalized" and trial.unseen_listener else {}
    if trial.rescale == "none":
        return preds, unseen
    def fitted_rescaler(sessions: Sequence[WindowedSession], predictions: dict[str, np.ndarray]):
        rescaler, per_listener = rescaler_for(trial.rescale)
        y = np.concatenate([s.y for s in sessions])
        p = np.concatenate([post(s, predictions[s.session]) for s in sessions])
        groups = np.concatenate([np.full(len(s.y), s.listener) for s in sessions]) if per_listener else None
        ok = np.isfinite(y)
        return rescaler.fit(y[ok], p[ok], groups=None if groups is None else groups[ok]), per_listener

    rescaler, per_listener = fitted_rescaler(train, fitted.fit_on)
    preds = {sid: rescaler.transform(p, group=by.listener if per_listener else None)
             for (sid, p), by in zip(preds.items(), evaluate, strict=True)}
    # an unseen listener's rescaling: fitted on the other listeners, predicted by models without them
    by_listener: dict[int, object] = {}
    for s in evaluate:
        if s.session in unseen:
            if s.listener not in by_listener:
                others = [t for t in train if t.listener != s.listener]
                by_listener[s.listener] = fitted_rescaler(others, fitted.unseen_fit_on[s.listener])[0]
            unseen[s.session] = by_listener[s.listener].transform(unseen[s.session])
    return preds, unseen


def _split_sessions(w: Windowed, splits: dict[str, tuple[int, ...]]) -> dict[str, list[WindowedSession]]:
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


def evaluate_trials(trials: Sequence[Trial], w: Windowed) -> list[TrialResult]:
    """Evaluate configurations that share one :meth:`~experiments.grid.Trial.fit_key`, fitting once.

    Each result is what :func:`evaluate_trial` gives for that configuration alone; only the
    fits are shared. ``fit_seconds`` of each result is the group's time divided among them.

    Raises:
        ValueError: the configurations do not share a fit key, or there is nothing to fit or score.
    """
    trials = list(trials)
    if not trials:
        return []
    keys = {t.fit_key() for t in trials}
    if len(keys) != 1:
        raise ValueError(f"evaluate_trials takes configurations with one fit key; got {len(keys)} different ones")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = _evaluate_group(trials, w)
    messages = sorted({f"{type(c.message).__name__}: {c.message}" for c in caught})
    for r in results:
        r.warnings = sorted({*messages, *r.warnings})
    return results


def _evaluate_group(trials: list[Trial], w: Windowed) -> list[TrialResult]:
    t0 = time.perf_counter()
    first = trials[0]
    parts = _split_sessions(w, dict(first.splits))
    if not parts["train"]:
        raise ValueError(f"no training sessions (stories {dict(first.splits).get('train')}) in the store")
    need_post_fit = any(t.rescale != "none" for t in trials)
    need_unseen = any(t.track == "generalized" and t.unseen_listener for t in trials)
    preds: list[dict[str, np.ndarray]] = [{} for _ in trials]
    unseen: list[dict[str, np.ndarray]] = [{} for _ in trials]
    split_of: dict[str, str] = {}
    notes: list[str] = []
    n_rows = 0

    def run(train: list[WindowedSession], evaluate: list[WindowedSession], split: dict[str, str], with_unseen: bool) -> None:
        nonlocal n_rows
        fitted = _fit_group(first, train, evaluate, need_post_fit, need_unseen and with_unseen)
        notes.extend(fitted.notes)
        n_rows = max(n_rows, fitted.n_rows)
        for i, t in enumerate(trials):
            p, u = _postprocess(t, fitted, train, evaluate)
            preds[i].update(p)
            unseen[i].update(u)
        split_of.update(split)

    if first.protocol == "loso":
        pool = parts["train"] + parts["val"]
        for story in sorted({s.story for s in pool}):
            held = [s for s in pool if s.story == story]
            rest = [s for s in pool if s.story != story]
            if rest:
                run(rest, held, {s.session: "loso" for s in held}, with_unseen=False)
        if parts["test"]:
            run(pool, parts["test"], {s.session: "test" for s in parts["test"]}, with_unseen=True)
    else:
        evaluate = parts["val"] + parts["test"]
        if not evaluate:
            raise ValueError("no validation or test sessions to score")
        run(parts["train"], evaluate, {s.session: name for name in ("val", "test") for s in parts[name]}, with_unseen=True)

    by_session = {s.session: s for s in w.sessions}
    seconds = (time.perf_counter() - t0) / len(trials)
    results = []
    for t, p, u in zip(trials, preds, unseen, strict=True):
        rows = []
        for suffix, source in (("", p), ("_unseen", u)):
            for sid, pred in source.items():
                s = by_session[sid]
                ok = np.isfinite(s.y)
                rows.append({"session": sid, "listener": s.listener, "story": s.story,
                             "split": split_of[sid] + suffix, "ccc": ccc(s.y[ok], pred[ok])})
        scores = pd.DataFrame(rows, columns=["session", "listener", "story", "split", "ccc"])
        truth = {sid: by_session[sid].y for sid in p}
        metrics = score_metrics(scores, predictions=p, truth=truth, seed=t.seed, unseen_predictions=u)
        results.append(TrialResult(t, metrics, scores, p, truth, u, fit_seconds=seconds, n_train_rows=n_rows,
                                   warnings=sorted(set(notes))))
    return results


def score_metrics(
    scores: pd.DataFrame,
    predictions: dict[str, np.ndarray] | None = None,
    truth: dict[str, np.ndarray] | None = None,
    seed: int = 0,
    unseen_predictions: dict[str, np.ndarray] | None = None,
) -> dict[str, float]:
    """MLflow metrics from per-session CCC: both protocols per split, per listener, per story.

    Per split (``val``, ``test``, ``loso``, ``val_unseen``, ``test_unseen``) and protocol
    (``personalized``, ``generalized``): ``<split>.ccc_<protocol>``, its 95 % bootstrap
    interval over listeners ``<split>.ccc_<protocol>.ci_low`` / ``.ci_high``
    (:func:`~experiments.uncertainty.bootstrap_protocols`), and, given ``predictions`` and
    ``truth``, the chance level ``<split>.ccc_<protocol>.chance_mean`` / ``.chance_q95``
    (:func:`~experiments.uncertainty.chance_level`; the ``*_unseen`` splits take theirs from
    ``unseen_predictions``). Per listener and story: ``<split>.ccc_listener_<L>``,
    ``<split>.ccc_story_<S>``.
    """
    metrics: dict[str, float] = {}
    for split, df in scores.groupby("split"):
        prot = ccc_protocols(df)
        intervals = bootstrap_protocols(df, seed=seed)
        chance = None
        if predictions is not None and truth is not None:
            source = unseen_predictions if str(split).endswith("_unseen") else predictions
            chance = chance_level(truth, {sid: source[sid] for sid in df.session}, df, seed=seed)
        for p in ("personalized", "generalized"):
            name = f"{split}.ccc_{p}"
            metrics[name] = float(prot[p])
            metrics[f"{name}.ci_low"], metrics[f"{name}.ci_high"] = intervals[p]
            if chance is not None:
                metrics[f"{name}.chance_mean"], metrics[f"{name}.chance_q95"] = chance[p]
        for listener, g in df.groupby("listener"):
            metrics[f"{split}.ccc_listener_{listener}"] = float(g["ccc"].mean())
        for story, g in df.groupby("story"):
            metrics[f"{split}.ccc_story_{story}"] = float(g["ccc"].mean())
    return metrics
