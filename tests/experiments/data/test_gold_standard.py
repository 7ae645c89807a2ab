"""Gold standards from planted raters (known lags and noise) and inter-rater agreement."""

from __future__ import annotations

import numpy as np
import pytest

from experiments.data.gold_standard import (
    GoldStandard,
    agreement,
    estimate_lags,
    ewe_weights,
    gold_standards,
    icc,
)
from featurestore.concordance import ccc

FPS = 25.0


def planted(lags: dict[str, int], noise: dict[str, float], n_sessions=3, n=1500, seed=0):
    """Sessions of rater traces: a smooth truth delayed by each rater's lag plus noise."""
    rng = np.random.default_rng(seed)
    sessions, truths = [], []
    for _ in range(n_sessions):
        raw = rng.standard_normal(n + 200)
        truth = np.convolve(raw, np.hanning(51) / np.hanning(51).sum(), mode="same")[100:-100]
        truth = truth / np.abs(truth).max() * 0.8
        traces = {}
        for r, lag in lags.items():
            y = np.full(n, np.nan)
            y[lag:] = truth[: n - lag]  # the rater reacts lag frames late
            traces[r] = y + noise[r] * rng.standard_normal(n)
        sessions.append(traces)
        truths.append(truth)
    return sessions, truths


def test_lags_recovered_exactly():
    lags = {"a": 0, "b": 20, "c": 45}
    sessions, _ = planted(lags, {"a": 0.05, "b": 0.05, "c": 0.05})
    assert estimate_lags(sessions, FPS, max_lag_s=3) == lags


def test_ewe_weights_ordered_by_noise():
    sessions, _ = planted({"a": 0, "b": 0, "c": 0}, {"a": 0.05, "b": 0.2, "c": 0.5})
    w = ewe_weights(sessions)
    assert w["a"] > w["b"] > w["c"] > 0
    assert sum(w.values()) == pytest.approx(1.0)


def test_aligned_gold_standard_is_closer_to_truth():
    lags = {"a": 0, "b": 30}
    sessions, truths = planted(lags, {"a": 0.1, "b": 0.1})
    plain, _, _ = gold_standards(sessions, GoldStandard("mean"), FPS)
    aligned, _, found = gold_standards(sessions, GoldStandard("ewe", align_lags=True), FPS)
    # each session's lags from its own raters (1,500 frames): within a frame of the planted ones
    assert [sorted(f) for f in found] == [sorted(lags)] * len(sessions)
    assert all(abs(f[r] - lag) <= 1 for f in found for r, lag in lags.items()), found
    score = lambda ys: np.mean([ccc(y, t, nan="drop") for y, t in zip(ys, truths, strict=True)])  # noqa: E731
    assert score(aligned) > score(plain) + 0.05


def test_icc_shrout_fleiss_table_2():
    # Shrout & Fleiss (1979), Table 2: 6 targets rated by 4 judges
    x = [[9, 2, 5, 8], [6, 1, 3, 2], [8, 4, 6, 8], [7, 1, 2, 6], [10, 5, 6, 9], [6, 2, 4, 7]]
    out = icc(np.array(x, float))
    assert out["ICC(2,1)"] == pytest.approx(0.29, abs=0.005)
    assert out["ICC(3,1)"] == pytest.approx(0.71, abs=0.005)
    assert out["ICC(2,k)"] == pytest.approx(0.62, abs=0.005)
    assert out["ICC(3,k)"] == pytest.approx(0.91, abs=0.005)


def test_agreement_rows_and_lag_removal():
    lags = {"a": 0, "b": 25}
    sessions, _ = planted(lags, {"a": 0.05, "b": 0.05})
    named = {f"s{i}": s for i, s in enumerate(sessions)}
    raw = agreement(named)
    fixed = agreement(named, lags)
    assert [r["session"] for r in fixed] == ["s0", "s1", "s2", "pooled"]
    assert fixed[-1]["mean_pairwise_ccc"] > raw[-1]["mean_pairwise_ccc"] + 0.1
    assert fixed[-1]["ICC(2,1)"] > 0.9


def test_bad_method():
    with pytest.raises(ValueError, match="not one of stored, mean, ewe, mean_z, ccc_centred"):
        GoldStandard("median")


def _zscored(y: np.ndarray) -> np.ndarray:
    return (y - np.nanmean(y)) / np.nanstd(y)


def test_mean_z_takes_away_a_raters_own_offset_and_range():
    (traces,), _ = planted({"a": 0, "b": 0, "c": 0}, {"a": 0.1, "b": 0.1, "c": 0.1}, n_sessions=1)
    odd = dict(traces, c=0.3 + 4.0 * traces["c"])  # c rates on its own scale, far from the others
    for method, invariant in (("mean_z", True), ("mean", False)):
        before, _, _ = gold_standards([traces], GoldStandard(method), FPS)
        after, _, _ = gold_standards([odd], GoldStandard(method), FPS)
        same = np.allclose(_zscored(after[0]), _zscored(before[0]), atol=1e-5)
        assert same is invariant, method  # the mean follows c's scale; mean_z does not
    (fused,), _, _ = gold_standards([odd], GoldStandard("mean_z"), FPS)
    spreads = [np.nanstd(y) for y in odd.values()]
    assert np.nanmean(fused) == pytest.approx(
        np.mean([np.nanmean(y) for y in odd.values()]), abs=1e-5
    )
    assert np.nanstd(fused) <= np.mean(spreads) + 1e-6  # in the raters' units, not z


def test_ccc_centred_weights_agreement_and_ignores_offsets():
    sessions, truths = planted({"a": 0, "b": 0, "c": 0}, {"a": 0.05, "b": 0.2, "c": 0.6})
    ys, weights, _ = gold_standards(sessions, GoldStandard("ccc_centred"), FPS)
    for w in weights:
        assert w["a"] > w["b"] > w["c"] >= 0 and sum(w.values()) == pytest.approx(1.0)
    shifted = [dict(s, b=s["b"] + 0.25) for s in sessions]  # b rates 0.25 higher throughout
    moved, moved_weights, _ = gold_standards(shifted, GoldStandard("ccc_centred"), FPS)
    for y, m, w, mw in zip(ys, moved, weights, moved_weights, strict=True):
        assert mw == pytest.approx(w)  # an offset is no disagreement once each rater is centred
        np.testing.assert_allclose(m, y + w["b"] * 0.25, atol=1e-5)  # only the level moves
    mean, _, _ = gold_standards(sessions, GoldStandard("mean"), FPS)
    score = lambda ys: np.mean([ccc(y, t, nan="drop") for y, t in zip(ys, truths, strict=True)])  # noqa: E731
    assert score(ys) > score(mean)  # the noisy rater counts less


def test_a_method_registered_from_a_test_is_a_config_choice(tmp_path):
    from experiments.config.gold_standard import (
        GoldStandardSpec,
        register_gold_standard,
        unregister_gold_standard,
    )
    from experiments.config.loading import from_dict

    spec = GoldStandardSpec("first_rater", f"{__name__}:first_rater", "a test's own")
    register_gold_standard(spec)
    try:
        assert from_dict({"gold_standard": "first_rater"}).gold_standard.method == "first_rater"
        (traces,), _ = planted({"a": 0, "b": 0}, {"a": 0.1, "b": 0.1}, n_sessions=1)
        (y,), (w,), _ = gold_standards([traces], GoldStandard("first_rater"), FPS)
        np.testing.assert_allclose(y, traces["a"], atol=1e-6)
        assert w == {"a": 1.0, "b": 0.0}
    finally:
        unregister_gold_standard("first_rater")
    with pytest.raises(ValueError, match="first_rater"):
        GoldStandard("first_rater")


def first_rater(traces):
    """A test's own gold standard: the alphabetically first rater alone."""
    first = sorted(traces)[0]
    return traces[first], {r: float(r == first) for r in traces}
