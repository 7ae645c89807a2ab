"""Shared rows stored once: per-role channels as HDF5 hard links to the scene's datasets."""

import json

import h5py
import numpy as np
import pytest

from experiments.data.dataset import load_sessions
from featurestore.storage.store import Channel, SessionMeta, Store, StoreError

META = SessionMeta("Subject_1_Story_1", 1, 1, 1, "val", n_frames=100)
COLUMNS = [f"lld{i}" for i in range(25)]


def _egemaps(rng, rows=396):
    """Scene rows every 10 ms and per-role channels over the same rows (the extractor's shape)."""
    data = rng.normal(size=(rows, 25)).astype(np.float32)
    data[7] = np.nan
    time = np.arange(rows) * 0.01
    scene = Channel(
        data,
        time,
        np.isfinite(data).all(axis=1),
        COLUMNS,
        extractor="egemaps",
        extractor_version="1",
    )
    talk = rng.random(rows) < 0.6
    roles = {
        f"{role}/egemaps": Channel(
            data,
            time,
            scene.valid & (talk if role == "speaker" else ~talk),
            COLUMNS,
            extractor="rule",
            extractor_version="1",
            shared_with="scene/egemaps",
        )
        for role in ("speaker", "listener")
    }
    return scene, roles


def _unlinked(channels):
    return {
        k: Channel(
            c.data.copy(),
            c.time.copy(),
            c.valid,
            c.columns,
            extractor=c.extractor,
            extractor_version="1",
        )
        for k, c in channels.items()
    }


def test_linked_role_channels_read_the_scene_rows_with_their_own_valid(tmp_path, rng):
    store = Store(tmp_path, mode="a")
    scene, roles = _egemaps(rng)
    store.write_session(
        META, {"scene/egemaps": scene, **roles}, labels={"valence_self": np.zeros(100)}
    )
    for key, ch in roles.items():
        got = store.read_channel(META.session, key)
        np.testing.assert_array_equal(got.data, scene.data)
        np.testing.assert_array_equal(got.time, scene.time)
        np.testing.assert_array_equal(got.valid, ch.valid)
        assert got.shared_with is None  # read back: its own copy
    with h5py.File(store.shard_path(META.session)) as f:
        for role in ("speaker", "listener"):
            assert (
                f[f"{role}/egemaps/data"].id == f["scene/egemaps/data"].id
            )  # one dataset, three names
            assert f[f"{role}/egemaps/time"].id == f["scene/egemaps/time"].id
            assert f[f"{role}/egemaps/valid"].id != f["scene/egemaps/valid"].id
            assert f[f"{role}/egemaps"].attrs["shared_with"] == "scene/egemaps"
            assert json.loads(f[f"{role}/egemaps"].attrs["columns"]) == COLUMNS
    assert store.verify() == []


def test_links_make_the_shard_smaller_and_load_the_same_tables(tmp_path, rng):
    scene, roles = _egemaps(rng, rows=4000)
    linked, copied = Store(tmp_path / "linked", mode="a"), Store(tmp_path / "copied", mode="a")
    meta = SessionMeta("Subject_1_Story_1", 1, 1, 1, "val", n_frames=1000)
    y = {"valence_self": np.linspace(-1, 1, 1000)}
    linked.write_session(meta, {"scene/egemaps": scene, **roles}, labels=y)
    copied.write_session(meta, _unlinked({"scene/egemaps": scene, **roles}), labels=y)
    size_linked = linked.shard_path(meta.session).stat().st_size
    size_copied = copied.shard_path(meta.session).stat().st_size
    assert size_linked < 0.5 * size_copied  # the 400 kB of rows once instead of three times
    keys = ["scene/egemaps", "speaker/egemaps", "listener/egemaps"]
    a, b = load_sessions(linked, keys)[0], load_sessions(copied, keys)[0]
    np.testing.assert_array_equal(a.X, b.X)
    np.testing.assert_array_equal(a.valid, b.valid)
    assert not np.array_equal(
        a.X[:, 25:50], a.X[:, 50:75], equal_nan=True
    )  # per-role valid applied


def test_link_to_a_channel_already_in_the_shard_and_replacing_it_later(tmp_path, rng):
    store = Store(tmp_path, mode="a")
    scene, roles = _egemaps(rng)
    store.write_session(META, {"scene/egemaps": scene})
    store.write_session(META, roles)  # the scene is in the shard already
    with h5py.File(store.shard_path(META.session)) as f:
        assert f["speaker/egemaps/data"].id == f["scene/egemaps/data"].id
    # a new scene channel does not change the rows the role channels were derived from
    new_scene = Channel(
        scene.data + 1, scene.time, scene.valid, COLUMNS, extractor="egemaps", extractor_version="2"
    )
    store.write_session(META, {"scene/egemaps": new_scene})
    np.testing.assert_array_equal(
        store.read_channel(META.session, "speaker/egemaps").data, scene.data
    )
    np.testing.assert_array_equal(
        store.read_channel(META.session, "scene/egemaps").data, scene.data + 1
    )
    store.write_session(META, drop=["scene/egemaps"])
    np.testing.assert_array_equal(
        store.read_channel(META.session, "listener/egemaps").data, scene.data
    )
    assert store.verify() == [] and store.predict_only() == [META.session]


def test_a_false_or_dangling_shared_with_fails_and_leaves_the_shard(tmp_path, rng):
    store = Store(tmp_path, mode="a")
    scene, roles = _egemaps(rng)
    with pytest.raises(StoreError, match="neither written in the same call nor stored"):
        store.write_session(META, roles)
    assert not store.shard_path(META.session).exists() and store.temp_files() == []
    store.write_session(META, {"scene/egemaps": scene})
    other = Channel(scene.data * 2, scene.time, scene.valid, COLUMNS, shared_with="scene/egemaps")
    with pytest.raises(StoreError, match="they differ"):
        store.write_session(META, {"speaker/egemaps": other})
    with pytest.raises(StoreError, match="they differ"):  # same check when written together
        store.write_session(META, {"scene/egemaps": scene, "speaker/egemaps": other})
    assert store.channel_keys(META.session) == ["scene/egemaps"]


def _old_shard(path, rng):
    """A shard as the first release wrote it: gzip + shuffle, chunked, the rows three times."""
    data = rng.normal(size=(396, 25)).astype(np.float32)
    time = np.arange(396) * 0.01
    with h5py.File(path, "w") as f:
        f.attrs.update(
            {
                "session": META.session,
                "listener": 1,
                "story": 1,
                "speaker": 1,
                "split": "val",
                "fps": 25.0,
                "n_frames": 100,
                "schema_version": 1,
            }
        )
        for role in ("scene", "speaker", "listener"):
            g = f.create_group(f"{role}/egemaps")
            g.create_dataset(
                "data",
                data=data,
                chunks=(396, 25),
                compression="gzip",
                compression_opts=1,
                shuffle=True,
            )
            g.create_dataset("time", data=time)
            g.create_dataset(
                "valid", data=np.ones(396, bool) if role == "scene" else rng.random(396) < 0.5
            )
            g.attrs.update(
                {
                    "columns": json.dumps(COLUMNS),
                    "extractor": "egemaps",
                    "extractor_version": "1",
                    "params": "{}",
                    "cache_key": "",
                    "source": "{}",
                    "created_utc": "2025-01-01T00:00:00+00:00",
                }
            )
        f.create_dataset("labels/valence_self", data=np.zeros(100, np.float32))
    return data


def test_an_old_shard_without_links_still_reads_and_updates(tmp_path, rng):
    store = Store(tmp_path, mode="a")
    data = _old_shard(store.shard_path(META.session), rng)
    np.testing.assert_array_equal(store.read_channel(META.session, "listener/egemaps").data, data)
    tables = load_sessions(store, ["scene/egemaps", "speaker/egemaps"])
    assert tables[0].X.shape == (100, 50)
    (old,) = store.verify()  # reads, but cannot prove its rows
    assert "schema version 1, expected 2: its datasets carry no checksums" in str(old)
    scene, roles = _egemaps(rng)  # re-extracting into the old shard links the new rows
    store.write_session(META, {"scene/egemaps": scene, **roles})
    with h5py.File(store.shard_path(META.session)) as f:
        assert f["speaker/egemaps/data"].id == f["scene/egemaps/data"].id
        assert f["scene/egemaps/data"].compression is None
        assert f.attrs["schema_version"] == 2 and "sha256" in f["labels/valence_self"].attrs
    assert store.verify() == []
