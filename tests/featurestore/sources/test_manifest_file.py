"""Corpus manifests (CSV and YAML): sessions, ids, media, labels, and errors naming file, row and column."""

from __future__ import annotations

import pytest

from featurestore.sources.manifest import SessionFiles, scan
from featurestore.sources.manifest_file import ManifestError, read_manifest


def _touch(path, text="x"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def files(tmp_path):
    for name in ("dyad1.mp4", "p1.mp4", "p2.wav", "dyad1_val.csv", "dyad1_aro.csv", "p1_val.csv"):
        _touch(tmp_path / "media" / name)
    return tmp_path


def test_csv_manifest_gives_sessions_with_ids_media_labels_split_and_fold(files):
    (files / "corpus.csv").write_text(
        "session,person,group,partner,split,fold,video,split_x,video_person,audio_partner,"
        "label_valence,label_arousal\n"
        "dyad1,P7,taskA,P9,train,1,media/dyad1.mp4,640,,,media/dyad1_val.csv,media/dyad1_aro.csv\n"
        "\n"
        "solo1,P9,taskB,,test,2,,,media/p1.mp4,,media/p1_val.csv,\n"
    )
    report = scan(None, manifest=files / "corpus.csv")
    assert report.issues == []
    a, b = report.sessions
    assert (a.session, a.layout, a.person, a.group, a.partner, a.fold) == (
        "dyad1",
        "manifest",
        "P7",
        "taskA",
        "P9",
        "1",
    )
    # people share one numbering (P7 -> 1, P9 -> 2), groups their own
    assert (a.listener, a.speaker, a.story, b.listener, b.speaker, b.story) == (1, 2, 1, 2, 0, 2)
    assert a.video == files / "media" / "dyad1.mp4" and a.split_x == 640
    assert a.annotations == {
        "valence": files / "media" / "dyad1_val.csv",
        "arousal": files / "media" / "dyad1_aro.csv",
    }
    assert (b.video, b.media, b.split) == (
        None,
        {"video_person": files / "media" / "p1.mp4"},
        "test",
    )
    # the record written by `featurestore scan` reads back to the same session
    assert SessionFiles.from_record(a.to_record()) == a


def test_yaml_manifest_with_a_labels_mapping_and_integer_ids(files):
    (files / "corpus.yaml").write_text(
        "sessions:\n"
        "  - {session: s1, person: 3, group: 12, video_person: media/p1.mp4,\n"
        "     audio_partner: media/p2.wav, partner: 4, labels: {valence: media/p1_val.csv}}\n"
        "  - session: s2\n"
        "    person: 4\n"
        "    group: 2\n"
        "    video: media/dyad1.mp4\n"
    )
    s1, s2 = scan(None, manifest=files / "corpus.yaml").sessions
    assert (s1.listener, s1.speaker, s1.story, s2.listener, s2.story) == (3, 4, 12, 4, 2)
    assert s1.annotations == {"valence": files / "media" / "p1_val.csv"}
    assert s1.media["audio_partner"] == files / "media" / "p2.wav"
    assert s2.split == "unassigned"


def test_every_error_names_file_row_line_and_column(files):
    path = files / "bad.csv"
    path.write_text(
        "session,person,group,vidoe,label_valence\n"  # a misspelt column
        "s1,P1,g1,media/dyad1.mp4,media/missing.csv\n"
        "s1,,g1,,\n"  # repeated id, empty person, no media
        "bad id,P2,g2,media/dyad1.mp4,\n"
    )
    with pytest.raises(ManifestError) as e:
        read_manifest(path)
    problems = e.value.problems
    assert (
        f"{path}: row 1 (line 2), column 'vidoe': unknown column; did you mean 'video'?" in problems
    )
    assert any(
        p.startswith(f"{path}: row 1 (line 2), column 'label_valence': no file ") for p in problems
    )
    assert (
        f"{path}: row 2 (line 3), column 'person': empty or missing; every session needs it"
        in problems
    )
    assert (
        f"{path}: row 2 (line 3), column 'session': 's1' repeats row 1; ids are unique" in problems
    )
    assert any(p.startswith(f"{path}: row 2 (line 3), column 'video': no media") for p in problems)
    assert any(
        p.startswith(f"{path}: row 3 (line 4), column 'session': 'bad id'") for p in problems
    )
    assert str(path) in str(e.value) and "row 3 (line 4)" in str(e.value)


def test_yaml_errors_name_the_line_and_a_shared_and_per_role_video_is_refused(files):
    path = files / "bad.yaml"
    path.write_text(
        "- session: s1\n"
        "  person: P1\n"
        "  group: g\n"
        "  video: media/dyad1.mp4\n"
        "  video_person: media/p1.mp4\n"
        "  split_x: left\n"
    )
    with pytest.raises(ManifestError) as e:
        read_manifest(path)
    assert e.value.problems == [
        f"{path}: row 1 (line 1), column 'split_x': 'left' is not a whole number of pixels",
        f"{path}: row 1 (line 1), column 'video_person': give one shared `video` or a video per "
        "role, not both",
    ]


def test_a_manifest_of_another_kind_or_missing_is_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match="check the --manifest path"):
        read_manifest(tmp_path / "none.csv")
    (tmp_path / "m.json").write_text("{}")
    with pytest.raises(ManifestError, match=r"a manifest is a \.csv or \.yaml file"):
        read_manifest(tmp_path / "m.json")


def test_the_readme_manifest_example_scans(tmp_path):
    """The README's "Your own corpus" manifest, with its files in place, gives its sessions; its
    third row (no media) is refused as the README says."""
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Your own corpus", 1)[1].split("\n## ", 1)[0]
    text = re.search(r"```csv\n(.*?)```", section, re.S).group(1)
    (tmp_path / "sessions.csv").write_text(text)
    for cell in re.findall(r"[\w/]+\.(?:mp4|csv)", text):
        _touch(tmp_path / cell, "valence\n0\n")
    with pytest.raises(ManifestError) as e:
        read_manifest(tmp_path / "sessions.csv")
    assert [p.split(": ", 1)[1] for p in e.value.problems] == [
        "row 3 (line 4), column 'video': no media; give one of video, video_person, "
        "video_partner, audio, audio_person, audio_partner"
    ]
    lines = text.splitlines()
    # the third row given a video of its one person: the manifest is usable
    fixed = lines[:3] + [
        "solo03,carl,interview,,test,,,ratings/solo03_valence.csv,,video/dyad01.mp4"
    ]
    (tmp_path / "sessions.csv").write_text(
        "\n".join([lines[0] + ",video_person", *[ln + "," for ln in fixed[1:3]], fixed[3]]) + "\n"
    )
    sessions = scan(None, manifest=tmp_path / "sessions.csv").sessions
    assert [(s.session, s.person, s.split, sorted(s.annotations)) for s in sessions] == [
        ("dyad01", "anna", "train", ["arousal", "valence"]),
        ("dyad02", "bo", "val", ["arousal", "valence"]),
        ("solo03", "carl", "test", ["valence"]),
    ]
    assert sessions[2].media == {"video_person": tmp_path / "video" / "dyad01.mp4"}
