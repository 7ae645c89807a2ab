"""Helpers of the data tests: a two-channel store of three sessions (10 s each at 25 fps)."""

from __future__ import annotations

import numpy as np

from featurestore.storage.store import Channel, SessionMeta, Store

SPLITS = {"train": [2], "val": [1], "test": [3]}


N = 250  # 10 s at 25 fps


def face_channel(rng, n_frames=N, d=3):
    """5 fps; sample 10 invalid (a short gap), samples 20-25 invalid (a 1.2 s gap)."""
    t = np.arange(n_frames // 5) / 5.0
    data = np.stack([2.0 * t + k for k in range(d)], axis=1)
    valid = np.ones(t.size, bool)
    valid[10] = False
    valid[20:26] = False
    data[~valid] = np.nan
    return Channel(data, t, valid, [f"g{k}" for k in range(d)])


def egemaps_channel(rng, n_frames=N, d=2):
    """100 Hz with random validity (speaking turns) and a NaN inside one valid row."""
    t = np.arange(n_frames * 4) / 100.0
    data = rng.normal(size=(t.size, d))
    valid = rng.random(t.size) > 0.4
    valid[400:500] = False
    data[7, 1] = np.nan
    valid[7] = True
    return Channel(data, t, valid, [f"e{k}" for k in range(d)])


def write_store(root, targets=("valence_self",)) -> Store:
    """2 listeners x 4 stories of N frames: listener face_geom (5 fps) and egemaps (100 Hz), random labels."""
    rng = np.random.default_rng(0)
    st = Store(root, mode="a")
    for listener in (1, 2):
        for story in (1, 2, 3, 4):
            meta = SessionMeta(f"Subject_{listener}_Story_{story}", listener, story, 1, "bogus", N)
            st.write_session(
                meta,
                channels={
                    "listener/face_geom": face_channel(rng),
                    "listener/egemaps": egemaps_channel(rng),
                },
                labels={t: rng.uniform(-1, 1, N) for t in targets},
            )
    return st
