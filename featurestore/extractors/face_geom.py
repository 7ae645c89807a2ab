"""``face_geom``: FACS-inspired face geometry and head pose from 68 dlib landmarks (offline),
detected then tracked per role; distances in interocular units in a face-aligned frame, pose
from ``cv2.solvePnP``. The columns and the backend: docs/channels.md (``face_geom``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..features import Features
from .base import ExtractorConfig, ExtractorUnavailable, FrameExtractor, Track, register
from .landmarks import DlibLandmarker

COLUMNS = tuple(
    """brow_raise_l brow_raise_r brow_gap eye_open_l eye_open_r blink lip_corner_pull
    lip_corner_raise mouth_open lip_thickness jaw_drop head_yaw head_pitch head_roll face_scale
    face_x face_y""".split()
)

# iBUG 68-point indices (see landmarks.py); _R = subject's right = image left
BROW_R, BROW_L = np.arange(17, 22), np.arange(22, 27)
EYE_R, EYE_L = np.arange(36, 42), np.arange(42, 48)
EYE_CORNER_R, EYE_CORNER_L = 36, 45

# Generic 3D face (millimetre-like units) in camera axes (x right, y down, z away from the
# camera) so that a frontal face has zero rotation; the usual six-point model.
POSE_LANDMARKS = np.array([30, 8, 36, 45, 48, 54])
POSE_MODEL = np.array(
    [
        [0.0, 0.0, 0.0],  # nose tip
        [0.0, 330.0, 65.0],  # chin
        [-225.0, -170.0, 135.0],  # outer corner of the image-left eye
        [225.0, -170.0, 135.0],  # outer corner of the image-right eye
        [-150.0, 150.0, 125.0],  # image-left mouth corner
        [150.0, 150.0, 125.0],  # image-right mouth corner
    ]
)


@dataclass(frozen=True)
class FaceGeomConfig(ExtractorConfig):
    #: landmark model; only ``dlib`` (68 points, offline) exists today
    backend: str = "dlib"
    #: the crop is scaled by this factor before HOG detection (faces must stay >= ~80 px)
    detect_scale: float = 0.5
    #: extra pyramid upsamplings in HOG detection (finds smaller faces, 4x slower each)
    detect_upsample: int = 0
    #: seconds between forced detections; in between the face is tracked
    redetect_every_s: float = 1.0
    #: a detection first searches near the previous face: its box grown by this fraction of
    #: its side on each side (0: always search the whole crop)
    search_margin: float = 0.25
    #: seconds between detections over the whole crop (a face that appeared elsewhere)
    full_detect_every_s: float = 30.0
    #: mean eye aspect ratio below which ``blink`` is 1
    blink_threshold: float = 0.2
    #: track is lost when the IOD changes by more than this factor between frames
    max_scale_change: float = 1.3
    #: track is lost when the face patch correlates less than this with the last detection's
    min_similarity: float = 0.3


def _eye_aspect_ratio(eye: np.ndarray) -> np.ndarray:
    """(n, 6, 2) eye contour -> (n,) lid gap over eye width (dimensionless)."""
    gap = np.linalg.norm(eye[:, 1] - eye[:, 5], axis=-1) + np.linalg.norm(
        eye[:, 2] - eye[:, 4], axis=-1
    )
    return gap / (2.0 * np.linalg.norm(eye[:, 0] - eye[:, 3], axis=-1))


def head_pose(landmarks: np.ndarray, frame_size: np.ndarray) -> np.ndarray:
    """(n, 3) yaw, pitch, roll in degrees from (n, 68, 2) pixel landmarks; ``frame_size``:
    (width, height) in pixels, one pair or one per frame; NaN where it cannot be solved."""
    import cv2  # lazily: OpenCV takes 0.1 s to import; only face work needs it

    lm = np.asarray(landmarks, dtype=np.float64).reshape(-1, 68, 2)
    size = np.broadcast_to(np.asarray(frame_size, dtype=np.float64), (len(lm), 2))
    out = np.full((len(lm), 3), np.nan)
    for i in np.flatnonzero(np.isfinite(lm).all(axis=(1, 2))):
        w, h = size[i]
        camera = np.array([[w, 0, w / 2], [0, w, h / 2], [0, 0, 1]])
        ok, rvec, _ = cv2.solvePnP(
            POSE_MODEL, lm[i, POSE_LANDMARKS], camera, None, flags=cv2.SOLVEPNP_SQPNP
        )
        if not ok:
            continue
        r = cv2.Rodrigues(rvec)[0]  # R = Rz(roll) @ Ry(yaw) @ Rx(pitch), camera axes
        pitch = math.atan2(r[2, 1], r[2, 2])
        yaw = math.asin(-max(-1.0, min(1.0, r[2, 0])))
        roll = math.atan2(r[1, 0], r[0, 0])
        # camera axes: +Rx tips the chin away (head down), +Ry turns the nose to image-left
        out[i] = np.degrees([-yaw, -pitch, roll])
    return out


def face_geometry(
    landmarks: np.ndarray, frame_size: np.ndarray, blink_threshold: float = 0.2
) -> np.ndarray:
    """(n, len(COLUMNS)) face_geom features from (n, 68, 2) landmarks in pixels (NaN rows stay
    NaN); ``frame_size``: the crop's (width, height) in pixels, one pair or one per frame."""
    lm = np.asarray(landmarks, dtype=np.float64).reshape(-1, 68, 2)
    size = np.broadcast_to(np.asarray(frame_size, dtype=np.float64), (len(lm), 2))
    axis = lm[:, EYE_CORNER_L] - lm[:, EYE_CORNER_R]
    iod = np.linalg.norm(axis, axis=-1)
    u = axis / iod[:, None]  # face x axis: towards the image-right eye
    v = np.stack([-u[:, 1], u[:, 0]], axis=-1)  # face y axis: down the face
    rel = lm - (lm[:, EYE_CORNER_L] + lm[:, EYE_CORNER_R])[:, None] / 2
    p = np.stack([np.einsum("nkd,nd->nk", rel, u), np.einsum("nkd,nd->nk", rel, v)], axis=-1)
    p /= iod[:, None, None]
    y = p[..., 1]

    def dist(a: int, b: int) -> np.ndarray:
        return np.linalg.norm(p[:, a] - p[:, b], axis=-1)

    eye_l, eye_r = _eye_aspect_ratio(p[:, EYE_L]), _eye_aspect_ratio(p[:, EYE_R])
    mean_eye = (eye_l + eye_r) / 2
    blink = np.where(np.isnan(mean_eye), np.nan, (mean_eye < blink_threshold).astype(np.float64))
    cols = {
        "brow_raise_l": y[:, EYE_L].mean(1) - y[:, BROW_L].mean(1),
        "brow_raise_r": y[:, EYE_R].mean(1) - y[:, BROW_R].mean(1),
        "brow_gap": dist(21, 22),
        "eye_open_l": eye_l,
        "eye_open_r": eye_r,
        "blink": blink,
        "lip_corner_pull": dist(48, 54),
        "lip_corner_raise": y[:, [51, 62]].mean(1) - y[:, [48, 54]].mean(1),
        "mouth_open": dist(62, 66),
        "lip_thickness": dist(51, 62) + dist(57, 66),
        "jaw_drop": dist(30, 8),
        "face_scale": iod / size[:, 0],
        "face_x": lm[..., 0].mean(1) / size[:, 0],
        "face_y": lm[..., 1].mean(1) / size[:, 1],
    }
    pose = head_pose(lm, size)
    cols.update(head_yaw=pose[:, 0], head_pitch=pose[:, 1], head_roll=pose[:, 2])
    return np.stack([cols[c] for c in COLUMNS], axis=1)


def _face_patch(gray: np.ndarray, lm: np.ndarray, side: int = 16) -> np.ndarray | None:
    """Zero-mean, unit-norm thumbnail of the landmarks' bounding box (None when off-image)."""
    import cv2  # lazily: OpenCV takes 0.1 s to import; only face work needs it

    h, w = gray.shape
    x0, y0 = np.clip(np.floor(lm.min(0)).astype(int), 0, (w, h))
    x1, y1 = np.clip(np.ceil(lm.max(0)).astype(int), 0, (w, h))
    if x1 - x0 < 4 or y1 - y0 < 4:
        return None
    patch = cv2.resize(gray[y0:y1, x0:x1], (side, side), interpolation=cv2.INTER_AREA).astype(
        np.float32
    )
    patch -= patch.mean()
    return patch / (np.linalg.norm(patch) + 1e-6)


def _iod(lm: np.ndarray) -> float:
    return float(np.linalg.norm(lm[EYE_CORNER_L] - lm[EYE_CORNER_R]))


class FaceGeomTrack(Track):
    """Detect-then-track 68-point landmarks over one role's frames; ``n_detections`` counts
    the detections, ``n_full_detections`` the (slow) whole-crop ones among them."""

    def __init__(self, config: FaceGeomConfig) -> None:
        self.config = config
        self.landmarker = DlibLandmarker(
            detect_scale=config.detect_scale, upsample=config.detect_upsample
        )
        self.n_detections = 0
        self.n_full_detections = 0
        self._times: list[float] = []
        self._landmarks: list[np.ndarray] = []
        self._sizes: list[tuple[int, int]] = []
        self._prev: np.ndarray | None = None  # landmarks of the previous frame, None = no track
        self._last_detect_s = -math.inf
        self._last_full_detect_s = -math.inf
        self._box_rel = (0.0, 0.0, 1.0)  # detector box vs landmark bbox (centre offset, side)
        self._template: np.ndarray | None = None  # face patch at the last detection

    @property
    def n_frames(self) -> int:
        return len(self._times)

    def add(self, time_s: float, image: np.ndarray) -> None:
        """Landmarks of one grey (H, W) (extraction passes the decoder's luma) or RGB (H, W, 3)
        uint8 crop taken at ``time_s`` seconds."""
        import cv2  # lazily: OpenCV takes 0.1 s to import; only face work needs it

        # a grey view is used as it is: the detector and the landmark model copy what they read
        gray = cv2.cvtColor(image, cv2.COLOR_RGB2GRAY) if image.ndim == 3 else image
        prev = self._prev
        if prev is None or time_s - self._last_detect_s >= self.config.redetect_every_s - 1e-6:
            lm = self._detect(gray, time_s)
            if lm is None and prev is not None:  # HOG misses turned faces a track follows
                lm = self._follow(gray, prev)
        else:
            lm = self._follow(gray, prev)
            if lm is None:
                lm = self._detect(gray, time_s)
        self._prev = lm
        self._times.append(float(time_s))
        self._landmarks.append(np.full((68, 2), np.nan) if lm is None else lm)
        self._sizes.append((gray.shape[1], gray.shape[0]))

    def landmarks(self) -> np.ndarray:
        """(n_frames, 68, 2) landmarks (x, y) in pixels of the crops, NaN where no face was found."""
        return np.array(self._landmarks, dtype=np.float64).reshape(-1, 68, 2)

    def result(self) -> Features:
        lm = self.landmarks()
        data = face_geometry(lm, np.array(self._sizes).reshape(-1, 2), self.config.blink_threshold)
        valid = np.isfinite(lm).all(axis=(1, 2))
        return Features(data=data, time=np.array(self._times), valid=valid, columns=list(COLUMNS))

    # -- detection and tracking ------------------------------------------------------------
    def _detect(self, gray: np.ndarray, time_s: float) -> np.ndarray | None:
        """Landmarks of a detected face: near the previous one first (faces barely move), else
        over the whole crop."""
        self.n_detections += 1
        self._last_detect_s = time_s
        box = None
        full_due = time_s - self._last_full_detect_s >= self.config.full_detect_every_s - 1e-6
        if self._prev is not None and self.config.search_margin > 0 and not full_due:
            box = self.landmarker.detect_box(gray, region=self._search_region(self._prev))
        if box is None:
            self.n_full_detections += 1
            self._last_full_detect_s = time_s
            box = self.landmarker.detect_box(gray)
        if box is None:
            return None
        lm = self.landmarker.landmarks_in_box(gray, box)
        (cx, cy), side = self._bbox(lm)
        self._box_rel = (
            ((box[0] + box[2]) / 2 - cx) / side,
            ((box[1] + box[3]) / 2 - cy) / side,
            (box[2] - box[0]) / side,
        )
        self._template = _face_patch(gray, lm)
        return lm

    @staticmethod
    def _bbox(lm: np.ndarray) -> tuple[np.ndarray, float]:
        lo, hi = lm.min(0), lm.max(0)
        return (lo + hi) / 2, float(max(hi - lo))

    def _box_from(self, lm: np.ndarray) -> tuple[int, int, int, int]:
        """Square box where the detector would put this face (relation seen at the last detection)."""
        (cx, cy), side = self._bbox(lm)
        dx, dy, k = self._box_rel
        cx, cy, half = cx + dx * side, cy + dy * side, k * side / 2
        return (round(cx - half), round(cy - half), round(cx + half), round(cy + half))

    def _search_region(self, lm: np.ndarray) -> tuple[int, int, int, int]:
        """The detector box expected for these landmarks, grown by ``search_margin`` sides."""
        x0, y0, x1, y1 = self._box_from(lm)
        pad = round(self.config.search_margin * (x1 - x0))
        return (x0 - pad, y0 - pad, x1 + pad, y1 + pad)

    def _follow(self, gray: np.ndarray, prev: np.ndarray) -> np.ndarray | None:
        """Landmarks predicted around the previous ones ``prev``, or None when the track looks lost."""
        lm = self.landmarker.landmarks_in_box(gray, self._box_from(prev))
        return None if self._lost(lm, gray, prev) else lm

    def _lost(self, lm: np.ndarray, gray: np.ndarray, prev: np.ndarray) -> bool:
        """True when tracked landmarks cannot be this face: size jump, off-crop, other patch."""
        ratio = _iod(lm) / _iod(prev)
        (cx, cy), (h, w) = lm.mean(0), gray.shape
        if not (1 / self.config.max_scale_change <= ratio <= self.config.max_scale_change):
            return True
        if not (0 <= cx < w and 0 <= cy < h):
            return True
        patch = _face_patch(gray, lm)
        if patch is None or self._template is None:
            return True
        return float((patch * self._template).sum()) < self.config.min_similarity


@register
class FaceGeomExtractor(FrameExtractor[FaceGeomConfig]):
    """FACS-inspired landmark geometry, blink and head pose per frame (dlib, offline)."""

    name = "face_geom"
    version = "2"  # 2: detections near the previous face first; extraction passes luma
    config_class = FaceGeomConfig
    roles = ("speaker", "listener")
    pixel_format = "gray"  # HOG and the landmark model read grey: the decoder's luma, no RGB

    def __init__(self, config: FaceGeomConfig | None = None) -> None:
        super().__init__(config)
        if self.config.backend != "dlib":
            raise ValueError(
                f"unknown face_geom backend {self.config.backend!r}; only 'dlib' is available "
                "(featurestore.yaml: `extractors: {face_geom: {backend: dlib}}`)"
            )

    def check_available(self) -> None:
        try:
            import dlib  # noqa: F401 - lazily: only to report a missing package
            import face_recognition_models  # noqa: F401 - likewise
        except ImportError as e:
            raise ExtractorUnavailable(
                f"face_geom needs dlib and its 68-point model ({e}); "
                "run `pip install dlib-bin face-recognition-models`"
            ) from e

    def new_track(self, role: str) -> FaceGeomTrack:
        if role not in self.roles:
            raise ValueError(f"face_geom: role {role!r} has no face; use one of {self.roles}")
        return FaceGeomTrack(self.config)
