"""A manifest's whole-session ratings: rating_<target>[@<rater>] columns, YAML ratings, errors."""

from __future__ import annotations

import pytest

from featurestore.sources.manifest import SessionFiles, scan
from featurestore.sources.manifest_file import ManifestError, read_manifest


@pytest.fixture
def media(tmp_path):
    for name in ("a.mp4", "b.mp4"):
        (tmp_path / name).write_text("x")
    return tmp_path


def test_csv_rating_columns_with_and_without_raters(media):
    (media / "m.csv").write_text(
        "session,person,group,video_person,rating_liking,rating_empathy@obs1,rating_empathy@obs2\n"
        "s1,P1,g1,a.mp4,6,3,5\n"
        "s2,P2,g1,b.mp4,,4,\n"
    )
    a, b = read_manifest(media / "m.csv")
    assert a.ratings == {"liking": {"": 6.0}, "empathy": {"obs1": 3.0, "obs2": 5.0}}
    assert b.ratings == {"empathy": {"obs1": 4.0}}  # empty cells: no rating
    report = scan(None, manifest=media / "m.csv")
    sf = report.sessions[0]
    assert sf.ratings == a.ratings and sf.ratings_source == str(media / "m.csv")
    back = SessionFiles.from_record(sf.to_record())  # the scan JSON keeps them
    assert (back.ratings, back.ratings_source) == (sf.ratings, sf.ratings_source)


def test_yaml_ratings_mapping(media):
    (media / "m.yaml").write_text(
        "sessions:\n"
        "  - {session: s1, person: P1, group: g1, video_person: a.mp4,\n"
        "     ratings: {liking: 2.5, empathy: {obs1: 3, obs2: 4}}}\n"
    )
    (row,) = read_manifest(media / "m.yaml")
    assert row.ratings == {"liking": {"": 2.5}, "empathy": {"obs1": 3.0, "obs2": 4.0}}


def test_rating_errors_name_file_row_and_column(media):
    (media / "m.csv").write_text(
        "session,person,group,video_person,rating_empathy,rating_empathy@obs1,rating_bad name\n"
        "s1,P1,g1,a.mp4,high,,\n"
        "s2,P2,g1,b.mp4,3,4,\n"
    )
    with pytest.raises(ManifestError) as e:
        read_manifest(media / "m.csv")
    problems = e.value.problems
    m = str(media / "m.csv")
    assert f"{m}: row 1 (line 2), column 'rating_empathy': 'high' is not a number" in problems[1]
    assert any(
        p.startswith(f"{m}: row 2 (line 3), column 'rating_empathy': given beside per-rater")
        for p in problems
    )
    assert any("column 'rating_bad name': expected rating_<target>" in p for p in problems)


def test_yaml_ratings_that_are_not_a_mapping_are_reported(media):
    (media / "m.yaml").write_text(
        "- {session: s1, person: P1, group: g1, video_person: a.mp4, ratings: 3}\n"
    )
    with pytest.raises(ManifestError, match=r"column 'ratings': unknown column"):
        read_manifest(media / "m.yaml")
