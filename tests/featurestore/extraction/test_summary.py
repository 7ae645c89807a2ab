"""`featurestore scan`, `ls` and `inspect` in the corpus's words: a manifest's person, group and
partner ids as written, its role words and media columns; the OMG layout keeps its own."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from featurestore.cli import main
from featurestore.extraction.summary import scan_table
from featurestore.sources.manifest import SessionFiles
from featurestore.storage.shard import Channel, SessionMeta
from featurestore.storage.store import Store


def _channel(n: int = 10) -> Channel:
    t = np.arange(n) / 25.0
    return Channel(np.zeros((n, 2)), t, np.ones(n, bool), ["a", "b"])


def _monadic_store(root: Path) -> Store:
    """Two sessions of a monadic manifest corpus (persons p01 and p02, tasks picture and recall)."""
    store = Store(root, mode="a")
    for i, (session, person, group) in enumerate(
        [("p01_picture", "p01", "picture"), ("p02_recall", "p02", "recall")]
    ):
        meta = SessionMeta(
            session, i + 1, i + 1, 0, "train", 10, layout="manifest", person=person, group=group
        )
        labels = {"valence": np.zeros(10, np.float32)}
        store.write_session(meta, channels={"listener/egemaps": _channel()}, labels=labels)
    return store


def test_ls_and_inspect_show_the_manifests_ids_and_role_words(tmp_path, capsys):
    store = _monadic_store(tmp_path / "store")
    assert main(["ls", "--store", str(store.root)]) == 0
    out = capsys.readouterr().out
    head, first, second = out.splitlines()
    assert head.split() == [
        "session",
        "person",
        "group",
        "split",
        "n_frames",
        "channels",
        "targets",
    ]
    assert first.split() == [
        "p01_picture",
        "p01",
        "picture",
        "train",
        "10",
        "person/egemaps",
        "valence",
    ]
    assert second.split()[1:3] == ["p02", "recall"]
    assert "listener" not in out and "story" not in out and "speaker" not in out
    assert main(["inspect", "p02_recall", "--store", str(store.root)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("p02_recall: person p02, group recall, no partner, split train")
    assert "  person/egemaps: 10 x 2" in out and "listener" not in out


def test_ls_of_the_omg_layout_keeps_its_words(tmp_path, capsys):
    store = Store(tmp_path / "store", mode="a")
    meta = SessionMeta("Subject_1_Story_2", 1, 2, 1, "train", 10)
    store.write_session(meta, channels={"listener/egemaps": _channel()})
    assert main(["ls", "--store", str(store.root)]) == 0
    head, row = capsys.readouterr().out.splitlines()
    assert head.split()[:5] == ["session", "listener", "story", "speaker", "split"]
    assert row.split()[:6] == ["Subject_1_Story_2", "1", "2", "1", "train", "10"]
    assert row.split()[6] == "listener/egemaps"


def test_scan_table_of_a_monadic_manifest_names_its_media_and_counts_persons(tmp_path, capsys):
    sessions = [
        SessionFiles(
            f"{p}_{task}",
            n,
            k,
            0,
            "train",
            layout="manifest",
            person=p,
            group=task,
            media={"video_person": tmp_path / f"{p}_{task}.mp4"},
            annotations={"valence": tmp_path / "v.csv"},
        )
        for n, p in enumerate(["p01", "p02"], 1)
        for k, task in enumerate(["picture", "recall", "plan"], 1)
    ]
    scan_table(sessions, "manifest.csv")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["session", "person", "group", "split", "media", "labels"]
    assert lines[1].split() == ["p01_picture", "p01", "picture", "train", "video_person", "valence"]
    assert (
        lines[-1]
        == "6 sessions of 2 person(s) in 3 group(s), no partner, 6 with a video, in manifest.csv"
    )
    # a dyadic manifest shows its partners
    sessions[0].partner, sessions[0].speaker = "p09", 3
    scan_table(sessions, "manifest.csv")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:5] == ["session", "person", "group", "partner", "split"]
    assert lines[1].split()[3] == "p09" and lines[2].split()[3] == "-"
    assert "no partner" not in lines[-1]


def test_the_extraction_summary_names_computed_channels_in_the_corpus_words(capsys):
    from featurestore.extraction.extract import SessionResult
    from featurestore.extraction.summary import print_extract_summary

    results = [
        SessionResult("p01_plan", computed=["listener/egemaps", "labels/valence"]),
        SessionResult("Subject_1_Story_1", computed=["listener/egemaps", "speaker/egemaps"]),
    ]
    layouts = {"p01_plan": "manifest", "Subject_1_Story_1": "omg"}
    assert print_extract_summary(results, 0.0, layouts) == 0
    out = capsys.readouterr().out
    assert "  p01_plan: computed person/egemaps, labels/valence in" in out
    assert "  Subject_1_Story_1: computed listener/egemaps, speaker/egemaps in" in out
