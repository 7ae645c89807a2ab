"""The model registry: a model's spec checks its hyperparameters, and a model registered from
this module alone (no file of the package touched) loads, is documented and is swept."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from experiments.config.loading import expand, from_dict, load_config
from experiments.config.models import (
    Domain,
    Hyper,
    ModelSpec,
    model_spec,
    register_model,
    unregister_model,
)
from experiments.config.reference import model_table
from experiments.engine.forked import split_into_parts
from experiments.evaluation.evaluate import evaluate_trials, fit_groups, window_sessions
from experiments.evaluation.fitting import closed_form_parts, fit_parts
from experiments.models.factory import make_model
from experiments.studies.sweep import SweepOptions, run_sweep
from featurestore.errors import ConfigError
from tests.experiments.helpers import config_dict, trials_for


def _knn(params: dict, seed: int):
    from sklearn.neighbors import KNeighborsRegressor  # scikit-learn, as a builder imports it

    return KNeighborsRegressor(n_neighbors=params["n_neighbors"], weights=params["weights"])


KNN = ModelSpec(
    "knn_test",
    "scikit-learn `KNeighborsRegressor` (a test's own model)",
    _knn,
    {
        "n_neighbors": Hyper(5, Domain(low=1, integer=True)),
        "weights": Hyper("uniform", Domain(numbers=False, names=("uniform", "distance"))),
    },
    preprocess="impute_scale",
    slow=True,
)


@pytest.fixture
def knn():
    register_model(KNN)
    yield KNN
    unregister_model(KNN.name)


def test_domains_say_what_they_take():
    gamma = model_spec("svr").params["gamma"].domain
    assert gamma.admits("auto") and gamma.admits(0.5) and not gamma.admits(0)
    assert not gamma.admits("sclae") and not gamma.admits(True)
    depth = model_spec("hist_gb").params["max_depth"].domain
    assert depth.admits(None) and depth.admits(3) and not depth.admits(2.5)
    assert depth.text() == "an integer >= 1 or null"
    assert Domain(low=0, high=1, above=True).text() == "a number > 0 and <= 1"
    with pytest.raises(ValueError, match=r"xgboost.subsample: expected a number > 0 and <= 1"):
        make_model("xgboost", {"subsample": 1.5})
    with pytest.raises(ValueError, match="unknown model input 'rowz'"):
        ModelSpec("bad", "", _knn, inputs="rowz")


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ("{name: ridge, alpha: -10}", "models[0].alpha: expected a number >= 0, got -10"),
        ('{name: ridge, alpha: "ten"}', "models[0].alpha: expected a number >= 0, got 'ten'"),
        ("{name: ridge, alpha: [1, .nan]}", "models[0].alpha: expected a number >= 0, got nan"),
        ("{name: svr, C: .inf}", "models[0].C: expected a number > 0, got inf"),
        # a float where an integer is due passed, and the estimator refused it when fitted
        (
            "{name: random_forest, n_estimators: 300.0}",
            "models[0].n_estimators: expected an integer >= 1, got 300.0",
        ),
    ],
)
def test_hyperparameters_outside_their_domain_are_refused_at_load(tmp_path, entry, expected):
    path = tmp_path / "exp.yaml"
    path.write_text(f"feature_sets: {{f: [listener/face_geom]}}\nmodels:\n  - {entry}\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == f"{path}:3: {expected}"


def test_a_search_range_of_an_integer_hyperparameter_needs_int_and_other_numbers_are_finite():
    with pytest.raises(
        ConfigError, match=r"n_estimators: an integer hyperparameter: add `int: true`"
    ):
        load_config("search", ["models=[{name: xgboost, n_estimators: {low: 10, high: 100}}]"])
    rng = "models=[{name: xgboost, n_estimators: {low: 10, high: 100, int: true}}]"
    assert load_config("search", [rng]).models[0].params["n_estimators"].int
    gold = "gold_standard={method: mean, align_lags: true, max_lag_s: .inf}"
    with pytest.raises(
        ConfigError, match=r"gold_standard.max_lag_s: expected seconds >= 0, got inf"
    ):
        load_config("smoke", [gold])
    fusion = "fusion={method: late, members: [speaker, listener], alpha: .inf}"
    with pytest.raises(ConfigError, match=r"fusion.alpha: expected a number >= 0 .*, got inf"):
        load_config("ablation", [fusion])


def test_a_config_is_checked_against_the_registered_models(knn):
    entry = {"name": "knn_test", "n_neighbors": [3, 0], "weights": ["distance"]}
    with pytest.raises(
        ConfigError, match=r"models\[0\].n_neighbors: expected an integer >= 1, got 0"
    ):
        from_dict({"models": [entry]})
    cfg = from_dict({"models": [{**entry, "n_neighbors": [3]}]})
    assert cfg.models[0].params == {"n_neighbors": [3], "weights": ["distance"]}
    unregister_model("knn_test")
    with pytest.raises(ConfigError, match="unknown model 'knn_test'"):
        from_dict({"models": [entry]})


def test_a_registered_model_is_in_the_docs_table(knn):
    table = model_table()
    assert (
        "| `knn_test` | scikit-learn `KNeighborsRegressor` (a test's own model) (slow) |" in table
    )
    assert "| | | `weights` | `uniform` | `uniform` or `distance` |" in table


def test_the_closed_form_is_a_property_of_the_spec(tables):
    """Another name with ridge's spec gets ridge's closed-form fits; ridge's own spec without
    a closed form is fitted by its pipeline, to the same predictions."""
    ridge = model_spec("ridge")
    [trial] = trials_for(
        feature_set=["listener"],
        personalization=["global"],
        models=[{"name": "ridge", "alpha": [10]}],
        postprocess={"smooth_s": [0], "rescale": ["none"]},
    )
    w = window_sessions(tables, trial.window_key())
    train = [s for s in w.sessions if s.split == "train"]
    evaluate = [s for s in w.sessions if s.split != "train"]
    parts = fit_parts(trial, train, evaluate, False, False)
    closed = closed_form_parts(trial, parts, train, evaluate, False)
    try:
        register_model(replace(ridge, name="ridge_twin"))
        twin = closed_form_parts(replace(trial, model="ridge_twin"), parts, train, evaluate, False)
        register_model(replace(ridge, closed_form=None))
        assert closed_form_parts(trial, parts, train, evaluate, False) == {}
        piped = evaluate_trials([trial], w)[0]
    finally:
        register_model(ridge)
        unregister_model("ridge_twin")
    assert set(closed) == set(twin) == set(parts)
    for part, result in closed.items():
        for sid, pred in result.predictions.items():
            np.testing.assert_array_equal(twin[part].predictions[sid], pred)
            np.testing.assert_allclose(pred, piped.predictions[sid], atol=1e-8)


@pytest.mark.integration
def test_a_registered_model_is_swept_end_to_end(knn, planted_store, tracking_dir):
    """The model of this module, slow (its fit groups split into their fits on two workers),
    swept with a baseline beside it: every run finishes and scores; resume reuses them."""
    d = config_dict(tracking_dir, "registered-model")
    d["models"] = [{"name": "knn_test", "n_neighbors": [7], "weights": ["distance"]}]
    cfg = from_dict(d)
    assert all(split_into_parts(g) for g in fit_groups(expand(cfg)) if g[0].model == "knn_test")
    res = run_sweep(
        cfg, store=planted_store, options=SweepOptions(jobs=2, progress=False, log_artifacts=False)
    )
    assert res.n_failed == 0
    knn_rows = res.table[res.table["model.name"] == "knn_test"]
    assert len(knn_rows) == 8 and (knn_rows.status == "done").all()
    assert (
        set(knn_rows["model.n_neighbors"]) == {"7"}
        and knn_rows["val.ccc_generalized"].notna().all()
    )
    assert (res.table["model.name"] == "dummy").sum() == 1  # the baseline every sweep carries
    again = run_sweep(
        cfg, store=planted_store, options=SweepOptions(jobs=2, progress=False, log_artifacts=False)
    )
    assert (again.table.status == "reused").all()
