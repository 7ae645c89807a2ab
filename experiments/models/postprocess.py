"""Post-processing of per-frame predictions: smoothing, session by session, and rescaling to the training labels'
level and spread (fitted on training predictions smoothed as the ones it transforms, since smoothing shrinks them)."""

from __future__ import annotations

import math
from collections import deque
from typing import Any

import numpy as np
from scipy.ndimage import median_filter
from scipy.signal import butter, sosfilt, sosfilt_zi, sosfiltfilt

from ..config.choices import check_choice
from ..config.options import CAUSAL_SMOOTH_METHODS, RESCALES, SMOOTH_METHODS
from .personalization import fit_listener_calibration

#: what ``Rescaler`` itself does; the config's ``RESCALES`` add whether the statistics are per listener
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
    """Odd length in frames of a centred window of ``smooth_s`` seconds at ``fps`` Hz (1: no smoothing)."""
    if fps <= 0 or smooth_s < 0:
        raise ValueError(f"need fps > 0 Hz and smooth_s >= 0 s, got fps={fps}, smooth_s={smooth_s}")
    n = int(round(smooth_s * fps))
    return 2 * (n // 2) + 1


def _window_mean(x: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Each frame's mean of ``x[lo:hi]``, from cumulative sums."""
    csum = np.concatenate([[0.0], np.cumsum(x)])
    return (csum[hi] - csum[lo]) / (hi - lo)


def _butterworth_sos(fps: float, smooth_s: float) -> np.ndarray | None:
    """The order-2 low-pass at 1/smooth_s Hz as second-order sections (None: that is above Nyquist)."""
    nyquist = fps / 2.0
    cutoff = 1.0 / smooth_s
    return None if cutoff >= nyquist else butter(2, cutoff / nyquist, btype="low", output="sos")


def _butterworth(
    x: np.ndarray, fps: float, smooth_s: float, window: int, causal: bool
) -> np.ndarray:
    """Order-2 low-pass at 1/smooth_s Hz: zero phase, padded by even reflection, or (``causal``) run forwards
    only from rest on the first value, a phase lag of about ``smooth_s / (2 pi) * sqrt(2)`` s."""
    sos = _butterworth_sos(fps, smooth_s)
    if sos is None or len(x) < 2:
        return x.copy()
    if causal:
        return sosfilt(sos, x, zi=sosfilt_zi(sos) * x[0])[0]
    # one window of reflected signal outlasts the filter's transient (time constant
    # smooth_s / (2 pi) s); capped by the length so short sessions work
    return sosfiltfilt(sos, x, padtype="even", padlen=min(window, len(x) - 1))


def smooth(pred: Any, fps: float, smooth_s: float, method: str = "moving_average") -> np.ndarray:
    """One session's per-frame predictions ``pred`` (at ``fps`` Hz) smoothed over ``smooth_s`` seconds (0:
    unchanged) by ``method``: ``moving_average`` (centred, the window shrinking at the edges), ``butterworth`` and
    ``median`` read future frames; ``trailing`` (the mean of the frames ending at t) and ``causal_butterworth`` do not.
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
    frame = np.arange(len(x))
    if method == "moving_average":
        half = window // 2
        return _window_mean(x, np.maximum(frame - half, 0), np.minimum(frame + half + 1, len(x)))
    if method == "trailing":
        lo = np.maximum(frame + 1 - max(1, int(round(smooth_s * fps))), 0)
        return _window_mean(x, lo, frame + 1)
    if method in ("butterworth", "causal_butterworth"):
        return _butterworth(x, fps, smooth_s, window, causal=method == "causal_butterworth")
    return median_filter(x, size=window, mode="nearest")


class StreamingSmoother:
    """:func:`smooth` by a causal ``method`` frame by frame: :meth:`push` takes one session's next prediction and
    returns ``smooth(predictions so far, fps, smooth_s, method)`` at that frame, the same as smoothing the whole
    session (``trailing`` bit for bit: its running sum is ``np.cumsum``'s; ``causal_butterworth``: ``sosfilt``'s
    recurrence sample by sample, in its order of operations). One smoother per session."""

    def __init__(self, method: str, smooth_s: float, fps: float):
        check_choice("smoothing method", method, SMOOTH_METHODS)
        if method not in CAUSAL_SMOOTH_METHODS:
            raise ValueError(
                f"smoothing method {method!r} reads future frames, so it cannot run frame by frame; "
                f"the causal ones: {', '.join(CAUSAL_SMOOTH_METHODS)}"
            )
        self.method, self.smooth_s, self.fps = method, float(smooth_s), float(fps)
        self.passthrough = smooth_s == 0 or window_frames(fps, smooth_s) == 1
        if method == "trailing":  # the cumulative sums of the window's frames and the one before
            self._csum: deque[float] = deque([0.0], maxlen=max(1, int(round(smooth_s * fps))) + 1)
        elif not self.passthrough:
            self._sos = _butterworth_sos(fps, smooth_s)
            self.passthrough = self._sos is None
            self._sections = [] if self._sos is None else self._sos.tolist()
            self._zi: list[list[float]] = []

    def push(self, p: float) -> float:
        """The smoothed prediction at the frame of ``p``."""
        p = float(p)
        if self.passthrough:
            return p
        if not math.isfinite(p):
            raise ValueError(
                f"prediction {p} is not finite; smoothing needs finite predictions (check the model's input imputation)"
            )
        if self.method == "trailing":
            c = self._csum
            c.append(c[-1] + p)
            return (c[-1] - c[0]) / (len(c) - 1)
        if not self._zi:  # from rest on the first value
            self._zi = (sosfilt_zi(self._sos) * p).tolist()
        # sosfilt's recurrence (transposed direct form II, a0 = 1), without a call's cost
        for (b0, b1, b2, _, a1, a2), z in zip(self._sections, self._zi, strict=True):
            y = b0 * p + z[0]
            z[0] = b1 * p - a1 * y + z[1]
            z[1] = b2 * p - a2 * y
            p = y
        return p


def smooth_per_session(
    pred: Any, sessions: Any, fps: float, smooth_s: float, method: str = "moving_average"
) -> np.ndarray:
    """:func:`smooth` of each session separately (``sessions``: each row's, its rows in frame order)."""
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
    """The per-listener maps of ``global_calibrated`` fitted on predictions smoothed as the ones they transform."""
    p = smooth_per_session(pred, sessions, fps, smooth_s, method) if smooth_s else pred
    y = np.asarray(y, dtype=float).ravel()
    ok = np.isfinite(y)
    return fit_listener_calibration(
        np.asarray(listeners, dtype=float).ravel()[ok], np.asarray(p, float)[ok], y[ok], shrinkage
    )


def rescaler_for(rescale: str) -> tuple[Rescaler, bool]:
    """The unfitted :class:`Rescaler` of the config's ``postprocess.rescale`` and whether its statistics are per
    listener.

    >>> r, per_listener = rescaler_for("listener_bias"); (r.mode, per_listener)
    ('bias', True)
    """
    check_choice("rescale mode", rescale, RESCALES)
    mode, per_listener = _RESCALE_PLAN[rescale]
    return Rescaler(mode), per_listener


def _moments(values: np.ndarray) -> tuple[float, float]:
    return float(values.mean()), float(values.std())


class Rescaler:
    """Maps predictions onto the training labels' mean and standard deviation (``train``; a shift only when the
    training predictions have no spread), their mean only (``bias``) or not (``none``); given ``groups`` at fit,
    per group, a group unseen or under ``min_samples`` rows taking the overall statistics."""

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
        """``pred`` rescaled by the statistics of ``group``: None (overall), one id, or one id per element."""
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
