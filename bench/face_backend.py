"""Speed of the face_geom backend (dlib, offline) on realistic role crops, on this machine.

For the speaker crop (1080x720) and the listener crop (1480x720), with the astronaut's face
(skimage) scaled to ~200 px wide on a textured background, it measures frames per second of:

* ``detect``: HOG face detection alone (default ``detect_scale``, grey input);
* ``landmarks``: 68-point prediction alone, in a known box (baseline: detection);
* ``tracked``: the face_geom track with default settings on a face drifting a few pixels per
  frame at 5 fps, features included (baseline: the same track detecting over the whole crop
  on every frame).

Prints one JSON object per line (the bench/results.json format, a contract: docs/design.md#benchmarks; see
:mod:`bench.harness`); ``python -m bench`` runs it with the other benchmarks::

    python -m bench.face_backend [--quick]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np
from skimage import data

from featurestore.extractors.face_geom import FaceGeomConfig, FaceGeomExtractor
from featurestore.extractors.landmarks import DlibLandmarker

from . import harness

CROPS = {"speaker": (1080, 720), "listener": (1480, 720)}
FACE_WIDTH_PX = 200  # landmark span of a face in OMG-Empathy's 720p crops, roughly
FPS = 5.0  # the default face_fps of FeatureConfig


def crop_with_face(width: int, height: int) -> np.ndarray:
    """(height, width, 3) uint8 RGB crop: a textured background with a ~200 px face in it."""
    astronaut = data.astronaut()
    head = astronaut[30:270, 110:350]  # landmark span ~93 px at this scale
    scale = FACE_WIDTH_PX / 93
    head = cv2.resize(head, None, fx=scale, fy=scale, interpolation=cv2.INTER_CUBIC)
    canvas = cv2.resize(data.coffee(), (width, height), interpolation=cv2.INTER_LINEAR)
    y, x = (height - head.shape[0]) // 2, (width - head.shape[1]) // 2
    canvas[y : y + head.shape[0], x : x + head.shape[1]] = head
    return canvas


def frames_per_second(step: Callable[[int], object], n: int) -> float:
    """Calls ``step(i)`` for i in 0..n-1 after one warm-up call; frames per second."""
    step(0)
    start = time.perf_counter()
    for i in range(n):
        step(i)
    return n / (time.perf_counter() - start)


def drifting(image: np.ndarray, n_offsets: int = 13, px: int = 3) -> list[np.ndarray]:
    """Frames where the face drifts right ``px`` pixels per frame, then back (ping-pong)."""
    out = [np.roll(image, px * k, axis=1) for k in range(n_offsets)]
    return out + out[-2:0:-1]


def tracked_fps(frames: list[np.ndarray], n: int, config: FaceGeomConfig) -> tuple[float, int]:
    """Frames per second of a face_geom track over ``n`` frames at 5 fps, and its detections."""
    extractor = FaceGeomExtractor(config)
    extractor.new_track("speaker").add(0.0, frames[0])  # load the models outside the timing
    track = extractor.new_track("speaker")
    start = time.perf_counter()
    for i in range(n):
        track.add(i / FPS, frames[i % len(frames)])
    feats = track.result()
    elapsed = time.perf_counter() - start
    if not feats.valid.all():
        raise RuntimeError(f"the face was lost in {int((~feats.valid).sum())} of {n} frames")
    return n / elapsed, track.n_detections


def measure(quick: bool = False) -> list[dict]:
    """The benchmark records (dicts of the bench/results.json format)."""
    n_single, n_track = (5, 25) if quick else (30, 150)
    config = FaceGeomConfig()
    marker = DlibLandmarker(detect_scale=config.detect_scale, upsample=config.detect_upsample)
    results = []

    def record(name, value, unit, baseline=None, baseline_value=None):
        results.append(
            harness.record(name, value, unit, baseline=baseline, baseline_value=baseline_value)
        )

    for role, (width, height) in CROPS.items():
        image = crop_with_face(width, height)
        gray = cv2.cvtColor(image, cv2.COLOR_RGB2GRAY)
        box = marker.detect_box(gray)
        if box is None:
            raise RuntimeError(f"no face detected in the synthetic {role} crop {width}x{height}")
        detect = frames_per_second(lambda i, gray=gray: marker.detect_box(gray), n_single)
        landmarks = frames_per_second(
            lambda i, gray=gray, box=box: marker.landmarks_in_box(gray, box), n_single * 10
        )
        frames = drifting(image)
        tracked, n_det = tracked_fps(frames, n_track, config)
        whole_crop_every_frame = FaceGeomConfig(redetect_every_s=0.0, search_margin=0.0)
        every, _ = tracked_fps(frames, max(n_track // 5, 5), whole_crop_every_frame)
        prefix = f"face_geom.{role}_{width}x{height}"
        record(f"{prefix}.detect", detect, "frames/s")
        record(f"{prefix}.landmarks", landmarks, "frames/s", "detection only", detect)
        record(
            f"{prefix}.tracked", tracked, "frames/s", "whole-crop detection on every frame", every
        )
        record(f"{prefix}.tracked_detections", n_det / n_track, "detections/frame")
    return results


def run(work: Path, quick: bool = False) -> list[dict]:
    """The records, for ``python -m bench`` (``work`` is unused: the crops are made in memory)."""
    return measure(quick=quick)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (smoke check)")
    args = parser.parse_args(argv)
    for rec in measure(quick=args.quick):
        print(json.dumps(rec))


if __name__ == "__main__":
    main()
