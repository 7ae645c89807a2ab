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

Implementation: prefix sums (float64, columns centred first) give mean, std, slope and
valid_frac for every frame at once; ``scipy.ndimage`` running min/max filters on arrays with
missing values set to +/-inf give min and max. Python loops run only over window lengths.

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
from scipy.ndimage import maximum_filter1d, minimum_filter1d

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

    need_sums = any(s in stats for s in ("mean", "std", "slope", "valid_frac"))
    if need_sums:
        # centring each column keeps the squared sums well conditioned
        counts = present.sum(axis=0)
        centre = np.where(counts > 0, np.where(present, x, 0.0).sum(axis=0) / np.maximum(counts, 1), 0.0)
        xc = np.where(present, x - centre, 0.0)
        m = present.astype(np.float64)
        idx = np.arange(n, dtype=np.float64)[:, None]
        prefix = {"n": _prefix(m), "x": _prefix(xc)}
        if "std" in stats:
            prefix["xx"] = _prefix(xc * xc)
        if "slope" in stats:
            prefix["i"] = _prefix(idx * m)
            prefix["ii"] = _prefix(idx * idx * m)
            prefix["ix"] = _prefix(idx * xc)
    x_lo = np.where(present, x, np.inf) if "min" in stats else None
    x_hi = np.where(present, x, -np.inf) if "max" in stats else None

    j = 0
    for L in lengths:
        off, size = window_bounds(n, L, delay_s, fps, align)
        res: dict[str, np.ndarray] = {}
        if need_sums:

            def wsum(key: str, off: int = off, size: int = size) -> np.ndarray:
                p = prefix[key]
                s = _shifted(p, off + size, n)
                s -= _shifted(p, off, n)
                return s

            cnt = wsum("n")
            sx = wsum("x")
            with np.errstate(invalid="ignore", divide="ignore"):
                mean_c = sx / cnt  # NaN where the window holds no value
                if "mean" in stats:
                    res["mean"] = mean_c + centre
                if "std" in stats:
                    var = wsum("xx") / cnt
                    var -= mean_c * mean_c
                    np.maximum(var, 0.0, out=var)  # keeps NaN, clips rounding below 0
                    res["std"] = np.sqrt(var)
                if "slope" in stats:
                    si, sii, six = wsum("i"), wsum("ii"), wsum("ix")
                    den = cnt * sii - si * si
                    num = cnt * six - si * sx
                    # den is exactly 0 for one value; guard against rounding near 0 too
                    bad = (cnt < 2) | (den <= 1e-9 * np.maximum(cnt * sii, 1.0))
                    den[bad] = np.nan
                    res["slope"] = num / den * fps
                if "valid_frac" in stats:
                    lo = np.clip(np.arange(n) + off, 0, n)
                    hi = np.clip(np.arange(n) + off + size, 0, n)
                    inside = np.maximum(hi - lo, 0).astype(np.float64)[:, None]
                    res["valid_frac"] = np.where(inside > 0, cnt / np.maximum(inside, 1.0), 0.0)
        if "min" in stats:
            res["min"] = _running(x_lo, off, size, minimum_filter1d, np.inf)
        if "max" in stats:
            res["max"] = _running(x_hi, off, size, maximum_filter1d, -np.inf)
        for s in stats:
            out[:, j : j + d] = res[s]
            j += d
    return out, names


def _prefix(a: np.ndarray) -> np.ndarray:
    """(n + 1, d) cumulative sums with a leading zero row."""
    p = np.zeros((a.shape[0] + 1, a.shape[1]), dtype=np.float64)
    np.cumsum(a, axis=0, out=p[1:])
    return p


def _shifted(p: np.ndarray, k: int, n: int) -> np.ndarray:
    """Rows ``p[clip(t + k, 0, n)]`` for ``t = 0 .. n-1`` (``p`` has n + 1 rows), by slicing."""
    out = np.empty((n, p.shape[1]), dtype=p.dtype)
    a = min(max(0, -k), n)  # first t with t + k >= 0
    b = max(min(n, n - k + 1), a)  # first t with t + k > n
    out[:a] = p[0]
    out[b:] = p[n]
    out[a:b] = p[a + k : b + k]
    return out


def _running(x: np.ndarray, off: int, size: int, filt, fill: float) -> np.ndarray:
    """Running min/max over frames ``t + off .. t + off + size - 1`` (``fill`` outside); NaN if none."""
    n = x.shape[0]
    # the filter centres a window of `size` on each index: index i covers i - size//2 .. ; so
    # frame t reads index t + off + size//2, padded with `fill` where that leaves the array
    shift = off + size // 2
    left = max(0, -shift)
    right = max(0, shift)
    xp = np.pad(x, ((left, right), (0, 0)), constant_values=fill) if (left or right) else x
    r = filt(xp, size=size, axis=0, mode="constant", cval=fill)
    r = r[left + shift : left + shift + n]
    return np.where(np.isfinite(r), r, np.nan)
