"""What a result was computed from: fingerprints of data files and of code, cache keys, UTC
stamps. A channel's cache key hashes its source, its extractor's name and version and its
params: ``featurestore extract`` skips a channel whose stored key is the expected one.

>>> key = cache_key({"size": 10, "fingerprint": "ab"}, "egemaps", "2", {"sampling_rate": 16000})
>>> len(key), key == cache_key({"size": 10, "fingerprint": "ab", "path": "elsewhere"}, "egemaps", "2",
...                            {"sampling_rate": 16000})
(20, True)
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import inspect
import json
import os
from collections.abc import Callable, Iterable, Mapping
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

#: the version recorded for a library that is not installed
ABSENT = "absent"


def utc_now() -> str:
    """The current UTC time, ISO 8601 to the second (``created_utc`` of channels and labels)."""
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def file_fingerprint(path: str | os.PathLike[str], chunk: int = 1 << 22) -> dict[str, Any]:
    """Content fingerprint of a file: its size and a BLAKE2b hash of its head, middle and tail
    (``chunk`` bytes each: cheap for multi-GB videos); no modification time, so a copied corpus
    keeps its cache. ``path`` is recorded absolute (a later run may start elsewhere)."""
    path = Path(path)
    size = path.stat().st_size
    h = hashlib.blake2b(digest_size=16)
    h.update(str(size).encode())
    with open(path, "rb") as f:
        offsets = [0] if size <= 3 * chunk else [0, size // 2 - chunk // 2, size - chunk]
        for off in offsets:
            f.seek(off)
            h.update(f.read(chunk))
    return {"path": str(path.absolute()), "size": size, "fingerprint": h.hexdigest()}


def cache_key(
    source: Mapping[str, Any] | str, extractor: str, version: str, params: Mapping[str, Any]
) -> str:
    """Hash of what a channel was computed from: ``source`` (a :func:`file_fingerprint`, whose
    path does not count, or a string naming upstream inputs), extractor name, version, params."""
    if isinstance(source, Mapping):
        source = f"{source.get('size')}:{source.get('fingerprint')}"
    what = {"source": source, "extractor": extractor, "version": version, "params": params}
    blob = json.dumps(what, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def library_versions(names: Iterable[str]) -> tuple[tuple[str, str], ...]:
    """(distribution, installed version) of each of ``names``, in order; :data:`ABSENT` for one
    that is not installed (read from its metadata, without importing it)."""
    found = []
    for name in names:
        try:
            found.append((name, version(name)))
        except PackageNotFoundError:
            found.append((name, ABSENT))
    return tuple(found)


def _source_text(fn: Callable[..., Any]) -> bytes:
    try:
        return inspect.getsource(fn).encode()
    except (OSError, TypeError):  # no source shipped: the bytecode still tells versions apart
        return fn.__code__.co_code


def code_fingerprint(
    sources: Iterable[Path | Callable[..., Any]],
    libraries: Iterable[tuple[str, str]] = (),
    *,
    root: Path | None = None,
    salt: str = "",
) -> str:
    """Which code computed a result: 16 hex digits of SHA-256 over ``salt`` (e.g. a package
    version), the ``libraries`` ``(distribution, version)`` and each of ``sources`` in order: a
    file (its path relative to ``root`` and its bytes) or a function (its source, else bytecode).

    >>> code_fingerprint([utc_now], [("numpy", "2.0")]) != code_fingerprint([utc_now], [("numpy", "2.1")])
    True
    """
    h = hashlib.sha256(salt.encode())
    h.update(b"\0" + " ".join(f"{name}={v}" for name, v in libraries).encode())
    for source in sources:
        if isinstance(source, Path):
            name = source.relative_to(root) if root is not None else source
            h.update(b"\0" + name.as_posix().encode() + b"\0" + source.read_bytes())
        else:
            h.update(b"\0" + _source_text(source))
    return h.hexdigest()[:16]
