"""The metric registry: ccc's NaN rules, a metric's direction; the built-in Pearson's r, RMSE and
MAE against their textbook formulas (SciPy's and scikit-learn's), at every circular lag too;
Pearson's r going everywhere CCC goes (logged with intervals and chance levels, summarised,
drawn, the ablation's tables, comparisons and report named after it); and metrics registered
from this module alone (no file of the package touched): one a sweep and a search score and
choose by, and one whose spec says intervals and chance levels do not apply, which gets none,
the reports saying so."""

from __future__ import annotations

import numpy as np
import optuna
import pandas as pd
import pytest
from mlflow import MlflowClient
from PIL import Image

from experiments.config.loading import from_dict
from experiments.config.metrics import (
    MetricSpec,
    ccc,
    get_metric,
    register_metric,
    unregister_metric,
)
from experiments.config.reference import metric_table
from experiments.evaluation.scores import score_metrics
from experiments.studies.ablation import ablate, columns
from experiments.studies.ablation_report import ablation_markdown
from experiments.studies.search import run_search
from experiments.studies.sweep import SweepOptions, run_sweep
from experiments.tracking.summary import summary_markdown
from experiments.tracking.tracker import resolve_tracking_uri
from featurestore.errors import ConfigError
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


def _series(seed: int, n: int = 257) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.normal(size=n)) * 0.05
    return t, 0.6 * t + rng.normal(0.1, 0.2, size=n)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pearson_rmse_and_mae_are_the_textbook_formulas(seed):
    from scipy.stats import pearsonr
    from sklearn.metrics import mean_absolute_error, mean_squared_error

    t, p = _series(seed)
    assert get_metric("pearson")(t, p) == pytest.approx(pearsonr(t, p)[0], abs=1e-12)
    assert get_metric("rmse")(t, p) == pytest.approx(np.sqrt(mean_squared_error(t, p)), abs=1e-12)
    assert get_metric("mae")(t, p) == pytest.approx(mean_absolute_error(t, p), abs=1e-12)
    assert get_metric("pearson")(t, np.full_like(t, 0.3)) == 0.0  # as CCC's r, not NaN
    for name, better in (("pearson", True), ("rmse", False), ("mae", False)):
        assert get_metric(name).higher_is_better is better
    assert get_metric("pearson").bounds == (-1.0, 1.0) and get_metric("rmse").bounds is None


@pytest.mark.parametrize("name", ["ccc", "pearson", "rmse"])
def test_a_metric_at_every_lag_by_fft_equals_it_at_each_lag(name):
    m = get_metric(name)
    t, p = _series(3, n=101)
    constant = np.full_like(t, 0.2)
    got = m.shifted(t, [p, constant])
    for k in range(len(t)):
        assert got[0][k] == pytest.approx(m(t, np.roll(p, k)), abs=1e-10), k
        assert got[1][k] == pytest.approx(m(t, constant), abs=1e-10), k
    flat = m.shifted(np.full_like(t, 0.5), [p])[0]  # a constant truth
    assert flat == pytest.approx([m(np.full_like(t, 0.5), np.roll(p, k)) for k in range(len(t))])


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
        assert row.selection_mae_test == candidates[row.selection_metric].min()
        assert row.selection_mae_test < candidates[row.selection_metric].max()


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


#: a metric whose spec states that intervals and a chance level do not apply to it
NO_CI = MetricSpec(
    "mse_no_ci",
    lambda t, p: float(np.mean((t - p) ** 2)),
    higher_is_better=False,
    intervals=False,
    chance=False,
)


@pytest.fixture
def no_ci():
    register_metric(NO_CI)
    yield NO_CI
    unregister_metric(NO_CI.name)


def _png(path) -> None:
    with Image.open(path) as im:
        assert im.format == "PNG" and im.size[0] > 100 and im.size[1] > 100


@pytest.mark.integration
def test_pearson_goes_everywhere_ccc_goes(planted_store, tracking_dir, tmp_path):
    cfg = from_dict(
        config_dict(
            tracking_dir,
            "pearson-everywhere",
            metric="pearson",
            models=[{"name": "ridge", "alpha": [10]}],
            personalization=["global", "per_listener"],
            postprocess={"smooth_s": [0], "rescale": ["none"]},
            importance={"levels": ["channel"], "repeats": 2},
        )
    )
    out = tmp_path / "reports"
    df, sweep = ablate(cfg, store=planted_store, out_dir=out, options=SweepOptions(progress=False))
    t = sweep.table
    assert sweep.selection_metrics == {
        "personalized": "val.pearson_personalized",
        "generalized": "val.pearson_generalized",
    }
    assert not [c for c in t.columns if "ccc" in c.lower()]  # nothing logged under CCC's name
    done = t[t["model.name"] == "ridge"]
    for track in ("personalized", "generalized"):
        name = f"test.pearson_{track}"
        low, high = done[f"{name}.ci_low"], done[f"{name}.ci_high"]
        # intervals over listeners, clipped to the spec's bounds, around the mean
        assert ((-1 <= low) & (low <= done[name]) & (done[name] <= high) & (high <= 1)).all()
        chance = done[f"{name}.chance_q95"]
        assert chance.notna().all() and (chance.abs() < 0.9).all()
    # the listener's features predict the planted listener ratings: above chance
    best = t.set_index("run_id").loc[sweep.best_run_ids["generalized"]]
    assert best["test.pearson_generalized"] > best["test.pearson_generalized.chance_q95"]

    client = MlflowClient(resolve_tracking_uri(tracking_dir))
    child = sweep.best_run_ids["personalized"]
    assert {"pearson_matrix.csv", "plots"} <= {a.path for a in client.list_artifacts(child)}
    plots = {a.path for a in client.list_artifacts(child, "plots")}
    assert "plots/pearson_per_listener.png" in plots
    _png(client.download_artifacts(child, "plots/pearson_per_listener.png", str(tmp_path)))
    tracks = pd.read_csv(
        client.download_artifacts(sweep.parent_run_id, "tracks.csv", str(tmp_path))
    )
    assert {
        "pearson_averaging",
        "test.pearson_generalized.ci_low",
        "test.pearson_generalized.chance_q95",
    } <= set(tracks.columns)
    summary = client.download_artifacts(sweep.parent_run_id, "summary.md", str(tmp_path))
    with open(summary) as f:
        md = f.read()
    assert "Pearson's r averaging" in md and "| split | Pearson's r |" in md and "CCC" not in md

    csv = pd.read_csv(out / "ablation.csv")
    assert list(csv.columns) == columns(get_metric("pearson"))
    assert list(csv.columns[2:4]) == ["pearson_personalized", "pearson_generalized"]
    test = csv[csv.split == "test"]
    assert (
        test.pearson_personalized_ci_low.notna().all()
        and test.chance_personalized_q95.notna().all()
    )
    pairs = pd.read_csv(out / "ablation_comparisons.csv")
    assert len(pairs) and pairs.p_holm.notna().all() and pairs.ci_low.notna().all()
    assert ((pairs.ci_low >= -2) & (pairs.ci_high <= 2)).all()  # a difference of two r
    report = (out / "ablation.md").read_text()
    assert "Pearson's r of each track's best configuration" in report
    assert "The paper reports no `pearson`" in report and "CCC" not in report
    _png(out / "ablation.png")
    # permutation importance of the chosen listener configuration: the drop in r, with its interval
    imp = pd.read_csv(out / "importance_listener_generalized.csv")
    assert {"pearson", "pearson_permuted"} <= set(imp.columns) and "ccc" not in imp.columns
    top = imp.iloc[0]
    assert top.importance > 0 and top.ci_low <= top.importance <= top.ci_high
    assert top.pearson_permuted == pytest.approx(top.pearson - top.importance)
    _png(out / "pearson_per_session_listener_generalized.png")


def test_a_metric_without_intervals_or_chance_logs_none_and_the_reports_say_so(no_ci):
    rng = np.random.default_rng(0)
    rows = [(f"s{L}_{s}", L, s, "test") for L in (1, 2, 3, 4) for s in (1, 2)]
    scores = pd.DataFrame(rows, columns=["session", "listener", "story", "split"])
    truth = {sid: rng.normal(size=400).cumsum() for sid in scores.session}
    preds = {sid: y + rng.normal(size=400) for sid, y in truth.items()}
    scores[NO_CI.name] = [NO_CI(truth[s], preds[s]) for s in scores.session]
    logged = score_metrics(scores, preds, truth, metric=NO_CI.name)
    assert "test.mse_no_ci_generalized" in logged
    assert not [k for k in logged if ".ci_" in k or ".chance" in k]
    row = {
        "track": "generalized",
        "run_id": "r",
        "label": "x",
        "chosen_on": "test.mse_no_ci_generalized",
        "mse_no_ci_averaging": "sessions",
        "test.mse_no_ci_generalized": 0.3,
    }
    md = summary_markdown(pd.DataFrame([row]))
    assert "metric `mse_no_ci` has no 95 % intervals" in md and "has no chance level" in md
    cells = {c: np.nan for c in columns(NO_CI)} | {"feature_set": "x", "split": "test"}
    table = pd.DataFrame([cells | {"run_id_personalized": "", "run_id_generalized": ""}])
    report = ablation_markdown(table, metric=NO_CI.name, reference=False)
    assert "metric `mse_no_ci` has no 95 % intervals" in report and "**chance**" not in report
