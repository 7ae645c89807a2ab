import json

import numpy as np
import pytest

from bench.synth import (
    AU_COLUMNS,
    CHANNEL_KEYS,
    CORPUS_TOTAL_FRAMES,
    LABEL_DELAY_S,
    SYNTH_TRUTH,
    face_sample_frames,
    listener_truth,
    session_lengths,
    session_plan,
    synth_session,
    synth_store,
)
from bench.synth.__main__ import main as synth_main
from featurestore.cli import main
from featurestore.extractors.egemaps import EgemapsExtractor
from featurestore.extractors.face_geom import COLUMNS as FACE_GEOM_COLUMNS
from featurestore.sources.manifest import STORY_SPEAKER, story_split
from featurestore.storage.store import Store

SHORT = (1000, 2000)  # 40-80 s sessions keep the tests fast


@pytest.fixture(scope="module")
def store8(tmp_path_factory):
    root = tmp_path_factory.mktemp("synth8")
    info = synth_store(root, n_sessions=8, seed=3, progress=False, length_range=SHORT)
    return info, Store(root)


@pytest.mark.parametrize("seed", [0, 1, 7, 12345])
def test_full_size_lengths_match_the_corpus(seed):
    lengths = session_lengths(80, seed)
    assert len(lengths) == 80
    assert int(lengths.sum()) == CORPUS_TOTAL_FRAMES == 633_850
    assert lengths.min() >= 4700 and lengths.max() <= 11925
    assert np.all(lengths % 25 == 0)
    assert len(np.unique(lengths)) > 30  # drawn, not one repeated value
    np.testing.assert_array_equal(lengths, session_lengths(80, seed))


def test_other_sizes_keep_the_distribution_without_exact_total():
    big = session_lengths(800, 0)
    assert big.min() >= 4700 and big.max() <= 11925 and np.all(big % 25 == 0)
    assert abs(big.mean() - CORPUS_TOTAL_FRAMES / 80) < 250  # same mean as the corpus
    # the first draws do not depend on how many sessions are asked for
    np.testing.assert_array_equal(session_lengths(10, 4), session_lengths(20, 4)[:10])
    short = session_lengths(8, 0, length_range=(260, 510))
    assert short.min() >= 275 and short.max() <= 500 and np.all(short % 25 == 0)
    # an explicit total is met exactly, an impossible one is refused with the reason
    assert int(session_lengths(8, 0, length_range=SHORT, total=12_000).sum()) == 12_000
    with pytest.raises(ValueError, match="cannot be split"):
        session_lengths(8, 0, length_range=SHORT, total=20_000)
    with pytest.raises(ValueError, match="length_range"):
        session_lengths(8, 0, length_range=(10, 20))


def test_session_plan_is_listeners_by_stories():
    plan = session_plan(80)
    assert plan[0] == (1, 1) and plan[-1] == (10, 8) and len(set(plan)) == 80
    assert {lis for lis, _ in session_plan(160)} == set(range(1, 21))
    assert session_plan(12)[-1] == (2, 4)
    with pytest.raises(ValueError):
        session_plan(0)


def test_channels_have_real_widths_rates_and_names(store8):
    info, store = store8
    assert store.verify() == []
    assert info.sessions == store.list_sessions() and len(info.sessions) == 8
    assert info.n_frames == sum(info.lengths.values())
    assert info.size_bytes == sum(store.shard_path(s).stat().st_size for s in info.sessions)
    egemaps_names = list(EgemapsExtractor().smile().feature_names)
    for s in info.sessions:
        meta = store.meta(s)
        assert meta.speaker == STORY_SPEAKER[meta.story] and meta.split == story_split(meta.story)
        n = meta.n_frames
        assert SHORT[0] <= n <= SHORT[1] and n % 25 == 0 and n == info.lengths[s]
        assert sorted(store.channel_keys(s)) == sorted(CHANNEL_KEYS)
        y = store.labels(s, "valence_self").to_numpy()
        assert y.dtype == np.float32 and len(y) == n and np.all(np.abs(y) <= 1)
        chans = {k: store.read_channel(s, k) for k in CHANNEL_KEYS}
        for role in ("speaker", "listener"):
            geom, au = chans[f"{role}/face_geom"], chans[f"{role}/face_au"]
            assert geom.columns == list(FACE_GEOM_COLUMNS) and geom.data.shape == (-(-n // 5), 17)
            assert au.columns == list(AU_COLUMNS) and au.data.shape == (-(-n // 5), 20)
            np.testing.assert_allclose(np.diff(geom.time), 0.2)
            assert geom.extractor == "synth" and geom.source["upstream"].startswith("synth seed=3")
            np.testing.assert_array_equal(
                geom.valid, au.valid
            )  # no face: both channels lose the frame
            assert np.all(np.isnan(geom.data[~geom.valid])) and np.all(
                np.isfinite(geom.data[geom.valid])
            )
            ok = au.data[au.valid]
            assert ok.min() >= 0 and ok.max() <= 1  # activations, like py-feat's
        scene = chans["scene/egemaps"]
        assert scene.columns == egemaps_names and scene.data.shape == (4 * n - 4, 25)
        np.testing.assert_allclose(np.diff(scene.time), 0.01, atol=1e-9)
        assert scene.valid.all()
        for role in ("speaker", "listener"):
            np.testing.assert_array_equal(chans[f"{role}/egemaps"].data, scene.data)
        spk, lis = chans["speaker/egemaps"].valid.mean(), chans["listener/egemaps"].valid.mean()
        assert (
            0.35 < spk < 0.8 and lis < 0.2 and spk > 2.5 * lis
        )  # the speaker talks most, the listener rarely
        f0 = scene.data[:, scene.columns.index("F0semitoneFrom27.5Hz_sma3nz")]
        assert np.all(f0[chans["speaker/egemaps"].valid] > 0)  # talking frames are voiced
        assert (
            0.1 < np.mean(f0 == 0) < 0.8
        )  # silence and unvoiced frames hold 0, as openSMILE writes
    invalid = np.mean(
        np.concatenate([~store.read_channel(s, "listener/face_geom").valid for s in info.sessions])
    )
    assert 0.005 < invalid < 0.08  # a few percent of face frames are lost
    truth = json.loads((info.root / SYNTH_TRUTH).read_text())
    assert truth["delay_s"] == LABEL_DELAY_S and truth["sessions"] == info.lengths
    assert truth["listeners"]["1"]["gain"] == pytest.approx(listener_truth(3, 1).gain)


def test_face_rate_follows_the_sampling_of_the_video_path():
    assert face_sample_frames(11, 5.0).tolist() == [0, 5, 10]
    assert face_sample_frames(6, 10.0).tolist() == [
        0,
        3,
        5,
    ]  # every 2.5 frames, as iter_frames picks
    assert len(face_sample_frames(30, 25.0)) == 30
    s = synth_session(2, 5, 300, seed=1, face_fps=25.0)
    assert s.channels["listener/face_geom"].data.shape == (300, 17)
    assert s.meta.speaker == 3 and s.meta.split == "train"


def test_deterministic_per_seed_and_session(tmp_path):
    a = synth_session(3, 6, 400, seed=5)
    b = synth_session(3, 6, 400, seed=5)
    c = synth_session(3, 6, 400, seed=6)
    np.testing.assert_array_equal(a.labels["valence_self"], b.labels["valence_self"])
    for k in CHANNEL_KEYS:
        np.testing.assert_array_equal(a.channels[k].data, b.channels[k].data)
        np.testing.assert_array_equal(a.channels[k].valid, b.channels[k].valid)
        assert a.channels[k].cache_key == b.channels[k].cache_key != c.channels[k].cache_key
    assert not np.allclose(a.labels["valence_self"], c.labels["valence_self"])
    # a session's data do not depend on how many others are built with it
    small = synth_store(
        tmp_path / "a", n_sessions=2, seed=5, progress=False, length_range=(250, 500)
    )
    large = synth_store(
        tmp_path / "b", n_sessions=9, seed=5, progress=False, length_range=(250, 500)
    )
    sa, sb = Store(small.root), Store(large.root)
    for s in small.sessions:
        np.testing.assert_array_equal(sa.labels(s).to_numpy(), sb.labels(s).to_numpy())
        np.testing.assert_array_equal(
            sa.read_channel(s, "scene/egemaps").data, sb.read_channel(s, "scene/egemaps").data
        )
    # rewriting replaces the shards whole
    again = synth_store(
        tmp_path / "a", n_sessions=2, seed=6, progress=False, length_range=(250, 500)
    )
    assert Store(again.root).verify() == []
    new = Store(again.root).read_channel(again.sessions[0], "scene/egemaps")
    assert new.params["seed"] == 6 and new.data.shape[0] == 4 * again.lengths[again.sessions[0]] - 4


def _windowed_mean(ch, column: str, n_frames: int, win_s: float = 2.0) -> np.ndarray:
    """Mean of the valid samples within +-win_s/2 of each 25 fps frame (NaN when none)."""
    x = ch.data[:, ch.columns.index(column)].astype(float)
    ok = ch.valid & np.isfinite(x)
    t = np.arange(n_frames) / 25.0
    lo = np.searchsorted(ch.time, t - win_s / 2)
    hi = np.searchsorted(ch.time, t + win_s / 2)
    cs = np.concatenate([[0.0], np.cumsum(np.where(ok, x, 0.0))])
    cn = np.concatenate([[0], np.cumsum(ok)])
    with np.errstate(invalid="ignore", divide="ignore"):
        return (cs[hi] - cs[lo]) / (cn[hi] - cn[lo])


def _lagged_corr(x: np.ndarray, y: np.ndarray, lag_frames: int) -> float:
    """Correlation of feature x at t with label y at t + lag."""
    a, b = x[: len(x) - lag_frames], y[lag_frames:]
    m = np.isfinite(a) & np.isfinite(b)
    return float(np.corrcoef(a[m], b[m])[0, 1])


def test_planted_relation_listener_predicts_valence_speaker_weakly(store8):
    info, store = store8
    delay = int(round(LABEL_DELAY_S * 25))
    listener_r, speaker_r = [], {}
    lags = list(range(0, 4 * delay, 5))
    lag_curve = np.zeros(len(lags))
    for s in info.sessions:
        y = store.labels(s).to_numpy()
        n = len(y)
        lcp = _windowed_mean(store.read_channel(s, "listener/face_geom"), "lip_corner_pull", n)
        listener_r.append(_lagged_corr(lcp, y, delay))
        lag_curve += [_lagged_corr(lcp, y, lag) for lag in lags]
        for key in ("speaker/face_geom", "speaker/face_au", "speaker/egemaps"):
            ch = store.read_channel(s, key)
            for c in ch.columns:
                if c == "blink":
                    continue
                w = _windowed_mean(ch, c, n)
                if np.isfinite(w).sum() > 100 and np.nanstd(w) > 0:
                    speaker_r.setdefault(f"{key}/{c}", []).append(_lagged_corr(w, y, delay))
    r_listener = float(np.mean(listener_r))
    r_speaker = {k: float(np.mean(v)) for k, v in speaker_r.items()}
    best_speaker = max(abs(v) for v in r_speaker.values())
    assert r_listener > 0.75, r_listener
    assert r_listener > best_speaker + 0.3, (
        r_listener,
        sorted(r_speaker.items(), key=lambda kv: -abs(kv[1]))[:3],
    )
    # the speaker's voice carries a weak, positive signal
    assert r_speaker["speaker/egemaps/Loudness_sma3"] > 0
    # the face leads the valence by the planted delay: the best lag is near 1.5 s
    best_lag_s = lags[int(np.argmax(lag_curve))] / 25.0
    assert abs(best_lag_s - LABEL_DELAY_S) <= 0.4, best_lag_s


def test_python_m_bench_synth(tmp_path, capsys):
    out = tmp_path / "store"
    assert (
        synth_main(["--store", str(out), "--sessions", "1", "--seed", "2", "--face-fps", "25"]) == 0
    )
    assert "1 synthetic sessions" in capsys.readouterr().out
    store = Store(out)
    assert store.list_sessions() == ["Subject_1_Story_1"]
    n = store.meta("Subject_1_Story_1").n_frames
    assert 4700 <= n <= 11925 and store.read_channel(
        "Subject_1_Story_1", "listener/face_au"
    ).data.shape == (n, 20)
    assert main(["verify", "--store", str(out)]) == 0
    assert synth_main(["--store", str(out), "--sessions", "0"]) == 2
    assert "error:" in capsys.readouterr().err
