"""How sure a CCC is: bootstrap intervals over listeners, paired comparisons, and the chance level.

A test split of OMG-Empathy has 10 listeners and 3 stories; sessions of one listener are not
independent (the same person rated them), so the unit of resampling is the **listener**:

* :func:`bootstrap_protocols`: a 95 % percentile interval of both protocol means, listeners
  resampled with replacement (each drawn listener brings all their sessions);
* :func:`paired_comparison`: two configurations scored on the same sessions: the mean
  paired difference of per-session CCC, its bootstrap interval (listeners resampled), and a
  sign-flip permutation p-value that flips the sign of all of a listener's differences
  together (exact over all 2^n sign patterns up to 16 listeners);
* :func:`chance_level`: the CCC a model earns by chance: each session scored against another
  session's predictions (another story and listener where the split has them), circularly
  shifted by a random lag, so their level, spread and smoothness stay and only their relation
  to the labels is broken; the protocol mean is recomputed for many random pairings, and the
  mean and 95th percentile of that null distribution are reported. A constant (dummy)
  prediction has CCC 0 by construction: it is a baseline, not the chance level.

>>> import pandas as pd
>>> rows = pd.DataFrame({"listener": [1, 1, 2, 2], "story": [3, 6, 3, 6], "ccc": [0.2, 0.4, 0.1, 0.3]})
>>> low, high = bootstrap_protocols(rows, n_boot=200)["personalized"]
>>> bool(low <= 0.25 <= high)
True
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Iterable, Mapping

import numpy as np
import pandas as pd

from .metrics import _protocol_frame

#: bootstrap resamples and permutation draws used by the sweep and the ablation
N_BOOT = 2000
N_PERMUTATIONS = 20000
N_CHANCE_DRAWS = 1000
LEVEL = 0.95


def _interval(values: np.ndarray, level: float) -> tuple[float, float]:
    values = values[np.isfinite(values)]
    if values.size == 0:
        return float("nan"), float("nan")
    alpha = (1.0 - level) / 2.0
    low, high = np.quantile(values, [alpha, 1.0 - alpha])
    return float(low), float(high)


def _matrix(scores: pd.DataFrame | Iterable[Mapping]) -> np.ndarray:
    """Listeners x stories CCC (NaN where a session is missing), rows in listener order."""
    f = _protocol_frame(scores)
    return f.pivot(index="listener", columns="story", values="ccc").to_numpy(dtype=float)


def bootstrap_protocols(
    scores: pd.DataFrame | Iterable[Mapping],
    n_boot: int = N_BOOT,
    level: float = LEVEL,
    seed: int = 0,
) -> dict[str, tuple[float, float]]:
    """Percentile intervals of both protocol means, listeners resampled with replacement.

    Args:
        scores: per-session CCC, columns ``listener, story, ccc``.
        n_boot: bootstrap resamples.
        level: coverage of the interval (0.95 = 95 %).
        seed: seed of the resampling (same seed, same interval).

    Returns:
        ``{"personalized": (low, high), "generalized": (low, high)}``; with one listener the
        interval is the point itself (nothing to resample).
    """
    m = _matrix(scores)
    n_listeners = m.shape[0]
    if n_listeners == 0:
        raise ValueError("no sessions to bootstrap")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n_listeners, size=(n_boot, n_listeners))
    with warnings.catch_warnings():
        warnings.simplefilter(
            "ignore", RuntimeWarning
        )  # an all-NaN slice (a story no drawn listener has) is NaN
        listener_means = np.nanmean(m, axis=1)
        personalized = listener_means[idx].mean(axis=1)
        story_means = np.nanmean(
            m[idx], axis=1
        )  # (n_boot, stories): NaN if no drawn listener has it
        generalized = np.nanmean(story_means, axis=1)
    return {
        "personalized": _interval(personalized, level),
        "generalized": _interval(generalized, level),
    }


def paired_comparison(
    a: pd.DataFrame,
    b: pd.DataFrame,
    n_boot: int = N_BOOT,
    n_permutations: int = N_PERMUTATIONS,
    level: float = LEVEL,
    seed: int = 0,
) -> dict[str, float]:
    """Compare two configurations session by session: ``a`` minus ``b``.

    Args:
        a, b: per-session CCC of each configuration (columns ``listener, story, ccc``); only
            sessions present in both are compared.
        n_boot: bootstrap resamples of listeners for the interval.
        n_permutations: random sign patterns when there are more than 16 listeners (else all
            2^n patterns are enumerated, and the p-value is exact).
        level: coverage of the interval.
        seed: seed of the resampling.

    Returns:
        ``mean_diff`` (mean over sessions of ``ccc_a - ccc_b``), ``ci_low``, ``ci_high``,
        ``p_value`` (two-sided sign-flip permutation test with listeners as the unit; its
        smallest possible value is ``2 / 2^n_listeners``), ``n_sessions``, ``n_listeners``.

    >>> a = pd.DataFrame({"listener": [1, 2, 3, 4, 5, 6], "story": 3, "ccc": [0.5] * 6})
    >>> b = a.assign(ccc=0.1)
    >>> r = paired_comparison(a, b)
    >>> round(r["mean_diff"], 3), round(r["p_value"], 4)
    (0.4, 0.0312)
    """
    fa, fb = _protocol_frame(a), _protocol_frame(b)
    both = fa.merge(fb, on=["listener", "story"], suffixes=("_a", "_b"))
    if both.empty:
        raise ValueError("the two configurations share no session; nothing to compare")
    both["d"] = both["ccc_a"] - both["ccc_b"]
    per_listener = both.groupby("listener")["d"].agg(["sum", "count"])
    sums, counts = per_listener["sum"].to_numpy(), per_listener["count"].to_numpy()
    n_total = counts.sum()
    observed = float(sums.sum() / n_total)
    n_listeners = len(sums)

    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n_listeners, size=(n_boot, n_listeners))
    boot = sums[idx].sum(axis=1) / counts[idx].sum(axis=1)
    low, high = _interval(boot, level)

    if n_listeners <= 16:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=n_listeners)))
    else:
        signs = rng.choice((1.0, -1.0), size=(n_permutations, n_listeners))
        signs[0] = 1.0  # the observed pattern is one of the draws
    null = signs @ sums / n_total
    p = float(np.mean(np.abs(null) >= abs(observed) - 1e-12))
    return {
        "mean_diff": observed,
        "ci_low": low,
        "ci_high": high,
        "p_value": p,
        "n_sessions": int(n_total),
        "n_listeners": int(n_listeners),
    }


def shifted_ccc(truth: np.ndarray, pred: np.ndarray) -> np.ndarray:
    """CCC of ``truth`` against ``pred`` circularly shifted by every lag 0..n-1 (official formula).

    Mean and variance do not change under a circular shift, so only the covariance depends
    on the lag; it is computed for all lags at once with the FFT. Element ``k`` is the CCC of
    ``truth`` against ``np.roll(pred, k)``.

    >>> t = np.sin(np.linspace(0, 6.28, 50)); round(float(shifted_ccc(t, t)[0]), 6)
    1.0
    """
    t = np.asarray(truth, dtype=np.float64)
    p = np.asarray(pred, dtype=np.float64)
    n = len(t)
    if n == 0 or len(p) != n:
        raise ValueError(
            f"shifted_ccc needs two equally long, non-empty series, got {len(t)} and {len(p)}"
        )
    if t.min() == t.max() or p.min() == p.max():
        return np.zeros(n)  # the official scorer's r = 0 for a constant series
    dt, dp = t - t.mean(), p - p.mean()
    size = 1 << int(np.ceil(np.log2(2 * n)))
    # sum_i dt[i] * dp[i - k] for every k: the cross-correlation, by FFT
    xc = np.fft.irfft(np.fft.rfft(dt, size) * np.conj(np.fft.rfft(dp, size)), size)
    cov = (xc[:n] + np.concatenate([[0.0], xc[size - n + 1 :]])) / n  # circular: lag k and k - n
    den = dt.var() + dp.var() + (t.mean() - p.mean()) ** 2
    return np.clip(2.0 * cov / den, -1.0, 1.0)


#: other sessions each session is paired with for the chance level (the closest to unrelated first)
CHANCE_PARTNERS = 8


def chance_level(
    truth: Mapping[str, np.ndarray],
    predictions: Mapping[str, np.ndarray],
    sessions: pd.DataFrame,
    n_draws: int = N_CHANCE_DRAWS,
    partners: int = CHANCE_PARTNERS,
    seed: int = 0,
) -> dict[str, tuple[float, float]]:
    """The chance distribution of both protocol means: each session scored against another session's predictions.

    For each draw, every session's labels are scored against the predictions of another session
    of the split (one of up to ``partners`` others, preferring another story and another
    listener, so neither the story's common curve nor the listener's habits line up), circularly
    shifted by a random lag (uniform over the whole session, so no alignment with the time
    course of a story survives and the null mean is 0 up to sampling). The predictions keep
    their level, spread and smoothness: only their relation to these labels is broken. When a
    split has one story (a validation split), partners share it; the random lag still breaks
    the story's alignment. Sessions of different lengths are compared over the shorter one.

    Args:
        truth, predictions: per session id, the labels and the predictions (same length;
            frames whose label is not finite are left out).
        sessions: columns ``session, listener, story``: which sessions form the split.
        n_draws: random pairings.
        partners: candidate partners per session.
        seed: seed of the draws.

    Returns:
        ``{"personalized": (mean, q95), "generalized": (mean, q95)}``: the mean and the 95th
        percentile of each protocol's mean CCC under random pairing. With a single session
        (nothing to pair with) its own predictions are shifted instead.
    """
    rows = sessions.sort_values(["listener", "story"], kind="stable").reset_index(drop=True)
    if rows.empty:
        raise ValueError("no sessions for the chance level")
    rng = np.random.default_rng(seed)
    series = []
    for sid in rows.session:
        t = np.asarray(truth[sid], dtype=np.float64)
        p = np.asarray(predictions[sid], dtype=np.float64)
        ok = np.isfinite(t)
        series.append((t[ok], p[ok]))
    listeners, stories = rows.listener.to_numpy(), rows.story.to_numpy()
    draws = np.empty((n_draws, len(rows)))
    for i, (t, _) in enumerate(series):
        others = [j for j in range(len(rows)) if j != i] or [i]
        # another story and another listener first: the closest to unrelated predictions
        others.sort(
            key=lambda j: (stories[j] == stories[i], listeners[j] == listeners[i], rng.random())
        )
        curves = []
        for j in others[:partners]:
            m = min(len(t), len(series[j][1]))
            curves.append(shifted_ccc(t[:m], series[j][1][:m]))
        pick = rng.integers(0, len(curves), size=n_draws)
        for k, curve in enumerate(curves):
            chosen = pick == k
            draws[chosen, i] = curve[rng.integers(0, len(curve), size=int(chosen.sum()))]
    out = {}
    for protocol, groups in (("personalized", listeners), ("generalized", stories)):
        weights = (groups[:, None] == np.unique(groups)[None, :]).astype(float)
        weights /= weights.sum(axis=0, keepdims=True)
        null = (draws @ weights).mean(axis=1)
        out[protocol] = (float(null.mean()), float(np.quantile(null, 0.95)))
    return out
