"""Shards prove their contents: every dataset carries its SHA-256; an edit made outside the store
(h5py by hand, a flipped byte on disk) fails the read that meets it and `featurestore verify`."""

import h5py
import numpy as np
import pytest

from featurestore.cli import main
from featurestore.storage import checksums
from featurestore.storage.errors import DamagedShardError
from featurestore.storage.store import Channel, SessionMeta, Store

META = SessionMeta("Subject_1_Story_1", 1, 1, 1, "val", n_frames=100)


@pytest.fixture
def store(tmp_path, rng):
    """A shard with a face channel, two channels hard-linked to the scene rows, labels, a rating."""
    st = Store(tmp_path / "store", mode="a")
    rows = rng.normal(size=(400, 3)).astype(np.float32)
    t = np.arange(400) * 0.01
    channels = {
        "scene/egemaps": Channel(rows, t, np.ones(400, bool), ["a", "b", "c"], cache_key="s"),
        "listener/egemaps": Channel(
            rows, t, rng.random(400) < 0.5, ["a", "b", "c"], shared_with="scene/egemaps"
        ),
        "listener/face_geom": Channel(
            rng.normal(size=(20, 2)), np.arange(20) * 0.2, np.ones(20, bool), ["m", "b"]
        ),
    }
    st.write_session(META, channels, labels={"valence_self": np.linspace(-1, 1, 100)})
    st.write_session_labels(META.session, {"empathy": {"o1": 3.0, "o2": 4.0}}, {})
    return st


def _problems(store):
    return [str(p) for p in store.verify()]


def test_every_dataset_the_store_writes_carries_its_digest(store):
    with h5py.File(store.shard_path(META.session)) as f:
        names = []
        f.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
        # the scene's rows, hard-linked by listener/egemaps, are one dataset (visited once)
        assert {"labels/valence_self", "session_raters/empathy/o1", "listener/egemaps/time"} <= set(
            names
        )
        for name in names:
            assert f[name].attrs[checksums.DIGEST_ATTR] == checksums.digest(f[name][()]), name
    assert store.verify() == []


def test_features_multiplied_by_three_fail_verify_and_the_read(store, capsys):
    with h5py.File(store.shard_path(META.session), "a") as f:
        f["listener/face_geom/data"][...] *= 3
    (problem,) = _problems(store)
    assert "Subject_1_Story_1.h5: dataset listener/face_geom/data does not match its checksum" in (
        problem
    )
    assert "featurestore extract DATA_DIR --force" in problem
    with pytest.raises(
        DamagedShardError, match=r"Subject_1_Story_1.h5: dataset listener/face_geom/data"
    ):
        store.read_session(META.session, ["listener/face_geom"])
    assert main(["verify", "--store", str(store.root)]) == 1
    assert "listener/face_geom/data does not match its checksum" in capsys.readouterr().err


def test_labels_and_ratings_overwritten_by_hand_are_caught(store):
    with h5py.File(store.shard_path(META.session), "a") as f:
        f["labels/valence_self"][...] = 0.5
        f["session_raters/empathy/o2"][()] = 5.0
    problems = _problems(store)
    assert len(problems) == 2
    assert "dataset labels/valence_self does not match its checksum" in problems[0]
    assert "dataset session_raters/empathy/o2 does not match its checksum" in problems[1]
    with pytest.raises(DamagedShardError, match="labels/valence_self"):
        store.labels(META.session, "valence_self")
    with pytest.raises(DamagedShardError, match="session_raters/empathy/o2"):
        store.session_raters(META.session, "empathy")


def test_a_dataset_replaced_without_its_digest_is_caught(store):
    with h5py.File(store.shard_path(META.session), "a") as f:
        del f["labels/valence_self"]
        f["labels/valence_self"] = np.zeros(100, np.float32)
    (problem,) = _problems(store)
    assert "dataset labels/valence_self has no checksum" in problem
    with pytest.raises(DamagedShardError, match="has no checksum"):
        store.labels(META.session, "valence_self")


def test_a_flipped_byte_in_the_file_is_caught_on_read_and_by_verify(store):
    path = store.shard_path(META.session)
    with h5py.File(path) as f:
        ds = f["scene/egemaps/data"]
        offset = ds.id.get_offset() + 7 * ds.dtype.itemsize + 3  # a byte inside row 2
        before = float(ds[2, 1])
    raw = bytearray(path.read_bytes())
    raw[offset] ^= 0x40
    path.write_bytes(bytes(raw))
    with h5py.File(path) as f:
        assert float(f["scene/egemaps/data"][2, 1]) != before  # the flip landed in the rows
    # the per-role channel reads the scene's rows through its hard link: caught there too
    with pytest.raises(DamagedShardError, match=r"dataset \w+/egemaps/data does not match"):
        store.read_session(META.session, ["listener/egemaps"])
    (problem,) = _problems(store)  # one dataset, linked twice: one problem
    assert "egemaps/data does not match its checksum" in problem
