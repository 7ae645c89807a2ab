"""A configuration's predictions scored: per-session values of its metric, and the metrics its run
logs (names: :meth:`~experiments.config.metrics.MetricSpec.key`, docs/design.md#mlflow-runs).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
import pandas as pd

from ..config.metrics import DEFAULT_METRIC, MetricSpec, get_metric
from ..config.options import CONSTANT_MARK, TRACKS
from ..windowing.windowed import WindowedSession
from .metrics import concatenated_score, protocol_means
from .uncertainty import chance_level, protocol_intervals


def session_scores(
    predicted: Iterable[tuple[WindowedSession, str, np.ndarray]], metric: str = DEFAULT_METRIC
) -> pd.DataFrame:
    """Per-session ``metric`` of (session, split, prediction) triples, on frames with a finite label."""
    m = get_metric(metric)
    rows = [
        (s.session, s.listener, s.story, split, m(s.y[ok], pred[ok]))
        for s, split, pred in predicted
        for ok in [np.isfinite(s.y)]
    ]
    return pd.DataFrame(rows, columns=["session", "listener", "story", "split", metric])


def constant_marks(
    predictions: Mapping[str, np.ndarray], split_of: Mapping[str, str]
) -> dict[str, float]:
    """``<split>.constant_predictions``: 1 for each split in every session of which the
    predictions are constant (to float rounding) or not finite."""
    varies: dict[str, bool] = {}
    for sid, pred in predictions.items():
        p = np.asarray(pred, dtype=float)
        p = p[np.isfinite(p)]
        moves = bool(p.size) and float(np.ptp(p)) > 1e-6 * max(1.0, float(np.abs(p).max()))
        varies[split_of[sid]] = varies.get(split_of[sid], False) or moves
    return {f"{split}.{CONSTANT_MARK}": 1.0 for split, v in varies.items() if not v}


def score_metrics(
    scores: pd.DataFrame,
    predictions: Mapping[str, np.ndarray] | None = None,
    truth: Mapping[str, np.ndarray] | None = None,
    seed: int = 0,
    unseen_predictions: Mapping[str, np.ndarray] | None = None,
    fps: float | Mapping[str, float] = 25.0,
    averaging: str = "sessions",
    metric: str = DEFAULT_METRIC,
) -> dict[str, float]:
    """MLflow metrics per split from :func:`session_scores`: each track's mean (``averaging``
    ``sessions``, or ``concatenated``: needs ``predictions`` and ``truth``), its interval and,
    given the predictions, chance level where the spec says they apply, ``n_listeners``, the
    concatenated, per-listener and per-story values. ``*_unseen`` splits: ``unseen_predictions``.

    Raises:
        ValueError: ``concatenated`` without the predictions, or an unseen split without its own.
    """
    m = get_metric(metric)
    out: dict[str, float] = {}
    for split, df in scores.groupby("split"):
        split = str(split)
        source = unseen_predictions if split.endswith("_unseen") else predictions
        if truth is None or predictions is None:
            source = None
            if averaging == "concatenated":
                raise ValueError("averaging concatenated needs the predictions and the labels")
        elif source is None:
            raise ValueError(
                f"scores of split {split} need unseen_predictions for its chance level"
            )
        out.update(_split_metrics(split, df, m, averaging, truth, source, fps, seed))
    return out


def _split_metrics(
    split: str,
    df: pd.DataFrame,
    m: MetricSpec,
    averaging: str,
    truth: Mapping[str, np.ndarray] | None,
    source: Mapping[str, np.ndarray] | None,
    fps: float | Mapping[str, float],
    seed: int,
) -> dict[str, float]:
    """One split's :func:`score_metrics`; ``source``: its predictions, or None."""
    means = protocol_means(df, m.name)
    joined = averaging == "concatenated"
    with_ci = m.intervals and not joined
    intervals = protocol_intervals(df, split=split, metric=m.name) if with_ci else {}
    out = {f"{split}.n_listeners": float(df.listener.nunique())}
    chance = None
    if source is not None and truth is not None:
        if m.chance and not joined:
            own = {sid: source[sid] for sid in df.session}
            chance = chance_level(truth, own, df, fps=fps, seed=seed, metric=m.name)
        concatenated = concatenated_score(truth, source, list(df.session), m.name)
        out[m.key(split, "concatenated")] = concatenated
    for track in TRACKS:
        name = m.key(split, track)
        if joined:
            out[name] = concatenated
            if m.intervals:
                out[f"{name}.ci_low"] = out[f"{name}.ci_high"] = np.nan
            if m.chance:
                out[f"{name}.chance_mean"] = out[f"{name}.chance_q95"] = np.nan
            continue
        out[name] = float(means[track])
        if intervals:
            out[f"{name}.ci_low"], out[f"{name}.ci_high"] = intervals[track]
        if chance is not None:
            out[f"{name}.chance_mean"], out[f"{name}.chance_q95"] = chance[track]
    for what in ("listener", "story"):
        for value, g in df.groupby(what):
            out[m.key(split, f"{what}_{value}")] = float(g[m.name].mean())
    return out


def nested_selection_metrics(
    nested: Mapping[int, Mapping[str, np.ndarray]],
    sessions: Mapping[str, WindowedSession],
    split_of: Mapping[str, str],
    split: str = "val",
    metric: str = DEFAULT_METRIC,
) -> dict[str, float]:
    """``<split>_without_listener_<L>.<metric>_generalized`` per held-out listener L: the other
    listeners' generalized mean by the models fitted without L, which choose L's configuration."""
    m = get_metric(metric)
    out: dict[str, float] = {}
    for listener, preds in nested.items():
        rows = [
            (sessions[sid].listener, sessions[sid].story, m(sessions[sid].y[ok], pred[ok]))
            for sid, pred in preds.items()
            if sessions[sid].listener != listener and split_of.get(sid) == split
            for ok in [np.isfinite(sessions[sid].y)]
        ]
        if rows:
            df = pd.DataFrame(rows, columns=["listener", "story", m.name])
            key = m.key(f"{split}_without_listener_{listener}", "generalized")
            out[key] = float(protocol_means(df, m.name)["generalized"])
    return out
