"""One synthetic session: its channels (face_geom, face_au, eGeMAPS per role) and labels, from the latents.

See "Channels" in :mod:`bench.synth`. :func:`synth_session` is pure: it opens no file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from featurestore.extractors.egemaps import EgemapsExtractor
from featurestore.extractors.face_geom import COLUMNS as FACE_GEOM_COLUMNS
from featurestore.sources.manifest import SPLITS, STORY_SPEAKER, story_split
from featurestore.sources.media import sample_mask_step
from featurestore.storage.store import (
    LABEL_FPS,
    Channel,
    SessionMeta,
    cache_key,
    session_name,
    utc_now,
)

from .model import (
    AFFECT_HZ,
    DRIFT_HZ,
    DRIFT_SD,
    EGEMAPS_HOP_S,
    EXPRESSION_HZ,
    F0_PER_VOICE,
    GRID_HZ,
    HEAD_HZ,
    JITTER_HZ,
    JITTER_SD,
    LABEL_DELAY_S,
    LOUDNESS_PER_VOICE,
    SPEAKER_WEIGHT,
    SYNTH_EXTRACTOR,
    SYNTH_VERSION,
    VOICE_HZ,
    alternating,
    bursts,
    listener_truth,
    seeded_rng,
    smooth_noise,
    speaker_truth,
)

#: AU columns of py-feat's Detectorv1 with the ``xgb`` AU model (its ``au_columns``)
AU_COLUMNS = (
    "AU01",
    "AU02",
    "AU04",
    "AU05",
    "AU06",
    "AU07",
    "AU09",
    "AU10",
    "AU11",
    "AU12",
    "AU14",
    "AU15",
    "AU17",
    "AU20",
    "AU23",
    "AU24",
    "AU25",
    "AU26",
    "AU28",
    "AU43",
)

CHANNEL_KEYS = (
    "speaker/face_geom",
    "listener/face_geom",
    "speaker/face_au",
    "listener/face_au",
    "scene/egemaps",
    "speaker/egemaps",
    "listener/egemaps",
)

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
_EGEMAPS_NONNEG = (
    "Loudness_sma3",
    "spectralFlux_sma3",
    "jitterLocal_sma3nz",
    "shimmerLocaldB_sma3nz",
)
_EGEMAPS_MIN = {
    "F1bandwidth_sma3nz": 50.0,
    "F2bandwidth_sma3nz": 50.0,
    "F3bandwidth_sma3nz": 50.0,
    "F1frequency_sma3nz": 100.0,
    "F2frequency_sma3nz": 300.0,
    "F3frequency_sma3nz": 800.0,
}


@lru_cache(maxsize=1)
def egemaps_columns() -> tuple[str, ...]:
    """The 25 eGeMAPSv02 LLD column names, as openSMILE itself reports them."""
    names = tuple(str(c) for c in EgemapsExtractor().smile().feature_names)
    unknown = set(names) ^ set(_EGEMAPS_SPEC)
    if unknown:  # a different openSMILE release renamed a column: the table below needs it
        raise RuntimeError(
            f"openSMILE's eGeMAPSv02 LLD names differ from bench.synth's table in {sorted(unknown)}; "
            "update _EGEMAPS_SPEC in featurestore/synth/session.py"
        )
    return names


@dataclass
class SynthSession:
    """One generated session: shard metadata, channels and labels (nothing written yet)."""

    meta: SessionMeta
    channels: dict[str, Channel]
    labels: dict[str, np.ndarray]
    label_sources: dict[str, dict]


def face_sample_frames(n_frames: int, face_fps: float, video_fps: float = LABEL_FPS) -> np.ndarray:
    """Video frame indices sampled at ``face_fps`` (as :func:`featurestore.sources.media.iter_frames` picks them).

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
    rng: np.random.Generator,
    latents: np.ndarray,
    base_override: dict[str, float],
    affect_scale: float,
    invalid: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """face_geom (n, 17) and face_au (n, 20) from face latents (n, 7); invalid rows are NaN."""
    geom_base, geom_sd, geom_load, au_bias, au_load = _face_tables()
    lat = latents.copy()
    lat[:, 0] *= affect_scale
    base = geom_base.copy()
    for c, v in base_override.items():
        base[FACE_GEOM_COLUMNS.index(c)] = v
    n = lat.shape[0]
    geom = (
        base
        + lat @ geom_load
        + geom_sd * rng.standard_normal((n, len(FACE_GEOM_COLUMNS)), dtype=np.float32)
    )
    for c in _GEOM_NONNEG:
        j = FACE_GEOM_COLUMNS.index(c)
        np.maximum(geom[:, j], 0.0, out=geom[:, j])
    logits = (
        au_bias
        + lat @ au_load
        + _AU_NOISE * rng.standard_normal((n, len(AU_COLUMNS)), dtype=np.float32)
    )
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
    rng = seeded_rng(seed, 1, listener, story)
    per_frame = int(GRID_HZ / LABEL_FPS)  # grid samples per video frame (4)
    delay = int(round(LABEL_DELAY_S * GRID_HZ))
    pre = delay + GRID_HZ  # grid samples before t = 0, so t - delay is always on the grid
    m = pre + per_frame * n

    # latent signals on the 100 Hz grid (grid index pre + round(t * 100) is time t)
    affect = smooth_noise(rng, m, AFFECT_HZ)
    voice = smooth_noise(rng, m, VOICE_HZ)
    drift = smooth_noise(rng, m, DRIFT_HZ)
    jitter = smooth_noise(rng, m, JITTER_HZ)
    spk_expression = smooth_noise(rng, m, EXPRESSION_HZ)
    lis_brow = smooth_noise(rng, m, EXPRESSION_HZ)
    heads = [smooth_noise(rng, m, HEAD_HZ) for _ in range(6)]
    talk_s = alternating(rng, m, (1.2, 3.5), (0.35, 1.5))
    talk_l = bursts(rng, m, lt.backchannel_per_s, 0.6, 0.3)
    voiced = alternating(rng, m, (0.10, 0.25), (0.03, 0.10))
    voiced_s, voiced_l = voiced & talk_s, voiced & talk_l & ~talk_s
    mouth_amp = rng.uniform(0.4, 1.0, size=m).astype(np.float32)
    invalid_s = bursts(rng, m, 0.02, 1.2, 0.2)
    invalid_l = bursts(rng, m, 0.02, 1.2, 0.2)
    blink_s = rng.random(m) < 0.05
    blink_l = rng.random(m) < 0.05

    # labels at 25 fps
    g = pre + per_frame * np.arange(n)
    valence = (
        lt.offset
        + lt.gain * affect[g - delay]
        + SPEAKER_WEIGHT * voice[g - delay]
        + DRIFT_SD * drift[g]
        + JITTER_SD * jitter[g]
    )
    valence = np.clip(valence, -1.0, 1.0).astype(np.float32)

    # faces at the sampled video frames
    frames = face_sample_frames(n, face_fps)
    face_t = frames / LABEL_FPS
    gf = pre + per_frame * frames

    def latents(aff, brow, mouth, h, blink):
        return np.column_stack(
            [aff[gf], brow[gf], mouth[gf], h[0][gf], h[1][gf], h[2][gf], blink[gf]]
        ).astype(np.float32)

    lat_s = latents(
        spk_expression, voice, voiced_s * mouth_amp, heads[:3], blink_s.astype(np.float32)
    )
    lat_l = latents(affect, lis_brow, voiced_l * mouth_amp, heads[3:], blink_l.astype(np.float32))
    geom_s, au_s = _face_channels(
        rng,
        lat_s,
        {"lip_corner_pull": st.mouth_width, "head_yaw": 12.0, "face_scale": 0.11},
        1.0,
        invalid_s[gf],
    )
    geom_l, au_l = _face_channels(
        rng,
        lat_l,
        {"lip_corner_pull": lt.mouth_width, "head_yaw": -12.0, "face_scale": 0.08},
        lt.expressivity,
        invalid_l[gf],
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
            data,
            t,
            valid,
            list(columns),
            extractor=SYNTH_EXTRACTOR,
            extractor_version=SYNTH_VERSION,
            params=params,
            cache_key=cache_key(upstream, SYNTH_EXTRACTOR, SYNTH_VERSION, params),
            source=src,
            created_utc=created,
            shared_with=shared_with,
            # each row is the synthetic world observed at its time: nothing later is read
            lookahead_s=0.0,
        )

    all_valid = np.ones(rows, bool)
    channels = {
        "speaker/face_geom": channel(
            "speaker/face_geom", geom_s, face_t, ~invalid_s[gf], FACE_GEOM_COLUMNS
        ),
        "listener/face_geom": channel(
            "listener/face_geom", geom_l, face_t, ~invalid_l[gf], FACE_GEOM_COLUMNS
        ),
        "speaker/face_au": channel("speaker/face_au", au_s, face_t, ~invalid_s[gf], AU_COLUMNS),
        "listener/face_au": channel("listener/face_au", au_l, face_t, ~invalid_l[gf], AU_COLUMNS),
        "scene/egemaps": channel("scene/egemaps", ege, ege_t, all_valid, cols),
        # the per-role rows are the scene rows (same array, stored once as HDF5 hard links);
        # valid: voiced frames of that role's talk
        "speaker/egemaps": channel(
            "speaker/egemaps", ege, ege_t, (voiced & talk_s)[ge], cols, "scene/egemaps"
        ),
        "listener/egemaps": channel(
            "listener/egemaps", ege, ege_t, (voiced & talk_l)[ge], cols, "scene/egemaps"
        ),
    }
    meta = SessionMeta(
        session, int(listener), int(story), int(speaker), story_split(story, SPLITS), n
    )
    src = {"upstream": upstream, "extractor": SYNTH_EXTRACTOR, "version": SYNTH_VERSION}
    return SynthSession(meta, channels, {"valence_self": valence}, {"valence_self": src})
