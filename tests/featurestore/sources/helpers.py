"""Helpers of the sources tests: valence CSVs in the official format."""

from __future__ import annotations

import numpy as np


def write_valence(path, n, seed=0, header="valence"):
    y = np.clip(np.cumsum(np.random.default_rng(seed).normal(0, 0.02, n)), -1, 1)
    path.write_text(header + "\n" + "\n".join(f"{v:.6f}" for v in y) + "\n")
    return y.astype(np.float32)
