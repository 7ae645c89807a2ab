"""The local executor: configurations evaluated on this machine, in forked worker processes.

Work is grouped by window key (feature set, window lengths, delay, alignment, statistics):
the windowed features are computed once per group in this process and shared with the
worker processes by ``fork`` (copy-on-write, never pickled per configuration). Workers fit
and score a fit group per task and draw its figures (PNG bytes returned with the result);
the process that logs only writes files, so parallel jobs never contend for the tracking
database. With one job, or a single task, everything runs in this process.

Scheduling (:class:`Scheduler`): one fork pool per window key, the next key's features
computed while the current key's configurations run (on a core the workers leave over, or
once the current key has no task left for a worker; when they fit in memory, and the two
keys' features together are no larger than the largest key's) and its configurations
started once the current key's pool has exited, the slowest models first within a key and
split into their separate fits, at most ``jobs`` tasks at a time over all pools, and each
worker limited to ``cores // jobs`` BLAS / OpenMP threads.

>>> LocalExecutor().name
'local'
"""

from __future__ import annotations

import concurrent.futures as cf
import functools
import gc
import multiprocessing as mp
import os
import signal
import threading
import time
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass, field

from threadpoolctl import threadpool_limits

from ..config.grid import Trial, WindowKey
from ..config.models import BASELINE, model_spec
from ..data.dataset import load_sessions
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
from .base import (
    Executor,
    Outcome,
    SweepContext,
    fit_groups,
    register_executor,
    split_into_parts,
    window_groups,
    with_figures,
)
from .memory import available_memory, release_free_memory, windowed_nbytes

_SHARED: dict[WindowKey, Windowed] = {}  # windowed features visible to forked workers


def _drop_table(tables: list, j: int) -> None:
    """Forget session ``j``'s table, windowed for the last key: its memory returns now."""
    tables[j] = None
    release_free_memory()  # the heap keeps what the table held (ms)


def _evaluate_shared(
    trials: Sequence[Trial], figures: bool = False, done: dict[FitPart, PartResult] | None = None
) -> list[TrialResult]:
    """Evaluate one fit group on the shared windowed features (``done``: its parts fitted in other
    tasks); with ``figures``, draw their plots here too (in a forked worker: the parent then
    only writes the bytes)."""
    try:
        results = evaluate_trials(trials, _SHARED[trials[0].window_key()], done)
        return [with_figures(r) for r in results] if figures else results
    finally:
        release_free_memory()  # an idle worker does not keep the fit's memory


def _evaluate_part_shared(trials: Sequence[Trial], part: FitPart) -> PartResult:
    """One fit part of a fit group on the shared windowed features (see :class:`Scheduler`)."""
    try:
        return evaluate_part(trials, _SHARED[trials[0].window_key()], part)
    finally:
        release_free_memory()


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


@register_executor
class LocalExecutor(Executor):
    """Evaluates configurations here or, with ``ctx.jobs`` > 1, in forked worker processes."""

    name = "local"

    def run(self, todo: Sequence[Trial], ctx: SweepContext) -> Generator[Outcome, None, None]:
        """Windowed features once per window key in this process, each fit group evaluated here or,
        with ``ctx.jobs`` > 1, in forked worker processes; outcomes in the order of ``todo``."""
        try:
            yield from _local_trials(todo, ctx)
        finally:
            _SHARED.clear()


def _local_trials(todo: Sequence[Trial], ctx: SweepContext) -> Iterator[Outcome]:
    if not todo:
        return
    jobs = ctx.jobs
    tables = load_sessions(
        ctx.store,
        list(ctx.channels),
        target=ctx.cfg.target,
        splits=ctx.cfg.splits,
        gold_standard=ctx.cfg.gold_standard,
    )
    groups = window_groups(todo)
    figures = ctx.log_artifacts
    if figures:
        load_backend()  # once here: forked workers inherit matplotlib instead of importing it each
    if jobs > 1 and sum(len(fit_groups(g)) for g in groups.values()) > 1:
        yield from Scheduler(tables, groups, jobs, figures).outcomes()
        return
    drop = functools.partial(_drop_table, tables)
    for n, (key, group) in enumerate(groups.items(), 1):
        _SHARED.clear()
        release_free_memory()  # the previous key's features
        last = n == len(groups)  # the tables' last use: each dropped once windowed
        try:
            _SHARED[key] = window_sessions(tables, key, windowed=drop if last else None)
        except Exception as e:  # noqa: BLE001 - a bad window key fails its configurations only
            for t in group:
                yield Outcome(t, error=f"windowing failed: {type(e).__name__}: {e}")
            continue
        finally:
            if last:
                tables.clear()  # every key is windowed: the frame tables are not needed any more
        for fit_group in fit_groups(group):
            try:
                results = _evaluate_shared(fit_group, figures)
            except Exception as e:  # noqa: BLE001 - one failed configuration does not stop the sweep
                for t in fit_group:
                    yield Outcome(t, error=f"{type(e).__name__}: {e}")
            else:
                yield from (Outcome(t, r) for t, r in zip(fit_group, results, strict=True))
    _SHARED.clear()


def _expected_cost(group: Sequence[Trial]) -> int:
    trial = group[0]
    return (
        (trial.model != BASELINE)
        + 2 * model_spec(trial.model).slow
        + (trial.personalization == "per_listener")
    )


def _ready() -> None:
    """A no-op task: submitting it makes a fork pool start all its workers now."""


#: tasks per worker handed to a pool beyond those it runs (see :meth:`Scheduler.submit_free`)
BACKLOG_PER_WORKER = 1
#: compute the next group's windowed features while the current group runs, when a core is
#: left over by the ``jobs`` workers, or once a worker has no task of the current group left
#: (holds two groups' features at a time instead of one, at most as much as the largest group's
#: alone: see :meth:`Scheduler.prefetch`). With every core fitting, the
#: windowing thread would only take CPU from the fits: on 2 cores, 2 jobs, the full-size grid
#: took 122.0 s with it and 121.6 s without, at 3.11 GB peak PSS against 2.72 GB ...
PREFETCH_WINDOWS = True
#: ... when their estimated size (see :func:`windowed_nbytes`) is at most this fraction of the
#: memory available at that moment (the current group's fits still grow into the rest)
PREFETCH_MEMORY_FRACTION = 0.25


@dataclass
class Task:
    """One task of a window key's queue: ``fit_group`` evaluated whole (no ``part``, no
    ``parts_done``), one ``part`` of a split fit group fitted, or a split fit group evaluated
    from its ``parts_done`` (each part's result) once they are all fitted."""

    fit_group: tuple[Trial, ...]
    part: FitPart | None = None
    parts_done: dict[FitPart, PartResult] | None = None


@dataclass
class WindowKeyState:
    """What the scheduler holds for one launched window key (its features computed).

    ``error`` is set when windowing failed (then nothing else is); ``pool`` is the fork pool
    sharing the features, None once it exited; ``queue``: tasks not yet submitted;
    ``futures``: each configuration's future (a fit group's task, whose results list holds the
    configuration at ``slots[trial]``); ``parts``: split fit groups not yet evaluated, each
    part's future (None while the part is queued)."""

    error: str = ""
    pool: cf.ProcessPoolExecutor | None = None
    queue: list[Task] = field(default_factory=list)
    futures: dict[Trial, cf.Future] = field(default_factory=dict)
    slots: dict[Trial, int] = field(default_factory=dict)
    parts: dict[tuple[Trial, ...], dict[FitPart, cf.Future | None]] = field(default_factory=dict)
    #: the pool's worker processes, and the futures of its tasks not yet seen done
    workers: int = 0
    submitted: set[cf.Future] = field(default_factory=set)

    def all_done(self) -> bool:
        """Nothing queued, no split group pending and every configuration's future done."""
        return not self.queue and not self.parts and all(f.done() for f in self.futures.values())

    def close_pool(self, cancel: bool = False) -> None:
        """Shut the pool down (waiting for its workers to exit); ``cancel``: drop queued work."""
        self.queue.clear()
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=cancel)
            self.pool = None


class Scheduler:
    """Configurations of every window key in forked worker pools, the next key's windows meanwhile.

    With ``figures``, each worker also draws its configurations' plots (``TrialResult.figures``),
    so the parent, which logs the results one at a time, does not keep the workers waiting.

    One pool per window key, forked right after that key's windowed features are computed, so
    its workers share them copy-on-write; the parent then drops its reference, so the features
    of a group live once, in the workers that use them (never copied per configuration).
    While a group runs, a thread of this process computes the next group's features and its
    pool is forked as soon as they are ready, so that when the current group is down to its
    last fits the free cores window the next group; its configurations start as soon as the
    current group's pool has exited (its last task done), not beside it: two groups'
    features and a fit's own memory on top were a sweep's peak. At most ``jobs``
    configurations run at a time over all pools, and at most two groups' features exist at a
    time. Within a group the slowest models start first (longest-first scheduling), and a slow
    model's fit group is split into its fits (:func:`experiments.evaluation.evaluate.group_fit_parts`:
    the main fit, each out-of-fold and unseen-listener fit), which run as separate tasks on
    any worker; once they are all done, one more task post-processes and scores the group
    from their predictions (the same numbers as one task fitting them in turn). A group of
    five gradient-boosting fits then takes the time of three instead of five on two workers,
    and its last fits no longer leave the other worker idle at the end of a sweep. Each
    worker runs ``cores // jobs`` BLAS / OpenMP threads. :meth:`outcomes` yields the results
    in the order of the configurations.

    Memory: the next group's features are computed ahead only when a core is left over by the
    workers, or a worker has no task of the current group left (the group's last fits); when
    they fit ``PREFETCH_MEMORY_FRACTION`` of the available memory (else once the current group
    is done); and when, with the features still held (a pool's that has not exited), they are
    no larger than the largest key's features (else once that pool has exited): the sweep
    never holds more features than its largest key alone, whose fits then set its peak. A
    pool exits as soon as its configurations are done, not once their results have been
    yielded; and each session's table is dropped from ``tables`` as soon as it is
    windowed for the last key (the features then grow while the tables shrink), before the
    last pool is forked; the workers, which never read the tables, drop their copy-on-write
    view of them at start, so no pool keeps them alive after that.

    ``tables``: the sessions' frame tables (emptied once the last key is windowed); ``groups``:
    the configurations by window key, in the order of the outcomes; ``jobs``: tasks at a time.
    """

    def __init__(
        self, tables: list, groups: dict[WindowKey, list[Trial]], jobs: int, figures: bool = False
    ) -> None:
        self.tables = tables
        self.groups = groups
        self.keys = list(groups)
        self.jobs = jobs
        self.figures = figures
        cores = self.cores = os.cpu_count() or 1
        self.threads = max(1, cores // jobs)
        #: a core the workers leave over: only then is the next key windowed ahead
        self.spare_core = cores > jobs
        #: each key's estimated features (bytes): windowing ahead never holds more than the
        #: largest of them at once (see :meth:`prefetch`)
        self.nbytes = [windowed_nbytes(tables, key) for key in self.keys]
        #: window keys (by index) being windowed, not launched yet
        self.windows: dict[int, cf.Future] = {}
        #: launched window keys (by index)
        self.states: dict[int, WindowKeyState] = {}
        #: submitted tasks not yet seen done, over all pools: at most ``jobs`` running, and
        #: up to ``BACKLOG_PER_WORKER * jobs`` more waiting in the queue of a busy pool
        self.running: set[cf.Future] = set()
        # starts its thread on the first submit, and is shut down by :meth:`stop`
        self._windowing = cf.ThreadPoolExecutor(max_workers=1, thread_name_prefix="windowing")

    # ---- windowing: in a background thread, one key at a time, in order

    def start_windowing(self, i: int, threads: int = 1) -> None:
        """Compute key ``i``'s windowed features in the background (unless under way or
        launched), ``threads`` sessions at a time."""
        if i < len(self.keys) and i not in self.windows and i not in self.states:
            # the last key is the tables' last use: each dropped once windowed
            drop = functools.partial(_drop_table, self.tables) if i == len(self.keys) - 1 else None
            self.windows[i] = self._windowing.submit(
                window_sessions, self.tables, self.keys[i], threads, drop
            )

    def prefetch(self, i: int, idle_worker: bool = False) -> None:
        """:meth:`start_windowing` key ``i`` ahead when a core is free for it (one the workers
        leave over, or ``idle_worker``: the current key has no task left for a worker) and its
        features fit the memory budget."""
        if not PREFETCH_WINDOWS or i >= len(self.keys) or i in self.windows or i in self.states:
            return
        if not (self.spare_core or idle_worker):  # windowing would only take CPU from the fits
            return
        if self.features_held() + self.nbytes[i] > max(self.nbytes):
            # two keys' features beside the current fits were a sweep's peak: this key waits
            # for the earlier pools to exit, and then has every core (about 1 s per GB)
            return
        free = available_memory()
        if free is None or self.nbytes[i] <= PREFETCH_MEMORY_FRACTION * free:
            # a worker idle: the current key's last fits are running, and their cores free up
            # while the windowing runs, so it takes every core (the OS shares them meanwhile)
            self.start_windowing(i, threads=self.cores if idle_worker else 1)

    def features_held(self) -> int:
        """Estimated bytes of the features held now: those being windowed or shared with a pool
        that has not exited."""
        held = [*self.windows, *(i for i, s in self.states.items() if s.pool is not None)]
        return sum(self.nbytes[i] for i in held)

    # ---- launching a key: its tasks planned, its pool forked over its features

    def plan(self, group: list[Trial], w: Windowed) -> WindowKeyState:
        """A key's state with its tasks queued: slowest fit groups first, a slow model's split
        into its parts (a group whose parts cannot be listed runs whole and reports why)."""
        state = WindowKeyState()
        for fit_group in sorted(fit_groups(group), key=_expected_cost, reverse=True):
            try:
                split = (
                    group_fit_parts(fit_group, w)
                    if self.jobs > 1 and split_into_parts(fit_group)
                    else []
                )
            except ValueError:  # e.g. no training sessions: the group's task reports it
                split = []
            if len(split) > 1:
                state.parts[fit_group] = dict.fromkeys(split)
                state.queue += [Task(fit_group, part=part) for part in split]
            else:
                state.queue.append(Task(fit_group))
        return state

    def launch(self, i: int) -> None:
        """Key ``i``'s windowed features (waiting for them) shared with a new fork pool; a
        failed windowing fails the key's configurations."""
        try:
            w = self.windows.pop(i).result()
        except Exception as e:  # noqa: BLE001 - a bad window key fails its configurations only
            self.states[i] = WindowKeyState(error=f"windowing failed: {type(e).__name__}: {e}")
            return
        finally:
            if i == len(self.keys) - 1:
                self.tables.clear()  # keys are windowed in order: the last use of the tables
        state = self.states[i] = self.plan(self.groups[self.keys[i]], w)
        _SHARED.clear()
        _SHARED[self.keys[i]] = w
        release_free_memory()  # what the windowing freed: the workers would map it for nothing
        state.workers = min(self.jobs, len(state.queue))
        state.pool = cf.ProcessPoolExecutor(
            max_workers=state.workers,
            mp_context=mp.get_context("fork"),
            initializer=_worker_init,
            initargs=(self.threads, self.tables),
        )
        state.pool.submit(_ready).result()  # with fork, every worker starts now, with the features
        _SHARED.clear()
        del w
        # the features now live in the workers only: their pages return to the system when the
        # workers exit, instead of staying in this process's heap, mapped by the next pools too
        release_free_memory()

    # ---- submitting: at most ``jobs`` tasks at a time over all pools

    def collect_parts(self, state: WindowKeyState) -> None:
        """A split fit group whose parts are all done is evaluated from them next (the front of
        its pool's queue); a failed part fails the group's configurations."""
        for fit_group, done in list(state.parts.items()):
            if not all(f is not None and f.done() for f in done.values()):
                continue  # a part is still queued or running
            del state.parts[fit_group]
            futures = {part: f for part, f in done.items() if f is not None}  # all, as checked
            failed = next(
                (f.exception() for f in futures.values() if f.exception() is not None), None
            )
            if failed is None:
                results = {part: f.result() for part, f in futures.items()}
                state.queue.insert(0, Task(fit_group, parts_done=results))
                continue
            lost: cf.Future = cf.Future()  # what the group's task would have raised
            lost.set_exception(failed)
            state.futures.update(dict.fromkeys(fit_group, lost))

    def retire_finished(self) -> None:
        """A pool whose configurations are all done exits now, not once their results have been
        handed over (logging them takes seconds): its workers still map a key's features."""
        for state in self.states.values():
            if state.pool is not None and state.all_done():
                state.close_pool()

    def submit(self, state: WindowKeyState, task: Task) -> None:
        """Hand ``task`` to its key's pool and remember its future."""
        assert state.pool is not None
        fut: cf.Future
        if task.part is not None:
            fut = state.pool.submit(_evaluate_part_shared, task.fit_group, task.part)
            state.parts[task.fit_group][task.part] = fut
        else:
            fut = state.pool.submit(_evaluate_shared, task.fit_group, self.figures, task.parts_done)
            for k, t in enumerate(task.fit_group):
                state.futures[t] = fut
                state.slots[t] = k
        self.running.add(fut)
        state.submitted.add(fut)

    def forget_done(self) -> None:
        """Drop the finished futures from ``running`` (their results are kept where used)."""
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
                # a later key's fits wait for this pool to exit (its features are windowed
                # and forked meanwhile): a fit's own memory on top of two keys' features was
                # a sweep's peak; the wait is this key's last task (a part, an evaluation)
                break
        # a backlog: up to one more task per worker, waiting in the queue of a pool whose
        # workers are all busy (so that no more than ``jobs`` tasks ever run at once). A worker
        # that finishes while this process logs a result (its artifacts: a fraction of a
        # second each, dozens of times) then starts its next task at once instead of idling
        # until this process comes back to hand one over. Only the earliest key with work to
        # come has a backlog: a later key's would keep the slots full, and an earlier key's
        # last task (a split group's evaluation, queued once its parts are done) waiting
        earliest = next((s for _, s in sorted(self.states.items()) if s.queue or s.parts), None)
        while (
            earliest is not None
            and earliest.queue
            and len(self.running) < self.jobs + BACKLOG_PER_WORKER * self.jobs
            and self.in_flight(earliest) >= earliest.workers
        ):
            self.submit(earliest, earliest.queue.pop(0))

    def worker_idle(self, state: WindowKeyState) -> bool:
        """Fewer tasks running than workers, and none of ``state``'s key queued (a split
        group's evaluation may still come, once its last parts are done)."""
        self.forget_done()
        return len(self.running) < self.jobs and not state.queue

    def in_flight(self, state: WindowKeyState) -> int:
        """``state``'s submitted tasks not yet seen done (running or in its pool's queue); the
        others are forgotten here (their results are kept where they are used)."""
        state.submitted.intersection_update(self.running)
        return len(state.submitted)

    # ---- handing over: one key's results in order, each as soon as it is done

    def wait_for(self, i: int, trial: Trial) -> None:
        """Keep the pools busy until ``trial``'s future (of key ``i``) is done; launch the next
        key as soon as its features are ready, so its workers take the cores this one frees."""
        state = self.states[i]
        while trial not in state.futures or not state.futures[trial].done():
            # again: memory may have been freed since, or a worker run out of this key's tasks
            # (its last fits: the next key's windows, then its pool, take the idle core)
            self.advance(i)
            nxt = self.windows.get(i + 1)
            cf.wait(
                [*self.running, *([nxt] if nxt is not None else [])],
                return_when=cf.FIRST_COMPLETED,
            )

    def advance(self, i: int) -> None:
        """Without waiting: the next key windowed ahead if a worker has no task of key ``i``
        left, and launched if its features are ready; queued tasks started; a pool whose
        configurations are all done let exit. :meth:`wait_for` does this between its waits,
        :meth:`key_outcomes` before each result of key ``i`` is handed over (the caller logs
        it for a while): its last results, done before they are handed over, then no longer
        keep the workers idle until the caller has logged them all."""
        self.retire_finished()  # an exited pool's features no longer count against windowing
        self.prefetch(i + 1, idle_worker=self.worker_idle(self.states[i]))
        nxt = self.windows.get(i + 1)
        if nxt is not None and nxt.done():
            self.launch(i + 1)
        self.submit_free()

    def outcome(self, state: WindowKeyState, trial: Trial) -> Outcome:
        """``trial``'s outcome from its done future: its result, or the error its task raised."""
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

    def outcomes(self) -> Iterator[Outcome]:
        """Every configuration's outcome, in the order of the groups and their configurations;
        closing the iterator early stops the pools and the windowing."""
        try:
            for i in range(len(self.keys)):
                if i not in self.states:
                    # nothing else runs now (the previous key is done): every core windows
                    self.start_windowing(i, threads=self.cores)
                    self.launch(i)
                self.prefetch(i + 1)
                self.submit_free()
                yield from self.key_outcomes(i)
                state = self.states[i]
                state.close_pool()
                # the results were handed over: do not keep them
                state.futures.clear()
        finally:
            self.stop()

    def stop(self) -> None:
        """Cancel what has not run, shut every pool and the windowing thread down."""
        for state in self.states.values():
            state.queue.clear()
        for f in self.running:
            f.cancel()
        for state in self.states.values():
            state.close_pool(cancel=True)
        self._windowing.shutdown(wait=True, cancel_futures=True)
        _SHARED.clear()
