"""The Dask executor: a fit group per task (a slow one split into its fits), the local executor's outcomes.

:func:`experiments.studies.distributed.run_sweep_dask` (``experiments sweep --executor dask``) starts a
local cluster or joins one and hands :class:`DaskExecutor` to the sweep; only the evaluation
moves to the workers (resume, the parent run, the baseline first and the summary stay with
the sweep):

* every worker reads the feature store itself (so on a real cluster the store must be on a
  file system every worker mounts at the same path) and keeps the frame tables and the
  windowed features of the last window keys in memory, so the configurations of one window
  key that land on the same worker share them; nothing is shipped from the client but the
  configuration;
* MLflow: with a SQLite (or other file) tracking URI the client is the only writer, as in the
  local sweep: workers return results (with their figures drawn, as PNG bytes) and the client
  logs them in configuration order. With an MLflow tracking server (``http://``/``https://``,
  e.g. ``make mlflow-server``) every worker logs its own child runs (params, metrics,
  artifacts) through the server and returns only the summary row, so logging and plotting
  scale with the workers.

A slow model's fit group (a spec's ``slow``: gradient boosting, SVR)
is split into its separate fits as in the local executor (its main fit, each out-of-fold and
unseen-listener fit: :func:`experiments.evaluation.evaluate.group_fit_parts`), each a task of its
own, and scored from their predictions by one more task; the same results as fitted whole.

Baselines (``dummy``) are evaluated first; with worker logging the other configurations are
submitted once the baselines are logged, so the baseline is the first child run either way.

Before any task, the workers' code is compared with the client's (:func:`check_worker_code`):
a worker importing another checkout, version or uncommitted change, or other versions of the
libraries in the code fingerprint (numpy, scikit-learn, XGBoost, numba, ...), is refused
(:class:`WorkerCodeMismatch`), as its runs would carry results this code did not compute.

A worker that dies while it logs a child run leaves that run RUNNING; when the sweep ends (or
the executor raises) the client marks every child of its parent run still RUNNING as KILLED
with a ``worker_lost`` tag (:meth:`experiments.tracking.Tracker.reap_children`), so resume
runs the configuration again unless Dask's retry of the task finished it. A dead worker also
loses the results it held: Dask computes those tasks again, and a worker-logged task whose
configuration this sweep already logged FINISHED returns that run instead of logging it twice.

Dask's ``distributed`` package is imported only where a cluster is used (a second or more of
import time), so that importing this module, as the command line does, stays light.
"""

from __future__ import annotations

import importlib
import os
import threading
import uuid
from collections import OrderedDict
from collections.abc import Generator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from featurestore import Store

from ..config.grid import Trial, WindowKey
from ..config.models import BASELINE
from ..data.dataset import DatasetError, load_sessions
from ..data.session_table import SessionTable
from ..evaluation.evaluate import (
    TrialResult,
    Windowed,
    evaluate_part,
    evaluate_trials,
    group_fit_parts,
    window_sessions,
)
from ..evaluation.fitting import FitPart, PartResult
from ..evaluation.plots import load_backend
from ..tracking.child_runs import RunRow, log_child, run_row
from ..tracking.provenance import code_version
from ..tracking.tracker import Tracker
from .base import (
    Executor,
    Outcome,
    SweepContext,
    fit_groups,
    split_into_parts,
    window_groups,
    with_figures,
)

#: windowed feature sets a worker keeps (least recently used dropped first)
WINDOW_CACHE_SIZE = 2

# per worker process: frame tables of one store/channel set, windowed features, MLflow clients
_LOCK = threading.Lock()
_TABLES: dict[tuple, list[SessionTable]] = {}
_WINDOWED: OrderedDict[tuple, Windowed] = OrderedDict()
_TRACKERS: dict[tuple[str, str], Tracker] = {}


@dataclass(frozen=True)
class WorkerJob:
    """What every task of one sweep carries: the context (store as an absolute folder), the
    sessions the client saw, and whether the worker logs its child runs itself."""

    ctx: SweepContext
    sessions: tuple[str, ...]
    log_runs: bool

    def tables_key(self) -> tuple:
        c = self.ctx
        splits = tuple((k, tuple(v)) for k, v in sorted(c.cfg.splits.items()))
        return (
            str(c.store),
            c.channels,
            c.cfg.target,
            splits,
            c.store_fingerprint,
            self.sessions,
            c.cfg.gold_standard,  # the labels differ by gold standard
        )


def _worker_name() -> str:
    try:
        from distributed import get_worker  # dask: see the module docstring

        return get_worker().address
    except (ImportError, ValueError):
        return f"pid {os.getpid()}"


def _tables(job: WorkerJob) -> list[SessionTable]:
    """The sweep's frame tables on this worker, loaded once per store fingerprint and channel set."""
    key = job.tables_key()
    with _LOCK:
        if key not in _TABLES:
            _TABLES.clear()
            _WINDOWED.clear()
            root = Path(job.ctx.store)
            lacking = [s for s in job.sessions if not Store(root).shard_path(s).exists()]
            if not root.is_dir() or lacking:
                what = (
                    f"the folder {root}"
                    if not root.is_dir()
                    else f"{len(lacking)} shards (e.g. {root / lacking[0]}.h5)"
                )
                raise DatasetError(
                    f"Dask worker {_worker_name()} cannot see {what} of the feature store; put the store on a "
                    "file system every worker mounts at the same path as the client (see README, Scaling out)"
                )
            _TABLES[key] = load_sessions(
                root,
                list(job.ctx.channels),
                target=job.ctx.cfg.target,
                splits=job.ctx.cfg.splits,
                sessions=list(job.sessions),
                gold_standard=job.ctx.cfg.gold_standard,
            )
        return _TABLES[key]


def _windowed(job: WorkerJob, tables: list[SessionTable], key: WindowKey) -> Windowed:
    cache_key = (job.tables_key(), key)
    with _LOCK:
        w = _WINDOWED.get(cache_key)
        if w is None:
            w = window_sessions(tables, key)
            _WINDOWED[cache_key] = w
            while len(_WINDOWED) > WINDOW_CACHE_SIZE:
                _WINDOWED.popitem(last=False)
        else:
            _WINDOWED.move_to_end(cache_key)
        return w


def _tracker(ctx: SweepContext) -> Tracker:
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    key = (ctx.tracking_uri, ctx.experiment)
    with _LOCK:
        if key not in _TRACKERS:
            _TRACKERS[key] = Tracker(*key)
        return _TRACKERS[key]


def logged_row(job: WorkerJob, trial: Trial) -> RunRow | None:
    """The sweep-table row of ``trial`` if this sweep logged it FINISHED already, else None.

    Dask runs a task again when the worker holding its result dies before the client fetched
    it; a task that logs its child runs itself must then return those runs, not log second ones.
    """
    run = _tracker(job.ctx).finished_child(job.ctx.parent_run_id, trial.hash())
    return None if run is None else run_row(trial, run, "done")


def parts_on_worker(trials: tuple[Trial, ...], job: WorkerJob) -> list[FitPart]:
    """A Dask task: the separate fits of a slow fit group
    (:func:`experiments.evaluation.evaluate.group_fit_parts`), each then a task of its own."""
    return group_fit_parts(trials, _windowed(job, _tables(job), trials[0].window_key()))


def part_on_worker(trials: tuple[Trial, ...], job: WorkerJob, part: FitPart) -> PartResult:
    """A Dask task: fit and predict one ``part`` of a fit group (its predictions go to the task
    that evaluates the group, :func:`evaluate_on_worker`)."""
    return evaluate_part(trials, _windowed(job, _tables(job), trials[0].window_key()), part)


def evaluate_on_worker(
    trials: tuple[Trial, ...],
    job: WorkerJob,
    parts: Sequence[FitPart] = (),
    part_results: Sequence[PartResult] = (),
) -> list[Outcome]:
    """A Dask task: window (cached), fit and score one fit group (configurations that differ only
    in post-processing, see :func:`experiments.executors.base.fit_groups`); log them too if ``job.log_runs``.
    ``parts`` were fitted by other tasks (:func:`part_on_worker`), giving ``part_results``:
    the group is scored from them, the same results as fitted here.

    Returns, per configuration, its :class:`Outcome` like the local executor's, with the
    ``row`` of its child run once it is logged here (or was, by an earlier run of this task:
    :func:`logged_row`). Store problems raise :class:`DatasetError` (they stop the sweep, as in
    the local executor).
    """
    done = {t: logged_row(job, t) for t in trials} if job.log_runs else {}
    pending = tuple(t for t in trials if done.get(t) is None)
    if not pending:
        return [Outcome(t, row=done[t]) for t in trials]
    # the parts were listed for the whole group: a group partly logged already (a task run
    # again) is fitted here whole
    fitted = dict(zip(parts, part_results, strict=True)) if pending == tuple(trials) else {}
    fresh = _evaluate_and_log(pending, job, fitted)
    return [Outcome(t, row=done[t]) if done.get(t) is not None else fresh.pop(0) for t in trials]


def _evaluate_and_log(
    trials: tuple[Trial, ...], job: WorkerJob, done: dict[FitPart, PartResult]
) -> list[Outcome]:
    tables = _tables(job)
    results: list[TrialResult | None] = [None] * len(trials)
    try:
        w = _windowed(job, tables, trials[0].window_key())
    except Exception as e:  # noqa: BLE001 - a bad window key fails its configurations only
        error = f"windowing failed: {type(e).__name__}: {e}"
    else:
        try:
            evaluated = evaluate_trials(trials, w, done)
            results, error = list(evaluated), ""
            if job.ctx.log_artifacts:
                # drawn here, before any run exists: the client only writes the bytes (or this
                # worker logs them), and a worker-logged run stays RUNNING for the upload only
                for r in evaluated:
                    with_figures(r)
        except Exception as e:  # noqa: BLE001 - one failed fit group does not stop the sweep
            results, error = [None] * len(trials), f"{type(e).__name__}: {e}"
    if job.log_runs:
        # the worker's own code version on the runs it logs (the sweep refused a worker whose code differs)
        ctx = replace(job.ctx, child_tags={**job.ctx.child_tags, **code_version().tags()})
        return [
            Outcome(t, row=log_child(_tracker(ctx), ctx, t, r, error))
            for t, r in zip(trials, results, strict=True)
        ]
    return [
        Outcome(t, r) if r is not None else Outcome(t, error=error)
        for t, r in zip(trials, results, strict=True)
    ]


def worker_code_fingerprint() -> str:
    """On a worker: the code fingerprint of the package it imports (:mod:`experiments.tracking.provenance`)."""
    return code_version().fingerprint


def worker_library_versions() -> dict[str, str]:
    """On a worker: the versions of the libraries in its code fingerprint
    (:data:`~experiments.tracking.provenance.LIBRARIES`)."""
    return dict(code_version().libraries)


class WorkerCodeMismatch(RuntimeError):
    """A Dask worker runs other code than the client: its results would not be this code's."""


def library_differences(mine: dict[str, str], theirs: dict[str, str]) -> list[str]:
    """``"scikit-learn 1.6.0 (here 1.9.1)"`` for each library whose version differs, by name."""
    names = sorted(set(mine) | set(theirs))
    return [
        f"{name} {theirs.get(name, 'absent')} (here {mine.get(name, 'absent')})"
        for name in names
        if theirs.get(name) != mine.get(name)
    ]


def check_worker_code(client) -> None:
    """Refuse a cluster whose workers import other code than this process (another checkout,
    version or uncommitted change) or other versions of the libraries that compute the numbers
    (numpy, scikit-learn, XGBoost, ...): their runs would carry results this code did not compute.

    Raises:
        WorkerCodeMismatch: naming each differing worker, its fingerprint and, when they differ,
            its library versions beside this process's.
    """
    mine = code_version().fingerprint
    theirs = client.run(worker_code_fingerprint)
    differ = {addr: fp for addr, fp in theirs.items() if fp != mine}
    if differ:
        try:  # a worker whose package predates worker_library_versions cannot say
            libraries = client.run(worker_library_versions, workers=sorted(differ))
        except Exception:  # noqa: BLE001 - whatever it raises, the mismatch is still reported
            libraries = {}
        here = dict(code_version().libraries)
        listed = []
        for addr, fp in sorted(differ.items()):
            diff = library_differences(here, libraries.get(addr, here))
            what = f"libraries {', '.join(diff)}" if diff else "the package source"
            listed.append(f"{addr} ({fp}; {what})")
        raise WorkerCodeMismatch(
            f"Dask workers {', '.join(listed)} run other code than this client "
            f"(code fingerprint {mine}); install the same "
            "checkout of omg-empathy-bench and the same library versions on every worker "
            "(pip install -c constraints.txt -e . from it, uncommitted changes included) "
            "and restart them, or start the sweep from the workers' version"
        )


def warm_up(plots: bool = False) -> None:
    """On a worker: import what evaluating (and, with ``plots``, logging) a configuration needs."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    for name in ("experiments.models", "experiments.models.personalization"):
        importlib.import_module(name)
    if plots:
        load_backend()


def clear_worker_state() -> int:
    """Drop this worker's cached tables, windowed features and MLflow clients; returns entries dropped."""
    with _LOCK:
        n = len(_TABLES) + len(_WINDOWED) + len(_TRACKERS)
        _TABLES.clear()
        _WINDOWED.clear()
        _TRACKERS.clear()
    return n


class DaskExecutor(Executor):
    """Evaluates configurations on the Dask cluster of ``client`` (see the module docstring).

    Outcomes are yielded in the local executor's order (grouped by window key, a baseline
    first), so the sweep table and the choice among equal scores are the same.
    """

    name = "dask"

    def __init__(self, client, log_on_workers: bool = False, split_slow: bool = True) -> None:
        self.client = client
        self.log_on_workers = bool(log_on_workers)
        #: split a slow model's fit group into its fits, each a task (with two or more workers)
        self.split_slow = bool(split_slow)
        #: after :meth:`run`: the fit groups it split, by their first configuration's label,
        #: and how many fits each was split into
        self.split_groups: dict[str, int] = {}

    def run(self, todo: Sequence[Trial], ctx: SweepContext) -> Generator[Outcome, None, None]:
        if not todo:
            return
        check_worker_code(self.client)
        store = ctx.store if isinstance(ctx.store, Store) else Store(ctx.store)
        job = WorkerJob(
            replace(ctx, store=str(store.root.resolve())),
            tuple(store.list_sessions()),
            self.log_on_workers,
        )
        run = uuid.uuid4().hex[:8]
        # the local executor's order: grouped by window key (first appearance), baseline first;
        # one task per fit group, a slow model's split into its fits when there are workers to
        # spread them over (as the local executor does)
        order = [g for group in window_groups(todo).values() for g in fit_groups(group)]
        split = self.split_slow and len(self.client.scheduler_info().get("workers", {})) > 1
        futures: dict[int, Any] = {}  # index in ``order`` -> its dask Future
        listing: dict[int, Any] = {}  # index -> the future listing its fit parts
        parts: dict[int, list] = {}  # index -> its parts' futures (released with the group)
        self.split_groups = {}

        def key(kind: str, i: int) -> str:
            return f"{kind}-{i}-{order[i][0].hash()}-{run}"

        def submit_whole(i: int) -> None:
            futures[i] = self.client.submit(
                evaluate_on_worker, order[i], job, key=key("fit-group", i), pure=False
            )

        def submit(indices: list[int]) -> list:
            for i in indices:
                if split and split_into_parts(order[i]):
                    # listed on a worker (it needs the windowed features), ahead of the queue
                    listing[i] = self.client.submit(
                        parts_on_worker,
                        order[i],
                        job,
                        key=key("fit-parts", i),
                        pure=False,
                        priority=2,
                    )
                else:
                    submit_whole(i)
            return [futures[i] for i in indices if i in futures]

        def submit_parts(i: int) -> None:
            """Each fit of group ``i`` a task (slow ones first: longest-first), then the group
            scored from their results; a group whose parts cannot be listed runs whole and
            reports why (a store problem raises there, as locally)."""
            fut = listing.pop(i)
            try:
                listed = fut.result()
            except Exception:  # noqa: BLE001 - the whole group's task reports it
                listed = []
            fut.release()
            if len(listed) <= 1:
                submit_whole(i)
                return
            parts[i] = [
                self.client.submit(
                    part_on_worker,
                    order[i],
                    job,
                    part,
                    key=key(f"fit-part{k}", i),
                    pure=False,
                    priority=1,
                )
                for k, part in enumerate(listed)
            ]
            futures[i] = self.client.submit(
                evaluate_on_worker,
                order[i],
                job,
                listed,
                parts[i],
                key=key("fit-group", i),
                pure=False,
                priority=1,
            )
            self.split_groups[order[i][0].label()] = len(listed)

        try:
            baselines = [i for i, g in enumerate(order) if g[0].model == BASELINE]
            first = submit(baselines)
            if self.log_on_workers:
                from distributed import wait  # dask: see the module docstring

                wait(
                    first
                )  # a worker-logged run appears when it finishes: baselines before the rest start
            submit([i for i, g in enumerate(order) if g[0].model != BASELINE])
            for i in sorted(listing):
                submit_parts(i)
            for i, group in enumerate(order):
                yield from self._outcomes(group, futures[i])
                for f in parts.pop(i, []):
                    f.release()
        finally:
            waiting = [
                *futures.values(),
                *listing.values(),
                *(f for p in parts.values() for f in p),
            ]
            self.client.cancel([f for f in waiting if not f.done()])
            try:
                self.client.run(clear_worker_state)
            except Exception:  # noqa: BLE001 - best effort: a lost worker has no state left
                pass

    @staticmethod
    def _outcomes(group: tuple[Trial, ...], fut) -> list[Outcome]:
        try:
            outcomes = fut.result()
        except DatasetError:
            raise
        except Exception as e:  # noqa: BLE001 - a lost worker or a failed upload fails this fit group
            outcomes = [Outcome(t, error=f"on Dask: {type(e).__name__}: {e}") for t in group]
        fut.release()
        return outcomes
