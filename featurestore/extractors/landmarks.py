"""Offline 68-point facial landmarks from dlib (model files ship in the face-recognition-models wheel).

The 68-point scheme is the iBUG 300-W one that OpenFace also uses: 0-16 jaw, 17-21 right
brow, 22-26 left brow (subject's right/left as seen in the image: image-left first),
27-35 nose, 36-41 and 42-47 eyes, 48-59 outer lip, 60-67 inner lip.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np


@lru_cache(maxsize=1)
def _models():
    import dlib
    import face_recognition_models

    detector = dlib.get_frontal_face_detector()
    predictor = dlib.shape_predictor(face_recognition_models.pose_predictor_model_location())
    return detector, predictor


def _gray(rgb: np.ndarray) -> np.ndarray:
    import cv2

    if rgb.ndim == 2:
        return np.ascontiguousarray(rgb, dtype=np.uint8)
    return cv2.cvtColor(np.ascontiguousarray(rgb, dtype=np.uint8), cv2.COLOR_RGB2GRAY)


class DlibLandmarker:
    """Face detection (HOG) and 68-point landmark prediction.

    ``detect_scale`` shrinks the image before the (slow) HOG detector; landmarks are always
    predicted at full resolution.
    """

    def __init__(self, detect_scale: float = 0.5, upsample: int = 0) -> None:
        self.detect_scale = float(detect_scale)
        self.upsample = int(upsample)

    def detect_box(self, rgb: np.ndarray) -> tuple[int, int, int, int] | None:
        """Largest face as (left, top, right, bottom) in pixels of ``rgb``, or None."""
        import cv2

        detector, _ = _models()
        gray = _gray(rgb)
        s = self.detect_scale
        small = gray if s == 1.0 else cv2.resize(gray, None, fx=s, fy=s, interpolation=cv2.INTER_AREA)
        rects = detector(small, self.upsample)
        if len(rects) == 0:
            return None
        r = max(rects, key=lambda r: r.width() * r.height())
        return (int(r.left() / s), int(r.top() / s), int(r.right() / s), int(r.bottom() / s))

    def landmarks_in_box(self, rgb: np.ndarray, box: tuple[int, int, int, int]) -> np.ndarray:
        """(68, 2) float landmark coordinates (x, y) given a face box."""
        import dlib

        _, predictor = _models()
        shape = predictor(_gray(rgb), dlib.rectangle(*[int(v) for v in box]))
        return np.array([(p.x, p.y) for p in shape.parts()], dtype=np.float64)

    def detect(self, rgb: np.ndarray) -> np.ndarray | None:
        """(68, 2) landmarks of the largest face, or None when no face is found."""
        box = self.detect_box(rgb)
        return None if box is None else self.landmarks_in_box(rgb, box)
