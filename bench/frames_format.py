"""The frames cache's file format: JSON line + ``.npy`` arrays against the layout it replaced.

Until ``FRAMES_VERSION`` 2 the frames cache (:mod:`experiments.data.frames_cache`) wrote its own
binary layout: an 8-byte magic, the header length and its CRC-32, a JSON header, then the
arrays as raw bytes at 64-byte aligned offsets, read with ``readinto`` into preallocated
arrays. This module keeps that layout's writer and reader as the baseline, and times reading
back every session's entry (the loading path of a warm ``load_sessions``) in both formats,
their reads interleaved, with the same array checksums.

``loading.frames_cache_format`` (frames/s, higher is better): the standard format against the
old layout; goal ``>= 0.9`` (within 10 %, the bar for leaving the custom layout, issue 13).
"""

from __future__ import annotations

import json
import os
import shutil
import zlib
from pathlib import Path

import numpy as np

from experiments.data.dataset import MAX_GAP_S, _resampling_code
from experiments.data.frames_cache import _META, EntryKey, FramesCache, _checksum
from experiments.data.session_table import SessionTable
from featurestore.storage.store import Store

from .harness import best_times, record

_MAGIC = b"OMGFRAME"
_PREFIX = 24
_ALIGN = 64
_DTYPES = {"X": "<f4", "valid": "|b1", "y": "<f4", "column_channel": "<i8"}


def _aligned(n: int) -> int:
    return -(-n // _ALIGN) * _ALIGN


def _bytes(a: np.ndarray) -> memoryview:
    return memoryview(a).cast("B") if a.size else memoryview(b"")


def write_old(path: Path, key: EntryKey, table: SessionTable) -> None:
    """One entry in the old layout."""
    arrays = {
        name: np.ascontiguousarray(getattr(table, name), dtype=dtype)
        for name, dtype in _DTYPES.items()
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
    meta = {k: kind(getattr(table, k)) for k, kind in _META.items()}
    header = {
        **key.describe(),
        "n_frames": table.n_frames,
        **meta,
        "arrays": specs,
    }  # flat, as it was
    blob = json.dumps(header, separators=(",", ":")).encode()
    start = _aligned(_PREFIX + len(blob))
    with open(path, "wb") as f:
        f.write(
            _MAGIC
            + len(blob).to_bytes(8, "little")
            + zlib.crc32(blob).to_bytes(4, "little")
            + bytes(4)
        )
        f.write(blob)
        pos = _PREFIX + len(blob)
        for name, a in arrays.items():
            at = start + specs[name]["offset"]
            f.write(bytes(at - pos))
            f.write(_bytes(a))
            pos = at + a.nbytes


def read_old(path: Path, key: EntryKey) -> SessionTable:
    """One entry of the old layout, with the old reader's checks (the request, sizes before
    allocating, checksums)."""
    with open(path, "rb", buffering=0) as f:
        size = os.fstat(f.fileno()).st_size
        prefix = f.read(_PREFIX)
        if prefix[:8] != _MAGIC:
            raise ValueError(f"{path}: not an old-layout entry")
        n = int.from_bytes(prefix[8:16], "little")
        blob = f.read(n)
        if zlib.crc32(blob) != int.from_bytes(prefix[16:20], "little"):
            raise ValueError(f"{path}: header checksum mismatch")
        h = json.loads(blob)
        if any(h.get(k) != v for k, v in key.describe().items()):
            raise ValueError(f"{path}: made from another shard or request")
        start, out = _aligned(_PREFIX + n), {}
        for name, dtype in _DTYPES.items():
            spec = h["arrays"][name]
            shape = tuple(spec["shape"])
            at = start + int(spec["offset"])
            if at + int(np.prod(shape)) * np.dtype(dtype).itemsize > size:
                raise ValueError(f"{path}: {name} does not fit")
            a = np.empty(shape, dtype=dtype)
            f.seek(at)
            view, got = _bytes(a), 0
            while got < a.nbytes:
                got += f.readinto(view[got:])
            if _checksum(a) != spec["checksum"]:
                raise ValueError(f"{path}: {name} checksum mismatch")
            out[name] = a
    return SessionTable(
        session=key.session,
        listener=h["listener"],
        story=h["story"],
        speaker=h["speaker"],
        split=h["split"],
        fps=h["fps"],
        columns=h["columns"],
        channels=h["channels"],
        target=key.target,
        **out,
    )


def records(
    store: Store, keys: list[str], work: Path, target: str = "valence_self", repeat: int = 7
) -> list[dict]:
    """Time reading every session's frames cache entry in the current format and in the old layout.

    The store's cache must be warm (a ``load_sessions(store, keys)`` ran). The old-layout
    entries are written to ``work`` from the current entries' tables, then both are read
    ``repeat`` times, interleaved; the best of each is kept and the tables are checked equal.
    """
    cache = FramesCache.for_store(store.root, True, _resampling_code())
    entries = [
        cache.key(s, store.shard_path(s), keys, target, MAX_GAP_S) for s in store.list_sessions()
    ]
    folder = Path(work) / "frames_old_layout"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    old = FramesCache(folder, cache.code)  # only its entry names: the same keying for both formats
    for e in entries:
        table = cache.read(e)
        if table is None:
            raise RuntimeError(f"no frames cache entry for {e.session}: load the store once first")
        write_old(old.path(e), e, table)
    times = best_times(
        {
            "current": lambda: [cache.read(e) for e in entries],
            "old": lambda: [read_old(old.path(e), e) for e in entries],
        },
        repeat=repeat,
    )
    (t_new, new), (t_old, from_old) = times["current"], times["old"]
    for a, b in zip(new, from_old, strict=True):
        if (
            a is None
            or not all(
                np.array_equal(getattr(a, k).view(np.uint8), getattr(b, k).view(np.uint8))
                for k in _DTYPES
            )
            or a.columns != b.columns
        ):
            raise AssertionError(f"{b.session}: the two formats hold different tables")
    n_frames = sum(t.n_frames for t in new)
    mb = old.size_bytes() / 1e6
    shutil.rmtree(folder, ignore_errors=True)
    print(
        f"frames cache format: {len(entries)} entries, {mb:.0f} MB; JSON + .npy {t_new:.3f} s, old layout {t_old:.3f} s"
    )
    return [
        record(
            "loading.frames_cache_format",
            n_frames / t_new,
            "frames/s",
            baseline="the frames cache's old binary layout (magic, header CRC-32, aligned raw arrays)",
            baseline_value=n_frames / t_old,
            goal=">= 0.9",
        )
    ]
