"""Layer 6, the tracking: MLflow runs, resume keys, the sweep's summary and the UI view."""

from .tracker import (
    CONFIG_HASH_TAG,
    DEFAULT_URI,
    WORKER_LOST_TAG,
    Tracker,
    artifact_root_for,
    export_predictions,
    resolve_tracking_uri,
    with_retry,
)

__all__ = [
    "CONFIG_HASH_TAG",
    "DEFAULT_URI",
    "WORKER_LOST_TAG",
    "Tracker",
    "artifact_root_for",
    "export_predictions",
    "resolve_tracking_uri",
    "with_retry",
]
