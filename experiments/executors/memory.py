"""Memory of a sweep on this machine: what a window key's features will take, what the system
can give, and the C heap's free pages handed back (the local executor's budget).

>>> available_memory() is None or available_memory() > 0
True
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..config.grid import WindowKey


@functools.cache
def _malloc_trim() -> Any:
    try:
        return ctypes.CDLL(None).malloc_trim  # glibc
    except (OSError, AttributeError, TypeError):
        return None


def release_free_memory() -> None:
    """Hand the C heap's free pages back to the system (glibc ``malloc_trim``; a no-op elsewhere).

    Arrays of a few tens of MB (a session's windowed features, a fit's temporaries) come from
    the heap, whose freed pages glibc keeps for reuse: hundreds of MB after a window key's
    features or a fit are dropped, which forked workers would also map."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


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


def available_memory() -> int | None:
    """Memory (bytes) the system can give without swapping (psutil's ``available``), or None
    when unknown."""
    import psutil  # imported here: a few milliseconds that only a parallel sweep needs

    try:
        return int(psutil.virtual_memory().available)
    except (OSError, RuntimeError):  # no /proc/meminfo (a restricted container)
        return None
