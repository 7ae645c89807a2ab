"""Intervals over the right unit (listeners) that cover (and where they do not), paired sign-flip
tests, Holm, and a chance level that keeps each session's own level and scale: simulated with known
truth."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from bench.coverage import CASES, PROTOCOLS, listener_pool, percentile_bounds, splits
from experiments.config.metrics import MetricSpec, get_metric
from experiments.evaluation.metrics import ccc, protocol_means
from experiments.evaluation.uncertainty import (
    IntervalWarning,
    block_mappings,
    chance_level,
    contributions,
    holm,
    listener_contributions,
    paired_comparison,
    protocol_intervals,
    shifted_values,
    skew_t_bounds,
    t_bounds,
)
from featurestore.concordance import shifted_cccs


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
    point = protocol_means(scores)
    for protocol, (low, high) in protocol_intervals(scores).items():
        assert low < point[protocol] < high
    for n in (1, 2):  # too few listeners: NaN, and a warning that says why
        with pytest.warns(IntervalWarning, match=f"test: {n} listener.*at least 3"):
            few = protocol_intervals(table({L: [0.3, 0.5] for L in range(1, n + 1)}), split="test")
        assert all(np.isnan(v) for pair in few.values() for v in pair)


def test_generalized_contributions_average_to_the_generalized_mean_on_an_incomplete_table():
    scores = table({1: [0.1, 0.3], 2: [0.5], 3: [0.2, 0.0], 4: [0.4, 0.6]}, stories=[1, 2])
    parts = listener_contributions(scores)
    point = protocol_means(scores)
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
    curve = shifted_cccs(t, [p])[0]
    assert np.abs(curve - [ccc(t, np.roll(p, k)) for k in range(157)]).max() < 1e-12
    assert np.array_equal(shifted_cccs(t, [np.full(157, 0.3)])[0], np.zeros(157))
    # several predictions against one truth (its transform shared): each one's curve, exactly
    q = rng.normal(size=157)
    many = shifted_cccs(t, [p, np.full(157, 0.3), q])
    assert [c.tolist() for c in many] == [
        c.tolist() for c in (curve, np.zeros(157), shifted_cccs(t, [q])[0])
    ]
    with pytest.raises(ValueError, match="got 157 and 157, 157, 3"):
        shifted_cccs(t, [p, q, q[:3]])


def test_a_metric_without_a_fast_shift_is_evaluated_at_each_lag():
    """shifted_values: the spec's own all-lags function where it has one (CCC's FFT), else the
    metric at each lag; both give the same curve for the same metric."""
    rng = np.random.default_rng(4)
    t, p = rng.normal(size=97).cumsum(), rng.normal(size=97).cumsum()
    slow = MetricSpec("ccc_lag_by_lag", lambda a, b: ccc(a, b))
    fast = shifted_values(get_metric("ccc"), t, [p])[0]
    assert np.abs(shifted_values(slow, t, [p])[0] - fast).max() < 1e-12
    assert fast[5] == pytest.approx(ccc(t, np.roll(p, 5)), abs=1e-12)


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
    observed = protocol_means(meta.assign(ccc=[ccc(truth[s], good[s]) for s in meta.session]))
    assert observed["personalized"] > chance["personalized"][1] + 0.4
    # unrelated slow predictions are within chance
    unrelated = protocol_means(meta.assign(ccc=[ccc(truth[s], drift[s]) for s in meta.session]))
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
_S, _N, _W, _FPS = 3, 300, 6, 2.0  # stories, frames, smoothing (frames: 3 s), fps


def _slow(rng, size):
    c = np.cumsum(rng.standard_normal((*size, _N + _W), dtype=np.float32), axis=-1)
    return (c[..., _W:] - c[..., :-_W]) / np.sqrt(_W)


def _world(rng, n_listeners: int, rho: float, shared: float, track: str, reps: int = 1):
    """Labels sharing a story curve (share ``rho`` of their variance; each listener at their own
    level and scale) and predictions **unrelated** to them in time, sharing a curve of their own
    across a story's listeners (share ``shared``): at each listener's level and scale
    (personalized-like) or at one common level (generalized-like). Arrays (reps, listeners,
    stories, frames)."""
    level = np.linspace(-0.5, 0.5, n_listeners)[:, None, None]
    scale = np.linspace(0.1, 0.4, n_listeners)[:, None, None]

    def curves(share):
        common = _slow(rng, (reps, 1, _S))
        return np.sqrt(share) * common + np.sqrt(1 - share) * _slow(rng, (reps, n_listeners, _S))

    y = level + scale * curves(rho)
    if track == "personalized":
        return y, level + 0.6 * scale * curves(shared)
    return y, 0.6 * scale.mean() * curves(shared)


def _ccc_rows(t, p):
    mt, mp = t.mean(-1), p.mean(-1)
    cov = ((t - mt[..., None]) * (p - mp[..., None])).mean(-1)
    return 2 * cov / (t.var(-1) + p.var(-1) + (mt - mp) ** 2)


def _independent_rule(t, p, meta, track, rng, n_draws=1000):
    """The rule before: each session at its own level and scale with another listener's and
    story's time course, **each at its own** random lag (the 95th percentile of ``track``)."""
    keys = list(zip(meta.listener, meta.story, strict=True))
    draws = np.empty((n_draws, len(keys)))
    lag = int(10 * _FPS)
    for i, (a, b) in enumerate(keys):
        others = [(c, d) for c, d in keys if c != a and d != b]
        j = [others[k] for k in rng.integers(0, len(others), 8)]
        shapes = [(p[c, d] - p[c, d].mean()) / p[c, d].std() for c, d in j]
        curves = shifted_cccs(t[a, b], [p[a, b].mean() + p[a, b].std() * s for s in shapes])
        pick = rng.integers(0, 8, n_draws)
        draws[:, i] = np.array(curves)[pick, rng.integers(lag, _N - lag + 1, n_draws)]
    groups = meta.listener.to_numpy() if track == "personalized" else meta.story.to_numpy()
    w = (groups[:, None] == np.unique(groups)[None, :]).astype(float)
    return float(np.quantile((draws @ (w / w.sum(axis=0))).mean(axis=1), 0.95))


_CELLS = list(itertools.product((6, 10), (0.0, 0.5, 1.0), (0.0, 0.5, 1.0)))
_FAST_CELLS = {(10, 0.5, 1.0), (6, 0.0, 0.0)}


@pytest.mark.parametrize("track", ["personalized", "generalized"])
@pytest.mark.parametrize(
    "n_listeners, rho, shared",
    [c if c in _FAST_CELLS else pytest.param(*c, marks=pytest.mark.slow) for c in _CELLS],
)
def test_chance_level_matches_the_true_null_of_dependent_sessions(n_listeners, rho, shared, track):
    """The 95th percentile of the chance level is within 10 % of the true null's (labels and
    predictions drawn afresh, unrelated in time), whether the predictions are independent,
    partly or fully shared across the listeners of a story and the labels share a story curve
    (rho 0, 0.5, 1), at 6 and 10 listeners, under each track's own statistic, on an incomplete
    table (two sessions missing). The rule before (each session shifted on its own) is off by
    more than 10 % wherever both labels and predictions are shared: its null is too narrow."""
    rng = np.random.default_rng([n_listeners, int(10 * rho), int(10 * shared), len(track)])
    missing = np.zeros((n_listeners, _S), bool)
    missing[1, 2] = missing[n_listeners - 2, 0] = True
    null = []
    for _ in range(10):
        m = _ccc_rows(*_world(rng, n_listeners, rho, shared, track, reps=300)).astype(float)
        m[:, missing] = np.nan
        parts = contributions(m)[track]  # the track's own averaging, per listener
        null.append(parts.mean(axis=-1))
    true_q95 = float(np.quantile(np.concatenate(null), 0.95))
    keys = [
        (a, b) for a, b in itertools.product(range(n_listeners), range(_S)) if not missing[a, b]
    ]
    meta = pd.DataFrame([{"session": f"{a}_{b}", "listener": a, "story": b} for a, b in keys])
    ours, before = [], []
    for k in range(10):  # splits drawn from the null world (one varies by about 10 %)
        t, p = (x[0].astype(np.float64) for x in _world(rng, n_listeners, rho, shared, track))
        truth = {f"{a}_{b}": t[a, b] for a, b in keys}
        pred = {f"{a}_{b}": p[a, b] for a, b in keys}
        mean, q95 = chance_level(truth, pred, meta, fps=_FPS, seed=k)[track]
        ours.append(q95)
        assert abs(mean) < 0.02
        if k < 3 and rho > 0 and shared > 0:
            before.append(_independent_rule(t, p, meta, track, rng))
    assert abs(np.mean(ours) / true_q95 - 1) < 0.10, (np.mean(ours), true_q95)
    if before:  # the test can fail: the rule it replaced does, where sessions are dependent
        assert np.mean(before) / true_q95 < 0.90, (np.mean(before), true_q95)


def test_chance_blocks_borrow_whole_stories_and_never_a_session_itself():
    """A mapping takes a donor block whole: another story of the split (each listener their
    own session of it; a listener who has none takes a spare one, else their session of a
    third story), or, in a split of one story, the story itself rotated so that no session
    borrows its own predictions."""
    listeners = np.array([1, 1, 1, 2, 2, 2, 3, 3])  # listener 3 has no story 7
    stories = np.array([3, 6, 7, 3, 6, 7, 3, 6])
    maps = block_mappings(listeners, stories)
    for s, mappings in maps.items():
        assert len(mappings) == 2 * min(4, int((stories == s).sum()))  # 2 donors, rotations
        for m in mappings:  # never its own story, never one session twice
            assert s not in stories[m] and len(set(m.tolist())) == len(m)
    rows = [m.tolist() for m in maps[3]]
    assert rows[:3] == [[1, 4, 7], [4, 7, 1], [7, 1, 4]]  # story 6: each listener's own
    assert rows[3:] == [[2, 5, 7], [5, 7, 2], [7, 2, 5]]  # story 7: listener 3 takes story 6
    assert [m.tolist() for m in maps[7]] == [[0, 3], [3, 0], [1, 4], [4, 1]]
    one = block_mappings(np.array([1, 2, 3]), np.array([1, 1, 1]))[1]
    assert [m.tolist() for m in one] == [[1, 2, 0], [2, 0, 1]]
    assert [m.tolist() for m in block_mappings(np.array([1]), np.array([1]))[1]] == [[0]]


def test_holm_adjusts_a_family_step_down():
    p = [0.031, 0.031, 0.5, 0.01, float("nan")]
    adjusted = holm(p)
    # sorted 0.01, 0.031, 0.031, 0.5 times 4, 3, 2, 1, made monotone
    assert adjusted[:4] == pytest.approx([0.093, 0.093, 0.5, 0.04]) and np.isnan(adjusted[4])
    assert (adjusted[:4] >= np.array(p[:4])).all()
    # with 6 listeners no family of two survives: the smallest p is 2/64, adjusted 0.0625
    assert holm([2 / 64, 2 / 64]).min() > 0.05
