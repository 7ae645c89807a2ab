"""A full-size synthetic feature store, written without any media, with planted structure.

OMG-Empathy is licence-gated; the demo corpus (:mod:`featurestore.demo`) is small. This
module writes a store of the *real* corpus' size and shape straight into HDF5 shards, so
benchmarks, scaling studies and model checks run at full size in seconds. Nothing is
decoded or extracted: every channel is drawn from a few latent signals, and the labels
depend on them in a known way, so a pipeline can be checked for *quality* too (it should
find the listener, the delay and the per-listener scaling).

**Sessions.** ``n_sessions`` sessions, 8 stories per listener: session ``i`` is listener
``i // 8 + 1``, story ``i % 8 + 1`` (``Subject_<L>_Story_<S>``); the default 80 are the real
10 listeners x 8 stories, 160 are 20 listeners. The speaker comes from
:data:`featurestore.manifest.STORY_SPEAKER`, the split from :data:`~featurestore.manifest.SPLITS`.

**Lengths** (:func:`session_lengths`). Frames at 25 fps, multiples of 25, between 4,700 and
11,925. Each length is ``4700 + 7225 * Beta(2.5, b)``, ``b`` chosen so the mean is the real
corpus mean (633,850 / 80 = 7,923 frames). For the default 80 sessions the draws are then
made to sum to exactly 633,850 frames, the real total: the excess over 4,700 frames is
rescaled by one common factor (sessions that would pass 11,925 are clipped there and the
others rescaled again), and the lengths are rounded to multiples of 25 by the largest-
remainder method (round all down, then add 25 frames to the few sessions with the largest
remainders until the sum matches), which never leaves the range. Other sizes keep the same
distribution without an exact total.

**Channels** (real widths, rates and column names):

==================================  =====  ===========  ==============================================
channel                             cols   rate         columns
==================================  =====  ===========  ==============================================
``speaker|listener/face_geom``      17     face_fps     :data:`featurestore.extractors.face_geom.COLUMNS`
``speaker|listener/face_au``        20     face_fps     :data:`AU_COLUMNS` (py-feat Detectorv1, xgb)
``scene/egemaps``                   25     100 Hz       openSMILE eGeMAPSv02 LLD names
``speaker|listener/egemaps``        25     100 Hz       the scene rows (HDF5 hard links, stored once);
                                                        ``valid`` = that role talks
==================================  =====  ===========  ==============================================

Face samples sit at the video frames :func:`featurestore.media.iter_frames` would sample at
``face_fps`` (time = frame / 25 s); eGeMAPS rows at ``k * 0.01`` s, ``4 * n_frames - 4`` of them
(what openSMILE returns for the session's audio). About 3 % of each role's face samples are
invalid (no face: NaN, ``valid`` False) in bursts of about a second. The speaker talks in
phrases of 1.2-3.5 s with 0.35-1.5 s pauses (about 70 % of the time), the listener
backchannels now and then (about 5 %); per-role eGeMAPS ``valid`` marks voiced frames of
that role's talk, as :mod:`featurestore.speaking` does. Unvoiced frames hold 0 in the
voice-quality ``*_sma3nz`` columns and -201 in the formant amplitudes, as openSMILE writes.

**Latent signals** (100 Hz, Gaussian noise low-pass filtered with a 2nd-order Butterworth
magnitude response, unit variance):

- ``affect(t)`` (0.05 Hz): the listener's feeling. It drives the listener's face:
  ``lip_corner_pull`` (+0.045 IOD per unit), ``lip_corner_raise`` (+0.03), ``eye_open_*``
  (-0.012), ``brow_gap`` (+0.008), AU12 and AU06 (logit +1.5, +1.2), AU04 and AU15 (-0.8,
  -0.7) ..., scaled by a per-listener expressivity in [0.7, 1.3], plus noise.
- ``voice(t)`` (0.1 Hz): the speaker's vocal intensity. It drives the speaker's eGeMAPS
  ``Loudness_sma3`` (+0.25 per unit) and ``F0semitoneFrom27.5Hz_sma3nz`` (+1.5 semitones)
  on voiced speaker frames, and the speaker's brows (``brow_raise_*``, AU01, AU02).
- other latents carry no label information: the speaker's own expression, head motion,
  mouth movement while talking, blinks, the listener's brows.

**Labels** ``valence_self`` (25 fps), for listener ``L``, with ``d = 1.5`` s::

    valence(t) = offset_L + gain_L * affect(t - d) + 0.08 * voice(t - d)
                 + 0.05 * drift(t) + 0.01 * jitter(t),          clipped to [-1, 1]

with ``gain_L`` in [0.2, 0.45] and ``offset_L`` in [-0.3, 0.3] per listener, ``drift`` a
0.01 Hz and ``jitter`` a 1 Hz unit latent. So the listener's face at ``t`` shows in the
valence 1.5 s later (a model needs a label delay), listener features predict valence well
(correlation about 0.9 within a session for a windowed ``lip_corner_pull``), speaker
features weakly (about 0.2 at best), and per-listener calibration pays. The numbers of a
build are written to ``<store>/synth_truth.json``.

**Determinism.** Everything random comes from ``numpy.random.SeedSequence`` keyed by the
seed and the listener, speaker or session, so a session's data depend only on the seed,
its listener and story, and its length (for the default 80 sessions the lengths are drawn
jointly to meet the total). Same seed, same arrays.

**Cost.** One session at a time is generated and written (a few MB in memory); the 80-session
store (about 310 MB: the per-role eGeMAPS channels link the scene's rows, see
:class:`featurestore.store.Channel`) takes about 10 s on one core.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from .extractors.face_geom import COLUMNS as FACE_GEOM_COLUMNS
from .manifest import SPLITS, STORY_SPEAKER, story_split
from .media import sample_mask_step
from .store import LABEL_FPS, Channel, SessionMeta, Store, cache_key, session_name, utc_now

#: The real OMG-Empathy corpus: sessions, total frames and per-session length range (frames).
CORPUS_SESSIONS = 80
CORPUS_TOTAL_FRAMES = 633_850
LENGTH_RANGE = (4_700, 11_925)
#: session lengths are multiples of this many frames
LENGTH_STEP = 25
STORIES_PER_LISTENER = 8
#: Beta(a, b) shape of the length distribution; b follows from the corpus mean
_LENGTH_BETA_A = 2.5

SYNTH_EXTRACTOR = "synth"
SYNTH_VERSION = "1"
SYNTH_TRUTH = "synth_truth.json"

#: latent grid rate and eGeMAPS hop
GRID_HZ = 100
EGEMAPS_HOP_S = 1.0 / GRID_HZ
#: label delay (seconds): valence at t follows the listener's affect at t - LABEL_DELAY_S
LABEL_DELAY_S = 1.5
#: weight of the speaker's voice latent in the valence
SPEAKER_WEIGHT = 0.08
DRIFT_SD, JITTER_SD = 0.05, 0.01
AFFECT_HZ, VOICE_HZ, EXPRESSION_HZ, HEAD_HZ, DRIFT_HZ, JITTER_HZ = 0.05, 0.1, 0.05, 0.2, 0.01, 1.0

#: AU columns of py-feat's Detectorv1 with the ``xgb`` AU model (its ``au_columns``)
AU_COLUMNS = (
    "AU01", "AU02", "AU04", "AU05", "AU06", "AU07", "AU09", "AU10", "AU11", "AU12",
    "AU14", "AU15", "AU17", "AU20", "AU23", "AU24", "AU25", "AU26", "AU28", "AU43",
)  # fmt: skip

CHANNEL_KEYS = (
    "speaker/face_geom", "listener/face_geom", "speaker/face_au", "listener/face_au",
    "scene/egemaps", "speaker/egemaps", "listener/egemaps",
)  # fmt: skip

# Face latents, in this order, are the columns of the loading tables below.
_FACE_LATENTS = ("affect", "brow", "mouth", "head1", "head2", "head3", "blink")

# face_geom: column -> (base, noise sd, {latent: loading}); "base" may be overridden per role
_GEOM_SPEC: dict[str, tuple[float, float, dict[str, float]]] = {
    "brow_raise_l": (0.32, 0.010, {"brow": 0.025}),
    "brow_raise_r": (0.32, 0.010, {"brow": 0.025}),
    "brow_gap": (0.24, 0.008, {"affect": 0.008}),
    "eye_open_l": (0.29, 0.015, {"affect": -0.012, "blink": -0.15}),
    "eye_open_r": (0.29, 0.015, {"affect": -0.012, "blink": -0.15}),
    "blink": (0.0, 0.0, {"blink": 1.0}),
    "lip_corner_pull": (0.60, 0.012, {"affect": 0.045, "mouth": 0.02}),
    "lip_corner_raise": (0.02, 0.010, {"affect": 0.03}),
    "mouth_open": (0.02, 0.010, {"mouth": 0.16}),
    "lip_thickness": (0.21, 0.008, {"affect": -0.008, "mouth": -0.02}),
    "jaw_drop": (0.78, 0.010, {"mouth": 0.12}),
    "head_yaw": (0.0, 1.0, {"head1": 6.0}),
    "head_pitch": (-2.0, 1.0, {"head2": 4.0}),
    "head_roll": (0.0, 0.7, {"head3": 3.0}),
    "face_scale": (0.10, 0.002, {}),
    "face_x": (0.5, 0.005, {"head1": 0.03}),
    "face_y": (0.45, 0.005, {"head2": 0.02}),
}
_GEOM_NONNEG = ("mouth_open", "brow_gap", "eye_open_l", "eye_open_r", "lip_thickness")

# face_au: AU -> (logit bias, {latent: loading}); activation = sigmoid(bias + loadings + N(0, 0.5))
_AU_NOISE = 0.5
_AU_SPEC: dict[str, tuple[float, dict[str, float]]] = {
    "AU01": (-1.5, {"brow": 0.8}),
    "AU02": (-1.8, {"brow": 0.7}),
    "AU04": (-1.2, {"affect": -0.8}),
    "AU05": (-2.0, {"brow": 0.3}),
    "AU06": (-1.0, {"affect": 1.2}),
    "AU07": (-0.8, {"affect": 0.4}),
    "AU09": (-2.2, {"affect": -0.2}),
    "AU10": (-1.0, {"affect": 0.5}),
    "AU11": (-2.0, {"affect": 0.2}),
    "AU12": (-0.8, {"affect": 1.5}),
    "AU14": (-0.6, {"affect": 0.4}),
    "AU15": (-1.5, {"affect": -0.7}),
    "AU17": (-0.8, {"affect": -0.3, "mouth": -0.5}),
    "AU20": (-1.8, {}),
    "AU23": (-1.2, {"affect": -0.2}),
    "AU24": (-1.5, {"affect": -0.3}),
    "AU25": (-0.5, {"mouth": 2.5}),
    "AU26": (-1.0, {"mouth": 2.0}),
    "AU28": (-2.5, {}),
    "AU43": (-3.0, {"blink": 5.0}),
}

# eGeMAPS: column -> (silence mean, sd, voiced mean, sd, unvoiced value or None = keep drawing)
_EGEMAPS_SPEC: dict[str, tuple[float, float, float, float, float | None]] = {
    "Loudness_sma3": (0.05, 0.02, 0.9, 0.25, None),
    "alphaRatio_sma3": (-20.0, 5.0, -12.0, 4.0, None),
    "hammarbergIndex_sma3": (20.0, 6.0, 15.0, 5.0, None),
    "slope0-500_sma3": (0.0, 0.03, 0.05, 0.04, None),
    "slope500-1500_sma3": (-0.01, 0.01, -0.02, 0.01, None),
    "spectralFlux_sma3": (0.05, 0.03, 0.5, 0.3, None),
    "mfcc1_sma3": (5.0, 5.0, 25.0, 8.0, None),
    "mfcc2_sma3": (5.0, 5.0, 10.0, 8.0, None),
    "mfcc3_sma3": (0.0, 6.0, 5.0, 8.0, None),
    "mfcc4_sma3": (0.0, 6.0, 2.0, 8.0, None),
    "F0semitoneFrom27.5Hz_sma3nz": (0.0, 0.0, 30.0, 2.0, 0.0),
    "jitterLocal_sma3nz": (0.0, 0.0, 0.03, 0.02, 0.0),
    "shimmerLocaldB_sma3nz": (0.0, 0.0, 1.2, 0.5, 0.0),
    "HNRdBACF_sma3nz": (0.0, 0.0, 6.0, 3.0, 0.0),
    "logRelF0-H1-H2_sma3nz": (0.0, 0.0, 5.0, 6.0, 0.0),
    "logRelF0-H1-A3_sma3nz": (0.0, 0.0, 20.0, 8.0, 0.0),
    "F1frequency_sma3nz": (650.0, 150.0, 550.0, 150.0, None),
    "F1bandwidth_sma3nz": (1200.0, 300.0, 900.0, 300.0, None),
    "F1amplitudeLogRelF0_sma3nz": (-201.0, 0.0, -80.0, 30.0, -201.0),
    "F2frequency_sma3nz": (1700.0, 250.0, 1600.0, 300.0, None),
    "F2bandwidth_sma3nz": (1100.0, 300.0, 1000.0, 300.0, None),
    "F2amplitudeLogRelF0_sma3nz": (-201.0, 0.0, -90.0, 30.0, -201.0),
    "F3frequency_sma3nz": (2700.0, 250.0, 2600.0, 300.0, None),
    "F3bandwidth_sma3nz": (1200.0, 300.0, 1100.0, 300.0, None),
    "F3amplitudeLogRelF0_sma3nz": (-201.0, 0.0, -95.0, 30.0, -201.0),
}
_EGEMAPS_NONNEG = ("Loudness_sma3", "spectralFlux_sma3", "jitterLocal_sma3nz", "shimmerLocaldB_sma3nz")
_EGEMAPS_MIN = {"F1bandwidth_sma3nz": 50.0, "F2bandwidth_sma3nz": 50.0, "F3bandwidth_sma3nz": 50.0,
                "F1frequency_sma3nz": 100.0, "F2frequency_sma3nz": 300.0, "F3frequency_sma3nz": 800.0}  # fmt: skip
LOUDNESS_PER_VOICE, F0_PER_VOICE = 0.25, 1.5


# ------------------------------------------------------------------ names and lengths
@lru_cache(maxsize=1)
def egemaps_columns() -> tuple[str, ...]:
    """The 25 eGeMAPSv02 LLD column names, as openSMILE itself reports them."""
    from .extractors.egemaps import EgemapsExtractor

    names = tuple(str(c) for c in EgemapsExtractor().smile().feature_names)
    unknown = set(names) ^ set(_EGEMAPS_SPEC)
    if unknown:  # a different openSMILE release renamed a column: the table below needs it
        raise RuntimeError(
            f"openSMILE's eGeMAPSv02 LLD names differ from featurestore.synth's table in {sorted(unknown)}; "
            "update _EGEMAPS_SPEC in featurestore/synth.py"
        )
    return names


def session_plan(n_sessions: int) -> list[tuple[int, int]]:
    """``(listener, story)`` of each synthetic session: 8 stories per listener, listener-major.

    >>> session_plan(10)[-3:]
    [(1, 8), (2, 1), (2, 2)]
    """
    if int(n_sessions) < 1:
        raise ValueError(f"n_sessions must be at least 1, got {n_sessions}")
    return [(i // STORIES_PER_LISTENER + 1, i % STORIES_PER_LISTENER + 1) for i in range(int(n_sessions))]


def _length_bounds(length_range: tuple[int, int]) -> tuple[int, int]:
    lo, hi = (int(v) for v in length_range)
    lo = -(-lo // LENGTH_STEP) * LENGTH_STEP
    hi = hi // LENGTH_STEP * LENGTH_STEP
    if lo < LENGTH_STEP or hi < lo:
        raise ValueError(
            f"length_range {tuple(length_range)} holds no multiple of {LENGTH_STEP} frames of at least "
            f"{LENGTH_STEP}; give (min, max) frames with min >= {LENGTH_STEP} and max >= min"
        )
    return lo, hi


def session_lengths(
    n_sessions: int,
    seed: int = 0,
    length_range: tuple[int, int] = LENGTH_RANGE,
    total: int | None = None,
) -> np.ndarray:
    """Session lengths in frames (25 fps): multiples of 25 inside ``length_range``.

    Drawn as ``lo + (hi - lo) * Beta(2.5, b)``, ``b`` chosen so that the mean over the real
    range is the corpus mean (7,923 frames). ``total`` (frames) makes them sum exactly to it
    (see the module docstring); by default that is 633,850 for 80 sessions in the real range
    and no constraint otherwise. The first ``k`` raw draws are the same for any ``n_sessions``.

    >>> lengths = session_lengths(80)
    >>> int(lengths.sum()), int(lengths.min()) >= 4700, int(lengths.max()) <= 11925
    (633850, True, True)
    """
    n = len(session_plan(n_sessions))
    lo, hi = _length_bounds(length_range)
    if total is None and n == CORPUS_SESSIONS and (lo, hi) == LENGTH_RANGE:
        total = CORPUS_TOTAL_FRAMES
    mean_frac = (CORPUS_TOTAL_FRAMES / CORPUS_SESSIONS - LENGTH_RANGE[0]) / (LENGTH_RANGE[1] - LENGTH_RANGE[0])
    b = _LENGTH_BETA_A * (1 - mean_frac) / mean_frac
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0]))
    span = hi - lo
    excess = span * rng.beta(_LENGTH_BETA_A, b, size=n)
    if total is None:
        return (lo + LENGTH_STEP * np.round(excess / LENGTH_STEP)).astype(np.int64)
    total = int(total)
    want = total - n * lo
    if total % LENGTH_STEP or not 0 <= want <= n * span:
        raise ValueError(
            f"total {total} frames cannot be split into {n} sessions of {lo}-{hi} frames in steps of "
            f"{LENGTH_STEP}; choose a total that is a multiple of {LENGTH_STEP} between {n * lo} and {n * hi}"
        )
    # one common scale for the excess over lo; sessions that pass hi stay at hi, the rest rescale
    for _ in range(n + 1):
        at_top = excess >= span
        free = excess[~at_top].sum()
        rest = want - span * at_top.sum()
        if free <= 0:
            excess[~at_top] = rest / max((~at_top).sum(), 1)
        else:
            excess[~at_top] *= rest / free
        if not np.any(excess[~at_top] > span):
            break
        excess = np.minimum(excess, span)
    units = excess / LENGTH_STEP
    steps = np.floor(units + 1e-9).astype(np.int64)
    short = want // LENGTH_STEP - int(steps.sum())
    if short:  # largest remainder: the sessions closest to the next step get it
        order = np.argsort(-(units - steps), kind="stable")
        steps[order[:short]] += 1
    return lo + LENGTH_STEP * steps


# ------------------------------------------------------------------ random building blocks
def _rng(seed: int, *key: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([int(seed), *(int(k) for k in key)]))


def _smooth_noise(rng: np.random.Generator, m: int, cutoff_hz: float, rate: float = GRID_HZ) -> np.ndarray:
    """Stationary unit-variance Gaussian noise of ``m`` samples at ``rate`` Hz, low-passed.

    Filtered in the frequency domain with a 2nd-order Butterworth magnitude response
    ``1 / sqrt(1 + (f / cutoff_hz)^4)``; the variance is normalised analytically (not per
    draw), so a short session keeps the slow process' natural spread.
    """
    nfft = max(m, 2)
    white = rng.standard_normal(nfft)
    f = np.fft.rfftfreq(nfft, 1.0 / rate)
    gain = 1.0 / np.sqrt(1.0 + (f / cutoff_hz) ** 4)
    full_f = np.abs(np.fft.fftfreq(nfft, 1.0 / rate))
    sd = math.sqrt(float(np.mean(1.0 / (1.0 + (full_f / cutoff_hz) ** 4))))
    return (np.fft.irfft(np.fft.rfft(white) * gain, n=nfft)[:m] / sd).astype(np.float32)


def _alternating(rng: np.random.Generator, m: int, on_s: tuple[float, float], off_s: tuple[float, float]) -> np.ndarray:
    """Boolean mask on the grid alternating on/off runs of uniform durations (seconds), random phase."""
    cycle_min = (on_s[0] + off_s[0]) * GRID_HZ
    k = int(m / cycle_min) + 2
    on = rng.uniform(*on_s, size=k) * GRID_HZ
    off = rng.uniform(*off_s, size=k) * GRID_HZ
    bounds = np.cumsum(np.column_stack([on, off]).ravel()) - rng.uniform(0, on[0] + off[0])
    idx = np.searchsorted(bounds, np.arange(m), side="right")
    return idx % 2 == 0


def _bursts(rng: np.random.Generator, m: int, rate_per_s: float, mean_s: float, min_s: float) -> np.ndarray:
    """Boolean mask on the grid: Poisson events (``rate_per_s``), exponential lengths (s)."""
    k = rng.poisson(rate_per_s * m / GRID_HZ)
    starts = rng.integers(0, m, size=k)
    lengths = np.maximum(rng.exponential(mean_s, size=k), min_s) * GRID_HZ
    edges = np.zeros(m + 1, np.int32)
    np.add.at(edges, starts, 1)
    np.add.at(edges, np.minimum(starts + lengths.astype(np.int64), m), -1)
    return np.cumsum(edges[:m]) > 0


# ------------------------------------------------------------------ per-listener / speaker truth
@dataclass(frozen=True)
class ListenerTruth:
    """Planted per-listener parameters (valence gain and offset, face expressivity ...)."""

    gain: float
    offset: float
    expressivity: float
    f0_semitones: float
    mouth_width: float
    backchannel_per_s: float


@dataclass(frozen=True)
class SpeakerTruth:
    """Planted per-speaker parameters (voice pitch and loudness, mouth width)."""

    f0_semitones: float
    loudness: float
    mouth_width: float


def listener_truth(seed: int, listener: int) -> ListenerTruth:
    """The planted parameters of one listener (depend only on ``seed`` and ``listener``)."""
    r = _rng(seed, 2, listener)
    return ListenerTruth(
        gain=float(r.uniform(0.2, 0.45)),
        offset=float(r.uniform(-0.3, 0.3)),
        expressivity=float(r.uniform(0.7, 1.3)),
        f0_semitones=float(r.uniform(28.0, 34.0)),
        mouth_width=float(r.uniform(0.55, 0.65)),
        backchannel_per_s=float(r.uniform(1 / 20, 1 / 8)),
    )


def speaker_truth(seed: int, speaker: int) -> SpeakerTruth:
    """The planted parameters of one speaker: lower voices for odd speakers, higher for even."""
    r = _rng(seed, 3, speaker)
    return SpeakerTruth(
        f0_semitones=float((26.0 if speaker % 2 else 32.0) + r.uniform(-1.0, 1.0)),
        loudness=float(r.uniform(0.75, 1.1)),
        mouth_width=float(r.uniform(0.55, 0.65)),
    )


# ------------------------------------------------------------------ one session
@dataclass
class SynthSession:
    """One generated session: shard metadata, channels and labels (nothing written yet)."""

    meta: SessionMeta
    channels: dict[str, Channel]
    labels: dict[str, np.ndarray]
    label_sources: dict[str, dict]


def face_sample_frames(n_frames: int, face_fps: float, video_fps: float = LABEL_FPS) -> np.ndarray:
    """Video frame indices sampled at ``face_fps`` (as :func:`featurestore.media.iter_frames` picks them).

    >>> face_sample_frames(12, 5.0).tolist()
    [0, 5, 10]
    """
    step = sample_mask_step(video_fps, face_fps)
    k = int(math.ceil(n_frames / step)) + 1
    idx = np.ceil(np.arange(k) * step - 1e-9).astype(np.int64)
    return idx[idx < n_frames]


def _loadings(columns, spec_of) -> np.ndarray:
    out = np.zeros((len(_FACE_LATENTS), len(columns)), np.float32)
    for j, c in enumerate(columns):
        for lat, w in spec_of(c).items():
            out[_FACE_LATENTS.index(lat), j] = w
    return out


@lru_cache(maxsize=1)
def _face_tables() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    geom_base = np.array([_GEOM_SPEC[c][0] for c in FACE_GEOM_COLUMNS], np.float32)
    geom_sd = np.array([_GEOM_SPEC[c][1] for c in FACE_GEOM_COLUMNS], np.float32)
    geom_load = _loadings(FACE_GEOM_COLUMNS, lambda c: _GEOM_SPEC[c][2])
    au_bias = np.array([_AU_SPEC[c][0] for c in AU_COLUMNS], np.float32)
    au_load = _loadings(AU_COLUMNS, lambda c: _AU_SPEC[c][1])
    return geom_base, geom_sd, geom_load, au_bias, au_load


def _face_channels(
    rng: np.random.Generator, latents: np.ndarray, base_override: dict[str, float], affect_scale: float, invalid: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """face_geom (n, 17) and face_au (n, 20) from face latents (n, 7); invalid rows are NaN."""
    geom_base, geom_sd, geom_load, au_bias, au_load = _face_tables()
    lat = latents.copy()
    lat[:, 0] *= affect_scale
    base = geom_base.copy()
    for c, v in base_override.items():
        base[FACE_GEOM_COLUMNS.index(c)] = v
    n = lat.shape[0]
    geom = base + lat @ geom_load + geom_sd * rng.standard_normal((n, len(FACE_GEOM_COLUMNS)), dtype=np.float32)
    for c in _GEOM_NONNEG:
        j = FACE_GEOM_COLUMNS.index(c)
        np.maximum(geom[:, j], 0.0, out=geom[:, j])
    logits = au_bias + lat @ au_load + _AU_NOISE * rng.standard_normal((n, len(AU_COLUMNS)), dtype=np.float32)
    au = (1.0 / (1.0 + np.exp(-logits))).astype(np.float32)
    geom[invalid] = np.nan
    au[invalid] = np.nan
    return geom.astype(np.float32), au


def synth_session(
    listener: int,
    story: int,
    n_frames: int,
    seed: int = 0,
    face_fps: float = 5.0,
) -> SynthSession:
    """Generate one session's channels and ``valence_self`` labels (see the module docstring).

    ``n_frames`` at 25 fps; ``face_fps`` in frames/s. Pure: opens no file. The data depend only
    on ``seed``, ``listener``, ``story`` and ``n_frames``.
    """
    n = int(n_frames)
    if n < 2:
        raise ValueError(f"a synthetic session needs at least 2 frames, got {n}")
    if not face_fps or face_fps <= 0:
        raise ValueError(f"face_fps must be a positive rate in frames/s, got {face_fps}")
    speaker = STORY_SPEAKER.get(int(story), (int(story) - 1) // 2 % 4 + 1)
    lt, st = listener_truth(seed, listener), speaker_truth(seed, speaker)
    rng = _rng(seed, 1, listener, story)
    per_frame = int(GRID_HZ / LABEL_FPS)  # grid samples per video frame (4)
    delay = int(round(LABEL_DELAY_S * GRID_HZ))
    pre = delay + GRID_HZ  # grid samples before t = 0, so t - delay is always on the grid
    m = pre + per_frame * n

    # latent signals on the 100 Hz grid (grid index pre + round(t * 100) is time t)
    affect = _smooth_noise(rng, m, AFFECT_HZ)
    voice = _smooth_noise(rng, m, VOICE_HZ)
    drift = _smooth_noise(rng, m, DRIFT_HZ)
    jitter = _smooth_noise(rng, m, JITTER_HZ)
    spk_expression = _smooth_noise(rng, m, EXPRESSION_HZ)
    lis_brow = _smooth_noise(rng, m, EXPRESSION_HZ)
    heads = [_smooth_noise(rng, m, HEAD_HZ) for _ in range(6)]
    talk_s = _alternating(rng, m, (1.2, 3.5), (0.35, 1.5))
    talk_l = _bursts(rng, m, lt.backchannel_per_s, 0.6, 0.3)
    voiced = _alternating(rng, m, (0.10, 0.25), (0.03, 0.10))
    voiced_s, voiced_l = voiced & talk_s, voiced & talk_l & ~talk_s
    mouth_amp = rng.uniform(0.4, 1.0, size=m).astype(np.float32)
    invalid_s = _bursts(rng, m, 0.02, 1.2, 0.2)
    invalid_l = _bursts(rng, m, 0.02, 1.2, 0.2)
    blink_s = rng.random(m) < 0.05
    blink_l = rng.random(m) < 0.05

    # labels at 25 fps
    g = pre + per_frame * np.arange(n)
    valence = (
        lt.offset + lt.gain * affect[g - delay] + SPEAKER_WEIGHT * voice[g - delay]
        + DRIFT_SD * drift[g] + JITTER_SD * jitter[g]
    )  # fmt: skip
    valence = np.clip(valence, -1.0, 1.0).astype(np.float32)

    # faces at the sampled video frames
    frames = face_sample_frames(n, face_fps)
    face_t = frames / LABEL_FPS
    gf = pre + per_frame * frames

    def latents(aff, brow, mouth, h, blink):
        return np.column_stack([aff[gf], brow[gf], mouth[gf], h[0][gf], h[1][gf], h[2][gf], blink[gf]]).astype(np.float32)

    lat_s = latents(spk_expression, voice, voiced_s * mouth_amp, heads[:3], blink_s.astype(np.float32))
    lat_l = latents(affect, lis_brow, voiced_l * mouth_amp, heads[3:], blink_l.astype(np.float32))
    geom_s, au_s = _face_channels(
        rng, lat_s, {"lip_corner_pull": st.mouth_width, "head_yaw": 12.0, "face_scale": 0.11}, 1.0, invalid_s[gf]
    )
    geom_l, au_l = _face_channels(
        rng, lat_l, {"lip_corner_pull": lt.mouth_width, "head_yaw": -12.0, "face_scale": 0.08}, lt.expressivity, invalid_l[gf]
    )

    # eGeMAPS rows every 10 ms: 4 * n - 4, as openSMILE returns for n / 25 s of audio
    cols = egemaps_columns()
    rows = per_frame * n - 4
    ge = pre + np.arange(rows)
    state = np.where(voiced_s[ge], 1, np.where(voiced_l[ge], 2, 0))
    spec = np.array([_EGEMAPS_SPEC[c][:4] for c in cols], np.float32)
    mu = np.stack([spec[:, 0], spec[:, 2], spec[:, 2]])
    sd = np.stack([spec[:, 1], spec[:, 3], spec[:, 3]])
    f0, loud = cols.index("F0semitoneFrom27.5Hz_sma3nz"), cols.index("Loudness_sma3")
    mu[1, f0], mu[2, f0] = st.f0_semitones, lt.f0_semitones
    mu[1, loud], mu[2, loud] = st.loudness, 0.5 * st.loudness
    ege = mu[state] + sd[state] * rng.standard_normal((rows, len(cols)), dtype=np.float32)
    spk = state == 1
    ege[spk, loud] += LOUDNESS_PER_VOICE * voice[ge][spk]
    ege[spk, f0] += F0_PER_VOICE * voice[ge][spk]
    ege[(talk_s | talk_l)[ge] & (state == 0), loud] += 0.15  # unvoiced consonants
    unvoiced = state == 0
    for j, c in enumerate(cols):
        fill = _EGEMAPS_SPEC[c][4]
        if fill is not None:
            ege[unvoiced, j] = fill
        if c in _EGEMAPS_NONNEG:
            np.maximum(ege[:, j], 0.0, out=ege[:, j])
        if c in _EGEMAPS_MIN:
            np.maximum(ege[:, j], _EGEMAPS_MIN[c], out=ege[:, j])
    ege_t = np.arange(rows) * EGEMAPS_HOP_S

    session = session_name(listener, story)
    upstream = f"synth seed={int(seed)} session={session}"
    created = utc_now()

    def channel(key: str, data, t, valid, columns, shared_with: str | None = None) -> Channel:
        params = {"seed": int(seed), "channel": key, "n_frames": n, "face_fps": float(face_fps)}
        src = {"upstream": upstream}
        return Channel(
            data, t, valid, list(columns),
            extractor=SYNTH_EXTRACTOR, extractor_version=SYNTH_VERSION, params=params,
            cache_key=cache_key(upstream, SYNTH_EXTRACTOR, SYNTH_VERSION, params), source=src, created_utc=created,
            shared_with=shared_with,
        )  # fmt: skip

    all_valid = np.ones(rows, bool)
    channels = {
        "speaker/face_geom": channel("speaker/face_geom", geom_s, face_t, ~invalid_s[gf], FACE_GEOM_COLUMNS),
        "listener/face_geom": channel("listener/face_geom", geom_l, face_t, ~invalid_l[gf], FACE_GEOM_COLUMNS),
        "speaker/face_au": channel("speaker/face_au", au_s, face_t, ~invalid_s[gf], AU_COLUMNS),
        "listener/face_au": channel("listener/face_au", au_l, face_t, ~invalid_l[gf], AU_COLUMNS),
        "scene/egemaps": channel("scene/egemaps", ege, ege_t, all_valid, cols),
        # the per-role rows are the scene rows (same array, stored once as HDF5 hard links);
        # valid: voiced frames of that role's talk
        "speaker/egemaps": channel("speaker/egemaps", ege, ege_t, (voiced & talk_s)[ge], cols, "scene/egemaps"),
        "listener/egemaps": channel("listener/egemaps", ege, ege_t, (voiced & talk_l)[ge], cols, "scene/egemaps"),
    }
    meta = SessionMeta(session, int(listener), int(story), int(speaker), story_split(story, SPLITS), n)
    src = {"upstream": upstream, "extractor": SYNTH_EXTRACTOR, "version": SYNTH_VERSION}
    return SynthSession(meta, channels, {"valence_self": valence}, {"valence_self": src})


# ------------------------------------------------------------------ the store
@dataclass
class SynthInfo:
    """What :func:`synth_store` wrote: sessions, frames, time (s) and size on disk (bytes)."""

    root: Path
    sessions: list[str]
    n_frames: int
    seed: int
    face_fps: float
    seconds: float
    size_bytes: int
    lengths: dict[str, int] = field(default_factory=dict)

    def __str__(self) -> str:
        return (
            f"{len(self.sessions)} synthetic sessions, {self.n_frames:,} frames "
            f"({self.n_frames / LABEL_FPS / 3600:.2f} h) in {self.root}: "
            f"{self.size_bytes / 1e6:.1f} MB written in {self.seconds:.1f} s (seed {self.seed}, faces at {self.face_fps:g} fps)"
        )


def _truth_record(seed: int, face_fps: float, plan, lengths) -> dict:
    listeners = sorted({lis for lis, _ in plan})
    speakers = sorted({STORY_SPEAKER.get(s, 0) for _, s in plan})
    return {
        "generator": f"featurestore.synth {SYNTH_VERSION}",
        "seed": int(seed),
        "face_fps": float(face_fps),
        "label": "valence_self = clip(offset_L + gain_L * affect(t - delay) + speaker_weight * voice(t - delay) "
        "+ drift_sd * drift(t) + jitter_sd * jitter(t), -1, 1)",
        "delay_s": LABEL_DELAY_S,
        "speaker_weight": SPEAKER_WEIGHT,
        "drift_sd": DRIFT_SD,
        "jitter_sd": JITTER_SD,
        "latent_cutoff_hz": {"affect": AFFECT_HZ, "voice": VOICE_HZ, "drift": DRIFT_HZ, "jitter": JITTER_HZ},
        "listeners": {str(x): asdict(listener_truth(seed, x)) for x in listeners},
        "speakers": {str(x): asdict(speaker_truth(seed, x)) for x in speakers},
        "sessions": {session_name(lis, s): int(n) for (lis, s), n in zip(plan, lengths, strict=True)},
    }


def synth_store(
    store_dir: str | os.PathLike,
    n_sessions: int = CORPUS_SESSIONS,
    seed: int = 0,
    face_fps: float = 5.0,
    progress: bool = True,
    length_range: tuple[int, int] = LENGTH_RANGE,
) -> SynthInfo:
    """Write a synthetic store of ``n_sessions`` sessions into ``store_dir`` (no media needed).

    Lengths from :func:`session_lengths` (frames at 25 fps; ``length_range`` shortens them for
    tests), channels and labels from :func:`synth_session`, faces at ``face_fps`` frames/s.
    A shard of the same session already in ``store_dir`` is replaced whole (never left half
    written); other files are left alone. Also writes ``synth_truth.json`` with the planted
    parameters. One session is in memory at a time.

    >>> import tempfile
    >>> info = synth_store(tempfile.mkdtemp(), n_sessions=2, length_range=(50, 100), progress=False)
    >>> len(info.sessions), Store(info.root).verify()
    (2, [])
    """
    from tqdm.auto import tqdm

    if not face_fps or face_fps <= 0:
        raise ValueError(f"face_fps must be a positive rate in frames/s, got {face_fps}")
    t0 = time.perf_counter()
    plan = session_plan(n_sessions)
    lengths = session_lengths(len(plan), seed, length_range)
    store = Store(store_dir, mode="a")
    names, size = [], 0
    for (listener, story), n in tqdm(
        list(zip(plan, lengths, strict=True)), desc="synth sessions", unit="session", disable=not progress
    ):
        s = synth_session(listener, story, int(n), seed=seed, face_fps=face_fps)
        # replace, not update: stale channels or labels of another length must not survive
        store.shard_path(s.meta.session).unlink(missing_ok=True)
        path = store.write_session(s.meta, s.channels, s.labels, s.label_sources)
        size += path.stat().st_size
        names.append(s.meta.session)
    truth = Path(store_dir) / SYNTH_TRUTH
    tmp = truth.with_name(f".{truth.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(_truth_record(seed, face_fps, plan, lengths), indent=2) + "\n")
    os.replace(tmp, truth)
    return SynthInfo(
        root=Path(store_dir),
        sessions=names,
        n_frames=int(lengths.sum()),
        seed=int(seed),
        face_fps=float(face_fps),
        seconds=time.perf_counter() - t0,
        size_bytes=size,
        lengths={nm: int(n) for nm, n in zip(names, lengths, strict=True)},
    )
