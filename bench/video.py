"""The video path (decode + two face regions + face_geom landmarks at 5 fps) vs. decoding alone.

On a 2560x720 H.264 demo-corpus video made in the run (the astronaut face at about 180 px,
the size of a face in OMG-Empathy's frames; 60 s, QUICK 6 s), frames per second of video of:

* the video path of ``featurestore extract --channels face_geom`` with the default settings:
  :func:`featurestore.media.iter_frames` at the default face rate (5 fps; every frame is
  decoded, sampled ones converted to RGB), the speaker and listener crops, and a face_geom
  track per role (dlib detection, tracking, 68 landmarks, geometry features);
* ``decode + sample``: the same decoding and RGB conversion without any face work;
* the baseline, decoding alone: PyAV ``container.decode`` with ``thread_type = "AUTO"``.

The face_geom backend's own speeds (detection, landmarks, tracking per crop) are
:mod:`bench.face_backend`'s records. The issue sets no goal here: the ratio says how much of
decoding speed the face work leaves.
"""

from __future__ import annotations

import time
from pathlib import Path

from featurestore import media
from featurestore.config import FeatureConfig
from featurestore.extractors import get_extractor

from . import inputs
from .harness import best_time, record

FULL = {"duration_s": 60.0}
QUICK = {"duration_s": 6.0}


def decode_only(path: Path) -> int:
    """Decode every frame (PyAV, frame-threaded); returns the frame count."""
    import av

    with av.open(str(path)) as c:
        stream = c.streams.video[0]
        stream.thread_type = "AUTO"
        return sum(1 for _ in c.decode(stream))


def decode_and_sample(path: Path, face_fps: float) -> int:
    """Decode every frame and convert the sampled ones to RGB; returns the sampled count."""
    return sum(1 for _ in media.iter_frames(path, face_fps))


def face_path(path: Path, cfg: FeatureConfig) -> dict:
    """What extraction does for face_geom: one decode, both role crops, one track per role."""
    info = media.probe(path)
    regions = media.role_regions(info.width, cfg.split_x)
    ex = get_extractor("face_geom")()
    tracks = {role: ex.new_track(role) for role in ("speaker", "listener")}
    for _, t, rgb in media.iter_frames(path, cfg.face_fps):
        for role, track in tracks.items():
            x0, x1 = regions[role]
            track.add(t, rgb[:, x0:x1])
    return {role: track.result() for role, track in tracks.items()}


def run(work: Path, quick: bool = False) -> list[dict]:
    """Time the three paths on the same video; returns the records."""
    size = QUICK if quick else FULL
    video = inputs.demo_video(work, size["duration_s"])
    info = media.probe(video)
    cfg = FeatureConfig()
    get_extractor("face_geom")().check_available()
    face_path(video, FeatureConfig(face_fps=1.0))  # load the dlib models (fixed cost, not timed)

    t_decode, n = best_time(lambda: decode_only(video), repeat=2 if quick else 3)
    t_sample, _ = best_time(lambda: decode_and_sample(video, cfg.face_fps), repeat=2 if quick else 3)
    t0 = time.perf_counter()
    feats = face_path(video, cfg)
    t_face = time.perf_counter() - t0
    found = {role: float(f.valid.mean()) for role, f in feats.items()}
    if min(found.values()) < 0.9:
        raise AssertionError(f"the faces were found in too few sampled frames: {found}")
    print(f"video: {info.width}x{info.height}, {n} frames ({n / info.fps:.0f} s); decode {t_decode:.1f} s, "
          f"decode + sample {t_sample:.1f} s, face path {t_face:.1f} s (faces found: {found})")  # fmt: skip
    return [
        record("video.face_path", n / t_face, "frames/s", baseline="decoding alone (PyAV, thread_type AUTO)",
               baseline_value=n / t_decode),
        record("video.decode_and_sample", n / t_sample, "frames/s", baseline="decoding alone (PyAV, thread_type AUTO)",
               baseline_value=n / t_decode),
        record("video.face_path_real_time", n / info.fps / t_face, "x real time"),
    ]  # fmt: skip
