"""featurestore: OMG-Empathy session videos -> per-role, per-frame features in HDF5 shards."""

from .features import Features
from .store import Channel, SessionMeta, Store, StoreError

__version__ = "0.1.0"
__all__ = ["Channel", "Features", "SessionMeta", "Store", "StoreError", "__version__"]
