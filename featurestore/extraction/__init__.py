"""Layer 4, the extraction: sources and extractors -> channels written to the store.

Modules: :mod:`~.config` (extraction settings: defaults, ``featurestore.yaml``, overrides),
:mod:`~.plan` (one session's plan: each channel's extractor, cache key and whether it is
current), :mod:`~.extract` (one session: plan, decode, derive, write), :mod:`~.derived` (channels
derived from others: per-role voice, transcript channels), :mod:`~.pool` (many sessions on
local processes), :mod:`~.distributed` (on a Dask cluster), :mod:`~.tables` and
:mod:`~.imports` (tables computed by other tools, e.g. OpenFace or py-feat, imported as
channels).

This ``__init__`` imports nothing, so a worker that needs one module loads only that one.
"""
