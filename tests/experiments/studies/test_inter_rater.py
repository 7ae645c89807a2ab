"""`experiments agreement` names a rater stored empty (every frame missing) instead of showing
0 frames and blank ICCs in silence."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from experiments.studies.inter_rater import EmptyRaterWarning, inter_rater_table
from featurestore.storage.store import SessionMeta, Store

N = 200


def _store(tmp_path, r2_second: np.ndarray) -> Store:
    st = Store(tmp_path / "store", mode="a")
    t = np.arange(N) / 25.0
    for k, r2 in enumerate((np.sin(t) + 0.1, r2_second)):
        meta = SessionMeta(f"rec{k + 1}", 1, k + 1, 0, "train", N, layout="manifest")
        labels = {"valence@r1": np.sin(t).astype(np.float32), "valence@r2": r2.astype(np.float32)}
        st.write_session(meta, labels=labels)
    return st


def test_an_empty_rater_is_named_in_a_warning(tmp_path):
    st = _store(tmp_path, np.full(N, np.nan))  # r2's times missed rec2: stored all missing
    with pytest.warns(
        EmptyRaterWarning, match=r"1 rater trace\(s\) are empty .*valence@r2 in rec2"
    ):
        table, _ = inter_rater_table(st)
    rec2 = table[(table.session == "rec2") & ~table.aligned]
    assert rec2.n_frames.tolist() == [0]  # what used to be shown without a word


def test_no_warning_when_every_rater_rated(tmp_path):
    st = _store(tmp_path, np.cos(np.arange(N) / 25.0))
    with warnings.catch_warnings():
        warnings.simplefilter("error", EmptyRaterWarning)
        table, _ = inter_rater_table(st)
    assert (table.n_frames > 0).all()
