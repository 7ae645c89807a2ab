"""The importers' folders (`labels`, `transcripts`, `import`) are read like a scanned corpus:
nothing whose real path leaves the folder unless --allow-outside-paths."""

from __future__ import annotations

from featurestore.cli import main
from featurestore.storage.store import Store

SECRET = "root:x:0:0:secret-line:/root:/bin/bash"


def test_a_rating_linked_from_outside_the_labels_folder_is_refused_unless_allowed(tmp_path, capsys):
    private = tmp_path / "private"
    private.mkdir()
    (private / "passwd").write_text(f"{SECRET}\n")
    (private / "ok.csv").write_text("valence\n0.1\n0.2\n0.3\n")
    ratings = tmp_path / "ratings"
    ratings.mkdir()
    (ratings / "Subject_1_Story_1.csv").symlink_to(private / "passwd")
    store = tmp_path / "store"
    args = ["labels", str(ratings), "--target", "valence_self", "--store", str(store)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "Subject_1_Story_1.csv: outside the scanned folder" in err and "secret" not in err
    assert not Store(store).list_sessions()
    assert main([*args, "--allow-outside-paths"]) == 1  # read, and refused as no rating file
    err = capsys.readouterr().err
    assert "Subject_1_Story_1.csv" in err and "secret" not in err
    (ratings / "Subject_1_Story_1.csv").unlink()
    (ratings / "Subject_1_Story_1.csv").symlink_to(private / "ok.csv")
    assert main([*args, "--allow-outside-paths"]) == 0
    assert Store(store).list_sessions() == ["Subject_1_Story_1"]


def test_transcripts_and_tables_linked_from_outside_are_refused(tmp_path, capsys):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "t.srt").write_text(f"{SECRET}\n")
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "transcribed_subject_1_story_1.srt").symlink_to(elsewhere / "t.srt")
    (folder / "Subject_1_Story_1.csv").symlink_to(elsewhere / "t.srt")
    store = str(tmp_path / "store")
    assert main(["transcripts", str(folder), "--store", store]) == 2
    assert "outside the scanned folder" in capsys.readouterr().err
    table = ["import", str(folder), "--role", "listener", "--channel", "x", "--store", store]
    assert main(table) == 2
    err = capsys.readouterr().err
    assert "Subject_1_Story_1.csv" in err and "outside the scanned folder" in err
    assert "secret" not in err
