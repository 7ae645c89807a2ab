"""Late fusion on a planted store where the speaker and the listener each carry half the valence."""

from __future__ import annotations

import numpy as np
import pytest

from experiments.config.tracks import fused_track
from experiments.data.dataset import load_sessions
from experiments.evaluation.evaluate import evaluate_trial, member_predictions, window_sessions
from experiments.evaluation.fit_cache import FitCache
from experiments.evaluation.fusion import Blend, late_fusion
from tests.experiments.helpers import CHANNELS, SPLITS, build_store, counted_fits, pick, trials_for


def _tables(root, labels_override=None):
    build_store(root, labels_override=labels_override, speaker_share=0.5)
    return load_sessions(root, CHANNELS, splits=SPLITS, cache=False)


@pytest.fixture(scope="module")
def halves(tmp_path_factory):
    return _tables(tmp_path_factory.mktemp("halves"))


@pytest.fixture(scope="module")
def halves_poisoned(tmp_path_factory):
    """The same store, but every validation and test label replaced by random numbers."""
    rng = np.random.default_rng(7)

    def poison(listener, story, y):
        return rng.uniform(-1, 1, len(y)) if story not in SPLITS["train"] else y

    return _tables(tmp_path_factory.mktemp("halves_poisoned"), poison)


def _members(tables, trials=None, **settings):
    trials = trials or trials_for()
    out = []
    for fs in ("speaker", "listener"):
        t = pick(trials, fs, **settings)
        out.append((t, window_sessions(tables, t.window_key())))
    return out


@pytest.fixture(scope="module")
def fused(halves):
    members = _members(halves)
    return members, late_fusion(members)


def test_late_fusion_beats_each_member_on_test(fused):
    members, result = fused
    scored = [evaluate_trial(t, w).metrics for t, w in members]
    for track in ("personalized", "generalized"):
        key = f"test.ccc_{track}"
        best_member = max(m[key] for m in scored)
        # each member explains about half the variance: the blend clearly more
        assert all(0.2 < m[key] < 0.85 for m in scored), [m[key] for m in scored]
        assert result.metrics[key] > best_member + 0.05, (key, result.metrics[key], best_member)
    # scored like a configuration: intervals over listeners and the chance level on test
    assert result.metrics["test.ccc_generalized.ci_low"] <= result.metrics["test.ccc_generalized"]
    assert (
        result.metrics["test.ccc_generalized.chance_q95"] < result.metrics["test.ccc_generalized"]
    )
    assert set(result.scores.split) == {"val", "test"}
    # two global members: the fusion does not know who is listening; causal when both are
    assert result.track == "generalized"
    assert result.causal is all(t.causal for t, _ in members)


def test_blend_weights_are_non_negative_and_share_the_signal(fused):
    _, result = fused
    w = result.blend.weights_
    assert (w >= 0).all()
    assert w.min() > 0.25 * w.max(), w  # both halves used, neither dropped


def test_nnls_drops_a_member_that_only_hurts():
    rng = np.random.default_rng(1)
    signal = rng.normal(size=2000)
    P = np.column_stack([signal + rng.normal(0, 0.3, 2000), -signal + rng.normal(0, 0.3, 2000)])
    nnls = Blend("nnls").fit(P, signal)
    assert nnls.weights_[1] == 0.0 and nnls.weights_[0] > 0
    ridge = Blend("ridge", alpha=0.0).fit(P, signal)
    X = np.column_stack([np.ones(len(P)), P])
    ols = np.linalg.lstsq(X, signal, rcond=None)[0]
    assert ridge.weights_ == pytest.approx(ols[1:]) and ridge.intercept_ == pytest.approx(ols[0])
    assert ridge.weights_[1] < 0  # the ridge may weigh a member negatively; nnls may not
    shrunk = Blend("ridge", alpha=1.0).fit(P, signal)
    assert np.abs(shrunk.weights_).sum() < np.abs(ridge.weights_).sum()


def test_member_predictions_are_the_runs_and_out_of_fold(halves):
    # the post-processing fitted on the out-of-fold predictions: calibration, smoothing, rescaling
    trials = trials_for(
        personalization=["global_calibrated"],
        postprocess={"smooth_s": [2], "smooth_method": ["moving_average"], "rescale": ["train"]},
    )
    settings = {"personalization": "global_calibrated", "rescale": "train", "smooth_s": 2.0}
    (t, w), _ = _members(halves, trials, **settings)
    made = member_predictions(t, w)
    run = evaluate_trial(t, w)
    assert set(made.evaluated) == set(run.predictions)
    for sid, p in run.predictions.items():
        np.testing.assert_array_equal(made.evaluated[sid], p)
    train = {s.session for s in w.sessions if s.story in SPLITS["train"]}
    assert set(made.train) == train
    assert {made.split_of[sid] for sid in train} == {"train"}


def test_no_validation_or_test_label_reaches_the_blend(fused, halves_poisoned):
    members, clean = fused
    poisoned = late_fusion(_members(halves_poisoned))
    np.testing.assert_array_equal(poisoned.blend.weights_, clean.blend.weights_)
    assert poisoned.blend.intercept_ == clean.blend.intercept_
    for sid, p in clean.predictions.items():
        np.testing.assert_array_equal(poisoned.predictions[sid], p)
    # the poison did reach the scoring: the same predictions score about 0 on random labels
    assert poisoned.metrics["test.ccc_generalized"] < 0.2 < clean.metrics["test.ccc_generalized"]


def test_out_of_fold_training_predictions_ignore_their_own_story(tmp_path):
    """Poison one training story's labels: its out-of-fold predictions do not change (they are made
    by models fitted on the other training stories), the other story's do."""
    story = SPLITS["train"][0]
    rng = np.random.default_rng(3)

    def poison(listener, s, y):
        return rng.uniform(-1, 1, len(y)) if s == story else y

    clean_tables = _tables(tmp_path / "clean")
    poisoned_tables = _tables(tmp_path / "poisoned", poison)
    (t, w_clean), _ = _members(clean_tables)
    w_poisoned = window_sessions(poisoned_tables, t.window_key())
    a, b = member_predictions(t, w_clean), member_predictions(t, w_poisoned)
    for s in w_clean.sessions:
        if s.story == story:
            np.testing.assert_array_equal(a.train[s.session], b.train[s.session])
        elif s.story in SPLITS["train"]:
            assert not np.allclose(a.train[s.session], b.train[s.session])


def test_fused_track_follows_its_members():
    assert fused_track(["generalized", "generalized"]) == "generalized"
    assert fused_track(["generalized", "personalized"]) == "personalized"
    assert fused_track(["generalized"], blend_uses_listener=True) == "personalized"
    with pytest.raises(ValueError, match="unknown track"):
        fused_track(["personal"])


def test_late_fusion_refuses_a_single_member(fused):
    members, _ = fused
    with pytest.raises(ValueError, match="at least two members"):
        late_fusion(members[:1])


@pytest.mark.parametrize("model", ["hist_gb", "ridge"])
def test_the_two_tracks_fusions_fit_a_shared_member_once_with_the_same_numbers(
    halves, monkeypatch, model
):
    """The ablation's common case: each track's fusion has a member of one fit group (one model,
    ``rescale`` ``listener`` for the personalized track, ``train`` for the generalized one). With
    one cache the group is fitted once, and both fusions are the ones made apart, exactly."""
    models = {
        "hist_gb": {"name": "hist_gb", "max_iter": [15], "max_depth": [2]},
        "ridge": {"name": "ridge", "alpha": [10]},
    }
    trials = trials_for(
        models=[models[model]],
        personalization=["global"],
        postprocess={
            "smooth_s": [2],
            "smooth_method": ["moving_average"],
            "rescale": ["train", "listener"],
        },
    )
    per_track = {
        rescale: _members(halves, trials, model=model, smooth_s=2.0, rescale=rescale)
        for rescale in ("listener", "train")
    }
    pipeline = counted_fits(monkeypatch)
    apart = {r: late_fusion(m) for r, m in per_track.items()}
    n_apart = len(pipeline)
    pipeline.clear()
    cache = FitCache()
    together = {r: late_fusion(m, cache=cache) for r, m in per_track.items()}
    # per member: the main model and one per training story; ridge's are closed-form parts
    per_member = 1 + len(SPLITS["train"])
    assert cache.fits == 2 * per_member  # two members (speaker, listener), once each
    assert cache.reuses == 2 * per_member  # the other track's fusion took them all
    if model == "hist_gb":
        assert (n_apart, len(pipeline)) == (4 * per_member, 2 * per_member)
    for r in apart:
        a, b = apart[r], together[r]
        np.testing.assert_array_equal(a.blend.weights_, b.blend.weights_)
        assert a.blend.intercept_ == b.blend.intercept_
        assert a.metrics == b.metrics and a.train_score == b.train_score
        for sid, p in a.predictions.items():
            np.testing.assert_array_equal(b.predictions[sid], p)
    assert apart["train"].metrics != apart["listener"].metrics  # two rescalings, two fusions
