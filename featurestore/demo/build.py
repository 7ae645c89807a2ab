"""The OMG-shaped demo corpus (docs/demo.md): every session's files, ``demo_truth.json``, README
(``templates/README_omg.md`` filled in with this build's numbers) and settings."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from ..concordance import ccc
from ..files import write_atomic
from ..sources.manifest import STORY_SPEAKER
from ..storage.store import session_name
from . import model
from .face import PHOTO_COLS, PHOTO_ROWS, PHOTO_SCALE, Look, TileCache, face_rig
from .files import (
    DemoInfo,
    Layout,
    check_args,
    frame_layout,
    transcript_srt,
    truth_head,
    valence_csv,
    video_frames,
    write_corpus_files,
    write_video,
)
from .model import ListenerParams, SpeakerParams, listener_params, speaker_params
from .plan import SessionPlan, plan_session

#: the folders of a build (the OMG-Empathy layout)
FOLDERS = ("Videos", "Annotations", "Transcripts", "Observer_Listener", "Observer_Speaker")


def _truth_session(p: SessionPlan) -> dict[str, Any]:
    return {
        "listener": p.listener,
        "story": p.story,
        "speaker": p.speaker,
        "n_frames": p.n_frames,
        "speech_phrases_s": [list(x) for x in p.voices.phrases],
        "backchannels_s": [list(x) for x in p.voices.backchannels],
        "smile_events": p.smile_events,
        "blink_onsets_s": p.blinks,
        "valence_mean": round(float(p.valence.mean()), 4),
        "valence_sd": round(float(p.valence.std()), 4),
        "phrase_affect": p.words.phrase_affect,
        "backchannel_words": p.words.backchannel_words,
        "ccc_self_vs_observer_listener": round(ccc(p.valence, p.observer_listener), 4),
        "ccc_self_vs_observer_speaker": round(ccc(p.valence, p.observer_speaker), 4),
    }


def _truth(
    head: dict[str, Any],
    listeners: dict[int, ListenerParams],
    speakers: dict[int, SpeakerParams],
    plans: list[SessionPlan],
    layout: Layout,
) -> dict[str, Any]:
    """``demo_truth.json``: ``head`` (:func:`~.files.truth_head`) and every latent signal's parameters."""
    observer = "clip({}{:g} s)(t - {:g} s) + noise (slow sd {}, white sd {}), -1, 1)"
    return {
        **head,
        "split_x": layout.regions["speaker"][1],
        "audio_rate_hz": model.AUDIO_RATE,
        "face": {
            "photo": "skimage.data.astronaut() (public domain, NASA)",
            "photo_rows": list(PHOTO_ROWS),
            "photo_cols": list(PHOTO_COLS),
            "scale": PHOTO_SCALE,
            "tile_size": [layout.tile_w, layout.tile_h],
            "tile_origin": {r: list(v) for r, v in layout.origin.items()},
            "smile_levels": list(model.SMILE_LEVELS),
            "mouth_levels": list(model.MOUTH_LEVELS),
            "blink_levels": list(model.BLINK_LEVELS),
            "brow_levels": list(model.BROW_LEVELS),
            "listener_smile_state": "round(smile * 6)",
            "speaker_smile_state": model.SPEAKER_SMILE_STATE,
            "speaker_mouth_state": "digitize(speech_envelope, [0.08, 0.35, 0.65])",
            "backchannel_mouth_state": model.BACKCHANNEL_MOUTH_STATE,
        },
        "label": {
            "target": "valence_self",
            "formula": "clip(valence_offset + valence_gain * smile(t - delay_s) + speaker_term(t) "
            "+ text_term(t) + noise(t), -1, 1)",
            "delay_s": model.LABEL_DELAY_S,
            "speaker_term": f"{model.SPEAKER_TERM_WEIGHT} * zscore(mean of the speaker's frame RMS "
            f"envelope over the last {model.SPEAKER_TERM_WINDOW_S:g} s)",
            "speaker_term_weight": model.SPEAKER_TERM_WEIGHT,
            "speaker_term_window_s": model.SPEAKER_TERM_WINDOW_S,
            "slow_noise_sd": model.LABEL_SLOW_NOISE_SD,
            "white_noise_sd": model.LABEL_WHITE_NOISE_SD,
            "smile": "clip(smile_baseline + sum of smile_events + 0.04 * slow noise, 0, 1)",
            "text_term": f"{model.TEXT_TERM_WEIGHT} * causal_smooth(affect(t), tau {model.TEXT_TERM_TAU_S:g} s)",
            "affect": "affect of the latest phrase the speaker has started, held until the next one "
            "(0 before the first)",
        },
        "words": {
            "phrase_affect": "a_p = clip(0.6 * arc_(p-1) + N(0, 0.5), -1, 1) per phrase (a drifting story arc)",
            "phrase_words": "about one word per 1.5 syllables; round(3 * |a_p|) of them positive "
            "(a_p > 0) or negative lexicon words",
            "positive_words": list(model.POSITIVE_WORDS),
            "negative_words": list(model.NEGATIVE_WORDS),
            "neutral_words": list(model.NEUTRAL_WORDS),
            "backchannel_words": {**model.BACKCHANNEL_WORDS, "threshold": model.BACKCHANNEL_AFFECT},
        },
        "observers": {
            "valence_observer_listener": observer.format(
                "observer_offset + observer_scale * moving_average(valence_self, ",
                model.OBSERVER_LISTENER_SMOOTH_S,
                model.OBSERVER_LISTENER_DELAY_S,
                *model.OBSERVER_LISTENER_NOISE_SD,
            ),
            "valence_observer_speaker": observer.format(
                f"0.05 + {model.OBSERVER_SPEAKER_GAIN} * causal_smooth(affect, tau ",
                model.OBSERVER_SPEAKER_TAU_S,
                model.OBSERVER_SPEAKER_DELAY_S,
                *model.OBSERVER_SPEAKER_NOISE_SD,
            ),
        },
        "listeners": {str(k): vars(v) for k, v in listeners.items()},
        "speakers": {str(k): vars(v) for k, v in speakers.items()},
        "sessions": {session_name(p.listener, p.story): _truth_session(p) for p in plans},
    }


def _readme(truth: dict[str, Any], info_line: str) -> dict[str, Any]:
    """The fields of ``templates/README_omg.md``: the files, what is planted, this build's numbers."""
    sessions, words = truth["sessions"].values(), truth["words"]
    agree = [
        (v["ccc_self_vs_observer_listener"], v["ccc_self_vs_observer_speaker"]) for v in sessions
    ]
    listeners = [
        f"| {k} | {v['valence_offset']:+.3f} | {v['valence_gain']:.3f} | {v['smile_baseline']:.3f} | "
        f"{v['smile_event_rate_hz']:.3f} | {v['smile_event_size']:.3f} | {v['backchannel_f0_hz']:.0f} |"
        for k, v in truth["listeners"].items()
    ]
    speakers = [
        f"| {k} | {v['f0_hz']:.0f} | {v['formant_scale']:.3f} |"
        for k, v in truth["speakers"].items()
    ]
    agree_rows = [
        f"| {k} | {a:.3f} | {b:.3f} |" for k, (a, b) in zip(truth["sessions"], agree, strict=True)
    ]
    return {
        **truth,
        **truth["label"],
        **truth["observers"],
        **words["backchannel_words"],
        "info_line": info_line,
        "phrase_affect": words["phrase_affect"],
        "phrase_words": words["phrase_words"],
        "positive_words": ", ".join(words["positive_words"]),
        "negative_words": ", ".join(words["negative_words"]),
        "agree": "\n".join(agree_rows),
        "agree_l": float(np.mean([a for a, _ in agree])),
        "agree_s": float(np.mean([b for _, b in agree])),
        "listener_rows": "\n".join(listeners),
        "speaker_rows": "\n".join(speakers),
    }


def _write_session(
    out: Path, plan: SessionPlan, layout: Layout, caches: dict[str, TileCache], fps: float
) -> None:
    """One session's video, self-rating, transcript and observer ratings."""
    sid, L, S = session_name(plan.listener, plan.story), plan.listener, plan.story
    frames = video_frames(plan.n_frames, plan.states, plan.offsets, layout, caches)
    video = out / "Videos" / f"{sid}.mp4"
    write_video(video, frames, layout, fps, plan.voices.audio, plan.audio_rate)
    srt = out / "Transcripts" / f"transcribed_subject_{L}_story_{S}.srt"
    write_atomic(srt, transcript_srt(plan))
    for folder, y in (
        ("Annotations", plan.valence),
        ("Observer_Listener", plan.observer_listener),
        ("Observer_Speaker", plan.observer_speaker),
    ):
        write_atomic(out / folder / f"{sid}.csv", valence_csv(y).encode())


def build_demo(
    out_dir: str | os.PathLike[str],
    *,
    n_listeners: int = 6,
    stories: Sequence[int] = (1, 2, 3, 4, 5, 6),
    duration_s: float = 24.0,
    width: int = 1280,
    height: int = 360,
    fps: float = 25,
    seed: int = 0,
    progress: bool = True,
) -> DemoInfo:
    """Write the demo corpus (``n_listeners`` x ``stories`` sessions of ``duration_s`` seconds,
    ``width`` x ``height`` pixels at ``fps``); same ``seed``, same files. ``progress`` shows a
    tqdm bar over sessions; existing files of the same sessions are overwritten.

    >>> info = build_demo(tmp, n_listeners=2, stories=(1, 2), duration_s=6)  # doctest: +SKIP
    """
    t_start = time.perf_counter()
    stories = tuple(int(s) for s in stories)
    bad = [s for s in stories if s not in STORY_SPEAKER]
    no_speaker = (
        f"demo: stories {bad} have no speaker; OMG-Empathy stories are {sorted(STORY_SPEAKER)}"
    )
    groups = "demo: give at least one story" if not stories else no_speaker if bad else ""
    check_args("n_listeners", n_listeners, groups, duration_s, 2.0, fps)
    rig = face_rig()
    layout = frame_layout(int(width), int(height), rig)
    out = Path(out_dir)
    for folder in FOLDERS:
        (out / folder).mkdir(parents=True, exist_ok=True)
    listeners = {L: listener_params(L, seed) for L in range(1, int(n_listeners) + 1)}
    speakers = {S: speaker_params(S, seed) for S in sorted({STORY_SPEAKER[s] for s in stories})}
    size = (layout.tile_h, layout.tile_w)
    speaker_caches = {S: TileCache(rig, Look(True, p.tint), size) for S, p in speakers.items()}
    plans: list[SessionPlan] = []
    pairs = [(L, S) for L in listeners for S in stories]
    bar = tqdm(pairs, desc="demo corpus", unit="session", disable=not progress)
    for L, S in bar:
        bar.set_postfix_str(session_name(L, S))
        plan = plan_session(
            L, S, duration_s=duration_s, fps=fps, seed=seed, motion_limit=layout.motion_limit
        )
        listener_cache = TileCache(rig, Look(False, listeners[L].tint), size)
        caches = {"speaker": speaker_caches[plan.speaker], "listener": listener_cache}
        _write_session(out, plan, layout, caches, fps)
        plan.voices.audio = np.zeros(0, np.float32)  # free the samples; the rest is small
        plans.append(plan)
    head = truth_head("featurestore.demo", seed, fps, duration_s, layout)
    truth = _truth(head, listeners, speakers, plans, layout)
    line = (
        f"{len(pairs)} sessions ({len(listeners)} listener{'s' if len(listeners) > 1 else ''} x "
        f"stor{'ies' if len(stories) > 1 else 'y'} {', '.join(map(str, stories))}), {duration_s:g} s each"
    )
    n_frames = {session_name(p.listener, p.story): p.n_frames for p in plans}
    return write_corpus_files(out, truth, _readme(truth, line), "omg", t_start, n_frames)
