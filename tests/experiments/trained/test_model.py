"""A trained model predicts what its sweep predicted, after a save and a load, from a store or a
frame table; it refuses frames it was not trained on."""

from __future__ import annotations

import json
import warnings
from dataclasses import replace

import numpy as np
import pytest

from experiments.evaluation.evaluate import evaluate_trials, window_sessions
from experiments.trained.model import (
    ModelError,
    frame_table,
    load_model,
    save_model,
    train_model,
)
from tests.experiments.helpers import pick, trials_for

VARIANTS = [
    # (model, params, personalization, rescale, smooth_s)
    ("ridge", (("alpha", 10.0),), "global", "none", 0.0),
    ("ridge", (("alpha", 10.0),), "per_listener", "listener", 2.0),
    ("ridge", (("alpha", 10.0),), "global_calibrated", "train", 2.0),
    ("ridge", (("alpha", 10.0),), "listener_onehot", "none", 2.0),
    ("xgboost", (("n_estimators", 10), ("max_depth", 3)), "per_listener", "bias", 0.0),
    ("hist_gb", (("max_iter", 10),), "global", "listener_bias", 2.0),
]


def _trial(model, params, personalization, rescale, smooth_s):
    base = pick(trials_for(), "listener")
    return replace(
        base,
        model=model,
        model_params=params,
        personalization=personalization,
        rescale=rescale,
        smooth_s=smooth_s,
    )


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: f"{v[0]}-{v[2]}-{v[3]}")
def test_a_saved_model_predicts_what_its_sweep_predicted(planted_store, tables, tmp_path, variant):
    """Validation and test predictions of the saved and loaded model equal the sweep's evaluation
    of the configuration (the closed form's and the pipelines' alike)."""
    trial = _trial(*variant)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = evaluate_trials([trial], window_sessions(tables, trial.window_key()))[0]
        model = load_model(save_model(train_model(trial, planted_store), tmp_path / "m"))
    by_session = {t.session: t for t in tables}
    assert set(want.predictions) == set(model.provenance["scored_sessions"])
    for sid, p in want.predictions.items():
        got = model.predict_table(by_session[sid])
        np.testing.assert_allclose(got, p, rtol=0, atol=1e-12, err_msg=sid)
    frames = frame_table(by_session[sid])
    np.testing.assert_array_equal(model.predict_frame(frames), got)


def test_frames_the_model_was_not_trained_on_are_refused(planted_store, tables, tmp_path):
    trial = _trial(*VARIANTS[1])
    model = train_model(trial, planted_store)
    t = tables[0]
    frames = frame_table(t).drop(columns=[model.columns[3], "listener"])
    with pytest.raises(ModelError, match=f"lacks 2 column.*{model.columns[3]}"):
        model.predict_frame(frames)
    extractors = json.loads(json.dumps(model.provenance["extractors"]))
    key = model.channels[0]
    extractors[key]["version"] += "-other"
    with pytest.raises(ModelError, match=f"channel {key} was extracted by .*-other"):
        model.check(tables, extractors, allow=False)
    with pytest.warns(UserWarning, match="predicting anyway"):
        model.check(tables, extractors, allow=True)
    with pytest.raises(ModelError, match="at 50 fps, the model at 25 fps"):
        model.check([replace(t, fps=50.0)], model.provenance["extractors"], allow=False)
    fewer = replace(t, columns=t.columns[1:])
    with pytest.raises(ModelError, match=rf"missing: \['{t.columns[0]}'\]"):
        model.check([fewer], model.provenance["extractors"], allow=False)


def test_a_folder_of_other_code_is_named(planted_store, tmp_path):
    folder = save_model(train_model(_trial(*VARIANTS[0]), planted_store), tmp_path / "m")
    doc = json.loads((folder / "model.json").read_text())
    doc["provenance"]["code"]["code_fingerprint"] = "0" * 16
    (folder / "model.json").write_text(json.dumps(doc))
    with pytest.warns(UserWarning, match="saved by experiments .* code 0000000000000000"):
        load_model(folder)
    doc["config_hash"] = "f" * 12
    (folder / "model.json").write_text(json.dumps(doc))
    with pytest.raises(ModelError, match="written by other code"):
        load_model(folder)
    doc["format"] = 99
    (folder / "model.json").write_text(json.dumps(doc))
    with pytest.raises(ModelError, match="model format 99"):
        load_model(folder)
    with pytest.raises(ModelError, match="not a saved model"):
        load_model(tmp_path / "nothing")
