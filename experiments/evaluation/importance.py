"""Permutation importance: the drop in a configuration's metric when a channel's, a column's or a
window statistic's features are moved in time, with a 95 % interval over listeners
(docs/results.md, "What drives a prediction: permutation importance").

>>> [g.name for g in feature_groups(["listener/face/AU12:mean@4s", "listener/face:valid_frac@4s"],
...                                   ["listener/face"], ["channel", "column", "stat"])]
['listener/face', 'listener/face/AU12', 'mean', 'valid_frac']
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from ..config.grid import Trial
from ..config.metrics import DEFAULT_METRIC, MetricSpec, get_metric
from ..config.options import IMPORTANCE_LEVELS
from ..windowing.windowed import Windowed, WindowedSession
from .evaluate import postprocessed, split_sessions
from .fit_cache import FitCache, FitScope
from .fitting import FitPart, Fitted, fit_group, fit_main
from .uncertainty import MIN_LAG_S, contributions, mean_interval

#: the kinds of feature groups, see the module docstring
LEVELS = IMPORTANCE_LEVELS


def importance_columns(m: MetricSpec) -> list[str]:
    """The columns of ``reports/importance_<feature_set>_<track>.csv`` for metric ``m``
    (docs/design.md#reports)."""
    return [
        *"feature_set track split level group rank importance ci_low ci_high sd_repeats".split(),
        m.name,
        m.column("permuted"),
        *"n_features n_listeners repeats".split(),
    ]


#: :func:`importance_columns` of the default metric
COLUMNS = importance_columns(get_metric(DEFAULT_METRIC))


@dataclass(frozen=True)
class FeatureGroup:
    """Features permuted together: ``level``, ``name``, their column ``indices``."""

    level: str
    name: str
    indices: tuple[int, ...]


def _parse(name: str, channels: Sequence[str]) -> tuple[str, str | None, str]:
    """(channel, column or None for a channel's own statistic, statistic) of a feature name."""
    base, _, rest = name.rpartition(":")
    stat = rest.split("@", 1)[0]
    for ch in sorted(channels, key=len, reverse=True):
        if base == ch:
            return ch, None, stat
        if base.startswith(ch + "/"):
            return ch, base, stat
    raise ValueError(
        f"windowed feature {name!r} belongs to none of the channels {list(channels)}; "
        "names are <role/channel/column>:<stat>@<L>s"
    )


def feature_groups(
    names: Sequence[str], channels: Sequence[str], levels: Sequence[str] = ("channel", "column")
) -> list[FeatureGroup]:
    """The groups of ``levels`` over windowed features ``names``, by level then first appearance
    (ValueError: an unknown level, or a name of no channel)."""
    bad = [lv for lv in levels if lv not in LEVELS]
    if bad:
        raise ValueError(f"unknown importance levels {bad}; valid: {', '.join(LEVELS)}")
    parsed = [_parse(n, channels) for n in names]
    out: list[FeatureGroup] = []
    for level in levels:
        members: dict[str, list[int]] = {}
        for i, (ch, col, stat) in enumerate(parsed):
            key = {"channel": ch, "column": col, "stat": stat}[level]
            if key is not None:
                members.setdefault(key, []).append(i)
        out += [FeatureGroup(level, k, tuple(v)) for k, v in members.items()]
    return out


def draw_lags(
    sessions: Sequence[WindowedSession], repeats: int, min_lag_s: float = MIN_LAG_S, seed: int = 0
) -> np.ndarray:
    """(repeats, sessions) circular lags, uniform in ``lo .. n - lo`` (``lo``: ``min_lag_s``, at most n / 4)."""
    rng = np.random.default_rng(seed)
    lags = np.zeros((repeats, len(sessions)), dtype=np.int64)
    for j, s in enumerate(sessions):
        n = len(s.y)
        lo = min(int(round(min_lag_s * s.fps)), n // 4)
        lags[:, j] = rng.integers(lo, max(lo, n - lo) + 1, size=repeats)
    return lags


def shifted(F: np.ndarray, indices: Sequence[int], lag: int) -> np.ndarray:
    """A copy of ``F`` with columns ``indices`` rolled by ``lag`` frames (row t gets row t - lag).

    >>> shifted(np.arange(6.0).reshape(3, 2), [1], 1).tolist()
    [[0.0, 5.0], [2.0, 1.0], [4.0, 3.0]]
    """
    out = F.copy()
    idx = list(indices)
    out[:, idx] = np.roll(F[:, idx], int(lag), axis=0)
    return out


@dataclass
class ImportanceResult:
    """``table``: one row per group; ``drops``: mean drop over repeats per group and session;
    ``scores``: the unpermuted per-session values of the split."""

    table: pd.DataFrame
    drops: pd.DataFrame
    scores: pd.DataFrame


def _session_values(
    sessions: Sequence[WindowedSession], preds: dict[str, np.ndarray], m: MetricSpec
) -> np.ndarray:
    ok = [np.isfinite(s.y) for s in sessions]
    return np.array([m(s.y[k], preds[s.session][k]) for s, k in zip(sessions, ok, strict=True)])


def permutation_importance(
    trial: Trial,
    w: Windowed,
    levels: Sequence[str] = ("channel", "column"),
    repeats: int = 5,
    split: str = "test",
    track: str | None = None,
    seed: int = 0,
    min_lag_s: float = MIN_LAG_S,
    cache: FitCache | None = None,
) -> ImportanceResult:
    """Permutation importance of ``trial``'s feature groups of ``levels`` on ``split`` under
    ``track``'s averaging (default the trial's), ``w`` moved by ``repeats`` lags of at least
    ``min_lag_s`` s per session; fits of ``cache`` reused. The table is sorted by level, then
    importance (the drop in the metric; positive: the group helps); ``rank`` 1: largest drop.

    Raises:
        ValueError: no sessions of ``split``, no training sessions, ``repeats`` < 1, or ``val``
            under protocol ``loso`` (its predictions come from several fits).
    """
    return permutation_importances(
        [(trial, track)], w, levels, repeats, split, seed, min_lag_s, cache
    )[0]


def permutation_importances(
    choices: Sequence[tuple[Trial, str | None]],
    w: Windowed,
    levels: Sequence[str] = ("channel", "column"),
    repeats: int = 5,
    split: str = "test",
    seed: int = 0,
    min_lag_s: float = MIN_LAG_S,
    cache: FitCache | None = None,
) -> list[ImportanceResult]:
    """:func:`permutation_importance` of each (configuration, track) of one fit group, for the
    cost of one: fits and permuted predictions made once, post-processed and scored per choice.

    Raises:
        ValueError: as :func:`permutation_importance`, or ``choices`` of several fit groups.
    """
    if not choices:
        return []
    tracks = _check_choices(choices, repeats)
    trial = choices[0][0]  # the splits and the protocol are the group's
    train, scored = _train_and_scored(trial, w, split)
    scope = (cache or FitCache()).on(w.names)
    fitted = [_fitted(t, train, scored, scope, get_metric(trial.metric)) for t, _ in choices]
    lags = draw_lags(scored, repeats, min_lag_s, seed)
    groups = feature_groups(w.names, list(trial.channels), levels)
    m = get_metric(trial.metric)
    sign = 1.0 if m.higher_is_better else -1.0  # a drop is a loss, whichever way is better
    # per choice: the drop in the metric per (group, repeat, session)
    drops = [np.empty((len(groups), repeats, len(scored))) for _ in choices]
    for k, g in enumerate(groups):
        for r in range(repeats):
            # per model (the choices' predict functions are equal when they share it): its
            # predictions of the permuted sessions, made once
            made: list[tuple[Callable, dict[str, np.ndarray]]] = []
            for i, ((t, _), (predict, fits, base)) in enumerate(zip(choices, fitted, strict=True)):
                raw = next((m for p, m in made if p == predict), None)
                if raw is None:
                    raw = {
                        s.session: predict(replace(s, F=shifted(s.F, g.indices, lags[r, j])))
                        for j, s in enumerate(scored)
                    }
                    made.append((predict, raw))
                preds = postprocessed(t, replace(fits, evaluated=raw), train, scored)
                drops[i][k, r] = sign * (base - _session_values(scored, preds, m))
    return [
        _result(t, track, split, repeats, scored, groups, fitted[i][2], drops[i])
        for i, ((t, _), track) in enumerate(zip(choices, tracks, strict=True))
    ]


def _check_choices(choices: Sequence[tuple[Trial, str | None]], repeats: int) -> list[str]:
    """Each choice's track (default its configuration's), checked."""
    keys = {t.fit_key() for t, _ in choices}
    if len(keys) > 1:
        raise ValueError(
            f"importance computed together needs one fit group, got {len(keys)}: "
            + "; ".join(t.label() for t, _ in choices)
        )
    tracks = [track or trial.track for trial, track in choices]
    bad = [t for t in tracks if t not in ("personalized", "generalized")]
    if bad:
        raise ValueError(f"track must be personalized or generalized, got {bad[0]!r}")
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    return tracks


def _train_and_scored(
    trial: Trial, w: Windowed, split: str
) -> tuple[list[WindowedSession], list[WindowedSession]]:
    """(fitted on: training stories, with ``loso`` validation too; scored: ``split``'s)."""
    parts = split_sessions(w, dict(trial.splits))
    if trial.protocol == "loso":
        if split != "test":
            raise ValueError("under protocol loso only test is predicted by one fitted model")
        train = parts["train"] + parts["val"]
    else:
        train = parts["train"]
    scored = parts.get(split, [])
    if not scored or not train:
        raise ValueError(
            f"{trial.label()}: {len(train)} training and {len(scored)} {split} sessions; "
            f"both are needed (splits {dict(trial.splits)})"
        )
    return train, scored


def _fitted(
    trial: Trial,
    train: list[WindowedSession],
    scored: list[WindowedSession],
    scope: FitScope,
    m: MetricSpec,
) -> tuple[Callable[[WindowedSession], np.ndarray], Fitted, np.ndarray]:
    """``trial``'s predict function and fits as the run made them, and its unpermuted per-session ``m``."""
    need_post_fit = trial.rescale != "none"
    predict, main = fit_main(trial, train, scored, need_post_fit, scope)
    fits = fit_group(
        trial, train, scored, need_post_fit, False, {FitPart("main"): main}, cache=scope
    )
    return predict, fits, _session_values(scored, postprocessed(trial, fits, train, scored), m)


def _result(
    trial: Trial,
    track: str,
    split: str,
    repeats: int,
    scored: Sequence[WindowedSession],
    groups: Sequence[FeatureGroup],
    base: np.ndarray,
    drops_by_group: np.ndarray,
) -> ImportanceResult:
    """``trial``'s result from its unpermuted values ``base`` and drops (groups, repeats, sessions)."""
    m = get_metric(trial.metric)
    sign, bounds = (1.0 if m.higher_is_better else -1.0), m.diff_bounds
    columns = importance_columns(m)
    listeners = np.array([s.listener for s in scored])
    stories = np.array([s.story for s in scored])
    sessions = {"session": [s.session for s in scored], "listener": listeners, "story": stories}
    share = _share(listeners, stories, track)
    rows, drops = [], []
    base_mean = float(share(base).mean())
    for g, per_repeat in zip(groups, drops_by_group, strict=True):
        drop = per_repeat.mean(axis=0)
        by_listener = share(drop)
        low, high = mean_interval(by_listener, bounds=bounds) if m.intervals else (np.nan, np.nan)
        importance = float(by_listener.mean())
        sd = np.std([share(d).mean() for d in per_repeat], ddof=1) if repeats > 1 else np.nan
        rows.append(
            {
                "feature_set": trial.feature_set,
                "track": track,
                "split": split,
                "level": g.level,
                "group": g.name,
                "importance": importance,
                "ci_low": low,
                "ci_high": high,
                "sd_repeats": float(sd),
                m.name: base_mean,
                m.column("permuted"): base_mean - sign * importance,
                "n_features": len(g.indices),
                "n_listeners": len(np.unique(listeners)),
                "repeats": repeats,
            }
        )
        drops.append(pd.DataFrame({"level": g.level, "group": g.name, **sessions, "drop": drop}))
    table = pd.DataFrame(rows, columns=[c for c in columns if c != "rank"])
    order = {lv: i for i, lv in enumerate(LEVELS)}
    table = table.sort_values(
        ["level", "importance"], key=lambda c: c.map(order) if c.name == "level" else -c
    ).reset_index(drop=True)
    table.insert(5, "rank", table.groupby("level").cumcount() + 1)
    scores = pd.DataFrame({**sessions, "split": split, m.name: base})
    return ImportanceResult(table[columns], pd.concat(drops, ignore_index=True), scores)


def _share(
    listeners: np.ndarray, stories: np.ndarray, track: str
) -> Callable[[np.ndarray], np.ndarray]:
    """Per-session values -> each listener's contribution to ``track``'s mean of them."""
    rows_l, cols_s = np.unique(listeners), np.unique(stories)
    li, si = np.searchsorted(rows_l, listeners), np.searchsorted(cols_s, stories)

    def share(values: np.ndarray) -> np.ndarray:
        m = np.full((len(rows_l), len(cols_s)), np.nan)
        m[li, si] = values
        return contributions(m)[track]

    return share
