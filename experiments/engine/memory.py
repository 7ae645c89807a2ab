"""What a window key's features will take in memory (the budget of the forked sweep; the
machine's side: :mod:`featurestore.parallel.memory`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..config.grid import WindowKey


def windowed_nbytes(tables: Sequence, key: WindowKey) -> int:
    """Estimated size (bytes) of ``window_sessions(tables, key)``: frames x output columns x 4
    (float32); one column per statistic, window length and input column, and per channel
    and window length for ``valid_frac``."""
    if not tables:
        return 0
    first = tables[0]
    idx = [first.channels.index(c) for c in key.channels if c in first.channels]
    n_columns = int(np.isin(first.column_channel, idx).sum())
    stats = [s for s in key.stats if s != "valid_frac"]
    per_frame = len(key.lengths_s) * (
        n_columns * len(stats) + len(key.channels) * ("valid_frac" in key.stats)
    )
    return sum(t.n_frames for t in tables) * per_frame * 4
