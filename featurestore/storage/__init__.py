"""Layer 1, the storage: the HDF5 shards and the only door to them (``from featurestore import
Store``). Imports nothing; the modules: docs/development.md (the package layout).
"""
