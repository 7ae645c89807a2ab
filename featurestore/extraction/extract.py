"""Extraction of one session: plan from cache keys, decode once, write atomically.

For each session:

1. the labels (if any) are read first: they define the frame count. A video whose length
   differs from the labels by more than ``max_length_mismatch_s`` (1 s) is an error;
2. every requested channel gets its expected cache key (source fingerprint + extractor
   name, version and parameters, crop and face rate included); channels whose stored key
   matches are skipped unless ``force``;
3. the video is decoded once for all face channels that need work, the audio once for the
   audio channels;
4. transcript channels (``speech``, ``lexicon``) are computed from the session's transcript
   when it has one (a session without one skips them with a note);
5. ``speaker/egemaps`` and ``listener/egemaps`` are derived from ``scene/egemaps`` and who
   is talking: from the transcript's cues when the session has a transcript, else from the
   faces' mouth movement (see :mod:`featurestore.extraction.derived`); the channel's extractor,
   params ``rule`` and source say which rule was used, and both are in its cache key;
6. everything is written in one atomic shard update (temporary file + rename) through
   :meth:`featurestore.storage.store.Store.write_session`; the shard is read through the store only.

A failure in a session is reported in its :class:`SessionResult`, never raised. Many
sessions run in local processes (:func:`featurestore.extraction.pool.extract_many`) or on Dask
(:func:`featurestore.extraction.distributed.extract_many_dask`).
"""

from __future__ import annotations

import os
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from ..extractors import (
    AudioExtractor,
    ExtractorUnavailable,
    FrameExtractor,
    TranscriptExtractor,
)
from ..extractors.base import Track
from ..features import Features
from ..sources import media
from ..sources.annotations import read_annotation
from ..sources.manifest import SessionFiles
from ..sources.transcripts import TranscriptError, read_transcript
from ..storage.provenance import cache_key, file_fingerprint, utc_now
from ..storage.shard import LABEL_FPS
from ..storage.store import Channel, SessionMeta, Store, StoreError
from .config import FeatureConfig
from .derived import (
    ROLE_VOICE_KEYS,
    compute_transcript_channels,
    face_voice_key,
    role_voice_from_faces,
    role_voice_from_transcript,
    transcript_plan,
    transcript_voice_key,
)


class SessionError(RuntimeError):
    """This session cannot be extracted; the message says why and what to do."""


@dataclass
class SessionResult:
    session: str
    status: str = "ok"  # ok | skipped | failed
    computed: list[str] = field(default_factory=list)
    current: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    error: str = ""
    seconds: float = 0.0

    @property
    def failed(self) -> bool:
        return self.status == "failed"


@dataclass
class FrameJob:
    """One frame extractor's track over one role's crops, fed frames in ``pixel_format``."""

    track: Track
    role: str
    pixel_format: str = "rgb24"


#: sampled frames decoded ahead of the face work, in a background thread (a few MB each)
PREFETCH_FRAMES = 4


def run_frame_jobs(
    video: Path,
    jobs: Iterable[FrameJob],
    regions: dict[str, tuple[int, int]],
    sample_fps: float | None,
    on_frame: Callable[[], object] | None = None,
) -> None:
    """Decode ``video`` once and feed each job's track its role's crop of every frame sampled at
    ``sample_fps`` (Hz); ``regions`` are the roles' pixel columns ``[x0, x1)``.

    Decoding runs ahead in a background thread (:data:`PREFETCH_FRAMES`), overlapping the
    tracks' work; each pixel format a job asks for is made once per frame.
    """
    jobs = list(jobs)
    formats = tuple(sorted({job.pixel_format for job in jobs}))
    for _, t, images in media.iter_frames(
        video, sample_fps, pixel_format=formats, prefetch=PREFETCH_FRAMES
    ):
        for job in jobs:
            x0, x1 = regions[job.role]
            job.track.add(t, images[job.pixel_format][:, x0:x1])
        if on_frame is not None:
            on_frame()


def _label_sources_current(store: Store, session: str, annotations: dict[str, Path]) -> bool:
    """True when every annotation of ``annotations`` (target -> file) is stored, from the same file content."""
    if not store.shard_path(session).exists():
        return not annotations
    stored = store.label_sources(session)
    return all(
        target in stored and stored[target].get("fingerprint") == file_fingerprint(p)["fingerprint"]
        for target, p in annotations.items()
    )


def _read_labels(sf: SessionFiles) -> tuple[dict[str, np.ndarray], dict[str, dict]]:
    labels, sources = {}, {}
    for target, path in sorted(sf.annotations.items()):
        labels[target] = read_annotation(path)
        sources[target] = file_fingerprint(path)
    lengths = {t: len(y) for t, y in labels.items()}
    if len(set(lengths.values())) > 1:
        raise SessionError(
            f"{sf.session}: annotation files have different lengths {lengths}; fix or remove the odd one"
        )
    return labels, sources


def extract_session(
    sf: SessionFiles,
    store_root: str | os.PathLike,
    channels: Sequence[str],
    cfg: FeatureConfig,
    force: bool = False,
    position: int | None = None,
    progress: bool = True,
) -> SessionResult:
    """Compute the missing or stale channels of one session and store them.

    ``channels`` are extractor names (``face_geom``, ``face_au``, ``egemaps``, ``speech``,
    ``lexicon``; the last two need the session's transcript and are skipped with a note
    without one). Never raises
    for a bad input: the returned result carries ``status="failed"`` and the reason.
    """
    t0 = time.perf_counter()
    res = SessionResult(sf.session)
    try:
        _extract_session(
            sf, Store(store_root, mode="a"), list(channels), cfg, force, position, progress, res
        )
    except (
        SessionError,
        StoreError,
        media.MediaError,
        ExtractorUnavailable,
        ValueError,
        OSError,
    ) as e:
        res.status, res.error = (
            "failed",
            str(e) or f"{type(e).__name__} while extracting {sf.session}",
        )
    except Exception as e:  # noqa: BLE001 - report, never kill the other sessions
        res.status = "failed"
        res.error = f"unexpected {type(e).__name__}: {e}\n{traceback.format_exc(limit=4)}"
    res.seconds = time.perf_counter() - t0
    return res


def _extract_session(  # noqa: C901 - rewritten in the scheduler/extraction change
    sf, store: Store, channels, cfg: FeatureConfig, force, position, progress, res: SessionResult
) -> None:
    if sf.video is None:
        raise SessionError(f"{sf.session}: no video found; `featurestore scan` lists what is there")
    info = media.probe(sf.video)
    source = file_fingerprint(sf.video)
    labels, label_sources = _read_labels(sf)
    if labels:
        n_frames = len(next(iter(labels.values())))
        video_s, label_s = info.n_frames / info.fps, n_frames / LABEL_FPS
        if abs(video_s - label_s) > cfg.max_length_mismatch_s:
            names = ", ".join(str(p) for p in sf.annotations.values())
            raise SessionError(
                f"{sf.session}: the annotation ({names}) has {n_frames} rows = {label_s:.2f} s but the video "
                f"{sf.video} lasts {video_s:.2f} s; labels define the frame count and at most "
                f"{cfg.max_length_mismatch_s:g} s of difference is tolerated - check that they belong together"
            )
    else:
        n_frames = int(round(info.n_frames / info.fps * LABEL_FPS))
    meta = SessionMeta(sf.session, sf.listener, sf.story, sf.speaker, sf.split, n_frames)

    store.check_schema(sf.session, write=True)  # refuse, before any work, a shard of another schema
    stored = store.cache_keys(sf.session)
    regions = media.role_regions(info.width, cfg.split_x)
    plan: dict[str, tuple[object, str, dict]] = {}  # key -> (extractor, cache key, params)
    sources: dict[str, dict] = {}  # key -> source, where it is not the video (transcript channels)
    transcript = _Transcript(sf.transcript)
    for name in channels:
        ex = cfg.extractor(name)
        if isinstance(ex, FrameExtractor):
            ex.check_available()
            for role in ex.roles:
                params = {**ex.params(), "face_fps": cfg.face_fps, "crop_x": list(regions[role])}
                plan[f"{role}/{name}"] = (
                    ex,
                    cache_key(source, ex.name, ex.version, params),
                    params,
                )
        elif isinstance(ex, AudioExtractor):
            if not info.has_audio:
                res.notes.append(f"no audio track in {sf.video}: {name} skipped")
                continue
            # the track is decoded at the extractor's own rate (recorded as in older shards)
            params = {**ex.params(), "audio_sampling_rate": ex.sampling_rate}
            plan[f"scene/{name}"] = (ex, cache_key(source, ex.name, ex.version, params), params)
        elif isinstance(ex, TranscriptExtractor):
            if sf.transcript is None:
                res.notes.append(f"no transcript: {name} skipped")
                continue
            ex.check_available()
            part = transcript_plan([name], n_frames, transcript.source, cfg)
            plan.update(part)
            sources.update(dict.fromkeys(part, transcript.source))
        else:
            raise SessionError(
                f"extractor {name!r} is neither a frame, an audio nor a transcript extractor"
            )

    todo = {k: v for k, v in plan.items() if force or stored.get(k) != v[1]}
    res.current = sorted(k for k in plan if k not in todo)
    new: dict[str, Channel] = {}
    channel_errors: list[str] = []  # channels that failed while others of the session succeed
    created = utc_now()

    def wrap(key: str, feats: Features) -> Channel:
        ex, ck, params = plan[key]
        return Channel.from_features(
            feats,
            extractor=ex.name,
            extractor_version=ex.version,
            params=params,
            cache_key=ck,
            source=sources.get(key, source),
            created_utc=created,
        )

    # ---- video: one decode for every frame extractor that has work
    frame_jobs: dict[str, FrameJob] = {}
    for key, (ex, _, _) in todo.items():
        if isinstance(ex, FrameExtractor):
            role = key.split("/")[0]
            frame_jobs.setdefault(key, FrameJob(ex.new_track(role), role, ex.pixel_format))
    if frame_jobs:
        step = media.sample_mask_step(info.fps, cfg.face_fps)
        total = int(np.ceil(info.n_frames / step)) if info.n_frames else None
        bar = tqdm(
            total=total,
            desc=f"{sf.session} faces",
            unit="frame",
            position=position,
            leave=False,
            disable=not progress,
        )
        try:
            run_frame_jobs(
                sf.video, frame_jobs.values(), regions, cfg.face_fps, on_frame=lambda: bar.update(1)
            )
        finally:
            bar.close()
        for key, job in frame_jobs.items():
            feats = job.track.result()
            if len(feats.valid) and not feats.valid.any():
                # this channel fails; the session's other channels (audio) are still stored
                x0, x1 = regions[job.role]
                channel_errors.append(
                    f"{sf.session}: {key} not stored: no face found in the {job.role} region (x {x0}-{x1}) of "
                    f"{sf.video} in any of {len(feats.valid)} sampled frames; check the crop split (--split-x) or the video"
                )
                continue
            new[key] = wrap(key, feats)
            res.computed.append(key)
            if len(feats.valid):
                frac = float(feats.valid.mean())
                if frac < 0.5:
                    res.notes.append(f"{key}: face found in only {frac:.0%} of sampled frames")

    # ---- audio: one decode per rate the audio extractors ask for
    audio_keys = [k for k, (ex, _, _) in todo.items() if isinstance(ex, AudioExtractor)]
    signals: dict[int, np.ndarray] = {}
    for key in audio_keys:
        ex = todo[key][0]
        rate = ex.sampling_rate
        if rate not in signals:
            try:
                signals[rate] = media.read_audio(sf.video, rate)
            except media.NoAudioError as e:
                res.notes.append(str(e))
                break
        out = ex.process_signal(signals[rate], rate)
        new[key] = wrap(key, out["scene"])
        res.computed.append(key)

    # ---- transcript channels: computed from the cues, no media
    transcript_keys = [k for k, (ex, _, _) in todo.items() if isinstance(ex, TranscriptExtractor)]
    if transcript_keys:
        if transcript.cues is None:
            channel_errors.append(
                f"{sf.session}: {', '.join(transcript_keys)} not stored: {transcript.error}"
            )
        else:
            new.update(
                compute_transcript_channels(
                    plan, transcript_keys, transcript.cues, transcript.source, created
                )
            )
            res.computed.extend(transcript_keys)

    # ---- per-role voice: scene LLDs attributed to whoever is talking
    if "scene/egemaps" in plan:
        if sf.transcript is not None and transcript.cues is None:
            channel_errors.append(
                f"{sf.session}: speaker/listener egemaps not derived: {transcript.error}"
            )
        else:
            _derive_role_voice(sf, store, plan, new, stored, force, res, created, transcript)

    # ---- labels
    write_labels = labels and (
        force or not _label_sources_current(store, sf.session, sf.annotations)
    )
    if new or write_labels or (not channel_errors and not store.shard_path(sf.session).exists()):
        try:
            store.write_session(
                meta,
                channels=new,
                labels=labels if write_labels else None,
                label_sources=label_sources,
            )
        except (
            OSError
        ) as e:  # full disk, read-only folder: write_session left the old shard as it was
            raise SessionError(
                f"{sf.session}: cannot write {store.shard_path(sf.session)} ({e}); the previous shard, if any, is "
                f"unchanged and no temporary file is left: free disk space or make {store.root} writable, then re-run"
            ) from e
        if write_labels:
            res.computed.extend(f"labels/{t}" for t in labels)
    if channel_errors:
        res.status, res.error = "failed", "; ".join(channel_errors)
    elif not res.computed:
        res.status = "skipped"


class _Transcript:
    """A session's transcript, fingerprinted and parsed once, on first use (None when absent)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._source: dict | None = None
        self._cues: list | None = None
        self.error = ""

    @property
    def source(self) -> dict:
        if self._source is None:
            self._source = file_fingerprint(self.path)
        return self._source

    @property
    def cues(self) -> list | None:
        """The cues, or None when the file cannot be read (``error`` says why)."""
        if self._cues is None and not self.error and self.path is not None:
            try:
                self._cues = read_transcript(self.path)
            except (TranscriptError, OSError) as e:
                self.error = (
                    f"{e}; fix the transcript (or move it away to use the face rule) and re-run"
                )
        return self._cues


def _derive_role_voice(
    sf,
    store: Store,
    plan,
    new: dict,
    stored: dict,
    force: bool,
    res: SessionResult,
    created: str,
    transcript: _Transcript | None = None,
) -> None:
    def current_key(key: str) -> str | None:
        if key in new:
            return new[key].cache_key
        return stored.get(key)

    def is_current(ck: str) -> bool:
        return not force and all(stored.get(k) == ck and k not in new for k in ROLE_VOICE_KEYS)

    def load(key: str) -> Channel:
        return new[key] if key in new else store.read_channel(sf.session, key)

    scene_key = current_key("scene/egemaps")
    face_keys = {r: current_key(f"{r}/face_geom") for r in ("speaker", "listener")}
    if scene_key is None:
        return
    if transcript is not None and transcript.path is not None:
        # the transcript says who talks: it replaces the face rule
        _, ck, _ = transcript_voice_key(scene_key, transcript.source)
        if is_current(ck):
            res.current.extend(ROLE_VOICE_KEYS)
            return
        new.update(
            role_voice_from_transcript(
                load("scene/egemaps"), scene_key, transcript.cues, transcript.source, created
            )
        )
        if not any(c.role is not None for c in transcript.cues):
            res.notes.append(
                f"{transcript.path} has no [S]/[L] tagged cues: speaker/listener egemaps are valid nowhere"
            )
        res.computed.extend(ROLE_VOICE_KEYS)
        return
    if None in face_keys.values():
        res.notes.append(
            "speaker/listener egemaps need face_geom (mouth movement) or a transcript: not derived"
        )
        return
    _, ck, _ = face_voice_key(scene_key, face_keys)
    if is_current(ck):
        res.current.extend(ROLE_VOICE_KEYS)
        return
    faces = {r: load(f"{r}/face_geom") for r in ("speaker", "listener")}
    derived = role_voice_from_faces(load("scene/egemaps"), scene_key, faces, face_keys, created)
    new.update(derived)
    res.computed.extend(derived)
