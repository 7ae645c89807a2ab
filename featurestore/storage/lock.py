"""One writer per shard at a time: an exclusive OS file lock on ``<store>/.locks/<shard>.lock``
around every read-modify-rename of a shard, so two writers never drop each other's change;
readers take none (docs/store.md, writers: one at a time per shard)."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from ..files import file_lock
from .shard import StoreError

#: the folder of a store that holds its lock files (hidden: never listed as a shard)
LOCK_DIR = ".locks"
#: environment variable: seconds a writer waits for another writer of the same shard
TIMEOUT_ENV = "FEATURESTORE_LOCK_TIMEOUT_S"
#: default of :data:`TIMEOUT_ENV`, in seconds (one shard's rewrite takes seconds at most)
DEFAULT_TIMEOUT_S = 600.0

_said_waiting = False  # the waiting message is printed once per process


class LockTimeout(StoreError):
    """Another writer held a shard's lock for longer than the timeout; the message names it."""


def lock_timeout_s() -> float:
    """Seconds a writer waits for a shard's lock: ``$FEATURESTORE_LOCK_TIMEOUT_S``, else 600
    (:class:`StoreError` when it is not a number >= 0)."""
    text = os.environ.get(TIMEOUT_ENV, "").strip()
    if not text:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:  # also NaN
        raise StoreError(
            f"{TIMEOUT_ENV}={text!r} is not a number of seconds >= 0; unset it or fix it"
        )
    return value


def lock_path(shard: Path) -> Path:
    """The lock file of ``shard``: ``<store>/.locks/<shard file name>.lock``."""
    return shard.parent / LOCK_DIR / f"{shard.name}.lock"


def _holder(path: Path) -> str:
    """`` (pid N)``: the process that wrote its pid into the lock file ('' when unknown)."""
    try:
        pid = path.read_text().strip()
    except OSError:
        return ""
    return f" (pid {pid})" if pid.isdigit() else ""


@contextlib.contextmanager
def shard_lock(shard: Path, timeout_s: float | None = None) -> Iterator[Path]:
    """Hold the exclusive write lock of ``shard`` for a ``with`` block; yields the lock file.
    Waits for another writer (one line on stderr per process) at most ``timeout_s`` seconds
    (default :func:`lock_timeout_s`), then :class:`LockTimeout`; OSError when the lock file
    cannot be created (e.g. a read-only store folder)."""
    timeout = lock_timeout_s() if timeout_s is None else timeout_s
    path = lock_path(shard)

    def waiting() -> None:
        global _said_waiting
        if not _said_waiting:
            _said_waiting = True
            print(
                f"waiting for another writer of {shard}{_holder(path)} (lock {path}; "
                f"giving up after {timeout:g} s)",
                file=sys.stderr,
                flush=True,
            )

    def timed_out() -> LockTimeout:
        return LockTimeout(
            f"{shard} is being written by another process{_holder(path)} that held its "
            f"lock {path} for over {timeout:g} s; wait for that command to finish and "
            f"re-run (or raise {TIMEOUT_ENV})"
        )

    with file_lock(path, timeout, waiting, timed_out) as fd:
        with contextlib.suppress(OSError):  # only for the message of a waiting writer
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield path
