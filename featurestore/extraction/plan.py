"""The plan of one session's extraction, decided before any decoding: the labels read, the
video probed, each channel's extractor, cache key, params, source and whether it is current, and
what the shard holds that its sources no longer give (docs/store.md, sources tracked by content)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np

from ..errors import FeaturestoreError
from ..extractors import AudioExtractor, FrameExtractor, TranscriptExtractor
from ..extractors.base import Extractor
from ..sources import media
from ..sources.annotations import AnnotationError, TimedRating, read_label_file
from ..sources.label_checks import (
    DEFAULT_MIN_COVERAGE,
    coverage_problem,
    label_scale,
    rating_span,
)
from ..sources.manifest import SessionFiles
from ..sources.transcripts import TranscriptError, read_transcript
from ..storage.provenance import cache_key, file_fingerprint, utc_now
from ..storage.shard import LABEL_FPS
from ..storage.store import Channel, SessionMeta, Store
from .config import FeatureConfig
from .derived import transcript_plan
from .recordings import recording_meta


class SessionError(FeaturestoreError, RuntimeError):
    """This session cannot be extracted; the message says why and what to do."""


#: the ``by`` of a label source that ``featurestore extract`` read from the corpus
EXTRACTED = "extract"


class StaleSourceError(FeaturestoreError, ValueError):
    """A source the shard's labels were read from can no longer be read; the message names it."""


def check_label_sources(sf: SessionFiles, stored: Mapping[str, dict]) -> None:
    """:class:`StaleSourceError` for a session whose stored labels (label key -> recorded
    source) came from a file it no longer provides because it cannot be read or, for labels
    ``extract`` read, because it is gone."""
    for key, src in sorted(stored.items()):
        path = src.get("path") if isinstance(src, Mapping) else None
        if key in sf.annotations or not isinstance(path, str):
            continue  # provided now (re-read when it changed), or a mean over raters
        p = Path(path)
        rebuild = (
            "move the shard aside and re-run `featurestore extract` to rebuild it without them"
        )
        if not p.exists():
            if src.get("by") == EXTRACTED:
                raise StaleSourceError(
                    f"{sf.session}: labels {key!r} in the shard were read from {p}, which is gone; "
                    f"restore it, or {rebuild}"
                )
            continue  # imported from elsewhere (`featurestore labels`): verify reports it
        try:
            read_label_file(p)
        except (OSError, ValueError) as e:
            raise StaleSourceError(
                f"{sf.session}: labels {key!r} in the shard were read from {p}, which can no longer "
                f"be read ({e}); save it as a UTF-8 CSV again and re-run, or {rebuild}"
            ) from e


def vanished_channels(
    planned: Sequence[str],
    extractors: Sequence[str],
    stored: Mapping[str, dict],
    media: Sequence[Path],
) -> list[str]:
    """The stored channels to remove: those of an extractor in ``extractors`` that plans none
    now, whose recorded source is one of the session's ``media`` (it lost the track) or is
    gone, and the channels derived from them."""
    names = {k.split("/")[1] for k in planned}
    own = {Path(m).absolute() for m in media}
    gone = []
    for key, src in stored.items():
        name = key.split("/")[1]
        path = src.get("path")
        if name not in extractors or name in names or "upstream" in src or not path:
            continue
        if Path(path).absolute() in own or not Path(path).exists():
            gone.append(key)
    derived = [
        key
        for key, src in stored.items()
        if any(f"{g}=" in str(src.get("upstream", "")) for g in gone)
    ]
    return sorted(set(gone + derived))


def _read_labels(
    sf: SessionFiles, cfg: FeatureConfig
) -> tuple[dict[str, np.ndarray], dict[str, TimedRating], dict[str, dict]]:
    """Per-frame ratings, timed ratings and each file's fingerprint by label key, checked against their scales."""
    labels, timed, sources = {}, {}, {}
    scales = {**sf.scales, **{t: spec["scale"] for t, spec in cfg.targets.items()}}
    for key, path in sorted(sf.annotations.items()):
        try:
            y = read_label_file(path, label_scale(key, scales))
        except AnnotationError as e:
            raise SessionError(f"{sf.session}: {e}") from e
        if isinstance(y, TimedRating):
            timed[key] = y
        else:
            labels[key] = y
        sources[key] = {**file_fingerprint(path), "by": EXTRACTED}
    lengths = {t: len(y) for t, y in labels.items()}
    if len(set(lengths.values())) > 1:
        raise SessionError(
            f"{sf.session}: annotation files have different lengths {lengths}; fix or remove the odd one"
        )
    return labels, timed, sources


def _check_coverage(
    sf: SessionFiles,
    timed: dict[str, TimedRating],
    duration_s: float,
    video: Path,
    cfg: FeatureConfig,
) -> None:
    """:class:`SessionError` for a timed rating covering less than the declared share of the session."""
    share = sf.min_coverage if sf.min_coverage is not None else cfg.min_coverage
    share = DEFAULT_MIN_COVERAGE if share is None else share
    for key, rating in sorted(timed.items()):
        if problem := coverage_problem(
            rating.path, rating_span(rating), duration_s, share, str(video)
        ):
            raise SessionError(f"{sf.session}: {key}: {problem}")


@dataclass
class StepResult:
    """What one extraction step made: ``channels`` to store, the keys ``computed`` and found
    ``current``, ``notes``, and ``errors`` of channels that failed (the others are stored)."""

    channels: dict[str, Channel] = field(default_factory=dict)
    computed: list[str] = field(default_factory=list)
    current: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def add(self, other: StepResult) -> None:
        self.channels.update(other.channels)
        self.computed += other.computed
        self.current += other.current
        self.notes += other.notes
        self.errors += other.errors


@dataclass(frozen=True)
class ChannelPlan:
    """One channel (``role/name``) a session's extraction makes: its extractor, cache key,
    params, ``source`` (its file's fingerprint) and whether the store holds it (``current``)."""

    key: str
    extractor: Extractor
    cache_key: str
    params: dict
    source: dict
    current: bool

    @property
    def role(self) -> str:
        return self.key.split("/")[0]

    @property
    def kind(self) -> str:
        return self.extractor.kind

    @property
    def frame_extractor(self) -> FrameExtractor:
        if not isinstance(self.extractor, FrameExtractor):
            raise TypeError(f"{self.key}: {self.extractor.name} is not a frame extractor")
        return self.extractor

    @property
    def audio_extractor(self) -> AudioExtractor:
        if not isinstance(self.extractor, AudioExtractor):
            raise TypeError(f"{self.key}: {self.extractor.name} is not an audio extractor")
        return self.extractor


@dataclass
class SessionPlan:
    """What one session's extraction will do, decided before any decoding: each channel's
    :class:`ChannelPlan`, the cache keys ``stored``, each role's pixel columns ``regions``,
    video and audio file, the labels read, ``notes`` on the channels skipped, the channels
    ``missing`` (the config needs them, the recording cannot give them) and those to ``drop``."""

    files: SessionFiles
    meta: SessionMeta
    info: media.VideoInfo
    regions: dict[str, tuple[int, int]]
    labels: dict[str, np.ndarray]
    label_sources: dict[str, dict]
    stored: dict[str, str]
    transcript: TranscriptFile
    force: bool
    created: str = ""
    channels: dict[str, ChannelPlan] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    videos: dict[str, Path] = field(default_factory=dict)
    audios: dict[str, Path] = field(default_factory=dict)
    drop: list[str] = field(default_factory=list)

    @property
    def video(self) -> Path:
        video = main_video(self.files)
        if video is None:
            raise ValueError(f"{self.session}: no video")
        return video

    @property
    def per_role_audio(self) -> bool:
        """The session has an audio file per role (no derived voice channels)."""
        return any(r != "scene" for r in self.audios)

    @property
    def session(self) -> str:
        return self.files.session

    def todo(self, kind: str) -> list[ChannelPlan]:
        """The channels of extractors of ``kind`` to compute (not current, or forced)."""
        return [c for c in self.channels.values() if c.kind == kind and not c.current]

    def current_keys(self) -> list[str]:
        return sorted(k for k, c in self.channels.items() if c.current)


def plan_session(
    sf: SessionFiles, *, store: Store, channels: Sequence[str], cfg: FeatureConfig, force: bool
) -> SessionPlan:
    """Read the labels, probe the video and plan every channel of ``channels`` (extractor
    names): its cache key and whether the shard holds it (``force``: never). A
    :class:`SessionError` says why a session cannot be extracted."""
    video = main_video(sf)
    if video is None:
        raise SessionError(
            f"{sf.session}: no video found; `featurestore scan` lists what is there (a session "
            "with audio files alone is not extracted yet: give its video too)"
        )
    info = media.probe(video)
    source = file_fingerprint(video)
    check_label_sources(sf, store.label_sources(sf.session))
    labels, timed, label_sources = _read_labels(sf, cfg)
    n_frames = _frame_count(sf, info, labels, cfg)
    _check_coverage(sf, timed, n_frames / LABEL_FPS, video, cfg)
    labels.update({k: r.on_frames(n_frames, LABEL_FPS) for k, r in timed.items()})
    store.check_schema(sf.session, write=True)  # refuse, before any work, a shard of another schema
    videos, regions = _role_videos(sf, info, cfg)
    plan = SessionPlan(
        files=sf,
        meta=recording_meta(sf, n_frames),
        info=info,
        regions=regions,
        labels=labels,
        label_sources=label_sources,
        stored=store.cache_keys(sf.session),
        transcript=TranscriptFile(sf.transcript),
        force=force,
        videos=videos,
        audios=_role_audios(sf, info),
    )
    for name in channels:
        _plan_channel(plan, cfg.extractor(name), source, cfg)
    _plan_drops(plan, store, channels)
    plan.created = utc_now()
    return plan


def _plan_drops(plan: SessionPlan, store: Store, channels: Sequence[str]) -> None:
    """The stored channels of ``channels`` whose source no longer provides them, with a note each."""
    if not store.shard_path(plan.session).exists():
        return
    with store.open_session(plan.session) as shard:
        stored = shard.channel_sources()
    media_files = [*plan.videos.values(), *plan.audios.values(), plan.video]
    plan.drop = vanished_channels(list(plan.channels), channels, stored, media_files)
    for key in plan.drop:
        src = stored[key]
        why = (
            "it was derived from a channel removed here"
            if "upstream" in src
            else f"its source {src.get('path')} no longer provides it"
        )
        plan.notes.append(f"{key} removed from the shard: {why}")


#: a manifest's media column -> the store's role it describes
ROLE_MEDIA = {
    "video_person": "listener",
    "video_partner": "speaker",
    "audio_person": "listener",
    "audio_partner": "speaker",
}


def main_video(sf: SessionFiles) -> Path | None:
    """The video a session's frame count and shared audio come from: the shared video, else the
    rated person's, else the partner's; None when the session has none."""
    return sf.video or sf.media.get("video_person") or sf.media.get("video_partner")


def _role_videos(
    sf: SessionFiles, info: media.VideoInfo, cfg: FeatureConfig
) -> tuple[dict[str, Path], dict[str, tuple[int, int]]]:
    """(role -> video, role -> pixel columns): the shared video cut at ``split_x``, or each role's own."""
    if sf.video is not None:
        regions = media.role_regions(info.width, sf.split_x or cfg.split_x)
        return {role: sf.video for role in regions}, regions
    videos, regions = {}, {}
    for column, path in sf.media.items():
        if column.startswith("video_"):
            role = ROLE_MEDIA[column]
            videos[role] = path
            width = info.width if path == info.path else media.probe(path).width
            regions[role] = (0, width)
    return videos, regions


def _role_audios(sf: SessionFiles, info: media.VideoInfo) -> dict[str, Path]:
    """Role -> audio file: ``scene`` the shared ``audio`` file or the shared video's track;
    each role's own file, else (without a shared ``audio``) its own video's first audio track."""
    out: dict[str, Path] = {}
    if "audio" in sf.media:
        out["scene"] = sf.media["audio"]
    elif sf.video is not None and info.has_audio:
        out["scene"] = sf.video
    for column, path in sf.media.items():
        if column.startswith("audio_"):
            out[ROLE_MEDIA[column]] = path
    if "scene" in out:
        return out
    for column, path in sf.media.items():
        role = ROLE_MEDIA.get(column)
        if column.startswith("video_") and role not in out:
            if info.has_audio if path == info.path else media.probe(path).has_audio:
                out[ROLE_MEDIA[column]] = path
    return out


def _audio_roles(sf: SessionFiles) -> dict[str, Path]:
    """Role -> the media file its voice should come from: ``scene`` the shared video, else each role's video."""
    if sf.video is not None:
        return {"scene": sf.video}
    return {ROLE_MEDIA[c]: p for c, p in sf.media.items() if c.startswith("video_")}


def _plan_channel(plan: SessionPlan, ex: Extractor, source: dict, cfg: FeatureConfig) -> None:
    """Add extractor ``ex``'s channels to ``plan`` by its kind (``source``: the video's)."""
    planner = _PLANNERS.get(getattr(ex, "kind", ""))
    if planner is None:
        raise SessionError(
            f"extractor {ex.name!r} is neither a frame, an audio nor a transcript extractor"
        )
    for key, (ck, params, src) in planner(plan, ex, source, cfg).items():
        current = not plan.force and plan.stored.get(key) == ck
        plan.channels[key] = ChannelPlan(key, ex, ck, params, src, current)


def _frame_count(
    sf: SessionFiles, info: media.VideoInfo, labels: dict[str, np.ndarray], cfg: FeatureConfig
) -> int:
    """The frame count at the label rate: the per-frame labels' (the video close to them), else the video's."""
    if not labels:
        return int(round(info.n_frames / info.fps * LABEL_FPS))
    n_frames = len(next(iter(labels.values())))
    video_s, label_s = info.n_frames / info.fps, n_frames / LABEL_FPS
    if abs(video_s - label_s) > cfg.max_length_mismatch_s:
        names = ", ".join(str(p) for p in sf.annotations.values())
        raise SessionError(
            f"{sf.session}: the annotation ({names}) has {n_frames} rows = {label_s:.2f} s but the video "
            f"{sf.video} lasts {video_s:.2f} s; labels define the frame count and at most "
            f"{cfg.max_length_mismatch_s:g} s of difference is tolerated - check that they belong together"
        )
    return n_frames


#: a planner's answer: ``role/name`` -> (cache key, params, source fingerprint)
_Planned = dict[str, tuple[str, dict, dict]]


def _plan_frames(
    plan: SessionPlan, ex: FrameExtractor, source: dict, cfg: FeatureConfig
) -> _Planned:
    """A frame extractor's channel per role with a video (its crop at ``cfg.face_fps`` Hz)."""
    ex.check_available()
    out: _Planned = {}
    for role in ex.roles:
        if role not in plan.videos:
            continue
        video = plan.videos[role]
        own = source if video == plan.video else file_fingerprint(video)
        params = {**ex.params(), "face_fps": cfg.face_fps, "crop_x": list(plan.regions[role])}
        if (plan.info if video == plan.info.path else media.probe(video)).variable_rate:
            params["frame_times"] = "presentation"  # not the i / fps of shards made before
        out[f"{role}/{ex.name}"] = (cache_key(own, ex.name, ex.version, params), params, own)
    return out


def _plan_audio(
    plan: SessionPlan, ex: AudioExtractor, source: dict, cfg: FeatureConfig
) -> _Planned:
    """An audio extractor's channel per audio file; a role without an audio track is ``missing``."""
    words = plan.meta.role_names
    for role, path in _audio_roles(plan.files).items():
        if role not in plan.audios and not (role == "scene" and plan.per_role_audio):
            column = "audio" if role == "scene" else f"audio_{words.get(role, role)}"
            plan.missing.append(
                f"{words.get(role, role)}/{ex.name}: no audio track in {path}; give the "
                f"recording's audio file (manifest column {column}) or a video with sound"
            )
    params = ex.params()  # the track is decoded at the extractor's own rate (a param)
    out: _Planned = {}
    for role, path in plan.audios.items():
        own = source if path == plan.video else file_fingerprint(path)
        out[f"{role}/{ex.name}"] = (cache_key(own, ex.name, ex.version, params), params, own)
    return out


def _plan_transcript(
    plan: SessionPlan, ex: TranscriptExtractor, source: dict, cfg: FeatureConfig
) -> _Planned:
    """A transcript extractor's channel per role (none, with a note, without a transcript)."""
    if plan.files.transcript is None:
        plan.notes.append(f"no transcript: {ex.name} skipped")
        return {}
    ex.check_available()
    fingerprint = plan.transcript.source
    planned = transcript_plan([ex.name], plan.meta.n_frames, fingerprint, cfg)
    return {key: (ck, params, fingerprint) for key, (_, ck, params) in planned.items()}


#: extractor kind (its class's declared ``kind``) -> how its channels are planned
_PLANNERS: dict[str, Callable[..., _Planned]] = {
    "video": _plan_frames,
    "audio": _plan_audio,
    "transcript": _plan_transcript,
}


class TranscriptFile:
    """A session's transcript, fingerprinted and parsed once, on first use (None when absent)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.error = ""

    @cached_property
    def source(self) -> dict:
        if self.path is None:
            raise ValueError("no transcript: it has no fingerprint")
        return file_fingerprint(self.path)

    @cached_property
    def cues(self) -> list | None:
        """The cues, or None when the file cannot be read (``error`` says why)."""
        try:
            return None if self.path is None else read_transcript(self.path)
        except (TranscriptError, OSError) as e:
            self.error = (
                f"{e}; fix the transcript (or move it away to use the face rule) and re-run"
            )
            return None
