"""evaluate_trial on the planted synthetic store: protocols, coverage, and no test-label leakage."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from experiments.evaluation.evaluate import evaluate_trial, window_sessions
from tests.experiments.helpers import LISTENERS, N_FRAMES, SPLITS, pick, trials_for


def run(trial, tables):
    return evaluate_trial(trial, window_sessions(tables, trial.window_key()))


def test_windowing_in_threads_gives_the_same_features(tables):
    """Sessions windowed two at a time: the same matrices, names and order as one at a time;
    a session without the key's channels still names itself."""
    key = pick(trials_for(), "listener").window_key()
    one, two = window_sessions(tables, key), window_sessions(tables, key, threads=2)
    assert one.names == two.names and len(one.names) > 0
    assert [s.session for s in one.sessions] == [s.session for s in two.sessions]
    for a, b in zip(one.sessions, two.sessions, strict=True):
        np.testing.assert_array_equal(a.F, b.F)
        np.testing.assert_array_equal(a.y, b.y)
    broken = [tables[0], dataclasses.replace(tables[1], channels=["nothing"])]
    with pytest.raises(KeyError, match=tables[1].session):
        window_sessions(broken, key, threads=2)


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
    assert res.metrics["val.ccc_generalized"] == pytest.approx(
        res.metrics[f"val.ccc_story_{SPLITS['val'][0]}"]
    )
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
def test_test_labels_never_influence_predictions(
    tables, poisoned_tables, personalization, rescale, protocol
):
    trials = trials_for(
        personalization=[personalization],
        protocol=protocol,
        postprocess={"smooth_s": [2], "smooth_method": ["moving_average"], "rescale": [rescale]},
    )
    trial = pick(trials, "listener", personalization=personalization, smooth_s=2.0, rescale=rescale)
    trial = dataclasses.replace(
        trial, unseen_listener=True
    )  # a generalized configuration is scored on unseen listeners too
    clean, poisoned = run(trial, tables), run(trial, poisoned_tables)
    assert set(clean.predictions) == set(poisoned.predictions)
    for sid in clean.predictions:
        np.testing.assert_array_equal(
            clean.predictions[sid], poisoned.predictions[sid], err_msg=sid
        )
    assert set(clean.unseen_predictions) == set(poisoned.unseen_predictions)
    for sid in clean.unseen_predictions:
        np.testing.assert_array_equal(
            clean.unseen_predictions[sid], poisoned.unseen_predictions[sid], err_msg=sid
        )
    # every metric not computed on the test story itself is unchanged
    for k, v in clean.metrics.items():
        if not k.startswith(("test.", "test_unseen.")):
            assert poisoned.metrics[k] == v, k
    # and the test metrics did see the poison (the check is not vacuous)
    assert poisoned.metrics["test.ccc_personalized"] != clean.metrics["test.ccc_personalized"]


def test_loso_protocol_scores_train_and_val_stories_and_test(tables):
    trials = trials_for(protocol="loso")
    res = run(dataclasses.replace(pick(trials, "listener"), unseen_listener=True), tables)
    assert {
        "loso.ccc_personalized",
        "loso.ccc_generalized",
        "test.ccc_personalized",
        "test.ccc_generalized",
    } <= set(res.metrics)
    assert not any(k.startswith("val.") for k in res.metrics)
    loso_stories = sorted(SPLITS["train"] + SPLITS["val"])
    for story in loso_stories:
        assert f"loso.ccc_story_{story}" in res.metrics
    scored = res.scores.groupby("split").story.unique()
    assert sorted(scored["loso"]) == loso_stories
    assert sorted(scored["test"]) == SPLITS["test"]
    # under LOSO the unseen-listener protocol scores the test story only
    assert sorted(scored["test_unseen"]) == SPLITS["test"]
    assert len(res.scores) == len(LISTENERS) * 5
    assert res.metrics["loso.ccc_personalized"] > 0.5
    assert all(len(p) == N_FRAMES for p in res.predictions.values())


def test_global_calibrated_maps_are_fitted_on_smoothed_out_of_fold_predictions(tables):
    """The sweep's global_calibrated predictions are the global model's, mapped per listener by
    maps fitted on the training stories' out-of-fold predictions smoothed as they are."""
    from experiments.evaluation.evaluate import CALIBRATION_SHRINKAGE, split_sessions
    from experiments.evaluation.fitting import fit_group
    from experiments.models.personalization import apply_listener_calibration
    from experiments.models.postprocess import fit_smoothed_calibration, smooth

    trials = trials_for(personalization=["global_calibrated"], postprocess={"smooth_s": [2]})
    trial = pick(trials, "listener", personalization="global_calibrated", smooth_s=2.0)
    w = window_sessions(tables, trial.window_key())
    res = evaluate_trial(trial, w)
    parts = split_sessions(w, dict(trial.splits))
    evaluate = parts["val"] + parts["test"]
    fitted = fit_group(trial, parts["train"], evaluate, need_post_fit=False, need_unseen=False)
    train = parts["train"]
    args = [
        np.concatenate(x)
        for x in (
            [s.y for s in train],
            [fitted.fit_on[s.session] for s in train],
            [np.full(len(s.y), s.listener) for s in train],
            [np.full(len(s.y), s.session) for s in train],
        )
    ]
    for smooth_s, should_match in ((2.0, True), (0.0, False)):
        maps = fit_smoothed_calibration(*args, 25.0, smooth_s, shrinkage=CALIBRATION_SHRINKAGE)
        for s in evaluate:
            ids = np.full(len(s.y), s.listener)
            mapped = apply_listener_calibration(maps, ids, fitted.evaluated[s.session])
            expected = smooth(mapped, 25.0, 2.0)
            assert np.allclose(res.predictions[s.session], expected) == should_match, s.session


def _altered_after(tables, session: str, frame: int, seed: int = 0):
    """``tables`` with ``session``'s features and labels after ``frame`` replaced by noise."""
    rng = np.random.default_rng(seed)
    out = []
    for t in tables:
        if t.session == session:
            X, y = t.X.copy(), t.y.copy()
            X[frame + 1 :] = rng.normal(0, 3, X[frame + 1 :].shape)
            y[frame + 1 :] = rng.uniform(-1, 1, len(y) - frame - 1)
            t = dataclasses.replace(t, X=X, y=y)
        out.append(t)
    return out


@pytest.mark.parametrize(
    "align, delay_s, smooth_s, method, lookahead",
    [
        ("causal", 1.0, 2.0, "trailing", -25),
        ("causal", 0.0, 2.0, "causal_butterworth", 0),
        ("causal", 2.0, 2.0, "moving_average", -25),  # the delay outlasts the smoothing
        ("centred", 1.0, 0.0, "moving_average", 0),  # half the 2 s window = the delay
        ("centred", 0.0, 0.0, "moving_average", 25),
        ("causal", 0.0, 2.0, "moving_average", 25),
        ("centred", 0.0, 2.0, "median", 50),
    ],
)
def test_a_causal_prediction_does_not_change_when_later_frames_do(
    tables, align, delay_s, smooth_s, method, lookahead
):
    """Alter one test session's features and labels after frame t0: the predictions up to
    t0 - lookahead stay the same (all of them up to t0 for a causal configuration); with a
    look-ahead, the frames after t0 - lookahead do change (so the check can fail)."""
    trials = trials_for(
        personalization=["global", "per_listener"],
        window={
            "lengths_s": [[2]],
            "delay_s": [delay_s],
            "align": align,
            "stats": ["mean", "std"],
            "train_hop_s": 0.4,
        },
        postprocess={"smooth_s": [smooth_s], "smooth_method": [method], "rescale": ["train"]},
    )
    # the frame tables are altered here, after resampling: no channel reads beyond its frame
    # (the channels' extraction and resampling: tests/experiments/data/test_lookahead.py)
    trial = dataclasses.replace(
        pick(trials, "listener", smooth_s=smooth_s, rescale="train"), channel_lookahead_s=0.0
    )
    assert trial.window_lookahead_s * 25 == lookahead
    assert trial.lookahead_s * 25 == lookahead
    assert trial.causal == (lookahead <= 0)
    assert trial.params()["causal"] == ("true" if lookahead <= 0 else "false")
    session, t0 = "Subject_2_Story_3", 400
    clean = run(trial, tables).predictions[session]
    altered = run(trial, _altered_after(tables, session, t0)).predictions[session]
    last = t0 - max(lookahead, 0)
    # the windows' sums are centred on each column's first value: not a bit moves
    np.testing.assert_array_equal(altered[: last + 1], clean[: last + 1])
    assert not np.allclose(altered[last + 1 :], clean[last + 1 :])
    if lookahead > 0:  # the first frame that reads a later one moves (a median may hold a while)
        end = t0 + 1 if method == "median" else last + 2
        assert not np.allclose(altered[last + 1 : end], clean[last + 1 : end], atol=1e-6)


def test_the_zero_phase_butterworth_is_not_causal():
    trial = pick(
        trials_for(postprocess={"smooth_s": [2], "smooth_method": ["butterworth"]}),
        "listener",
        smooth_s=2.0,
    )
    trial = dataclasses.replace(trial, channel_lookahead_s=0.0)  # channels that read nothing ahead
    assert trial.lookahead_s == float("inf") and not trial.causal
    assert trial.params()["lookahead_s"] == "inf"


def _position_prior(tables):
    trials = trials_for(models=[{"name": "position_prior"}], personalization=["global"])
    trial = dataclasses.replace(
        pick(trials, "listener", model="position_prior"), channel_lookahead_s=0.0
    )
    assert trial.track == "generalized" and not trial.causal
    params = trial.params()  # logged like any model
    assert params["model.name"] == "position_prior"
    assert params["causal"] == "false" and params["lookahead_s"] == "inf"
    return run(trial, tables)


def test_position_prior_gives_what_the_stories_share_and_nothing_else(tmp_path):
    """Labels that share a planted time course over the session: the position prior (no
    feature at all) finds it (CCC 0.92); the same course at a random circular lag in each
    session (shuffled in time): CCC near 0 (0.04 test, 0.08 validation)."""
    from experiments.data.dataset import load_sessions
    from tests.experiments.helpers import CHANNELS, build_store

    u = np.arange(N_FRAMES) / (N_FRAMES - 1)
    shared = 0.6 * np.sin(2 * np.pi * 1.5 * u) - 0.3 * u
    lags = np.random.default_rng(4)

    def common(listener, story, y):
        return shared + 0.3 * (y - y.mean())

    def shuffled(listener, story, y):
        return np.roll(shared, int(lags.integers(N_FRAMES))) + 0.3 * (y - y.mean())

    stores = {}
    for name, override in (("common", common), ("shuffled", shuffled)):
        build_store(tmp_path / name, labels_override=override)
        stores[name] = load_sessions(tmp_path / name, CHANNELS, splits=SPLITS)
    scores = {name: _position_prior(t).metrics for name, t in stores.items()}
    for split in ("val", "test"):
        for protocol in ("personalized", "generalized"):
            key = f"{split}.ccc_{protocol}"
            assert scores["common"][key] > 0.8, (key, scores["common"][key])
            assert abs(scores["shuffled"][key]) < 0.15, (key, scores["shuffled"][key])
