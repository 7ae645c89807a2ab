"""Per-rater label traces: manifest columns, time-based rating files, storage and readers."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest

from featurestore.sources.annotations import AnnotationError, TimedRating, read_label_file
from featurestore.sources.manifest_file import ManifestError, read_manifest
from featurestore.storage.store import SessionMeta, Store


def test_raters_round_trip(tmp_path):
    st = Store(tmp_path / "store", mode="a")
    meta = SessionMeta("s1", 1, 1, 0, "train", 4, layout="manifest")
    a = np.array([0.0, 0.2, np.nan, 0.4], np.float32)
    b = np.array([0.2, 0.4, 0.6, np.nan], np.float32)
    st.write_session(
        meta, {}, {"valence@r1": a, "valence@r2": b}, {"valence@r1": {"fingerprint": "x"}}
    )
    assert st.raters("s1", "valence") == ["r1", "r2"]
    np.testing.assert_array_equal(st.rater_labels("s1", "valence", "r2").to_numpy(), b)
    np.testing.assert_allclose(st.labels("s1", "valence").to_numpy(), [0.1, 0.3, 0.6, 0.4])
    with h5py.File(st.shard_path("s1")) as f:
        ds = f["labels/valence"]
        assert json.loads(ds.attrs["raters"]) == ["r1", "r2"]
        assert ds.attrs["gold_standard"] == "mean"
    with pytest.raises(Exception, match="r3.*raters: r1, r2"):
        st.rater_labels("s1", "valence", "r3")
    assert st.raters("s1", "arousal") == []


def test_timed_rating_resampled(tmp_path):
    p = tmp_path / "r.csv"
    p.write_text("time,valence\n0.04,0.0\n0.12,0.4\n")
    r = read_label_file(p)
    assert isinstance(r, TimedRating)
    y = r.on_frames(5, 25.0)  # frames at 0, .04, .08, .12, .16 s
    assert np.isnan(y[0]) and np.isnan(y[4])
    np.testing.assert_allclose(y[1:4], [0.0, 0.2, 0.4], atol=1e-6)


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("time,valence\n0,0.1\n0.5,abc\n", r"line 3, column 2 \('valence'\)"),
        ("time,valence\n0,0.1\nx,0.2\n", r"line 3, column 1 \('time'\)"),
        (
            "time,valence\n0,0.1\n0.5,3\n",
            r"line 3, column 2 .*outside the declared scale \[-1, 1\]",
        ),
        ("time,valence\n1,0.1\n0.5,0.2\n", r"line 3, column 1 .*increase"),
    ],
)
def test_bad_rater_file_names_file_line_column(tmp_path, text, where):
    p = tmp_path / "rater2.csv"
    p.write_text(text)
    with pytest.raises(AnnotationError, match=rf"rater2\.csv: {where}"):
        read_label_file(p, value_range=(-1.0, 1.0))


@pytest.mark.parametrize("header", ["tiem,value", "time,valence,arousal", "t,valence"])
def test_a_header_of_neither_format_quotes_both(tmp_path, header):
    """`tiem,value` used to get advice for the one-column format only, against the documented
    `time,<name>` one: the error now quotes both formats as docs/corpus.md gives them."""
    p = tmp_path / "r.csv"
    p.write_text(f"{header}\n0,1\n0.1,2\n")
    with pytest.raises(AnnotationError) as e:
        read_label_file(p)
    text = str(e.value)
    assert f"r.csv: header {header!r} is of neither format" in text
    assert "one value per 25 fps frame" in text and "'time,<name>'" in text
    if header == "tiem,value":
        assert "did you mean 'time,value'?" in text


def test_manifest_rater_columns(tmp_path):
    for n in ("v.mp4", "a.csv", "b.csv"):
        (tmp_path / n).write_text("x")
    (tmp_path / "m.csv").write_text(
        "session,person,group,video,label_valence@r1,label_valence@r2\ns1,p,g,v.mp4,a.csv,b.csv\n"
    )
    (row,) = read_manifest(tmp_path / "m.csv")
    assert row.labels == {"valence@r1": tmp_path / "a.csv", "valence@r2": tmp_path / "b.csv"}
    (tmp_path / "m.yaml").write_text(
        "- session: s1\n  person: p\n  group: g\n  video: v.mp4\n"
        "  labels: {valence: {r1: a.csv, r2: b.csv}, arousal: a.csv}\n"
    )
    (row,) = read_manifest(tmp_path / "m.yaml")
    assert set(row.labels) == {"valence@r1", "valence@r2", "arousal"}
    (tmp_path / "bad.csv").write_text(
        "session,person,group,video,label_valence,label_valence@r1\ns1,p,g,v.mp4,a.csv,b.csv\n"
    )
    with pytest.raises(ManifestError, match=r"row 1 \(line 2\), column 'label_valence@r1'"):
        read_manifest(tmp_path / "bad.csv")
