"""Layer 3, the windows: frame tables -> per-frame window statistics, with a label delay.

Modules: :mod:`~.stats` (the compiled multi-scale window kernels,
:func:`~.stats.window_stats`), :mod:`~.windowed` (one window key's features of every
session, built once and shared by the fits).

The names below were the public names of the former module ``experiments.windowing``.
"""

from .stats import feature_name, window_bounds, window_frames, window_stats

__all__ = ["feature_name", "window_bounds", "window_frames", "window_stats"]
