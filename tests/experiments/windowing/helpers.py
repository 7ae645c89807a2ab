"""Helpers of the windowing tests: a naive reference implementation and random data."""

from __future__ import annotations

import numpy as np


def naive_window_stats(X, fps, lengths_s, delay_s, align, stats):
    """Per-frame, per-column reference: gather the window's values and compute each statistic."""
    n, d = X.shape
    cols = []
    for L in lengths_s:
        w = max(1, int(round(L * fps)))
        dl = int(round(delay_s * fps))
        for s in stats:
            col = np.full((n, d), np.nan)
            for t in range(n):
                c = t - dl
                a, b = (c - w // 2, c + w // 2) if align == "centred" else (c - w + 1, c)
                a, b = max(a, 0), min(b, n - 1)
                frames = np.arange(a, b + 1) if a <= b else np.arange(0)
                for k in range(d):
                    v = X[frames, k]
                    ok = np.isfinite(v)
                    vals, tt = v[ok], frames[ok] / fps
                    if s == "valid_frac":
                        col[t, k] = ok.sum() / len(frames) if len(frames) else 0.0
                    elif len(vals) == 0:
                        continue
                    elif s == "mean":
                        col[t, k] = vals.mean()
                    elif s == "std":
                        col[t, k] = vals.std()
                    elif s == "min":
                        col[t, k] = vals.min()
                    elif s == "max":
                        col[t, k] = vals.max()
                    elif s == "slope" and len(vals) >= 2:
                        col[t, k] = np.polyfit(tt, vals, 1)[0]
            cols.append(col)
    return np.concatenate(cols, axis=1)


def random_data(rng, n, d, nan_frac, offset=0.0):
    X = rng.normal(size=(n, d)) * rng.uniform(0.5, 5, size=d) + offset
    X[rng.random((n, d)) < nan_frac] = np.nan
    if n > 20:
        X[5:12, 0] = np.nan  # a gap longer than a short window
    return X
