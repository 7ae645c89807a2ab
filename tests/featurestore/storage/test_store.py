import json
import os

import h5py
import numpy as np
import pytest

from featurestore.storage.store import (
    SCHEMA_VERSION,
    Channel,
    SessionMeta,
    Store,
    StoreError,
    cache_key,
    file_fingerprint,
    parse_session,
    session_name,
)


def _channel(n=20, d=3, rate=5.0, key="k1"):
    t = np.arange(n) / rate
    data = np.random.default_rng(0).normal(size=(n, d)).astype(np.float32)
    valid = np.ones(n, bool)
    valid[3] = False
    data[3] = np.nan
    return Channel(
        data,
        t,
        valid,
        [f"c{i}" for i in range(d)],
        extractor="x",
        extractor_version="1",
        params={"a": 1},
        cache_key=key,
        source={"path": "v.mp4", "size": 1, "fingerprint": "f"},
    )


META = SessionMeta("Subject_1_Story_2", 1, 2, 1, "train", n_frames=100)


def test_session_names_roundtrip():
    assert session_name(3, 7) == "Subject_3_Story_7"
    assert parse_session("transcribed_subject_3_story_7.srt") == (3, 7)
    assert parse_session("SUBJECT_10_STORY_1.MP4") == (10, 1)
    assert parse_session("nothing.mp4") is None


def test_write_and_read_back(tmp_path):
    store = Store(tmp_path, mode="a")
    ch = _channel()
    y = np.linspace(-1, 1, 100)
    store.write_session(META, channels={"listener/face_geom": ch}, labels={"valence_self": y})
    got = store.read_channel("Subject_1_Story_2", "listener/face_geom")
    np.testing.assert_array_equal(got.data, ch.data)
    np.testing.assert_array_equal(got.valid, ch.valid)
    assert got.columns == ch.columns and got.params == {"a": 1} and got.cache_key == "k1"
    df = store.channel("Subject_1_Story_2", "listener/face_geom")
    assert list(df.columns) == ["c0", "c1", "c2", "valid"] and df.index.name == "time"
    lab = store.labels("Subject_1_Story_2", "valence_self")
    assert len(lab) == 100 and lab.index[1] == pytest.approx(0.04)
    sessions = store.sessions()
    assert sessions.loc[0, "split"] == "train" and sessions.loc[0, "channels"] == [
        "listener/face_geom"
    ]
    assert store.cache_keys("Subject_1_Story_2") == {"listener/face_geom": "k1"}
    with h5py.File(store.shard_path(META.session)) as f:
        assert f.attrs["schema_version"] == SCHEMA_VERSION and f.attrs["fps"] == 25.0
        assert json.loads(f["listener/face_geom"].attrs["columns"]) == ["c0", "c1", "c2"]


def test_update_keeps_other_channels(tmp_path):
    store = Store(tmp_path, mode="a")
    store.write_session(META, channels={"listener/face_geom": _channel()})
    store.write_session(META, channels={"scene/egemaps": _channel(key="k2")})
    assert sorted(store.channel_keys(META.session)) == ["listener/face_geom", "scene/egemaps"]


def test_failed_write_leaves_old_shard_and_no_temp(tmp_path):
    store = Store(tmp_path, mode="a")
    store.write_session(META, channels={"listener/face_geom": _channel()})
    before = store.shard_path(META.session).read_bytes()
    with pytest.raises(StoreError, match="labels"):
        store.write_session(
            META, channels={"scene/egemaps": _channel()}, labels={"valence_self": np.zeros(7)}
        )
    assert store.shard_path(META.session).read_bytes() == before
    assert store.temp_files() == []


def test_read_only_store_refuses_writes(tmp_path):
    with pytest.raises(StoreError, match="read-only"):
        Store(tmp_path).write_session(META, channels={})


def test_bad_channel_key(tmp_path):
    with pytest.raises(StoreError, match="ROLE/CHANNEL"):
        Store(tmp_path, mode="a").write_session(META, channels={"face_geom": _channel()})


def test_missing_session_and_channel_errors_name_them(tmp_path):
    store = Store(tmp_path, mode="a")
    with pytest.raises(StoreError, match="Subject_9_Story_9"):
        store.read_channel("Subject_9_Story_9", "listener/face_geom")
    store.write_session(META, channels={"listener/face_geom": _channel()})
    with pytest.raises(StoreError, match="it has: listener/face_geom"):
        store.read_channel(META.session, "speaker/egemaps")
    with pytest.raises(StoreError, match="featurestore labels"):
        store.labels(META.session, "valence_self")


def test_fingerprint_and_cache_key(tmp_path):
    p = tmp_path / "a.bin"
    p.write_bytes(b"x" * 1000)
    fp = file_fingerprint(p)
    q = tmp_path / "b.bin"
    q.write_bytes(b"x" * 1000)
    assert file_fingerprint(q)["fingerprint"] == fp["fingerprint"]  # content, not path
    q.write_bytes(b"x" * 999 + b"y")
    assert file_fingerprint(q)["fingerprint"] != fp["fingerprint"]
    k = cache_key(fp, "face_geom", "1", {"fps": 5})
    assert k == cache_key(fp, "face_geom", "1", {"fps": 5})
    assert k != cache_key(fp, "face_geom", "2", {"fps": 5})
    assert k != cache_key(fp, "face_geom", "1", {"fps": 25})


def test_verify_finds_problems(tmp_path):
    store = Store(tmp_path, mode="a")
    assert any("no shards" in p.what for p in store.verify())
    fp = {"path": str(tmp_path / "gone.mp4"), "size": 1, "fingerprint": "f"}
    ck = cache_key(fp, "x", "1", {"a": 1})
    good = _channel(key=ck)
    good.source = fp
    store.write_session(META, channels={"listener/face_geom": good})
    # a channel alone: a blind test's shard, predict only
    assert store.verify(current_versions={"x": "1"}) == []
    assert store.predict_only() == [META.session]
    assert any("current is 2" in p.what for p in store.verify(current_versions={"x": "2"}))
    # corrupt the stored key, break a shape, leave a temp file, add a garbage shard
    with h5py.File(store.shard_path(META.session), "a") as f:
        f["listener/face_geom"].attrs["cache_key"] = "bogus"
        g = f["listener/face_geom"]
        del g["time"]
        g["time"] = np.arange(5.0)
    (tmp_path / ".Subject_1_Story_2.h5.tmp-999999-abc").write_bytes(b"")
    (tmp_path / "Subject_2_Story_1.h5").write_bytes(b"not hdf5")
    whats = [str(p) for p in store.verify()]
    assert any("20 data rows, 5 times" in w for w in whats)
    assert not any("tmp" in w for w in whats)  # a killed writer's temp file is not a shard problem
    assert len(store.temp_files()) == 1
    assert any("Subject_2_Story_1" in w and "not readable" in w for w in whats)


def test_verify_names_a_shard_without_labels_predict_only(tmp_path, capsys):
    from featurestore.cli import main

    store = Store(tmp_path, mode="a")
    ch = _channel()
    ch.cache_key = cache_key(ch.source, ch.extractor, ch.extractor_version, ch.params)
    store.write_session(META, channels={"listener/face_geom": ch})  # a blind test's
    assert main(["verify", "--store", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "predict only: 1 shard(s) without labels (Subject_1_Story_2)" in out
    # neither labels nor a channel: still a problem, and not predict only
    store.write_session(SessionMeta("Subject_2_Story_2", 2, 2, 1, "train", n_frames=100))
    assert main(["verify", "--store", str(tmp_path)]) == 1
    out, err = capsys.readouterr()
    assert "Subject_2_Story_2: no labels and no media" in err
    assert "predict only: 1 shard(s) without labels (Subject_1_Story_2)" in out


def test_older_schema_is_refused(tmp_path):
    store = Store(tmp_path, mode="a")
    store.write_session(META, channels={"listener/face_geom": _channel()})
    with h5py.File(store.shard_path(META.session), "a") as f:
        f.attrs["schema_version"] = 0
    before = store.shard_path(META.session).read_bytes()
    with pytest.raises(StoreError, match="schema version 0"):
        store.write_session(META, channels={"scene/egemaps": _channel()})
    assert store.shard_path(META.session).read_bytes() == before
    assert any("schema version 0" in p.what for p in store.verify())


def test_clean_temp_files_keeps_live_writers(tmp_path):
    store = Store(tmp_path, mode="a")
    dead = tmp_path / ".Subject_1_Story_1.h5.tmp-999999-aaaa"
    live = tmp_path / f".Subject_1_Story_2.h5.tmp-{os.getppid()}-bbbb"
    dead.write_bytes(b"")
    live.write_bytes(b"")
    removed = store.clean_temp_files()
    assert dead in removed and not dead.exists() and live.exists()
