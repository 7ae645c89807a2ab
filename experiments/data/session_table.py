"""The 25 fps table of one session, which the dataset builds and the frames cache keeps (neither imports the other).

>>> import numpy as np
>>> t = SessionTable("Subject_1_Story_1", 1, 1, "val", np.zeros((50, 2), np.float32), ["a/b/x", "a/b/y"],
...                  np.ones((50, 1), bool), ["a/b"], np.zeros(2, np.int64), np.zeros(50, np.float32))
>>> t.n_frames, float(t.time[-1]), t.column_valid().shape
(50, 1.96, (50, 2))
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from featurestore.storage.store import LABEL_FPS


@dataclass
class SessionTable:
    """One session's features ``X`` (float32, NaN where missing) with ``columns`` ``role/channel/column``,
    ``valid`` (one column per entry of ``channels``), ``column_channel`` (each column's index into ``channels``), and
    float32 labels ``y`` of ``target``."""

    session: str
    listener: int
    story: int
    split: str
    X: np.ndarray
    columns: list[str]
    valid: np.ndarray
    channels: list[str]
    column_channel: np.ndarray
    y: np.ndarray
    target: str = "valence_self"
    speaker: int = 0
    fps: float = LABEL_FPS

    @property
    def n_frames(self) -> int:
        return int(self.y.shape[0])

    @property
    def time(self) -> np.ndarray:
        """Label frame times in seconds, ``i / fps``."""
        return np.arange(self.n_frames) / self.fps

    def column_valid(self) -> np.ndarray:
        """(n_frames, d) bool: the channel validity broadcast to each column of ``X``."""
        return self.valid[:, self.column_channel]
