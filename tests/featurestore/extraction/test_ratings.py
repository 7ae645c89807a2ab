"""``featurestore ratings FILE`` and the ratings a manifest gives at extraction."""

from __future__ import annotations

import numpy as np
import pytest

from featurestore.cli import main
from featurestore.extraction.extract import changed_ratings
from featurestore.extraction.ratings import RatingsTableError, import_ratings, read_ratings_table
from featurestore.sources.manifest import SessionFiles
from featurestore.storage.store import SessionMeta, Store


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "store", mode="a")
    for i, sid in enumerate(("Subject_1_Story_1", "Subject_2_Story_1"), start=1):
        s.write_session(
            SessionMeta(sid, i, 1, 1, "val", 25), labels={"valence_self": np.zeros(25, np.float32)}
        )
    return s


def test_table_with_raters_is_stored_as_their_mean_and_rerun_is_current(store, tmp_path, capsys):
    p = tmp_path / "r.csv"
    p.write_text(
        "session,empathy,liking,rater\nSubject_1_Story_1,3,1,a\nSubject_1_Story_1,5,,b\nSubject_2_Story_1,2,2,a\n"
    )
    rep = import_ratings(p, store.root)
    assert (rep.written, rep.targets) == (
        ["Subject_1_Story_1", "Subject_2_Story_1"],
        ["empathy", "liking"],
    )
    assert store.session_label("Subject_1_Story_1", "empathy") == 4.0
    assert store.session_raters("Subject_1_Story_1", "liking") == {"a": 1.0}
    assert store.session_labels("empathy")["value"].tolist() == [4.0, 2.0]
    assert main(["ratings", str(p), "--store", str(store.root)]) == 0
    assert "0 session(s) written, 2 already current" in capsys.readouterr().out


def test_table_without_rater_column(tmp_path):
    p = tmp_path / "r.csv"
    p.write_text("session,empathy\nS1,3.5\nS2,\n")
    assert read_ratings_table(p) == {"S1": {"empathy": {"": 3.5}}}


def test_table_errors_name_file_line_and_column_and_write_nothing(store, tmp_path, capsys):
    p = tmp_path / "r.csv"
    p.write_text(
        "session,empathy\nSubject_1_Story_1,lots\nSubject_1_Story_1,3\nSubject_1_Story_1,4\n,1\n"
    )
    with pytest.raises(RatingsTableError) as e:
        read_ratings_table(p)
    assert e.value.problems == [
        f"{p}: line 2, column 'empathy': 'lots' is not a number",
        f"{p}: line 3, column 'session': 'Subject_1_Story_1' repeats line 2",
        f"{p}: line 4, column 'session': 'Subject_1_Story_1' repeats line 2",
        f"{p}: line 5, column 'session': empty; every row names its session",
    ]
    p.write_text("who,empathy\nx,1\n")
    with pytest.raises(RatingsTableError, match=r"line 1, column 'session': missing"):
        read_ratings_table(p)
    p.write_text("session,empathy\nSubject_9_Story_9,1\nSubject_1_Story_1,2\n")
    assert main(["ratings", str(p), "--store", str(store.root)]) == 2
    err = capsys.readouterr().err
    assert "'Subject_9_Story_9' has no shard" in err and "nothing was written" in err
    assert store.session_ratings("Subject_1_Story_1") == {}


def test_manifest_ratings_are_written_once_at_extraction(store):
    sid = "Subject_1_Story_1"
    sf = SessionFiles(
        sid, 1, 1, 1, "val", ratings={"empathy": {"o1": 2.0, "o2": 4.0}}, ratings_source="m.csv"
    )
    assert changed_ratings(sf, store.session_ratings(sid)) == sf.ratings
    store.write_session(store.meta(sid), ratings=sf.ratings, ratings_source={"kind": "manifest"})
    assert store.session_label(sid, "empathy") == 3.0
    assert changed_ratings(sf, store.session_ratings(sid)) == {}  # current: nothing rewritten
    sf.ratings = {"empathy": {"o1": 2.0}}
    assert changed_ratings(sf, store.session_ratings(sid)) == {"empathy": {"o1": 2.0}}
    with pytest.raises(ValueError, match="not a finite number"):
        store.write_session(store.meta(sid), ratings={"empathy": {"o1": float("nan")}})
    assert store.session_raters(sid, "empathy") == {"o1": 2.0, "o2": 4.0}  # unchanged


@pytest.mark.slow
def test_extract_stores_a_manifests_ratings_and_rewrites_only_changed_ones(tmp_path):
    from scipy.io import wavfile

    from tests.featurestore.helpers import make_video

    make_video(tmp_path / "a.mp4", n_frames=50, audio=False)
    sr = 16000
    t = np.arange(2 * sr) / sr
    wavfile.write(tmp_path / "a.wav", sr, (0.3 * np.sin(2 * np.pi * 200 * t)).astype(np.float32))
    manifest = tmp_path / "corpus.yaml"

    def write(score):
        manifest.write_text(
            "- {session: s1, person: anna, group: chat, video_person: a.mp4, audio_person: a.wav,\n"
            f"   ratings: {{empathy: {{obs1: {score}, obs2: 5}}, liking: 2}}}}\n"
        )

    write(3)
    store = tmp_path / "store"
    args = ["extract", "--manifest", str(manifest), "--store", str(store), "--channels", "egemaps"]
    assert main(args) == 0
    st = Store(store)
    assert st.session_label_targets("s1") == ["empathy", "liking"]
    assert st.session_label("s1", "empathy") == 4.0
    assert st.session_raters("s1", "empathy") == {"obs1": 3.0, "obs2": 5.0}
    with st.open_session("s1") as shard:
        from featurestore.storage.session_labels import session_label_source

        assert session_label_source(shard.file, "liking") == {
            "file": str(manifest),
            "kind": "manifest",
        }
    before = st.shard_path("s1").stat().st_mtime_ns
    assert main(args) == 0
    assert st.shard_path("s1").stat().st_mtime_ns == before  # nothing changed: nothing written
    write(1)
    assert main(args) == 0
    assert st.session_label("s1", "empathy") == 3.0 and st.session_label("s1", "liking") == 2.0
