"""Layer 2, the data: feature-store sessions -> frame tables at the label rate (25 fps). Imports
nothing, so a worker loads only the module it needs; the modules: docs/development.md.
"""
