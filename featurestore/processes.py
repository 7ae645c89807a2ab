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
    """SIGTERM made Ctrl-C (:func:`terminate_as_interrupt`), then ``argv`` parsed; the exit code
    instead when argparse exits (0 after ``--help``/``--version``, else :data:`EXIT_USAGE`)."""
    terminate_as_interrupt()
    try:
        return parser.parse_args(argv)
    except SystemExit as e:
        return EXIT_USAGE if e.code not in (0, None) else 0


#: the exit codes of a command stopped by Ctrl-C (SIGINT) and by SIGTERM (128 + the signal)
EXIT_INTERRUPTED, EXIT_TERMINATED = 130, 143


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the main thread is, as Ctrl-C's KeyboardInterrupt is (so the same
    clean-up runs: temporary shards removed, MLflow runs marked KILLED, a re-run resumes)."""


def interrupt_exit_code(e: KeyboardInterrupt) -> int:
    return EXIT_TERMINATED if isinstance(e, Terminated) else EXIT_INTERRUPTED


#: the SIGTERMs received (see :func:`raise_if_terminated`)
_RECEIVED: list[int] = []


def raise_if_terminated() -> None:
    """Raise :class:`Terminated` again when a SIGTERM arrived whose exception was swallowed (one
    raised inside a C library's callback, openSMILE's through ctypes, is printed and ignored);
    long loops call this between their steps."""
    if _RECEIVED:
        raise Terminated(f"signal {_RECEIVED[-1]}")


def terminate_as_interrupt() -> None:
    """Install a SIGTERM handler that raises :class:`Terminated` (main thread only, else a
    no-op): ``kill``'s default signal then takes Ctrl-C's clean-up path, at the next line of
    Python the main thread runs."""

    def handler(signum: int, frame: FrameType | None) -> None:
        _RECEIVED.append(signum)
        raise Terminated(f"signal {signum}")

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
    except PermissionError:  # another user's
        pass
    return True
