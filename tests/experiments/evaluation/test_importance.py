"""Permutation importance on a store where one column carries the signal: it ranks first with an
interval above zero, a pure-noise column's interval covers zero, time is respected."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from experiments.config.grid import expand
from experiments.config.loading import from_dict
from experiments.data.dataset import load_sessions
from experiments.evaluation.evaluate import evaluate_trial, window_sessions
from experiments.evaluation.fit_cache import FitCache
from experiments.evaluation.importance import (
    draw_lags,
    feature_groups,
    permutation_importance,
    permutation_importances,
    shifted,
)
from tests.experiments.helpers import SPLITS, build_planted_column_store, config_dict, counted_fits

CHANNELS = ["listener/face_geom", "speaker/face_geom"]


@pytest.fixture(scope="module")
def planted_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("planted_column")
    build_planted_column_store(root)
    return root


@pytest.fixture(scope="module")
def planted(planted_root):
    """(trials of a ridge grid on both channels, their windowed features) on the planted-column store."""
    root = planted_root
    cfg = from_dict(
        config_dict(
            "unused",
            feature_sets={"both": CHANNELS},
            personalization=["global", "per_listener"],
            postprocess={"smooth_s": [0, 2], "rescale": ["none", "train"]},
        )
    )
    trials = [t for t in expand(cfg) if t.model == "ridge"]
    tables = load_sessions(root, CHANNELS, splits=SPLITS, cache=False)
    return trials, window_sessions(tables, trials[0].window_key())


def _pick(trials, personalization, smooth_s, rescale):
    return next(
        t
        for t in trials
        if (t.personalization, t.smooth_s, t.rescale) == (personalization, smooth_s, rescale)
    )


def test_the_signal_column_ranks_first_and_noise_covers_zero(planted):
    trials, w = planted
    trial = _pick(trials, "global", 2.0, "train")
    res = permutation_importance(trial, w, levels=["channel", "column", "stat"], repeats=4)
    t = res.table
    cols = t[t.level == "column"].set_index("group")
    assert cols.index[0] == "listener/face_geom/c0"
    assert cols.loc["listener/face_geom/c0", "rank"] == 1
    assert cols.loc["listener/face_geom/c0", "ci_low"] > 0.3  # the model stands on it
    for noise in ("listener/face_geom/c2", "speaker/face_geom/c1"):
        assert cols.loc[noise, "ci_low"] <= 0 <= cols.loc[noise, "ci_high"], noise
    chans = t[t.level == "channel"].set_index("group")
    assert list(chans.index) == ["listener/face_geom", "speaker/face_geom"]
    assert (
        chans.loc["speaker/face_geom", "ci_low"] <= 0 <= chans.loc["speaker/face_geom", "ci_high"]
    )
    assert set(t[t.level == "stat"].group) == {"mean", "std"}
    # the unpermuted CCC is the run's: the same fit and post-processing as evaluate_trial
    run = evaluate_trial(trial, w).scores
    run = run[run.split == "test"].set_index("session").ccc
    got = res.scores.set_index("session").ccc
    np.testing.assert_allclose(got.to_numpy(), run.loc[got.index].to_numpy(), atol=1e-12)
    assert t.n_listeners.eq(5).all() and t.repeats.eq(4).all()
    # importance is the track's mean drop, from the per-session drops
    c0 = res.drops[res.drops.group == "listener/face_geom/c0"]
    assert c0["drop"].mean() == pytest.approx(cols.loc["listener/face_geom/c0", "importance"])


def test_personalized_track_averages_per_listener(planted):
    trials, w = planted
    trial = _pick(trials, "per_listener", 0.0, "none")
    res = permutation_importance(trial, w, levels=["channel"], repeats=2, seed=3)
    assert set(res.table.track) == {"personalized"}
    top = res.table.iloc[0]
    assert top.group == "listener/face_geom" and top.ci_low > 0.3
    by_listener = res.drops[res.drops.group == top.group].groupby("listener")["drop"].mean()
    assert top.importance == pytest.approx(by_listener.mean())
    assert top.ccc_permuted == pytest.approx(top.ccc - top.importance)
    # another seed, other lags, the same picture; the same seed, the same numbers
    again = permutation_importance(trial, w, levels=["channel"], repeats=2, seed=3)
    pd.testing.assert_frame_equal(again.table, res.table)


def test_lags_are_at_least_ten_seconds_and_blocks_move_whole(planted):
    _, w = planted
    lags = draw_lags(w.sessions, repeats=50, seed=1)
    n = len(w.sessions[0].y)
    assert lags.min() >= min(250, n // 4) and lags.max() <= n - min(250, n // 4)
    F = w.sessions[0].F
    moved = shifted(F, [0, 2], 200)
    np.testing.assert_array_equal(moved[200:, [0, 2]], F[:-200, [0, 2]])
    np.testing.assert_array_equal(moved[:, 1], F[:, 1])  # other features stay in place
    groups = feature_groups(w.names, CHANNELS, ["column"])
    c0 = next(g for g in groups if g.name == "listener/face_geom/c0")
    assert sorted(w.names[i] for i in c0.indices) == [
        "listener/face_geom/c0:mean@2s",
        "listener/face_geom/c0:std@2s",
    ]
    with pytest.raises(ValueError, match="unknown importance levels"):
        feature_groups(w.names, CHANNELS, ["columns"])


@pytest.mark.parametrize("model", ["hist_gb", "ridge"])
def test_the_two_tracks_choices_of_one_fit_group_are_fitted_once_with_the_same_numbers(
    planted_root, monkeypatch, model
):
    """The ablation's common case: the personalized track chose a model with ``rescale=listener``,
    the generalized track the same model with ``rescale=train``. Computed together, their
    importance costs one set of fits and of permuted predictions, and every number is the one
    each gets alone (compared exactly: a shared fit that changed anything would show)."""
    models = {
        "hist_gb": {"name": "hist_gb", "max_iter": [15], "max_depth": [2]},
        "ridge": {"name": "ridge", "alpha": [10]},
    }
    cfg = from_dict(
        config_dict(
            "unused",
            feature_sets={"both": CHANNELS},
            models=[models[model]],
            personalization=["global"],
            postprocess={"smooth_s": [2], "rescale": ["train", "listener"]},
        )
    )
    by_rescale = {t.rescale: t for t in expand(cfg)}
    choices = [(by_rescale["listener"], "personalized"), (by_rescale["train"], "generalized")]
    assert choices[0][0].fit_key() == choices[1][0].fit_key()
    tables = load_sessions(planted_root, CHANNELS, splits=SPLITS, cache=False)
    w = window_sessions(tables, choices[0][0].window_key())
    kwargs = {"levels": ["channel", "column"], "repeats": 3, "split": "test", "seed": 1}

    fits = counted_fits(monkeypatch)
    alone = [permutation_importance(t, w, track=track, **kwargs) for t, track in choices]
    n_alone = len(fits)
    fits.clear()
    cache = FitCache()
    together = permutation_importances(choices, w, cache=cache, **kwargs)

    # the main model, and (hist_gb: the pipeline) one model per training story out of fold
    per_choice = 1 + (len(SPLITS["train"]) if model == "hist_gb" else 0)
    assert n_alone == 2 * per_choice
    assert len(fits) == per_choice, fits
    assert cache.reuses >= per_choice  # the second choice took every fit from the cache
    for a, b in zip(alone, together, strict=True):
        pd.testing.assert_frame_equal(a.table, b.table, check_exact=True)
        pd.testing.assert_frame_equal(a.drops, b.drops, check_exact=True)
        pd.testing.assert_frame_equal(a.scores, b.scores, check_exact=True)
    # two choices, not one: the rescaling and the averaging are each one's own
    assert together[0].table.ccc.iloc[0] != together[1].table.ccc.iloc[0]
    assert set(together[0].table.track) == {"personalized"}
    # the cache handed out the same fits again: a third request fits nothing
    fits.clear()
    again = permutation_importance(choices[1][0], w, track="generalized", cache=cache, **kwargs)
    assert fits == []
    pd.testing.assert_frame_equal(again.table, alone[1].table, check_exact=True)
    cache.clear()
    permutation_importance(choices[1][0], w, track="generalized", cache=cache, **kwargs)
    assert len(fits) == per_choice  # cleared: fitted again


def test_choices_of_several_fit_groups_are_refused(planted):
    trials, w = planted
    a, b = _pick(trials, "global", 2.0, "train"), _pick(trials, "per_listener", 2.0, "train")
    with pytest.raises(ValueError, match="one fit group"):
        permutation_importances([(a, None), (b, None)], w)
