"""featurestore: OMG-Empathy session videos -> per-role, per-frame features in HDF5 shards.

The public API is imported on first use, so ``import featurestore`` stays light (no pandas or
h5py until the store is used)::

    from featurestore import Store, Features
"""

from __future__ import annotations

from .lazy import lazy_exports

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


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
