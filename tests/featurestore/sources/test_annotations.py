"""annotations: the official per-frame valence CSVs, read and checked."""

from __future__ import annotations

import numpy as np
import pytest

from featurestore.sources.annotations import AnnotationError, read_annotation
from tests.featurestore.sources.helpers import write_valence


def test_read_annotation_accepts_any_single_header(tmp_path):
    y = write_valence(tmp_path / "a.csv", 100, header="valence_self")
    np.testing.assert_allclose(read_annotation(tmp_path / "a.csv"), y, atol=1e-6)


@pytest.mark.parametrize(
    "body, match",
    [
        ("valence\n0.1\nabc\n0.2\n", r"line 3 is not a number"),
        ("valence\n0.1\n1.5\n", r"line 3 holds 1.5, outside"),
        ("valence\n0.1\nnan\n", r"line 3 holds nan"),
        ("valence,arousal\n0.1,0.2\n", "one column name"),
        ("0.1\n0.2\n", "not a column name"),
        ("valence\n", "no values"),
    ],
)
def test_read_annotation_errors_name_file_and_line(tmp_path, body, match):
    p = tmp_path / "Subject_1_Story_1.csv"
    p.write_text(body)
    with pytest.raises(AnnotationError, match=match) as e:
        read_annotation(p, value_range=(-1.0, 1.0))
    assert "Subject_1_Story_1.csv" in str(e.value)


def test_an_undeclared_scale_takes_any_finite_value(tmp_path):
    """No hidden [-1, 1]: 1-9, 0-100 or joystick units are read as rated."""
    p = tmp_path / "a.csv"
    p.write_text("valence\n1\n9\n87.5\n-300\n")
    np.testing.assert_allclose(read_annotation(p), [1, 9, 87.5, -300])
    with pytest.raises(
        AnnotationError, match=r"line 4 holds 87.5, outside the declared scale \[1, 9\]"
    ):
        read_annotation(p, value_range=(1.0, 9.0))
    p.write_text("valence\n1\ninf\n")
    with pytest.raises(AnnotationError, match="line 3 holds inf; give a finite number"):
        read_annotation(p)
