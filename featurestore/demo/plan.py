"""One demo session's plan: every latent signal per video frame, the labels and the words.

:func:`plan_session` regenerates, from the seed, what a session shows and says (speech and
backchannel times, syllables, phrase affects and words, the listener's latent smile, blinks,
head motion, the expression state of each face per frame) and the label model's outputs
(``valence_self`` and the two observer ratings), as described in :mod:`featurestore.demo`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..sources.manifest import STORY_SPEAKER
from .model import (
    AUDIO_RATE,
    BACKCHANNEL_AFFECT,
    BACKCHANNEL_MOUTH_STATE,
    BACKCHANNEL_WORDS,
    LABEL_DELAY_S,
    LABEL_SLOW_NOISE_SD,
    LABEL_WHITE_NOISE_SD,
    NEGATIVE_WORDS,
    NEUTRAL_WORDS,
    OBSERVER_LISTENER_DELAY_S,
    OBSERVER_LISTENER_NOISE_SD,
    OBSERVER_LISTENER_SMOOTH_S,
    OBSERVER_SPEAKER_DELAY_S,
    OBSERVER_SPEAKER_GAIN,
    OBSERVER_SPEAKER_NOISE_SD,
    OBSERVER_SPEAKER_TAU_S,
    PHRASE_AFFECT_SD,
    POSITIVE_WORDS,
    SMILE_LEVELS,
    SPEAKER_SMILE_STATE,
    SPEAKER_STORY_SMILE_STATES,
    SPEAKER_TERM_WEIGHT,
    SPEAKER_TERM_WINDOW_S,
    STORY_AFFECT_WEIGHT,
    STORY_SMILE_WEIGHT,
    TEXT_TERM_TAU_S,
    TEXT_TERM_WEIGHT,
    listener_params,
    seeded_rng,
    smooth_noise,
    speaker_params,
    story_curve,
)
from .voice import speech_schedule, synth_backchannel, synth_speech

_BLINK_SEQUENCE = (1, 2, 2, 1)  # blink states of the frames of one blink


@dataclass
class SessionPlan:
    """Every latent signal of one session, per video frame (and the audio per sample).

    States are indices into :data:`SMILE_LEVELS`, :data:`MOUTH_LEVELS`, :data:`BLINK_LEVELS`
    and :data:`BROW_LEVELS`; offsets are head translations in pixels (x, y).
    """

    listener: int
    story: int
    speaker: int
    fps: float
    n_frames: int
    phrases: list[tuple[float, float]]  # speaker speech, seconds
    syllables: list[dict]  # t0, t1 (s), vowel, accent
    backchannels: list[tuple[float, float]]  # listener "mm-hm", seconds
    smile_events: list[dict]  # onset_s, amplitude, rise_s, hold_s, decay_s
    blinks: dict[str, list[float]]  # role -> blink onsets, seconds
    smile: np.ndarray  # latent listener smile at frame times, 0..1
    smile_delayed: np.ndarray  # smile(t - LABEL_DELAY_S)
    speech_envelope: np.ndarray  # speaker loudness per frame, 0..1
    speaker_term: np.ndarray  # the valence's speaker-voice term per frame
    valence: np.ndarray  # the label per frame, [-1, 1]
    states: dict[str, dict[str, np.ndarray]]  # role -> smile/mouth/blink/brow -> int per frame
    offsets: dict[str, np.ndarray]  # role -> (n_frames, 2) int head translation, pixels
    audio: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0, np.float32))
    audio_rate: int = AUDIO_RATE
    phrase_affect: list[float] = field(default_factory=list)  # affect of each phrase's words, -1..1
    phrase_words: list[str] = field(default_factory=list)  # what the speaker says in each phrase
    backchannel_words: list[str] = field(
        default_factory=list
    )  # what the listener says in each backchannel
    affect: np.ndarray = field(
        repr=False, default_factory=lambda: np.zeros(0)
    )  # latest phrase's affect, held, per frame
    text_term: np.ndarray = field(
        repr=False, default_factory=lambda: np.zeros(0)
    )  # the valence's text term per frame
    observer_listener: np.ndarray = field(
        repr=False, default_factory=lambda: np.zeros(0)
    )  # per frame, [-1, 1]
    observer_speaker: np.ndarray = field(
        repr=False, default_factory=lambda: np.zeros(0)
    )  # per frame, [-1, 1]

    @property
    def times(self) -> np.ndarray:
        """Frame times in seconds (frame index / fps)."""
        return np.arange(self.n_frames) / self.fps


def _smile_curve(t: np.ndarray, events: list[dict]) -> np.ndarray:
    """Sum of raised-cosine rise / hold / raised-cosine decay events at times ``t`` (s)."""
    y = np.zeros_like(t)
    for e in events:
        u = t - e["onset_s"]
        rise, hold, decay = e["rise_s"], e["hold_s"], e["decay_s"]
        shape = np.where(u < rise, 0.5 - 0.5 * np.cos(np.pi * np.clip(u / rise, 0, 1)), 1.0)
        shape = np.where(
            u > rise + hold,
            0.5 + 0.5 * np.cos(np.pi * np.clip((u - rise - hold) / decay, 0, 1)),
            shape,
        )
        shape = np.where((u < 0) | (u > rise + hold + decay), 0.0, shape)
        y += e["amplitude"] * shape
    return y


def _blink_onsets(rng: np.random.Generator, duration_s: float) -> list[float]:
    out, t = [], float(rng.uniform(0.5, 3.0))
    while t < duration_s - 0.3:
        out.append(round(t, 3))
        t += float(rng.uniform(2.0, 6.0))
    return out


def _head_motion(rng, n: int, fps: float, amplitude: tuple[float, float]) -> np.ndarray:
    """Smooth random head translation, even pixels (chroma planes stay aligned)."""
    xy = np.stack(
        [
            smooth_noise(rng, n, 0.6 * fps) * amplitude[0],
            smooth_noise(rng, n, 0.8 * fps) * amplitude[1],
        ],
        axis=1,
    )
    return xy


def _quantize_even(xy: np.ndarray, limit: tuple[int, int]) -> np.ndarray:
    out = 2 * np.round(xy / 2)
    out[:, 0] = np.clip(out[:, 0], -limit[0], limit[0])
    out[:, 1] = np.clip(out[:, 1], -limit[1], limit[1])
    return out.astype(np.int64)


def _causal_smooth(x: np.ndarray, tau_s: float, fps: float) -> np.ndarray:
    """First-order causal low-pass (exponential moving average, time constant ``tau_s`` seconds)."""
    from scipy.signal import lfilter  # lazily: slow to import (0.8 s)

    if len(x) == 0:
        return np.asarray(x, np.float64)
    alpha = 1.0 - np.exp(-1.0 / (tau_s * fps))
    y, _ = lfilter([alpha], [1.0, alpha - 1.0], x, zi=[(1.0 - alpha) * x[0]])  # starts at x[0]
    return y


def _delayed(x: np.ndarray, delay_s: float, fps: float) -> np.ndarray:
    """``x(t - delay_s)`` per frame; the first value is held before the start."""
    d = int(round(delay_s * fps))
    return (
        np.concatenate([np.full(min(d, len(x)), x[0] if len(x) else 0.0), x[: len(x) - d]])
        if d
        else x.copy()
    )


def _phrase_words(
    rng: np.random.Generator, phrases, syllables, curve_at_start
) -> tuple[list[float], list[str]]:
    """Per phrase an affect in [-1, 1] (the story curve at the phrase's start plus the telling's own
    variation) and a sentence: about one word per 1.5 syllables, of which round(3 * |affect|) are
    positive (affect > 0) or negative lexicon words."""
    affects, texts = [], []
    for (p0, p1), c in zip(phrases, curve_at_start, strict=True):
        a = float(np.clip(STORY_AFFECT_WEIGHT * c + rng.normal(0.0, PHRASE_AFFECT_SD), -1.0, 1.0))
        n_syl = sum(1 for syl in syllables if p0 <= syl["t0"] < p1)
        n = max(2, int(round(n_syl / 1.5)))
        sentence = [str(w) for w in rng.choice(NEUTRAL_WORDS, n)]
        pool = POSITIVE_WORDS if a > 0 else NEGATIVE_WORDS
        for _ in range(min(n - 1, int(round(3 * abs(a))))):
            sentence[int(rng.integers(1, n))] = str(rng.choice(pool))
        sentence[0] = sentence[0].capitalize()
        affects.append(round(a, 4))
        texts.append(" ".join(sentence) + ".")
    return affects, texts


def _backchannel_words(phrases, affects, backchannels) -> list[str]:
    """The listener's word for each backchannel, from the affect of the phrase just before it."""
    out = []
    for b0, _ in backchannels:
        before = [a for (p0, p1), a in zip(phrases, affects, strict=True) if p1 <= b0 + 1e-6]
        a = before[-1] if before else 0.0
        kind = (
            "positive"
            if a > BACKCHANNEL_AFFECT
            else "negative"
            if a < -BACKCHANNEL_AFFECT
            else "neutral"
        )
        out.append(BACKCHANNEL_WORDS[kind])
    return out


def _held_affect(t: np.ndarray, phrases, affects) -> np.ndarray:
    """Per frame, the affect of the latest phrase that has started (0 before the first)."""
    starts = np.array([p0 for p0, _ in phrases], dtype=np.float64)
    idx = np.searchsorted(starts, t, side="right") - 1
    values = np.append(np.asarray(affects, dtype=np.float64), 0.0)
    return np.where(idx >= 0, values[idx], 0.0)


def plan_session(
    listener: int,
    story: int,
    *,
    duration_s: float = 40.0,
    fps: float = 25.0,
    seed: int = 0,
    motion_limit: tuple[int, int] = (8, 8),
) -> SessionPlan:
    """All latent signals of session (``listener``, ``story``), regenerated from ``seed``.

    ``duration_s`` is the session length in seconds (``round(duration_s * fps)`` frames);
    ``motion_limit`` bounds the head translation in pixels (x, y).
    """
    if int(story) not in STORY_SPEAKER:
        raise ValueError(f"demo: story {story} has no speaker; use stories {sorted(STORY_SPEAKER)}")
    speaker = STORY_SPEAKER[int(story)]
    lp, sp = listener_params(listener, seed), speaker_params(speaker, seed)
    rng = seeded_rng(seed, 3, listener, story)
    n = int(round(duration_s * fps))
    t = np.arange(n) / fps
    sr = AUDIO_RATE
    n_samples = int(round(n / fps * sr))

    # --- speech and backchannels ---
    phrases, syllables, backchannels = speech_schedule(rng, n / fps)
    speech = synth_speech(syllables, phrases, sp, rng, n_samples, sr)
    bc_audio = np.zeros(n_samples)
    for b0, _ in backchannels:
        bc_audio += synth_backchannel(b0, lp, n_samples, sr)
    room = 0.0015 * rng.standard_normal(n_samples)
    audio = np.clip(speech + bc_audio + room, -1, 1).astype(np.float32)

    hop = sr / fps
    starts = (np.arange(n) * hop).astype(np.int64)
    seg = np.minimum(np.diff(np.append(starts, n_samples)), int(hop))
    energy = np.add.reduceat(speech**2, starts) / np.maximum(seg, 1)
    rms = np.sqrt(energy)
    envelope = rms / rms.max() if rms.max() > 0 else rms

    # --- the latent smile ---
    events = []
    t_event = -LABEL_DELAY_S - 6.0 + float(rng.exponential(1 / lp.smile_event_rate_hz))
    while t_event < n / fps:
        events.append(
            {
                "onset_s": round(t_event, 3),
                "amplitude": round(float(rng.uniform(0.25, 0.5) * lp.smile_event_size), 4),
                "rise_s": round(float(rng.uniform(0.6, 1.2)), 3),
                "hold_s": round(float(rng.uniform(0.8, 3.0)), 3),
                "decay_s": round(float(rng.uniform(1.2, 2.5)), 3),
            }
        )
        t_event += float(rng.exponential(1 / lp.smile_event_rate_hz)) + 1.0
    grid_fps = 10.0  # the slow smile noise lives on a 10 Hz grid from -delay - 1 s
    g0 = -LABEL_DELAY_S - 1.0
    grid = g0 + np.arange(int((n / fps - g0) * grid_fps) + 2) / grid_fps
    slow = 0.04 * smooth_noise(rng, len(grid), 1.5 * grid_fps)

    def smile_at(times: np.ndarray) -> np.ndarray:
        felt = (
            lp.story_sign * STORY_SMILE_WEIGHT * story_curve(story, times, seed)
        )  # the story, as this listener feels it
        return np.clip(
            lp.smile_baseline + felt + _smile_curve(times, events) + np.interp(times, grid, slow),
            0.0,
            1.0,
        )

    smile = smile_at(t)
    smile_delayed = smile_at(t - LABEL_DELAY_S)

    # --- the label ---
    win = max(1, int(round(SPEAKER_TERM_WINDOW_S * fps)))
    csum = np.cumsum(np.insert(envelope, 0, 0.0))
    lo = np.maximum(np.arange(1, n + 1) - win, 0)
    causal_mean = (csum[1:] - csum[lo]) / (np.arange(1, n + 1) - lo)
    sd = causal_mean.std()
    speaker_term = SPEAKER_TERM_WEIGHT * (
        (causal_mean - causal_mean.mean()) / sd if sd > 0 else 0 * causal_mean
    )
    noise = LABEL_SLOW_NOISE_SD * smooth_noise(
        rng, n, 1.0 * fps
    ) + LABEL_WHITE_NOISE_SD * rng.standard_normal(n)
    # words: their own random stream, so adding them left every other signal as it was
    text_rng = seeded_rng(seed, 4, listener, story)
    phrase_affect, phrase_words = _phrase_words(
        text_rng, phrases, syllables, story_curve(story, np.array([p0 for p0, _ in phrases]), seed)
    )
    backchannel_words = _backchannel_words(phrases, phrase_affect, backchannels)
    affect = _held_affect(t, phrases, phrase_affect)
    text_term = lp.story_sign * TEXT_TERM_WEIGHT * _causal_smooth(affect, TEXT_TERM_TAU_S, fps)
    valence = np.clip(
        lp.valence_offset + lp.valence_gain * smile_delayed + speaker_term + text_term + noise,
        -1.0,
        1.0,
    )

    # observers: a third person rating the listener, another rating the speaker
    obs_rng = seeded_rng(seed, 5, listener, story)
    win = max(1, int(round(OBSERVER_LISTENER_SMOOTH_S * fps)))
    padded = np.concatenate(
        [np.full(win // 2, valence[0]), valence, np.full(win - 1 - win // 2, valence[-1])]
    )
    seen = _delayed(
        np.convolve(padded, np.ones(win) / win, mode="valid"), OBSERVER_LISTENER_DELAY_S, fps
    )
    slow_sd, white_sd = OBSERVER_LISTENER_NOISE_SD
    observer_listener = np.clip(
        lp.observer_offset
        + lp.observer_scale * seen
        + slow_sd * smooth_noise(obs_rng, n, 1.0 * fps)
        + white_sd * obs_rng.standard_normal(n),
        -1.0,
        1.0,
    )
    told = _delayed(
        _causal_smooth(affect, OBSERVER_SPEAKER_TAU_S, fps), OBSERVER_SPEAKER_DELAY_S, fps
    )
    slow_sd, white_sd = OBSERVER_SPEAKER_NOISE_SD
    observer_speaker = np.clip(
        0.05
        + OBSERVER_SPEAKER_GAIN * told
        + slow_sd * smooth_noise(obs_rng, n, 1.0 * fps)
        + white_sd * obs_rng.standard_normal(n),
        -1.0,
        1.0,
    )

    # --- faces ---
    blinks = {"speaker": _blink_onsets(rng, n / fps), "listener": _blink_onsets(rng, n / fps)}
    states: dict[str, dict[str, np.ndarray]] = {}
    for role in ("speaker", "listener"):
        blink = np.zeros(n, np.int64)
        for b in blinks[role]:
            i0 = int(round(b * fps))
            for k, level in enumerate(_BLINK_SEQUENCE):
                if i0 + k < n:
                    blink[i0 + k] = level
        states[role] = {"blink": blink}
    n_smile = len(SMILE_LEVELS) - 1
    states["listener"]["smile"] = np.rint(smile * n_smile).astype(np.int64)
    lmouth = np.zeros(n, np.int64)
    for b0, b1 in backchannels:
        lmouth[(t >= b0) & (t < b1)] = BACKCHANNEL_MOUTH_STATE
    states["listener"]["mouth"] = lmouth
    states["listener"]["brow"] = np.zeros(n, np.int64)
    # the speaker's face tells the story's curve: smile states 0-4 around the neutral state
    states["speaker"]["smile"] = np.clip(
        np.rint(SPEAKER_SMILE_STATE + SPEAKER_STORY_SMILE_STATES * story_curve(story, t, seed)),
        0,
        len(SMILE_LEVELS) - 1,
    ).astype(np.int64)
    states["speaker"]["mouth"] = np.digitize(envelope, [0.08, 0.35, 0.65]).astype(np.int64)
    brow = np.zeros(n, np.int64)
    for syl in syllables:
        if syl["accent"]:
            brow[(t >= syl["t0"] - 0.05) & (t < syl["t1"] + 0.15)] = 1
    states["speaker"]["brow"] = brow

    speaking = np.convolve(envelope > 0.08, np.ones(int(fps)) / fps, mode="same")
    spk_xy = _head_motion(rng, n, fps, (2.5, 1.5))
    spk_xy[:, 0] += 2.0 * speaking * smooth_noise(rng, n, 0.25 * fps)
    lis_xy = _head_motion(rng, n, fps, (1.5, 1.5))
    for b0, b1 in backchannels:  # a nod
        u = (t - b0 + 0.1) / (b1 - b0 + 0.2)
        lis_xy[:, 1] += np.where((u > 0) & (u < 1), 4.0 * np.sin(np.pi * np.clip(u, 0, 1)), 0.0)
    offsets = {
        "speaker": _quantize_even(spk_xy, motion_limit),
        "listener": _quantize_even(lis_xy, motion_limit),
    }

    return SessionPlan(
        listener=int(listener),
        story=int(story),
        speaker=speaker,
        fps=float(fps),
        n_frames=n,
        phrases=phrases,
        syllables=syllables,
        backchannels=backchannels,
        smile_events=events,
        blinks=blinks,
        smile=smile,
        smile_delayed=smile_delayed,
        speech_envelope=envelope,
        speaker_term=speaker_term,
        valence=valence,
        states=states,
        offsets=offsets,
        audio=audio,
        phrase_affect=phrase_affect,
        phrase_words=phrase_words,
        backchannel_words=backchannel_words,
        affect=affect,
        text_term=text_term,
        observer_listener=observer_listener,
        observer_speaker=observer_speaker,
    )
