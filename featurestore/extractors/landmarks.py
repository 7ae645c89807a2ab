"""Offline 68-point facial landmarks from dlib (models from the face-recognition-models wheel),
in the iBUG 300-W scheme: 0-16 jaw, 17-21 and 22-26 brows, 27-35 nose, 36-41 and 42-47 eyes,
48-59 outer and 60-67 inner lip (image-left first).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np

#: side of a HOG cell of dlib's frontal face detector (pixels of the image it scans)
HOG_CELL_PX = 8


@lru_cache(maxsize=1)
def _models() -> tuple[Any, Any]:
    """dlib's face detector and 68-point shape predictor."""
    import dlib  # lazily: dlib and its models load only when faces are processed
    import face_recognition_models  # lazily, with dlib

    detector = dlib.get_frontal_face_detector()
    predictor = dlib.shape_predictor(face_recognition_models.pose_predictor_model_location())
    return detector, predictor


def _gray(rgb: np.ndarray) -> np.ndarray:
    import cv2  # lazily: OpenCV takes 0.1 s to import; only face work needs it

    if rgb.ndim == 2:
        return np.ascontiguousarray(rgb, dtype=np.uint8)
    return cv2.cvtColor(np.ascontiguousarray(rgb, dtype=np.uint8), cv2.COLOR_RGB2GRAY)


class DlibLandmarker:
    """Face detection (HOG, on the image shrunk by ``detect_scale``) and 68-point landmarks (at
    full resolution). The dlib models are shared by a process: not from two threads at once."""

    def __init__(self, detect_scale: float = 0.5, upsample: int = 0) -> None:
        self.detect_scale = float(detect_scale)
        self.upsample = int(upsample)

    def detect_box(
        self, rgb: np.ndarray, region: tuple[int, int, int, int] | None = None
    ) -> tuple[int, int, int, int] | None:
        """Largest face as (left, top, right, bottom) in pixels of ``rgb``, or None; ``region``
        (pixels) limits the search, its origin moved down to a multiple of the HOG cell so the
        finest pyramid level sees the whole image's cells (``bench/video.py`` compares)."""
        import cv2  # lazily: OpenCV takes 0.1 s to import; only face work needs it

        detector, _ = _models()
        gray = _gray(rgb)
        s = self.detect_scale
        x0 = y0 = 0
        if region is not None:
            h, w = gray.shape
            cell = max(1, round(HOG_CELL_PX / s))
            x0 = max(0, int(region[0])) // cell * cell
            y0 = max(0, int(region[1])) // cell * cell
            x1, y1 = min(w, int(region[2])), min(h, int(region[3]))
            if x1 - x0 < cell or y1 - y0 < cell:
                return None
            gray = gray[y0:y1, x0:x1]
        small = (
            gray if s == 1.0 else cv2.resize(gray, None, fx=s, fy=s, interpolation=cv2.INTER_AREA)
        )
        rects = detector(np.ascontiguousarray(small), self.upsample)
        if len(rects) == 0:
            return None
        r = max(rects, key=lambda r: r.width() * r.height())
        left, top, right, bottom = (int(v / s) for v in (r.left(), r.top(), r.right(), r.bottom()))
        return (x0 + left, y0 + top, x0 + right, y0 + bottom)

    def landmarks_in_box(self, rgb: np.ndarray, box: tuple[int, int, int, int]) -> np.ndarray:
        """(68, 2) landmarks (x, y) in pixels of ``rgb`` in a face box (the model reads the box
        grown by half its side only, so it gets a copy of that, not the whole crop)."""
        import dlib  # lazily: dlib and its models load only when faces are processed

        _, predictor = _models()
        left, top, right, bottom = (int(v) for v in box)
        pad = max(right - left, bottom - top) // 2 + 1
        h, w = rgb.shape[:2]
        x0, y0 = min(max(0, left - pad), w), min(max(0, top - pad), h)
        x1, y1 = max(min(w, right + pad), x0), max(min(h, bottom + pad), y0)
        patch = _gray(rgb[y0:y1, x0:x1])
        shape = predictor(patch, dlib.rectangle(left - x0, top - y0, right - x0, bottom - y0))
        return np.array([(p.x + x0, p.y + y0) for p in shape.parts()], dtype=np.float64)

    def detect(self, rgb: np.ndarray) -> np.ndarray | None:
        """(68, 2) landmarks of the largest face, or None when no face is found."""
        box = self.detect_box(rgb)
        return None if box is None else self.landmarks_in_box(rgb, box)
