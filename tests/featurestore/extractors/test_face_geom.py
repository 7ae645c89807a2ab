"""face_geom: real dlib landmarks on skimage's astronaut, warped to change one expression at a time."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

cv2 = pytest.importorskip("cv2")
pytest.importorskip("dlib")

from skimage import data  # noqa: E402
from skimage.transform import PiecewiseAffineTransform, rotate, warp  # noqa: E402

from featurestore.extractors import base  # noqa: E402
from featurestore.extractors.face_geom import (  # noqa: E402
    COLUMNS,
    POSE_LANDMARKS,
    POSE_MODEL,
    FaceGeomConfig,
    FaceGeomExtractor,
    face_geometry,
    head_pose,
)
from featurestore.extractors.landmarks import DlibLandmarker  # noqa: E402

COL = {c: i for i, c in enumerate(COLUMNS)}


@pytest.fixture(scope="module")
def face_image() -> np.ndarray:
    """A 720x600 crop with the astronaut's face scaled to ~200 px (IOD ~120 px), off-centre."""
    head = cv2.resize(
        data.astronaut()[30:270, 110:350], None, fx=2, fy=2, interpolation=cv2.INTER_CUBIC
    )
    canvas = np.full((600, 720, 3), 90, np.uint8)
    canvas[60:540, 120:600] = head
    return canvas


@pytest.fixture(scope="module")
def landmarks(face_image) -> np.ndarray:
    lm = DlibLandmarker(detect_scale=0.5).detect(face_image)
    assert lm is not None, "dlib found no face in the astronaut fixture"
    return lm


def features_of(image: np.ndarray, **config) -> np.ndarray:
    track = FaceGeomExtractor(FaceGeomConfig(**config)).new_track("speaker")
    track.add(0.0, image)
    feats = track.result()
    assert feats.valid.all(), "no face found"
    return feats.data[0]


def warp_landmarks(
    image: np.ndarray, lm: np.ndarray, moves: dict[int, tuple[float, float]]
) -> np.ndarray:
    """Piecewise-affine warp of the face region that moves landmark i by moves[i] pixels (x, y)."""
    x0, y0 = (lm.min(0) - 60).astype(int)
    x1, y1 = (lm.max(0) + 60).astype(int)
    region = image[y0:y1, x0:x1]
    h, w = region.shape[:2]
    t = np.linspace(0, 1, 6)
    frame = np.concatenate(
        [
            np.c_[t * (w - 1), 0 * t],
            np.c_[t * (w - 1), 0 * t + h - 1],
            np.c_[0 * t, t * (h - 1)],
            np.c_[0 * t + w - 1, t * (h - 1)],
        ]
    )  # the region's border stays put
    src = np.vstack([lm - (x0, y0), frame])
    dst = src.copy()
    for i, d in moves.items():
        dst[i] += d
    # warp() wants the output -> input map; from_estimate replaces estimate in skimage >= 0.26
    if hasattr(PiecewiseAffineTransform, "from_estimate"):
        tform = PiecewiseAffineTransform.from_estimate(dst, src)
    else:
        tform = PiecewiseAffineTransform()
        tform.estimate(dst, src)
    assert tform, "piecewise-affine estimation failed"
    out = image.copy()
    out[y0:y1, x0:x1] = warp(region, tform, preserve_range=True).astype(np.uint8)
    return out


def iod(lm: np.ndarray) -> float:
    return float(np.linalg.norm(lm[45] - lm[36]))


def test_face_found_and_all_columns_finite(face_image, landmarks):
    track = FaceGeomExtractor().new_track("listener")
    track.add(3.2, face_image)
    feats = track.result()
    assert feats.columns == list(COLUMNS)
    assert feats.valid.tolist() == [True] and feats.time.tolist() == [3.2]
    row = feats.data[0]
    assert np.isfinite(row).all()
    assert row[COL["face_scale"]] == pytest.approx(iod(landmarks) / 720, rel=0.05)
    assert 0.4 < row[COL["face_x"]] < 0.6 and 0.3 < row[COL["face_y"]] < 0.6
    assert row[COL["blink"]] == 0  # eyes open
    assert 0.2 < row[COL["eye_open_l"]] < 0.45 and 0.2 < row[COL["eye_open_r"]] < 0.45
    assert abs(row[COL["head_yaw"]]) < 20 and abs(row[COL["head_roll"]]) < 10


@pytest.mark.parametrize("fill", [0, 128])
def test_no_face_gives_invalid_nan_row(fill):
    track = FaceGeomExtractor().new_track("speaker")
    track.add(0.0, np.full((480, 640, 3), fill, np.uint8))
    track.add(0.2, np.full((480, 640, 3), fill, np.uint8))
    feats = track.result()
    assert feats.data.shape == (2, len(COLUMNS))
    assert not feats.valid.any() and np.isnan(feats.data).all()
    assert track.n_detections == 2  # no track to follow: detect on every frame


def test_pulling_mouth_corners_increases_lip_corner_pull(face_image, landmarks):
    d = 0.12 * iod(landmarks)
    pulled = warp_landmarks(
        face_image,
        landmarks,
        {48: (-d, -d / 3), 54: (d, -d / 3), 60: (-0.8 * d, -d / 3), 64: (0.8 * d, -d / 3)},
    )
    before, after = features_of(face_image), features_of(pulled)
    assert after[COL["lip_corner_pull"]] > before[COL["lip_corner_pull"]] + 0.08
    assert (
        abs(after[COL["brow_raise_l"]] - before[COL["brow_raise_l"]]) < 0.03
    )  # the brows did not move


def test_opening_the_mouth_increases_mouth_open(face_image, landmarks):
    d = 0.18 * iod(landmarks)
    lower_face = [5, 6, 7, 8, 9, 10, 11, 55, 56, 57, 58, 59, 65, 66, 67]  # chin, lower lip
    opened = warp_landmarks(face_image, landmarks, {i: (0.0, d) for i in lower_face})
    before, after = features_of(face_image), features_of(opened)
    assert after[COL["mouth_open"]] > before[COL["mouth_open"]] + 0.08
    assert after[COL["jaw_drop"]] > before[COL["jaw_drop"]] + 0.05


def test_counter_clockwise_rotation_lowers_head_roll(face_image):
    before = features_of(face_image)
    turned = rotate(face_image, 15, center=(360, 300), preserve_range=True).astype(np.uint8)
    after = features_of(turned)
    assert after[COL["head_roll"]] - before[COL["head_roll"]] == pytest.approx(-15, abs=4)
    # distances live in the face's own frame: a tilt leaves them nearly unchanged
    assert after[COL["lip_corner_pull"]] == pytest.approx(before[COL["lip_corner_pull"]], abs=0.04)


def test_geometry_ignores_position_size_and_tilt_and_detects_blinks(landmarks):
    angle = np.radians(20)
    rot = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
    moved = (landmarks - landmarks.mean(0)) @ rot.T * 0.6 + (300, 200)
    closed = landmarks.copy()
    for eye in (slice(36, 42), slice(42, 48)):  # squash each eye to a tenth of its height
        centre = closed[eye].mean(0)
        closed[eye, 1] = centre[1] + 0.1 * (closed[eye, 1] - centre[1])
    rows = face_geometry(
        np.stack([landmarks, moved, closed, np.full((68, 2), np.nan)]), (720, 600), 0.2
    )
    shape_cols = [COL[c] for c in COLUMNS if not c.startswith(("head_", "face_"))]
    np.testing.assert_allclose(rows[1, shape_cols], rows[0, shape_cols], atol=1e-9)
    assert rows[0, COL["blink"]] == 0 and rows[2, COL["blink"]] == 1
    assert rows[2, COL["eye_open_l"]] < 0.15 * rows[0, COL["eye_open_l"]]
    assert np.isnan(rows[3]).all()


@pytest.mark.parametrize(
    ("axis", "column", "sign"),
    [
        (
            1,
            "head_yaw",
            -1,
        ),  # +10 deg about the camera's y (down) axis turns the nose to image-left
        (0, "head_pitch", -1),  # +10 deg about x (right) tips the chin away: head down
        (2, "head_roll", 1),  # +10 deg about z (into the scene) is clockwise on screen
    ],
)
def test_head_pose_recovers_a_known_rotation_of_the_generic_face(axis, column, sign):
    rvec = np.zeros(3)
    rvec[axis] = np.radians(10)
    camera = np.array([[640.0, 0, 320], [0, 640, 240], [0, 0, 1]])
    pts = cv2.projectPoints(POSE_MODEL, rvec, np.array([0.0, 0, 1500]), camera, None)[0][:, 0]
    lm = np.zeros((68, 2))
    lm[POSE_LANDMARKS] = pts
    pose = dict(
        zip(("head_yaw", "head_pitch", "head_roll"), head_pose(lm, (640, 480))[0], strict=True)
    )
    assert pose.pop(column) == pytest.approx(10 * sign, abs=0.5)
    assert np.abs(list(pose.values())).max() < 0.5


def test_track_follows_a_moving_face_and_redetects_only_as_configured(face_image):
    frames = [
        (0.2 * i, np.roll(face_image, (2 * i, 3 * i), axis=(0, 1))) for i in range(10)
    ]  # 5 fps, 2 s
    track = FaceGeomExtractor(FaceGeomConfig(redetect_every_s=1.0)).new_track("speaker")
    for t, img in frames:
        track.add(t, img)
    feats = track.result()
    assert feats.valid.all() and track.n_frames == 10
    assert track.n_detections == 2  # t = 0 and t = 1.0 s
    assert track.n_full_detections == 1  # at t = 1.0 s the face is searched near the last one only
    assert np.diff(feats.data[:, COL["face_x"]]).min() > 0  # follows the face to the right
    # tracked frames measure the same face as a fresh detection on that frame
    detected = features_of(frames[-1][1])
    np.testing.assert_allclose(feats.data[-1, :11], detected[:11], atol=0.03)

    every_frame = FaceGeomExtractor(FaceGeomConfig(redetect_every_s=0.0)).new_track("speaker")
    for t, img in frames[:3]:
        every_frame.add(t, img)
    assert every_frame.n_detections == 3


def test_track_follows_a_moderate_jump_and_redetects_a_lost_face(face_image):
    track = FaceGeomExtractor(FaceGeomConfig(redetect_every_s=10.0)).new_track("speaker")
    track.add(0.0, face_image)
    track.add(0.2, np.roll(face_image, 25, axis=1))  # ~0.2 IOD: followed by the tracker
    assert track.n_detections == 1
    track.add(0.4, np.roll(face_image, 225, axis=1))  # ~1.7 IOD: track lost, detect again
    assert track.n_detections == 2
    assert track.n_full_detections == 2  # too far for the search near the last face
    track.add(0.6, np.zeros_like(face_image))  # the face is gone
    feats = track.result()
    assert feats.valid.tolist() == [True, True, True, False]
    face_x_px = feats.data[:3, COL["face_x"]] * 720
    np.testing.assert_allclose(face_x_px - face_x_px[0], [0, 25, 225], atol=3)
    assert track.n_detections == 3


def test_params_are_json_and_config_is_frozen():
    ex = FaceGeomExtractor(FaceGeomConfig(redetect_every_s=0.5))
    params = json.loads(json.dumps(ex.params()))
    assert params["backend"] == "dlib" and params["redetect_every_s"] == 0.5
    assert FaceGeomConfig(**params) == ex.config
    with pytest.raises(dataclasses.FrozenInstanceError):
        ex.config.blink_threshold = 0.3  # type: ignore[misc]
    with pytest.raises(ValueError, match="backend"):
        FaceGeomExtractor(FaceGeomConfig(backend="mediapipe"))
    with pytest.raises(ValueError, match="role"):
        ex.new_track("scene")
    ex.check_available()


def test_registered_by_name():
    assert base._REGISTRY["face_geom"] is FaceGeomExtractor
    assert FaceGeomExtractor.name == "face_geom" and FaceGeomExtractor.roles == (
        "speaker",
        "listener",
    )
    assert base.get_extractor("face_geom") is FaceGeomExtractor


def test_whole_crop_detection_when_due_and_no_local_search_when_off(face_image):
    frames = [(0.2 * i, np.roll(face_image, 2 * i, axis=1)) for i in range(6)]
    config = FaceGeomConfig(redetect_every_s=0.2, full_detect_every_s=0.6)
    track = FaceGeomExtractor(config).new_track("speaker")
    for t, img in frames:
        track.add(t, img)
    assert track.n_detections == 6 and track.n_full_detections == 2  # t = 0 and 0.6 s
    off = FaceGeomExtractor(FaceGeomConfig(redetect_every_s=0.2, search_margin=0.0)).new_track(
        "speaker"
    )
    for t, img in frames:
        off.add(t, img)
    assert off.n_full_detections == 6
    # the local search finds the same face: landmarks within a small fraction of the IOD
    err = np.linalg.norm(track.landmarks() - off.landmarks(), axis=-1).mean(axis=1)
    assert err.max() < 0.02 * iod(off.landmarks()[0])


def test_detection_in_a_region_and_landmarks_on_a_view(face_image):
    gray = cv2.cvtColor(face_image, cv2.COLOR_RGB2GRAY)
    marker = DlibLandmarker(detect_scale=0.5)
    box = marker.detect_box(gray)
    side = box[2] - box[0]
    near = marker.detect_box(gray, region=(box[0] - 40, box[1] - 40, box[2] + 40, box[3] + 40))
    assert near is not None and np.abs(np.subtract(near, box)).max() < 0.1 * side
    assert marker.detect_box(gray, region=(0, 0, 110, 600)) is None  # left of the face
    assert marker.detect_box(gray, region=(700, 0, 900, 600)) is None  # outside the image
    # a strided view (a crop of a wider frame) gives the landmarks of the contiguous crop
    wide = np.zeros((600, 1000), np.uint8)
    wide[:, 200:920] = gray
    view = wide[:, 200:920]
    assert not view.flags["C_CONTIGUOUS"]
    np.testing.assert_array_equal(
        marker.landmarks_in_box(view, box), marker.landmarks_in_box(gray, box)
    )
    np.testing.assert_array_equal(
        marker.landmarks_in_box(view, box),
        marker.landmarks_in_box(wide, np.add(box, (200, 0, 200, 0))) - (200, 0),
    )
