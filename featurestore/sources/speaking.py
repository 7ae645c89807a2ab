"""Who is talking, per 10 ms eGeMAPS frame, from the faces' mouth movement
(:func:`speaking_from_faces`) or a transcript's cues (:func:`speaking_from_transcript`), and the
per-role voice channels built from it: the scene's rows, ``valid`` where that role talks. The
rule and its reasons: docs/channels.md (who is talking).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..features import Features

TALKING_ROLES = ("speaker", "listener")
F0_COLUMN = "F0semitoneFrom27.5Hz_sma3nz"
LOUDNESS_COLUMN = "Loudness_sma3"
MOUTH_COLUMN = "mouth_open"


@dataclass(frozen=True)
class SpeakingRule:
    """Parameters of :func:`speaking_from_faces`: ``min_loudness`` (eGeMAPS loudness),
    ``window_s`` (s), ``min_activity`` (std of ``mouth_open``, interocular), ``tie_ratio`` (>= 1)."""

    min_loudness: float = 0.05
    window_s: float = 0.6
    min_activity: float = 0.02
    tie_ratio: float = 1.25


def _column(feats: Features, name: str, what: str) -> np.ndarray:
    if name not in feats.columns:
        raise ValueError(
            f"{what} has no column {name!r} (columns: {feats.columns[:8]}...); "
            "re-extract it with the current extractor"
        )
    return feats.data[:, feats.columns.index(name)]


def voiced_frames(scene: Features, min_loudness: float = SpeakingRule.min_loudness) -> np.ndarray:
    """Bool per scene frame: valid, F0 > 0 and loudness > ``min_loudness``."""
    f0 = _column(scene, F0_COLUMN, "scene/egemaps")
    loud = _column(scene, LOUDNESS_COLUMN, "scene/egemaps")
    with np.errstate(invalid="ignore"):
        return scene.valid & (f0 > 0) & (loud > min_loudness)


def mouth_activity(track: Features, times: np.ndarray, window_s: float = 0.6) -> np.ndarray:
    """Rolling std of ``mouth_open`` over ``window_s`` seconds, at ``times`` (s); NaN = unknown."""
    times = np.asarray(times, dtype=np.float64)
    x = _column(track, MOUTH_COLUMN, "face_geom").astype(np.float64)
    x[~track.valid] = np.nan
    if x.size == 0:
        return np.full(times.shape, np.nan)
    series = pd.Series(x, index=pd.to_timedelta(track.time, unit="s"))
    rolling = series.rolling(pd.Timedelta(seconds=window_s), center=True, min_periods=2).std()
    # a sample without a face is unknown even if its neighbours had one
    act = np.where(np.isnan(x), np.nan, rolling.to_numpy())

    t = track.time
    i1 = np.clip(np.searchsorted(t, times), 0, t.size - 1)
    i0 = np.clip(i1 - 1, 0, t.size - 1)
    span = t[i1] - t[i0]
    w = np.clip(np.divide(times - t[i0], span, out=np.zeros_like(times), where=span > 0), 0, 1)
    a0, a1 = act[i0], act[i1]
    out = a0 + w * (a1 - a0)  # NaN when either neighbour is unknown ...
    nearest = np.where(w < 0.5, i0, i1)
    out = np.where(np.isnan(out), act[nearest], out)  # ... then the nearest one decides
    period = float(np.median(np.diff(t))) if t.size > 1 else window_s
    out[np.abs(times - t[nearest]) > period] = np.nan
    return out


def mouth_activity_lookahead_s(track: Features, window_s: float = 0.6) -> float:
    """Seconds after a time ``t`` that :func:`mouth_activity` at ``t`` reads of ``track``: half
    the window plus the longest step between two samples (``window_s`` with fewer than two).

    >>> f = Features([[0.1]] * 5, time=[0.0, 0.2, 0.4, 0.6, 0.8], valid=[True] * 5, columns=[MOUTH_COLUMN])
    >>> round(mouth_activity_lookahead_s(f, 0.6), 3)
    0.5
    """
    t = np.asarray(track.time, dtype=np.float64)
    step = float(np.max(np.diff(t))) if t.size > 1 else window_s
    return window_s / 2 + step


def speaking_from_faces(
    scene: Features, mouth: Mapping[str, Features], *, rule: SpeakingRule | None = None
) -> dict[str, np.ndarray]:
    """Bool per ``scene/egemaps`` frame for ``speaker`` and ``listener``: voiced and that role's
    mouth moving (``mouth``: role -> its ``face_geom``; a missing role is never visible)."""
    rule = rule or SpeakingRule()
    unknown = set(mouth) - set(TALKING_ROLES)
    if unknown:
        raise ValueError(f"mouth tracks for unknown roles {sorted(unknown)}; use {TALKING_ROLES}")
    voiced = voiced_frames(scene, rule.min_loudness)
    act = {
        role: mouth_activity(mouth[role], scene.time, rule.window_s)
        if role in mouth
        else np.full(scene.time.shape, np.nan)
        for role in TALKING_ROLES
    }
    out = {}
    for role, other in (TALKING_ROLES, TALKING_ROLES[::-1]):
        a, b = act[role], act[other]
        with np.errstate(invalid="ignore"):
            not_dominated = np.isnan(b) | (a * rule.tie_ratio >= b)
            out[role] = voiced & (a >= rule.min_activity) & not_dominated
    return out


def speaking_from_transcript(
    cues: Iterable[tuple[float, float, str]], times: np.ndarray
) -> dict[str, np.ndarray]:
    """Bool per time (sorted, seconds) for ``speaker`` and ``listener``: ``start_s <= t < end_s``
    of one of that role's ``cues`` ``(start_s, end_s, role)``."""
    times = np.asarray(times, dtype=np.float64)
    if np.any(np.diff(times) < 0):
        raise ValueError("speaking_from_transcript: times must be sorted ascending (seconds)")
    bounds: dict[str, list[tuple[float, float]]] = {role: [] for role in TALKING_ROLES}
    for cue in cues:
        start, end, role = cue
        if role not in bounds:
            raise ValueError(f"transcript cue {cue!r}: role must be one of {TALKING_ROLES}")
        if not end >= start:
            raise ValueError(f"transcript cue {cue!r}: end is before start")
        bounds[role].append((float(start), float(end)))
    out = {}
    for role, pairs in bounds.items():
        edges = np.array(pairs, dtype=np.float64).reshape(-1, 2)
        # +1 at each cue's first frame, -1 after its last: overlapping cues simply add up
        depth = np.zeros(times.size + 1, dtype=np.int64)
        np.add.at(depth, np.searchsorted(times, edges[:, 0], side="left"), 1)
        np.add.at(depth, np.searchsorted(times, edges[:, 1], side="left"), -1)
        out[role] = np.cumsum(depth[:-1]) > 0
    return out


def role_channels(scene: Features, speaking: Mapping[str, np.ndarray]) -> dict[str, Features]:
    """Per-role egemaps Features: the scene's data and time (shared), ``valid`` where the scene's
    is and that role talks (``speaking``: one bool per scene frame)."""
    out = {}
    for role, talking in speaking.items():
        talking = np.asarray(talking, dtype=bool)
        if talking.shape != scene.valid.shape:
            raise ValueError(
                f"speaking[{role!r}] has shape {talking.shape} but scene/egemaps has "
                f"{scene.valid.shape[0]} frames; compute it on the scene's times"
            )
        out[role] = Features(scene.data, scene.time, scene.valid & talking, scene.columns)
    return out
