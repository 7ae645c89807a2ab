"""The sweep on the Dask backend (docs/scaling.md, A cluster): a task per fit group, a slow
model's group split into its fits. Workers read the store at the client's absolute path and keep
the frame tables and the last window keys' features; with an MLflow server each worker logs its
own child runs, else the client logs them all. ``distributed`` is imported only where a cluster
is used."""

from __future__ import annotations

import contextlib
import importlib
import os
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from featurestore import Store
from featurestore.parallel.base import Result, failure
from featurestore.parallel.dask import DaskBackend, future_result

from ..config.grid import Trial
from ..config.models import BASELINE
from ..data.dataset import DatasetError
from ..errors import ExperimentsError
from ..evaluation.evaluate import Task, TrialResult, forget, group_fit_parts, run_task, windowed
from ..evaluation.fitting import FitPart, PartResult
from ..evaluation.plots import load_backend
from ..tracking.child_runs import RunRow, log_child, run_row
from ..tracking.context import SweepContext
from ..tracking.provenance import code_version
from ..tracking.redact import mask_uri
from ..tracking.tracker import Tracker
from .forked import evaluate_part_of, split_into_parts

# per worker process: MLflow clients
_LOCK = threading.Lock()
_TRACKERS: dict[tuple[str, str], Tracker] = {}
#: what a task gives back: per configuration its result, or the row of the run the worker logged
Values = list[TrialResult | RunRow]


def _worker_name() -> str:
    try:
        from distributed import get_worker  # dask: see the module docstring

        return str(get_worker().address)
    except (ImportError, ValueError):
        return f"pid {os.getpid()}"


def check_store(task: Task) -> None:
    """Raise :class:`DatasetError` unless this worker sees the task's store and its sessions' shards."""
    assert task.data is not None
    root = Path(task.data.store)
    lacking = [s for s in task.data.sessions or () if not Store(root).shard_path(s).exists()]
    if not root.is_dir() or lacking:
        what = f"{len(lacking)} shards (e.g. {root / lacking[0]}.h5)" if lacking else ""
        raise DatasetError(
            f"Dask worker {_worker_name()} cannot see {what or f'the folder {root}'} of the "
            "feature store; put the store on a file system every worker mounts at the same "
            "path as the client (see docs/scaling.md, A cluster)"
        )


def _tracker(ctx: SweepContext) -> Tracker:
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    key = (ctx.tracking_uri, ctx.experiment)
    with _LOCK:
        if key not in _TRACKERS:
            _TRACKERS[key] = Tracker(*key)
        return _TRACKERS[key]


def logged_row(log: SweepContext, trial: Trial) -> RunRow | None:
    """The row of ``trial``'s FINISHED run in this sweep (a task Dask runs again), else None."""
    run = _tracker(log).finished_child(log.parent_run_id, trial.hash())
    return None if run is None else run_row(trial, run, "done")


def parts_on_worker(task: Task) -> list[FitPart]:
    """A Dask task: the separate fits of a slow fit group."""
    return group_fit_parts(task.trials, windowed(task))


def evaluate_on_worker(
    task: Task,
    log: SweepContext | None,
    parts: Sequence[FitPart] = (),
    part_results: Sequence[PartResult] = (),
) -> Result[Values]:
    """A Dask task: :func:`~experiments.evaluation.evaluate.run_task`, from the ``part_results`` of
    its ``parts`` if given; with ``log`` the child runs logged here (their rows returned)."""
    done = {t: logged_row(log, t) for t in task.trials} if log else {}
    pending = tuple(t for t in task.trials if done.get(t) is None)
    if not pending:
        return Result([done[t] for t in task.trials])  # type: ignore[misc]
    # the parts were listed for the whole group: a group partly logged (a task run again) is fitted whole
    fitted = dict(zip(parts, part_results, strict=True)) if pending == task.trials else {}
    check_store(task)
    results: list[TrialResult | None] = [None] * len(pending)
    try:  # figures drawn before any run exists: a worker-logged run is RUNNING for the upload only
        results[:], error = run_task(replace(task, trials=pending, done=tuple(fitted.items()))), ""
    except DatasetError:
        raise
    except Exception as e:  # noqa: BLE001 - one failed fit group does not stop the sweep
        error = failure(e).error
    if log is None:
        return Result(error=error) if error else Result([r for r in results if r is not None])
    # the worker's own code version on its runs (the sweep refused a worker whose code differs)
    ctx = replace(log, child_tags={**log.child_tags, **code_version().tags()})
    fresh = [
        log_child(_tracker(ctx), ctx, t, r, error) for t, r in zip(pending, results, strict=True)
    ]
    return Result([done[t] or fresh.pop(0) for t in task.trials])


def worker_code_fingerprint() -> str:
    """On a worker: the code fingerprint of the package it imports."""
    return code_version().fingerprint


def worker_library_versions() -> dict[str, str]:
    """On a worker: the versions of the libraries in its code fingerprint."""
    return dict(code_version().libraries)


class WorkerCodeMismatch(ExperimentsError, RuntimeError):
    """A Dask worker runs other code than the client: its results would not be this code's."""


def check_worker_code(client: Any) -> None:
    """Raise :class:`WorkerCodeMismatch` naming each worker that imports other code than this
    process (another checkout, version or uncommitted change) or other library versions."""
    code = code_version()
    differ = {
        a: fp for a, fp in client.run(worker_code_fingerprint).items() if fp != code.fingerprint
    }
    if not differ:
        return
    try:  # a worker whose package predates worker_library_versions cannot say
        libraries = client.run(worker_library_versions, workers=sorted(differ))
    except Exception:  # noqa: BLE001 - whatever it raises, the mismatch is still reported
        libraries = {}
    here, listed = dict(code.libraries), []
    for addr, fp in sorted(differ.items()):
        theirs = libraries.get(addr, here)
        diff = ", ".join(  # e.g. "scikit-learn 1.6.0 (here 1.9.1)"
            f"{name} {theirs.get(name, 'absent')} (here {here.get(name, 'absent')})"
            for name in sorted(set(here) | set(theirs))
            if theirs.get(name) != here.get(name)
        )
        listed.append(f"{addr} ({fp}; {f'libraries {diff}' if diff else 'the package source'})")
    raise WorkerCodeMismatch(
        f"Dask workers {', '.join(listed)} run other code than this client (code fingerprint "
        f"{code.fingerprint}); install the same checkout of omg-empathy-bench and the same library "
        "versions on every worker (pip install -c constraints.txt -e . from it, uncommitted "
        "changes included) and restart them, or start the sweep from the workers' version"
    )


def warm_up(plots: bool = False) -> None:
    """On a worker: import what evaluating (and, with ``plots``, logging) a configuration needs."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    importlib.import_module("experiments.models.personalization")
    if plots:
        load_backend()


def clear_worker_state() -> int:
    """Drop this worker's tables, windowed features and MLflow clients; returns entries dropped."""
    with _LOCK:
        n = len(_TRACKERS)
        _TRACKERS.clear()
    return n + forget()


def log_on_workers(backend: DaskBackend, tracking_uri: str) -> bool:
    """Whether the workers log their child runs: the backend's ``workers_write``, else only
    through an ``http(s)://`` tracking server (never to SQLite or a file store: one writer)."""
    if backend.workers_write and tracking_uri.startswith(("sqlite:", "file:")):
        raise ValueError(
            f"workers cannot log to {mask_uri(tracking_uri)}: SQLite and file stores take a single writer; "
            "start an MLflow server (`make mlflow-server`) and pass its http:// URI, or let the "
            "client log (workers_write=False)"
        )
    if backend.workers_write is None:
        return tracking_uri.startswith(("http://", "https://"))
    return backend.workers_write


def map_on_dask(
    backend: DaskBackend, tasks: Sequence[Task], log: SweepContext
) -> Iterator[Result[Values]]:
    """The tasks' results on the cluster, in their order; however it ends, the workers' state is
    cleared and unfinished tasks cancelled."""
    if not tasks:
        return
    from distributed import fire_and_forget  # dask: see the module docstring

    client = backend.client
    check_worker_code(client)
    # MLflow prints two "View run" lines per run logged to a server: they would bury the bar
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    for addr in client.nthreads():  # workers import the modelling stack meanwhile
        fire_and_forget(client.submit(warm_up, tasks[0].figures, workers=[addr], pure=False))
    sweep = DaskSweep(
        backend, list(tasks), log if log_on_workers(backend, log.tracking_uri) else None
    )
    try:
        yield from sweep.results()
    finally:
        sweep.cancel()
        with contextlib.suppress(Exception):  # best effort: a lost worker has no state left
            client.run(clear_worker_state)


class DaskSweep:
    """One sweep's Dask futures: per task (by index in ``tasks``) its future, the future listing
    its parts, and its parts' futures; ``split_groups``: the groups split (first label -> fits)."""

    def __init__(self, backend: DaskBackend, tasks: list[Task], log: SweepContext | None) -> None:
        self.client, self.tasks, self.log = backend.client, tasks, log
        self.split = backend.split and len(self.client.nthreads()) > 1
        self.run_key = uuid.uuid4().hex[:8]
        self.futures: dict[int, Any] = {}
        self.listing: dict[int, Any] = {}
        self.parts: dict[int, list[Any]] = {}
        self.split_groups: dict[str, int] = {}

    def _submit(self, fn: Callable[..., Any], kind: str, i: int, *args: Any, **kw: Any) -> Any:
        key = f"{kind}-{i}-{self.tasks[i].trials[0].hash()}-{self.run_key}"
        return self.client.submit(fn, self.tasks[i], *args, key=key, pure=False, **kw)

    def _submit_group(self, i: int, *args: Any, **kw: Any) -> None:
        self.futures[i] = self._submit(evaluate_on_worker, "fit-group", i, self.log, *args, **kw)

    def submit(self, indices: list[int]) -> list[Any]:
        """Each task, or for a slow one the task listing its parts, ahead of the queue (it needs the
        windowed features); returns the group tasks submitted."""
        for i in indices:
            if self.split and split_into_parts(self.tasks[i].trials):
                self.listing[i] = self._submit(parts_on_worker, "fit-parts", i, priority=2)
            else:
                self._submit_group(i)
        return [self.futures[i] for i in indices if i in self.futures]

    def submit_parts(self, i: int) -> None:
        """Each fit of group ``i`` a task, then the group scored from their results (whole when its
        parts cannot be listed: its task reports why)."""
        listing = self.listing.pop(i)
        try:
            listed = listing.result()
        except Exception:  # noqa: BLE001 - the whole group's task reports it
            listed = []
        listing.release()
        if len(listed) <= 1:
            self._submit_group(i)
            return
        self.parts[i] = [
            self._submit(evaluate_part_of, f"fit-part{k}", i, part, priority=1)
            for k, part in enumerate(listed)
        ]
        self._submit_group(i, listed, self.parts[i], priority=1)
        self.split_groups[self.tasks[i].trials[0].label()] = len(listed)

    def results(self) -> Iterator[Result[Values]]:
        """Baselines first (with worker logging, logged before the rest start, so the baseline is
        the first child run), then the others; results in the order of the tasks."""
        baseline = [i for i, t in enumerate(self.tasks) if t.trials[0].model == BASELINE]
        first = self.submit(baseline)
        if self.log is not None:
            from distributed import wait  # dask: see the module docstring

            wait(first)
        self.submit([i for i in range(len(self.tasks)) if i not in baseline])
        for i in sorted(self.listing):
            self.submit_parts(i)
        for i in range(len(self.tasks)):
            # a store problem raises; a lost worker or a failed upload fails this fit group
            result = future_result(self.futures[i], (DatasetError,))
            yield result.value if result.value is not None else result
            for f in self.parts.pop(i, []):
                f.release()

    def cancel(self) -> None:
        waiting = [*self.futures.values(), *self.listing.values()]
        waiting += [f for p in self.parts.values() for f in p]
        self.client.cancel([f for f in waiting if not f.done()])
