"""One demo session's plan (docs/demo.md): every latent signal per video frame, the labels and
the words; the helpers it shares with :mod:`featurestore.demo.monadic` are public."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..sources.manifest import STORY_SPEAKER
from . import model
from .model import ListenerParams, SpeakerParams, seeded_rng, smooth_noise, story_curve
from .voice import Phrases, Syllables, speech_schedule, synth_backchannel, synth_speech

#: blink states of the frames of one blink
BLINK_SEQUENCE = (1, 2, 2, 1)
#: speech envelope levels (0..1) at which the mouth state steps up
MOUTH_STEPS = (0.08, 0.35, 0.65)


@dataclass
class SessionPlan:
    """Every latent signal of one session, per video frame (and the audio per sample); states
    index the ``*_LEVELS`` of :mod:`~.model`, offsets are head translations (pixels), times s."""

    listener: int
    story: int
    speaker: int
    fps: float
    n_frames: int
    voices: Voices  # speaker speech, listener "mm-hm"s, the audio
    smile_events: list[dict[str, float]]  # onset_s, amplitude, rise_s, hold_s, decay_s
    blinks: dict[str, list[float]]  # role -> blink onsets
    smile: np.ndarray  # latent listener smile at frame times, 0..1
    smile_delayed: np.ndarray  # smile(t - model.LABEL_DELAY_S)
    speaker_term: np.ndarray  # the valence's speaker-voice term per frame
    valence: np.ndarray  # the label per frame, [-1, 1]
    states: dict[str, dict[str, np.ndarray]]  # role -> smile/mouth/blink/brow -> int per frame
    offsets: dict[str, np.ndarray]  # role -> (n_frames, 2) int head translation, pixels
    words: Words  # what the speaker and the listener say, the phrases' affect
    audio_rate: int = model.AUDIO_RATE
    # per frame: the valence's text term, the observers'
    text_term: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))
    observer_listener: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))
    observer_speaker: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))

    @property
    def times(self) -> np.ndarray:
        """Frame times in seconds."""
        return np.arange(self.n_frames) / self.fps


def smile_curve(t: np.ndarray, events: list[dict[str, float]]) -> np.ndarray:
    """Sum of raised-cosine rise / hold / raised-cosine decay events at times ``t`` (s)."""
    y = np.zeros_like(t)
    for e in events:
        u = t - e["onset_s"]
        rise, hold, decay = e["rise_s"], e["hold_s"], e["decay_s"]
        shape = np.where(u < rise, 0.5 - 0.5 * np.cos(np.pi * np.clip(u / rise, 0, 1)), 1.0)
        fall = 0.5 + 0.5 * np.cos(np.pi * np.clip((u - rise - hold) / decay, 0, 1))
        shape = np.where(u > rise + hold, fall, shape)
        shape = np.where((u < 0) | (u > rise + hold + decay), 0.0, shape)
        y += e["amplitude"] * shape
    return y


def blink_onsets(rng: np.random.Generator, duration_s: float) -> list[float]:
    """Blink onsets (s): the first after 0.5-3 s, then every 2-6 s."""
    out, t = [], float(rng.uniform(0.5, 3.0))
    while t < duration_s - 0.3:
        out.append(round(t, 3))
        t += float(rng.uniform(2.0, 6.0))
    return out


def head_motion(
    rng: np.random.Generator, n: int, fps: float, amplitude: tuple[float, float]
) -> np.ndarray:
    """(n, 2) smooth random head translation in pixels (x, y) of ``amplitude`` sd."""
    x = smooth_noise(rng, n, 0.6 * fps) * amplitude[0]
    return np.stack([x, smooth_noise(rng, n, 0.8 * fps) * amplitude[1]], axis=1)


def quantize_even(xy: np.ndarray, limit: tuple[int, int]) -> np.ndarray:
    """Translations rounded to even pixels (the chroma planes stay aligned), within ``limit``."""
    return np.clip(2 * np.round(xy / 2), np.negative(limit), limit).astype(np.int64)


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
    if not d:
        return x.copy()
    return np.concatenate([np.full(min(d, len(x)), x[0] if len(x) else 0.0), x[: len(x) - d]])


def smile_events(
    rng: np.random.Generator, lp: ListenerParams, first_s: float, end_s: float, rounded: bool
) -> list[dict[str, float]]:
    """Random smile events of a listener from ``first_s`` on until ``end_s`` (s): onset, amplitude,
    rise, hold and decay, rounded to 3-4 decimals when ``rounded`` (the OMG demo's truth file)."""

    def r(value: float, digits: int) -> float:
        return round(value, digits) if rounded else value

    events = []
    t = first_s + float(rng.exponential(1 / lp.smile_event_rate_hz))
    while t < end_s:
        events.append(
            {
                "onset_s": r(t, 3),
                "amplitude": r(float(rng.uniform(0.25, 0.5) * lp.smile_event_size), 4),
                "rise_s": r(float(rng.uniform(0.6, 1.2)), 3),
                "hold_s": r(float(rng.uniform(0.8, 3.0)), 3),
                "decay_s": r(float(rng.uniform(1.2, 2.5)), 3),
            }
        )
        t += float(rng.exponential(1 / lp.smile_event_rate_hz)) + 1.0
    return events


def speech_envelope(speech: np.ndarray, n: int, fps: float, sr: int) -> np.ndarray:
    """The speech's RMS per video frame (``n`` frames at ``fps``), scaled to a peak of 1."""
    hop = sr / fps
    starts = (np.arange(n) * hop).astype(np.int64)
    seg = np.minimum(np.diff(np.append(starts, len(speech))), int(hop))
    rms = np.sqrt(np.add.reduceat(speech**2, starts) / np.maximum(seg, 1))
    return rms / rms.max() if rms.max() > 0 else rms


def blink_states(onsets: list[float], n: int, fps: float) -> np.ndarray:
    """Blink state per frame (indices into :data:`BLINK_LEVELS`) for blinks at ``onsets`` (s)."""
    blink = np.zeros(n, np.int64)
    for b in onsets:
        i0 = int(round(b * fps))
        for k, level in enumerate(BLINK_SEQUENCE):
            if i0 + k < n:
                blink[i0 + k] = level
    return blink


def accent_brows(syllables: Syllables, t: np.ndarray) -> np.ndarray:
    """Brow state per frame at times ``t`` (s): raised around every accented syllable."""
    brow = np.zeros(len(t), np.int64)
    for syl in syllables:
        if syl["accent"]:
            brow[(t >= syl["t0"] - 0.05) & (t < syl["t1"] + 0.15)] = 1
    return brow


@dataclass
class Voices:
    """The session's talk: speech and backchannel times, the mixed audio, the speech envelope."""

    phrases: Phrases  # speaker speech
    syllables: Syllables  # t0, t1 (s), vowel, accent
    backchannels: Phrases  # listener "mm-hm"
    audio: np.ndarray = field(repr=False)  # at model.AUDIO_RATE
    envelope: np.ndarray = field(repr=False)  # speaker loudness per frame, 0..1


def _voices(
    rng: np.random.Generator, lp: ListenerParams, sp: SpeakerParams, n: int, fps: float
) -> Voices:
    sr = model.AUDIO_RATE
    n_samples = int(round(n / fps * sr))
    phrases, syllables, backchannels = speech_schedule(rng, n / fps)
    speech = synth_speech(syllables, phrases, sp, rng, n_samples, sr)
    bc_audio = np.zeros(n_samples)
    for b0, _ in backchannels:
        bc_audio += synth_backchannel(b0, lp, n_samples, sr)
    room = 0.0015 * rng.standard_normal(n_samples)
    audio = np.clip(speech + bc_audio + room, -1, 1).astype(np.float32)
    envelope = speech_envelope(speech, n, fps, sr)
    return Voices(phrases, syllables, backchannels, audio, envelope)


def _latent_smile(
    rng: np.random.Generator, lp: ListenerParams, story: int, seed: int, n: int, fps: float
) -> tuple[list[dict[str, float]], Callable[[np.ndarray], np.ndarray]]:
    """The listener's smile events and their latent smile as a function of time (s): baseline,
    the story as this listener feels it, the events and slow noise on a 10 Hz grid."""
    events = smile_events(rng, lp, -model.LABEL_DELAY_S - 6.0, n / fps, rounded=True)
    grid_fps = 10.0  # the slow smile noise lives on a 10 Hz grid from -delay - 1 s
    g0 = -model.LABEL_DELAY_S - 1.0
    grid = g0 + np.arange(int((n / fps - g0) * grid_fps) + 2) / grid_fps
    slow = 0.04 * smooth_noise(rng, len(grid), 1.5 * grid_fps)

    def smile_at(times: np.ndarray) -> np.ndarray:
        felt = lp.story_sign * model.STORY_SMILE_WEIGHT * story_curve(story, times, seed)
        latent = lp.smile_baseline + felt + smile_curve(times, events)
        return np.clip(latent + np.interp(times, grid, slow), 0.0, 1.0)

    return events, smile_at


def _speaker_term(envelope: np.ndarray, fps: float) -> np.ndarray:
    """The valence's speaker-voice term: the z-scored causal mean of the speech envelope."""
    n = len(envelope)
    win = max(1, int(round(model.SPEAKER_TERM_WINDOW_S * fps)))
    csum = np.cumsum(np.insert(envelope, 0, 0.0))
    lo = np.maximum(np.arange(1, n + 1) - win, 0)
    causal_mean = (csum[1:] - csum[lo]) / (np.arange(1, n + 1) - lo)
    sd = causal_mean.std()
    z = (causal_mean - causal_mean.mean()) / sd if sd > 0 else 0 * causal_mean
    return model.SPEAKER_TERM_WEIGHT * z


@dataclass
class Words:
    """What the speaker and the listener say, and the affect of the latest phrase per frame."""

    phrase_affect: list[float]  # affect of each phrase, -1..1
    phrase_words: list[str]  # what the speaker says per phrase
    backchannel_words: list[str]  # the listener's, per backchannel
    affect: np.ndarray = field(repr=False)  # per frame: the latest phrase's affect (held)


def _words(seed: int, listener: int, story: int, voices: Voices, t: np.ndarray) -> Words:
    """Per phrase an affect (the story curve at its start plus the telling's own variation) and a
    sentence of about one word per 1.5 syllables, round(3 * |affect|) of them lexicon words of the
    affect's sign; per backchannel a word for the affect of the phrase before it."""
    # their own random stream, so adding the words left every other signal as it was
    rng = seeded_rng(seed, 4, listener, story)
    phrases = voices.phrases
    starts = np.array([p0 for p0, _ in phrases], dtype=np.float64)
    affects, texts = [], []
    for (p0, p1), c in zip(phrases, story_curve(story, starts, seed), strict=True):
        noise = rng.normal(0.0, model.PHRASE_AFFECT_SD)
        a = float(np.clip(model.STORY_AFFECT_WEIGHT * c + noise, -1.0, 1.0))
        n_syl = sum(1 for syl in voices.syllables if p0 <= syl["t0"] < p1)
        n = max(2, int(round(n_syl / 1.5)))
        sentence = [str(w) for w in rng.choice(model.NEUTRAL_WORDS, n)]
        pool = model.POSITIVE_WORDS if a > 0 else model.NEGATIVE_WORDS
        for _ in range(min(n - 1, int(round(3 * abs(a))))):
            sentence[int(rng.integers(1, n))] = str(rng.choice(pool))
        sentence[0] = sentence[0].capitalize()
        affects.append(round(a, 4))
        texts.append(" ".join(sentence) + ".")
    replies = []
    for b0, _ in voices.backchannels:
        before = [a for (_, p1), a in zip(phrases, affects, strict=True) if p1 <= b0 + 1e-6]
        a = before[-1] if before else 0.0
        kind = "positive" if a > model.BACKCHANNEL_AFFECT else "neutral"
        kind = "negative" if a < -model.BACKCHANNEL_AFFECT else kind
        replies.append(model.BACKCHANNEL_WORDS[kind])
    # per frame, the affect of the latest phrase that has started (0 before the first)
    idx = np.searchsorted(starts, t, side="right") - 1
    held = np.where(idx >= 0, np.append(np.asarray(affects, dtype=np.float64), 0.0)[idx], 0.0)
    return Words(affects, texts, replies, held)


def noisy(
    rng: np.random.Generator, x: np.ndarray, sd: tuple[float, float], fps: float
) -> np.ndarray:
    """``x`` plus slow (1 s) and white noise of the two ``sd``, clipped to [-1, 1]."""
    slow = sd[0] * smooth_noise(rng, len(x), 1.0 * fps)
    return np.clip(x + slow + sd[1] * rng.standard_normal(len(x)), -1.0, 1.0)


def _observers(
    seed: int, lp: ListenerParams, story: int, valence: np.ndarray, affect: np.ndarray, fps: float
) -> tuple[np.ndarray, np.ndarray]:
    """The observer of the listener (the self-rating smoothed and late) and of the speaker (the
    words' affect smoothed and late)."""
    obs_rng = seeded_rng(seed, 5, lp.listener, story)
    win = max(1, int(round(model.OBSERVER_LISTENER_SMOOTH_S * fps)))
    padded = np.pad(valence, (win // 2, win - 1 - win // 2), mode="edge")
    smoothed = np.convolve(padded, np.ones(win) / win, mode="valid")
    seen = _delayed(smoothed, model.OBSERVER_LISTENER_DELAY_S, fps)
    rated = lp.observer_offset + lp.observer_scale * seen
    observer_listener = noisy(obs_rng, rated, model.OBSERVER_LISTENER_NOISE_SD, fps)
    told = _causal_smooth(affect, model.OBSERVER_SPEAKER_TAU_S, fps)
    told = _delayed(told, model.OBSERVER_SPEAKER_DELAY_S, fps)
    told_rating = 0.05 + model.OBSERVER_SPEAKER_GAIN * told
    return observer_listener, noisy(obs_rng, told_rating, model.OBSERVER_SPEAKER_NOISE_SD, fps)


def _faces(
    rng: np.random.Generator,
    smile: np.ndarray,
    curve: np.ndarray,
    voices: Voices,
    t: np.ndarray,
    fps: float,
    motion_limit: tuple[int, int],
) -> tuple[dict[str, list[float]], dict[str, dict[str, np.ndarray]], dict[str, np.ndarray]]:
    """Role -> blink onsets, role -> smile/mouth/blink/brow state per frame, role -> (n, 2) head
    translation. The listener smiles with the latent smile, opens the mouth and nods to
    backchannel; the speaker's smile tells the story's ``curve``, the mouth follows the speech,
    the brows the accents, the head moves more while talking."""
    n = len(t)
    blinks = {"speaker": blink_onsets(rng, n / fps), "listener": blink_onsets(rng, n / fps)}
    n_smile = len(model.SMILE_LEVELS) - 1
    lmouth = np.zeros(n, np.int64)
    for b0, b1 in voices.backchannels:
        lmouth[(t >= b0) & (t < b1)] = model.BACKCHANNEL_MOUTH_STATE
    speaker_smile = np.rint(model.SPEAKER_SMILE_STATE + model.SPEAKER_STORY_SMILE_STATES * curve)
    states = {
        "speaker": {
            "blink": blink_states(blinks["speaker"], n, fps),
            "smile": np.clip(speaker_smile, 0, n_smile).astype(np.int64),
            "mouth": np.digitize(voices.envelope, MOUTH_STEPS).astype(np.int64),
            "brow": accent_brows(voices.syllables, t),
        },
        "listener": {
            "blink": blink_states(blinks["listener"], n, fps),
            "smile": np.rint(smile * n_smile).astype(np.int64),
            "mouth": lmouth,
            "brow": np.zeros(n, np.int64),
        },
    }
    speaking = np.convolve(voices.envelope > MOUTH_STEPS[0], np.ones(int(fps)) / fps, mode="same")
    spk_xy = head_motion(rng, n, fps, (2.5, 1.5))
    spk_xy[:, 0] += 2.0 * speaking * smooth_noise(rng, n, 0.25 * fps)
    lis_xy = head_motion(rng, n, fps, (1.5, 1.5))
    for b0, b1 in voices.backchannels:  # a nod
        u = (t - b0 + 0.1) / (b1 - b0 + 0.2)
        lis_xy[:, 1] += np.where((u > 0) & (u < 1), 4.0 * np.sin(np.pi * np.clip(u, 0, 1)), 0.0)
    offsets = {"speaker": spk_xy, "listener": lis_xy}
    return blinks, states, {r: quantize_even(xy, motion_limit) for r, xy in offsets.items()}


def plan_session(
    listener: int,
    story: int,
    *,
    duration_s: float = 40.0,
    fps: float = 25.0,
    seed: int = 0,
    motion_limit: tuple[int, int] = (8, 8),
) -> SessionPlan:
    """All latent signals of session (``listener``, ``story``) of ``duration_s`` seconds,
    regenerated from ``seed``; ``motion_limit`` bounds the head translation (pixels, x and y).

    One random stream in a fixed order (voices, smile, label noise, blinks, head motion); the
    words and the observers have streams of their own.
    """
    if int(story) not in STORY_SPEAKER:
        raise ValueError(f"demo: story {story} has no speaker; use stories {sorted(STORY_SPEAKER)}")
    speaker = STORY_SPEAKER[int(story)]
    lp, sp = model.listener_params(listener, seed), model.speaker_params(speaker, seed)
    rng = seeded_rng(seed, 3, listener, story)
    n = int(round(duration_s * fps))
    t = np.arange(n) / fps
    voices = _voices(rng, lp, sp, n, fps)
    events, smile_at = _latent_smile(rng, lp, story, seed, n, fps)
    smile, smile_delayed = smile_at(t), smile_at(t - model.LABEL_DELAY_S)
    speaker_term = _speaker_term(voices.envelope, fps)
    noise = model.LABEL_SLOW_NOISE_SD * smooth_noise(rng, n, 1.0 * fps)
    noise = noise + model.LABEL_WHITE_NOISE_SD * rng.standard_normal(n)
    words = _words(seed, listener, story, voices, t)
    smoothed_affect = _causal_smooth(words.affect, model.TEXT_TERM_TAU_S, fps)
    text_term = lp.story_sign * model.TEXT_TERM_WEIGHT * smoothed_affect
    label = lp.valence_offset + lp.valence_gain * smile_delayed + speaker_term + text_term + noise
    valence = np.clip(label, -1.0, 1.0)
    observer_listener, observer_speaker = _observers(seed, lp, story, valence, words.affect, fps)
    curve = story_curve(story, t, seed)
    blinks, states, offsets = _faces(rng, smile, curve, voices, t, fps, motion_limit)
    return SessionPlan(
        listener=int(listener),
        story=int(story),
        speaker=speaker,
        fps=float(fps),
        n_frames=n,
        voices=voices,
        smile_events=events,
        blinks=blinks,
        smile=smile,
        smile_delayed=smile_delayed,
        speaker_term=speaker_term,
        valence=valence,
        states=states,
        offsets=offsets,
        words=words,
        text_term=text_term,
        observer_listener=observer_listener,
        observer_speaker=observer_speaker,
    )
