"""tables: OpenFace, py-feat and generic per-frame tables read as features, with named errors."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from featurestore.extraction.tables import TableError, read_table
from tests.featurestore.extraction.helpers import (
    OPENFACE_GAZE,
    OPENFACE_LANDMARKS,
    OPENFACE_POSE,
    openface_measures,
    write_openface,
    write_pyfeat,
)

# ------------------------------------------------------------------ fixtures


# -------------------------------------------------------------------- reading
def test_openface_csv_with_leading_space_headers(tmp_path):
    p = tmp_path / "of.csv"
    r, c = write_openface(p)
    t = read_table(p)
    assert t.kind == "openface" and t.extractor == "import:openface"
    f = t.features
    aus = ["AU01_r", "AU02_r", "AU45_r", "AU01_c", "AU02_c", "AU45_c"]
    # what OpenFace measured is kept: AUs, head pose and gaze (landmarks on request)
    assert f.columns == aus + OPENFACE_POSE + OPENFACE_GAZE
    np.testing.assert_allclose(f.time, np.arange(30) / 25.0, atol=1e-9)
    assert not f.valid[3] and not f.valid[5] and f.valid.sum() == 28
    assert np.isnan(f.data[[3, 5]]).all()
    gaze, pose, _ = openface_measures(7)
    np.testing.assert_allclose(f.data[7], np.r_[r[7], c[7], pose, gaze], rtol=1e-6)
    assert t.params["min_confidence"] == 0.8 and t.params["groups"] == ["au", "pose", "gaze"]
    # a laxer threshold keeps the low-confidence frame
    assert read_table(p, min_confidence=0.2).features.valid[5]


def test_openface_all_nan_row_is_an_invalid_frame_but_partial_nan_is_an_error(tmp_path):
    p = tmp_path / "of.csv"
    write_openface(p, n=10)
    lines = p.read_text().splitlines()
    head = lines[0].split(", ")
    cells = lines[8].split(", ")
    for j, h in enumerate(head):
        if h.startswith(("AU", "pose_", "gaze_")):  # every kept measure
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
    # AUs, emotion probabilities and head pose kept; the text column 'input' and the landmarks not
    assert f.columns == ["AU01", "AU04", "anger", "happiness", "Pitch", "Roll", "Yaw"]
    assert t.params["groups"] == ["au", "emotion", "pose"]
    np.testing.assert_allclose(f.time, [0.0, 0.04, 0.08, 0.12])
    assert f.valid.tolist() == [True, True, False, True]
    # the 45x52 face, not the 10x12 one
    np.testing.assert_allclose(f.data[1], [0.3, 0.4, 0.2, 0.5, -3.0, 0.2, 12.0], rtol=1e-6)
    assert np.isnan(f.data[2]).all()


def test_column_groups_are_chosen_and_a_missing_one_is_named(tmp_path):
    p = tmp_path / "of.csv"
    r, c = write_openface(p)
    t = read_table(p, groups=["au", "landmarks"])
    assert t.features.columns == ["AU01_r", "AU02_r", "AU45_r", "AU01_c", "AU02_c", "AU45_c"] + (
        OPENFACE_LANDMARKS
    )
    np.testing.assert_allclose(t.features.data[7, 6:], openface_measures(7)[2], rtol=1e-6)
    assert read_table(p, groups=["gaze"]).features.columns == OPENFACE_GAZE
    with pytest.raises(TableError, match=r"of\.csv: column group 'landmarks_3d' asked for"):
        read_table(p, groups=["au", "landmarks_3d"])
    with pytest.raises(TableError, match=r"unknown column group\(s\) \['emotion'\] for a openface"):
        read_table(p, groups=["emotion"])
    pf = tmp_path / "pf.csv"
    write_pyfeat(pf)
    assert read_table(pf, groups=["pose", "landmarks"]).features.columns == [
        "Pitch",
        "Roll",
        "Yaw",
        "x_0",
    ]
    g = tmp_path / "g.csv"
    g.write_text("time,x\n0,1\n0.04,2\n")
    with pytest.raises(TableError, match="apply to OpenFace and py-feat tables"):
        read_table(g, groups=["au"])


def test_an_openface_table_without_aus_is_still_openface(tmp_path):
    p = tmp_path / "of.csv"
    write_openface(p, n=10)
    df = pd.read_csv(p, skipinitialspace=True)
    df = df[[c for c in df.columns if not c.startswith("AU")]]
    df.to_csv(p, index=False)
    t = read_table(p)
    assert t.kind == "openface" and t.params["groups"] == ["pose", "gaze"]


def test_generic_csv_with_frame_and_parquet_with_time(tmp_path):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(50, 2))
    pd.DataFrame({"frame": np.arange(0, 100, 2), "energy": x[:, 0], "pitch": x[:, 1]}).to_csv(
        tmp_path / "g.csv", index=False
    )
    t = read_table(tmp_path / "g.csv", fps=10.0)
    assert t.kind == "table" and t.features.columns == ["energy", "pitch"]
    np.testing.assert_allclose(t.features.time, np.arange(0, 100, 2) / 10.0)
    np.testing.assert_allclose(t.features.data, x, rtol=1e-6)
    assert t.features.valid.all()

    times = np.arange(40) * 0.01
    pd.DataFrame(
        {
            "time": times,
            "loud": x[:40, 0],
            "flag": np.arange(40) % 2 == 0,
            "valid": np.arange(40) != 7,
        }
    ).to_parquet(tmp_path / "g.parquet")
    q = read_table(tmp_path / "g.parquet")
    assert q.features.columns == ["loud", "flag"]
    np.testing.assert_allclose(q.features.time, times)
    assert (
        q.features.data[2, 1] == 1.0
        and not q.features.valid[7]
        and np.isnan(q.features.data[7]).all()
    )


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
