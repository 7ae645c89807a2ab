"""Layer 3, the windows: frame tables -> per-frame window statistics, with a label delay
(:func:`~.stats.window_stats`; the modules: docs/development.md)."""

from .stats import feature_name, window_bounds, window_frames, window_stats

__all__ = ["feature_name", "window_bounds", "window_frames", "window_stats"]
