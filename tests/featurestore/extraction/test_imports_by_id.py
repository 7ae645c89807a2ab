"""`featurestore import` into a manifest's recordings: files named by recording id or given with
--session land in those recordings' shards; an OMG-Empathy name that is none of them is refused."""

from __future__ import annotations

from featurestore.cli import main
from featurestore.storage.store import Store
from tests.featurestore.extraction.helpers import write_openface, write_pyfeat


def _manifest_store(tmp_path):
    """A store holding the scan of a two-recording manifest (no shard yet)."""
    corpus = tmp_path / "lab"
    corpus.mkdir()
    for rec in ("rec01", "rec02"):
        (corpus / f"{rec}_cam.mp4").write_bytes(b"not decoded by scan")
    (corpus / "sessions.csv").write_text(
        "session,person,group,split,video_person\n"
        "rec01,p01,talk,train,rec01_cam.mp4\n"
        "rec02,p02,talk,test,rec02_cam.mp4\n"
    )
    store = tmp_path / "store"
    assert main(["scan", "--manifest", str(corpus / "sessions.csv"), "--store", str(store)]) == 0
    return store


def test_tables_named_by_recording_id_land_in_those_recordings(tmp_path, capsys):
    store = _manifest_store(tmp_path)
    tables = tmp_path / "openface"
    tables.mkdir()
    write_openface(tables / "rec01.csv", n=30)
    (tables / "notes.csv").write_text("time,a\n0,1\n")
    args = [
        "import",
        str(tables),
        "--role",
        "person",
        "--channel",
        "openface",
        "--store",
        str(store),
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "skipped" in out and "notes.csv" in out and "neither a recording id" in out
    st = Store(store)
    assert st.list_sessions() == ["rec01"]
    meta = st.meta("rec01")
    assert (meta.layout, meta.person, meta.group, meta.split) == (
        "manifest",
        "p01",
        "talk",
        "train",
    )
    assert st.channel_keys("rec01") == ["listener/openface"]


def test_session_option_stores_one_file_as_that_recording(tmp_path, capsys):
    store = _manifest_store(tmp_path)
    table = tmp_path / "whatever_the_tool_named_it.csv"
    write_pyfeat(table)
    base = ["import", str(table), "--role", "person", "--channel", "pyfeat", "--store", str(store)]
    assert main([*base, "--session", "rec02"]) == 0
    assert Store(store).channel_keys("rec02") == ["listener/pyfeat"]
    assert Store(store).meta("rec02").person == "p02"
    assert main([*base, "--session", "rec09"]) == 1
    err = capsys.readouterr().err
    assert "--session rec09 is no recording of this store" in err and "rec01, rec02" in err
    assert Store(store).list_sessions() == ["rec02"]


def test_an_omg_named_file_in_a_manifest_store_is_refused_not_a_stray_shard(tmp_path, capsys):
    store = _manifest_store(tmp_path)
    tables = tmp_path / "openface"
    tables.mkdir()
    write_openface(tables / "Subject_1_Story_1.csv", n=10)
    args = [
        "import",
        str(tables),
        "--role",
        "listener",
        "--channel",
        "openface",
        "--store",
        str(store),
    ]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "Subject_1_Story_1.csv is named for Subject_1_Story_1" in err
    assert "manifest's recordings" in err and "--session ID" in err
    assert Store(store).list_sessions() == []


def test_verify_flags_a_shard_with_no_media_and_names_one_without_labels_predict_only(
    tmp_path, capsys
):
    tables, annotations = tmp_path / "openface", tmp_path / "ratings"
    tables.mkdir()
    annotations.mkdir()
    write_openface(tables / "Subject_1_Story_1.csv", n=10)  # features, never any labels
    (annotations / "Subject_2_Story_1.csv").write_text("valence\n" + "0.1\n" * 10)  # labels alone
    store = str(tmp_path / "store")
    assert (
        main(["import", str(tables), "--role", "listener", "--channel", "of", "--store", store])
        == 0
    )
    assert main(["labels", str(annotations), "--target", "valence", "--store", store]) == 0
    capsys.readouterr()
    assert main(["verify", "--store", store, "--no-sources"]) == 1
    out, err = capsys.readouterr()
    assert "predict only: 1 shard(s) without labels (Subject_1_Story_1)" in out  # a blind test's
    assert "Subject_2_Story_1: no media" in err and "featurestore extract" in err
    assert "1 problem(s)" in err


def test_labels_named_by_recording_id_land_in_that_recording(tmp_path, capsys):
    store = _manifest_store(tmp_path)
    ratings = tmp_path / "ratings"
    ratings.mkdir()
    (ratings / "rec02.csv").write_text("valence\n" + "0.2\n" * 20)
    (ratings / "Subject_3_Story_1.csv").write_text("valence\n" + "0.2\n" * 20)
    args = ["labels", str(ratings), "--target", "valence", "--store", str(store)]
    assert main(args) == 1  # the OMG-named file is refused, the other written
    assert "Subject_3_Story_1.csv is named for Subject_3_Story_1" in capsys.readouterr().err
    st = Store(store)
    assert st.list_sessions() == ["rec02"]
    assert st.label_targets("rec02") == ["valence"] and st.meta("rec02").split == "test"
