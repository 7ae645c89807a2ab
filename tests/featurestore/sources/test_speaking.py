"""Who is talking: the face rule on a synthetic scene, the transcript rule, per-role channels."""

import numpy as np
import pytest

from featurestore.features import Features
from featurestore.sources.speaking import (
    F0_COLUMN,
    LOUDNESS_COLUMN,
    MOUTH_COLUMN,
    SpeakingRule,
    mouth_activity,
    role_channels,
    speaking_from_faces,
    speaking_from_transcript,
)

DURATION_S = 10.0
FACE_FPS = 5.0


def make_scene(voiced_from=1.0, voiced_to=9.0) -> Features:
    """10 ms frames; voiced (F0 > 0, loud) in [voiced_from, voiced_to) except a pause at 3.0-3.5 s."""
    time = np.arange(int(DURATION_S / 0.01)) * 0.01
    voiced = (time >= voiced_from) & (time < voiced_to) & ~((time >= 3.0) & (time < 3.5))
    f0 = np.where(voiced, 30.0, 0.0)
    loud = np.where(voiced, 0.8, 0.01)
    other = np.random.default_rng(1).normal(size=time.size)
    valid = np.ones(time.size, bool)
    return Features(np.c_[loud, f0, other], time, valid, [LOUDNESS_COLUMN, F0_COLUMN, "mfcc1_sma3"])


def make_mouth(moving, seed: int, no_face=None) -> Features:
    """5 fps mouth_open: opening and closing (1.7 Hz, amplitude 0.1 interocular distances)
    where ``moving(t)``, still up to landmark jitter (std 0.002) elsewhere."""
    time = np.arange(int(DURATION_S * FACE_FPS)) / FACE_FPS
    jitter = np.random.default_rng(seed).normal(scale=0.002, size=time.size)
    x = 0.2 + jitter + np.where(moving(time), 0.1 * np.sin(2 * np.pi * 1.7 * time + seed), 0.0)
    valid = np.ones(time.size, bool)
    if no_face is not None:
        valid = ~no_face(time)
        x[~valid] = np.nan
    return Features(x, time, valid, [MOUTH_COLUMN])


def first_half(t):
    return t < 5.0


def second_half(t):
    return t >= 5.0


def between(a, b):
    return lambda t: (t >= a) & (t < b)


@pytest.fixture
def scene():
    return make_scene()


def region(scene, a, b):
    return (scene.time >= a) & (scene.time < b)


def test_mouth_activity_interpolated_and_unknown_without_face():
    track = make_mouth(first_half, seed=0, no_face=between(7.0, 8.0))
    times = np.arange(0, DURATION_S, 0.01)
    act = mouth_activity(track, times, window_s=0.6)
    assert act.shape == times.shape
    assert np.nanmedian(act[times < 4.5]) > 0.04
    assert np.nanmedian(act[(times > 5.5) & (times < 6.5)]) < 0.01
    assert np.isnan(act[(times > 7.15) & (times < 7.85)]).all()
    assert np.isfinite(act[(times > 0.3) & (times < 6.5)]).all()


def test_faces_attribute_each_half(scene):
    mouth = {"speaker": make_mouth(first_half, 0), "listener": make_mouth(second_half, 1)}
    talk = speaking_from_faces(scene, mouth)
    assert set(talk) == {"speaker", "listener"}
    voiced = scene.data[:, 1] > 0
    for role in talk:
        assert talk[role].dtype == bool and talk[role].shape == scene.time.shape
        assert not (talk[role] & ~voiced).any()  # never on unvoiced frames
    assert talk["speaker"][region(scene, 1.0, 3.0) | region(scene, 3.5, 4.6)].all()
    assert not talk["listener"][region(scene, 1.0, 4.6)].any()
    assert talk["listener"][region(scene, 5.4, 9.0)].all()
    assert not talk["speaker"][region(scene, 5.4, 9.0)].any()
    assert not talk["speaker"][region(scene, 3.0, 3.5)].any()  # the pause


def test_close_activities_mark_both(scene):
    same = make_mouth(first_half, 0)
    talk = speaking_from_faces(scene, {"speaker": same, "listener": same})
    assert talk["speaker"][region(scene, 1.0, 3.0)].all()
    assert talk["listener"][region(scene, 1.0, 3.0)].all()
    assert not talk["speaker"][region(scene, 5.4, 9.0)].any()  # both still: nobody


def test_tie_ratio_is_a_parameter(scene):
    loud_mouth = make_mouth(first_half, 0)
    quieter = Features(
        0.2 + (loud_mouth.data - 0.2) * 0.7, loud_mouth.time, loud_mouth.valid, [MOUTH_COLUMN]
    )
    both = speaking_from_faces(
        scene, {"speaker": loud_mouth, "listener": quieter}, rule=SpeakingRule(tie_ratio=1.5)
    )
    one = speaking_from_faces(
        scene, {"speaker": loud_mouth, "listener": quieter}, rule=SpeakingRule(tie_ratio=1.25)
    )
    part = region(scene, 1.0, 3.0)
    assert both["listener"][part].all() and both["speaker"][part].all()
    assert not one["listener"][part].any() and one["speaker"][part].all()


def test_no_face_never_marked(scene):
    mouth = {
        "speaker": make_mouth(first_half, 0, no_face=between(2.0, 3.0)),
        "listener": make_mouth(second_half, 1, no_face=between(6.0, 7.0)),
    }
    talk = speaking_from_faces(scene, mouth)
    # a hidden face is never credited; the still visible one is not either
    assert not talk["speaker"][region(scene, 2.1, 2.9)].any()
    assert not talk["listener"][region(scene, 2.1, 2.9)].any()
    assert not talk["listener"][region(scene, 6.1, 6.9)].any()
    # one face hidden, the other moving: the visible moving mouth is credited
    mouth["listener"] = make_mouth(second_half, 1, no_face=between(0.0, 5.0))
    talk = speaking_from_faces(scene, mouth)
    assert talk["speaker"][region(scene, 1.0, 1.9)].all()
    # no face tracks at all: nobody
    nobody = speaking_from_faces(scene, {})
    assert not nobody["speaker"].any() and not nobody["listener"].any()


def test_faces_errors_name_the_problem(scene):
    bad = Features(np.zeros(5), np.arange(5) / 5, np.ones(5, bool), ["jaw_open"])
    with pytest.raises(ValueError, match="mouth_open"):
        speaking_from_faces(scene, {"speaker": bad})
    with pytest.raises(ValueError, match="unknown roles"):
        speaking_from_faces(scene, {"scene": make_mouth(first_half, 0)})
    no_f0 = Features(scene.data[:, :1], scene.time, scene.valid, [LOUDNESS_COLUMN])
    with pytest.raises(ValueError, match="F0semitone"):
        speaking_from_faces(no_f0, {})


def test_transcript_cues():
    times = np.arange(300) * 0.01
    cues = [
        (0.5, 1.0, "speaker"),
        (0.9, 1.5, "listener"),
        (2.0, 2.5, "speaker"),
        (2.2, 2.3, "speaker"),
    ]
    talk = speaking_from_transcript(cues, times)
    sp, li = talk["speaker"], talk["listener"]
    assert sp[50] and sp[99] and not sp[100] and not sp[49]  # start inclusive, end exclusive
    assert li[90] and li[149] and not li[150] and not li[89]
    assert (sp & li).sum() == 10  # 0.90-0.99 overlap
    assert sp[200:250].all() and not sp[250:].any()  # nested cue does not end the outer one
    assert sp.sum() == 100 and li.sum() == 60
    empty = speaking_from_transcript([], times)
    assert not empty["speaker"].any() and not empty["listener"].any()


def test_transcript_errors():
    times = np.arange(10) * 0.01
    with pytest.raises(ValueError, match="role"):
        speaking_from_transcript([(0.0, 0.05, "S")], times)
    with pytest.raises(ValueError, match="before start"):
        speaking_from_transcript([(0.05, 0.0, "speaker")], times)
    with pytest.raises(ValueError, match="sorted"):
        speaking_from_transcript([], times[::-1])


def test_role_channels_share_data(scene):
    scene.valid[::7] = False
    talk = speaking_from_transcript([(1.0, 4.0, "speaker"), (6.0, 8.0, "listener")], scene.time)
    chans = role_channels(scene, talk)
    assert set(chans) == {"speaker", "listener"}
    for role, ch in chans.items():
        assert np.shares_memory(ch.data, scene.data)
        assert ch.columns == scene.columns
        np.testing.assert_array_equal(ch.time, scene.time)
        np.testing.assert_array_equal(ch.valid, scene.valid & talk[role])
    assert not np.array_equal(chans["speaker"].valid, chans["listener"].valid)
    with pytest.raises(ValueError, match="speaker"):
        role_channels(scene, {"speaker": talk["speaker"][:-1]})
