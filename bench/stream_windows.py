"""Windowed features frame by frame: the latency of :meth:`StreamingWindows.push` on one core.

    python -m bench.stream_windows [--quick]

A frame table of 3 channels, 136 columns (``listener/face_au`` 17 action units,
``listener/egemaps`` 25 voice descriptors, ``listener/face_geom`` 94 geometry values: random
walks on offsets, 3 % of the values missing, 5 % of the frames of each channel invalid), 25
fps, 3,000 frames (quick: 500). The window key: all three channels, lengths 2, 4 and 8 s,
causal, no delay, statistics mean, std, slope, min, max and valid_frac (2,049 features).
Each frame is pushed as a live source would, one at a time, and the call timed
(``perf_counter_ns``, garbage collection left on); the first 200 frames (the kernel loaded
from Numba's cache, the rings filling) are not counted. The streamed rows are checked equal
to ``window_sessions`` of the whole table first. Numba runs no threads: one core.

Records (issue 45: p99 under 5 ms, at least 100x real time at 25 fps):

* ``stream_windows.push_p99_ms`` and ``stream_windows.push_median_ms``: the per-frame latency;
* ``stream_windows.real_time``: frames per second over the timed frames / fps, against the
  batch windowing of the same table (``window_sessions``, the whole session at once).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from experiments.config.grid import WindowKey
from experiments.data.session_table import SessionTable
from experiments.windowing.stream import StreamingWindows
from experiments.windowing.windowed import window_sessions

from .harness import best_time, loadavg, record

CHANNELS = {"listener/face_au": 17, "listener/egemaps": 25, "listener/face_geom": 94}
KEY = WindowKey(
    "listener",
    tuple(CHANNELS),
    (2.0, 4.0, 8.0),
    0.0,
    "causal",
    ("mean", "std", "slope", "min", "max", "valid_frac"),
)
FPS = 25.0
WARMUP = 200


def frame_table(n: int, seed: int = 0) -> SessionTable:
    """The benchmark's table: ``n`` frames of the layout of :data:`CHANNELS`."""
    rng = np.random.default_rng(seed)
    column_channel = np.repeat(np.arange(len(CHANNELS)), list(CHANNELS.values()))
    d = len(column_channel)
    X = np.cumsum(rng.normal(size=(n, d)), axis=0) * rng.uniform(0.01, 1, d)
    X = (X + rng.uniform(-100, 1000, d)).astype(np.float32)
    X[rng.random(X.shape) < 0.03] = np.nan
    columns = [f"{ch}/c{i}" for ch, k in CHANNELS.items() for i in range(k)]
    valid = rng.random((n, len(CHANNELS))) > 0.05
    return SessionTable(
        "Subject_1_Story_1", 1, 1, "val", X, columns, valid, list(CHANNELS), column_channel,
        np.zeros(n, np.float32), fps=FPS,
    )  # fmt: skip


def stream(t: SessionTable) -> tuple[np.ndarray, np.ndarray]:
    """Every frame pushed in turn: (the rows, each push's seconds)."""
    s = StreamingWindows(KEY, t.columns, t.channels, t.column_channel, t.fps)
    rows, seconds = [], np.empty(t.n_frames)
    for i in range(t.n_frames):
        x, v = t.X[i], t.valid[i]
        t0 = time.perf_counter_ns()
        rows.append(s.push(x, v))
        seconds[i] = (time.perf_counter_ns() - t0) * 1e-9
    return np.stack(rows), seconds


def run(work: Path, quick: bool = False) -> list[dict]:
    """Time the pushes; returns the records (``work`` unused: the table is made in memory)."""
    t = frame_table(500 if quick else 3000)
    batch = window_sessions([t], KEY)
    rows, _ = stream(t)  # loads the kernels, checks the result
    if not np.array_equal(rows, batch.sessions[0].F, equal_nan=True):
        raise AssertionError("StreamingWindows.push differs from window_sessions")
    _, seconds = stream(t)
    timed = seconds[WARMUP:]
    t_batch, _ = best_time(lambda: window_sessions([t], KEY), repeat=3)
    median, p99 = np.percentile(timed, [50, 99]) * 1e3
    real_time = len(timed) / timed.sum() / FPS
    print(
        f"stream_windows: {t.X.shape[1]} columns, {rows.shape[1]} features, {len(timed)} frames "
        f"timed: push median {median:.3f} ms, p99 {p99:.3f} ms, max {timed.max() * 1e3:.2f} ms; "
        f"{real_time:.0f}x real time (batch {t.n_frames / t_batch / FPS:.0f}x); load {loadavg()}"
    )
    return [
        record("stream_windows.push_p99_ms", p99, "ms", goal="< 5 ms"),
        record("stream_windows.push_median_ms", median, "ms"),
        record(
            "stream_windows.real_time",
            real_time,
            "x real time",
            baseline="window_sessions of the whole table at once",
            baseline_value=t.n_frames / t_batch / FPS,
            goal=">= 100 x real time",
        ),
    ]


def main() -> None:
    """Print the records as JSON lines."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="500 frames instead of 3,000")
    args = ap.parse_args()
    for r in run(Path("."), quick=args.quick):
        print(json.dumps(r))


if __name__ == "__main__":
    main()
