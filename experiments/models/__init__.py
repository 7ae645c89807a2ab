"""Layer 4, the models: a registered model's pipeline (:func:`~.factory.make_model`), per-listener
strategies, post-processing, and the closed-form ridge."""

from .factory import FillEmptyColumns, MedianImputer, make_model, resolve_model_params

__all__ = ["FillEmptyColumns", "MedianImputer", "make_model", "resolve_model_params"]
