"""Every read of the future at extraction: the input is changed after a time tau, and the
earliest output that moves lies within the channel's recorded ``lookahead_s`` before tau, and
near it (so each read is real and the bound is not loose)."""

from __future__ import annotations

import wave

import numpy as np
import pytest

from featurestore.extraction.derived import (
    compute_transcript_channels,
    role_voice_from_faces,
    role_voice_from_transcript,
    transcript_plan,
)
from featurestore.extractors import get_extractor, known_lookahead_s
from featurestore.extractors.base import decode_lookahead_s
from featurestore.extractors.egemaps import ANALYSIS_LOOKAHEAD_S, HOP_S, EgemapsExtractor
from featurestore.extractors.transcript import LexiconExtractor, SpeechExtractor
from featurestore.features import Features
from featurestore.sources import media
from featurestore.sources.speaking import (
    F0_COLUMN,
    LOUDNESS_COLUMN,
    MOUTH_COLUMN,
    mouth_activity,
    mouth_activity_lookahead_s,
)
from featurestore.sources.transcripts import Cue
from featurestore.storage.store import Channel, SessionMeta, Store

EGEMAPS_LOOKAHEAD_S = ANALYSIS_LOOKAHEAD_S + decode_lookahead_s(16000)


def _first_change(times: np.ndarray, a: np.ndarray, b: np.ndarray) -> float:
    """The earliest time whose row differs between ``a`` and ``b`` (NaN equal to NaN)."""
    a, b = a.reshape(len(times), -1), b.reshape(len(times), -1)
    moved = ~((a == b) | (np.isnan(a) & np.isnan(b))).all(axis=1)
    assert moved.any(), "the change after tau moved nothing"
    return float(times[np.argmax(moved)])


def test_egemaps_reads_70_ms_of_audio_ahead():
    """A row at time s reads the audio up to s + 70 ms (its successor's 60 ms frame, through
    the centred 3-row average): after tau, the row 60-70 ms earlier moves, none before it."""
    pytest.importorskip("opensmile")
    sr, rng = 16000, np.random.default_rng(0)
    t = np.arange(3 * sr) / sr
    f0 = 150 + 20 * np.sin(2 * np.pi * 3 * t)  # a voiced tone with vibrato and some noise
    x = (0.3 * np.sin(2 * np.pi * np.cumsum(f0) / sr) + 0.02 * rng.standard_normal(t.size)).astype(
        np.float32
    )
    ex = EgemapsExtractor()
    clean = ex.process_signal(x, sr)["scene"]
    reach = []
    for tau in (1.5, 1.503, 2.0):
        y = x.copy()
        k = int(round(tau * sr))
        y[k:] = 0.5 * rng.standard_normal(y.size - k)
        moved = ex.process_signal(y, sr)["scene"]
        reach.append(tau - _first_change(clean.time, clean.data, moved.data))
    assert max(reach) <= ANALYSIS_LOOKAHEAD_S + 1e-9
    assert min(reach) > ANALYSIS_LOOKAHEAD_S - HOP_S - 1e-9  # the 60 ms frames really are read
    assert ex.lookahead_s() == pytest.approx(EGEMAPS_LOOKAHEAD_S)


def _wav(path, x: np.ndarray, sr: int) -> None:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(sr)
        w.writeframes((np.clip(x, -1, 1) * 32767).astype("<i2").tobytes())


@pytest.mark.parametrize("source_hz", [8000, 16000, 22050, 48000])
def test_decoding_audio_reads_at_most_2_ms_ahead(tmp_path, source_hz):
    """FFmpeg's resampler (read_audio at 16 kHz) centres its filter on each output sample: a
    change after tau moves output samples up to 16 samples of the lower rate earlier."""
    pytest.importorskip("av")
    rng, tau = np.random.default_rng(1), 1.0
    x = 0.3 * rng.standard_normal(2 * source_hz)
    y = x.copy()
    y[int(tau * source_hz) :] = 0.3 * rng.standard_normal(y.size - int(tau * source_hz))
    _wav(tmp_path / "a.wav", x, source_hz)
    _wav(tmp_path / "b.wav", y, source_hz)
    a, b = media.read_audio(tmp_path / "a.wav", 16000), media.read_audio(tmp_path / "b.wav", 16000)
    reach = tau - _first_change(np.arange(a.size) / 16000, a, b)
    assert reach <= decode_lookahead_s(16000)
    if source_hz != 16000:  # resampled: it does read ahead (1.0 ms from 22-48 kHz, 1.9 from 8)
        assert reach >= 0.9e-3


def _face(t: np.ndarray, rng, extractor: str = "face_geom", lookahead: float | None = 0.0):
    data = rng.normal(0.3, 0.1, (t.size, 2))
    valid = rng.random(t.size) > 0.1
    data[~valid] = np.nan
    return Channel(
        data,
        t,
        valid,
        [MOUTH_COLUMN, "other"],
        extractor=extractor,
        extractor_version=get_extractor("face_geom").version if extractor == "face_geom" else "2",
        lookahead_s=lookahead,
    )


def test_mouth_activity_reads_half_its_window_and_a_face_step_ahead():
    """The centred 0.6 s window at a 5 fps sample reads the samples 0.2 s after it, and a
    10 ms scene frame takes the activity of the next face sample: 0.38-0.39 s after tau at
    most, within the recorded 0.5 s (half the window plus the 0.2 s face step)."""
    rng = np.random.default_rng(2)
    face = _face(np.arange(0, 20, 0.2), rng)
    scene_t = np.arange(0, 2000) / 100.0
    clean = mouth_activity(face, scene_t)
    bound = mouth_activity_lookahead_s(face)
    assert bound == pytest.approx(0.5)
    reach = []
    for tau in (5.0, 7.19, 10.11, 12.39):
        later = face.time > tau
        data = face.data.copy()
        data[later, 0] = rng.normal(0.3, 0.2, later.sum())
        moved = mouth_activity(Features(data, face.time, face.valid, face.columns), scene_t)
        reach.append(tau - _first_change(scene_t, clean, moved))
    assert max(reach) <= bound
    assert max(reach) > 0.3  # more than half the window: the next face sample's window


def test_a_transcript_frame_reads_its_cue_to_the_end():
    """``words_per_s`` and ``lexicon`` early in a cue read the cue's word count and end (the
    words said so far are an even spread over it): a cue that goes on a second longer, with
    more words, moves frames in its first half second; ``talking`` reads only that the cue
    began. The recorded look-ahead, the role's longest cue, covers the reach."""
    pytest.importorskip("vaderSentiment")
    fps, n = 25.0, 250
    t = np.arange(n) / fps
    short = [Cue(1.0, 4.0, "speaker", "what a great day"), Cue(6.0, 7.0, "listener", "yes")]
    longer = [Cue(1.0, 5.0, "speaker", "what a great day it was not"), short[1]]
    for ex in (SpeechExtractor(), LexiconExtractor()):
        a = ex.process_cues(short, n, fps)["speaker"].data
        b = ex.process_cues(longer, n, fps)["speaker"].data
        first = _first_change(t, a, b)
        assert 1.0 <= first < 1.5, ex.name  # nothing before the cue; 3.5 s before its new end
        assert ex.cues_lookahead_s(longer, "speaker") == 4.0 >= 5.0 - first
        assert ex.cues_lookahead_s(short, "speaker") == 3.0
        assert ex.cues_lookahead_s(short, "listener") == 1.0
    speech = SpeechExtractor()
    a = speech.process_cues(short, n, fps)["speaker"]
    b = speech.process_cues(longer, n, fps)["speaker"]
    talking = a.columns.index("talking")
    np.testing.assert_array_equal(a.data[:100, talking], b.data[:100, talking])  # before 4 s


def _scene(t: np.ndarray, rng, lookahead: float | None) -> Channel:
    data = np.column_stack(
        [rng.uniform(0, 30, t.size), rng.uniform(0.0, 1.0, t.size), rng.normal(size=t.size)]
    )
    return Channel(
        data,
        t,
        np.ones(t.size, bool),
        [F0_COLUMN, LOUDNESS_COLUMN, "x"],
        extractor="egemaps",
        extractor_version=get_extractor("egemaps").version,
        cache_key="scene",
        lookahead_s=lookahead,
    )


def test_the_derived_channels_record_their_lookahead_and_the_shard_keeps_it(tmp_path):
    rng = np.random.default_rng(3)
    scene = _scene(np.arange(1000) / 100.0, rng, EGEMAPS_LOOKAHEAD_S)
    faces = {r: _face(np.arange(0, 10, 0.2), rng) for r in ("speaker", "listener")}
    keys = {"speaker": "s", "listener": "l"}
    voice = role_voice_from_faces(scene, "scene", faces, keys, "2024-01-01T00:00:00+00:00")
    # the mouth activity's reach on 5 fps faces: 0.5 s, beyond the scene's 0.072 s
    assert {k: ch.lookahead_s for k, ch in voice.items()} == {
        "speaker/egemaps": pytest.approx(0.5),
        "listener/egemaps": pytest.approx(0.5),
    }
    # a scene written before the attribute existed: its extractor's declaration stands in
    old_scene = _scene(scene.time, rng, None)
    assert role_voice_from_faces(old_scene, "scene", faces, keys, "")[
        "speaker/egemaps"
    ].lookahead_s == pytest.approx(0.5)
    # an imported face whose look-ahead nobody declared: the voice channels' is unknown too
    unknown = {**faces, "listener": _face(faces["listener"].time, rng, "import:openface", None)}
    assert (
        role_voice_from_faces(scene, "scene", unknown, keys, "")["speaker/egemaps"].lookahead_s
        is None
    )
    # the transcript rule marks a frame from its cue's start on: only the scene's reach
    cues = [Cue(1.0, 3.5, "speaker", "a b c"), Cue(4.0, 4.5, "listener", "hm")]
    source = {"path": "t.srt", "size": 1, "fingerprint": "f"}
    by_cues = role_voice_from_transcript(scene, "scene", cues, source, "")
    assert by_cues["listener/egemaps"].lookahead_s == pytest.approx(EGEMAPS_LOOKAHEAD_S)
    plan = transcript_plan(["speech"], 250, source)
    text = compute_transcript_channels(plan, list(plan), cues, source, "")
    assert (text["speaker/speech"].lookahead_s, text["listener/speech"].lookahead_s) == (2.5, 0.5)
    # written and read back: the attribute when known, none when not
    store = Store(tmp_path, mode="a")
    meta = SessionMeta("Subject_1_Story_1", 1, 1, 1, "train", 250)
    store.write_session(
        meta,
        channels={
            "scene/egemaps": old_scene,
            **text,
            **{f"{r}/face_geom": f for r, f in faces.items()},
        },
    )
    back = {
        k: store.read_channel(meta.session, k).lookahead_s
        for k in ("scene/egemaps", "speaker/speech", "listener/face_geom")
    }
    assert back == {"scene/egemaps": None, "speaker/speech": 2.5, "listener/face_geom": 0.0}


def test_a_lookahead_is_the_recorded_one_else_the_extractor_version_s():
    face_v = get_extractor("face_geom").version
    assert known_lookahead_s("face_geom", face_v, {}, recorded=0.25) == 0.25  # recorded wins
    assert known_lookahead_s("face_geom", face_v, {"face_fps": 5.0}) == 0.0
    assert known_lookahead_s("egemaps", "1", {"sampling_rate": 16000}) == pytest.approx(
        EGEMAPS_LOOKAHEAD_S
    )
    assert known_lookahead_s("egemaps", "1", {"sampling_rate": 8000}) == pytest.approx(
        ANALYSIS_LOOKAHEAD_S + 16 / (0.97 * 8000)
    )
    assert known_lookahead_s("face_geom", "0", {}) is None  # another version: not known
    assert known_lookahead_s("speech", "2", {}) is None  # depends on the cues
    assert known_lookahead_s("import:table", "2", {}) is None
    assert known_lookahead_s("speaking_from_faces", "2", {}) is None  # a rule: recorded only
