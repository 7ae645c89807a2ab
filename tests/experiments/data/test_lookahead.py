"""A configuration's look-ahead counts every read of the future: resampling onto label frames,
each channel's extraction (the mouth-activity window of the per-role voice channels), windows
and smoothing, less the delay. Checked by changing the source after a time tau and seeing which
earlier resampled frames, windowed features and predictions move."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from experiments.config.grid import WindowKey, expand
from experiments.config.loading import load_config
from experiments.data.dataset import load_sessions, resample_channel, resampling_lookahead_s
from experiments.data.lookahead import channel_lookaheads, unknown_note, with_channel_lookahead
from experiments.evaluation.evaluate import evaluate_trial
from experiments.windowing.windowed import window_sessions
from featurestore.extraction.derived import role_voice_from_faces
from featurestore.extractors import get_extractor
from featurestore.extractors.egemaps import EgemapsExtractor
from featurestore.sources.speaking import F0_COLUMN, LOUDNESS_COLUMN, MOUTH_COLUMN
from featurestore.storage.store import Channel, SessionMeta, Store, session_name
from tests.experiments.data.helpers import egemaps_channel, face_channel

FPS = 25.0
N = 500  # 20 s
SPLIT_OF = {1: "val", 2: "train", 3: "test", 4: "train"}
ALTERED = session_name(1, 3)  # a test session
TAU_S = 11.99  # its source changes after this time: just before a 5 fps face sample (12.0 s)


# ------------------------------------------------------------------ resampling
def _measured_reach(ch: Channel, n_frames: int) -> float:
    """The most seconds after a frame's instant of a sample whose change moves that frame:
    each valid sample changed in turn, the channel resampled again."""
    clean, _ = resample_channel(ch.data, ch.time, ch.valid, n_frames)
    t = np.arange(n_frames) / FPS
    reach = -math.inf
    for j in np.flatnonzero(ch.valid):
        data = ch.data.copy()
        data[j] = np.nan_to_num(data[j]) + 1.0
        moved, _ = resample_channel(data, ch.time, ch.valid, n_frames)
        hit = ~((clean == moved) | (np.isnan(clean) & np.isnan(moved))).all(axis=1)
        if hit.any():
            reach = max(reach, float(np.max(ch.time[j] - t[hit])))
    return reach


def _slow_channel(rng) -> Channel:
    """1 Hz: no two valid samples within max_gap_s, so a frame holds the nearest one."""
    t = np.arange(10.0)
    return Channel(rng.normal(size=(10, 2)), t, np.ones(10, bool), ["a", "b"])


def _label_rate_channel(rng) -> Channel:
    """25 fps at the label instants, a stretch invalid (interpolated across, 0.4 s ahead)."""
    t = np.arange(N // 2) / FPS
    valid = np.ones(t.size, bool)
    valid[100:110] = False
    return Channel(rng.normal(size=(t.size, 1)), t, valid, ["a"])


@pytest.mark.parametrize(
    "make, expected",
    [
        (face_channel, 0.36),  # 5 fps, one sample missing: the 0.4 s gap bridged from 0.04 s on
        (egemaps_channel, None),  # 100 Hz: the samples up to half a frame after it
        (_slow_channel, 0.48),  # the nearest sample, within half a period: 0.5 s from 0.52 s
        (_label_rate_channel, None),
    ],
)
def test_resampling_reads_as_far_ahead_as_counted(make, expected):
    """resampling_lookahead_s is exactly how far ahead a changed sample moves a frame."""
    ch = make(np.random.default_rng(0))
    n = int(ch.time[-1] * FPS) + 1
    counted = resampling_lookahead_s(ch.time, ch.valid, n)
    assert counted == pytest.approx(_measured_reach(ch, n), abs=1e-9)
    if expected is not None:
        assert counted == pytest.approx(expected, abs=1e-9)
    elif make is egemaps_channel:
        assert 0.01 - 1e-9 <= counted <= 0.02 + 1e-9
    else:
        assert counted == pytest.approx(10 / FPS, abs=1e-9)  # the 11th sample, 0.4 s on


# --------------------------------------------------- a store as extraction writes it
def _face(rng, hidden, alter: bool) -> Channel:
    """5 fps face geometry: ``mouth_open`` moving while talking, ``smile`` the hidden signal."""
    t = np.arange(0, N / FPS, 0.2)
    data = np.column_stack([0.3 + 0.05 * rng.normal(size=t.size), hidden(t)])
    valid = rng.random(t.size) > 0.08
    if alter:  # after tau: another face (a wildly moving mouth, another smile), drawn aside
        later, other = t > TAU_S, np.random.default_rng(99)
        data[later] = np.column_stack(
            [other.uniform(0, 1, later.sum()), other.normal(size=later.sum())]
        )
    data[~valid] = np.nan
    ex = get_extractor("face_geom")()
    return Channel(
        data,
        t,
        valid,
        [MOUTH_COLUMN, "smile"],
        extractor=ex.name,
        extractor_version=ex.version,
        cache_key=f"face-{alter}",
        lookahead_s=ex.lookahead_s(),
    )


def _scene(rng) -> Channel:
    """100 Hz eGeMAPS-like rows: voiced (F0 > 0, loud) in bursts, a third column of noise."""
    t = np.arange(4 * N) / 100.0
    voiced = (np.sin(2 * np.pi * 0.3 * t) > 0) & (rng.random(t.size) > 0.2)
    data = np.column_stack(
        [
            np.where(voiced, 30 + rng.normal(size=t.size), 0.0),
            np.where(voiced, 0.5, 0.01),
            rng.normal(size=t.size),
        ]
    )
    ex = EgemapsExtractor()
    return Channel(
        data,
        t,
        np.ones(t.size, bool),
        [F0_COLUMN, LOUDNESS_COLUMN, "x"],
        extractor=ex.name,
        extractor_version=ex.version,
        cache_key="scene",
        lookahead_s=ex.lookahead_s(),
    )


def _write_store(root, altered: bool = False) -> Store:
    """2 listeners x stories 1-4, 20 s each: faces at 5 fps and the scene's eGeMAPS as extraction
    records them, the per-role voice channels derived by the face rule (mouth activity); the
    valence is the listener's hidden smile 1 s earlier. ``altered``: the test session
    :data:`ALTERED` has other faces after :data:`TAU_S`, its voice channels derived again."""
    store = Store(root, mode="a")
    for listener in (1, 2):
        for story in (1, 2, 3, 4):
            rng = np.random.default_rng(10 * listener + story)
            phase = rng.uniform(0, 2 * np.pi)

            def hidden(t, phase=phase):
                return np.sin(2 * np.pi * 0.07 * t + phase)

            s = session_name(listener, story)
            change = altered and s == ALTERED
            faces = {"listener": _face(rng, hidden, change), "speaker": _face(rng, hidden, False)}
            scene = _scene(rng)
            keys = {r: f.cache_key for r, f in faces.items()}
            voice = role_voice_from_faces(scene, "scene", faces, keys, "2024-01-01T00:00:00+00:00")
            y = np.clip(hidden(np.arange(N) / FPS - 1.0) + rng.normal(0, 0.05, N), -1, 1)
            store.write_session(
                SessionMeta(s, listener, story, (story + 1) // 2, SPLIT_OF[story], N),
                channels={
                    "scene/egemaps": scene,
                    **{f"{r}/face_geom": f for r, f in faces.items()},
                    **voice,
                },
                labels={"valence_self": y.astype(np.float32)},
            )
    return store


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """(clean, altered) store folders."""
    clean = tmp_path_factory.mktemp("clean")
    altered = tmp_path_factory.mktemp("altered")
    _write_store(clean)
    _write_store(altered, altered=True)
    return clean, altered


KEYS = ["listener/face_geom", "listener/egemaps", "speaker/face_geom", "speaker/egemaps"]


def test_each_channel_counts_its_extraction_and_resampling(stores):
    la = channel_lookaheads(stores[0], KEYS)
    # the per-role voice: the mouth activity's 0.5 s, then pooled at 100 Hz (0.01-0.02 s)
    assert la["listener/egemaps"].extraction_s == pytest.approx(0.5)
    assert 0.01 - 1e-9 <= la["listener/egemaps"].resampling_s <= 0.02 + 1e-9
    assert la["listener/egemaps"].total_s == pytest.approx(
        0.5 + la["listener/egemaps"].resampling_s
    )
    # the face: read at its time, interpolated from the next sample (a missing one: 0.36 s)
    assert la["listener/face_geom"].extraction_s == 0.0
    assert 0.16 - 1e-9 <= la["listener/face_geom"].resampling_s <= 0.5
    assert all(not x.unknown for x in la.values()) and unknown_note(la) is None


def test_the_packaged_causal_config_stays_causal_under_the_full_count(stores):
    trials = with_channel_lookahead(
        expand(load_config("causal")), channel_lookaheads(stores[0], KEYS)
    )
    assert trials and all(t.causal for t in trials)
    # the per-role voice channels read the furthest: 0.52 s, against a delay of 1 s at least
    assert max(t.lookahead_s for t in trials) == pytest.approx(-0.48, abs=0.011)
    assert {t.params()["causal"] for t in trials} == {"true"}
    assert all(float(t.params()["features.lookahead_s"]) > 0.5 for t in trials)


def test_causal_windows_without_a_delay_over_a_centred_extraction_window_are_not_causal(stores):
    """Windows ending at the frame and trailing smoothing read no later frame, but the frame's
    voice channel read the mouth activity 0.5 s ahead: not causal (today's windows-and-
    smoothing count alone said it was)."""
    [t0] = [
        dataclasses.replace(t, delay_s=0.0)
        for t in expand(load_config("causal"))
        if t.feature_set == "listener" and t.model == "hist_gb" and t.rescale == "train"
    ]
    [t] = with_channel_lookahead([t0], channel_lookaheads(stores[0], KEYS))
    assert t.window_lookahead_s <= 0  # what the windows and smoothing read
    assert t.lookahead_s == pytest.approx(0.52, abs=0.011) and not t.causal
    assert t.params()["causal"] == "false"
    assert t.hash() == t0.hash()  # counted on a store: the same configuration, resumed as such


def test_a_channel_without_a_recorded_lookahead_counts_as_reading_the_whole_session(tmp_path):
    store = Store(tmp_path, mode="a")
    ch = face_channel(np.random.default_rng(0))  # no extractor, no lookahead_s: unknown
    store.write_session(
        SessionMeta("Subject_1_Story_1", 1, 1, 1, "val", 250), channels={"listener/x": ch}
    )
    la = channel_lookaheads(tmp_path, ["listener/x"])
    assert la["listener/x"].total_s == math.inf and la["listener/x"].unknown == (
        "Subject_1_Story_1",
    )
    assert "listener/x (1 sessions, e.g. Subject_1_Story_1)" in unknown_note(la)
    assert "featurestore import --lookahead-s" in unknown_note(la)


# ------------------------------------------------------- a change of the source after tau
def _moved_from(a: np.ndarray, b: np.ndarray, atol: float) -> float:
    """The time of the first frame (row) where ``a`` and ``b`` differ by more than ``atol``."""
    a, b = a.reshape(N, -1), b.reshape(N, -1)
    moved = ~(np.isclose(a, b, rtol=0, atol=atol) | (np.isnan(a) & np.isnan(b))).all(axis=1)
    return float(np.argmax(moved)) / FPS if moved.any() else math.inf


def test_the_mouth_activity_window_moves_the_voice_channel_up_to_half_a_second_early(stores):
    """The listener's voice features (which frames count as the listener talking) move up to
    0.5 s before the faces change (0.38-0.39 s here, on 5 fps faces), never earlier."""
    key = WindowKey("v", ("listener/egemaps",), (0.04,), 0.0, "causal", ("valid_frac",))
    got = []
    for root in stores:
        tables = load_sessions(root, ["listener/egemaps"], splits={"test": [3]}, cache=False)
        [w] = [s for s in window_sessions(tables, key).sessions if s.session == ALTERED]
        got.append(w.F)
    first = _moved_from(*got, atol=0)
    la = channel_lookaheads(stores[0], ["listener/egemaps"])["listener/egemaps"]
    assert TAU_S - la.total_s <= first < TAU_S - 0.3


@pytest.mark.parametrize("delay_s", [1.0, 0.0])
def test_no_prediction_moves_earlier_than_the_counted_lookahead(stores, delay_s):
    """The packaged causal preset's ridge (windows ending 1 s early, trailing smoothing) on the
    listener's face and voice: no prediction up to tau moves beyond float noise (the windows
    centre each column on its session mean); without the delay, predictions from 0.52 s
    before tau on may move (and some before tau do)."""
    [trial] = [
        dataclasses.replace(t, delay_s=delay_s)
        for t in expand(load_config("causal"))
        if t.feature_set == "listener"
        and t.model == "ridge"
        and t.personalization == "global"
        and t.rescale == "train"
        and t.smooth_method == "trailing"
        and t.delay_s == 1.0
    ]
    [trial] = with_channel_lookahead([trial], channel_lookaheads(stores[0], KEYS))
    preds = []
    for root in stores:
        tables = load_sessions(root, list(trial.channels), splits=dict(trial.splits), cache=False)
        preds.append(
            evaluate_trial(trial, window_sessions(tables, trial.window_key())).predictions[ALTERED]
        )
    first = _moved_from(*preds, atol=1e-6)
    assert first >= TAU_S - trial.lookahead_s - 1e-9
    if trial.causal:
        assert (
            first > TAU_S
            and float(np.max(np.abs(preds[0] - preds[1])[: int(TAU_S * FPS) + 1])) < 1e-6
        )
    else:
        assert first < TAU_S  # the look-ahead is real, not only counted
