"""HDF5 feature store: one shard per session, atomic writes, provenance, verify.

Layout of a shard ``<store>/Subject_<L>_Story_<S>.h5`` (a contract, see DESIGN.md)::

    /                      attrs: session, listener, story, speaker, split, fps, n_frames, schema_version
    /labels/<target>       (n_frames,) float32
    /<role>/<channel>/data (n, d) float32
    /<role>/<channel>/time (n,) float64, seconds from session start
    /<role>/<channel>/valid (n,) bool
          attrs: columns, extractor, extractor_version, params (JSON), cache_key,
                 source (JSON: path, size, fingerprint), created_utc, [shared_with]

**Shared rows.** A channel whose ``data`` and ``time`` repeat another channel's (the per-role
eGeMAPS channels are the scene's rows with their own ``valid``) says so with
:attr:`Channel.shared_with`; its ``data`` and ``time`` are then written as HDF5 *hard links*
to that channel's datasets (the group attribute ``shared_with`` names it). The paths above all
still exist and read as ordinary datasets, so readers need no change, and deleting or
replacing the other channel later leaves the linked rows intact (a hard link keeps the
dataset alive). With the storage below, the full-size synthetic store (80 sessions) went from
660 MB to 314 MB and loading all its channels (``experiments.dataset.load_sessions``) from
5.8 s to 1.5 s.

**Compression** (measured on the full-size synthetic store and on real openSMILE output of
the demo corpus; ``python -m bench --only loading`` repeats it): float32 features are
high-entropy, so gzip level 1 with byte shuffle saves only about 23 % (lzf + shuffle 16 %)
while decompressing costs 4-5 times the read itself; eGeMAPS rows at 100 Hz are about 85 %
of a store's bytes and dominate loading. ``data`` datasets are therefore written
uncompressed and contiguous (one read per dataset); ``time`` and ``valid`` always were.
Shards written with gzip by earlier releases read unchanged: HDF5 records each dataset's
filters.

Every write goes to a hidden temporary file next to the shard, which is flushed,
fsync'ed and renamed over the old shard: a crash or a kill at any moment leaves
either the old shard or the new one, never a half-written file.

Code that computes features never opens a shard; it hands :class:`Channel`
objects to :meth:`Store.write_session`.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import re
import shutil
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np
import pandas as pd

from .processes import pid_alive

SCHEMA_VERSION = 1
LABEL_FPS = 25.0
ROLES = ("speaker", "listener", "scene")
SESSION_RE = re.compile(r"subject_(\d+)_story_(\d+)", re.IGNORECASE)
_TMP_MARK = ".tmp-"


class StoreError(RuntimeError):
    """A shard is missing, unreadable or inconsistent; the message names the file."""


def session_name(listener: int, story: int) -> str:
    """Canonical session id, ``Subject_<L>_Story_<S>``."""
    return f"Subject_{int(listener)}_Story_{int(story)}"


def parse_session(text: str) -> tuple[int, int] | None:
    """(listener, story) from any name containing ``Subject_<L>_Story_<S>`` (any case), else None."""
    m = SESSION_RE.search(text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def utc_now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def file_fingerprint(path: str | os.PathLike, chunk: int = 1 << 22) -> dict:
    """Content fingerprint of a file: size plus a BLAKE2b hash of its head, middle and tail.

    Reading three 4 MiB chunks instead of the whole file keeps this cheap for multi-GB
    videos while still changing whenever the content is re-encoded, truncated or replaced.
    The modification time is deliberately left out, so copying a corpus keeps its cache.
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


@dataclass
class Features:
    """What an extractor computes for one role: per-sample values, times and validity."""

    data: np.ndarray  # (n, d) float32
    time: np.ndarray  # (n,) float64, seconds
    valid: np.ndarray  # (n,) bool
    columns: list[str]

    def __post_init__(self) -> None:
        self.data = np.asarray(self.data, dtype=np.float32)
        if self.data.ndim == 1:
            self.data = self.data[:, None]
        self.time = np.asarray(self.time, dtype=np.float64)
        self.valid = np.asarray(self.valid, dtype=bool)
        self.columns = [str(c) for c in self.columns]
        n = self.data.shape[0]
        if self.time.shape != (n,) or self.valid.shape != (n,):
            raise ValueError(
                f"features have {n} rows but time has {self.time.shape} and valid {self.valid.shape}"
            )
        if self.data.shape[1] != len(self.columns):
            raise ValueError(f"{self.data.shape[1]} data columns but {len(self.columns)} names")


@dataclass
class Channel(Features):
    """Features plus the provenance stored with them.

    ``shared_with`` (``role/channel`` or None): this channel's ``data`` and ``time`` are
    exactly that channel's (e.g. ``speaker/egemaps`` repeats ``scene/egemaps`` with its own
    ``valid``), so :meth:`Store.write_session` stores them once, as HDF5 hard links to that
    channel's datasets. The other channel must be written in the same call or already be in
    the shard, with equal data and time; otherwise the write fails. Channels read back from a
    shard carry None (their arrays are their own copies).
    """

    extractor: str = ""
    extractor_version: str = ""
    params: dict = field(default_factory=dict)
    cache_key: str = ""
    source: dict = field(default_factory=dict)
    created_utc: str = ""
    shared_with: str | None = None

    @classmethod
    def from_features(cls, feats: Features, **provenance) -> Channel:
        return cls(feats.data, feats.time, feats.valid, feats.columns, **provenance)

    def to_frame(self) -> pd.DataFrame:
        """DataFrame indexed by time (s) with one column per feature plus ``valid``."""
        df = pd.DataFrame(self.data, columns=self.columns, index=pd.Index(self.time, name="time"))
        df["valid"] = self.valid
        return df


@dataclass(frozen=True)
class SessionMeta:
    """Root attributes of a shard."""

    session: str
    listener: int
    story: int
    speaker: int
    split: str
    n_frames: int
    fps: float = LABEL_FPS


def _channel_key(key: str) -> tuple[str, str]:
    parts = key.strip("/").split("/")
    if len(parts) != 2 or parts[0] not in ROLES or not parts[1]:
        raise StoreError(f"channel {key!r} is not of the form ROLE/CHANNEL with ROLE in {ROLES}")
    return parts[0], parts[1]


def _read_channel(grp: h5py.Group) -> Channel:
    a = grp.attrs
    return Channel(
        data=grp["data"][()],
        time=grp["time"][()],
        valid=grp["valid"][()],
        columns=[str(c) for c in json.loads(a["columns"])],
        extractor=str(a.get("extractor", "")),
        extractor_version=str(a.get("extractor_version", "")),
        params=json.loads(a.get("params", "{}")),
        cache_key=str(a.get("cache_key", "")),
        source=json.loads(a.get("source", "{}")),
        created_utc=str(a.get("created_utc", "")),
    )


#: HDF5 storage of ``data`` datasets; see "Compression" in the module docstring. An empty
#: dict means uncompressed and contiguous.
DATA_STORAGE: dict = {}


def _write_channel(parent: h5py.Group, name: str, ch: Channel, shared: h5py.Group | None = None) -> None:
    """Write one channel group; with ``shared``, ``data`` and ``time`` are hard links to its datasets."""
    if name in parent:
        del parent[name]
    grp = parent.create_group(name)
    if shared is None:
        grp.create_dataset("data", data=ch.data, **DATA_STORAGE)
        grp.create_dataset("time", data=ch.time)
    else:
        grp["data"] = shared["data"]  # assigning a dataset object makes a hard link
        grp["time"] = shared["time"]
        grp.attrs["shared_with"] = shared.name.strip("/")
    grp.create_dataset("valid", data=ch.valid)
    grp.attrs["columns"] = json.dumps(ch.columns)
    grp.attrs["extractor"] = ch.extractor
    grp.attrs["extractor_version"] = ch.extractor_version
    grp.attrs["params"] = json.dumps(ch.params, sort_keys=True, default=str)
    grp.attrs["cache_key"] = ch.cache_key
    grp.attrs["source"] = json.dumps(ch.source, sort_keys=True, default=str)
    grp.attrs["created_utc"] = ch.created_utc or utc_now()


def _same_rows(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal shape and values (NaN equal to NaN); the same memory is equal without a scan."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a is b or (a.__array_interface__["data"] == b.__array_interface__["data"] and a.strides == b.strides):
        return True
    return bool(np.array_equal(a, b, equal_nan=np.issubdtype(a.dtype, np.floating)))


def _shared_target(f: h5py.File, session: str, key: str, ch: Channel, channels: Mapping[str, Channel]) -> h5py.Group:
    """The group whose datasets ``key`` links to, after checking its rows equal ``ch``'s."""
    target = ch.shared_with
    role, name = _channel_key(target)
    if target == key:
        raise StoreError(f"{session}: channel {key} cannot share its rows with itself; set shared_with=None")
    if role not in f or name not in f[role] or "data" not in f[role][name]:
        raise StoreError(
            f"{session}: channel {key} says its rows are {target}'s (shared_with), but {target} is neither "
            "written in the same call nor stored in the shard; write both together or set shared_with=None"
        )
    grp = f[role][name]
    other = channels.get(target)
    if other is not None:
        same = _same_rows(ch.data, other.data) and _same_rows(ch.time, other.time)
    else:
        same = ch.data.shape == grp["data"].shape and ch.time.shape == grp["time"].shape
        same = same and _same_rows(ch.data, grp["data"][()]) and _same_rows(ch.time, grp["time"][()])
    if not same:
        raise StoreError(
            f"{session}: channel {key} says its data and time are {target}'s (shared_with), but they differ; "
            "set shared_with=None to store its own copy"
        )
    return grp


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




@dataclass
class Problem:
    """One finding of :meth:`Store.verify`."""

    session: str
    what: str
    hint: str = ""

    def __str__(self) -> str:
        return f"{self.session}: {self.what}" + (f" ({self.hint})" if self.hint else "")


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
        """Session ids with a shard, sorted by listener then story."""
        if not self.root.is_dir():
            return []
        names = []
        for p in self.root.glob("*.h5"):
            ls = parse_session(p.stem)
            if ls and p.stem == session_name(*ls):
                names.append((ls, p.stem))
        return [n for _, n in sorted(names)]

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
            known = ", ".join(self.list_sessions()[:5]) or "none"
            raise StoreError(
                f"no shard for {session} in {self.root} (sessions there: {known}); "
                "run `featurestore extract` or check the session name"
            )
        try:
            return h5py.File(path, "r")
        except OSError as e:
            raise StoreError(f"{path} is not a readable HDF5 shard ({e}); delete it and re-run `featurestore extract`") from e

    def meta(self, session: str) -> SessionMeta:
        with self._open(session) as f:
            return _meta_from_attrs(f, self.shard_path(session))

    def channel_keys(self, session: str) -> list[str]:
        """``role/channel`` keys stored for a session."""
        with self._open(session) as f:
            return [f"{r}/{c}" for r in ROLES if r in f for c in f[r] if isinstance(f[r][c], h5py.Group)]

    def cache_keys(self, session: str) -> dict[str, str]:
        """``role/channel`` -> stored cache key (empty dict when there is no shard)."""
        if not self.shard_path(session).exists():
            return {}
        with self._open(session) as f:
            return {
                f"{r}/{c}": str(f[r][c].attrs.get("cache_key", ""))
                for r in ROLES
                if r in f
                for c in f[r]
            }

    def read_channel(self, session: str, key: str) -> Channel:
        """The stored :class:`Channel` ``role/channel`` of a session, with provenance."""
        role, name = _channel_key(key)
        with self._open(session) as f:
            if role not in f or name not in f[role]:
                have = ", ".join(f"{r}/{c}" for r in ROLES if r in f for c in f[r]) or "none"
                raise StoreError(f"{self.shard_path(session)} has no channel {key} (it has: {have})")
            return _read_channel(f[role][name])

    def channel(self, session: str, key: str) -> pd.DataFrame:
        """A channel as a DataFrame indexed by time in seconds, plus a ``valid`` column."""
        return self.read_channel(session, key).to_frame()

    def label_targets(self, session: str) -> list[str]:
        with self._open(session) as f:
            return sorted(f["labels"]) if "labels" in f else []

    def labels(self, session: str, target: str = "valence_self") -> pd.Series:
        """Per-frame labels at 25 fps, indexed by frame time in seconds."""
        with self._open(session) as f:
            if "labels" not in f or target not in f["labels"]:
                have = sorted(f["labels"]) if "labels" in f else []
                raise StoreError(
                    f"{self.shard_path(session)} has no labels {target!r} (it has: {have or 'none'}); "
                    "add them with `featurestore labels DIR --target NAME`"
                )
            y = f["labels"][target][()]
            fps = float(f.attrs.get("fps", LABEL_FPS))
        return pd.Series(y, index=pd.Index(np.arange(len(y)) / fps, name="time"), name=target)

    def sessions(self) -> pd.DataFrame:
        """One row per shard: session, listener, story, speaker, split, n_frames, channels, targets."""
        rows = []
        for s in self.list_sessions():
            with self._open(s) as f:
                m = _meta_from_attrs(f, self.shard_path(s))
                chans = [f"{r}/{c}" for r in ROLES if r in f for c in f[r]]
                targets = sorted(f["labels"]) if "labels" in f else []
            rows.append(
                {
                    "session": s,
                    "listener": m.listener,
                    "story": m.story,
                    "speaker": m.speaker,
                    "split": m.split,
                    "n_frames": m.n_frames,
                    "channels": chans,
                    "targets": targets,
                }
            )
        cols = ["session", "listener", "story", "speaker", "split", "n_frames", "channels", "targets"]
        return pd.DataFrame(rows, columns=cols)

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
        labels = dict(labels or {})
        for k in channels:
            _channel_key(k)
        final = self.shard_path(meta.session)
        tmp = final.with_name(f".{final.name}{_TMP_MARK}{os.getpid()}-{uuid.uuid4().hex[:8]}")
        try:
            if final.exists():
                shutil.copyfile(final, tmp)
            with h5py.File(tmp, "a") as f:
                old = f.attrs.get("schema_version")
                if old is not None and int(old) != SCHEMA_VERSION:
                    raise StoreError(
                        f"{final} has schema version {int(old)}, this tool writes {SCHEMA_VERSION}; "
                        "move it aside and rebuild it with `featurestore extract`"
                    )
                f.attrs["session"] = meta.session
                f.attrs["listener"] = int(meta.listener)
                f.attrs["story"] = int(meta.story)
                f.attrs["speaker"] = int(meta.speaker)
                f.attrs["split"] = str(meta.split)
                f.attrs["fps"] = float(meta.fps)
                f.attrs["n_frames"] = int(meta.n_frames)
                f.attrs["schema_version"] = SCHEMA_VERSION
                for key in drop:
                    role, name = _channel_key(key)
                    if role in f and name in f[role]:
                        del f[role][name]
                # channels with their own rows first: the others link to their datasets
                for key, ch in sorted(channels.items(), key=lambda kv: kv[1].shared_with is not None):
                    role, name = _channel_key(key)
                    holder = channels.get(ch.shared_with) if ch.shared_with is not None else None
                    if holder is not None and holder.shared_with is not None:
                        raise StoreError(
                            f"{meta.session}: channel {key} shares the rows of {ch.shared_with}, which itself "
                            "shares another channel's; name the channel that holds the rows"
                        )
                    shared = _shared_target(f, meta.session, key, ch, channels) if ch.shared_with is not None else None
                    _write_channel(f.require_group(role), name, ch, shared)
                if labels:
                    grp = f.require_group("labels")
                    for target, y in labels.items():
                        y = np.asarray(y, dtype=np.float32).reshape(-1)
                        if len(y) != meta.n_frames:
                            raise StoreError(
                                f"labels {target!r} of {meta.session} have {len(y)} rows, "
                                f"the session has {meta.n_frames} frames"
                            )
                        if target in grp:
                            del grp[target]
                        ds = grp.create_dataset(target, data=y)
                        ds.attrs["source"] = json.dumps((label_sources or {}).get(target, {}), default=str)
                        ds.attrs["created_utc"] = utc_now()
                if "labels" in f:
                    for target in f["labels"]:
                        if len(f["labels"][target]) != meta.n_frames:
                            raise StoreError(
                                f"{meta.session}: stored labels {target!r} have {len(f['labels'][target])} "
                                f"rows but the session now has {meta.n_frames} frames"
                            )
            with open(tmp, "rb+") as fh:
                os.fsync(fh.fileno())
            os.replace(tmp, final)
            _fsync_dir(final.parent)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return final

    # ---------------------------------------------------------------- verify
    def verify(self, current_versions: Mapping[str, str] | None = None, check_sources: bool = True) -> list[Problem]:
        """Check every shard; returns the problems found (an empty list means all good).

        Checks: the file opens; root attributes and schema version; per channel, data, time
        and valid have one row each and as many columns as names, times are finite,
        non-decreasing and inside the session; labels have ``n_frames`` rows; the stored cache
        key matches its provenance; the extractor version is the current one
        (``current_versions``: extractor name -> version); the source file, where it still
        exists, has the fingerprint the channel was computed from. Leftover temporary files of
        a killed writer are not problems (shards are never partial); see :meth:`temp_files`.
        """
        problems: list[Problem] = []
        sessions = self.list_sessions()
        if not sessions:
            problems.append(Problem(str(self.root), "no shards found", "run `featurestore extract` or `make features`"))
        fp_cache: dict[str, dict] = {}
        for s in sessions:
            path = self.shard_path(s)
            try:
                f = h5py.File(path, "r")
            except OSError as e:
                problems.append(Problem(s, f"{path.name} is not readable HDF5 ({e})", "delete it and re-run `featurestore extract`"))
                continue
            with f:
                problems.extend(_verify_shard(s, f, current_versions or {}, check_sources, fp_cache))
        return problems


def _meta_from_attrs(f: h5py.File, path: Path) -> SessionMeta:
    a = f.attrs
    missing = [k for k in ("session", "listener", "story", "n_frames", "schema_version") if k not in a]
    if missing:
        raise StoreError(f"{path} lacks root attributes {missing}; rebuild it with `featurestore extract --force`")
    return SessionMeta(
        session=str(a["session"]),
        listener=int(a["listener"]),
        story=int(a["story"]),
        speaker=int(a.get("speaker", 0)),
        split=str(a.get("split", "")),
        n_frames=int(a["n_frames"]),
        fps=float(a.get("fps", LABEL_FPS)),
    )


def _verify_shard(s: str, f: h5py.File, versions: Mapping[str, str], check_sources: bool, fp_cache: dict) -> list[Problem]:
    out: list[Problem] = []
    try:
        meta = _meta_from_attrs(f, Path(f.filename))
    except StoreError as e:
        return [Problem(s, str(e))]
    if int(f.attrs["schema_version"]) != SCHEMA_VERSION:
        out.append(Problem(s, f"schema version {int(f.attrs['schema_version'])}, expected {SCHEMA_VERSION}", "move the file aside and re-run `featurestore extract` to rebuild it"))
    duration = meta.n_frames / meta.fps
    for role in ROLES:
        if role not in f:
            continue
        for name in f[role]:
            key = f"{role}/{name}"
            grp = f[role][name]
            try:
                shapes = [grp[d].shape for d in ("data", "time", "valid")]
            except KeyError as e:
                out.append(Problem(s, f"{key}: missing dataset ({e})", "re-run `featurestore extract --force`"))
                continue
            if not (shapes[0][:1] == shapes[1] == shapes[2]):
                out.append(Problem(s, f"{key}: {shapes[0][0]} data rows, {shapes[1][0]} times, {shapes[2][0]} valid flags", "re-run `featurestore extract --force`"))
                continue
            try:
                ch = _read_channel(grp)
            except Exception as e:  # noqa: BLE001 - any read failure is a finding
                out.append(Problem(s, f"{key} unreadable ({e})", "re-run `featurestore extract --force`"))
                continue
            n = ch.data.shape[0]
            if ch.data.shape[1] != len(ch.columns):
                out.append(Problem(s, f"{key}: {ch.data.shape[1]} columns but {len(ch.columns)} names"))
            if n:
                if not np.all(np.isfinite(ch.time)):
                    out.append(Problem(s, f"{key}: non-finite time stamps"))
                elif np.any(np.diff(ch.time) < 0):
                    out.append(Problem(s, f"{key}: time stamps go backwards"))
                elif ch.time[0] < -1e-6 or ch.time[-1] > duration + 1.0:
                    out.append(Problem(s, f"{key}: times {ch.time[0]:.2f}-{ch.time[-1]:.2f} s outside the session (0-{duration:.2f} s)"))
                bad = ch.valid & ~np.all(np.isfinite(ch.data), axis=1)
                if bad.any():
                    out.append(Problem(s, f"{key}: {int(bad.sum())} rows marked valid hold NaN/inf"))
            if ch.cache_key and ch.source:
                src = ch.source
                upstream = src.get("upstream")
                expect = cache_key(upstream if upstream is not None else src, ch.extractor, ch.extractor_version, ch.params)
                if expect != ch.cache_key:
                    out.append(Problem(s, f"{key}: cache key does not match its provenance", "re-run `featurestore extract --force`"))
            want = versions.get(ch.extractor)
            if want is not None and want != ch.extractor_version:
                out.append(Problem(s, f"{key}: made by {ch.extractor} {ch.extractor_version}, current is {want}", "re-run `featurestore extract`"))
            if check_sources and ch.source.get("path") and ch.source.get("fingerprint"):
                sp = ch.source["path"]
                if Path(sp).exists():
                    if sp not in fp_cache:
                        fp_cache[sp] = file_fingerprint(sp)
                    if fp_cache[sp]["fingerprint"] != ch.source["fingerprint"]:
                        out.append(Problem(s, f"{key}: source {sp} changed since extraction", "re-run `featurestore extract`"))
    if "labels" in f:
        for t in f["labels"]:
            if len(f["labels"][t]) != meta.n_frames:
                out.append(Problem(s, f"labels/{t}: {len(f['labels'][t])} rows, session has {meta.n_frames} frames"))
    return out
