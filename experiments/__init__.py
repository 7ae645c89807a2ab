"""experiments: feature-store sessions -> windowed features -> models -> CCC -> MLflow. The public API is imported
lazily, so ``import experiments`` stays light (no scikit-learn, MLflow or h5py until needed)::

    from experiments import load_config, ccc, protocol_means, load_sessions, window_stats
"""

from __future__ import annotations

from featurestore import __version__  # the one version of the distribution (setup.cfg reads it)
from featurestore.lazy import lazy_exports

#: module -> the public names it defines (add one to export another function)
_MODULES: dict[str, tuple[str, ...]] = {
    ".config.loading": ("load_config",),
    ".config.schema": ("ExperimentConfig",),
    "featurestore.overrides": ("ConfigError",),
    ".config.grid": ("expand",),
    ".config.metrics": ("ccc", "get_metric", "register_metric"),
    ".config.models": ("model_spec", "register_model"),
    ".evaluation.metrics": ("protocol_means", "score_matrix"),
    ".data.dataset": ("load_sessions",),
    ".data.session_table": ("SessionTable",),
    ".windowing.stats": ("window_stats",),
    ".studies.sweep": ("run_sweep", "SweepOptions"),
    ".studies.search": ("run_search",),
    ".studies.ablation": ("ablate",),
    ".tracking.tracker": ("export_predictions",),
    ".evaluation.evaluate": ("evaluate_trial",),
    ".studies.agreement": ("agreement", "agreement_table"),
}
_EXPORTS = {name: module for module, names in _MODULES.items() for name in names}
__all__ = sorted(_EXPORTS) + ["__version__"]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
