"""evaluate_trial on the planted synthetic store: protocols, coverage, and no test-label leakage."""

from __future__ import annotations

import numpy as np
import pytest

from experiments.config import expand, from_dict
from experiments.dataset import load_sessions
from experiments.evaluate import evaluate_trial, window_sessions

from .conftest import LISTENERS, N_FRAMES, SPLITS, build_store, config_dict

CHANNELS = ["listener/egemaps", "listener/face_geom", "speaker/egemaps", "speaker/face_geom"]


def trials_for(**changes):
    return expand(from_dict(config_dict("unused", **changes)))


def pick(trials, feature_set, model="ridge", personalization="global", smooth_s=0.0, rescale="none"):
    for t in trials:
        if (t.feature_set, t.model, t.personalization, t.smooth_s, t.rescale) == (
            feature_set, model, personalization, smooth_s, rescale,
        ):
            return t
    raise LookupError((feature_set, model, personalization, smooth_s, rescale))


@pytest.fixture(scope="module")
def tables(planted_store):
    return load_sessions(planted_store, CHANNELS, splits=SPLITS)


@pytest.fixture(scope="module")
def poisoned_tables(tmp_path_factory):
    """The same store, but the test story's labels replaced by random numbers."""
    rng = np.random.default_rng(123)

    def poison(listener, story, y):
        return rng.uniform(-1, 1, len(y)) if story in SPLITS["test"] else y

    root = tmp_path_factory.mktemp("poisoned_store")
    build_store(root, labels_override=poison)
    return load_sessions(root, CHANNELS, splits=SPLITS)


def run(trial, tables):
    return evaluate_trial(trial, window_sessions(tables, trial.window_key()))


def test_listener_features_beat_speaker_features(tables):
    trials = trials_for()
    listener = run(pick(trials, "listener"), tables)
    speaker = run(pick(trials, "speaker"), tables)
    for split in ("val", "test"):
        for protocol in ("personalized", "generalized"):
            key = f"{split}.ccc_{protocol}"
            assert listener.metrics[key] > 0.5, (key, listener.metrics[key])
            assert listener.metrics[key] > speaker.metrics[key] + 0.3, key


def test_predictions_cover_every_frame_of_val_and_test(tables):
    res = run(pick(trials_for(), "listener", personalization="per_listener", smooth_s=2.0), tables)
    expected = {t.session for t in tables if t.story in SPLITS["val"] + SPLITS["test"]}
    assert set(res.predictions) == expected
    assert len(expected) == len(LISTENERS) * 2
    for sid, pred in res.predictions.items():
        assert pred.shape == (N_FRAMES,)
        assert np.all(np.isfinite(pred)), sid
        assert len(res.truth[sid]) == N_FRAMES
    assert sorted(res.scores.split.unique()) == ["test", "val"]
    assert len(res.scores) == len(expected)


def test_metric_keys_per_split_listener_and_story(tables):
    res = run(pick(trials_for(), "listener"), tables)
    for split in ("val", "test"):
        assert {f"{split}.ccc_personalized", f"{split}.ccc_generalized"} <= set(res.metrics)
        for listener in LISTENERS:
            assert np.isfinite(res.metrics[f"{split}.ccc_listener_{listener}"])
        for story in SPLITS[split]:
            assert np.isfinite(res.metrics[f"{split}.ccc_story_{story}"])
    assert not any(k.startswith("train.") for k in res.metrics)
    # one story per split: the generalized mean is that story's mean, the personalized the mean of listeners
    assert res.metrics["val.ccc_generalized"] == pytest.approx(res.metrics[f"val.ccc_story_{SPLITS['val'][0]}"])
    per_listener = [res.metrics[f"val.ccc_listener_{listener}"] for listener in LISTENERS]
    assert res.metrics["val.ccc_personalized"] == pytest.approx(np.mean(per_listener))


@pytest.mark.parametrize(
    "personalization, rescale, protocol",
    [
        ("global", "train", "val"),
        ("per_listener", "train", "val"),
        ("global_calibrated", "train", "val"),
        ("listener_onehot", "none", "val"),
        ("per_listener", "train", "loso"),
    ],
)
def test_test_labels_never_influence_predictions(tables, poisoned_tables, personalization, rescale, protocol):
    trials = trials_for(
        personalization=[personalization], protocol=protocol,
        postprocess={"smooth_s": [2], "smooth_method": ["moving_average"], "rescale": [rescale]},
    )
    trial = pick(trials, "listener", personalization=personalization, smooth_s=2.0, rescale=rescale)
    clean, poisoned = run(trial, tables), run(trial, poisoned_tables)
    assert set(clean.predictions) == set(poisoned.predictions)
    for sid in clean.predictions:
        np.testing.assert_array_equal(clean.predictions[sid], poisoned.predictions[sid], err_msg=sid)
    # every metric not computed on the test story itself is unchanged
    for k, v in clean.metrics.items():
        if not k.startswith("test."):
            assert poisoned.metrics[k] == v, k
    # and the test metrics did see the poison (the check is not vacuous)
    assert poisoned.metrics["test.ccc_personalized"] != clean.metrics["test.ccc_personalized"]


def test_loso_protocol_scores_train_and_val_stories_and_test(tables):
    trials = trials_for(protocol="loso")
    res = run(pick(trials, "listener"), tables)
    assert {"loso.ccc_personalized", "loso.ccc_generalized", "test.ccc_personalized", "test.ccc_generalized"} <= set(res.metrics)
    assert not any(k.startswith("val.") for k in res.metrics)
    loso_stories = sorted(SPLITS["train"] + SPLITS["val"])
    for story in loso_stories:
        assert f"loso.ccc_story_{story}" in res.metrics
    scored = res.scores.groupby("split").story.unique()
    assert sorted(scored["loso"]) == loso_stories
    assert sorted(scored["test"]) == SPLITS["test"]
    assert len(res.scores) == len(LISTENERS) * 4
    assert res.metrics["loso.ccc_personalized"] > 0.5
    assert all(len(p) == N_FRAMES for p in res.predictions.values())
