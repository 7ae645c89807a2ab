import json

import pytest

from featurestore.sources.manifest import annotation_target, scan, story_split, write_manifest


def _touch(path, text=""):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_scan_finds_sessions_any_depth_and_case(tmp_path):
    _touch(tmp_path / "Videos" / "a" / "Subject_1_Story_1.mp4")
    _touch(tmp_path / "videos" / "SUBJECT_2_STORY_5.MKV")
    _touch(tmp_path / "Annotations" / "Subject_1_Story_1.csv", "valence\n0.1\n")
    _touch(tmp_path / "Annotations" / "Subject_2_Story_5.csv", "valence\n0.1\n")
    _touch(tmp_path / "Observer_Listener" / "Subject_1_Story_1.csv", "valence\n0.2\n")
    _touch(tmp_path / "Transcripts" / "transcribed_subject_1_story_1.srt", "1\n")
    r = scan(tmp_path)
    by = r.by_session()
    assert sorted(by) == ["Subject_1_Story_1", "Subject_2_Story_5"]
    s = by["Subject_1_Story_1"]
    assert (s.speaker, s.split) == (1, "val")
    assert set(s.annotations) == {"valence_self", "valence_observer_listener"}
    assert s.transcript == tmp_path / "Transcripts" / "transcribed_subject_1_story_1.srt"
    t = by["Subject_2_Story_5"]
    assert (t.speaker, t.split, t.video.suffix) == (3, "train", ".MKV")
    assert r.issues == []


def test_scan_names_duplicates_unmatched_unparsable(tmp_path):
    _touch(tmp_path / "Subject_1_Story_1.mp4")
    _touch(tmp_path / "copy" / "Subject_1_Story_1.avi")
    _touch(tmp_path / "Subject_1_Story_1.csv", "valence\n0\n")
    _touch(tmp_path / "Subject_3_Story_2.csv", "valence\n0\n")  # no video
    _touch(tmp_path / "Subject_4_Story_4.mov")  # no annotation: a blind test's, no issue
    _touch(tmp_path / "interview.mp4")  # unparsable name
    _touch(tmp_path / "Subject_1_Story_9.mp4")  # unknown story
    _touch(tmp_path / "Subject_5_Story_1.csv", "arousal\n0\n")  # wrong header
    r = scan(tmp_path)
    kinds = {(i.kind, i.path.name) for i in r.issues}
    assert ("duplicate", "Subject_1_Story_1.mp4") in kinds or (
        "duplicate",
        "Subject_1_Story_1.avi",
    ) in kinds
    assert ("unmatched", "Subject_3_Story_2.csv") in kinds
    assert not any(name == "Subject_4_Story_4.mov" for _, name in kinds)
    assert ("unparsable", "interview.mp4") in kinds
    assert ("unparsable", "Subject_1_Story_9.mp4") in kinds
    assert ("unparsable", "Subject_5_Story_1.csv") in kinds
    assert "Subject_1_Story_1" in r.duplicates()


def test_mapping_and_split_overridable(tmp_path):
    _touch(tmp_path / "Subject_1_Story_9.mp4")
    r = scan(tmp_path, story_speaker={9: 5}, splits={"train": [9]})
    assert r.sessions[0].speaker == 5 and r.sessions[0].split == "train"
    assert story_split(3) == "test" and story_split(42) == "unassigned"


def test_annotation_target_from_path(tmp_path):
    assert (
        annotation_target(tmp_path / "Annotations/Subject_1_Story_1.csv", tmp_path)
        == "valence_self"
    )
    assert (
        annotation_target(tmp_path / "Observer/Listener/Subject_1_Story_1.csv", tmp_path)
        == "valence_observer_listener"
    )
    assert (
        annotation_target(tmp_path / "observer_speaker/Subject_1_Story_1.csv", tmp_path)
        == "valence_observer_speaker"
    )


def test_missing_folder_and_manifest_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        scan(tmp_path / "nope")
    _touch(tmp_path / "d" / "Subject_1_Story_2.mp4")
    out = write_manifest(scan(tmp_path / "d"), tmp_path / "store" / "manifest.json")
    data = json.loads(out.read_text())
    assert [s["session"] for s in data["sessions"]] == ["Subject_1_Story_2"]
    assert data["sessions"][0]["video"] == str(tmp_path / "d" / "Subject_1_Story_2.mp4")


def test_scan_keeps_the_first_file_of_each_kind_and_names_the_others(tmp_path):
    """Per session, in path order: the first video, annotation of each target and transcript are
    used; each further one is a duplicate naming the first."""
    first_video = _touch(tmp_path / "a" / "Subject_2_Story_2.mp4")
    second_video = _touch(tmp_path / "b" / "Subject_2_Story_2.mp4")
    first_csv = _touch(tmp_path / "a" / "Subject_2_Story_2.csv", "valence\n0\n")
    second_csv = _touch(tmp_path / "b" / "Subject_2_Story_2.csv", "valence\n1\n")
    first_srt = _touch(tmp_path / "a" / "Subject_2_Story_2.srt")
    second_srt = _touch(tmp_path / "c" / "Subject_2_Story_2.srt")
    _touch(tmp_path / "a" / "Subject_2_Story_2.tsv")  # not a kind scan knows: ignored
    r = scan(tmp_path)
    (sf,) = r.sessions
    assert (sf.video, sf.annotations, sf.transcript) == (
        first_video,
        {"valence_self": first_csv},
        first_srt,
    )
    assert [(i.path, i.kind, i.reason) for i in r.issues] == [
        (
            second_video,
            "duplicate",
            f"second video for Subject_2_Story_2 (first: {first_video}); keep one",
        ),
        (
            second_csv,
            "duplicate",
            f"second valence_self annotation for Subject_2_Story_2 (first: {first_csv}); keep one",
        ),
        (
            second_srt,
            "duplicate",
            f"second transcript for Subject_2_Story_2 (first: {first_srt}); keep one",
        ),
    ]
