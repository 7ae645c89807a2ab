"""The video path (decode + two face regions + face_geom landmarks at 5 fps) vs. decoding alone.

On a 2560x720 H.264 demo-corpus video made in the run (the astronaut face at about 180 px,
the size of a face in OMG-Empathy's frames; 60 s, QUICK 6 s), frames per second of video of:

* the video path of ``featurestore extract --channels face_geom`` with the default settings
  (:func:`featurestore.extraction.extract.run_frame_jobs`): every frame decoded, the frames at the
  default face rate (5 fps) taken as luma, decoded ahead in a background thread, the speaker
  and listener crops, and a face_geom track per role (dlib detection near the previous face,
  tracking, 68 landmarks, geometry features);
* the baseline, ``decode + sample``: PyAV decoding of every frame (``thread_type`` AUTO) and
  RGB conversion of the frames at the face rate, without any face work - what extraction
  paid before any face work (goal: the video path at >= 0.5x its speed);
* ``decode + sample`` against decoding alone (no conversion at all).

Landmark accuracy: on the same video's frames at the face rate, the video path's landmarks
are compared with dlib detecting the face on every frame at full resolution (no tracking,
no downscaling), landmarks predicted in that box: the mean landmark distance in inter-ocular
distances of the reference (IOD, outer eye corners; goal < 0.02) over the frames where both
found a face, and the share of frames with a face (goal: at least the reference's).

The full-corpus estimate divides OMG-Empathy's 633,850 frames (80 videos, 2560x720, 25 fps)
by the video path's rate: one process, face_geom only. The face_geom backend's own speeds
(detection, landmarks, tracking per crop) are :mod:`bench.face_backend`'s records.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from featurestore.extraction.config import FeatureConfig
from featurestore.extraction.extract import FrameJob, run_frame_jobs
from featurestore.extractors import get_extractor
from featurestore.extractors.face_geom import EYE_CORNER_L, EYE_CORNER_R
from featurestore.extractors.landmarks import DlibLandmarker
from featurestore.sources import media

from . import inputs
from .harness import best_times, record

FULL = {"duration_s": 60.0, "repeat": 3}
QUICK = {"duration_s": 6.0, "repeat": 2}
#: OMG-Empathy: 80 videos, 2560x720 at 25 fps, 633,850 frames in all
CORPUS_FRAMES = 633_850
ROLES = ("speaker", "listener")


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


def face_tracks(width: int, cfg: FeatureConfig) -> tuple[dict, dict[str, FrameJob]]:
    """Role regions and one fresh face_geom job per role, as extraction makes them."""
    regions = media.role_regions(width, cfg.split_x)
    ex = get_extractor("face_geom")()
    return regions, {role: FrameJob(ex.new_track(role), role, ex.pixel_format) for role in ROLES}


def face_path(path: Path, cfg: FeatureConfig) -> dict:
    """What extraction does for face_geom: one decode, both role crops, one track per role."""
    regions, jobs = face_tracks(media.probe(path).width, cfg)
    run_frame_jobs(path, jobs.values(), regions, cfg.face_fps)
    return {role: job.track.result() for role, job in jobs.items()}


def landmark_accuracy(path: Path, cfg: FeatureConfig) -> dict:
    """The video path's landmarks vs. detecting on every frame at full resolution (see the module)."""
    regions, jobs = face_tracks(media.probe(path).width, cfg)
    reference = DlibLandmarker(detect_scale=1.0)
    ref = {role: [] for role in ROLES}
    for _, t, gray in media.iter_frames(path, cfg.face_fps, pixel_format="gray"):
        for role, job in jobs.items():
            x0, x1 = regions[role]
            crop = np.ascontiguousarray(gray[:, x0:x1])
            job.track.add(t, crop)
            lm = reference.detect(crop)
            ref[role].append(np.full((68, 2), np.nan) if lm is None else lm)
    errors, found, found_ref = [], [], []
    for role, job in jobs.items():
        got, want = job.track.landmarks(), np.array(ref[role]).reshape(-1, 68, 2)
        iod = np.linalg.norm(want[:, EYE_CORNER_L] - want[:, EYE_CORNER_R], axis=-1)
        err = np.linalg.norm(got - want, axis=-1).mean(axis=1) / iod
        errors.append(err[np.isfinite(err)])
        found.append(np.isfinite(got).all(axis=(1, 2)))
        found_ref.append(np.isfinite(want).all(axis=(1, 2)))
    errors = np.concatenate(errors)
    return {
        "error_iod": float(errors.mean()) if len(errors) else float("nan"),
        "error_iod_p95": float(np.percentile(errors, 95)) if len(errors) else float("nan"),
        "found": float(np.concatenate(found).mean()),
        "found_reference": float(np.concatenate(found_ref).mean()),
        "n_crops": int(sum(len(f) for f in found)),
    }


def run(work: Path, quick: bool = False) -> list[dict]:
    """Time the three paths on the same video (interleaved), check the landmarks; returns the records."""
    size = QUICK if quick else FULL
    video = inputs.demo_video(work, size["duration_s"])
    info = media.probe(video)
    cfg = FeatureConfig()
    get_extractor("face_geom")().check_available()
    face_path(video, FeatureConfig(face_fps=1.0))  # load the dlib models (fixed cost, not timed)

    timed = best_times(
        {
            "decode": lambda: decode_only(video),
            "sample": lambda: decode_and_sample(video, cfg.face_fps),
            "face": lambda: face_path(video, cfg),
        },
        repeat=size["repeat"],
    )
    (t_decode, n), (t_sample, _), (t_face, feats) = timed["decode"], timed["sample"], timed["face"]
    found = {role: float(f.valid.mean()) for role, f in feats.items()}
    if min(found.values()) < 0.9:
        raise AssertionError(f"the faces were found in too few sampled frames: {found}")
    t0 = time.perf_counter()
    acc = landmark_accuracy(video, cfg)
    print(
        f"video: {info.width}x{info.height}, {n} frames ({n / info.fps:.0f} s); decode {t_decode:.2f} s, "
        f"decode + sample {t_sample:.2f} s, face path {t_face:.2f} s (best of {size['repeat']}, interleaved); "
        f"landmarks vs full-resolution detection on {acc['n_crops']} crops: mean error {acc['error_iod']:.4f} IOD "
        f"(p95 {acc['error_iod_p95']:.4f}), faces found {acc['found']:.3f} vs {acc['found_reference']:.3f} "
        f"({time.perf_counter() - t0:.0f} s)"
    )
    face_fps = n / t_face
    sample = "decode + sample (every frame decoded, RGB at the face rate)"
    return [
        record(
            "video.face_path",
            face_fps,
            "frames/s",
            baseline=sample,
            baseline_value=n / t_sample,
            goal=">= 0.5",
        ),
        record(
            "video.decode_and_sample",
            n / t_sample,
            "frames/s",
            baseline="decoding alone (PyAV, thread_type AUTO)",
            baseline_value=n / t_decode,
        ),
        record("video.face_path_real_time", n / info.fps / t_face, "x real time"),
        record("video.corpus_extraction_estimate", CORPUS_FRAMES / face_fps / 3600, "h"),
        record(
            "video.landmark_error",
            acc["error_iod"],
            "IOD",
            baseline="detection on every frame at full resolution",
            goal="< 0.02 IOD",
        ),
        record(
            "video.face_found",
            acc["found"],
            "fraction of crops",
            baseline="detection on every frame at full resolution",
            baseline_value=acc["found_reference"],
            goal=">= 1",
        ),
    ]
