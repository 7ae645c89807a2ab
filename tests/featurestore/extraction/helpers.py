"""Helpers of the extraction tests: OpenFace and py-feat tables as those tools write them."""

from __future__ import annotations

import numpy as np
import pandas as pd

NAN = float("nan")


def write_openface(path, n=30, fps=25.0, seed=0):
    """An OpenFace 2.x FeatureExtraction CSV: ', '-separated, leading spaces in header and values."""
    rng = np.random.default_rng(seed)
    aus = ["AU01", "AU02", "AU45"]
    header = ["frame", "face_id", "timestamp", "confidence", "success", "gaze_0_x", "pose_Tx"]
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
        vals = [i + 1, 0, f"{i / fps:.3f}", conf[i], success[i], 0.1, 12.5]
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
            "input": ["v.mp4"] * 5,
            "frame": [0, 1, 1, 2, 3],
        }
    )
    df.to_csv(path, index=False)
    return df
