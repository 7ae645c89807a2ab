"""Layer 6, the tracking: MLflow runs, resume keys, the sweep's summary and the UI view.

Modules: :mod:`~.tracker` (the MLflow store, :class:`~.tracker.Tracker`, export of
predictions), :mod:`~.provenance` (the code fingerprint that resume keys on),
:mod:`~.child_runs` (one configuration's run), :mod:`~.summary` (the sweep's table and best
runs), :mod:`~.ui_view` and :mod:`~.ui` (what the MLflow UI opens on; ``python -m
experiments.tracking.ui``).

The names below were the public names of the former module ``experiments.tracking``.
"""

from .tracker import (
    CONFIG_HASH_TAG,
    DEFAULT_URI,
    WORKER_LOST_TAG,
    Tracker,
    artifact_root_for,
    export_predictions,
    git_commit,
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
    "git_commit",
    "resolve_tracking_uri",
    "with_retry",
]
