"""Per-listener meta-estimators: one model per listener, calibration, listener as a feature.

Convention: the listener id travels inside ``X``
------------------------------------------------
scikit-learn passes only ``X`` and ``y`` through ``fit``/``predict``, so every estimator
here reads the listener id from one column of ``X``, column ``listener_column`` (0 by
default), and **removes that column before the wrapped estimator sees the features**. The
id must be numeric and not NaN (the corpus numbers its listeners 1-10); the feature
columns may hold NaN if the wrapped estimator accepts it (the pipelines of
``experiments.models`` do). Build the matrix as ``np.column_stack([listener_ids, features])``.
All strategies, ``global`` included, take this same layout, so the sweep can switch
strategy without changing its data.

Every class follows the scikit-learn estimator contract: ``__init__`` stores its
arguments untouched, all work happens in ``fit``, learned state ends in ``_``; ``clone``,
``get_params``/``set_params`` (also nested: ``estimator__model__alpha``) and ``Pipeline``
work. These estimators only see the rows ``fit`` is given; keeping validation and test
rows out of ``fit`` is the caller's job.

Example:

>>> import numpy as np
>>> from sklearn.linear_model import LinearRegression
>>> x = np.linspace(-1, 1, 40)
>>> X = np.column_stack([np.repeat([1, 2], 20), np.tile(x[:20], 2)])
>>> y = np.where(X[:, 0] == 1, X[:, 1], -X[:, 1])
>>> model = make_personalizer("per_listener", LinearRegression(), min_samples=10).fit(X, y)
>>> bool(np.allclose(model.predict(X), y))
True
"""

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

#: estimators that compute in float32 whatever they are given (XGBoost's ``DMatrix`` stores
#: its features as float32): handed float32 features (the sweep's design matrix is float32),
#: they give the same numbers without a float64 copy of the matrix
FLOAT32_ESTIMATORS = ("XGBRegressor",)


def feature_dtype(estimator: Any) -> type:
    """The dtype the features are handed to ``estimator`` in: ``np.float32`` for a
    :data:`FLOAT32_ESTIMATORS` model alone (or alone in a ``Pipeline``), else ``np.float64``."""
    steps = getattr(estimator, "steps", None)
    if steps is not None:
        if len(steps) != 1:
            return np.float64
        estimator = steps[0][1]
    return np.float32 if type(estimator).__name__ in FLOAT32_ESTIMATORS else np.float64


#: first pipeline steps that make a float64 copy of whatever features they are given (see
#: :func:`copies_features`), with the values a float64 copy made before them would give
COPYING_FIRST_STEPS = ("MedianImputer", "FillEmptyColumns")


def copies_features(estimator: Any) -> bool:
    """Whether ``estimator`` is a ``Pipeline`` whose first step copies the features into float64
    itself (:class:`~experiments.models.factory.FillEmptyColumns`, or
    :class:`~experiments.models.factory.MedianImputer` with ``dtype="float64"``): it is then
    handed the (float32) design matrix's feature columns as a view, and that step's copy is the
    only one (no float64 copy to split the listener column off, then the step's own)."""
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
    """Split ``X`` into (listener ids, shape (n,) float; features, shape (n, d - 1) ``dtype``).

    The features are one contiguous copy of ``X`` without the listener column (a slice when
    the column is the first or the last, converted once; never a copy then another). With
    ``copy=False`` they are that slice as it is (a view of ``X`` in its dtype, ``dtype``
    ignored), for an estimator that copies them itself (:func:`copies_features`); a column
    in the middle is still cut out (one copy in ``X``'s dtype).

    Raises:
        ValueError: ``X`` is not 2-D, has no column ``listener_column``, or an id is NaN.
    """
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
    if not copy:
        return listeners, rest
    features = np.array(rest, dtype=dtype, order="C", copy=True)
    return listeners, features


def _listener_key(value: float) -> int | float:
    """Dictionary key of a listener id: an int when the id is integral (1.0 -> 1)."""
    return int(value) if float(value).is_integer() else float(value)


def fit_listener_calibration(
    listeners: Any, pred: Any, y: Any, shrinkage: float = 100.0
) -> dict[int | float, tuple[float, float]]:
    """Each listener's shrunk least-squares map ``y ~ a_L * pred + b_L`` (see :class:`CalibratedPerListener`).

    Args:
        listeners: listener id of each row.
        pred: the global model's prediction of each row (out of fold, ideally).
        y: the label of each row.
        shrinkage: prior strength in rows: ``w = n / (n + shrinkage)`` pulls the map of a
            listener with ``n`` rows towards the identity.

    Returns:
        listener id -> ``(a_L, b_L)``.
    """
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

    def _split_fit(self, X: Any, y: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        # scikit-learn's own input checks (2-D, numeric, no complex or sparse input, y given and
        # 1-D, n_features_in_); features may hold NaN for a wrapped estimator that takes it.
        # dtype "numeric" keeps a float32 matrix as it is: the one float copy is the split's
        # (a large training matrix must not be copied twice)
        X, y = validate_data(
            self, X, y, dtype="numeric", ensure_all_finite="allow-nan", y_numeric=True, reset=True
        )
        self._check_width(X)
        listeners, features = split_listener_column(
            X,
            self.listener_column,
            feature_dtype(self.estimator),
            copy=not copies_features(self.estimator),
        )
        return listeners, features, np.asarray(y, dtype=float)

    def _split_predict(self, X: Any) -> tuple[np.ndarray, np.ndarray]:
        check_is_fitted(self)
        X = validate_data(self, X, dtype="numeric", ensure_all_finite="allow-nan", reset=False)
        return split_listener_column(
            X,
            self.listener_column,
            feature_dtype(self.estimator),
            copy=not copies_features(self.estimator),
        )

    def _check_width(self, X: np.ndarray) -> None:
        if X.shape[1] < 2:
            raise ValueError(
                f"X has {X.shape[1]} feature(s): the listener id column only; a personalization strategy needs "
                "the id plus at least one feature column (np.column_stack([listener_ids, features]))"
            )

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True  # in feature columns, if the wrapped estimator takes it
        return tags


class GlobalRegressor(_ListenerMetaEstimator):
    """One model for everyone: drops the listener column and fits ``estimator`` on all rows.

    Args:
        estimator: any scikit-learn regressor (cloned at fit).
        listener_column: index of the listener-id column in ``X``.

    Attributes:
        estimator_: the fitted clone.
    """

    def __init__(self, estimator: Any, listener_column: int = 0):
        self.estimator = estimator
        self.listener_column = listener_column

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
    """One clone of ``estimator`` per listener, with a global model as the fallback.

    ``fit`` trains one clone on each listener's rows, plus one clone on all rows (the
    global model). At ``predict``, a listener gets their own model; a listener never seen
    at fit, or seen with fewer than ``min_samples`` rows, gets the global model.

    Args:
        estimator: any scikit-learn regressor (cloned at fit).
        listener_column: index of the listener-id column in ``X``.
        min_samples: fewest training rows for a listener to get their own model.
        fallback: fit the global model (``True``). With ``False`` it is not fitted, which
            saves a fit on all rows when the caller knows every listener it will predict has
            a model of their own (the sweep checks this); ``predict`` then refuses a
            listener without one instead of guessing.

    Attributes:
        estimators_: dict listener id -> fitted clone (listeners with enough rows).
        global_: the fallback clone fitted on all rows (``None`` with ``fallback=False``).
        fallback_listeners_: sorted ids seen at fit with fewer than ``min_samples`` rows.
    """

    def __init__(
        self, estimator: Any, listener_column: int = 0, min_samples: int = 50, fallback: bool = True
    ):
        self.estimator = estimator
        self.listener_column = listener_column
        self.min_samples = min_samples
        self.fallback = fallback

    def fit(self, X: Any, y: Any) -> PerListenerRegressor:
        """Fit one model per listener with at least ``min_samples`` rows, and (with
        ``fallback``) the global model."""
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
    """A global model followed by a per-listener linear map ``a_L * pred + b_L``.

    ``fit`` trains ``estimator`` on all rows, predicts the training rows, and for each
    listener fits ``(a, b)`` by least squares of ``y`` on those predictions. The map is
    then shrunk towards the identity by the number of rows ``n`` the listener has:
    ``w = n / (n + shrinkage)``, ``a_L = w * a + (1 - w)``, ``b_L = w * b``; so the
    calibrated prediction is ``w * (least-squares map) + (1 - w) * (global prediction)``,
    and a listener with few rows keeps nearly the global prediction. When a listener's
    training predictions are constant the slope is undefined and ``a = 1`` (bias only).
    A listener never seen at fit gets the identity.

    Given ``groups`` at fit (the sweep passes each row's story), the maps are fitted on
    out-of-fold predictions of the global model (leave one group out). Without them they
    use its in-sample predictions: for a flexible model that fits the training rows closely
    those are optimistic, and ``a_L`` is then closer to 1 than it would be on unseen data.
    Smoothing the predictions afterwards is the caller's job, and so is fitting the maps on
    predictions smoothed the same way (the sweep does: see
    :func:`experiments.models.postprocess.fit_smoothed_calibration`); maps fitted before
    smoothing take the fast part of the prediction for noise and shrink ``a_L``.

    Args:
        estimator: any scikit-learn regressor (cloned at fit).
        listener_column: index of the listener-id column in ``X``.
        shrinkage: prior strength in training rows (0 = plain least squares).

    Attributes:
        global_: the fitted global clone.
        calibration_: dict listener id -> (a_L, b_L).
    """

    def __init__(self, estimator: Any, listener_column: int = 0, shrinkage: float = 100.0):
        self.estimator = estimator
        self.listener_column = listener_column
        self.shrinkage = shrinkage

    def fit(self, X: Any, y: Any, groups: Any = None) -> CalibratedPerListener:
        """Fit the global model, then each listener's shrunk least-squares map.

        Args:
            X: ``[listener id, features...]`` rows.
            y: labels, one per row.
            groups: optional group of each row (e.g. its story). Given two or more groups,
                the maps are fitted on out-of-fold predictions (leave one group out: each
                group predicted by a global model fitted on the others), not on the global
                model's in-sample predictions, which are optimistic for a flexible model.
        """
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
    """Listener identity as features: one-hot columns appended after the other features.

    The wrapped estimator sees ``[features..., is_listener_1, is_listener_2, ...]`` with one
    column per listener seen at fit (in ascending id order). A listener never seen at fit
    gets all zeros, i.e. the model's baseline for "no listener known".

    Args:
        estimator: any scikit-learn regressor (cloned at fit).
        listener_column: index of the listener-id column in ``X``.

    Attributes:
        categories_: sorted listener ids seen at fit (one one-hot column each).
        estimator_: the fitted clone.
    """

    def __init__(self, estimator: Any, listener_column: int = 0):
        self.estimator = estimator
        self.listener_column = listener_column

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
    """Wrap ``estimator`` in the meta-estimator for personalization ``strategy``.

    Args:
        strategy: one of ``PERSONALIZATION_STRATEGIES``.
        estimator: the (unfitted) regressor to wrap, e.g. ``make_model("ridge", {})``.
        **params: options of the strategy's class, e.g. ``listener_column``,
            ``min_samples`` (per_listener), ``shrinkage`` (global_calibrated).

    Returns:
        An unfitted meta-estimator whose ``X`` carries the listener id in ``listener_column``.

    Raises:
        ValueError: unknown strategy or option (with a suggestion).
    """
    check_choice("personalization strategy", strategy, PERSONALIZATION_STRATEGIES)
    cls = _STRATEGY_CLASSES[strategy]
    valid = [name for name in cls._get_param_names() if name != "estimator"]
    for key in params:
        check_choice("option", key, valid, context=f" for personalization {strategy!r}")
    return cls(estimator=estimator, **params)
