"""Extraction of one session (:func:`extract_session`): plan from cache keys, decode once,
derive, write atomically, each step returning a :class:`StepResult`; a failure is reported in
the :class:`SessionResult`, never raised. See docs/store.md (extraction).
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

from ..extractors import ExtractorUnavailable
from ..extractors.base import Track
from ..features import Features
from ..sources import media
from ..sources.manifest import SessionFiles
from ..storage.provenance import file_fingerprint
from ..storage.session_labels import Ratings
from ..storage.store import DISK_FULL_ERRNOS, Channel, DiskFullError, Store, StoreError
from ..storage.verify import time_problem
from .config import FeatureConfig
from .derived import (
    ROLE_VOICE_KEYS,
    channel_with_provenance,
    compute_transcript_channels,
    face_voice_key,
    role_voice_from_faces,
    role_voice_from_transcript,
    transcript_voice_key,
)
from .imports import imported_channels
from .plan import ChannelPlan, SessionError, SessionPlan, StepResult, plan_session


@dataclass
class SessionResult:
    """One session's extraction: ``status`` ``ok``, ``skipped`` (all current) or ``failed``
    (``error`` says why; ``disk_full``: for want of disk space, which ends the extraction), the
    keys computed and current, notes, seconds taken."""

    session: str
    status: str = "ok"
    computed: list[str] = field(default_factory=list)
    current: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    error: str = ""
    seconds: float = 0.0
    disk_full: bool = False

    @property
    def failed(self) -> bool:
        return self.status == "failed"

    def add(self, step: StepResult) -> None:
        """Append what an extraction step made; a step's channel errors fail the session."""
        self.computed += step.computed
        self.current += step.current
        self.notes += step.notes
        if step.errors:
            self.status = "failed"
            self.error = "; ".join([self.error, *step.errors] if self.error else step.errors)


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
    """Decode ``video`` once (ahead, in a thread) and feed each job's track its role's crop
    (``regions``: pixel columns ``[x0, x1)``) of every frame sampled at ``sample_fps`` Hz."""
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
    """Every annotation (target -> file) is stored, from the same file content."""
    if not store.shard_path(session).exists():
        return not annotations
    stored = store.label_sources(session)
    return all(
        target in stored and stored[target].get("fingerprint") == file_fingerprint(p)["fingerprint"]
        for target, p in annotations.items()
    )


#: what a session's extraction catches and reports as its failure (anything else is reported
#: as unexpected, with a traceback)
SESSION_FAILURES = (
    SessionError,
    StoreError,
    media.MediaError,
    ExtractorUnavailable,
    ValueError,
    OSError,
)


def extract_session(
    sf: SessionFiles,
    store_root: str | os.PathLike,
    channels: Sequence[str],
    cfg: FeatureConfig,
    force: bool = False,
    position: int | None = None,
    progress: bool = True,
) -> SessionResult:
    """Compute and store the missing or stale ``channels`` (extractor names) of one session:
    :func:`plan_session`, :func:`decode`, :func:`derive`, :func:`write`. Never raises for a bad
    input: the result carries ``status="failed"`` and the reason."""
    t0 = time.perf_counter()
    res = SessionResult(sf.session)
    try:
        store = Store(store_root, mode="a")
        plan = plan_session(sf, store=store, channels=list(channels), cfg=cfg, force=force)
        res.notes += plan.notes
        res.current = plan.current_keys()
        decoded = decode(plan, cfg=cfg, position=position, progress=progress)
        res.add(decoded)
        derived = derive(plan, store=store, decoded=decoded)
        res.add(derived)
        imported = imported_channels(plan.files.imports, plan.meta, plan.stored, force=plan.force)
        res.add(imported)
        new = {**decoded.channels, **derived.channels, **imported.channels}
        failed = bool(decoded.errors or derived.errors or imported.errors)
        res.add(write(plan, store=store, channels=new, failed=failed))
        if plan.missing:  # its other channels are stored, and extract exits non-zero
            lacks = f"{plan.session} lacks {len(plan.missing)} channel(s) the config needs"
            res.add(
                StepResult(errors=[f"{lacks} (the others are stored): " + "; ".join(plan.missing)])
            )
        if not res.failed and not res.computed and not plan.drop:  # a removal is a change
            res.status = "skipped"
    except SESSION_FAILURES as e:
        res.status = "failed"
        res.error = str(e) or f"{type(e).__name__} while extracting {sf.session}"
        res.disk_full = (
            isinstance(e, DiskFullError) or getattr(e, "errno", None) in DISK_FULL_ERRNOS
        )
    except Exception as e:  # noqa: BLE001 - report, never kill the other sessions
        res.status = "failed"
        res.error = f"unexpected {type(e).__name__}: {e}\n{traceback.format_exc(limit=4)}"
    res.seconds = time.perf_counter() - t0
    return res


def _wrap(planned: ChannelPlan, feats: Features, created: str) -> Channel:
    """``feats`` as the planned channel, with its provenance."""
    ex, ck = planned.extractor, planned.cache_key  # its lookahead: fixed by its code and config
    producer, lookahead = (ex.name, ex.version), ex.lookahead_s()
    return channel_with_provenance(
        feats, producer, ck, planned.params, planned.source, created, lookahead
    )


def decode(
    plan: SessionPlan, *, cfg: FeatureConfig, position: int | None = None, progress: bool = True
) -> StepResult:
    """The planned channels that need work: the video decoded once for every frame extractor,
    the audio once per rate, the transcript once; ``position``/``progress``: the face bar's."""
    out = StepResult()
    out.add(_decode_video(plan, cfg, position, progress))
    out.add(_decode_audio(plan))
    out.add(_decode_transcript(plan))
    return out


def _decode_video(
    plan: SessionPlan, cfg: FeatureConfig, position: int | None, progress: bool
) -> StepResult:
    """The frame channels, from one decode of each video; one with no face at all is an error."""
    todo = plan.todo("video")
    out = StepResult()
    if not todo:
        return out
    jobs = {
        c.key: FrameJob(c.frame_extractor.new_track(c.role), c.role, c.frame_extractor.pixel_format)
        for c in todo
    }
    info = plan.info
    step = media.sample_mask_step(info.fps, cfg.face_fps)
    by_video: dict[Path, list[FrameJob]] = {}
    for c in todo:
        by_video.setdefault(plan.videos[c.role], []).append(jobs[c.key])
    bar = tqdm(
        total=int(np.ceil(info.n_frames / step)) * len(by_video) if info.n_frames else None,
        desc=f"{plan.session} faces",
        unit="frame",
        position=position,
        leave=False,
        disable=not progress,
    )
    try:
        for video, video_jobs in by_video.items():  # each video decoded once
            run_frame_jobs(
                video, video_jobs, plan.regions, cfg.face_fps, on_frame=lambda: bar.update(1)
            )
    finally:
        bar.close()
    for c in todo:
        video = plan.videos[c.role]
        feats = jobs[c.key].track.result()
        if len(feats.valid) and not feats.valid.any():
            x0, x1 = plan.regions[c.role]
            out.errors.append(
                f"{plan.session}: {c.key} not stored: no face found in the {c.role} region (x {x0}-{x1}) of "
                f"{video} in any of {len(feats.valid)} sampled frames; check the crop split (--split-x) or the video"
            )
            continue
        out.channels[c.key] = _wrap(c, feats, plan.created)
        out.computed.append(c.key)
        if len(feats.valid) and (frac := float(feats.valid.mean())) < 0.5:
            out.notes.append(f"{c.key}: face found in only {frac:.0%} of sampled frames")
    return out


def _decode_audio(plan: SessionPlan) -> StepResult:
    """The audio channels, each audio file decoded once per sampling rate."""
    out = StepResult()
    signals: dict[tuple[Path, int], np.ndarray] = {}
    silent: set[Path] = set()
    for c in plan.todo("audio"):
        ex = c.audio_extractor
        rate, path = ex.sampling_rate, plan.audios[c.role]
        if path in silent:
            continue
        if (path, rate) not in signals:
            try:
                signals[(path, rate)] = media.read_audio(path, rate)
            except media.NoAudioError as e:
                out.errors.append(f"{plan.session}: {c.key} not stored: {e}")
                silent.add(path)
                continue
        feats = ex.process_signal(signals[(path, rate)], rate)
        out.channels[c.key] = _wrap(c, feats["scene"], plan.created)
        out.computed.append(c.key)
    return out


def _decode_transcript(plan: SessionPlan) -> StepResult:
    """The transcript channels (an unreadable transcript is an error of those channels)."""
    todo, transcript = plan.todo("transcript"), plan.transcript
    keys = [c.key for c in todo]
    if not todo:
        return StepResult()
    if transcript.cues is None:
        return StepResult(
            errors=[f"{plan.session}: {', '.join(keys)} not stored: {transcript.error}"]
        )
    planned = {c.key: (c.extractor, c.cache_key, c.params) for c in todo}
    channels = compute_transcript_channels(
        planned, keys, transcript.cues, transcript.source, plan.created
    )
    return StepResult(channels=channels, computed=keys)


def derive(plan: SessionPlan, *, store: Store, decoded: StepResult) -> StepResult:
    """``speaker/egemaps`` and ``listener/egemaps`` from ``scene/egemaps`` and who is talking
    (the transcript's cues, else the faces' mouth movement), unless current; each input is the
    channel just decoded, else the stored one."""
    if "scene/egemaps" not in plan.channels or plan.per_role_audio:
        return StepResult()  # a file per role: each role's voice is its own channel
    transcript, new = plan.transcript, decoded.channels
    if transcript.path is not None and transcript.cues is None:
        return StepResult(
            errors=[f"{plan.session}: speaker/listener egemaps not derived: {transcript.error}"]
        )

    def cache_key(key: str) -> str | None:
        return new[key].cache_key if key in new else plan.stored.get(key)

    def load(key: str) -> Channel:
        return new[key] if key in new else store.read_channel(plan.session, key)

    scene_key = cache_key("scene/egemaps")
    if scene_key is None:
        return StepResult()
    if transcript.path is not None:  # the transcript says who talks: it replaces the face rule
        _, ck, _ = transcript_voice_key(scene_key, transcript.source)
    else:  # who moves their mouth talks
        face_keys = {r: cache_key(f"{r}/face_geom") for r in ("speaker", "listener")}
        known = {r: k for r, k in face_keys.items() if k is not None}
        if len(known) < len(face_keys):
            return StepResult(
                notes=[
                    "speaker/listener egemaps need face_geom (mouth movement) or a transcript: not derived"
                ]
            )
        _, ck, _ = face_voice_key(scene_key, known)
    if not plan.force and all(plan.stored.get(k) == ck and k not in new for k in ROLE_VOICE_KEYS):
        return StepResult(current=list(ROLE_VOICE_KEYS))
    scene = load("scene/egemaps")
    if transcript.path is None:
        faces = {r: load(f"{r}/face_geom") for r in known}
        derived = role_voice_from_faces(scene, scene_key, faces, known, plan.created)
        return StepResult(channels=derived, computed=list(derived))
    cues = transcript.cues or []
    channels = role_voice_from_transcript(scene, scene_key, cues, transcript.source, plan.created)
    out = StepResult(channels=channels, computed=list(ROLE_VOICE_KEYS))
    if not any(c.role is not None for c in cues):
        out.notes.append(
            f"{transcript.path} has no [S]/[L] tagged cues: speaker/listener egemaps are valid nowhere"
        )
    return out


def write(
    plan: SessionPlan, *, store: Store, channels: dict[str, Channel], failed: bool
) -> StepResult:
    """One atomic shard update with ``channels``, the labels when they changed (or ``force``)
    and the manifest's changed whole-session ratings. Nothing when nothing is new, but a first
    shard when no channel ``failed``; ratings alone are never a first shard. A full disk is a
    :class:`DiskFullError`, another failure a :class:`SessionError` (the old shard unchanged)."""
    sf, labels = plan.files, plan.labels
    exists = store.shard_path(sf.session).exists()
    write_labels = bool(labels) and (
        plan.force or not _label_sources_current(store, sf.session, sf.annotations)
    )
    ratings = changed_ratings(sf, store.session_ratings(sf.session) if exists else {})
    new_shard = not failed and not exists
    if not (channels or write_labels or plan.drop or new_shard or (ratings and exists)):
        return StepResult()
    n, duration = plan.meta.n_frames, plan.meta.n_frames / plan.meta.fps  # verify's rule
    if outside := [
        f"{k}: {why}" for k, c in channels.items() if (why := time_problem(c.time, duration))
    ]:
        raise SessionError(
            f"{sf.session}: {'; '.join(outside)}, whose length its {n} frame(s) of labels set; "
            "nothing written: cut the recording to the labels' length, or label all of it"
        )
    try:
        store.write_session(
            plan.meta,
            channels=channels,
            labels=labels if write_labels else None,
            label_sources=plan.label_sources,
            drop=[k for k in plan.drop if k not in channels],
            ratings=ratings,
            ratings_source={"kind": "manifest", "file": sf.ratings_source},
        )
    except OSError as e:  # a read-only folder (a full disk is a DiskFullError)
        raise SessionError(
            f"{sf.session}: cannot write {store.shard_path(sf.session)} ({e}); the previous shard, if any, is "
            f"unchanged and no temporary file is left: make {store.root} writable, then re-run"
        ) from e
    computed = [f"labels/{t}" for t in labels] if write_labels else []
    return StepResult(computed=computed + [f"session_labels/{t}" for t in ratings])


def changed_ratings(sf: SessionFiles, stored: Ratings) -> Ratings:
    """The manifest's whole-session ratings of ``sf`` that differ from the ``stored`` ones."""
    return {t: r for t, r in sf.ratings.items() if stored.get(t) != r}
