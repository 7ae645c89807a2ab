"""Helpers of the extraction tests: OpenFace and py-feat tables as those tools write them."""

from __future__ import annotations

import numpy as np
import pandas as pd

NAN = float("nan")


#: the head pose and gaze columns of an OpenFace 2.x FeatureExtraction CSV, in its order
OPENFACE_GAZE = [f"gaze_{e}_{a}" for e in (0, 1) for a in "xyz"] + ["gaze_angle_x", "gaze_angle_y"]
OPENFACE_POSE = [f"pose_{k}{a}" for k in "TR" for a in "xyz"]
#: two of the 68 2D landmarks (x_0, x_1, y_0, y_1): enough to test they are kept on request
OPENFACE_LANDMARKS = ["x_0", "x_1", "y_0", "y_1"]


def openface_measures(i):
    """Row ``i``'s gaze, head pose and landmark values in :func:`write_openface` (they move)."""
    gaze = [0.1 + 0.01 * i, -0.2, -0.9, 0.12, -0.21, -0.95, 0.05 * i, -0.1]
    pose = [10.0 + i, -5.0, 400.0 - i, 0.01 * i, -0.02 * i, 0.03]
    return gaze, pose, [300.0 + i, 310.0 + i, 200.0 - i, 205.0 - i]


def write_openface(path, n=30, fps=25.0, seed=0):
    """An OpenFace 2.x FeatureExtraction CSV: ', '-separated, leading spaces in header and values;
    gaze, 2D landmarks, head pose, then AU intensities and presences (OpenFace's order)."""
    rng = np.random.default_rng(seed)
    aus = ["AU01", "AU02", "AU45"]
    header = ["frame", "face_id", "timestamp", "confidence", "success"]
    header += OPENFACE_GAZE + OPENFACE_LANDMARKS + OPENFACE_POSE
    header += [f"{a}_r" for a in aus] + [f"{a}_c" for a in aus]
    r = rng.uniform(0, 5, (n, len(aus))).round(2)
    c = (r > 1).astype(int)
    success = np.ones(n, int)
    conf = np.full(n, 0.98)
    success[3] = 0
    r[3], c[3] = 0, 0  # OpenFace writes zeros for a failed frame
    conf[5] = 0.3  # tracked, but with low confidence
    lines = [", ".join(header)]
    for i in range(n):
        gaze, pose, lmk = openface_measures(i)
        if not success[i]:
            gaze, pose, lmk = [0] * len(gaze), [0] * len(pose), [0] * len(lmk)
        vals = [i + 1, 0, f"{i / fps:.3f}", conf[i], success[i], *gaze, *lmk, *pose]
        vals += [f"{v:.2f}" for v in r[i]] + list(c[i])
        lines.append(", ".join(str(v) for v in vals))
    path.write_text("\n".join(lines) + "\n")
    return r, c


def write_pyfeat(path):
    """A py-feat Fex.to_csv-like table: face boxes, AUs, a text column, two faces in frame 1."""
    df = pd.DataFrame(
        {
            "FaceRectX": [1.0, 2.0, 50.0, NAN, 3.0],
            "FaceRectY": [1.0, 2.0, 60.0, NAN, 3.0],
            "FaceRectWidth": [40.0, 10.0, 45.0, NAN, 41.0],
            "FaceRectHeight": [50.0, 12.0, 52.0, NAN, 50.0],
            "FaceScore": [0.99, 0.7, 0.98, NAN, 0.99],
            "AU01": [0.1, 0.9, 0.3, NAN, 0.5],
            "AU04": [0.2, 0.8, 0.4, NAN, 0.6],
            "anger": [0.1, 0.1, 0.2, NAN, 0.1],
            "happiness": [0.6, 0.3, 0.5, NAN, 0.7],
            "Pitch": [1.0, 2.0, -3.0, NAN, 4.0],
            "Roll": [0.5, 0.1, 0.2, NAN, 0.3],
            "Yaw": [-10.0, 5.0, 12.0, NAN, -8.0],
            "x_0": [10.0, 11.0, 60.0, NAN, 12.0],
            "input": ["v.mp4"] * 5,
            "frame": [0, 1, 1, 2, 3],
        }
    )
    df.to_csv(path, index=False)
    return df
