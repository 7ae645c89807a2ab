"""Ridge from sufficient statistics: the same fits and predictions as scikit-learn's pipeline."""

from __future__ import annotations

import numpy as np
import pytest

from experiments.evaluation.metrics import ccc
from experiments.models import ridge_stats
from experiments.models.factory import make_model
from experiments.models.ridge_stats import SufficientStats

#: the largest difference allowed between the CCC of the closed form and the pipeline's
CCC_TOLERANCE = 1e-8


def _sessions(rng: np.random.Generator) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Six sessions of 7 columns: an offset one (mean 1000, std 3), a tiny one, a constant one,
    one NaN in the first three sessions only, NaN scattered everywhere else."""
    rows = {}
    for i in range(6):
        X = rng.normal(size=(150, 7)) * [1, 3, 1e-3, 1, 1, 2, 1] + [0, 1000, 0, 0, 5, 0, -2]
        y = X[:, 0] - 0.1 * X[:, 1] + rng.normal(size=150)
        X[:, 3] = 2.5  # constant everywhere
        X[rng.random(X.shape) < 0.1] = np.nan
        if i < 3:
            X[:, 4] = np.nan  # all NaN in these sessions: 0 in a fit on them alone
        rows[f"s{i}"] = (X.astype(np.float32), y)
    return rows


@pytest.mark.parametrize("alpha", [1e-3, 10.0, 1e4])
def test_sufficient_statistics_give_the_pipelines_predictions(alpha, monkeypatch):
    monkeypatch.setattr(ridge_stats, "PREDICT_ROWS", 64)  # several row blocks per session
    monkeypatch.setattr(ridge_stats, "RANK_COLUMNS", 3)  # the columns ranked in several chunks
    rows = _sessions(np.random.default_rng(3))
    stats = SufficientStats(rows)
    assert stats.nan_columns.tolist() == list(range(7))
    for subset in (["s0", "s1", "s2"], ["s3", "s4", "s5"], ["s1", "s4"], sorted(rows)):
        X = np.concatenate([rows[s][0] for s in subset]).astype(np.float64)
        y = np.concatenate([rows[s][1] for s in subset])
        pipe = make_model("ridge", {"alpha": alpha}).fit(X, y)
        fit = stats.fit(subset, alpha)
        np.testing.assert_array_equal(fit.fill, pipe.named_steps["impute"].statistics_)
        assert fit.n_rows == len(y) == stats.n_rows(subset)
        for sid, (F, labels) in rows.items():
            want = pipe.predict(F.astype(np.float64))
            got = stats.predict(F, [fit, fit])
            np.testing.assert_allclose(got[:, 0], want, rtol=0, atol=1e-9 * np.ptp(want))
            np.testing.assert_array_equal(got[:, 0], got[:, 1])
            assert abs(ccc(labels, got[:, 0]) - ccc(labels, want)) < CCC_TOLERANCE, (subset, sid)


def test_sufficient_statistics_refuse_what_they_cannot_fold():
    rows = _sessions(np.random.default_rng(4))
    with pytest.raises(ValueError, match="alpha must be > 0"):
        SufficientStats(rows).fit(["s0"], 0.0)
    bad = dict(rows, s0=(np.where(np.isnan(rows["s0"][0]), np.inf, rows["s0"][0]), rows["s0"][1]))
    with pytest.raises(ValueError, match="infinite"):
        SufficientStats(bad)
    clean = {sid: (np.nan_to_num(F, nan=0.0), y) for sid, (F, y) in rows.items()}
    stats = SufficientStats(clean)
    assert len(stats.nan_columns) == 0
    with pytest.raises(ValueError, match=r"no fill value.*extra_nan"):
        stats.predict(rows["s0"][0], [stats.fit(["s1"], 1.0)])


def test_row_order_is_the_stable_argsort():
    """The packed-key sort gives ``np.argsort(kind="stable")``'s indices exactly: ties (many of
    them, -0.0 against 0.0, repeated NaN and infinities) in index order; float64 falls back."""
    rng = np.random.default_rng(5)
    v = np.round(rng.normal(size=(4, 3000)), 1).astype(np.float32)  # about 60 distinct values
    v[:, ::7] = -0.0
    v[:, ::11] = 0.0
    v[rng.random(v.shape) < 0.1] = np.nan
    v[1, ::13] = np.inf
    v[2, ::17] = -np.inf
    v[3, :5] = -np.nan  # a NaN with the sign bit set sorts last too
    want = np.argsort(v, axis=1, kind="stable")
    np.testing.assert_array_equal(ridge_stats.stable_row_order(v), want)
    np.testing.assert_array_equal(ridge_stats.stable_row_order(v.astype(np.float64)), want)
    assert ridge_stats.stable_row_order(np.empty((2, 0), np.float32)).shape == (2, 0)


def test_columns_missing_together_give_the_pipelines_fit():
    """A channel lost on the same frames (no face: every face column NaN at once), beside
    columns with their own NaN and without any: the NaN patterns shared by several columns
    over every session are summed once per session, and the fit is still the pipeline's. A
    column missing with the channel in one session but not in the others keeps its own
    pattern; the rows are read through a strided view, as the fit groups pass them."""
    rng = np.random.default_rng(6)
    rows = {}
    for i in range(4):
        X = rng.normal(size=(400, 6)) + [0, 1, 2, 3, 4, 5]
        X[rng.random(400) < 0.2, :4] = np.nan  # columns 0-3 missing together
        if i == 0:
            X[:, 4] = X[:, 0]  # column 4 lost with the channel in this session only
        else:
            X[rng.random(400) < 0.1, 4] = np.nan  # column 4 on its own; column 5 complete
        y = X[:, 5] + rng.normal(size=400)
        rows[f"s{i}"] = (X.astype(np.float32)[::2], y[::2])
    stats = SufficientStats(rows)
    assert stats.nan_columns.tolist() == [0, 1, 2, 3, 4]
    for block in stats._blocks.values():  # columns 0-3: one pattern; column 4: its own
        assert block.xm.shape == (6, 2) and block.mm.shape == (2, 2)
    for subset in (["s0"], ["s1", "s2", "s3"], ["s0", "s3"], sorted(rows)):
        X = np.concatenate([rows[s][0] for s in subset]).astype(np.float64)
        y = np.concatenate([rows[s][1] for s in subset])
        want = make_model("ridge", {"alpha": 10.0}).fit(X, y).predict(X)
        got = stats.predict(np.concatenate([rows[s][0] for s in subset]), [stats.fit(subset, 10.0)])
        np.testing.assert_allclose(got[:, 0], want, rtol=0, atol=1e-9 * np.ptp(want))
