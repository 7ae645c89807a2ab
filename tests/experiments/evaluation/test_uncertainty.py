"""Intervals over the right unit (listeners) that cover (and where they do not), paired sign-flip
tests, Holm, and a chance level that keeps each session's own level and scale: simulated with known
truth."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from bench.coverage import CASES, PROTOCOLS, listener_pool, percentile_bounds, splits
from experiments.evaluation.metrics import ccc, ccc_protocols
from experiments.evaluation.uncertainty import (
    IntervalWarning,
    chance_level,
    contributions,
    holm,
    listener_contributions,
    paired_comparison,
    protocol_intervals,
    shifted_ccc,
    shifted_cccs,
    skew_t_bounds,
    t_bounds,
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


def test_intervals_are_over_listeners_not_sessions():
    """Sessions of one listener move together: repeating each listener's value over more stories
    adds no information, so the interval must not shrink (one over sessions would)."""
    rng = np.random.default_rng(0)
    per_listener = rng.normal(0.2, 0.15, 10)
    three = table({L + 1: [v] * 3 for L, v in enumerate(per_listener)})
    nine = table({L + 1: [v] * 9 for L, v in enumerate(per_listener)})
    for protocol in ("personalized", "generalized"):
        assert protocol_intervals(three)[protocol] == pytest.approx(
            protocol_intervals(nine)[protocol]
        )
    # the skewness-corrected t interval of the 10 listener means
    low, high = protocol_intervals(three)["personalized"]
    assert (low, high) == pytest.approx(tuple(map(float, skew_t_bounds(per_listener))))
    # ... which is the t interval, mean +- t(0.975, 9) * sd / sqrt(10), on a symmetric sample
    symmetric = np.concatenate([per_listener[:5], 2 * per_listener[:5].mean() - per_listener[:5]])
    low, high = protocol_intervals(table({L + 1: [v] * 3 for L, v in enumerate(symmetric)}))[
        "personalized"
    ]
    half = 2.262 * symmetric.std(ddof=1) / np.sqrt(10)
    assert (low, high) == pytest.approx(
        (symmetric.mean() - half, symmetric.mean() + half), abs=1e-3
    )
    assert (low, high) == pytest.approx(tuple(map(float, t_bounds(symmetric))))


def test_the_skewness_correction_moves_the_interval_to_the_long_tail_and_is_capped():
    """One listener far above five (the demo's speaker-only personalized choice): the interval
    reaches further up than the t interval and less far down, but at most two t half-widths up
    (Hall's cubic alone put the bound at 0.96, past every listener); mirrored, the same below."""
    means = np.array([-0.078, -0.015, 0.434, 0.127, -0.206, -0.065])
    t_low, t_high = t_bounds(means)
    half = (t_high - t_low) / 2
    low, high = skew_t_bounds(means)
    assert t_low < low and t_high < high == pytest.approx(means.mean() + 2 * half)
    assert skew_t_bounds(means, max_stretch=np.inf)[1] > 0.9  # the cubic's flat point
    mirrored = skew_t_bounds(-means)
    assert (mirrored[0], mirrored[1]) == pytest.approx((-high, -low))
    # clipped to the range of the mean, here a CCC
    assert skew_t_bounds(means * 3, bounds=(-1.0, 1.0))[1] == 1.0


def test_interval_holds_the_estimate_and_needs_three_listeners():
    rng = np.random.default_rng(1)
    scores = table({L: list(rng.uniform(-0.2, 0.6, 3)) for L in range(1, 11)}, stories=[3, 6, 7])
    point = ccc_protocols(scores)
    for protocol, (low, high) in protocol_intervals(scores).items():
        assert low < point[protocol] < high
    for n in (1, 2):  # too few listeners: NaN, and a warning that says why
        with pytest.warns(IntervalWarning, match=f"test: {n} listener.*at least 3"):
            few = protocol_intervals(table({L: [0.3, 0.5] for L in range(1, n + 1)}), split="test")
        assert all(np.isnan(v) for pair in few.values() for v in pair)


def test_generalized_contributions_average_to_the_generalized_mean_on_an_incomplete_table():
    scores = table({1: [0.1, 0.3], 2: [0.5], 3: [0.2, 0.0], 4: [0.4, 0.6]}, stories=[1, 2])
    parts = listener_contributions(scores)
    point = ccc_protocols(scores)
    for protocol in ("personalized", "generalized"):
        assert parts[protocol].mean() == pytest.approx(point[protocol])
    low, high = protocol_intervals(scores)["generalized"]
    assert low < point["generalized"] < high


def _coverage(n_listeners: int, reps: int = 2000, seed: int = 0) -> dict[str, float]:
    """Coverage of both 95 % intervals over ``reps`` simulated test splits with known truth:
    per-session CCC = listener effect (skewed, as CCC means of people are) + story effect (fixed)
    + noise, 3 stories, one session in ten missing."""
    rng = np.random.default_rng(seed)
    story = np.array([-0.08, 0.02, 0.10])  # fixed: the split's stories
    listener = (
        0.15 * (rng.gamma(4.0, 1.0, (reps, n_listeners, 1)) - 4.0) / 2.0
    )  # skewness 1, mean 0
    m = 0.2 + listener + story + rng.normal(0, 0.12, (reps, n_listeners, 3))
    missing = rng.random(m.shape) < 0.1
    missing[..., 0] = False  # every listener keeps a session, every story a listener
    m[missing] = np.nan
    truth = {"personalized": 0.2 + story.mean(), "generalized": 0.2 + story.mean()}
    out = {}
    for protocol, parts in contributions(m).items():
        low, high = skew_t_bounds(parts)
        out[protocol] = float(np.mean((low <= truth[protocol]) & (truth[protocol] <= high)))
    # the percentile bootstrap over listeners, for contrast (personalized)
    means = contributions(m)["personalized"][:500]
    lo, hi = percentile_bounds(means, rng)
    out["bootstrap"] = float(np.mean((lo <= truth["personalized"]) & (truth["personalized"] <= hi)))
    return out


@pytest.mark.parametrize("n_listeners", [6, 10])
def test_intervals_cover_with_few_listeners_and_missing_sessions(n_listeners):
    coverage = _coverage(n_listeners)
    assert coverage["personalized"] >= 0.93 and coverage["generalized"] >= 0.93, coverage
    assert coverage["personalized"] <= 0.97, coverage  # not covering by being useless
    assert coverage["bootstrap"] < 0.93, coverage  # the test can fail: the old interval does


@pytest.fixture(scope="module")
def simulated_listeners():
    """bench/coverage.py's session-level model (smooth labels and predictions, 3 fixed
    stories, per-session CCC), a pool of 4,000 listeners in each case: listeners who differ by
    degree, and the same with 15 % of them reacting against the story."""
    return {case: listener_pool(4000, share, seed=0) for case, share in CASES.items()}


def _session_level_coverage(pool, n: int, reps: int = 4000) -> dict[str, dict[str, float]]:
    """Coverage of each interval (``skew_t``, ``t``; ``percentile`` on 500 splits) of both
    protocol means over ``reps`` splits of ``n`` listeners, and ``skew_t`` on the splits
    without (``without``) and with (``with``) a listener who reacts against the story."""
    drawn = splits(pool, n, reps, seed=n)
    none = drawn["n_against"] == 0
    out = {}
    for protocol in PROTOCOLS:
        x = drawn[protocol]
        mu = contributions(pool[protocol])[protocol].mean()  # the pool's mean: the estimand
        covered = {
            name: (low <= mu) & (mu <= high)
            for name, (low, high) in (
                ("skew_t", skew_t_bounds(x)),
                ("t", t_bounds(x)),
                ("percentile", percentile_bounds(x[:500], np.random.default_rng(n))),
            )
        }
        out[protocol] = {name: float(c.mean()) for name, c in covered.items()}
        if none.any() and (~none).any():
            out[protocol]["without"] = float(covered["skew_t"][none].mean())
            out[protocol]["with"] = float(covered["skew_t"][~none].mean())
    return out


@pytest.mark.parametrize("n_listeners", [6, 10])
def test_interval_covers_when_listeners_differ_by_degree(simulated_listeners, n_listeners):
    """The assumption the interval holds under (docs/results.md, Intervals): at least 0.93
    with 6 and 10 listeners, not by being useless; the percentile bootstrap does not (the
    test can fail), nor, on this skewed model, does the plain t interval everywhere."""
    coverage = _session_level_coverage(simulated_listeners["normal"], n_listeners)
    for protocol, c in coverage.items():
        assert 0.93 <= c["skew_t"] <= 0.97, (protocol, c)
        assert c["percentile"] < 0.9, (protocol, c)
    assert coverage["generalized"]["skew_t"] > coverage["generalized"]["t"], coverage


@pytest.mark.parametrize("n_listeners", [6, 10])
def test_a_minority_against_the_story_is_missed_when_no_split_listener_shows_it(
    simulated_listeners, n_listeners
):
    """15 % of listeners react against the story: the interval covers more than the t interval,
    but not 0.93 at 6 listeners; what bounds it: on the splits that hold none of them (0.85^n)
    the data look like the normal case's, and it misses there, while it covers the others."""
    coverage = _session_level_coverage(simulated_listeners["minority"], n_listeners)
    for protocol, c in coverage.items():
        assert c["skew_t"] > c["t"], (protocol, c)
        assert c["with"] >= 0.97 and c["without"] < 0.85, (protocol, c)
        if n_listeners == 6:
            assert c["skew_t"] < 0.93, (protocol, c)  # as docs/results.md states


def test_sign_flip_p_value_counts_listeners_not_sessions():
    """Six listeners who all favour A: the exact two-sided p is 2 / 2^6, however many sessions each has."""
    for n_sessions in (1, 3, 8):
        a = table({L: [0.5 + 0.01 * L] * n_sessions for L in range(1, 7)})
        b = a.assign(ccc=a.ccc - 0.2)
        r = paired_comparison(a, b)
        assert r["p_value"] == pytest.approx(2 / 64) == r["p_min"]
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
    # several predictions against one truth (its transform shared): each one's curve, exactly
    q = rng.normal(size=157)
    many = shifted_cccs(t, [p, np.full(157, 0.3), q])
    assert [c.tolist() for c in many] == [
        c.tolist() for c in (curve, np.zeros(157), shifted_ccc(t, q))
    ]
    with pytest.raises(ValueError, match="got 157 and 157, 157, 3"):
        shifted_cccs(t, [p, q, q[:3]])


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


# -------------------------------------------------------------- the chance level, with known truth
_L, _S, _N, _W, _FPS = 10, 3, 300, 3, 2.0  # listeners, stories, frames, smoothing (frames), fps


def _world(rng, level_matched: bool, reps: int = 1):
    """Labels at each listener's own level and scale, and predictions **unrelated** to them in
    time: at the listener's level and scale (personalized-like) or at one common level
    (generalized-like). Arrays (reps, listeners, stories, frames)."""
    level = np.linspace(-0.5, 0.5, _L)[:, None, None]
    scale = np.linspace(0.1, 0.4, _L)[:, None, None]

    def slow(size):
        c = np.cumsum(rng.standard_normal((*size, _N + _W), dtype=np.float32), axis=-1)
        return (c[..., _W:] - c[..., :-_W]) / np.sqrt(_W)

    t = level + scale * slow((reps, _L, _S))
    if level_matched:
        return t, level + 0.6 * scale * slow((reps, _L, _S))
    return t, 0.6 * scale.mean() * slow((reps, _L, _S))


def _ccc_rows(t, p):
    mt, mp = t.mean(-1), p.mean(-1)
    cov = ((t - mt[..., None]) * (p - mp[..., None])).mean(-1)
    return 2 * cov / (t.var(-1) + p.var(-1) + (mt - mp) ** 2)


def _partner_rule(t, p, rng, n_draws=1000):
    """The rule before: each session against another listener's and story's predictions as they
    are, at a random circular lag (95th percentile of the personalized mean)."""
    draws = np.empty((n_draws, _L * _S))
    for i, j in itertools.product(range(_L), range(_S)):
        li = (i + rng.integers(1, _L, 8)) % _L
        sj = (j + rng.integers(1, _S, 8)) % _S
        curves = np.array([shifted_ccc(t[i, j], p[a, b]) for a, b in zip(li, sj, strict=True)])
        draws[:, i * _S + j] = curves[rng.integers(0, 8, n_draws), rng.integers(0, _N, n_draws)]
    return float(np.quantile(draws.mean(axis=1), 0.95))


@pytest.mark.parametrize("level_matched", [True, False])
def test_chance_level_matches_the_true_null(level_matched):
    """The 95th percentile of the chance level is within 10 % of the true null's (predictions
    drawn afresh, unrelated to the labels), for level-matched and common-level predictions; the
    partner rule it replaced is off by more than 10 % where predictions carry their listener's level."""
    rng = np.random.default_rng(5)
    null = np.concatenate(
        [_ccc_rows(*_world(rng, level_matched, reps=200)).mean(axis=(1, 2)) for _ in range(10)]
    )
    true_q95 = float(np.quantile(null, 0.95))
    meta = pd.DataFrame(
        [
            {"session": f"{i}_{j}", "listener": i, "story": j}
            for i, j in itertools.product(range(_L), range(_S))
        ]
    )
    ours, old = [], []
    for k in range(6):  # six splits drawn from the null world (one varies by about 5 %)
        t, p = (a[0].astype(np.float64) for a in _world(rng, level_matched))
        truth = {f"{i}_{j}": t[i, j] for i, j in itertools.product(range(_L), range(_S))}
        pred = {f"{i}_{j}": p[i, j] for i, j in itertools.product(range(_L), range(_S))}
        chance = chance_level(truth, pred, meta, fps=_FPS, seed=k)
        ours.append(chance["personalized"][1])
        assert abs(chance["personalized"][0]) < 0.01
        if k < 3:
            old.append(_partner_rule(t, p, rng))
    assert abs(np.mean(ours) / true_q95 - 1) < 0.10, (np.mean(ours), true_q95)
    if level_matched:
        assert abs(np.mean(old) / true_q95 - 1) > 0.10, (np.mean(old), true_q95)
    else:  # one common level: the partner rule was right there
        assert abs(np.mean(old) / true_q95 - 1) < 0.10, (np.mean(old), true_q95)


def test_holm_adjusts_a_family_step_down():
    p = [0.031, 0.031, 0.5, 0.01, float("nan")]
    adjusted = holm(p)
    # sorted 0.01, 0.031, 0.031, 0.5 times 4, 3, 2, 1, made monotone
    assert adjusted[:4] == pytest.approx([0.093, 0.093, 0.5, 0.04]) and np.isnan(adjusted[4])
    assert (adjusted[:4] >= np.array(p[:4])).all()
    # with 6 listeners no family of two survives: the smallest p is 2/64, adjusted 0.0625
    assert holm([2 / 64, 2 / 64]).min() > 0.05
