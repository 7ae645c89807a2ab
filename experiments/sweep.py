"""Sweep a config's grid over a feature store and log every configuration to MLflow.

One experiment per config (``tracking.experiment``), a parent run per sweep, one nested
child run per configuration, the ``dummy`` baseline first. Work is grouped by window key
(feature set, window lengths, delay, alignment, statistics): the windowed features are
computed once per group in the parent process and shared with worker processes by
``fork`` (copy-on-write, never pickled per configuration). Workers compute, and draw each
configuration's figures (PNG bytes returned with the result); the parent is the single MLflow
writer, so parallel jobs never contend for the SQLite database, and it only writes files.
Another executor (``experiments.distributed`` runs configurations on Dask) plugs in at one
seam: it takes the pending configurations and a :class:`SweepContext` and yields outcomes;
resume, the parent run, the baseline-first order and the summary stay here.

Resume: a configuration whose hash already has a FINISHED run in the experiment is not
run again (its earlier run is reused in the summary); runs left RUNNING by a killed sweep
are marked KILLED when the next sweep starts. When a sweep ends (or its executor raises),
every child run of its parent still RUNNING is marked KILLED with a ``worker_lost`` tag: its
writer (e.g. a Dask worker logging through an MLflow server, on any host) is gone, and the
configuration runs again on resume unless another run of it finished.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import ctypes
import functools
import gc
import hashlib
import json
import multiprocessing as mp
import os
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from .config_schema import ExperimentConfig
from .evaluate import TrialResult, Windowed, evaluate_trials, window_sessions
from .grid import Trial, WindowKey, expand
from .options import TRACKS
from .provenance import code_version
from .tracking import CONFIG_HASH_TAG, Tracker
from .tracks import selection_metric as track_selection_metric

_SHARED: dict[WindowKey, Windowed] = {}  # windowed features visible to forked workers


@dataclass
class SweepResult:
    """What a sweep did: one row per configuration, the parent run and the best child of each track.

    ``best_run_ids`` / ``selection_metrics``: per track (``personalized``, ``generalized``)
    its best child run, chosen by its own averaging on validation (or LOSO), and that metric.
    ``best_run_id`` / ``selection_metric`` name the personalized track's (the generalized
    track's when the sweep has no personalized configuration), as before tracks existed.
    ``scores``: per-session CCC of the runs computed in this sweep, by run id.
    """

    table: pd.DataFrame
    parent_run_id: str
    best_run_id: str | None
    experiment_id: str
    selection_metric: str
    failed: list[tuple[str, str]] = field(default_factory=list)  # (label, error)
    skipped: int = 0
    best_run_ids: dict[str, str] = field(default_factory=dict)
    selection_metrics: dict[str, str] = field(default_factory=dict)
    scores: dict[str, pd.DataFrame] = field(default_factory=dict)

    @property
    def n_failed(self) -> int:
        return len(self.failed)


def selection_metric(cfg: ExperimentConfig, track: str = "personalized") -> str:
    """The metric ``track``'s configurations are ranked by: its averaging on validation (or LOSO)."""
    return track_selection_metric(track, cfg.protocol)


#: tag (and sweep table column) of a chosen configuration's unseen-listener run: the config hash
#: of the grid configuration it evaluates again (see :func:`run_sweep`)
UNSEEN_OF_TAG = "unseen_of"


def best_per_track(table: pd.DataFrame, protocol: str) -> dict[str, pd.Series]:
    """Each track's best finished configuration of ``table`` (rows with a ``track`` column),
    by the track's own selection metric; the first row wins a tie. Tracks without a scored
    row are left out.

    Only the grid's configurations compete; when the chosen one was also evaluated on unseen
    listeners (a row whose ``unseen_of`` is its config hash, see :func:`run_sweep`), that row
    is returned: the same configuration and scores, plus its ``*_unseen`` metrics.
    """
    out: dict[str, pd.Series] = {}
    if table.empty or "track" not in table:
        return out
    ok = table["status"] != "failed"
    twins = table[ok & table[UNSEEN_OF_TAG].notna()] if UNSEEN_OF_TAG in table else table.iloc[0:0]
    grid = table[ok & ~table.index.isin(twins.index)]
    for track in TRACKS:
        metric = track_selection_metric(track, protocol)
        part = grid[grid["track"] == track]
        if metric in part and part[metric].notna().any():
            best = part.loc[part[metric].idxmax()]
            twin = twins[twins[UNSEEN_OF_TAG] == best.get(CONFIG_HASH_TAG)] if len(twins) else twins
            out[track] = twin.iloc[0] if len(twin) else best
    return out


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
    """Dummy baselines first, then grouped by window key, and within it by fit key (stable)."""
    keys: dict[WindowKey, int] = {}
    fits: dict[Trial, int] = {}
    for t in trials:
        keys.setdefault(t.window_key(), len(keys))
        fits.setdefault(t.fit_key(), len(fits))
    return sorted(trials, key=lambda t: (t.model != "dummy", keys[t.window_key()], fits[t.fit_key()]))


def fit_groups(trials: Sequence[Trial]) -> list[tuple[Trial, ...]]:
    """``trials`` grouped by :meth:`Trial.fit_key` (first appearance order): each group is
    evaluated in one task, its fits shared (see :func:`experiments.evaluate.evaluate_trials`)."""
    groups: dict[Trial, list[Trial]] = {}
    for t in trials:
        groups.setdefault(t.fit_key(), []).append(t)
    return [tuple(g) for g in groups.values()]


def _ensure_baseline(trials: list[Trial]) -> list[Trial]:
    if any(t.model == "dummy" for t in trials) or not trials:
        return trials
    t0 = trials[0]
    return [replace(t0, model="dummy", model_params=(), personalization="global", smooth_s=0.0, rescale="none"), *trials]


@functools.cache
def _malloc_trim():
    try:
        return ctypes.CDLL(None).malloc_trim  # glibc
    except (OSError, AttributeError, TypeError):
        return None


def release_free_memory() -> None:
    """Hand the C heap's free pages back to the system (glibc ``malloc_trim``; a no-op elsewhere).

    Arrays of a few tens of MB (a session's windowed features, a fit's temporaries) come from
    the heap, whose freed pages glibc keeps for reuse: hundreds of MB after a window key's
    features or a fit are dropped, which forked workers would also map."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def with_figures(result: TrialResult) -> TrialResult:
    """``result`` with its two figures drawn (PNG bytes in ``result.figures``), in this process."""
    from .plots import trial_figures

    result.figures = trial_figures(result.predictions, result.truth, result.scores, result.trial.label())
    return result


def _evaluate_shared(trials: Sequence[Trial], figures: bool = False) -> list[TrialResult]:
    """Evaluate one fit group on the shared windowed features; with ``figures``, draw their plots
    here too (in a forked worker: the parent then only writes the bytes)."""
    try:
        results = evaluate_trials(trials, _SHARED[trials[0].window_key()])
        return [with_figures(r) for r in results] if figures else results
    finally:
        release_free_memory()  # an idle worker does not keep the fit's memory


def _worker_init(threads: int | None = None, release: list | None = None) -> None:
    """Set up a forked worker: ``threads`` BLAS / OpenMP threads; ``release`` is emptied here,
    so the worker stops mapping what its items hold (the parent's frame tables)."""
    # the objects inherited from the parent are never garbage here: kept out of the collector,
    # whose traversals would otherwise write to (and so copy) every page of the parent's heap
    gc.freeze()
    if release:
        # the list is this process's copy: the parent keeps its tables; once the parent drops
        # them, their memory is freed, not kept alive by a pool forked earlier
        release.clear()
        release_free_memory()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and stops the pool
    if threads is not None:
        # OpenMP (HistGradientBoosting) and BLAS would each start one thread per core in every
        # worker; oversubscribed, OpenMP spins and a fit takes several times longer
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=threads)
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
    """Write a child run's artifacts: config, CCC matrix, predictions, plots (the figures the
    worker drew, ``result.figures``; drawn here if it drew none)."""
    import yaml

    trial = result.trial
    resolved = {"trial": trial.params(), "resolved": resolved_params(trial), "code": code_version().tags(), "config": cfg_dict}
    (folder / "config.yaml").write_text(yaml.safe_dump(resolved, sort_keys=False))
    result.scores.sort_values(["split", "listener", "story"]).to_csv(folder / "ccc_matrix.csv", index=False)
    own = result.scores[~result.scores.split.str.endswith("_unseen")]
    split_of = dict(zip(own.session, own.split, strict=False))
    for suffix, predictions in (("", result.predictions), ("_unseen", result.unseen_predictions)):
        for sid, pred in predictions.items():
            d = folder / "predictions" / (split_of[sid] + suffix)
            d.mkdir(parents=True, exist_ok=True)
            # 9 decimals: `experiments export` + `score` then reproduce the logged CCC to ~1e-9
            np.savetxt(d / f"{sid}.csv", pred, fmt="%.9f", header="valence", comments="")
    plots = folder / "plots"
    plots.mkdir()
    for name, png in (result.figures or with_figures(result).figures).items():
        (plots / name).write_bytes(png)


@dataclass(frozen=True)
class SweepContext:
    """What an executor needs to evaluate pending configurations (and to log them, if it does)."""

    cfg: ExperimentConfig
    store: Any  # a featurestore.Store or its folder
    channels: tuple[str, ...]  # every role/channel the pending configurations read, sorted
    store_fingerprint: str
    jobs: int
    tracking_uri: str
    experiment: str
    parent_run_id: str
    child_tags: dict[str, str]
    log_artifacts: bool = True


#: per configuration an executor yields (trial, TrialResult, "") or (trial, None, error text),
#: or (trial, row, "") when its worker has logged the child run itself (see :func:`log_child`)
Outcome = tuple[Trial, "TrialResult | dict | None", str]
Executor = Callable[[Sequence[Trial], SweepContext], Iterator[Outcome]]


def local_trials(todo: Sequence[Trial], ctx: SweepContext) -> Iterator[Outcome]:
    """The local executor: windowed features once per window key in this process, configurations
    evaluated here or, with ``ctx.jobs`` > 1, in forked worker processes; yielded in order."""
    from .dataset import load_sessions

    if not todo:
        return
    jobs = ctx.jobs
    tables = load_sessions(ctx.store, list(ctx.channels), target=ctx.cfg.target, splits=ctx.cfg.splits)
    groups: dict[WindowKey, list[Trial]] = {}
    for t in todo:
        groups.setdefault(t.window_key(), []).append(t)
    figures = ctx.log_artifacts
    if figures:
        from .plots import load_backend

        load_backend()  # once here: forked workers inherit matplotlib instead of importing it each
    if jobs > 1 and sum(len(fit_groups(g)) for g in groups.values()) > 1:
        yield from _parallel_trials(tables, groups, jobs, figures)  # empties ``tables`` once it is done with them
        return
    for n, (key, group) in enumerate(groups.items(), 1):
        _SHARED.clear()
        release_free_memory()  # the previous key's features
        try:
            _SHARED[key] = window_sessions(tables, key)
        except Exception as e:  # noqa: BLE001 - a bad window key fails its configurations only
            for t in group:
                yield t, None, f"windowing failed: {type(e).__name__}: {e}"
            continue
        finally:
            if n == len(groups):
                tables.clear()  # every key is windowed: the frame tables are not needed any more
        for fit_group in fit_groups(group):
            try:
                results = _evaluate_shared(fit_group, figures)
            except Exception as e:  # noqa: BLE001 - one failed configuration does not stop the sweep
                for t in fit_group:
                    yield t, None, f"{type(e).__name__}: {e}"
            else:
                yield from ((t, r, "") for t, r in zip(fit_group, results, strict=True))
    _SHARED.clear()


#: models whose fit takes much longer than a linear model's: submitted first within a group,
#: so that the short ones fill the other workers meanwhile (longest-first scheduling)
_SLOW_MODELS = ("hist_gb", "xgboost", "svr")


def _expected_cost(group: Sequence[Trial]) -> int:
    trial = group[0]
    return (trial.model != "dummy") + 2 * (trial.model in _SLOW_MODELS) + (trial.personalization == "per_listener")


def _ready() -> None:
    """A no-op task: submitting it makes a fork pool start all its workers now."""


#: compute the next group's windowed features while the current group runs (faster; holds
#: two groups' features at a time instead of one) ...
PREFETCH_WINDOWS = True
#: ... when their estimated size (see :func:`windowed_nbytes`) is at most this fraction of the
#: memory available at that moment (the current group's fits still grow into the rest)
PREFETCH_MEMORY_FRACTION = 0.25


def windowed_nbytes(tables: Sequence, key: WindowKey) -> int:
    """Estimated size (bytes) of ``window_sessions(tables, key)``: frames x output columns x 4
    (float32); one column per statistic, window length and input column, and per channel
    and window length for ``valid_frac``."""
    if not tables:
        return 0
    first = tables[0]
    idx = [first.channels.index(c) for c in key.channels if c in first.channels]
    n_columns = int(np.isin(first.column_channel, idx).sum())
    stats = [s for s in key.stats if s != "valid_frac"]
    per_frame = len(key.lengths_s) * (n_columns * len(stats) + len(key.channels) * ("valid_frac" in key.stats))
    return sum(t.n_frames for t in tables) * per_frame * 4


def available_memory() -> int | None:
    """Memory (bytes) the system can give without swapping (psutil's ``available``; without
    psutil, the free pages), or None when unknown."""
    try:
        import psutil
    except ImportError:
        try:
            return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            return None
    return int(psutil.virtual_memory().available)


def _parallel_trials(tables, groups: dict[WindowKey, list[Trial]], jobs: int, figures: bool = False) -> Iterator[Outcome]:
    """Configurations of every group in forked worker pools, the next group's windows meanwhile.

    With ``figures``, each worker also draws its configurations' plots (``TrialResult.figures``),
    so the parent, which logs the results one at a time, does not keep the workers waiting.

    One pool per window key, forked right after that key's windowed features are computed, so
    its workers share them copy-on-write; the parent then drops its reference, so the features
    of a group live once, in the workers that use them (never copied per configuration).
    While a group runs, a thread of this process computes the next group's features and its
    pool is forked as soon as they are ready, so that when the current group is down to its
    last long fits the next group's configurations use the free cores. At most ``jobs``
    configurations run at a time over all pools, and at most two groups' features exist at a
    time. Within a group the slowest models start first (longest-first scheduling). Each
    worker runs ``cores // jobs`` BLAS / OpenMP threads. Results are yielded in the order of
    the configurations.

    Memory: the next group's features are computed ahead only when they fit
    ``PREFETCH_MEMORY_FRACTION`` of the available memory (else once the current group is
    done); a pool exits as soon as its configurations are done, not once their results have
    been yielded; and ``tables`` is emptied as soon as the last key is windowed, before the
    last pool is forked; the workers, which never read the tables, drop their copy-on-write
    view of them at start, so no pool keeps them alive after that.
    """
    keys = list(groups)
    threads = max(1, (os.cpu_count() or 1) // jobs)
    fork = mp.get_context("fork")
    windowing = cf.ThreadPoolExecutor(max_workers=1, thread_name_prefix="windowing")
    windows: dict[int, cf.Future] = {}
    pools: dict[int, cf.ProcessPoolExecutor] = {}
    waiting: dict[int, list[tuple[Trial, ...]]] = {}  # launched groups' fit groups not yet submitted
    futures: dict[int, dict[Trial, cf.Future] | str] = {}  # per group: each configuration's future, or why it failed
    slot: dict[Trial, int] = {}  # a configuration's place in the results of its fit group's future
    running: set[cf.Future] = set()

    def start_windowing(i: int) -> None:
        if i < len(keys) and i not in windows and i not in futures:
            windows[i] = windowing.submit(window_sessions, tables, keys[i])

    def prefetch(i: int) -> None:
        if not PREFETCH_WINDOWS or i >= len(keys) or i in windows or i in futures:
            return
        free = available_memory()
        if free is None or windowed_nbytes(tables, keys[i]) <= PREFETCH_MEMORY_FRACTION * free:
            start_windowing(i)

    def launch(i: int) -> None:
        try:
            w = windows.pop(i).result()
        except Exception as e:  # noqa: BLE001 - a bad window key fails its configurations only
            futures[i] = f"windowing failed: {type(e).__name__}: {e}"
            return
        finally:
            if i == len(keys) - 1:
                tables.clear()  # keys are windowed in order: this was the last use of the tables
        group = groups[keys[i]]
        _SHARED.clear()
        _SHARED[keys[i]] = w
        release_free_memory()  # what the windowing freed: the workers would map it for nothing
        pools[i] = cf.ProcessPoolExecutor(max_workers=min(jobs, len(group)), mp_context=fork, initializer=_worker_init, initargs=(threads, tables))
        pools[i].submit(_ready).result()  # with fork, every worker starts now, holding the features
        _SHARED.clear()
        del w
        # the features now live in the workers only: their pages return to the system when the
        # workers exit, instead of staying in this process's heap, mapped by the next pools too
        release_free_memory()
        futures[i] = {}
        waiting[i] = sorted(fit_groups(group), key=_expected_cost, reverse=True)

    def retire_finished() -> None:
        # a pool whose configurations are all done exits now, not once their results have been
        # handed over (logging them takes seconds): its workers still map a group's features
        for j in [j for j in pools if not waiting.get(j) and all(f.done() for f in futures[j].values())]:
            pools.pop(j).shutdown(wait=True)
            waiting.pop(j, None)

    def submit_free() -> None:
        running.difference_update([f for f in running if f.done()])
        retire_finished()
        for i in sorted(waiting):
            while waiting[i] and len(running) < jobs:
                fit_group = waiting[i].pop(0)
                fut = pools[i].submit(_evaluate_shared, fit_group, figures)
                for k, t in enumerate(fit_group):
                    futures[i][t] = fut
                    slot[t] = k
                running.add(fut)

    try:
        for i, key in enumerate(keys):
            if i not in futures:
                start_windowing(i)
                launch(i)
            prefetch(i + 1)
            submit_free()
            for t in groups[key]:
                if isinstance(futures[i], str):
                    yield t, None, futures[i]
                    continue
                while t not in futures[i] or not futures[i][t].done():
                    prefetch(i + 1)  # again: memory may have been freed since
                    nxt = windows.get(i + 1)
                    cf.wait([*running, *([nxt] if nxt is not None else [])], return_when=cf.FIRST_COMPLETED)
                    if nxt is not None and nxt.done():
                        launch(i + 1)  # the next group's workers take the cores this one frees
                    submit_free()
                # before handing over (the caller logs for a while): start queued configurations,
                # and let a pool whose configurations are all done exit
                submit_free()
                try:
                    result = futures[i][t].result()[slot[t]]
                except Exception as e:  # noqa: BLE001 - one failed configuration does not stop the sweep
                    yield t, None, f"{type(e).__name__}: {e}"
                else:
                    yield t, result, ""
                result = None
                release_free_memory()  # what the caller's logging (result, artifact files) left in the heap
            if i in pools:
                pools.pop(i).shutdown(wait=True)
                waiting.pop(i, None)
            futures[i] = "done"  # the results were handed over: do not keep them
    finally:
        for i in list(waiting):
            waiting[i].clear()
        for f in running:
            f.cancel()
        for pool in pools.values():
            pool.shutdown(wait=True, cancel_futures=True)
        windowing.shutdown(wait=True, cancel_futures=True)
        _SHARED.clear()


def log_child(tracker: Tracker, ctx: SweepContext, trial: Trial, result: TrialResult | None, error: str = "") -> dict:
    """Create, fill and close one configuration's child run; returns its row of the sweep table.

    ``result`` None logs a FAILED run carrying ``error`` as a tag.
    """
    ident = _identity(trial)
    run_id = tracker.start_run(trial.label()[:250], tags={**ident, "track": trial.track, **ctx.child_tags}, parent_id=ctx.parent_run_id)
    params = trial.params()
    if result is None:
        tracker.log(run_id, params=params, tags={"error": error[:5000]})
        tracker.finish(run_id, "FAILED")
        return {"run_id": run_id, "status": "failed", "label": trial.label(), **ident, **params, "error": error}
    m = dict(result.metrics)
    m["fit_seconds"] = result.fit_seconds
    m["n_train_rows"] = result.n_train_rows
    tracker.log(run_id, params=params, metrics=m, tags={"warnings": " | ".join(result.warnings)[:5000]} if result.warnings else None)
    if ctx.log_artifacts:
        with tempfile.TemporaryDirectory() as tmp:
            _artifacts(result, ctx.cfg.to_dict(), Path(tmp))
            tracker.log_artifacts(run_id, tmp)
    tracker.finish(run_id, "FINISHED")
    return {"run_id": run_id, "status": "done", "label": trial.label(), **ident, **params, **m}


def resolved_params(trial: Trial) -> dict[str, str]:
    """Every parameter of the configuration's estimator, defaults included (scikit-learn's
    ``get_params(deep=True)`` of the personalization wrapper and its pipeline), plus the fixed
    settings of the evaluation: what exactly ran, for a reader a year later."""
    from .evaluate import CALIBRATION_SHRINKAGE
    from .models import make_model
    from .personalization import make_personalizer

    model = make_personalizer(trial.personalization, make_model(trial.model, trial.hyperparams, seed=trial.seed))
    out = {k: repr(v) for k, v in model.get_params(deep=True).items() if not hasattr(v, "get_params")}
    out["evaluate.calibration_shrinkage"] = repr(CALIBRATION_SHRINKAGE)
    return dict(sorted(out.items()))


def _identity(trial: Trial) -> dict[str, str]:
    """A configuration's identifying tags: its config hash and, for a chosen configuration's
    unseen-listener run, the hash of the grid configuration it evaluates again."""
    tags = {CONFIG_HASH_TAG: trial.hash()}
    if trial.unseen_listener:
        tags[UNSEEN_OF_TAG] = replace(trial, unseen_listener=False).hash()
    return tags


def unseen_listener_trials(table: pd.DataFrame, trials: Sequence[Trial], protocol: str) -> list[Trial]:
    """For each feature set, its chosen generalized-track configuration with the unseen-listener
    protocol on (see :func:`experiments.evaluate.evaluate_trials`); none for a set whose choice
    already has its unseen-listener run in ``table``."""
    by_hash = {t.hash(): t for t in trials}
    out = []
    if table.empty or "features.set" not in table:
        return out
    for _, part in table.groupby("features.set", sort=False):
        best = best_per_track(part, protocol).get("generalized")
        if best is None or pd.notna(best.get(UNSEEN_OF_TAG, np.nan)) or best[CONFIG_HASH_TAG] not in by_hash:
            continue
        out.append(replace(by_hash[best[CONFIG_HASH_TAG]], unseen_listener=True))
    return out


def run_sweep(
    cfg: ExperimentConfig,
    store="features",
    tracking_uri: str | None = None,
    jobs: int | None = None,
    progress: bool = True,
    run_name: str | None = None,
    log_artifacts: bool = True,
    on_result: Callable[[dict], None] | None = None,
    executor: Executor | None = None,
    resume: bool = True,
) -> SweepResult:
    """Run every configuration of ``cfg`` (skipping finished ones) and log them to MLflow.

    A configuration is reused when the experiment holds a FINISHED run with its hash computed
    on a store with the same fingerprint by the same code (the code fingerprint of
    :mod:`experiments.provenance`, which covers every default); ``resume`` False runs every
    configuration again. ``jobs`` None takes the config's ``jobs`` (default 1).

    ``executor`` None evaluates here (see :func:`local_trials`); another, such as the Dask
    executor of ``experiments.distributed``, gets the pending configurations and a
    :class:`SweepContext` and yields their outcomes.

    Returns a :class:`SweepResult` whose ``table`` has one row per configuration with its
    run id, status (``done``, ``reused``, ``failed``), params and metrics.
    """
    jobs = int(jobs if jobs is not None else (cfg.jobs or 1))
    t_start = time.perf_counter()
    trials = _order(_ensure_baseline(expand(cfg)))
    tracker = Tracker(tracking_uri or cfg.tracking.uri, cfg.tracking.experiment)
    reaped = tracker.reap_stale()
    fingerprint, backend = store_fingerprint(store)
    code = code_version()
    finished = tracker.finished_by_hash(store_fingerprint=fingerprint, code_fingerprint=code.fingerprint) if resume else {}
    metrics_by_track = {track: selection_metric(cfg, track) for track in TRACKS}

    parent = tracker.start_run(
        run_name or f"sweep {time.strftime('%Y-%m-%d %H:%M:%S')}",
        tags={
            CONFIG_HASH_TAG + "_sweep": cfg.hash(),
            "store_fingerprint": fingerprint,
            **code.tags(),
            "face_backend": backend,
            "resume": str(bool(resume)).lower(),
            "sweep": "parent",
            "executor": getattr(executor, "name", "local"),
        },
    )
    tracker.log(parent, params={"target": cfg.target, "protocol": cfg.protocol, "n_configurations": len(trials),
                                "feature_sets": ",".join(cfg.feature_set), "store": str(store), "jobs": jobs})
    with tempfile.TemporaryDirectory() as tmp:  # the resolved config (every default filled in) and the code
        import yaml

        (Path(tmp) / "config.yaml").write_text(yaml.safe_dump({"config": cfg.to_dict(), "code": code.tags()}, sort_keys=False))
        tracker.log_artifacts(parent, tmp)
    if reaped:
        tracker.log(parent, tags={"reaped_runs": ",".join(reaped)})

    rows: list[dict] = []
    scores: dict[str, pd.DataFrame] = {}
    failed: list[tuple[str, str]] = []
    todo: list[Trial] = []
    def reused(t: Trial) -> dict | None:
        old = finished.get(t.hash())
        if old is None:
            return None
        return {"run_id": old.info.run_id, "status": "reused", "label": t.label(), **_identity(t), **t.params(), **old.data.metrics}

    for t in trials:
        row = reused(t)
        if row is not None:
            rows.append(row)
        else:
            todo.append(t)

    status = "FAILED"
    bar = tqdm(total=len(todo), desc="configurations", unit="cfg", disable=not progress)
    try:
        ctx = SweepContext(
            cfg=cfg, store=store, channels=tuple(sorted({c for t in todo for c in t.channels})),
            store_fingerprint=fingerprint, jobs=jobs, tracking_uri=tracker.uri, experiment=cfg.tracking.experiment,
            parent_run_id=parent, log_artifacts=log_artifacts,
            child_tags={"store_fingerprint": fingerprint, **code.tags(), "face_backend": backend},
        )

        def record(trial: Trial, result: TrialResult | dict | None, error: str = "") -> None:
            row = result if isinstance(result, dict) else log_child(tracker, ctx, trial, result, error)
            if row["status"] == "failed":
                failed.append((trial.label(), row.get("error", error)))
            rows.append(row)
            if isinstance(result, TrialResult) and row["status"] != "failed":
                scores[row["run_id"]] = result.scores
            bar.update(1)
            best = {track: max((r.get(m, -np.inf) for r in rows if r["status"] != "failed" and r.get("track") == track),
                               default=np.nan) for track, m in metrics_by_track.items()}
            bar.set_postfix_str(f"best {cfg.protocol} pers={best['personalized']:.3f} gen={best['generalized']:.3f} "
                                f"failed={len(failed)}")
            if on_result:
                on_result(rows[-1])

        with contextlib.closing((executor or local_trials)(todo, ctx)) as outcomes:
            for trial, result, error in outcomes:
                record(trial, result, error)
        if cfg.unseen_listener:
            # each feature set's chosen generalized configuration, again, on listeners left out of
            # training: chosen on validation first, so the costly protocol runs once per set
            extra = []
            for t in unseen_listener_trials(pd.DataFrame(rows), trials, cfg.protocol):
                row = reused(t)
                if row is not None:
                    rows.append(row)
                else:
                    extra.append(t)
            if extra:
                bar.total += len(extra)
                bar.set_description("unseen listeners")
                ctx = replace(ctx, channels=tuple(sorted({c for t in extra for c in t.channels})))
                with contextlib.closing((executor or local_trials)(extra, ctx)) as outcomes:
                    for trial, result, error in outcomes:
                        record(trial, result, error)
                todo += extra
        status = "FINISHED"
    except KeyboardInterrupt:
        status = "KILLED"
        raise
    finally:
        bar.close()
        _SHARED.clear()
        _reap_lost_children(tracker, parent, rows)
        table = pd.DataFrame(rows)
        best_ids = _summarise(tracker, parent, table, cfg.protocol, time.perf_counter() - t_start, len(todo))
        tracker.finish(parent, status)
    main_track = "personalized" if "personalized" in best_ids or "generalized" not in best_ids else "generalized"
    return SweepResult(table, parent, best_ids.get(main_track), tracker.experiment_id, metrics_by_track[main_track], failed,
                       skipped=len(trials) - len(todo), best_run_ids=best_ids, selection_metrics=metrics_by_track, scores=scores)


def _reap_lost_children(tracker: Tracker, parent: str, rows: list[dict]) -> list[str]:
    """Mark this sweep's child runs still RUNNING as KILLED (their writer was lost; see
    :meth:`Tracker.reap_children`) and list them on the parent (tag ``lost_runs``).

    Best effort: it runs while the sweep ends, possibly on an error, which it must not hide.
    """
    finished = {r[CONFIG_HASH_TAG]: r["run_id"] for r in rows if r.get("status") == "done" and CONFIG_HASH_TAG in r}
    try:
        lost = tracker.reap_children(parent, finished)
        if lost:
            tracker.log(parent, tags={"lost_runs": ",".join(lost)})
    except Exception as e:  # noqa: BLE001 - e.g. the tracking server is gone too
        import warnings

        warnings.warn(f"could not check the child runs of {parent} for lost workers: {type(e).__name__}: {e}", stacklevel=2)
        return []
    return lost


#: per track, the splits whose numbers the parent run and the summary report for its best child
_REPORTED_SPLITS = {"personalized": ("val", "loso", "test"), "generalized": ("val", "loso", "test", "val_unseen", "test_unseen")}


def track_summary(table: pd.DataFrame, protocol: str) -> pd.DataFrame:
    """One row per track: its best configuration (chosen on validation or LOSO under the track's own
    averaging) with each split's CCC under that averaging, its 95 % interval over listeners and the
    chance level (95th percentile of circularly shifted predictions)."""
    rows = []
    for track, best in best_per_track(table, protocol).items():
        row = {"track": track, "run_id": str(best.run_id), "label": best.label,
               "chosen_on": track_selection_metric(track, protocol)}
        for split in _REPORTED_SPLITS[track]:
            name = f"{split}.ccc_{track}"
            if name in best and pd.notna(best[name]):
                row[name] = float(best[name])
                for suffix in (".ci_low", ".ci_high", ".chance_q95"):
                    if name + suffix in best and pd.notna(best[name + suffix]):
                        row[name + suffix] = float(best[name + suffix])
        rows.append(row)
    return pd.DataFrame(rows)


def summary_markdown(summary: pd.DataFrame) -> str:
    """The per-track summary as Markdown: value [95 % interval] (chance 95th percentile)."""
    lines = ["# Best configuration of each track", ""]
    for row in summary.to_dict("records"):
        lines += [f"## {row['track']} track", "", f"- configuration: {row['label']}", f"- run: `{row['run_id']}`",
                  f"- chosen on: `{row['chosen_on']}`", "", "| split | CCC | 95 % interval (listeners) | chance (95th pct.) |",
                  "|---|---|---|---|"]
        for split in _REPORTED_SPLITS[row["track"]]:
            name = f"{split}.ccc_{row['track']}"
            if name in row and pd.notna(row[name]):
                ci = f"[{row.get(name + '.ci_low', float('nan')):.3f}, {row.get(name + '.ci_high', float('nan')):.3f}]"
                lines.append(f"| {split} | {row[name]:.3f} | {ci} | {row.get(name + '.chance_q95', float('nan')):.3f} |")
        lines.append("")
    lines += ["Each track is chosen on validation (or LOSO) under its own averaging and reported once on test:",
              "personalized = mean over listeners of each listener's mean CCC; generalized = mean over stories of",
              "each story's mean CCC. `*_unseen`: listeners left out of training (generalized track only)."]
    return "\n".join(lines) + "\n"


def _summarise(tracker: Tracker, parent: str, table: pd.DataFrame, protocol: str, seconds: float, n_new: int) -> dict[str, str]:
    """Tag the parent with the best child of each track and attach the summary tables; returns
    track -> best run id."""
    metrics: dict[str, float] = {"sweep_seconds": seconds, "n_new_runs": n_new}
    tags: dict[str, str] = {}
    summary = track_summary(table, protocol)
    best_ids: dict[str, str] = {}
    for row in summary.to_dict("records"):
        track = row["track"]
        best_ids[track] = row["run_id"]
        tags[f"best_run_id_{track}"] = row["run_id"]
        tags[f"best_label_{track}"] = str(row["label"])[:5000]
        metrics.update({f"best_{track}.{k}": v for k, v in row.items() if k.startswith(tuple(f"{s}." for s in _REPORTED_SPLITS[track]))})
    main = best_ids.get("personalized") or best_ids.get("generalized")
    if main:
        # one name for the headline run, as before tracks existed: the personalized track's
        tags["best_run_id"] = main
        tags["best_label"] = tags.get("best_label_personalized", tags.get("best_label_generalized", ""))
    tracker.log(parent, metrics=metrics, tags=tags or None)
    if not table.empty:
        metric = track_selection_metric("personalized", protocol)
        with tempfile.TemporaryDirectory() as tmp:
            cols = [c for c in ["run_id", "status", "track", "label", metric, track_selection_metric("generalized", protocol),
                                "test.ccc_personalized", "test.ccc_generalized", "test_unseen.ccc_generalized"] if c in table]
            ordered = table.sort_values(metric, ascending=False) if metric in table else table
            ordered.to_csv(Path(tmp) / "summary.csv", index=False)
            listing = _markdown_table(_with_intervals(ordered, cols))
            (Path(tmp) / "summary.md").write_text(summary_markdown(summary) + "\n# Every configuration\n\n" + listing + "\n")
            if not summary.empty:
                summary.to_csv(Path(tmp) / "tracks.csv", index=False)
            tracker.log_artifacts(parent, tmp)
    return best_ids


def _with_intervals(table: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    """``table[cols]`` with every CCC written as ``value [ci_low, ci_high]`` (95 % over listeners)."""
    out = table[cols].copy()
    for c in cols:
        if ".ccc_" not in c:
            continue
        low, high = table.get(f"{c}.ci_low"), table.get(f"{c}.ci_high")
        out[c] = [
            "" if pd.isna(v) else f"{v:.3f}" if low is None or pd.isna(lo) else f"{v:.3f} [{lo:.2f}, {hi:.2f}]"
            for v, lo, hi in zip(table[c], low if low is not None else table[c], high if high is not None else table[c], strict=True)
        ]
    return out


def _markdown_table(table: pd.DataFrame) -> str:
    """``table`` as a Markdown table (text cells as they are, numbers with 3 decimals)."""
    def cell(v) -> str:
        if isinstance(v, float):
            return "" if pd.isna(v) else f"{v:.3f}"
        return str(v).replace("|", "\\|")

    lines = ["| " + " | ".join(map(str, table.columns)) + " |", "|" + "---|" * len(table.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in table.itertuples(index=False)]
    return "\n".join(lines)
