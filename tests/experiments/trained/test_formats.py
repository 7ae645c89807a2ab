"""experiments.trained.formats: every registered model under every strategy saved and loaded back predicts
the same bits; a file of another type, or a missing one, is refused."""

import json

import numpy as np
import pytest
import skops.io

from experiments.config.models import model_specs
from experiments.models.factory import make_model
from experiments.models.personalization import PERSONALIZATION_STRATEGIES, make_personalizer
from experiments.trained.formats import (
    SKOPS_FILE,
    SavedEstimatorError,
    load_estimator,
    save_estimator,
)

# small settings keep the file fast
FAST = {
    "xgboost": {"n_estimators": 20},
    "hist_gb": {"max_iter": 10},
    "random_forest": {"n_estimators": 5},
}


def listener_data(n: int = 300, d: int = 5, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """[listener id | features] of listeners 1-3 (features in [0, 1], about 5 % NaN) and labels."""
    rng = np.random.default_rng(seed)
    F = rng.uniform(size=(n, d))
    listeners = np.repeat([1.0, 2.0, 3.0], -(-n // 3))[:n]
    y = F[:, 0] * listeners + rng.normal(scale=0.1, size=n)
    F[rng.uniform(size=F.shape) < 0.05] = np.nan
    return np.column_stack([listeners, F]), y


def fitted(model: str, strategy: str):
    X, y = listener_data()
    return make_personalizer(strategy, make_model(model, FAST.get(model), seed=1)).fit(X, y)


@pytest.mark.parametrize("strategy", PERSONALIZATION_STRATEGIES)
@pytest.mark.parametrize("model", sorted(model_specs()))
def test_round_trip_predicts_the_same_bits(tmp_path, model, strategy):
    estimator = fitted(model, strategy)
    X, _ = listener_data(60, seed=1)
    X[:20, 0] = (
        4.0  # a listener unseen at fit: the global fallback, the identity map, zero one-hot columns
    )
    before = estimator.predict(X)
    description = save_estimator(estimator, tmp_path)
    description = json.loads(json.dumps(description, allow_nan=False))  # JSON as it is stored
    assert np.array_equal(estimator.predict(X), before)  # saving left the estimator as it was
    loaded = load_estimator(tmp_path, description)
    assert type(loaded) is type(estimator)
    assert np.array_equal(loaded.predict(X), before)
    xgboost_files = [f for f, kind in description["files"].items() if kind == "xgboost-json"]
    # per listener: listeners 1-3 and the global fallback; a template is saved by its params only
    assert len(xgboost_files) == (model == "xgboost") * (4 if strategy == "per_listener" else 1)
    assert sorted(description["files"]) == sorted([SKOPS_FILE, *xgboost_files])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(description["files"])
    assert set(description["versions"]) == {"scikit-learn", "xgboost", "skops"}
    if model == "xgboost":
        params = [p["params"] for p in description["xgboost"]]
        assert all(p["n_estimators"] == 20 and p["tree_method"] == "hist" for p in params)
        assert loaded.get_params()["estimator__model__n_estimators"] == 20


class Foreign:
    """A type this package never writes; ``__setstate__`` would record that loading ran its code."""

    ran: list[str] = []

    def __setstate__(self, state):
        Foreign.ran.append("setstate")


def test_a_file_of_another_type_is_refused(tmp_path):
    estimator = fitted("ridge", "global")
    description = save_estimator(estimator, tmp_path)
    estimator.foreign_ = Foreign()
    skops.io.dump(estimator, tmp_path / SKOPS_FILE)  # the file of the description, one type more
    with pytest.raises(SavedEstimatorError) as e:
        load_estimator(tmp_path, description)
    assert str(tmp_path / SKOPS_FILE) in str(e.value)
    assert f"{__name__}.Foreign" in str(e.value)
    assert Foreign.ran == []


def test_a_missing_or_broken_file_is_named(tmp_path):
    description = save_estimator(fitted("xgboost", "per_listener"), tmp_path)
    (tmp_path / "xgboost-2.json").unlink()
    with pytest.raises(SavedEstimatorError, match=r"xgboost-2\.json: no such file"):
        load_estimator(tmp_path, description)
    (tmp_path / "xgboost-2.json").write_text("{}")
    with pytest.raises(SavedEstimatorError, match=r"xgboost-2\.json is not an XGBoost model \(\S"):
        load_estimator(tmp_path, description)
    (tmp_path / SKOPS_FILE).write_bytes(b"not a zip")
    with pytest.raises(SavedEstimatorError, match=rf"{SKOPS_FILE} is not a skops file"):
        load_estimator(tmp_path, description)
    (tmp_path / SKOPS_FILE).unlink()
    with pytest.raises(SavedEstimatorError, match=rf"{SKOPS_FILE}: no such file"):
        load_estimator(tmp_path, description)
