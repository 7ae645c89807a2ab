"""Multi-scale window statistics per frame, with a label delay, one compiled pass per session.

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

Implementation: Numba kernels (cached on disk, releasing the GIL) walk the frames once, every
window length at once, keeping running float64 sums centred on each column's first present
value (the frame entering a window added, the one leaving it subtracted); ``min`` and ``max``
are van Herk / Gil-Werman (exact). About 20x faster than pandas (``bench/windowing.py``). The
same per-frame step runs frame by frame in :class:`~.stream.StreamingWindows`.

>>> import numpy as np
>>> F, names = window_stats(np.arange(5.0)[:, None], fps=1.0, lengths_s=[3], stats=["mean", "slope"],
...                         columns=["x"])
>>> names
['x:mean@3s', 'x:slope@3s']
>>> F[:, 0].tolist(), F[:, 1].tolist()
([0.5, 1.0, 2.0, 3.0, 3.5], [1.0, 1.0, 1.0, 1.0, 1.0])
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal, TypedDict

import numba
import numpy as np

from ..config.options import ALIGNS, STATS  # defined once, in options.py

_MEAN, _STD, _MIN, _MAX, _SLOPE, _VALID_FRAC = range(len(STATS))


#: compiled once per argument type and cached in __pycache__; ``error_model="numpy"`` lets
#: x / 0 give inf or NaN instead of a per-division check that stops the loops vectorising
class _JitOptions(TypedDict):
    cache: bool
    nogil: bool
    error_model: Literal["python", "numpy"]


_JIT: _JitOptions = {"cache": True, "nogil": True, "error_model": "numpy"}


def window_frames(length_s: float, fps: float) -> int:
    """Window length in frames: ``round(length_s * fps)``, at least 1."""
    return max(1, int(round(float(length_s) * fps)))


def window_bounds(
    n: int, length_s: float, delay_s: float, fps: float, align: str
) -> tuple[int, int]:
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
    *,
    out: np.ndarray | None = None,
) -> tuple[np.ndarray, list[str]]:
    """Window statistics of every column of ``X`` (n_frames, d; NaN or inf missing, any memory
    layout; float32 windowed as float32, sums in float64) for every frame.

    ``valid``: optional (n_frames, d), (n_frames, 1) or (n_frames,) bool, False marks a value
    missing; ``delay_s`` >= 0 looks into the past; ``columns``: d names (default ``c0, c1, ...``);
    ``out``: a float32 array of the result's shape to write into (e.g. a column slice of a
    larger matrix). Returns (F, names): F (n_frames, d * len(stats) * len(lengths_s)) float32,
    ordered by window length, statistic, column; names ``column:stat@<L>s``.
    """
    X = _as_matrix(X)
    n, d = X.shape
    cols = [f"c{i}" for i in range(d)] if columns is None else [str(c) for c in columns]
    lengths = [float(L) for L in lengths_s]
    _check_args(d, cols, stats, align, fps, lengths)
    names = [feature_name(c, s, L) for L in lengths for s in stats for c in cols]
    if out is None:
        out = np.empty((n, len(names)), dtype=np.float32)
    elif not isinstance(out, np.ndarray) or out.shape != (n, len(names)) or out.dtype != np.float32:
        raise ValueError(
            f"out must be a float32 array of shape {(n, len(names))}, got "
            f"{getattr(out, 'dtype', type(out).__name__)} {getattr(out, 'shape', '')}"
        )
    mode, V = _validity(valid, n, d)
    if n == 0 or d == 0 or not len(stats):
        return out, names

    z = np.empty((n + 1, d), dtype=X.dtype)  # row n: a frame outside the session
    centre = np.empty(d, dtype=np.float64)
    _missing_as_nan(X, V, mode, z, centre)
    bounds = np.array([window_bounds(n, L, delay_s, fps, align) for L in lengths], dtype=np.int64)
    codes = np.array([STATS.index(s) for s in stats], dtype=np.int64)
    parent, col0 = _column_block(out)
    rows = np.empty(out.shape, dtype=np.float32) if parent is None else parent
    _window_rows(z, centre, bounds, codes, float(fps), rows, col0)
    if parent is None:  # another layout: written row-major, then copied
        out[...] = rows
    return out, names


def _as_matrix(X: np.ndarray) -> np.ndarray:
    X = np.asarray(X)
    if X.ndim == 1:
        X = X[:, None]
    if X.ndim != 2:
        raise ValueError(f"X must be (n_frames, d), got shape {X.shape}")
    return X if X.dtype in (np.float32, np.float64) else X.astype(np.float64)


def _check_args(
    d: int, cols: list[str], stats: Sequence[str], align: str, fps: float, lengths: list[float]
) -> None:
    if len(cols) != d:
        raise ValueError(f"{d} columns in X but {len(cols)} names")
    bad = [s for s in stats if s not in STATS]
    if bad:
        raise ValueError(f"unknown statistics {bad}; valid: {', '.join(STATS)}")
    if align not in ALIGNS:
        raise ValueError(f"align must be one of {', '.join(ALIGNS)}, got {align!r}")
    if fps <= 0:
        raise ValueError(f"fps must be > 0, got {fps}")
    if not lengths or any(L <= 0 for L in lengths):
        raise ValueError(f"window lengths must be > 0 seconds, got {lengths}")


def _column_block(out: np.ndarray) -> tuple[np.ndarray | None, int]:
    """(parent, first column) with ``out`` = ``parent[:, first : first + p]`` and ``parent`` a
    C-contiguous float32 matrix, so the kernel writes contiguous rows; (None, 0) otherwise."""
    if out.flags.c_contiguous:
        return out, 0
    base = out.base
    if (
        isinstance(base, np.ndarray)
        and base.ndim == 2
        and base.dtype == np.float32
        and base.flags.c_contiguous
        and base.shape[0] == out.shape[0]
        and base.strides == out.strides
    ):
        start = (
            out.__array_interface__["data"][0] - base.__array_interface__["data"][0]
        ) // base.itemsize
        if 0 <= start <= base.shape[1] - out.shape[1]:
            return base, start
    return None, 0


def _validity(valid: np.ndarray | None, n: int, d: int) -> tuple[int, np.ndarray]:
    """(mode, V) for the kernels: 0 no mask, 1 one flag per frame, 2 one per value."""
    if valid is None:
        return 0, np.ones((1, 1), dtype=np.bool_)
    v = np.asarray(valid, dtype=np.bool_)
    if v.ndim == 1:
        v = v[:, None]
    if v.ndim != 2 or v.shape[0] != n or v.shape[1] not in (1, d):
        raise ValueError(
            f"valid must have shape ({n},), ({n}, 1) or ({n}, {d}) like X, got {v.shape}"
        )
    return (1 if v.shape[1] == 1 else 2), np.ascontiguousarray(v)


@numba.njit(**_JIT)
def _missing_as_nan(
    X: np.ndarray, V: np.ndarray, mode: int, z: np.ndarray, centre: np.ndarray
) -> None:  # pragma: no cover - compiled
    """``z[:n]`` = X with non-finite and invalid values as NaN, ``z[n]`` all NaN (a frame outside
    the session); ``centre`` = each column's first present value (0 if none), which a stream
    knows by the time that value enters a window."""
    n, d = X.shape
    for t in range(n):
        if mode == 2:  # one loop per mode, no branch inside: the loops vectorise
            for c in range(d):
                v = X[t, c]
                ok = (abs(v) < np.inf) & V[t, c]  # abs(NaN) < inf is False
                z[t, c] = v if ok else np.nan
        else:
            row_ok = mode == 0 or V[t, 0]
            for c in range(d):
                v = X[t, c]
                ok = (abs(v) < np.inf) & row_ok
                z[t, c] = v if ok else np.nan
    for c in range(d):
        z[n, c] = np.nan
        centre[c] = 0.0
        for t in range(n):
            if z[t, c] == z[t, c]:
                centre[c] = z[t, c]
                break


@numba.njit(**_JIT)
def _window_rows(
    z: np.ndarray,
    centre: np.ndarray,
    bounds: np.ndarray,
    codes: np.ndarray,
    fps: float,
    out: np.ndarray,
    col0: int,
) -> None:  # pragma: no cover - compiled
    """Every statistic ``codes`` of every window ``bounds`` (offset, size) for every frame.

    ``z``: (n + 1, d) values, NaN = missing, row ``n`` all NaN; the results go to the
    ``len(bounds) * len(codes) * d`` columns of ``out`` from ``col0`` on. Frames outside the
    session are read as row ``n``. Each loop runs over the d columns of one row (contiguous
    everywhere) and vectorises.
    """
    n, d = z.shape[0] - 1, z.shape[1]
    first = _first_places(codes)
    S = _initial_sums(z, centre, bounds, _needs_sums(first))
    G, H, hpos = _extremes_state(z, bounds, _needs_extremes(first))
    scratch = np.empty((len(STATS), d), dtype=np.float32)  # rows of statistics not asked for
    p = bounds.shape[0] * codes.shape[0] * d
    for t in range(n):
        _frame_step(
            z,
            n,
            t,
            centre,
            bounds,
            codes,
            first,
            fps,
            S,
            G,
            H,
            hpos,
            out[t, col0 : col0 + p],
            scratch,
        )


@numba.njit(inline="always", **_JIT)
def _frame_step(
    z: np.ndarray,
    n: int,
    t: int,
    centre: np.ndarray,
    bounds: np.ndarray,
    codes: np.ndarray,
    first: np.ndarray,
    fps: float,
    S: np.ndarray,
    G: np.ndarray,
    H: np.ndarray,
    hpos: np.ndarray,
    row: np.ndarray,
    scratch: np.ndarray,
) -> None:  # pragma: no cover - compiled
    """Frame ``t``'s statistics, every window length, into ``row``; moves the state ``S``
    (:func:`_initial_sums`), ``G`` and ``H`` (:func:`_extremes_state`) on by one frame.

    ``z`` holds frame ``i`` (of ``0 .. n - 1``) in row ``i % m`` and an all-NaN row ``m``
    (``m = z.shape[0] - 1``): the whole session (``m = n``) or, streaming, a ring of the last
    ``m`` frames with ``n = t + 1``, which holds every frame a causal window reads.
    """
    d, nl, ns = z.shape[1], bounds.shape[0], codes.shape[0]
    sums, extremes = _needs_sums(first), _needs_extremes(first)
    for li in range(nl):
        a, w = t + bounds[li, 0], bounds[li, 1]
        part = row[li * ns * d : (li + 1) * ns * d]  # this length's statistics
        if sums:
            _window_sums(z, n, centre, a, w, fps, first, S[:, li], part, scratch)
        if extremes:
            h0, h1 = hpos[li], hpos[li + 1]
            _window_extremes(z, n, t, a, w, li, first, G, H[:, h0:h1], part, scratch)
        _copy_repeated(part, codes, first, d)


@numba.njit(inline="always", **_JIT)
def _frame(z: np.ndarray, n: int, i: int) -> np.ndarray:  # pragma: no cover - compiled
    """Frame ``i`` of ``z`` as :func:`_frame_step` stores it (the all-NaN row outside ``0 .. n - 1``)."""
    m = z.shape[0] - 1
    return z[i % m if 0 <= i < n else m]


@numba.njit(inline="always", **_JIT)
def _needs_sums(first: np.ndarray) -> bool:  # pragma: no cover - compiled
    return first[_MEAN] >= 0 or first[_STD] >= 0 or first[_SLOPE] >= 0 or first[_VALID_FRAC] >= 0


@numba.njit(inline="always", **_JIT)
def _needs_extremes(first: np.ndarray) -> bool:  # pragma: no cover - compiled
    return first[_MIN] >= 0 or first[_MAX] >= 0


@numba.njit(inline="always", **_JIT)
def _initial_sums(
    z: np.ndarray, centre: np.ndarray, bounds: np.ndarray, sums: bool
) -> np.ndarray:  # pragma: no cover - compiled
    """Running sums (sum, length, column) as of frame -1's window; the sums: count, centred
    value, its square; frame index u within the window, its square, u times centred value."""
    n, d, nl = z.shape[0] - 1, z.shape[1], bounds.shape[0]
    S = np.zeros((6, nl, d))
    if sums:  # the state of frame -1: its window, u counted from its first frame
        for li in range(nl):
            a = bounds[li, 0] - 1
            for i in range(max(a, 0), min(a + bounds[li, 1], n)):
                _add_frame(z[i], centre, float(i - a), S[:, li])
    return S


@numba.njit(inline="always", **_JIT)
def _extremes_state(
    z: np.ndarray, bounds: np.ndarray, extremes: bool
) -> tuple[np.ndarray, ...]:  # pragma: no cover - compiled
    """Van Herk / Gil-Werman state per length, (min, max) first: prefix extremes G of the block
    of the window's last frame (two rows used in turn: rewriting a row in place compiles to slow
    masked stores) and suffix extremes H (rows ``hpos[l] .. hpos[l + 1]``) of the block of its
    first frame."""
    d, nl = z.shape[1], bounds.shape[0]
    G = np.empty((2, 2 * nl, d), dtype=z.dtype)
    G[0], G[1] = np.inf, -np.inf
    hpos = np.zeros(nl + 1, dtype=np.int64)
    for li in range(nl):
        hpos[li + 1] = hpos[li] + (bounds[li, 1] if extremes else 0)
    return G, np.empty((2, hpos[nl], d), dtype=z.dtype), hpos


@numba.njit(inline="always", **_JIT)
def _window_sums(
    z: np.ndarray,
    n: int,
    centre: np.ndarray,
    a: int,
    w: int,
    fps: float,
    first: np.ndarray,
    S: np.ndarray,
    row: np.ndarray,
    scratch: np.ndarray,
) -> None:  # pragma: no cover - compiled
    """Slide one window length's sums ``S`` (:func:`_initial_sums`) to the window
    ``a .. a + w - 1`` and write its slope, mean, std and valid fraction into ``row`` (those asked for)."""
    d = z.shape[1]
    leave, enter = _frame(z, n, a - 1), _frame(z, n, a + w - 1)
    k = first[_SLOPE]
    if k >= 0:  # before the sums it reads move on
        _slope_step(leave, enter, centre, float(w - 1), fps, S, row[k * d : (k + 1) * d])
    k, k2 = first[_MEAN], first[_STD]
    mean_row = row[k * d : (k + 1) * d] if k >= 0 else scratch[_MEAN]
    _sums_step(
        leave, enter, centre, S, mean_row, row[k2 * d : (k2 + 1) * d] if k2 >= 0 else scratch[_STD]
    )
    k = first[_VALID_FRAC]
    if k >= 0:
        inside = min(a + w, n) - min(max(a, 0), n)
        vf, cnt = row[k * d : (k + 1) * d], S[0]
        for c in range(d):
            vf[c] = cnt[c] / inside if inside > 0 else 0.0


@numba.njit(inline="always", **_JIT)
def _window_extremes(
    z: np.ndarray,
    n: int,
    t: int,
    a: int,
    w: int,
    li: int,
    first: np.ndarray,
    G: np.ndarray,
    H: np.ndarray,
    row: np.ndarray,
    scratch: np.ndarray,
) -> None:  # pragma: no cover - compiled
    """One window length's minimum and maximum of the window ``a .. a + w - 1`` into ``row``."""
    d = z.shape[1]
    p = t % w  # the window's first frame is the p-th of its block
    if p == 0:
        _block_suffix(z, n, a, w, H[0], H[1])
    b = a + w - 1
    g, g0 = 2 * li + t % 2, 2 * li + 1 - t % 2
    k, k2 = first[_MIN], first[_MAX]
    _extremes_step(
        _frame(z, n, b),
        p == 1 or w == 1,
        G[:, g0],
        G[:, g],
        H[:, p],
        row[k * d : (k + 1) * d] if k >= 0 else scratch[_MIN],
        row[k2 * d : (k2 + 1) * d] if k2 >= 0 else scratch[_MAX],
    )


@numba.njit(inline="always", **_JIT)
def _first_places(codes: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    """Statistic code -> its first place in ``codes`` (-1: not asked for)."""
    first = np.full(len(STATS), -1)
    for k in range(codes.shape[0]):
        if first[codes[k]] < 0:
            first[codes[k]] = k
    return first


@numba.njit(inline="always", **_JIT)
def _copy_repeated(
    row: np.ndarray, codes: np.ndarray, first: np.ndarray, d: int
) -> None:  # pragma: no cover - compiled
    """A statistic asked for twice in ``codes``: its later places in ``row`` (``d`` columns
    each) copy the first one, which the window loop computed."""
    for k in range(codes.shape[0]):
        k1 = first[codes[k]]
        if k1 != k:
            row[k * d : (k + 1) * d] = row[k1 * d : (k1 + 1) * d]


@numba.njit(inline="always", **_JIT)
def _add_frame(
    zr: np.ndarray, centre: np.ndarray, u: float, S: np.ndarray
) -> None:  # pragma: no cover - compiled
    """Add one frame ``zr`` at index ``u`` within the window to the running sums ``S``."""
    cnt, sx, sxx, su, suu, sux = S[0], S[1], S[2], S[3], S[4], S[5]
    for c in range(zr.shape[0]):
        v = zr[c]
        x = v - centre[c] if v == v else 0.0
        m = 1.0 if v == v else 0.0
        cnt[c] += m
        sx[c] += x
        sxx[c] += x * x
        su[c] += u * m
        suu[c] += u * u * m
        sux[c] += u * x


# The loops below are written for LLVM's vectoriser: no calls (max() is one), no data-dependent
# branches (conditional expressions become selects), no value kept or replaced in place by a
# select (that compiles to masked stores, slow here: the running extremes go to another row).


@numba.njit(inline="always", **_JIT)
def _sums_step(
    leave: np.ndarray,
    enter: np.ndarray,
    centre: np.ndarray,
    S: np.ndarray,
    mean_row: np.ndarray,
    std_row: np.ndarray,
) -> None:  # pragma: no cover - compiled
    """Slide the count, sum and sum of squares by one frame (``leave`` out, ``enter`` in) and
    write each column's mean and std, NaN for an empty window."""
    cnt, sx, sxx = S[0], S[1], S[2]
    for c in range(cnt.shape[0]):
        vo, vi = leave[c], enter[c]
        xo = vo - centre[c] if vo == vo else 0.0
        xi = vi - centre[c] if vi == vi else 0.0
        k = cnt[c] - (1.0 if vo == vo else 0.0) + (1.0 if vi == vi else 0.0)
        s = sx[c] - xo + xi
        ss = sxx[c] - xo * xo + xi * xi
        cnt[c] = k
        sx[c] = s
        sxx[c] = ss
        r = 1.0 / k if k > 0 else np.nan
        m = s * r
        var = ss * r - m * m
        mean_row[c] = m + centre[c]
        # one value has std 0 exactly (not the sums' rounding); clips rounding below 0
        std_row[c] = math.sqrt(
            np.float32(var if (k > 1.5) & (var > 0.0) else var - var)
        )  # NaN stays NaN


@numba.njit(inline="always", **_JIT)
def _slope_step(
    leave: np.ndarray,
    enter: np.ndarray,
    centre: np.ndarray,
    u_enter: float,
    fps: float,
    S: np.ndarray,
    slope_row: np.ndarray,
) -> None:  # pragma: no cover - compiled
    """Slide the index sums by one frame (``leave`` at u = 0, the rest u -> u - 1, ``enter`` at
    ``u_enter``) and write each column's least-squares slope (units per second).

    ``cnt`` and ``sx`` are read before :func:`_sums_step` moves them. The index sums are
    integers, so exact, and the denominator is at least 1 with two values or more.
    """
    cnt, sx, su, suu, sux = S[0], S[1], S[3], S[4], S[5]
    for c in range(cnt.shape[0]):
        vo, vi = leave[c], enter[c]
        xo = vo - centre[c] if vo == vo else 0.0
        xi = vi - centre[c] if vi == vi else 0.0
        mi = 1.0 if vi == vi else 0.0
        k = cnt[c] - (1.0 if vo == vo else 0.0)
        s = sx[c] - xo
        u = su[c] - k + u_enter * mi
        uu = suu[c] - 2.0 * su[c] + k + u_enter * u_enter * mi
        ux = sux[c] - s + u_enter * xi
        k += mi
        s += xi
        su[c] = u
        suu[c] = uu
        sux[c] = ux
        scale = k * uu
        den = scale - u * u
        ok = (k >= 2.0) & (den > 0.5) & (den > 1e-12 * scale)
        slope_row[c] = (k * ux - u * s) / den * fps if ok else np.nan


@numba.njit(inline="always", **_JIT)
def _block_suffix(
    z: np.ndarray, n: int, a: int, w: int, hlo: np.ndarray, hhi: np.ndarray
) -> None:  # pragma: no cover - compiled
    """Suffix minima and maxima of frames ``a .. a + w - 1`` (row ``k``: frames ``a + k ..``)."""
    d = z.shape[1]
    inf = z.dtype.type(np.inf)
    for k in range(w - 1, -1, -1):
        zr, rlo, rhi = _frame(z, n, a + k), hlo[k], hhi[k]
        if k == w - 1:
            for c in range(d):
                v = zr[c]
                rlo[c] = v if v == v else inf
                rhi[c] = v if v == v else -inf
        else:
            plo, phi = hlo[k + 1], hhi[k + 1]
            for c in range(d):
                v = zr[c]
                rlo[c] = v if v < plo[c] else plo[c]  # False for NaN: missing values are skipped
                rhi[c] = v if v > phi[c] else phi[c]


@numba.njit(inline="always", **_JIT)
def _extremes_step(
    zb: np.ndarray,
    restart: bool,
    G0: np.ndarray,
    G: np.ndarray,
    H: np.ndarray,
    min_row: np.ndarray,
    max_row: np.ndarray,
) -> None:  # pragma: no cover - compiled
    """Van Herk / Gil-Werman step: ``g`` = ``g0`` with the window's last frame ``zb`` added (or
    ``zb`` alone when it starts a block); each column's window minimum and maximum are those of
    ``h`` (the first frame's block from that frame on) and ``g``; NaN where the window holds none.

    Blocks of ``w`` frames start at the first window's first frame, so a window covers the end
    of one block and the start of the next (or exactly one block: then ``h`` alone suffices).
    """
    inf = zb.dtype.type(np.inf)
    glo0, ghi0, glo, ghi, hlo, hhi = G0[0], G0[1], G[0], G[1], H[0], H[1]
    for c in range(zb.shape[0]):
        v = zb[c]
        gl = inf if restart else glo0[c]
        gh = -inf if restart else ghi0[c]
        gl = v if v < gl else gl  # False for NaN: missing values are skipped
        gh = v if v > gh else gh
        glo[c] = gl
        ghi[c] = gh
        lo = hlo[c] if hlo[c] < gl else gl
        hi = hhi[c] if hhi[c] > gh else gh
        min_row[c] = lo if lo != inf else np.nan
        max_row[c] = hi if hi != -inf else np.nan
