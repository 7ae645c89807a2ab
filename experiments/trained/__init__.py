"""Layer 5, the trained models: a fitted estimator in files that load without running code (:mod:`.formats`)."""
