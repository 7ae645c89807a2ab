"""Per-session frame tables at the label rate: every channel onto the label frames' instants ``t_i = i / fps``. A
channel at that rate or slower is interpolated between valid samples, never across a gap over ``max_gap_s`` (else the
nearest valid sample within half a sample period); a faster one averaged over the valid samples within half a frame
period. Missing values are NaN in ``X``; ``valid`` says per channel whether a frame had source data."""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import cache, partial
from typing import NamedTuple

import numpy as np
from scipy.sparse import csr_matrix

from featurestore.features import Features
from featurestore.storage.shard import ShardReader, read_channel_group
from featurestore.storage.store import LABEL_FPS, MissingChannelError, Store, StoreError

from ..errors import ExperimentsError
from .frames_cache import EntryKey, FramesCache, code_version
from .gold_standard import GoldStandard, gold_standards
from .session_table import SessionTable

log = logging.getLogger(__name__)

#: interpolation never bridges a gap between valid samples longer than this (seconds)
MAX_GAP_S = 0.5


class DatasetError(ExperimentsError, RuntimeError):
    """A session lacks a channel or a label target, or its arrays disagree; names both and the fix."""


def resample_channel(
    data: np.ndarray,
    time: np.ndarray,
    valid: np.ndarray,
    n_frames: int,
    fps: float = LABEL_FPS,
    max_gap_s: float = MAX_GAP_S,
) -> tuple[np.ndarray, np.ndarray]:
    """One channel's (n, d) samples at ``time`` (seconds) on the label frames ``i < n_frames``: (X, ok), the
    (n_frames, d) float32 values (NaN without source data) and whether each frame had valid samples."""
    data = np.asarray(data, dtype=np.float32)
    if data.ndim == 1:
        data = data[:, None]
    order, time, valid, step = _sampling(time, valid, fps)
    if order is not None:
        data = data[order]
    d = data.shape[1]
    tv, dv = time[valid], data[valid]
    if tv.size == 0 or n_frames == 0:
        return np.full((n_frames, d), np.nan, np.float32), np.zeros(n_frames, bool)
    if _pooled(step, fps):
        return _pool(dv, tv, n_frames, fps)
    return _interpolate(dv, tv, n_frames, fps, max_gap_s, hold_s=_hold_s(step, fps))


def resampling_lookahead_s(
    time: np.ndarray,
    valid: np.ndarray,
    n_frames: int,
    fps: float = LABEL_FPS,
    max_gap_s: float = MAX_GAP_S,
) -> float:
    """The most seconds after a label frame's instant that :func:`resample_channel` reads of a channel's samples
    (worked out from the same steps, counting only samples of nonzero weight); ``-inf`` when it computes none."""
    _, time, valid, step = _sampling(time, valid, fps)
    tv = time[valid]
    if tv.size == 0 or n_frames == 0:
        return -math.inf
    if _pooled(step, fps):
        frame = _pool_frames(tv, fps)
        keep = (frame >= 0) & (frame < n_frames)
        return float(np.max(tv[keep] - frame[keep] / fps)) if keep.any() else -math.inf
    t = np.arange(n_frames) / fps
    plan = _interpolation_plan(tv, n_frames, fps, max_gap_s, _hold_s(step, fps))
    right = (plan.inside & (plan.w > 0)) | plan.use_r  # the frame weighs the later sample
    left = ~right & (plan.inside | plan.use_l)  # only the earlier one
    read = np.where(right, tv[plan.jr], tv[plan.jl])
    ok = right | left
    return float(np.max(read[ok] - t[ok])) if ok.any() else -math.inf


def _sampling(
    time: np.ndarray, valid: np.ndarray, fps: float
) -> tuple[np.ndarray | None, np.ndarray, np.ndarray, float]:
    """(order, time, valid, step): the samples sorted by time (``order`` None when they were), their median step."""
    time = np.asarray(time, dtype=np.float64)
    valid = np.asarray(valid, dtype=bool)
    dt = np.diff(time)
    order = None
    if dt.size and dt.min() < 0:
        order = np.argsort(time, kind="stable")
        time, valid = time[order], valid[order]
        dt = np.diff(time)
    step = float(np.median(dt)) if dt.size else 1.0 / fps
    return order, time, valid, step


def _pooled(step: float, fps: float) -> bool:
    """A channel sampled this often (``step`` seconds) is pooled, not interpolated."""
    return step < 0.75 / fps


def _hold_s(step: float, fps: float) -> float:
    """How far (seconds) a frame outside an interpolation span takes the nearest sample."""
    return max(step, 1.0 / fps) / 2


def _pool_frames(tv: np.ndarray, fps: float) -> np.ndarray:
    """The label frame each sample time ``tv`` (seconds) is pooled into: the nearest one."""
    return np.floor(tv * fps + 0.5).astype(np.int64)


def _pool(
    dv: np.ndarray, tv: np.ndarray, n_frames: int, fps: float
) -> tuple[np.ndarray, np.ndarray]:
    """Mean of the samples nearest to each frame (within half a frame period), NaN-aware."""
    frame = _pool_frames(tv, fps)
    keep = (frame >= 0) & (frame < n_frames)
    if not keep.all():
        frame, dv = frame[keep], dv[keep]
    # a sparse frames x samples 0/1 matrix sums each frame's samples in one product;
    # times are sorted, so each frame's samples are one contiguous run of columns
    indptr = np.searchsorted(frame, np.arange(n_frames + 1), side="left")
    # float32 is exact enough here: each frame averages a handful of samples
    ones = np.ones(frame.size, dtype=np.float32)
    A = csr_matrix((ones, np.arange(frame.size), indptr), shape=(n_frames, frame.size))
    finite = np.isfinite(dv)
    if finite.all():
        sums = A @ dv
        counts = np.diff(indptr).astype(np.float32)[:, None]
    else:
        sums = A @ np.where(finite, dv, np.float32(0))
        counts = A @ finite.astype(np.float32)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.asarray(sums / counts, dtype=np.float32)  # 0/0 -> NaN where a frame has no value
    return out, np.diff(indptr) > 0


class _Plan(NamedTuple):
    """Which valid samples each label frame takes (:func:`_interpolation_plan`)."""

    jl: np.ndarray  # (n_frames,) the last valid sample at or before the frame
    jr: np.ndarray  # the one after it
    w: np.ndarray  # the weight of ``jr`` inside an interpolation span (0 .. 1)
    inside: np.ndarray  # between two valid samples at most max_gap_s apart
    use_l: np.ndarray  # outside a span: takes ``jl`` (within hold_s)
    use_r: np.ndarray  # outside a span: takes ``jr`` (within hold_s)


def _interpolation_plan(
    tv: np.ndarray, n_frames: int, fps: float, max_gap_s: float, hold_s: float
) -> _Plan:
    """The samples (valid times ``tv``, sorted) and weights each label frame is interpolated from."""
    m = tv.size
    t = np.arange(n_frames) / fps
    j = np.searchsorted(tv, t + 1e-9, side="right") - 1  # last valid sample at or before t
    has_l, has_r = j >= 0, j + 1 < m
    jl, jr = np.clip(j, 0, m - 1), np.clip(j + 1, 0, m - 1)
    tl, tr = tv[jl], tv[jr]
    gap = tr - tl
    inside = has_l & has_r & (gap <= max_gap_s + 1e-9)
    with np.errstate(invalid="ignore", divide="ignore"):
        w = np.where(inside & (gap > 0), (t - tl) / np.where(gap > 0, gap, 1.0), 0.0)
    # outside an interpolation span: the nearest valid sample if it is within hold_s
    dl = np.where(has_l, t - tl, np.inf)
    dr = np.where(has_r, tr - t, np.inf)
    use_l = ~inside & (dl <= hold_s + 1e-9) & (dl <= dr)
    use_r = ~inside & ~use_l & (dr <= hold_s + 1e-9)
    return _Plan(jl, jr, np.clip(w, 0.0, 1.0), inside, use_l, use_r)


def _interpolate(
    dv: np.ndarray, tv: np.ndarray, n_frames: int, fps: float, max_gap_s: float, hold_s: float
) -> tuple[np.ndarray, np.ndarray]:
    """Linear interpolation between valid samples not farther apart than ``max_gap_s``."""
    p = _interpolation_plan(tv, n_frames, fps, max_gap_s, hold_s)
    w = p.w.astype(np.float32)[:, None]
    out = dv[p.jl]
    out *= 1.0 - w
    out += dv[p.jr] * w
    out[p.use_l] = dv[p.jl[p.use_l]]
    out[p.use_r] = dv[p.jr[p.use_r]]
    ok = p.inside | p.use_l | p.use_r
    out[~ok] = np.nan
    return out, ok


def load_sessions(
    store: Store | str | os.PathLike,
    feature_keys: Sequence[str],
    target: str = "valence_self",
    splits: Mapping[str, Sequence[int]] | None = None,
    sessions: Sequence[str] | None = None,
    max_gap_s: float = MAX_GAP_S,
    threads: int = 2,
    cache: bool | str | os.PathLike = True,
    gold_standard: GoldStandard | None = None,
    require_labels: bool = True,
) -> list[SessionTable]:
    """One :class:`SessionTable` of the ``role/channel`` ``feature_keys`` and labels ``target`` per session of the
    store (or ``sessions``), ordered by listener then story.

    ``splits``: split name -> stories (sessions of no split skipped; None or {} keeps the shards' splits);
    ``threads``: sessions loaded at once; ``cache``: the frames cache (True the store's, False none, or a folder);
    ``gold_standard``: None or ``stored`` reads ``/labels/<target>``, ``mean``/``ewe`` combine each session's raters;
    ``require_labels`` False: a session without the target (a blind test's) loads with ``y`` all NaN.
    Raises :class:`DatasetError` when a session lacks a channel or (``require_labels``) the target, or the store holds
    no sessions.
    """
    st = store if isinstance(store, Store) else Store(store)
    names = list(sessions) if sessions is not None else st.list_sessions()
    if not names:
        raise DatasetError(
            f"no sessions in the feature store {st.root}; build it with `featurestore extract` (or `make features`)"
        )
    by_story = {int(s): str(name) for name, stories in (splits or {}).items() for s in stories}
    by = by_story if splits else None
    wanted = _Wanted([str(k) for k in feature_keys], target, by, max_gap_s, require_labels)
    frames_cache = FramesCache.for_store(st.root, cache, _resampling_code())
    load = partial(_load_session, st, w=wanted, frames_cache=frames_cache)
    out = _load_all(st, names, load, frames_cache, threads)
    if gold_standard is not None and gold_standard.method != "stored":
        out = _with_gold_standard(st, out, target, gold_standard)
    return out


def with_labels(tables: Sequence[SessionTable]) -> list[SessionTable]:
    """``tables`` but those whose labels are all NaN (loaded with ``require_labels=False``: a blind
    test's sessions, which a sweep neither trains nor scores)."""
    return [t for t in tables if not np.isnan(t.y).all()]


def sessions_labelled(
    store: Store | str | os.PathLike, target: str, splits: Mapping[str, Sequence[int]] | None = None
) -> dict[str, tuple[str, bool]]:
    """Session -> (its split, whether it has labels ``target`` that are not all NaN) of each shard in ``splits``
    (None or {}: the shards' splits; sessions of no split left out), in store order; one open per shard."""
    st = store if isinstance(store, Store) else Store(store)
    by_story = {int(s): str(name) for name, stories in (splits or {}).items() for s in stories}
    out: dict[str, tuple[str, bool]] = {}
    for s in st.list_sessions():
        try:
            with st.open_session(s) as shard:
                meta = shard.meta
                split = by_story.get(meta.story) if splits else meta.split
                has = target in shard.label_targets() and not np.isnan(shard.labels(target)).all()
        except StoreError as e:
            raise DatasetError(str(e)) from e
        if split is not None:
            out[s] = (split, has)
    return out


def _load_all(
    st: Store,
    names: list[str],
    load: Callable[[str], tuple[SessionTable | None, _Pending | None]],
    frames_cache: FramesCache | None,
    threads: int,
) -> list[SessionTable]:
    """Every session's table, checked for equal columns; the resampled ones cached once every load succeeded."""
    pool = ThreadPoolExecutor(max_workers=threads) if threads > 1 and len(names) > 1 else None
    try:
        loaded = list(pool.map(load, names)) if pool else [load(s) for s in names]
        out: list[SessionTable] = []
        for table, _ in loaded:
            if table is None:
                continue
            if out and table.columns != out[0].columns:
                _raise_column_mismatch(out[0], table)
            out.append(table)
        # only a load that succeeded writes to the cache: a failing one leaves the store as it was
        pending = [p for _, p in loaded if p is not None]  # none without a frames cache
        if frames_cache is not None:
            write = partial(_write_entry, frames_cache, st)
            written = sum(pool.map(write, pending) if pool else map(write, pending))
            msg = "frames cache %s: %d of %d sessions resampled, %d cached"
            log.debug(msg, frames_cache.folder, len(pending), len(names), written)
    finally:
        if pool:
            pool.shutdown()
    return out


def _with_gold_standard(
    st: Store, tables: list[SessionTable], target: str, gs: GoldStandard
) -> list[SessionTable]:
    """``tables`` with ``y`` the combination under ``gs`` of each session's own raters."""
    traces = []
    for t in tables:
        try:
            with st.open_session(t.session) as shard:
                raters = shard.raters(target)
                traces.append({r: shard.rater_labels(target, r) for r in raters})
        except StoreError as e:
            raise DatasetError(str(e)) from e
        if not raters and not np.isnan(t.y).all():  # a session without labels keeps its NaN
            raise DatasetError(
                f"session {t.session} has no per-rater labels of {target!r} in "
                f"{st.shard_path(t.session)}, needed by gold_standard method {gs.method!r}; give "
                f"its raters' files (manifest columns label_{target}@<rater>) or use method 'stored'"
            )
    fps = tables[0].fps if tables else LABEL_FPS
    rated = [t for t, tr in zip(tables, traces, strict=True) if tr]
    ys, weights, lags = gold_standards([tr for tr in traces if tr], gs, fps)
    msg = "gold standard %s of %s, %s: weights %s, lags (frames) %s"
    for t, w, lag in zip(rated, weights, lags, strict=True):
        log.debug(msg, gs.method, target, t.session, {r: round(v, 3) for r, v in w.items()}, lag)
    combined = {t.session: y for t, y in zip(rated, ys, strict=True)}
    return [replace(t, y=combined[t.session]) if t.session in combined else t for t in tables]


def _raise_column_mismatch(first: SessionTable, other: SessionTable) -> None:
    for ci, key in enumerate(other.channels):
        a = [c for c, k in zip(first.columns, first.column_channel, strict=True) if k == ci]
        b = [c for c, k in zip(other.columns, other.column_channel, strict=True) if k == ci]
        if a != b:
            raise DatasetError(
                f"channel {key} has {len(b)} columns in {other.session} but {len(a)} in {first.session} "
                f"(first difference: {sorted(set(a) ^ set(b))[:3]}); the sessions were extracted with "
                "different settings: re-run `featurestore extract --force` on the odd ones"
            )


@cache
def _resampling_code() -> str:
    """Hash of the code that turns a shard into frames (the shard reader included): an edit invalidates entries."""
    return code_version(
        [
            resample_channel,
            _sampling,
            _pooled,
            _hold_s,
            _pool_frames,
            _pool,
            _interpolation_plan,
            _interpolate,
            _read_shard,
            ShardReader.read,
            ShardReader.labels,
            read_channel_group,
            Features.__post_init__,
        ]
    )


@dataclass(frozen=True)
class _Wanted:
    """What a load reads of each session (``by_story``: story -> split; None keeps the shard's split)."""

    keys: list[str]
    target: str
    by_story: dict[int, str] | None
    max_gap_s: float
    require_labels: bool = True


#: frames resampled from a shard, to be cached once the whole load has succeeded
_Pending = tuple[EntryKey, SessionTable]


def _load_session(
    st: Store, s: str, w: _Wanted, frames_cache: FramesCache | None
) -> tuple[SessionTable | None, _Pending | None]:
    """(the session's table, None when its story is in no split; what to cache, if anything)."""
    entry: EntryKey | None = None
    if frames_cache is not None:
        entry = frames_cache.key(s, st.shard_path(s), w.keys, w.target, w.max_gap_s)
        table = frames_cache.read(entry) if entry is not None else None
        if table is not None:
            return _with_split(table, w.by_story), None
    table = _read_shard(st, s, w)
    if table is None:
        return None, None
    # never an entry without labels: a load that requires them must not find one
    pending = None if entry is None or np.isnan(table.y).all() else (entry, table)
    return _with_split(table, w.by_story), pending


def _write_entry(frames_cache: FramesCache, st: Store, pending: _Pending) -> bool:
    """Cache the frames; False when the folder is unwritable or the shard was replaced since it was read."""
    e, table = pending
    if frames_cache.key(e.session, st.shard_path(e.session), e.keys, e.target, e.max_gap_s) != e:
        return False
    return frames_cache.write(e, table) is not None


def _with_split(table: SessionTable, by_story: dict[int, str] | None) -> SessionTable | None:
    """``table`` (cached or fresh, with the shard's split) under the config's split; None: skipped."""
    if by_story is None:
        return table
    split = by_story.get(table.story)
    return None if split is None else replace(table, split=split)


def _read_shard(st: Store, s: str, w: _Wanted) -> SessionTable | None:
    """Read and resample one shard; None (before any check) when its story is in no split."""
    # one open per shard through the store's reader (it checks the schema, channels and labels)
    try:
        with st.open_session(s) as shard:
            shard.check_schema()
            meta = shard.meta
            if w.by_story is not None and meta.story not in w.by_story:
                return None
            labelled = w.require_labels or w.target in shard.label_targets()
            data = shard.read(w.keys, w.target if labelled else None)
    except MissingChannelError as e:
        raise DatasetError(f"{e}, or drop it from the feature set") from e
    except StoreError as e:
        raise DatasetError(str(e)) from e
    n, fps = meta.n_frames, meta.fps
    chans = [data.channels[key] for key in w.keys]
    done = [resample_channel(c.data, c.time, c.valid, n, fps, w.max_gap_s) for c in chans]
    X = np.concatenate([x for x, _ in done], axis=1) if done else np.zeros((n, 0), np.float32)
    valid = np.stack([ok for _, ok in done], axis=1) if done else np.zeros((n, 0), bool)
    return SessionTable(
        session=s,
        listener=meta.listener,
        story=meta.story,
        speaker=meta.speaker,
        split=meta.split,
        fps=fps,
        columns=[f"{k}/{c}" for k, ch in zip(w.keys, chans, strict=True) for c in ch.columns],
        channels=list(w.keys),
        column_channel=np.asarray([i for i, ch in enumerate(chans) for _ in ch.columns], np.int64),
        X=X,
        valid=valid,
        y=data.labels if data.labels is not None else np.full(n, np.nan, np.float32),
        target=w.target,
    )
