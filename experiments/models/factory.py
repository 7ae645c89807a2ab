"""Estimator factory: a model name and its hyperparameters -> a scikit-learn ``Pipeline``.

Every pipeline ends in a step called ``model``, so a swept hyperparameter can also be set
afterwards with ``pipeline.set_params(model__alpha=10)``.

Preprocessing, decided per family:

- ``ridge``, ``svr``, ``linear_svr``: :class:`MedianImputer` (the per-column median, as
  ``SimpleImputer(strategy="median", keep_empty_features=True)`` with the same numbers, in a
  fraction of its memory) then ``StandardScaler``. Kernel and linear models need finite,
  comparably scaled inputs; a column that is all NaN in training (e.g. a face channel never
  detected) becomes a constant 0 instead of being dropped, so the column count never changes
  between fit and predict. The imputer's output is a fresh copy, so the scaler (and
  ``Ridge``) work on it in place (``copy=False``) instead of copying the matrix again.
- ``xgboost``, ``hist_gb``: no imputer and no scaler. Both handle NaN natively by learning
  a default branch for missing values, so "no face found" stays a signal instead of being
  replaced by the median; scaling is irrelevant to trees. ``hist_gb`` alone gets
  ``FillEmptyColumns`` first: scikit-learn's binning fails on a column that is all NaN in
  training, so such a column becomes a constant 0 (it carries no information anyway).
- ``dummy``: the model alone (it ignores the features).
- ``position_prior``: the model alone; its one input column is each frame's position in its
  session (:mod:`experiments.models.position_prior`), built by the caller.

``svr`` is the exact RBF-kernel SVR, whose training cost grows about quadratically with
the number of rows; beyond roughly 20,000 training rows use ``nystroem_components`` (for
example 500-2000), which replaces the kernel by a Nystroem approximation of the same RBF
kernel followed by ``LinearSVR``. The switch is explicit (never automatic) so that a
configuration always means the same model whatever the size of the data.

Example:

>>> import numpy as np
>>> pipe = make_model("ridge", {"alpha": 10})
>>> [name for name, _ in pipe.steps]
['impute', 'scale', 'model']
>>> pipe.fit(np.eye(3), [0.0, 1.0, 2.0]).predict(np.eye(3)).shape
(3,)
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, OneToOneFeatureMixin, TransformerMixin
from sklearn.dummy import DummyRegressor
from sklearn.ensemble import HistGradientBoostingRegressor
from sklearn.kernel_approximation import Nystroem
from sklearn.linear_model import Ridge
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVR, LinearSVR
from sklearn.utils.validation import FLOAT_DTYPES, check_is_fitted, validate_data

from ..config.choices import check_choice
from ..config.options import MODEL_PARAMS
from .position_prior import PositionPrior


def resolve_model_params(name: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    """Check a model name and its hyperparameters; return the defaults updated with ``params``.

    A ``name`` key inside ``params`` (as in a config entry ``{name: ridge, alpha: 1}``) is
    accepted when it agrees with ``name``.

    Raises:
        ValueError: unknown model name or hyperparameter; the message lists the valid ones.
    """
    check_choice("model", name, sorted(MODEL_PARAMS))
    params = dict(params or {})
    given_name = params.pop("name", name)
    if given_name != name:
        raise ValueError(f"model name {name!r} disagrees with params['name'] = {given_name!r}")
    allowed = MODEL_PARAMS[name]
    for key in params:
        check_choice("hyperparameter", key, sorted(allowed), context=f" for model {name!r}")
    return {**allowed, **params}


class MedianImputer(OneToOneFeatureMixin, TransformerMixin, BaseEstimator):
    """Replaces NaN by the column's median at fit; a column all NaN at fit becomes 0.

    The same statistics and output as ``SimpleImputer(strategy="median",
    keep_empty_features=True)`` (float32 stays float32, other input becomes float64; the
    median of an even count is the mean of the two middle values, computed in the input's
    dtype), with a small memory footprint and in less time: ``fit`` copies ``block_bytes``
    worth of columns at a time instead of a masked copy of the whole matrix (SimpleImputer
    needs several times the matrix's size for its temporaries) and selects each column's two
    middle values (``numpy.partition``, linear time) instead of sorting it; ``transform``
    fills the copy it returns one block of rows at a time. Infinite values are rejected, as
    by SimpleImputer.

    Args:
        block_bytes: size (bytes) of the column block copied at once by ``fit``, and of the
            row block filled at once by ``transform``; memory only, never the result.
        dtype: None: as above (float32 kept); ``"float64"``: float32 input is converted as the
            blocks are copied and ``transform`` returns a float64 copy, the same numbers as
            converting the input first, without a float64 copy of it beside the output.

    Attributes:
        statistics_: (n_features,) the fill value of each column, in the fitted dtype.
        n_features_in_: number of columns seen at fit.

    Example:

    >>> import numpy as np
    >>> X = np.array([[1.0, np.nan], [np.nan, np.nan], [4.0, np.nan], [5.0, np.nan]])
    >>> MedianImputer().fit(X).transform([[np.nan, np.nan]]).tolist()
    [[4.0, 0.0]]
    """

    def __init__(self, block_bytes: int = 32 * 2**20, dtype: str | None = None):
        self.block_bytes = block_bytes
        self.dtype = dtype

    def _out_dtype(self, X: np.ndarray) -> np.dtype:
        return X.dtype if self.dtype is None else np.dtype(self.dtype)

    def _lines_per_block(self, line_length: int, itemsize: int) -> int:
        """How many columns (or rows) of ``line_length`` values fit in ``block_bytes``."""
        return max(1, int(self.block_bytes) // max(1, line_length * itemsize))

    def fit(self, X: Any, y: Any = None) -> MedianImputer:
        """Learn each column's median over its non-NaN rows (0 for a column without any)."""
        X = validate_data(self, X, dtype=FLOAT_DTYPES, ensure_all_finite="allow-nan", reset=True)
        n, d = X.shape
        out = self._out_dtype(X)
        stats = np.zeros(d, dtype=out)
        step = self._lines_per_block(n, out.itemsize)
        half = np.asarray(2, dtype=out)
        for a in range(0, d, step):
            # one block of columns, each one contiguous row of the copy (in the output dtype)
            block = np.array(X[:, a : a + step].T, dtype=out, order="C")
            for j, column in enumerate(block):
                values = column[~np.isnan(column)]
                k = len(values)
                if k == 0:
                    continue  # all NaN: the fill value stays 0
                # the two middle order statistics by selection (linear time), not a full sort
                # (n log n): about 2x faster on the full-size training matrix, the same values
                low, high = (k - 1) // 2, k // 2
                values.partition([low, high])
                # as numpy.ma.median: the sum of the two middle values (one value twice for an
                # odd count), halved, in the input's dtype
                stats[a + j] = (values[low] + values[high]) / half
        self.statistics_ = stats
        return self

    def transform(self, X: Any) -> np.ndarray:
        """Copy of ``X`` (float32 kept unless ``dtype``, else float64) with every NaN set to its
        column's fill value."""
        check_is_fitted(self)
        dtype = FLOAT_DTYPES if self.dtype is None else np.dtype(self.dtype)
        X = validate_data(
            self, X, dtype=dtype, ensure_all_finite="allow-nan", reset=False, copy=True
        )
        fill = self.statistics_.astype(X.dtype, copy=False)
        step = self._lines_per_block(X.shape[1], X.itemsize)
        for a in range(0, X.shape[0], step):
            rows = X[a : a + step]
            np.copyto(rows, fill, where=np.isnan(rows))
        return X

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True
        return tags


class FillEmptyColumns(TransformerMixin, BaseEstimator):
    """Sets the columns that were entirely NaN at fit to 0; other NaNs are left in place.

    Row-preserving; for estimators that handle NaN natively but fail on a column without a
    single observed value (``HistGradientBoostingRegressor``). ``transform`` copies only
    when there is a column to fill: with none, a float64 input is returned as it is (the
    estimators after it only read it), which spares a copy of the training matrix; float32
    input is converted to float64 once, here (``fit`` reads it as it is).

    Attributes:
        empty_: boolean mask, shape (n_features,), of the columns all NaN at fit.
    """

    def fit(self, X: Any, y: Any = None) -> FillEmptyColumns:
        """Record which columns of ``X`` hold no value at all."""
        # float32 read as it is: NaN is NaN in either dtype, and no float64 copy is made here
        X = validate_data(self, X, dtype=FLOAT_DTYPES, ensure_all_finite="allow-nan", reset=True)
        self.empty_ = np.isnan(X).all(axis=0)
        return self

    def transform(self, X: Any) -> np.ndarray:
        """``X`` as float64 with the columns empty at fit set to 0 (a copy if any is)."""
        check_is_fitted(self)
        # float64 input passes through without a copy (copy=False is validate_data's default)
        X = validate_data(self, X, dtype=np.float64, ensure_all_finite="allow-nan", reset=False)
        if self.empty_.any():
            X = X.copy(order="K")  # a column-major input stays so (the binning reads columns)
            X[:, self.empty_] = 0.0
        return X

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True
        return tags


def _linear_preprocessing() -> list[tuple[str, Any]]:
    # the imputer returns a float64 copy (of float32 features too, converted as it copies):
    # the scaler standardises that copy in place
    return [
        ("impute", MedianImputer(dtype="float64")),
        ("scale", StandardScaler(copy=False)),
    ]


def make_model(name: str, params: dict[str, Any] | None = None, seed: int = 0) -> Pipeline:
    """Build an unfitted pipeline for model ``name`` with hyperparameters ``params``.

    Args:
        name: one of ``MODEL_PARAMS`` (svr, linear_svr, xgboost, hist_gb, ridge, dummy,
            position_prior).
        params: hyperparameters; missing ones take the defaults in ``MODEL_PARAMS[name]``.
        seed: random state of the stochastic parts (XGBoost subsampling, HistGradientBoosting,
            Nystroem landmarks, LinearSVR's coordinate descent).

    Returns:
        A ``Pipeline`` whose last step is named ``model``.

    Raises:
        ValueError: unknown model name or hyperparameter (with a suggestion).
    """
    p = resolve_model_params(name, params)
    if name == "ridge":
        # copy_X=False: Ridge centres the scaler's output (the pipeline's own copy) in place
        return Pipeline(
            [*_linear_preprocessing(), ("model", Ridge(alpha=p["alpha"], copy_X=False))]
        )
    if name == "svr":
        n_components = p["nystroem_components"]
        if n_components is None:
            model = SVR(kernel="rbf", C=p["C"], gamma=p["gamma"], epsilon=p["epsilon"])
            return Pipeline([*_linear_preprocessing(), ("model", model)])
        # after StandardScaler X.var() is about 1, so SVR's gamma="scale" (and "auto")
        # is 1 / n_features: exactly Nystroem's gamma=None
        gamma = None if p["gamma"] in ("scale", "auto") else p["gamma"]
        kernel = Nystroem(
            kernel="rbf", gamma=gamma, n_components=int(n_components), random_state=seed
        )
        model = LinearSVR(
            C=p["C"], epsilon=p["epsilon"], dual="auto", max_iter=5000, random_state=seed
        )
        return Pipeline([*_linear_preprocessing(), ("kernel", kernel), ("model", model)])
    if name == "linear_svr":
        model = LinearSVR(
            C=p["C"],
            epsilon=p["epsilon"],
            loss=p["loss"],
            dual="auto",
            max_iter=p["max_iter"],
            random_state=seed,
        )
        return Pipeline([*_linear_preprocessing(), ("model", model)])
    if name == "xgboost":
        from xgboost import XGBRegressor  # imported here: loading libxgboost costs ~0.3 s

        model = XGBRegressor(
            n_estimators=p["n_estimators"],
            max_depth=p["max_depth"],
            learning_rate=p["learning_rate"],
            subsample=p["subsample"],
            colsample_bytree=p["colsample_bytree"],
            tree_method="hist",
            n_jobs=p["n_jobs"],
            random_state=seed,
        )
        return Pipeline([("model", model)])
    if name == "hist_gb":
        # early_stopping=False: max_iter means what it says, whatever the number of rows
        model = HistGradientBoostingRegressor(
            max_iter=p["max_iter"],
            learning_rate=p["learning_rate"],
            max_depth=p["max_depth"],
            early_stopping=False,
            random_state=seed,
        )
        return Pipeline([("fill_empty", FillEmptyColumns()), ("model", model)])
    if name == "position_prior":
        return Pipeline([("model", PositionPrior(n_bins=int(p["n_bins"])))])
    # resolve_model_params accepted the name, so only "dummy" is left
    return Pipeline([("model", DummyRegressor(strategy="mean"))])
