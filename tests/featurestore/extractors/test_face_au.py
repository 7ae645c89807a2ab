"""face_au: py-feat output -> Features, lazy import, and the 'unavailable' messages."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from featurestore.extractors.base import ExtractorUnavailable
from featurestore.extractors.face_au import (
    FaceAUConfig,
    FaceAUExtractor,
    _hub_offline,
    _load_detector,
    fex_to_features,
)

REPO = Path(__file__).resolve().parents[3]
NAN = float("nan")


def _feat_or_skip():
    """py-feat's top-level module, or skip (not installed, or torch/torchvision do not match)."""
    try:
        import feat
    except Exception as e:  # noqa: BLE001 - any import failure means "cannot run here"
        pytest.skip(f"py-feat not importable here ({type(e).__name__}: {str(e)[:120]})")
    return feat


def _frame_rows() -> pd.DataFrame:
    """py-feat-like rows: frame 0 two faces, frame 1 no face (placeholder), frame 3 one face."""
    return pd.DataFrame(
        {
            "FaceRectX": [5.0, 50.0, NAN, 8.0],
            "FaceRectY": [5.0, 40.0, NAN, 9.0],
            "FaceRectWidth": [20.0, 60.0, NAN, 30.0],
            "FaceRectHeight": [25.0, 70.0, NAN, 30.0],
            "FaceScore": [0.99, 0.97, 0.0, 0.9],
            "AU01": [0.1, 0.6, NAN, 0.3],
            "AU12": [0.2, 0.8, NAN, 0.4],
            "frame": [0, 0, 1, 3],
        }
    )


def test_fex_to_features_keeps_largest_face_and_marks_missing_frames():
    times = np.array([0.0, 0.2, 0.4, 0.6])
    f = fex_to_features(_frame_rows(), times)
    assert f.columns == ["AU01", "AU12"]
    np.testing.assert_array_equal(f.time, times)
    assert f.valid.tolist() == [True, False, False, True]  # frame 2 has no row at all
    np.testing.assert_allclose(f.data[0], [0.6, 0.8], rtol=1e-6)  # 60x70 beats 20x25
    np.testing.assert_allclose(f.data[3], [0.3, 0.4], rtol=1e-6)
    assert np.isnan(f.data[[1, 2]]).all()
    assert f.data.dtype == np.float32


def test_fex_to_features_matches_rows_by_frame_id_and_rejects_strangers():
    rows = _frame_rows()
    rows["frame"] = [10, 10, 15, 20]  # e.g. py-feat's video frame numbers
    f = fex_to_features(rows, times=[0.4, 0.6, 0.8], frames=[10, 15, 20])
    assert f.valid.tolist() == [True, False, True]
    with pytest.raises(ValueError, match="not among"):
        fex_to_features(rows, times=[0.4, 0.6], frames=[10, 15])


def test_fex_to_features_invalid_when_an_au_is_not_finite():
    rows = _frame_rows()
    rows.loc[3, "AU12"] = NAN
    f = fex_to_features(rows, times=[0.0, 0.2, 0.4, 0.6])
    assert f.valid.tolist() == [True, False, False, False]


def test_fex_to_features_needs_au_columns():
    with pytest.raises(ValueError, match="no AU columns"):
        fex_to_features(_frame_rows().drop(columns=["AU01", "AU12"]), times=[0.0])


def test_check_available_without_pyfeat_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "feat", None)  # makes `import feat` raise ImportError
    _load_detector.cache_clear()
    with pytest.raises(ExtractorUnavailable) as e:
        FaceAUExtractor().check_available()
    msg = str(e.value)
    assert "pyfeat" in msg and "pip install" in msg and "CPU" in msg
    with pytest.raises(ExtractorUnavailable):
        FaceAUExtractor().new_track("listener")


@pytest.mark.integration
def test_importing_the_backend_does_not_import_pyfeat():
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    code = (
        "import sys, os, featurestore.extractors.face_au as m; "
        "print('feat' in sys.modules, 'torch' in sys.modules, os.environ.get('OMP_NUM_THREADS'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False", "None"]


def test_hub_offline_is_set_inside_and_restored_after(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    with _hub_offline():
        assert os.environ["HF_HUB_OFFLINE"] == "1"
    assert "HF_HUB_OFFLINE" not in os.environ


def test_config_is_frozen_and_recorded():
    ex = FaceAUExtractor(FaceAUConfig(batch_size=4))
    assert ex.name == "face_au" and ex.version == "1"
    assert ex.params()["batch_size"] == 4 and ex.params()["detector"] == "Detectorv1"
    with pytest.raises(AttributeError):
        ex.config.batch_size = 2  # type: ignore[misc]


@pytest.mark.pyfeat
def test_real_fex_converts(tmp_path):
    feat = _feat_or_skip()
    from feat.pretrained import AU_LANDMARK_MAP
    from feat.utils import FEAT_FACEBOX_COLUMNS
    from feat.utils.io import read_feat

    au_cols = AU_LANDMARK_MAP["Feat"]
    rng = np.random.default_rng(0)
    rows = _frame_rows()[
        ["FaceRectX", "FaceRectY", "FaceRectWidth", "FaceRectHeight", "FaceScore", "frame"]
    ]
    aus = pd.DataFrame(rng.uniform(0, 1, (len(rows), len(au_cols))), columns=au_cols)
    aus.iloc[2] = NAN  # the no-face placeholder row
    df = pd.concat([rows.reset_index(drop=True), aus], axis=1)
    fex = feat.Fex(df, au_columns=au_cols, facebox_columns=FEAT_FACEBOX_COLUMNS, detector="Feat")
    f = fex_to_features(fex, times=[0.0, 0.2, 0.4, 0.6])
    assert f.columns == au_cols
    assert f.valid.tolist() == [True, False, False, True]
    np.testing.assert_allclose(f.data[0], aus.iloc[1].to_numpy(), rtol=1e-6)
    # the same through py-feat's own CSV round trip
    path = tmp_path / "fex.csv"
    fex.to_csv(path, index=False)
    g = fex_to_features(read_feat(str(path)), times=[0.0, 0.2, 0.4, 0.6])
    np.testing.assert_allclose(g.data, f.data, rtol=1e-6)


@pytest.mark.pyfeat
def test_check_available_with_pyfeat_loads_or_explains_weights():
    _feat_or_skip()
    _load_detector.cache_clear()
    try:
        FaceAUExtractor().check_available()
    except ExtractorUnavailable as e:
        msg = str(e)
        assert "weights" in msg and "get_resource_path" in msg, msg
