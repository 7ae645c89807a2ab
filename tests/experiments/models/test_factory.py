"""experiments.models: every model fits with NaNs, learns a linear relation, rejects typos."""

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.metrics import r2_score
from sklearn.pipeline import Pipeline

from experiments.config.models import model_specs
from experiments.models.factory import make_model, resolve_model_params

MODEL_PARAMS = {name: spec.defaults for name, spec in model_specs().items()}

# small settings keep the whole file fast on 2 shared cores
FAST = {
    "svr": {"C": 3.0},
    "linear_svr": {"C": 1.0},
    "xgboost": {"n_estimators": 150, "max_depth": 3, "learning_rate": 0.1},
    "hist_gb": {"max_iter": 100},
    "random_forest": {"n_estimators": 20, "max_depth": 3},
    "ridge": {"alpha": 1.0},
    "dummy": {},
    "position_prior": {"n_bins": 10},
}


def linear_data(n: int, d: int = 4, seed: int = 0, noise: float = 0.1):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    w = np.array([1.0, -0.5, 0.25, 0.0][:d])
    return X, X @ w + noise * rng.normal(size=n)


def test_every_name_has_params():
    assert set(MODEL_PARAMS) == {
        "svr",
        "linear_svr",
        "xgboost",
        "hist_gb",
        "random_forest",
        "ridge",
        "dummy",
        "position_prior",
    }
    assert set(FAST) == set(MODEL_PARAMS)


@pytest.mark.parametrize("name", sorted(MODEL_PARAMS))
def test_fits_and_predicts_with_nans(name):
    X, y = linear_data(120)
    X[::7, 1] = np.nan  # scattered missing values
    X[:, 3] = np.nan  # a column never observed in training
    pipe = make_model(name, FAST[name])
    assert isinstance(pipe, Pipeline) and pipe.steps[-1][0] == "model"
    pipe.fit(X, y)
    X_new, _ = linear_data(30, seed=1)
    X_new[::3, 0] = np.nan
    pred = pipe.predict(X_new)
    assert pred.shape == (30,)
    assert np.isfinite(pred).all()


@pytest.mark.parametrize("name", ["ridge", "svr", "xgboost", "hist_gb", "linear_svr"])
def test_learns_linear_relation(name):
    X, y = linear_data(400, seed=2)
    X_test, y_test = linear_data(200, seed=3)
    pred = make_model(name, FAST[name], seed=0).fit(X, y).predict(X_test)
    assert r2_score(y_test, pred) > 0.5


def test_dummy_predicts_training_mean():
    X, y = linear_data(50)
    pred = make_model("dummy", {}).fit(X, y).predict(X[:5])
    np.testing.assert_allclose(pred, y.mean())


def test_svr_nystroem_switch():
    pipe = make_model("svr", {"nystroem_components": 100, "C": 3.0})
    assert [name for name, _ in pipe.steps] == ["impute", "scale", "kernel", "model"]
    X, y = linear_data(400, seed=4)
    X_test, y_test = linear_data(200, seed=5)
    assert r2_score(y_test, pipe.fit(X, y).predict(X_test)) > 0.5


def test_trees_skip_imputation_and_xgboost_settings():
    xgb = make_model("xgboost", {"n_jobs": 2}, seed=7)
    assert [name for name, _ in xgb.steps] == ["model"]
    params = xgb.named_steps["model"].get_params()
    assert params["tree_method"] == "hist" and params["n_jobs"] == 2 and params["random_state"] == 7
    assert make_model("xgboost", {}).named_steps["model"].get_params()["n_jobs"] == 1
    assert [name for name, _ in make_model("hist_gb", {}).steps] == ["fill_empty", "model"]


def test_defaults_and_overrides():
    assert make_model("ridge", {}).named_steps["model"].alpha == MODEL_PARAMS["ridge"]["alpha"]
    assert make_model("ridge", {"alpha": 10}).named_steps["model"].alpha == 10
    # a config entry {name: ridge, alpha: 3} can be passed whole
    assert resolve_model_params("ridge", {"name": "ridge", "alpha": 3}) == {"alpha": 3}
    svr = make_model("linear_svr", {"C": 0.1}).named_steps["model"]
    assert svr.C == 0.1 and svr.dual == "auto"


def test_same_seed_same_model():
    X, y = linear_data(200, seed=6)
    params = {"n_estimators": 30, "subsample": 0.7, "colsample_bytree": 0.7}
    a = make_model("xgboost", params, seed=1).fit(X, y).predict(X)
    b = clone(make_model("xgboost", params, seed=1)).fit(X, y).predict(X)
    np.testing.assert_array_equal(a, b)


def test_unknown_model_name():
    with pytest.raises(ValueError, match=r"unknown model 'xgbost'.*did you mean 'xgboost'.*ridge"):
        make_model("xgbost", {})


def test_unknown_hyperparameter():
    with pytest.raises(
        ValueError, match=r"unknown hyperparameter 'alhpa'.*'ridge'.*did you mean 'alpha'"
    ):
        make_model("ridge", {"alhpa": 1})
    with pytest.raises(ValueError, match=r"'C'.*'dummy'.*valid: \(none\)"):
        make_model("dummy", {"C": 1})
    with pytest.raises(ValueError, match="disagrees"):
        make_model("ridge", {"name": "svr"})


def test_fill_empty_columns_keeps_other_nans():
    from experiments.models.factory import FillEmptyColumns

    X = np.array([[1.0, np.nan, np.nan], [np.nan, np.nan, 2.0], [3.0, np.nan, 4.0]])
    fill = FillEmptyColumns().fit(X)
    out = fill.transform(np.array([[np.nan, 5.0, 1.0]]))
    assert fill.empty_.tolist() == [False, True, False]
    assert np.isnan(out[0, 0]) and out[0, 1] == 0.0 and out[0, 2] == 1.0
    with pytest.raises(ValueError, match="3"):
        fill.transform(np.ones((1, 2)))


def test_fill_empty_columns_copies_only_when_it_fills():
    from experiments.models.factory import FillEmptyColumns

    X = np.array([[1.0, np.nan], [np.nan, 2.0]])
    assert FillEmptyColumns().fit(X).transform(X) is X  # nothing empty: read in place
    Y = np.array([[1.0, np.nan], [np.nan, np.nan]])
    out = FillEmptyColumns().fit(Y).transform(Y)
    assert out is not Y and np.isnan(Y[:, 1]).all() and (out[:, 1] == 0).all()


def nan_patterns(seed: int, dtype, n: int = 203, d: int = 9) -> np.ndarray:
    """Random data with ties, scattered NaN, a mostly-NaN column, an all-NaN column, a single value."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(dtype)
    X[:, 1] = np.round(X[:, 1])  # many ties
    X[rng.random((n, d)) < 0.3] = np.nan
    X[: n - 2, 2] = np.nan  # two values left: the median is their mean
    X[:, 3] = np.nan  # empty
    X[1:, 4] = np.nan  # one value left
    X[:, 5] = 1e30 if dtype == np.float32 else 1e300  # large equal values (no NaN in this column)
    return X


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("block_bytes", [1, 1000, 32 * 2**20])
def test_median_imputer_equals_simple_imputer(dtype, seed, block_bytes):
    from sklearn.impute import SimpleImputer

    from experiments.models.factory import MedianImputer

    X = nan_patterns(seed, dtype, n=203 + seed)  # odd and even row counts
    X_new = nan_patterns(seed + 10, dtype, n=57)
    X_new[:, 0] = np.nan  # missing at transform in a column that was observed at fit
    ref = SimpleImputer(strategy="median", keep_empty_features=True).fit(X)
    ours = MedianImputer(block_bytes=block_bytes).fit(X)
    assert ours.statistics_.dtype == ref.statistics_.dtype
    np.testing.assert_array_equal(ours.statistics_, ref.statistics_)
    assert ours.statistics_[3] == 0
    for data in (X, X_new):
        got, want = ours.transform(data), ref.transform(data)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
        assert np.isfinite(got).all()


def test_median_imputer_copies_and_clones():
    from experiments.models.factory import MedianImputer

    X = nan_patterns(3, np.float64)
    before = X.copy()
    imp = MedianImputer(block_bytes=4096)
    out = imp.fit_transform(X)
    assert out is not X and not np.shares_memory(out, X)
    np.testing.assert_array_equal(X, before)  # input untouched (NaN included)
    twin = clone(imp)
    assert twin.get_params() == {"block_bytes": 4096, "dtype": None} and not hasattr(
        twin, "statistics_"
    )
    np.testing.assert_array_equal(twin.fit(X).statistics_, imp.statistics_)
    assert MedianImputer().fit(np.array([[1, 2], [3, 4]])).transform([[1, 2]]).dtype == np.float64


def test_median_imputer_rejects_infinity_and_wrong_width():
    import pandas as pd

    from experiments.models.factory import MedianImputer

    with pytest.raises(ValueError, match="infinity"):
        MedianImputer().fit(np.array([[1.0, np.inf], [2.0, 3.0]]))
    imp = MedianImputer().fit(pd.DataFrame({"a": [1.0, np.nan], "b": [np.nan, np.nan]}))
    assert imp.get_feature_names_out().tolist() == ["a", "b"]
    with pytest.raises(ValueError, match="2 features"):
        MedianImputer().fit(np.ones((3, 2))).transform(np.ones((1, 3)))


@pytest.mark.parametrize("name", ["ridge", "linear_svr"])
def test_in_place_preprocessing_gives_the_copying_pipeline_results(name):
    """Scaler and Ridge work in place on the imputer's copy: same predictions as SimpleImputer
    + copying StandardScaler + default model, and the caller's matrix is left alone."""
    from sklearn.impute import SimpleImputer
    from sklearn.preprocessing import StandardScaler

    X = nan_patterns(4, np.float64, n=300, d=6)
    X[:, 5] = np.linspace(0, 1, 300)
    y = np.nan_to_num(X[:, 0]) - 0.5 * X[:, 5]
    before = X.copy()
    pipe = make_model(name, FAST[name], seed=0).fit(X, y)
    np.testing.assert_array_equal(X, before)
    model = clone(pipe.named_steps["model"]).set_params(
        **({"copy_X": True} if name == "ridge" else {})
    )
    ref = Pipeline(
        [
            ("impute", SimpleImputer(strategy="median", keep_empty_features=True)),
            ("scale", StandardScaler()),
            ("model", model),
        ]
    ).fit(X, y)
    np.testing.assert_array_equal(pipe.predict(X), ref.predict(X))
    np.testing.assert_array_equal(X, before)


def test_position_prior_is_the_mean_curve_over_session_position():
    """Two training sessions of different lengths share a curve over t / duration: the prior
    recovers it at any length; a bin without rows is interpolated; NaN predicts the mean."""
    from experiments.models.position_prior import session_position

    curve = lambda u: np.sin(2 * np.pi * u)  # noqa: E731
    u = np.concatenate([session_position(500), session_position(1300)])
    prior = make_model("position_prior", {}).fit(u[:, None], curve(u))
    new = session_position(777)
    # within half a bin of the edges the curve holds its end value: 2 pi / 200 = 0.03
    np.testing.assert_allclose(prior.predict(new[:, None]), curve(new), atol=0.035)
    gap = u[(u < 0.4) | (u > 0.6)]  # bins 40-59 empty
    holes = make_model("position_prior", {"n_bins": 100}).fit(gap[:, None], 3 * gap)
    assert holes.predict(np.array([[0.5]]))[0] == pytest.approx(1.5, abs=0.02)
    assert holes.predict(np.array([[np.nan]]))[0] == pytest.approx(3 * gap.mean())
    with pytest.raises(ValueError, match="n_bins"):
        make_model("position_prior", {"n_bins": 0}).fit(u[:, None], curve(u))


def test_median_imputer_to_float64_is_the_imputer_on_a_float64_copy():
    """dtype="float64" on float32 input: the statistics and output of the default imputer on the
    input converted first (the conversion is exact), without that copy; FillEmptyColumns too."""
    from experiments.models.factory import FillEmptyColumns, MedianImputer

    X = nan_patterns(3, np.float32)
    wide = X.astype(np.float64)
    ref = MedianImputer(block_bytes=64).fit(wide)
    got = MedianImputer(block_bytes=64, dtype="float64").fit(X)
    assert got.statistics_.dtype == np.float64
    np.testing.assert_array_equal(got.statistics_, ref.statistics_)
    out = got.transform(X)
    assert out.dtype == np.float64 and not np.shares_memory(out, X)
    np.testing.assert_array_equal(out, ref.transform(wide))
    fill = FillEmptyColumns().fit(X)
    np.testing.assert_array_equal(fill.empty_, FillEmptyColumns().fit(wide).empty_)
    assert fill.transform(X).dtype == np.float64
    np.testing.assert_array_equal(fill.transform(X), FillEmptyColumns().fit(wide).transform(wide))
