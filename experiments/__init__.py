"""experiments: feature-store sessions -> windowed features -> models -> CCC -> MLflow.

The public API is imported lazily, so ``import experiments`` stays light (no scikit-learn,
MLflow or h5py until a function that needs them is used)::

    from experiments import load_config, ccc, ccc_protocols, load_sessions, window_stats
"""

from __future__ import annotations

from featurestore import __version__  # the one version of the distribution (setup.cfg reads it)
from featurestore.lazy import lazy_exports

#: public name -> module that defines it (add an entry to export another function)
_EXPORTS: dict[str, str] = {
    "load_config": ".config.loading",
    "ExperimentConfig": ".config.schema",
    "ConfigError": "featurestore.overrides",
    "expand": ".config.grid",
    "ccc": ".config.metrics",
    "ccc_protocols": ".evaluation.metrics",
    "ccc_matrix": ".evaluation.metrics",
    "load_sessions": ".data.dataset",
    "SessionTable": ".data.session_table",
    "window_stats": ".windowing.stats",
    "run_sweep": ".studies.sweep",
    "ablate": ".studies.ablation",
    "export_predictions": ".tracking.tracker",
    "evaluate_trial": ".evaluation.evaluate",
    "agreement": ".studies.agreement",
    "agreement_table": ".studies.agreement",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
