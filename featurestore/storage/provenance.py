"""What a channel was computed from: content fingerprints of source files, cache keys, UTC stamps.

A channel's cache key hashes its source (a file fingerprint, or the cache keys of the channels
it was derived from), its extractor's name and version and its parameters: a re-run of
``featurestore extract`` skips a channel whose stored key equals the expected one and redoes
it otherwise. The computing side makes the keys; the store records and checks them.

>>> key = cache_key({"size": 10, "fingerprint": "ab"}, "egemaps", "2", {"sampling_rate": 16000})
>>> len(key), key == cache_key({"size": 10, "fingerprint": "ab", "path": "elsewhere"}, "egemaps", "2",
...                            {"sampling_rate": 16000})
(20, True)
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path


def utc_now() -> str:
    """The current UTC time, ISO 8601 to the second (``created_utc`` of channels and labels)."""
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def file_fingerprint(path: str | os.PathLike, chunk: int = 1 << 22) -> dict:
    """Content fingerprint of a file: size plus a BLAKE2b hash of its head, middle and tail.

    Reading three 4 MiB chunks (``chunk`` bytes) instead of the whole file keeps this cheap
    for multi-GB videos while still changing whenever the content is re-encoded, truncated or
    replaced. The modification time is deliberately left out, so copying a corpus keeps its cache.
    """
    path = Path(path)
    size = path.stat().st_size
    h = hashlib.blake2b(digest_size=16)
    h.update(str(size).encode())
    with open(path, "rb") as f:
        offsets = [0] if size <= 3 * chunk else [0, size // 2 - chunk // 2, size - chunk]
        for off in offsets:
            f.seek(off)
            h.update(f.read(chunk))
    return {"path": str(path), "size": size, "fingerprint": h.hexdigest()}


def cache_key(source: Mapping | str, extractor: str, version: str, params: Mapping) -> str:
    """Hash of what a channel was computed from: source content, extractor name + version, params.

    ``source`` is a fingerprint from :func:`file_fingerprint` (only size and content hash
    are used, not the path) or any string identifying upstream inputs (for derived channels,
    the cache keys they were computed from).
    """
    if isinstance(source, Mapping):
        source = f"{source.get('size')}:{source.get('fingerprint')}"
    blob = json.dumps(
        {"source": source, "extractor": extractor, "version": version, "params": params},
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:20]
