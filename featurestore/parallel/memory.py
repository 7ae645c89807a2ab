"""This machine's memory as a parallel run sees it: what the system can give, and the C heap's
free pages handed back (so forked workers do not map them for nothing).

>>> available_memory() is None or available_memory() > 0
True
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any


@functools.cache
def _malloc_trim() -> Any:
    try:
        return ctypes.CDLL(None).malloc_trim  # glibc
    except (OSError, AttributeError, TypeError):
        return None


def release_free_memory() -> None:
    """Hand the C heap's free pages back to the system (glibc ``malloc_trim``; a no-op elsewhere):
    glibc keeps those of arrays of tens of MB (windowed features, a fit's temporaries) for reuse,
    hundreds of MB once dropped, which forked workers would also map."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def available_memory() -> int | None:
    """Memory (bytes) the system can give without swapping (psutil's ``available``), or None."""
    import psutil  # imported here: a few milliseconds that only a parallel run needs

    try:
        return int(psutil.virtual_memory().available)
    except (OSError, RuntimeError):  # no /proc/meminfo (a restricted container)
        return None
