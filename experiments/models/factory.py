"""A model's pipeline by name (:func:`make_model`: the preprocessing the registered spec names, then a step
called ``model``), and this package's two preprocessing steps (trees keep NaN: "no face found" stays a signal)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, OneToOneFeatureMixin, TransformerMixin
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.validation import FLOAT_DTYPES, check_is_fitted, validate_data

from ..config.models import model_spec
from ..config.models import resolve_model_params as resolve_model_params  # re-exported


class MedianImputer(OneToOneFeatureMixin, TransformerMixin, BaseEstimator):
    """Replaces NaN by the column's median at fit (``statistics_``; 0 for a column all NaN): ``SimpleImputer(
    strategy="median", keep_empty_features=True)``'s numbers in a fraction of its memory and time (``block_bytes``
    copied at a time); ``dtype="float64"``: float32 input converted as it is copied."""

    def __init__(self, block_bytes: int = 32 * 2**20, dtype: str | None = None):
        self.block_bytes = block_bytes
        self.dtype = dtype

    def _out_dtype(self, X: np.ndarray) -> np.dtype:
        return X.dtype if self.dtype is None else np.dtype(self.dtype)

    def _lines_per_block(self, line_length: int, itemsize: int) -> int:
        """How many columns (or rows) of ``line_length`` values fit in ``block_bytes``."""
        return max(1, int(self.block_bytes) // max(1, line_length * itemsize))

    def fit(self, X: Any, y: Any = None) -> MedianImputer:
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
                # the two middle order statistics by selection, not a full sort: 2x faster
                low, high = (k - 1) // 2, k // 2
                values.partition([low, high])
                # as numpy.ma.median: the two middle values summed and halved, in the input's dtype
                stats[a + j] = (values[low] + values[high]) / half
        self.statistics_ = stats
        return self

    def transform(self, X: Any) -> np.ndarray:
        """Copy of ``X`` (float32 kept unless ``dtype``) with every NaN set to its column's fill value."""
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

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True
        return tags


class FillEmptyColumns(TransformerMixin, BaseEstimator):
    """Sets the columns all NaN at fit (``empty_``) to 0, other NaNs left (``HistGradientBoostingRegressor`` fails on
    an empty column); ``transform`` copies only when there is one to fill."""

    def fit(self, X: Any, y: Any = None) -> FillEmptyColumns:
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

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True
        return tags


#: the preprocessing steps a :class:`~experiments.config.models.ModelSpec` names: median
#: imputation into a float64 copy that the scaler standardises in place; the columns all NaN at
#: fit set to 0; none
PREPROCESSING: dict[str, Callable[[], list[tuple[str, Any]]]] = {
    "impute_scale": lambda: [
        ("impute", MedianImputer(dtype="float64")),
        ("scale", StandardScaler(copy=False)),
    ],
    "fill_empty": lambda: [("fill_empty", FillEmptyColumns())],
    "none": list,
}


def make_model(name: str, params: dict[str, Any] | None = None, seed: int = 0) -> Pipeline:
    """An unfitted pipeline of the registered model ``name`` with ``params`` and random state ``seed``."""
    spec = model_spec(name)
    build = spec.build
    if not callable(build):  # a "module:function" name
        module, _, attr = build.partition(":")
        build = getattr(importlib.import_module(module), attr)
    built = build(spec.resolve(params), seed)
    steps = built if isinstance(built, list) else [("model", built)]
    return Pipeline([*PREPROCESSING[spec.preprocess](), *steps])
