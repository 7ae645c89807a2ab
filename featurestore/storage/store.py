"""HDF5 feature store: one shard per session, atomic writes, provenance, verify.

The shard layout is a contract (docs/design.md#shard-layout; docs/store.md, layout). Every
write goes to a hidden temporary file that is fsynced and renamed over the shard, so a crash
leaves the old shard or the new one. Code that computes features hands :class:`Channel`
objects to :meth:`Store.write_session`; readers go through the store too
(:meth:`Store.read_session` reads several channels and a target in one open). Channels that
repeat another's rows (the per-role eGeMAPS) are stored as HDF5 hard links, and ``data`` is
written uncompressed and contiguous (docs/store.md says why, with the measurements). The
layout itself is :mod:`featurestore.storage.shard`, the checks :mod:`featurestore.storage.verify`.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import re
import shutil
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pandas as pd

from ..processes import pid_alive
from . import session_labels
from .provenance import cache_key, file_fingerprint, utc_now
from .session_labels import Ratings
from .shard import (
    LABEL_FPS,
    ROLES,
    SCHEMA_VERSION,
    Channel,
    MissingChannelError,
    SessionData,
    SessionMeta,
    ShardReader,
    StoreError,
    split_key,
    write_channels,
    write_labels,
    write_meta,
)
from .verify import Problem, verify_shard

SESSION_RE = re.compile(r"subject_(\d+)_story_(\d+)", re.IGNORECASE)
_TMP_MARK = ".tmp-"

# the layout's names and the provenance helpers are part of the store's API (notebooks, bench/, experiments/)
__all__ = [
    "LABEL_FPS",
    "ROLES",
    "SCHEMA_VERSION",
    "Channel",
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


@contextlib.contextmanager
def _rewritten(final: Path) -> Iterator[h5py.File]:
    """The shard ``final`` opened for change as a temporary copy (a new file when there is no
    shard yet), fsynced and renamed over the original only once the block completes; on any
    error the original stays untouched and the temporary file is removed."""
    tmp = final.with_name(f".{final.name}{_TMP_MARK}{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        if final.exists():
            shutil.copyfile(final, tmp)
        with h5py.File(tmp, "a") as f:
            yield f
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, final)
        _fsync_dir(final.parent)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _session_columns(session: str, meta: SessionMeta) -> dict[str, Any]:
    """The columns of a session that every per-session table of the store starts with."""
    return {
        "session": session,
        "listener": meta.listener,
        "story": meta.story,
        "speaker": meta.speaker,
        "split": meta.split,
    }


class Store:
    """A folder of per-session HDF5 shards.

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
            self.root.mkdir(parents=True, exist_ok=True)

    # ----------------------------------------------------------------- paths
    def shard_path(self, session: str) -> Path:
        return self.root / f"{session}.h5"

    def list_sessions(self) -> list[str]:
        """Session ids with a shard: ``Subject_<L>_Story_<S>`` ones sorted by listener then
        story, then those of a manifest (any other id) sorted by name; hidden files (the
        temporary shards of a writer) are not sessions."""
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
        if not self.root.is_dir():
            return []
        return sorted(p for p in self.root.glob(f".*.h5{_TMP_MARK}*"))

    def clean_temp_files(self) -> list[Path]:
        """Delete temporary shards whose writing process is gone; returns what was removed."""
        removed = []
        for p in self.temp_files():
            m = re.search(rf"{re.escape(_TMP_MARK)}(\d+)-", p.name)
            if m and pid_alive(int(m.group(1))) and int(m.group(1)) != os.getpid():
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
            near = (
                difflib.get_close_matches(session, sessions, n=1, cutoff=0.6)
                if parse_session(session) is None
                else []
            )
            known = ", ".join(sessions[:5]) + (" ..." if len(sessions) > 5 else "") or "none"
            raise StoreError(
                f"no shard for {session} in {self.root} (sessions there: {known}); "
                + (
                    f"did you mean {near[0]}?"
                    if near
                    else "run `featurestore extract` or check the session name"
                )
            )
        try:
            return h5py.File(path, "r")
        except OSError as e:
            raise StoreError(
                f"{path} is not a readable HDF5 shard ({e}); delete it and re-run `featurestore extract`"
            ) from e

    @contextlib.contextmanager
    def open_session(self, session: str) -> Iterator[ShardReader]:
        """The :class:`~featurestore.storage.shard.ShardReader` of a session's shard, open for a ``with`` block.

        For several reads in one open; :class:`StoreError` when there is no shard or it is not HDF5.
        """
        with self._open(session) as f:
            yield ShardReader(f, self.shard_path(session))

    def read_session(
        self, session: str, keys: Sequence[str], target: str | None = None, provenance: bool = False
    ) -> SessionData:
        """Channels ``keys`` (``role/channel``) and the labels of ``target`` of one session, in one open.

        Returns a :class:`~featurestore.storage.shard.SessionData` (meta, channels, labels). Rows that
        several channels share (the per-role eGeMAPS channels link the scene's) are read once.
        Raises :class:`StoreError` naming the shard for a schema version this tool does not
        read, a missing channel (:class:`MissingChannelError`: says what the shard has and how
        to add it), a missing target, or labels whose length is not the session's frame count;
        see :meth:`featurestore.storage.shard.ShardReader.read` (``provenance``).
        """
        with self.open_session(session) as shard:
            return shard.read(keys, target, provenance)

    def check_schema(self, session: str, write: bool = False) -> None:
        """:class:`StoreError` when the session's shard has a schema version this tool does not read
        (``write``: does not write); nothing when the session has no shard yet."""
        if self.shard_path(session).exists():
            with self.open_session(session) as shard:
                shard.check_schema(write)

    def meta(self, session: str) -> SessionMeta:
        with self.open_session(session) as shard:
            return shard.meta

    def channel_keys(self, session: str) -> list[str]:
        """``role/channel`` keys stored for a session."""
        with self.open_session(session) as shard:
            return shard.channel_keys()

    def cache_keys(self, session: str) -> dict[str, str]:
        """``role/channel`` -> stored cache key (empty dict when there is no shard)."""
        if not self.shard_path(session).exists():
            return {}
        with self.open_session(session) as shard:
            return shard.cache_keys()

    def label_sources(self, session: str) -> dict[str, dict]:
        """Label target -> the stored source fingerprint of its annotation (empty without a shard)."""
        if not self.shard_path(session).exists():
            return {}
        with self.open_session(session) as shard:
            return shard.label_sources()

    def read_channel(self, session: str, key: str) -> Channel:
        """The stored :class:`Channel` ``role/channel`` of a session, with provenance."""
        split_key(key)
        with self.open_session(session) as shard:
            return shard.channel(key)

    def channel(self, session: str, key: str) -> pd.DataFrame:
        """A channel as a DataFrame indexed by time in seconds, plus a ``valid`` column."""
        return self.read_channel(session, key).to_frame()

    def label_targets(self, session: str) -> list[str]:
        with self.open_session(session) as shard:
            return shard.label_targets()

    def labels(self, session: str, target: str = "valence_self") -> pd.Series:
        """Per-frame labels at 25 fps, indexed by frame time in seconds."""
        with self.open_session(session) as shard:
            y = shard.labels(target)
            fps = float(shard.file.attrs.get("fps", LABEL_FPS))
        return pd.Series(y, index=pd.Index(np.arange(len(y)) / fps, name="time"), name=target)

    def raters(self, session: str, target: str) -> list[str]:
        """The raters stored for ``target`` in a session (empty: one rating file, no raters)."""
        with self.open_session(session) as shard:
            return shard.raters(target)

    def rater_labels(self, session: str, target: str, rater: str) -> pd.Series:
        """One rater's per-frame trace of ``target`` (NaN where not rated), indexed like :meth:`labels`."""
        with self.open_session(session) as shard:
            y = shard.rater_labels(target, rater)
            fps = float(shard.file.attrs.get("fps", LABEL_FPS))
        return pd.Series(y, index=pd.Index(np.arange(len(y)) / fps, name="time"), name=rater)

    def sessions(self) -> pd.DataFrame:
        """One row per shard: session, listener, story, speaker, split, n_frames, channels, targets,
        layout (``omg`` or ``manifest``: the words of its roles are
        :func:`featurestore.storage.roles.role_names` of it)."""
        rows = []
        for s in self.list_sessions():
            with self.open_session(s) as shard:
                m = shard.meta
                chans = shard.channel_keys()
                targets = shard.label_targets()
            rows.append(
                {
                    **_session_columns(s, m),
                    "n_frames": m.n_frames,
                    "channels": chans,
                    "targets": targets,
                    "layout": m.layout,
                }
            )
        cols = [
            "session",
            "listener",
            "story",
            "speaker",
            "split",
            "n_frames",
            "channels",
            "targets",
            "layout",
        ]
        return pd.DataFrame(rows, columns=cols)

    # ------------------------------------------------------- whole-session ratings
    def session_label_targets(self, session: str) -> list[str]:
        """The targets with a whole-session rating (``/session_labels``) in a session's shard."""
        with self.open_session(session) as shard:
            return session_labels.session_label_targets(shard.file)

    def session_label(self, session: str, target: str) -> float:
        """The whole-session rating ``target`` of a session (the mean over its raters).

        Raises:
            StoreError: the shard has no such rating (the message lists those it has and how
                to add one).
        """
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
        with self.open_session(session) as shard:
            return session_labels.read_session_raters(shard.file, target)

    def session_ratings(self, session: str) -> dict[str, dict[str, float]]:
        """Every whole-session rating of a session, ``target -> rater -> value`` (rater ``""``
        without raters); {} without a shard."""
        if not self.shard_path(session).exists():
            return {}
        with self.open_session(session) as shard:
            return session_labels.read_ratings(shard.file)

    def session_labels(self, target: str) -> pd.DataFrame:
        """One row per shard with a whole-session rating ``target``: session, listener, story,
        speaker, split, value, n_raters (shards without it are left out)."""
        rows = []
        for s in self.list_sessions():
            with self.open_session(s) as shard:
                value = session_labels.read_session_label(shard.file, target)
                if value is None:
                    continue
                m = shard.meta
                n = len(session_labels.read_session_raters(shard.file, target))
            rows.append(
                {
                    **_session_columns(s, m),
                    "value": value,
                    "n_raters": n,
                }
            )
        cols = ["session", "listener", "story", "speaker", "split", "value", "n_raters"]
        return pd.DataFrame(rows, columns=cols)

    def write_session_labels(
        self, session: str, ratings: Ratings, source: Mapping[str, Any]
    ) -> Path:
        """Add or replace whole-session ratings (``target -> rater -> value``) of an existing
        shard, atomically as :meth:`write_session`.

        Raises:
            StoreError: no shard for ``session``, or the store is read-only.
            ValueError: a bad target, rater or value; the shard is unchanged.
        """
        if self.mode != "a":
            raise StoreError(f"store {self.root} is open read-only; use Store(root, mode='a')")
        session_labels.check_ratings(ratings)
        final = self.shard_path(session)
        if not final.exists():
            self._open(session).close()  # raises the store's "no shard" error
        with _rewritten(final) as f:
            ShardReader(f, final).check_schema(write=True)
            session_labels.write_session_labels(f, ratings, source)
        return final

    # --------------------------------------------------------------- writing
    def write_session(
        self,
        meta: SessionMeta,
        channels: Mapping[str, Channel] | None = None,
        labels: Mapping[str, np.ndarray] | None = None,
        label_sources: Mapping[str, dict] | None = None,
        drop: Iterable[str] = (),
    ) -> Path:
        """Add or replace channels and labels of one session, atomically.

        The existing shard (if any) is copied to a temporary file, changed there, and renamed
        over the original only once complete; on any error the original stays untouched and
        the temporary file is removed. A channel with :attr:`Channel.shared_with` is written
        after the channels with their own rows, its ``data`` and ``time`` as hard links.
        """
        if self.mode != "a":
            raise StoreError(f"store {self.root} is open read-only; use Store(root, mode='a')")
        channels = dict(channels or {})
        for k in channels:
            split_key(k)
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
        return final

    # ---------------------------------------------------------------- verify
    def verify(
        self, current_versions: Mapping[str, str] | None = None, check_sources: bool = True
    ) -> list[Problem]:
        """Check every shard; returns the problems found (an empty list means all good).

        Checks: the file opens, and those of :mod:`featurestore.storage.verify` (root attributes and
        schema version; per channel, shapes, times inside the session, valid rows finite, the
        stored cache key against its provenance, the extractor version against
        ``current_versions`` (extractor name -> version), the source file's fingerprint when it
        still exists and ``check_sources``; label lengths). Leftover temporary files of a killed
        writer are not problems (shards are never partial); see :meth:`temp_files`.
        """
        problems: list[Problem] = []
        sessions = self.list_sessions()
        if not sessions:
            problems.append(
                Problem(
                    str(self.root),
                    "no shards found",
                    "run `featurestore extract` or `make features`",
                )
            )
        fp_cache: dict[str, dict] = {}
        for s in sessions:
            path = self.shard_path(s)
            try:
                f = h5py.File(path, "r")
            except OSError as e:
                problems.append(
                    Problem(
                        s,
                        f"{path.name} is not readable HDF5 ({e})",
                        "delete it and re-run `featurestore extract`",
                    )
                )
                continue
            with f:
                problems.extend(
                    verify_shard(
                        s, ShardReader(f, path), current_versions or {}, check_sources, fp_cache
                    )
                )
        return problems
