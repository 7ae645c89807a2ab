"""Layer 2, the data: feature-store sessions -> frame tables at the label rate (25 fps).

Modules: :mod:`~.session_table` (one session's frames, labels and ids), :mod:`~.dataset`
(reading many sessions from the store, :func:`~.dataset.load_sessions`),
:mod:`~.frames_cache` (the on-disk cache of resampled frame tables), :mod:`~.folds`
(cross-validation folds by person or by group).

This ``__init__`` imports nothing, so a worker that needs one module loads only that one.
"""
