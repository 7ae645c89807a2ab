"""What an extractor or an importer computes for one role: per-sample values, times and
validity (the store's :class:`~featurestore.storage.store.Channel` adds the provenance).

>>> f = Features([[1.0], [2.0]], time=[0.0, 0.2], valid=[True, False], columns=["mouth_open"])
>>> f.data.dtype, f.data.shape, f.valid.tolist()
(dtype('float32'), (2, 1), [True, False])
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Features:
    """Per-sample values of one role: ``data`` (n, d) float32, ``time`` (n,) float64 in seconds
    from the session start, ``valid`` (n,) bool, and the d ``columns`` names (inputs converted;
    a 1-D ``data`` is one column; shapes that disagree raise :class:`ValueError`)."""

    data: np.ndarray  # (n, d) float32
    time: np.ndarray  # (n,) float64, seconds
    valid: np.ndarray  # (n,) bool
    columns: list[str]

    def __post_init__(self) -> None:
        self.data = np.asarray(self.data, dtype=np.float32)
        if self.data.ndim == 1:
            self.data = self.data[:, None]
        self.time = np.asarray(self.time, dtype=np.float64)
        self.valid = np.asarray(self.valid, dtype=bool)
        self.columns = [str(c) for c in self.columns]
        n = self.data.shape[0]
        if self.time.shape != (n,) or self.valid.shape != (n,):
            raise ValueError(
                f"features have {n} rows but time has {self.time.shape} and valid {self.valid.shape}"
            )
        if self.data.shape[1] != len(self.columns):
            raise ValueError(f"{self.data.shape[1]} data columns but {len(self.columns)} names")
