"""A configuration whose predictions are constant on a split is marked and never chosen."""

from __future__ import annotations

import pytest

from experiments.cli import main
from experiments.config.loading import from_dict
from experiments.config.models import ModelSpec, register_model, unregister_model
from experiments.studies.sweep import SweepOptions, run_sweep
from experiments.tracking.summary import best_per_track
from tests.experiments.helpers import build_store, config_dict


def _flat(params: dict, seed: int):
    from sklearn.dummy import DummyRegressor

    return DummyRegressor()


#: a model that is not a baseline yet predicts a constant (a test's own)
FLAT = ModelSpec("flat_test", "scikit-learn `DummyRegressor`, not marked a baseline", _flat)


@pytest.fixture(scope="module")
def turned_store(tmp_path_factory):
    """The planted store with the validation story's labels turned upside down: every model that
    learnt the relation scores below 0 there, below the constant baseline's 0.000."""
    root = tmp_path_factory.mktemp("turned_store")
    build_store(root, labels_override=lambda listener, story, y: -y if story == 1 else y)
    return root


def test_constant_predictions_are_marked_and_never_chosen(turned_store, tracking_dir, capsys):
    cfg = from_dict(
        config_dict(
            tracking_dir,
            "constant",
            feature_set=["listener"],
            personalization=["global"],
            postprocess={"smooth_s": [0, 2], "rescale": ["none"]},
        )
    )
    res = run_sweep(cfg, store=turned_store, options=SweepOptions(progress=False))
    t = res.table.set_index("model.name")
    assert t.loc["dummy", "val.constant_predictions"] == 1
    assert t.loc["dummy", "test.constant_predictions"] == 1
    ridge = t.loc["ridge"]
    assert ridge["val.constant_predictions"].isna().all()  # it predicts a moving signal
    # the baseline's 0.000 beats every ridge on validation, yet a ridge is chosen
    assert (ridge["val.ccc_generalized"] < t.loc["dummy", "val.ccc_generalized"]).all()
    chosen = set(ridge.run_id)
    assert set(res.best_run_ids) == {"personalized", "generalized"}
    assert set(res.best_run_ids.values()) <= chosen
    unmarked = res.table.drop(columns=["val.constant_predictions", "test.constant_predictions"])
    assert best_per_track(unmarked, "val")["generalized"].run_id not in chosen  # as it was

    # a grid of baselines only (constant by design) is no fault: nothing chosen, exit 0
    args = ["sweep", "--config", "smoke", "--store", str(turned_store), "--tracking-uri"]
    args += [tracking_dir, "--set", "feature_sets={both: [listener/face_geom]}"]
    args += [
        "--set",
        "postprocess.smooth_s=[0]",
        "--set",
        "splits={train: [2, 4], val: [1], test: [3]}",
    ]
    assert (
        main(
            [*args, "--set", "tracking.experiment=baseline-only", "--set", "models=[{name: dummy}]"]
        )
        == 0
    )
    out, err = capsys.readouterr()
    assert "best child None" in out and "configuration chosen" not in err

    # a grid of other models that predict a constant: no choice, one line, exit 1
    register_model(FLAT)
    try:
        flat = ["--set", "tracking.experiment=constant-only", "--set", "models=[{name: flat_test}]"]
        assert main([*args, *flat]) == 1
    finally:
        unregister_model(FLAT.name)
    out, err = capsys.readouterr()
    assert "best child None" in out and "constant" in out
    assert (
        "experiments sweep: no personalized or generalized configuration chosen: every one "
        "predicts a constant (or nothing) in every session of a split"
    ) in err
