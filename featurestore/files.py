"""The package's one atomic write (:func:`replaced`: a hidden temporary file beside the final
one, fsynced, renamed over it, its folder fsynced) and its one lock (:func:`file_lock`, an
``fcntl.flock`` the system releases when its process ends).

>>> import tempfile
>>> folder = Path(tempfile.mkdtemp())
>>> write_atomic(folder / "a.txt", b"new")
>>> (folder / "a.txt").read_bytes(), sorted(p.name for p in folder.iterdir())
(b'new', ['a.txt'])
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
import re
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from .processes import raise_if_terminated

#: what marks a temporary file: ``.<final name>`` + this + ``<pid>-<8 hex>``
TMP_MARK = ".tmp-"
_WRITER = re.compile(rf"{re.escape(TMP_MARK)}(\d+)-")
#: seconds between two tries of a held lock
POLL_S = 0.05


def temp_path(final: Path) -> Path:
    """A new hidden temporary path beside ``final``, naming this process."""
    return final.with_name(f".{final.name}{TMP_MARK}{os.getpid()}-{uuid.uuid4().hex[:8]}")


def temp_writer(path: Path) -> int | None:
    """The pid that wrote the temporary file ``path`` (None: not one of :func:`temp_path`'s)."""
    m = _WRITER.search(path.name)
    return int(m.group(1)) if m else None


def _fsync(path: Path, flags: int = os.O_RDONLY) -> None:
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def replaced(final: Path) -> Iterator[Path]:
    """A temporary path for the block to write ``final``'s new content to; renamed over
    ``final`` (fsynced first) when the block completes, removed when it fails or once this
    process got a SIGTERM (:func:`~featurestore.processes.raise_if_terminated`)."""
    tmp = temp_path(final)
    try:
        yield tmp
        raise_if_terminated()  # even one a C library swallowed: nothing new committed
        _fsync(tmp)
        os.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise
    with contextlib.suppress(OSError):  # the rename itself is durable once its folder is
        _fsync(final.parent)


def write_atomic(final: Path, data: bytes | memoryview) -> None:
    """Write ``data`` as ``final``'s whole content (:func:`replaced`)."""
    with replaced(final) as tmp, open(tmp, "xb") as fh:
        fh.write(data)


@contextlib.contextmanager
def file_lock(
    path: Path,
    timeout_s: float = math.inf,
    waiting: Callable[[], None] | None = None,
    timed_out: Callable[[], BaseException] | None = None,
) -> Iterator[int]:
    """Hold an exclusive lock on ``path`` (created, with its folder) for a ``with`` block, tried
    every :data:`POLL_S` seconds (``waiting()`` called before the first wait) for at most
    ``timeout_s`` seconds, then ``timed_out()`` raised (default ``TimeoutError``); yields the fd."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise (timed_out or TimeoutError)() from None
                if waiting is not None:
                    waiting()
                    waiting = None
                time.sleep(POLL_S)
        try:
            yield fd
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
