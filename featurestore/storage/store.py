"""HDF5 feature store: one shard per session (its layout: :mod:`featurestore.storage.shard`),
atomic locked writes (docs/store.md, writers), provenance, verify."""

from __future__ import annotations

import contextlib
import errno
import io
import os
import re
import shutil
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import h5py
import numpy as np
import pandas as pd

from ..errors import nearest
from ..files import TMP_MARK, replaced, temp_writer
from ..processes import pid_alive
from . import session_labels
from .lock import shard_lock
from .provenance import cache_key, file_fingerprint, utc_now
from .roles import STORE_ROLES
from .session_labels import Ratings
from .shard import (
    LABEL_FPS,
    SCHEMA_VERSION,
    Channel,
    MissingChannelError,
    SessionData,
    SessionMeta,
    ShardReader,
    StoreError,
    split_key,
    upgrade,
    write_channels,
    write_labels,
    write_meta,
)
from .verify import Problem, labelled, missing_shards, verify_shard

SESSION_RE = re.compile(r"subject_(\d+)_story_(\d+)", re.IGNORECASE)
#: the columns every per-session table of the store starts with
SESSION_COLUMNS = ("session", "listener", "story", "speaker", "split")
T = TypeVar("T")

# the layout's names and the provenance helpers are part of the store's API (notebooks, bench/, experiments/)
__all__ = [
    "LABEL_FPS",
    "STORE_ROLES",
    "SCHEMA_VERSION",
    "Channel",
    "DiskFullError",
    "MissingChannelError",
    "Problem",
    "SessionData",
    "SessionMeta",
    "Store",
    "StoreError",
    "cache_key",
    "file_fingerprint",
    "parse_session",
    "session_name",
    "utc_now",
]


def session_name(listener: int, story: int) -> str:
    """Canonical session id, ``Subject_<L>_Story_<S>``."""
    return f"Subject_{int(listener)}_Story_{int(story)}"


def parse_session(text: str) -> tuple[int, int] | None:
    """(listener, story) from any name containing ``Subject_<L>_Story_<S>`` (any case), else None."""
    m = SESSION_RE.search(text)
    return (int(m.group(1)), int(m.group(2))) if m else None


#: the errno values of a full disk (no space; over quota)
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


class DiskFullError(StoreError):
    """A shard could not be written for want of disk space (ENOSPC); the shard is unchanged and
    no temporary file is left. ``path``: the shard; ``needed``/``free``: bytes (-1: unknown)."""

    def __init__(self, path: Path, needed: int, free: int) -> None:
        self.path, self.needed, self.free = path, needed, free
        need = f"needs {needed / 1e6:.1f} MB" if needed >= 0 else "failed"
        room = f"{free / 1e6:.1f} MB free" if free >= 0 else "free space unknown"
        super().__init__(
            f"disk full: writing {path} {need} ({room} in {path.parent}); the shard is unchanged "
            f"and no temporary file is left: free disk space there (or use another --store), "
            f"then re-run"
        )


def _free_bytes(folder: Path) -> int:
    """Bytes free for this user in ``folder`` (-1 when it cannot be asked)."""
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return -1


def _write_image(tmp: Path, image: memoryview, final: Path) -> None:
    """Write a shard's bytes to ``tmp``; :class:`DiskFullError` (before writing, when known)."""
    free = _free_bytes(tmp.parent)
    if 0 <= free < len(image):
        raise DiskFullError(final, len(image), free)
    with open(tmp, "xb") as fh:
        fh.write(image)


@contextlib.contextmanager
def _rewritten(final: Path) -> Iterator[h5py.File]:
    """``final`` changed in a copy and renamed over it (whole or not at all:
    :func:`featurestore.files.replaced`) once the block completes, under the shard's write lock.
    The copy is changed in memory so that a full disk is one :class:`DiskFullError` from
    Python's write of the finished file, never an HDF5 failure half-way through a flush."""
    needed = -1  # bytes, once the new shard is known
    try:
        with shard_lock(final):
            old = final.read_bytes() if final.exists() else b""
            buffer = io.BytesIO(old)
            del old  # the buffer holds its own copy
            with h5py.File(buffer, "a" if buffer.getbuffer().nbytes else "w") as f:
                ShardReader(f, final).check_self_contained()
                yield f
            with buffer.getbuffer() as image, replaced(final) as tmp:
                needed = len(image)
                _write_image(tmp, image, final)
    except OSError as e:  # e.g. no room for the lock file, the write or its fsync
        if e.errno in DISK_FULL_ERRNOS:
            raise DiskFullError(final, needed, _free_bytes(final.parent)) from e
        raise


class Store:
    """A folder of per-session HDF5 shards (``mode`` ``r``: read-only, ``a``: read and write).

    >>> import tempfile
    >>> store = Store(tempfile.mkdtemp(), mode="a")
    >>> store.list_sessions()
    []
    """

    def __init__(self, root: str | os.PathLike = "features", mode: str = "r") -> None:
        if mode not in ("r", "a"):
            raise ValueError("mode must be 'r' (read-only) or 'a' (read and write)")
        self.root = Path(root)
        self.mode = mode
        if mode == "a":
            try:
                self.root.mkdir(parents=True, exist_ok=True)
            except (FileExistsError, NotADirectoryError) as e:
                raise StoreError(f"feature store {root} is a file: pass --store a folder") from e

    # ----------------------------------------------------------------- paths
    def shard_path(self, session: str) -> Path:
        """The session's shard file."""
        return self.root / f"{session}.h5"

    def list_sessions(self) -> list[str]:
        """Session ids with a shard: ``Subject_<L>_Story_<S>`` by listener then story, then any
        other id (a manifest's) by name; hidden files (a writer's temporary shards) are none."""
        if not self.root.is_dir():
            return []
        omg, other = [], []
        for p in self.root.glob("*.h5"):
            if p.name.startswith("."):
                continue
            ls = parse_session(p.stem)
            if ls and p.stem == session_name(*ls):
                omg.append((ls, p.stem))
            else:
                other.append(p.stem)
        return [n for _, n in sorted(omg)] + sorted(other)

    def temp_files(self) -> list[Path]:
        """Leftover temporary shards (from a killed writer)."""
        return sorted(self.root.glob(f".*.h5{TMP_MARK}*")) if self.root.is_dir() else []

    def clean_temp_files(self) -> list[Path]:
        """Delete temporary shards whose writing process is gone; returns what was removed."""
        removed = []
        for p in self.temp_files():
            pid = temp_writer(p)
            if pid is not None and pid_alive(pid) and pid != os.getpid():
                continue
            p.unlink(missing_ok=True)
            removed.append(p)
        return removed

    # --------------------------------------------------------------- reading
    def _open(self, session: str) -> h5py.File:
        path = self.shard_path(session)
        if not path.exists():
            if not self.root.is_dir():
                raise StoreError(
                    f"no feature store at {self.root}: no such folder; build it with "
                    f"`featurestore extract DATA_DIR --store {self.root}` (or `make features`)"
                )
            sessions = self.list_sessions()
            # a misspelt name gets the nearest one; a well-formed one the store lacks, the list
            near = None if parse_session(session) else nearest(session, sessions)
            known = ", ".join(sessions[:5]) + (" ..." if len(sessions) > 5 else "") or "none"
            fix = (
                f"did you mean {near}?"
                if near
                else "run `featurestore extract` or check the session name"
            )
            raise StoreError(
                f"no shard for {session} in {self.root} (sessions there: {known}); {fix}"
            )
        try:
            return h5py.File(path, "r")
        except FileNotFoundError as e:  # listed a moment ago
            raise StoreError(
                f"shard {path} was deleted while the store was read: restore it or re-run "
                "`featurestore extract`, then run this again"
            ) from e
        except OSError as e:
            raise StoreError(
                f"{path} is not a readable HDF5 shard ({e}); delete it and re-run `featurestore extract`"
            ) from e

    @contextlib.contextmanager
    def open_session(self, session: str) -> Iterator[ShardReader]:
        """The session's :class:`~featurestore.storage.shard.ShardReader`, open for a ``with``
        block; :class:`StoreError` when there is no shard, it is not HDF5 or it would read
        another file (:meth:`ShardReader.check_self_contained`)."""
        with self._open(session) as f:
            shard = ShardReader(f, self.shard_path(session))
            shard.check_self_contained()
            yield shard

    def _read(self, session: str, read: Callable[[ShardReader], T], absent: T | None = None) -> T:
        """``read`` of the session's open shard; ``absent`` (when given) without a shard."""
        if absent is not None and not self.shard_path(session).exists():
            return absent
        with self.open_session(session) as shard:
            return read(shard)

    def read_session(
        self, session: str, keys: Sequence[str], target: str | None = None, provenance: bool = False
    ) -> SessionData:
        """Channels ``keys`` and the labels of ``target`` of one session (:meth:`ShardReader.read`)."""
        return self._read(session, lambda shard: shard.read(keys, target, provenance))

    def check_schema(self, session: str, write: bool = False) -> None:
        """:class:`StoreError` when the session's shard has a schema version this tool does not
        read (``write``: does not write); nothing when the session has no shard yet."""
        if self.shard_path(session).exists():
            self._read(session, lambda shard: shard.check_schema(write))

    def meta(self, session: str) -> SessionMeta:
        """The session's root attributes."""
        return self._read(session, lambda shard: shard.meta)

    def channel_keys(self, session: str) -> list[str]:
        """``role/channel`` keys stored for a session."""
        return self._read(session, ShardReader.channel_keys)

    def cache_keys(self, session: str) -> dict[str, str]:
        """``role/channel`` -> stored cache key (empty dict when there is no shard)."""
        return self._read(session, ShardReader.cache_keys, absent={})

    def label_sources(self, session: str) -> dict[str, dict]:
        """Label target -> the stored source fingerprint of its annotation (empty without a shard)."""
        return self._read(session, ShardReader.label_sources, absent={})

    def read_channel(self, session: str, key: str) -> Channel:
        """The stored :class:`Channel` ``role/channel`` of a session, with provenance."""
        split_key(key)
        return self._read(session, lambda shard: shard.channel(key))

    def channel(self, session: str, key: str) -> pd.DataFrame:
        """A channel as a DataFrame indexed by time in seconds, plus a ``valid`` column."""
        return self.read_channel(session, key).to_frame()

    def label_targets(self, session: str) -> list[str]:
        """The label targets stored for a session."""
        return self._read(session, ShardReader.label_targets)

    def _trace(
        self, session: str, read: Callable[[ShardReader], np.ndarray], name: str
    ) -> pd.Series:
        y, fps = self._read(
            session, lambda shard: (read(shard), shard.file.attrs.get("fps", LABEL_FPS))
        )
        return pd.Series(y, index=pd.Index(np.arange(len(y)) / float(fps), name="time"), name=name)

    def labels(self, session: str, target: str = "valence_self") -> pd.Series:
        """Per-frame labels at 25 fps, indexed by frame time in seconds."""
        return self._trace(session, lambda shard: shard.labels(target), target)

    def raters(self, session: str, target: str) -> list[str]:
        """The raters stored for ``target`` in a session (empty: one rating file, no raters)."""
        return self._read(session, lambda shard: shard.raters(target))

    def rater_labels(self, session: str, target: str, rater: str) -> pd.Series:
        """One rater's per-frame trace of ``target`` (NaN where not rated), indexed like :meth:`labels`."""
        return self._trace(session, lambda shard: shard.rater_labels(target, rater), rater)

    def sessions(self) -> pd.DataFrame:
        """One row per shard: session, listener, story, speaker, split, n_frames, channels,
        targets, layout (its name: :func:`featurestore.storage.layouts.layout_of`), a listed
        layout's ids as written: person, group, partner (empty in the OMG layout), and fps."""
        rows = []
        for s in self.list_sessions():
            with self.open_session(s) as shard:
                m = shard.meta
                row = [s, m.listener, m.story, m.speaker, m.split, m.n_frames]
                ids = [m.person, m.group, m.partner]
                rows.append(
                    [*row, shard.channel_keys(), shard.label_targets(), m.layout, *ids, m.fps]
                )
        columns = [*SESSION_COLUMNS, "n_frames", "channels", "targets", "layout"]
        columns += ["person", "group", "partner", "fps"]
        return pd.DataFrame(rows, columns=columns)

    # ------------------------------------------------------- whole-session ratings
    def session_label_targets(self, session: str) -> list[str]:
        """The targets with a whole-session rating (``/session_labels``) in a session's shard."""
        return self._read(session, lambda shard: session_labels.session_label_targets(shard.file))

    def session_label(self, session: str, target: str) -> float:
        """The whole-session rating ``target`` of a session (the mean over its raters);
        :class:`StoreError` listing those it has when it has none."""
        with self.open_session(session) as shard:
            value = session_labels.read_session_label(shard.file, target)
            have = session_labels.session_label_targets(shard.file)
        if value is None:
            raise StoreError(
                f"session {session} has no whole-session rating {target!r} in "
                f"{self.shard_path(session)} (it has: {', '.join(have) or 'none'}); add one with a "
                f"manifest column `rating_{target}` or `featurestore ratings FILE --store {self.root}`"
            )
        return value

    def session_raters(self, session: str, target: str) -> dict[str, float]:
        """Rater -> whole-session rating ``target`` of a session (empty without raters)."""
        return self._read(session, lambda sh: session_labels.read_session_raters(sh.file, target))

    def session_ratings(self, session: str) -> dict[str, dict[str, float]]:
        """Every whole-session rating of a session, ``target -> rater -> value``; {} without a shard."""
        return self._read(session, lambda shard: session_labels.read_ratings(shard.file), {})

    def session_labels(self, target: str) -> pd.DataFrame:
        """One row per shard with a whole-session rating ``target``: session, listener, story,
        speaker, split, value, n_raters (shards without it are left out)."""
        rows = []
        for s in self.list_sessions():
            with self.open_session(s) as shard:
                value = session_labels.read_session_label(shard.file, target)
                if value is None:
                    continue
                m, n = shard.meta, len(session_labels.read_session_raters(shard.file, target))
            rows.append([s, m.listener, m.story, m.speaker, m.split, value, n])
        return pd.DataFrame(rows, columns=[*SESSION_COLUMNS, "value", "n_raters"])

    def write_session_labels(
        self, session: str, ratings: Ratings, source: Mapping[str, Any]
    ) -> Path:
        """Add or replace whole-session ratings (``target -> rater -> value``) of an existing
        shard, atomically as :meth:`write_session` (:class:`StoreError` without a shard or
        writable store, ValueError for a bad rating)."""
        self._check_writable()
        session_labels.check_ratings(ratings)
        final = self.shard_path(session)
        if not final.exists():
            self._open(session).close()  # raises the store's "no shard" error
        with _rewritten(final) as f:
            ShardReader(f, final).check_schema(write=True)
            upgrade(f)
            session_labels.write_session_labels(f, ratings, source)
        return final

    # --------------------------------------------------------------- writing
    def _check_writable(self) -> None:
        if self.mode != "a":
            raise StoreError(f"store {self.root} is open read-only; use Store(root, mode='a')")

    def write_session(
        self,
        meta: SessionMeta,
        channels: Mapping[str, Channel] | None = None,
        labels: Mapping[str, np.ndarray] | None = None,
        label_sources: Mapping[str, dict] | None = None,
        drop: Iterable[str] = (),
        ratings: Ratings | None = None,
        ratings_source: Mapping[str, Any] | None = None,
    ) -> Path:
        """Add or replace channels, labels and whole-session ``ratings`` (``target -> rater ->
        value``, from ``ratings_source``) of one session in one atomic write (a changed copy
        renamed over the shard; on any error the shard is untouched). A channel with
        :attr:`Channel.shared_with` is written last, its ``data`` and ``time`` as hard links."""
        self._check_writable()
        channels = dict(channels or {})
        for k in channels:
            split_key(k)
        if ratings:
            session_labels.check_ratings(ratings)
        final = self.shard_path(meta.session)
        with _rewritten(final) as f:
            if "schema_version" in f.attrs:
                ShardReader(f, final).check_schema(write=True)
            write_meta(f, meta)
            for key in drop:
                role, name = split_key(key)
                if role in f and name in f[role]:
                    del f[role][name]
            write_channels(f, meta.session, channels)
            write_labels(f, meta, dict(labels or {}), label_sources or {})
            if ratings:
                session_labels.write_session_labels(f, ratings, ratings_source or {})
        return final

    def predict_only(self, sessions: Iterable[str] | None = None) -> list[str]:
        """The sessions (of ``sessions``, default all) whose shard holds no labels, per frame or
        whole-session (a blind test's: a sweep neither trains nor scores them)."""
        names = self.list_sessions() if sessions is None else sessions
        return [s for s in names if not self._read(s, labelled)]

    # ---------------------------------------------------------------- verify
    def verify(
        self,
        current_versions: Mapping[str, str] | None = None,
        check_sources: bool = True,
        corpus: tuple[str, Sequence[str]] | None = None,
    ) -> list[Problem]:
        """Check every shard (:mod:`featurestore.storage.verify`); the problems found, none when
        all is good. ``current_versions``: extractor name -> version; ``check_sources``:
        re-fingerprint the source files that still exist; ``corpus``: (the file that records
        the corpus, its sessions), each without a shard is a problem. A writer's leftover
        temporary files are not problems (:meth:`temp_files`)."""
        sessions = self.list_sessions()
        problems = missing_shards(self.root, sessions, corpus[1], corpus[0]) if corpus else []
        if not sessions:
            fix = "run `featurestore extract` or `make features`"
            problems = [Problem(str(self.root), "no shards found", fix)]
        fp_cache: dict[str, dict] = {}
        for s in sessions:
            path = self.shard_path(s)
            try:
                f = h5py.File(path, "r")
            except OSError as e:
                why = f"{path.name} is not readable HDF5 ({e})"
                problems.append(Problem(s, why, "delete it and re-run `featurestore extract`"))
                continue
            with f:
                shard = ShardReader(f, path)
                problems += verify_shard(s, shard, current_versions or {}, check_sources, fp_cache)
        return problems
