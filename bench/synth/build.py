"""Write a synthetic store: every session's shard (one at a time) and ``synth_truth.json``."""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tqdm.auto import tqdm

from featurestore.sources.manifest import STORY_SPEAKER
from featurestore.storage.store import LABEL_FPS, Store, session_name

from .lengths import CORPUS_SESSIONS, LENGTH_RANGE, session_lengths, session_plan
from .model import (
    AFFECT_HZ,
    DRIFT_HZ,
    DRIFT_SD,
    JITTER_HZ,
    JITTER_SD,
    LABEL_DELAY_S,
    SPEAKER_WEIGHT,
    SYNTH_TRUTH,
    SYNTH_VERSION,
    VOICE_HZ,
    listener_truth,
    speaker_truth,
)
from .session import synth_session


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
            f"{self.size_bytes / 1e6:.1f} MB written in {self.seconds:.1f} s "
            f"(seed {self.seed}, faces at {self.face_fps:g} fps)"
        )


def _truth_record(seed: int, face_fps: float, plan, lengths) -> dict:
    listeners = sorted({lis for lis, _ in plan})
    speakers = sorted({STORY_SPEAKER.get(s, 0) for _, s in plan})
    return {
        "generator": f"bench.synth {SYNTH_VERSION}",
        "seed": int(seed),
        "face_fps": float(face_fps),
        "label": "valence_self = clip(offset_L + gain_L * affect(t - delay) + speaker_weight * voice(t - delay) "
        "+ drift_sd * drift(t) + jitter_sd * jitter(t), -1, 1)",
        "delay_s": LABEL_DELAY_S,
        "speaker_weight": SPEAKER_WEIGHT,
        "drift_sd": DRIFT_SD,
        "jitter_sd": JITTER_SD,
        "latent_cutoff_hz": {
            "affect": AFFECT_HZ,
            "voice": VOICE_HZ,
            "drift": DRIFT_HZ,
            "jitter": JITTER_HZ,
        },
        "listeners": {str(x): asdict(listener_truth(seed, x)) for x in listeners},
        "speakers": {str(x): asdict(speaker_truth(seed, x)) for x in speakers},
        "sessions": {
            session_name(lis, s): int(n) for (lis, s), n in zip(plan, lengths, strict=True)
        },
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
    if not face_fps or face_fps <= 0:
        raise ValueError(f"face_fps must be a positive rate in frames/s, got {face_fps}")
    t0 = time.perf_counter()
    plan = session_plan(n_sessions)
    lengths = session_lengths(len(plan), seed, length_range)
    store = Store(store_dir, mode="a")
    names, size = [], 0
    for (listener, story), n in tqdm(
        list(zip(plan, lengths, strict=True)),
        desc="synth sessions",
        unit="session",
        disable=not progress,
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
