"""Layer 6, the tracking: MLflow runs, resume keys, the sweep's summary and the UI view (import the modules)."""
