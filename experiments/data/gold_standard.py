"""A gold standard from each session's own raters' traces (a registered method of
:data:`~experiments.config.gold_standard.GOLD_STANDARDS`: ``mean``, ``ewe``, ``mean_z``,
``ccc_centred``; lags aligned or not; docs/store.md, raters), and how well the raters agree
(docs/results.md, Inter-rater agreement)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import combinations

import numpy as np

from featurestore.concordance import ccc

from ..config.gold_standard import GoldStandard

__all__ = ["GoldStandard"]


def shift(y: np.ndarray, lag: int) -> np.ndarray:
    """``y`` moved ``lag`` frames earlier (``out[t] = y[t + lag]``), NaN where nothing is left.

    >>> shift(np.array([1.0, 2.0, 3.0]), 1)
    array([ 2.,  3., nan])
    """
    y = np.asarray(y, dtype=np.float64)
    out = np.full_like(y, np.nan)
    if lag >= 0:
        out[: len(y) - lag] = y[lag:]
    else:
        out[-lag:] = y[: len(y) + lag]
    return out


def _pearson(a: np.ndarray, b: np.ndarray) -> float:
    ok = np.isfinite(a) & np.isfinite(b)
    if ok.sum() < 2:
        return float("nan")
    a, b = a[ok], b[ok]
    if a.std() == 0 or b.std() == 0:
        return 0.0
    return float(np.corrcoef(a, b)[0, 1])


Traces = Sequence[Mapping[str, np.ndarray]]  #: per session: rater -> (n_frames,) trace


def _mean_of(traces: Mapping[str, np.ndarray], raters: Sequence[str]) -> np.ndarray:
    stack = np.stack([np.asarray(traces[r], dtype=np.float64) for r in raters])
    with np.errstate(all="ignore"):
        n = np.sum(np.isfinite(stack), axis=0)
        return np.where(n > 0, np.nansum(stack, axis=0) / np.maximum(n, 1), np.nan)


def _others(traces: Mapping[str, np.ndarray], r: str, lags: Mapping[str, int]) -> np.ndarray:
    others = {o: shift(y, lags.get(o, 0)) for o, y in traces.items() if o != r}
    return _mean_of(others, sorted(others))


def estimate_lags(
    sessions: Traces, fps: float, max_lag_s: float = 5.0, iterations: int = 10
) -> dict[str, int]:
    """Each rater's reaction lag in frames relative to the earliest rater: the shift within ``max_lag_s`` maximising
    the CCC with the mean of the others, rater after rater, in rounds until no lag changes. A shift is at most a
    quarter of the shortest session with several raters (on less overlap a chance match outscores the true lag)."""
    raters = sorted({r for s in sessions for r in s})
    lags = dict.fromkeys(raters, 0)
    multi = [s for s in sessions if len(s) > 1]
    shortest = min((len(next(iter(s.values()))) for s in multi), default=0)
    max_lag = min(int(round(max_lag_s * fps)), shortest // 4)
    for _ in range(iterations):
        before = dict(lags)
        for r in raters:  # each rater against the others as currently aligned
            mine = [(np.asarray(s[r], np.float64), _others(s, r, lags)) for s in multi if r in s]
            if not mine:
                continue
            b = np.concatenate([ref for _, ref in mine])
            best, best_lag = -np.inf, 0
            for lag in range(-max_lag, max_lag + 1):
                c = ccc(np.concatenate([shift(y, lag) for y, _ in mine]), b, nan="drop")
                if np.isfinite(c) and c > best + 1e-12:
                    best, best_lag = c, lag
            lags[r] = best_lag
        low = min(lags.values()) if lags else 0
        lags = {r: v - low for r, v in lags.items()}
        if lags == before:
            break
    return lags


def ewe_weights(sessions: Traces, lags: Mapping[str, int] | None = None) -> dict[str, float]:
    """EWE weights: each rater's Pearson correlation with the mean of the others, clipped at 0, normalised."""
    lags = lags or {}
    raters = sorted({r for s in sessions for r in s})
    raw = {}
    for r in raters:
        pairs = [
            (shift(s[r], lags.get(r, 0)), _others(s, r, lags))
            for s in sessions
            if r in s and len(s) > 1
        ]
        if not pairs:
            raw[r] = 0.0
            continue
        c = _pearson(np.concatenate([a for a, _ in pairs]), np.concatenate([b for _, b in pairs]))
        raw[r] = max(0.0, c) if np.isfinite(c) else 0.0
    total = sum(raw.values())
    if total <= 0:
        return {r: 1.0 / len(raters) for r in raters}
    return {r: w / total for r, w in raw.items()}


def combine(
    traces: Mapping[str, np.ndarray],
    weights: Mapping[str, float] | None = None,
    lags: Mapping[str, int] | None = None,
) -> np.ndarray:
    """One session's gold standard: the weighted mean of the raters present, each moved ``lags[r]`` frames."""
    lags = lags or {}
    raters = sorted(traces)
    stack = np.stack([shift(traces[r], lags.get(r, 0)) for r in raters])
    w = np.array([1.0 if weights is None else float(weights.get(r, 0.0)) for r in raters])
    present = np.isfinite(stack)
    wsum = (present * w[:, None]).sum(axis=0)
    with np.errstate(all="ignore"):
        out = np.where(wsum > 0, np.nansum(stack * w[:, None], axis=0) / wsum, np.nan)
    return out.astype(np.float32)


def mean_fusion(traces: Mapping[str, np.ndarray]) -> tuple[np.ndarray, dict[str, float]]:
    """``mean``: the mean of the raters present at each frame."""
    weights = {r: 1.0 / len(traces) for r in sorted(traces)}
    return combine(traces, weights), weights


def ewe_fusion(traces: Mapping[str, np.ndarray]) -> tuple[np.ndarray, dict[str, float]]:
    """``ewe``: the raters weighted by :func:`ewe_weights`."""
    weights = ewe_weights([traces])
    return combine(traces, weights), weights


def _level_and_spread(y: np.ndarray) -> tuple[float, float]:
    finite = y[np.isfinite(y)]
    return (float(finite.mean()), float(finite.std())) if finite.size else (0.0, 0.0)


def mean_z_fusion(traces: Mapping[str, np.ndarray]) -> tuple[np.ndarray, dict[str, float]]:
    """``mean_z``: each rater z-normalised on its frames of the session (a constant rater centred
    only), the mean of those, then scaled by the raters' mean standard deviation and moved to
    their mean level, so that the label keeps the target's units.

    >>> y, w = mean_z_fusion({"a": np.array([0.0, 0.2, 0.4]), "b": np.array([0.4, 0.5, 0.6])})
    >>> [round(float(v), 4) for v in y], w
    ([0.2, 0.35, 0.5], {'a': 0.5, 'b': 0.5})
    """
    stats = {r: _level_and_spread(np.asarray(y, np.float64)) for r, y in traces.items()}
    z = {
        r: (np.asarray(y, np.float64) - stats[r][0]) / (stats[r][1] or 1.0)
        for r, y in traces.items()
    }
    spreads = [sd for _, sd in stats.values() if sd > 0]
    fused, weights = mean_fusion(z)
    level = float(np.mean([mu for mu, _ in stats.values()]))
    scale = float(np.mean(spreads)) if spreads else 0.0
    return (fused.astype(np.float64) * scale + level).astype(np.float32), weights


def ccc_centred_fusion(traces: Mapping[str, np.ndarray]) -> tuple[np.ndarray, dict[str, float]]:
    """``ccc_centred`` (AVEC 2018's gold standard, as its paper describes it): each rater centred on
    its own mean over the session, weighted by the CCC of its centred trace with the mean of the
    others' (clipped at 0, normalised; equal weights when none agrees or alone), plus the weighted
    mean of the raters' means.

    >>> a, b, c = [0.0, 0.2, 0.4, 0.6], [0.1, 0.3, 0.4, 0.7], [0.6, 0.2, 0.5, 0.1]  # c disagrees
    >>> y, w = ccc_centred_fusion({"a": np.array(a), "b": np.array(b), "c": np.array(c)})
    >>> [round(float(v), 4) for v in y], {r: round(v, 4) for r, v in w.items()}
    ([0.0442, 0.2442, 0.4, 0.6442], {'a': 0.5579, 'b': 0.4421, 'c': 0.0})
    """
    raters = sorted(traces)
    levels = {r: _level_and_spread(np.asarray(traces[r], np.float64))[0] for r in raters}
    centred = {r: np.asarray(traces[r], np.float64) - levels[r] for r in raters}
    raw = {}
    for r in raters:  # agreement in shape and range: an offset is no disagreement once centred
        c = ccc(centred[r], _others(centred, r, {}), nan="drop") if len(raters) > 1 else 0.0
        raw[r] = max(0.0, c) if np.isfinite(c) else 0.0
    total = sum(raw.values())
    weights = {r: (raw[r] / total if total > 0 else 1.0 / len(raters)) for r in raters}
    level = sum(weights[r] * levels[r] for r in raters)
    return (combine(centred, weights).astype(np.float64) + level).astype(np.float32), weights


def gold_standard(
    traces: Mapping[str, np.ndarray], gs: GoldStandard, fps: float
) -> tuple[np.ndarray, dict[str, float], dict[str, int]]:
    """One session's gold standard under ``gs`` from its own raters' ``traces`` (each moved by its
    reaction lag first when ``gs.align_lags``), with the weights and lags used."""
    fuse = gs.spec.function()  # before the lags: `stored` has nothing to combine
    lags = estimate_lags([traces], fps, gs.max_lag_s) if gs.align_lags else {}
    moved = {r: shift(traces[r], lags.get(r, 0)) for r in sorted(traces)}
    y, weights = fuse(moved)
    return np.asarray(y, dtype=np.float32), weights, lags


def gold_standards(
    sessions: Traces, gs: GoldStandard, fps: float
) -> tuple[list[np.ndarray], list[dict[str, float]], list[dict[str, int]]]:
    """Every session's :func:`gold_standard`: the labels, the weights and the lags, each a list."""
    out = [gold_standard(s, gs, fps) for s in sessions]
    return [y for y, _, _ in out], [w for _, w, _ in out], [lag for _, _, lag in out]


def icc(ratings: np.ndarray) -> dict[str, float]:
    """ICC(2,1), ICC(3,1), ICC(2,k), ICC(3,k) of an (n, k) ratings matrix (docs/results.md, Inter-rater agreement)."""
    x = np.asarray(ratings, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] < 2 or x.shape[1] < 2 or not np.isfinite(x).all():
        raise ValueError("icc needs an (n>=2, k>=2) matrix of finite ratings")
    n, k = x.shape
    grand = x.mean()
    ss_rows = k * ((x.mean(axis=1) - grand) ** 2).sum()
    ss_cols = n * ((x.mean(axis=0) - grand) ** 2).sum()
    ss_err = ((x - grand) ** 2).sum() - ss_rows - ss_cols
    bms, jms = ss_rows / (n - 1), ss_cols / (k - 1)
    ems = ss_err / ((n - 1) * (k - 1))
    return {
        "ICC(2,1)": float((bms - ems) / (bms + (k - 1) * ems + k * (jms - ems) / n)),
        "ICC(3,1)": float((bms - ems) / (bms + (k - 1) * ems)),
        "ICC(2,k)": float((bms - ems) / (bms + (jms - ems) / n)),
        "ICC(3,k)": float((bms - ems) / bms),
    }


def mean_pairwise_ccc(traces: Mapping[str, np.ndarray]) -> float:
    """The mean over rater pairs of their CCC (frames where both rated)."""
    vals = [ccc(traces[a], traces[b], nan="drop") for a, b in combinations(sorted(traces), 2)]
    vals = [v for v in vals if np.isfinite(v)]
    return float(np.mean(vals)) if vals else float("nan")


def agreement(
    sessions: Mapping[str, Mapping[str, np.ndarray]], lags: Mapping[str, int] | None = None
) -> list[dict]:
    """ICC and mean pairwise CCC rows per session with several raters, then a ``pooled`` row."""
    lags = lags or {}
    rows, pooled_x, pooled_pairs = [], [], []
    raters_all = sorted({r for s in sessions.values() for r in s})
    for name, traces in sessions.items():
        if len(traces) < 2:
            continue
        moved = {r: shift(y, lags.get(r, 0)) for r, y in traces.items()}
        x = np.stack([moved[r] for r in sorted(moved)], axis=1)
        x = x[np.isfinite(x).all(axis=1)]
        row = {"session": name, "raters": len(moved), "n_frames": len(x)}
        row.update(icc(x) if len(x) >= 2 else {})
        row["mean_pairwise_ccc"] = mean_pairwise_ccc(moved)
        rows.append(row)
        if sorted(moved) == raters_all:
            pooled_x.append(x)
        pooled_pairs.append(moved)
    if pooled_pairs:
        row = {"session": "pooled", "raters": len(raters_all)}
        if pooled_x and sum(len(x) for x in pooled_x) >= 2:
            x = np.concatenate(pooled_x)
            row["n_frames"] = len(x)
            row.update(icc(x))
        cat = {
            r: np.concatenate(
                [m.get(r, np.full(len(next(iter(m.values()))), np.nan)) for m in pooled_pairs]
            )
            for r in raters_all
        }
        row["mean_pairwise_ccc"] = mean_pairwise_ccc(cat)
        rows.append(row)
    return rows
