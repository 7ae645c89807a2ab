"""The metric registry: ccc's NaN rules, a metric's direction, and a metric registered from this
module alone (no file of the package touched) that a sweep and a search score and choose by."""

from __future__ import annotations

import numpy as np
import optuna
import pytest

from experiments.config.loading import from_dict
from experiments.config.metrics import (
    MetricSpec,
    ccc,
    get_metric,
    register_metric,
    unregister_metric,
)
from experiments.config.reference import metric_table
from experiments.studies.search import run_search
from experiments.studies.sweep import SweepOptions, run_sweep
from featurestore.overrides import ConfigError
from tests.experiments.helpers import config_dict


def _mae(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    return float(np.mean(np.abs(y_true - y_pred)))


MAE = MetricSpec(
    "mae_test", _mae, "mean absolute error (a test's own metric)", higher_is_better=False
)


@pytest.fixture
def mae():
    register_metric(MAE)
    yield MAE
    unregister_metric(MAE.name)


def test_ccc_says_what_it_does_with_nan():
    with pytest.raises(ValueError, match="prediction has 1 NaN/inf values"):
        ccc([0.1, 0.2, 0.3], [0.1, np.nan, 0.3])
    assert ccc([0.1, 0.2, np.inf, 0.3], [0.1, 0.2, 0.0, 0.3], nan="drop") == 1.0
    assert np.isnan(ccc([0.1, np.nan], [0.1, 0.2], nan="drop"))  # one pair left
    with pytest.raises(ValueError, match="unknown NaN rule 'keep'"):
        ccc([0.1, 0.2], [0.1, 0.2], nan="keep")


def test_a_metric_s_direction_chooses():
    c = get_metric("ccc")
    assert c.direction == "maximize" and c.best_index([0.1, np.nan, 0.3, 0.3]) == 2
    assert c.better(0.2, np.nan) and not c.better(np.nan, 0.2) and not c.better(0.2, 0.2)
    assert MAE.direction == "minimize" and MAE.best_index([0.3, 0.1, np.nan, 0.1]) == 1
    assert MAE.better(0.1, 0.2) and MAE.key("val", "generalized") == "val.mae_test_generalized"
    with pytest.raises(ValueError, match="all 2 are NaN"):
        MAE.best_index([np.nan, np.nan])


def test_the_config_names_a_registered_metric(mae):
    cfg = from_dict({"metric": "mae_test"})
    assert cfg.metric == "mae_test" and cfg.to_dict()["metric"] == "mae_test"
    assert "| `mae_test` | lower | `raise` | `sessions` |" in metric_table()
    with pytest.raises(
        ConfigError, match="metric: 'mae_tset' is not one of .*did you mean 'mae_test'"
    ):
        from_dict({"metric": "mae_tset"})


@pytest.mark.integration
def test_a_sweep_scores_and_chooses_by_the_registered_metric(mae, planted_store, tracking_dir):
    """Every run logs the metric's names, no CCC; each held-out listener's nested choice is the
    configuration with the lowest error on the other listeners."""
    d = config_dict(tracking_dir, "registered-metric", metric="mae_test")
    d["unseen_listener"] = {"selection": "nested"}
    res = run_sweep(
        from_dict(d), store=planted_store, options=SweepOptions(progress=False, log_artifacts=False)
    )
    assert res.n_failed == 0
    assert res.selection_metrics == {
        "personalized": "val.mae_test_personalized",
        "generalized": "val.mae_test_generalized",
    }
    t = res.table
    assert "val.mae_test_generalized" in t and not any(c.startswith("val.ccc") for c in t)
    assert (t["val.mae_test_generalized"] >= 0).all()
    # each track's best run is the one with the lowest validation error, not a CCC's choice
    assert set(res.best_run_ids) == {"personalized", "generalized"}
    for track, run_id in res.best_run_ids.items():
        col = f"val.mae_test_{track}"
        assert t.loc[t["run_id"] == run_id, col].item() == t[col].min() < t[col].max()
    assert len(res.nested_unseen) == 3
    for row in res.nested_unseen.itertuples():
        candidates = t[t[row.selection_metric].notna()]
        assert row.selection_ccc == candidates[row.selection_metric].min()
        assert row.selection_ccc < candidates[row.selection_metric].max()


@pytest.mark.integration
def test_a_search_minimises_a_metric_whose_lower_is_better(mae, planted_store, tracking_dir):
    d = config_dict(
        tracking_dir,
        "registered-metric-search",
        metric="mae_test",
        feature_set=["listener"],
        search={"method": "optuna", "n_trials": 4, "startup_trials": 2, "track": "generalized"},
        models=[{"name": "ridge", "alpha": {"low": 0.1, "high": 1000, "log": True}}],
    )
    res = run_search(
        from_dict(d), store=planted_store, options=SweepOptions(progress=False, log_artifacts=False)
    )
    study = optuna.load_study(study_name=res.study_name, storage=res.storage)
    assert study.direction == optuna.study.StudyDirection.MINIMIZE
    values = [t.value for t in study.trials]
    assert study.best_value == min(values) < max(values)
    rows = res.table.set_index("run_id")
    for trial in study.trials:
        assert trial.value == rows.at[trial.user_attrs["mlflow_run_id"], "val.mae_test_generalized"]
