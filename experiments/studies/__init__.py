"""Layer 8, the studies: what a user runs (a sweep, a search, an ablation, ...), built on the
layers below (this ``__init__`` imports nothing: a worker loads only the module it needs)."""
