"""The second embedded demo (docs/demo.md): a monadic corpus laid out by a manifest, one person
per session with a camera and a microphone, two lagged raters and a whole-session rating."""

from __future__ import annotations

import csv
import io
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from ..concordance import ccc
from ..files import write_atomic
from . import files, model, plan
from .face import Look, TileCache, face_rig
from .model import listener_params, seeded_rng, smooth_noise, speaker_params, story_curve
from .voice import Phrases, Syllables, speech_schedule, synth_speech

#: task number -> its name (the manifest's ``group``) and split
TASKS: dict[int, tuple[str, str]] = {
    1: ("picture", "train"),
    2: ("recall", "train"),
    3: ("plan", "val"),
    4: ("opinion", "test"),
}
#: the two raters: reaction lag (s), scale and offset of what they see, noise (slow sd, white sd),
#: and the rate of their rating files (None: one value per video frame)
RATERS: dict[str, dict[str, Any]] = {
    "r1": {"lag_s": 1.0, "scale": 0.9, "offset": 0.0, "noise_sd": (0.03, 0.02), "rate_hz": None},
    "r2": {"lag_s": 2.5, "scale": 1.1, "offset": 0.05, "noise_sd": (0.06, 0.03), "rate_hz": 10.0},
}
#: the rated targets (one file per rater each) and the whole-session rating
TARGETS = ("valence", "arousal")
SESSION_RATING = "engagement"
_SESSION_COLUMNS = ("session", "person", "group", "split", "video_person", "audio_person")
#: the person's microphone files
WAV_RATE = 16000
#: the latent signals live on this grid (s) from ``-GRID_PAD_S``, so a lagged rater sees the past
GRID_FPS = 10.0
GRID_PAD_S = 5.0

Curve = Callable[[np.ndarray], np.ndarray]
Truth = Callable[[str, np.ndarray], np.ndarray]
#: target -> rater -> (times, values)
Ratings = dict[str, dict[str, tuple[np.ndarray, np.ndarray]]]


def session_id(person: int, task: int) -> str:
    """The session id of ``person`` doing ``task``: ``p<P>_<task name>``.

    >>> session_id(2, 3)
    'p2_plan'
    """
    return f"p{int(person)}_{TASKS[int(task)][0]}"


@dataclass
class MonadicPlan:
    """One session's latent signals (per video frame), ratings and audio."""

    person: int
    task: int
    n_frames: int
    fps: float
    smile: np.ndarray
    arousal: np.ndarray
    truth: dict[str, np.ndarray]  # target -> true affect per frame
    ratings: Ratings
    session_rating: float
    states: dict[str, np.ndarray]  # smile/mouth/blink/brow -> state per frame
    offsets: np.ndarray  # (n_frames, 2) head translation, pixels
    audio: np.ndarray  # AUDIO_RATE samples
    phrases: Phrases


def _person_extra(person: int, seed: int) -> dict[str, float]:
    """The monadic demo's own per-person parameters (arousal level, engagement bias)."""
    r = seeded_rng(seed, 21, person)
    return {
        "arousal_level": round(float(r.uniform(0.3, 0.6)), 4),
        "engagement_bias": round(float(r.uniform(-0.6, 0.6)), 4),
    }


def _latents(
    rng: np.random.Generator, person: int, task: int, seed: int, duration_s: float
) -> tuple[Curve, Curve, Truth]:
    """The latent smile and arousal (0..1) and the true ``valence`` or ``arousal`` (-1..1) as
    functions of time (s): the person's baseline and smile events, their arousal level and the
    task's common curve, each with slow noise."""
    lp = listener_params(person, seed)
    grid = -GRID_PAD_S + np.arange(int((duration_s + GRID_PAD_S) * GRID_FPS) + 2) / GRID_FPS
    events = plan.smile_events(rng, lp, -GRID_PAD_S, duration_s, rounded=False)
    smile_slow = 0.04 * smooth_noise(rng, len(grid), 1.5 * GRID_FPS)
    arousal_slow = 0.12 * smooth_noise(rng, len(grid), 2.0 * GRID_FPS)
    level = _person_extra(person, seed)["arousal_level"]

    def smile(x: np.ndarray) -> np.ndarray:
        latent = lp.smile_baseline + plan.smile_curve(x, events)
        return np.clip(latent + np.interp(x, grid, smile_slow), 0, 1)

    def arousal(x: np.ndarray) -> np.ndarray:
        latent = level + 0.3 * story_curve(100 + int(task), x, seed)
        return np.clip(latent + np.interp(x, grid, arousal_slow), 0, 1)

    def truth(target: str, x: np.ndarray) -> np.ndarray:
        if target == "valence":
            return np.clip(lp.valence_offset + lp.valence_gain * smile(x), -1, 1)
        return np.clip(-0.6 + 1.2 * arousal(x), -1, 1)

    return smile, arousal, truth


def _rater_ratings(
    truth: Truth, seed: int, person: int, task: int, t: np.ndarray, duration_s: float, fps: float
) -> Ratings:
    """Target -> rater -> (times, ratings): each rater sees the ``truth`` late, scaled, offset and
    noisy, from a stream of their own."""
    ratings: Ratings = {}
    for k, target in enumerate(TARGETS):
        ratings[target] = {}
        for j, (rater, p) in enumerate(RATERS.items()):
            rr = seeded_rng(seed, 22, person, task, k, j)
            times = t if p["rate_hz"] is None else np.arange(0, duration_s, 1 / p["rate_hz"])
            seen = p["offset"] + p["scale"] * truth(target, times - p["lag_s"])
            ratings[target][rater] = (times, plan.noisy(rr, seen, p["noise_sd"], fps))
    return ratings


def _voice(
    rng: np.random.Generator, voice: model.SpeakerParams, arousal_at: Curve, n: int, fps: float
) -> tuple[Phrases, Syllables, np.ndarray, np.ndarray]:
    """(phrases, syllables, speech envelope per frame, audio): the OMG demo's speech, each
    syllable louder with the arousal of its time; the audio adds a faint room noise."""
    sr = model.AUDIO_RATE
    n_samples = int(round(n / fps * sr))
    phrases, syllables, _ = speech_schedule(rng, n / fps)
    gains = 0.25 + 0.75 * arousal_at(np.array([syl["t0"] for syl in syllables]))
    for syl, gain in zip(syllables, gains, strict=True):
        syl["amp"] *= float(gain)
    # synth_speech scales its loudest peak to the voice's level: undo that, so a calmer session
    # is quieter as a whole, not only relative to its own loudest syllable
    speech = synth_speech(syllables, phrases, voice, rng, n_samples, sr) * float(gains.max())
    audio = np.clip(speech + 0.0015 * rng.standard_normal(n_samples), -1, 1).astype(np.float32)
    return phrases, syllables, plan.speech_envelope(speech, n, fps, sr), audio


def plan_monadic(
    person: int,
    task: int,
    *,
    duration_s: float = 8.0,
    fps: float = 25.0,
    seed: int = 0,
    motion_limit: tuple[int, int] = (8, 8),
) -> MonadicPlan:
    """Every latent signal and rating of ``person`` doing ``task``, regenerated from ``seed``
    (one random stream in a fixed order: latents, the session rating, the voice, blinks, head
    motion; each rater has a stream of its own)."""
    rng = seeded_rng(seed, 20, person, task)
    n = int(round(duration_s * fps))
    t = np.arange(n) / fps
    smile_at, arousal_at, truth_at = _latents(rng, person, task, seed, duration_s)
    smile, arousal = smile_at(t), arousal_at(t)
    ratings = _rater_ratings(truth_at, seed, person, task, t, duration_s, fps)
    bias = _person_extra(person, seed)["engagement_bias"]
    score = 1 + 6 * (0.6 * arousal.mean() + 0.4 * smile.mean()) + bias
    session_rating = round(float(np.clip(score + rng.normal(0, 0.25), 1, 7)), 2)
    voice = speaker_params(person, seed)
    phrases, syllables, envelope, audio = _voice(rng, voice, arousal_at, n, fps)
    states = {
        "smile": np.rint(smile * (len(model.SMILE_LEVELS) - 1)).astype(np.int64),
        "mouth": np.digitize(envelope, plan.MOUTH_STEPS).astype(np.int64),
        "blink": plan.blink_states(plan.blink_onsets(rng, n / fps), n, fps),
        "brow": plan.accent_brows(syllables, t),
    }
    offsets = plan.quantize_even(plan.head_motion(rng, n, fps, (2.0, 1.5)), motion_limit)
    truth = {target: truth_at(target, t) for target in TARGETS}
    return MonadicPlan(
        person=int(person),
        task=int(task),
        n_frames=n,
        fps=float(fps),
        smile=smile,
        arousal=arousal,
        truth=truth,
        ratings=ratings,
        session_rating=session_rating,
        states=states,
        offsets=offsets,
        audio=audio,
        phrases=phrases,
    )


def _layout(width: int, height: int, tile: tuple[int, int]) -> files.Layout:
    """One face centred in the whole frame (role ``person``)."""
    th0, tw0 = tile
    scale = min(1.0, (height - 20) / th0, (width - 40) / tw0)
    th, tw = 2 * int(th0 * scale / 2), 2 * int(tw0 * scale / 2)
    if th < 120:
        raise ValueError(
            f"demo: a {width}x{height} frame leaves a {tw}x{th} px face tile, too small for face "
            "detection; use at least 240x180 (the default is 480x360)"
        )
    origin = (2 * ((width - tw) // 4), 2 * ((height - th) // 4))
    limit = (min(8, (width - tw) // 2 // 2 * 2), min(8, (height - th) // 2 // 2 * 2))
    return files.Layout(width, height, {"person": (0, width)}, th, tw, {"person": origin}, limit)


def _wav_bytes(audio: np.ndarray) -> bytes:
    """``audio`` (``AUDIO_RATE``) as a 16 kHz mono 16-bit WAV file."""
    from scipy.io import wavfile  # lazily: scipy is slow to import (0.8 s), only a build needs it
    from scipy.signal import resample_poly  # lazily, as above

    pcm = resample_poly(audio.astype(np.float64), WAV_RATE, model.AUDIO_RATE)
    buf = io.BytesIO()
    wavfile.write(buf, WAV_RATE, np.clip(np.rint(pcm * 32767), -32768, 32767).astype(np.int16))
    return buf.getvalue()


def _rating_csv(target: str, times: np.ndarray, values: np.ndarray, per_frame: bool) -> str:
    """One rater's file: one value per video frame (``per_frame``), else ``time,<target>`` rows."""
    if per_frame:  # the official format: a header and one value per video frame
        return f"{target}\n" + "".join(f"{v:.6f}\n" for v in values)
    return f"time,{target}\n" + "".join(
        f"{a:.3f},{v:.6f}\n" for a, v in zip(times, values, strict=True)
    )


def manifest_columns() -> list[str]:
    """The columns of the demo's ``manifest.csv``, in order."""
    labels = [f"label_{t}@{r}" for t in TARGETS for r in RATERS]
    return [*_SESSION_COLUMNS, *labels, f"rating_{SESSION_RATING}"]


def _write_session(
    out: Path, mp: MonadicPlan, layout: files.Layout, cache: TileCache
) -> tuple[dict[str, str], dict[str, Any]]:
    """One session's camera video, microphone and rating files; its manifest row and truth."""
    p, k, sid = mp.person, mp.task, session_id(mp.person, mp.task)
    states, offsets = {"person": mp.states}, {"person": mp.offsets}
    frames = files.video_frames(mp.n_frames, states, offsets, layout, {"person": cache})
    room = (0.3 * mp.audio).astype(np.float32)  # the camera's room microphone: farther, quieter
    files.write_video(out / "media" / f"{sid}.mp4", frames, layout, mp.fps, room, model.AUDIO_RATE)
    write_atomic(out / "media" / f"{sid}.wav", _wav_bytes(mp.audio))
    media = (f"media/{sid}.mp4", f"media/{sid}.wav")
    row = dict(zip(_SESSION_COLUMNS, (sid, f"p{p}", *TASKS[k], *media), strict=True))
    for target in TARGETS:
        for rater, (times, values) in mp.ratings[target].items():
            name = f"ratings/{sid}_{target}_{rater}.csv"
            text = _rating_csv(target, times, values, RATERS[rater]["rate_hz"] is None)
            write_atomic(out / name, text.encode())
            row[f"label_{target}@{rater}"] = name
    row[f"rating_{SESSION_RATING}"] = f"{mp.session_rating:.2f}"
    r1 = {tg: mp.ratings[tg]["r1"][1] for tg in TARGETS}
    truth = {
        "person": p,
        "task": k,
        "n_frames": mp.n_frames,
        "smile_mean": round(float(mp.smile.mean()), 4),
        "arousal_mean": round(float(mp.arousal.mean()), 4),
        f"rating_{SESSION_RATING}": mp.session_rating,
        "ccc_truth_vs_r1": {tg: round(ccc(mp.truth[tg], r1[tg]), 4) for tg in TARGETS},
    }
    return row, truth


def _truth(
    head: dict[str, Any], tasks: tuple[int, ...], persons: range, sessions: dict[str, Any]
) -> dict[str, Any]:
    """``demo_truth.json``: ``head`` (:func:`~.files.truth_head`), the raters, the formulas and every
    person's parameters."""
    keep = ("valence_offset", "valence_gain", "smile_baseline")
    seed = head["seed"]
    return {
        **head,
        "wav_rate_hz": WAV_RATE,
        "tasks": {str(k): {"name": n, "split": s} for k, (n, s) in TASKS.items() if k in tasks},
        "raters": {r: {**p, "noise_sd": list(p["noise_sd"])} for r, p in RATERS.items()},
        "targets": {
            "valence": "valence_offset + valence_gain * smile(t)",
            "arousal": "-0.6 + 1.2 * arousal(t)",
            "rater": "clip(offset + scale * true(t - lag_s) + noise, -1, 1)",
            SESSION_RATING: "clip(1 + 6 * (0.6 * mean arousal + 0.4 * mean smile) "
            "+ engagement_bias + N(0, 0.25), 1, 7)",
            "loudness": "each syllable's amplitude * (0.25 + 0.75 * arousal(t0))",
        },
        "persons": {
            f"p{p}": {
                **{k: v for k, v in vars(listener_params(p, seed)).items() if k in keep},
                "f0_hz": speaker_params(p, seed).f0_hz,
                **_person_extra(p, seed),
            }
            for p in persons
        },
        "sessions": sessions,
    }


def build_monadic_demo(
    out_dir: str | os.PathLike[str],
    *,
    n_persons: int = 4,
    tasks: Sequence[int] = (1, 2, 3, 4),
    duration_s: float = 8.0,
    width: int = 480,
    height: int = 360,
    fps: float = 25,
    seed: int = 0,
    progress: bool = True,
) -> files.DemoInfo:
    """Write the monadic demo corpus (``n_persons`` x ``tasks`` sessions of ``duration_s`` s);
    same ``seed``, same files. Existing files of the same sessions are overwritten.

    >>> info = build_monadic_demo(tmp, n_persons=2, tasks=(1, 3), duration_s=6)  # doctest: +SKIP
    """
    t_start = time.perf_counter()
    tasks = tuple(int(k) for k in tasks)
    bad = not tasks or [k for k in tasks if k not in TASKS]
    groups = f"demo: tasks must be some of {sorted(TASKS)}, got {list(tasks)}" if bad else ""
    files.check_args("n_persons", n_persons, groups, duration_s, 4.0, fps)
    if width % 2 or height % 2:
        raise ValueError(f"demo: width and height must be even, got {width}x{height}")
    rig = face_rig()
    layout = _layout(int(width), int(height), rig.tile.shape[:2])
    out = Path(out_dir)
    for folder in ("media", "ratings"):
        (out / folder).mkdir(parents=True, exist_ok=True)
    persons = range(1, int(n_persons) + 1)
    rows, truth_sessions, n_frames = [], {}, {}
    pairs = [(p, k) for p in persons for k in tasks]
    for p, k in tqdm(pairs, desc="monadic demo", unit="session", disable=not progress):
        mp = plan_monadic(
            p, k, duration_s=duration_s, fps=fps, seed=seed, motion_limit=layout.motion_limit
        )
        look = Look(p % 2 == 0, listener_params(p, seed).tint)
        cache = TileCache(rig, look, size=(layout.tile_h, layout.tile_w))
        sid = session_id(p, k)
        row, truth_sessions[sid] = _write_session(out, mp, layout, cache)
        rows.append(row)
        n_frames[sid] = mp.n_frames
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=manifest_columns(), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    write_atomic(out / "manifest.csv", buf.getvalue().encode())
    head = files.truth_head("featurestore.demo.monadic", seed, fps, duration_s, layout)
    truth = _truth(head, tasks, persons, truth_sessions)
    readme = _readme(truth, len(rows))
    return files.write_corpus_files(out, truth, readme, "monadic", t_start, n_frames)


def _readme(truth: dict[str, Any], n_sessions: int) -> dict[str, Any]:
    """The fields of ``templates/README_monadic.md``: the files, what is planted, the parameters."""
    persons = [
        f"| {k} | {v['valence_offset']:+.3f} | {v['valence_gain']:.3f} | {v['arousal_level']:.3f} "
        f"| {v['engagement_bias']:+.3f} | {v['f0_hz']:.0f} |"
        for k, v in truth["persons"].items()
    ]
    raters = [
        f"| {r} | {p['lag_s']:g} | {p['scale']:g} | {p['offset']:+g} | {p['noise_sd'][0]:g}, "
        f"{p['noise_sd'][1]:g} | {'one per frame' if p['rate_hz'] is None else format(p['rate_hz'], 'g') + ' Hz'} |"
        for r, p in truth["raters"].items()
    ]
    return {
        **{k: v for k, v in truth.items() if k not in ("raters", "persons")},
        **truth["targets"],
        "n_sessions": n_sessions,
        "raters": "\n".join(raters),
        "persons": "\n".join(persons),
        "splits": ", ".join(f"{v['name']} {v['split']}" for v in truth["tasks"].values()),
    }
