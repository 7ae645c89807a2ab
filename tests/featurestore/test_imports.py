"""imports: OpenFace / py-feat / generic tables and valence annotations into the store."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pandas as pd
import pytest

from featurestore.annotations import AnnotationError, read_annotation
from featurestore.imports import import_labels, import_tables
from featurestore.store import Channel, SessionMeta, Store, cache_key
from featurestore.tables import TableError, read_table

NAN = float("nan")


# ------------------------------------------------------------------ fixtures
def write_openface(path, n=30, fps=25.0, seed=0):
    """An OpenFace 2.x FeatureExtraction CSV: ', '-separated, leading spaces in header and values."""
    rng = np.random.default_rng(seed)
    aus = ["AU01", "AU02", "AU45"]
    header = ["frame", "face_id", "timestamp", "confidence", "success", "gaze_0_x", "pose_Tx"]
    header += [f"{a}_r" for a in aus] + [f"{a}_c" for a in aus]
    r = rng.uniform(0, 5, (n, len(aus))).round(2)
    c = (r > 1).astype(int)
    success = np.ones(n, int)
    conf = np.full(n, 0.98)
    success[3] = 0
    r[3], c[3] = 0, 0  # OpenFace writes zeros for a failed frame
    conf[5] = 0.3  # tracked, but with low confidence
    lines = [", ".join(header)]
    for i in range(n):
        vals = [i + 1, 0, f"{i / fps:.3f}", conf[i], success[i], 0.1, 12.5]
        vals += [f"{v:.2f}" for v in r[i]] + list(c[i])
        lines.append(", ".join(str(v) for v in vals))
    path.write_text("\n".join(lines) + "\n")
    return r, c


def write_pyfeat(path):
    """A py-feat Fex.to_csv-like table: face boxes, AUs, a text column, two faces in frame 1."""
    df = pd.DataFrame(
        {
            "FaceRectX": [1.0, 2.0, 50.0, NAN, 3.0],
            "FaceRectY": [1.0, 2.0, 60.0, NAN, 3.0],
            "FaceRectWidth": [40.0, 10.0, 45.0, NAN, 41.0],
            "FaceRectHeight": [50.0, 12.0, 52.0, NAN, 50.0],
            "FaceScore": [0.99, 0.7, 0.98, NAN, 0.99],
            "AU01": [0.1, 0.9, 0.3, NAN, 0.5],
            "AU04": [0.2, 0.8, 0.4, NAN, 0.6],
            "anger": [0.1, 0.1, 0.2, NAN, 0.1],
            "input": ["v.mp4"] * 5,
            "frame": [0, 1, 1, 2, 3],
        }
    )
    df.to_csv(path, index=False)
    return df


def write_valence(path, n, seed=0, header="valence"):
    y = np.clip(np.cumsum(np.random.default_rng(seed).normal(0, 0.02, n)), -1, 1)
    path.write_text(header + "\n" + "\n".join(f"{v:.6f}" for v in y) + "\n")
    return y.astype(np.float32)


# -------------------------------------------------------------------- tables
def test_openface_csv_with_leading_space_headers(tmp_path):
    p = tmp_path / "of.csv"
    r, c = write_openface(p)
    t = read_table(p)
    assert t.kind == "openface" and t.extractor == "import:openface"
    f = t.features
    assert f.columns == ["AU01_r", "AU02_r", "AU45_r", "AU01_c", "AU02_c", "AU45_c"]
    np.testing.assert_allclose(f.time, np.arange(30) / 25.0, atol=1e-9)
    assert not f.valid[3] and not f.valid[5] and f.valid.sum() == 28
    assert np.isnan(f.data[[3, 5]]).all()
    np.testing.assert_allclose(f.data[0], np.r_[r[0], c[0]], rtol=1e-6)
    assert t.params["min_confidence"] == 0.8
    # a laxer threshold keeps the low-confidence frame
    assert read_table(p, min_confidence=0.2).features.valid[5]


def test_openface_all_nan_row_is_an_invalid_frame_but_partial_nan_is_an_error(tmp_path):
    p = tmp_path / "of.csv"
    write_openface(p, n=10)
    lines = p.read_text().splitlines()
    head = lines[0].split(", ")
    cells = lines[8].split(", ")
    for j, h in enumerate(head):
        if h.startswith("AU"):
            cells[j] = "nan"
    lines[8] = ", ".join(cells)
    p.write_text("\n".join(lines) + "\n")
    f = read_table(p).features
    assert not f.valid[7] and f.valid.sum() == 7  # rows 3 (failed), 5 (low conf), 7 (all NaN)
    cells = lines[2].split(", ")
    cells[head.index("AU02_r")] = "nan"
    lines[2] = ", ".join(cells)
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(TableError, match=r"AU02_r.*row 2 \(line 3"):
        read_table(p)


def test_pyfeat_csv_keeps_largest_face_and_faceless_frames_invalid(tmp_path):
    p = tmp_path / "pf.csv"
    write_pyfeat(p)
    t = read_table(p, fps=25.0)
    assert t.kind == "pyfeat"
    f = t.features
    assert f.columns == ["AU01", "AU04"]  # the text column 'input' and emotions are not features
    np.testing.assert_allclose(f.time, [0.0, 0.04, 0.08, 0.12])
    assert f.valid.tolist() == [True, True, False, True]
    np.testing.assert_allclose(f.data[1], [0.3, 0.4], rtol=1e-6)  # 45x52 face, not the 10x12 one
    assert np.isnan(f.data[2]).all()


def test_generic_csv_with_frame_and_parquet_with_time(tmp_path):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(50, 2))
    pd.DataFrame({"frame": np.arange(0, 100, 2), "energy": x[:, 0], "pitch": x[:, 1]}).to_csv(tmp_path / "g.csv", index=False)
    t = read_table(tmp_path / "g.csv", fps=10.0)
    assert t.kind == "table" and t.features.columns == ["energy", "pitch"]
    np.testing.assert_allclose(t.features.time, np.arange(0, 100, 2) / 10.0)
    np.testing.assert_allclose(t.features.data, x, rtol=1e-6)
    assert t.features.valid.all()

    times = np.arange(40) * 0.01
    pd.DataFrame({"time": times, "loud": x[:40, 0], "flag": np.arange(40) % 2 == 0,
                  "valid": np.arange(40) != 7}).to_parquet(tmp_path / "g.parquet")
    q = read_table(tmp_path / "g.parquet")
    assert q.features.columns == ["loud", "flag"]
    np.testing.assert_allclose(q.features.time, times)
    assert q.features.data[2, 1] == 1.0 and not q.features.valid[7] and np.isnan(q.features.data[7]).all()


def test_non_numeric_column_is_a_table_error_naming_column_and_row(tmp_path):
    p = tmp_path / "bad.csv"
    p.write_text("time,a,label\n0.0,1.0,x\n0.04,2.0,y\n")
    with pytest.raises(TableError) as e:
        read_table(p)
    msg = str(e.value)
    assert "bad.csv" in msg and "'label'" in msg and "row 1" in msg and "drop the column" in msg
    p.write_text("time,a\n0.0,1.0\n0.04,oops\n")
    with pytest.raises(TableError, match=r"'a'.*'oops'.*row 2 \(line 3"):
        read_table(p)


@pytest.mark.parametrize("bad", ["nan", "inf", "-inf", ""])
def test_nan_or_inf_in_a_generic_table_is_an_error(tmp_path, bad):
    p = tmp_path / "nan.csv"
    p.write_text(f"frame,a,b\n0,1.0,2.0\n1,3.0,4.0\n2,5.0,{bad}\n")
    with pytest.raises(TableError, match=r"\['b'\].*row 3"):
        read_table(p)


def test_table_without_time_or_frame_or_with_unsorted_time_is_an_error(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("a,b\n1,2\n")
    with pytest.raises(TableError, match="'time' column"):
        read_table(p)
    p.write_text("time,a\n0.0,1\n0.08,2\n0.04,3\n")
    with pytest.raises(TableError, match="does not increase at row 3"):
        read_table(p)


# ----------------------------------------------------------------- to store
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
    assert list(df.columns) == ["AU01_r", "AU02_r", "AU45_r", "AU01_c", "AU02_c", "AU45_c", "valid"]
    np.testing.assert_allclose(df.index.to_numpy(), np.arange(30) / 25.0, atol=1e-9)
    np.testing.assert_allclose(df["AU02_r"].to_numpy()[:3], r1[:3, 1], rtol=1e-6)
    assert int(df["valid"].sum()) == 28
    meta = store.meta("Subject_3_Story_6")
    assert (meta.listener, meta.story, meta.speaker, meta.split, meta.n_frames) == (3, 6, 3, "test", 40)
    ch = store.read_channel("Subject_1_Story_2", "listener/face_au_openface")
    assert ch.extractor == "import:openface" and ch.extractor_version == "1"
    assert ch.cache_key == cache_key(ch.source, ch.extractor, ch.extractor_version, ch.params)
    assert ch.source["path"].endswith("Subject_1_Story_2.csv") and ch.source["size"] > 0
    assert store.verify() == []


def test_import_into_existing_shard_keeps_other_content(tmp_path):
    store = Store(tmp_path / "store", mode="a")
    meta = SessionMeta("Subject_2_Story_4", 2, 4, 2, "train", n_frames=50)
    other = Channel(np.ones((10, 1)), np.arange(10) * 0.2, np.ones(10, bool), ["x"], extractor="face_geom")
    store.write_session(meta, channels={"speaker/face_geom": other}, labels={"valence_self": np.zeros(50)})
    tables = tmp_path / "t"
    tables.mkdir()
    write_pyfeat(tables / "Subject_2_Story_4.csv")
    report = import_tables(tables, store.root, role="speaker", channel="face_au")
    assert not report.failed, str(report)
    assert sorted(store.channel_keys("Subject_2_Story_4")) == ["speaker/face_au", "speaker/face_geom"]
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
    pd.DataFrame({"time": [0.0, 0.04], "v": [1.0, 2.0]}).to_parquet(tables / "a" / "Subject_1_Story_1.parquet")
    write_openface(tables / "Subject_2_Story_1.csv")
    (tables / "Subject_4_Story_1.csv").write_text("time,a\n0,zz\n")
    report = import_tables(tables, tmp_path / "store", role="listener", channel="au")
    status = {r.session: r for r in report.results}
    assert status["Subject_2_Story_1"].ok
    assert "2 tables" in status["Subject_1_Story_1"].error and "Subject_1_Story_1.parquet" in status["Subject_1_Story_1"].error
    assert "'a'" in status["Subject_4_Story_1"].error
    assert {r.session for r in report.failed} == {"Subject_1_Story_1", "Subject_4_Story_1"}
    assert Store(tmp_path / "store").list_sessions() == ["Subject_2_Story_1"]
    assert "1 session(s) written, 2 failed" in str(report)


def test_import_tables_rejects_unknown_role(tmp_path):
    with pytest.raises(ValueError, match="role"):
        import_tables(tmp_path, tmp_path / "s", role="observer", channel="x")


# -------------------------------------------------------------------- labels
def test_read_annotation_accepts_any_single_header(tmp_path):
    y = write_valence(tmp_path / "a.csv", 100, header="valence_self")
    np.testing.assert_allclose(read_annotation(tmp_path / "a.csv"), y, atol=1e-6)


@pytest.mark.parametrize(
    "body, match",
    [
        ("valence\n0.1\nabc\n0.2\n", r"line 3 holds 'abc'"),
        ("valence\n0.1\n1.5\n", r"line 3 holds 1.5, outside"),
        ("valence\n0.1\nnan\n", r"line 3 holds nan"),
        ("valence,arousal\n0.1,0.2\n", "one column name"),
        ("0.1\n0.2\n", "not a column name"),
        ("valence\n", "no values"),
    ],
)
def test_read_annotation_errors_name_file_and_line(tmp_path, body, match):
    p = tmp_path / "Subject_1_Story_1.csv"
    p.write_text(body)
    with pytest.raises(AnnotationError, match=match) as e:
        read_annotation(p)
    assert "Subject_1_Story_1.csv" in str(e.value)


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
    np.testing.assert_allclose(store.labels("Subject_5_Story_8", "valence_self").to_numpy(), y, atol=1e-6)
    assert store.meta("Subject_5_Story_8").n_frames == 40
    assert store.channel_keys("Subject_5_Story_8") == ["listener/au"]
    s = store.labels("Subject_6_Story_2", "valence_self")
    assert len(s) == 25 and s.index[1] == pytest.approx(0.04)
    np.testing.assert_allclose(s.to_numpy(), y2, atol=1e-6)
    assert store.meta("Subject_6_Story_2").split == "train"
    assert store.verify() == []


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
