"""Intervals over the right unit (listeners), paired sign-flip tests, and the chance level."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from experiments.evaluation.metrics import ccc, ccc_protocols
from experiments.evaluation.uncertainty import (
    bootstrap_protocols,
    chance_level,
    paired_comparison,
    shifted_ccc,
)


def table(values_by_listener: dict[int, list[float]], stories=None) -> pd.DataFrame:
    rows = []
    for listener, values in values_by_listener.items():
        for j, v in enumerate(values):
            rows.append(
                {
                    "listener": listener,
                    "story": (stories or list(range(1, len(values) + 1)))[j],
                    "ccc": v,
                }
            )
    return pd.DataFrame(rows)


def test_bootstrap_resamples_listeners_not_sessions():
    """Sessions of one listener move together: repeating each listener's value over more stories
    adds no information, so the interval must not shrink (a session-level bootstrap would)."""
    rng = np.random.default_rng(0)
    per_listener = rng.normal(0.2, 0.15, 10)
    three = table({L + 1: [v] * 3 for L, v in enumerate(per_listener)})
    nine = table({L + 1: [v] * 9 for L, v in enumerate(per_listener)})
    for protocol in ("personalized", "generalized"):
        assert bootstrap_protocols(three)[protocol] == pytest.approx(
            bootstrap_protocols(nine)[protocol]
        )
    # as wide as the spread of 10 independent listener means, not of 30 sessions
    low, high = bootstrap_protocols(three)["personalized"]
    se_listeners = per_listener.std() / np.sqrt(10)
    assert 3.0 * se_listeners < high - low < 4.6 * se_listeners


def test_bootstrap_interval_holds_the_estimate_and_is_reproducible():
    rng = np.random.default_rng(1)
    scores = table({L: list(rng.uniform(-0.2, 0.6, 3)) for L in range(1, 11)}, stories=[3, 6, 7])
    point = ccc_protocols(scores)
    intervals = bootstrap_protocols(scores, seed=4)
    for protocol, (low, high) in intervals.items():
        assert low < point[protocol] < high
    assert bootstrap_protocols(scores, seed=4) == intervals
    one = bootstrap_protocols(table({1: [0.3, 0.5]}))
    assert one["personalized"] == pytest.approx((0.4, 0.4))  # one listener: nothing to resample


def test_generalized_interval_handles_an_incomplete_table():
    scores = table({1: [0.1, 0.3], 2: [0.5]}, stories=[1, 2])
    low, high = bootstrap_protocols(scores, n_boot=500)["generalized"]
    assert np.isfinite(low) and np.isfinite(high) and low <= high


def test_sign_flip_p_value_counts_listeners_not_sessions():
    """Six listeners who all favour A: the exact two-sided p is 2 / 2^6, however many sessions each has."""
    for n_sessions in (1, 3, 8):
        a = table({L: [0.5 + 0.01 * L] * n_sessions for L in range(1, 7)})
        b = a.assign(ccc=a.ccc - 0.2)
        r = paired_comparison(a, b)
        assert r["p_value"] == pytest.approx(2 / 64)
        assert r["mean_diff"] == pytest.approx(0.2) and r["ci_low"] == pytest.approx(0.2)
        assert (r["n_sessions"], r["n_listeners"]) == (6 * n_sessions, 6)


def test_paired_comparison_of_a_noise_difference_is_not_significant():
    rng = np.random.default_rng(2)
    a = table({L: list(rng.uniform(0, 0.4, 3)) for L in range(1, 11)}, stories=[3, 6, 7])
    b = a.assign(ccc=a.ccc + rng.normal(0, 0.05, len(a)))
    r = paired_comparison(a, b)
    assert r["ci_low"] < 0 < r["ci_high"] and r["p_value"] > 0.05
    with pytest.raises(ValueError, match="share no session"):
        paired_comparison(a, a.assign(listener=a.listener + 100))


def test_shifted_ccc_is_the_official_ccc_at_every_lag():
    rng = np.random.default_rng(3)
    t, p = rng.normal(size=157).cumsum(), 0.5 * rng.normal(size=157).cumsum() + 0.2
    curve = shifted_ccc(t, p)
    assert np.abs(curve - [ccc(t, np.roll(p, k)) for k in range(157)]).max() < 1e-12
    assert np.array_equal(shifted_ccc(t, np.full(157, 0.3)), np.zeros(157))


def test_chance_level_of_slow_signals_is_far_from_zero_and_below_a_real_fit():
    """Slowly varying ratings and predictions agree by chance more than white noise would: the chance
    level shows it; a prediction that follows the labels stands far above it."""
    rng = np.random.default_rng(4)
    sessions, truth, good, drift = [], {}, {}, {}
    for listener in range(1, 7):
        for story in (3, 6):
            sid = f"Subject_{listener}_Story_{story}"
            y = np.convolve(rng.normal(size=700), np.ones(75) / 75, mode="same") * 5
            truth[sid] = y
            good[sid] = y + rng.normal(0, 0.1, len(y))
            drift[sid] = np.convolve(rng.normal(size=700), np.ones(75) / 75, mode="same") * 5
            sessions.append({"session": sid, "listener": listener, "story": story})
    meta = pd.DataFrame(sessions)
    chance = chance_level(truth, good, meta, seed=0)
    for protocol in ("personalized", "generalized"):
        mean, q95 = chance[protocol]
        assert abs(mean) < 0.05 and 0.05 < q95 < 0.5, (protocol, mean, q95)
    # the same for unrelated slow predictions: the null depends on the predictions' smoothness, not their skill
    for protocol, (mean, q95) in chance_level(truth, drift, meta, seed=0).items():
        assert abs(mean) < 0.05 and 0.05 < q95 < 0.5, (protocol, mean, q95)
    white = {s: rng.normal(size=700) for s in truth}
    assert chance_level(truth, white, meta)["personalized"][1] < chance["personalized"][1] / 2
    observed = ccc_protocols(meta.assign(ccc=[ccc(truth[s], good[s]) for s in meta.session]))
    assert observed["personalized"] > chance["personalized"][1] + 0.4
    # unrelated slow predictions are within chance
    unrelated = ccc_protocols(meta.assign(ccc=[ccc(truth[s], drift[s]) for s in meta.session]))
    assert (
        unrelated["personalized"]
        < chance_level(truth, drift, meta, seed=1)["personalized"][1] + 0.05
    )
    # a constant prediction has no chance distribution to speak of: all zeros
    const = {s: np.zeros(700) for s in truth}
    assert chance_level(truth, const, meta) == {
        "personalized": (0.0, 0.0),
        "generalized": (0.0, 0.0),
    }
