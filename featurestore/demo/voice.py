"""The demo's voices (docs/demo.md): the speaker's synthetic speech, formant-filtered syllables
of a glottal source, and the listener's "mm-hm"s. Samples are float64 at the rate given."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from .model import ListenerParams, SpeakerParams, smooth_noise

Phrases = list[tuple[float, float]]
Syllables = list[dict[str, Any]]

# (F1, F2, F3) in Hz of five vowels (a, e, i, o, u), adult male values
_VOWELS = np.array(
    [(730, 1090, 2440), (530, 1840, 2480), (270, 2290, 3010), (570, 840, 2410), (300, 870, 2240)],
    float,
)
_FORMANT_BW = (80.0, 100.0, 160.0)


@lru_cache(maxsize=1)
def _glottal_table(size: int = 4096, harmonics: int = 40) -> np.ndarray:
    """One period of a band-limited glottal source: harmonics falling 6 dB/octave."""
    ph = np.arange(size) * 2 * np.pi / size
    k = np.arange(1, harmonics + 1)[:, None]
    wave = (np.sin(k * ph) / k).sum(axis=0)
    return wave / np.abs(wave).max()


def _voiced_source(f0: np.ndarray, sr: int) -> np.ndarray:
    """Glottal source following the F0 track ``f0`` (Hz per sample) by wavetable lookup."""
    table = _glottal_table()
    phase = np.cumsum(f0 / sr) % 1.0
    return np.interp(phase * len(table), np.arange(len(table) + 1), np.append(table, table[0]))


def _resonators(
    x: np.ndarray, freqs: Sequence[float] | np.ndarray, bws: Sequence[float], sr: int
) -> np.ndarray:
    """Cascade of Klatt second-order resonators (unity gain at 0 Hz)."""
    from scipy.signal import lfilter  # lazily: slow to import (0.8 s)

    for f, bw in zip(freqs, bws, strict=True):
        c = -np.exp(-2 * np.pi * bw / sr)
        b = 2 * np.exp(-np.pi * bw / sr) * np.cos(2 * np.pi * f / sr)
        x = lfilter([1 - b - c], [1, -b, -c], x)
    return x


def _ramp_envelope(n: int, attack: int, release: int) -> np.ndarray:
    """``n`` samples of 1 with raised-cosine ramps of ``attack`` and ``release`` samples."""
    env = np.ones(n)
    a, r = min(attack, n // 2), min(release, n // 2)
    if a:
        env[:a] = 0.5 - 0.5 * np.cos(np.pi * np.arange(a) / a)
    if r:
        env[n - r :] = 0.5 + 0.5 * np.cos(np.pi * (np.arange(r) + 1) / r)
    return env


def speech_schedule(
    rng: np.random.Generator, duration_s: float
) -> tuple[Phrases, Syllables, Phrases]:
    """Phrases, syllables and backchannel slots (seconds) of a session of ``duration_s`` s."""
    phrases: Phrases = []
    syllables: Syllables = []
    backchannels: Phrases = []
    t = float(rng.uniform(0.3, 0.8))
    while True:
        dur = min(float(rng.uniform(1.2, 3.5)), duration_s - 0.3 - t)
        if dur < 0.6:
            break
        end = t + dur
        phrases.append((round(t, 4), round(end, 4)))
        s, first = t, True
        while s < end - 0.1:
            d = min(float(rng.uniform(0.13, 0.26)), end - s)
            syllables.append(
                {
                    "t0": round(s, 4),
                    "t1": round(s + d, 4),
                    "vowel": int(rng.integers(len(_VOWELS))),
                    "accent": bool(rng.random() < (0.45 if first else 0.15)),
                    "amp": round(float(rng.uniform(0.6, 1.0)), 3),
                    "fricative": bool(rng.random() < 0.3),
                }
            )
            first = False
            s += d + (0.0 if rng.random() < 0.6 else float(rng.uniform(0.03, 0.08)))
        backchannel = not backchannels or rng.random() < 0.35
        pause = float(rng.uniform(1.1, 1.5) if backchannel else rng.uniform(0.35, 1.0))
        if backchannel and end + pause <= duration_s - 0.1:
            b0 = end + float(rng.uniform(0.25, pause - 0.75))
            backchannels.append((round(b0, 4), round(b0 + 0.5, 4)))
        t = end + pause
    return phrases, syllables, backchannels


def synth_speech(
    plan_syllables: Syllables,
    phrases: Phrases,
    sp: SpeakerParams,
    rng: np.random.Generator,
    n_samples: int,
    sr: int,
) -> np.ndarray:
    """The speaker's voice: per phrase an F0 contour, a glottal source, one vowel per syllable."""
    from scipy.signal import butter, lfilter  # lazily, as above

    hiss_b, hiss_a = butter(2, 3000 / (sr / 2), "high")
    out = np.zeros(n_samples)
    for p0, p1 in phrases:
        a, b = int(p0 * sr), min(n_samples, int(p1 * sr) + int(0.05 * sr))
        u = np.linspace(0, 1, b - a)
        f0 = sp.f0_hz * (1.10 - 0.22 * u)  # declination
        if rng.random() < 0.25:  # final rise (a question)
            f0 *= 1 + 0.25 * np.clip((u - 0.85) / 0.15, 0, 1)
        f0 *= 1 + 0.01 * smooth_noise(rng, b - a, 0.02 * sr)
        tt = np.arange(a, b) / sr
        for syl in plan_syllables:
            if syl["accent"] and p0 <= syl["t0"] < p1:
                mid = (syl["t0"] + syl["t1"]) / 2
                f0 *= 1 + 0.18 * np.exp(-0.5 * ((tt - mid) / 0.08) ** 2)
        src = _voiced_source(f0, sr)
        for syl in plan_syllables:
            if not p0 <= syl["t0"] < p1:
                continue
            s0, s1 = int(syl["t0"] * sr), min(b, int(syl["t1"] * sr))
            if s1 - s0 < 16:
                continue
            env = _ramp_envelope(s1 - s0, int(0.025 * sr), int(0.04 * sr)) * syl["amp"]
            env = env * (1.3 if syl["accent"] else 1.0)
            seg = np.concatenate([src[s0 - a : s1 - a] * env, np.zeros(int(0.03 * sr))])
            voiced = _resonators(seg, _VOWELS[syl["vowel"]] * sp.formant_scale, _FORMANT_BW, sr)
            _add_at(out, s0, voiced)
            if syl["fricative"]:  # a short /s/-like noise before the vowel
                n = int(0.05 * sr)
                h0 = max(0, s0 - n)
                noise = lfilter(hiss_b, hiss_a, rng.standard_normal(s0 - h0))
                out[h0:s0] += 0.08 * (noise * _ramp_envelope(s0 - h0, n // 3, n // 3))
    return _to_peak(out, sp.speech_level)


def synth_backchannel(b0: float, lp: ListenerParams, n_samples: int, sr: int) -> np.ndarray:
    """The listener's "mm-hm" at ``b0`` seconds: a 180 ms falling and a 240 ms rising nasal burst."""
    out = np.zeros(n_samples)
    for start, dur, f_from, f_to, amp in (
        (0.0, 0.18, 1.0, 0.95, 1.0),
        (0.26, 0.24, 0.95, 1.12, 0.8),
    ):
        a = int((b0 + start) * sr)
        n = min(int(dur * sr), n_samples - a)
        if n < 16:
            continue
        f0 = lp.backchannel_f0_hz * np.linspace(f_from, f_to, n)
        src = _voiced_source(f0, sr) * _ramp_envelope(n, int(0.03 * sr), int(0.04 * sr))
        seg = np.concatenate([src, np.zeros(int(0.03 * sr))])
        _add_at(out, a, amp * _resonators(seg, (250, 1100, 2300), (60, 150, 200), sr))
    return _to_peak(out, lp.backchannel_level)


def _add_at(out: np.ndarray, start: int, seg: np.ndarray) -> None:
    """Add ``seg`` into ``out`` from sample ``start`` on, cut at the end of ``out``."""
    out[start : start + len(seg)] += seg[: len(out) - start]


def _to_peak(out: np.ndarray, level: float) -> np.ndarray:
    """``out`` scaled to a peak amplitude of ``level`` (silence stays silent)."""
    peak = np.abs(out).max()
    return out * (level / peak) if peak > 0 else out
