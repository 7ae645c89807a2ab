"""The windowed features of one window key: a float32 matrix and the labels per session."""

from __future__ import annotations

import concurrent.futures as cf
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np

from ..config.grid import WindowKey
from ..data.session_table import SessionTable
from .stats import feature_name, window_stats


@dataclass
class WindowedSession:
    """A session's windowed features for one :class:`WindowKey`."""

    session: str
    listener: int
    story: int
    split: str
    F: np.ndarray  # (n_frames, p) float32
    y: np.ndarray  # (n_frames,) float32
    fps: float


@dataclass
class Windowed:
    key: WindowKey
    sessions: list[WindowedSession]
    names: list[str]


def window_sessions(
    tables: Sequence[SessionTable],
    key: WindowKey,
    threads: int = 1,
    windowed: Callable[[int], None] | None = None,
) -> Windowed:
    """Windowed features of ``key``'s channels for every session (``valid_frac`` per channel, the
    other statistics per column). ``threads`` > 1 windows that many sessions at a time (the same
    result); ``windowed(i)`` is called once ``tables[i]`` is windowed, e.g. to drop it."""

    def one(i: int) -> tuple[WindowedSession, list[str]]:
        out = _window_session(tables[i], key)
        if windowed is not None:
            windowed(i)
        return out

    if threads > 1 and len(tables) > 1:
        with cf.ThreadPoolExecutor(threads, thread_name_prefix="window") as pool:
            done = list(pool.map(one, range(len(tables))))
    else:
        done = [one(i) for i in range(len(tables))]
    names = done[0][1] if done else []
    return Windowed(key, [w for w, _ in done], names)


def key_layout(
    key: WindowKey,
    columns: Sequence[str],
    channels: Sequence[str],
    column_channel: np.ndarray,
    where: str = "",
) -> tuple[list[str], list[int], np.ndarray, list[str]]:
    """What ``key`` windows of a frame table with these ``columns``, ``channels`` and
    ``column_channel`` (:class:`SessionTable`'s): (the statistics but ``valid_frac``, the
    indices of its channels, of their columns, the feature names in their order)."""
    missing = [c for c in key.channels if c not in channels]
    if missing:
        raise KeyError(
            f"{where}: feature set {key.feature_set!r} needs {missing}, loaded: {list(channels)}"
        )
    stats = [s for s in key.stats if s != "valid_frac"]
    ch_idx = [list(channels).index(c) for c in key.channels]
    cols = np.flatnonzero(np.isin(column_channel, ch_idx))
    names = [
        feature_name(columns[int(i)], s, L) for L in key.lengths_s for s in stats for i in cols
    ]
    if "valid_frac" in key.stats:
        names += [feature_name(c, "valid_frac", L) for L in key.lengths_s for c in key.channels]
    return stats, ch_idx, cols, names


def _window_session(t: SessionTable, key: WindowKey) -> tuple[WindowedSession, list[str]]:
    stats, ch_idx, cols, names = key_layout(key, t.columns, t.channels, t.column_channel, t.session)
    n_stats = len(cols) * len(stats) * len(key.lengths_s)
    F = np.empty((t.n_frames, len(names)), dtype=np.float32)
    windowed = partial(
        window_stats, fps=t.fps, lengths_s=key.lengths_s, delay_s=key.delay_s, align=key.align
    )
    if stats:
        X = t.X if len(cols) == t.X.shape[1] else t.X[:, cols]  # all columns: no copy
        windowed(X, t.valid[:, t.column_channel[cols]], stats=stats, out=F[:, :n_stats])
    if len(names) > n_stats:
        windowed(
            np.where(t.valid[:, ch_idx], 1.0, np.nan),
            None,
            stats=["valid_frac"],
            out=F[:, n_stats:],
        )
    session = WindowedSession(
        t.session, t.listener, t.story, t.split, F, np.asarray(t.y, np.float32), t.fps
    )
    return session, names
