import numpy as np
import pytest

from experiments.data.dataset import (
    DatasetError,
    load_sessions,
    resample_channel,
    sessions_labelled,
)
from featurestore.storage.store import SessionMeta, Store
from tests.experiments.data.helpers import SPLITS, N, egemaps_channel, face_channel, write_store


@pytest.fixture
def store(tmp_path):
    return write_store(tmp_path / "features")


def test_tables_have_label_rate_shape_and_config_splits(store):
    tables = load_sessions(
        store, ["listener/face_geom", "listener/egemaps"], "valence_self", SPLITS
    )
    # story 4 is in no split and is skipped; splits come from the config, not the shard attribute
    assert [t.session for t in tables] == [
        "Subject_1_Story_1",
        "Subject_1_Story_2",
        "Subject_1_Story_3",
        "Subject_2_Story_1",
        "Subject_2_Story_2",
        "Subject_2_Story_3",
    ]
    assert [t.split for t in tables[:3]] == ["val", "train", "test"]
    t = tables[0]
    assert t.X.shape == (N, 5) and t.X.dtype == np.float32
    assert t.columns == [
        "listener/face_geom/g0",
        "listener/face_geom/g1",
        "listener/face_geom/g2",
        "listener/egemaps/e0",
        "listener/egemaps/e1",
    ]
    assert t.valid.shape == (N, 2) and t.valid.dtype == bool
    assert t.column_channel.tolist() == [0, 0, 0, 1, 1]
    assert t.y.shape == (N,) and t.y.dtype == np.float32
    np.testing.assert_array_equal(t.y, store.labels(t.session).to_numpy(np.float32))
    assert (t.listener, t.story, t.fps) == (1, 1, 25.0)
    # no splits: every session, with the split stored in the shard
    every = load_sessions(str(store.root), ["listener/face_geom"], "valence_self")
    assert len(every) == 8 and {x.split for x in every} == {"bogus"}


def test_slow_channel_is_interpolated_between_valid_samples(store):
    t = load_sessions(store, ["listener/face_geom"], splits=SPLITS)[0]
    times = np.arange(N) / 25.0
    g0 = t.X[:, 0]
    # up to sample 19 (3.8 s) everything is bridged, including the 0.4 s gap around sample 10
    np.testing.assert_allclose(g0[times <= 3.8], 2.0 * times[times <= 3.8], rtol=1e-6, atol=1e-6)
    assert t.valid[times <= 3.8, 0].all()
    # the 1.4 s gap between samples 19 (3.8 s) and 26 (5.2 s) is not bridged
    gap = (times > 3.8 + 0.1 + 1e-9) & (times < 5.2 - 0.1 - 1e-9)
    assert np.isnan(g0[gap]).all() and not t.valid[gap, 0].any()
    # next to a gap the nearest sample is held for half a sample period
    np.testing.assert_allclose(g0[(times > 3.8) & (times <= 3.9)], 7.6, rtol=1e-6)
    # after the last sample (9.8 s) the value is held for half a period (to 9.9 s), no further
    np.testing.assert_allclose(g0[(times > 9.8) & (times <= 9.9)], 19.6, rtol=1e-6)
    assert np.isnan(g0[times > 9.9]).all() and not t.valid[times > 9.9, 0].any()
    np.testing.assert_array_equal(np.isnan(t.X[:, :3]).any(axis=1), ~t.valid[:, 0])


def test_fast_channel_is_mean_pooled_per_frame(store):
    table = load_sessions(store, ["listener/egemaps"], splits=SPLITS)[0]
    ch = store.read_channel(table.session, "listener/egemaps")
    ref = np.full((N, 2), np.nan)
    for i in range(N):  # the samples nearest to frame i: within half a frame period of i / 25 s
        rows = ch.valid & (np.floor(ch.time * 25 + 0.5) == i)
        if rows.any():
            with np.errstate(all="ignore"):
                ref[i] = np.nanmean(ch.data[rows], axis=0)
        assert table.valid[i, 0] == rows.any()
    np.testing.assert_allclose(table.X, ref, rtol=1e-5, atol=1e-6)
    assert not table.valid[102:124, 0].any()  # samples 400-499 (4.0-4.99 s) are all invalid


def test_resample_channel_edge_cases():
    x, ok = resample_channel(np.ones((4, 2)), np.arange(4) / 5.0, np.zeros(4, bool), n_frames=10)
    assert np.isnan(x).all() and not ok.any()
    # unsorted times are sorted first
    t = np.array([0.4, 0.0, 0.2])
    x, ok = resample_channel(t[:, None] * 10, t, np.ones(3, bool), n_frames=11)
    np.testing.assert_allclose(x[:11, 0], np.arange(11) / 25.0 * 10, atol=1e-5)
    # a 25 fps channel at frame times passes through unchanged
    v = np.random.default_rng(1).normal(size=(30, 3)).astype(np.float32)
    x, ok = resample_channel(v, np.arange(30) / 25.0, np.ones(30, bool), n_frames=30)
    np.testing.assert_array_equal(x, v)
    assert ok.all()


def test_threads_do_not_change_results(store):
    keys = ["listener/egemaps", "listener/face_geom"]
    a = load_sessions(store, keys, splits=SPLITS, threads=1)
    b = load_sessions(store, keys, splits=SPLITS, threads=3)
    for x, y in zip(a, b, strict=True):
        assert x.session == y.session and x.columns == y.columns
        np.testing.assert_array_equal(x.X, y.X)
        np.testing.assert_array_equal(x.valid, y.valid)


def test_missing_channel_or_target_names_session_and_fix(store):
    with pytest.raises(
        DatasetError,
        match=r"Subject_1_Story_1 has no channel speaker/egemaps.*featurestore extract",
    ):
        load_sessions(store, ["listener/face_geom", "speaker/egemaps"], splits=SPLITS)
    with pytest.raises(
        DatasetError,
        match=r"Subject_1_Story_1 has no labels 'valence_observer_listener'.*featurestore labels",
    ):
        load_sessions(store, ["listener/face_geom"], "valence_observer_listener", SPLITS)
    with pytest.raises(DatasetError, match="featurestore extract"):
        load_sessions(Store(store.root / "empty"), ["listener/face_geom"])


def test_sessions_without_labels_load_with_nan_labels_only_when_asked(store):
    rng = np.random.default_rng(1)
    keys = ["listener/face_geom", "listener/egemaps"]
    channels = {"listener/face_geom": face_channel(rng), "listener/egemaps": egemaps_channel(rng)}
    blind = SessionMeta("Subject_3_Story_3", 3, 3, 2, "bogus", N)
    store.write_session(blind, channels=channels)  # a blind test's: no labels
    nan = SessionMeta("Subject_3_Story_2", 3, 2, 2, "bogus", N)
    store.write_session(nan, channels=channels, labels={"valence_self": np.full(N, np.nan)})
    # the frames cache first filled by a load without labels: a load with them still refuses
    tables = {t.session: t for t in load_sessions(store, keys, splits=SPLITS, require_labels=False)}
    y = tables["Subject_3_Story_3"].y
    assert y.dtype == np.float32 and y.shape == (N,) and np.isnan(y).all()
    np.testing.assert_array_equal(
        tables["Subject_1_Story_2"].y, store.labels("Subject_1_Story_2").to_numpy()
    )
    assert not list((store.root / ".frames").glob("Subject_3_Story_3.*"))
    with pytest.raises(
        DatasetError, match=r"Subject_3_Story_3 has no labels 'valence_self'.*featurestore labels"
    ):
        load_sessions(store, keys, splits=SPLITS)
    # the sweep's view: split and whether the labels are usable (all NaN: not)
    found = sessions_labelled(store, "valence_self", SPLITS)
    assert {s: ok for s, (_, ok) in found.items() if not ok} == {
        "Subject_3_Story_2": False,
        "Subject_3_Story_3": False,
    }
    assert found["Subject_3_Story_3"] == ("test", False) and "Subject_1_Story_4" not in found


def test_columns_must_agree_across_sessions(store):
    rng = np.random.default_rng(3)
    meta = store.meta("Subject_2_Story_2")
    store.write_session(meta, channels={"listener/face_geom": face_channel(rng, d=4)})
    with pytest.raises(
        DatasetError, match=r"listener/face_geom has 4 columns in Subject_2_Story_2 but 3"
    ):
        load_sessions(store, ["listener/face_geom"], splits=SPLITS)


def test_gold_standard_from_raters(tmp_path):
    from experiments.data.gold_standard import GoldStandard, combine, ewe_weights

    st = write_store(tmp_path / "store", targets=("valence@a", "valence@b", "valence@c"))
    keys = ["listener/face_geom"]
    stored = load_sessions(st, keys, target="valence", cache=tmp_path / "cache", threads=1)
    mean = load_sessions(
        st, keys, "valence", cache=tmp_path / "cache", threads=1, gold_standard=GoldStandard("mean")
    )
    for s, m in zip(stored, mean, strict=True):
        np.testing.assert_allclose(m.y, s.y, atol=1e-6)  # the stored labels are the raters' mean
    ewe = load_sessions(
        st, keys, "valence", cache=tmp_path / "cache", threads=1, gold_standard=GoldStandard("ewe")
    )
    traces = [{r: st.rater_labels(t.session, "valence", r).to_numpy() for r in "abc"} for t in ewe]
    for t, tr in zip(ewe, traces, strict=True):  # each session weighted by its own raters
        np.testing.assert_allclose(t.y, combine(tr, ewe_weights([tr])), atol=1e-6)
    for method in ("mean_z", "ccc_centred"):  # every registered method, each session's own raters
        fused = load_sessions(
            st,
            keys,
            "valence",
            cache=tmp_path / "cache",
            threads=1,
            gold_standard=GoldStandard(method),
        )
        spec = GoldStandard(method).spec
        for t, tr in zip(fused, traces, strict=True):
            np.testing.assert_allclose(t.y, spec.combine(tr)[0], atol=1e-6)
    again = load_sessions(st, keys, target="valence", cache=tmp_path / "cache", threads=1)
    for s, a in zip(stored, again, strict=True):  # the cache still holds the stored labels
        np.testing.assert_array_equal(a.y, s.y)
    plain = write_store(tmp_path / "plain")
    with pytest.raises(
        DatasetError, match="no per-rater labels of 'valence_self'.*label_valence_self@"
    ):
        load_sessions(plain, keys, cache=False, threads=1, gold_standard=GoldStandard("ewe"))
