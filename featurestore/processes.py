"""Make SIGTERM unwind like Ctrl-C, so long commands close their runs and temporary files."""

from __future__ import annotations

import signal


def terminate_as_interrupt() -> None:
    """Install a SIGTERM handler that raises KeyboardInterrupt (main thread only; else a no-op).

    A scheduler's or ``kill``'s default signal then takes the same clean-up path as Ctrl-C:
    temporary shards are removed and MLflow runs are marked KILLED.
    """

    def handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    try:
        signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread (e.g. inside a notebook worker)
        pass
