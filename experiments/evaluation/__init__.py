"""Layer 5, the evaluation: fits, predictions, scores, intervals and chance, figures and tables
(this ``__init__`` imports nothing: a worker loads only the module it needs)."""
