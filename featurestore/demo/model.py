"""The demo's planted model (docs/demo.md): the constants of the labels, words, observers and
expressions, the per-listener and per-speaker parameters, and each story's common affect curve.

Everything random is drawn from :func:`seeded_rng` keyed by the seed and what it belongs to, so
one session's files do not depend on which others are built.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Bumped whenever the same seed would produce different files.
GENERATOR_VERSION = 3
AUDIO_RATE = 44100
#: The listener's smile at time t shows in the valence at t + LABEL_DELAY_S.
LABEL_DELAY_S = 1.5
SPEAKER_TERM_WEIGHT = 0.05
SPEAKER_TERM_WINDOW_S = 3.0
LABEL_SLOW_NOISE_SD = 0.03
LABEL_WHITE_NOISE_SD = 0.01
#: The valence's text term: TEXT_TERM_WEIGHT * (affect of what the speaker says, smoothed
#: causally over TEXT_TERM_TAU_S).
TEXT_TERM_WEIGHT = 0.2
#: the story's common affect curve c_S(t): smooth noise (time scale in s) of this sd, clipped to [-1, 1]
STORY_CURVE_SD = 0.55
STORY_CURVE_TIME_S = 2.5
#: how much a listener's smile follows the story curve (times the listener's story sign)
STORY_SMILE_WEIGHT = 0.45
#: how the speaker's phrase affect follows the story curve: a_p = clip(w * c_S(start) + N(0, sd))
STORY_AFFECT_WEIGHT = 0.8
PHRASE_AFFECT_SD = 0.3
TEXT_TERM_TAU_S = 2.0
#: Observer of the listener: their rating follows the self-rating smoothed over 2 s and 1 s later.
OBSERVER_LISTENER_SMOOTH_S = 2.0
OBSERVER_LISTENER_DELAY_S = 1.0
OBSERVER_LISTENER_NOISE_SD = (0.06, 0.03)  # slow, white
#: Observer of the speaker: their rating follows the affect of the speaker's words, smoothed over 1 s, 0.5 s later.
OBSERVER_SPEAKER_TAU_S = 1.0
OBSERVER_SPEAKER_DELAY_S = 0.5
OBSERVER_SPEAKER_GAIN = 0.6
OBSERVER_SPEAKER_NOISE_SD = (0.06, 0.02)

#: Words of the speaker's phrases: every word in the first two lists is in the VADER lexicon
#: (valence > 0 and < 0), no word of the third is, nor is it a VADER negation or booster.
POSITIVE_WORDS = tuple(
    """happy great love wonderful fun beautiful amazing laughed glad best funny proud lucky nice
    smiled""".split()
)
NEGATIVE_WORDS = tuple(
    "sad terrible lost hurt cried awful bad angry lonely worried pain sick died scared alone".split()
)
NEUTRAL_WORDS = tuple(
    """then we went to the house and my brother it was a day at school in summer car walked home
    said that morning city old door after dinner mother train letter street her his window week
    father teacher village river told us one evening""".split()
)
#: The listener's backchannel word after a phrase of affect a: "wow" if a > 0.35, "oh no" if a < -0.35, else "mm-hm".
BACKCHANNEL_WORDS = {"positive": "wow", "negative": "oh no", "neutral": "mm-hm"}
BACKCHANNEL_AFFECT = 0.35

#: Warp parameter of each rendered smile state: 0 is the photo (already smiling), -0.5 a weaker smile, 1.5 a broad one.
SMILE_LEVELS = tuple(float(v) for v in np.linspace(-0.5, 1.5, 7))
#: Mouth opening of each rendered state (0 = the photo, 1 = lower lip down ~0.22 interocular).
MOUTH_LEVELS = (0.0, 0.4, 0.7, 1.0)
#: Upper-lid closure of each rendered state (1 = closed).
BLINK_LEVELS = (0.0, 0.5, 1.0)
#: Brow raise of each rendered state (1 = up ~0.1 interocular).
BROW_LEVELS = (0.0, 1.0)
SPEAKER_SMILE_STATE = 2  # a = 0.17, close to the photo's own smile
#: the speaker's smile state moves this many levels per unit of story curve
SPEAKER_STORY_SMILE_STATES = 2.0
BACKCHANNEL_MOUTH_STATE = 1


def seeded_rng(seed: int, *key: int) -> np.random.Generator:
    """A generator of its own for ``key`` (e.g. listener, speaker, session) under ``seed``."""
    return np.random.default_rng(np.random.SeedSequence([int(seed), *[int(k) for k in key]]))


@dataclass(frozen=True)
class ListenerParams:
    """Per-listener latent parameters (all drawn from the seed)."""

    listener: int
    valence_offset: float  # added to every valence value
    valence_gain: float  # valence per unit of smile
    smile_baseline: float  # resting smile, 0..1
    smile_event_rate_hz: float  # smile events per second
    smile_event_size: float  # scales the event amplitudes (expressivity)
    backchannel_f0_hz: float
    backchannel_level: float  # peak amplitude of the backchannel audio
    tint: tuple[float, float, float]
    observer_offset: float  # the observer of this listener rates offset + scale * (smoothed, delayed self-rating)
    observer_scale: float
    story_sign: int = 1  # +1: feels with the story's common curve; -1: against it (planted for listeners 2, 7, ...)


@dataclass(frozen=True)
class SpeakerParams:
    """Per-speaker voice and look."""

    speaker: int
    f0_hz: float  # mean fundamental frequency of the voice
    formant_scale: float  # vocal-tract length factor on the formant frequencies
    speech_level: float  # peak amplitude of the speech
    tint: tuple[float, float, float]


def _rgb(factors: np.ndarray) -> tuple[float, float, float]:
    """Three colour factors (R, G, B) rounded to 3 decimals."""
    red, green, blue = (round(float(v), 3) for v in factors)
    return (red, green, blue)


def listener_params(listener: int, seed: int = 0) -> ListenerParams:
    """The latent parameters of listener ``listener`` under ``seed``."""
    r = seeded_rng(seed, 1, listener)
    return ListenerParams(
        listener=int(listener),
        valence_offset=round(float(r.uniform(-0.35, 0.15)), 4),
        valence_gain=round(float(r.uniform(0.6, 1.2)), 4),
        smile_baseline=round(float(r.uniform(0.35, 0.50)), 4),
        smile_event_rate_hz=round(float(r.uniform(1 / 9, 1 / 5)), 4),
        smile_event_size=round(float(r.uniform(0.6, 1.0)), 4),
        backchannel_f0_hz=round(float(r.uniform(200.0, 240.0)), 2),
        backchannel_level=round(float(r.uniform(0.25, 0.35)), 3),
        tint=_rgb(r.uniform(0.88, 1.12, 3)),
        observer_offset=round(float(r.uniform(-0.05, 0.10)), 4),
        observer_scale=round(float(r.uniform(0.6, 0.9)), 4),
        story_sign=-1 if int(listener) % 5 == 2 else 1,
    )


def smooth_noise(rng: np.random.Generator, n: int, sigma: float) -> np.ndarray:
    """Gaussian-filtered white noise of ``n`` samples with unit standard deviation."""
    from scipy.ndimage import gaussian_filter1d  # lazily: slow to import

    # long kernels: filter on a coarser grid (4 points per sigma) and interpolate
    step = max(1, int(sigma // 4))
    m = -(-n // step) + 1
    pad = int(3 * sigma / step) + 1
    coarse = gaussian_filter1d(rng.standard_normal(m + 2 * pad), sigma / step)[pad : pad + m]
    x = coarse if step == 1 else np.interp(np.arange(n) / step, np.arange(m), coarse)
    x = x[:n]
    sd = x.std()
    return x / sd if sd > 0 else x


def story_curve(story: int, t: np.ndarray, seed: int = 0) -> np.ndarray:
    """The story's common affect curve c_S(t) in [-1, 1] at times ``t`` (s): what every telling of
    story ``story`` carries, whoever listens (smooth noise on a 10 Hz grid over 0-600 s)."""
    r = seeded_rng(seed, 6, story)
    grid_fps = 10.0
    grid = -5.0 + np.arange(int(605 * grid_fps)) / grid_fps
    curve = np.clip(
        STORY_CURVE_SD * smooth_noise(r, len(grid), STORY_CURVE_TIME_S * grid_fps), -1.0, 1.0
    )
    return np.interp(t, grid, curve)


def speaker_params(speaker: int, seed: int = 0) -> SpeakerParams:
    """The voice and look of speaker ``speaker`` under ``seed``."""
    r = seeded_rng(seed, 2, speaker)
    high = speaker % 2 == 0
    return SpeakerParams(
        speaker=int(speaker),
        f0_hz=round(float((175.0 if high else 125.0) + r.uniform(-8, 8)), 2),
        formant_scale=round(float((1.12 if high else 1.0) * r.uniform(0.97, 1.03)), 4),
        speech_level=round(float(r.uniform(0.45, 0.55)), 3),
        tint=_rgb(np.array([0.85, 0.95, 1.12]) * r.uniform(0.93, 1.07, 3)),
    )
