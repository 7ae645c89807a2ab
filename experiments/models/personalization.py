"""Per-listener meta-estimators: one model per listener, calibration, listener as a feature. Every strategy takes the
listener id in column ``listener_column`` of ``X`` and removes it, so the sweep switches strategy on the same data."""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, MetaEstimatorMixin, RegressorMixin, clone
from sklearn.model_selection import LeaveOneGroupOut, cross_val_predict
from sklearn.utils.validation import check_is_fitted, validate_data

from ..config.choices import check_choice
from ..config.options import (
    PERSONALIZATIONS as PERSONALIZATION_STRATEGIES,  # the config's ``personalization`` list
)

#: estimators that compute in float32 whatever they are given (XGBoost's ``DMatrix``): handed the
#: float32 design matrix, they give the same numbers without a float64 copy
FLOAT32_ESTIMATORS = ("XGBRegressor",)


def feature_dtype(estimator: Any) -> type:
    """``np.float32`` for a :data:`FLOAT32_ESTIMATORS` model (alone or alone in a ``Pipeline``), else ``np.float64``."""
    steps = getattr(estimator, "steps", None)
    if steps is not None:
        if len(steps) != 1:
            return np.float64
        estimator = steps[0][1]
    return np.float32 if type(estimator).__name__ in FLOAT32_ESTIMATORS else np.float64


#: first pipeline steps that make a float64 copy of whatever features they are given
COPYING_FIRST_STEPS = ("MedianImputer", "FillEmptyColumns")


def copies_features(estimator: Any) -> bool:
    """Whether ``estimator`` is a ``Pipeline`` whose first step copies the features into float64 itself."""
    steps = getattr(estimator, "steps", None)
    if not steps:
        return False
    first = steps[0][1]
    name = type(first).__name__
    if name == "MedianImputer":
        return getattr(first, "dtype", None) == "float64"
    return name in COPYING_FIRST_STEPS


def split_listener_column(
    X: Any, listener_column: int = 0, dtype: Any = np.float64, copy: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """(float listener ids; features in ``dtype``): one contiguous copy without the listener column, or
    (``copy=False``) that slice as it is, for an estimator that copies it itself."""
    X = np.asarray(X)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D (rows, [listener id, features...]), got shape {X.shape}")
    if not -X.shape[1] <= listener_column < X.shape[1]:
        raise ValueError(
            f"listener_column={listener_column} is outside X's {X.shape[1]} columns; "
            "put the listener id in column 0 (np.column_stack([listener_ids, features]))"
        )
    listeners = X[:, listener_column]
    try:
        listeners = listeners.astype(float)
    except (TypeError, ValueError) as e:
        raise ValueError(
            f"listener column {listener_column} of X must hold numeric ids ({e})"
        ) from e
    if np.isnan(listeners).any():
        raise ValueError(
            f"listener column {listener_column} of X holds NaN in "
            f"{int(np.isnan(listeners).sum())} rows; every row needs its listener id"
        )
    column = listener_column % X.shape[1]
    if column == 0:
        rest = X[:, 1:]
    elif column == X.shape[1] - 1:
        rest = X[:, :-1]
    else:
        rest = np.delete(X, column, axis=1)
    return listeners, np.array(rest, dtype=dtype, order="C", copy=True) if copy else rest


def _listener_key(value: float) -> int | float:
    """Dictionary key of a listener id: an int when the id is integral (1.0 -> 1)."""
    return int(value) if float(value).is_integer() else float(value)


def fit_listener_calibration(
    listeners: Any, pred: Any, y: Any, shrinkage: float = 100.0
) -> dict[int | float, tuple[float, float]]:
    """Listener id -> ``(a_L, b_L)`` of ``y ~ a_L * pred + b_L``, shrunk towards the identity."""
    listeners = np.asarray(listeners, dtype=float).ravel()
    pred = np.asarray(pred, dtype=float).ravel()
    y = np.asarray(y, dtype=float).ravel()
    out: dict[int | float, tuple[float, float]] = {}
    for listener in np.unique(listeners):
        rows = listeners == listener
        p, t = pred[rows], y[rows]
        n = len(p)
        p_centred = p - p.mean()
        spp = float(p_centred @ p_centred)
        # a slope from (numerically) constant predictions is noise: keep a = 1
        slope = float(p_centred @ (t - t.mean())) / spp if spp > 1e-12 * n else 1.0
        intercept = float(t.mean() - slope * p.mean())
        w = n / (n + shrinkage)
        out[_listener_key(listener)] = (w * slope + (1.0 - w), w * intercept)
    return out


def apply_listener_calibration(
    calibration: dict[int | float, tuple[float, float]], listeners: Any, pred: Any
) -> np.ndarray:
    """``a_L * pred + b_L`` per row, with the identity for a listener without a map."""
    listeners = np.asarray(listeners, dtype=float).ravel()
    pred = np.asarray(pred, dtype=float)
    slope = np.ones_like(pred)
    intercept = np.zeros_like(pred)
    for listener in np.unique(listeners):
        a, b = calibration.get(_listener_key(listener), (1.0, 0.0))
        rows = listeners == listener
        slope[rows], intercept[rows] = a, b
    return slope * pred + intercept


class _ListenerMetaEstimator(MetaEstimatorMixin, RegressorMixin, BaseEstimator):
    """Shared plumbing: input checks and the listener/feature split."""

    _required_parameters = ["estimator"]

    def __init__(self, estimator: Any, listener_column: int = 0):
        self.estimator = estimator
        self.listener_column = listener_column

    def _split_fit(self, X: Any, y: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        # scikit-learn's input checks; dtype "numeric" keeps a float32 matrix as it is: the one float
        # copy is the split's (a large training matrix must not be copied twice)
        X, y = validate_data(
            self, X, y, dtype="numeric", ensure_all_finite="allow-nan", y_numeric=True, reset=True
        )
        if X.shape[1] < 2:
            raise ValueError(
                f"X has {X.shape[1]} feature(s): the listener id column only; a personalization strategy needs "
                "the id plus at least one feature column (np.column_stack([listener_ids, features]))"
            )
        return *self._split(X), np.asarray(y, dtype=float)

    def _split_predict(self, X: Any) -> tuple[np.ndarray, np.ndarray]:
        check_is_fitted(self)
        X = validate_data(self, X, dtype="numeric", ensure_all_finite="allow-nan", reset=False)
        return self._split(X)

    def _split(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        dtype, copy = feature_dtype(self.estimator), not copies_features(self.estimator)
        return split_listener_column(X, self.listener_column, dtype, copy=copy)

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True  # in feature columns, if the wrapped estimator takes it
        return tags


class GlobalRegressor(_ListenerMetaEstimator):
    """One model for everyone: the listener column dropped, ``estimator`` fitted on every row (``estimator_``)."""

    def fit(self, X: Any, y: Any) -> GlobalRegressor:
        """Fit on all rows of ``X`` (listener column removed) against ``y``."""
        _, features, y = self._split_fit(X, y)
        self.estimator_ = clone(self.estimator).fit(features, y)
        return self

    def predict(self, X: Any) -> np.ndarray:
        """Predict every row; the listener id is ignored."""
        _, features = self._split_predict(X)
        if len(features) == 0:
            return np.empty(0)
        return np.asarray(self.estimator_.predict(features), dtype=float)


class PerListenerRegressor(_ListenerMetaEstimator):
    """One clone of ``estimator`` per listener with ``min_samples`` rows, and (``fallback``) a global one for others."""

    def __init__(
        self, estimator: Any, listener_column: int = 0, min_samples: int = 50, fallback: bool = True
    ):
        self.estimator = estimator
        self.listener_column = listener_column
        self.min_samples = min_samples
        self.fallback = fallback

    def fit(self, X: Any, y: Any) -> PerListenerRegressor:
        """Fit one model per listener with at least ``min_samples`` rows, and (with ``fallback``) the global one."""
        listeners, features, y = self._split_fit(X, y)
        self.global_ = clone(self.estimator).fit(features, y) if self.fallback else None
        self.estimators_ = {}
        fallback = []
        ids, counts = np.unique(listeners, return_counts=True)
        for listener, count in zip(ids, counts, strict=True):
            if count < self.min_samples:
                fallback.append(_listener_key(listener))
                continue
            rows = listeners == listener
            self.estimators_[_listener_key(listener)] = clone(self.estimator).fit(
                features[rows], y[rows]
            )
        self.fallback_listeners_ = fallback
        return self

    def predict(self, X: Any) -> np.ndarray:
        """Predict each row with its listener's model (the global model for others)."""
        listeners, features = self._split_predict(X)
        out = np.empty(len(features))
        for listener in np.unique(listeners):
            rows = listeners == listener
            model = self.estimators_.get(_listener_key(listener), self.global_)
            if model is None:
                raise ValueError(
                    f"listener {_listener_key(listener)} has no model of their own (unseen at fit, or under "
                    f"min_samples={self.min_samples} training rows) and this PerListenerRegressor was fitted with "
                    "fallback=False: refit with fallback=True to predict them with the global model"
                )
            out[rows] = model.predict(features[rows])
        return out


class CalibratedPerListener(_ListenerMetaEstimator):
    """A global model followed by each listener's linear map ``a_L * pred + b_L`` (identity for one unseen), fitted
    by least squares and shrunk by the listener's rows ``n``: ``w = n / (n + shrinkage)``, ``a_L = w * a + (1 - w)``,
    ``b_L = w * b``; a constant prediction keeps ``a = 1``. Given ``groups`` at fit the maps are fitted on
    out-of-fold predictions (leave one group out), else on the in-sample ones."""

    def __init__(self, estimator: Any, listener_column: int = 0, shrinkage: float = 100.0):
        self.estimator = estimator
        self.listener_column = listener_column
        self.shrinkage = shrinkage

    def fit(self, X: Any, y: Any, groups: Any = None) -> CalibratedPerListener:
        """Fit the global model, then each listener's map, on out-of-fold predictions with two or more ``groups``."""
        if self.shrinkage < 0:
            raise ValueError(f"shrinkage must be >= 0 rows, got {self.shrinkage}")
        listeners, features, y = self._split_fit(X, y)
        self.global_ = clone(self.estimator).fit(features, y)
        if groups is not None and len(np.unique(np.asarray(groups))) >= 2:
            pred = cross_val_predict(
                clone(self.estimator), features, y, groups=np.asarray(groups), cv=LeaveOneGroupOut()
            )
        else:
            pred = np.asarray(self.global_.predict(features), dtype=float)
        self.calibration_ = fit_listener_calibration(listeners, pred, y, self.shrinkage)
        return self

    def predict(self, X: Any) -> np.ndarray:
        """Global prediction mapped by each row's listener calibration (identity if unseen)."""
        listeners, features = self._split_predict(X)
        if len(features) == 0:
            return np.empty(0)
        pred = np.asarray(self.global_.predict(features), dtype=float)
        return apply_listener_calibration(self.calibration_, listeners, pred)


class ListenerOneHot(_ListenerMetaEstimator):
    """Listener identity as features: one-hot columns (``categories_``) after the features; unseen: zeros."""

    def _design(self, listeners: np.ndarray, features: np.ndarray) -> np.ndarray:
        onehot = (listeners[:, None] == self.categories_[None, :]).astype(float)
        return np.hstack([features, onehot])

    def fit(self, X: Any, y: Any) -> ListenerOneHot:
        """Fit ``estimator`` on the features with the one-hot listener columns appended."""
        listeners, features, y = self._split_fit(X, y)
        self.categories_ = np.unique(listeners)
        self.estimator_ = clone(self.estimator).fit(self._design(listeners, features), y)
        return self

    def augment(self, X: Any) -> np.ndarray:
        """The matrix the wrapped estimator sees: features then one-hot listener columns."""
        listeners, features = self._split_predict(X)
        return self._design(listeners, features)

    def predict(self, X: Any) -> np.ndarray:
        """Predict each row from its features and its listener's one-hot columns."""
        design = self.augment(X)
        if len(design) == 0:
            return np.empty(0)
        return np.asarray(self.estimator_.predict(design), dtype=float)


_STRATEGY_CLASSES: dict[str, type[_ListenerMetaEstimator]] = {
    "global": GlobalRegressor,
    "per_listener": PerListenerRegressor,
    "global_calibrated": CalibratedPerListener,
    "listener_onehot": ListenerOneHot,
}


def make_personalizer(strategy: str, estimator: Any, **params: Any) -> _ListenerMetaEstimator:
    """``estimator`` wrapped in personalization ``strategy``'s meta-estimator, with its ``params``."""
    check_choice("personalization strategy", strategy, PERSONALIZATION_STRATEGIES)
    cls = _STRATEGY_CLASSES[strategy]
    valid = [name for name in cls._get_param_names() if name != "estimator"]
    for key in params:
        check_choice("option", key, valid, context=f" for personalization {strategy!r}")
    return cls(estimator=estimator, **params)
