"""imports: per-frame tables and valence annotations into the store (sessions, shards, reports)."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pandas as pd
import pytest

from featurestore.extraction.imports import import_labels, import_tables
from featurestore.storage.provenance import cache_key, file_fingerprint
from featurestore.storage.store import Channel, SessionMeta, Store
from tests.featurestore.extraction.helpers import (
    OPENFACE_GAZE,
    OPENFACE_POSE,
    write_openface,
    write_pyfeat,
)
from tests.featurestore.sources.helpers import write_valence


# ------------------------------------------------------------------ tables
def test_import_tables_into_a_new_store_and_read_back(tmp_path):
    tables = tmp_path / "openface"
    (tables / "deep" / "er").mkdir(parents=True)
    r1, _ = write_openface(tables / "Subject_1_Story_2.csv", n=30)
    write_openface(tables / "deep" / "er" / "subject_3_story_6.CSV", n=40, seed=2)
    (tables / "notes.csv").write_text("time,a\n0,1\n")
    report = import_tables(tables, tmp_path / "store", role="listener", channel="face_au_openface")
    assert not report.failed, str(report)
    assert [r.session for r in report.results] == ["Subject_1_Story_2", "Subject_3_Story_6"]
    assert [p.name for p in report.skipped] == ["notes.csv"]

    store = Store(tmp_path / "store")
    df = store.channel("Subject_1_Story_2", "listener/face_au_openface")
    aus = ["AU01_r", "AU02_r", "AU45_r", "AU01_c", "AU02_c", "AU45_c"]
    assert list(df.columns) == [*aus, *OPENFACE_POSE, *OPENFACE_GAZE, "valid"]
    np.testing.assert_allclose(df.index.to_numpy(), np.arange(30) / 25.0, atol=1e-9)
    np.testing.assert_allclose(df["AU02_r"].to_numpy()[:3], r1[:3, 1], rtol=1e-6)
    assert int(df["valid"].sum()) == 28
    meta = store.meta("Subject_3_Story_6")
    assert (meta.listener, meta.story, meta.speaker, meta.split, meta.n_frames) == (
        3,
        6,
        3,
        "test",
        40,
    )
    ch = store.read_channel("Subject_1_Story_2", "listener/face_au_openface")
    assert ch.extractor == "import:openface" and ch.extractor_version == "2"
    assert ch.cache_key == cache_key(ch.source, ch.extractor, ch.extractor_version, ch.params)
    assert ch.source == file_fingerprint(tables / "Subject_1_Story_2.csv")
    # consistent; without labels, both are predict only
    assert store.verify() == []
    assert store.predict_only() == ["Subject_1_Story_2", "Subject_3_Story_6"]


def test_import_into_existing_shard_keeps_other_content(tmp_path):
    store = Store(tmp_path / "store", mode="a")
    meta = SessionMeta("Subject_2_Story_4", 2, 4, 2, "train", n_frames=50)
    other = Channel(
        np.ones((10, 1)), np.arange(10) * 0.2, np.ones(10, bool), ["x"], extractor="face_geom"
    )
    store.write_session(
        meta, channels={"speaker/face_geom": other}, labels={"valence_self": np.zeros(50)}
    )
    tables = tmp_path / "t"
    tables.mkdir()
    write_pyfeat(tables / "Subject_2_Story_4.csv")
    report = import_tables(tables, store.root, role="speaker", channel="face_au")
    assert not report.failed, str(report)
    assert sorted(store.channel_keys("Subject_2_Story_4")) == [
        "speaker/face_au",
        "speaker/face_geom",
    ]
    assert store.meta("Subject_2_Story_4").n_frames == 50
    assert len(store.labels("Subject_2_Story_4", "valence_self")) == 50
    assert store.read_channel("Subject_2_Story_4", "speaker/face_au").extractor == "import:pyfeat"


def test_table_running_past_the_session_is_an_error_and_shard_unchanged(tmp_path):
    store = Store(tmp_path / "store", mode="a")
    store.write_session(SessionMeta("Subject_1_Story_1", 1, 1, 1, "val", n_frames=10))
    before = store.shard_path("Subject_1_Story_1").read_bytes()
    tables = tmp_path / "t"
    tables.mkdir()
    write_openface(tables / "Subject_1_Story_1.csv", n=60)  # 2.4 s vs a 0.4 s session
    report = import_tables(tables, store.root, role="listener", channel="of")
    assert [r.session for r in report.failed] == ["Subject_1_Story_1"]
    assert "2.36 s" in report.failed[0].error and "0.40 s" in report.failed[0].error
    assert store.shard_path("Subject_1_Story_1").read_bytes() == before


def test_two_tables_for_one_session_fail_that_session_only(tmp_path):
    tables = tmp_path / "t"
    (tables / "a").mkdir(parents=True)
    write_openface(tables / "Subject_1_Story_1.csv")
    pd.DataFrame({"time": [0.0, 0.04], "v": [1.0, 2.0]}).to_parquet(
        tables / "a" / "Subject_1_Story_1.parquet"
    )
    write_openface(tables / "Subject_2_Story_1.csv")
    (tables / "Subject_4_Story_1.csv").write_text("time,a\n0,zz\n")
    report = import_tables(tables, tmp_path / "store", role="listener", channel="au")
    status = {r.session: r for r in report.results}
    assert status["Subject_2_Story_1"].ok
    assert (
        "2 tables" in status["Subject_1_Story_1"].error
        and "Subject_1_Story_1.parquet" in status["Subject_1_Story_1"].error
    )
    assert "'a'" in status["Subject_4_Story_1"].error
    assert {r.session for r in report.failed} == {"Subject_1_Story_1", "Subject_4_Story_1"}
    assert Store(tmp_path / "store").list_sessions() == ["Subject_2_Story_1"]
    assert "1 session(s) written, 2 failed" in str(report)


def test_import_tables_rejects_unknown_role(tmp_path):
    with pytest.raises(ValueError, match="role"):
        import_tables(tmp_path, tmp_path / "s", role="observer", channel="x")


# -------------------------------------------------------------------- labels
def test_import_labels_sets_frame_count_and_reads_back(tmp_path):
    tables = tmp_path / "t"
    tables.mkdir()
    write_openface(tables / "Subject_5_Story_8.csv", n=30)
    import_tables(tables, tmp_path / "store", role="listener", channel="au")
    ann = tmp_path / "ann"
    ann.mkdir()
    y = write_valence(ann / "Subject_5_Story_8.csv", 40)  # 1.56 s vs 1.16 s of features: within 1 s
    y2 = write_valence(ann / "Subject_6_Story_2.csv", 25, seed=3)  # no shard yet
    report = import_labels(ann, tmp_path / "store", target="valence_self")
    assert not report.failed, str(report)
    store = Store(tmp_path / "store")
    np.testing.assert_allclose(
        store.labels("Subject_5_Story_8", "valence_self").to_numpy(), y, atol=1e-6
    )
    assert store.meta("Subject_5_Story_8").n_frames == 40
    assert store.channel_keys("Subject_5_Story_8") == ["listener/au"]
    s = store.labels("Subject_6_Story_2", "valence_self")
    assert len(s) == 25 and s.index[1] == pytest.approx(0.04)
    np.testing.assert_allclose(s.to_numpy(), y2, atol=1e-6)
    assert store.meta("Subject_6_Story_2").split == "train"
    # labels alone (no feature channel yet) are flagged; the other shard is complete
    assert [(p.session, p.what) for p in store.verify()] == [
        ("Subject_6_Story_2", "no media: the shard holds no feature channel")
    ]


def test_label_length_mismatch_over_one_second_is_an_error_and_shard_unchanged(tmp_path):
    tables = tmp_path / "t"
    tables.mkdir()
    write_openface(tables / "Subject_1_Story_3.csv", n=100)  # 3.96 s
    import_tables(tables, tmp_path / "store", role="listener", channel="au")
    shard = Store(tmp_path / "store").shard_path("Subject_1_Story_3")
    before, mtime = shard.read_bytes(), shard.stat().st_mtime_ns
    ann = tmp_path / "ann"
    ann.mkdir()
    write_valence(ann / "Subject_1_Story_3.csv", 60)  # 2.36 s: 1.6 s short
    report = import_labels(ann, tmp_path / "store", target="valence_self")
    assert [r.session for r in report.failed] == ["Subject_1_Story_3"]
    assert "listener/au" in report.failed[0].error and "3.96 s" in report.failed[0].error
    assert shard.read_bytes() == before and shard.stat().st_mtime_ns == mtime
    assert Store(tmp_path / "store").label_targets("Subject_1_Story_3") == []


def test_duplicate_annotations_fail_that_session(tmp_path):
    ann = tmp_path / "ann"
    (ann / "b").mkdir(parents=True)
    write_valence(ann / "Subject_1_Story_1.csv", 20)
    write_valence(ann / "b" / "Subject_1_Story_1.csv", 20)
    write_valence(ann / "Subject_2_Story_1.csv", 20)
    report = import_labels(ann, tmp_path / "store", target="valence_observer_listener")
    assert [r.session for r in report.failed] == ["Subject_1_Story_1"]
    assert "2 annotation files" in report.failed[0].error
    store = Store(tmp_path / "store")
    assert store.list_sessions() == ["Subject_2_Story_1"]
    with h5py.File(store.shard_path("Subject_2_Story_1"), "r") as f:
        src = json.loads(f["labels/valence_observer_listener"].attrs["source"])
    assert src["path"].endswith("Subject_2_Story_1.csv")


def test_import_keeps_the_column_groups_asked_for_on_the_command_line(tmp_path):
    from featurestore.cli import main

    tables = tmp_path / "openface"
    tables.mkdir()
    write_openface(tables / "Subject_1_Story_2.csv", n=30)
    store = tmp_path / "store"
    args = ["import", str(tables), "--role", "listener", "--channel", "openface"]
    assert main([*args, "--store", str(store), "--groups", "pose", "landmarks"]) == 0
    ch = Store(store).read_channel("Subject_1_Story_2", "listener/openface")
    assert ch.columns == [*OPENFACE_POSE, "x_0", "x_1", "y_0", "y_1"]
    assert ch.params["groups"] == ["pose", "landmarks"]
    # a group the table lacks fails that session, naming the file and the group
    assert main([*args, "--store", str(store), "--groups", "landmarks_3d"]) == 1


def test_an_imported_channel_records_the_lookahead_declared_on_the_command_line(tmp_path, capsys):
    """``--lookahead-s`` is the channel's ``lookahead_s`` and in its params (so its cache key:
    another declaration is another store fingerprint); without it none is recorded (the
    experiments count the channel as reading the whole session); a negative one is refused."""
    from featurestore.cli import main

    tables = tmp_path / "openface"
    tables.mkdir()
    write_openface(tables / "Subject_1_Story_2.csv", n=30)
    store = tmp_path / "store"
    args = ["import", str(tables), "--role", "listener", "--store", str(store)]
    assert main([*args, "--channel", "plain"]) == 0
    assert main([*args, "--channel", "framewise", "--lookahead-s", "0"]) == 0
    assert main([*args, "--channel", "offline", "--lookahead-s", "inf"]) == 0
    read = Store(store).read_channel
    plain = read("Subject_1_Story_2", "listener/plain")
    assert plain.lookahead_s is None and "lookahead_s" not in plain.params
    framewise = read("Subject_1_Story_2", "listener/framewise")
    assert framewise.lookahead_s == 0.0 and framewise.params["lookahead_s"] == 0.0
    assert framewise.cache_key != plain.cache_key
    assert read("Subject_1_Story_2", "listener/offline").lookahead_s == float("inf")
    # the cache keys match their params
    assert Store(store).verify() == []
    capsys.readouterr()
    assert main(["inspect", "Subject_1_Story_2", "--store", str(store)]) == 0
    shown = capsys.readouterr().out
    assert "reads an unknown time past each row" in shown and "reads 0 s past each row" in shown
    with pytest.raises(ValueError, match="lookahead_s must be >= 0"):
        import_tables(tables, store, role="listener", channel="x", lookahead_s=-0.1)
