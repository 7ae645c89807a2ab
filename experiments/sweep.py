"""Sweep a config's grid over a feature store and log every configuration to MLflow.

One experiment per config (``tracking.experiment``), a parent run per sweep, one nested
child run per configuration, the ``dummy`` baseline first. Work is grouped by window key
(feature set, window lengths, delay, alignment, statistics): the windowed features are
computed once per group in the parent process and shared with worker processes by
``fork`` (copy-on-write, never pickled per configuration). Workers only compute; the parent
is the single MLflow writer, so parallel jobs never contend for the SQLite database.

Resume: a configuration whose hash already has a FINISHED run in the experiment is not
run again (its earlier run is reused in the summary); runs left RUNNING by a killed sweep
are marked KILLED when the next sweep starts.
"""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import json
import multiprocessing as mp
import os
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from .config import ExperimentConfig, Trial, WindowKey, expand
from .evaluate import TrialResult, Windowed, evaluate_trial, window_sessions
from .tracking import CONFIG_HASH_TAG, Tracker, git_commit

_SHARED: dict[WindowKey, Windowed] = {}  # windowed features visible to forked workers


@dataclass
class SweepResult:
    """What a sweep did: one row per configuration, the parent run and the best child."""

    table: pd.DataFrame
    parent_run_id: str
    best_run_id: str | None
    experiment_id: str
    selection_metric: str
    failed: list[tuple[str, str]] = field(default_factory=list)  # (label, error)
    skipped: int = 0

    @property
    def n_failed(self) -> int:
        return len(self.failed)


def selection_metric(cfg: ExperimentConfig) -> str:
    """The metric configurations are ranked by: validation (or LOSO) personalized CCC."""
    return "loso.ccc_personalized" if cfg.protocol == "loso" else "val.ccc_personalized"


def store_fingerprint(store) -> tuple[str, str]:
    """(hash of every shard's channel cache keys and labels, face backend name).

    Labels are hashed by content (they are small): re-imported or corrected ratings change the
    scores, so runs on the old labels must not be reused.
    """
    from featurestore import Store

    st = store if isinstance(store, Store) else Store(store)
    h = hashlib.sha256()
    backend = "none"
    for s in st.list_sessions():
        keys = st.cache_keys(s)
        targets = st.label_targets(s)
        h.update(json.dumps([s, sorted(keys.items()), targets]).encode())
        for target in targets:
            h.update(np.ascontiguousarray(st.labels(s, target).to_numpy()).tobytes())
        if backend == "none" and "listener/face_geom" in keys:
            backend = str(st.read_channel(s, "listener/face_geom").params.get("backend", "unknown"))
    return h.hexdigest()[:16], backend


def _order(trials: Sequence[Trial]) -> list[Trial]:
    """Dummy baselines first, then grouped by window key (stable)."""
    keys: dict[WindowKey, int] = {}
    for t in trials:
        keys.setdefault(t.window_key(), len(keys))
    return sorted(trials, key=lambda t: (t.model != "dummy", keys[t.window_key()]))


def _ensure_baseline(trials: list[Trial]) -> list[Trial]:
    if any(t.model == "dummy" for t in trials) or not trials:
        return trials
    t0 = trials[0]
    return [replace(t0, model="dummy", model_params=(), personalization="global", smooth_s=0.0, rescale="none"), *trials]


def _evaluate_shared(trial: Trial) -> TrialResult:
    return evaluate_trial(trial, _SHARED[trial.window_key()])


def _worker_init() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and stops the pool
    # a killed sweep (SIGKILL) cannot stop its pool: a worker leaves on its own once orphaned,
    # instead of waiting forever on the task queue with a copy of the features
    parent = os.getppid()

    def leave_when_orphaned() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=leave_when_orphaned, name="orphan-watch", daemon=True).start()


def _artifacts(result: TrialResult, cfg_dict: dict, folder: Path) -> None:
    """Write a child run's artifacts: config, CCC matrix, predictions, plots."""
    import yaml

    from .plots import plot_listener_ccc, plot_predictions

    trial = result.trial
    (folder / "config.yaml").write_text(yaml.safe_dump({"trial": trial.params(), "config": cfg_dict}, sort_keys=False))
    result.scores.sort_values(["split", "listener", "story"]).to_csv(folder / "ccc_matrix.csv", index=False)
    split_of = dict(zip(result.scores.session, result.scores.split, strict=False))
    for sid, pred in result.predictions.items():
        d = folder / "predictions" / split_of[sid]
        d.mkdir(parents=True, exist_ok=True)
        # 9 decimals: `experiments export` + `score` then reproduce the logged CCC to ~1e-9
        np.savetxt(d / f"{sid}.csv", pred, fmt="%.9f", header="valence", comments="")
    plots = folder / "plots"
    plots.mkdir()
    plot_predictions(result.predictions, result.truth, result.scores, plots / "predicted_vs_true.png", title=trial.label())
    plot_listener_ccc(result.scores, plots / "ccc_per_listener.png", title=f"CCC per listener: {trial.label()}")


def run_sweep(
    cfg: ExperimentConfig,
    store="features",
    tracking_uri: str | None = None,
    jobs: int | None = None,
    progress: bool = True,
    run_name: str | None = None,
    log_artifacts: bool = True,
    on_result: Callable[[dict], None] | None = None,
) -> SweepResult:
    """Run every configuration of ``cfg`` (skipping finished ones) and log them to MLflow.

    A configuration is reused when the experiment holds a FINISHED run with its hash computed
    on a store with the same fingerprint. ``jobs`` None takes the config's ``jobs`` (default 1).

    Returns a :class:`SweepResult` whose ``table`` has one row per configuration with its
    run id, status (``done``, ``reused``, ``failed``), params and metrics.
    """
    from .dataset import load_sessions

    jobs = int(jobs if jobs is not None else (cfg.jobs or 1))
    t_start = time.perf_counter()
    trials = _order(_ensure_baseline(expand(cfg)))
    tracker = Tracker(tracking_uri or cfg.tracking.uri, cfg.tracking.experiment)
    reaped = tracker.reap_stale()
    fingerprint, backend = store_fingerprint(store)
    finished = tracker.finished_by_hash(store_fingerprint=fingerprint)
    cfg_dict = cfg.to_dict()
    metric = selection_metric(cfg)

    parent = tracker.start_run(
        run_name or f"sweep {time.strftime('%Y-%m-%d %H:%M:%S')}",
        tags={
            CONFIG_HASH_TAG + "_sweep": cfg.hash(),
            "store_fingerprint": fingerprint,
            "git_commit": git_commit(),
            "face_backend": backend,
            "sweep": "parent",
        },
    )
    tracker.log(parent, params={"target": cfg.target, "protocol": cfg.protocol, "n_configurations": len(trials),
                                "feature_sets": ",".join(cfg.feature_set), "store": str(store), "jobs": jobs})
    if reaped:
        tracker.log(parent, tags={"reaped_runs": ",".join(reaped)})

    rows: list[dict] = []
    failed: list[tuple[str, str]] = []
    todo: list[Trial] = []
    for t in trials:
        old = finished.get(t.hash())
        if old is not None:
            rows.append({"run_id": old.info.run_id, "status": "reused", "label": t.label(), CONFIG_HASH_TAG: t.hash(), **t.params(), **old.data.metrics})
        else:
            todo.append(t)

    status = "FAILED"
    bar = tqdm(total=len(todo), desc="configurations", unit="cfg", disable=not progress)
    try:
        if todo:
            channels = sorted({c for t in todo for c in t.channels})
            tables = load_sessions(store, channels, target=cfg.target, splits=cfg.splits)
        groups: dict[WindowKey, list[Trial]] = {}
        for t in todo:
            groups.setdefault(t.window_key(), []).append(t)
        child_tags = {"store_fingerprint": fingerprint, "git_commit": git_commit(), "face_backend": backend}

        def record(trial: Trial, result: TrialResult | None, error: str = "") -> None:
            run_id = tracker.start_run(trial.label()[:250], tags={CONFIG_HASH_TAG: trial.hash(), **child_tags}, parent_id=parent)
            params = trial.params()
            if result is None:
                tracker.log(run_id, params=params, tags={"error": error[:5000]})
                tracker.finish(run_id, "FAILED")
                failed.append((trial.label(), error))
                rows.append({"run_id": run_id, "status": "failed", "label": trial.label(), CONFIG_HASH_TAG: trial.hash(), **params, "error": error})
            else:
                m = dict(result.metrics)
                m["fit_seconds"] = result.fit_seconds
                m["n_train_rows"] = result.n_train_rows
                tracker.log(run_id, params=params, metrics=m, tags={"warnings": " | ".join(result.warnings)[:5000]} if result.warnings else None)
                if log_artifacts:
                    with tempfile.TemporaryDirectory() as tmp:
                        _artifacts(result, cfg_dict, Path(tmp))
                        tracker.log_artifacts(run_id, tmp)
                tracker.finish(run_id, "FINISHED")
                rows.append({"run_id": run_id, "status": "done", "label": trial.label(), CONFIG_HASH_TAG: trial.hash(), **params, **m})
            bar.update(1)
            best = max((r.get(metric, -np.inf) for r in rows if r["status"] != "failed"), default=np.nan)
            bar.set_postfix_str(f"best {metric}={best:.3f} failed={len(failed)}")
            if on_result:
                on_result(rows[-1])

        for key, group in groups.items():
            _SHARED.clear()
            try:
                _SHARED[key] = window_sessions(tables, key)
            except Exception as e:  # noqa: BLE001 - a bad window key fails its configurations only
                for t in group:
                    record(t, None, f"windowing failed: {type(e).__name__}: {e}")
                continue
            if jobs <= 1 or len(group) == 1:
                for t in group:
                    try:
                        record(t, _evaluate_shared(t))
                    except Exception as e:  # noqa: BLE001 - one failed configuration does not stop the sweep
                        record(t, None, f"{type(e).__name__}: {e}")
            else:
                ctx = mp.get_context("fork")
                with cf.ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=_worker_init) as pool:
                    futs = {pool.submit(_evaluate_shared, t): t for t in group}
                    try:
                        # logged in submission order (not as completed): the dummy baseline stays first
                        for fut, t in futs.items():
                            try:
                                record(t, fut.result())
                            except Exception as e:  # noqa: BLE001
                                record(t, None, f"{type(e).__name__}: {e}")
                    except BaseException:
                        for f in futs:
                            f.cancel()
                        raise
        status = "FINISHED"
    except KeyboardInterrupt:
        status = "KILLED"
        raise
    finally:
        bar.close()
        _SHARED.clear()
        table = pd.DataFrame(rows)
        best_id = _summarise(tracker, parent, table, metric, time.perf_counter() - t_start, len(todo))
        tracker.finish(parent, status)
    return SweepResult(table, parent, best_id, tracker.experiment_id, metric, failed, skipped=len(trials) - len(todo))


def _summarise(tracker: Tracker, parent: str, table: pd.DataFrame, metric: str, seconds: float, n_new: int) -> str | None:
    """Tag the parent with its best child and attach the summary table."""
    best_id = None
    metrics: dict[str, float] = {"sweep_seconds": seconds, "n_new_runs": n_new}
    if not table.empty and metric in table and table[metric].notna().any():
        best = table.loc[table[metric].idxmax()]
        best_id = str(best.run_id)
        tags = {"best_run_id": best_id, "best_label": best.label}
        for k in ("val.ccc_personalized", "val.ccc_generalized", "test.ccc_personalized", "test.ccc_generalized",
                  "loso.ccc_personalized", "loso.ccc_generalized"):
            if k in best and pd.notna(best[k]):
                metrics[f"best.{k}"] = float(best[k])
        tracker.log(parent, metrics=metrics, tags=tags)
    else:
        tracker.log(parent, metrics=metrics)
    if not table.empty:
        with tempfile.TemporaryDirectory() as tmp:
            cols = [c for c in ["run_id", "status", "label", metric, "val.ccc_generalized", "test.ccc_personalized",
                                "test.ccc_generalized", "loso.ccc_generalized"] if c in table]
            summary = table.sort_values(metric, ascending=False) if metric in table else table
            summary.to_csv(Path(tmp) / "summary.csv", index=False)
            (Path(tmp) / "summary.md").write_text(summary[cols].to_markdown(index=False, floatfmt=".3f") if _has_tabulate() else summary[cols].to_string(index=False))
            tracker.log_artifacts(parent, tmp)
    return best_id


def _has_tabulate() -> bool:
    try:
        import tabulate  # noqa: F401
    except ImportError:
        return False
    return True
