"""A cache of the frame tables :func:`experiments.data.dataset.load_sessions` builds: one file per session and
request in ``<store>/.frames/`` (``$OMG_FRAMES_CACHE``: another folder, or ``off``), trusted only when every checksum
agrees. The entry format is a contract (docs/design.md#frames-cache); docs/store.md (the frames cache) says more."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import json
import logging
import os
import threading
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
from numpy.lib import format as npy

from featurestore.files import replaced, temp_writer
from featurestore.processes import pid_alive
from featurestore.storage.provenance import code_fingerprint, library_versions

from ..errors import ExperimentsError
from .session_table import SessionTable

log = logging.getLogger(__name__)

#: bump when what an entry holds, or how it is computed outside the hashed functions, changes
FRAMES_VERSION = 2
#: environment variable: a folder for every store's frames cache, or ``off``
CACHE_ENV = "OMG_FRAMES_CACHE"
#: the cache folder inside a store
FOLDER_NAME = ".frames"
SUFFIX = ".frames"

#: the arrays of an entry, in file order, and their dtypes
_DTYPES = {
    "y": np.dtype("<f4"),
    "valid": np.dtype("|b1"),
    "column_channel": np.dtype("<i8"),
    "X": np.dtype("<f4"),
}
#: the longest header line a reader accepts (bytes): a damaged file is not read whole looking for a newline
_MAX_HEADER = 1 << 22
_HEADER_CHUNK = 1 << 14


@dataclass(frozen=True)
class EntryKey:
    """What one entry is made from: the shard file's identity and the request."""

    session: str
    shard: tuple[int, int, int]  # inode, size (bytes), modification time (ns)
    keys: tuple[str, ...]
    target: str
    max_gap_s: float
    code: str

    @property
    def shard_tag(self) -> str:
        return _digest([FRAMES_VERSION, self.code, *self.shard])

    @property
    def request_tag(self) -> str:
        return _digest([list(self.keys), self.target, repr(float(self.max_gap_s))])

    @property
    def file_name(self) -> str:
        return f"{self.session}.{self.shard_tag}.{self.request_tag}{SUFFIX}"

    def describe(self) -> dict:
        """The header fields a reader compares with what it asked for."""
        return {
            "frames_version": FRAMES_VERSION,
            "code": self.code,
            "shard": {"inode": self.shard[0], "size": self.shard[1], "mtime_ns": self.shard[2]},
            "session": self.session,
            "keys": list(self.keys),
            "target": self.target,
            "max_gap_s": float(self.max_gap_s),
        }


def _digest(parts: list) -> str:
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]


def code_version(functions: Sequence[Callable[..., Any]]) -> str:
    """Fingerprint of the resampling ``functions``' source and of numpy's and scipy's versions."""
    return code_fingerprint(functions, library_versions(("numpy", "scipy")))


class CorruptEntry(ExperimentsError, ValueError):
    """A cache file that is not a complete entry for the request (never raised to callers)."""


class FramesCache:
    """The frames cache folder of one store.

    >>> import tempfile
    >>> cache = FramesCache(Path(tempfile.mkdtemp()) / ".frames", code="x")
    >>> cache.read(EntryKey("Subject_1_Story_1", (1, 2, 3), ("listener/egemaps",), "valence_self", 0.5, "x")) is None
    True
    """

    def __init__(self, folder: str | os.PathLike, code: str) -> None:
        self.folder = Path(folder)
        self.code = code
        self._writable: bool | None = None  # None until the first write tells
        self._lock = threading.Lock()

    @classmethod
    def for_store(
        cls, root: str | os.PathLike, location: bool | str | os.PathLike, code: str
    ) -> FramesCache | None:
        """The cache of the store at ``root``, or None when caching is off; ``location``: True the default
        (``$OMG_FRAMES_CACHE`` or ``<root>/.frames``), False none, or a folder holding the caches of many stores."""
        if location is False or location is None:
            return None
        if location is True:
            env = os.environ.get(CACHE_ENV, "").strip()
            if env.lower() in ("off", "0", "false", "no"):
                return None
            if not env:
                return cls(Path(root) / FOLDER_NAME, code)
            location = env
        resolved = Path(root).resolve()
        sub = f"{resolved.name}-{hashlib.sha256(str(resolved).encode()).hexdigest()[:12]}"
        return cls(Path(location) / sub, code)

    def key(
        self, session: str, shard_path: Path, keys: Sequence[str], target: str, max_gap_s: float
    ) -> EntryKey | None:
        """The entry for this request of the shard as it is now; None when missing or the id names no file."""
        if not session or session.startswith(".") or Path(session).name != session:
            return None
        try:
            st = os.stat(shard_path)
        except OSError:
            return None
        # inode, size and mtime; no device number: it differs between machines mounting one store
        shard = int(st.st_ino), int(st.st_size), int(st.st_mtime_ns)
        return EntryKey(session, shard, tuple(keys), str(target), float(max_gap_s), self.code)

    def path(self, key: EntryKey) -> Path:
        return self.folder / key.file_name

    def read(self, key: EntryKey) -> SessionTable | None:
        """The cached table of ``key``, or None when absent, unreadable or not a complete entry."""
        path = self.path(key)
        try:
            with open(path, "rb", buffering=0) as f:
                return _read_entry(f, key)
        except FileNotFoundError:
            return None
        except (CorruptEntry, OSError) as e:
            what = "damaged" if isinstance(e, CorruptEntry) else "unreadable"
            log.debug(
                "frames cache entry %s is %s (%s); rebuilding it from the shard", path, what, e
            )
            return None

    def write(self, key: EntryKey, table: SessionTable) -> Path | None:
        """Write the entry atomically, drop the session's stale entries; None (no more caching) if unwritable."""
        if self._writable is False:
            return None
        final = self.path(key)
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            with replaced(final) as tmp, open(tmp, "wb") as f:
                _write_entry(f, key, table)
        except OSError as e:
            with self._lock:
                if self._writable is None:
                    log.debug(
                        "frames cache folder %s is not writable (%s); loading without caching "
                        "(set %s to a writable folder to cache elsewhere)",
                        self.folder,
                        e,
                        CACHE_ENV,
                    )
                self._writable = False
            return None
        self._writable = True
        self._drop_stale(key)
        return final

    def _drop_stale(self, key: EntryKey) -> None:
        """Delete the session's entries of another shard file or code, and temporary files of dead writers."""
        prefix = f"{key.session}."
        try:
            names = os.listdir(self.folder)
        except OSError:
            return
        stale = []
        for name in names:
            if name.startswith(prefix) and name.endswith(SUFFIX):
                parts = name[len(prefix) : -len(SUFFIX)].split(".")
                if len(parts) == 2 and parts[0] != key.shard_tag:
                    stale.append(name)
            elif (
                name.startswith(f".{prefix}")
                and (pid := temp_writer(Path(name))) is not None
                and not pid_alive(pid)
            ):
                stale.append(name)
        for name in stale:
            with contextlib.suppress(OSError):
                (self.folder / name).unlink(missing_ok=True)

    def entries(self) -> list[Path]:
        return sorted(p for p in self.folder.glob(f"*{SUFFIX}") if not p.name.startswith("."))

    def size_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.entries())


#: the table's fields in a header's ``meta`` (after ``n_frames``), each with its JSON type
_META = {
    "listener": int,
    "story": int,
    "speaker": int,
    "split": str,
    "fps": float,
    "columns": list,
    "channels": list,
}


@functools.lru_cache(maxsize=4096)
def _npy_header(shape: tuple[int, ...], dtype: np.dtype) -> bytes:
    """The ``.npy`` 1.0 header :func:`numpy.lib.format.write_array` writes for such an array."""
    buf = io.BytesIO()
    npy.write_array_header_1_0(
        buf, {"descr": npy.dtype_to_descr(dtype), "fortran_order": False, "shape": shape}
    )
    return buf.getvalue()


def _shapes(meta: dict) -> dict[str, tuple[int, ...]]:
    n, d, c = int(meta["n_frames"]), len(meta["columns"]), len(meta["channels"])
    return {"y": (n,), "valid": (n, c), "column_channel": (d,), "X": (n, d)}


def _write_entry(f: BinaryIO, key: EntryKey, table: SessionTable) -> None:
    """The header line, then the arrays in ``.npy`` format."""
    arrays = {
        name: np.ascontiguousarray(getattr(table, name), dtype=dtype)
        for name, dtype in _DTYPES.items()
    }
    header = {
        **key.describe(),
        "meta": {
            "n_frames": table.n_frames,
            **{k: kind(getattr(table, k)) for k, kind in _META.items()},
        },
        "checksums": {name: _checksum(a) for name, a in arrays.items()},
    }
    blob = json.dumps(header, separators=(",", ":")).encode()
    line = b'{"crc32":"%08x","header":%s}' % (zlib.crc32(blob), blob)
    # padded with spaces (JSON allows them) so that X, the last and largest array, starts at a
    # multiple of 64 bytes (.npy pads its own header to 64): unaligned, reads took 1.1x longer
    before_x = (
        len(line)
        + 1
        + sum(len(_npy_header(a.shape, a.dtype)) + a.nbytes for a in list(arrays.values())[:-1])
    )
    f.write(line + b" " * (-before_x % 64) + b"\n")
    for a in arrays.values():
        npy.write_array(f, a, version=(1, 0), allow_pickle=False)


def _checksum(a: np.ndarray) -> str:
    """64-bit wrapping sum and XOR of a C-contiguous array's 8-byte words (the tail zero-padded)."""
    b = a.reshape(-1).view(np.uint8)
    k = b.size - b.size % 8
    words = b[:k].view(np.uint64)
    tail = int.from_bytes(b[k:].tobytes(), "little")
    total = (int(np.add.reduce(words, dtype=np.uint64)) + tail) & 0xFFFFFFFFFFFFFFFF
    xor = int(np.bitwise_xor.reduce(words)) ^ tail
    return f"{total:016x}{xor:016x}"


def _read_entry(f: io.FileIO, key: EntryKey) -> SessionTable:
    """The entry of ``key`` in the open file ``f``; :class:`CorruptEntry` for anything else."""
    size = os.fstat(f.fileno()).st_size
    h = _read_header(f)
    expect = key.describe()
    differ = [k for k, v in expect.items() if h.get(k) != v]
    if differ:
        raise CorruptEntry(f"made from another shard or request ({', '.join(differ)} differ)")
    try:
        meta, checksums = h["meta"], h["checksums"]
        arrays = {name: _read_array(f, name, shape, size) for name, shape in _shapes(meta).items()}
        for name, a in arrays.items():
            if _checksum(a) != checksums[name]:
                raise CorruptEntry(f"{name} checksum mismatch")
        if f.tell() != size:
            raise CorruptEntry(f"{size - f.tell()} bytes after the arrays")
        fields: dict[str, Any] = {k: kind(meta[k]) for k, kind in _META.items()} | arrays
        return SessionTable(session=key.session, target=key.target, **fields)
    except (KeyError, TypeError, ValueError) as e:
        raise CorruptEntry(f"header does not describe the arrays ({e})") from None


def _read_header(f: io.FileIO) -> dict[str, Any]:
    """The header of the unbuffered file ``f``, its CRC-32 checked; ``f`` left at the first array."""
    head = f.read(_HEADER_CHUNK)
    while b"\n" not in head and len(head) < _MAX_HEADER:
        more = f.read(_HEADER_CHUNK)
        if not more:
            break
        head += more
    end = head.find(b"\n")
    if end < 0 or not head.startswith(b'{"crc32":"'):
        raise CorruptEntry("no header line")
    f.seek(end + 1)
    # the header object, between '..."header":' and the last '}'
    blob = head[29 : head.rindex(b"}", 0, end)]
    try:
        if int(head[10:18], 16) != zlib.crc32(blob):
            raise CorruptEntry("header checksum mismatch")
        h = json.loads(blob)
    except ValueError as e:
        raise CorruptEntry(f"header is not JSON ({e})") from None
    if not isinstance(h, dict):
        raise CorruptEntry("header is not a JSON object")
    return h


def _read_array(f: io.FileIO, name: str, shape: tuple[int, ...], size: int) -> np.ndarray:
    """The next ``.npy`` array of ``f``, its header the one written for ``name`` and ``shape``."""
    dtype = _DTYPES[name]
    want = _npy_header(shape, dtype)
    if f.read(len(want)) != want:
        raise CorruptEntry(f"{name} is not a .npy array of {dtype} {shape}")
    nbytes = int(np.prod(shape)) * dtype.itemsize
    if f.tell() + nbytes > size:
        raise CorruptEntry(f"{name} of {nbytes} bytes does not fit in a file of {size}")
    a = np.empty(shape, dtype=dtype)
    view, got = a.data.cast("B") if a.size else memoryview(b""), 0
    while got < a.nbytes:
        k = f.readinto(view[got:])
        if not k:
            raise CorruptEntry(f"{name} is truncated")
        got += k
    return a
