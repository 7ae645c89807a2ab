"""Channels computed from other inputs than the media, with the same cache keys in ``extract``
and ``transcripts``: the transcript channels (``speech``, ``lexicon``) and the per-role voice
(the scene's rows, hard-linked, valid where that role talks, from the transcript's cues or the
faces' mouth movement). See docs/channels.md."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..extractors import TranscriptExtractor, known_lookahead_s
from ..features import Features
from ..sources.speaking import (
    SpeakingRule,
    mouth_activity_lookahead_s,
    role_channels,
    speaking_from_faces,
    speaking_from_transcript,
)
from ..sources.transcripts import Cue, speaking_intervals
from ..storage.provenance import cache_key
from ..storage.shard import LABEL_FPS, Channel
from .config import FeatureConfig

#: rule name and version for the per-role voice channels (part of their cache key)
SPEAKING_RULE = "speaking_from_faces"
SPEAKING_VERSION = "2"  # 2: records lookahead_s
#: the same from a transcript's cues (replaces the face rule where a session has a transcript)
TRANSCRIPT_SPEAKING_RULE = "speaking_from_transcript"
TRANSCRIPT_SPEAKING_VERSION = "2"  # 2: records lookahead_s
ROLE_VOICE_KEYS = ("speaker/egemaps", "listener/egemaps")
#: rule -> current version, for ``featurestore verify``
RULE_VERSIONS = {
    SPEAKING_RULE: SPEAKING_VERSION,
    TRANSCRIPT_SPEAKING_RULE: TRANSCRIPT_SPEAKING_VERSION,
}


def transcript_plan(
    names: Sequence[str], n_frames: int, transcript_source: dict, cfg: FeatureConfig | None = None
) -> dict[str, tuple]:
    """``role/channel`` -> (extractor, cache key, params) of transcript channels ``names`` for a
    session of ``n_frames`` label frames, with the extractors' settings of ``cfg`` (default:
    their defaults)."""
    cfg = cfg if cfg is not None else FeatureConfig()
    plan = {}
    for name in names:
        ex = cfg.extractor(name)
        if not isinstance(ex, TranscriptExtractor):
            raise ValueError(f"{name!r} is not a transcript channel (speech, lexicon)")
        params = {**ex.params(), "fps": LABEL_FPS, "n_frames": int(n_frames)}
        ck = cache_key(transcript_source, ex.name, ex.version, params)
        plan.update({f"{role}/{name}": (ex, ck, params) for role in ex.roles})
    return plan


def compute_transcript_channels(
    plan: dict[str, tuple[Any, ...]],
    keys: Sequence[str],
    cues: Sequence[Cue],
    transcript_source: dict[str, Any],
    created: str,
) -> dict[str, Channel]:
    """The channels ``keys`` of a :func:`transcript_plan`, computed from ``cues``, with provenance."""
    out: dict[str, Channel] = {}
    done: dict[str, dict[str, Features]] = {}
    for key in keys:
        ex, ck, params = plan[key]
        if ex.name not in done:
            done[ex.name] = ex.process_cues(cues, params["n_frames"], params["fps"])
        role = key.split("/")[0]
        lookahead, producer = ex.cues_lookahead_s(cues, role), (ex.name, ex.version)
        out[key] = channel_with_provenance(
            done[ex.name][role], producer, ck, params, transcript_source, created, lookahead
        )
    return out


def channel_with_provenance(
    feats: Features,
    producer: tuple[str, str],
    ck: str,
    params: dict[str, Any],
    source: dict[str, Any],
    created: str,
    lookahead_s: float | None,
    shared_with: str | None = None,
) -> Channel:
    """``feats`` as a channel with its provenance: the ``producer`` (the extractor's or rule's
    name and version), cache key ``ck``, ``params``, the ``source`` file's fingerprint, the time
    ``created``, ``lookahead_s`` and the channel whose rows it shares (``shared_with``: the
    shard stores them once, as hard links)."""
    name, version = producer
    return Channel.from_features(
        feats,
        extractor=name,
        extractor_version=version,
        params=params,
        cache_key=ck,
        source=source,
        created_utc=created,
        lookahead_s=lookahead_s,
        shared_with=shared_with,
    )


def _voice_key(upstream: str, rule: str, version: str) -> tuple[str, str, dict]:
    params = {"rule": rule}
    return upstream, cache_key(upstream, rule, version, params), params


def transcript_voice_key(scene_key: str, transcript_source: dict) -> tuple[str, str, dict]:
    """(upstream, cache key, params) of the per-role egemaps channels derived with a transcript."""
    src = transcript_source
    upstream = f"scene/egemaps={scene_key};transcript={src['size']}:{src['fingerprint']}"
    return _voice_key(upstream, TRANSCRIPT_SPEAKING_RULE, TRANSCRIPT_SPEAKING_VERSION)


def face_voice_key(scene_key: str, face_keys: Mapping[str, str]) -> tuple[str, str, dict]:
    """(upstream, cache key, params) of the per-role egemaps channels derived from the faces;
    ``face_keys``: role -> cache key of its ``face_geom``."""
    upstream = (
        f"scene/egemaps={scene_key};speaker/face_geom={face_keys['speaker']};"
        f"listener/face_geom={face_keys['listener']}"
    )
    return _voice_key(upstream, SPEAKING_RULE, SPEAKING_VERSION)


def channel_lookahead_s(feats: Features) -> float | None:
    """Seconds a channel's rows read after their time: a :class:`Channel`'s recorded
    ``lookahead_s``, else what its extractor declares; None when unknown (plain features too)."""
    if not isinstance(feats, Channel):
        return None
    return known_lookahead_s(
        feats.extractor, feats.extractor_version, feats.params, feats.lookahead_s
    )


def faces_voice_lookahead_s(
    scene: Features, faces: Mapping[str, Features], window_s: float = SpeakingRule.window_s
) -> float | None:
    """Seconds the face rule's per-role voice rows read after their time: the larger of the
    scene's look-ahead and, for each face, its own plus the mouth activity's; None when one of
    them is unknown."""
    parts = [channel_lookahead_s(scene)]
    for face in faces.values():
        own = channel_lookahead_s(face)
        parts.append(None if own is None else own + mouth_activity_lookahead_s(face, window_s))
    return None if any(p is None for p in parts) else max(p for p in parts if p is not None)


def _role_voice(
    scene: Features,
    speaking: Mapping[str, np.ndarray],
    producer: tuple[str, str],
    key: tuple[str, str, dict],
    source: dict,
    created: str,
    lookahead_s: float | None,
) -> dict[str, Channel]:
    _, ck, params = key
    # the scene's rows with a per-role `valid`: the shard stores them once (hard links)
    return {
        f"{role}/egemaps": channel_with_provenance(
            feats, producer, ck, params, source, created, lookahead_s, "scene/egemaps"
        )
        for role, feats in role_channels(scene, speaking).items()
    }


def role_voice_from_transcript(
    scene: Features,
    scene_key: str,
    cues: Sequence[Cue],
    transcript_source: dict[str, Any],
    created: str,
) -> dict[str, Channel]:
    """``speaker/egemaps`` and ``listener/egemaps``: the scene rows with ``valid`` where that
    role's cues are on (:func:`featurestore.sources.speaking.speaking_from_transcript`)."""
    key = transcript_voice_key(scene_key, transcript_source)
    speaking = speaking_from_transcript(speaking_intervals(cues), scene.time)
    # path + fingerprint: `featurestore verify` notices an edited transcript
    source = {"upstream": key[0], "rule": "transcript", **transcript_source}
    producer = (TRANSCRIPT_SPEAKING_RULE, TRANSCRIPT_SPEAKING_VERSION)
    # a frame is a role's from its cue's start on: the cue's end or words are not read
    lookahead = channel_lookahead_s(scene)
    return _role_voice(scene, speaking, producer, key, source, created, lookahead)


def role_voice_from_faces(
    scene: Channel,
    scene_key: str,
    faces: Mapping[str, Channel],
    face_keys: Mapping[str, str],
    created: str,
) -> dict[str, Channel]:
    """``speaker/egemaps`` and ``listener/egemaps`` from who moves their mouth
    (:func:`featurestore.sources.speaking.speaking_from_faces`); ``faces``: role -> its
    ``face_geom``, ``face_keys``: role -> that channel's cache key."""
    key = face_voice_key(scene_key, face_keys)
    speaking, source = speaking_from_faces(scene, faces), {"upstream": key[0], "rule": "faces"}
    lookahead = faces_voice_lookahead_s(scene, faces)
    return _role_voice(
        scene, speaking, (SPEAKING_RULE, SPEAKING_VERSION), key, source, created, lookahead
    )
