"""Layer 4, the extraction: sources and extractors -> channels written to the store. Imports
nothing, so a worker loads only the module it needs; the modules: docs/development.md.
"""
