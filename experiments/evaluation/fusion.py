"""Late fusion: one configuration per member feature set, blended by weights fitted on the
training stories' out-of-fold predictions (docs/results.md, "Late fusion beside early fusion").

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> P = rng.normal(size=(500, 2))
>>> b = Blend("nnls").fit(P, 0.7 * P[:, 0] - 0.2 * P[:, 1] + 1.0)
>>> b.weights_.round(2).tolist(), round(b.intercept_, 1)
([0.7, 0.0], 1.0)
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import nnls

from ..config.choices import check_choice
from ..config.grid import Trial
from ..config.metrics import get_metric
from ..config.options import BLENDS
from ..config.tracks import fused_track
from ..windowing.windowed import Windowed
from .evaluate import MemberPredictions, member_predictions, score_metrics, session_scores
from .fit_cache import FitCache


class Blend:
    """A linear blend of member predictions: ``y ~ intercept_ + P @ weights_``, fitted on centred
    columns: ``nnls`` (non-negative weights, free intercept) or ``ridge`` (penalty
    ``alpha * n_rows * |w|^2``: ``alpha`` per row, ignored by ``nnls``)."""

    def __init__(self, method: str = "nnls", alpha: float = 0.01):
        check_choice("blend", method, BLENDS)
        if not alpha >= 0:
            raise ValueError(f"blend alpha must be >= 0, got {alpha!r}")
        self.method = method
        self.alpha = alpha

    def fit(self, P: Any, y: Any) -> Blend:
        """Fit on ``P`` (n_rows, n_members) and ``y``; rows with a non-finite value left out."""
        P = np.asarray(P, dtype=float)
        y = np.asarray(y, dtype=float).ravel()
        if P.ndim != 2 or len(P) != len(y):
            raise ValueError(
                f"P must be (n_rows, n_members) with n_rows = len(y) = {len(y)}, got {P.shape}"
            )
        ok = np.isfinite(y) & np.isfinite(P).all(axis=1)
        if ok.sum() < 2:
            raise ValueError("the blend needs at least two rows with finite labels and predictions")
        P, y = P[ok], y[ok]
        p_mean, y_mean = P.mean(axis=0), float(y.mean())
        Pc, yc = P - p_mean, y - y_mean
        if self.method == "nnls":
            w, _ = nnls(Pc, yc)
        else:
            gram = Pc.T @ Pc + self.alpha * len(y) * np.eye(P.shape[1])
            w = np.linalg.solve(gram, Pc.T @ yc)
        self.weights_ = np.asarray(w, dtype=float)
        self.intercept_ = float(y_mean - p_mean @ self.weights_)
        self.n_rows_ = int(len(y))
        return self

    def predict(self, P: Any) -> np.ndarray:
        if not hasattr(self, "weights_"):
            raise RuntimeError("Blend.predict called before fit")
        return self.intercept_ + np.asarray(P, dtype=float) @ self.weights_


@dataclass
class FusionResult:
    """A late fusion's outcome, scored like a configuration (``members`` in the blend's column
    order; ``train_predictions``, ``train_score``: the blend on the out-of-fold training
    predictions it was fitted on, in sample; ``seconds``: member fits and blend)."""

    members: list[Trial]
    blend: Blend
    track: str
    causal: bool
    scores: pd.DataFrame
    metrics: dict[str, float]
    predictions: dict[str, np.ndarray]
    truth: dict[str, np.ndarray]
    train_predictions: dict[str, np.ndarray] = field(default_factory=dict)
    train_score: float = float("nan")
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)


def _check_same_sessions(windowed: Sequence[Windowed]) -> None:
    first = {s.session: s.y for s in windowed[0].sessions}
    for w in windowed[1:]:
        other = {s.session: s.y for s in w.sessions}
        if set(other) != set(first):
            raise ValueError("the members' windowed features cover different sessions")
        for sid, y in other.items():
            if not np.array_equal(y, first[sid], equal_nan=True):
                raise ValueError(f"{sid}: the members' labels differ (one target for all members)")


def late_fusion(
    members: Sequence[tuple[Trial, Windowed]],
    blend: str = "nnls",
    alpha: float = 0.01,
    seed: int = 0,
    predicted: Sequence[MemberPredictions] | None = None,
    cache: FitCache | None = None,
) -> FusionResult:
    """Fit the blend of ``members`` (configuration, windowed features; protocol ``val``) on their
    out-of-fold training predictions and score it on validation and test (``seed``: chance
    level). ``predicted``: the members' predictions if made; else made here (fits of ``cache``).

    Raises:
        ValueError: fewer than two members, members on different sessions or labels, protocol
            ``loso`` or a single training story (from ``member_predictions``).
    """
    if len(members) < 2:
        raise ValueError(f"late fusion needs at least two members, got {len(members)}")
    t0 = time.perf_counter()
    _check_same_sessions([w for _, w in members])
    preds = (
        list(predicted)
        if predicted is not None
        else [member_predictions(t, w, cache) for t, w in members]
    )
    sessions = {s.session: s for s in members[0][1].sessions}
    split_of = preds[0].split_of
    train = [sid for sid, name in split_of.items() if name == "train"]
    evaluated = [sid for sid, name in split_of.items() if name in ("val", "test")]
    stacked = np.concatenate([_columns(preds, "train", sid) for sid in train])
    fitted = Blend(blend, alpha).fit(stacked, np.concatenate([sessions[sid].y for sid in train]))
    out = {sid: fitted.predict(_columns(preds, "evaluated", sid)) for sid in evaluated}
    on_train = {sid: fitted.predict(_columns(preds, "train", sid)) for sid in train}
    trials = [t for t, _ in members]
    m = get_metric(trials[0].metric)
    scores = session_scores(((sessions[s], split_of[s], p) for s, p in out.items()), m.name)
    truth = {sid: sessions[sid].y for sid in out}
    fps = {sid: sessions[sid].fps for sid in out}
    metrics = score_metrics(scores, out, truth, seed=seed, fps=fps, metric=m.name)
    ok = {sid: np.isfinite(sessions[sid].y) for sid in on_train}
    train_score = np.mean([m(sessions[sid].y[ok[sid]], p[ok[sid]]) for sid, p in on_train.items()])
    return FusionResult(
        trials,
        fitted,
        fused_track([t.track for t in trials]),
        all(t.causal for t in trials),
        scores,
        metrics,
        out,
        truth,
        on_train,
        float(train_score),
        time.perf_counter() - t0,
        sorted({n for p in preds for n in p.notes}),
    )


def _columns(preds: Sequence[MemberPredictions], which: str, sid: str) -> np.ndarray:
    """(frames, members): each member's ``which`` (``train``, ``evaluated``) prediction of ``sid``."""
    return np.column_stack([getattr(p, which)[sid] for p in preds])
