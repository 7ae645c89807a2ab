"""Multi-scale window statistics per frame, with a label delay, vectorised per session.

For frame ``t`` (label rate ``fps``), a window of ``L`` seconds spans ``w = round(L * fps)``
frames (at least 1), positioned at ``c = t - delay``:

- ``centred``: frames ``c - w//2 .. c + w//2`` (an odd number of frames, ``2 * (w//2) + 1``);
- ``causal``: frames ``c - w + 1 .. c`` (``w`` frames ending at ``c``).

The label at ``t`` is thus predicted from what happened ``delay`` seconds earlier. A window is
truncated to the session: statistics are over the values present in its part inside
``[0, n)``; a window entirely before the start (large delays) has no values and gives NaN
(``valid_frac`` 0). NaN and infinite values are missing.

Statistics: ``mean``, ``std`` (population, ddof 0), ``min``, ``max``, ``slope`` (least-squares
slope of the present values against time, in units per second; NaN with fewer than two),
``valid_frac`` (present values / window frames inside the session). For one validity
fraction per channel instead of per column, call it on the channel mask:
``window_stats(np.where(valid, 1.0, np.nan), stats=["valid_frac"], ...)`` (``mean`` of the 0/1
mask gives the same inside the session but NaN, not 0, for windows entirely before it).

Implementation: prefix sums (float64, columns centred first; counts and time sums once per
distinct pattern of present values, i.e. once per channel) give mean, std, slope and
valid_frac for every frame at once, each window a difference of two slices;
running min and max come from one doubling table (``log2`` of the longest window passes) with
missing values set to +/-inf. Python loops run only over window lengths and doubling levels.

>>> import numpy as np
>>> F, names = window_stats(np.arange(5.0)[:, None], fps=1.0, lengths_s=[3], stats=["mean", "slope"],
...                         columns=["x"])
>>> names
['x:mean@3s', 'x:slope@3s']
>>> F[:, 0].tolist(), F[:, 1].tolist()
([0.5, 1.0, 2.0, 3.0, 3.5], [1.0, 1.0, 1.0, 1.0, 1.0])
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

STATS = ("mean", "std", "min", "max", "slope", "valid_frac")
ALIGNS = ("centred", "causal")


def window_frames(length_s: float, fps: float) -> int:
    """Window length in frames: ``round(length_s * fps)``, at least 1."""
    return max(1, int(round(float(length_s) * fps)))


def window_bounds(n: int, length_s: float, delay_s: float, fps: float, align: str) -> tuple[int, int]:
    """(offset, size): the window of frame ``t`` is frames ``t + offset .. t + offset + size - 1``."""
    w = window_frames(length_s, fps)
    d = int(round(float(delay_s) * fps))
    if align == "centred":
        half = w // 2
        return -d - half, 2 * half + 1
    if align == "causal":
        return -d - w + 1, w
    raise ValueError(f"align must be one of {', '.join(ALIGNS)}, got {align!r}")


def feature_name(column: str, stat: str, length_s: float) -> str:
    """Name of one windowed feature, e.g. ``listener/egemaps/loudness:mean@4s``."""
    return f"{column}:{stat}@{float(length_s):g}s"


def window_stats(
    X: np.ndarray,
    valid: np.ndarray | None = None,
    fps: float = 25.0,
    lengths_s: Sequence[float] = (4.0,),
    delay_s: float = 0.0,
    align: str = "centred",
    stats: Sequence[str] = ("mean", "std", "slope"),
    columns: Sequence[str] | None = None,
) -> tuple[np.ndarray, list[str]]:
    """Window statistics of every column for every frame.

    Args:
        X: (n_frames, d) values at ``fps``; NaN (or inf) = missing.
        valid: optional (n_frames, d) or (n_frames,) bool; False also marks a value missing.
        fps: frame rate of ``X`` (frames per second).
        lengths_s: window lengths in seconds (one multi-scale set).
        delay_s: label delay in seconds (>= 0 looks into the past): frame ``t`` gets the
            window positioned at ``t - delay``.
        align: ``centred`` or ``causal`` (see the module docstring).
        stats: any of ``mean, std, min, max, slope, valid_frac``.
        columns: d column names (default ``c0, c1, ...``).

    Returns:
        (F, names): F is (n_frames, d * len(stats) * len(lengths_s)) float32, ordered by window
        length, then statistic, then column; names are ``column:stat@<L>s``.
    """
    X = np.asarray(X)
    if X.ndim == 1:
        X = X[:, None]
    n, d = X.shape
    cols = [f"c{i}" for i in range(d)] if columns is None else [str(c) for c in columns]
    if len(cols) != d:
        raise ValueError(f"{d} columns in X but {len(cols)} names")
    bad = [s for s in stats if s not in STATS]
    if bad:
        raise ValueError(f"unknown statistics {bad}; valid: {', '.join(STATS)}")
    if align not in ALIGNS:
        raise ValueError(f"align must be one of {', '.join(ALIGNS)}, got {align!r}")
    if fps <= 0:
        raise ValueError(f"fps must be > 0, got {fps}")
    lengths = [float(L) for L in lengths_s]
    if not lengths or any(L <= 0 for L in lengths):
        raise ValueError(f"window lengths must be > 0 seconds, got {list(lengths_s)}")

    x = X.astype(np.float64, copy=True)
    present = np.isfinite(x)
    if valid is not None:
        v = np.asarray(valid, dtype=bool)
        present &= v[:, None] if v.ndim == 1 else v
    names = [feature_name(c, s, L) for L in lengths for s in stats for c in cols]
    out = np.empty((n, len(names)), dtype=np.float32)
    if n == 0 or d == 0:
        return out, names

    bounds = [window_bounds(n, L, delay_s, fps, align) for L in lengths]
    need_sums = any(s in stats for s in ("mean", "std", "slope", "valid_frac"))
    if need_sums:
        sums = _WindowSums(x, present, bounds, slope="slope" in stats, squares="std" in stats)
    extremes = {
        s: _RunningExtreme(x, present, bounds, op, fill)
        for s, op, fill in (("min", np.minimum, np.inf), ("max", np.maximum, -np.inf))
        if s in stats
    }
    del x

    j = 0
    for off, size in bounds:
        res: dict[str, np.ndarray] = {}
        if need_sums:
            res.update(sums.stats(off, size, stats, fps))
        for s, ext in extremes.items():
            res[s] = ext.window(off, size)
        for s in stats:
            out[:, j : j + d] = res[s]
            j += d
    return out, names


class _WindowSums:
    """Window sums of a column's present values (and their squares and times), by prefix sums.

    Prefix sums are padded with their first and last rows so that every window of every
    length is the difference of two row slices (views, no copies). Sums that depend only on
    which values are present (count, sum of frame indices and of their squares) are computed
    once per distinct presence pattern, not per column: the columns of one channel share it.
    Columns are centred first, which keeps the squared sums well conditioned.
    """

    def __init__(self, x: np.ndarray, present: np.ndarray, bounds: list[tuple[int, int]], slope: bool, squares: bool) -> None:
        n, d = x.shape
        self.n = n
        self.lo = max(0, max(-off for off, _ in bounds))
        self.hi = max(0, max(off + size - 1 for off, size in bounds))
        counts = present.sum(axis=0)
        self.centre = np.where(counts > 0, np.where(present, x, 0.0).sum(axis=0) / np.maximum(counts, 1), 0.0)
        xc = np.where(present, x - self.centre, 0.0)
        patterns, self.inverse = _distinct_columns(present)
        m = patterns.astype(np.float64)
        idx = np.arange(n, dtype=np.float64)[:, None]
        self.p_n = self._prefix(m)
        self.p_x = self._prefix(xc)
        self.p_xx = self._prefix(xc * xc) if squares else None
        if slope:
            self.p_i = self._prefix(idx * m)
            self.p_ii = self._prefix(idx * idx * m)
            xc *= idx
            self.p_ix = self._prefix(xc)

    def _prefix(self, a: np.ndarray) -> np.ndarray:
        """Rows ``lo + k`` hold the sum of ``a[:clip(k, 0, n)]`` for ``k`` in ``-lo .. n + hi``."""
        n = self.n
        p = np.empty((self.lo + n + 1 + self.hi, a.shape[1]), dtype=np.float64)
        p[: self.lo + 1] = 0.0
        np.cumsum(a, axis=0, out=p[self.lo + 1 : self.lo + 1 + n])
        p[self.lo + 1 + n :] = p[self.lo + n]
        return p

    def _window(self, p: np.ndarray, off: int, size: int) -> np.ndarray:
        """(n, k) sums over frames ``t + off .. t + off + size - 1`` clipped to the session."""
        a = self.lo + off
        return p[a + size : a + size + self.n] - p[a : a + self.n]

    def _columns(self, a: np.ndarray) -> np.ndarray:
        """A per-pattern array as one column per data column."""
        return a if self.inverse is None else a[:, self.inverse]

    def stats(self, off: int, size: int, stats: Sequence[str], fps: float) -> dict[str, np.ndarray]:
        """The requested sum-based statistics of one window position and size."""
        res: dict[str, np.ndarray] = {}
        cnt_p = self._window(self.p_n, off, size)
        cnt = self._columns(cnt_p)
        sx = self._window(self.p_x, off, size)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean_c = sx / cnt  # NaN where the window holds no value
            if "mean" in stats:
                res["mean"] = mean_c + self.centre
            if "std" in stats:
                var = self._window(self.p_xx, off, size)
                var /= cnt
                var -= mean_c * mean_c
                np.maximum(var, 0.0, out=var)  # keeps NaN, clips rounding below 0
                res["std"] = np.sqrt(var, out=var)
            if "slope" in stats:
                si = self._window(self.p_i, off, size)
                sii = self._window(self.p_ii, off, size)
                scale = cnt_p * sii
                den = scale - si * si
                # den is exactly 0 for one value; guard against rounding near 0 too
                den[(cnt_p < 2) | (den <= 1e-9 * np.maximum(scale, 1.0))] = np.nan
                num = self._window(self.p_ix, off, size)
                num *= cnt
                num -= self._columns(si) * sx
                num /= self._columns(den)
                num *= fps
                res["slope"] = num
            if "valid_frac" in stats:
                t = np.arange(self.n)
                inside = (np.clip(t + off + size, 0, self.n) - np.clip(t + off, 0, self.n)).astype(np.float64)[:, None]
                res["valid_frac"] = np.where(inside > 0, cnt / np.maximum(inside, 1.0), 0.0)
        return res


def _distinct_columns(present: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """(patterns, inverse): the distinct columns of a bool matrix and, per column, its pattern.

    ``inverse`` is None (use the columns as they are) when most columns are distinct anyway.
    """
    d = present.shape[1]
    if d < 2:
        return present, None
    packed = np.packbits(present, axis=0).T  # one row of bytes per column
    first: dict[bytes, int] = {}
    inverse = np.array([first.setdefault(row.tobytes(), len(first)) for row in packed], dtype=np.intp)
    if len(first) > d // 2:
        return present, None
    _, columns = np.unique(inverse, return_index=True)  # the first column of each pattern
    return present[:, columns], inverse


class _RunningExtreme:
    """Running minimum (or maximum) of present values for every window length at once.

    Doubling: level ``k`` holds the extreme of ``k`` consecutive frames, level ``2k`` the
    extreme of two level-``k`` values ``k`` apart; a window of ``size`` frames is the extreme
    of two overlapping level-``k`` values, ``k`` the largest power of two not above ``size``.
    That is ``log2(longest window)`` vectorised passes in all, shared by every length.
    Missing values are ``fill`` (+inf for the minimum, -inf for the maximum), and so are the
    frames outside the session (the padding), so windows are truncated to the session.
    """

    def __init__(self, x: np.ndarray, present: np.ndarray, bounds: list[tuple[int, int]], op, fill: float) -> None:
        n, d = x.shape
        self.n, self.op = n, op
        self.lo = max(0, max(-off for off, _ in bounds))
        hi = max(0, max(off + size - 1 for off, size in bounds))
        level = np.full((self.lo + n + hi, d), fill, dtype=np.float64)
        np.copyto(level[self.lo : self.lo + n], x, where=present)
        need = {_power_of_two_below(size) for _, size in bounds}
        self.levels = {1: level} if 1 in need else {}
        k = 1
        while 2 * k <= max(need):
            level = op(level[:-k], level[k:])
            k *= 2
            if k in need:
                self.levels[k] = level

    def window(self, off: int, size: int) -> np.ndarray:
        """(n, d) extremes over frames ``t + off .. t + off + size - 1``; NaN where none is present."""
        k = _power_of_two_below(size)
        level, a, n = self.levels[k], self.lo + off, self.n
        r = self.op(level[a : a + n], level[a + size - k : a + size - k + n])
        r[~np.isfinite(r)] = np.nan
        return r


def _power_of_two_below(size: int) -> int:
    """The largest power of two not above ``size`` (>= 1)."""
    return 1 << (int(size).bit_length() - 1)
