"""A cache of the 25 fps frame tables that :func:`experiments.dataset.load_sessions` builds.

Resampling every channel onto label frames (100 Hz eGeMAPS pooled, 5 fps face channels
interpolated) is most of a load's time, and every load repeated it. The cache keeps each
session's result, written once per (shard file, channel keys, target, ``max_gap_s``,
resampling code) and read back without opening the HDF5 shard.

**Where.** ``<store>/.frames/`` by default: a hidden folder, which
:meth:`featurestore.Store.list_sessions`, ``featurestore verify`` and ``featurestore scan``
do not look into. The environment variable ``OMG_FRAMES_CACHE`` names another folder (each
store gets a subfolder there, named after the store's path), or ``off`` to turn caching
off; ``load_sessions(..., cache=FOLDER)`` does the same for one call. When the folder
cannot be written (a read-only store on a cluster), tables are built without caching and
one debug line is logged.

**Entries.** One file per session and request, ``<session>.<shard tag>.<request tag>.frames``:

- the shard tag hashes the shard file's inode, size and modification time (ns), with
  :data:`FRAMES_VERSION` and a hash of the resampling code: every rewrite of a shard
  (``extract --force``, ``featurestore labels``, ``transcripts``, ``import``: all rename a
  new file into place) changes it. Writing an entry deletes the session's entries with
  another shard tag, so stale entries are replaced, not accumulated;
- the request tag hashes the channel keys (in order), the target and ``max_gap_s``:
  different requests of one session have their own entries.

**File layout** (little-endian)::

    0    8 bytes   magic b"OMGFRAME"
    8    uint64    header length h
    16   uint32    CRC-32 of the header
    20   uint32    0
    24   h bytes   JSON: what the entry was made from, the session's metadata (listener,
                   story, speaker, stored split, fps, columns, channels) and, per array
                   (X, valid, y, column_channel), dtype, shape, offset and checksum
    ...            the arrays, C order, each at a 64-byte aligned offset after the header

Measured on the full-size synthetic store (80 sessions, 633,850 frames, 149 columns, 385 MB
of tables, page cache warm, 2 shared cores): this layout read with ``readinto`` into
preallocated arrays 0.06-0.11 s; ``np.fromfile`` on it about the same; one ``.npy`` per array
plus a JSON file 0.08-0.17 s; one HDF5 file per session 0.13 s; one uncompressed ``.npz``
0.22-0.34 s (zipfile's CRC and copies). A whole warm ``load_sessions`` of every channel took
0.08 s (best of 5 in one process; 0.2-0.3 s as the first load of a new process, which also
pays for faulting in 385 MB of fresh memory) against 1.6 s resampling from the shards. The
entries take 385 MB on disk, 1.17x the shards (25 fps rows of every column, against 5 fps
face rows and eGeMAPS rows stored once). Memory-mapping the entries would skip the copy, but
a mapped table changes (or faults) if anyone rewrites the file in place after it was checked.

An entry is trusted only when the magic, the header's CRC-32, the header's description of
the shard and request, the exact file size and every array's checksum all agree; anything
else is a miss, and the entry is rebuilt from the shard. The array checksum is the 64-bit
wrapping sum and the XOR of the array's 8-byte words (numpy, 0.03 s for 385 MB): it catches
truncation, zeroed or overwritten blocks and any flipped bit, which is what crashes and disk
faults do, though not two words swapped in place. ``zlib.crc32`` of the payload took 0.09 s,
and made warm loads 1.5-2x slower (0.22-0.56 s against 0.14-0.22 s, 2 threads, busy machine).

**Concurrency.** An entry is written to a hidden temporary file in the same folder and
renamed into place: two processes writing the same entry each leave a complete file (the
last rename wins; both are identical), and a reader sees the old file or the new one.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import os
import re
import threading
import uuid
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from featurestore.processes import pid_alive

from .session_table import SessionTable

log = logging.getLogger(__name__)

#: bump when what an entry holds, or how it is computed outside the hashed functions, changes
FRAMES_VERSION = 1
#: environment variable: a folder for every store's frames cache, or ``off``
CACHE_ENV = "OMG_FRAMES_CACHE"
#: the cache folder inside a store
FOLDER_NAME = ".frames"
SUFFIX = ".frames"

_MAGIC = b"OMGFRAME"
_PREFIX = 24
_ALIGN = 64
_TMP_MARK = ".tmp-"
#: arrays of an entry and their dtypes (a file naming others is not ours)
_DTYPES = {"X": "<f4", "valid": "|b1", "y": "<f4", "column_channel": "<i8"}


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


def code_version(functions: Sequence[Callable]) -> str:
    """Hash of the source of ``functions`` (the resampling code) and of numpy's and scipy's versions.

    Editing the resampling invalidates every entry without anyone remembering to bump
    :data:`FRAMES_VERSION`; a library upgrade could change float sums, so it does too.
    """
    import scipy

    h = hashlib.sha256(f"{np.__version__};{scipy.__version__}".encode())
    for fn in functions:
        try:
            text = inspect.getsource(fn)
        except (OSError, TypeError):  # no source shipped: the bytecode still tells versions apart
            text = fn.__code__.co_code.hex()
        h.update(text.encode())
    return h.hexdigest()[:16]


def shard_identity(path: Path) -> tuple[int, int, int] | None:
    """(inode, size in bytes, modification time in ns) of a shard file, None when it is missing.

    The device number is left out: it differs between machines mounting one shared store.
    """
    try:
        st = os.stat(path)
    except OSError:
        return None
    return int(st.st_ino), int(st.st_size), int(st.st_mtime_ns)


def _aligned(n: int) -> int:
    return -(-n // _ALIGN) * _ALIGN


class CorruptEntry(ValueError):
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
        """The cache of the store at ``root``, or None when caching is off.

        Args:
            root: the store folder.
            location: True for the default (``$OMG_FRAMES_CACHE`` or ``<root>/.frames``),
                False for no cache, or a folder holding the caches of any number of stores.
            code: :func:`code_version` of the resampling code.
        """
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
        """The entry for this request of the shard as it is now; None when the shard is missing
        or the session id cannot name a file."""
        if not session or session.startswith(".") or Path(session).name != session:
            return None
        shard = shard_identity(shard_path)
        if shard is None:
            return None
        return EntryKey(session, shard, tuple(keys), str(target), float(max_gap_s), self.code)

    def path(self, key: EntryKey) -> Path:
        return self.folder / key.file_name

    # ---------------------------------------------------------------- reading
    def read(self, key: EntryKey) -> SessionTable | None:
        """The cached table of ``key`` (with the split stored in the shard), or None when absent, unreadable or not a complete entry."""
        path = self.path(key)
        try:
            with open(path, "rb", buffering=0) as f:
                return _read_entry(f, key)
        except FileNotFoundError:
            return None
        except CorruptEntry as e:
            log.debug("frames cache entry %s is damaged (%s); rebuilding it from the shard", path, e)
            return None
        except OSError as e:
            log.debug("frames cache entry %s is unreadable (%s); loading from the shard", path, e)
            return None

    # ---------------------------------------------------------------- writing
    def write(self, key: EntryKey, table: SessionTable) -> Path | None:
        """Write the entry atomically and drop the session's stale entries; None when the
        folder cannot be written (then caching stays off for this cache object)."""
        if self._writable is False:
            return None
        final = self.path(key)
        tmp = self.folder / f".{final.name}{_TMP_MARK}{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as f:
                _write_entry(f, key, table)
            os.replace(tmp, final)
        except OSError as e:
            try:
                tmp.unlink(missing_ok=True)
            except OSError:
                pass
            with self._lock:
                if self._writable is None:
                    log.debug(
                        "frames cache folder %s is not writable (%s); loading without caching "
                        "(set %s to a writable folder to cache elsewhere)", self.folder, e, CACHE_ENV,
                    )  # fmt: skip
                self._writable = False
            return None
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        self._writable = True
        self._drop_stale(key)
        return final

    def _drop_stale(self, key: EntryKey) -> None:
        """Delete the session's entries made from another shard file (or older code), and
        temporary files left by writers that are gone."""
        prefix = f"{key.session}."
        tmp_re = re.compile(rf"^\.{re.escape(key.session)}\..*{re.escape(_TMP_MARK)}(\d+)-")
        try:
            names = os.listdir(self.folder)
        except OSError:
            return
        for name in names:
            if name.startswith(prefix) and name.endswith(SUFFIX):
                parts = name[len(prefix) : -len(SUFFIX)].split(".")
                if len(parts) == 2 and parts[0] != key.shard_tag:
                    _unlink(self.folder / name)
            elif (m := tmp_re.match(name)) and not pid_alive(int(m.group(1))):
                _unlink(self.folder / name)

    def entries(self) -> list[Path]:
        """Every entry file in the folder."""
        if not self.folder.is_dir():
            return []
        return sorted(p for p in self.folder.iterdir() if p.name.endswith(SUFFIX) and not p.name.startswith("."))

    def size_bytes(self) -> int:
        """Bytes on disk of all entries."""
        return sum(p.stat().st_size for p in self.entries())


def _unlink(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass


def _write_entry(f, key: EntryKey, table: SessionTable) -> None:
    arrays = {
        "X": np.ascontiguousarray(table.X, dtype=np.float32),
        "valid": np.ascontiguousarray(table.valid, dtype=bool),
        "y": np.ascontiguousarray(table.y, dtype=np.float32),
        "column_channel": np.ascontiguousarray(table.column_channel, dtype=np.int64),
    }
    specs, offset = {}, 0
    for name, a in arrays.items():
        specs[name] = {
            "dtype": a.dtype.str,
            "shape": list(a.shape),
            "offset": offset,
            "checksum": _checksum(a),
        }
        offset = _aligned(offset + a.nbytes)
    header = {
        **key.describe(),
        "listener": int(table.listener),
        "story": int(table.story),
        "speaker": int(table.speaker),
        "split": str(table.split),
        "fps": float(table.fps),
        "columns": list(table.columns),
        "channels": list(table.channels),
        "arrays": specs,
    }
    blob = json.dumps(header, separators=(",", ":")).encode()
    start = _aligned(_PREFIX + len(blob))
    f.write(_MAGIC + len(blob).to_bytes(8, "little") + zlib.crc32(blob).to_bytes(4, "little") + bytes(4))
    f.write(blob)
    pos = _PREFIX + len(blob)
    for name, a in arrays.items():
        at = start + specs[name]["offset"]
        f.write(bytes(at - pos))
        f.write(_bytes(a))
        pos = at + a.nbytes


def _bytes(a: np.ndarray) -> memoryview:
    """The bytes of a C-contiguous array, without a copy (empty arrays cannot be cast)."""
    return memoryview(a).cast("B") if a.size else memoryview(b"")


def _checksum(a: np.ndarray) -> str:
    """64-bit wrapping sum and XOR of a C-contiguous array's 8-byte words (the tail zero-padded)."""
    b = a.reshape(-1).view(np.uint8)
    k = b.size - b.size % 8
    words = b[:k].view(np.uint64)
    tail = int.from_bytes(b[k:].tobytes(), "little")
    total = (int(np.add.reduce(words, dtype=np.uint64)) + tail) & 0xFFFFFFFFFFFFFFFF
    xor = int(np.bitwise_xor.reduce(words)) ^ tail
    return f"{total:016x}{xor:016x}"


def _read_entry(f, key: EntryKey) -> SessionTable:
    size = os.fstat(f.fileno()).st_size
    prefix = f.read(_PREFIX)
    if len(prefix) != _PREFIX or prefix[:8] != _MAGIC:
        raise CorruptEntry("not a frames cache file")
    n = int.from_bytes(prefix[8:16], "little")
    if n > size - _PREFIX:
        raise CorruptEntry(f"header of {n} bytes in a file of {size}")
    blob = f.read(n)
    if len(blob) != n or zlib.crc32(blob) != int.from_bytes(prefix[16:20], "little"):
        raise CorruptEntry("header checksum mismatch")
    try:
        h = json.loads(blob)
    except ValueError as e:
        raise CorruptEntry(f"header is not JSON ({e})") from None
    expect = key.describe()
    differ = [k for k, v in expect.items() if h.get(k) != v]
    if differ:
        raise CorruptEntry(f"made from another shard or request ({', '.join(differ)} differ)")
    try:
        arrays = _read_arrays(f, h, _aligned(_PREFIX + n), size)
        return SessionTable(
            session=str(h["session"]),
            listener=int(h["listener"]),
            story=int(h["story"]),
            speaker=int(h["speaker"]),
            split=str(h["split"]),
            fps=float(h["fps"]),
            columns=[str(c) for c in h["columns"]],
            channels=[str(c) for c in h["channels"]],
            target=key.target,
            **arrays,
        )
    except (KeyError, TypeError, ValueError) as e:
        raise CorruptEntry(f"header does not describe the arrays ({e})") from None


def _read_arrays(f, h: dict, start: int, size: int) -> dict[str, np.ndarray]:
    specs = h["arrays"]
    if set(specs) != set(_DTYPES):
        raise CorruptEntry(f"arrays {sorted(specs)}")
    d = len(h["columns"])
    shapes = {name: tuple(int(x) for x in specs[name]["shape"]) for name in _DTYPES}
    n = shapes["y"][0] if len(shapes["y"]) == 1 else -1
    want = {"X": (n, d), "valid": (n, len(h["channels"])), "y": (n,), "column_channel": (d,)}
    if shapes != want or n < 0:
        raise CorruptEntry(f"array shapes {shapes}")
    out, end = {}, start
    for name, dtype in _DTYPES.items():
        spec = specs[name]
        if spec["dtype"] != dtype:
            raise CorruptEntry(f"{name} has dtype {spec['dtype']}")
        nbytes = int(np.prod(shapes[name])) * np.dtype(dtype).itemsize
        at = start + int(spec["offset"])
        if at < end or at + nbytes > size:  # checked before allocating what the header claims
            raise CorruptEntry(f"{name} at bytes {at}-{at + nbytes} of a file of {size}")
        a = np.empty(shapes[name], dtype=dtype)
        if a.nbytes:
            f.seek(at)
            view, got = _bytes(a), 0
            while got < a.nbytes:
                k = f.readinto(view[got:])
                if not k:
                    raise CorruptEntry(f"{name} is truncated")
                got += k
        if _checksum(a) != spec["checksum"]:
            raise CorruptEntry(f"{name} checksum mismatch")
        out[name] = a
        end = at + a.nbytes
    if end != size:
        raise CorruptEntry(f"{size - end} bytes after the arrays")
    return out
