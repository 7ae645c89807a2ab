"""Ridge fits of one fit group (the ridge pipeline on many unions of the same sessions) from per-session sums
(``X'X``, ``X'y``, NaN-indicator terms so any fill value folds in exactly, ranks for the medians) in one solve each:
the pipeline's model in exact arithmetic."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.linalg

#: columns with NaN whose values :class:`SufficientStats` sorts at once (memory only)
RANK_COLUMNS = 32
#: rows of ``X`` that :meth:`SufficientStats.predict` converts to float64 at once
PREDICT_ROWS = 1024


@dataclass(frozen=True)
class LinearFit:
    """A fitted ridge pipeline as one map ``(x_filled - shift) @ coef + offset``, NaN filled with ``fill``."""

    coef: np.ndarray
    offset: float
    fill: np.ndarray
    n_rows: int


@dataclass
class _Block:
    n: int
    sx: np.ndarray  # (d,) sum of the shifted rows, NaN as 0
    sy: float
    xx: np.ndarray  # (d, d)
    xy: np.ndarray  # (d,)
    nan_count: np.ndarray  # (g,) NaN per distinct NaN pattern of the nan columns
    xm: np.ndarray  # (d, g) X'M of the distinct patterns
    mm: np.ndarray  # (g, g) M'M
    my: np.ndarray  # (g,) M'y
    low: np.ndarray  # (d,) smallest observed (raw) value, +inf if none
    high: np.ndarray  # (d,) largest observed value, -inf if none
    keys: np.ndarray  # sorted ``column * N + rank`` of the observed values of the nan columns


def stable_row_order(values: np.ndarray) -> np.ndarray:
    """``np.argsort(values, axis=1, kind="stable")`` of a 2-d array, 4x faster for float32: each value an
    order-preserving 32-bit key (NaN last, -0.0 equal to 0.0) packed above its index, sorted as unsigned integers."""
    values = np.asarray(values)
    n = values.shape[-1]
    if values.dtype != np.float32 or values.ndim != 2 or n >= 2**32:
        return np.argsort(values, axis=1, kind="stable")
    v = np.ascontiguousarray(values)
    key = (v.view(np.int32) >> 31).view(np.uint32)  # all ones where the sign bit is set
    key |= np.uint32(0x80000000)
    key ^= v.view(np.uint32)
    key[v == 0] = np.uint32(0x80000000)  # -0.0 == 0.0: tied, in index order
    key[np.isnan(v)] = np.uint32(0xFFFFFFFF)  # NaN after +inf (0xFF800000), in index order
    packed = key.astype(np.uint64)
    del key
    packed <<= np.uint64(32)
    packed |= np.arange(n, dtype=np.uint64)
    packed.sort(axis=1)
    packed &= np.uint64(0xFFFFFFFF)
    return packed.view(np.int64)


class SufficientStats:
    """Per-session sums from which every ridge fit on a union of sessions is one solve (``extra_nan``: columns
    that also need a fill value)."""

    def __init__(
        self,
        rows: Mapping[str, tuple[np.ndarray, np.ndarray]],
        extra_nan: np.ndarray | None = None,
    ):
        widths = {np.shape(X)[1] for X, _ in rows.values()}
        if len(widths) != 1:
            raise ValueError(f"sessions with different numbers of columns: {sorted(widths)}")
        d = widths.pop()
        total = np.zeros(d)
        count = np.zeros(d)
        has_nan = np.zeros(d, bool) if extra_nan is None else np.asarray(extra_nan, bool).copy()
        packed = []  # each session's NaN indicator, 8 rows a byte
        for X, y in rows.values():
            if not np.isfinite(np.asarray(y)).all():
                raise ValueError(
                    "SufficientStats needs finite labels: drop the rows whose label is NaN"
                )
            X = np.asarray(X)
            if np.isinf(X).any():
                raise ValueError("infinite feature values: the ridge pipeline rejects them")
            nan = np.isnan(X)
            packed.append(np.packbits(nan, axis=0))
            has_nan |= nan.any(axis=0)
            total += np.where(nan, 0.0, X).sum(axis=0, dtype=np.float64)
            count += len(X) - nan.sum(axis=0)
        self.d = d
        #: (d,) subtracted from every column before its sums (the mean of its observed values)
        self.shift = np.divide(total, count, out=np.zeros(d), where=count > 0)
        #: indices of the columns that hold a NaN (their fill value depends on the fit)
        self.nan_columns = np.flatnonzero(has_nan)
        # the nan columns' distinct NaN indicators: column ``nan_columns[j]`` has pattern ``_pattern[j]``;
        # pattern ``g`` is first seen in column ``nan_columns[_first[g]]``
        self._first = self._pattern = np.arange(len(self.nan_columns))
        if len(self.nan_columns) and packed:
            bits = np.concatenate([b[:, self.nan_columns] for b in packed])
            _, self._first, self._pattern = np.unique(
                bits.T, axis=0, return_index=True, return_inverse=True
            )
            self._pattern = self._pattern.ravel()
        del packed
        self._blocks = {sid: self._block(X, y) for sid, (X, y) in rows.items()}
        self._rank_nan_columns(rows)

    def _block(self, X: np.ndarray, y: np.ndarray) -> _Block:
        X = np.asarray(X, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        nan = np.isnan(X)
        Xs = X - self.shift
        Xs[nan] = 0.0
        M = nan[:, self.nan_columns[self._first]].astype(np.float64)  # one column per pattern
        observed = ~nan
        return _Block(
            n=len(X),
            sx=Xs.sum(axis=0),
            sy=float(y.sum()),
            xx=Xs.T @ Xs,
            xy=Xs.T @ y,
            nan_count=M.sum(axis=0),
            xm=Xs.T @ M,
            mm=M.T @ M,
            my=M.T @ y,
            low=np.where(observed, X, np.inf).min(axis=0, initial=np.inf),
            high=np.where(observed, X, -np.inf).max(axis=0, initial=-np.inf),
            keys=np.empty(0, np.int64),  # set by _rank_nan_columns
        )

    def _rank_nan_columns(self, rows: Mapping[str, tuple[np.ndarray, np.ndarray]]) -> None:
        """Sort each nan column's values over every session once and give each session its sorted rank keys."""
        k = self.nan_columns
        dtype = np.result_type(*[np.asarray(X).dtype for X, _ in rows.values()], np.float32)
        n_all = max(1, sum(b.n for b in self._blocks.values()))
        key_dtype = np.int32 if len(k) * n_all < 2**31 else np.int64
        self._n_all, self._key_dtype = n_all, key_dtype
        #: (nan column, rank) -> value: each nan column's values over every session, sorted
        self._sorted = np.empty((len(k), n_all), dtype)
        pieces: list[list[np.ndarray]] = [[] for _ in self._blocks]
        for a in range(0, len(k), RANK_COLUMNS):
            cols = k[a : a + RANK_COLUMNS]
            values = np.concatenate(
                [np.asarray(X)[:, cols].astype(dtype) for X, _ in rows.values()]
            )
            # one row per column: the sorts, gathers and scatters below read contiguous rows
            by_column = np.ascontiguousarray(values.T)
            order = stable_row_order(by_column)  # NaN last
            self._sorted[a : a + len(cols), : len(values)] = np.take_along_axis(by_column, order, 1)
            del by_column
            ranks_by_column = np.empty(order.shape, key_dtype)
            np.put_along_axis(
                ranks_by_column, order, np.arange(len(values), dtype=key_dtype)[None, :], 1
            )
            del order
            ranks = ranks_by_column.T
            offsets = (np.arange(a, a + len(cols)) * n_all).astype(key_dtype)
            start = 0
            for piece, block in zip(pieces, self._blocks.values(), strict=True):
                observed = ~np.isnan(values[start : start + block.n])
                keys = (ranks[start : start + block.n] + offsets)[observed]
                keys.sort()  # column-major keys: one chunk's all precede the next one's
                piece.append(keys)
                start += block.n
        for piece, block in zip(pieces, self._blocks.values(), strict=True):
            block.keys = np.concatenate(piece) if piece else np.empty(0, key_dtype)

    def _medians(self, blocks: Sequence[_Block], count: np.ndarray) -> np.ndarray:
        """Each nan column's median over the observed values of ``blocks`` (0 if none), as ``MedianImputer``."""
        k = len(self.nan_columns)
        count = np.asarray(count).astype(np.int64)
        # the ranks (0-based, among the fit's values) of the two middle values of each column
        targets = np.concatenate([(count - 1) // 2, count // 2])
        columns: np.ndarray = np.concatenate([np.arange(k), np.arange(k)]) * self._n_all
        lo = np.zeros(2 * k, np.int64)
        hi = np.full(2 * k, self._n_all - 1, np.int64)
        first = columns.astype(self._key_dtype)
        base = [np.searchsorted(b.keys, first, side="left") for b in blocks]
        while (lo < hi).any():
            mid = (lo + hi) // 2
            query = (columns + mid).astype(self._key_dtype)
            below = np.zeros(2 * k, np.int64)  # the fit's values of global rank <= mid
            for b, start in zip(blocks, base, strict=True):
                below += np.searchsorted(b.keys, query, side="right") - start
            enough = below > targets
            active = lo < hi
            hi = np.where(active & enough, mid, hi)
            lo = np.where(active & ~enough, mid + 1, lo)
        pick = self._sorted[np.concatenate([np.arange(k), np.arange(k)]), lo].astype(np.float64)
        return np.where(count > 0, (pick[:k] + pick[k:]) / 2.0, 0.0)

    def n_rows(self, sessions: Sequence[str]) -> int:
        return sum(self._blocks[s].n for s in sessions)

    def fit(self, sessions: Sequence[str], alpha: float) -> LinearFit:
        """The ridge pipeline (median imputation, standardisation, ``Ridge(alpha)``) fitted on ``sessions``."""
        if alpha <= 0:
            raise ValueError(f"alpha must be > 0 for the closed form, got {alpha}")
        blocks = [self._blocks[s] for s in sessions]
        n = sum(b.n for b in blocks)
        if n == 0:
            raise ValueError("no training rows with a finite label")
        sx = np.sum([b.sx for b in blocks], axis=0)
        sy = sum(b.sy for b in blocks)
        xx = np.sum([b.xx for b in blocks], axis=0)
        xy = np.sum([b.xy for b in blocks], axis=0)
        low = np.min([b.low for b in blocks], axis=0)
        high = np.max([b.high for b in blocks], axis=0)
        k = self.nan_columns
        fill = np.zeros(len(k))
        if len(k):
            # summed per pattern, then spread to the columns of each pattern
            p = self._pattern
            nan_count = np.sum([b.nan_count for b in blocks], axis=0)[p]
            fill = self._medians(blocks, n - nan_count)
            xm = np.sum([b.xm for b in blocks], axis=0)[:, p]
            mm = np.sum([b.mm for b in blocks], axis=0)[np.ix_(p, p)]
            my = np.sum([b.my for b in blocks], axis=0)[p]
            t = fill - self.shift[k]  # the fill value in shifted units
            sx[k] += t * nan_count
            xy[k] += t * my
            xmt = xm * t
            xx[:, k] += xmt
            xx[k, :] += xmt.T
            xx[np.ix_(k, k)] += t[:, None] * mm * t[None, :]
            filled = nan_count > 0
            low[k] = np.where(filled, np.minimum(low[k], fill), low[k])
            high[k] = np.where(filled, np.maximum(high[k], fill), high[k])
        mean = sx / n  # shifted units
        scatter = xx - n * np.outer(mean, mean)
        cross = xy - mean * sy
        var = np.maximum(np.diag(scatter), 0.0) / n
        constant = low == high
        scatter[constant, :] = 0.0
        scatter[:, constant] = 0.0
        cross[constant] = 0.0
        var[constant] = 0.0
        # StandardScaler's test of a constant column (scikit-learn's _is_constant_feature)
        eps = np.finfo(np.float64).eps
        raw_mean = self.shift + mean
        near_constant = var <= n * eps * var + (n * raw_mean * eps) ** 2
        scale = np.where(near_constant, 1.0, np.sqrt(var))
        A = scatter / np.outer(scale, scale)
        A[np.diag_indices_from(A)] += alpha
        try:
            w = scipy.linalg.cho_solve(
                scipy.linalg.cho_factor(A, check_finite=False), cross / scale
            )
        except np.linalg.LinAlgError:  # not positive definite in floating point: least squares
            w = np.linalg.lstsq(A, cross / scale, rcond=None)[0]
        coef = w / scale
        return LinearFit(coef, float(sy / n - mean @ coef), fill, n)

    def predict(self, X: np.ndarray, fits: Sequence[LinearFit]) -> np.ndarray:
        """``(n, len(fits))``: each fit's prediction of each row of ``X`` (:func:`linear_predict`)."""
        return linear_predict(X, self.shift, self.nan_columns, fits)


def linear_predict(
    X: np.ndarray, shift: np.ndarray, nan_columns: np.ndarray, fits: Sequence[LinearFit]
) -> np.ndarray:
    """``(n, len(fits))``: each fit's prediction of each row of ``X`` (NaN only in ``nan_columns``, whose fill
    values the fits hold), read ``PREDICT_ROWS`` rows at a time; each fit is its own product, so its numbers
    never depend on which other fits are asked for."""
    X = np.asarray(X)
    k = nan_columns
    unfilled = np.asarray(np.isnan(X).any(axis=0))
    unfilled[k] = False
    if unfilled.any():
        raise ValueError(
            f"NaN in columns {np.flatnonzero(unfilled).tolist()}, which have no fill value: "
            "name them in SufficientStats(extra_nan=...)"
        )
    filled = [(f.fill - shift[k]) * f.coef[k] for f in fits]
    out = np.empty((len(X), len(fits)))
    for a in range(0, len(X), PREDICT_ROWS):
        Xs = X[a : a + PREDICT_ROWS].astype(np.float64) - shift
        nan = np.isnan(Xs)
        Xs[nan] = 0.0
        M = nan[:, k].astype(np.float64)
        for i, f in enumerate(fits):
            out[a : a + len(Xs), i] = Xs @ f.coef + f.offset
            if len(k):
                out[a : a + len(Xs), i] += M @ filled[i]
    return out
