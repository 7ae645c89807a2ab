"""How sure a CCC is: intervals over listeners, paired comparisons, Holm's adjustment, the chance level.

A test split of OMG-Empathy has 10 listeners and 3 stories; sessions of one listener are not
independent (the same person rated them), so the **listener** is the unit of every interval and
test, and the stories of the split are **held fixed** (the inference is about these stories and
new listeners, not about new stories: three stories are too few to resample):

* :func:`protocol_intervals`: a 95 % interval of both protocol means over per-listener
  contributions (:func:`listener_contributions`): Hall's skewness-corrected t
  (:func:`skew_t_bounds`), clipped to [-1, 1]. What it covers, simulated session by session
  (``bench/coverage.py``; docs/results.md, Intervals): 0.93-0.95 with 4-10 listeners **when
  listeners differ by degree** (each reacts to the story with their own strength); 0.88-0.92
  when 15 % of listeners react *against* the story (0.90 at 6, 0.92 at 10), and no
  method measured beside it reaches 0.93 there at 6 listeners without being useless: a split
  without such a listener (0.85^n of them) looks exactly like one from a population without
  them. The plain t interval (:func:`t_bounds`) covers 0.92-0.94 and 0.86-0.90, the
  percentile bootstrap 0.78-0.90 and 0.71-0.86. Fewer than 3 listeners: NaN, with a warning
  that says so;
* :func:`paired_comparison`: two configurations on the same sessions: the mean over listeners
  of each listener's mean difference, its interval (the same method), and a sign-flip
  permutation p-value that flips each listener's difference (exact over all 2^n patterns up to
  16 listeners; smallest possible p ``2 / 2^n``);
* :func:`holm`: Holm's step-down adjustment of a family of p-values;
* :func:`chance_level`: the CCC a model earns by chance: each story's labels scored against
  another story's block of predictions, each session's at **its own** prediction level and
  scale, the block circularly shifted by one random lag of at least :data:`MIN_LAG_S`
  seconds; a personalized model's per-listener level stays with its listener, what the
  predictions share across a story's listeners stays in the null, and only the relation in
  time to the labels is broken. A constant (dummy) prediction has CCC 0 by construction: it
  is a baseline, not the chance level.

>>> import pandas as pd
>>> rows = pd.DataFrame({"listener": [1, 1, 2, 2, 3, 3], "story": [3, 6] * 3,
...                      "ccc": [0.2, 0.4, 0.1, 0.3, 0.3, 0.5]})
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
    """Each listener's share of both protocol means from CCC matrices (..., listeners, stories).

    ``m`` holds NaN where a session is missing (every row and column has a session). Returns
    arrays of shape (..., listeners) whose plain mean over listeners is the protocol mean:
    personalized, the listener's mean CCC over their stories; generalized (stories fixed),
    ``n_listeners / n_stories * sum over the listener's stories s of ccc / n_s`` with ``n_s``
    the listeners story ``s`` has (on a complete table, the listener's mean too).
    """
    m = np.asarray(m, dtype=float)
    n_listeners, n_stories = m.shape[-2], m.shape[-1]
    n_s = np.isfinite(m).sum(axis=-2, keepdims=True)
    return {
        "personalized": np.nanmean(m, axis=-1),
        "generalized": np.nansum(m / n_s, axis=-1) * n_listeners / n_stories,
    }


def listener_contributions(scores: pd.DataFrame | Iterable[Mapping]) -> dict[str, np.ndarray]:
    """:func:`contributions` of a per-session CCC table (columns ``listener, story, ccc``), listeners in order."""
    f = _protocol_frame(scores)
    if f.empty:
        raise ValueError("no sessions: a CCC table with columns listener, story, ccc is needed")
    return contributions(f.pivot(index="listener", columns="story", values="ccc").to_numpy())


def t_bounds(values: np.ndarray, level: float = LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """Student-t interval of the mean over the last axis of ``values`` (independent units, e.g.
    listeners); NaN where there are fewer than :data:`MIN_LISTENERS` units."""
    v = np.asarray(values, dtype=float)
    n = v.shape[-1]
    if n < MIN_LISTENERS:
        nan = np.full(v.shape[:-1], np.nan)
        return nan, nan.copy()
    half = stats.t.ppf(0.5 + level / 2.0, n - 1) * v.std(axis=-1, ddof=1) / np.sqrt(n)
    mean = v.mean(axis=-1)
    return mean - half, mean + half


#: the range a mean CCC lies in: its intervals are clipped to it
CCC_RANGE = (-1.0, 1.0)
#: the skewness correction moves a bound at most this many t half-widths from the mean
MAX_STRETCH = 2.0


def skew_t_bounds(
    values: np.ndarray,
    level: float = LEVEL,
    bounds: tuple[float, float] | None = None,
    max_stretch: float = MAX_STRETCH,
) -> tuple[np.ndarray, np.ndarray]:
    """Skewness-corrected t interval of the mean over the last axis of ``values`` (Hall 1992).

    The t statistic ``T = (mean - mu) / se`` of a skewed sample is skewed the other way, so the
    symmetric t interval misses on the long tail's side. Hall's monotone cubic
    ``g(T) = T + a T^2 + a^2 T^3 / 3 + b`` with ``a = g1 / (3 sqrt(n))``, ``b = g1 / (6 sqrt(n))``
    (``g1`` the sample skewness, plug-in moments) removes that skewness to second order; the
    interval is ``mean - se * g^-1(+-q)`` with ``q`` Student's t quantile on ``n - 1`` degrees of
    freedom. With a symmetric sample (``g1 = 0``) it is :func:`t_bounds` exactly; it extends
    further on the side of the sample's long tail. The cubic is flat at ``T = -1 / a``: with few
    units and a large skewness (one listener far from the others among 6) its inverse there
    throws the bound out of all proportion (a listener mean of 0.43 among five near 0 gave an
    upper bound of 0.96), so a bound moves at most ``max_stretch`` t half-widths from the mean
    (with 4-10 listeners this costs the coverage at most 0.006 and cuts the 90th percentile of
    the width by up to a third: docs/results.md, Intervals).

    Args:
        values: independent units on the last axis (e.g. listeners' contributions, CCC).
        level: coverage the interval aims at (0.95 = 95 %).
        bounds: the range the mean lies in (``(-1, 1)`` for a mean CCC): the interval is
            clipped to it (coverage unchanged, the width only shorter); None: no clipping.
        max_stretch: the farthest a bound may be from the mean, in t half-widths
            (:data:`MAX_STRETCH`); ``np.inf``: Hall's interval as it is.

    Returns:
        ``(low, high)``, in the values' units, of shape ``values.shape[:-1]``; NaN where there
        are fewer than :data:`MIN_LISTENERS` units.

    What it covers over listeners is measured in ``bench/coverage.py`` (docs/results.md,
    Intervals): 0.93-0.95 with 4-10 listeners when they differ by degree (each reacts to the
    story with their own strength), 0.88-0.92 when 15 % of them react against the story.

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
        """T with g(T) = y: ((1 + 3 a (y - b))^(1/3) - 1) / a, and y - b where a = 0."""
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
    """:func:`skew_t_bounds` of one 1-D sample (non-finite values left out), as two floats:
    the interval every reported mean over listeners (or persons) carries."""
    v = np.asarray(values, dtype=float)
    low, high = skew_t_bounds(v[np.isfinite(v)], level, bounds)
    return float(low), float(high)


def protocol_intervals(
    scores: pd.DataFrame | Iterable[Mapping], level: float = LEVEL, split: str = ""
) -> dict[str, tuple[float, float]]:
    """95 % intervals of both protocol means over listeners, the split's stories held fixed.

    The interval is :func:`skew_t_bounds` (Hall's skewness-corrected t, capped) over
    per-listener contributions (:func:`listener_contributions`), clipped to [-1, 1]. What it
    assumes: the split's listeners are a random sample of the listeners it speaks for, and those
    differ by degree. Then it covers 0.93-0.95 with 4-10 listeners (simulated session by
    session, ``bench/coverage.py``, docs/results.md). When 15 % of listeners react against the
    story it covers 0.88-0.92 (0.90 at 6 listeners, 0.92 at 10): a split that happens to hold
    none of them cannot show they exist. Why not the alternatives measured beside it: the plain
    t interval misses on the side of a skewed sample's long tail (0.92-0.94; 0.86-0.90 with the
    minority), the percentile and BCa bootstraps are too narrow with few listeners (0.78-0.90),
    the bootstrap-t covers about the same but is random, the whole range at 3 listeners, 1.5-1.9
    times wider at 4, and the sign-flip test's interval is the whole range below 6 listeners (at
    6, the range of the listeners' values: 0.91-0.93 with the minority, 0.90-0.91 at 10). Why
    stories fixed: a split has 1-3 stories; resampling them (a two-way listener x story
    bootstrap) cannot cover with 3 units, so the interval is about new listeners hearing these
    stories.

    Args:
        scores: per-session CCC, columns ``listener, story, ccc``.
        level: coverage of the interval (0.95 = 95 %).
        split: the split's name, for the warning.

    Returns:
        ``{"personalized": (low, high), "generalized": (low, high)}``; NaN with fewer than
        :data:`MIN_LISTENERS` listeners, and an :class:`IntervalWarning` that says so.
    """
    parts = listener_contributions(scores)
    n = len(parts["personalized"])
    if n < MIN_LISTENERS:
        warnings.warn(
            f"{split or 'scores'}: {n} listener(s); a 95 % interval over listeners needs at least "
            f"{MIN_LISTENERS}, so it is NaN",
            IntervalWarning,
            stacklevel=2,
        )
    return {protocol: mean_interval(v, level, CCC_RANGE) for protocol, v in parts.items()}


def smallest_p(n_listeners: int, n_permutations: int = N_PERMUTATIONS) -> float:
    """The smallest p-value :func:`paired_comparison` can give with ``n_listeners`` listeners."""
    return 2.0 / 2**n_listeners if n_listeners <= 16 else 1.0 / n_permutations


def paired_comparison(
    a: pd.DataFrame,
    b: pd.DataFrame,
    n_permutations: int = N_PERMUTATIONS,
    level: float = LEVEL,
    seed: int = 0,
) -> dict[str, float]:
    """Compare two configurations session by session: ``a`` minus ``b``, listeners as the unit.

    Args:
        a, b: per-session CCC of each configuration (columns ``listener, story, ccc``); only
            sessions present in both are compared.
        n_permutations: random sign patterns when there are more than 16 listeners (else all
            2^n patterns are enumerated, and the p-value is exact).
        level: coverage of the interval.
        seed: seed of the random sign patterns.

    Returns:
        ``mean_diff`` (mean over listeners of each listener's mean of ``ccc_a - ccc_b``: the
        personalized averaging of the difference), ``ci_low``, ``ci_high``
        (:func:`mean_interval` over listeners; NaN below :data:`MIN_LISTENERS`), ``p_value``
        (two-sided sign-flip test of the listeners' differences), ``p_min`` (the smallest p
        this test can give:
        ``2 / 2^n_listeners``), ``n_sessions``, ``n_listeners``.

    >>> a = pd.DataFrame({"listener": [1, 2, 3, 4, 5, 6], "story": 3, "ccc": [0.5] * 6})
    >>> b = a.assign(ccc=0.1)
    >>> r = paired_comparison(a, b)
    >>> round(r["mean_diff"], 3), round(r["p_value"], 4), round(r["p_min"], 4)
    (0.4, 0.0312, 0.0312)
    """
    fa, fb = _protocol_frame(a), _protocol_frame(b)
    both = fa.merge(fb, on=["listener", "story"], suffixes=("_a", "_b"))
    if both.empty:
        raise ValueError("the two configurations share no session; nothing to compare")
    d = (both["ccc_a"] - both["ccc_b"]).groupby(both["listener"]).mean().to_numpy()
    observed = float(d.mean())
    n_listeners = len(d)
    low, high = mean_interval(d, level, (-2.0, 2.0))  # a difference of two CCC
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

    The k-th smallest of m p-values is multiplied by ``m - k + 1``, made monotone, capped at 1;
    rejecting where the adjusted p is below 0.05 keeps the chance of any false rejection in the
    family at most 0.05, whatever the dependence between the tests.

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


def shifted_ccc(truth: np.ndarray, pred: np.ndarray) -> np.ndarray:
    """CCC of ``truth`` against ``pred`` circularly shifted by every lag 0..n-1 (official formula).

    Mean and variance do not change under a circular shift, so only the covariance depends
    on the lag; it is computed for all lags at once with the FFT. Element ``k`` is the CCC of
    ``truth`` against ``np.roll(pred, k)``.

    >>> t = np.sin(np.linspace(0, 6.28, 50)); round(float(shifted_ccc(t, t)[0]), 6)
    1.0
    """
    return shifted_cccs(truth, [pred])[0]


def shifted_cccs(truth: np.ndarray, preds: Sequence[np.ndarray]) -> list[np.ndarray]:
    """:func:`shifted_ccc` of ``truth`` against each of ``preds``: the same curves, with the
    transform of ``truth`` computed once instead of once per prediction."""
    t = np.asarray(truth, dtype=np.float64)
    n = len(t)
    ps = [np.asarray(p, dtype=np.float64) for p in preds]
    if n == 0 or any(len(p) != n for p in ps):
        raise ValueError(
            "shifted_ccc needs two equally long, non-empty series, got "
            f"{len(t)} and {', '.join(str(len(p)) for p in ps)}"
        )
    if t.min() == t.max():
        return [np.zeros(n) for _ in ps]  # the official scorer's r = 0 for a constant series
    dt = t - t.mean()
    size = 1 << int(np.ceil(np.log2(2 * n)))
    ft = None  # the transform of dt, once a prediction needs it
    out = []
    for p in ps:
        if p.min() == p.max():
            out.append(np.zeros(n))
            continue
        if ft is None:
            ft = np.fft.rfft(dt, size)
        dp = p - p.mean()
        # sum_i dt[i] * dp[i - k] for every k: the cross-correlation, by FFT
        xc = np.fft.irfft(ft * np.conj(np.fft.rfft(dp, size)), size)
        cov = (xc[:n] + np.concatenate([[0.0], xc[size - n + 1 :]])) / n  # circular: k and k - n
        den = dt.var() + dp.var() + (t.mean() - p.mean()) ** 2
        out.append(np.clip(2.0 * cov / den, -1.0, 1.0))
    return out


#: whole-block mappings a story may borrow its time courses through (donor story x rotation)
CHANCE_MAPPINGS = 8


def block_mappings(
    listeners: np.ndarray, stories: np.ndarray, n_mappings: int = CHANCE_MAPPINGS
) -> dict[object, list[np.ndarray]]:
    """For each story, up to ``n_mappings`` ways its sessions borrow time courses as a block.

    A mapping gives, for each session of the story (in row order), the row of the session it
    borrows from. Donors are the split's other stories, ``n_mappings`` split between them: the
    base mapping takes the same listener's session of the donor story where there is one (else
    a session of it that no listener has taken, else the listener's session of a third story:
    never one session twice where the split allows it, as two sessions borrowing one time
    course would move alike), and the others rotate it by one listener at a time, so that every
    mapping keeps the donor block whole. A story alone
    in its split borrows from itself, rotated by 1, 2, ... listeners (never a session's own
    predictions, unless it is the only session).

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
) -> dict[str, tuple[float, float]]:
    """The chance distribution of both protocol means: the predictions, story by story, out of time.

    Each draw scores every session's labels against a prediction with **this session's own**
    prediction mean and standard deviation (a personalized model's level stays with its
    listener) and a time course borrowed **story block by story block**: all the sessions of a
    story take the standardised predictions of one other story of the split (each listener
    its own session of that story where it has one), circularly shifted by **one lag common to
    the block**, drawn uniformly between ``min_lag_s`` and the session's length minus it. The
    relation in time to the labels is broken; what the predictions share across the
    listeners of a story (a speaker-feature model predicts nearly the same curve for every
    listener) is kept, because the borrowed block keeps it and one lag moves it as a whole.
    Each protocol mean is then averaged as its track does (over listeners, or over stories),
    ``n_draws`` times. A split of one story borrows from itself: each session takes the next
    listener's predictions of the story, the block shifted by one lag.

    Why not the rules before it:

    * each session shifted on its own (the rule before this one): predictions that are alike
      across the listeners of a story lose their likeness in the null, so the null is too
      narrow for speaker-like models (simulated, labels sharing a story curve at rho 0.5, 10
      listeners, fully shared predictions: its 95th percentile 0.41 of the true one);
    * another session's predictions *as they are*: another listener's level inflates the
      CCC's denominator and narrows a personalized model's null;
    * the session's *own* predictions at a random lag: a circular autocovariance sums to zero
      over all lags, so for a prediction that follows the labels every lag away from 0 is
      biased negative (badly on short or slow sessions). Another story's block has no such
      bias; a split of one story has no other story, and the next listener's predictions keep
      only the part of that bias that the listeners share.

    The minimum lag (``min_lag_s``, default :data:`MIN_LAG_S` = 10 s, at most a quarter of the
    session) keeps a story's common time course from lining up with its labels when a block
    borrows from its own story, and a model's position-in-session trend from lining up with
    the labels' when it borrows from another.

    Args:
        truth, predictions: per session id, the labels and the predictions (same length;
            frames whose label is not finite are left out).
        sessions: columns ``session, listener, story``: which sessions form the split.
        fps: frames per second (one for all, or per session id), to turn ``min_lag_s`` into frames.
        min_lag_s: smallest lag, seconds.
        n_draws: random draws.
        seed: seed of the draws.

    Returns:
        ``{"personalized": (mean, q95), "generalized": (mean, q95)}``: the mean and the 95th
        percentile of each protocol's mean CCC under the null.
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
        p = p[ok]
        sd = p.std()
        shape = (p - p.mean()) / sd if sd > 0 else np.zeros_like(p)
        rate = fps[sid] if isinstance(fps, Mapping) else fps
        series.append((t[ok], p.mean(), sd, shape, rate))
    listeners, stories = rows.listener.to_numpy(), rows.story.to_numpy()
    draws = np.empty((n_draws, len(rows)))
    for s, donors in block_mappings(listeners, stories).items():
        block = np.flatnonzero(stories == s)
        pick = rng.integers(0, len(donors), size=n_draws)
        share = rng.random(n_draws)  # one lag per draw for the whole block, a share of its range
        for b, i in enumerate(block):
            t, level, scale, _, rate = series[i]
            n = len(t)
            lag = min(int(round(min_lag_s * rate)), n // 4)
            lags = np.minimum(lag + np.floor(share * (n - 2 * lag + 1)).astype(int), n - 1)
            curves = shifted_cccs(
                t, [level + scale * np.resize(series[idx[b]][3], n) for idx in donors]
            )
            for k, curve in enumerate(curves):
                chosen = pick == k
                draws[chosen, i] = curve[lags[chosen]]
    out = {}
    for protocol, groups in (("personalized", listeners), ("generalized", stories)):
        weights = (groups[:, None] == np.unique(groups)[None, :]).astype(float)
        weights /= weights.sum(axis=0, keepdims=True)
        null = (draws @ weights).mean(axis=1)
        out[protocol] = (float(null.mean()), float(np.quantile(null, 0.95)))
    return out
