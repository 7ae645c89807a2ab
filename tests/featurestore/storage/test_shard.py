"""Several channels and a label target of a session in one open of its shard (Store.read_session)."""

import h5py
import numpy as np
import pytest

import featurestore.extractors  # noqa: F401 - registers the extractors' how-to-add hints
from featurestore.features import Features
from featurestore.storage import checksums
from featurestore.storage.shard import MissingChannelError
from featurestore.storage.store import Channel, SessionMeta, Store, StoreError

META = SessionMeta("Subject_1_Story_1", 1, 1, 1, "val", n_frames=100)
COLUMNS = ["a", "b", "c"]


@pytest.fixture
def store(tmp_path, rng):
    """A shard with a face channel, scene rows linked by two per-role channels, and labels."""
    st = Store(tmp_path, mode="a")
    rows = rng.normal(size=(400, 3)).astype(np.float32)
    t = np.arange(400) * 0.01
    scene = Channel(
        rows,
        t,
        np.ones(400, bool),
        COLUMNS,
        extractor="egemaps",
        extractor_version="1",
        cache_key="s",
    )
    roles = {
        f"{r}/egemaps": Channel(
            rows,
            t,
            rng.random(400) < 0.5,
            COLUMNS,
            extractor="rule",
            extractor_version="1",
            shared_with="scene/egemaps",
        )
        for r in ("speaker", "listener")
    }
    face = Channel(
        rng.normal(size=(20, 2)),
        np.arange(20) * 0.2,
        np.ones(20, bool),
        ["mouth_open", "blink"],
        extractor="face_geom",
        extractor_version="2",
        params={"face_fps": 5.0},
        cache_key="f",
    )
    st.write_session(
        META,
        {"scene/egemaps": scene, **roles, "listener/face_geom": face},
        labels={"valence_self": np.linspace(-1, 1, 100)},
    )
    return st


def test_read_session_returns_meta_channels_and_labels_of_one_open(store):
    keys = ["listener/face_geom", "speaker/egemaps", "listener/egemaps"]
    got = store.read_session(META.session, keys, "valence_self")
    assert got.meta == META and list(got.channels) == keys and got.target == "valence_self"
    np.testing.assert_array_equal(got.labels, np.linspace(-1, 1, 100).astype(np.float32))
    for key in keys:
        want = store.read_channel(META.session, key)
        ch = got.channels[key]
        assert type(ch) is Features and ch.columns == want.columns  # no provenance unless asked for
        np.testing.assert_array_equal(ch.data, want.data)
        np.testing.assert_array_equal(ch.time, want.time)
        np.testing.assert_array_equal(ch.valid, want.valid)
    # the rows both per-role channels link to are read once: the same arrays, their own valid
    spk, lst = got.channels["speaker/egemaps"], got.channels["listener/egemaps"]
    assert spk.data is lst.data and spk.time is lst.time and spk.valid is not lst.valid
    assert store.read_session(META.session, ["scene/egemaps"]).labels is None


def test_read_session_with_provenance_gives_channels(store):
    got = store.read_session(META.session, ["listener/face_geom"], provenance=True)
    ch = got.channels["listener/face_geom"]
    assert isinstance(ch, Channel) and (ch.extractor, ch.params, ch.cache_key) == (
        "face_geom",
        {"face_fps": 5.0},
        "f",
    )


def test_a_missing_channel_names_what_the_shard_has_and_how_to_add_it(store):
    with pytest.raises(
        MissingChannelError,
        match=r"has no channel speaker/face_geom in .*\(it has: speaker/egemaps, "
        r"listener/egemaps, listener/face_geom, scene/egemaps\); compute it with `featurestore extract`",
    ) as e:
        store.read_session(META.session, ["speaker/face_geom", "listener/face_geom"])
    assert e.value.keys == ["speaker/face_geom"]
    with pytest.raises(
        MissingChannelError,
        match=r"no channel listener/lexicon .*`featurestore transcripts TRANSCRIPT_DIR`",
    ):
        store.read_session(META.session, ["listener/lexicon"])


def test_missing_target_and_label_length_mismatch_are_named(store):
    with pytest.raises(
        StoreError,
        match=r"has no labels 'arousal' .*\(it has: valence_self\); to add a rating as this target: "
        r"`featurestore labels ANNOTATION_DIR --target arousal`",
    ):
        store.read_session(META.session, ["listener/face_geom"], "arousal")
    with pytest.raises(
        StoreError, match=r"no labels 'valence_slef' .*did you mean 'valence_self'\?"
    ):
        store.read_session(META.session, ["listener/face_geom"], "valence_slef")
    with h5py.File(store.shard_path(META.session), "a") as f:
        del f["labels/valence_self"]  # 90 rows with their checksum: only the length is wrong
        checksums.create(f["labels"], "valence_self", np.zeros(90, np.float32))
    with pytest.raises(
        StoreError,
        match=r"labels 'valence_self' have 90 rows but the session has 100 frames; re-add",
    ):
        store.read_session(META.session, ["listener/face_geom"], "valence_self")


def test_schema_version_and_unreadable_or_missing_shards(store, tmp_path):
    path = store.shard_path(META.session)
    with h5py.File(path, "a") as f:
        f.attrs["schema_version"] = 7
    with pytest.raises(
        StoreError,
        match=rf"{path} has schema version 7; this tool reads and writes schema version 1, 2\. Move",
    ):
        store.read_session(META.session, ["listener/face_geom"])
    with pytest.raises(
        StoreError,
        match=r"schema version 7; this tool reads and writes schema version 1, 2; it was left as it is",
    ):
        store.check_schema(META.session, write=True)
    store.check_schema("Subject_9_Story_9", write=True)  # no shard yet: nothing to refuse
    path.write_bytes(b"not hdf5")
    with pytest.raises(StoreError, match="is not a readable HDF5 shard"):
        store.read_session(META.session, ["listener/face_geom"])
    with pytest.raises(
        StoreError, match=r"no shard for Subject_9_Story_9 .*run `featurestore extract`"
    ):
        store.read_session("Subject_9_Story_9", ["listener/face_geom"])
    with pytest.raises(StoreError, match=rf"no shard for Subjct_.*did you mean {META.session}\?"):
        store.read_session(META.session.replace("Subject", "Subjct"), ["listener/face_geom"])


def test_column_names_that_disagree_with_the_data_are_an_error(store):
    with h5py.File(store.shard_path(META.session), "a") as f:
        f["listener/face_geom"].attrs["columns"] = '["mouth_open"]'
    with pytest.raises(
        StoreError,
        match=r"listener/face_geom: 2 data columns but 1 names; run `featurestore verify`",
    ):
        store.read_session(META.session, ["listener/face_geom"])
