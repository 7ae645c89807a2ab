"""experiments: feature-store sessions -> windowed features -> models -> CCC -> MLflow.

The public API is imported lazily, so ``import experiments`` stays light (no scikit-learn,
MLflow or h5py until a function that needs them is used)::

    from experiments import load_config, ccc, ccc_protocols, load_sessions, window_stats
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

#: public name -> module that defines it (add an entry to export another function)
_EXPORTS: dict[str, str] = {
    "load_config": ".config",
    "ExperimentConfig": ".config_schema",
    "ConfigError": ".config_schema",
    "expand": ".grid",
    "ccc": ".metrics",
    "ccc_protocols": ".metrics",
    "ccc_matrix": ".metrics",
    "load_sessions": ".dataset",
    "SessionTable": ".session_table",
    "window_stats": ".windowing",
    "run_sweep": ".sweep",
    "ablate": ".ablation",
    "export_predictions": ".tracking",
    "evaluate_trial": ".evaluate",
    "agreement": ".agreement",
    "agreement_table": ".agreement",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str) -> Any:
    # PEP 562: each public name's module is imported on first use, so `import experiments` loads
    # no scikit-learn, MLflow or h5py (not to break an import cycle: the modules have none)
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'experiments' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
