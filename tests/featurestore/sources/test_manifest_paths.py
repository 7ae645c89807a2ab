"""The OMG-layout scan reads only what lies inside the scanned folder (symbolic links resolved)
unless --allow-outside-paths, as a manifest does (test_manifest_file_paths.py), and quotes no
line of a file that is not a rating file."""

from __future__ import annotations

import pytest

from featurestore.cli import main
from featurestore.errors import UsageError
from featurestore.sources.manifest import scan
from featurestore.sources.transcripts import TranscriptError, parse_srt

SECRET = "root:x:0:0:secret-line:/root:/bin/bash"


@pytest.fixture
def corpus(tmp_path):
    """data/ in the OMG layout (a video, its self-rating) beside private/ (a passwd-like file
    and a folder of videos)."""
    private = tmp_path / "private"
    (private / "Videos").mkdir(parents=True)
    (private / "passwd").write_text(f"{SECRET}\ndaemon:x:1:1:secret-too:/usr/sbin\n")
    (private / "Videos" / "Subject_2_Story_2.mp4").write_bytes(b"not read")
    data = tmp_path / "data"
    (data / "Videos").mkdir(parents=True)
    (data / "Annotations").mkdir()
    (data / "Videos" / "Subject_1_Story_3.mp4").write_bytes(b"not read")
    (data / "Annotations" / "Subject_1_Story_1.csv").write_text("valence\n0.1\n0.2\n")
    return data


def _cli(verb, data, tmp_path, *extra):
    return main([verb, str(data), "--store", str(tmp_path / "store"), *extra])


def test_a_rating_linked_from_outside_is_refused_unless_allowed(corpus, tmp_path, capsys):
    link = corpus / "Annotations" / "Subject_1_Story_3.csv"
    link.symlink_to(tmp_path / "private" / "passwd")
    with pytest.raises(UsageError, match="outside the scanned folder") as e:
        scan(corpus)
    assert str(link) in str(e.value) and "--allow-outside-paths" in str(e.value)
    assert _cli("scan", corpus, tmp_path) == 2
    err = capsys.readouterr().err
    assert "Subject_1_Story_3.csv: outside the scanned folder" in err and "secret" not in err
    assert not (tmp_path / "store" / "manifest.json").exists()
    # allowed: read, and refused as no rating file without quoting it
    assert _cli("scan", corpus, tmp_path, "--allow-outside-paths") == 1
    err = capsys.readouterr().err
    assert "Subject_1_Story_3.csv: its header (1 fields) has no 'valence' column" in err
    assert "secret" not in err and "root:x" not in err


def test_a_video_linked_from_outside_is_not_extracted(corpus, tmp_path, capsys):
    video = corpus / "Videos" / "Subject_1_Story_1.mp4"
    video.symlink_to(tmp_path / "private" / "Videos" / "Subject_2_Story_2.mp4")
    assert _cli("extract", corpus, tmp_path, "--channels", "egemaps") == 2
    err = capsys.readouterr().err
    assert f"{video}: outside the scanned folder" in err
    assert not (tmp_path / "store").exists() or not list((tmp_path / "store").glob("*.h5"))


def test_a_folder_linked_from_outside_is_refused_and_searched_when_allowed(corpus, tmp_path):
    (corpus / "More").symlink_to(tmp_path / "private" / "Videos", target_is_directory=True)
    with pytest.raises(UsageError, match=r"More: outside the scanned folder"):
        scan(corpus)
    by = scan(corpus, allow_outside=True).by_session()
    assert by["Subject_2_Story_2"].video == corpus / "More" / "Subject_2_Story_2.mp4"


def test_links_that_stay_inside_are_read_and_other_kinds_of_file_ignored(corpus, tmp_path):
    (corpus / "notes.txt").symlink_to(tmp_path / "private" / "passwd")  # never opened
    (corpus / "Ratings").mkdir()
    (corpus / "Ratings" / "r.csv").write_text("valence\n0.3\n")
    (corpus / "Annotations" / "Subject_1_Story_3.csv").symlink_to(corpus / "Ratings" / "r.csv")
    (corpus / "Copy").symlink_to(corpus / "Videos", target_is_directory=True)  # not read twice
    report = scan(corpus)
    assert report.by_session()["Subject_1_Story_3"].annotations["valence_self"].name == (
        "Subject_1_Story_3.csv"
    )
    assert [i.kind for i in report.issues] == ["unmatched"]  # Subject_1_Story_1 has no video


def test_scan_issues_quote_only_what_reads_as_a_rating_header(corpus):
    (corpus / "Annotations" / "Subject_1_Story_3.csv").write_text(f"{SECRET},x\n1,2\n")
    (corpus / "Annotations" / "Subject_1_Story_4.csv").write_text("arousal\n0.1\n")
    reasons = {i.path.name: i.reason for i in scan(corpus).issues}
    assert reasons["Subject_1_Story_3.csv"] == "its header (2 fields) has no 'valence' column"
    assert reasons["Subject_1_Story_4.csv"] == "header 'arousal' has no 'valence' column"


def test_a_transcript_error_does_not_quote_a_line_of_another_kind_of_file():
    with pytest.raises(TranscriptError, match="t.srt:1: text before the first cue time") as e:
        parse_srt(f"{SECRET}\n", "t.srt")
    assert "secret" not in str(e.value)
