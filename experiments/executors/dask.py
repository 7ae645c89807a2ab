"""The Dask executor (``executor: dask``): a fit group per task on a cluster, the local executor's
outcomes (docs/scaling.md, A cluster). Every worker reads the store at the client's absolute
path and keeps the frame tables and the last window keys' features; with an MLflow server each
worker logs its own child runs, else the client logs them all. A worker whose code differs is
refused (:func:`check_worker_code`); a task Dask runs again returns the run it logged
(:func:`logged_row`). ``distributed`` is imported only where a cluster is used.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from featurestore import Store
from featurestore.extraction.distributed import dask_client, n_workers_of

from ..config.grid import Trial, WindowKey
from ..config.models import BASELINE
from ..data.dataset import DatasetError, load_sessions
from ..data.session_table import SessionTable
from ..errors import ExperimentsError
from ..evaluation.evaluate import TrialResult, Windowed, evaluate_part, group_fit_parts
from ..evaluation.fitting import FitPart, PartResult
from ..evaluation.plots import load_backend
from ..tracking.child_runs import RunRow, log_child, run_row
from ..tracking.provenance import code_version
from ..tracking.redact import mask_uri
from ..tracking.tracker import Tracker
from ..windowing.windowed import window_sessions
from . import base
from .base import Executor, Outcome, SweepContext, register_executor

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
        """What the frame tables depend on (the labels too: the gold standard)."""
        c = self.ctx
        splits = tuple((k, tuple(v)) for k, v in sorted(c.cfg.splits.items()))
        return (str(c.store), c.channels, c.cfg.target, splits, c.store_fingerprint) + (
            self.sessions,
            c.cfg.gold_standard,
        )


def _worker_name() -> str:
    try:
        from distributed import get_worker  # dask: see the module docstring

        return str(get_worker().address)
    except (ImportError, ValueError):
        return f"pid {os.getpid()}"


def _tables(job: WorkerJob) -> list[SessionTable]:
    """The sweep's frame tables on this worker, loaded once per store fingerprint and channel set.

    Raises:
        DatasetError: the worker does not see the store's folder or shards at the client's path.
    """
    key = job.tables_key()
    with _LOCK:
        if key not in _TABLES:
            _TABLES.clear()
            _WINDOWED.clear()
            root = Path(job.ctx.store)
            lacking = [s for s in job.sessions if not Store(root).shard_path(s).exists()]
            if not root.is_dir() or lacking:
                what = f"{len(lacking)} shards (e.g. {root / lacking[0]}.h5)" if lacking else ""
                raise DatasetError(
                    f"Dask worker {_worker_name()} cannot see {what or f'the folder {root}'} of the "
                    "feature store; put the store on a file system every worker mounts at the same "
                    "path as the client (see docs/scaling.md, A cluster)"
                )
            cfg = job.ctx.cfg
            _TABLES[key] = load_sessions(
                root,
                list(job.ctx.channels),
                target=cfg.target,
                splits=cfg.splits,
                sessions=list(job.sessions),
                gold_standard=cfg.gold_standard,
            )
        return _TABLES[key]


def _windowed(job: WorkerJob, key: WindowKey) -> Windowed:
    """Window key ``key``'s features on this worker (the last :data:`WINDOW_CACHE_SIZE` kept)."""
    tables = _tables(job)
    cache_key = (job.tables_key(), key)
    with _LOCK:
        if cache_key not in _WINDOWED:
            _WINDOWED[cache_key] = window_sessions(tables, key)
            while len(_WINDOWED) > WINDOW_CACHE_SIZE:
                _WINDOWED.popitem(last=False)
        _WINDOWED.move_to_end(cache_key)
        return _WINDOWED[cache_key]


def _tracker(ctx: SweepContext) -> Tracker:
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    key = (ctx.tracking_uri, ctx.experiment)
    with _LOCK:
        if key not in _TRACKERS:
            _TRACKERS[key] = Tracker(*key)
        return _TRACKERS[key]


def logged_row(job: WorkerJob, trial: Trial) -> RunRow | None:
    """The sweep-table row of ``trial`` if this sweep logged it FINISHED already (a task Dask
    runs again after the worker holding its result died), else None."""
    run = _tracker(job.ctx).finished_child(job.ctx.parent_run_id, trial.hash())
    return None if run is None else run_row(trial, run, "done")


def parts_on_worker(trials: tuple[Trial, ...], job: WorkerJob) -> list[FitPart]:
    """A Dask task: the separate fits of a slow fit group (each then a task of its own)."""
    return group_fit_parts(trials, _windowed(job, trials[0].window_key()))


def part_on_worker(trials: tuple[Trial, ...], job: WorkerJob, part: FitPart) -> PartResult:
    """A Dask task: fit and predict one ``part`` of a fit group (for :func:`evaluate_on_worker`)."""
    return evaluate_part(trials, _windowed(job, trials[0].window_key()), part)


def evaluate_on_worker(
    trials: tuple[Trial, ...],
    job: WorkerJob,
    parts: Sequence[FitPart] = (),
    part_results: Sequence[PartResult] = (),
) -> list[Outcome]:
    """A Dask task: window (cached), fit and score one fit group, from the ``part_results`` of
    its ``parts`` fitted by other tasks if given; logged here too if ``job.log_runs``. Returns
    each configuration's :class:`Outcome` (with the ``row`` of a run logged here, or by an
    earlier run of this task). A store problem raises :class:`DatasetError`."""
    done = {t: logged_row(job, t) for t in trials} if job.log_runs else {}
    pending = tuple(t for t in trials if done.get(t) is None)
    if not pending:
        return [Outcome(t, row=done[t]) for t in trials]
    # the parts were listed for the whole group: a group partly logged (a task run again) is fitted whole
    fitted = dict(zip(parts, part_results, strict=True)) if pending == tuple(trials) else {}
    fresh = _evaluate_and_log(pending, job, fitted)
    return [Outcome(t, row=done[t]) if done.get(t) is not None else fresh.pop(0) for t in trials]


def _evaluate(
    trials: tuple[Trial, ...], job: WorkerJob, done: dict[FitPart, PartResult]
) -> tuple[list[TrialResult | None], str]:
    """The group's results (figures drawn here when artifacts are logged), or Nones and the error
    (a store problem raises: :func:`_tables`)."""
    _tables(job)
    try:
        w = _windowed(job, trials[0].window_key())
    except Exception as e:  # noqa: BLE001 - a bad window key fails its configurations only
        return [None] * len(trials), f"windowing failed: {type(e).__name__}: {e}"
    try:  # figures drawn before any run exists: a worker-logged run is RUNNING for the upload only
        return list(base.evaluated(trials, w, done, job.ctx.log_artifacts)), ""
    except Exception as e:  # noqa: BLE001 - one failed fit group does not stop the sweep
        return [None] * len(trials), f"{type(e).__name__}: {e}"


def _evaluate_and_log(
    trials: tuple[Trial, ...], job: WorkerJob, done: dict[FitPart, PartResult]
) -> list[Outcome]:
    results, error = _evaluate(trials, job, done)
    if not job.log_runs:
        return [
            Outcome(t, r) if r is not None else Outcome(t, error=error)
            for t, r in zip(trials, results, strict=True)
        ]
    # the worker's own code version on its runs (the sweep refused a worker whose code differs)
    ctx = replace(job.ctx, child_tags={**job.ctx.child_tags, **code_version().tags()})
    return [
        Outcome(t, row=log_child(_tracker(ctx), ctx, t, r, error))
        for t, r in zip(trials, results, strict=True)
    ]


def worker_code_fingerprint() -> str:
    """On a worker: the code fingerprint of the package it imports."""
    return code_version().fingerprint


def worker_library_versions() -> dict[str, str]:
    """On a worker: the versions of the libraries in its code fingerprint."""
    return dict(code_version().libraries)


class WorkerCodeMismatch(ExperimentsError, RuntimeError):
    """A Dask worker runs other code than the client: its results would not be this code's."""


def library_differences(mine: dict[str, str], theirs: dict[str, str]) -> list[str]:
    """``"scikit-learn 1.6.0 (here 1.9.1)"`` for each library whose version differs, by name."""
    return [
        f"{name} {theirs.get(name, 'absent')} (here {mine.get(name, 'absent')})"
        for name in sorted(set(mine) | set(theirs))
        if theirs.get(name) != mine.get(name)
    ]


def check_worker_code(client: Any) -> None:
    """Refuse a cluster whose workers import other code than this process (another checkout,
    version or uncommitted change) or other versions of the libraries that compute the numbers.

    Raises:
        WorkerCodeMismatch: naming each differing worker, its fingerprint and, when they differ,
            its library versions beside this process's.
    """
    mine = code_version().fingerprint
    differ = {a: fp for a, fp in client.run(worker_code_fingerprint).items() if fp != mine}
    if not differ:
        return
    try:  # a worker whose package predates worker_library_versions cannot say
        libraries = client.run(worker_library_versions, workers=sorted(differ))
    except Exception:  # noqa: BLE001 - whatever it raises, the mismatch is still reported
        libraries = {}
    here = dict(code_version().libraries)
    listed = []
    for addr, fp in sorted(differ.items()):
        diff = ", ".join(library_differences(here, libraries.get(addr, here)))
        listed.append(f"{addr} ({fp}; {f'libraries {diff}' if diff else 'the package source'})")
    raise WorkerCodeMismatch(
        f"Dask workers {', '.join(listed)} run other code than this client (code fingerprint "
        f"{mine}); install the same checkout of omg-empathy-bench and the same library versions on "
        "every worker (pip install -c constraints.txt -e . from it, uncommitted changes included) "
        "and restart them, or start the sweep from the workers' version"
    )


def warm_up(plots: bool = False) -> None:
    """On a worker: import what evaluating (and, with ``plots``, logging) a configuration needs."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    importlib.import_module("experiments.models.personalization")
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


@register_executor
class DaskExecutor(Executor):
    """Evaluates configurations on a Dask cluster (see the module docstring): ``client``'s, or
    while :meth:`opened`, a local cluster's or the one at ``scheduler``. ``log_on_workers``:
    workers log their child runs (None: only through an ``http(s)://`` tracking server);
    ``split_slow``: a slow model's fit group split into its fits (with two or more workers).
    Outcomes come in the local executor's order (by window key, baselines first)."""

    name = "dask"

    def __init__(
        self,
        client: Any = None,
        scheduler: str | None = None,
        log_on_workers: bool | None = None,
        split_slow: bool = True,
    ) -> None:
        self.client = client
        self.scheduler = scheduler
        self.log_on_workers = log_on_workers
        self.split_slow = bool(split_slow)
        #: after :meth:`run`: the fit groups it split (first label -> number of fits)
        self.split_groups: dict[str, int] = {}

    @contextlib.contextmanager
    def opened(self, jobs: int | None, tracking_uri: str, log_artifacts: bool) -> Iterator[int]:
        """The cluster of a sweep (a local one of ``jobs`` workers, default 2, the one at ``scheduler``, or
        ``client``'s), its workers warming up; yields how many workers it has.

        Raises:
            ValueError: workers asked to log to a SQLite or file store (one writer only).
            ConnectionError: no scheduler at ``scheduler``, or no worker joined it.
        """
        server = tracking_uri.startswith(("http://", "https://"))
        if self.log_on_workers and tracking_uri.startswith(("sqlite:", "file:")):
            raise ValueError(
                f"workers cannot log to {mask_uri(tracking_uri)}: SQLite and file stores take a single writer; "
                "start an MLflow server (`make mlflow-server`) and pass its http:// URI, or let the "
                "client log (log_on_workers=False)"
            )
        self.log_on_workers = server if self.log_on_workers is None else self.log_on_workers
        # MLflow prints two "View run" lines per run logged to a server: they would bury the bar
        os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
        own = self.client is None
        with dask_client(self.scheduler, jobs) if own else contextlib.nullcontext(self.client) as c:
            from distributed import fire_and_forget  # dask: see the module docstring

            for addr in c.nthreads():  # workers import the modelling stack meanwhile
                fire_and_forget(c.submit(warm_up, log_artifacts, workers=[addr], pure=False))
            self.client = c
            try:
                yield n_workers_of(c)
            finally:
                self.client = None if own else c

    def run(self, todo: Sequence[Trial], ctx: SweepContext) -> Generator[Outcome, None, None]:
        """Evaluate ``todo`` on the cluster (see :class:`Executor`); the workers' state is
        cleared and unfinished tasks cancelled however it ends."""
        if not todo:
            return
        check_worker_code(self.client)
        store = ctx.store if isinstance(ctx.store, Store) else Store(ctx.store)
        job = WorkerJob(
            replace(ctx, store=str(store.root.resolve())),
            tuple(store.list_sessions()),
            bool(self.log_on_workers),
        )
        tasks = _Tasks(
            self,
            job,
            [g for grp in base.window_groups(todo).values() for g in base.fit_groups(grp)],
        )
        try:
            yield from tasks.outcomes()
        finally:
            tasks.cancel()
            with contextlib.suppress(Exception):  # best effort: a lost worker has no state left
                self.client.run(clear_worker_state)


class _Tasks:
    """One :meth:`DaskExecutor.run`'s Dask futures: per fit group (by index in ``order``) its
    task, the task listing its parts, and its parts' tasks."""

    def __init__(self, executor: DaskExecutor, job: WorkerJob, order: list[tuple[Trial, ...]]):
        self.client, self.job, self.order = executor.client, job, order
        self.executor = executor
        self.split = executor.split_slow and len(self.client.nthreads()) > 1
        self.run_key = uuid.uuid4().hex[:8]
        self.futures: dict[int, Any] = {}
        self.listing: dict[int, Any] = {}
        self.parts: dict[int, list[Any]] = {}
        executor.split_groups = {}

    def _submit(self, fn: Callable[..., Any], kind: str, i: int, *args: Any, **kw: Any) -> Any:
        key = f"{kind}-{i}-{self.order[i][0].hash()}-{self.run_key}"
        return self.client.submit(fn, self.order[i], self.job, *args, key=key, pure=False, **kw)

    def submit(self, indices: list[int]) -> list[Any]:
        """Each group's task, or for a slow one (with workers to spread it over) the task listing
        its parts, ahead of the queue (it needs the windowed features); the group tasks submitted."""
        for i in indices:
            if self.split and base.split_into_parts(self.order[i]):
                self.listing[i] = self._submit(parts_on_worker, "fit-parts", i, priority=2)
            else:
                self.futures[i] = self._submit(evaluate_on_worker, "fit-group", i)
        return [self.futures[i] for i in indices if i in self.futures]

    def submit_parts(self, i: int) -> None:
        """Each fit of group ``i`` a task, then the group scored from their results; a group whose
        parts cannot be listed runs whole and reports why."""
        listing = self.listing.pop(i)
        try:
            listed = listing.result()
        except Exception:  # noqa: BLE001 - the whole group's task reports it
            listed = []
        listing.release()
        if len(listed) <= 1:
            self.futures[i] = self._submit(evaluate_on_worker, "fit-group", i)
            return
        self.parts[i] = [
            self._submit(part_on_worker, f"fit-part{k}", i, part, priority=1)
            for k, part in enumerate(listed)
        ]
        self.futures[i] = self._submit(
            evaluate_on_worker, "fit-group", i, listed, self.parts[i], priority=1
        )
        self.executor.split_groups[self.order[i][0].label()] = len(listed)

    def outcomes(self) -> Iterator[Outcome]:
        """Baselines first (with worker logging, logged before the rest start, so the baseline is
        the first child run), then the others; outcomes in the order of the groups."""
        first = self.submit([i for i, g in enumerate(self.order) if g[0].model == BASELINE])
        if self.job.log_runs:
            from distributed import wait  # dask: see the module docstring

            wait(first)
        self.submit([i for i, g in enumerate(self.order) if g[0].model != BASELINE])
        for i in sorted(self.listing):
            self.submit_parts(i)
        for i, group in enumerate(self.order):
            yield from _group_outcomes(group, self.futures[i])
            for f in self.parts.pop(i, []):
                f.release()

    def cancel(self) -> None:
        """Cancel every task not done yet."""
        waiting = [*self.futures.values(), *self.listing.values()]
        waiting += [f for p in self.parts.values() for f in p]
        self.client.cancel([f for f in waiting if not f.done()])


def _group_outcomes(group: tuple[Trial, ...], fut: Any) -> list[Outcome]:
    """A fit group's outcomes from its task (a store problem raises; anything else fails the group)."""
    try:
        outcomes = fut.result()
    except DatasetError:
        raise
    except Exception as e:  # noqa: BLE001 - a lost worker or a failed upload fails this fit group
        outcomes = [Outcome(t, error=f"on Dask: {type(e).__name__}: {e}") for t in group]
    fut.release()
    return list(outcomes)
