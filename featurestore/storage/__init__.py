"""Layer 1, the storage: the HDF5 shards and the only door to them.

Modules: :mod:`~.provenance` (source fingerprints and cache keys), :mod:`~.shard` (one
session's shard: layout, reading and writing), :mod:`~.verify` (checking shards against
their sources), :mod:`~.store` (:class:`~.store.Store`, the folder of shards).

This ``__init__`` imports nothing; ``from featurestore import Store`` is the public door.
"""
