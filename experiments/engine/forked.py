"""The sweep on the processes backend (:func:`map_forked`): each window key's features windowed
once here and shared with a pool of forked workers, the next key windowed meanwhile within the
memory budget, a slow model's fit group split into its fits (:class:`Scheduler`; docs/scaling.md,
How the processes backend schedules)."""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import functools
import os
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from featurestore.parallel.base import Result
from featurestore.parallel.memory import available_memory, release_free_memory
from featurestore.parallel.processes import ProcessesBackend, worker_pool

from ..config.grid import Trial, WindowKey
from ..config.models import BASELINE, model_spec
from ..data.dataset import DatasetError
from ..evaluation.evaluate import (
    Task,
    TaskData,
    Windowed,
    evaluate_part,
    fit_groups,
    forget,
    group_fit_parts,
    run_task,
    share,
    tables,
    window_groups,
    window_sessions,
    windowed,
)
from ..evaluation.fitting import FitPart, PartResult
from ..evaluation.plots import load_backend
from ..tracking.child_runs import Outcome

#: tasks per worker handed to a pool beyond those it runs (see :meth:`Scheduler.submit_free`)
BACKLOG_PER_WORKER = 1
#: window the next key while the current one runs (see :meth:`Scheduler.prefetch`) ...
PREFETCH_WINDOWS = True
#: ... when its estimated features are at most this fraction of the memory available then
PREFETCH_MEMORY_FRACTION = 0.25


def windowed_nbytes(tables: Sequence, key: WindowKey) -> int:
    """Estimated bytes of ``window_sessions(tables, key)``: frames x output columns x 4 (float32)."""
    if not tables:
        return 0
    first = tables[0]
    idx = [first.channels.index(c) for c in key.channels if c in first.channels]
    n_columns = int(np.isin(first.column_channel, idx).sum())
    stats = [s for s in key.stats if s != "valid_frac"]
    per_frame = len(key.lengths_s) * (
        n_columns * len(stats) + len(key.channels) * ("valid_frac" in key.stats)
    )
    return sum(t.n_frames for t in tables) * per_frame * 4


def _drop_table(tables: list, j: int) -> None:
    """Forget session ``j``'s table, windowed for the last key: its memory returns now."""
    tables[j] = None
    release_free_memory()  # the heap keeps what the table held (ms)


def evaluate_part_of(task: Task, part: FitPart) -> PartResult:
    """A task of both schedules: one ``part`` of a task's fit group, on this worker's features."""
    try:
        return evaluate_part(task.trials, windowed(task), part)
    finally:
        release_free_memory()


def split_into_parts(group: Sequence[Trial]) -> bool:
    """Whether a fit group's fits run as tasks of their own on several workers: a slow model's."""
    return model_spec(group[0].model).slow


def map_forked(
    backend: ProcessesBackend, tasks: Sequence[Task], log: object = None
) -> Iterator[Result]:
    """The tasks' results in their order (see the module docstring; the sweep logs them)."""
    figures = bool(tasks) and tasks[0].figures
    if figures:
        load_backend()  # once here: forked workers inherit matplotlib instead of importing it each
    if backend.workers <= 1 or len(tasks) <= 1:
        yield from backend.map(run_task, tasks, raises=(DatasetError,))
        return
    data = tasks[0].data
    outcomes = Scheduler(
        tables(data),
        window_groups([t for task in tasks for t in task.trials]),
        backend.workers,
        figures,
        data,
    )
    it = outcomes.outcomes()
    try:
        for task in tasks:
            got = [next(it) for _ in task.trials]
            error = next((o.error for o in got if o.error), "")
            yield Result(error=error) if error else Result([o.result for o in got])
    finally:
        it.close()
        forget()


def _expected_cost(group: Sequence[Trial]) -> int:
    trial = group[0]
    return (
        (trial.model != BASELINE)
        + 2 * model_spec(trial.model).slow
        + (trial.personalization == "per_listener")
    )


def _ready() -> None:
    """A no-op task: submitting it makes a fork pool start all its workers now."""


@dataclass
class Job:
    """``fit_group`` evaluated whole, one ``part`` of it fitted, or scored from its ``parts_done``."""

    fit_group: tuple[Trial, ...]
    part: FitPart | None = None
    parts_done: dict[FitPart, PartResult] | None = None


@dataclass
class WindowKeyState:
    """One launched window key: ``error`` (windowing failed), its fork ``pool`` (None once exited),
    jobs not yet submitted, each configuration's future (of its group: result ``slots[trial]``),
    each split group's parts' futures (None while queued), tasks submitted not yet seen done."""

    error: str = ""
    pool: cf.ProcessPoolExecutor | None = None
    queue: list[Job] = field(default_factory=list)
    futures: dict[Trial, cf.Future] = field(default_factory=dict)
    slots: dict[Trial, int] = field(default_factory=dict)
    parts: dict[tuple[Trial, ...], dict[FitPart, cf.Future | None]] = field(default_factory=dict)
    workers: int = 0
    submitted: set[cf.Future] = field(default_factory=set)

    def all_done(self) -> bool:
        return not self.queue and not self.parts and all(f.done() for f in self.futures.values())

    def close_pool(self, cancel: bool = False) -> None:
        """Shut the pool down, waiting for its workers to exit; ``cancel``: drop queued work."""
        self.queue.clear()
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=cancel)
            self.pool = None


class Scheduler:
    """Every window key's configurations in a forked pool of its own sharing its features (see the
    module docstring). ``tables``: the frame tables (emptied once the last key is windowed);
    ``groups``: the configurations by window key, in the outcomes' order; ``jobs``: tasks at a
    time; ``figures``: the workers draw each configuration's plots."""

    def __init__(
        self,
        tables: list,
        groups: dict[WindowKey, list[Trial]],
        jobs: int,
        figures: bool = False,
        data: TaskData | None = None,
    ) -> None:
        self.tables, self.data, self.groups, self.keys = tables, data, groups, list(groups)
        self.jobs, self.figures = jobs, figures
        cores = self.cores = os.cpu_count() or 1
        self.threads = max(1, cores // jobs)
        #: a core the workers leave over: only then is the next key windowed ahead
        self.spare_core = cores > jobs
        #: each key's estimated features (bytes; see :meth:`prefetch`)
        self.nbytes = [windowed_nbytes(tables, key) for key in self.keys]
        #: keys (by index) being windowed, not launched yet; launched keys
        self.windows: dict[int, cf.Future] = {}
        self.states: dict[int, WindowKeyState] = {}
        #: submitted tasks not yet seen done, over all pools (``jobs`` running, and a backlog)
        self.running: set[cf.Future] = set()
        self._windowing = cf.ThreadPoolExecutor(max_workers=1, thread_name_prefix="windowing")

    # ---- windowing: in a background thread, one key at a time, in order

    def start_windowing(self, i: int, threads: int = 1) -> None:
        """Window key ``i`` in the background (unless under way or launched), ``threads`` at a time."""
        if i < len(self.keys) and i not in self.windows and i not in self.states:
            # the last key is the tables' last use: each dropped once windowed
            drop = functools.partial(_drop_table, self.tables) if i == len(self.keys) - 1 else None
            self.windows[i] = self._windowing.submit(
                window_sessions, self.tables, self.keys[i], threads, drop
            )

    def prefetch(self, i: int, idle_worker: bool = False) -> None:
        """Window key ``i`` ahead when a core is free for it (one left over, or ``idle_worker``: the
        current key has no task left for a worker) and its features fit the memory budget."""
        if not PREFETCH_WINDOWS or i >= len(self.keys) or i in self.windows or i in self.states:
            return
        if not (self.spare_core or idle_worker):  # windowing would only take CPU from the fits
            return
        if self.features_held() + self.nbytes[i] > max(self.nbytes):
            # this key waits for the earlier pools to exit, and then has every core
            return
        free = available_memory()
        if free is None or self.nbytes[i] <= PREFETCH_MEMORY_FRACTION * free:
            # a worker idle: the last fits' cores free up while it windows, so it takes them all
            self.start_windowing(i, threads=self.cores if idle_worker else 1)

    def features_held(self) -> int:
        """Estimated bytes of the features being windowed or held by a pool not exited."""
        held = [*self.windows, *(i for i, s in self.states.items() if s.pool is not None)]
        return sum(self.nbytes[i] for i in held)

    # ---- launching a key: its tasks planned, its pool forked over its features

    def plan(self, group: list[Trial], w: Windowed) -> WindowKeyState:
        """A key's state with its jobs queued: slowest fit groups first, a slow one split in parts."""
        state = WindowKeyState()
        for fit_group in sorted(fit_groups(group), key=_expected_cost, reverse=True):
            split: list[FitPart] = []
            if self.jobs > 1 and split_into_parts(fit_group):
                with contextlib.suppress(ValueError):  # e.g. no training sessions: its task says so
                    split = group_fit_parts(fit_group, w)
            if len(split) > 1:
                state.parts[fit_group] = dict.fromkeys(split)
                state.queue += [Job(fit_group, part=part) for part in split]
            else:
                state.queue.append(Job(fit_group))
        return state

    def launch(self, i: int) -> None:
        """Key ``i``'s features (waited for) shared with a new fork pool."""
        try:
            w = self.windows.pop(i).result()
        except Exception as e:  # noqa: BLE001 - a bad window key fails its configurations only
            self.states[i] = WindowKeyState(error=f"windowing failed: {type(e).__name__}: {e}")
            return
        finally:
            if i == len(self.keys) - 1:
                self.tables.clear()  # keys are windowed in order: the last use of the tables
        state = self.states[i] = self.plan(self.groups[self.keys[i]], w)
        forget(tables=False)
        share(self.data, self.keys[i], w)
        release_free_memory()  # what the windowing freed: the workers would map it for nothing
        state.workers = min(self.jobs, len(state.queue))
        state.pool = worker_pool(
            state.workers, fork=True, threads=self.threads, release=self.tables
        )
        state.pool.submit(_ready).result()  # with fork, every worker starts now, with the features
        forget(tables=False)
        del w
        # the features live in the workers only: their pages return when the workers exit
        release_free_memory()

    # ---- submitting: at most ``jobs`` tasks at a time over all pools

    def collect_parts(self, state: WindowKeyState) -> None:
        """A split group whose parts are all done is scored from them next; a failed part fails it."""
        for fit_group, done in list(state.parts.items()):
            if not all(f is not None and f.done() for f in done.values()):
                continue  # a part is still queued or running
            del state.parts[fit_group]
            futures = {part: f for part, f in done.items() if f is not None}  # all, as checked
            failed = [e for f in futures.values() if (e := f.exception()) is not None]
            if not failed:
                results = {part: f.result() for part, f in futures.items()}
                state.queue.insert(0, Job(fit_group, parts_done=results))
                continue
            lost: cf.Future = cf.Future()  # what the group's task would have raised
            lost.set_exception(failed[0])
            state.futures.update(dict.fromkeys(fit_group, lost))

    def retire_finished(self) -> None:
        """Let a pool whose configurations are done exit now, not once their results are handed
        over (logging them takes seconds): its workers still map a key's features."""
        for state in self.states.values():
            if state.pool is not None and state.all_done():
                state.close_pool()

    def submit(self, state: WindowKeyState, task: Job) -> None:
        assert state.pool is not None
        fut: cf.Future
        job = Task(task.fit_group, self.data, self.figures, tuple((task.parts_done or {}).items()))
        if task.part is not None:
            fut = state.pool.submit(evaluate_part_of, job, task.part)
            state.parts[task.fit_group][task.part] = fut
        else:
            fut = state.pool.submit(run_task, job)
            for k, t in enumerate(task.fit_group):
                state.futures[t] = fut
                state.slots[t] = k
        self.running.add(fut)
        state.submitted.add(fut)

    def forget_done(self) -> None:
        self.running.difference_update([f for f in self.running if f.done()])

    def submit_free(self) -> None:
        """Fill the free slots from the queues, the earliest key's first."""
        self.forget_done()
        for i in sorted(self.states):
            self.collect_parts(self.states[i])
        self.retire_finished()
        for i in sorted(self.states):
            state = self.states[i]
            while state.queue and len(self.running) < self.jobs:
                self.submit(state, state.queue.pop(0))
            if state.pool is not None:
                # a later key's fits wait for this pool to exit (memory: see prefetch)
                break
        # a backlog of one task per worker in the earliest key's busy pool: a worker finishing
        # while this process logs starts its next task at once (a later key's backlog would
        # keep an earlier key's last task waiting)
        earliest = next((s for _, s in sorted(self.states.items()) if s.queue or s.parts), None)
        while (
            earliest is not None
            and earliest.queue
            and len(self.running) < self.jobs + BACKLOG_PER_WORKER * self.jobs
            and self.in_flight(earliest) >= earliest.workers
        ):
            self.submit(earliest, earliest.queue.pop(0))

    def worker_idle(self, state: WindowKeyState) -> bool:
        """Fewer tasks running than workers, and none of ``state``'s key queued."""
        self.forget_done()
        return len(self.running) < self.jobs and not state.queue

    def in_flight(self, state: WindowKeyState) -> int:
        """``state``'s submitted tasks not yet seen done (running or queued in its pool)."""
        state.submitted.intersection_update(self.running)
        return len(state.submitted)

    # ---- handing over: one key's results in order, each as soon as it is done

    def wait_for(self, i: int, trial: Trial) -> None:
        """Keep the pools busy (see :meth:`advance`) until ``trial``'s future (of key ``i``) is done."""
        state = self.states[i]
        while trial not in state.futures or not state.futures[trial].done():
            # again: memory may have been freed, or a worker run out of this key's tasks
            self.advance(i)
            nxt = self.windows.get(i + 1)
            cf.wait(
                [*self.running, *([nxt] if nxt is not None else [])], return_when=cf.FIRST_COMPLETED
            )

    def advance(self, i: int) -> None:
        """Without waiting: the next key windowed ahead, or launched once its features are ready (its
        workers take the cores this one frees), queued tasks started, done pools let exit."""
        self.retire_finished()  # an exited pool's features no longer count against windowing
        self.prefetch(i + 1, idle_worker=self.worker_idle(self.states[i]))
        nxt = self.windows.get(i + 1)
        if nxt is not None and nxt.done():
            self.launch(i + 1)
        self.submit_free()

    def outcome(self, state: WindowKeyState, trial: Trial) -> Outcome:
        """``trial``'s result from its done future, or the error its task raised."""
        try:
            result = state.futures[trial].result()[state.slots[trial]]
        except Exception as e:  # noqa: BLE001 - one failed configuration does not stop the sweep
            return Outcome(trial, error=f"{type(e).__name__}: {e}")
        return Outcome(trial, result)

    def key_outcomes(self, i: int) -> Iterator[Outcome]:
        """Key ``i``'s outcomes, in the order of its configurations."""
        state = self.states[i]
        for t in self.groups[self.keys[i]]:
            if state.error:
                yield Outcome(t, error=state.error)
                continue
            self.wait_for(i, t)
            self.advance(i)
            yield self.outcome(state, t)
            release_free_memory()  # what the caller's logging (result, artifacts) left in the heap

    def outcomes(self) -> Generator[Outcome, None, None]:
        """Every configuration's outcome, in the groups' order; closing it early stops the work."""
        try:
            for i in range(len(self.keys)):
                if i not in self.states:
                    # nothing else runs now (the previous key is done): every core windows
                    self.start_windowing(i, threads=self.cores)
                    self.launch(i)
                self.prefetch(i + 1)
                self.submit_free()
                yield from self.key_outcomes(i)
                self.states[i].close_pool()
                self.states[i].futures.clear()  # the results were handed over: do not keep them
        finally:
            self.stop()

    def stop(self) -> None:
        """Cancel what has not run, shut every pool and the windowing thread down."""
        for f in self.running:
            f.cancel()
        for state in self.states.values():
            state.close_pool(cancel=True)
        self._windowing.shutdown(wait=True, cancel_futures=True)
        forget(tables=False)
