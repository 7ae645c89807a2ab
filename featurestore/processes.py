"""Process helpers shared by the command lines: SIGTERM as Ctrl-C, and whether a pid is alive."""

from __future__ import annotations

import os
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


def pid_alive(pid: int) -> bool:
    """True when a process with this pid exists on this machine (ours or another user's)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
