"""How sure a metric's mean is, listeners the unit and the split's stories held fixed:
intervals, paired comparisons, Holm's adjustment and the chance level, for any registered metric
(its spec gives the bounds, direction, and whether intervals and a chance level apply). What
each claims: docs/results.md, Intervals, Paired comparisons and Chance level.

>>> import pandas as pd
>>> rows = pd.DataFrame({"listener": [1, 1, 2, 2, 3, 3], "story": [3, 6] * 3,
...                      "ccc": [0.2, 0.4, 0.1, 0.3, 0.3, 0.5]})  # the default metric
>>> low, high = protocol_intervals(rows)["personalized"]
>>> bool(low < 0.3 < high)
True
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from ..config.metrics import DEFAULT_METRIC, MetricSpec, get_metric
from .metrics import _protocol_frame

#: permutation draws (more than 16 listeners) and chance draws used by the sweep and the ablation
N_PERMUTATIONS = 20000
N_CHANCE_DRAWS = 1000
LEVEL = 0.95
#: fewer listeners than this: no interval (NaN), with a warning
MIN_LISTENERS = 3
#: smallest circular lag of the chance level, seconds: longer than the memory of ratings and
#: predictions (windows reading up to 4 s ahead, smoothing up to 4 s, ratings that move over
#: several seconds), so that a time course of the same story cannot line up with the labels
MIN_LAG_S = 10.0


class IntervalWarning(UserWarning):
    """An interval could not be computed (too few listeners); it is reported as NaN."""


def contributions(m: np.ndarray) -> dict[str, np.ndarray]:
    """Each listener's share of both protocol means from score matrices (..., listeners, stories),
    NaN where a session is missing: arrays (..., listeners) whose plain mean is the protocol mean
    (generalized: ``n_listeners / n_stories * sum_s value / n_s``, ``n_s`` story s's listeners)."""
    m = np.asarray(m, dtype=float)
    n_listeners, n_stories = m.shape[-2], m.shape[-1]
    n_s = np.isfinite(m).sum(axis=-2, keepdims=True)
    return {
        "personalized": np.nanmean(m, axis=-1),
        "generalized": np.nansum(m / n_s, axis=-1) * n_listeners / n_stories,
    }


def listener_contributions(
    scores: pd.DataFrame | Iterable[Mapping], metric: str = DEFAULT_METRIC
) -> dict[str, np.ndarray]:
    """:func:`contributions` of a per-session table of ``metric``, listeners in order."""
    f = _protocol_frame(scores, metric)
    if f.empty:
        raise ValueError(f"no sessions: a table with columns listener, story, {metric} is needed")
    return contributions(f.pivot(index="listener", columns="story", values=metric).to_numpy())


def t_bounds(values: np.ndarray, level: float = LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """Student-t interval of the mean over the last axis (NaN below :data:`MIN_LISTENERS` units)."""
    v = np.asarray(values, dtype=float)
    n = v.shape[-1]
    if n < MIN_LISTENERS:
        nan = np.full(v.shape[:-1], np.nan)
        return nan, nan.copy()
    half = stats.t.ppf(0.5 + level / 2.0, n - 1) * v.std(axis=-1, ddof=1) / np.sqrt(n)
    mean = v.mean(axis=-1)
    return mean - half, mean + half


#: the skewness correction moves a bound at most this many t half-widths from the mean
MAX_STRETCH = 2.0


def skew_t_bounds(
    values: np.ndarray,
    level: float = LEVEL,
    bounds: tuple[float, float] | None = None,
    max_stretch: float = MAX_STRETCH,
) -> tuple[np.ndarray, np.ndarray]:
    """Skewness-corrected t interval (Hall 1992) of the mean over the last axis of ``values``
    (NaN below :data:`MIN_LISTENERS` units): Hall's cubic inverted at Student's quantile, each
    bound at most ``max_stretch`` t half-widths from the mean, clipped to ``bounds`` (None: not).
    Why: docs/results.md, Intervals.

    >>> low, high = skew_t_bounds(np.array([0.5, 0.6, 0.55, 0.62, -0.4, 0.58]))
    >>> t_low, t_high = t_bounds(np.array([0.5, 0.6, 0.55, 0.62, -0.4, 0.58]))
    >>> bool(low < t_low and high < t_high)  # the long tail is below: the interval moves down
    True
    """
    v = np.asarray(values, dtype=float)
    n = v.shape[-1]
    if n < MIN_LISTENERS:
        nan = np.full(v.shape[:-1], np.nan)
        return nan, nan.copy()
    mean = v.mean(axis=-1)
    d = v - mean[..., None]
    m2, m3 = (d**2).mean(axis=-1), (d**3).mean(axis=-1)
    safe_m2 = np.where(m2 > 0, m2, 1.0)
    g1 = np.where(m2 > 0, m3 / safe_m2**1.5, 0.0)
    se = v.std(axis=-1, ddof=1) / np.sqrt(n)
    a, b = g1 / (3.0 * np.sqrt(n)), g1 / (6.0 * np.sqrt(n))
    q = stats.t.ppf(0.5 + level / 2.0, n - 1)

    def inverse(y: float) -> np.ndarray:
        """T with g(T) = T + a T^2 + a^2 T^3 / 3 + b = y; y - b where a = 0."""
        x = 3.0 * a * (y - b)
        # cbrt(1 + x) - 1 without cancellation for small x (where a is near 0)
        small = np.expm1(np.log1p(np.maximum(x, -0.5)) / 3.0)
        root = np.where(x > -0.5, small, np.cbrt(1.0 + x) - 1.0)
        return np.where(a != 0, root / np.where(a != 0, a, 1.0), y - b)

    reach = max_stretch * q  # in standard errors
    low = mean - se * np.minimum(inverse(q), reach)
    high = mean - se * np.maximum(inverse(-q), -reach)
    if bounds is not None:
        low, high = np.clip(low, *bounds), np.clip(high, *bounds)
    return low, high


def mean_interval(
    values: np.ndarray, level: float = LEVEL, bounds: tuple[float, float] | None = None
) -> tuple[float, float]:
    """:func:`skew_t_bounds` of one 1-D sample (non-finite values left out), as two floats."""
    v = np.asarray(values, dtype=float)
    low, high = skew_t_bounds(v[np.isfinite(v)], level, bounds)
    return float(low), float(high)


def protocol_intervals(
    scores: pd.DataFrame | Iterable[Mapping],
    level: float = LEVEL,
    split: str = "",
    metric: str = DEFAULT_METRIC,
) -> dict[str, tuple[float, float]]:
    """Intervals of both protocol means (``{protocol: (low, high)}``) of per-session ``scores``:
    :func:`skew_t_bounds` over :func:`listener_contributions`, clipped to the metric's bounds;
    NaN below :data:`MIN_LISTENERS` listeners, with an :class:`IntervalWarning` naming ``split``.

    Raises:
        ValueError: the metric's spec says intervals do not apply to it.
    """
    m = get_metric(metric)
    if not m.intervals:
        raise ValueError(f"metric {m.name!r} has no intervals: its spec sets intervals=False")
    parts = listener_contributions(scores, m.name)
    n = len(parts["personalized"])
    if n < MIN_LISTENERS:
        warnings.warn(
            f"{split or 'scores'}: {n} listener(s); a 95 % interval over listeners needs at least "
            f"{MIN_LISTENERS}, so it is NaN",
            IntervalWarning,
            stacklevel=2,
        )
    return {protocol: mean_interval(v, level, m.bounds) for protocol, v in parts.items()}


def smallest_p(n_listeners: int, n_permutations: int = N_PERMUTATIONS) -> float:
    """The smallest p-value :func:`paired_comparison` can give with ``n_listeners`` listeners."""
    return 2.0 / 2**n_listeners if n_listeners <= 16 else 1.0 / n_permutations


def paired_comparison(
    a: pd.DataFrame,
    b: pd.DataFrame,
    n_permutations: int = N_PERMUTATIONS,
    level: float = LEVEL,
    seed: int = 0,
    metric: str = DEFAULT_METRIC,
) -> dict[str, float]:
    """``a`` against ``b`` (per-session ``metric``) on their shared sessions, listeners the unit:
    ``mean_diff`` (positive when ``a`` is better), ``ci_low``, ``ci_high``, ``p_value`` (sign-flip
    test, exact up to 16 listeners, else ``n_permutations`` draws of ``seed``), ``p_min``,
    ``n_sessions``, ``n_listeners`` (docs/results.md, Paired comparisons).

    >>> a = pd.DataFrame({"listener": [1, 2, 3, 4, 5, 6], "story": 3, "ccc": [0.5] * 6})
    >>> b = a.assign(ccc=0.1)
    >>> r = paired_comparison(a, b)
    >>> round(r["mean_diff"], 3), round(r["p_value"], 4), round(r["p_min"], 4)
    (0.4, 0.0312, 0.0312)
    """
    fa, fb = _protocol_frame(a, metric), _protocol_frame(b, metric)
    both = fa.merge(fb, on=["listener", "story"], suffixes=("_a", "_b"))
    if both.empty:
        raise ValueError("the two configurations share no session; nothing to compare")
    m = get_metric(metric)
    sign = 1.0 if m.higher_is_better else -1.0
    diff = sign * (both[f"{metric}_a"] - both[f"{metric}_b"])
    d = diff.groupby(both["listener"]).mean().to_numpy()
    observed = float(d.mean())
    n_listeners = len(d)
    low, high = mean_interval(d, level, m.diff_bounds) if m.intervals else (np.nan, np.nan)
    if n_listeners <= 16:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=n_listeners)))
    else:
        signs = np.random.default_rng(seed).choice((1.0, -1.0), size=(n_permutations, n_listeners))
        signs[0] = 1.0  # the observed pattern is one of the draws
    null = signs @ d / n_listeners
    p = float(np.mean(np.abs(null) >= abs(observed) - 1e-12))
    return {
        "mean_diff": observed,
        "ci_low": low,
        "ci_high": high,
        "p_value": p,
        "p_min": smallest_p(n_listeners, n_permutations),
        "n_sessions": int(len(both)),
        "n_listeners": int(n_listeners),
    }


def holm(p_values: Sequence[float] | np.ndarray) -> np.ndarray:
    """Holm's step-down adjusted p-values of one family (same order; NaN stays NaN).

    >>> holm([0.01, 0.04, 0.03]).round(3).tolist()
    [0.03, 0.06, 0.06]
    """
    p = np.asarray(p_values, dtype=float)
    out = np.full(p.shape, np.nan)
    ok = np.flatnonzero(np.isfinite(p))
    order = ok[np.argsort(p[ok], kind="stable")]
    m = len(order)
    adjusted = np.minimum(1.0, np.maximum.accumulate(p[order] * (m - np.arange(m))))
    out[order] = adjusted
    return out


def shifted_values(
    m: MetricSpec, truth: np.ndarray, preds: Sequence[np.ndarray]
) -> list[np.ndarray]:
    """``m`` of ``truth`` against each of ``preds`` rolled by every lag 0..n-1 (the spec's
    ``shifted``, else ``m.fn`` at each lag).

    >>> t = np.sin(np.linspace(0, 6.28, 50))
    >>> round(float(shifted_values(get_metric("ccc"), t, [t])[0][0]), 6)
    1.0
    """
    if m.shifted is not None:
        return m.shifted(truth, preds)
    t = np.asarray(truth, dtype=np.float64)
    return [
        np.array([m.fn(t, np.roll(np.asarray(p, dtype=np.float64), k)) for k in range(len(t))])
        for p in preds
    ]


#: whole-block mappings a story may borrow its time courses through (donor story x rotation)
CHANCE_MAPPINGS = 8


def block_mappings(
    listeners: np.ndarray, stories: np.ndarray, n_mappings: int = CHANCE_MAPPINGS
) -> dict[object, list[np.ndarray]]:
    """For each story, up to ``n_mappings`` ways its sessions borrow time courses as a block (per
    mapping, the row each session borrows from; the rule: docs/results.md, Chance level).

    >>> m = block_mappings(np.array([1, 1, 2, 2]), np.array([3, 6, 3, 6]))
    >>> [x.tolist() for x in m[3]], [x.tolist() for x in m[6]]
    ([[1, 3], [3, 1]], [[0, 2], [2, 0]])
    """
    rows = np.arange(len(stories))
    unique = list(dict.fromkeys(stories.tolist()))
    out: dict[object, list[np.ndarray]] = {}
    for s in unique:
        mine = rows[stories == s]
        others = [d for d in unique if d != s]
        if not others:  # one story: the next listeners' predictions of it
            shifts = range(1, min(n_mappings, len(mine) - 1) + 1) if len(mine) > 1 else [0]
            out[s] = [np.roll(mine, -c) for c in shifts]
            continue
        per_donor = max(1, n_mappings // len(others))
        out[s] = []
        for d in others:
            theirs = rows[stories == d]
            by_listener = {listeners[j]: j for j in theirs}
            base = np.array([by_listener.get(listeners[i], -1) for i in mine])
            spare = [j for j in theirs if j not in set(base.tolist())]
            for b in np.flatnonzero(base < 0):
                # a session of the donor no one took, else this listener's of a third story,
                # else the donor's first again (a repeat: two sessions then move alike)
                own = [j for j in rows[listeners == listeners[mine[b]]] if stories[j] != s]
                base[b] = spare.pop(0) if spare else (own[0] if own else theirs[0])
            out[s] += [np.roll(base, -c) for c in range(min(per_donor, len(mine)))]
    return out


def chance_level(
    truth: Mapping[str, np.ndarray],
    predictions: Mapping[str, np.ndarray],
    sessions: pd.DataFrame,
    fps: float | Mapping[str, float] = 25.0,
    min_lag_s: float = MIN_LAG_S,
    n_draws: int = N_CHANCE_DRAWS,
    seed: int = 0,
    metric: str = DEFAULT_METRIC,
) -> dict[str, tuple[float, float]]:
    """``{protocol: (mean, q95)}`` of each protocol's mean ``metric`` under the null of
    ``n_draws`` draws: each session's labels against its prediction's level and scale with the
    time course of another story's block, shifted by at least ``min_lag_s`` (docs/results.md,
    Chance level). ``sessions``: columns session, listener, story; ``fps``: one or per session.

    Raises:
        ValueError: no sessions, or the metric's spec says a chance level does not apply.
    """
    m = get_metric(metric)
    if not m.chance:
        raise ValueError(f"metric {m.name!r} has no chance level: its spec sets chance=False")
    rows = sessions.sort_values(["listener", "story"], kind="stable").reset_index(drop=True)
    if rows.empty:
        raise ValueError("no sessions for the chance level")
    series = [_standardised(truth[sid], predictions[sid]) for sid in rows.session]
    rates = [float(fps[sid] if isinstance(fps, Mapping) else fps) for sid in rows.session]
    listeners, stories = rows.listener.to_numpy(), rows.story.to_numpy()
    draws = _chance_draws(m, series, rates, listeners, stories, min_lag_s, n_draws, seed)
    q = 0.95 if m.higher_is_better else 0.05
    out = {}
    for protocol, groups in (("personalized", listeners), ("generalized", stories)):
        weights = (groups[:, None] == np.unique(groups)[None, :]).astype(float)
        weights /= weights.sum(axis=0, keepdims=True)
        null = (draws @ weights).mean(axis=1)
        out[protocol] = (float(null.mean()), float(np.quantile(null, q)))
    return out


#: a session's labels, its prediction's mean and standard deviation, and its standardised shape
_Series = tuple[np.ndarray, float, float, np.ndarray]


def _standardised(truth: np.ndarray, prediction: np.ndarray) -> _Series:
    """The finite-label frames of a session: labels, prediction level, scale and shape."""
    t = np.asarray(truth, dtype=np.float64)
    p = np.asarray(prediction, dtype=np.float64)
    ok = np.isfinite(t)
    p = p[ok]
    sd = float(p.std())
    shape = (p - p.mean()) / sd if sd > 0 else np.zeros_like(p)
    return t[ok], float(p.mean()), sd, shape


def _chance_draws(
    m: MetricSpec,
    series: Sequence[_Series],
    rates: Sequence[float],
    listeners: np.ndarray,
    stories: np.ndarray,
    min_lag_s: float,
    n_draws: int,
    seed: int,
) -> np.ndarray:
    """(draws, sessions) ``m`` of each session against its borrowed, shifted time course."""
    rng = np.random.default_rng(seed)
    draws = np.empty((n_draws, len(series)))
    for s, donors in block_mappings(listeners, stories).items():
        block = np.flatnonzero(stories == s)
        pick = rng.integers(0, len(donors), size=n_draws)
        share = rng.random(n_draws)  # one lag per draw for the whole block, a share of its range
        for b, i in enumerate(block.tolist()):
            t, level, scale, _ = series[i]
            n = len(t)
            lag = min(int(round(min_lag_s * rates[i])), n // 4)
            lags = np.minimum(lag + np.floor(share * (n - 2 * lag + 1)).astype(int), n - 1)
            borrowed = [level + scale * np.resize(series[int(idx[b])][3], n) for idx in donors]
            if m.shifted is not None:
                for k, curve in enumerate(m.shifted(t, borrowed)):
                    chosen = pick == k
                    draws[chosen, i] = curve[lags[chosen]]
                continue
            for k, p in enumerate(borrowed):
                chosen = np.flatnonzero(pick == k)
                at = {int(lag): m.fn(t, np.roll(p, int(lag))) for lag in np.unique(lags[chosen])}
                draws[chosen, i] = [at[int(lag)] for lag in lags[chosen]]
    return draws
