"""Process helpers shared by the command lines: their start, SIGTERM as Ctrl-C, whether a pid lives."""

from __future__ import annotations

import argparse
import os
import signal
from collections.abc import Sequence
from types import FrameType

#: the exit code of a usage error (argparse's)
EXIT_USAGE = 2


def parse_args(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None
) -> argparse.Namespace | int:
    """A command line's start: SIGTERM made Ctrl-C (:func:`terminate_as_interrupt`), then ``argv``
    parsed; the exit code instead when argparse exits (0 after ``--help``/``--version``,
    :data:`EXIT_USAGE` for a usage error, which argparse has printed)."""
    terminate_as_interrupt()
    try:
        return parser.parse_args(argv)
    except SystemExit as e:
        return EXIT_USAGE if e.code not in (0, None) else 0


def terminate_as_interrupt() -> None:
    """Install a SIGTERM handler that raises KeyboardInterrupt (main thread only; else a no-op).

    A scheduler's or ``kill``'s default signal then takes the same clean-up path as Ctrl-C:
    temporary shards are removed and MLflow runs are marked KILLED.
    """

    def handler(signum: int, frame: FrameType | None) -> None:
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
