"""featurestore: OMG-Empathy session videos -> per-role, per-frame features in HDF5 shards.

The public API is imported on first use, so ``import featurestore`` stays light (no pandas or
h5py until the store is used)::

    from featurestore import Store, Features
"""

from __future__ import annotations

import importlib
from typing import Any

from . import moved  # noqa: F401 - old module names (featurestore.store, ...) keep importing

#: the version of the omg-empathy-bench distribution: written here only (setup.cfg reads it with
#: ``attr:``, experiments re-exports it)
__version__ = "0.1.0"

#: public name -> module that defines it
_EXPORTS: dict[str, str] = {
    "Features": ".features",
    "Channel": ".storage.store",
    "SessionMeta": ".storage.store",
    "Store": ".storage.store",
    "StoreError": ".storage.store",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str) -> Any:
    # PEP 562, as in experiments/__init__.py: each public name's module is imported on first use
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'featurestore' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
