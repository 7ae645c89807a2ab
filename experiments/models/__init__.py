"""Layer 4, the models: estimators, per-listener strategies and post-processing.

Modules: :mod:`~.factory` (a registered model's pipeline, :func:`~.factory.make_model`),
:mod:`~.personalization` (global, per-listener and calibrated strategies as
meta-estimators), :mod:`~.postprocess` (smoothing and rescaling of predictions).

The names below were the public names of the former module ``experiments.models``.
"""

from .factory import FillEmptyColumns, MedianImputer, make_model, resolve_model_params

__all__ = ["FillEmptyColumns", "MedianImputer", "make_model", "resolve_model_params"]
