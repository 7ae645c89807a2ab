"""The windowed features of one window key: a float32 matrix and the labels per session."""

from __future__ import annotations

import concurrent.futures as cf
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np

from ..config.grid import WindowKey
from ..data.session_table import SessionTable
from .stats import window_stats


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


def _window_session(t: SessionTable, key: WindowKey) -> tuple[WindowedSession, list[str]]:
    stats = [s for s in key.stats if s != "valid_frac"]
    missing = [c for c in key.channels if c not in t.channels]
    if missing:
        raise KeyError(
            f"{t.session}: feature set {key.feature_set!r} needs {missing}, loaded: {t.channels}"
        )
    ch_idx = [t.channels.index(c) for c in key.channels]
    cols = np.flatnonzero(np.isin(t.column_channel, ch_idx))
    n_stats = len(cols) * len(stats) * len(key.lengths_s)
    n_frac = len(ch_idx) * len(key.lengths_s) if "valid_frac" in key.stats else 0
    F = np.empty((t.n_frames, n_stats + n_frac), dtype=np.float32)
    names: list[str] = []
    windowed = partial(
        window_stats, fps=t.fps, lengths_s=key.lengths_s, delay_s=key.delay_s, align=key.align
    )
    if stats:
        X = t.X if len(cols) == t.X.shape[1] else t.X[:, cols]  # all columns: no copy
        _, nm = windowed(
            X,
            t.valid[:, t.column_channel[cols]],
            stats=stats,
            columns=[t.columns[i] for i in cols],
            out=F[:, :n_stats],
        )
        names += nm
    if n_frac:
        _, nm = windowed(
            np.where(t.valid[:, ch_idx], 1.0, np.nan),
            None,
            stats=["valid_frac"],
            columns=list(key.channels),
            out=F[:, n_stats:],
        )
        names += nm
    session = WindowedSession(
        t.session, t.listener, t.story, t.split, F, np.asarray(t.y, np.float32), t.fps
    )
    return session, names
