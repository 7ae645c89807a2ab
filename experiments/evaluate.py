"""One configuration, start to finish: windowed features -> fit -> predict -> post-process -> CCC.

Protocols:

* ``val``: fit on the training stories, predict every frame of the validation and test
  stories; both are scored (selection uses validation only).
* ``loso``: leave one story out over train + val: for each of those stories, fit on the
  others and predict it (scored as split ``loso``); test is predicted by a model fitted on
  all train + val stories.

Test stories never reach ``fit``, the rescaler, or any choice made from data: calibration
statistics come from the training stories of the fold.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .config import Trial, WindowKey
from .dataset import SessionTable
from .metrics import ccc, ccc_protocols
from .models import make_model
from .personalization import make_personalizer
from .postprocess import Rescaler, smooth
from .windowing import window_stats

PERSONALIZED = ("per_listener", "global_calibrated", "listener_onehot")


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
    scores: pd.DataFrame  # session, listener, story, split, ccc
    predictions: dict[str, np.ndarray] = field(default_factory=dict)  # session -> per-frame prediction
    truth: dict[str, np.ndarray] = field(default_factory=dict)
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


def _fit_predict(trial: Trial, train: Sequence[WindowedSession], evaluate: Sequence[WindowedSession]) -> tuple[dict[str, np.ndarray], int]:
    hop = max(1, int(round(trial.hop_s * train[0].fps)))
    X, y = _design(train, hop)
    if len(y) == 0:
        raise ValueError("no training rows with a finite label")
    model = make_personalizer(trial.personalization, make_model(trial.model, trial.hyperparams, seed=trial.seed))
    model.fit(X, y)
    del X  # the training matrix is not needed for predicting: free it before the per-session matrices

    column_major = trial.model in COLUMN_MAJOR_MODELS

    def post(s: WindowedSession) -> np.ndarray:
        p = _predict(model, s, column_major)
        p = np.where(np.isfinite(p), p, np.nanmean(y))
        return smooth(p, s.fps, trial.smooth_s, trial.smooth_method) if trial.smooth_s else p

    preds = {s.session: post(s) for s in evaluate}
    if trial.rescale != "none":
        per_listener = trial.personalization in PERSONALIZED
        tr_pred = [post(s) for s in train]
        tr_y = np.concatenate([s.y for s in train])
        tr_p = np.concatenate(tr_pred)
        groups = np.concatenate([np.full(len(s.y), s.listener) for s in train]) if per_listener else None
        ok = np.isfinite(tr_y)
        resc = Rescaler(mode=trial.rescale).fit(tr_y[ok], tr_p[ok], groups=None if groups is None else groups[ok])
        for s in evaluate:
            preds[s.session] = resc.transform(preds[s.session], group=s.listener if per_listener else None)
    return preds, len(y)


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
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = _evaluate_trial(trial, w)
    result.warnings = sorted({f"{type(c.message).__name__}: {c.message}" for c in caught})
    return result


def _evaluate_trial(trial: Trial, w: Windowed) -> TrialResult:
    import time

    t0 = time.perf_counter()
    parts = _split_sessions(w, dict(trial.splits))
    if not parts["train"]:
        raise ValueError(f"no training sessions (stories {dict(trial.splits).get('train')}) in the store")
    preds: dict[str, np.ndarray] = {}
    split_of: dict[str, str] = {}
    n_rows = 0
    if trial.protocol == "loso":
        pool = parts["train"] + parts["val"]
        for story in sorted({s.story for s in pool}):
            held = [s for s in pool if s.story == story]
            rest = [s for s in pool if s.story != story]
            if not rest:
                continue
            p, n = _fit_predict(trial, rest, held)
            preds.update(p)
            split_of.update({s.session: "loso" for s in held})
            n_rows = max(n_rows, n)
        if parts["test"]:
            p, _ = _fit_predict(trial, pool, parts["test"])
            preds.update(p)
            split_of.update({s.session: "test" for s in parts["test"]})
    else:
        evaluate = parts["val"] + parts["test"]
        if not evaluate:
            raise ValueError("no validation or test sessions to score")
        preds, n_rows = _fit_predict(trial, parts["train"], evaluate)
        split_of.update({s.session: s_name for s_name in ("val", "test") for s in parts[s_name]})

    by_session = {s.session: s for s in w.sessions}
    rows = []
    for sid, p in preds.items():
        s = by_session[sid]
        ok = np.isfinite(s.y)
        rows.append({"session": sid, "listener": s.listener, "story": s.story, "split": split_of[sid], "ccc": ccc(s.y[ok], p[ok])})
    scores = pd.DataFrame(rows, columns=["session", "listener", "story", "split", "ccc"])
    metrics = score_metrics(scores)
    return TrialResult(
        trial, metrics, scores, preds, {sid: by_session[sid].y for sid in preds},
        fit_seconds=time.perf_counter() - t0, n_train_rows=n_rows,
    )


def score_metrics(scores: pd.DataFrame) -> dict[str, float]:
    """MLflow metrics from per-session CCC: both protocols per split, per listener, per story."""
    metrics: dict[str, float] = {}
    for split, df in scores.groupby("split"):
        prot = ccc_protocols(df)
        metrics[f"{split}.ccc_personalized"] = float(prot["personalized"])
        metrics[f"{split}.ccc_generalized"] = float(prot["generalized"])
        for listener, g in df.groupby("listener"):
            metrics[f"{split}.ccc_listener_{listener}"] = float(g["ccc"].mean())
        for story, g in df.groupby("story"):
            metrics[f"{split}.ccc_story_{story}"] = float(g["ccc"].mean())
    return metrics
