"""The synthetic corpus' latent model: the label formula's constants, the planted per-listener
and per-speaker parameters, and the random building blocks every signal is drawn with.

See "Latent signals" and "Labels" in :mod:`bench.synth`. Everything random comes from
:func:`seeded_rng` keyed by the seed and the listener, speaker or session.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

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
LOUDNESS_PER_VOICE, F0_PER_VOICE = 0.25, 1.5


def seeded_rng(seed: int, *key: int) -> np.random.Generator:
    """A generator of its own for ``key`` (listener, speaker or session) under ``seed``."""
    return np.random.default_rng(np.random.SeedSequence([int(seed), *(int(k) for k in key)]))


def smooth_noise(
    rng: np.random.Generator, m: int, cutoff_hz: float, rate: float = GRID_HZ
) -> np.ndarray:
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


def alternating(
    rng: np.random.Generator, m: int, on_s: tuple[float, float], off_s: tuple[float, float]
) -> np.ndarray:
    """Boolean mask on the grid alternating on/off runs of uniform durations (seconds), random phase."""
    cycle_min = (on_s[0] + off_s[0]) * GRID_HZ
    k = int(m / cycle_min) + 2
    on = rng.uniform(*on_s, size=k) * GRID_HZ
    off = rng.uniform(*off_s, size=k) * GRID_HZ
    bounds = np.cumsum(np.column_stack([on, off]).ravel()) - rng.uniform(0, on[0] + off[0])
    idx = np.searchsorted(bounds, np.arange(m), side="right")
    return idx % 2 == 0


def bursts(
    rng: np.random.Generator, m: int, rate_per_s: float, mean_s: float, min_s: float
) -> np.ndarray:
    """Boolean mask on the grid: Poisson events (``rate_per_s``), exponential lengths (s)."""
    k = rng.poisson(rate_per_s * m / GRID_HZ)
    starts = rng.integers(0, m, size=k)
    lengths = np.maximum(rng.exponential(mean_s, size=k), min_s) * GRID_HZ
    edges = np.zeros(m + 1, np.int32)
    np.add.at(edges, starts, 1)
    np.add.at(edges, np.minimum(starts + lengths.astype(np.int64), m), -1)
    return np.cumsum(edges[:m]) > 0


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
    r = seeded_rng(seed, 2, listener)
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
    r = seeded_rng(seed, 3, speaker)
    return SpeakerTruth(
        f0_semitones=float((26.0 if speaker % 2 else 32.0) + r.uniform(-1.0, 1.0)),
        loudness=float(r.uniform(0.75, 1.1)),
        mouth_width=float(r.uniform(0.55, 0.65)),
    )
