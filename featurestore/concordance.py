"""Lin's concordance correlation coefficient (CCC) with the arithmetic of the official
OMG-Empathy scorer (``calculateCCC.py``): population statistics, Pearson's ``rho`` 0 for a
constant series, and 0.0 where it divides 0 by 0; the one implementation both packages use.

>>> ccc([0.1, 0.2, 0.3], [0.1, 0.2, 0.3]), ccc([0.1, 0.2, 0.3], [0.0, 0.0, 0.0])
(1.0, 0.0)
>>> round(ccc([0.1, float("nan"), 0.3, 0.5], [0.1, 0.2, 0.3, 0.5], nan="drop"), 12)
1.0
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

#: what :func:`ccc` does with NaN/inf values
NAN_RULES = ("raise", "drop")


def finite_pairs(
    y_true: np.ndarray | Iterable[float],
    y_pred: np.ndarray | Iterable[float],
    nan: str = "raise",
    name: str = "ccc",
) -> tuple[np.ndarray, np.ndarray]:
    """Two equally long, non-empty float64 series with their non-finite pairs handled by the
    rule ``nan``: ``"raise"`` (a ValueError naming the series and the first row) or ``"drop"``."""
    if nan not in NAN_RULES:
        raise ValueError(f"{name}: unknown NaN rule {nan!r}; use one of {', '.join(NAN_RULES)}")
    t = np.asarray(y_true, dtype=np.float64).reshape(-1)
    p = np.asarray(y_pred, dtype=np.float64).reshape(-1)
    if t.shape != p.shape:
        raise ValueError(f"{name}: ground truth has {t.size} values but prediction has {p.size}")
    if t.size == 0:
        raise ValueError(f"{name}: empty input")
    if nan == "drop":
        ok = np.isfinite(t) & np.isfinite(p)
        return t[ok], p[ok]
    for what, a in (("ground truth", t), ("prediction", p)):
        bad = ~np.isfinite(a)
        if bad.any():
            raise ValueError(
                f"{name}: {what} has {int(bad.sum())} NaN/inf values (first at row {int(np.argmax(bad))})"
            )
    return t, p


def ccc(
    y_true: np.ndarray | Iterable[float], y_pred: np.ndarray | Iterable[float], nan: str = "raise"
) -> float:
    """Lin's concordance correlation coefficient of two equally long series, in [-1, 1];
    ``nan``: ``"raise"`` or ``"drop"`` (:func:`finite_pairs`; NaN when fewer than 2 pairs remain)."""
    t, p = finite_pairs(y_true, y_pred, nan)
    if t.size < 2 and nan == "drop":
        return float("nan")
    mt, mp = t.mean(), p.mean()
    dt, dp = t - mt, p - mp
    vt, vp = float(np.mean(dt * dt)), float(np.mean(dp * dp))
    st, sp = np.sqrt(vt), np.sqrt(vp)
    # a series of identical values (tested exactly, as scipy's pearsonr does, since its
    # computed variance may be a rounding residue) has no Pearson r: the official scorer's
    # NaN -> 0
    if vt > 0 and vp > 0 and t.min() != t.max() and p.min() != p.max():
        rho = float(np.clip(np.mean(dt * dp) / (st * sp), -1.0, 1.0))  # as pearsonr clips
    else:
        rho = 0.0
    den = vp + vt + (mp - mt) ** 2
    if den == 0:
        return 0.0
    return float(np.clip(2.0 * rho * st * sp / den, -1.0, 1.0))  # |CCC| <= 1 up to rounding


def _circular_covariances(
    truth: np.ndarray, preds: Sequence[np.ndarray], what: str
) -> tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray | None]]]:
    """``truth`` as float64 and, for each of ``preds``, it as float64 with its covariance with
    ``truth`` at every circular lag (element ``k`` against ``np.roll(pred, k)``) by one FFT, the
    transform of ``truth`` computed once; None for a constant prediction or truth (no covariance
    to find)."""
    t = np.asarray(truth, dtype=np.float64)
    n = len(t)
    ps = [np.asarray(p, dtype=np.float64) for p in preds]
    if n == 0 or any(len(p) != n for p in ps):
        raise ValueError(
            f"{what} needs two equally long, non-empty series, got "
            f"{len(t)} and {', '.join(str(len(p)) for p in ps)}"
        )
    if t.min() == t.max():
        return t, [(p, None) for p in ps]
    dt = t - t.mean()
    size = 1 << int(np.ceil(np.log2(2 * n)))
    ft = None  # the transform of dt, once a prediction needs it
    out: list[tuple[np.ndarray, np.ndarray | None]] = []
    for p in ps:
        if p.min() == p.max():
            out.append((p, None))
            continue
        if ft is None:
            ft = np.fft.rfft(dt, size)
        dp = p - p.mean()
        # sum_i dt[i] * dp[i - k] for every k: the cross-correlation, by FFT
        xc = np.fft.irfft(ft * np.conj(np.fft.rfft(dp, size)), size)
        out.append((p, (xc[:n] + np.concatenate([[0.0], xc[size - n + 1 :]])) / n))  # k, k - n
    return t, out


def shifted_cccs(truth: np.ndarray, preds: Sequence[np.ndarray]) -> list[np.ndarray]:
    """CCC of ``truth`` against each of ``preds`` circularly shifted by every lag 0..n-1 (the
    official formula; element ``k`` against ``np.roll(pred, k)``), the covariances of all lags by
    one FFT, the transform of ``truth`` computed once.

    >>> t = np.sin(np.linspace(0, 6.28, 50)); round(float(shifted_cccs(t, [t])[0][0]), 6)
    1.0
    """
    t, covs = _circular_covariances(truth, preds, "shifted_cccs")
    out = []
    for p, cov in covs:
        if cov is None:  # the official scorer's r = 0 for a constant series
            out.append(np.zeros(len(t)))
            continue
        # the variances of the centred series, as before the covariances were shared
        den = (t - t.mean()).var() + (p - p.mean()).var() + (t.mean() - p.mean()) ** 2
        out.append(np.clip(2.0 * cov / den, -1.0, 1.0))
    return out


def pearson(y_true: np.ndarray | Iterable[float], y_pred: np.ndarray | Iterable[float]) -> float:
    """Pearson's r of two equally long finite series (population statistics, as :func:`ccc`), in
    [-1, 1]; 0 for a constant series, as the official CCC scorer sets its r (MuSe's scorer, SciPy's
    ``pearsonr``, gives NaN there).

    >>> round(pearson([1, 2, 3], [2, 4, 7]), 6), pearson([1, 2, 3], [5, 5, 5])
    (0.993399, 0.0)
    """
    t, p = finite_pairs(y_true, y_pred, "raise", "pearson")
    if t.min() == t.max() or p.min() == p.max():
        return 0.0
    dt, dp = t - t.mean(), p - p.mean()
    return float(np.clip(np.mean(dt * dp) / np.sqrt(np.mean(dt * dt) * np.mean(dp * dp)), -1, 1))


def shifted_pearsons(truth: np.ndarray, preds: Sequence[np.ndarray]) -> list[np.ndarray]:
    """:func:`pearson` of ``truth`` against each of ``preds`` at every circular lag (as
    :func:`shifted_cccs`: one FFT)."""
    t, covs = _circular_covariances(truth, preds, "shifted_pearsons")
    out = []
    for p, cov in covs:
        if cov is None:
            out.append(np.zeros(len(t)))
            continue
        sd = np.sqrt(t.var() * p.var())
        out.append(np.clip(cov / sd, -1.0, 1.0))
    return out


def rmse(y_true: np.ndarray | Iterable[float], y_pred: np.ndarray | Iterable[float]) -> float:
    """The root mean squared error of two equally long finite series.

    >>> rmse([0, 0, 0, 0], [1, -1, 1, -1])
    1.0
    """
    t, p = finite_pairs(y_true, y_pred, "raise", "rmse")
    return float(np.sqrt(np.mean((t - p) ** 2)))


def shifted_rmses(truth: np.ndarray, preds: Sequence[np.ndarray]) -> list[np.ndarray]:
    """:func:`rmse` of ``truth`` against each of ``preds`` at every circular lag: the mean squared
    error is the two variances, the squared difference of the means and twice the covariance at
    that lag (one FFT, as :func:`shifted_cccs`)."""
    t, covs = _circular_covariances(truth, preds, "shifted_rmses")
    out = []
    for p, cov in covs:
        base = t.var() + p.var() + (t.mean() - p.mean()) ** 2
        mse = np.full(len(t), base) if cov is None else base - 2.0 * cov
        out.append(np.sqrt(np.maximum(mse, 0.0)))  # a rounding residue below 0 is 0
    return out


def mae(y_true: np.ndarray | Iterable[float], y_pred: np.ndarray | Iterable[float]) -> float:
    """The mean absolute error of two equally long finite series.

    >>> mae([0, 0, 0, 0], [1, -1, 2, 0])
    1.0
    """
    t, p = finite_pairs(y_true, y_pred, "raise", "mae")
    return float(np.mean(np.abs(t - p)))
