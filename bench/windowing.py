"""Windowing the full-size store: :func:`experiments.windowing.window_stats` vs. pandas ``rolling``.

The frame tables of the ablation config's ``both`` feature set (speaker and listener
face_geom and eGeMAPS, 84 columns at 25 fps, 633,850 frames in 80 sessions) are windowed
with every window length of the ablation config (2, 4 and 8 s), centred, without delay,
with the statistics pandas has (mean, std with ddof 0, min, max), per session:

* the project: ``window_stats(X, valid, lengths_s=[2, 4, 8], stats=[mean, std, min, max])``
  (compiled kernels, one thread);
* the baseline: ``DataFrame.rolling(w, center=True, min_periods=1)`` per length and statistic
  on the same frames with missing values as NaN, which is what ``window_stats`` computes
  (windows truncated at the session's ends, missing values skipped), one thread.

Both results are checked equal (``np.isclose``) on a subset of sessions before timing, which
also compiles the kernels (or loads them from Numba's cache). Two measures (best of 2 each,
the two contenders interleaved):

* ``windowing.vs_pandas_rolling`` (goal of issue 5: >= 10x): each session's result is
  dropped before the next session, as a consumer that writes or reduces it would. This times
  the windowing itself; both contenders reuse the memory of the previous session's result.
* ``windowing.retained_vs_pandas_rolling`` (no goal, once each): all 80 results kept, 2.6 GB
  of float32 for either contender. The first touch of that much new memory dominates the
  project's time: on a VM whose balloon driver hands freed memory back to the host it costs
  about 1.5 s per GB (sys time), against about 0.2 s per GB once the kernel has the pages.

``windowing.slope_vs_pandas_apply``: the least-squares slope (one of the statistics the
configs use), which pandas has no rolling method for: ``rolling(...).apply`` with a NumPy
slope function, timed on part of one session (it is slow) and compared per value computed
with ``window_stats`` slopes of the whole store at every window length.

``windowing.compile_seconds``: the first call's time in a fresh process with an empty Numba
cache (the kernels are then cached on disk, in ``__pycache__``; the printed line also gives
the first call of a second fresh process, which loads them from there).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from experiments.config.loading import load_config
from experiments.data.dataset import load_sessions
from experiments.windowing.stats import window_frames, window_stats

from . import inputs
from .harness import best_time, best_times, record

STATS = ("mean", "std", "min", "max")
#: the rolling.apply slope baseline is timed on the first session's first columns (frames, columns)
SLOPE_FRAMES = {False: 3000, True: 500}
SLOPE_COLUMNS = 4
FULL = {"n_sessions": 80, "length_range": None}
QUICK = {"n_sessions": 4, "length_range": (500, 1000)}


def ablation_windows() -> tuple[list[str], list[float]]:
    """The ``both`` feature set's channels and the distinct window lengths (s) of ablation.yaml."""
    cfg = load_config("ablation")
    lengths = sorted({float(L) for group in cfg.window.lengths_s for L in group})
    return list(cfg.feature_sets["both"]), lengths


def with_windowing(tables, lengths: list[float], keep: bool = True) -> list[np.ndarray]:
    """The project's windowing of every session (results kept, or each dropped after its session)."""
    out = []
    for t in tables:
        F, _ = window_stats(
            t.X, t.column_valid(), fps=t.fps, lengths_s=lengths, stats=STATS, align="centred"
        )
        if keep:
            out.append(F)
    return out


def with_pandas(
    frames: list[pd.DataFrame], lengths: list[float], fps: float, keep: bool = True
) -> list[np.ndarray]:
    """pandas rolling windows, in the column order of :func:`window_stats` (length, stat, column)."""
    out = []
    for df in frames:
        parts = []
        for L in lengths:
            w = window_frames(L, fps)
            r = df.rolling(
                2 * (w // 2) + 1, center=True, min_periods=1
            )  # window_stats' centred size
            parts += [r.mean(), r.std(ddof=0), r.min(), r.max()]
        F = np.hstack([p.to_numpy(np.float32) for p in parts])
        if keep:
            out.append(F)
    return out


#: the first call of window_stats in a fresh process, as the bench calls it (float32, mask)
_FIRST_CALL = """
import time
import numpy as np
from experiments.windowing import window_stats
X = np.random.default_rng(0).normal(size=(500, 84)).astype(np.float32)
t0 = time.perf_counter()
window_stats(X, X > -2, lengths_s=[2, 4, 8], stats=["mean", "std", "min", "max"])
print(time.perf_counter() - t0)
"""


def first_call_seconds(cache_dir: Path) -> float:
    """Seconds of window_stats' first call in a new process whose Numba cache is ``cache_dir``."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache_dir)}
    root = Path(__file__).resolve().parent.parent
    res = subprocess.run(
        [sys.executable, "-c", _FIRST_CALL], env=env, cwd=root, capture_output=True, text=True
    )
    if res.returncode != 0:
        raise RuntimeError(f"window_stats failed in a fresh process:\n{res.stderr[-2000:]}")
    return float(res.stdout.strip().splitlines()[-1])


def run(work: Path, quick: bool = False) -> list[dict]:
    """Time both windowings over the whole store; returns the records."""
    size = QUICK if quick else FULL
    store_dir = inputs.synth_store(work, size["n_sessions"], size["length_range"])
    channels, lengths = ablation_windows()
    tables = load_sessions(store_dir, channels)
    fps = tables[0].fps
    frames = [pd.DataFrame(np.where(t.column_valid(), t.X, np.nan)) for t in tables]
    n_frames = sum(t.n_frames for t in tables)

    check = slice(0, min(4, len(tables)))
    ours, theirs = with_windowing(tables[check], lengths), with_pandas(frames[check], lengths, fps)
    for t, a, b in zip(tables[check], ours, theirs, strict=True):
        scale = np.nanmax(np.abs(t.X), axis=0)
        atol = np.tile(np.nan_to_num(scale, nan=1.0), len(lengths) * len(STATS)) * 1e-5
        if a.shape != b.shape or not np.all(np.isclose(a, b, rtol=1e-4, atol=atol, equal_nan=True)):
            raise AssertionError(f"{t.session}: window_stats and pandas rolling disagree")

    times = best_times(
        {
            "ours": lambda: with_windowing(tables, lengths, keep=False),
            "pandas": lambda: with_pandas(frames, lengths, fps, keep=False),
        },
        repeat=2,
    )
    t_ours, t_pandas = times["ours"][0], times["pandas"][0]
    del times
    kept = best_times(
        {
            "ours": lambda: with_windowing(tables, lengths),
            "pandas": lambda: with_pandas(frames, lengths, fps),
        },
        repeat=1,
    )
    k_ours, k_pandas = kept["ours"][0], kept["pandas"][0]
    del kept
    with tempfile.TemporaryDirectory() as cache:
        t_compile = first_call_seconds(Path(cache))
        t_cached = first_call_seconds(Path(cache))
    n_out = len(lengths) * len(STATS) * tables[0].X.shape[1]
    print(
        f"windowing: {len(tables)} sessions, {n_frames:,} frames x {n_out} features; each result dropped: "
        f"window_stats {t_ours:.2f} s, pandas rolling {t_pandas:.2f} s ({t_pandas / t_ours:.1f}x); all kept: "
        f"{k_ours:.2f} s, {k_pandas:.2f} s ({k_pandas / k_ours:.1f}x); first call {t_compile:.1f} s compiling, "
        f"{t_cached:.2f} s from the cache"
    )

    # slope, which pandas has no rolling method for: rolling.apply on a subset of columns
    t = tables[0]
    sub = frames[0].iloc[: SLOPE_FRAMES[quick], :SLOPE_COLUMNS]
    w = window_frames(4.0, fps)
    t0 = time.perf_counter()
    theirs = sub.rolling(2 * (w // 2) + 1, center=True, min_periods=1).apply(
        _slope, raw=True, kwargs={"fps": fps}
    )
    t_apply = (time.perf_counter() - t0) / sub.size
    ours, _ = window_stats(sub.to_numpy(), fps=fps, lengths_s=[4.0], stats=["slope"])
    if not np.allclose(ours, theirs.to_numpy(np.float32), rtol=1e-4, atol=1e-6, equal_nan=True):
        raise AssertionError(f"{t.session}: window_stats slope and pandas rolling.apply disagree")
    n_slopes = n_frames * t.X.shape[1] * len(lengths)
    t_slope, _ = best_time(
        lambda: [
            window_stats(x.X, x.column_valid(), fps=fps, lengths_s=lengths, stats=["slope"])[
                0
            ].shape
            for x in tables
        ],
        repeat=2,
    )
    return [
        record(
            "windowing.vs_pandas_rolling",
            n_frames / t_ours,
            "frames/s",
            baseline="pandas DataFrame.rolling (mean, std, min, max; centred; one thread each)",
            baseline_value=n_frames / t_pandas,
            goal=">= 10",
        ),
        record(
            "windowing.retained_vs_pandas_rolling",
            n_frames / k_ours,
            "frames/s",
            baseline=f"pandas DataFrame.rolling, all {len(tables)} results kept "
            f"({n_frames * n_out * 4e-9:.1f} GB each side)",
            baseline_value=n_frames / k_pandas,
        ),
        record(
            "windowing.compile_seconds", t_compile, "s"
        ),  # no baseline: the cached load is printed
        record(
            "windowing.slope_vs_pandas_apply",
            n_slopes / t_slope,
            "values/s",
            baseline=f"pandas rolling.apply (least-squares slope; {sub.size:,} values timed)",
            baseline_value=1.0 / t_apply,
        ),
    ]


def _slope(w: np.ndarray, fps: float) -> float:
    """Least-squares slope (units per second) of a window's finite values, NaN with fewer than two."""
    ok = np.isfinite(w)
    if ok.sum() < 2:
        return np.nan
    t = np.flatnonzero(ok) / fps
    v = w[ok]
    dt = t - t.mean()
    den = (dt * dt).sum()
    return float((dt * (v - v.mean())).sum() / den) if den > 0 else np.nan
