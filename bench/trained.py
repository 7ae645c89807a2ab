"""Saved models on the full-size synthetic store: what saving costs, and a causal model frame by frame.

Configurations of the packaged configs, each fitted on the training stories of the synthetic
store (80 sessions, 633,850 frames; ``--quick``: 8 short sessions) with the ``both`` feature
set (84 frame-table columns):

* ``trained.<model>.fit_seconds``: :func:`~experiments.trained.model.train_model` (load,
  window, fit and post-processing, as ``experiments save`` does before logging);
* ``trained.<model>.log_seconds``: the MLflow pyfunc written and logged into a run of a SQLite
  tracking store (:func:`~experiments.trained.pyfunc.log_model`), ``trained.<model>.size_mb``
  the fitted parts' bytes;
* ``trained.<model>.predict_seconds_per_session``: a stored session predicted from its frame
  table (loading excluded).

Models: the default config's ridge per listener (closed form, listener rescaling: arrays) and its
XGBoost (200 trees of depth 3) with per-listener calibration (skops and XGBoost JSON). Its SVRs
are left out: at this size the kernel SVR (O(n^2) in 56,000 training rows) and the linear SVR
per listener were still fitting after 6 minutes each.

``trained.stream.*``: the causal config's ridge per listener (windows of 2 and 8 s ending 1 s
before the frame, a 4 s trailing mean, listener rescaling) fed one frame at a time through
:class:`~experiments.trained.stream.StreamingModel` for a whole session, on one thread:
``latency_p50_ms`` and ``latency_p99_ms`` per frame (goal: p99 < 5 ms) and ``frames_per_s``
against the label rate (goal: >= 100x real time at 25 fps); ``max_abs_diff`` against the offline
prediction of the session (goal: <= 1e-9).
"""

from __future__ import annotations

import tempfile
import time
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from experiments.config.loading import load_config
from experiments.studies.sweep import grid_trials
from experiments.tracking.tracker import Tracker
from experiments.trained.model import frame_table, store_tables, train_model
from experiments.trained.pyfunc import log_model, logged_bytes
from experiments.trained.stream import StreamingModel

from . import inputs
from .harness import record

FULL = {"n_sessions": 80, "length_range": None}
QUICK = {"n_sessions": 8, "length_range": (500, 1000)}


def _pick(config: str, model: str, **changes: object):
    """The first ``both`` configuration of ``config``'s grid with ``model`` and ``changes``."""
    for t in grid_trials(load_config(config)):
        if t.model == model and t.feature_set == "both":
            if all(getattr(t, k) == v for k, v in changes.items()):
                return replace(t, unseen_listener=False, unseen_nested=False)
    raise LookupError((config, model, changes))


def _saving(store: Path, tracker: Tracker) -> list[dict]:
    out = []
    choices = {
        "ridge": _pick("default", "ridge", personalization="per_listener", rescale="listener"),
        "xgboost": _pick("default", "xgboost", personalization="global_calibrated"),
    }
    for name, trial in choices.items():
        t0 = time.perf_counter()
        model = train_model(trial, store)
        fit_s = time.perf_counter() - t0
        tables = store_tables(store, trial, model.provenance["scored_sessions"][:1])
        run_id = tracker.start_run(f"bench {name}")
        log_s = log_model(tracker.client, run_id, model, frame_table(tables[0]))
        tracker.finish(run_id)
        size = logged_bytes(tracker.client, run_id) / 1e6
        t0 = time.perf_counter()
        model.predict_table(tables[0])
        predict_s = time.perf_counter() - t0
        label = trial.label()
        out += [
            record(f"trained.{name}.fit_seconds", fit_s, "s", baseline=label),
            record(f"trained.{name}.log_seconds", log_s, "s", baseline=label),
            record(f"trained.{name}.size_mb", size, "MB", baseline=label),
            record(f"trained.{name}.predict_seconds_per_session", predict_s, "s", baseline=label),
        ]
    return out


def _streaming(store: Path) -> list[dict]:
    trial = _pick(
        "causal", "ridge", personalization="per_listener", rescale="listener", smooth_s=4.0
    )
    model = train_model(trial, store)
    table = store_tables(store, trial, model.provenance["scored_sessions"][:1])[0]
    offline = model.predict_table(table)
    stream = StreamingModel(model, table.listener)
    stream.push(table.X[0], table.valid[0])  # compiled on first use
    stream = StreamingModel(model, table.listener)
    got = np.empty(table.n_frames)
    seconds = np.empty(table.n_frames)
    for i in range(table.n_frames):
        t0 = time.perf_counter()
        got[i] = stream.push(table.X[i], table.valid[i])
        seconds[i] = time.perf_counter() - t0
    label = f"{trial.label()}, {table.n_frames} frames of {table.session}"
    fps = 1.0 / seconds.mean()
    return [
        record(
            "trained.stream.latency_p50_ms", float(np.median(seconds)) * 1e3, "ms", baseline=label
        ),
        record(
            "trained.stream.latency_p99_ms",
            float(np.quantile(seconds, 0.99)) * 1e3,
            "ms",
            baseline=label,
            goal="< 5 ms",
        ),
        record(
            "trained.stream.frames_per_s",
            fps,
            "frames/s",
            baseline="real time (25 frames/s)",
            baseline_value=25.0,
            goal=">= 100",
        ),
        record(
            "trained.stream.max_abs_diff",
            float(np.max(np.abs(got - offline))),
            "abs",
            baseline="the offline prediction of the session",
            goal="<= 1e-9 abs",
        ),
    ]


def run(work: Path, quick: bool = False) -> list[dict]:
    store = inputs.synth_store(work, **(QUICK if quick else FULL))
    with warnings.catch_warnings(), threadpool_limits(1), tempfile.TemporaryDirectory() as tmp:
        warnings.simplefilter("ignore")
        tracker = Tracker(f"sqlite:///{tmp}/mlflow.db", "bench-trained")
        return _saving(store, tracker) + _streaming(store)
