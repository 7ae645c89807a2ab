"""The windowed features of one window key frame by frame, equal bit for bit to
:func:`~.windowed.window_sessions` (the same compiled per-frame step on a ring of recent frames).

>>> import numpy as np
>>> from experiments.config.grid import WindowKey
>>> key = WindowKey("f", ("a/b",), (0.08,), 0.0, "causal", ("mean", "valid_frac"))
>>> s = StreamingWindows(key, ["a/b/x"], ["a/b"], np.zeros(1, np.int64), fps=25.0)
>>> s.names
['a/b/x:mean@0.08s', 'a/b:valid_frac@0.08s']
>>> [s.push(np.array([v], np.float32), np.array([ok])).tolist() for v, ok in [(1, 1), (3, 1), (5, 0), (7, 1)]]
[[1.0, 1.0], [2.0, 1.0], [3.0, 0.5], [7.0, 0.5]]
"""

from __future__ import annotations

from collections.abc import Sequence

import numba
import numpy as np

from featurestore.storage.store import LABEL_FPS

from ..config.grid import WindowKey, lookahead_frames
from ..config.options import STATS
from .stats import (
    _JIT,
    _check_args,
    _extremes_state,
    _first_places,
    _frame_step,
    _needs_extremes,
    window_bounds,
)
from .windowed import key_layout


class StreamingWindows:
    """``key``'s windowed features of a frame table laid out as ``columns``, ``channels`` and
    ``column_channel`` (a :class:`~experiments.data.session_table.SessionTable`'s) at ``fps``,
    one frame at a time: :meth:`push` returns frame t's row of ``window_sessions([table], key)``
    (``names``: its feature names). A key whose windows read later frames is refused."""

    def __init__(
        self,
        key: WindowKey,
        columns: Sequence[str],
        channels: Sequence[str],
        column_channel: np.ndarray,
        fps: float = LABEL_FPS,
    ):
        lengths = [float(L) for L in key.lengths_s]
        _check_args(len(columns), list(columns), key.stats, key.align, fps, lengths)
        ahead = lookahead_frames(key.lengths_s, key.delay_s, key.align, fps=fps)
        if ahead > 0:
            need = ahead + round(float(key.delay_s) * fps)
            raise ValueError(
                f"window key {key.lengths_s} s, delay {key.delay_s:g} s, {key.align}: its windows "
                f"read {ahead:g} frames ({ahead / fps:g} s) after the frame, so it cannot stream; "
                f"use align causal, or a delay of at least {need / fps:g} s"
            )
        column_channel = np.asarray(column_channel, dtype=np.int64)
        if column_channel.shape != (len(columns),):
            raise ValueError(
                f"column_channel must give each of the {len(columns)} columns its channel, "
                f"got shape {column_channel.shape}"
            )
        stats, ch_idx, cols, self.names = key_layout(key, columns, channels, column_channel)
        self.key, self.fps, self.n_frames = key, float(fps), 0
        self._shape = (len(columns), len(channels))
        bounds = np.array([window_bounds(0, L, key.delay_s, fps, key.align) for L in lengths])
        ring = int(2 - bounds[:, 0].min())  # frames t + offset - 1 (leaving) .. t
        codes = np.array([STATS.index(s) for s in stats], dtype=np.int64)
        frac = np.array([STATS.index("valid_frac")] * ("valid_frac" in key.stats), np.int64)
        self._args = (
            (cols.astype(np.int64), column_channel[cols], np.array(ch_idx, dtype=np.int64)),
            bounds.astype(np.int64),
            self.fps,
            _state(ring, len(cols), bounds, codes, np.float32),
            _state(ring, len(ch_idx), bounds, frac, np.float64),
        )
        self._out = np.empty(len(self.names), dtype=np.float32)

    def push(self, x: np.ndarray, valid: np.ndarray) -> np.ndarray:
        """Frame t's features (float32, in the order of ``names``) from its values ``x`` (every
        column of the table, NaN = missing) and ``valid`` (one flag per channel)."""
        x = np.asarray(x, dtype=np.float32)
        valid = np.asarray(valid, dtype=np.bool_)
        if x.shape != self._shape[:1] or valid.shape != self._shape[1:]:
            raise ValueError(
                f"push takes one frame: {self._shape[0]} values and {self._shape[1]} channel "
                f"flags, got shapes {x.shape} and {valid.shape}"
            )
        _push(x, valid, self.n_frames, self._out, *self._args)
        self.n_frames += 1
        return self._out.copy()


def _state(ring: int, d: int, bounds: np.ndarray, codes: np.ndarray, dtype: type) -> tuple:
    """The ring of the last ``ring`` frames (and an all-NaN row), its centre (first present
    value per column; NaN: none yet) and the kernel state of :func:`~.stats._frame_step`."""
    z: np.ndarray = np.full((ring + 1, d), np.nan, dtype=dtype)
    first = _first_places(codes)
    G, H, hpos = _extremes_state(z, bounds, _needs_extremes(first))
    S = np.zeros((6, bounds.shape[0], d))
    return z, np.full(d, np.nan), codes, first, S, G, H, hpos, np.empty((len(STATS), d), np.float32)


@numba.njit(**_JIT)
def _push(
    x: np.ndarray,
    valid: np.ndarray,
    t: int,
    out: np.ndarray,
    layout: tuple,
    bounds: np.ndarray,
    fps: float,
    columns: tuple,
    masks: tuple,
) -> None:  # pragma: no cover - compiled
    """Store frame ``t`` in the rings of the ``columns`` (missing and invalid values as NaN) and
    of the channel ``masks`` (1 valid, NaN not), then write its statistics and valid fractions
    into ``out``; ``layout``: the table's columns and channels windowed, each column's channel."""
    cols, col_ch, ch = layout
    z, centre, codes, first, S, G, H, hpos, scratch = columns
    zm, centre_m, codes_m, first_m, Sm, Gm, Hm, hposm, scratch_m = masks
    slot = t % (z.shape[0] - 1)
    for j in range(cols.shape[0]):
        v = x[cols[j]]
        v = v if (abs(v) < np.inf) & valid[col_ch[j]] else np.float32(np.nan)
        z[slot, j] = v
        if centre[j] != centre[j] and v == v:
            centre[j] = v
    for j in range(ch.shape[0]):
        ok = valid[ch[j]]
        zm[slot, j] = 1.0 if ok else np.nan
        if centre_m[j] != centre_m[j] and ok:
            centre_m[j] = 1.0
    p = bounds.shape[0] * codes.shape[0] * cols.shape[0]
    if codes.shape[0]:
        _frame_step(z, t + 1, t, centre, bounds, codes, first, fps, S, G, H, hpos, out[:p], scratch)
    if codes_m.shape[0]:
        _frame_step(
            zm,
            t + 1,
            t,
            centre_m,
            bounds,
            codes_m,
            first_m,
            fps,
            Sm,
            Gm,
            Hm,
            hposm,
            out[p:],
            scratch_m,
        )
