"""The demo's face: the astronaut photo's 68 landmarks, expression states rendered by
piecewise-affine warps (:class:`FaceRig`) and dressed per person (:class:`TileCache`)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..extractors.landmarks import DlibLandmarker
from .model import BLINK_LEVELS, BROW_LEVELS, MOUTH_LEVELS, SMILE_LEVELS, SPEAKER_SMILE_STATE

# skimage.data.astronaut() rows/cols holding the head, and the upscaling factor
PHOTO_ROWS = (30, 200)
PHOTO_COLS = (125, 335)
PHOTO_SCALE = 2
_FEATHER_PX = 20


def piecewise_affine_map(
    out_points: np.ndarray, in_points: np.ndarray, shape: tuple[int, int]
) -> tuple[np.ndarray, np.ndarray]:
    """Inverse map of a piecewise-affine warp, for ``cv2.remap``: output pixel -> input (x, y).

    ``skimage.transform.PiecewiseAffineTransform``'s model (a Delaunay triangulation of
    ``out_points``, one affine map per triangle onto ``in_points``) for all pixels of a
    ``shape`` = (height, width) image in one vectorised pass (tens of ms instead of ~0.5 s).
    Pixels outside the triangulation map to themselves.
    """
    import cv2  # lazily: OpenCV takes 0.1 s to import, only a build needs it
    from scipy.spatial import Delaunay  # lazily: scipy takes 0.3-0.8 s to import

    h, w = shape
    out_points = np.asarray(out_points, np.float64)
    in_points = np.asarray(in_points, np.float64)
    simplices = Delaunay(out_points).simplices
    corners = np.concatenate([out_points[simplices], np.ones((len(simplices), 3, 1))], axis=2)
    # barycentric coordinates of (x, y, 1) in triangle k: (x, y, 1) @ to_bary[k]
    to_bary = np.linalg.inv(corners)
    # each pixel's triangle, by rasterising the triangles, the largest last (painting is far
    # faster than a point location per pixel); pixels a thin triangle's outline claimed
    # wrongly are re-assigned below
    area = np.abs(np.linalg.det(corners))
    label = np.full((h, w), -1, np.int32)
    for k in np.argsort(area, kind="stable"):
        cv2.fillConvexPoly(
            label, np.round(out_points[simplices[k]] * 16).astype(np.int32), int(k), cv2.LINE_8, 4
        )
    yy, xx = np.mgrid[0:h, 0:w]
    xy1 = np.c_[xx.ravel(), yy.ravel(), np.ones(h * w)]
    tri = label.ravel()
    inside = tri >= 0
    bary = np.zeros((h * w, 3))
    bary[inside] = np.einsum("ni,nij->nj", xy1[inside], to_bary[tri[inside]])
    bad = np.flatnonzero(inside & (bary.min(axis=1) < -1e-6))
    if len(bad):
        all_bary = np.einsum("ni,kij->nkj", xy1[bad], to_bary)  # (n_bad, n_triangles, 3)
        best = all_bary.min(axis=2).argmax(axis=1)
        tri[bad] = best
        bary[bad] = all_bary[np.arange(len(bad)), best]
    src = xy1[:, :2].copy()  # pixels outside every triangle map to themselves
    src[inside] = np.einsum("nj,njc->nc", bary[inside], in_points[simplices[tri[inside]]])
    return src[:, 0].reshape(h, w).astype(np.float32), src[:, 1].reshape(h, w).astype(np.float32)


def border_points(width: int, height: int, spacing: float = 20.0) -> np.ndarray:
    """Points along the border of a ``width`` x ``height`` box (pixel centres), corners included."""
    nx = max(2, int(np.ceil((width - 1) / spacing)) + 1)
    ny = max(2, int(np.ceil((height - 1) / spacing)) + 1)
    xs = np.linspace(0, width - 1, nx)
    ys = np.linspace(0, height - 1, ny)[1:-1]
    rows = [np.c_[xs, np.full(nx, y)] for y in (0.0, height - 1.0)]
    return np.concatenate([*rows, *(np.c_[np.full(len(ys), x), ys] for x in (0.0, width - 1.0))])


def even(v: float) -> int:
    """``v`` rounded to an even integer (pixel sizes and positions of yuv420p frames)."""
    return int(2 * round(v / 2))


class FaceRig:
    """Expression states of one face photo (``landmarks``: its 68 dlib points, x and y), each
    rendered once by a piecewise-affine warp. The upper band (brows, eyes) and the lower band
    (nose tip down) are warped separately, each with a ring of fixed points on its border, so
    :meth:`render` joins any upper and lower state seamlessly."""

    def __init__(self, tile: np.ndarray, landmarks: np.ndarray) -> None:
        self.tile = np.ascontiguousarray(tile, dtype=np.uint8)
        p = np.asarray(landmarks, dtype=np.float64)
        if p.shape != (68, 2):
            raise ValueError(f"demo face: expected (68, 2) landmarks, got {p.shape}")
        self.landmarks = p
        h, w = self.tile.shape[:2]
        self.iod = float(np.linalg.norm(p[45] - p[36]))
        self.mouth_width = float(np.linalg.norm(p[54] - p[48]))
        # cheek control points, halfway between the jaw and the lip corners
        cheeks = np.array([(p[3] + p[48]) / 2, (p[13] + p[54]) / 2])
        self.control = np.vstack([p, cheeks])
        cut = even(p[30, 1])
        x0 = max(0, even(p[:, 0].min() - 0.35 * self.iod))
        x1 = min(w, even(p[:, 0].max() + 0.35 * self.iod))
        y0 = max(0, even(p[17:27, 1].min() - 0.5 * self.iod))
        self.upper_region = (x0, y0, x1, cut)
        self.lower_region = (x0, cut, x1, h)
        self._upper: dict[tuple[int, int], np.ndarray] = {}
        self._lower: dict[tuple[int, int], np.ndarray] = {}

    @classmethod
    def from_photo(cls) -> FaceRig:
        """The rig of the astronaut portrait in scikit-image (public domain, NASA)."""
        import cv2  # lazily: OpenCV takes 0.1 s to import, only a build needs it

        try:
            from skimage import data  # lazily: the photo is read only to build the rig
        except ImportError as e:
            raise ImportError(
                "the demo corpora need scikit-image (their face photo): "
                "pip install 'omg-empathy-bench[demo]'"
            ) from e

        crop = data.astronaut()[slice(*PHOTO_ROWS), slice(*PHOTO_COLS)]
        tile = cv2.resize(crop, None, fx=PHOTO_SCALE, fy=PHOTO_SCALE, interpolation=cv2.INTER_CUBIC)
        points = DlibLandmarker(detect_scale=0.5).detect(tile)
        if points is None:
            raise RuntimeError(
                "demo face: dlib found no face in skimage.data.astronaut(); check the dlib and "
                "face-recognition-models installation (pip install dlib-bin face-recognition-models)"
            )
        return cls(tile, points)

    def lower_targets(self, smile: float, mouth: float) -> np.ndarray:
        """Control points moved for a smile (0 = the photo, > 0 broader, < 0 weaker) and a mouth opening (0..1)."""
        d = self.control.copy()
        sx, sy = smile * 0.11 * self.mouth_width, -smile * 0.09 * self.mouth_width
        weights = {48: 1.0, 49: 0.5, 59: 0.5, 60: 0.6, 50: 0.2, 58: 0.2, 61: 0.25, 67: 0.25}
        for left, w in weights.items():
            right = {48: 54, 49: 53, 59: 55, 60: 64, 50: 52, 58: 56, 61: 63, 67: 65}[left]
            d[left] += (-sx * w, sy * w)
            d[right] += (sx * w, sy * w)
        d[68] += (-0.03 * smile * self.mouth_width, -0.05 * smile * self.mouth_width)
        d[69] += (0.03 * smile * self.mouth_width, -0.05 * smile * self.mouth_width)
        jaw = mouth * 0.22 * self.iod
        # how far each point drops with the jaw: the lower lip and its corners, the chin and jaw line
        lips = (((65, 66, 67, 56, 57, 58), 1.0), ((55, 59), 0.6), ((48, 54), 0.15), ((60, 64), 0.1))
        chin = (((8,), 0.55), ((7, 9), 0.5), ((6, 10), 0.35), ((5, 11), 0.2), ((4, 12), 0.08))
        for points, w in (*lips, *chin):
            d[list(points), 1] += w * jaw
        return d

    def upper_targets(self, brow: float, blink: float) -> np.ndarray:
        """Control points moved for a brow raise (0..1) and an eye closure (0..1)."""
        p = self.control
        d = p.copy()
        d[17:27, 1] -= brow * 0.10 * self.iod
        d[[37, 38, 43, 44], 1] -= brow * 0.02 * self.iod
        for upper, lower in ((37, 41), (38, 40), (43, 47), (44, 46)):
            d[upper] += blink * 0.85 * (p[lower] - d[upper])
            d[lower, 1] -= blink * 0.1 * (p[lower, 1] - p[upper, 1])
        return d

    def _warp(self, region: tuple[int, int, int, int], targets: np.ndarray) -> np.ndarray:
        import cv2  # lazily, as above

        x0, y0, x1, y1 = region
        sub = self.tile[y0:y1, x0:x1]
        off = np.array([x0, y0], dtype=np.float64)
        src, dst = self.control - off, targets - off
        w, h = x1 - x0, y1 - y0
        margin, far = 3.0, np.array([w - 1 - 3.0, h - 1 - 3.0])
        inside = ((src > margin) & (src < far)).all(axis=1)
        ring = border_points(w, h)
        dst_in = np.clip(dst[inside], margin, far)
        # the inverse map: output (deformed) coordinates -> input (photo) coordinates
        mx, my = piecewise_affine_map(
            np.vstack([dst_in, ring]), np.vstack([src[inside], ring]), (h, w)
        )
        return cv2.remap(
            np.ascontiguousarray(sub), mx, my, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE
        )

    def _band(self, region: tuple[int, int, int, int], targets: np.ndarray) -> np.ndarray:
        """The photo's ``region`` warped to ``targets`` (a copy of it if nothing moves)."""
        x0, y0, x1, y1 = region
        if np.allclose(targets, self.control):
            return self.tile[y0:y1, x0:x1].copy()
        return self._warp(region, targets)

    def upper(self, brow: int, blink: int) -> np.ndarray:
        """The upper band for state indices into :data:`BROW_LEVELS` and :data:`BLINK_LEVELS`."""
        key = (int(brow), int(blink))
        if key not in self._upper:
            targets = self.upper_targets(BROW_LEVELS[key[0]], BLINK_LEVELS[key[1]])
            self._upper[key] = self._band(self.upper_region, targets)
        return self._upper[key]

    def lower(self, smile: int, mouth: int) -> np.ndarray:
        """The lower band for state indices into :data:`SMILE_LEVELS` and :data:`MOUTH_LEVELS`."""
        key = (int(smile), int(mouth))
        if key not in self._lower:
            targets = self.lower_targets(SMILE_LEVELS[key[0]], MOUTH_LEVELS[key[1]])
            band = self._band(self.lower_region, targets)
            if MOUTH_LEVELS[key[1]] > 0:
                closed = self.lower_targets(SMILE_LEVELS[key[0]], 0.0)
                band = self._paint_mouth_cavity(band, closed, targets, self.lower_region[:2])
            self._lower[key] = band
        return self._lower[key]

    @staticmethod
    def _paint_mouth_cavity(
        band: np.ndarray, closed: np.ndarray, opened: np.ndarray, origin: tuple[int, int]
    ) -> np.ndarray:
        """Darken what the lower lip uncovered (the warp alone would stretch the teeth)."""
        import cv2  # lazily, as above

        inner_lower = [60, 67, 66, 65, 64]
        poly = np.vstack([opened[inner_lower], closed[inner_lower[::-1]]]) - np.asarray(origin)
        mask = np.zeros(band.shape[:2], np.float32)
        points = [np.round(poly * 4).astype(np.int32)]
        cv2.fillPoly(mask, points, 1.0, lineType=cv2.LINE_AA, shift=2)
        soft = cv2.GaussianBlur(mask, (5, 5), 1.0)[..., None]
        cavity = np.array([62, 24, 28], np.float32)  # dark red-brown of an open mouth
        return np.clip(band * (1 - 0.9 * soft) + cavity * 0.9 * soft + 0.5, 0, 255).astype(np.uint8)

    def render(
        self, smile: int = SPEAKER_SMILE_STATE, mouth: int = 0, blink: int = 0, brow: int = 0
    ) -> np.ndarray:
        """The whole face tile (RGB uint8) in one expression state (indices into the *_LEVELS)."""
        out = self.tile.copy()
        x0, y0, x1, y1 = self.upper_region
        out[y0:y1, x0:x1] = self.upper(brow, blink)
        x0, y0, x1, y1 = self.lower_region
        out[y0:y1, x0:x1] = self.lower(smile, mouth)
        return out


@lru_cache(maxsize=1)
def face_rig() -> FaceRig:
    """The astronaut rig, built once per process (landmark detection, then warps on demand)."""
    return FaceRig.from_photo()


@dataclass(frozen=True)
class Look:
    """How one person's copy of the face appears: mirroring, colour gains, background."""

    mirror: bool
    gain: tuple[float, float, float]  # per RGB channel

    def background(self, tile: np.ndarray) -> np.ndarray:
        """Background colour (RGB uint8): the photo's wall colour, tinted like the face."""
        border = np.concatenate([b.reshape(-1, 3) for b in (tile[:8], tile[:, :8], tile[:, -8:])])
        return np.clip(np.median(border, axis=0) * np.array(self.gain), 0, 255).astype(np.uint8)


class TileCache:
    """Dressed tiles (mirrored, tinted, feathered into the background) as I420 planes, per state."""

    def __init__(self, rig: FaceRig, look: Look, size: tuple[int, int]) -> None:
        self.rig, self.look = rig, look
        self.h, self.w = size
        self.bg = look.background(rig.tile)
        th, tw = rig.tile.shape[:2]
        ay, ax = (
            np.clip(np.minimum(np.arange(n), n - 1 - np.arange(n)) / _FEATHER_PX, 0, 1)
            for n in size
        )
        a = (ay[:, None] * ax[None, :]) ** 1.5
        self.alpha = (a * a * (3 - 2 * a))[..., None].astype(np.float32)  # smoothstep
        self._tiles: dict[tuple[int, int, int, int], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self._resize = (th, tw) != (self.h, self.w)

    def get(self, state: tuple[int, int, int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The Y, U and V planes of the dressed tile in ``state`` (smile, mouth, blink, brow)."""
        planes = self._tiles.get(state)
        if planes is None:
            import cv2  # lazily, as above

            rgb = self.rig.render(*state)
            if self._resize:
                rgb = cv2.resize(rgb, (self.w, self.h), interpolation=cv2.INTER_AREA)
            if self.look.mirror:
                rgb = rgb[:, ::-1]
            tinted = rgb.astype(np.float32) * np.array(self.look.gain, dtype=np.float32)
            dressed = self.alpha * tinted + (1 - self.alpha) * self.bg.astype(np.float32)
            dressed = np.ascontiguousarray(np.clip(dressed + 0.5, 0, 255).astype(np.uint8))
            i420 = cv2.cvtColor(dressed, cv2.COLOR_RGB2YUV_I420)
            h, w = self.h, self.w
            y, u, v = i420[:h], i420[h : h + h // 4], i420[h + h // 4 :]
            planes = (y.copy(), u.reshape(h // 2, w // 2).copy(), v.reshape(h // 2, w // 2).copy())
            self._tiles[state] = planes
        return planes
