"""Post-processing of per-frame predictions: temporal smoothing and bias/scale rescaling.

Both are swept like any other parameter (config ``postprocess: {smooth_s, rescale}``).
Smoothing works on one session at a time (a window must never straddle two sessions);
``smooth_per_session`` applies it to a concatenation of sessions. The ``Rescaler`` learns
from training labels and training predictions only; fit it on training predictions that
went through the same smoothing as the predictions it will transform, since smoothing
shrinks their spread.

Example:

>>> import numpy as np
>>> smooth(np.array([0.0, 0.0, 3.0, 0.0, 0.0]), fps=25, smooth_s=0.12).round(2).tolist()
[0.0, 1.0, 1.0, 1.0, 0.0]
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.ndimage import median_filter
from scipy.signal import butter, sosfilt, sosfilt_zi, sosfiltfilt

from ..config.choices import check_choice
from ..config.options import RESCALES, SMOOTH_METHODS
from .personalization import fit_listener_calibration

#: what ``Rescaler`` itself does; the config's ``postprocess.rescale`` (``RESCALES``) adds
#: whether the statistics are per listener (see :func:`rescaler_for`)
RESCALE_MODES = ("none", "train", "bias")
#: config rescale name -> (Rescaler mode, statistics per listener)
_RESCALE_PLAN = {
    "none": ("none", False),
    "train": ("train", False),
    "bias": ("bias", False),
    "listener": ("train", True),
    "listener_bias": ("bias", True),
}
assert set(_RESCALE_PLAN) == set(RESCALES), "every configurable rescale mode needs a plan"


def window_frames(fps: float, smooth_s: float) -> int:
    """Odd length in frames of a centred window of ``smooth_s`` seconds at ``fps`` Hz.

    ``round(smooth_s * fps)`` rounded up to the next odd number (a centred window has as
    many frames before as after the current one); 1 means no smoothing.
    """
    if fps <= 0 or smooth_s < 0:
        raise ValueError(f"need fps > 0 Hz and smooth_s >= 0 s, got fps={fps}, smooth_s={smooth_s}")
    n = int(round(smooth_s * fps))
    return 2 * (n // 2) + 1


def _moving_average(x: np.ndarray, window: int) -> np.ndarray:
    """Centred mean over ``window`` frames; near the edges the window shrinks to what exists."""
    half = window // 2
    n = len(x)
    csum = np.concatenate([[0.0], np.cumsum(x)])
    idx = np.arange(n)
    lo = np.maximum(idx - half, 0)
    hi = np.minimum(idx + half + 1, n)
    return (csum[hi] - csum[lo]) / (hi - lo)


def _butterworth(x: np.ndarray, fps: float, smooth_s: float, window: int) -> np.ndarray:
    """Zero-phase order-2 low-pass at 1/smooth_s Hz, padded by even reflection."""
    nyquist = fps / 2.0
    cutoff = 1.0 / smooth_s
    if cutoff >= nyquist or len(x) < 2:
        return x.copy()
    sos = butter(2, cutoff / nyquist, btype="low", output="sos")
    # one window of reflected signal outlasts the filter's transient (time constant
    # smooth_s / (2 pi) s); capped by the length so short sessions work
    padlen = min(window, len(x) - 1)
    return sosfiltfilt(sos, x, padtype="even", padlen=padlen)


def _trailing_average(x: np.ndarray, window: int) -> np.ndarray:
    """Mean over the ``window`` frames ending at each frame (fewer at the start): causal."""
    csum = np.concatenate([[0.0], np.cumsum(x)])
    hi = np.arange(1, len(x) + 1)
    lo = np.maximum(hi - window, 0)
    return (csum[hi] - csum[lo]) / (hi - lo)


def _causal_butterworth(x: np.ndarray, fps: float, smooth_s: float) -> np.ndarray:
    """Order-2 low-pass at 1/smooth_s Hz run forwards only (``lfilter`` in second-order
    sections), starting at rest on the first value: causal, with a phase lag of about
    ``smooth_s / (2 pi) * sqrt(2)`` s at low frequencies."""
    nyquist = fps / 2.0
    cutoff = 1.0 / smooth_s
    if cutoff >= nyquist or len(x) < 2:
        return x.copy()
    sos = butter(2, cutoff / nyquist, btype="low", output="sos")
    return sosfilt(sos, x, zi=sosfilt_zi(sos) * x[0])[0]


def smooth(pred: Any, fps: float, smooth_s: float, method: str = "moving_average") -> np.ndarray:
    """Smooth one session's per-frame predictions over about ``smooth_s`` seconds.

    Args:
        pred: predictions of one session, shape (n_frames,), in frame order.
        fps: frame rate of ``pred``, Hz (25 for the corpus labels).
        smooth_s: smoothing scale, seconds; 0 returns ``pred`` unchanged.
        method: ``moving_average``: centred mean over ``window_frames(fps, smooth_s)``
            frames, the window shrinking at the edges (no zero padding, so the edges keep
            their level); ``butterworth``: order-2 low-pass with cutoff ``1 / smooth_s``
            Hz, run forwards and backwards (zero phase), padded with an even reflection of
            one window length (shorter for short sessions); ``median``: running median
            over the same window, edges repeating the first/last value. These three read
            future frames (up to half a window; the Butterworth filter, the whole session).
            Causal (the output at frame t reads frames up to t only): ``trailing``: mean over
            the ``round(smooth_s * fps)`` frames ending at t (fewer at the start);
            ``causal_butterworth``: the same low-pass run forwards only, starting at rest
            on the first value (it lags the signal, as any causal filter does).

    Returns:
        Smoothed predictions, float, same shape as ``pred``.

    Raises:
        ValueError: unknown method, ``pred`` not 1-D, or non-finite values.
    """
    check_choice("smoothing method", method, SMOOTH_METHODS)
    x = np.asarray(pred, dtype=float)
    if x.ndim != 1:
        raise ValueError(
            f"smooth() takes one session's predictions as a 1-D array, got shape {x.shape}"
        )
    window = window_frames(fps, smooth_s)
    if smooth_s == 0 or window == 1 or len(x) == 0:
        return x
    if not np.isfinite(x).all():
        raise ValueError(
            f"predictions hold {int((~np.isfinite(x)).sum())} non-finite values; "
            "smoothing needs finite predictions (check the model's input imputation)"
        )
    if method == "moving_average":
        return _moving_average(x, window)
    if method == "butterworth":
        return _butterworth(x, fps, smooth_s, window)
    if method == "trailing":
        return _trailing_average(x, max(1, int(round(smooth_s * fps))))
    if method == "causal_butterworth":
        return _causal_butterworth(x, fps, smooth_s)
    return median_filter(x, size=window, mode="nearest")


def smooth_per_session(
    pred: Any, sessions: Any, fps: float, smooth_s: float, method: str = "moving_average"
) -> np.ndarray:
    """``smooth`` applied to each session of a concatenation of sessions separately.

    Args:
        pred: predictions, shape (n_rows,).
        sessions: session id of each row, shape (n_rows,); within a session the rows must be
            in frame order (they need not be contiguous).
        fps, smooth_s, method: as in ``smooth``.

    Returns:
        Smoothed predictions in the original row order.
    """
    x = np.asarray(pred, dtype=float)
    sessions = np.asarray(sessions)
    if sessions.shape != x.shape:
        raise ValueError(f"sessions has shape {sessions.shape} but pred has {x.shape}")
    out = x.copy()
    for session in np.unique(sessions):
        rows = np.flatnonzero(sessions == session)
        out[rows] = smooth(x[rows], fps, smooth_s, method)
    return out


def fit_smoothed_calibration(
    y: Any,
    pred: Any,
    listeners: Any,
    sessions: Any,
    fps: float,
    smooth_s: float,
    method: str = "moving_average",
    shrinkage: float = 100.0,
) -> dict[int | float, tuple[float, float]]:
    """The per-listener maps of ``global_calibrated``, fitted like the :class:`Rescaler`: on
    (out-of-fold) training predictions smoothed as the predictions the maps will transform.

    Smoothing removes the part of a prediction that varies faster than ``smooth_s``; a map
    fitted before it sees that part as noise (``a_L`` shrinks by var(signal) / var(prediction))
    and the smoothed, calibrated predictions then have too little spread. Smoothing commutes
    with an affine map (moving average and Butterworth are linear; the running median is
    equivariant), so the maps fitted here apply to the raw predictions or the smoothed ones alike.

    Args:
        y: label of each row (NaN rows are left out).
        pred: prediction of each row, unsmoothed (out of fold, ideally).
        listeners: listener id of each row.
        sessions: session id of each row (rows of a session in frame order).
        fps: frame rate, Hz; smooth_s: smoothing scale, seconds (0: none); method: as in :func:`smooth`.
        shrinkage: prior strength in rows (see :func:`~experiments.models.personalization.fit_listener_calibration`).

    Returns:
        listener id -> ``(a_L, b_L)``.
    """
    p = smooth_per_session(pred, sessions, fps, smooth_s, method) if smooth_s else pred
    y = np.asarray(y, dtype=float).ravel()
    ok = np.isfinite(y)
    return fit_listener_calibration(
        np.asarray(listeners, dtype=float).ravel()[ok], np.asarray(p, float)[ok], y[ok], shrinkage
    )


def rescaler_for(rescale: str) -> tuple[Rescaler, bool]:
    """The unfitted :class:`Rescaler` of the config's ``postprocess.rescale`` value, and whether
    it takes per-listener statistics (``listener``, ``listener_bias``: the personalized track).

    >>> r, per_listener = rescaler_for("listener_bias"); (r.mode, per_listener)
    ('bias', True)
    """
    check_choice("rescale mode", rescale, RESCALES)
    mode, per_listener = _RESCALE_PLAN[rescale]
    return Rescaler(mode), per_listener


def _moments(values: np.ndarray) -> tuple[float, float]:
    return float(values.mean()), float(values.std())


class Rescaler:
    """Maps predictions onto the training labels' mean and standard deviation.

    ``train``: ``(pred - mean(pred_train)) / std(pred_train) * std(y_train) + mean(y_train)``.
    ``bias``: ``pred - mean(pred_train) + mean(y_train)`` (level only, spread kept).
    ``none``: identity. When the training predictions have (near) zero spread, ``train``
    shifts only (scale 1), as there is nothing to standardise by.

    Given ``groups`` at fit (e.g. the listener of each training row), the statistics are
    taken per group and ``transform`` uses the group's own; a group unseen at fit, or seen
    with fewer than ``min_samples`` rows, uses the statistics over all training rows.

    Args:
        mode: one of ``RESCALE_MODES``.
        min_samples: fewest training rows for a group to get its own statistics.

    Example:

    >>> r = Rescaler("train").fit(y_train=[0.0, 2.0], pred_train=[0.0, 0.5])
    >>> r.transform([0.0, 0.25, 0.5]).tolist()
    [0.0, 1.0, 2.0]
    """

    def __init__(self, mode: str = "train", min_samples: int = 2):
        check_choice("rescale mode", mode, RESCALE_MODES)
        self.mode = mode
        self.min_samples = min_samples

    def fit(self, y_train: Any, pred_train: Any, groups: Any = None) -> Rescaler:
        """Learn label and prediction mean/std (overall and per group) from training rows."""
        y = np.asarray(y_train, dtype=float).ravel()
        p = np.asarray(pred_train, dtype=float).ravel()
        if y.shape != p.shape:
            raise ValueError(f"y_train has {len(y)} rows but pred_train has {len(p)}")
        if len(y) == 0:
            raise ValueError("Rescaler.fit needs at least one training row")
        self.global_ = (*_moments(y), *_moments(p))
        self.groups_ = {}
        if groups is not None:
            groups = np.asarray(groups).ravel()
            if groups.shape != y.shape:
                raise ValueError(f"groups has {len(groups)} rows but y_train has {len(y)}")
            for group in np.unique(groups):
                rows = groups == group
                if rows.sum() >= self.min_samples:
                    self.groups_[group.item()] = (*_moments(y[rows]), *_moments(p[rows]))
        return self

    def _apply(self, p: np.ndarray, stats: tuple[float, float, float, float]) -> np.ndarray:
        y_mean, y_std, p_mean, p_std = stats
        if self.mode == "bias":
            return p - p_mean + y_mean
        scale = y_std / p_std if p_std > 1e-12 else 1.0
        return (p - p_mean) * scale + y_mean

    def transform(self, pred: Any, group: Any = None) -> np.ndarray:
        """Rescale ``pred``.

        Args:
            pred: predictions, any shape.
            group: None (overall statistics), one group id for all of ``pred`` (e.g. the
                session's listener), or an array with one group id per element of ``pred``.
        """
        p = np.asarray(pred, dtype=float)
        if self.mode == "none":
            return p
        if not hasattr(self, "global_"):
            raise RuntimeError("Rescaler.transform called before fit")
        if group is None:
            return self._apply(p, self.global_)
        group = np.asarray(group)
        if group.ndim == 0:
            return self._apply(p, self.groups_.get(group.item(), self.global_))
        if group.shape != p.shape:
            raise ValueError(f"group has shape {group.shape} but pred has {p.shape}")
        out = np.empty_like(p)
        for g in np.unique(group):
            rows = group == g
            out[rows] = self._apply(p[rows], self.groups_.get(g.item(), self.global_))
        return out

    def fit_transform(self, y_train: Any, pred_train: Any, groups: Any = None) -> np.ndarray:
        """``fit`` then ``transform`` of the training predictions themselves."""
        return self.fit(y_train, pred_train, groups).transform(pred_train, groups)
