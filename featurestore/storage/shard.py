"""One shard's HDF5 layout (a contract: docs/design.md#shard-layout; docs/store.md draws it):
its types, the :class:`ShardReader` of an open shard and the writers of attributes, channels
and labels. It never opens, copies or renames a file (the store's job, with the atomic replace).

>>> split_key("listener/face_geom")
('listener', 'face_geom')
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pandas as pd

from ..errors import nearest
from ..features import Features
from . import checksums
from .checksums import OUTSIDE_FIX, outside_parts, read_rows
from .errors import MissingChannelError, StoreError
from .layouts import DEFAULT_LAYOUT, CorpusLayout, layout_of
from .provenance import utc_now
from .roles import STORE_ROLES

#: 2: every dataset carries its SHA-256 (:mod:`featurestore.storage.checksums`); 1: none
SCHEMA_VERSION = 2
#: shard schema versions this tool reads (it writes :data:`SCHEMA_VERSION` only)
READABLE_SCHEMAS = range(1, SCHEMA_VERSION + 1)
LABEL_FPS = 25.0
#: HDF5 storage of ``data`` datasets: uncompressed and contiguous (docs/store.md, no compression)
DATA_STORAGE: dict = {}
#: what adds a missing channel, unless :data:`CHANNEL_HINTS` names its own way in
DEFAULT_HINT = "compute it with `featurestore extract` (or add it with `featurestore import`)"
#: channel -> the command that adds it, for the channels with their own way in; filled by the
#: extractor registry (:func:`featurestore.extractors.base.register`), as storage knows no extractor
CHANNEL_HINTS: dict[str, str] = {}


@dataclass
class Channel(Features):
    """Features plus the provenance stored with them (docs/store.md, layout).

    ``shared_with``: the ``role/channel`` whose ``data`` and ``time`` these are exactly (written
    in the same call or already stored), stored once as hard links (None when read back).
    ``lookahead_s``: seconds after a row's ``time`` that its values read of the source; None
    when the writer does not know it.
    """

    extractor: str = ""
    extractor_version: str = ""
    params: dict = field(default_factory=dict)
    cache_key: str = ""
    source: dict = field(default_factory=dict)
    created_utc: str = ""
    shared_with: str | None = None
    lookahead_s: float | None = None

    @classmethod
    def from_features(cls, feats: Features, **provenance: Any) -> Channel:
        """``feats`` with the provenance fields given by name."""
        return cls(feats.data, feats.time, feats.valid, feats.columns, **provenance)

    def to_frame(self) -> pd.DataFrame:
        """DataFrame indexed by time (s) with one column per feature plus ``valid``."""
        df = pd.DataFrame(self.data, columns=self.columns, index=pd.Index(self.time, name="time"))
        df["valid"] = self.valid
        return df


@dataclass(frozen=True)
class SessionMeta:
    """Root attributes of a shard: the name of its corpus ``layout`` (:attr:`corpus_layout`;
    a listed layout's ids as written are ``person``, ``group``, ``partner``, and ``listener``,
    ``story`` and ``speaker`` are their integers) and its ``fold``."""

    session: str
    listener: int
    story: int
    speaker: int
    split: str
    n_frames: int
    fps: float = LABEL_FPS
    layout: str = DEFAULT_LAYOUT.name
    person: str = ""
    group: str = ""
    partner: str = ""
    fold: str = ""

    @property
    def corpus_layout(self) -> CorpusLayout:
        """The shard's corpus layout (:mod:`featurestore.storage.layouts`).

        >>> SessionMeta("s1", 1, 1, 0, "train", 10, layout="manifest").corpus_layout.words.listener
        'person'
        """
        return layout_of(self.layout)

    @property
    def role_names(self) -> dict[str, str]:
        """Store role -> the layout's word for it."""
        return self.corpus_layout.role_names


@dataclass
class SessionData:
    """Channels (``role/channel`` -> :class:`~featurestore.features.Features`, or :class:`Channel`
    with provenance) and the (n_frames,) float32 labels of ``target`` (None: none asked for) of a
    session, read in one open; hard-linked rows are shared arrays."""

    meta: SessionMeta
    channels: dict[str, Features]
    labels: np.ndarray | None = None
    target: str | None = None


@dataclass(frozen=True)
class ChannelTiming:
    """A stored channel without its data: ``time`` (n,) seconds, ``valid`` (n,) bool, what wrote
    it and its recorded ``lookahead_s`` (seconds; None when the shard records none)."""

    time: np.ndarray
    valid: np.ndarray
    extractor: str
    extractor_version: str
    params: dict
    lookahead_s: float | None


def split_key(key: str) -> tuple[str, str]:
    """(role, channel) of a ``role/channel`` key; :class:`StoreError` when it is not one."""
    parts = key.strip("/").split("/")
    if len(parts) != 2 or parts[0] not in STORE_ROLES or not parts[1]:
        raise StoreError(
            f"channel {key!r} is not of the form ROLE/CHANNEL with ROLE in {STORE_ROLES}"
        )
    return parts[0], parts[1]


def how_to_add(keys: Sequence[str]) -> str:
    """The command that adds the channels ``keys`` to a store: the first with its own way in
    (:data:`CHANNEL_HINTS`, e.g. a transcript's), else :data:`DEFAULT_HINT`."""
    names = (k.split("/")[-1] for k in keys)
    return next((CHANNEL_HINTS[c] for c in names if c in CHANNEL_HINTS), DEFAULT_HINT)


class ShardReader:
    """Reads the layout of one open shard ``f`` (at ``path``, named in every error)."""

    def __init__(self, f: h5py.File, path: Path) -> None:
        self.file = f
        self.path = Path(path)
        self._meta: SessionMeta | None = None

    @property
    def session(self) -> str:
        return self.path.stem

    @property
    def meta(self) -> SessionMeta:
        """The root attributes; :class:`StoreError` when some are missing."""
        if self._meta is None:
            a = self.file.attrs
            required = ("session", "listener", "story", "n_frames", "schema_version")
            missing = [k for k in required if k not in a]
            if missing:
                raise StoreError(
                    f"{self.path} lacks root attributes {missing}; rebuild it with `featurestore extract --force`"
                )
            self._meta = SessionMeta(
                session=str(a["session"]),
                listener=int(a["listener"]),
                story=int(a["story"]),
                speaker=int(a.get("speaker", 0)),
                split=str(a.get("split", "")),
                n_frames=int(a["n_frames"]),
                fps=float(a.get("fps", LABEL_FPS)),
                layout=str(a.get("layout", DEFAULT_LAYOUT.name)),
                person=str(a.get("person_id", "")),
                group=str(a.get("group_id", "")),
                partner=str(a.get("partner_id", "")),
                fold=str(a.get("fold", "")),
            )
        return self._meta

    def check_schema(self, write: bool = False) -> None:
        """:class:`StoreError` unless this tool reads the shard's schema version (``write``:
        also one it cannot upgrade to :data:`SCHEMA_VERSION` when writing, see :func:`upgrade`)."""
        version = self.file.attrs.get("schema_version")
        if version is None or int(version) not in READABLE_SCHEMAS:
            has = "no schema version" if version is None else f"schema version {int(version)}"
            readable = ", ".join(str(v) for v in READABLE_SCHEMAS)
            fix = (
                "; it was left as it is: move it aside (keep it if you need its channels) and "
                "re-run `featurestore extract` to rebuild it"
                if write
                else ". Move it aside and rebuild it with `featurestore extract` "
                "(check the store with `featurestore verify`)"
            )
            raise StoreError(
                f"{self.path} has {has}; this tool reads and writes schema version {readable}{fix}"
            )

    def check_self_contained(self) -> None:
        """:class:`StoreError` naming the first part of the shard that a read would take from
        another file (:func:`outside_parts`); call it before reading anything else."""
        if parts := outside_parts(self.file):
            more = f" (and {len(parts) - 1} more)" if len(parts) > 1 else ""
            listed = "`featurestore verify` lists every such part"
            raise StoreError(f"{self.path}: {parts[0]}{more}; {OUTSIDE_FIX} ({listed})")

    # ---------------------------------------------------------------- channels
    def channel_keys(self) -> list[str]:
        """``role/channel`` keys stored, role by role in :data:`~.roles.STORE_ROLES` order."""
        f = self.file
        return [
            f"{r}/{c}"
            for r in STORE_ROLES
            if r in f
            for c in f[r]
            if isinstance(f[r][c], h5py.Group)
        ]

    def cache_keys(self) -> dict[str, str]:
        """``role/channel`` -> stored cache key."""
        f = self.file
        return {
            f"{r}/{c}": str(f[r][c].attrs.get("cache_key", ""))
            for r in STORE_ROLES
            if r in f
            for c in f[r]
        }

    def channel_sources(self) -> dict[str, dict]:
        """``role/channel`` -> the source recorded with it (path, size, content fingerprint)."""
        return {k: json.loads(self.file[k].attrs.get("source", "{}")) for k in self.channel_keys()}

    def extractor(self, key: str) -> dict[str, Any]:
        """What computed channel ``role/channel``: its ``extractor``, ``version`` and ``params``."""
        self.require_channels([key])
        a = self.file[key].attrs
        return {
            "extractor": str(a.get("extractor", "")),
            "version": str(a.get("extractor_version", "")),
            "params": json.loads(a.get("params", "{}")),
        }

    def has_channel(self, key: str) -> bool:
        """The shard holds channel ``role/channel`` (a group with ``data``)."""
        role, name = split_key(key)
        grp = self.file[role][name] if role in self.file and name in self.file[role] else None
        return isinstance(grp, h5py.Group) and "data" in grp

    def require_channels(self, keys: Sequence[str]) -> None:
        """:class:`MissingChannelError` naming the missing ones, what the shard has and how to add them."""
        missing = [k for k in keys if not self.has_channel(k)]
        if missing:
            have = ", ".join(self.channel_keys()) or "none"
            raise MissingChannelError(
                f"session {self.session} has no channel {', '.join(missing)} in {self.path} "
                f"(it has: {have}); {how_to_add(missing)}",
                missing,
            )

    def channel(self, key: str) -> Channel:
        """The stored :class:`Channel` ``role/channel`` with its provenance."""
        self.require_channels([key])
        return read_channel_group(self.file[key], self.path)

    def timing(self, key: str) -> ChannelTiming:
        """The :class:`ChannelTiming` of ``role/channel`` (its ``data`` is not read)."""
        self.require_channels([key])
        g = self.file[key]
        a = g.attrs
        return ChannelTiming(
            time=np.asarray(read_rows(g["time"], self.path), dtype=np.float64),
            valid=np.asarray(read_rows(g["valid"], self.path), dtype=bool),
            extractor=str(a.get("extractor", "")),
            extractor_version=str(a.get("extractor_version", "")),
            params=json.loads(a.get("params", "{}")),
            lookahead_s=recorded_lookahead(a),
        )

    # ------------------------------------------------------------------ labels
    def label_targets(self) -> list[str]:
        """The label targets stored, sorted."""
        return sorted(self.file["labels"]) if "labels" in self.file else []

    def label_sources(self) -> dict[str, dict]:
        """Label target -> the source (annotation file fingerprint) recorded with it; a rater's
        trace under ``target@rater`` (a rated target's own source maps rater -> source)."""
        f = self.file
        names = {t: f"labels/{t}" for t in self.label_targets()}
        names.update(
            {f"{t}@{r}": f"raters/{t}/{r}" for t in f.get("raters", {}) for r in f["raters"][t]}
        )
        return {key: json.loads(f[name].attrs.get("source", "{}")) for key, name in names.items()}

    def labels(self, target: str) -> np.ndarray:
        """(n_frames,) float32 labels of ``target``; :class:`StoreError` when absent."""
        f = self.file
        if "labels" not in f or target not in f["labels"]:
            targets = self.label_targets()
            near = nearest(target, targets)
            fix = (
                f"did you mean {near!r}?"
                if near
                else f"to add a rating as this target: `featurestore labels ANNOTATION_DIR --target {target}`"
            )
            raise StoreError(
                f"session {self.session} has no labels {target!r} in {self.path} "
                f"(it has: {', '.join(targets) or 'none'}); {fix}"
            )
        return read_rows(f["labels"][target], self.path).astype(np.float32).reshape(-1)

    def raters(self, target: str) -> list[str]:
        """The raters stored for ``target`` (``/raters/<target>``), sorted; empty when none."""
        f = self.file
        return sorted(f["raters"][target]) if "raters" in f and target in f["raters"] else []

    def rater_labels(self, target: str, rater: str) -> np.ndarray:
        """(n_frames,) float32 trace of one ``rater`` of ``target`` (NaN where not rated);
        :class:`StoreError` naming the raters there are when absent."""
        have = self.raters(target)
        if rater not in have:
            raise StoreError(
                f"session {self.session} has no rater {rater!r} of {target!r} in {self.path} "
                f"(raters: {', '.join(have) or 'none'}); per-rater labels come from manifest "
                f"columns label_{target}@<rater>"
            )
        ds = self.file["raters"][target][rater]
        return read_rows(ds, self.path).astype(np.float32).reshape(-1)

    # ----------------------------------------------------- several channels at once
    def read(
        self, keys: Sequence[str], target: str | None = None, provenance: bool = False
    ) -> SessionData:
        """Channels ``keys`` and the labels of ``target`` (None: no labels), checked first; a
        hard-linked dataset is read once. ``provenance``: :class:`Channel` objects, else plain
        :class:`Features`. Every :class:`StoreError` names the shard (a missing channel: a
        :class:`MissingChannelError` with the command that adds it)."""
        self.check_schema()
        meta = self.meta
        keys = list(keys)
        self.require_channels(keys)
        y = None
        if target is not None:
            y = self.labels(target)
            if y.shape[0] != meta.n_frames:
                raise StoreError(
                    f"session {self.session}: labels {target!r} have {y.shape[0]} rows but the session has "
                    f"{meta.n_frames} frames; re-add them with `featurestore labels DIR --target {target}`"
                )
        arrays: dict[h5py.h5d.DatasetID, np.ndarray] = {}

        def once(ds: h5py.Dataset) -> np.ndarray:
            if ds.id not in arrays:
                arrays[ds.id] = read_rows(ds, self.path)
            return arrays[ds.id]

        channels: dict[str, Features] = {}
        for key in keys:
            ch = read_channel_group(self.file[key], self.path, once)
            channels[key] = ch if provenance else Features(ch.data, ch.time, ch.valid, ch.columns)
        return SessionData(meta, channels, y, target)


def read_channel_group(
    grp: h5py.Group, path: Path | None = None, read: Callable[[Any], np.ndarray] | None = None
) -> Channel:
    """The :class:`Channel` of one channel group, with provenance (``read(dataset)`` reads data/time)."""
    a = grp.attrs
    read = read if read is not None else (lambda ds: read_rows(ds, path))
    try:
        return Channel(
            data=read(grp["data"]),
            time=read(grp["time"]),
            valid=read_rows(grp["valid"], path),
            columns=[str(c) for c in json.loads(a["columns"])],
            extractor=str(a.get("extractor", "")),
            extractor_version=str(a.get("extractor_version", "")),
            params=json.loads(a.get("params", "{}")),
            cache_key=str(a.get("cache_key", "")),
            source=json.loads(a.get("source", "{}")),
            created_utc=str(a.get("created_utc", "")),
            lookahead_s=recorded_lookahead(a),
        )
    except ValueError as e:  # column names and data disagree
        raise StoreError(
            f"{path or grp.file.filename}: {grp.name.strip('/')}: {e}; run `featurestore verify`"
        ) from e


def recorded_lookahead(attrs: Mapping) -> float | None:
    """A channel group's ``lookahead_s`` attribute in seconds; None when it has none."""
    value = attrs.get("lookahead_s")
    return None if value is None else float(value)


# ----------------------------------------------------------------------- writing
def write_meta(f: h5py.File, meta: SessionMeta) -> None:
    """The root attributes of ``meta`` and the current :data:`SCHEMA_VERSION`."""
    f.attrs["session"] = meta.session
    f.attrs["listener"] = int(meta.listener)
    f.attrs["story"] = int(meta.story)
    f.attrs["speaker"] = int(meta.speaker)
    f.attrs["split"] = str(meta.split)
    f.attrs["fps"] = float(meta.fps)
    f.attrs["n_frames"] = int(meta.n_frames)
    upgrade(f)
    f.attrs["layout"] = str(meta.layout)
    f.attrs["role_names"] = meta.corpus_layout.role_names_json()
    m = meta
    ids = {"person_id": m.person, "group_id": m.group, "partner_id": m.partner, "fold": m.fold}
    for name, value in ids.items():
        if value:
            f.attrs[name] = str(value)
        elif name in f.attrs:
            del f.attrs[name]


def upgrade(f: h5py.File) -> None:
    """Bring a shard being written to :data:`SCHEMA_VERSION`: from version 1, each dataset
    without a checksum gets that of its rows as they are (what a version-1 shard cannot prove;
    `featurestore extract --force` recomputes them)."""
    version = f.attrs.get("schema_version")
    if version is not None and int(version) < checksums.FIRST_CHECKED_SCHEMA:
        checksums.stamp_unchecked(f)
    f.attrs["schema_version"] = SCHEMA_VERSION


def write_channel(
    parent: h5py.Group, name: str, ch: Channel, shared: h5py.Group | None = None
) -> None:
    """Write one channel group; with ``shared``, ``data`` and ``time`` are hard links to its datasets."""
    if name in parent:
        del parent[name]
    grp = parent.create_group(name)
    if shared is None:
        checksums.create(grp, "data", ch.data, **DATA_STORAGE)
        checksums.create(grp, "time", ch.time)
    else:
        grp["data"] = shared["data"]  # assigning a dataset object makes a hard link
        grp["time"] = shared["time"]
        grp.attrs["shared_with"] = shared.name.strip("/")
    checksums.create(grp, "valid", ch.valid)
    grp.attrs["columns"] = json.dumps(ch.columns)
    grp.attrs["extractor"] = ch.extractor
    grp.attrs["extractor_version"] = ch.extractor_version
    grp.attrs["params"] = json.dumps(ch.params, sort_keys=True, default=str)
    grp.attrs["cache_key"] = ch.cache_key
    grp.attrs["source"] = json.dumps(ch.source, sort_keys=True, default=str)
    grp.attrs["created_utc"] = ch.created_utc or utc_now()
    if ch.lookahead_s is not None:  # an unknown look-ahead is no attribute
        grp.attrs["lookahead_s"] = float(ch.lookahead_s)


def write_channels(f: h5py.File, session: str, channels: Mapping[str, Channel]) -> None:
    """Write ``channels`` into ``f``: those with their own rows first, then those that link to them."""
    for key, ch in sorted(channels.items(), key=lambda kv: kv[1].shared_with is not None):
        role, name = split_key(key)
        holder = channels.get(ch.shared_with) if ch.shared_with is not None else None
        if holder is not None and holder.shared_with is not None:
            raise StoreError(
                f"{session}: channel {key} shares the rows of {ch.shared_with}, which itself "
                "shares another channel's; name the channel that holds the rows"
            )
        shared = None if ch.shared_with is None else _shared_target(f, session, key, ch, channels)
        write_channel(f.require_group(role), name, ch, shared)


def _same_rows(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal shape and values (NaN equal to NaN); the same memory is equal without a scan."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a is b or (
        a.__array_interface__["data"] == b.__array_interface__["data"] and a.strides == b.strides
    ):
        return True
    return bool(np.array_equal(a, b, equal_nan=np.issubdtype(a.dtype, np.floating)))


def _shared_target(
    f: h5py.File, session: str, key: str, ch: Channel, channels: Mapping[str, Channel]
) -> h5py.Group:
    """The group ``ch.shared_with`` whose rows ``key`` links to, checked equal."""
    target = str(ch.shared_with)
    role, name = split_key(target)
    if target == key:
        raise StoreError(
            f"{session}: channel {key} cannot share its rows with itself; set shared_with=None"
        )
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
        shapes = ch.data.shape == grp["data"].shape and ch.time.shape == grp["time"].shape
        same = shapes and all(_same_rows(getattr(ch, d), grp[d][()]) for d in ("data", "time"))
    if not same:
        raise StoreError(
            f"{session}: channel {key} says its data and time are {target}'s (shared_with), but they differ; "
            "set shared_with=None to store its own copy"
        )
    return grp


def write_labels(
    f: h5py.File, meta: SessionMeta, labels: Mapping[str, np.ndarray], sources: Mapping[str, dict]
) -> None:
    """Add or replace label targets, then check every stored one has ``meta.n_frames`` rows. A
    key ``target@rater`` is one rater's trace, and ``/labels/<target>`` becomes the raters' mean
    (docs/store.md, layout); a plain ``target`` replaces its labels and drops its raters."""
    plain: dict[str, np.ndarray] = {}
    rated: dict[str, dict[str, np.ndarray]] = {}
    for key, y in labels.items():
        target, sep, rater = key.partition("@")
        y = np.asarray(y, dtype=np.float32).reshape(-1)
        if len(y) != meta.n_frames:
            raise StoreError(
                f"labels {key!r} of {meta.session} have {len(y)} rows, the session has {meta.n_frames} frames"
            )
        if sep:
            rated.setdefault(target, {})[rater] = y
        else:
            plain[target] = y
    both = sorted(set(plain) & set(rated))
    if both:
        raise StoreError(
            f"{meta.session}: labels {both[0]!r} given both as one file and per rater; give one of them"
        )
    for target, y in plain.items():
        if "raters" in f and target in f["raters"]:
            del f["raters"][target]
        _write_label(f.require_group("labels"), target, y, sources.get(target, {}))
    for target, by_rater in rated.items():
        grp = f.require_group("raters").require_group(target)
        for rater, y in by_rater.items():
            _write_label(grp, rater, y, sources.get(f"{target}@{rater}", {}))
        raters = sorted(grp)
        stack = np.stack([read_rows(grp[r]).astype(np.float64) for r in raters])
        with np.errstate(all="ignore"):
            counts = np.sum(~np.isnan(stack), axis=0)
            mean = np.where(counts > 0, np.nansum(stack, axis=0) / np.maximum(counts, 1), np.nan)
        src = {r: json.loads(grp[r].attrs.get("source", "{}")) for r in raters}
        ds = _write_label(f.require_group("labels"), target, mean, src)
        ds.attrs["raters"] = json.dumps(raters)
        ds.attrs["gold_standard"] = "mean"
    for name in [n for n in ("labels", "raters") if n in f]:
        for path, ds in _datasets(f[name]):
            if len(ds) != meta.n_frames:
                raise StoreError(
                    f"{meta.session}: stored {name} {path!r} have {len(ds)} "
                    f"rows but the session now has {meta.n_frames} frames"
                )


def _write_label(grp: h5py.Group, name: str, y: np.ndarray, source: dict) -> h5py.Dataset:
    if name in grp:
        del grp[name]
    ds = checksums.create(grp, name, np.asarray(y, dtype=np.float32))
    ds.attrs["source"] = json.dumps(source, default=str)
    ds.attrs["created_utc"] = utc_now()
    return ds


def _datasets(grp: h5py.Group) -> list[tuple[str, h5py.Dataset]]:
    """(path under ``grp``, dataset) of every dataset below ``grp``."""
    out: list[tuple[str, h5py.Dataset]] = []
    grp.visititems(
        lambda name, obj: out.append((name, obj)) if isinstance(obj, h5py.Dataset) else None
    )
    return out
