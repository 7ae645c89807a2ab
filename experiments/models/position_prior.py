"""The position prior: the mean training-label curve over normalised session time ``i / (n_frames - 1)``, a
baseline of what the shape common to the stories gives on its own (it reads the session's length: never causal).

>>> import numpy as np
>>> u = np.linspace(0, 1, 201)[:, None]
>>> prior = PositionPrior(n_bins=10).fit(u, 2 * u[:, 0])
>>> prior.predict(np.array([[0.05], [0.5], [0.95]])).round(1).tolist()
[0.1, 1.0, 1.9]
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils.validation import check_is_fitted, validate_data


def session_position(n_frames: int) -> np.ndarray:
    """Position of each frame in its session, ``i / (n_frames - 1)``: shape (n_frames,), in [0, 1]."""
    return np.arange(n_frames, dtype=np.float64) / max(n_frames - 1, 1)


def build(params: dict[str, Any], seed: int) -> PositionPrior:
    """The ``position_prior`` model of :mod:`experiments.config.models` (it draws nothing at random)."""
    return PositionPrior(n_bins=int(params["n_bins"]))


class PositionPrior(RegressorMixin, BaseEstimator):
    """Mean label per bin of session position (``n_bins`` over [0, 1]), interpolated between bin centres
    (``centres_``, ``curve_``); column 0 of ``X`` is the position (NaN predicts ``mean_``), the others are ignored."""

    def __init__(self, n_bins: int = 100):
        self.n_bins = n_bins

    def _positions(self, X: np.ndarray) -> np.ndarray:
        return np.clip(np.asarray(X[:, 0], dtype=float), 0.0, 1.0)

    def fit(self, X: Any, y: Any) -> PositionPrior:
        if int(self.n_bins) < 1:
            raise ValueError(f"position_prior needs n_bins >= 1, got {self.n_bins}")
        X, y = validate_data(self, X, y, ensure_all_finite="allow-nan", y_numeric=True)
        u, y = self._positions(X), np.asarray(y, dtype=float)
        ok = np.isfinite(u) & np.isfinite(y)
        n = int(self.n_bins)
        self.mean_ = float(y[ok].mean()) if ok.any() else 0.0
        self.centres_ = (np.arange(n) + 0.5) / n
        bins = np.minimum((u[ok] * n).astype(np.int64), n - 1)
        counts = np.bincount(bins, minlength=n)
        sums = np.bincount(bins, y[ok], minlength=n)
        seen = counts > 0
        if not seen.any():
            self.curve_ = np.full(n, self.mean_)
        else:
            means = sums[seen] / counts[seen]
            self.curve_ = np.interp(self.centres_, self.centres_[seen], means)
        return self

    def predict(self, X: Any) -> np.ndarray:
        """The curve at each row's position (the training mean where it is NaN)."""
        check_is_fitted(self)
        X = validate_data(self, X, ensure_all_finite="allow-nan", reset=False)
        u = self._positions(X)
        out = np.interp(np.nan_to_num(u, nan=0.0), self.centres_, self.curve_)
        return np.where(np.isfinite(u), out, self.mean_)

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True
        tags.regressor_tags.poor_score = True  # it reads one column by design
        return tags
