"""experiments.models.personalization: the estimator contract and what each strategy learns."""

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.linear_model import LinearRegression
from sklearn.metrics import mean_squared_error

from experiments.models.factory import make_model
from experiments.models.personalization import (
    PERSONALIZATION_STRATEGIES,
    CalibratedPerListener,
    GlobalRegressor,
    ListenerOneHot,
    PerListenerRegressor,
    feature_dtype,
    make_personalizer,
    split_listener_column,
)


def opposite_listeners(n_per: int = 200, seed: int = 0):
    """Listener 1: y = x; listener 2: y = -x (a global model can only learn ~0)."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, size=2 * n_per)
    listener = np.repeat([1.0, 2.0], n_per)
    y = np.where(listener == 1, x, -x) + 0.05 * rng.normal(size=2 * n_per)
    return np.column_stack([listener, x]), y


@pytest.mark.parametrize("strategy", PERSONALIZATION_STRATEGIES)
def test_clone_get_set_params(strategy):
    model = make_personalizer(strategy, make_model("ridge", {"alpha": 2.0}))
    params = model.get_params()
    assert params["listener_column"] == 0
    assert params["estimator__model__alpha"] == 2.0
    model.set_params(estimator__model__alpha=5.0, listener_column=0)
    copy = clone(model)
    assert copy is not model and copy.get_params()["estimator__model__alpha"] == 5.0
    # fitted state is not carried over by clone, and the template estimator is never fitted
    X, y = opposite_listeners(40)
    model.fit(X, y)
    fitted = [k for k in vars(model) if k.endswith("_") and not k.startswith("_")]
    assert fitted and not any(k.endswith("_") and not k.startswith("_") for k in vars(clone(model)))
    assert not hasattr(model.estimator.named_steps["model"], "coef_")
    assert model.predict(X).shape == (len(X),)


def test_meta_estimators_store_init_args_untouched():
    est = LinearRegression()
    for cls, extra in [
        (GlobalRegressor, {}),
        (PerListenerRegressor, {"min_samples": 7}),
        (CalibratedPerListener, {"shrinkage": 3.5}),
        (ListenerOneHot, {}),
    ]:
        model = cls(est, listener_column=2, **extra)
        assert model.estimator is est and model.listener_column == 2
        assert clone(model).get_params(deep=False).keys() == model.get_params(deep=False).keys()


def test_listener_column_is_removed():
    X = np.array([[10.0, 1.0, 2.0], [20.0, 3.0, 4.0]])
    listeners, features = split_listener_column(X, 0)
    assert listeners.tolist() == [10.0, 20.0] and features.tolist() == [[1.0, 2.0], [3.0, 4.0]]
    model = GlobalRegressor(make_model("ridge", {})).fit(X, [0.0, 1.0])
    assert model.n_features_in_ == 3 and model.estimator_.n_features_in_ == 2
    # listener id elsewhere than column 0
    model = GlobalRegressor(LinearRegression(), listener_column=2).fit(X[:, [1, 2, 0]], [0.0, 1.0])
    assert model.estimator_.n_features_in_ == 2


def test_features_are_split_off_in_one_copy_of_the_dtype_the_model_takes():
    rng = np.random.default_rng(0)
    F = rng.normal(size=(60, 3)).astype(np.float32)
    ids = np.repeat([1.0, 2.0, 3.0], 20).astype(np.float32)
    for column in (0, 1, 3, -1):
        X = np.insert(F, column if column >= 0 else 3, ids, axis=1)
        listeners, features = split_listener_column(X, column)
        assert listeners.tolist() == ids.tolist() and features.dtype == np.float64
        assert features.flags.c_contiguous and not np.shares_memory(features, X)
        np.testing.assert_array_equal(features, F)
        _, single = split_listener_column(X, column, np.float32)
        assert single.dtype == np.float32 and not np.shares_memory(single, X)
        np.testing.assert_array_equal(single, F)
    # XGBoost computes in float32 anyway: it gets float32, with the same predictions
    assert feature_dtype(make_model("xgboost", {"n_estimators": 5})) is np.float32
    assert feature_dtype(make_model("ridge", {})) is np.float64
    assert feature_dtype(make_model("hist_gb", {})) is np.float64
    X = np.column_stack([ids, F])
    y = F[:, 0] * 2.0 + rng.normal(size=60)
    xgb = make_model("xgboost", {"n_estimators": 5, "n_jobs": 1})
    single = GlobalRegressor(xgb).fit(X, y).predict(X)
    from xgboost import XGBRegressor  # imported here, as by the factory (slow to load)

    class Float64(XGBRegressor):
        """The same model, but not in FLOAT32_ESTIMATORS: handed float64 features."""

    params = xgb.steps[0][1].get_params()
    double = GlobalRegressor(Float64(**params)).fit(X, y)
    assert feature_dtype(double.estimator) is np.float64
    np.testing.assert_array_equal(single, double.predict(X))


def test_bad_listener_column():
    X = np.array([[np.nan, 1.0], [1.0, 2.0]])
    with pytest.raises(ValueError, match="NaN in 1 rows"):
        GlobalRegressor(LinearRegression()).fit(X, [0.0, 1.0])
    with pytest.raises(ValueError, match="listener_column=5"):
        GlobalRegressor(LinearRegression(), listener_column=5).fit(X, [0.0, 1.0])
    model = GlobalRegressor(LinearRegression()).fit(np.ones((3, 3)), [0.0, 1.0, 2.0])
    with pytest.raises(ValueError, match="X has 4 features, but GlobalRegressor is expecting 3"):
        model.predict(np.ones((3, 4)))


def test_per_listener_beats_global_on_opposite_relations():
    X, y = opposite_listeners(seed=0)
    X_test, y_test = opposite_listeners(seed=1)
    glob = make_personalizer("global", make_model("ridge", {})).fit(X, y)
    per = make_personalizer("per_listener", make_model("ridge", {})).fit(X, y)
    mse_global = mean_squared_error(y_test, glob.predict(X_test))
    mse_per = mean_squared_error(y_test, per.predict(X_test))
    assert mse_per < 0.02 < 0.2 < mse_global
    assert sorted(per.estimators_) == [1, 2] and per.fallback_listeners_ == []


def test_per_listener_fallbacks():
    X, y = opposite_listeners(n_per=60)
    # listener 3 has too few rows -> global model; listener 9 is unseen -> global model
    X = np.vstack([X, [[3.0, 0.5], [3.0, -0.5]]])
    y = np.concatenate([y, [5.0, 5.0]])
    model = PerListenerRegressor(LinearRegression(), min_samples=10).fit(X, y)
    assert sorted(model.estimators_) == [1, 2] and model.fallback_listeners_ == [3]
    X_new = np.array([[3.0, 0.3], [9.0, 0.3], [1.0, 0.3], [2.0, 0.3]])
    pred = model.predict(X_new)
    expected_global = model.global_.predict(X_new[:2, 1:])
    np.testing.assert_allclose(pred[:2], expected_global)
    assert pred[2] == pytest.approx(0.3, abs=0.05) and pred[3] == pytest.approx(-0.3, abs=0.05)


def test_per_listener_without_fallback_fits_no_global_model_and_refuses_others():
    X, y = opposite_listeners(n_per=60)
    X = np.vstack([X, [[3.0, 0.5], [3.0, -0.5]]])  # listener 3: too few rows for a model
    y = np.concatenate([y, [5.0, 5.0]])
    with_fallback = PerListenerRegressor(LinearRegression(), min_samples=10).fit(X, y)
    model = PerListenerRegressor(LinearRegression(), min_samples=10, fallback=False).fit(X, y)
    assert (
        model.global_ is None
        and sorted(model.estimators_) == [1, 2]
        and model.fallback_listeners_ == [3]
    )
    own = X[X[:, 0] != 3]
    np.testing.assert_array_equal(model.predict(own), with_fallback.predict(own))
    for who in (3.0, 9.0):  # too few rows at fit; never seen
        with pytest.raises(
            ValueError, match=rf"listener {int(who)} has no model of their own.*fallback=True"
        ):
            model.predict(np.array([[1.0, 0.3], [who, 0.3]]))


def test_calibration_recovers_listener_scale_and_offset():
    rng = np.random.default_rng(0)
    n = 300
    x = rng.normal(size=(2 * n, 2))
    f = x[:, 0] + 0.5 * x[:, 1]
    listener = np.repeat([1.0, 2.0], n)
    y = np.where(listener == 1, f, 2 * f + 1)  # listener 2: y = 2 f(x) + 1
    X = np.column_stack([listener, x])
    model = CalibratedPerListener(LinearRegression(), shrinkage=0.0).fit(X, y)
    # the global fit is about 1.5 f + 0.5, so listener 2 needs a = 4/3, b = 1/3
    a, b = model.calibration_[2]
    assert a == pytest.approx(4 / 3, abs=0.05) and b == pytest.approx(1 / 3, abs=0.05)
    x_test = rng.normal(size=(100, 2))
    f_test = x_test[:, 0] + 0.5 * x_test[:, 1]
    X_test = np.column_stack([np.full(100, 2.0), x_test])
    calibrated = model.predict(X_test)
    uncalibrated = model.global_.predict(x_test)
    target = 2 * f_test + 1
    assert mean_squared_error(target, calibrated) < 0.01 * mean_squared_error(target, uncalibrated)
    # unseen listener -> identity, i.e. the global prediction
    X_unseen = np.column_stack([np.full(100, 7.0), x_test])
    np.testing.assert_allclose(model.predict(X_unseen), uncalibrated)


def test_calibration_shrinks_towards_identity():
    X, y = opposite_listeners(n_per=20)
    fitted = CalibratedPerListener(LinearRegression(), shrinkage=0.0).fit(X, y)
    shrunk = CalibratedPerListener(LinearRegression(), shrinkage=20.0).fit(X, y)  # w = 1/2
    strong = CalibratedPerListener(LinearRegression(), shrinkage=1e9).fit(X, y)
    for listener in (1, 2):
        a0, b0 = fitted.calibration_[listener]
        a1, b1 = shrunk.calibration_[listener]
        assert a1 == pytest.approx(0.5 * a0 + 0.5) and b1 == pytest.approx(0.5 * b0)
        assert strong.calibration_[listener] == pytest.approx((1.0, 0.0), abs=1e-6)
    with pytest.raises(ValueError, match="shrinkage"):
        CalibratedPerListener(LinearRegression(), shrinkage=-1).fit(X, y)


def test_onehot_shape_and_unseen_listener():
    X, y = opposite_listeners(n_per=30)
    X = np.column_stack([X, X[:, 1] ** 2])  # two features
    model = ListenerOneHot(make_model("ridge", {})).fit(X, y)
    assert model.categories_.tolist() == [1.0, 2.0]
    assert model.estimator_.n_features_in_ == 2 + 2
    design = model.augment(np.array([[2.0, 0.1, 0.2], [5.0, 0.1, 0.2]]))
    assert design.shape == (2, 4)
    assert design[0, 2:].tolist() == [0.0, 1.0]
    assert design[1, 2:].tolist() == [0.0, 0.0]  # unseen listener: all zeros
    assert model.predict(X).shape == (len(X),)


def test_onehot_learns_listener_offsets():
    rng = np.random.default_rng(3)
    x = rng.normal(size=400)
    listener = np.repeat([1.0, 2.0], 200)
    y = x + np.where(listener == 1, 1.0, -1.0)
    X = np.column_stack([listener, x])
    onehot = make_personalizer("listener_onehot", LinearRegression()).fit(X, y)
    glob = make_personalizer("global", LinearRegression()).fit(X, y)
    assert (
        mean_squared_error(y, onehot.predict(X))
        < 1e-10
        < 0.5
        < mean_squared_error(y, glob.predict(X))
    )


def test_tolerates_nan_features_with_model_pipelines():
    X, y = opposite_listeners(n_per=80)
    X = np.column_stack([X, np.full(len(X), np.nan)])
    X[::5, 1] = np.nan
    for strategy in PERSONALIZATION_STRATEGIES:
        model = make_personalizer(strategy, make_model("hist_gb", {"max_iter": 20}))
        assert np.isfinite(model.fit(X, y).predict(X)).all()


def test_make_personalizer_errors():
    with pytest.raises(
        ValueError, match=r"unknown personalization strategy 'per_listner'.*'per_listener'"
    ):
        make_personalizer("per_listner", LinearRegression())
    with pytest.raises(
        ValueError, match=r"unknown option 'min_sample'.*did you mean 'min_samples'"
    ):
        make_personalizer("per_listener", LinearRegression(), min_sample=3)
    with pytest.raises(ValueError, match="unknown option 'shrinkage'"):
        make_personalizer("global", LinearRegression(), shrinkage=3)
    model = make_personalizer(
        "global_calibrated", LinearRegression(), shrinkage=5.0, listener_column=1
    )
    assert (
        isinstance(model, CalibratedPerListener)
        and model.shrinkage == 5.0
        and model.listener_column == 1
    )


@pytest.mark.parametrize(
    "name, params",
    [
        ("linear_svr", {"max_iter": 200}),
        ("svr", {"nystroem_components": 20}),
        ("ridge", {"alpha": 3.0}),
        ("hist_gb", {"max_iter": 10}),
    ],
)
def test_a_model_that_copies_its_features_gets_a_view_with_the_float64_results(name, params):
    """Its first step makes the one float64 copy (of the float32 design's feature columns):
    the same predictions, bit for bit, as from a float64 copy split off before it."""
    from experiments.models.personalization import copies_features

    rng = np.random.default_rng(5)
    F = rng.normal(size=(80, 4)).astype(np.float32)
    F[::7, 1] = np.nan
    F[:, 3] = np.nan  # all NaN at fit
    ids = np.repeat([1.0, 2.0, 3.0, 4.0], 20).astype(np.float32)
    X = np.column_stack([ids, F])
    y = np.nan_to_num(F[:, 0]) * 2.0 + rng.normal(size=80)
    model = make_model(name, params)
    assert copies_features(model)
    listeners, view = split_listener_column(X, 0, feature_dtype(model), copy=False)
    assert view.dtype == np.float32 and np.shares_memory(view, X)
    for strategy in (GlobalRegressor, PerListenerRegressor):
        single = strategy(make_model(name, params)).fit(X, y).predict(X)
        double = strategy(make_model(name, params)).fit(X.astype(np.float64), y)
        np.testing.assert_array_equal(single, double.predict(X.astype(np.float64)))
    assert not copies_features(make_model("xgboost", {"n_estimators": 5}))
