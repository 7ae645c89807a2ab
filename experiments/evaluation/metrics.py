"""A split's per-session scores averaged as OMG-Empathy's two protocols (personalized: over
listeners of each one's mean over stories; generalized: over stories of each one's mean over
listeners), or concatenated (AVEC). The value column is the metric's name (default ``ccc``).

>>> rows = [{"listener": 1, "story": 1, "ccc": 0.2}, {"listener": 1, "story": 2, "ccc": 0.4},
...         {"listener": 2, "story": 1, "ccc": 0.6}]
>>> {k: round(v, 4) for k, v in protocol_means(rows).items()}
{'personalized': 0.45, 'generalized': 0.4}
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from ..config.metrics import DEFAULT_METRIC, ccc, get_metric

__all__ = ["ccc", "score_matrix", "listener_means", "story_means", "protocol_means"]

#: a table of per-session scores: a DataFrame, or rows of ``{listener, story, <column>}``
Scores = pd.DataFrame | Iterable[Mapping]


def _protocol_frame(df: Scores, column: str = DEFAULT_METRIC) -> pd.DataFrame:
    """``df``'s ``listener, story, <column>``, one row per session, sorted (means independent of
    order); ValueError if a column is missing or a session has two rows."""
    frame = df if isinstance(df, pd.DataFrame) else pd.DataFrame(list(df))
    missing = [c for c in ("listener", "story", column) if c not in frame.columns]
    if missing:
        raise ValueError(
            f"score table lacks columns {missing}; expected listener, story, {column} (one row per session)"
        )
    frame = frame[["listener", "story", column]].astype({column: float})
    dup = frame.duplicated(["listener", "story"], keep=False)
    if dup.any():
        pairs = sorted(
            {(int(a), int(b)) for a, b in frame.loc[dup, ["listener", "story"]].to_numpy()}
        )
        raise ValueError(f"score table has more than one row for (listener, story) {pairs[:5]}")
    return frame.sort_values(["listener", "story"], kind="stable").reset_index(drop=True)


def listener_means(df: Scores, column: str = DEFAULT_METRIC) -> pd.Series:
    """Mean score over each listener's stories (index: listener)."""
    return _protocol_frame(df, column).groupby("listener", sort=True)[column].mean()


def story_means(df: Scores, column: str = DEFAULT_METRIC) -> pd.Series:
    """Mean score over each story's listeners (index: story)."""
    return _protocol_frame(df, column).groupby("story", sort=True)[column].mean()


def protocol_means(df: Scores, column: str = DEFAULT_METRIC) -> dict[str, float]:
    """Both challenge protocols from per-session scores (see the module docstring).

    Raises:
        ValueError: an empty table (or as :func:`_protocol_frame`).
    """
    f = _protocol_frame(df, column)
    if f.empty:
        raise ValueError("score table is empty; there is nothing to average")
    return {
        "personalized": float(listener_means(f, column).mean()),
        "generalized": float(story_means(f, column).mean()),
    }


def concatenated_score(
    truth: Mapping[str, np.ndarray],
    predictions: Mapping[str, np.ndarray],
    sessions: Sequence[str],
    metric: str = DEFAULT_METRIC,
) -> float:
    """The metric of ``sessions`` concatenated (AVEC), over every frame with a finite label.

    >>> y = {"a": np.array([0.0, 1.0]), "b": np.array([2.0, 3.0])}
    >>> round(concatenated_score(y, y, ["a", "b"]), 6)
    1.0
    """
    ys = np.concatenate([np.asarray(truth[s], float) for s in sessions])
    ps = np.concatenate([np.asarray(predictions[s], float) for s in sessions])
    ok = np.isfinite(ys)
    return get_metric(metric)(ys[ok], ps[ok])


def score_matrix(rows: Scores, column: str = DEFAULT_METRIC) -> pd.DataFrame:
    """Per-session scores as a listeners x stories table (NaN where a session is missing)."""
    m = _protocol_frame(rows, column).pivot(index="listener", columns="story", values=column)
    m.index.name, m.columns.name = "listener", "story"
    return m
