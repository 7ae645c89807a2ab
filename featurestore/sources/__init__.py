"""Layer 2, the sources: what a corpus holds before anything is extracted. Imports nothing, so a
worker loads only the module it needs; the modules: docs/development.md (the package layout).
"""
