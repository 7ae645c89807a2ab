"""Checksums of a shard's datasets (docs/store.md, checksums): every dataset the store writes
carries the SHA-256 of its dtype, shape and bytes in its ``sha256`` attribute; a read checks it
and refuses rows that were changed outside the store (h5py by hand, a flipped byte on disk);
:func:`outside_parts` finds the rows a read would take from another file.

>>> import numpy as np
>>> digest(np.zeros(3, dtype=np.float32)) == digest(np.zeros(3, dtype=np.float32))
True
>>> digest(np.zeros(3, dtype=np.float32)) == digest(np.zeros(3, dtype=np.float64))
False
"""

from __future__ import annotations

import hashlib
import posixpath
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from .errors import DamagedShardError

#: a dataset's attribute holding :func:`digest` of its rows
DIGEST_ATTR = "sha256"
#: the first shard schema version whose datasets all carry :data:`DIGEST_ATTR`
FIRST_CHECKED_SCHEMA = 2
#: what to do about a dataset that fails its checksum
REEXTRACT = (
    "re-extract the session with `featurestore extract DATA_DIR --force` (or re-import the "
    "channel); `featurestore verify` lists every damaged dataset"
)
#: what to do with a shard that would read another file (:func:`outside_parts`)
OUTSIDE_FIX = (
    "a shard is read only from itself, so nothing of it was read: move it aside and rebuild it "
    "with `featurestore extract`"
)


def digest(values: Any) -> str:
    """SHA-256 (hex) of an array's dtype, shape and C-order bytes (about 1 GB/s on one core)."""
    a = np.ascontiguousarray(values)
    h = hashlib.sha256(f"{a.dtype.str}|{a.shape}|".encode())
    h.update(a.reshape(-1).view(np.uint8).data)  # the bytes in place, no copy
    return h.hexdigest()


def stamp(ds: h5py.Dataset, values: Any) -> h5py.Dataset:
    """Record the digest of ``values`` (the rows just written to ``ds``) in ``ds``; returns ``ds``."""
    ds.attrs[DIGEST_ATTR] = digest(np.asarray(values, dtype=ds.dtype).reshape(ds.shape))
    return ds


def create(grp: h5py.Group, name: str, values: Any, **kwargs: Any) -> h5py.Dataset:
    """``grp[name]`` created from ``values`` (h5py's ``create_dataset`` ``kwargs``), with its digest."""
    ds = grp.create_dataset(name, data=values, **kwargs)
    return stamp(ds, ds[()])


def stamp_unchecked(f: h5py.File) -> int:
    """Stamp every dataset of ``f`` that has no digest with that of its rows; how many."""
    todo: list[h5py.Dataset] = []
    f.visititems(lambda _, obj: todo.append(obj) if isinstance(obj, h5py.Dataset) else None)
    todo = [ds for ds in todo if DIGEST_ATTR not in ds.attrs]
    for ds in todo:
        stamp(ds, ds[()])
    return len(todo)


def checked_schema(f: h5py.File) -> bool:
    """The shard's schema version promises a digest on every dataset."""
    version = f.attrs.get("schema_version")
    return version is not None and int(version) >= FIRST_CHECKED_SCHEMA


def problem(ds: h5py.Dataset, values: np.ndarray | None = None) -> str:
    """Why ``ds`` fails its checksum ("" when it passes or its shard predates checksums);
    ``values``: its rows, already read (else they are read here)."""
    want = ds.attrs.get(DIGEST_ATTR)
    if want is None:
        return "has no checksum" if checked_schema(ds.file) else ""
    if values is None:
        try:
            values = ds[()]
        except OSError as e:
            return f"cannot be read ({e})"
    if digest(values) != str(want):
        return "does not match its checksum (changed outside the store or damaged on disk)"
    return ""


def read_rows(ds: h5py.Dataset, path: str | Path | None = None) -> np.ndarray:
    """The rows of ``ds``, checked against its digest: :class:`DamagedShardError` naming the
    shard ``path`` (default: the open file) and the dataset when they cannot be read, do not
    match, or lack the digest their schema promises."""
    where = f"{path or ds.file.filename}: dataset {ds.name.strip('/')}"
    try:
        values = ds[()]
    except OSError as e:
        raise DamagedShardError(f"{where} cannot be read ({e}); {REEXTRACT}") from e
    why = problem(ds, values)
    if why:
        raise DamagedShardError(f"{where} {why}; {REEXTRACT}")
    return values


def outside_parts(f: h5py.File) -> list[str]:
    """What in shard ``f`` a read would take from another file, one phrase each: external and
    user-defined links, soft links through them, datasets with external storage and virtual
    datasets (the store writes none of them). Found from the links and the datasets' creation
    properties, without following a link or reading a row (docs/store.md, self-contained)."""
    links = f.id.links
    found: list[str] = []
    external: list[str] = []
    soft: list[tuple[str, str]] = []

    def look(name: bytes, info: Any) -> None:
        path = name.decode(errors="replace")
        if info.type == h5py.h5l.TYPE_SOFT:
            target = links.get_val(name).decode(errors="replace")
            soft.append((path, posixpath.join("/", path.rpartition("/")[0], target)))
        elif info.type == h5py.h5l.TYPE_EXTERNAL:
            file, target = (v.decode(errors="replace") for v in links.get_val(name))
            found.append(f"{path} is an external link to {file!r} ({target!r} there)")
            external.append(path)
        elif info.type != h5py.h5l.TYPE_HARD:
            found.append(f"{path} is a user-defined link (type {info.type})")
        elif isinstance(obj := h5py.h5o.open(f.id, name), h5py.h5d.DatasetID):
            dcpl = obj.get_create_plist()
            if dcpl.get_layout() == h5py.h5d.VIRTUAL:
                n = dcpl.get_virtual_count()
                src = {
                    f"{dcpl.get_virtual_filename(i)}:{dcpl.get_virtual_dsetname(i)}"
                    for i in range(n)
                }
                found.append(f"dataset {path} is virtual, its rows mapped from {sorted(src)}")
            elif n := dcpl.get_external_count():
                files = [dcpl.get_external(i)[0].decode(errors="replace") for i in range(n)]
                found.append(f"dataset {path} keeps its rows in external files {files}")

    links.visit(look, info=True)
    # a soft link leaves the file only through an external link, listed anyway; those into one first
    leaving = []
    for path, target in soft:
        via = [e for e in external if f"{target.rstrip('/')}/".startswith(f"/{e}/")]
        if via:
            leaving.append(f"{path} is a soft link to {target!r}, out of the file through {via[0]}")
    return leaving + found
