"""The embedded demo corpus: layout, labels, determinism, and that the planted signals are real.

One tiny corpus (2 listeners x stories 1-2 x 6 s), built once a session and shared with
the extraction tests; faces are measured with the real dlib landmarker and voices with the real openSMILE.
"""

from __future__ import annotations

import csv
import hashlib
import json

import numpy as np
import pytest

from experiments.evaluation.metrics import ccc
from featurestore import demo
from featurestore.demo.face import border_points
from featurestore.extraction.config import load_feature_config
from featurestore.extractors.landmarks import DlibLandmarker
from featurestore.sources import media
from featurestore.sources.manifest import STORY_SPEAKER, scan
from tests.featurestore.helpers import TINY_DEMO

TINY = TINY_DEMO


@pytest.fixture(scope="module")
def built(tiny_demo):
    """The session's tiny demo corpus (tests/featurestore/conftest.py), built with :data:`TINY`."""
    return tiny_demo


@pytest.fixture(scope="module")
def landmarker():
    return DlibLandmarker(detect_scale=0.5)


def read_valence(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["valence"], f"{path}: header {rows[0]}"
    return np.array([float(r[0]) for r in rows[1:]])


def mouth_measures(points: np.ndarray) -> tuple[float, float]:
    """Mouth width (48-54) and inner-lip opening (62-66), both over the interocular distance (36-45)."""
    iod = np.linalg.norm(points[45] - points[36])
    return np.linalg.norm(points[54] - points[48]) / iod, np.linalg.norm(
        points[66] - points[62]
    ) / iod


def eye_opening(points: np.ndarray) -> float:
    iod = np.linalg.norm(points[45] - points[36])
    pairs = [(37, 41), (38, 40), (43, 47), (44, 46)]
    return float(np.mean([np.linalg.norm(points[a] - points[b]) for a, b in pairs]) / iod)


def test_layout(built):
    out, info = built
    names = [f"Subject_{L}_Story_{S}" for L in (1, 2) for S in (1, 2)]
    assert list(info.sessions) == names
    truth = json.loads((out / "demo_truth.json").read_text())
    for n in names:
        assert (out / "Videos" / f"{n}.mp4").stat().st_size > 10_000
        listener, story = (int(v) for v in n.split("_")[1::2])
        plan = demo.plan_session(listener, story, duration_s=6)
        # the labels are the plan's, to the CSV's 6 decimals; the truth lists the plan's speech
        np.testing.assert_allclose(
            read_valence(out / "Annotations" / f"{n}.csv"), plan.valence, atol=6e-7
        )
        assert (
            truth["sessions"][n]["speech_phrases_s"] == [list(p) for p in plan.voices.phrases] != []
        )
        assert (
            truth["sessions"][n]["backchannels_s"]
            == [list(b) for b in plan.voices.backchannels]
            != []
        )
    assert not [p for p in out.rglob(".*")], "temporary files left behind"
    assert truth["seed"] == 0 and truth["label"]["delay_s"] == 1.5 and truth["split_x"] == 540
    assert sorted(truth["sessions"]) == sorted(names)
    readme = (out / "README.md").read_text()
    assert "smile(t - 1.5 s)" in readme and "valence_gain" in readme
    settings = load_feature_config(data_dir=out)
    assert settings.face_fps == 5.0 and settings.extractor_config("egemaps").sampling_rate == 16000
    assert "4 sessions of 6 s" in str(info)


def test_scan_finds_every_session(built):
    out, info = built
    report = scan(out)
    assert report.issues == []
    assert [s.session for s in report.sessions] == list(info.sessions)
    for s in report.sessions:
        assert s.video == out / "Videos" / f"{s.session}.mp4"
        assert s.annotations == {
            "valence_self": out / "Annotations" / f"{s.session}.csv",
            "valence_observer_listener": out / "Observer_Listener" / f"{s.session}.csv",
            "valence_observer_speaker": out / "Observer_Speaker" / f"{s.session}.csv",
        }
        assert (
            s.transcript
            == out / "Transcripts" / f"transcribed_subject_{s.listener}_story_{s.story}.srt"
        )
        assert s.speaker == STORY_SPEAKER[s.story]


def test_labels_match_decoded_video(built):
    out, info = built
    for sid in info.sessions:
        video = out / "Videos" / f"{sid}.mp4"
        meta = media.probe(video)
        assert (meta.width, meta.height, meta.fps, meta.audio_sampling_rate) == (
            1280,
            360,
            25.0,
            44100,
        )
        indices = [i for i, _, _ in media.iter_frames(video)]
        valence = read_valence(out / "Annotations" / f"{sid}.csv")
        assert indices == list(range(150))
        assert len(valence) == len(indices) == meta.n_frames == info.n_frames[sid]
        assert np.all(valence >= -1) and np.all(valence <= 1)
        assert valence.std() > 0.005, f"{sid}: valence is flat"
        audio = media.read_audio(video, 16000)
        assert abs(len(audio) / 16000 - 6.0) < 0.1


def test_same_seed_same_files(built, tmp_path):
    out, _ = built
    # a smaller build with the same seed: the shared session must come out identical
    again = demo.build_demo(tmp_path, n_listeners=1, stories=(1,), duration_s=6, progress=False)
    assert again.sessions == ("Subject_1_Story_1",)
    sid = "Subject_1_Story_1"
    a = (out / "Annotations" / f"{sid}.csv").read_bytes()
    b = (tmp_path / "Annotations" / f"{sid}.csv").read_bytes()
    assert a == b

    def frames_digest(path):
        h = hashlib.blake2b()
        for _, _, rgb in media.iter_frames(path):
            h.update(rgb.tobytes())
        return h.hexdigest()

    assert frames_digest(out / "Videos" / f"{sid}.mp4") == frames_digest(
        tmp_path / "Videos" / f"{sid}.mp4"
    )
    # same FFmpeg/x264 build (this process): the MP4 bytes are identical too
    assert (out / "Videos" / f"{sid}.mp4").read_bytes() == (
        tmp_path / "Videos" / f"{sid}.mp4"
    ).read_bytes()
    truth_a = json.loads((out / "demo_truth.json").read_text())["sessions"][sid]
    truth_b = json.loads((tmp_path / "demo_truth.json").read_text())["sessions"][sid]
    assert truth_a == truth_b
    # another seed gives other labels
    other = demo.plan_session(1, 1, duration_s=6, seed=1).valence
    assert not np.allclose(other, read_valence(out / "Annotations" / f"{sid}.csv"), atol=1e-3)


def test_rendered_states_move_measured_landmarks(landmarker):
    rig = demo.face_rig()
    widths = []
    for smile in (0, 3, 6):
        points = landmarker.detect(rig.render(smile=smile))
        assert points is not None, f"no face in smile state {smile}"
        widths.append(mouth_measures(points)[0])
    assert widths[0] < widths[1] < widths[2], widths
    assert widths[2] - widths[0] > 0.08, widths

    openings = []
    for mouth in (0, 1, 3):
        points = landmarker.detect(rig.render(mouth=mouth))
        assert points is not None, f"no face in mouth state {mouth}"
        openings.append(mouth_measures(points)[1])
    assert openings[0] < openings[1] < openings[2], openings
    assert openings[2] - openings[0] > 0.1, openings

    open_eyes = eye_opening(landmarker.detect(rig.render(blink=0)))
    closed_eyes = eye_opening(landmarker.detect(rig.render(blink=2)))
    assert closed_eyes < 0.7 * open_eyes, (open_eyes, closed_eyes)


def test_faces_found_in_decoded_frames(built, landmarker):
    out, _ = built
    regions = media.role_regions(1280)
    assert regions == {"speaker": (0, 540), "listener": (540, 1280)}
    found = {"speaker": 0, "listener": 0}
    n = 0
    for _, _, rgb in media.iter_frames(out / "Videos" / "Subject_2_Story_1.mp4", sample_fps=2):
        n += 1
        for role, (x0, x1) in regions.items():
            points = landmarker.detect(rgb[:, x0:x1])
            if points is not None:
                found[role] += 1
                # the face sits inside its own half, with a plausible size (~120 px between the eyes)
                iod = np.linalg.norm(points[45] - points[36])
                assert 90 < iod < 150, (role, iod)
    assert n == 12
    assert found["speaker"] >= n - 1 and found["listener"] >= n - 1, found


def test_voices_are_voiced_where_planned(built):
    import opensmile

    out, _ = built
    sid = "Subject_1_Story_1"
    truth = json.loads((out / "demo_truth.json").read_text())["sessions"][sid]
    smile = opensmile.Smile(
        feature_set=opensmile.FeatureSet.eGeMAPSv02,
        feature_level=opensmile.FeatureLevel.LowLevelDescriptors,
    )
    lld = smile.process_signal(media.read_audio(out / "Videos" / f"{sid}.mp4", 16000), 16000)
    start = lld.index.get_level_values("start").total_seconds()
    end = lld.index.get_level_values("end").total_seconds()
    mid = np.asarray((start + end) / 2)
    f0 = lld["F0semitoneFrom27.5Hz_sma3nz"].to_numpy()

    def within(intervals, pad=0.0):
        m = np.zeros(len(mid), bool)
        for a, b in intervals:
            m |= (mid >= a - pad) & (mid < b + pad)
        return m

    speech, backchannel = within(truth["speech_phrases_s"]), within(truth["backchannels_s"])
    silence = ~within(truth["speech_phrases_s"] + truth["backchannels_s"], pad=0.15)
    assert speech.sum() > 100 and backchannel.sum() > 20 and silence.sum() > 20
    assert (f0[speech] > 0).mean() > 0.7
    assert (f0[backchannel] > 0).mean() > 0.6
    assert (f0[silence] > 0).mean() < 0.1
    hz = lambda st: 27.5 * 2 ** (np.median(st) / 12)  # noqa: E731
    speaker_hz, listener_hz = hz(f0[speech & (f0 > 0)]), hz(f0[backchannel & (f0 > 0)])
    assert 100 < speaker_hz < 220 and listener_hz > speaker_hz + 40, (speaker_hz, listener_hz)


def test_planted_relations():
    plan = demo.plan_session(1, 1, duration_s=40, seed=0)
    v = plan.valence
    r = lambda a, b: np.corrcoef(a, b)[0, 1]  # noqa: E731
    assert r(v, plan.smile_delayed) > 0.8
    assert r(v, plan.smile_delayed) > r(v, plan.smile) + 0.2  # the delay matters
    assert abs(r(v, plan.speaker_term)) < 0.6 * r(v, plan.smile_delayed)
    # the rendered smile level, shifted, peaks near the 1.5 s label delay (37.5 frames)
    level = np.asarray(demo.SMILE_LEVELS)[plan.states["listener"]["smile"]]
    lags = np.arange(0, 101)
    corr = [r(v[lag:], level[: len(level) - lag]) for lag in lags]
    assert abs(lags[int(np.argmax(corr))] - 37.5) <= 4
    # the speaker's mouth moves with the voice: open mostly inside phrases
    t = plan.times
    in_phrase = np.zeros(plan.n_frames, bool)
    for a, b in plan.voices.phrases:
        in_phrase |= (t >= a) & (t < b + 0.05)
    mouth_open = plan.states["speaker"]["mouth"] > 0
    assert mouth_open[in_phrase].mean() > 0.6 and mouth_open[~in_phrase].mean() < 0.05
    # the listener's mouth opens for every backchannel and nowhere else
    lis_open = plan.states["listener"]["mouth"] > 0
    assert (
        lis_open.sum()
        == sum(int(((t >= a) & (t < b)).sum()) for a, b in plan.voices.backchannels)
        > 0
    )


def test_planted_story_curve_and_listener_differences():
    """The story has a common curve every listener's valence follows (with the listener's sign);
    listeners differ by offset, gain and sign, so knowing who listens helps; the speaker's face tells
    the story's curve."""
    r = lambda a, b: float(np.corrcoef(a, b)[0, 1])  # noqa: E731
    listeners = range(1, 7)
    params = {L: demo.listener_params(L) for L in listeners}
    assert [params[L].story_sign for L in listeners] == [1, -1, 1, 1, 1, 1]
    assert np.ptp([params[L].valence_offset for L in listeners]) > 0.2
    for story in (3, 6):
        plans = {L: demo.plan_session(L, story, duration_s=24) for L in listeners}
        t = plans[1].times
        curve = demo.story_curve(story, t - demo.LABEL_DELAY_S)
        for L, plan in plans.items():
            assert params[L].story_sign * r(plan.valence, curve) > 0.3, (story, L)
        # the common part: the valence averaged over the listeners who feel with the story follows it
        with_story = np.mean(
            [plans[L].valence for L in listeners if params[L].story_sign > 0], axis=0
        )
        assert r(with_story, curve) > 0.8
        # the speaker's smile follows the story's curve (not delayed: the listener answers later)
        smile_state = plans[1].states["speaker"]["smile"]
        assert r(smile_state, demo.story_curve(story, t)) > 0.9
        # per-listener level and scale: an affine map per listener from the latent smile fits the
        # valence better than one map for all, in CCC (what the personalized track can exploit)
        X = np.concatenate([p.smile_delayed for p in plans.values()])
        y = np.concatenate([p.valence for p in plans.values()])
        a, b = np.polyfit(X, y, 1)
        pooled = [ccc(p.valence, a * p.smile_delayed + b) for p in plans.values()]
        own = [
            ccc(p.valence, np.polyval(np.polyfit(p.smile_delayed, p.valence, 1), p.smile_delayed))
            for p in plans.values()
        ]
        assert np.mean(own) > np.mean(pooled) + 0.05


def test_piecewise_affine_map_matches_skimage():
    from skimage.transform import PiecewiseAffineTransform

    rng = np.random.default_rng(3)
    h, w = 60, 80
    ring = border_points(w, h, spacing=15)
    inner = rng.uniform([10, 10], [w - 10, h - 10], (12, 2))
    moved = inner + rng.uniform(-3, 3, inner.shape)
    out_pts, in_pts = np.vstack([moved, ring]), np.vstack([inner, ring])
    mx, my = demo.piecewise_affine_map(out_pts, in_pts, (h, w))
    if hasattr(PiecewiseAffineTransform, "from_estimate"):
        tform = PiecewiseAffineTransform.from_estimate(out_pts, in_pts)
    else:
        tform = PiecewiseAffineTransform()
        assert tform.estimate(out_pts, in_pts)
    yy, xx = np.mgrid[0:h, 0:w]
    ref = tform(np.c_[xx.ravel(), yy.ravel()].astype(float))
    assert np.abs(ref[:, 0] - mx.ravel()).max() < 1e-3
    assert np.abs(ref[:, 1] - my.ravel()).max() < 1e-3


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"stories": (9,)}, "stories \\[9\\]"),
        ({"duration_s": 1.0}, "at least 2 seconds"),
        ({"width": 1281}, "even"),
        ({"width": 400, "height": 120}, "too small"),
        ({"n_listeners": 0}, "n_listeners"),
    ],
)
def test_bad_arguments(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        demo.build_demo(tmp_path, progress=False, **{**TINY, **kwargs})
