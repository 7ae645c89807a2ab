"""Layer 7, the executors: where a sweep's configurations run, registered by name
(:mod:`.base`); this ``__init__`` imports none of them, so neither is loaded for the other."""
