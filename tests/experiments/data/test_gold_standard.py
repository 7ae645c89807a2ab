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
    with pytest.raises(ValueError, match="not one of stored, mean, ewe"):
        GoldStandard("median")
